"""What the attention heads do: maps, per-head statistics, rollout and head ablation.

* ``attention_maps`` runs the encoder once on a sentence (or a pair) and keeps every
  head's softmax probabilities: L layers x A heads of a T x T matrix whose row i says how
  query token i spreads its attention over the T tokens (each row sums to 1).
* ``head_stats`` measures each head the way Clark et al. (2019, "What Does BERT Look
  At?") did: how much of its attention goes to [CLS], to [SEP], to punctuation (periods
  and commas), to the token itself, to the previous or the next token, and how spread out
  it is (entropy, compared with the entropy of uniform attention). ``head_stats_over``
  averages those measures over several inputs and ``label_head`` names a head by a stated
  rule. Clark et al. give the measures, not cut-offs: the thresholds ``PATTERN_SHARE`` and
  ``BROAD_ENTROPY`` are ours. In BERT-Base they found heads that almost only look at the
  previous (or next) token, heads that park their attention on [SEP], and broad heads in
  the first layers that look at almost everything.
* ``attention_rollout`` (Abnar & Zuidema 2020) follows attention through the layers: the
  residual connection is counted as attention to oneself, and the per-layer matrices are
  multiplied, so row i of layer l says how much each *input* token flowed into position i.
* ``head_ablation`` silences one head with the ``head_mask`` (its context vector is
  multiplied by 0, as in Michel et al. 2019, "Are Sixteen Heads Really Better than One?")
  and measures how much the output moves.

Layers and heads are indexed from 0 in code (``attentions[l, a]``), as in PyTorch; what a
user reads counts from 1, as the paper does (layer 1 .. L, with the embeddings as layer 0
where they appear): ``layer_name(0) == "layer 1"``.

Everything here is plain PyTorch/numpy; the pages only draw the results.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ... import disk_cache
from ...checkpoint import Loaded, encoder_of
from ..first_visit import first_visit

# Clark et al. (2019, Section 3.2) count attention to periods and commas.
PUNCTUATION = frozenset(".,")

# The labelling rule. Clark et al. report the measures; these thresholds are OURS.
# A head is a "<target> head" (previous-token, next-token, [SEP], [CLS], punctuation, self)
# when at least PATTERN_SHARE of its attention, averaged over the query tokens (and the
# inputs), goes to that target. In BERT-Base, Clark et al. (Section 3.1) found a few heads
# that put over 50 % of their attention on the previous (or the next) token, and (Section 3.2)
# over half of all attention in layers 6-10 going to [SEP].
PATTERN_SHARE = 0.5
# A head is "broad" when its mean entropy is at least BROAD_ENTROPY times the entropy of
# uniform attention over the same tokens (log T): its attention is close to even.
BROAD_ENTROPY = 0.9
# Everything else is "mixed": no single target takes half of the attention, and it is not
# near uniform (e.g. content-dependent heads, such as the syntactic heads Clark et al. found).

# measure column -> the target it names, in the order the labels are tried on a tie
TARGETS = {"to_prev": "previous-token", "to_next": "next-token", "to_sep": "[SEP]", "to_cls": "[CLS]",
           "to_punct": "punctuation", "to_self": "self"}
LABELS = tuple(f"{t} head" for t in TARGETS.values()) + ("broad", "mixed")

BEHAVIOUR_RULE = (
    f"A head is labelled by the first rule that holds: a *previous-token*, *next-token*, *[SEP]*, *[CLS]*, "
    f"*punctuation* or *self* head when at least {PATTERN_SHARE:.0%} of its attention (averaged over the query "
    f"tokens and the inputs) goes there (the largest share if several do); *broad* when its entropy is at least "
    f"{BROAD_ENTROPY:.0%} of the entropy of uniform attention over the same tokens (log T); *mixed* otherwise. "
    "The measures are Clark et al.'s (2019); the thresholds are ours."
)

# Inputs the head behaviours are averaged over (besides the user's): short, plain, with
# commas and periods, half of them sentence pairs so that there are two [SEP]s.
REFERENCE_INPUTS = (
    ("the cat sat on the mat because it was warm .", "then it fell asleep in the sun ."),
    ("the government said the economy would grow next year .", None),
    ("shares in the company fell sharply on monday , after the results were published .",
     "analysts had expected more ."),
    ("the president spoke to congress about taxes , trade and the war .", None),
    ("she walked to the station , bought a ticket and waited for the train .", "it was late again ."),
    ("the river flooded the town after three days of heavy rain .", None),
    ("our team won the match in the last minute .", "the fans ran onto the field to celebrate ."),
    ("scientists found water on the planet , but no sign of life .", None),
)


def layer_name(index: int) -> str:
    """What a user reads for the 0-based layer ``index``: layers count from 1, as in the paper."""
    return f"layer {index + 1}"


def head_name(index: int) -> str:
    """What a user reads for the 0-based head ``index``: heads count from 1 too."""
    return f"head {index + 1}"


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


def window(result: AttentionResult, start: int, size: int) -> AttentionResult:
    """Tokens ``start``..``start+size-1`` and the attention among them: what a drawing of a long
    input shows. Rows are *not* renormalised, so a row's weights to tokens outside the window
    are simply not drawn (a row may then sum to less than 1)."""
    start = max(0, min(start, len(result.tokens) - size))
    end = start + size
    if start == 0 and end >= len(result.tokens):
        return result
    return AttentionResult(tokens=result.tokens[start:end], segment_ids=result.segment_ids[start:end],
                           attentions=np.ascontiguousarray(result.attentions[:, :, start:end, start:end]),
                           text=result.text, text_b=result.text_b, truncated=result.truncated)


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


MEASURES = ("to_cls", "to_sep", "to_punct", "to_self", "to_prev", "to_next", "entropy", "uniform_entropy",
            "entropy_ratio")


def _measures(att, tokens: list[str] | None) -> dict[str, np.ndarray]:
    """Clark et al.'s measures of one input, each an [L, A] array (see ``head_stats``)."""
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

    prev_q = q[(q >= 1) & real[np.maximum(q - 1, 0)]]
    next_q = q[(q <= T - 2) & real[np.minimum(q + 1, T - 1)]]
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(rows > 0, rows * np.log(rows), 0.0)
    entropy = mean_over_queries(-plogp.sum(-1))
    uniform = np.log(max(len(q), 2))                          # entropy of attending evenly to all Q tokens
    return {
        "to_cls": mean_over_queries(rows[..., is_cls].sum(-1)),
        "to_sep": mean_over_queries(rows[..., is_sep].sum(-1)),
        "to_punct": mean_over_queries(rows[..., is_punct].sum(-1)),
        "to_self": mean_over_queries(a[:, :, q, q]),
        "to_prev": mean_over_queries(a[:, :, prev_q, prev_q - 1]),
        "to_next": mean_over_queries(a[:, :, next_q, next_q + 1]),
        "entropy": entropy,
        "uniform_entropy": np.full((L, A), uniform),
        "entropy_ratio": entropy / uniform,
    }


