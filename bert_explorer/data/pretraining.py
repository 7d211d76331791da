"""Pre-training instances: the masked LM and next-sentence prediction data of BERT.

The paper (Section 3.1, Appendix A.1) trains on two tasks at once:

* **Masked LM.** 15% of the WordPiece tokens of each sequence are chosen at random; of those,
  80% are replaced by ``[MASK]``, 10% by a random token and 10% are left unchanged, and the
  model must predict the original token at every chosen position. Only replacing with
  ``[MASK]`` would teach the model that real tokens never need a good representation, since
  ``[MASK]`` never appears at fine-tuning time; the random and unchanged 10% make it keep a
  contextual representation of *every* input token (Section 3.1; the ratios are compared in
  Appendix C.2, Table 8, so they are configurable here).
* **Next sentence prediction.** For each pair A, B: "50% of the time B is the actual next
  sentence that follows A (labeled as IsNext), and 50% of the time it is a random sentence
  from the corpus (labeled as NotNext)". A "sentence" is a span of contiguous text, not a
  linguistic sentence: we pack whole sentences until the sequence is full.

:func:`create_instances` follows google-research/bert ``create_pretraining_data.py`` (the
comments say where it differs and why). Masks chosen there are *static*: ``dupe_factor``
copies of the data get different masks. RoBERTa (Liu et al. 2019) instead masks each batch
anew; :func:`collate` does that when given a :class:`MaskingConfig` ("dynamic masking").
Two more objectives share the machinery: ``"mlm"`` (one segment, no NSP; RoBERTa found NSP
unnecessary) and ``"ltr"`` (left-to-right language modelling, the paper's ablation in
Section 5.1 / Table 5: no masking, next-token labels); each is an object (``objectives.py``) that
says how its segments are cut (``segments.py``) and which labels a batch carries.
"""
from __future__ import annotations

import hashlib
import math
import random
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from ..setting import setting
from ..tokenizer import WordPieceTokenizer
from ..wordpiece_vocab import word_parts
from .corpora import NSP_REMEDY, Document
from .objectives import BERT, NO_NSP, Objective, objective_type


@dataclass
class Instance:
    """One pre-training sequence, ``[CLS] A [SEP] B [SEP]`` (``mlm+nsp``) or ``[CLS] A [SEP]``."""

    input_ids: list[int]                  # [T], already masked when masking was static
    token_type_ids: list[int]             # [T]: 0 for [CLS] A [SEP], 1 for B [SEP]
    masked_positions: list[int] = field(default_factory=list)  # [P], ascending
    masked_labels: list[int] = field(default_factory=list)     # [P]: the original ids there
    is_random_next: bool | None = False   # NSP label: 1 = NotNext (B is random), 0 = IsNext; None = no
                                          # NSP label (text trained with MLM only, see mlm_only_instances)

    def original_ids(self) -> list[int]:
        """The sequence before masking."""
        ids = list(self.input_ids)
        for p, label in zip(self.masked_positions, self.masked_labels):
            ids[p] = label
        return ids


