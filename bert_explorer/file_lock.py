"""File locks, taken through the operating system's own (``lock_backends.py``: ``flock`` on Linux and
macOS, ``LockFileEx`` on Windows, records of live holders where a system gives Python neither).

A lock belongs to an open file, and it is let go when that file is closed, which happens when its
process ends, even by ``kill -9``: a dead holder never blocks the next one. The run system takes a
run's writer lock and its ``.start.lock`` through here (``runs/lock.py``, ``runs/background.py``), the
GPU queue the runs root's ``.gpu.lock``, a background build one per cache entry
(``runs/neighbour_jobs.py``), and the disk cache a shared one on each entry while it is read
(``disk_cache.py``), so that freeing room never removes an entry in use. :func:`release` lets a lock
go (closing the descriptor does too).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from . import lock_backends

BACKEND = lock_backends.pick()
LOCKS_TRAVEL = BACKEND.travels  # does a child that inherits a locked descriptor hold its lock?


def acquire(fd: int, *, wait: bool = True, shared: bool = False) -> bool:
    """Take the exclusive lock of the open file ``fd`` (``shared=True``: a shared one, which any
    number of readers hold together and which keeps out only an exclusive one): wait for it, or
    with ``wait=False`` return False at once when another open file holds it."""
    return BACKEND.lock(fd, exclusive=not shared, wait=wait)


def release(fd: int) -> None:
    """Let the lock of ``fd`` go and close it."""
    try:
        BACKEND.unlock(fd)
    finally:
        os.close(fd)


def acquire_file(path: str | Path, *, wait: bool = True, shared: bool = False) -> int | None:
    """Open ``path`` (made if missing) and :func:`acquire` its lock: the open descriptor (closing it
    lets the lock go), or None when another open file holds it and ``wait`` is False.

    The lock is on the file that is at ``path`` once it is taken. A folder can be renamed away
    while we wait (the disk cache moves an entry aside before deleting it): a lock on the file
    that went with it would protect nothing, so that file is let go and ``path`` opened again.
    FileNotFoundError when ``path``'s folder is gone."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not acquire(fd, wait=wait, shared=shared):
                os.close(fd)
                return None
            held, there = os.fstat(fd), os.stat(path)
            if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino):
                return fd
        except FileNotFoundError:
            pass  # moved away after we opened it: open again (which says whether the folder is still there)
        except BaseException:
            release(fd)
            raise
        release(fd)


def is_held(lock_path: str | Path) -> bool:
    """Does another open file hold ``lock_path``'s lock (an exclusive one) now?"""
    try:
        return BACKEND.held(Path(lock_path))
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def holding(lock_path: str | Path):
    """Hold ``lock_path``'s lock for the block, waiting for it first (e.g. ``.start.lock``:
    the check and the launch of a run happen under it, so two tabs pressing Start on one folder
    at the same instant launch one process)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        acquire(fd)
        yield
    finally:
        release(fd)