def label_head(measures) -> str:
    """The behaviour label of one head from its measures (a dict or a table row), by the
    stated rule (thresholds ours, see ``BEHAVIOUR_RULE``):

    1. "<target> head" when the largest of to_prev, to_next, to_sep, to_cls, to_punct, to_self
       is at least ``PATTERN_SHARE``;
    2. "broad" when ``entropy_ratio`` (entropy / entropy of uniform attention) is at least
       ``BROAD_ENTROPY``;
    3. "mixed" otherwise.
    """
    column, share = max(((c, float(measures[c])) for c in TARGETS), key=lambda cv: cv[1])
    if share >= PATTERN_SHARE:
        return f"{TARGETS[column]} head"
    if float(measures["entropy_ratio"]) >= BROAD_ENTROPY:
        return "broad"
    return "mixed"


def _table(measures: dict[str, np.ndarray]) -> pd.DataFrame:
    L, A = measures["entropy"].shape
    records = []
    for layer in range(L):
        for head in range(A):
            row = {"layer": layer, "head": head, **{m: float(measures[m][layer, head]) for m in MEASURES}}
            row["behaviour"] = label_head(row)
            records.append(row)
    return pd.DataFrame.from_records(records)


def head_stats(att, tokens: list[str] | None = None) -> pd.DataFrame:
    """One row per (layer, head), ``layer`` and ``head`` 0-based: where the head's attention
    goes on this input, averaged over the query tokens (Clark et al. 2019, Sections 3.1-3.3).

    Columns: ``to_cls``, ``to_sep``, ``to_punct`` (total weight on [CLS] / on every [SEP] /
    on periods and commas), ``to_self``, ``to_prev``, ``to_next`` (weight on token i itself,
    on i-1, on i+1; the first / last token, which has no neighbour there, is left out of the
    mean), ``entropy`` (mean row entropy in nats), ``uniform_entropy`` (log T: the entropy
    of attending evenly to all T tokens, the most there can be), ``entropy_ratio`` (the
    two divided) and ``behaviour`` (``label_head``).

    ``att`` is an AttentionResult (tokens taken from it) or an array [L, A, T, T].
    """
    return _table(_measures(att, tokens))


