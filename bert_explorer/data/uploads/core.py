"""The core types of uploads: the data of one task, the error a bad file raises, and the column
names the readers recognise."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...tasks.base import TaskType


MIN_EXAMPLES = 4
DEFAULT_MAX_BYTES = 200_000_000


class DataError(ValueError):
    """A data file cannot be used; the message says which file, where, what and what to do."""


@dataclass
class TaskData:
    """Examples of one task type (the dict layout of each is described in ``tasks.py``)."""

    task: TaskType
    examples: list[dict]
    label_names: list[str] | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.examples)

    def label_counts(self) -> dict[str, int]:
        """How often each label (NER: each tag) occurs; empty for regression and QA."""
        return self.task.label_counts(self.examples)

    def summary(self) -> dict:
        out = {"task": self.task.name, "examples": len(self.examples), "source": self.source}
        if self.label_names:
            out["label_names"] = list(self.label_names)
        counts = self.label_counts()
        if counts:
            out["label_counts"] = counts
        out.update(self.task.summary_counts(self.examples))
        if self.notes:
            out["notes"] = list(self.notes)
        return out


# ----- column names we recognise ----------------------------------------------------------
def _norm(name: str) -> str:
    return re.sub(r"[\s_\-.]+", "", str(name).strip().lower())


# Compared ignoring case, spaces, dots, dashes and underscores ("Text A" matches text_a).
TEXT_NAMES = ("text", "sentence", "sentence1", "text_a", "text1", "premise", "question1", "review", "tweet",
              "content", "document", "body", "comment", "message", "utterance", "query", "question", "headline",
              "title", "abstract", "description", "summary", "post", "string", "#1 String", "input", "phrase",
              "doc", "passage", "excerpt")
PAIR_NAMES = ("text_pair", "sentence2", "text_b", "text2", "hypothesis", "question2", "#2 String", "sentence_b",
              "pair", "second")
# known (first text, second text) pairs, tried before the single names
PAIRS = (("sentence1", "sentence2"), ("text_a", "text_b"), ("text1", "text2"), ("premise", "hypothesis"),
         ("question1", "question2"), ("#1 String", "#2 String"), ("sentence_a", "sentence_b"),
         ("text", "text_pair"), ("question", "sentence"), ("query", "passage"), ("question", "passage"))
LABEL_NAMES = ("label", "labels", "gold_label", "class", "category", "sentiment", "score", "target", "y",
               "polarity", "emotion", "intent", "topic", "stance", "rating", "stars", "quality", "tag",
               "class_label", "label_name", "similarity", "relatedness", "output", "gold")
MC_LABEL_NAMES = ("label", "answer", "gold", "correct", "target", "labels", "answer_idx", "gold_label")
ENDING_RE = re.compile(r"^(?:ending|choice|option|candidate|alternative|answer)[ _\-]?(\d+)$", re.I)
TAG_RE = re.compile(r"^(O|[BIESLU]-\S+)$")
