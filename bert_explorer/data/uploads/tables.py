"""Reading CSV/TSV tables (and JSONL records as tables): columns, and the sentence tasks."""
from __future__ import annotations

import csv
import difflib
import json
import math
import re
from collections import Counter
from itertools import islice

from ...tasks.base import EXTRA
from ...tasks.multilabel import SEPARATOR
from ...tasks.registry import sentence_task, table_task
from . import core
from .core import DataError, LABEL_NAMES, MIN_EXAMPLES, PAIR_NAMES, PAIRS, TaskData, TEXT_NAMES, _norm
from ...tasks.base import label_sort_key as _label_sort_key
from .helpers import _did_you_mean, _is_missing, _label_str, _lines_note, iter_lines, iter_raw_lines

# Where a user names a column: the same sentence reaches the Fine-tune page, the command line and Python
_BOXES = {"text_column": "Text column", "text_pair_column": "Second text column (pairs)", "label_column": "Label column"}


def _naming(param: str) -> str:
    """"(the Label column box; --label-column; label_column= in Python)"."""
    return f"(the {_BOXES[param]} box; --{param.replace('_', '-')}; {param}= in Python)"


def _missing_note(missing: dict[int, str], unit: str) -> str:
    """The note for rows whose label is a missing-value marker ({line: the marker})."""
    shown = ", ".join(repr(m) for m in dict.fromkeys(missing.values()))
    return _lines_note(f"a missing label ({shown}, which mark a missing value, not a class)", list(missing), unit)


