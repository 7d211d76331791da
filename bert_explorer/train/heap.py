"""The C library's heap kept between training steps: the ``memory kept between steps`` CPU lever.

A CPU training step allocates and frees the same large tensors every step (the masked-LM head's [N, V]
logits and their gradient, the word matrix's bf16 copy and its gradient, the activations kept for the
backward pass). glibc's ``malloc`` hands a block over 32 MiB straight from the kernel (``mmap``) and gives it
back when freed, and it returns the top of its heap to the kernel once 64 MiB lie free there: every step
then touches fresh pages, and the kernel zeroes each 4 KiB page on its first touch. explorer-mini's bf16
pre-training step on the 2-core AMX Xeon took about 100,000 such page faults (400 MB of zeroing) and
3,600 with the heap kept, and ran 1.26× as fast (the median of 16 alternated pairs, a busy moment).

:func:`kept` raises both thresholds while training runs (blocks up to 1 GiB come from the heap, and freed
memory stays in it for the next step) and afterwards sets them where a long run leaves glibc's own (32 and 64
MiB: glibc's thresholds, which rise as blocks are freed, stay fixed once ``mallopt`` has set them), returning
what lies free to the kernel: a process's memory after training is what it was before, not its training peak. The
numbers a step computes are the same to the bit; only where the memory comes from changes. Only glibc has
these settings (Linux); elsewhere :func:`available` is False and the lever is not offered.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading
from contextlib import contextmanager

LEVER = "memory kept between steps"

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
KEPT_MMAP = 1 << 30       # blocks up to 1 GiB from the heap (base's [N, V] logits: ~150 MB)
KEPT_TRIM = (1 << 31) - 1  # ... and free memory stays in it (mallopt takes an int)
# glibc's own figures where a long run's steps leave them: its threshold rises, block by freed block,
# to at most 32 MiB, and the heap is trimmed at twice that (DEFAULT_MMAP_THRESHOLD_MAX, malloc.c)
GLIBC_MMAP, GLIBC_TRIM = 32 << 20, 64 << 20

_lock = threading.Lock()
_depth = 0  # kept() blocks open now (nested: the outermost puts the figures back)
_libc = None
_keeping = False  # keep() called and no release() since
_ever_kept = False  # keep() called in this process: glibc's moving thresholds are fixed from then on


def _glibc():
    """glibc loaded through ctypes, or None where the C library is another one (macOS, musl, Windows)."""
    global _libc
    if _libc is None:
        lib = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                loaded = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                if hasattr(loaded, "mallopt") and hasattr(loaded, "malloc_trim"):
                    lib = loaded
            except OSError:
                pass
        _libc = lib
    return _libc or None


def available() -> bool:
    """Can this process keep its heap between steps (glibc's ``mallopt``)?"""
    return _glibc() is not None


def keep() -> bool:
    """Keep freed memory in the heap from now on; False where this C library cannot (nothing changed)."""
    global _keeping, _ever_kept
    libc = _glibc()
    if libc is None:
        return False
    _keeping = _ever_kept = True
    # (a glibc that refuses the 1 GiB threshold keeps the largest it documents)
    if not libc.mallopt(_M_MMAP_THRESHOLD, KEPT_MMAP):
        libc.mallopt(_M_MMAP_THRESHOLD, GLIBC_MMAP)
    libc.mallopt(_M_TRIM_THRESHOLD, KEPT_TRIM)
    return True


def release() -> None:
    """Thresholds as a long run leaves glibc's (fixed at them from now on), and the free memory the heap kept
    returned to the kernel. Nothing where the heap was never kept in this process (glibc's own, moving
    thresholds stay), nor inside a :func:`kept` block (the block's owner gives it back when it ends)."""
    global _keeping
    libc = _glibc()
    if libc is None or not _ever_kept or _depth > 0:
        return
    _keeping = False
    libc.mallopt(_M_MMAP_THRESHOLD, GLIBC_MMAP)
    libc.mallopt(_M_TRIM_THRESHOLD, GLIBC_TRIM)
    libc.malloc_trim(0)


def keeping() -> bool:
    """Is the heap kept now (:func:`keep` called, :func:`release` not since)?"""
    return _keeping


@contextmanager
def kept(on: bool = True):
    """The heap kept between steps inside the block (``on``), given back after the outermost one."""
    global _depth
    if not on:
        yield
        return
    try:
        with _lock:
            _depth += 1
            keep()
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                release()
