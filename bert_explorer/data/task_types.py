"""The task registry: what BERT Explorer knows about each kind of fine-tuning task (Section 4,
Figure 4), in one place.

Every part that needs to know something about a task type reads it here: the upload readers
(which types exist), featurisation and the model (the BertFor* head), the dev metrics (the one a
run is judged by, the ones the page shows), feature-based transfer and the left-to-right heads
(which types they can do), and the Fine-tune page (its input fields). A new task type is one
entry below plus its featurisation and decoding.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskType:
    name: str
    architecture: str            # the head of Figure 4 (a transformers class name)
    paper: str                   # where the paper fine-tunes such a task
    fields: tuple[str, ...]      # what one example holds (the upload's columns, the page's inputs)
    metrics: tuple[str, ...]     # dev metrics shown, the first is the one a run is judged by
    reads_cls: bool              # the head reads the pooled [CLS] vector (else every token)
    labelled: bool               # the labels are names (classes or tags), not numbers or spans
    feature_based: bool          # Section 5.3's frozen-feature BiLSTM can do it
    left_to_right: bool          # the ablations' left-to-right heads can do it

    @property
    def main_metric(self) -> str:
        return self.metrics[0]


TASK_TYPES: dict[str, TaskType] = {t.name: t for t in (
    TaskType("classification", "BertForSequenceClassification", "§4.1 (SST-2, CoLA)", ("text", "label"),
             ("accuracy", "macro_f1", "mcc", "f1"), True, True, True, True),
    TaskType("pair-classification", "BertForSequenceClassification", "§4.1 (MNLI, QQP, QNLI, MRPC, RTE)",
             ("text", "text_pair", "label"), ("accuracy", "f1", "mcc"), True, True, True, True),
    TaskType("regression", "BertForSequenceClassification", "§4.1 (STS-B)", ("text", "text_pair", "label"),
             ("pearson", "spearman", "mse"), True, False, True, True),
    TaskType("ner", "BertForTokenClassification", "§5.3 (CoNLL-2003 NER)", ("tokens", "tags"),
             ("f1", "precision", "recall"), False, True, True, True),
    TaskType("qa", "BertForQuestionAnswering", "§4.2-4.3 (SQuAD v1.1, v2.0)", ("question", "context", "answers"),
             ("f1", "exact_match"), False, False, False, False),
    TaskType("multiple-choice", "BertForMultipleChoice", "§4.4 (SWAG)", ("context", "endings", "label"),
             ("accuracy",), True, False, False, False),
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
