"""The dev set after fine-tuning, example by example (paper, Section 4).

A fine-tuning run reports one dev score; this module opens it up: every dev example with its gold
answer, the model's answer, the model's probability of each, and whether it was right. The answers
are those of the saved model (``train.predict.Predictor``), kept in the run as
``dev_predictions.json`` when training ends. A run made before that file existed has them computed
on its first view (its dev set is rebuilt from its settings: the same file or built-in set, the
same seeded split) and stored, unless the app may not write (classroom mode): then they are
computed for the view and not kept, and the page says so.

One row per example, whatever the task type, with the same column names:

* ``gold``, ``predicted``: the answers as a person reads them (a label, a value, the entities of a
  sentence, an answer span, the chosen ending);
* ``p_gold``, ``p_predicted``: the model's probability of the gold answer and of its own, where its
  head gives a probability of a whole answer (labels, choices, and tag sequences: the product of
  each word's probability); None for values and spans;
* ``correct``: the answer is exactly right (None for values: they are never exactly right);
* ``pieces``: the input's length in WordPieces before it is cut at the run's maximum length;
* the texts of the input, and the upload's other columns under their own names.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from ...tasks.base import EXTRA, TaskType
from ...tasks.registry import task_type
from ...train.finetune import FinetuneConfig, read_data
from ...fingerprint import fingerprint, same_files
from ...train.predict import PREDICTIONS_FILE, PREDICTIONS_VERSION, Predictor, store_dev_predictions
from ...runs.run import Run



@dataclass
class DevPredictions:
    """A run's dev set answered example by example."""

    task: TaskType
    label_names: list[str] | None
    record: dict          # what dev_predictions.json holds
    rows: list[dict]      # one per example (see the module's docstring)
    source: str           # one sentence: when they were computed and whether the run keeps them
    stored: bool          # the run folder holds them


def dev_examples(run: Run) -> list[dict]:
    """The run's dev set, rebuilt from its settings (the same data and seeded split as in training).
    A ValueError says in one sentence why it cannot be (the data file is gone, a package is missing)."""
    cfg = {k: v for k, v in run.config().items() if k != "kind"}
    try:
        with warnings.catch_warnings():  # a setting of another version: read_data needs only the data ones
            warnings.simplefilter("ignore")
            config = FinetuneConfig.from_dict(cfg, strict=False)
        return read_data(config)[1].examples
    except (OSError, ValueError) as e:
        raise ValueError(f"The dev set of {run.name} cannot be rebuilt from its settings ({e}); its "
                         f"predictions were not kept at the end of training, so they cannot be shown.") from None


def _stored(run: Run) -> dict | None:
    path = run.path / PREDICTIONS_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("version") != PREDICTIONS_VERSION:
        return None
    if not same_files(record.get("weights"), fingerprint(run.path)):
        return None  # the model was written again since: its answers are not these
    return record


def load_predictions(run_dir: str | Path, store: bool = True, predictor: Predictor | None = None) -> DevPredictions:
    """The run's dev predictions: read from the run, or computed now by its saved model and, when
    ``store``, kept in the run for the next view. ``predictor`` is the run's model when the caller
    has it loaded already (a page's cache)."""
    run = Run(run_dir)
    if not (run.path / "model" / "config.json").is_file() and not (run.path / "feature_head").is_dir():
        kind = run.config().get("kind") if run.is_run() else None
        if kind not in (None, "finetune"):
            what = {"pretrain": "a pre-training", "ablate": "an ablation"}.get(kind, f"a {kind}")
            raise ValueError(f"{run.name} is {what} run, not a fine-tuning, so it has no dev set to answer: give a "
                             f"fine-tuning run's folder.")
        state = run.status().get("state") if run.is_run() else None
        why = {"running": "it is still training", "starting": "it is still starting",
               "crashed": "its process ended before the end of training", "failed": "it failed before the end of "
               "training"}.get(state, "an ablation cell keeps only its score")  # (a killed run was called a cell)
        raise ValueError(f"{run.name} kept no fine-tuned model ({why}), so its dev set cannot be answered example by "
                         f"example.")
    record = _stored(run)
    stored = record is not None
    if record is None:
        predictor = predictor or Predictor(run.path)
        record = predictor.dev_predictions(dev_examples(run), "on first view")
        if store:
            store_dev_predictions(run.path, record)
            stored = True
    when = record.get("computed", "earlier")
    if record.get("computed") == "on first view" and not stored:
        source = ("Computed now by the run's saved model and not kept: in classroom mode the app writes nothing, "
                  "so they are computed again on the next visit.")
    else:
        source = f"Computed {when} by the run's saved model and kept in the run ({PREDICTIONS_FILE})."
    task = task_type(record["task"])
    return DevPredictions(task, record.get("label_names"), record, rows_of(task, record), source, stored)


