"""What every kind of fine-tuning task shares (paper, Section 4, Figure 4): the fields of a registry
entry, and the behaviour each kind of answer overrides.

A task type is an object: ``TaskType`` holds what names and judges it (its name, the paper's
section, the keys of an example, the metrics, what a person types to try a model), and one
subclass per kind of answer says what it does with the model:

* :class:`~.sequence.LabelTask`: one label for a sentence or a pair, from [CLS] (Figure 4a, b);
* :class:`~.sequence.ValueTask`: one real number from [CLS] (STS-B);
* :class:`~.tagging.TagTask`: one tag per word, read at its first WordPiece (Figure 4d);
* :class:`~.spans.SpanTask`: the answer's first and last token in a passage (Figure 4c);
* :class:`~.choice.ChoiceTask`: one score per candidate sequence, a softmax over them (SWAG).

What follows from the kind of answer (the BertFor* head, where the gold answer is kept, which
training modes can do it) is a class attribute of the subclass, named; the six entries of
:mod:`.registry` are instances. The methods take and return plain lists and tensors, so full
fine-tuning, feature-based transfer and the left-to-right heads share them.
"""
from __future__ import annotations

from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch
from torch import nn


@dataclass(frozen=True)
class Input:
    """One thing a person types to try a fine-tuned model: a box on the Fine-tune page, and
    ``--text`` (the first) or ``--text-pair`` (the second) on the command line."""

    label: str                 # the page's label
    cli: str                   # how the command line's help names the value
    required: bool = True      # an empty box means "not ready to predict yet"
    long: bool = False         # a multi-line box (a passage, a list)
    choices: bool = False      # a list: one per line on the page, "a || b || c" on the command line


@dataclass(frozen=True)
class Shown:
    """One answer of a fine-tuned model as a person reads it: a title and one line, and for some
    task types a score per label (a bar chart) or a small table (one column per word)."""

    title: str
    text: str
    scores: dict[str, float] | None = None
    table: dict[str, list] | None = None


# The key of an example that keeps the other columns of an uploaded table (an id, a source, a date):
# the model never reads them, but the dev set can be sliced by them after fine-tuning.
EXTRA = "extra"


