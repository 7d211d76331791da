"""Which input tokens made BERT say that? Integrated Gradients on the input embeddings.

Integrated Gradients (Sundararajan, Taly & Yan 2017, "Axiomatic Attribution for Deep
Networks") explains one number f(x) that a model computes from an input x. Pick a
*baseline* x' that stands for "no information", walk in a straight line from x' to x, add up
the gradient of f along the way and multiply by how far each input moved:

    IG_i(x) = (x_i - x'_i) · ∫₀¹ ∂f(x' + α(x - x')) / ∂x_i  dα

Two properties make it a good teaching tool:

* **Completeness** (the paper's Section 3, Proposition 1): the attributions add up to
  f(x) - f(x'). Nothing is lost or invented; a token's share is a share of a real
  difference. The integral is computed numerically, so in practice the sum misses by a
  *convergence delta*, which we report. More steps make it smaller.

When is a result worth reading? **The rule** (:func:`reliability`): the attributions are
reliable when |delta| <= 5 % of |f(x) - f(x')| (``RELIABLE_FRACTION``), and f(x) - f(x') is
not practically zero (at least ``MIN_DIFFERENCE`` = 0.001 in f's units). A delta as large as
the difference it is supposed to split means the token shares are numerical noise. The
``explain_*`` functions therefore start with ``n_steps`` (default 50) and double the steps
(50 -> 100 -> 200 -> 400) until the rule holds or ``max_steps`` (default 400) is reached;
the result records the steps used and every (steps, delta) tried, and says in one sentence
why it is unreliable when even the cap does not satisfy the rule (the attempt with the
smallest delta is then the one shown). Measured on the shipped minilm-mlm-nsp with the app's
example inputs: with the *words* baseline (below) the masked word and next sentence are both
reliable at 50 steps (the masked word's delta 0.00004 of a difference of 10.97); with the *parts*
baseline the masked word's delta was -3.81 at 50 steps and 0.37 at 100 (of 8.52), reliable there.
(The steps such a model needs move with its weights: the figures are this checkout's.)
The delta does not shrink monotonically with the steps, and a small delta is a necessary condition, not proof:
errors of single tokens can cancel in the sum.
* **An input equal to its baseline gets exactly 0**, because of the (x_i - x'_i) factor.

Where do we measure x? Token ids are integers, and a gradient needs something continuous,
so we take the three vectors BERT adds up at its input (Devlin et al. 2019, Figure 2)
— the token embedding, the segment embedding and the position embedding — and integrate
over all three at once with captum's ``LayerIntegratedGradients`` given a list of the three
embedding layers. Completeness then holds for the sum over tokens *and* over the three
parts; a part that is the same in x and x' gets exactly 0.

What the baseline keeps decides the question the attributions answer. Two baselines
(``BASELINES``; ``baseline_inputs`` builds them):

* **words** (the default): every ordinary word piece becomes ``[PAD]`` (the row the model
  was trained to ignore); ``[CLS]``, ``[SEP]`` and ``[MASK]`` are kept, and every token keeps
  its own position and segment. The structural tokens are not what we ask about (and a
  question without its ``[MASK]`` would be another question), so only the words differ
  between x' and x, and the attributions answer "which context words pushed the model to
  its answer". The special tokens, the ``[MASK]`` and every segment and position part get
  exactly 0.
* **parts** ("token, segment and position"): the same tokens, but every token also moves to
  position 0 and to segment A, a baseline with "no word order" that "knows nothing about
  where sentence B starts". Each token's attribution then splits into "what word it is",
  "which sentence it is in" and "where it stands". This measures something else: measured
  on the shipped minilm-mlm-nsp with the page's masked-word example, 8.06 of the 8.52
  difference went to the position parts (a ``[MASK]`` at position 0 predicts little), the
  token parts 0.83 in all. [CLS] really is
  at position 0, so its position part is exactly 0; a single sentence is all segment A, so
  the segment parts are exactly 0 there and only matter for pairs.

What f is, for each of the three targets:

* masked word (Section 3.1, Task #1 "Masked LM"): the **log-probability** log P(w | context)
  of a chosen word w at a ``[MASK]``. Not the raw logit: the softmax ignores a constant
  added to all V logits, so the logit of one word can rise or fall between x and x' for
  reasons that change no probability at all. The log-probability has no such free offset,
  and f(x) - f(x') reads as "the context makes w e^Δ times more likely than the empty
  input does".
* next sentence (Section 3.1, Task #2 "NSP"): the **log-odds** log P(IsNext) / P(NotNext)
  = logit[IsNext] - logit[NotNext] (index 0 = IsNext). Again free of the softmax offset,
  and it does not flatten out when the model is sure (log P(IsNext) would stay near 0).
* fine-tuned classifier (Section 4, Figure 4 (a)/(b): a linear layer on the pooled [CLS]):
  the log-probability of a chosen class (default: the predicted one); for a regression
  head (one output), the output itself.

Practicalities: the model runs in eval mode (dropout would make f random), on a private
copy of the module tree that shares the weights (captum hooks the embedding layers while
it works, and a model cached by the app is shared by every browser tab), and no gradient
is ever stored in a parameter's ``.grad`` (captum asks autograd for the gradient with
respect to the interpolated embeddings only).
"""
from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ...checkpoint import Loaded, MissingHeadError, private_view
from ...limits import MEMORY, MIN_IG_STEPS, SECONDS, TooLarge, backward_bytes
from ...runs.finder import find_runs, rel_name
from ...tokenizer import Encoded, WordPieceTokenizer
from ..probes.pretraining_tasks import MLM_HEAD, NSP_HEAD, no_mask_sentence
from .reliability import DEFAULT_STEPS, MAX_STEPS, MIN_DIFFERENCE, Reliability, reliability, step_schedule

