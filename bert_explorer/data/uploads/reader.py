"""The entry point, :func:`read_task_file`, and the reader that picks the format."""
from __future__ import annotations

import json
import re
from itertools import islice
from pathlib import Path

from ...tasks.base import TaskType
from ...tasks.registry import format_task, task_type
from .core import DataError, DEFAULT_MAX_BYTES, MIN_EXAMPLES, TaskData
from .decode import _decode, _size
from .helpers import _looks_like_conll, iter_lines
from .json_formats import JsonFormats, loads
from .line_formats import LineFormats
from .parquet import is_parquet, parquet_tables
from .structured import StructuredRecords
from .tables import Tables


# ----- the formats --------------------------------------------------------------------------
# What read_task_file reads, by the names its readers give a file they read (``TaskData.format``), each
# with what such a file holds. The Fine-tune page's uploader lists these: its label named five of the
# eight, and a fastText file, a JSON array or a multi-label table read as if it were not accepted.
FORMATS: dict[str, str] = {
    "CSV": "a header row, then one example a row, comma, ';' or '|' separated: text and label; two texts and a "
           "label for pairs; a number for regression; labels joined by ';' for multi-label; question, context, "
           "answer_text and answer_start for QA; SWAG's sent1, sent2, ending0-3 and label for multiple choice",
    "TSV": "the same, tab-separated (as GLUE's files)",
    "JSONL": "one JSON object a line with the same fields; NER as tokens and tags lists, multi-label as a list",
    "JSON": "a JSON array of such objects (or {\"data\": [...]})",
    "Parquet": "the same columns, as Hugging Face datasets export them",
    "SQuAD JSON": "SQuAD v1.1 or v2.0 (data, paragraphs, context, qas)",
    "CoNLL": "NER: a word and its tag a line, a blank line between sentences",
    "fastText": "'__label__x text' lines (.txt), one label a line",
}


# the formats that hold one kind of task only (the tables and JSON hold any)
ONE_TASK_FORMATS = {"SQuAD JSON": "qa", "CoNLL": "ner", "fastText": "classification"}


def format_of(fmt: str) -> str:
    """The name in :data:`FORMATS` of a reader's format (a table separated by ';' or '|' is a CSV there)."""
    return "CSV" if fmt.endswith("-separated") else fmt