def model_inputs(e) -> dict:
    """The three model inputs of one encoded sequence, as lists."""
    return {"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "attention_mask": e.attention_mask}


def padded_length(feature: dict) -> int:
    """The tokens a feature needs in a batch: its length (multiple choice: its longest choice)."""
    ids = feature["input_ids"]
    return max(map(len, ids)) if ids and isinstance(ids[0], list) else len(ids)


def label_sort_key(label: str):
    """Labels in a stable order a person expects: numbers by value first, then names."""
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


class Interrupted(Exception):
    """A long pass over a data set was asked to stop (a run's Stop) before it ended."""


@dataclass(frozen=True, kw_only=True)
class TaskType:
    """One kind of fine-tuning task: an entry of the registry (``registry.py``)."""

    name: str                    # what a person, a file or a run calls it
    paper: str                   # where the paper fine-tunes such a task
    fields: tuple[str, ...]      # the keys of one example (the table in data/tasks.py)
    metrics: tuple[str, ...]     # dev metrics shown, the first is the one a run is judged by
    inputs: tuple[Input, ...]    # what a person types to try a model (page and CLI)
    formats: tuple[str, ...] = ()  # file formats of their own that hold this task ("conll", "fasttext", "squad")
    pair_required: bool = False  # every example has a second text (a table must have a column for it)
    in_words: str = ""           # how a sentence names it where its name is an abbreviation ("a ner task" read oddly)
    # the batch, learning rate and epochs the paper fine-tuned such a task with, where it gives them ("": it
    # gives none, and Appendix A.3's ranges are all it says)
    paper_settings: str = ""
    # the same as the Fine-tune page's boxes start from (batch, learning rate, epochs): the paper's for this task,
    # and its GLUE ones where it gives none (within Appendix A.3's ranges; a GLUE rate: 5e-5, the first it tried)
    paper_defaults: tuple[int, float, float] = (32, 5e-5, 3.0)

    # What follows from the kind of answer; each subclass sets these.
    target: ClassVar[str]                # what the head predicts: class, value, tags, span or choice
    architecture: ClassVar[str]          # the head of Figure 4 (a transformers class name)
    label_key: ClassVar[str]             # the example's gold answer: "label", "tags" or "answers"
    reads_cls: ClassVar[bool]            # the head reads the pooled [CLS] vector (else every token)
    labelled: ClassVar[bool]             # the labels are names (classes or tags), not numbers or spans
    feature_based: ClassVar[bool]        # Section 5.3's frozen-feature BiLSTM can do it
    left_to_right: ClassVar[bool]        # the ablations' left-to-right heads can do it
    answer_key: ClassVar[str]            # the key of a prediction that holds the answer itself
    per_token: ClassVar[bool] = False    # the head answers at every token (NER's tags)
    reads_in_windows: ClassVar[bool] = False  # a long input is read in overlapping windows, not cut (QA)
    # After fine-tuning (analysis/after_finetuning and its page): which parts apply, and what the
    # page says of them for this kind of answer.
    after_finetuning: ClassVar[str] = ""
    right_or_wrong: ClassVar[bool] = True   # each answer is right or wrong (a value has an error instead)
    gold_choosable: ClassVar[bool] = False  # few distinct gold answers: the rows can be filtered by one
    calibrated: ClassVar[bool] = False      # one answer with a probability: calibration, attributions of a class
    cls_map: ClassVar[bool] = False         # one [CLS] vector per input answers it: the maps before and after
    after_run_answers: ClassVar[bool] = False  # the Fine-tune page lists some dev answers under a finished run
    percent: ClassVar[bool] = False      # the dev scores are percentages (SQuAD's EM and F1)
    probability_of: ClassVar[str] = "its answer"  # what ``probabilities`` gives the probability of, in words
    problem_type: ClassVar[str | None] = None  # transformers' config.problem_type of the model
    # How an uploaded table (CSV, TSV, JSONL, Parquet) holds this task: the reader's method for it,
    # and the columns that name it when no task is given (one name of each group, see ``reads``).
    table_reader: ClassVar[str] = "sentences"
    table_columns: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def reads(self, table) -> bool:
        """Whether a table whose task nobody named holds this task: it has a column for each group
        of ``table_columns`` (``table.column(names)``: the first of those names it has, matched
        ignoring case and separators). The sentence tasks read what no other type reads."""
        return bool(self.table_columns) and all(table.column(names) for names in self.table_columns)

    @property
    def main_metric(self) -> str:
        """The number a run is judged by (the learning-rate grid keeps the best of it; Section 4)."""
        return self.metrics[0]

    # ----- the data -------------------------------------------------------------------------
    def num_outputs(self, label_names: list[str] | None) -> int | None:
        """The size of the new output layer; None where the architecture fixes it (span: start
        and end; choice: one score per candidate)."""
        return None

    def gold_labels(self, example: dict) -> list:
        """The gold labels of one example as a list (a class or a choice: one; NER: one tag per
        word), for the tasks whose answers can be counted (not for values or spans)."""
        return [example[self.label_key]]

    def label_counts(self, examples: list[dict]) -> dict:
        """How often each label (NER: each tag; multiple choice: each right ending's position)
        occurs; empty for values and spans."""
        return dict(Counter(str(t) for ex in examples for t in self.gold_labels(ex)))

    def summary_counts(self, examples: list[dict]) -> dict:
        """Counts a data summary adds for this kind of task (QA: the unanswerable questions)."""
        return {}

    def preview(self, example: dict, shorten: Callable[[str], str] = str) -> dict:
        """One example as a flat row of a table (the data previews); ``shorten`` cuts long texts.
        The upload's other columns (``extra``) come last, under their own names."""
        row = {k: v for k, v in example.items() if v is not None and k != EXTRA}
        row.update({k: v for k, v in (example.get(EXTRA) or {}).items() if k not in row})
        return {k: (shorten(v) if isinstance(v, str) else v) for k, v in row.items()}

    def texts(self, example: dict) -> tuple[str, str | None]:
        """The example as the one or two texts a person reads (and the Attention page takes as
        sentences A and B)."""
        return example["text"], example.get("text_pair") or None

    def example_from_text(self, text: str, second: str | list[str] | None = None) -> dict:
        """The example a person means by typing ``text`` and ``second`` into this task's
        ``inputs`` (for multiple choice, ``second`` is the list of choices). A ValueError says
        what is missing."""
        return {"text": text, "text_pair": second}

    # ----- the model ------------------------------------------------------------------------
    def featurize(self, examples, tok, label_names, max_seq_length: int = 128, doc_stride: int = 64,
                  max_query_length: int = 64) -> list[dict]:
        """One dict per model input (QA: per window) with ``example_index`` pointing back."""
        raise NotImplementedError

    def collate(self, features, pad_id: int) -> dict[str, torch.Tensor]:
        """Pad to the longest input in the batch and stack: [B, T] (multiple choice: [B, C, T])."""
        T = max(len(f["input_ids"]) for f in features)
        out = {k: torch.tensor([f[k] + [pad] * (T - len(f[k])) for f in features])
               for k, pad in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0))}
        if all("labels" in f for f in features):  # predicting needs none; a mixed batch is predicted too
            out["labels"] = self.label_tensor(features, T)
        return out

    def label_tensor(self, features, T: int) -> torch.Tensor:
        return torch.tensor([f["labels"] for f in features], dtype=torch.long)

    def loss_items(self, feature: dict) -> int:
        """What the task's loss of one model input counts in its batch's mean: one input (a tagging task:
        its labelled words). Gradient accumulation weighs a micro-batch by these."""
        return 1

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss of a head that returns plain logits (the feature-based and LTR heads; the
        BertFor* heads compute the same losses themselves), in float32 even under autocast."""
        return nn.functional.cross_entropy(logits.float(), labels)

    def positive_weights(self, examples: list[dict], label_names, setting: str):
        """The weight of each label's positive examples in the loss (the ``pos_weight`` setting), or None
        for every example alike: only a task of several labels an example weighs them
        (``multilabel.MultiLabelTask``); asked of another, a setting other than "none" is refused."""
        if str(setting) != "none":
            raise ValueError(f"label weights (pos_weight) are for multi-label classification, not {self.name}; "
                             "leave pos_weight at none")
        return None

    headline_note: ClassVar[str] = ""  # what the headline metric averages, where a per-label table says more

    def per_label(self, report: dict) -> list[dict] | None:
        """Each label's F1, precision, recall and support from a dev report, most frequent first, where
        the headline averages over labels (multi-label); None where it does not."""
        return None

    def report_of_rows(self, rows: list[dict]) -> dict:
        """The per-label report of the After fine-tuning page's rows, where the task has one (else empty)."""
        return {}

    def never_predicted(self, report: dict) -> str | None:
        """One sentence naming the labels of the dev set the model never predicted, or None."""
        return None

    def batch_outputs(self, model_output) -> list:
        """A BertFor* model's output for one batch as one entry per input, on the CPU."""
        return list(model_output.logits.float().cpu())

    def model_outputs(self, model, features, pad_id: int, device, batch_size: int = 64, autocast=None,
                      stop: Callable[[], bool] | None = None) -> list:
        """Raw outputs of a BertFor* model for every feature, in batches: logits (start and end
        logits for QA), on the CPU, in the order of ``features``.

        The features are read shortest first, so each batch is padded to little more than its
        own length; padding changes no output (masked keys get zero attention), only the time.
        ``stop()`` is asked before every batch: when it says yes, :class:`Interrupted` is raised."""
        model.eval()
        order = sorted(range(len(features)), key=lambda i: padded_length(features[i]))
        outs = [None] * len(features)
        with torch.no_grad():
            for i in range(0, len(order), batch_size):
                if stop is not None and stop():
                    raise Interrupted(f"stopped after {i:,} of {len(order):,} inputs")
                chunk = order[i:i + batch_size]
                batch = {k: v.to(device) for k, v in self.collate([features[j] for j in chunk], pad_id).items()
                         if k not in ("labels", "start_positions", "end_positions")}
                with autocast() if autocast else nullcontext():
                    out = model(**batch)
                for j, o in zip(chunk, self.batch_outputs(out)):
                    outs[j] = o
        return outs

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold: bool = True) -> dict:
        """Dev metrics: the measures the task's benchmark reports, of the answers in ``outputs``."""
        raise NotImplementedError

    def predict(self, examples, features, outputs, label_names, null_threshold=None) -> list[dict]:
        """The model's answers to new ``examples``, one dict each, in the task's own terms."""
        return [self.answer(ex, f, o, label_names) for ex, f, o in zip(examples, features, outputs)]

    def answer(self, example, feature, output, label_names) -> dict:
        raise NotImplementedError

    def probabilities(self, example, feature, output, label_names) -> tuple[float, float] | None:
        """The model's probability of the gold answer and of its own answer to one labelled
        example, from its output; None where the head gives no probability of a whole answer
        (a value; a span, whose score is a sum of two logits over windows)."""
        return None

    def shown(self, answer: dict, example: dict) -> Shown:
        """One answer of :meth:`predict` as a person reads it."""
        raise NotImplementedError

    # ----- the data split ----------------------------------------------------------------------
    def dev_indices(self, examples: list[dict], fraction: float, target: int, rng) -> tuple[list[int], str]:
        """Which ``target`` examples (about ``fraction`` of them) to hold out as a dev set, and how
        they were chosen (said in the data's notes). At random here; a kind of answer that needs
        more overrides it."""
        return rng.sample(range(len(examples)), target), "at random"

    def dev_mismatch(self, train: list[dict], dev: list[dict]) -> str | None:
        """What makes a dev set unusable with this training set beyond unseen labels (one sentence
        without its subject), or None."""
        return None

    # ----- after fine-tuning: the dev set answer by answer ----------------------------------------
    def row(self, example: dict, answer: dict) -> dict:
        """The input's texts, gold, predicted and right-or-wrong of one dev example, in the task's
        own terms (``analysis/after_finetuning/predictions.rows_of``)."""
        raise NotImplementedError

    def score_rows(self, rows: list[dict]) -> dict:
        """The dev metrics of these rows, computed as the run's evaluation computes them."""
        raise NotImplementedError

    def gold_slices(self, rows: list[dict]) -> tuple[str, list[str]]:
        """How the dev set is sliced by its gold answers: the grouping's name and each row's slice."""
        raise NotImplementedError

    def undefined_scores(self, rows: list[dict]) -> dict[str, str]:
        """The metrics that have no value on these rows, each with why in a few words: a slice of the dev set can
        hold nothing a metric counts (no gold entity: no recall), where the metric's own 0 would call a
        perfect model the weakest. {} here: every metric is defined on any rows."""
        return {}

    def why(self, row: dict, example: dict, answer: dict) -> dict:
        """What the page shows under "Why this answer?" beyond the row: {} here; a passage with
        both answers marked ({"question", "pieces"}) or the gold and predicted lines ({"gold",
        "predicted"}) where the row's own columns do not show it."""
        return {}


