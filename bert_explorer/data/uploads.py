"""Reading fine-tuning data from files that people upload, and saying precisely what is wrong.

One function, :func:`read_task_file`, reads every format the explorer accepts and returns a
:class:`TaskData`: the task, the examples as plain dicts, the label names, and notes about
anything it repaired or skipped. Formats (detected from the content, the extension helping):

* **CSV / TSV** with a header row (``;`` and ``|`` separated files too). Sentence
  classification, sentence-pair classification and regression (GLUE-style: ``text,label``,
  ``sentence1,sentence2,label``, ``premise,hypothesis,label`` ...), SWAG-style multiple choice
  (``sent1,sent2,ending0..ending3,label`` or ``context,choice0..N,label``) and flat QA
  (``question,context,answer_text,answer_start``).
* **JSONL** (one JSON object a line) with the same column names; NER as
  ``{"tokens": [...], "tags": [...]}``, multiple choice as ``{"context", "choices": [...], "label"}``,
  QA with ``answers`` as SQuAD dicts or Hugging Face's ``{"text": [...], "answer_start": [...]}``.
* **SQuAD JSON**, v1.1 and v2.0 (``{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}``);
  a ``.json`` file holding a list of records is read like JSONL.
* **CoNLL columns** for NER: one token a line, the token first and its tag last, tab or space
  separated, a blank line between sentences, ``-DOCSTART-`` lines skipped.
* **fastText** lines: ``__label__pos the film is great``.

Policies (each one is a note in ``TaskData.notes`` or a :class:`DataError`):

* Encoding: UTF-8 (a byte-order mark is dropped); a file that is not valid UTF-8 is read as
  Latin-1 and a note says so (every byte is a Latin-1 character, so this never fails, but
  accents may come out wrong). UTF-16 with a byte-order mark is decoded too.
* Empty cells: a row whose text or label cell is empty is **skipped** and a note gives the
  line numbers. We skip rather than refuse because spreadsheets often end with half-filled
  rows; if so many rows are skipped that fewer than :data:`MIN_EXAMPLES` remain, it is an error.
* NER tags must be BIO. IOB1 (an entity starting with ``I-``), IOBES and BILOU tags are
  converted to BIO with a note; anything else (``PER``, ``B_PER``) is an error.
* SQuAD answers whose ``answer_start`` does not point at the answer text are repaired by
  searching the context (the occurrence nearest the given offset) with a note; an answer
  text that does not occur in its context at all is an error.
* Errors: empty, binary, too large (``max_bytes``), malformed JSON/CSV (with line and
  column), ragged rows or CoNLL lines, missing or misnamed columns (the available columns are
  listed and the closest name is suggested), a single class, fewer than ``MIN_EXAMPLES``.

Every :class:`DataError` message is one sentence: which file, where (line, column, question
id), what is wrong, and what to do.
"""
from __future__ import annotations

import csv
import difflib
import io
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .corpora import read_text_file
from .task_types import TASKS

MIN_EXAMPLES = 4
DEFAULT_MAX_BYTES = 200_000_000


class DataError(ValueError):
    """A data file cannot be used; the message says which file, where, what and what to do."""


@dataclass
class TaskData:
    """Examples of one task (the dict layout of each task is described in ``tasks.py``)."""

    task: str
    examples: list[dict]
    label_names: list[str] | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.examples)

    def label_counts(self) -> dict[str, int]:
        """How often each label (NER: each tag) occurs; empty for regression and QA."""
        if self.task in ("classification", "pair-classification"):
            return dict(Counter(str(ex["label"]) for ex in self.examples))
        if self.task == "ner":
            return dict(Counter(t for ex in self.examples for t in ex["tags"]))
        if self.task == "multiple-choice":
            return dict(Counter(str(ex["label"]) for ex in self.examples))
        return {}

    def summary(self) -> dict:
        out = {"task": self.task, "examples": len(self.examples), "source": self.source}
        if self.label_names:
            out["label_names"] = list(self.label_names)
        counts = self.label_counts()
        if counts:
            out["label_counts"] = counts
        if self.task == "qa":
            out["unanswerable"] = sum(bool(ex.get("is_impossible")) for ex in self.examples)
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


# ----- reading and decoding ----------------------------------------------------------------
_MAGIC = ((b"PK\x03\x04", "a ZIP archive, e.g. an Excel .xlsx workbook"),
          (b"\xd0\xcf\x11\xe0", "an old Excel .xls or Word .doc file"),
          (b"\x1f\x8b", "a gzip archive"), (b"BZh", "a bzip2 archive"), (b"%PDF", "a PDF document"),
          (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"7z\xbc\xaf", "a 7-Zip archive"),
          (b"PAR1", "a Parquet file"), (b"\x93NUMPY", "a NumPy array"), (b"\x80\x04", "a Python pickle"))
_EXPORT_HINT = "save it as CSV, TSV, JSONL, CoNLL or SQuAD JSON text and upload that"


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} bytes"


