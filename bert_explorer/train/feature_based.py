"""Feature-based transfer (paper, Section 5.3, Table 7).

BERT stays frozen. For every token we take the activations of some of its layers — the
embedding output, the last layer, the second-to-last, a weighted sum of the last four, their
concatenation, or a weighted sum of all layers — and feed them to a *new* two-layer
bidirectional LSTM and a classifier, trained from random initialisation. Because BERT does
not change, its activations are computed once and cached; trying another head is cheap.

Weighted sums use learned softmax-normalised layer weights and a scale (as in ELMo).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .. import atomic, checkpoint, disk_cache, full_disk
from ..tasks.base import TaskType
from ..tasks.registry import task_types_with
from .engine import AFTER_A_FULL_DISK, fit
from .optim import use_fused


SUPPORTED = task_types_with("feature_based")


def layers_for(mode: str, num_layers: int) -> list[int]:
    """Indices into hidden_states (0 = embedding output, L = last layer)."""
    L = num_layers
    table = {"embeddings": [0], "last": [L], "second-to-last": [L - 1],
             "sum-last-4": list(range(max(1, L - 3), L + 1)), "concat-last-4": list(range(max(1, L - 3), L + 1)),
             "sum-all": list(range(1, L + 1))}
    if mode not in table:
        raise ValueError(f"unknown feature mode {mode!r}; choose one of {', '.join(table)}")
    return table[mode]


FEATURES_FILE = "features.safetensors"


def extract(loaded: checkpoint.Loaded, feats: list[dict], layers: list[int], task: TaskType, device,
            batch_size: int = 64) -> list[torch.Tensor]:
    """Frozen activations per example: [T_i, len(layers), H] in float16, kept in the disk cache
    (under its quota) by the model's weights, the layers and the inputs: new weights, new features."""
    inputs = hashlib.sha256(json.dumps([[f["input_ids"] for f in feats], [f["token_type_ids"] for f in feats]])
                            .encode()).hexdigest()
    path = disk_cache.entry("frozen-features", loaded, layers=layers, inputs=inputs)
    lengths = [len(f["input_ids"]) for f in feats]
    with disk_cache.reading(path) as there:
        if there:
            return list(load_file(str(path / FEATURES_FILE))["features"].split(lengths))
    encoder = checkpoint.encoder_of(loaded.model).to(device).eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(feats), batch_size):
            chunk = feats[i:i + batch_size]
            batch = {k: v.to(device) for k, v in task.collate(chunk, loaded.tokenizer.pad_id).items()
                     if k in ("input_ids", "token_type_ids", "attention_mask")}
            hs = encoder(**batch, output_hidden_states=True).hidden_states
            stacked = torch.stack([hs[j] for j in layers], dim=2).half().cpu()  # [B, T, n, H]
            out.extend(stacked[b, :len(f["input_ids"])] for b, f in enumerate(chunk))
    # the cache only saves time: on a full disk the run goes on with one warning
    with disk_cache.writing(path, optional="the extracted features") as tmp:
        save_file({"features": torch.cat(out).contiguous()}, str(tmp / FEATURES_FILE))
    return out


class FeatureHead(nn.Module):
    """layer mix -> 2-layer BiLSTM -> classifier (per token, or on the whole sequence)."""

    def __init__(self, n_layers: int, hidden: int, mode: str, num_outputs: int, token_level: bool,
                 lstm_hidden: int | None = None, dropout: float = 0.1):
        super().__init__()
        self.mode, self.token_level = mode, token_level
        self.layer_logits = nn.Parameter(torch.zeros(n_layers))  # softmax -> layer weights
        self.scale = nn.Parameter(torch.ones(1))
        d_in = hidden * n_layers if mode == "concat-last-4" else hidden
        lstm_hidden = lstm_hidden or hidden
        self.lstm = nn.LSTM(d_in, lstm_hidden, num_layers=2, bidirectional=True, batch_first=True, dropout=dropout)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * lstm_hidden, num_outputs)

    def forward(self, x, mask):  # x [B, T, n, H], mask [B, T]
        x = x.float()
        if self.mode == "concat-last-4":
            x = x.flatten(2)                                     # [B, T, n·H]
        else:
            w = self.layer_logits.softmax(0).view(1, 1, -1, 1)
            x = self.scale * (x * w).sum(2)                      # [B, T, H]
        lengths = mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, _) = self.lstm(packed)
        if self.token_level:
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
            return self.classifier(self.dropout(out))            # [B, T, labels]
        # sequence level: the last layer's final forward and backward states
        return self.classifier(self.dropout(torch.cat([h[-2], h[-1]], dim=-1)))  # [B, labels]


