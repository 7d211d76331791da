"""Small helpers the upload readers share: suggestions, notes, label handling."""
from __future__ import annotations

import difflib
import io
import math
import re

from .core import MISSING_LABELS, TAG_RE, _norm


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


_LINE_END = re.compile(r"\r\n?|\n")
_CHUNK = 1 << 20  # characters split at a time


def iter_raw_lines(text: str):
    """The lines of ``text`` with their ends, split at \\n, \\r\\n and \\r as ``csv`` and
    ``open(newline="")`` split them, a megabyte at a time: a reader that stops early has split no
    further, and no list of every line (``str.splitlines`` makes one) or four-bytes-a-character copy
    of the whole text (``io.StringIO`` makes one) is ever held."""
    start, n = 0, len(text)
    while start < n:
        end = _LINE_END.search(text, start + _CHUNK) if start + _CHUNK < n else None
        cut = end.end() if end else n  # a chunk ends at a line end, so none is split
        yield from io.StringIO(text[start:cut], newline="")
        start = cut


def iter_lines(text: str):
    """The lines of ``text`` without their ends, as :func:`iter_raw_lines` splits them."""
    for line in iter_raw_lines(text):
        yield line.rstrip("\r\n")


def _is_missing(value) -> bool:
    """A label that says "no value": None, an empty cell, a float NaN, or NaN / None / null written
    as text (pandas writes NaN, Python None, JSON and SQL null)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return isinstance(value, str) and value.strip().lower() in ("",) + MISSING_LABELS


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