@dataclass(frozen=True)
class MaskingConfig:
    """How the masked-LM targets are chosen (Section 3.1; the ratios vary in Table 8)."""

    mlm_probability: float = setting(0.15, "The fraction of tokens chosen for the masked-LM prediction (15% in the "
                                            "paper).")
    mask_ratio: float = setting(0.8, "Of the chosen tokens, the fraction replaced by [MASK] (Table 8 varies these "
                                      "three ratios).")
    random_ratio: float = setting(0.1, "Of the chosen tokens, the fraction replaced by a random token.")
    keep_ratio: float = setting(0.1, "Of the chosen tokens, the fraction left as they are (still predicted).")
    # None: the rate alone bounds the count; a fixed 20 (the original scripts' for 128 = 0.15 x 128 rounded up)
    # predicted 5 % of a 512-token sequence, not 15 %
    max_predictions_per_seq: int | None = setting(None, "The most tokens predicted in one sequence; unset, no cap "
                                                        "beyond the rate, at most 15 % of max_seq_length rounded up "
                                                        "(the original scripts' 20 for 128).")
    # the 2019 release's whole-word masking
    whole_word: bool = setting(False, "Mask whole words: all the WordPiece pieces of a chosen word together.")

    def __post_init__(self):
        for name in ("mlm_probability", "mask_ratio", "random_ratio", "keep_ratio", "max_predictions_per_seq"):
            v = getattr(self, name)
            if v is None and name == "max_predictions_per_seq":
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                # (NaN passed every comparison below: a run trained and wrote NaN into its config.json)
                raise ValueError(f"{name} must be a number, not {v!r}")
        if not isinstance(self.whole_word, bool):
            raise ValueError(f"whole_word must be true or false, not {self.whole_word!r}")
        ratios = (self.mask_ratio, self.random_ratio, self.keep_ratio)
        if min(ratios) < 0 or abs(sum(ratios) - 1) > 1e-6:
            raise ValueError(f"mask/random/keep ratios must be >= 0 and sum to 1, got {ratios}")
        if not 0 < self.mlm_probability <= 1:
            raise ValueError(f"mlm_probability must be in (0, 1], not {self.mlm_probability!r}")
        cap = self.max_predictions_per_seq
        if cap is not None:
            if cap != int(cap) or cap < 1:
                raise ValueError(f"max_predictions_per_seq must be a whole number of at least 1, not {cap!r}")
            object.__setattr__(self, "max_predictions_per_seq", int(cap))  # 5.0 from a JSON file

    def cap_key(self, max_seq_length: int) -> int:
        """The cap as a cache or folder key holds it: :meth:`cap_at`, or the fixed 20 of the default before the
        rate bounded the count where that 20 never cut it (a key made then is found again)."""
        cap = self.cap_at(max_seq_length)
        return cap if self.max_predictions_per_seq is not None else max(20, cap)

    def cap_at(self, max_seq_length: int) -> int:
        """The most targets a sequence of ``max_seq_length`` gets: the cap given, else the rate's count of a
        full sequence rounded up (20 for 128, as the original scripts set it; 77 for 512)."""
        if self.max_predictions_per_seq is not None:
            return self.max_predictions_per_seq
        return max(1, math.ceil(self.mlm_probability * max_seq_length - 1e-9))


def mask_tokens(input_ids: Sequence[int], special_ids: set[int], vocab_size: int,
                cfg: MaskingConfig, rng: random.Random, word_starts: Sequence[bool] | None = None,
                *, mask_id: int) -> tuple[list[int], list[int], list[int]]:
    """Choose and corrupt masked-LM targets. Returns ``(new_ids, positions, labels)``.

    The number of targets is 15% of the non-special tokens, rounded half up, at least 1 and
    at most ``max_predictions_per_seq`` where one is set: a fixed count per sequence (as in the original code)
    rather than a coin per token, so every sequence carries a predictable amount of signal.
    Special tokens ([CLS], [SEP], [PAD], [UNK], [MASK]) are never chosen. With whole-word
    masking, ``word_starts[i]`` says whether piece ``i`` begins a word; a word is drawn as a
    unit, and a word that would overshoot the count is skipped, as in the original. The
    80/10/10 decision is then made per piece. A random replacement is drawn uniformly from the
    non-special vocabulary (it equals the original with probability 1/V, which we allow).
    """
    if cfg.whole_word and word_starts is None:
        raise ValueError("whole-word masking needs word_starts (which pieces begin a word)")
    candidates = [i for i, t in enumerate(input_ids) if t not in special_ids]
    if not candidates:
        return list(input_ids), [], []
    num_to_predict = max(1, int(len(candidates) * cfg.mlm_probability + 0.5))
    if cfg.max_predictions_per_seq is not None:
        num_to_predict = min(cfg.max_predictions_per_seq, num_to_predict)
    groups: list[list[int]] = []
    for i in candidates:
        if cfg.whole_word and groups and groups[-1][-1] == i - 1 and not word_starts[i]:
            groups[-1].append(i)                  # a "##" piece joins the word before it
        else:
            groups.append([i])
    rng.shuffle(groups)
    chosen: list[int] = []
    for g in groups:
        if len(chosen) >= num_to_predict:
            break
        if len(chosen) + len(g) <= num_to_predict:
            chosen.extend(g)
    chosen.sort()

    new_ids = list(input_ids)
    for p in chosen:
        r = rng.random()
        if r < cfg.mask_ratio:
            new_ids[p] = mask_id
        elif r < cfg.mask_ratio + cfg.random_ratio:
            new_ids[p] = _random_token(vocab_size, special_ids, rng)
        # else: keep the original token; the model must still predict it
    return new_ids, chosen, [input_ids[p] for p in chosen]


def _random_token(vocab_size: int, special_ids: set[int], rng: random.Random) -> int:
    while True:  # rejection sampling: specials are a handful of ids out of thousands
        t = rng.randrange(vocab_size)
        if t not in special_ids:
            return t


