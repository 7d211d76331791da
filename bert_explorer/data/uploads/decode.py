"""Turning an uploaded file's bytes into text, or saying why they are not text."""
from __future__ import annotations

import codecs

from pathlib import Path

from .core import DataError


# ----- reading and decoding ----------------------------------------------------------------
_MAGIC = ((b"PK\x03\x04", "a ZIP archive, e.g. an Excel .xlsx workbook"),
          (b"\xd0\xcf\x11\xe0", "an old Excel .xls or Word .doc file"),
          (b"\x1f\x8b", "a gzip archive"), (b"BZh", "a bzip2 archive"), (b"%PDF", "a PDF document"),
          (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"7z\xbc\xaf", "a 7-Zip archive"),
          (b"\x93NUMPY", "a NumPy array"), (b"\x80\x04", "a Python pickle"))
_EXPORT_HINT = "save it as CSV, TSV, JSONL, Parquet, CoNLL or SQuAD JSON and use that"


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} bytes"


def decode_text(data: bytes) -> tuple[str, str]:
    """The text of these bytes and the encoding that decoded them: ``"utf-8"``, ``"windows-1252"`` or
    ``"latin-1"``. Bytes 0x80-0x9F are control characters in Latin-1 but Windows' quotes, dashes and euro
    sign in Windows-1252 (what Excel on Windows saves): read as Latin-1, "it’s €5" lost its apostrophe and
    euro (the tokenizer drops control characters). Without such bytes the two read alike: said Latin-1."""
    try:
        return data.decode("utf-8-sig"), "utf-8"   # -sig: drop a byte-order mark if present
    except UnicodeDecodeError:
        pass
    # a UTF-8 byte-order mark before a Latin-1 body (an editor's "UTF-8 with BOM" over text it did not convert): the
    # mark is no text, and read as Latin-1 it named the first column "ï»¿text"
    data = data[len(codecs.BOM_UTF8):] if data.startswith(codecs.BOM_UTF8) else data
    if any(0x80 <= b <= 0x9F for b in data):
        try:
            return data.decode("cp1252"), "windows-1252"
        except UnicodeDecodeError:  # one of the five bytes Windows-1252 leaves undefined: not that either
            pass
    return data.decode("latin-1"), "latin-1"   # cannot fail: all 256 byte values are defined


def utf16_of(head: bytes) -> tuple[str, str] | None:
    """(codec, why) when ``head``, a file's first bytes, looks like UTF-16 text, else None.

    With a byte-order mark that says so. Without one (some Windows tools, and the bytes of a
    "Unicode text" file that lost its first two), text in the Latin script has a zero byte at every
    second position, the high byte of each character: at odd positions in little-endian, even in
    big-endian. A binary file has its zeros anywhere, so at least 40 % of one parity must be zero
    and almost none (under 1 %) of the other; the decoded text is checked too (see
    :func:`_looks_like_text`)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16", "it starts with a UTF-16 byte-order mark"
    pairs = len(head) // 2
    if pairs < 2:
        return None
    even, odd = head[0:2 * pairs:2].count(0), head[1:2 * pairs:2].count(0)
    for codec, high, low, order in (("utf-16-le", odd, even, "little"), ("utf-16-be", even, odd, "big")):
        if high >= 0.4 * pairs and low <= 0.01 * pairs:
            return codec, (f"it has no byte-order mark, but a zero byte at every second position, as UTF-16 "
                           f"{order}-endian text has")
    return None


def _looks_like_text(text: str) -> bool:
    """No control character but tab, line ends and form feed: what decoded binary data always has."""
    return not any(c < " " and c not in "\t\n\r\f" for c in text)


def _decode(path: Path, name: str) -> tuple[str, list[str]]:
    return decode_bytes(path.read_bytes(), name)


def decode_bytes(data: bytes, name: str, hint: str = _EXPORT_HINT) -> tuple[str, list[str]]:
    """(the text of an upload's bytes, notes on how it was read): UTF-8, UTF-16 (with or without its
    byte-order mark) or, where neither fits, Latin-1 with a note. Raises :class:`DataError` with one
    sentence, ending in ``hint`` (what to upload instead), where the bytes are not text."""
    head = data[:8192]
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            raise DataError(f"{name} is a binary file ({kind}), not text; {hint}.")
    utf16 = utf16_of(head)
    if utf16:  # Excel's "Unicode text", Windows tools
        codec, why = utf16
        try:
            text = data.decode(codec)
        except UnicodeDecodeError as e:
            raise DataError(f"{name} looks like UTF-16 text ({why}) but byte {e.start} cannot be decoded; "
                            f"{hint}.") from e
        if codec == "utf-16" or _looks_like_text(text[:4096]):  # else binary, said below
            return text.lstrip("\ufeff"), [f"read {name} as UTF-16 ({why})"]
    if b"\x00" in head:
        at = head.index(b"\x00")
        raise DataError(f"{name} is a binary file (it contains a NUL byte at byte {at}), not text; {hint}.")
    text, encoding = decode_text(data)
    notes = []
    if encoding != "utf-8":
        try:  # the first bad byte, located in the bytes (a single-byte encoding keeps their lines)
            data.decode("utf-8-sig")
            where = ""
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            where = f" (the first non-UTF-8 byte is on line {line})"
        which = "Windows-1252 (its curly quotes, dashes and euro signs)" if encoding == "windows-1252" else "Latin-1"
        marked = " though it begins with UTF-8's byte-order mark," if data.startswith(codecs.BOM_UTF8) else ""
        notes.append(f"read as {which} because the file is not valid UTF-8{where},{marked} so accented characters may "
                     f"be wrong if it was saved in another encoding: re-save it as UTF-8 if so")
    return text, notes
