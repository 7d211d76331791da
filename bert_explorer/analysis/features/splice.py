"""The model with layer l's output replaced: how much of the masked-LM loss an SAE keeps, and
steering a feature through the masked-word probe.

**Loss recovered.** The plainest test of an SAE is to run the model with the hidden states after
layer l replaced by their reconstruction and read the masked-LM loss on held-out text (Bricken et
al. 2023; Gao et al. 2024 call it the downstream loss). Two numbers frame it: the clean loss (the
model as it is) and the loss with every hidden vector at layer l replaced by their mean over the
corpus (the layer's information removed, its average kept). The share recovered is

    (mean-replaced loss - SAE loss) / (mean-replaced loss - clean loss)

1 when the reconstruction loses nothing the model uses, 0 when it is no better than the mean.

**Steering.** With the SAE's features the hidden vector at one token is
``x = W_dec z + b + error``; adding ``a`` to feature f adds ``a · d_f`` (its unit decoder column),
and clamping sets z_f to ``c`` by adding ``(c - z_f) · d_f`` — the rest of x, error included, is
left as it was, so only what the feature stands for changes. The model then runs on from layer l
and the masked-word probe reads its guesses (Templeton et al. 2024 steer Claude the same way).

The replacement is a forward hook on encoder layer l of a private view of the model (its own module
tree over the same weights: the shared model, which other sessions run meanwhile, never carries the
hook), so the model's own forward runs everything else: an identity replacement gives exactly the
clean loss.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ...checkpoint import Loaded, encoder_of, private_view
from ...data.pretraining import collate
from ...model.heads import IGNORE

Replace = Callable[[torch.Tensor], torch.Tensor]  # hidden states [B, T, H] -> [B, T, H]


@contextmanager
def replaced(loaded: Loaded, layer: int | None = None, replace: Replace | None = None):
    """The model to run within the block, the output of its encoder layer ``layer`` (1..L) ``replace(h)`` when
    given: a private view of ``loaded.model`` (its own module tree over the same weights, in eval mode), so that
    the hook never changes what another session's forward pass through the shared model computes meanwhile."""
    model = private_view(loaded.model)
    if replace is None:
        yield model
        return
    layers = encoder_of(model).encoder.layer
    if not 1 <= layer <= len(layers):
        raise ValueError(f"layer {layer} does not exist: this model has layers 1-{len(layers)}")

    def hook(module, inputs, output):
        h, *rest = output
        return (replace(h), *rest)

    handle = layers[layer - 1].register_forward_hook(hook)
    try:
        yield model
    finally:
        handle.remove()


def masked_lm_loss(loaded: Loaded, instances, batch_size: int = 8, layer: int | None = None,
                   replace: Replace | None = None, skip: torch.Tensor | None = None,
                   on_batch: Callable[[int], None] | None = None) -> float:
    """Mean cross-entropy over the masked positions of ``instances`` (pre-training instances with
    fixed masks, ``train.pretrain.held_out_instances``), with layer ``layer``'s output replaced by
    ``replace`` when given. Positions holding a token id of ``skip`` (the special tokens: the SAE
    never saw [CLS] or [SEP]) and padding keep their own vectors."""
    tok = loaded.tokenizer
    device = next(loaded.model.parameters()).device
    total, n = 0.0, 0
    keep: dict[str, torch.Tensor] = {}  # the batch's positions to replace, read by the hook

    def only_ordinary(h: torch.Tensor) -> torch.Tensor:
        return torch.where(keep["ordinary"][..., None], replace(h), h)

    with torch.no_grad(), replaced(loaded, layer, only_ordinary if replace is not None else None) as model:
        for a in range(0, len(instances), batch_size):
            chunk = instances[a:a + batch_size]
            batch = {k: v.to(device) for k, v in collate(chunk, tok.pad_id, "mlm").items()}
            labels = batch.pop("labels")
            ordinary = batch["attention_mask"].bool()
            if skip is not None:
                ordinary &= ~torch.isin(batch["input_ids"], skip.to(device))
            keep["ordinary"] = ordinary
            logits = model(**batch).mlm_logits                  # [B, T, V]
            chosen = labels != IGNORE
            total += float(F.cross_entropy(logits[chosen].float(), labels[chosen], reduction="sum"))
            n += int(chosen.sum())
            if on_batch:
                on_batch(len(chunk))
    return total / max(n, 1)