def continuation_ids(tokenizer: WordPieceTokenizer) -> frozenset[int]:
    """Ids of the "##" pieces, which continue the word before them."""
    return frozenset(i for i in range(tokenizer.vocab_size)
                     if tokenizer.id_to_token(i).startswith("##"))


# ----- building instances -----------------------------------------------------------------
def create_instances(documents: Sequence[Document], tokenizer: WordPieceTokenizer,
                     max_seq_length: int = 128, short_seq_prob: float = 0.1,
                     objective: Objective | str = BERT, masking: MaskingConfig = MaskingConfig(),
                     dupe_factor: int = 1, seed: int = 0, mask: bool = True) -> list[Instance]:
    """Turn documents into shuffled pre-training instances, deterministically for a seed.

    Sequences are usually filled to ``max_seq_length``: we pad to it anyway, so short ones
    waste compute. But with probability ``short_seq_prob`` (10%) an instance gets a random
    shorter target length in [2, max], so the model also sees the short inputs that
    fine-tuning will give it (the original code's reasoning; we draw the target per instance,
    where the original draws it once per document). ``dupe_factor`` passes over the data,
    each with new segment choices and masks. ``mask=False`` leaves masking to :func:`collate`.
    """
    objective = objective_type(objective)
    max_num_tokens = max_seq_length - objective.special_tokens   # room for [CLS], [SEP] (, [SEP])
    if max_num_tokens < 2:
        raise ValueError(f"max_seq_length={max_seq_length} is too short")
    rng = random.Random(seed)
    docs = _tokenize_documents(documents, tokenizer)
    if objective.next_sentence and len(docs) < 2:
        raise ValueError(f"next-sentence prediction needs at least two non-empty documents; {NSP_REMEDY}")
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    masker = Masker.of(tokenizer, masking)

    instances = []
    for _ in range(dupe_factor):
        for d in range(len(docs)):
            for a, b, is_random_next in objective.segments(docs, d, max_num_tokens, short_seq_prob, rng):
                ids = [cls] + a + [sep] + (b + [sep] if b is not None else [])
                types = [0] * (len(a) + 2) + ([1] * (len(b) + 1) if b is not None else [])
                inst = Instance(ids, types, is_random_next=is_random_next)
                if mask and objective.masks:
                    inst.input_ids, inst.masked_positions, inst.masked_labels = masker.mask(ids, rng)
                instances.append(inst)
    rng.shuffle(instances)  # so a batch mixes documents
    return instances


# The last few corpora tokenised, by content and vocabulary: an ablation pre-trains up to a dozen
# models on the same documents with the same vocabulary in one process, and tokenising is most of
# the time it takes to build their instances (a corpus of 1.7 M WordPieces: about 10 s here).
_TOKENIZED: OrderedDict[tuple[str, str], list[list[list[int]]]] = OrderedDict()
_TOKENIZED_KEEP = 2


@dataclass(frozen=True)
class Masker:
    """The masked-LM corruption for one vocabulary (Section 3.1), built once from the tokenizer and
    the masking settings: the ids never chosen (special tokens), the [MASK] id, the vocabulary a
    random replacement is drawn from and, for whole-word masking, the pieces that continue a word."""

    config: MaskingConfig
    special_ids: frozenset[int]
    vocab_size: int
    mask_id: int
    continuation_ids: frozenset[int] = frozenset()

    @classmethod
    def of(cls, tokenizer: WordPieceTokenizer, config: MaskingConfig) -> Masker:
        return cls(config, frozenset(tokenizer.special_ids()), tokenizer.vocab_size, tokenizer.mask_id,
                   continuation_ids(tokenizer) if config.whole_word else frozenset())

    def mask(self, input_ids: Sequence[int], rng: random.Random) -> tuple[list[int], list[int], list[int]]:
        """``mask_tokens`` of these ids with this vocabulary's settings: (new ids, positions, labels)."""
        starts = [t not in self.continuation_ids for t in input_ids] if self.config.whole_word else None
        return mask_tokens(input_ids, self.special_ids, self.vocab_size, self.config, rng, starts,
                           mask_id=self.mask_id)

    def drawing(self, rng: random.Random) -> Callable[[Instance], tuple[list[int], list[int], list[int]]]:
        """New masks for an instance, its stored ones undone (dynamic masking), drawn from ``rng``."""
        return lambda instance: self.mask(instance.original_ids(), rng)


def _digest(documents: Sequence[Document]) -> str:
    h = hashlib.sha1()
    for doc in documents:
        h.update("\x1e".join(doc).encode("utf-8", "surrogatepass"))
        h.update(b"\x1d")
    return h.hexdigest()


