"""Names a user gave us: run names and uploaded file names made safe, and a table's columns."""
from __future__ import annotations

import csv
import json
import re
import unicodedata
from pathlib import Path

from .decode import utf16_of


# ----- names a user gave us ---------------------------------------------------------------
NAME_CHARS = 60  # a run's or a grid's folder name: what a box that names one takes (longer was cut unsaid)


def slug(text: str, limit: int = NAME_CHARS) -> str:
    """``text`` as a folder or file name of letters, digits, dots and dashes; accented letters keep their base
    letter ("Ünïcode" became "n-code")."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", str(text)) if not unicodedata.combining(c))
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", plain).strip("-.")
    return s[:limit] or "run"


def safe_filename(name: str) -> str:
    """An uploaded file's name, reduced to a plain file name (no folders, no odd characters)."""
    base = Path(str(name).replace("\\", "/")).name
    stem, dot, ext = base.rpartition(".")
    stem, ext = (stem, ext) if dot else (base, "")
    clean = slug(stem) + (f".{slug(ext, 10)}" if ext else "")
    return clean if clean not in ("", ".", "..") else "upload"


def table_columns(data: bytes) -> list[str] | None:
    """The column names of a CSV/TSV/JSONL upload (first line) or of a Parquet file (its
    schema), or None for other formats and for a Parquet file that cannot be read."""
    if data[:4] == b"PAR1":
        # only for Parquet: pyarrow is not among the GPU machine's packages (tools/gpu_kit/offline.py)
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return [str(c) for c in pq.read_schema(pa.BufferReader(data)).names]
        except (pa.ArrowException, OSError, ValueError):
            return None  # reading the file says what is wrong with it
    utf16 = utf16_of(data[:8192])  # Excel's "Unicode text", with or without its byte-order mark
    text = data[:65536].decode(utf16[0] if utf16 else "utf-8-sig", errors="replace").lstrip("\ufeff")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("{"):
        try:
            rec = json.loads(first)
        except (json.JSONDecodeError, RecursionError):  # reading the file says what is wrong with it
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
