"""What the attention heads do: maps, per-head statistics, rollout and head ablation.

* ``attention_maps`` runs the encoder once on a sentence (or a pair) and keeps every
  head's softmax probabilities: L layers x A heads of a T x T matrix whose row i says how
  query token i spreads its attention over the T tokens (each row sums to 1).
* ``head_stats`` summarises each head the way Clark et al. (2019, "What does BERT look
  at?") did: how much of its attention goes to [CLS], to [SEP], to punctuation, to the
  token itself, to the previous or the next token, and how spread out it is (entropy).
  Trained BERTs have heads that almost only look at the previous (or next) token, heads
  that park their attention on [SEP] when they have nothing to do, and broad heads in the
  first layers that look at almost everything.
* ``attention_rollout`` (Abnar & Zuidema 2020) follows attention through the layers: the
  residual connection is counted as attention to oneself, and the per-layer matrices are
  multiplied, so row i of layer l says how much each *input* token flowed into position i.
* ``head_ablation`` silences one head with the ``head_mask`` (its context vector is
  multiplied by 0, as in Michel et al. 2019, "Are Sixteen Heads Really Better than One?")
  and measures how much the output moves.

Everything here is plain PyTorch/numpy; the pages only draw the results.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..checkpoint import Loaded, encoder_of

PUNCTUATION = frozenset(".,;:!?'\"()-")

# A head "does" a pattern when at least this much of its attention (averaged over the
# query tokens) follows it; Clark et al. found previous/next-token heads above 0.5 and
# [SEP] heads far above it.
DOMINANT = 0.5
# A head is "broad" when its rows are close to uniform: mean row entropy at least this
# fraction of log(T), the entropy of attending equally to all T tokens.
BROAD = 0.7


@dataclass
class AttentionResult:
    """The attention of one input: ``attentions[l, a, i, j]`` is how much query token i
    attends to token j in head a of layer l (0-based); every row sums to 1."""

    tokens: list[str]
    segment_ids: list[int]        # 0 for [CLS] A [SEP], 1 for B [SEP]
    attentions: np.ndarray        # [L, A, T, T] float32
    text: str = ""
    text_b: str | None = None
    truncated: bool = False       # the input was longer than max_tokens and was cut

    @property
    def num_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def sentence_b_start(self) -> int | None:
        """Index of the first token of sentence B (None for a single sentence)."""
        return self.segment_ids.index(1) if 1 in self.segment_ids else None


def _device(model) -> torch.device:
    return next(model.parameters()).device


def attention_maps(loaded: Loaded, text: str, text_b: str | None = None, max_tokens: int = 128) -> AttentionResult:
    """Run the encoder on ``text`` (and ``text_b``) and keep all L x A attention matrices.

    Inputs longer than ``max_tokens`` WordPieces are cut (longest sentence first, as in
    fine-tuning) and ``truncated`` says so: the T x T matrices grow with the square of T.
    """
    tok = loaded.tokenizer
    max_tokens = min(max_tokens, loaded.config.max_position_embeddings)
    full_length = len(tok.encode(text, text_b).input_ids)
    enc = tok.encode(text, text_b, max_length=max_tokens)
    batch = tok.tensors([enc], device=_device(loaded.model))
    with torch.no_grad():
        out = encoder_of(loaded.model)(**batch, output_attentions=True)
    att = torch.stack([a[0] for a in out.attentions])  # L of [1, A, T, T] -> [L, A, T, T]
    return AttentionResult(
        tokens=list(enc.tokens),
        segment_ids=list(enc.token_type_ids),
        attentions=att.float().cpu().numpy(),
        text=text,
        text_b=text_b,
        truncated=full_length > len(enc.input_ids),
    )


def _as_array(att) -> np.ndarray:
    arr = att.attentions if isinstance(att, AttentionResult) else att
    if isinstance(arr, (tuple, list)):  # a model's output: L of [1, A, T, T] or [A, T, T]
        arr = torch.stack([torch.as_tensor(a).reshape(a.shape[-3:]) for a in arr])
    if isinstance(arr, torch.Tensor):
        arr = arr.detach().float().cpu().numpy()
    arr = np.asarray(arr)
    if arr.ndim != 4 or arr.shape[-1] != arr.shape[-2]:
        raise ValueError(f"expected attentions of shape [L, A, T, T], got {arr.shape}")
    return arr


def head_stats(att, tokens: list[str] | None = None) -> pd.DataFrame:
    """One row per (layer, head): where the head's attention goes, on average over the
    query tokens (Clark et al. 2019, Sections 3-4).

    Columns: ``to_cls``, ``to_sep``, ``to_punct`` (total weight on [CLS] / on every [SEP] /
    on punctuation), ``to_self``, ``to_prev``, ``to_next`` (weight on token i itself, on
    i-1, on i+1; the first / last token, which has no neighbour there, is left out of the
    mean), ``entropy`` (mean row entropy in nats; log T is the most there can be) and
    ``behaviour``: the pattern that takes at least ``DOMINANT`` of the attention, else
    "broad" for near-uniform heads, else "mixed" (heads whose targets depend on the
    content, such as the syntactic heads Clark et al. found).

    ``att`` is an AttentionResult (tokens taken from it) or an array [L, A, T, T].
    """
    a = _as_array(att).astype(np.float64)
    if tokens is None:
        if not isinstance(att, AttentionResult):
            raise ValueError("head_stats needs the tokens when given a bare array")
        tokens = att.tokens
    L, A, T, _ = a.shape
    if len(tokens) != T:
        raise ValueError(f"{len(tokens)} tokens for attention over {T} positions")
    real = np.array([t != "[PAD]" for t in tokens])          # padding is neither query nor target
    is_cls = np.array([t == "[CLS]" for t in tokens])
    is_sep = np.array([t == "[SEP]" for t in tokens])
    is_punct = np.array([t in PUNCTUATION for t in tokens])
    q = np.flatnonzero(real)                                  # query positions we average over
    rows = a[:, :, q, :]                                      # [L, A, Q, T]

    def mean_over_queries(x):                                 # [L, A, Q] -> [L, A]
        return x.mean(axis=-1) if x.shape[-1] else np.zeros((L, A))

    to_cls = mean_over_queries(rows[..., is_cls].sum(-1))
    to_sep = mean_over_queries(rows[..., is_sep].sum(-1))
    to_punct = mean_over_queries(rows[..., is_punct].sum(-1))
    to_self = mean_over_queries(a[:, :, q, q])
    prev_q = q[(q >= 1) & real[np.maximum(q - 1, 0)]]
    next_q = q[(q <= T - 2) & real[np.minimum(q + 1, T - 1)]]
    to_prev = mean_over_queries(a[:, :, prev_q, prev_q - 1])
    to_next = mean_over_queries(a[:, :, next_q, next_q + 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(rows > 0, rows * np.log(rows), 0.0)
    entropy = mean_over_queries(-plogp.sum(-1))
    max_entropy = np.log(max(len(q), 2))

    patterns = {"[CLS]": to_cls, "[SEP]": to_sep, "punctuation": to_punct, "self": to_self,
                "previous token": to_prev, "next token": to_next}
    records = []
    for layer in range(L):
        for head in range(A):
            name, value = max(((n, v[layer, head]) for n, v in patterns.items()), key=lambda nv: nv[1])
            if value >= DOMINANT:
                behaviour = name
            elif entropy[layer, head] >= BROAD * max_entropy:
                behaviour = "broad"
            else:
                behaviour = "mixed"
            records.append({
                "layer": layer, "head": head,
                "to_cls": to_cls[layer, head], "to_sep": to_sep[layer, head],
                "to_punct": to_punct[layer, head], "to_self": to_self[layer, head],
                "to_prev": to_prev[layer, head], "to_next": to_next[layer, head],
                "entropy": entropy[layer, head], "behaviour": behaviour,
            })
    return pd.DataFrame.from_records(records)


def describe_behaviours(stats: pd.DataFrame) -> str:
    """What this model's heads did on this input, counted from ``head_stats``: one sentence."""
    counts = stats["behaviour"].value_counts()
    n = len(stats)
    order = [b for b in ("previous token", "next token", "[SEP]", "[CLS]", "self", "punctuation", "broad", "mixed")
             if counts.get(b)]
    parts = [f"{counts[b]} {'mostly attend to ' + b if b not in ('broad', 'mixed') else b}" for b in order]
    text = f"On this input, of this model's {n} heads: " + "; ".join(parts) + "."
    by_layer = stats.groupby("layer")["entropy"].mean()
    text += (f" Mean entropy is {by_layer.iloc[0]:.2f} nats in layer 0 and {by_layer.iloc[-1]:.2f} in layer "
             f"{by_layer.index[-1]} ({'broader' if by_layer.iloc[0] > by_layer.iloc[-1] else 'narrower'} "
             "attention in the first layer).")
    return text