class Tables:
    """CSV/TSV tables and JSONL records: their columns, and sentence tasks read from them (a mixin of
    the reader)."""

    def parse_delimited(self, ext: str) -> tuple[list[str], list[tuple[int, dict]]]:
        first = next(ln for ln in iter_lines(self.text) if ln.strip())
        if ext in (".tsv", ".tab"):
            delim = "\t"
        elif ext == ".csv" and "," in first:
            delim = ","
        else:  # the separator that the header uses: tab, comma, semicolon (European Excel), pipe
            delim = next((d for d in ("\t", ",", ";", "|") if d in first), ",")
        self.fmt = {"\t": "TSV", ",": "CSV"}.get(delim, f"{delim!r}-separated")
        csv.field_size_limit(max(csv.field_size_limit(), 100_000_000))
        quoting = csv.QUOTE_MINIMAL
        if delim == "\t" and not any(len(c) > 1 and c[0] == '"' and c[-1] == '"'
                                      for ln in islice(iter_lines(self.text), 2000) for c in ln.split("\t")):
            # Tab-separated files such as GLUE's quote nothing: a cell may start with a quote
            # ('"Hi," he said.') that is part of the text. Read quotes literally unless some cell
            # is wrapped in quotes the way spreadsheets write them.
            quoting = csv.QUOTE_NONE
        # lines are split as they are parsed, so that the row limit stops the reading where it is passed
        reader = csv.reader(iter_raw_lines(self.text), delimiter=delim, strict=True, quoting=quoting)
        header, rows, start, separators_only = None, [], 1, []
        try:
            for row in reader:
                line, start = start, reader.line_num + 1
                if not any(c.strip() for c in row):
                    if header is not None and len(row) > 1:  # a row of separators is a row, said; a blank line not
                        separators_only.append(line)
                    continue
                if header is None:
                    header, header_line = [c.strip() for c in row], line
                    while len(header) > 1 and not header[-1]:  # a spreadsheet's trailing separators
                        header.pop()
                    self._check_header(header, line)
                    continue
                if len(row) != len(header):
                    if len(row) > len(header) and not any(c.strip() for c in row[len(header):]):
                        row = row[:len(header)]  # trailing separators
                    else:
                        sep = {"\t": "a tab", ",": "a comma", ";": "a semicolon"}.get(delim, repr(delim))
                        fix = (f"put double quotes around cells that contain {sep}" if len(row) > len(header)
                               else "fill in the missing cells (an empty cell still needs its separator)")
                        raise self.error(f"line {line}", f"has {len(row)} field{'s' * (len(row) != 1)} but the "
                                         f"header on line {header_line} has {len(header)} ({', '.join(header)}); "
                                         f"{fix}")
                core.check_row(self.name, len(rows) + 1, line, (len(rows) + 1) * len(header))
                rows.append((line, dict(zip(header, row))))
        except csv.Error as e:
            raise self.error(f"line {start}", f"cannot be parsed as {self.fmt} ({e}); check the quotes on that "
                                              f"line: a cell that starts with a double quote must end with one, "
                                              f"and quotes inside a cell are written twice (\"\")") from e
        if header is None:
            raise self.error(None, "has no header line; the first line must name the columns, e.g. text,label")
        if separators_only:
            self.notes.append(_lines_note("every cell empty", separators_only, self.unit))
        return header, rows

    def _check_header(self, header: list[str], line: int) -> None:
        for i, h in enumerate(header):
            if not h:
                raise self.error(f"line {line}, column {i + 1}", "is an empty column name in the header; give every "
                                 "column a name (e.g. text, label)")
        dupes = [h for h, c in Counter(header).items() if c > 1]
        if dupes:
            raise self.error(f"line {line}", f"names the column {dupes[0]!r} twice in the header; rename one of them")

    # ----- records (CSV, TSV, JSONL, JSON list) -------------------------------------------
    def from_records(self, table, kind: str) -> TaskData:
        columns, rows = table
        if not rows:
            raise self.error(None, f"has a header but no examples; add at least {MIN_EXAMPLES} rows below it")
        self.columns, self.rows = columns, rows
        # the task a person named, else the first type that says the table holds its task
        task = self.task or table_task(self)
        return self.read_sentences() if task is None else getattr(self, "read_" + task.table_reader)(task)

    # ----- what the task types ask of a table (TaskType.reads) -------------------------------
    def column(self, names) -> str | None:
        """The table's column for the first of ``names`` it has (ignoring case and separators)."""
        return self._col(names)

    def ending_columns(self) -> list[str]:
        """The numbered answer columns (``ending0``, ``choice1``, ...), in order."""
        return self._ending_columns(self.columns)

    def choice_label_column(self) -> str | None:
        return self._mc_label_col(required=False)

    def label_set_column(self) -> str | None:
        return self._multi_label_column()

    def _where(self, line: int, column: str | None = None) -> str:
        loc = f"{self.unit} {line}"
        return f"{loc}, column {column!r}" if column else loc

    def _col(self, names) -> str | None:
        by_norm = {}
        for c in self.columns:
            by_norm.setdefault(_norm(c), c)
        return next((by_norm[_norm(n)] for n in names if _norm(n) in by_norm), None)

    def _resolve(self, given: str | None, role: str, param: str) -> str | None:
        """The caller's column name, matched exactly or ignoring case and separators."""
        if given is None:
            return None
        if given in self.columns:
            return given
        match = self._col([given])
        if match is not None:
            return match
        raise self.error(None, f"has no column {given!r} for the {role}{_did_you_mean(given, self.columns)}: its "
                               f"columns are {', '.join(map(repr, self.columns))}, so choose one of those names "
                               f"{_naming(param)}")

    def _header_hint(self) -> str:
        # a first line of data read as the header: a name that is long, a number, a sentence of four words or more,
        # or a value its own column holds further down ("negative" over a column of negative / positive)
        values = {c: {str(rec.get(c, "")).strip() for _, rec in self.rows[:200]} for c in self.columns}
        looks_like_data = self.fmt in ("CSV", "TSV") and any(
            len(c) > 40 or re.fullmatch(r"-?\d+(\.\d+)?", c) or len(c.split()) >= 4 or (c.strip() and c.strip() in
                                                                                    values[c]) for c in self.columns)
        return (" (the first line looks like data, not a header: add a header line such as text,label)"
                if looks_like_data else "")

    def _missing(self, role: str, known, param: str, used=()) -> DataError:
        """No column for ``role``: list the columns and suggest the closest known name (difflib)."""
        by_norm = {_norm(k): k for k in reversed(known)}
        cols = ", ".join(map(repr, self.columns))
        for c in self.columns:
            close = difflib.get_close_matches(_norm(c), list(by_norm), n=1, cutoff=0.75)
            if c not in used and close and _norm(c) not in by_norm:
                return self.error(None, f"has no {role} column: its columns are {cols}, and {c!r} looks like a "
                                        f"misspelling of {by_norm[close[0]]!r}, so rename it to {by_norm[close[0]]!r} "
                                        f"or choose the column that holds the {role} {_naming(param)}")
        have = f"its columns are {cols}" if cols else "its records hold no fields"  # (a list of {}: "are , so")
        return self.error(None, f"has no {role} column{self._header_hint()}: {have}, so name the "
                                f"column {known[0]!r} or choose the column that holds the {role} {_naming(param)}")

    def _cell(self, record: dict, col: str | None):
        v = record.get(col) if col is not None else None
        return v.strip() if isinstance(v, str) else v

    # ----- sentence (pair) classification and regression ---------------------------------
    def _sentence_columns(self, task):
        """(task, text column, second text column or None, label column) of a sentence (pair)
        table: the caller's names, else the known names, else what the cells look like; what was
        guessed is said in the notes."""
        may_pair = task is None or "text_pair" in task.fields  # classification reads one text
        text_col = self._resolve(self.text_column, "text", "text_column")
        pair_col = self._resolve(self.text_pair_column, "second text", "text_pair_column")
        label_col = self._resolve(self.label_column, "labels", "label_column")
        auto = []
        if label_col is None:
            label_col = self._col([n for n in LABEL_NAMES if self._col([n]) not in (text_col, pair_col)])
        if text_col is None and pair_col is None and may_pair:
            for a, b in PAIRS:
                ca, cb = self._col([a]), (self._col([b]) if b else None)
                if ca and cb and label_col not in (ca, cb):
                    text_col, pair_col = ca, cb
                    break
        if text_col is None:
            text_col = self._col([n for n in TEXT_NAMES if self._col([n]) not in (label_col, pair_col)])
        if pair_col is None and may_pair and text_col is not None:
            pair_col = self._col([n for n in PAIR_NAMES if self._col([n]) not in (label_col, text_col)])
        rest = [c for c in self.columns if c not in (text_col, pair_col, label_col)]
        if label_col is None and text_col is not None and len(rest) == 1 and not self._all_unique_words(rest[0]):
            label_col = rest[0]
            auto.append(f"took column {label_col!r} as the label (the only other column)")
        elif label_col is None:
            raise self._missing("label", LABEL_NAMES, "label_column", used=(text_col, pair_col))
        rest = [c for c in rest if c != label_col]
        if text_col is None:
            texty = [c for c in rest if self._mean_len(c) > 0]
            if not texty:
                raise self._missing("text", TEXT_NAMES, "text_column", used=(label_col, pair_col))
            text_col = max(texty, key=self._mean_len)
            auto.append(f"took column {text_col!r} as the text (the column with the longest cells; "
                        f"pass text_column to choose another)")
        if task is not None and task.pair_required and pair_col is None:
            raise self._missing("second text", PAIR_NAMES, "text_pair_column", used=(text_col, label_col))
        if task is None:
            values = self._is_regression(label_col)
            task = sentence_task(values=values, pair=pair_col is not None)
            auto.append(f"detected task {task.name!r}" + self._why_values(label_col, values))
        self.notes.append(f"{self.fmt}: text column {text_col!r}"
                          + (f", second text column {pair_col!r}" if pair_col else "")
                          + f", label column {label_col!r}" + ("; " + "; ".join(auto) if auto else ""))
        return task, text_col, pair_col, label_col

    def read_sentences(self, task=None) -> TaskData:
        task, text_col, pair_col, label_col = self._sentence_columns(task)
        examples, empty_text, empty_label, missing, no_key = [], [], [], {}, {}
        used = (text_col, pair_col, label_col)
        for line, rec in self.rows:
            text, label = self._cell(rec, text_col), self._cell(rec, label_col)
            pair = self._cell(rec, pair_col) if pair_col else None
            if not isinstance(text, str) or not text or (pair_col and (not isinstance(pair, str) or not pair)):
                if text is not None and not isinstance(text, str):
                    kind = "a number" if isinstance(text, (int, float)) else f"a JSON {type(text).__name__}"
                    raise self.error(self._where(line, text_col), f"holds {kind}, not text; write the text as a "
                                     f"string")
                if text_col not in rec or (pair_col and pair_col not in rec):  # (a JSON line of other keys)
                    no_key.setdefault(", ".join(repr(k) for k in list(rec)[:4]), []).append(line)
                else:
                    empty_text.append(line)
                continue
            if label is None or label == "":
                empty_label.append(line)
                continue
            if _is_missing(label):  # NaN, None, null: how pandas, Python and JSON write "no label"
                missing[line] = str(label)
                continue
            if not task.labelled:  # a value (STS-B's similarity)
                try:
                    value = float(label)
                    if not math.isfinite(value):
                        raise ValueError
                except (TypeError, ValueError):
                    raise self.error(self._where(line, label_col), f"{label!r} is not a number but regression "
                                     f"needs numeric labels; correct the cell or use task='classification'") from None
                examples.append(self._with_extra({"text": text, "text_pair": pair, "label": value}, rec, used))
            else:
                if isinstance(label, (list, dict)):
                    raise self.error(self._where(line, label_col), f"holds a {type(label).__name__}; give one "
                                     f"label per example, or task='multi-label' for a set of labels")
                ex = {k: v for k, v in (("text", text), ("text_pair", pair), ("label", _label_str(label)))
                      if k in task.fields}
                examples.append(self._with_extra(ex, rec, used))
        if empty_text:
            self.notes.append(_lines_note("an empty text cell", empty_text, self.unit))
        for keys, lines in no_key.items():  # said apart: "an empty text cell" was said of full rows of other keys
            wanted = repr(text_col) + (f" and {pair_col!r}" if pair_col else "")
            self.notes.append(_lines_note(f"no {wanted} (they hold {keys}; pass text_column to read another)",
                                          lines, self.unit))
        if empty_label:
            self.notes.append(_lines_note("an empty label cell", empty_label, self.unit))
        if missing:
            self.notes.append(_missing_note(missing, self.unit))
        if not task.labelled:
            self._check_count(examples, "examples")
            if len({ex["label"] for ex in examples}) < 2:
                raise self.error(None, f"column {label_col!r} has the same value in every row, so there is "
                                       f"nothing to learn; check the label column")
            return TaskData(task, examples, None, "", self.notes)
        return self._finish_classification(task, examples, label_col)

    # ----- multi-label classification ------------------------------------------------------
    def _multi_label_column(self) -> str | None:
        """The column of label sets, where one holds them: lists (JSON lines, Parquet) or cells
        joined by ';' in a column named like labels."""
        col = self._col(["labels", "label", "tags", "categories", "topics", "genres", "label_list"])
        if col is None:
            return None
        cells = [self._cell(rec, col) for _, rec in self.rows[:1000]]
        if any(_as_list(v) is not None for v in cells):
            return col
        texts = [v for v in cells if isinstance(v, str) and v]
        joined = [v for v in texts if SEPARATOR in v]
        return col if joined and sum(map(len, texts)) / len(texts) < 60 else None

    def read_multi_label(self, task) -> TaskData:
        label_col = self._resolve(self.label_column, "labels", "label_column") or self._multi_label_column() or \
            self._col(["labels", "label"])
        if label_col is None:
            raise self._missing("labels", ("labels",), "label_column")
        text_col = self._resolve(self.text_column, "text", "text_column") or \
            self._col([n for n in TEXT_NAMES if self._col([n]) != label_col])
        if text_col is None:
            raise self._missing("text", TEXT_NAMES, "text_column", used=(label_col,))
        self.notes.append(f"read as multi-label classification: text column {text_col!r}, label sets in column "
                          f"{label_col!r} (a list, or labels joined by '{SEPARATOR}')")
        examples, empty_text, empty_labels, counts = [], [], [], Counter()
        for line, rec in self.rows:
            text, cell = self._cell(rec, text_col), self._cell(rec, label_col)
            if not isinstance(text, str) or not text:
                empty_text.append(line)
                continue
            listed = _as_list(cell)
            if listed is None:
                if isinstance(cell, str) and not cell.strip():
                    listed = []  # an empty cell: none of the labels applies (the empty set)
                elif cell is None or _is_missing(cell):
                    empty_labels.append(line)
                    continue
                else:
                    listed = str(cell).split(SEPARATOR)
            labels = list(dict.fromkeys(_label_str(x) for x in listed if not _is_missing(x) and _label_str(x)))
            if any(len(x) > core.MAX_LABEL_CHARS for x in labels):
                raise self.error(self._where(line, label_col), f"holds a label of more than {core.MAX_LABEL_CHARS} "
                                 f"characters; separate the labels with '{SEPARATOR}' or check the column")
            counts.update(labels)
            examples.append(self._with_extra({"text": text, "labels": labels}, rec, (text_col, label_col)))
        if empty_text:
            self.notes.append(_lines_note("an empty text", empty_text, self.unit))
        if empty_labels:
            self.notes.append(_lines_note("a missing label set (NaN, None or null; an empty cell means no label)",
                                          empty_labels, self.unit))
        self._check_count(examples, "examples")
        if none := sum(1 for ex in examples if not ex["labels"]):
            self.notes.append(f"{none:,} of {len(examples):,} examples have no label (none of them applies)")
        if len(counts) < 2:
            raise self.error(None, f"uses {len(counts)} distinct label(s) in column {label_col!r}; multi-label "
                                   f"classification needs at least two, so add some or check the column")
        if len(counts) > core.MAX_CLASSES:
            raise self.error(None, f"has {len(counts):,} distinct labels in column {label_col!r}, more than the "
                                   f"{core.MAX_CLASSES:,} a classifier may have; merge rare labels or check the column")
        rare = sorted((lab for lab, c in counts.items() if c < 2), key=_label_sort_key)
        if rare:
            self.notes.append(f"{len(rare)} label(s) occur once ({', '.join(map(repr, rare[:5]))}"
                              f"{', ...' if len(rare) > 5 else ''}): too few to learn; add examples or merge labels")
        return TaskData(task, examples, sorted(counts, key=_label_sort_key), "", self.notes)

    def _with_extra(self, example: dict, record: dict, used) -> dict:
        """``example`` with the record's other columns (an id, a source, a date) under ``extra``:
        the model never reads them, but the dev set can be sliced by them after fine-tuning."""
        extra = {c: (v if v is None or isinstance(v, (str, int, float, bool)) else json.dumps(v))
                 for c, v in record.items() if c not in used}
        return {**example, EXTRA: extra} if extra else example

    def _all_unique_words(self, col: str) -> bool:
        """True for an id-like column: every value different and not a number (so not a label)."""
        values = [self._cell(r, col) for _, r in self.rows]
        if len(values) < MIN_EXAMPLES or len(set(map(str, values))) < len(values):
            return False
        try:
            [float(v) for v in values]
            return False
        except (TypeError, ValueError):
            return True

    def _mean_len(self, col: str) -> float:
        vals = [v for _, r in self.rows[:500] if isinstance(v := r.get(col), str) and v.strip()]
        if not vals or all(re.fullmatch(r"\s*-?[\d.]+\s*", v) for v in vals):
            return 0.0
        return sum(map(len, vals)) / len(vals)

    def _why_values(self, label_col: str, values: bool) -> str:
        """Why the labels were read as scores or as classes, where they are numbers (25 class ids 0-24 were
        taken for scores without a word)."""
        numbers = set()
        for _, rec in self.rows:
            v = self._cell(rec, label_col)
            if _is_missing(v):
                continue
            try:
                numbers.add(float(v))
            except (TypeError, ValueError):
                return ""  # words: classes, as anyone reads them
        if values:
            return (f" ({len(numbers):,} distinct numbers in {label_col!r}, read as scores; choose the task "
                    "classification if they are class ids)")
        return (f" ({len(numbers):,} distinct numbers in {label_col!r}, read as classes; choose the task regression "
                "if they are scores)") if numbers else ""

    def _one_class_a_number(self, examples: list[dict]) -> None:
        """Labels that are all numbers: one class a number, under its first spelling ("2" and "2.0" were two
        classes, and "inf" and "Infinity" too, where the note counted the distinct numbers), said in a note."""
        spelled: dict[float, str] = {}
        merged: dict[str, set] = {}
        for ex in examples:
            try:
                number = float(ex["label"])
            except (TypeError, ValueError):
                return  # words: each spelling is its own class, as anyone reads them
            first = spelled.setdefault(number, ex["label"])
            if first != ex["label"]:
                merged.setdefault(first, set()).add(ex["label"])
        if not merged:
            return
        for ex in examples:
            ex["label"] = spelled[float(ex["label"])]
        self.notes.append("the labels " + "; ".join(f"{' and '.join(map(repr, [first, *sorted(others)]))} are one "
                                                     f"number, read as one class, {first!r}"
                                                     for first, others in merged.items()))

    def _is_regression(self, label_col: str) -> bool:
        values = []
        for _, rec in self.rows:
            v = self._cell(rec, label_col)
            if _is_missing(v):
                continue
            if isinstance(v, bool):
                return False
            try:
                values.append(float(v))
            except (TypeError, ValueError):
                return False
        if not values:
            return False
        distinct = len(set(values))
        fractional = any(not x.is_integer() for x in values)
        return (fractional and distinct > 5) or distinct > 20

    def _finish_classification(self, task, examples: list[dict], label_col: str) -> TaskData:
        self._check_count(examples, "examples")
        self._one_class_a_number(examples)
        counts = Counter(ex["label"] for ex in examples)
        if len(counts) < 2:
            only = next(iter(counts))
            raise self.error(None, f"has only one class: all {len(examples)} examples have the label {only!r} in "
                                   f"column {label_col!r}; a classifier needs examples of at least two classes, so "
                                   f"add some or check that the right column is the label")
        if len(counts) > core.MAX_CLASSES:
            raise self.error(None, f"has {len(counts):,} classes in column {label_col!r}, more than the "
                                   f"{core.MAX_CLASSES:,} a classifier may have; check that the right column is the "
                                   f"label, merge rare classes, or use task='regression' if the labels are scores")
        if len(counts) > 20 and len(counts) > 0.5 * len(examples):
            # nearly a class per example: no classifier learns that, and it is what a swapped text and label
            # column give (an 80-class model of one review each was trained, with notes only)
            raise self.error(None, f"has {len(counts):,} classes in column {label_col!r} for {len(examples):,} "
                                   f"examples, nearly one each, which no classifier can learn; check that the right "
                                   f"column is the label (the text may be in it), or use task='regression' if the "
                                   f"labels are scores")
        singles = sorted((lab for lab, c in counts.items() if c == 1), key=_label_sort_key)
        if singles:
            self.notes.append(f"{len(singles)} {'class has' if len(singles) == 1 else 'classes have'} a single "
                              f"example ({', '.join(map(repr, singles[:5]))}{', ...' if len(singles) > 5 else ''}); "
                              f"it cannot be both learnt and evaluated: add examples or merge classes")
        if len(examples) < core.MIN_PER_CLASS * len(counts):
            scores = len(counts) > max(50, len(examples) // 2)  # nearly one label per example
            self.notes.append(f"{len(counts):,} classes for {len(examples):,} examples, "
                              f"{len(examples) / len(counts):.1f} per class on average: fewer than "
                              f"{core.MIN_PER_CLASS} training examples per class are too few to learn a class (a few "
                              f"dozen is better), so add examples, merge rare classes or check that the label column "
                              f"is right" + (", or use task='regression' if the labels are scores" if scores else ""))
        return TaskData(task, examples, sorted(counts, key=_label_sort_key), "", self.notes)

    def _check_count(self, examples: list, what: str) -> None:
        if len(examples) < MIN_EXAMPLES:
            skipped = [n for n in self.notes if n.startswith("skipped")]
            why = f" after skipping {'; '.join(n.removeprefix('skipped ') for n in skipped)}" if skipped else ""
            what = what.removesuffix("s") if len(examples) == 1 else what  # ("only 1 usable example")
            raise self.error(None, f"has only {len(examples)} usable {what}{why}, but fine-tuning needs at least "
                                   f"{MIN_EXAMPLES} (a few hundred is better); add more examples")

    # ----- multiple choice -------------------------------------------------------------


def _as_list(value) -> list | None:
    """A cell that holds a list of labels (JSON lines give a list, Parquet an array), else None."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        out = value.tolist()
        return out if isinstance(out, list) else None
    return None