PARTS = ("token", "segment", "position")


@dataclass(frozen=True)
class Baseline:
    """One choice of x' (see the module docstring)."""

    name: str       # what the explain_* functions take
    label: str      # what the page calls it
    measures: str   # one sentence: what the attributions against this baseline say


BASELINES = {b.name: b for b in (
    Baseline("words", "words",
             "Each word becomes [PAD] while [CLS], [SEP], [MASK] and every position and segment stay as in your "
             "input, so the attributions say which context words pushed the model to its answer."),
    Baseline("parts", "token, segment and position",
             "Each word becomes [PAD] and every token also moves to position 0 and segment A, so each token's "
             "attribution splits into what word it is, which sentence it is in and where it stands (the [MASK] and "
             "[SEP] then get credit for their positions)."),
)}
DEFAULT_BASELINE = "words"

# The page's examples, one per target (the tests measure the default baseline on them).
EXAMPLE_MASKED = "the government said the [MASK] would rise next year ."
EXAMPLE_PAIR = ("the match was played in heavy rain on saturday .",
                "both teams struggled to keep the ball on the ground .")
EXAMPLE_CLASSIFIER = "Shares fell sharply after the bank's results."

# Captum evaluates the model at n_steps points of the path; we hand it as many of them per
# forward pass as fit in about this many tokens (16 tokens x 50 steps = one pass).
TOKENS_PER_BATCH = 8192