# ----- the entry point --------------------------------------------------------------------
def read_task_file(path: str | Path, task: TaskType | str | None = None, text_column: str | None = None,
                   text_pair_column: str | None = None, label_column: str | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> TaskData:
    """Read a fine-tuning data file; the task, format and columns are detected when not given
    (``task`` is a task type, or the name a person gave it, resolved here).

    Raises :class:`DataError` (a ``ValueError``) with a one-sentence explanation when the file
    cannot be used; repairs and skipped rows are listed in the result's ``notes``.
    """
    path = Path(path)
    name = path.name or str(path)
    if isinstance(task, str):
        try:
            task = task_type(task)
        except ValueError as e:
            raise DataError(str(e)) from None
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file; check the path and give the data file itself, not its folder.")
    size = path.stat().st_size
    if size > max_bytes:
        raise DataError(f"{name} is {_size(size)}, larger than the limit of {_size(max_bytes)} "
                        f"(max_bytes={max_bytes}); use a sample of it or raise max_bytes.")
    if size == 0:
        raise DataError(f"{name} is empty (0 bytes); use a file with a header line and at least "
                        f"{MIN_EXAMPLES} examples.")
    if is_parquet(path):  # a binary table: its rows become records, read with the CSV column rules
        data = read_parquet_split([path], name, task, text_column, text_pair_column, label_column, max_bytes)
    else:
        data = _read_text(path, name, task, text_column, text_pair_column, label_column)
    data.source = str(path)
    return data


def read_parquet_split(paths: list[Path], name: str, task: TaskType | str | None = None,
                       text_column: str | None = None, text_pair_column: str | None = None,
                       label_column: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> TaskData:
    """A table kept in one or several Parquet files (a Hub data set's split, ``name``), read as one
    upload."""
    if isinstance(task, str):
        try:
            task = task_type(task)
        except ValueError as e:
            raise DataError(str(e)) from None
    reader = _Reader(name, "", task, text_column, text_pair_column, label_column, [])
    reader.fmt, reader.unit = "Parquet", "row"
    data = reader.from_records(parquet_tables(paths, name, max_bytes), "Parquet")
    data.source, data.format = name, "Parquet"
    return data


def _read_text(path: Path, name: str, task, text_column, text_pair_column, label_column) -> TaskData:
    text, notes = _decode(path, name)
    if not text.strip():
        raise DataError(f"{name} holds only white space; use a file with a header line and at least "
                        f"{MIN_EXAMPLES} examples.")
    reader = _Reader(name, text, task, text_column, text_pair_column, label_column, notes)
    data = reader.read(path.suffix.lower())
    data.source, data.format = str(path), format_of(reader.fmt)
    return data


class _Reader(JsonFormats, LineFormats, Tables, StructuredRecords):
    """One file being read: its name and text, the caller's choices, and the notes so far."""

    def __init__(self, name, text, task, text_column, text_pair_column, label_column, notes):
        self.name, self.text, self.task = name, text, task
        self.text_column, self.text_pair_column, self.label_column = text_column, text_pair_column, label_column
        self.notes: list[str] = notes
        self.fmt = ""
        self.unit = "line"  # what the numbers in messages count: lines, or records of a JSON array

    def error(self, where: str | None, what: str) -> DataError:
        """``what`` either continues the sentence ("has 3 columns, ...") or starts its own clause."""
        subject = self.name + (f", {where}" if where else "")
        verb = what.split(" ", 1)[0] in ("is", "has", "holds", "needs", "does", "names", "looks", "must", "cannot")
        return DataError(f"{subject}{' ' if verb else ': '}{what}.")

    def task_of_format(self, fmt: str, described: str) -> TaskType:
        """The task a file format of its own holds (``described``: what the file looks like); a
        file in it read for another task is an error that says which task to ask for."""
        task = format_task(fmt)
        if self.task is not None and fmt not in self.task.formats:
            raise self.error(None, f"{described}, which is {task.name} data, but task={self.task.name!r} was asked "
                                   f"for; use task={task.name!r} or give a file for {self.task.name}")
        return task

    # ----- which format ----------------------------------------------------------------
    def read(self, ext: str) -> TaskData:
        first = re.search(r"\S", self.text)
        if first and first.group() in "{[":
            if ext in (".jsonl", ".ndjson", ".jsonlines"):
                return self.from_records(self.parse_jsonl(), "JSONL")
            try:
                obj = loads(self.text, self.error)
            except json.JSONDecodeError as e:
                if e.msg == "Extra data" and self._first_line_is_object():
                    return self.from_records(self.parse_jsonl(), "JSONL")
                raise self.error(None, f"is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}; fix the "
                                       f"file there (a missing comma, quote or bracket is the usual cause) and "
                                       f"try again") from e
            return self.from_json(obj)
        lines = [ln for ln in islice(iter_lines(self.text), 400) if ln.strip()]
        conll_task = self.task is not None and "conll" in self.task.formats
        if ext in (".conll", ".bio", ".iob", ".iob2", ".bioes", ".ner") or conll_task or _looks_like_conll(lines):
            if ext in (".csv",) and conll_task and not _looks_like_conll(lines):
                raise self.error(None, "is not in CoNLL columns, but NER data must be (one 'token TAG' per line, a "
                                       "blank line between sentences), or JSONL with 'tokens' and 'tags' lists; "
                                       "convert the file")
            return self.parse_conll()
        if lines and all(ln.lstrip().startswith("__label__") for ln in lines[:50]):
            return self.parse_fasttext()
        return self.from_records(self.parse_delimited(ext), "CSV")

    def _first_line_is_object(self) -> bool:
        first = next((ln for ln in iter_lines(self.text) if ln.strip()), "")
        try:
            return isinstance(json.loads(first), dict)
        except (json.JSONDecodeError, RecursionError):
            return False