def _tokenize_documents(documents: Sequence[Document], tokenizer: WordPieceTokenizer,
                        batch: int = 2000) -> list[list[list[int]]]:
    """Documents -> sentences -> WordPiece ids; empty sentences and documents are dropped. The
    result is shared with later calls on the same documents and vocabulary: read it, never change it."""
    key = (tokenizer.fingerprint(), _digest(documents))
    if key in _TOKENIZED:
        _TOKENIZED.move_to_end(key)
        return _TOKENIZED[key]
    out = _tokenize_uncached(documents, tokenizer, batch)
    _TOKENIZED[key] = out
    while len(_TOKENIZED) > _TOKENIZED_KEEP:
        _TOKENIZED.popitem(last=False)
    return out


# The characters tokenised at once (a batch of sentences; a longer sentence in parts, ``word_parts``): one line of
# 5.8 MB held 540 MB more while tokenised whole.
TOKENISED_AT_ONCE = 1_000_000


def _tokenize_uncached(documents: Sequence[Document], tokenizer: WordPieceTokenizer,
                       batch: int) -> list[list[list[int]]]:
    out: list[list[list[int]]] = [[] for _ in documents]
    where: list[tuple[int, int]] = []  # (document, sentence) of each text in the batch
    texts: list[str] = []
    held, last = 0, None

    def tokenise():
        nonlocal last
        for (d, s), ids in zip(where, tokenizer.ids_batch(texts)):
            if (d, s) == last:  # the next part of the sentence before
                out[d][-1].extend(ids)
            elif ids:
                out[d].append(ids)
                last = (d, s)
        where.clear()
        texts.clear()

    for d, doc in enumerate(documents):
        for s, sentence in enumerate(doc):
            if not sentence.strip():
                continue
            for part in word_parts(sentence):
                if texts and (len(texts) >= batch or held + len(part) > TOKENISED_AT_ONCE):
                    tokenise()
                    held = 0
                where.append((d, s))
                texts.append(part)
                held += len(part)
    if texts:
        tokenise()
    return [doc for doc in out if doc]