@dataclass
class Attributions:
    """Integrated Gradients for one input: one number per token and embedding part.

    ``token``, ``segment`` and ``position`` are the attributions of the three embedding
    parts, each summed over the H hidden dimensions; ``total`` is their sum per token.
    Completeness: sum(total) = f_input - f_baseline + delta (captum's delta is the sum of the
    attributions minus the change of f). ``baseline`` names the x' (a key of ``BASELINES``):
    with "words" the segment and position parts are exactly 0 and ``total`` is the token part.
    """

    target: str                     # "masked word" | "next sentence" | "classifier"
    score: str                      # what f is, in words, e.g. "log P('rise') at [MASK]"
    tokens: list[str]
    baseline_tokens: list[str]
    token: list[float]
    segment: list[float]
    position: list[float]
    f_input: float                  # f(x)
    f_baseline: float               # f(x')
    delta: float                    # captum's convergence delta: Σ attributions - (f(x) - f(x'))
    n_steps: int                    # the integration steps of this result (the last ones tried)
    details: dict = field(default_factory=dict)  # target-specific: predictions, labels, ...
    steps_tried: list[tuple[int, float]] = field(default_factory=list)  # (steps, delta), in order
    baseline: str = DEFAULT_BASELINE  # a key of BASELINES

    @property
    def total(self) -> list[float]:
        return [a + b + c for a, b, c in zip(self.token, self.segment, self.position)]

    @property
    def labels(self) -> list[str]:
        """One unique label per position ("3 rise"), for plot axes where tokens repeat."""
        return [f"{i} {t}" for i, t in enumerate(self.tokens)]

    @property
    def difference(self) -> float:
        """f(x) - f(x'): what the attributions must add up to."""
        return self.f_input - self.f_baseline

    @property
    def attribution_sum(self) -> float:
        return sum(self.part_sums.values())

    @property
    def relative_delta(self) -> float:
        """|delta| as a fraction of |f(x) - f(x')| (inf when the difference is 0)."""
        return abs(self.delta) / abs(self.difference) if self.difference else math.inf

    @property
    def shares(self) -> list[float]:
        """Each token's total as a fraction of |f(x) - f(x')|, with the total's sign: together they
        make +1 when f rose from the baseline to x and -1 when it fell (up to the delta)."""
        d = abs(self.difference)
        return [t / d if d else math.nan for t in self.total]

    def ranked_words(self) -> list[tuple[str, float, float]]:
        """The word pieces of the input (the tokens the baseline replaced; not [CLS], [SEP] or
        [MASK]) as (label, attribution, share), the largest attribution first."""
        words = [i for i, (t, b) in enumerate(zip(self.tokens, self.baseline_tokens)) if t != b]
        words.sort(key=lambda i: self.total[i], reverse=True)
        return [(self.labels[i], self.total[i], self.shares[i]) for i in words]

    def pushes(self, n: int = 3, least: float = 0.005) -> tuple[list, list]:
        """The ``n`` words that pushed f up most and the ``n`` that pushed it down most, as
        :meth:`ranked_words` gives them (down: the most negative first). A word whose share of the
        difference is under ``least`` (said as "0 %") pushed it neither way."""
        ranked = [w for w in self.ranked_words() if abs(w[2]) >= least]
        return [w for w in ranked if w[1] > 0][:n], [w for w in ranked if w[1] < 0][-n:][::-1]

    def largest_part(self) -> tuple[int, str, float]:
        """The single biggest attribution (by size) of one part of one token: (position, part, value)."""
        values = {"token": self.token, "segment": self.segment, "position": self.position}
        return max(((i, part, v) for part, vs in values.items() for i, v in enumerate(vs)), key=lambda c: abs(c[2]))

    @property
    def part_sums(self) -> dict[str, float]:
        """Each embedding part's attributions added over the tokens ("token", "segment", "position")."""
        return {"token": sum(self.token), "segment": sum(self.segment), "position": sum(self.position)}

    @property
    def reliability(self) -> "Reliability":
        """The verdict of :func:`reliability` on this result's delta and difference."""
        return reliability(self.delta, self.difference, self.n_steps)

    def rows(self) -> list[dict]:
        """One row per token, ready for a table: its attribution and share of f(x) - f(x'), and with
        the "parts" baseline the three parts it splits into."""
        rows = []
        for i, (t, b, tk, sg, ps, share) in enumerate(zip(self.tokens, self.baseline_tokens, self.token, self.segment,
                                                         self.position, self.shares)):
            row = {"position": i, "token": t, "baseline": b}
            if self.baseline == "parts":
                row.update({"token part": round(tk, 5), "segment part": round(sg, 5), "position part": round(ps, 5)})
            rows.append({**row, "attribution": round(tk + sg + ps, 5), "share": round(share, 4)})
        return rows


def baseline_note(r: Attributions) -> str | None:
    """One sentence when the baseline scores above the input (f(x') > f(x)), or, for the next-sentence
    decision, when the baseline alone is already IsNext by half the pair's log-odds or more (the default pair:
    11.31 against 10.21, so the bars split only 1.10 of them); None otherwise."""
    if r.target == "next sentence" and 0 < r.f_baseline <= r.f_input and r.f_baseline >= 0.5 * r.f_input:
        return (f"Here the baseline ([PAD] for every word) is already IsNext: its log-odds are {r.f_baseline:.3f} of "
                f"the pair's {r.f_input:.3f} (P(IsNext) {r.details['p_is_next_baseline']:.1%} against "
                f"{r.details['p_is_next']:.1%}), so the attributions split only the {r.difference:.3f} that the words "
                "add beyond an empty pair, not why this model says IsNext at all.")
    if not r.f_baseline > r.f_input:
        return None
    if r.target == "next sentence":
        return (f"Here the baseline scores above your pair (P(IsNext) {r.details['p_is_next_baseline']:.1%} for the "
                f"baseline, [PAD] for every word, vs {r.details['p_is_next']:.1%} for the pair): to this model the "
                f"empty input already looks more like \"IsNext\" than the real pair, so the attributions add up to "
                f"{r.difference:.3f} and explain a decrease — tokens with negative totals pulled IsNext down most.")
    return (f"Here the baseline scores above your input (f(baseline) {r.f_baseline:.3f} > f(x) {r.f_input:.3f}): the "
            f"attributions add up to {r.difference:.3f} and explain a decrease — tokens with negative totals pulled "
            f"the score down most.")