def _decode(path: Path, name: str) -> tuple[str, list[str]]:
    with open(path, "rb") as f:
        head = f.read(8192)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 with a byte-order mark (Excel "Unicode text")
        try:
            text = path.read_bytes().decode("utf-16")
            return text, [f"read {name} as UTF-16 (it starts with a UTF-16 byte-order mark)"]
        except UnicodeDecodeError as e:
            raise DataError(f"{name} starts like UTF-16 text but byte {e.start} cannot be decoded; "
                            f"{_EXPORT_HINT}.") from e
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            raise DataError(f"{name} is a binary file ({kind}), not text; {_EXPORT_HINT}.")
    if b"\x00" in head:
        at = head.index(b"\x00")
        raise DataError(f"{name} is a binary file (it contains a NUL byte at byte {at}), not text; {_EXPORT_HINT}.")
    text, encoding = read_text_file(path)
    notes = []
    if encoding != "utf-8":
        try:  # latin-1 keeps byte offsets, so the first bad byte can be located in the text
            text.encode("latin-1").decode("utf-8")
            where = ""
        except UnicodeDecodeError as e:
            line = text.count("\n", 0, e.start) + 1
            where = f" (the first non-UTF-8 byte is on line {line})"
        notes.append(f"read as Latin-1 because the file is not valid UTF-8{where}; accented characters may be "
                     f"wrong if it was saved in another encoding: re-save it as UTF-8 if so")
    return text, notes