def head_stats_over(inputs) -> pd.DataFrame:
    """``head_stats`` averaged over several inputs (AttentionResults, or (attentions, tokens)
    pairs), each input counting once, and labelled from the averages: one sentence can make
    any head look special, several show what it usually does."""
    inputs = list(inputs)
    if not inputs:
        raise ValueError("head_stats_over needs at least one input")
    return stats_of_measures([input_measures(x) for x in inputs])


def input_measures(x) -> dict[str, np.ndarray]:
    """One input's measures ([L, A] each): an AttentionResult, or an (attentions, tokens) pair."""
    return _measures(*x) if isinstance(x, tuple) else _measures(x, None)


def stats_of_measures(per_input: list[dict]) -> pd.DataFrame:
    """``head_stats_over`` from inputs already measured (:func:`input_measures`)."""
    per_input = [{k: np.asarray(m[k], dtype=np.float64) for k in MEASURES} for m in per_input]
    shapes = {m["entropy"].shape for m in per_input}
    if len(shapes) != 1:
        raise ValueError(f"the inputs come from models of different sizes: {sorted(shapes)}")
    return _table({k: np.mean([m[k] for m in per_input], axis=0) for k in MEASURES})


REFERENCE_VERSION = 1  # bump when the measures or the reference inputs change


@first_visit("Attention", "each head's measures on the built-in sentences (Head behaviours)")
def reference_measures(loaded: Loaded, max_tokens: int = 128) -> dict:
    """Each head's measures on ``REFERENCE_INPUTS`` ({"measures": one dict of [L, A] lists an input,
    "tokens": their tokens}), kept in the disk cache by the weights: on BERT-Base the eight sentences took
    14 s of a first visit. Kept under the longest cut that changes them, so any ``max_tokens`` above the
    longest reference sentence reads the same entry."""
    tok = loaded.tokenizer
    longest = max(len(tok.encode(a, b).input_ids) for a, b in REFERENCE_INPUTS)
    cut = min(int(max_tokens), longest)

    def compute() -> dict:
        results = measure_heads(loaded, REFERENCE_INPUTS, cut)
        return {"measures": [{k: v.tolist() for k, v in input_measures(r).items()} for r in results],
                "tokens": [list(r.tokens) for r in results]}
    return disk_cache.kept_json("head-reference", loaded, compute, what="the heads' measures on the built-in "
                                "sentences", cut=cut, version=REFERENCE_VERSION)


def measure_heads(loaded: Loaded, inputs=REFERENCE_INPUTS, max_tokens: int = 128) -> list[AttentionResult]:
    """The attention of ``loaded`` on each of ``inputs`` ((text, text_b or None) pairs; by
    default the built-in ``REFERENCE_INPUTS``), ready for ``head_stats_over``."""
    return [attention_maps(loaded, a, b, max_tokens) for a, b in inputs]


def uniform_reference(inputs) -> dict[str, float]:
    """What uniform attention (every query spreads evenly over the real tokens) would score on
    the same inputs: the baseline the measures should be read against (e.g. with two [SEP]s
    in 20 tokens, uniform attention already gives 0.1 to [SEP])."""
    return uniform_of_tokens([x[1] if isinstance(x, tuple) else x.tokens for x in inputs])


def uniform_of_tokens(token_lists) -> dict[str, float]:
    """:func:`uniform_reference` of inputs given by their tokens alone."""
    pairs = []
    for tokens in token_lists:
        real = np.array([t != "[PAD]" for t in tokens], dtype=np.float64)
        pairs.append((np.broadcast_to(real / real.sum(), (1, 1, len(tokens), len(tokens))), tokens))
    row = head_stats_over(pairs).iloc[0]
    return {m: float(row[m]) for m in MEASURES}


def _plural(n: int, label: str) -> str:
    return f"{n} {label}{'s' if n != 1 and label.endswith('head') else ''}"


