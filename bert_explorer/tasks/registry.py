"""The task registry: what BERT Explorer knows about each kind of fine-tuning task (Section 4,
Figure 4), in one place.

Every part that needs to know something about a task type reads it here: the upload readers
(which types exist), featurisation and the model (the BertFor* head and its size), the dev
metrics (the one a run is judged by, the ones the page shows), feature-based transfer and the
left-to-right heads (which types they can do), the data previews and label counts, and the
Fine-tune page and the CLI (what a person types to try a model).

What a task *does* with tensors (featurisation, loss, decoding, metrics) lives in
``train/task_ops.py``, one class per ``target``, so that this module stays free of torch. A new
task type whose head predicts one of the known targets is one entry below; a new target is one
more class there and the few target cases here.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

# What a head predicts for one example, the key to the task's behaviour (``train/task_ops.py``):
#   class: one of a few named labels, read from the pooled [CLS] vector (Figure 4a, b)
#   value: one real number, from the same [CLS] vector (STS-B's similarity score)
#   tags: one named tag per word, read at its first WordPiece (Figure 4d)
#   span: the answer's first and last token in a passage (Figure 4c)
#   choice: which of several candidate sequences, one score per [CLS] (SWAG, Section 4.4)
TARGETS = ("class", "value", "tags", "span", "choice")


@dataclass(frozen=True)
class Input:
    """One thing a person types to try a fine-tuned model: a box on the Fine-tune page, and
    ``--text`` (the first) or ``--text-pair`` (the second) on the command line."""

    label: str                 # the page's label
    cli: str                   # how the command line's help names the value
    required: bool = True      # an empty box means "not ready to predict yet"
    long: bool = False         # a multi-line box (a passage, a list)
    choices: bool = False      # a list: one per line on the page, "a || b || c" on the command line


TEXT, PAIR = Input("Text", "TEXT"), Input("Second text (pairs)", "TEXT_PAIR", required=False)


@dataclass(frozen=True)
class TaskType:
    name: str
    architecture: str            # the head of Figure 4 (a transformers class name)
    paper: str                   # where the paper fine-tunes such a task
    fields: tuple[str, ...]      # the keys of one example (the table in data/tasks.py)
    metrics: tuple[str, ...]     # dev metrics shown, the first is the one a run is judged by
    reads_cls: bool              # the head reads the pooled [CLS] vector (else every token)
    labelled: bool               # the labels are names (classes or tags), not numbers or spans
    feature_based: bool          # Section 5.3's frozen-feature BiLSTM can do it
    left_to_right: bool          # the ablations' left-to-right heads can do it
    target: str                  # what the head predicts (TARGETS above)
    label_key: str               # the example's gold answer: "label", "tags" or "answers"
    inputs: tuple[Input, ...]    # what a person types to try a model (page and CLI)
    percent: bool = False        # the dev scores are percentages (SQuAD's EM and F1), not fractions

    @property
    def main_metric(self) -> str:
        return self.metrics[0]

    @property
    def per_token(self) -> bool:
        """The head answers at every token (NER's tags), not once per sequence."""
        return self.target == "tags"

    @property
    def problem_type(self) -> str | None:
        """transformers' ``config.problem_type`` of the fine-tuned model: "regression" makes
        BertForSequenceClassification's loss the mean squared error."""
        return "regression" if self.target == "value" else None

    def num_outputs(self, label_names: list[str] | None) -> int | None:
        """The size of the new output layer: one number for a value, one logit per label (or
        tag) for names; None where the architecture fixes it (span: start and end; choice: one
        score per candidate)."""
        if self.target == "value":
            return 1
        if self.target in ("class", "tags"):
            return len(label_names)
        return None

    def gold_labels(self, example: dict) -> list:
        """The gold labels of one example as a list (a class or a choice: one; NER: one tag per
        word), for the tasks whose answers can be counted (not for values or spans)."""
        gold = example[self.label_key]
        return list(gold) if self.per_token else [gold]

    def label_counts(self, examples: list[dict]) -> dict:
        """How often each label (NER: each tag; multiple choice: each right ending's position)
        occurs; empty for values and spans."""
        if self.target in ("value", "span"):
            return {}
        return dict(Counter(t if self.per_token else str(t) for ex in examples for t in self.gold_labels(ex)))

    def preview(self, example: dict, shorten: Callable[[str], str] = str) -> dict:
        """One example as a flat row of a table (the data previews); ``shorten`` cuts long texts."""
        if self.target == "tags":
            return {"tokens": " ".join(example["tokens"]), "tags": " ".join(example["tags"])}
        if self.target == "span":
            return {"question": example["question"], "context": shorten(example["context"]),
                    "answer": " | ".join(a["text"] for a in example.get("answers", [])) or "(no answer)"}
        if self.target == "choice":
            return {"context": shorten(example["context"]), "choices": " | ".join(example["choices"]),
                    "label": example["label"]}
        return {k: (shorten(v) if isinstance(v, str) else v) for k, v in example.items() if v is not None}

    def example_from_text(self, text: str, second: str | list[str] | None = None) -> dict:
        """The example a person means by typing ``text`` and ``second`` into this task's
        ``inputs`` (for multiple choice, ``second`` is the list of choices). A ValueError says
        what is missing."""
        if self.target == "tags":
            return {"tokens": text.split()}
        if self.target == "span":
            if second is None:
                raise ValueError("a QA model needs a question and a context")
            return {"question": text, "context": second}
        if self.target == "choice":
            if len(second or []) < 2:
                raise ValueError("a multiple-choice model needs a context and at least two choices")
            return {"context": text, "choices": list(second)}
        return {"text": text, "text_pair": second}


TASK_TYPES: dict[str, TaskType] = {t.name: t for t in (
    TaskType("classification", "BertForSequenceClassification", "§4.1 (SST-2, CoLA)", ("text", "label"),
             ("accuracy", "macro_f1", "mcc", "f1"), True, True, True, True,
             target="class", label_key="label", inputs=(TEXT,)),
    TaskType("pair-classification", "BertForSequenceClassification", "§4.1 (MNLI, QQP, QNLI, MRPC, RTE)",
             ("text", "text_pair", "label"), ("accuracy", "f1", "mcc"), True, True, True, True,
             target="class", label_key="label", inputs=(TEXT, PAIR)),
    TaskType("regression", "BertForSequenceClassification", "§4.1 (STS-B)", ("text", "text_pair", "label"),
             ("pearson", "spearman", "mse"), True, False, True, True,
             target="value", label_key="label", inputs=(TEXT, PAIR)),
    TaskType("ner", "BertForTokenClassification", "§5.3 (CoNLL-2003 NER)", ("tokens", "tags"),
             ("f1", "precision", "recall"), False, True, True, True,
             target="tags", label_key="tags", inputs=(Input("Sentence (words separated by spaces)", "WORDS"),)),
    TaskType("qa", "BertForQuestionAnswering", "§4.2-4.3 (SQuAD v1.1, v2.0)",
             ("id", "question", "context", "answers", "is_impossible"), ("f1", "exact_match"),
             False, False, False, False, target="span", label_key="answers", percent=True,
             inputs=(Input("Question", "QUESTION"), Input("Context", "CONTEXT", long=True))),
    TaskType("multiple-choice", "BertForMultipleChoice", "§4.4 (SWAG)", ("context", "choices", "label"),
             ("accuracy",), True, False, False, False, target="choice", label_key="label",
             inputs=(Input("Context", "CONTEXT"),
                     Input("Choices, one per line", "'choice 1 || choice 2 || ...'", long=True, choices=True))),
)}
TASKS = tuple(TASK_TYPES)


def task_type(name: str) -> TaskType:
    """The registry entry of ``name``; an unknown name is a ValueError that lists the known ones."""
    try:
        return TASK_TYPES[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None


def able(capability: str) -> tuple[str, ...]:
    """The task types with ``capability`` (``"feature_based"``, ``"left_to_right"``, ``"reads_cls"``)."""
    return tuple(t.name for t in TASK_TYPES.values() if getattr(t, capability))