def loss_recovered(clean: float, sae: float, mean: float) -> float:
    """The share of the loss the layer's information is worth that the SAE keeps (see the module)."""
    gap = mean - clean
    return float("nan") if not math.isfinite(gap) or abs(gap) < 1e-12 else (mean - sae) / gap


def sae_replacement(sae) -> Replace:
    def replace(h: torch.Tensor) -> torch.Tensor:
        B, T, H = h.shape
        return sae(h.reshape(B * T, H)).reshape(B, T, H).to(h.dtype)
    return replace


def mean_replacement(mean: torch.Tensor) -> Replace:
    return lambda h: mean.to(h.dtype).expand_as(h).clone()


# ----- steering through the masked-word probe ------------------------------------------------------
def steer(sae, feature: int, position: int, mode: str, amount: float) -> Replace:
    """A replacement that changes only the hidden vector at ``position``: ``mode`` "add" adds
    ``amount`` to the feature's activation, "clamp" sets it to ``amount`` (0 switches it off)."""
    d = sae.direction(feature)                                           # [H], unit length

    def replace(h: torch.Tensor) -> torch.Tensor:
        h = h.clone()
        x = h[:, position]                                               # [B, H]
        if mode == "add":
            delta = torch.full((x.shape[0], 1), float(amount))
        elif mode == "clamp":
            now = sae.encode(x.float())[:, feature:feature + 1]          # [B, 1]
            delta = float(amount) - now
        else:
            raise ValueError(f"mode is 'add' or 'clamp', not {mode!r}")
        h[:, position] = (x.float() + delta * d).to(h.dtype)
        return h
    return replace


def probe(loaded: Loaded, text: str, layer: int | None = None, replace: Replace | None = None) -> torch.Tensor:
    """The MLM head's probabilities [V] at the first [MASK] of ``text``, the layer replaced if asked."""
    tok = loaded.tokenizer
    enc = tok.encode(text, max_length=loaded.config.max_position_embeddings)
    masks = [i for i, t in enumerate(enc.input_ids) if t == tok.mask_id]
    if not masks:
        raise ValueError("the text has no [MASK] token; write [MASK] where a word should be predicted")
    batch = tok.tensors([enc], device=next(loaded.model.parameters()).device)
    with torch.no_grad(), replaced(loaded, layer, replace) as model:
        logits = model(**batch).mlm_logits[0, masks[0]]                   # [V]
    return logits.float().softmax(-1)


def steering_table(loaded: Loaded, sae, layer: int, text: str, feature: int, position: int, mode: str,
                   amount: float, top_k: int = 10) -> list[dict]:
    """The probe's top-k before and after steering, joined: each word of either list with its
    probability before, after and the change, largest "after" first."""
    before = probe(loaded, text)
    after = probe(loaded, text, layer, steer(sae, feature, position, mode, amount))
    ids = list(dict.fromkeys(after.topk(top_k).indices.tolist() + before.topk(top_k).indices.tolist()))
    rank_b = {int(i): r + 1 for r, i in enumerate(before.topk(top_k).indices.tolist())}
    rank_a = {int(i): r + 1 for r, i in enumerate(after.topk(top_k).indices.tolist())}
    rows = [{"word": loaded.tokenizer.id_to_token(i), "before": float(before[i]), "after": float(after[i]),
             "change": float(after[i] - before[i]), "rank before": rank_b.get(i), "rank after": rank_a.get(i)}
            for i in ids]
    return sorted(rows, key=lambda r: -r["after"])
