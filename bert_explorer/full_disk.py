"""A full disk, said in one sentence.

Saving a checkpoint, an index or a cache entry on a file system with no room left fails deep
inside a library, each in its own words: Python's ``OSError(ENOSPC)``; safetensors' and
tokenizers' "I/O error: No space left on device (os error 28)"; numpy's "5142144 requested and
153536 written" (np.save); torch.save's zip writer
"[enforce fail at inline_container.cc:672] . unexpected pos 11264 vs 11156", a short write that
names no cause (the OSError is attached as its context only when it wrote through a Python file).
:func:`saving` turns each of them into :class:`DiskFull`, whose message says where there is no
room, how much is free, and what to do next; every other error passes through untouched.
"""
from __future__ import annotations

import errno
import re
import shutil
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

# ENOSPC: the file system is full; EDQUOT: the user's quota on it is.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# numpy's ndarray.tofile (under np.save) reports a short write without its errno: "N requested and M written".
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


class DiskFull(OSError):
    """No room left to write; the message is one sentence: where, how much is free, what next."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror


class CacheNotKept(UserWarning):
    """A result was computed but could not be kept in the cache; it is shown all the same."""


def is_disk_full(error: BaseException | None) -> bool:
    """Did ``error`` (or an error it was raised from or while handling) fail for lack of space?"""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            return True
        text = str(error)
        if any(f"(os error {n})" in text for n in NO_SPACE):  # Rust's io::Error (safetensors, tokenizers)
            return True
        if isinstance(error, RuntimeError) and "inline_container" in text and (
                "unexpected pos" in text or "file write failed" in text):  # torch's zip writer wrote short
            return True
        if isinstance(error, OSError) and _SHORT_WRITE.fullmatch(text):  # numpy's tofile (np.save) wrote short
            return True
        error = error.__cause__ or error.__context__
    return False


def free_bytes(folder: str | Path) -> int:
    """Free space on the file system that holds ``folder`` (or its nearest existing parent)."""
    p = Path(folder).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def size_text(n: float) -> str:
    """Bytes for a reader: 900 kB, 12.3 MB, 4.1 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}" if n < 100 * scale else f"{n / scale:,.0f} {unit}"
    return f"{int(n)} bytes"


def sentence(folder: str | Path, what: str, then: str | Callable[[], str], needed: float | None = None,
             basis: str | None = None) -> str:
    """'no space left in FOLDER to WHAT (X free[, about Y needed[: BASIS]]); THEN'."""
    room = f"{size_text(free_bytes(folder))} free" + (f", about {size_text(needed)} needed" if needed else "") \
        + (f": {basis}" if needed and basis else "")
    return f"no space left in {folder} to {what} ({room}); {then() if callable(then) else then}"


@contextmanager
def saving(folder: str | Path, what: str, then: str | Callable[[], str], needed: float | None = None):
    """Inside the block, a write that fails for lack of space raises :class:`DiskFull` with
    :func:`sentence` (the free space is measured after the failure, once the caller's partial
    files are gone; ``then`` may be a function, asked only then); any other error, and a DiskFull
    raised further in, passes unchanged."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as e:
        if not is_disk_full(e):
            raise
        raise DiskFull(sentence(folder, what, then, needed)) from e