def attention_rollout(att, add_residual: bool = True) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020): [L, T, T], row i of layer l = how much of
    each input token has reached position i after layers 0..l.

    Per layer the heads are averaged; with ``add_residual`` the skip connection is counted
    as attention to oneself, Â = (A_avg + I) / 2 (rows renormalised); then the layers are
    chained, R_0 = Â_0 and R_l = Â_l · R_(l-1). Rows of every R_l sum to 1.
    """
    a = _as_array(att).astype(np.float64).mean(axis=1)       # [L, T, T]
    T = a.shape[-1]
    if add_residual:
        a = 0.5 * a + 0.5 * np.eye(T)
    a = a / a.sum(axis=-1, keepdims=True)
    out = np.empty_like(a)
    rolled = np.eye(T)
    for layer in range(a.shape[0]):
        rolled = a[layer] @ rolled
        out[layer] = rolled
    return out.astype(np.float32)


def _has_trained_mlm_head(loaded: Loaded) -> bool:
    model = loaded.model
    has_head = hasattr(model, "cls") and hasattr(model.cls, "predictions")
    return has_head and "masked-LM head" not in loaded.report.missing


def head_ablation(loaded: Loaded, text: str, text_b: str | None = None, layer: int = 0, head: int = 0,
                  keep: float = 0.0, max_tokens: int = 128) -> dict:
    """Silence head ``head`` of layer ``layer`` (0-based) and compare with the intact model.

    The head mask multiplies that head's context vector by ``keep`` (0 = silenced; 1 is a
    control that must change nothing). Returns a dict with

    * ``tokens`` and ``delta``: per token, ||h_ablated - h|| of the last hidden state, and
      ``relative_delta`` (the same divided by ||h||);
    * ``cls_cosine``: cosine similarity of the two [CLS] vectors (1 = unchanged);
    * ``mlm``: for a model with a trained masked-LM head, one entry per [MASK] with the
      top-1 word before and after and whether it changed; None when there is no MLM head
      (e.g. MiniLM, an encoder only) and ``mlm_changed`` the number of changed [MASK]s.
    """
    cfg = loaded.config
    if not 0 <= layer < cfg.num_layers or not 0 <= head < cfg.num_heads:
        raise ValueError(f"layer must be in 0..{cfg.num_layers - 1} and head in 0..{cfg.num_heads - 1}, "
                         f"got layer {layer}, head {head}")
    tok = loaded.tokenizer
    enc = tok.encode(text, text_b, max_length=min(max_tokens, cfg.max_position_embeddings))
    device = _device(loaded.model)
    batch = tok.tensors([enc], device=device)
    mask = torch.ones(cfg.num_layers, cfg.num_heads, device=device)  # [L, A]
    mask[layer, head] = keep
    with_mlm = _has_trained_mlm_head(loaded)
    model = loaded.model if with_mlm else encoder_of(loaded.model)

    def run(head_mask):
        with torch.no_grad():
            out = model(**batch, head_mask=head_mask)
        enc_out = out.encoder if with_mlm else out
        logits = out.mlm_logits[0] if with_mlm else None      # [T, V]
        return enc_out.last_hidden_state[0].float(), logits    # [T, H]

    h0, logits0 = run(None)
    h1, logits1 = run(mask)
    delta = (h1 - h0).norm(dim=-1)                             # [T]
    cls_cosine = torch.nn.functional.cosine_similarity(h0[0], h1[0], dim=0)
    result = {
        "layer": layer, "head": head, "keep": keep,
        "tokens": list(enc.tokens),
        "delta": delta.tolist(),
        "relative_delta": (delta / h0.norm(dim=-1).clamp_min(1e-12)).tolist(),
        "cls_cosine": float(cls_cosine),
        "mlm": None,
        "mlm_changed": None,
    }
    if with_mlm:
        rows = []
        for pos in (i for i, t in enumerate(enc.input_ids) if t == tok.mask_id):
            before, after = int(logits0[pos].argmax()), int(logits1[pos].argmax())
            rows.append({"position": pos, "before": tok.id_to_token(before), "after": tok.id_to_token(after),
                         "p_before": float(logits0[pos].float().softmax(-1)[before]),
                         "p_after": float(logits1[pos].float().softmax(-1)[after]),
                         "changed": before != after})
        result["mlm"] = rows
        result["mlm_changed"] = sum(r["changed"] for r in rows)
    return result