# ----- the method ----------------------------------------------------------------------------

def check_baseline(baseline: str) -> Baseline:
    """The :class:`Baseline` called ``baseline``, or a ValueError naming the choices."""
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose {' or '.join(BASELINES)}")
    return BASELINES[baseline]


def baseline_inputs(tok: WordPieceTokenizer, inputs: dict[str, torch.Tensor],
                    baseline: str = DEFAULT_BASELINE) -> dict[str, torch.Tensor]:
    """x' for ``inputs`` ([1, T] tensors): [PAD] for ordinary word pieces with [CLS], [SEP]
    and [MASK] kept; positions and segments as in ``inputs`` ("words"), or position 0 and
    segment A everywhere ("parts"). See the module docstring."""
    check_baseline(baseline)
    ids = inputs["input_ids"]
    keep = torch.zeros_like(ids, dtype=torch.bool)
    for special in (tok.cls_id, tok.sep_id, tok.mask_id, tok.pad_id):
        keep |= ids == special
    kept = baseline == "words"
    return {
        "input_ids": torch.where(keep, ids, torch.full_like(ids, tok.pad_id)),
        "token_type_ids": inputs["token_type_ids"].clone() if kept else torch.zeros_like(inputs["token_type_ids"]),
        "position_ids": inputs["position_ids"].clone() if kept else torch.zeros_like(inputs["position_ids"]),
    }