def describe_behaviours(stats: pd.DataFrame, inputs: str = "this input", uniform: dict | None = None) -> str:
    """What this model's heads did on ``inputs``, counted from ``head_stats``, layers counted
    from 1. With ``uniform`` (``uniform_reference`` of the same inputs) it also names the
    head that gives the largest share to one target, beside what uniform attention gives."""
    counts = stats["behaviour"].value_counts()
    known = [b for b in LABELS if counts.get(b)]
    order = known + sorted(b for b in counts.index if b not in LABELS)
    text = (f"On {inputs}, of this model's {len(stats)} heads: "
            + "; ".join(_plural(int(counts[b]), b) for b in order) + ".")
    by_layer = stats.groupby("layer")[[c for c in ("entropy", "entropy_ratio") if c in stats]].mean()
    first, last = by_layer.iloc[0], by_layer.iloc[-1]

    def of_uniform(row):
        return f" ({row['entropy_ratio']:.0%} of uniform)" if "entropy_ratio" in row else ""

    spread = "entropy_ratio" if "entropy_ratio" in by_layer else "entropy"
    if len(by_layer) == 1:
        text += f" Mean entropy is {first['entropy']:.2f} nats in {layer_name(by_layer.index[0])}{of_uniform(first)}."
    else:
        # compared as shown (a percent of uniform, or nats to two decimals): equal figures are not called
        # broader or narrower
        shown = (lambda r: round(100 * r[spread])) if spread == "entropy_ratio" else (lambda r: round(r[spread], 2))
        than = ("about as broad in the first layer as in the last" if shown(first) == shown(last) else
                f"{'broader' if first[spread] > last[spread] else 'narrower'} attention in the first layer")
        text += (f" Mean entropy is {first['entropy']:.2f} nats in {layer_name(by_layer.index[0])}{of_uniform(first)} "
                 f"and {last['entropy']:.2f} in {layer_name(by_layer.index[-1])}{of_uniform(last)} ({than}).")
    if uniform is not None:
        # the first (layer, head, target) in order wins a tie
        share, column, layer, head = max(((row[c], c, row["layer"], row["head"])
                                          for _, row in stats.iterrows() for c in TARGETS), key=lambda x: x[0])
        target = {"to_self": "itself", "to_prev": "the previous token", "to_next": "the next token",
                  "to_punct": "periods and commas"}.get(column, TARGETS[column])
        text += (f" The largest share one head gives one target: {layer_name(int(layer))}, {head_name(int(head))} "
                 f"gives {share:.2f} of its attention to {target} (uniform attention would give "
                 f"{uniform[column]:.2f}).")
    return text


# The measures' headings where a user reads them.
COLUMN_NAMES = {"to_cls": "[CLS]", "to_sep": "[SEP]", "to_punct": ". and ,", "to_prev": "previous token",
                "to_next": "next token", "to_self": "itself", "entropy": "entropy (nats)",
                "entropy_ratio": "entropy / uniform", "uniform_entropy": "uniform entropy (nats)"}


def behaviour_table(stats: pd.DataFrame) -> pd.DataFrame:
    """The head measures as a user reads them: layers and heads counted from 1, the measures
    as numbers, the label last."""
    table = pd.DataFrame({"layer": stats["layer"] + 1, "head": stats["head"] + 1})
    for column, name in COLUMN_NAMES.items():
        table[name] = stats[column]
    table["label"] = stats["behaviour"]
    return table.round(3)


def layer_matrices(att, add_residual: bool = True) -> np.ndarray:
    """[L, T, T]: each layer's attention with the heads averaged and, with ``add_residual``, the
    residual connection counted as attention to oneself, Â = (A_avg + I) / 2, rows re-normalised:
    the matrices rollout multiplies and attention flow (``flow.py``) pushes through."""
    a = _as_array(att).astype(np.float64).mean(axis=1)       # [L, T, T]
    if add_residual:
        a = 0.5 * a + 0.5 * np.eye(a.shape[-1])
    return a / a.sum(axis=-1, keepdims=True)


def attention_rollout(att, add_residual: bool = True) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020): [L, T, T], row i of layer l = how much of
    each input token has reached position i after layers 0..l (0-based indices).

    Per layer the heads are averaged; with ``add_residual`` the skip connection is counted
    as attention to oneself, Â = (A_avg + I) / 2 (rows renormalised); then the layers are
    chained, R_0 = Â_0 and R_l = Â_l · R_(l-1). Rows of every R_l sum to 1.
    """
    a = layer_matrices(att, add_residual)                    # [L, T, T]
    out = np.empty_like(a)
    rolled = np.eye(a.shape[-1])
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
    if not 0 <= layer < cfg.num_layers or not 0 <= head < cfg.num_heads:  # (counted from 1, as the pages do)
        raise ValueError(f"layer {layer + 1}, head {head + 1} is not one of this model's heads: layers 1 to "
                         f"{cfg.num_layers}, heads 1 to {cfg.num_heads}")
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
