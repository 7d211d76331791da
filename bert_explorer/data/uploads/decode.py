"""Turning an uploaded file's bytes into text, or saying why they are not text."""
from __future__ import annotations

from pathlib import Path

from ..corpora import read_text_file
from .core import DataError


# ----- reading and decoding ----------------------------------------------------------------
_MAGIC = ((b"PK\x03\x04", "a ZIP archive, e.g. an Excel .xlsx workbook"),
          (b"\xd0\xcf\x11\xe0", "an old Excel .xls or Word .doc file"),
          (b"\x1f\x8b", "a gzip archive"), (b"BZh", "a bzip2 archive"), (b"%PDF", "a PDF document"),
          (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"7z\xbc\xaf", "a 7-Zip archive"),
          (b"\x93NUMPY", "a NumPy array"), (b"\x80\x04", "a Python pickle"))
_EXPORT_HINT = "save it as CSV, TSV, JSONL, Parquet, CoNLL or SQuAD JSON and upload that"


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