# The names of a row's own columns; an upload's column of the same name is shown as "column NAME".
ROW_COLUMNS = frozenset({"example", "text", "text_pair", "choices", "gold", "predicted", "correct", "error",
                         "gold_entities", "predicted_entities", "correct_entities", "exact_match", "f1", "span_score",
                         "null_score", "gold_choice", "p_gold", "p_predicted", "pieces"})


def extra_key(column: str) -> str:
    """The row's name for an uploaded column the model did not read."""
    return f"column {column}" if column in ROW_COLUMNS else column


def extra_columns(record: dict) -> list[str]:
    """The upload's other columns, as the rows name them, in the file's order."""
    seen = {}
    for ex in record["examples"]:
        for k in ex.get(EXTRA) or {}:
            seen.setdefault(extra_key(k), None)
    return list(seen)


# ----- one row per example --------------------------------------------------------------------
def rows_of(task: TaskType, record: dict) -> list[dict]:
    """One plain row per dev example (see the module's docstring)."""
    rows = []
    for i, (ex, ans, prob, pieces) in enumerate(zip(record["examples"], record["answers"], record["probabilities"],
                                                    record["pieces"])):
        row = {"example": i}
        row.update(task.row(ex, ans))
        row["p_gold"] = None if prob is None else prob["gold"]
        row["p_predicted"] = None if prob is None else prob["predicted"]
        row["pieces"] = pieces
        for k, v in (ex.get(EXTRA) or {}).items():  # the upload's other columns, under their own names
            row[extra_key(k)] = v
        rows.append(row)
    return rows


# ----- sorting and filtering --------------------------------------------------------------------
VIEWS = {
    "all": "every example, in dev order",
    "wrong": "the wrong answers only",
    "confident mistakes": "the wrong answers, the most confident first",
    "unsure right answers": "the right answers, the least confident first",
}


def view(rows: list[dict], which: str = "all", gold: str | None = None) -> list[dict]:
    """Rows for one of :data:`VIEWS`, optionally only those whose gold answer is ``gold``.
    Confidence is the model's probability of its own answer (``p_predicted``); for answers with no
    probability (values, spans) "confident mistakes" orders by the size of the error or by the
    span's margin over "no answer"."""
    if which not in VIEWS:
        raise ValueError(f"unknown view {which!r}; choose one of {', '.join(VIEWS)}")
    out = [r for r in rows if gold is None or str(r["gold"]) == str(gold)]
    if which == "all":
        return out
    if which in ("wrong", "confident mistakes"):
        if out and out[0].get("correct") is None:  # values: the largest errors count as the mistakes
            return sorted(out, key=lambda r: -abs(r["error"]))
        out = [r for r in out if r["correct"] is False]
    else:
        if out and out[0].get("correct") is None:
            return sorted(out, key=lambda r: abs(r["error"]))
        out = [r for r in out if r["correct"] is True]
    if which == "wrong":
        return out
    most_first = which == "confident mistakes"
    return sorted(out, key=lambda r: _confidence(r) * (-1 if most_first else 1))


def _confidence(row: dict) -> float:
    if row.get("p_predicted") is not None:
        return float(row["p_predicted"])
    if row.get("span_score") is not None and row.get("null_score") is not None:
        return float(row["span_score"] - row["null_score"])
    return 0.0