CUT_SAMPLE = 1000  # examples a cut note reads (spread over the set): a tokenizer's pass over them takes well under a second


def cut_note(examples: list[dict], tok, max_len: int) -> str | None:
    """One sentence where texts (and pairs, and NER's sentences of words) are longer than ``max_len`` WordPieces:
    the run reads only their start (120 articles of about 2,000 words were fine-tuned at 128 with no word of it;
    an NER sentence's words past it are answered O, and scored). None for tasks read otherwise (QA's windows, a
    choice's endings) and where nothing is cut."""
    words = bool(examples) and all(isinstance(ex.get("tokens"), list) for ex in examples[:50])
    if not examples or not (words or all(isinstance(ex.get("text"), str) for ex in examples[:50])):
        return None
    step = max(1, len(examples) // CUT_SAMPLE)
    picked = examples[::step][:CUT_SAMPLE]
    encoded = tok.encode_batch([" ".join(map(str, ex["tokens"])) if words else
                                ex["text"] if not ex.get("text_pair") else (ex["text"], ex["text_pair"])
                                for ex in picked])
    lengths = [len(e.input_ids) for e in encoded]
    long = [n for n in lengths if n > max_len]
    if not long:
        return None
    share = len(long) / len(lengths)
    kept = sum(max_len / n for n in long) / len(long)
    of = f"{len(long):,} of the {len(lengths):,}" + (" read" if len(lengths) < len(examples) else "")
    return (f"{of} examples ({share:.0%}) are longer than the {max_len} WordPieces a run reads, so it sees only "
            f"their start (on average {kept:.0%} of each"
            + ("; the words past it are answered O and scored as such" if words else "")
            + "); raise max_seq_length (at most the model's positions) if the end matters")