# ----- the entry point --------------------------------------------------------------------
def read_task_file(path: str | Path, task: str | None = None, text_column: str | None = None,
                   text_pair_column: str | None = None, label_column: str | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> TaskData:
    """Read a fine-tuning data file; the task, format and columns are detected when not given.

    Raises :class:`DataError` (a ``ValueError``) with a one-sentence explanation when the file
    cannot be used; repairs and skipped rows are listed in the result's ``notes``.
    """
    path = Path(path)
    name = path.name or str(path)
    if task is not None and task not in TASKS:
        raise DataError(f"unknown task {task!r}{_did_you_mean(task, TASKS)}; choose one of {', '.join(TASKS)}.")
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file; check the path and upload the data file itself.")
    size = path.stat().st_size
    if size > max_bytes:
        raise DataError(f"{name} is {_size(size)}, larger than the limit of {_size(max_bytes)} "
                        f"(max_bytes={max_bytes}); upload a sample of it or raise max_bytes.")
    if size == 0:
        raise DataError(f"{name} is empty (0 bytes); upload a file with a header line and at least "
                        f"{MIN_EXAMPLES} examples.")
    text, notes = _decode(path, name)
    if not text.strip():
        raise DataError(f"{name} holds only white space; upload a file with a header line and at least "
                        f"{MIN_EXAMPLES} examples.")
    reader = _Reader(name, text, task, text_column, text_pair_column, label_column, notes)
    data = reader.read(path.suffix.lower())
    data.source = str(path)
    return data


def _did_you_mean(word: str, options) -> str:
    options = [str(o) for o in options]
    close = difflib.get_close_matches(str(word), options, n=1, cutoff=0.5)
    if not close:  # try again ignoring case, spaces and underscores
        by_norm = {_norm(o): o for o in options}
        close = [by_norm[c] for c in difflib.get_close_matches(_norm(word), list(by_norm), n=1, cutoff=0.5)]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _lines_note(what: str, lines: list[int], unit: str = "line") -> str:
    shown = ", ".join(map(str, lines[:8])) + (", ..." if len(lines) > 8 else "")
    return (f"skipped {len(lines)} {'row' if len(lines) == 1 else 'rows'} with {what} "
            f"({unit}{'s' if len(lines) > 1 else ''} {shown})")


def _label_sort_key(label: str):
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


class _Reader:
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

    # ----- which format ----------------------------------------------------------------
    def read(self, ext: str) -> TaskData:
        first = re.search(r"\S", self.text)
        if first and first.group() in "{[":
            if ext in (".jsonl", ".ndjson", ".jsonlines"):
                return self.from_records(self.parse_jsonl(), "JSONL")
            try:
                obj = json.loads(self.text)
            except json.JSONDecodeError as e:
                if e.msg == "Extra data" and self._first_line_is_object():
                    return self.from_records(self.parse_jsonl(), "JSONL")
                raise self.error(None, f"is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}; fix the "
                                       f"file there (a missing comma, quote or bracket is the usual cause) and "
                                       f"upload it again") from e
            return self.from_json(obj)
        lines = [ln for ln in self.text.splitlines()[:400] if ln.strip()]
        if ext in (".conll", ".bio", ".iob", ".iob2", ".bioes", ".ner") or self.task == "ner" \
                or _looks_like_conll(lines):
            if ext in (".csv",) and self.task == "ner" and not _looks_like_conll(lines):
                raise self.error(None, "is not in CoNLL columns, but NER data must be (one 'token TAG' per line, a "
                                       "blank line between sentences), or JSONL with 'tokens' and 'tags' lists; "
                                       "convert the file")
            return self.parse_conll()
        if lines and all(ln.lstrip().startswith("__label__") for ln in lines[:50]):
            return self.parse_fasttext()
        return self.from_records(self.parse_delimited(ext), "CSV")

    def _first_line_is_object(self) -> bool:
        first = next((ln for ln in self.text.splitlines() if ln.strip()), "")
        try:
            return isinstance(json.loads(first), dict)
        except json.JSONDecodeError:
            return False

    # ----- JSON ------------------------------------------------------------------------
    def parse_jsonl(self) -> tuple[list[str], list[tuple[int, dict]]]:
        self.fmt = "JSONL"
        rows, columns = [], {}
        for n, line in enumerate(self.text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise self.error(f"line {n}, column {e.colno}", f"is not valid JSON ({e.msg}); every line of a JSONL "
                                 f"file must be one complete JSON object, so fix or delete that line") from e
            if not isinstance(obj, dict):
                raise self.error(f"line {n}", f"holds a JSON {type(obj).__name__}, not an object; write each example "
                                 f"as an object such as {{\"text\": \"...\", \"label\": \"...\"}}")
            columns.update(dict.fromkeys(obj))
            rows.append((n, obj))
        return list(columns), rows

    def from_json(self, obj) -> TaskData:
        self.fmt = "JSON"
        if isinstance(obj, dict) and isinstance(obj.get("data"), list) and obj["data"] \
                and isinstance(obj["data"][0], dict) and "paragraphs" in obj["data"][0]:
            return self.parse_squad(obj)
        records = obj.get("data") if isinstance(obj, dict) and isinstance(obj.get("data"), list) else obj
        if isinstance(records, list) and records and all(isinstance(r, dict) for r in records):
            columns = list(dict.fromkeys(k for r in records for k in r))
            self.unit = "record"  # a JSON array gives no line per record: messages count records instead
            return self.from_records((columns, list(enumerate(records, 1))), "JSON")
        if isinstance(records, list) and not records:
            raise self.error(None, f"holds no examples (an empty list); add at least {MIN_EXAMPLES} examples")
        raise self.error(None, "is JSON but not in a layout this reader knows; use SQuAD's {\"data\": "
                               "[{\"paragraphs\": [{\"context\": ..., \"qas\": [...]}]}]} for QA, or a list of "
                               "objects (or JSONL) with fields such as text and label")

    # ----- SQuAD -----------------------------------------------------------------------
    def _line_of(self, needle: str) -> int | None:
        at = self.text.find(needle)
        return self.text.count("\n", 0, at) + 1 if at >= 0 else None

    def parse_squad(self, obj: dict) -> TaskData:
        self.fmt = "SQuAD JSON"
        if self.task not in (None, "qa"):
            raise self.error(None, f"is a SQuAD question-answering file but task={self.task!r} was asked for; use "
                                   f"task='qa' or upload a file for {self.task}")
        examples, seen, no_flag, repaired = [], Counter(), [], []
        v2 = False
        for a, article in enumerate(obj["data"]):
            paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
            if not isinstance(paragraphs, list):
                raise self.error(f"data[{a}]", "has no 'paragraphs' list; each article needs "
                                 "{\"paragraphs\": [{\"context\": ..., \"qas\": [...]}]} as in SQuAD")
            for p, para in enumerate(paragraphs):
                where = f"data[{a}].paragraphs[{p}]"
                if not isinstance(para, dict) or not isinstance(para.get("context"), str) \
                        or not isinstance(para.get("qas"), list):
                    raise self.error(where, "needs a 'context' string and a 'qas' list as in SQuAD; add the "
                                            "missing field")
                context = para["context"]
                for q, qa in enumerate(para["qas"]):
                    examples.append(self._squad_question(qa, context, f"{where}.qas[{q}]", seen, no_flag, repaired))
                    v2 = v2 or "is_impossible" in qa
        if no_flag:
            shown = ", ".join(repr(i) for i in no_flag[:5]) + (", ..." if len(no_flag) > 5 else "")
            self.notes.append(f"{len(no_flag)} questions have no answers and no is_impossible flag ({shown}); "
                              f"read them as unanswerable (SQuAD 2.0)")
        if repaired:
            self.notes.append(f"repaired answer_start of {len(repaired)} answers by finding the answer text in the "
                              f"context: " + "; ".join(repaired[:5]) + ("; ..." if len(repaired) > 5 else ""))
        dupes = [k for k, c in seen.items() if c > 1]
        if dupes:
            self.notes.append(f"{len(dupes)} question ids occur more than once (e.g. {dupes[0]!r}); later copies "
                              f"got the suffix _2, _3, ... so that every id is unique")
        n_imp = sum(ex["is_impossible"] for ex in examples)
        self.notes.append(f"SQuAD {'v2.0' if v2 or n_imp else 'v1.1'} layout: {len(examples)} questions, "
                          f"{n_imp} unanswerable")
        self._check_count(examples, "questions")
        return TaskData("qa", examples, None, "", self.notes)

    def _squad_question(self, qa, context, where, seen, no_flag, repaired) -> dict:
        if not isinstance(qa, dict):
            raise self.error(where, "is not an object; each question needs \"id\", \"question\" and \"answers\"")
        qid = str(qa.get("id", "")).strip() or where

        def locate() -> str:  # only when a message needs it: finding the line scans the file
            line = self._line_of(f'"{qa["id"]}"') if qa.get("id") else None
            return f"question {qid!r}" + (f" (line {line})" if line else f" ({where})")
        at = _Lazy(locate)
        question = qa.get("question")
        if not isinstance(question, str) or not question.strip():
            raise self.error(at, "has no question text; add a non-empty \"question\" string")
        if not context.strip():
            raise self.error(at, "has an empty context; add the paragraph the answer comes from")
        seen[qid] += 1
        if seen[qid] > 1:
            qid = f"{qid}_{seen[qid]}"
        answers = qa.get("answers", [])
        if not isinstance(answers, list):
            raise self.error(at, "has 'answers' that is not a list; write [{\"text\": ..., \"answer_start\": ...}]")
        impossible = qa.get("is_impossible")
        if impossible is None:
            impossible = not answers
            if impossible:
                no_flag.append(qid)
        impossible = _as_bool(impossible)
        fixed = []
        if not impossible:
            if not answers:
                raise self.error(at, "has is_impossible false but no answers; add an answer or set is_impossible "
                                     "to true")
            for ans in answers:
                fixed.append(self._fix_answer(ans, context, at, qid, repaired))
        return {"id": qid, "question": question.strip(), "context": context, "answers": fixed,
                "is_impossible": impossible}

    def _fix_answer(self, ans, context: str, at: str, qid: str, repaired: list[str]) -> dict:
        if isinstance(ans, str):
            ans = {"text": ans}
        if not isinstance(ans, dict) or not isinstance(ans.get("text"), str) or not ans["text"].strip():
            raise self.error(at, "has an answer without text; each answer needs {\"text\": ..., \"answer_start\": ...}")
        text = ans["text"]
        start = ans.get("answer_start")
        try:
            start = int(start) if start is not None else None
        except (TypeError, ValueError):
            raise self.error(at, f"has answer_start {start!r}, which is not a number; give the character offset of "
                                 f"the answer in the context (counting from 0)") from None
        if start is not None and context[start:start + len(text)] == text:
            return {"text": text, "answer_start": start}
        found = [m.start() for m in re.finditer(re.escape(text), context)]
        if not found and text.strip() != text:
            text = text.strip()
            found = [m.start() for m in re.finditer(re.escape(text), context)]
        if not found:
            there = "" if start is None else f" (answer_start {start} points at {context[start:start + len(text)]!r})"
            raise self.error(at, f"answer {ans['text']!r} does not occur in its context{there}; correct the answer "
                                 f"text so that it is copied exactly from the context")
        best = min(found, key=lambda s: abs(s - (start if start is not None else 0)))
        repaired.append(f"question {qid!r}: {text!r} is at {best}, not {start}" if start is not None
                        else f"question {qid!r}: no answer_start, found {text!r} at {best}")
        return {"text": text, "answer_start": best}

    # ----- CoNLL -----------------------------------------------------------------------
    def parse_conll(self) -> TaskData:
        self.fmt = "CoNLL"
        if self.task not in (None, "ner"):
            raise self.error(None, f"looks like CoNLL columns (a token and a tag on each line), which is NER data, "
                                   f"but task={self.task!r} was asked for; use task='ner'")
        lines = self.text.splitlines()
        use_tab = any("\t" in ln.strip(" ") for ln in lines[:2000] if ln.strip())
        sentences, tokens, tags, tag_lines = [], [], [], []
        expected, first_line = None, None
        for n, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line:  # blank, or WNUT's separator: a line holding only a tab
                if tokens:
                    sentences.append((tokens, tags, tag_lines))
                    tokens, tags, tag_lines = [], [], []
                continue
            if line.startswith("-DOCSTART-"):
                continue
            cols = [c.strip() for c in raw.rstrip("\r\n").split("\t")] if use_tab else line.split()
            if use_tab:
                while len(cols) > 1 and cols[-1] == "":  # trailing tabs
                    cols.pop()
            if expected is None:
                expected, first_line = len(cols), n
                if expected < 2:
                    raise self.error(f"line {n}", f"has {expected} column ({line!r}) but CoNLL data needs a token "
                                     f"and its tag on every line, separated by a tab or a space")
            if len(cols) != expected:
                raise self.error(f"line {n}", f"has {len(cols)} columns, expected {expected} (like line {first_line}); "
                                 f"every token line needs the same columns, the token first and the tag last "
                                 f"({'tab' if use_tab else 'space'} separated), and sentences end with a blank line")
            tokens.append(cols[0])
            tags.append(cols[-1])
            tag_lines.append(n)
        if tokens:
            sentences.append((tokens, tags, tag_lines))
        if not sentences:
            raise self.error(None, "holds no token lines; write one 'token TAG' pair per line with a blank line "
                                   "between sentences")
        examples = self._check_bio([(t, g, [(ln, expected) for ln in lns]) for t, g, lns in sentences])
        self._check_count(examples, "sentences")
        return TaskData("ner", examples, _tag_names(examples), "", self.notes)

    def _check_bio(self, sentences) -> list[dict]:
        """``sentences``: (tokens, tags, [(line, column)] per tag). Returns NER examples in BIO."""
        converted, examples = Counter(), []
        first_fix = None
        for tokens, tags, where in sentences:
            out, prev = [], "O"
            for tag, (line, col) in zip(tags, where):
                tag = str(tag).strip()
                if not TAG_RE.match(tag):
                    loc = (f"{self.unit} {line}, column {col!r}" if isinstance(col, str)
                           else f"line {line}, column {col}")
                    hint = f" (did you mean {tag.replace('_', '-', 1)!r}?)" if re.match(r"^[BI]_\S", tag) else ""
                    raise self.error(loc, f"tag {tag!r} is not a BIO tag{hint}; use O for words outside entities "
                                          f"and B-TYPE / I-TYPE for the first / following words of an entity "
                                          f"(e.g. B-PER, I-PER)")
                prefix, typ = (tag[0], tag[2:]) if tag != "O" else ("O", "")
                new = tag
                if prefix in "SU":
                    new = f"B-{typ}"
                elif prefix in "EL":
                    new = f"I-{typ}" if prev in (f"B-{typ}", f"I-{typ}") else f"B-{typ}"
                elif prefix == "I" and prev not in (f"B-{typ}", f"I-{typ}"):
                    new = f"B-{typ}"  # IOB1: an entity may start with I-
                if new != tag:
                    converted[f"{tag}->{new[0]}-"] += 1
                    first_fix = first_fix or line
                out.append(new)
                prev = new
            examples.append({"tokens": list(tokens), "tags": out})
        if converted:
            kinds = ", ".join(sorted({k.split('-')[0] + '-' for k in converted}))
            self.notes.append(f"converted {sum(converted.values())} tags to BIO ({kinds} at the start or end of "
                              f"an entity{'' if first_fix is None else f', first on line {first_fix}'}): an entity "
                              f"now starts with B- and continues with I-")
        return examples

    # ----- fastText --------------------------------------------------------------------
    def parse_fasttext(self) -> TaskData:
        self.fmt = "fastText"
        if self.task not in (None, "classification"):
            raise self.error(None, f"is in fastText format ('__label__X text' lines), which is single-sentence "
                                   f"classification, but task={self.task!r} was asked for; use task='classification'")
        examples, empty = [], []
        for n, line in enumerate(self.text.splitlines(), 1):
            if not line.strip():
                continue
            words = line.split()
            labels = [w[len("__label__"):] for w in words if w.startswith("__label__")]
            text = " ".join(w for w in words if not w.startswith("__label__"))
            if not words[0].startswith("__label__"):
                raise self.error(f"line {n}", "does not start with __label__<name>; write every line as "
                                              "'__label__<name> <text>'")
            if len(labels) > 1:
                raise self.error(f"line {n}", f"has {len(labels)} labels but only single-label classification is "
                                              f"supported; keep one __label__ per line")
            if not text:
                empty.append(n)
                continue
            examples.append({"text": text, "label": labels[0]})
        if empty:
            self.notes.append(_lines_note("no text after the label", empty, self.unit))
        return self._finish_classification("classification", examples, "label")

    # ----- CSV / TSV -------------------------------------------------------------------
    def parse_delimited(self, ext: str) -> tuple[list[str], list[tuple[int, dict]]]:
        first = next(ln for ln in self.text.splitlines() if ln.strip())
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
                                      for ln in self.text.splitlines()[:2000] for c in ln.split("\t")):
            # Tab-separated files such as GLUE's quote nothing: a cell may start with a quote
            # ('"Hi," he said.') that is part of the text. Read quotes literally unless some cell
            # is wrapped in quotes the way spreadsheets write them.
            quoting = csv.QUOTE_NONE
        reader = csv.reader(io.StringIO(self.text, newline=""), delimiter=delim, strict=True, quoting=quoting)
        header, rows, start = None, [], 1
        try:
            for row in reader:
                line, start = start, reader.line_num + 1
                if not any(c.strip() for c in row):
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
                rows.append((line, dict(zip(header, row))))
        except csv.Error as e:
            raise self.error(f"line {start}", f"cannot be parsed as {self.fmt} ({e}); check the quotes on that "
                                              f"line: a cell that starts with a double quote must end with one, "
                                              f"and quotes inside a cell are written twice (\"\")") from e
        if header is None:
            raise self.error(None, "has no header line; the first line must name the columns, e.g. text,label")
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
        task = self.task
        endings = self._ending_columns(columns)
        has_choices = self._col(["choices", "endings", "options"]) is not None
        if task == "multiple-choice" or (task is None and (len(endings) >= 2 or has_choices)
                                         and self._mc_label_col(required=False)):
            return self.read_multiple_choice(endings)
        qa_cols = self._col(["question"]), self._col(["context", "passage", "paragraph"])
        if task == "qa" or (task is None and all(qa_cols) and self._col(
                ["answers", "answer", "answertext", "answerstart", "isimpossible"])):
            return self.read_qa()
        if task == "ner" or (task is None and self._col(["tokens", "words"]) and self._col(
                ["tags", "nertags", "labels", "ner", "label"])):
            return self.read_ner_records()
        return self.read_sentences()

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
                               f"columns are {', '.join(map(repr, self.columns))}, so pass {param} with one of "
                               f"those names")

    def _header_hint(self) -> str:
        looks_like_data = self.fmt in ("CSV", "TSV") and any(
            len(c) > 40 or re.fullmatch(r"-?\d+(\.\d+)?", c) for c in self.columns)
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
                                        f"or pass {param} with the name of the column that holds the {role}")
        return self.error(None, f"has no {role} column{self._header_hint()}: its columns are {cols}, so name the "
                                f"column {known[0]!r} or pass {param} with the name of the column that holds the "
                                f"{role}")

    def _cell(self, record: dict, col: str | None):
        v = record.get(col) if col is not None else None
        return v.strip() if isinstance(v, str) else v

    # ----- sentence (pair) classification and regression ---------------------------------
    def read_sentences(self) -> TaskData:
        task = self.task
        text_col = self._resolve(self.text_column, "text", "text_column")
        pair_col = self._resolve(self.text_pair_column, "second text", "text_pair_column")
        label_col = self._resolve(self.label_column, "labels", "label_column")
        auto = []
        if label_col is None:
            label_col = self._col([n for n in LABEL_NAMES if self._col([n]) not in (text_col, pair_col)])
        if text_col is None and pair_col is None and task != "classification":
            for a, b in PAIRS:
                ca, cb = self._col([a]), (self._col([b]) if b else None)
                if ca and cb and label_col not in (ca, cb):
                    text_col, pair_col = ca, cb
                    break
        if text_col is None:
            text_col = self._col([n for n in TEXT_NAMES if self._col([n]) not in (label_col, pair_col)])
        if pair_col is None and task not in ("classification",) and text_col is not None:
            cand = self._col([n for n in PAIR_NAMES if self._col([n]) not in (label_col, text_col)])
            if cand is not None and (task == "pair-classification" or task in (None, "regression")):
                pair_col = cand
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
        if task == "pair-classification" and pair_col is None:
            raise self._missing("second text", PAIR_NAMES, "text_pair_column", used=(text_col, label_col))
        if task is None:
            task = "regression" if self._is_regression(label_col) else (
                "pair-classification" if pair_col else "classification")
            auto.append(f"detected task {task!r}")
        self.notes.append(f"{self.fmt}: text column {text_col!r}"
                          + (f", second text column {pair_col!r}" if pair_col else "")
                          + f", label column {label_col!r}" + ("; " + "; ".join(auto) if auto else ""))
        examples, empty_text, empty_label = [], [], []
        for line, rec in self.rows:
            text, label = self._cell(rec, text_col), self._cell(rec, label_col)
            pair = self._cell(rec, pair_col) if pair_col else None
            if not isinstance(text, str) or not text or (pair_col and (not isinstance(pair, str) or not pair)):
                if text is not None and not isinstance(text, str):
                    kind = "a number" if isinstance(text, (int, float)) else f"a JSON {type(text).__name__}"
                    raise self.error(self._where(line, text_col), f"holds {kind}, not text; write the text as a "
                                     f"string")
                empty_text.append(line)
                continue
            if label is None or label == "":
                empty_label.append(line)
                continue
            if task == "regression":
                try:
                    value = float(label)
                    if not math.isfinite(value):
                        raise ValueError
                except (TypeError, ValueError):
                    raise self.error(self._where(line, label_col), f"{label!r} is not a number but regression "
                                     f"needs numeric labels; correct the cell or use task='classification'") from None
                examples.append({"text": text, "text_pair": pair, "label": value})
            else:
                if isinstance(label, (list, dict)):
                    raise self.error(self._where(line, label_col), f"holds a {type(label).__name__}; give one "
                                     f"label per example (multi-label data is not supported)")
                ex = {"text": text, "label": _label_str(label)}
                if task == "pair-classification":
                    ex = {"text": text, "text_pair": pair, "label": ex["label"]}
                examples.append(ex)
        if empty_text:
            self.notes.append(_lines_note("an empty text cell", empty_text, self.unit))
        if empty_label:
            self.notes.append(_lines_note("an empty label cell", empty_label, self.unit))
        if task == "regression":
            self._check_count(examples, "examples")
            if len({ex["label"] for ex in examples}) < 2:
                raise self.error(None, f"column {label_col!r} has the same value in every row, so there is "
                                       f"nothing to learn; check the label column")
            return TaskData("regression", examples, None, "", self.notes)
        return self._finish_classification(task, examples, label_col)

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

    def _is_regression(self, label_col: str) -> bool:
        values = []
        for _, rec in self.rows:
            v = self._cell(rec, label_col)
            if v is None or v == "":
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

    def _finish_classification(self, task: str, examples: list[dict], label_col: str) -> TaskData:
        self._check_count(examples, "examples")
        counts = Counter(ex["label"] for ex in examples)
        if len(counts) < 2:
            only = next(iter(counts))
            raise self.error(None, f"has only one class: all {len(examples)} examples have the label {only!r} in "
                                   f"column {label_col!r}; a classifier needs examples of at least two classes, so "
                                   f"add some or check that the right column is the label")
        singles = sorted((lab for lab, c in counts.items() if c == 1), key=_label_sort_key)
        if singles:
            self.notes.append(f"{len(singles)} {'class has' if len(singles) == 1 else 'classes have'} a single "
                              f"example ({', '.join(map(repr, singles[:5]))}{', ...' if len(singles) > 5 else ''}); "
                              f"it cannot be both learnt and evaluated: add examples or merge classes")
        if len(counts) > max(50, len(examples) // 2):
            self.notes.append(f"{len(counts)} distinct labels for {len(examples)} examples: is the label column "
                              f"right, or is this a regression task (task='regression')?")
        return TaskData(task, examples, sorted(counts, key=_label_sort_key), "", self.notes)

    def _check_count(self, examples: list, what: str) -> None:
        if len(examples) < MIN_EXAMPLES:
            skipped = [n for n in self.notes if n.startswith("skipped")]
            why = f" after {'; '.join(skipped)}" if skipped else ""
            raise self.error(None, f"has only {len(examples)} usable {what}{why}, but fine-tuning needs at least "
                                   f"{MIN_EXAMPLES} (a few hundred is better); add more examples")

    # ----- multiple choice -------------------------------------------------------------
    @staticmethod
    def _ending_columns(columns) -> list[str]:
        found = sorted(((int(m.group(1)), c) for c in columns if (m := ENDING_RE.match(str(c).strip()))))
        return [c for _, c in found]

    def _mc_label_col(self, required: bool = True) -> str | None:
        col = self._resolve(self.label_column, "labels", "label_column") or self._col(MC_LABEL_NAMES)
        if col is None and required:
            raise self._missing("label (the number of the right choice)", MC_LABEL_NAMES, "label_column")
        return col

    def read_multiple_choice(self, endings: list[str]) -> TaskData:
        label_col = self._mc_label_col()
        choices_col = self._col(["choices", "endings", "options"])
        if len(endings) < 2 and choices_col is None:
            raise self.error(None, f"has no answer choices: its columns are {', '.join(map(repr, self.columns))}, so "
                                   f"add SWAG columns (sent1, sent2, ending0, ending1 and so on) or context, choice0, "
                                   f"choice1 and so on")
        sent1 = self._col(["sent1"])
        sent2 = self._col(["sent2"])
        context_col = self._resolve(self.text_column, "context", "text_column") or sent1 or self._col(
            ["context", "startphrase", "question", "sentence", "prompt", "text", "premise", "stem", "goal"])
        if context_col is None:
            raise self._missing("context", ("context", "sent1", "startphrase", "question"), "text_column")
        self.notes.append(f"{self.fmt}: multiple choice, context column {context_col!r}"
                          + (f" (+ {sent2!r} at the start of every choice, as in SWAG)" if sent1 and sent2 else "")
                          + f", choices {', '.join(map(repr, endings)) if endings else repr(choices_col)}, "
                            f"label column {label_col!r}")
        examples, empty, sizes = [], [], Counter()
        for line, rec in self.rows:
            context = self._cell(rec, context_col)
            if endings:
                raw = [self._cell(rec, c) for c in endings]
            else:
                raw = rec.get(choices_col)
                if not isinstance(raw, list):
                    raise self.error(self._where(line, choices_col), "must be a list of answer choices, e.g. "
                                     "[\"first ending\", \"second ending\"]")
                raw = [c.strip() if isinstance(c, str) else c for c in raw]
            if not context or any(not isinstance(c, str) or not c for c in raw):
                empty.append(line)
                continue
            start = self._cell(rec, sent2) if (sent1 and sent2 and context_col == sent1) else ""
            choices = [f"{start} {c}".strip() if start else c for c in raw]
            label = self._cell(rec, label_col)
            index = _choice_index(label, len(choices))
            if index is None:
                raise self.error(self._where(line, label_col), f"{label!r} is not the number of a choice; write "
                                 f"the index of the right choice, 0 to {len(choices) - 1} (or a letter A-"
                                 f"{chr(64 + len(choices))})")
            sizes[len(choices)] += 1
            examples.append({"context": context, "choices": choices, "label": index})
        if empty:
            self.notes.append(_lines_note("an empty context or choice", empty, self.unit))
        if len(sizes) > 1:
            common = sizes.most_common(1)[0][0]
            odd = next(ln for (ln, _), ex in zip(self.rows, examples) if len(ex["choices"]) != common)
            raise self.error(self._where(odd), f"has a different number of choices than most rows ({common}); give "
                             f"every example the same number of choices")
        self._check_count(examples, "examples")
        return TaskData("multiple-choice", examples, None, "", self.notes)

    # ----- QA from records ---------------------------------------------------------------
    def read_qa(self) -> TaskData:
        q_col = self._resolve(self.text_column, "question", "text_column") or self._col(["question", "query"])
        c_col = self._resolve(self.text_pair_column, "context", "text_pair_column") or self._col(
            ["context", "passage", "paragraph", "document"])
        if q_col is None or c_col is None:
            raise self._missing("question" if q_col is None else "context",
                                ("question",) if q_col is None else ("context", "passage"),
                                "text_column" if q_col is None else "text_pair_column")
        ans_col = self._resolve(self.label_column, "answers", "label_column") or self._col(["answers"])
        text_col = self._col(["answer_text", "answer", "answertext"]) if ans_col is None else None
        start_col = self._col(["answer_start", "answerstart", "start"])
        imp_col = self._col(["is_impossible", "impossible", "unanswerable"])
        id_col = self._col(["id", "qid", "question_id"])
        examples, seen, repaired, empty = [], Counter(), [], []
        for i, (line, rec) in enumerate(self.rows):
            question, context = self._cell(rec, q_col), rec.get(c_col)
            if not question or not isinstance(context, str) or not context.strip():
                empty.append(line)
                continue
            qid = str(self._cell(rec, id_col) or f"q{i + 1}")
            seen[qid] += 1
            if seen[qid] > 1:
                qid = f"{qid}_{seen[qid]}"
            at = f"{self._where(line)} (question {qid!r})"
            answers = []
            if ans_col is not None:
                raw = rec.get(ans_col)
                if isinstance(raw, str):  # a CSV cell may hold JSON
                    try:
                        raw = json.loads(raw) if raw.strip()[:1] in "[{" else ([raw] if raw.strip() else [])
                    except json.JSONDecodeError:
                        raw = [raw]
                if isinstance(raw, dict):  # Hugging Face: {"text": [...], "answer_start": [...]}
                    texts, starts = raw.get("text", []), raw.get("answer_start", [])
                    texts = texts if isinstance(texts, list) else [texts]
                    starts = starts if isinstance(starts, list) else [starts]
                    raw = [{"text": t, "answer_start": s} for t, s in zip(texts, starts + [None] * len(texts))]
                answers = list(raw or [])
            elif text_col is not None:
                t = self._cell(rec, text_col)
                if t:
                    answers = [{"text": t, "answer_start": self._cell(rec, start_col) if start_col else None}]
            impossible = _as_bool(self._cell(rec, imp_col)) if imp_col and self._cell(rec, imp_col) not in (None, "") \
                else not answers
            fixed = [] if impossible else [self._fix_answer(a, context, at, qid, repaired) for a in answers]
            if not impossible and not fixed:
                raise self.error(at, "has no answer but is not marked unanswerable; add the answer text")
            examples.append({"id": qid, "question": question, "context": context, "answers": fixed,
                             "is_impossible": impossible})
        if empty:
            self.notes.append(_lines_note("an empty question or context", empty, self.unit))
        if repaired:
            self.notes.append(f"repaired answer_start of {len(repaired)} answers by finding the answer text in the "
                              f"context: " + "; ".join(repaired[:5]) + ("; ..." if len(repaired) > 5 else ""))
        self.notes.append(f"{self.fmt}: question column {q_col!r}, context column {c_col!r}; "
                          f"{sum(e['is_impossible'] for e in examples)} of {len(examples)} questions unanswerable")
        self._check_count(examples, "questions")
        return TaskData("qa", examples, None, "", self.notes)

    # ----- NER from records --------------------------------------------------------------
    def read_ner_records(self) -> TaskData:
        tok_col = self._resolve(self.text_column, "tokens", "text_column") or self._col(["tokens", "words"])
        tag_col = self._resolve(self.label_column, "tags", "label_column") or self._col(
            ["tags", "ner_tags", "labels", "ner", "label"])
        if tok_col is None or tag_col is None:
            raise self._missing("tokens" if tok_col is None else "tags",
                                ("tokens",) if tok_col is None else ("tags", "ner_tags"),
                                "text_column" if tok_col is None else "label_column")
        sentences = []
        for i, (line, rec) in enumerate(self.rows):
            tokens, tags = rec.get(tok_col), rec.get(tag_col)
            where = self._where(line)
            if isinstance(tokens, str) and isinstance(tags, str):  # a CSV cell: space-separated
                tokens, tags = tokens.split(), tags.split()
            if not isinstance(tokens, list) or not isinstance(tags, list):
                raise self.error(where, f"needs {tok_col!r} and {tag_col!r} as lists of the same length, e.g. "
                                        f"{{\"tokens\": [\"Anna\", \"lives\"], \"tags\": [\"B-PER\", \"O\"]}}")
            if len(tokens) != len(tags):
                raise self.error(where, f"has {len(tokens)} tokens but {len(tags)} tags; give one tag per token")
            if tags and all(isinstance(t, int) for t in tags):
                raise self.error(where, "has tag numbers instead of tag names; write the tags as strings such as "
                                        "\"B-PER\" (the names of Hugging Face's ClassLabel feature)")
            if tokens:
                sentences.append(([str(t) for t in tokens], tags, [(line, tag_col)] * len(tags)))
        examples = self._check_bio(sentences)
        self.notes.append(f"{self.fmt}: tokens column {tok_col!r}, tags column {tag_col!r}")
        self._check_count(examples, "sentences")
        return TaskData("ner", examples, _tag_names(examples), "", self.notes)


class _Lazy:
    """A string computed when it is first formatted."""

    def __init__(self, make):
        self.make = make

    def __str__(self) -> str:
        return self.make()


def _looks_like_conll(lines: list[str]) -> bool:
    lines = [ln for ln in lines if ln.strip() and not ln.startswith("-DOCSTART-")][:200]
    if len(lines) < 2:
        return False
    good = 0
    for ln in lines:
        cols = [c for c in ln.strip().split("\t")] if "\t" in ln.strip() else ln.split()
        good += len(cols) >= 2 and bool(TAG_RE.match(cols[-1].strip())) and " " not in cols[0].strip()
    return good >= 0.9 * len(lines)


def _tag_names(examples: list[dict]) -> list[str]:
    """'O', then B- and I- of every entity type (both, even if the data lacks one of them)."""
    types = sorted({t[2:] for ex in examples for t in ex["tags"] if t != "O"})
    return ["O"] + [f"{p}-{t}" for t in types for p in "BI"]


def _label_str(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "y", "t")
    return bool(value)


def _choice_index(label, n: int) -> int | None:
    if isinstance(label, bool) or label is None:
        return None
    if isinstance(label, str):
        s = label.strip()
        if len(s) == 1 and s.isalpha() and s.isupper():
            i = ord(s) - ord("A")
            return i if i < n else None
        try:
            label = float(s)
        except ValueError:
            return None
    if isinstance(label, float):
        if not label.is_integer():
            return None
        label = int(label)
    return label if isinstance(label, int) and 0 <= label < n else None


# ----- names a user gave us ---------------------------------------------------------------
def slug(text: str, limit: int = 60) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return s[:limit] or "run"


def safe_filename(name: str) -> str:
    """An uploaded file's name, reduced to a plain file name (no folders, no odd characters)."""
    base = Path(str(name).replace("\\", "/")).name
    stem, dot, ext = base.rpartition(".")
    stem, ext = (stem, ext) if dot else (base, "")
    clean = slug(stem) + (f".{slug(ext, 10)}" if ext else "")
    return clean if clean not in ("", ".", "..") else "upload"


def table_columns(data: bytes) -> list[str] | None:
    """The column names of a CSV/TSV/JSONL upload (first line), or None for other formats."""
    text = data[:65536].decode("utf-8-sig", errors="replace")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("{"):
        try:
            rec = json.loads(first)
        except json.JSONDecodeError:
            return None
        return [str(k) for k in rec] if isinstance(rec, dict) and "data" not in rec else None
    counts = {d: first.count(d) for d in ("\t", ",", ";", "|")}
    delim = max(counts, key=counts.get)
    if not counts[delim]:
        return None
    cols = [c.strip() for c in next(csv.reader([first], delimiter=delim))]
    if len(cols) < 2 or any(re.fullmatch(r"O|[BIESLU]-\S+", c) for c in cols):
        return None  # CoNLL lines (token, tag) are not a header
    return cols
