"""Fine-tuning a left-to-right model (Table 5, "LTR & No NSP" and "+ BiLSTM").

"The left-only constraint was also applied at fine-tuning, because removing it introduced a
pre-train/fine-tune mismatch" (Devlin et al. 2019, Section 5.1). Our LTR checkpoints keep
``causal: true`` in config.json, so the encoder stays left-to-right when fine-tuned.

That breaks the usual sentence classifier: the pooled ``[CLS]`` is the *first* token, and
under a causal mask it sees nothing but itself. A left-to-right model can only summarise a
sentence at its **last** token (as OpenAI GPT does), so:

* ``head="last-token"``: a linear classifier on the hidden state of the last real token
  (the final ``[SEP]``), the one position that has read the whole input;
* ``head="bilstm"``: "we added a randomly initialized BiLSTM on top" (Section 5.1): the 2-layer
  BiLSTM head of :mod:`bert_explorer.train.feature_based` reads every token's last-layer state
  and is trained *together with* the LTR model (not frozen, unlike Table 7).

Token-level tasks (NER) need neither trick for the plain LTR model: each token's label is
read at that token, from its left context, so ``run_finetuning`` is used as it is; with
``bilstm`` the BiLSTM gives each token its right context back, which is the point of the row.

The encoder learns at ``lr`` (as in ordinary fine-tuning); the new BiLSTM starts from random
weights and learns at ``head_lr`` (as in feature-based transfer), since at BERT's fine-tuning
rates a fresh LSTM barely moves in three epochs.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from .. import checkpoint
from ..train import levers
from ..tasks.base import padded_length
from ..tasks.registry import TASK_TYPES, task_types_with
from ..train.feature_based import FeatureHead
from ..train.device import pick_device
from ..train.engine import fit, marks_failure, total_steps
from ..train.finetune import FinetuneConfig, label_names_of, read_data
from ..train.optim import linear_warmup_decay, make_optimizer
from ..runs.lock import writes_run
from ..runs.run import Run

SEQUENCE_TASKS = tuple(t.name for t in TASK_TYPES.values() if t.left_to_right and t.reads_cls)  # the rest: ner


class LTRClassifier(nn.Module):
    """A (causal) encoder + a head that reads what a left-to-right model can see."""

    def __init__(self, encoder, head: str, num_outputs: int, token_level: bool):
        super().__init__()
        self.bert, self.head_kind, self.token_level = encoder, head, token_level
        H = encoder.config.hidden_size
        if head == "bilstm":
            self.head = FeatureHead(1, H, "last", num_outputs, token_level, dropout=encoder.config.dropout)
        else:
            self.dropout = nn.Dropout(encoder.config.dropout)
            self.classifier = nn.Linear(H, num_outputs)
            nn.init.normal_(self.classifier.weight, std=encoder.config.initializer_range)
            nn.init.zeros_(self.classifier.bias)

    def forward(self, input_ids, token_type_ids, attention_mask):
        h = self.bert(input_ids, token_type_ids, attention_mask).last_hidden_state  # [B, T, H]
        if self.head_kind == "bilstm":
            with torch.autocast(h.device.type, enabled=False):  # the LSTM runs in float32
                return self.head(h.float().unsqueeze(2), attention_mask)  # [B, labels] or [B, T, labels]
        if self.token_level:
            return self.classifier(self.dropout(h))                  # [B, T, labels]
        last = attention_mask.sum(1) - 1                              # index of the final [SEP]
        return self.classifier(self.dropout(h[torch.arange(h.shape[0], device=h.device), last]))  # [B, labels]


@writes_run("run_dir", "bert-explorer finetune (left-to-right)")
def run_ltr_finetuning(cfg: FinetuneConfig, run_dir: str | Path, head: str = "last-token") -> dict:
    """Fine-tune the LTR checkpoint ``cfg.model`` with ``head`` ("last-token" or "bilstm") into
    ``run_dir`` (status.json, metrics.jsonl, log.txt, metrics.json; no model is kept)."""
    if head not in ("last-token", "bilstm"):
        raise ValueError(f"head must be 'last-token' or 'bilstm', not {head!r}")
    train, dev = read_data(cfg)
    task = train.task
    if not task.left_to_right:
        raise ValueError(f"a left-to-right model is fine-tuned here for {', '.join(task_types_with('left_to_right'))}, "
                         f"not {task.name}")
    label_names = label_names_of(train)
    run = Run(run_dir)
    run.create({**asdict(cfg), "ltr_head": head}, "finetune")
    run.write_status(state="running", pid=os.getpid(), started=time.time())
    with marks_failure(run):
        dev_obj = pick_device(cfg.device, cfg.precision)
        loaded = checkpoint.load(cfg.model, "BertModel")
        if not loaded.config.causal:
            run.log("note: this model is not causal (bidirectional); fine-tuning it with an LTR head anyway")
        tok = loaded.tokenizer
        train_feats = task.featurize(train.examples, tok, label_names, cfg.max_seq_length)
        dev_feats = task.featurize(dev.examples, tok, label_names, cfg.max_seq_length)
        torch.manual_seed(cfg.seed)
        encoder = levers.apply(loaded.model, dev_obj.device, dev_obj.dtype, run.log)
        model = LTRClassifier(encoder, head, task.num_outputs(label_names), task.per_token).to(dev_obj.device)
        head_module = model.head if head == "bilstm" else model.classifier
        optimizer = make_optimizer(model.bert, cfg.lr, cfg.weight_decay, extra_groups=[
            {"params": list(head_module.parameters()), "weight_decay": 0.0,
             "lr": cfg.head_lr if head == "bilstm" else cfg.lr}])
        total = total_steps(len(train_feats), cfg.batch_size, cfg.epochs)
        scheduler = linear_warmup_decay(optimizer, int(cfg.warmup_fraction * total), total)
        pad = tok.pad_id
        run.log(f"{task.name}: {len(train.examples)} train / {len(dev.examples)} dev, LTR head {head}")

        def loss_of(indices):
            batch = {k: v.to(dev_obj.device) for k, v in
                     task.collate([train_feats[j] for j in indices], pad).items()}
            logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            return task.loss(logits, batch["labels"])

        fitted = fit(run, n_train=len(train_feats), batch_size=cfg.batch_size, epochs=cfg.epochs, seed=cfg.seed,
                     loss_of=loss_of, model=model, optimizer=optimizer, scheduler=scheduler,
                     scaler=dev_obj.grad_scaler(), autocast=dev_obj.autocast,
                     evaluate=lambda: task.evaluate(dev.examples, dev_feats,
                                                    _predict(model, dev_feats, task, pad, dev_obj), label_names),
                     lengths=[padded_length(f) for f in train_feats])  # batches of similar lengths, as finetune
        result = {"task": task.name, "mode": "fine-tune", "ltr_head": head, "lr": cfg.lr, "dev": fitted.dev,
                  "main_metric": task.main_metric, "train_examples": len(train.examples),
                  "dev_examples": len(dev.examples), "train_seconds": round(fitted.seconds, 1),
                  "label_names": label_names, "stopped_at_step": fitted.step if fitted.stopped else None}
        (run.path / "metrics.json").write_text(json.dumps(result, indent=2) + "\n")
        run.write_status(state="stopped" if fitted.stopped else "finished", finished=time.time(), dev=fitted.dev)
        return result


def _predict(model, feats, task, pad, dev_obj, batch_size: int = 64) -> list[torch.Tensor]:
    model.eval()
    outs = []
    with torch.no_grad():
        for i in range(0, len(feats), batch_size):
            chunk = feats[i:i + batch_size]
            batch = {k: v.to(dev_obj.device) for k, v in task.collate(chunk, pad).items()}
            with dev_obj.autocast():
                logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).float().cpu()
            for b, f in enumerate(chunk):
                outs.append(logits[b, :len(f["input_ids"])] if model.token_level else logits[b])
    return outs
