"""The core types of uploads: the data of one task, the error a bad file raises, what an upload may
hold, and the column names the readers recognise."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...tasks.base import TaskType


MIN_EXAMPLES = 4
DEFAULT_MAX_BYTES = 200_000_000

# What an upload may hold, checked before the work that each costs (DESIGN: every input is bounded
# by its cost). The file size alone bounds nothing: a 133 kB Parquet file can hold 20 M dictionary-
# encoded rows, and 2 bytes of CSV ("a\n") are a row. Read from this module at call time, so tests
# can lower them.
MAX_ROWS = 1_000_000      # rows, records, fastText lines, CoNLL token lines: ~0.65 GB at the peak of a read
                          # of short CSV rows (measured: 129 MB for 200,000)
MAX_CELLS = 10_000_000    # cells (rows x columns) and, in Parquet, list items too: a wide table is as costly
MAX_CLASSES = 1_000       # more classes than this is a wrong label column (or a regression), not a classifier
MAX_LABEL_CHARS = 200    # one label of a multi-label set: longer is a sentence or a wrong separator
MIN_PER_CLASS = 5         # fewer training examples per class than this, on average, and a note warns
# how pandas, Python, JSON and SQL write a missing value (compared ignoring case): a missing label, never a class
MISSING_LABELS = ("nan", "none", "null")


class DataError(ValueError):
    """A data file cannot be used; the message says which file, where, what and what to do."""


def too_many_rows(name: str, count: int, unit: str = "rows") -> DataError:
    """The sentence for ``count`` rows (known before reading them: Parquet metadata, a parsed JSON
    list) over :data:`MAX_ROWS`."""
    return DataError(f"{name} holds {count:,} {unit}, more than the {MAX_ROWS:,} a data file may have; use a "
                     f"sample of it.")


def check_row(name: str, count: int, line: int, cells: int = 0, unit: str = "rows") -> None:
    """Raise when row number ``count`` (on ``line``; ``cells`` so far) passes :data:`MAX_ROWS` or
    :data:`MAX_CELLS`: a reader calls this as it goes, so it stops there and reads no further."""
    if count > MAX_ROWS:
        raise DataError(f"{name} holds more than the {MAX_ROWS:,} {unit} a data file may have ({unit.rstrip('s')} "
                        f"{count:,} is on line {line:,}); use a sample of it.")
    if cells > MAX_CELLS:
        raise DataError(f"{name} holds more than the {MAX_CELLS:,} cells a data file may have (it passes them on "
                        f"line {line:,}, {unit.rstrip('s')} {count:,}); use a sample of it, or only the columns "
                        f"it needs.")


@dataclass
class TaskData:
    """Examples of one task type (the dict layout of each is described in ``tasks.py``)."""

    task: TaskType
    examples: list[dict]
    label_names: list[str] | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)
    format: str = ""  # the format it was read as, one of ``reader.FORMATS``' names ("" where no file was read)

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
def column_key(name: str) -> str:
    """A column's name as names are matched: case, spaces, dots, dashes and underscores left out."""
    return re.sub(r"[\s_\-.]+", "", str(name).strip().lower())


_norm = column_key  # (the modules of this package call it by its short name)


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