def _pad(xs: list[torch.Tensor]):
    T = max(x.shape[0] for x in xs)
    out = torch.zeros(len(xs), T, *xs[0].shape[1:], dtype=xs[0].dtype)
    mask = torch.zeros(len(xs), T, dtype=torch.long)
    for i, x in enumerate(xs):
        out[i, :len(x)] = x
        mask[i, :len(x)] = 1
    return out, mask


def head_outputs(head, xs, batch_size=64):
    head.eval()
    device = next(head.parameters()).device
    outs = []
    with torch.no_grad():
        for i in range(0, len(xs), batch_size):
            x, mask = _pad(xs[i:i + batch_size])
            logits = head(x.to(device), mask.to(device)).cpu()
            outs.extend(logits[b, :mask[b].sum()] if head.token_level else logits[b] for b in range(len(logits)))
    return outs


def run_feature_based(cfg, run, train, dev, label_names, device) -> dict:
    task = train.task
    if not task.feature_based:
        raise ValueError(f"feature-based transfer supports {', '.join(SUPPORTED)}; use fine-tuning for {task.name}")
    loaded = checkpoint.load(cfg.model, "BertModel")
    tok, L = loaded.tokenizer, loaded.config.num_layers
    layers = layers_for(cfg.features, L)
    train_feats = task.featurize(train.examples, tok, label_names, cfg.max_seq_length)
    dev_feats = task.featurize(dev.examples, tok, label_names, cfg.max_seq_length)
    t0 = time.time()
    x_train = extract(loaded, train_feats, layers, task, device.device)
    x_dev = extract(loaded, dev_feats, layers, task, device.device)
    extract_s = time.time() - t0
    run.log(f"features {cfg.features} (hidden_states {layers}) of {len(x_train)}+{len(x_dev)} examples "
            f"in {extract_s:.1f}s")
    torch.manual_seed(cfg.seed)
    # The cached features stay on the CPU; each batch goes to the device with the head.
    head = FeatureHead(len(layers), loaded.config.hidden_size, cfg.features, task.num_outputs(label_names),
                       task.per_token).to(device.device)

    def loss_of(indices):
        x, mask = _pad([x_train[j] for j in indices])
        labels = task.collate([train_feats[j] for j in indices], tok.pad_id)["labels"]
        return task.loss(head(x.to(device.device), mask.to(device.device)), labels.to(device.device))

    # Adam at a fixed rate, no clipping, in float32: the small head of Section 5.3 learning from scratch.
    params = list(head.parameters())
    optimizer = torch.optim.Adam(params, lr=cfg.head_lr, fused=use_fused([{"params": params}]) or None)
    fitted = fit(run, n_train=len(x_train), batch_size=cfg.batch_size, epochs=cfg.epochs, seed=cfg.seed,
                 loss_of=loss_of, model=head, optimizer=optimizer,
                 clip_grad_norm=None, evaluate=lambda: task.evaluate(dev.examples, dev_feats,
                                                                     head_outputs(head, x_dev), label_names))
    ev = fitted.dev
    out_dir = run.path / "feature_head"
    meta = {"base_model": str(loaded.path), "features": cfg.features, "layers": layers, "task": task.name,
            "label_names": label_names, "hidden": loaded.config.hidden_size, "max_seq_length": cfg.max_seq_length}
    needed = sum(p.numel() * 4 for p in head.parameters())
    with full_disk.saving(run.path, "save the feature-based head", AFTER_A_FULL_DISK, needed):
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
                      str(out_dir / "head.safetensors"))
            atomic.usual_mode(out_dir / "head.safetensors")
            (out_dir / "head.json").write_text(json.dumps(meta, indent=2) + "\n")
        except BaseException:
            shutil.rmtree(out_dir, ignore_errors=True)  # never half a head that a later reader would trust
            raise
    return {"task": task.name, "mode": "feature-based", "features": cfg.features, "dev": ev,
            "main_metric": task.main_metric, "train_examples": len(train.examples),
            "dev_examples": len(dev.examples), "feature_seconds": round(extract_s, 1),
            "train_seconds": round(fitted.seconds, 1), "label_names": label_names, "stopped": fitted.stopped}
