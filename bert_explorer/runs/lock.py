"""File locks: the one module that calls ``flock``; the writer lock of a run folder built on them;
and telling live processes from dead ones.

An ``flock`` belongs to an open file, and the kernel releases it when the last descriptor of
that file is closed, which happens when its process ends, even by ``kill -9``: a dead holder
never blocks the next one. The run system uses three: a run's ``.writer.lock`` (below), its
``.start.lock`` (starting and deleting, ``runs/background.py``) and the runs root's ``.gpu.lock``
(``runs/gpu_queue.py``); the nearest-neighbour build holds one per index
(``runs/neighbour_jobs.py``); the disk cache holds a shared one on each entry while it is read
(``disk_cache.py``), so that freeing room never removes an entry in use.

Pre-training, fine-tuning (full, feature-based, left-to-right) and ablations run inside
:func:`writer_lock` (via :func:`writes_run`): an ``flock`` on ``RUN/.writer.lock`` that the
kernel releases when the holder ends, even by ``kill -9``, so a dead holder's lock is simply free
and the next writer takes it over (and says so in the run's log). A second writer gets
:class:`RunBusy`, one sentence naming the folder and the holder, before it writes anything; the
CLI exits 2. A background run's lock is taken by whoever starts it and handed to the process
(an inherited descriptor named in ``BERT_EXPLORER_WRITER_FD``), which adopts it. Readers take
no lock.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import sys
import threading
import time
from pathlib import Path

try:
    import fcntl  # POSIX file locks; without them (Windows) runs are not locked
except ImportError:  # pragma: no cover
    fcntl = None

WRITER_LOCK_NAME = ".writer.lock"
START_LOCK_NAME = ".start.lock"
HAVE_LOCKS = fcntl is not None  # False on Windows: nothing is locked, runs are never queued
WRITER_FD_ENV = "BERT_EXPLORER_WRITER_FD"  # a background run's lock, handed down by its starter


def acquire(fd: int, *, wait: bool = True, shared: bool = False) -> bool:
    """Take the exclusive lock of the open file ``fd`` (``shared=True``: a shared one, which any
    number of readers hold together and which keeps out only an exclusive one): wait for it, or
    with ``wait=False`` return False at once when another open file holds it. True where there
    are no file locks (Windows), where nothing is ever locked."""
    if fcntl is None:  # pragma: no cover
        return True
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if wait:
        fcntl.flock(fd, kind)
        return True
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return True
    except OSError:  # BlockingIOError: held elsewhere
        return False


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
            os.close(fd)
            raise
        os.close(fd)


def is_held(lock_path: str | Path) -> bool:
    """Does another open file hold ``lock_path``'s lock now? A probe that takes a shared lock
    and gives it back at once, so two probes never see each other."""
    if fcntl is None or not Path(lock_path).exists():
        return False
    fd = os.open(lock_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the probe's lock


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
        os.close(fd)  # releases the lock


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A finished child that nobody waited for is a zombie: not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def process_start(pid: int | None) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or None
    where there is no /proc. A pid is reused by the kernel once its process is gone; the pair
    (pid, start) names one process for good, and ``exec`` keeps both."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid: int | None, start: int | None = None) -> bool:
    """Is the process that was ``pid`` when it started at ``start`` still running? Without a
    recorded start (or without /proc) this is :func:`pid_alive`."""
    if not pid_alive(pid):
        return False
    now = process_start(pid) if start is not None else None
    return start is None or now is None or now == start


class RunBusy(RuntimeError):
    """Another live process is writing this run."""


_held: dict[str, list] = {}  # run path -> [fd, depth]: this process's writer locks (re-entrant)
_held_guard = threading.Lock()


def _describe_holder(info: dict) -> str:
    parts = [f"pid {info['pid']}" if info.get("pid") else "another process"]
    if info.get("command"):
        parts.append(f"`{info['command']}`")
    if info.get("since"):
        parts.append("since " + time.strftime("%H:%M:%S", time.localtime(info["since"])))
    return ", ".join(parts)


def read_holder(run_dir: str | Path) -> dict:
    """What the writer lock of ``run_dir`` says about its (last) holder; {} if nothing."""
    try:
        return json.loads((Path(run_dir) / WRITER_LOCK_NAME).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _inherited_fd(lock_path: Path) -> int | None:
    """The descriptor of ``lock_path`` that a starter handed to this process (see
    :func:`runs.background.start_background`), if it is that very file."""
    fd = os.environ.get(WRITER_FD_ENV, "")
    if not fd.isdigit():
        return None
    try:
        st_fd, st_path = os.fstat(int(fd)), os.stat(lock_path)
    except OSError:
        return None
    return int(fd) if (st_fd.st_dev, st_fd.st_ino) == (st_path.st_dev, st_path.st_ino) else None


def acquire_writer(run_dir: str | Path, what: str | None = None) -> int | None:
    """Take ``run_dir``'s writer lock without waiting and return its descriptor (inheritable
    by a child only when asked, see :func:`runs.background.start_background`). Raises :class:`RunBusy` naming
    the holder when another live process has it. A lock whose holder died is free again (the
    kernel dropped it with the process), and is simply taken over. Creates ``run_dir``."""
    if fcntl is None:  # pragma: no cover
        return None
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    lock_path = path / WRITER_LOCK_NAME
    fd = _inherited_fd(lock_path) if lock_path.exists() else None
    if fd is not None:  # adopted: the starter holds it for us (and has no other use for it)
        os.environ.pop(WRITER_FD_ENV, None)  # adopted once; children get their own hand-down
        os.set_inheritable(fd, False)
        return _write_holder(fd, what)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    if not acquire(fd, wait=False):
        os.close(fd)
        raise RunBusy(f"{path} is being written by {_describe_holder(read_holder(path))}; wait for that run "
                      f"to end (or stop it on the Runs page) or choose another output folder") from None
    before = read_holder(path)
    if before.get("pid") and before.get("pid") != os.getpid() and not process_alive(before["pid"], before.get("pid_start")):
        # the last writer was killed: its lock went with it; say so in the run's log
        try:
            with (path / "log.txt").open("a") as f:
                f.write(time.strftime("%H:%M:%S ") + f"taking over from pid {before['pid']}, which ended without "
                        "releasing the run\n")
        except OSError:
            pass
    return _write_holder(fd, what)


def _write_holder(fd: int, what: str | None) -> int:
    info = {"pid": os.getpid(), "pid_start": process_start(os.getpid()), "since": time.time(),
            "command": what or " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:3])}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    return fd


@contextlib.contextmanager
def writer_lock(run_dir: str | Path, what: str | None = None):
    """Hold ``run_dir``'s writer lock for the block (re-entrant within one process): every
    writer of a run (pre-training, fine-tuning, an ablation) runs inside one. Raises
    :class:`RunBusy` before anything is written when another live process holds it."""
    path = Path(run_dir)
    key, existed = str(path.resolve()), path.exists()
    with _held_guard:
        entry = _held.get(key)
        if entry is None:
            entry = _held[key] = [acquire_writer(path, what), 0]
        entry[1] += 1
    try:
        yield
    finally:
        with _held_guard:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                if not existed:
                    with contextlib.suppress(OSError):
                        if [p.name for p in path.iterdir()] == [WRITER_LOCK_NAME]:
                            # refused before writing anything (bad data): leave no empty folder
                            (path / WRITER_LOCK_NAME).unlink()
                            path.rmdir()
                if entry[0] is not None:
                    os.close(entry[0])  # releases the lock


def writes_run(param: str, what: str):
    """Decorator: the function writes the run folder passed as argument ``param`` and runs
    inside its :func:`writer_lock`. Under torchrun only rank 0 writes, so only it locks. A folder
    that is not a run and cannot become one (``run.new_run_refusal``) is refused (ValueError) before
    its lock is taken, so nothing at all is written there."""
    def wrap(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def locked(*args, **kwargs):
            if os.environ.get("RANK", "0") != "0":
                return fn(*args, **kwargs)
            run_dir = sig.bind(*args, **kwargs).arguments[param]
            from .run import new_run_refusal  # run.py reads live processes from this module

            if refusal := new_run_refusal(run_dir):
                raise ValueError(refusal)
            with writer_lock(run_dir, what):
                return fn(*args, **kwargs)
        return locked
    return wrap


def writer_busy(run_dir: str | Path) -> str | None:
    """One sentence when a live process (other than this one) writes ``run_dir``, else None."""
    if fcntl is None or str(Path(run_dir).resolve()) in _held:
        return None
    if not is_held(Path(run_dir) / WRITER_LOCK_NAME):
        return None
    return (f"{run_dir} is being written by {_describe_holder(read_holder(run_dir))}; wait for that run to end "
            "or stop it first")
