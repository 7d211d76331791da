"""The task registry: the kinds of fine-tuning task BERT Explorer knows (Section 4, Figure 4), in
one place.

Each entry is a task type object (``base.TaskType``): its name, where the paper fine-tunes such a
task, the keys of an example, the metrics and what a person types to try a model are fields; what
it does with the model comes from its class, one per kind of answer. Everything that needs to know
something about a task reads it from the object: the upload readers (which type a table holds, by
its columns: ``reads``; which reader method and file formats are its; what an example holds),
featurisation and the model (the BertFor* head and its size), the dev metrics (the one a run is
judged by, the ones the page shows), feature-based transfer and the left-to-right heads (which types
they can do), the data previews and label counts, and the Fine-tune page and the CLI (what a person
types to try a model).

A name becomes its object once, where a person or a file names it (:func:`task_type`); from there
on the object is passed. A new task type whose head gives one of the known kinds of answer is one
entry below; a new kind of answer is one more ``TaskType`` subclass.
"""
from __future__ import annotations

import difflib

from .base import Input, TaskType
from .choice import ChoiceTask
from .multilabel import MultiLabelTask
from .sequence import LabelTask, ValueTask
from .spans import SpanTask
from .tagging import TagTask

# the settings of Section 4 for each benchmark (Appendix A.3 gives only ranges: batch 16 or 32, lr 5e-5, 3e-5 or
# 2e-5, 2 to 4 epochs)
GLUE_SETTINGS = "GLUE (§4.1): batch 32, 3 epochs, the best on dev of lr 5e-5, 4e-5, 3e-5 and 2e-5"
TEXT, PAIR = Input("Text", "TEXT"), Input("Second text (pairs)", "TEXT_PAIR", required=False)

CLASSIFICATION = LabelTask(
    name="classification", paper="§4.1 (SST-2, CoLA)", fields=("text", "label"),
    metrics=("accuracy", "macro_f1", "mcc", "f1"), inputs=(TEXT,), formats=("fasttext",),
    # (the kind SST-2 and CoLA are: five topics is one too)
    in_words="a single-sentence classification task", paper_settings=GLUE_SETTINGS)
PAIR_CLASSIFICATION = LabelTask(
    name="pair-classification", paper="§4.1 (MNLI, QQP, QNLI, MRPC, RTE)", fields=("text", "text_pair", "label"),
    metrics=("accuracy", "f1", "mcc"), inputs=(TEXT, PAIR), pair_required=True,
    in_words="a sentence-pair classification task", paper_settings=GLUE_SETTINGS)
REGRESSION = ValueTask(
    name="regression", paper="§4.1 (STS-B)", fields=("text", "text_pair", "label"),
    metrics=("pearson", "spearman", "mse"), inputs=(TEXT, PAIR), paper_settings=GLUE_SETTINGS)
NER = TagTask(
    name="ner", paper="§5.3 (CoNLL-2003 NER)", fields=("tokens", "tags"),
    metrics=("f1", "precision", "recall"), inputs=(Input("Sentence (words separated by spaces)", "WORDS"),),
    formats=("conll",), in_words="a named-entity (NER) task")
QA = SpanTask(
    name="qa", paper="§4.2-4.3 (SQuAD v1.1, v2.0)", fields=("id", "question", "context", "answers", "is_impossible"),
    metrics=("f1", "exact_match"), inputs=(Input("Question", "QUESTION"), Input("Context", "CONTEXT", long=True)),
    formats=("squad",), in_words="a question-answering (QA) task",
    paper_settings="SQuAD v1.1 (§4.2): batch 32, lr 5e-5, 3 epochs; SQuAD v2.0 (§4.3): batch 48, lr 5e-5, 2 epochs")
MULTIPLE_CHOICE = ChoiceTask(
    name="multiple-choice", paper="§4.4 (SWAG)", fields=("context", "choices", "label"), metrics=("accuracy",),
    inputs=(Input("Context", "CONTEXT"),
            Input("Choices, one per line", "'choice 1 || choice 2 || ...'", long=True, choices=True)),
    paper_settings="SWAG (§4.4): batch 16, lr 2e-5, 3 epochs", paper_defaults=(16, 2e-5, 3.0))

MULTI_LABEL = MultiLabelTask(
    name="multi-label", paper="beyond the paper: §4.1's [CLS] head with a sigmoid per label", fields=("text", "labels"),
    metrics=("micro_f1", "macro_f1", "subset_accuracy"), inputs=(TEXT,))

TASK_TYPES: dict[str, TaskType] = {t.name: t for t in (
    CLASSIFICATION, PAIR_CLASSIFICATION, REGRESSION, NER, QA, MULTIPLE_CHOICE, MULTI_LABEL)}
TASKS = tuple(TASK_TYPES)
# The order the upload readers ask the task types whether a table holds theirs, when nobody named the
# task (``TaskType.reads``): a table of choices may also have a question and a context, and one of
# tokens may have a "labels" column. A table no type claims holds a sentence task (``sentence_task``).
TABLE_ORDER = (MULTIPLE_CHOICE, QA, NER, MULTI_LABEL)


def table_task(table) -> TaskType | None:
    """The first task type in ``TABLE_ORDER`` that reads ``table``; None: a sentence task."""
    return next((t for t in TABLE_ORDER if t.reads(table)), None)


def sentence_task(values: bool, pair: bool) -> TaskType:
    """The sentence task of a table nobody named: a value task where the labels are numbers
    (STS-B), else one label for a pair where the table has a second text, else for one text."""
    sentence = [t for t in TASK_TYPES.values() if t.table_reader == "sentences"]
    if values:
        return next(t for t in sentence if not t.labelled)
    return next(t for t in sentence if t.labelled and t.pair_required == pair)


def format_task(fmt: str) -> TaskType:
    """The task type a file format of its own holds (``"conll"``: NER, ``"fasttext"``, ``"squad"``)."""
    return next(t for t in TASK_TYPES.values() if fmt in t.formats)


def task_type(name: str) -> TaskType:
    """The task type a person or a file calls ``name``; an unknown name is a ValueError that
    suggests the closest known one and lists them all."""
    try:
        return TASK_TYPES[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), TASK_TYPES, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown task {name!r}{hint}; choose one of {', '.join(TASK_TYPES)}.") from None


def task_types_with(capability: str) -> tuple[str, ...]:
    """The names of the task types with ``capability`` (``"feature_based"``, ``"left_to_right"``,
    ``"reads_cls"``), for messages that list them."""
    return tuple(t.name for t in TASK_TYPES.values() if getattr(t, capability))


def task_for_model(name: str | None, architecture: str, regression: bool) -> TaskType | None:
    """The task type a fine-tuned model answers: the one its training named, else (a model from
    elsewhere) the first with its architecture; a head trained with one output and MSE answers
    the registry's value task with that architecture instead. None: not a fine-tuned model."""
    task = task_type(name) if name else next((t for t in TASK_TYPES.values() if t.architecture == architecture), None)
    if task is not None and regression and task.problem_type != "regression":
        task = next(t for t in TASK_TYPES.values() if t.architecture == architecture and t.problem_type == "regression")
    return task