def integrated_gradients(
    model: nn.Module,
    f: Callable[[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: dict[str, torch.Tensor],
    baselines: dict[str, torch.Tensor],
    n_steps: int = DEFAULT_STEPS,
) -> tuple[list[torch.Tensor], float, float, float]:
    """Integrated Gradients of ``f(model, input_ids, token_type_ids, position_ids) -> [B]``
    with respect to the three embedding layers of ``model.bert``, from ``baselines`` to
    ``inputs`` (each a dict of [1, T] id tensors).

    Everything runs on ``private_view(model)`` in eval mode; ``model`` itself is not
    touched. Returns the attributions per part ([T] each, summed over H), f(x), f(x') and
    captum's convergence delta (Σ attributions - (f(x) - f(x')), from its own two forward
    passes)."""
    # here, not at the top: captum takes over half a second to import, and the After fine-tuning page
    # imports this module only for classifier_runs
    from captum.attr import LayerIntegratedGradients

    if n_steps < 1:
        raise ValueError("n_steps must be at least 1")
    view = private_view(model)
    emb = view.bert.embeddings
    layers = [emb.word_embeddings, emb.token_type_embeddings, emb.position_embeddings]  # order of PARTS
    keys = ("input_ids", "token_type_ids", "position_ids")
    x = tuple(inputs[k] for k in keys)
    x0 = tuple(baselines[k] for k in keys)

    def forward(input_ids, token_type_ids, position_ids):  # [B, T] ids -> [B] scores
        return f(view, input_ids, token_type_ids, position_ids)

    T = x[0].shape[1]
    # points of the path per pass: as many as fit in TOKENS_PER_BATCH and in the memory one request may
    # hold (the backward pass keeps every layer's activations: 482 WordPieces took 1.6 GB in one pass)
    per_pass = max(1, min(n_steps, TOKENS_PER_BATCH // T, int(MEMORY // (backward_bytes(view.bert.config, T) * T))))
    with warnings.catch_warnings():
        # captum warns that one layer might feed another; the three embeddings are independent.
        warnings.filterwarnings("ignore", message="Multiple layers provided")
        lig = LayerIntegratedGradients(forward, layers)
    with torch.enable_grad():
        attributions, delta = lig.attribute(
            x, baselines=x0, n_steps=n_steps, return_convergence_delta=True,
            internal_batch_size=per_pass)
    with torch.no_grad():
        f_x, f_x0 = float(forward(*x)[0]), float(forward(*x0)[0])
    # Each layer's attribution is [1, T, H]: sum over the hidden dimension -> one number per token.
    per_part = [a.detach()[0].sum(-1).float() for a in attributions]
    return per_part, f_x, f_x0, float(delta.reshape(-1)[0])


def affordable(schedule: list[int], tokens: int, token_steps: int | None) -> list[int]:
    """The attempts of ``schedule`` that fit in ``token_steps`` (WordPieces × steps, all attempts added)
    for an input of ``tokens`` WordPieces: the first attempt is cut down to what fits, later ones are
    left out. Raises ``limits.TooLarge`` when not even ``limits.MIN_IG_STEPS`` steps fit."""
    if token_steps is None:
        return schedule
    allowed = token_steps // max(1, tokens)
    if allowed < min(MIN_IG_STEPS, schedule[0]):
        raise TooLarge(f"The input has {tokens:,} WordPieces: one attribution explains at most "
                       f"{token_steps // MIN_IG_STEPS:,} with this model (at least {MIN_IG_STEPS} integration steps, "
                       f"about {SECONDS:.0f} s of its CPU); shorten it.")
    kept, spent = [], 0
    for steps in schedule:
        steps = min(steps, allowed - spent) if not kept else steps
        if spent + steps > allowed:
            break
        kept.append(steps)
        spent += steps
    return kept


def integrate_until_reliable(model: nn.Module, f, inputs, baselines, n_steps: int = DEFAULT_STEPS,
                             max_steps: int = MAX_STEPS, token_steps: int | None = None):
    """:func:`integrated_gradients` with n_steps, 2 n_steps, ... up to ``max_steps``, stopping at the
    first result that :func:`reliability` accepts (or whose difference is practically zero: more
    steps cannot change f(x) - f(x')). When none is accepted, the attempt with the smallest
    |delta| is returned: the delta does not always shrink with more steps (measured on a
    fine-tuned minilm-mlm-nsp classifier: 4.8 % of the difference at 100 steps, 207 % at 150,
    0.2 % at 200, 18 % at 400). Returns (parts, f(x), f(x'), delta, steps used,
    [(steps, delta) tried]).

    ``token_steps`` bounds the cost: the input's WordPieces times the steps of every attempt added up
    (a server's ``limits.Limits.token_steps``); the schedule stops before an attempt that would pass it
    (:func:`affordable`). None: no bound."""
    tried, attempts = [], []
    for steps in affordable(step_schedule(n_steps, max_steps), inputs["input_ids"].shape[1], token_steps):
        parts, f_x, f_x0, delta = integrated_gradients(model, f, inputs, baselines, steps)
        tried.append((steps, delta))
        attempts.append((parts, f_x, f_x0, delta, steps))
        if reliability(delta, f_x - f_x0).reliable or abs(f_x - f_x0) < MIN_DIFFERENCE:
            return parts, f_x, f_x0, delta, steps, tried
    best = min(attempts, key=lambda a: abs(a[3]) if math.isfinite(a[3]) else math.inf)
    return (*best, tried)


def _result(target: str, score: str, tok: WordPieceTokenizer, inputs, baselines, integrated, details,
            baseline: str) -> Attributions:
    parts, f_x, f_x0, delta, n_steps, tried = integrated
    token, segment, position = (p.tolist() for p in parts)
    return Attributions(
        target=target, score=score,
        tokens=tok.convert_ids_to_tokens(inputs["input_ids"][0].tolist()),
        baseline_tokens=tok.convert_ids_to_tokens(baselines["input_ids"][0].tolist()),
        token=token, segment=segment, position=position,
        f_input=f_x, f_baseline=f_x0, delta=delta, n_steps=n_steps, details=details, steps_tried=tried,
        baseline=baseline)


def _inputs(loaded: Loaded, enc: Encoded) -> dict[str, torch.Tensor]:
    device = next(loaded.model.parameters()).device
    batch = loaded.tokenizer.tensors([enc], device=device)
    T = batch["input_ids"].shape[1]
    return {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"],
            "position_ids": torch.arange(T, device=device).unsqueeze(0)}  # [1, T]


def _require(loaded: Loaded, head: str) -> None:
    if head in loaded.report.missing:
        raise MissingHeadError(f"{loaded.name or loaded.path} has no trained {head}")


# ----- target (a): a masked word (Section 3.1, Task #1) -------------------------------------

def explain_masked_word(loaded: Loaded, text: str, word: str | None = None, n_steps: int = DEFAULT_STEPS,
                        text_b: str | None = None, top_k: int = 5, max_steps: int = MAX_STEPS,
                        baseline: str = DEFAULT_BASELINE, token_steps: int | None = None) -> Attributions:
    """Attribute log P(``word`` | context) at the first [MASK] of ``text`` to the input tokens,
    against the baseline called ``baseline`` (a key of ``BASELINES``).

    Steps: ``n_steps`` first, doubled up to ``max_steps`` until the result is reliable
    (:func:`integrate_until_reliable`; ``max_steps=n_steps`` tries exactly ``n_steps``), within
    ``token_steps`` (WordPieces × steps, every attempt added) when given.

    ``word`` must be a single WordPiece of the vocabulary; None explains the model's own top
    prediction. ``details`` holds the mask position, the word, its probability and the top-k."""
    _require(loaded, MLM_HEAD)
    check_baseline(baseline)
    tok = loaded.tokenizer
    enc = tok.encode(text, text_b, max_length=loaded.config.max_position_embeddings)
    if tok.mask_id not in enc.input_ids:
        raise ValueError(no_mask_sentence(f"{text} {text_b or ''}", loaded.config.max_position_embeddings))
    pos = enc.input_ids.index(tok.mask_id)
    inputs = _inputs(loaded, enc)

    def log_probs(model, input_ids, token_type_ids, position_ids):  # -> [B, V]
        h = model.bert(input_ids=input_ids, token_type_ids=token_type_ids,
                       position_ids=position_ids).last_hidden_state[:, pos]  # [B, H]
        return model.cls.predictions(h).float().log_softmax(-1)  # the head on one position only

    with torch.no_grad():
        probs = log_probs(private_view(loaded.model), **inputs)[0].exp()  # [V], in eval mode
    p, ids = probs.topk(min(top_k, probs.numel()))
    top = [{"token": tok.id_to_token(i), "probability": float(q)} for q, i in zip(p.tolist(), ids.tolist())]
    if word is None or not word.strip():
        word_id = int(ids[0])
    else:
        pieces = tok.tokenize(word.strip())
        if len(pieces) != 1 and tok.token_to_id(word.strip()) is not None:  # a piece as the vocabulary writes it
            pieces = [word.strip()]  # ("##s": the top predictions show such pieces, and tokenizing splits them)
        if len(pieces) != 1:
            raise ValueError(
                f"{word.strip()!r} is {len(pieces)} word pieces {pieces} in this vocabulary; the masked-LM head "
                f"predicts one piece per [MASK]: choose a single piece, e.g. one of "
                f"{', '.join(t['token'] for t in top)}")
        word_id = tok.token_to_id(pieces[0])
    word_text = tok.id_to_token(word_id)

    def f(model, *ids):
        return log_probs(model, *ids)[:, word_id]  # [B]

    baselines = baseline_inputs(tok, inputs, baseline)
    integrated = integrate_until_reliable(loaded.model, f, inputs, baselines, n_steps, max_steps, token_steps)
    return _result("masked word", f"log P({word_text!r}) at [MASK] (position {pos})", tok, inputs, baselines,
                   integrated,
                   {"mask_position": pos, "word": word_text, "probability": float(probs[word_id]),
                    "top": top}, baseline)


# ----- target (b): the next-sentence decision (Section 3.1, Task #2) ------------------------

def explain_next_sentence(loaded: Loaded, text_a: str, text_b: str, n_steps: int = DEFAULT_STEPS,
                          max_steps: int = MAX_STEPS, baseline: str = DEFAULT_BASELINE,
                          token_steps: int | None = None) -> Attributions:
    """Attribute the NSP log-odds log P(IsNext)/P(NotNext) of the pair (A, B) to its tokens
    (steps and baseline as in :func:`explain_masked_word`)."""
    _require(loaded, NSP_HEAD)
    check_baseline(baseline)
    tok = loaded.tokenizer
    if not text_a.strip() or not text_b.strip():
        raise ValueError("write both sentence A and sentence B")
    enc = tok.encode(text_a, text_b, max_length=loaded.config.max_position_embeddings)
    inputs = _inputs(loaded, enc)

    def f(model, input_ids, token_type_ids, position_ids):
        pooled = model.bert(input_ids=input_ids, token_type_ids=token_type_ids,
                            position_ids=position_ids).pooler_output  # [B, H]
        logits = model.cls.seq_relationship(pooled).float()          # [B, 2]: 0 = IsNext
        return logits[:, 0] - logits[:, 1]

    baselines = baseline_inputs(tok, inputs, baseline)
    integrated = integrate_until_reliable(loaded.model, f, inputs, baselines, n_steps, max_steps, token_steps)
    f_x, f_x0 = integrated[1], integrated[2]
    return _result("next sentence", "log-odds of IsNext: log P(IsNext) / P(NotNext)", tok, inputs, baselines,
                   integrated,
                   {"p_is_next": 1 / (1 + math.exp(-f_x)), "p_is_next_baseline": 1 / (1 + math.exp(-f_x0))},
                   baseline)


# ----- target (c): a fine-tuned classifier (Section 4) ---------------------------------------

def label_names(loaded: Loaded) -> list[str]:
    id2label = loaded.config.id2label
    return [id2label[i] for i in sorted(id2label)]


def explain_classifier(loaded: Loaded, text: str, text_b: str | None = None, label: str | int | None = None,
                       n_steps: int = DEFAULT_STEPS, max_steps: int = MAX_STEPS,
                       baseline: str = DEFAULT_BASELINE, token_steps: int | None = None) -> Attributions:
    """Attribute a BertForSequenceClassification's log P(``label``) (default: the predicted
    class; a regression head: its output) to the tokens of ``text`` (and ``text_b``); steps and
    baseline as in :func:`explain_masked_word`."""
    check_baseline(baseline)
    model = loaded.model
    if type(model).__name__ != "BertForSequenceClassification":
        raise ValueError(f"{loaded.path} is a {type(model).__name__}, not a sequence classifier")
    if not text.strip():
        raise ValueError("write a text to classify")
    tok = loaded.tokenizer
    enc = tok.encode(text, text_b or None, max_length=loaded.config.max_position_embeddings)
    inputs = _inputs(loaded, enc)
    names = label_names(loaded)
    regression = model.is_regression

    def outputs(model, input_ids, token_type_ids, position_ids):  # [B, labels]
        logits = model(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids).logits.float()
        return logits if regression else logits.log_softmax(-1)

    with torch.no_grad():
        out = outputs(private_view(model), **inputs)[0]  # in eval mode
    if regression:
        k, score, details = 0, "the regression output", {"prediction": float(out[0])}
    else:
        probs = out.exp()
        predicted = int(probs.argmax())
        if label is None or label == "":
            k = predicted
        elif isinstance(label, int):
            k = label
        elif label in names:
            k = names.index(label)
        else:
            raise ValueError(f"unknown class {label!r}; the classes are {', '.join(names)}")
        score = f"log P({names[k]!r})"
        details = {"label": names[k], "predicted": names[predicted],
                   "probabilities": {n: float(q) for n, q in zip(names, probs.tolist())}}

    def f(model, *ids):
        return outputs(model, *ids)[:, k]  # [B]

    baselines = baseline_inputs(tok, inputs, baseline)
    integrated = integrate_until_reliable(model, f, inputs, baselines, n_steps, max_steps, token_steps)
    return _result("classifier", score, tok, inputs, baselines, integrated, details, baseline)


def classifier_runs(root: str | Path = "runs") -> list[dict]:
    """Fine-tuning runs under ``root`` (ablation cells included) whose ``model/`` is a
    BertForSequenceClassification: one dict per run with its name, the model directory, the task
    and the class names, by name."""
    found = []
    for run in find_runs(root):
        cfg_file = run.path / "model" / "config.json"
        try:
            cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        except (OSError, json.JSONDecodeError):
            continue
        if (cfg.get("architectures") or [None])[0] != "BertForSequenceClassification":
            continue
        args_file = cfg_file.parent / "training_args.json"
        try:
            args = json.loads(args_file.read_text()) if args_file.is_file() else {}
        except (OSError, json.JSONDecodeError):
            args = {}
        id2label = cfg.get("id2label") or {}
        found.append({"name": rel_name(run.path, root), "model_dir": str(cfg_file.parent),
                      "task": args.get("task"), "base_model": args.get("model"),
                      "labels": [id2label[k] for k in sorted(id2label, key=int)]})
    return sorted(found, key=lambda r: r["name"])
