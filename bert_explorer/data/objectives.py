"""The pre-training objectives (Section 3.1, and Table 5's ablations): each one an object, as the
fine-tuning task types are.

* ``mlm+nsp``: BERT's two tasks at once, the masked LM (15 % of the tokens chosen, 80/10/10) and
  next-sentence prediction (pairs A, B; half the time B is a random segment: NotNext);
* ``mlm``: the masked LM alone on single segments (Table 5's "No NSP"; RoBERTa's finding);
* ``ltr``: a left-to-right language model (Table 5's "LTR & No NSP", OpenAI GPT's objective): a
  causal mask, each token's label is the next token, nothing is masked.

An objective says how its instances are built (:meth:`Objective.segments`: pairs or single
segments), what labels ``collate`` adds (:meth:`Objective.labels`, :meth:`Objective.batch_labels`),
the model it trains (causal or not; whether the NSP head and the pooler train), the losses a step
logs, what its held-out evaluation measures, and its label in reports and on the pages. Everything
else reads these: no module compares an objective's name. A new objective is one subclass that
overrides what it does differently (sentence-order prediction: :meth:`segments`, B swapped with A
instead of drawn from another document) and its entry in ``OBJECTIVES``.
"""
from __future__ import annotations

import difflib
import random
from dataclasses import dataclass
from typing import Callable

from ..model.heads import IGNORE
from .segments import pairs_from_document, segments_from_document


@dataclass(frozen=True)
class Objective:
    """A masked LM on single segments (the base: ``mlm``); subclasses change what they add."""

    name: str                  # what a setting, a run's config and a recipe call it
    label: str                 # on the pages and in reports
    paper: str                 # where the paper has it
    next_sentence: bool = False  # NSP: pairs A, B with a label; the NSP head and the pooler train
    left_to_right: bool = False  # a causal mask; every token predicts the next; nothing is masked

    @property
    def masks(self) -> bool:
        """Whether instances get masked-LM targets (the Masker's 80/10/10 applies)."""
        return not self.left_to_right

    @property
    def special_tokens(self) -> int:
        """[CLS] A [SEP] (B [SEP]): the positions a sequence spends on special tokens."""
        return 3 if self.next_sentence else 2

    @property
    def documents_needed(self) -> int:
        """The documents a corpus needs: NSP draws its random B from another document, on the
        training side and on the held-out side both."""
        return 4 if self.next_sentence else 2

    @property
    def losses(self) -> tuple[str, ...]:
        """The parts of the model's output a step logs (the total first)."""
        return ("loss", "mlm_loss", "nsp_loss") if self.next_sentence else ("loss", "mlm_loss")

    @property
    def metrics(self) -> tuple[str, ...]:
        """What its held-out evaluation measures."""
        return ("mlm_accuracy", "mlm_perplexity") + (("nsp_accuracy",) if self.next_sentence else ())

    @property
    def trains_pooler(self) -> bool:
        """Whether the pooler and the NSP head get a gradient (DDP must be told when they don't)."""
        return self.next_sentence

    def segments(self, docs: list[list[list[int]]], d: int, max_num_tokens: int, short_seq_prob: float,
                 rng: random.Random) -> list[tuple[list[int], list[int] | None, bool]]:
        """The (A, B or None, B is random) segments of document ``d`` (Appendix A.1)."""
        if self.next_sentence:
            return pairs_from_document(docs, d, max_num_tokens, short_seq_prob, rng)
        return [(a, None, False) for a in segments_from_document(docs[d], max_num_tokens, short_seq_prob, rng)]

    def labels(self, instance, length: int, remask: Callable | None) -> tuple[list[int], list[int]]:
        """(the ids the model reads, the label at each of ``length`` positions) of one instance:
        the original id at each masked position (new masks drawn by ``remask``: dynamic masking),
        or for a left-to-right model the next token; IGNORE elsewhere."""
        labels = [IGNORE] * length
        if self.left_to_right:
            ids = instance.original_ids()
            labels[:len(ids) - 1] = ids[1:]
            return ids, labels
        ids, positions, targets = instance.input_ids, instance.masked_positions, instance.masked_labels
        if remask is not None:
            ids, positions, targets = remask(instance)
        for p, t in zip(positions, targets):
            labels[p] = t
        return ids, labels

    def batch_labels(self, instances) -> dict[str, list[int]]:
        """Labels of whole sequences: NSP's (1 = NotNext, 0 = IsNext; IGNORE for text trained with
        the masked LM only)."""
        if not self.next_sentence:
            return {}
        return {"next_sentence_label": [IGNORE if x.is_random_next is None else int(x.is_random_next)
                                        for x in instances]}


BERT = Objective("mlm+nsp", "MLM + NSP (BERT)", "§3.1, Tasks #1 and #2", next_sentence=True)
NO_NSP = Objective("mlm", "MLM only (No NSP)", "§5.1, Table 5: No NSP")
LEFT_TO_RIGHT = Objective("ltr", "Left-to-right LM (LTR)", "§5.1, Table 5: LTR & No NSP", left_to_right=True)

OBJECTIVES: dict[str, Objective] = {o.name: o for o in (BERT, NO_NSP, LEFT_TO_RIGHT)}


def objective_type(name: str | Objective) -> Objective:
    """The objective a person, a file or a recipe calls ``name``; an unknown name is a ValueError
    that suggests the closest and lists them all."""
    if isinstance(name, Objective):
        return name
    try:
        return OBJECTIVES[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), OBJECTIVES, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {name!r}{hint}") from None


def predicted_share(objective: str | Objective, mlm_probability: float = 0.15) -> float:
    """The share of a sequence's tokens the output decoder predicts (what it costs): the masked ones of a
    masked LM, every one of a left-to-right model."""
    return mlm_probability if objective_type(objective).masks else 1.0