# ----- batching ---------------------------------------------------------------------------
def collate(instances: Sequence[Instance], pad_id: int, objective: Objective | str = BERT,
            remask: Callable[[Instance], tuple[list[int], list[int], list[int]]] | None = None
            ) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest instance; returns tensors ``input_ids``, ``token_type_ids``,
    ``attention_mask``, ``labels`` (all [B, T]) and the objective's labels of whole sequences
    (NSP's ``next_sentence_label`` [B]). ``labels`` holds the objective's label at each position
    (the original id at masked positions; for ``ltr`` the next token) and IGNORE (-100) elsewhere.

    Given ``remask`` (``Masker.drawing(rng)``), stored masks are undone and new ones drawn:
    dynamic masking. A left-to-right model must be run with a causal attention mask.
    """
    objective = objective_type(objective)
    T = max(len(x.input_ids) for x in instances)
    ids, types, attn, labels = [], [], [], []
    for inst in instances:
        seq, lab = objective.labels(inst, T, remask)
        pad = T - len(seq)
        ids.append(list(seq) + [pad_id] * pad)
        types.append(inst.token_type_ids + [0] * pad)
        attn.append([1] * len(seq) + [0] * pad)
        labels.append(lab)
    batch = {"input_ids": _long(ids), "token_type_ids": _long(types), "attention_mask": _long(attn),
             "labels": _long(labels)}
    return {**batch, **{k: torch.tensor(v) for k, v in objective.batch_labels(instances).items()}}


def _long(rows: list[list[int]]) -> torch.Tensor:
    """Equal-length rows of ints as an int64 tensor, through NumPy: torch.tensor reads a nested list
    element by element, about 2 ms for 128 x 128 where this takes 0.3 ms, and a GPU's small models wait
    for the host to build each batch (27-46 ms a step on the H200's host)."""
    return torch.from_numpy(np.asarray(rows, dtype=np.int64))


def mlm_only_instances(documents: Sequence[Document], tokenizer: WordPieceTokenizer, max_seq_length: int = 128,
                       short_seq_prob: float = 0.1, masking: MaskingConfig = MaskingConfig(), seed: int = 0,
                       mask: bool = True) -> list[Instance]:
    """Single-segment instances (``[CLS] A [SEP]``) that carry no next-sentence label, to be mixed
    into an MLM + NSP run: text whose sentence order is not a "next sentence" in the paper's sense
    (a dictionary gloss followed by its example phrases) still teaches words through the masked LM,
    and :func:`collate` gives these instances the NSP label IGNORE, so the NSP loss skips them."""
    out = create_instances(documents, tokenizer, max_seq_length, short_seq_prob, NO_NSP, masking, seed=seed,
                           mask=mask)
    for inst in out:
        inst.is_random_next = None
    return out


# ----- statistics -------------------------------------------------------------------------
# A model whose held-out loss is not this much below the corpus's unigram entropy has learnt little
# beyond how often each WordPiece occurs (the word-frequency plateau): 0.1 nats is a tenth off its
# perplexity. Measured on a GPU run of 400 steps (paper-mini): the five models that stayed there
# ended 0.05-0.10 nats *above* the entropy of 7.15, the six that left it 0.2-1.7 nats below.
PLATEAU_MARGIN = 0.1


def unigram_entropy(pieces: Iterable[Sequence[int]], special_ids: Iterable[int] = ()) -> float:
    """Nats per WordPiece of predicting every piece by its frequency alone (the special tokens left
    out): the cross-entropy of a model that knows nothing but the corpus's word counts."""
    special = set(special_ids)
    counts = Counter(t for seq in pieces for t in seq if t not in special)
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values()) if n else 0.0


def on_plateau(held_out_loss: float, entropy: float) -> bool:
    """Did a pre-training stay on the word-frequency plateau (see PLATEAU_MARGIN)?"""
    return held_out_loss > entropy - PLATEAU_MARGIN


def memorised(train_loss: float | None, held_out_loss: float, entropy: float) -> bool:
    """Did a model on the plateau learn its training text by heart instead (its training MLM loss well below the
    unigram entropy while held-out text stays at it)? More steps make such a model worse, not better."""
    return isinstance(train_loss, (int, float)) and on_plateau(held_out_loss, entropy) \
        and train_loss < entropy - 1.0  # (a nat below: a model that learnt nothing sits at the entropy on both)


def plateau_sentence(held_out_loss: float, entropy: float, train_loss: float | None = None) -> str:
    """Why a model is on the plateau, in a sentence that follows "This model": its training text learnt by heart
    (``memorised``; a 30-document upload read 0.30 nats in training, and was told more steps would help), or
    nothing learnt beyond word counts."""
    if memorised(train_loss, held_out_loss, entropy):
        return (f"learnt its training text by heart, not the language: its training MLM loss is {train_loss:.2f} nats, "
                f"far below {entropy:.2f} (what predicting every WordPiece by its frequency alone costs on this "
                f"corpus), while on held-out text it is {held_out_loss:.2f}, no better than word counts")
    where = ("above" if held_out_loss >= entropy else
             f"less than {PLATEAU_MARGIN:g} below")
    return (f"did not leave the word-frequency plateau: its held-out loss, {held_out_loss:.2f} nats, is {where} "
            f"{entropy:.2f}, what predicting every WordPiece by its frequency alone costs on this corpus (its unigram "
            "entropy), so it has learnt little more than how often each word occurs")


def statistics(instances: Sequence[Instance], mask_id: int | None = None) -> dict:
    """What the data really looks like. Masked positions are counted against the tokens that
    could be masked (all but [CLS]/[SEP]); among them, which became [MASK], a random token, or
    stayed unchanged. Without ``mask_id``, [MASK] is taken to be the most common replacement."""
    lengths = [len(x.input_ids) for x in instances]
    pairs = [x for x in instances if 1 in x.token_type_ids]
    maskable = sum(n - (3 if 1 in x.token_type_ids else 2) for n, x in zip(lengths, instances))
    replaced = Counter()
    unchanged = chosen = 0
    for x in instances:
        for p, label in zip(x.masked_positions, x.masked_labels):
            chosen += 1
            if x.input_ids[p] == label:
                unchanged += 1
            else:
                replaced[x.input_ids[p]] += 1
    if mask_id is None and replaced:
        mask_id = replaced.most_common(1)[0][0]
    n_mask = replaced.get(mask_id, 0)
    is_next = sum(not x.is_random_next for x in pairs) / len(pairs) if pairs else None
    return {
        "num_instances": len(instances),
        "mean_length": sum(lengths) / max(1, len(lengths)),
        "max_length": max(lengths, default=0),
        "masked_fraction": chosen / max(1, maskable),
        "predictions_per_instance": chosen / max(1, len(instances)),
        "mask_fraction": n_mask / max(1, chosen),
        "random_fraction": (chosen - unchanged - n_mask) / max(1, chosen),
        "unchanged_fraction": unchanged / max(1, chosen),
        "is_next_fraction": is_next,   # None without sentence pairs
    }
