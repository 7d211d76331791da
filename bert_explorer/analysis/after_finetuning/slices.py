"""Where the fine-tuned model does well and where it fails: the dev score on slices of the dev set.

One number for the whole dev set hides where the errors are. Here the run's main metric (the one
it is judged by: accuracy, Pearson r, entity F1, SQuAD F1) is computed again on parts of the dev
set: by gold answer, by input length in WordPieces (an input longer than the run's maximum length
was cut, so the model never read its end; a QA passage is read in overlapping windows instead), and
by any other column the uploaded file had (a source, a date, an annotator). Every slice gives its count,
and a slice too small for its score to mean much says so in the project's small-data sentence
(``tasks.metrics.small_dev_warning``).

The scores are computed from the rows of ``predictions.rows_of`` the way the run's evaluation
computes them (``tasks/metrics.py``, ``tasks/squad.py``), so the whole dev set scores what the run
reported. Accuracy, exact match, SQuAD F1 and the mean squared error are means over examples: the
slices of one grouping recombine into the whole, weighted by their counts. Entity F1 recombines
from its counts (correct, predicted and gold entities), Pearson r does not recombine at all. A metric with
nothing to count in a slice (Pearson r inside one gold value, entity recall and F1 in sentences with no
entity: ``TaskType.undefined_scores``) is None there: no bar, "not defined" and why on the page.
"""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from ...tasks.base import TaskType
from ...tasks.metrics import quantile_bins, small_dev_warning

# Input lengths in WordPieces: the bins' upper ends (BERT reads at most 512).
LENGTH_EDGES = (16, 32, 64, 128, 256, 512)
# An extra column with more distinct values than this (and not numbers) is not sliced: each slice
# would hold a handful of examples.
MAX_GROUPS = 20


def score(task: TaskType, rows: list[dict]) -> dict:
    """The task's dev metrics of these rows, computed as the run's evaluation computes them."""
    return task.score_rows(rows)


def length_bin(pieces: int, max_seq_length: int, windows: bool = False) -> str:
    """The WordPiece-length bin of an input: "≤ 32", "33–64", ..., with "(cut at N)" where the run's
    maximum length cut every input of the bin, "(partly cut at N)" where it cut some (an input of 120 pieces
    at a maximum of 100 sat in a plain "65–128"). ``windows``: the task reads a long input in overlapping
    windows of N (QA), nothing is cut: "(in windows of N)", "(partly in windows of N)"."""
    lo = 0
    for hi in LENGTH_EDGES:
        if pieces <= hi:
            break
        lo = hi
    else:
        hi = None
    name = f"≤ {hi}" if lo == 0 else (f"{lo + 1}–{hi}" if hi else f"> {lo}")
    how = f"in windows of {max_seq_length}" if windows else f"cut at {max_seq_length}"
    if lo >= max_seq_length:
        return name + f" ({how})"
    return name + (f" (partly {how})" if hi is None or hi > max_seq_length else "")


def _numbers(values) -> list[float] | None:
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        return None
    return out if all(np.isfinite(out)) else None


def _groupings(task: TaskType, rows: list[dict], max_seq_length: int, extra: list[str]) -> dict[str, list[str]]:
    """For each way of slicing, each row's slice name."""
    name, gold = task.gold_slices(rows)
    out = {name: gold}
    out["length (WordPieces)"] = [length_bin(r["pieces"], max_seq_length, task.reads_in_windows) for r in rows]
    for col in extra:
        values = [r.get(col) for r in rows]
        numbers = _numbers(values)
        distinct = len({str(v) for v in values})
        if distinct == len(rows) > 1 and (numbers is None or _an_id(col, numbers)):
            continue  # an id: a slice per example (a 12-example dev set gave 12 slices of one)
        if distinct <= MAX_GROUPS:
            out[_column(col)] = ["(empty)" if v in (None, "") else str(v) for v in values]
        elif numbers is not None:
            out[_column(col)] = quantile_bins(numbers)
        # else: an id or free text, a slice per example would say nothing
    return out


def _an_id(name: str, numbers: list[float]) -> bool:
    """Does a column of distinct numbers name its rows rather than measure them (an "id", or whole numbers)?"""
    return bool(re.search(r"(^|[_ -])(id|idx|index|key|uuid|no|number)$", name.strip().lower())) or \
        all(float(x).is_integer() for x in numbers)


def _column(key: str) -> str:
    return key if key.startswith("column ") else f"column {key}"


def _order(name: str):
    head = name.lstrip("≤[> ").split("–")[0].split(",")[0].split(" ")[0]
    try:
        return (0, float(head), name)
    except ValueError:
        return (1, 0.0, name)


def slices(task: TaskType, rows: list[dict], max_seq_length: int, extra: list[str] = ()) -> list[dict]:
    """The dev score by slice: one dict per slice with ``by`` (the grouping), ``slice``, ``count``,
    the task's metrics and ``small`` (the small-data sentence, or None)."""
    out = []
    for by, names in _groupings(task, rows, max_seq_length, list(extra)).items():
        groups: dict[str, list[dict]] = defaultdict(list)
        for name, r in zip(names, rows):
            groups[name].append(r)
        for name in sorted(groups, key=_order):
            part = groups[name]
            out.append({"by": by, "slice": name, "count": len(part), **_defined(task, score(task, part), part),
                        # (a value's slice said "one example more or less right", of a correlation)
                        "small": small_dev_warning(len(part), f"The slice {by} = {name}",
                                                   counted=task.right_or_wrong)})
    return out


def _defined(task: TaskType, scores: dict, rows: list[dict]) -> dict:
    """A slice's scores with each metric that has no value on its rows left out (None), and why
    (``not_defined``: metric -> a few words): a correlation inside one gold value, an entity F1 in sentences
    with no entity. The metric's own 0 there drew a bar of 0 and called the slice the weakest."""
    why = {k: v for k, v in task.undefined_scores(rows).items() if k in scores}
    return {**scores, **dict.fromkeys(why), "not_defined": why}
