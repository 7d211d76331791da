"""The writer lock of a run folder, built on the package's file locks (``file_lock.py``; live processes
are told from dead ones by ``processes.py``). The run system uses three locks: a run's ``.writer.lock``
(below), its ``.start.lock`` (starting and deleting, ``runs/background.py``) and the runs root's
``.gpu.lock`` (``runs/gpu_queue.py``).

Pre-training, fine-tuning (full, feature-based, left-to-right) and ablations run inside
:func:`writer_lock` (via :func:`writes_run`): a lock on ``RUN/.writer.lock`` that is let go when
the holder ends, even by ``kill -9``, so a dead holder's lock is simply free and the next writer
takes it over (and says so in the run's log). A second writer gets :class:`RunBusy`, one sentence
naming the folder and the holder, before it writes anything; the CLI exits 2. Readers take no lock.

A background run's lock is taken by whoever starts it, and passes to the run's process with no
moment in between when another writer could take it. Where locks travel with a descriptor
(``flock``) the starter hands its descriptor down (named in ``BERT_EXPLORER_WRITER_FD``) and the
process adopts it. Where a lock stays with the process that took it (Windows, records), the
starter lets its lock go while it holds the run's ``.start.lock``, and the process takes the writer
lock itself before the starter lets that go; every other writer takes the writer lock only while it
holds ``.start.lock`` too (a moment), so none can slip in between.

Processes are told apart by pid and creation time (``psutil``): the kernel hands a pid out again
once its process is gone, and the pair names one process for good (``exec`` keeps both).
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


from ..file_lock import LOCKS_TRAVEL, acquire, holding, is_held, release
from ..full_disk import DiskFull, is_disk_full, sentence
from ..processes import process_alive, process_start
from .run import WRITER_LOCK_NAME, Run, new_run_refusal

START_LOCK_NAME = ".start.lock"
WRITER_FD_ENV = "BERT_EXPLORER_WRITER_FD"  # a background run's lock, handed down by its starter
class RunBusy(RuntimeError):
    """Another live process is writing this run."""


_held: dict[str, list] = {}  # run path -> [fd, depth]: this process's writer locks (re-entrant)
_handed_down: set[str] = set()  # the runs whose lock a starter handed to this process (a background run's)
_held_guard = threading.Lock()


def _describe_holder(info: dict) -> str:
    if info.get("handing_over"):  # a starter holds it for the run's process, which is not up yet: its pid
        # is the app's server (or a command), which "stop it" must not send anyone to
        return (f"`{info.get('command') or 'a run'}`, starting since "
                f"{time.strftime('%H:%M:%S', time.localtime(info.get('since') or time.time()))}")
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


def acquire_writer(run_dir: str | Path, what: str | None = None, *, gated: bool = False,
                   handing_over: bool = False) -> int:
    """Take ``run_dir``'s writer lock without waiting and return its descriptor (inheritable
    by a child only when asked, see :func:`runs.background.start_background`). Raises :class:`RunBusy` naming
    the holder when another live process has it. A lock whose holder died is free again (it went
    with the process), and is simply taken over. Creates ``run_dir``.

    ``gated``: the caller holds the run's ``.start.lock`` already (a starter, a deleter, or the
    process a starter holds it for). Where locks do not travel, every other writer takes that lock
    around this one, so that none slips in while a starter hands a run to its process. ``handing_over``: taken
    for a process about to start, which writes itself as the holder once it runs."""
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    lock_path = path / WRITER_LOCK_NAME
    fd = _inherited_fd(lock_path) if lock_path.exists() else None
    if fd is not None:  # adopted: the starter (or our launcher, before it became us) holds it for us
        os.environ.pop(WRITER_FD_ENV, None)  # adopted once; children get their own hand-down
        _handed_down.add(str(path.resolve()))
        os.set_inheritable(fd, False)
        return _write_holder(fd, what)
    if LOCKS_TRAVEL or gated:
        return _take_writer(path, what, handing_over)
    with holding(path / START_LOCK_NAME):
        return _take_writer(path, what, handing_over)


def _take_writer(path: Path, what: str | None, handing_over: bool = False) -> int:
    fd = os.open(path / WRITER_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    if not acquire(fd, wait=False):
        os.close(fd)
        raise RunBusy(f"{path} is being written by {_describe_holder(read_holder(path))}; wait for that run "
                      "to end (or stop it on its page in the app: Pre-train, Fine-tune or Ablation studio) or choose "
                      "another output folder") from None
    before = read_holder(path)
    if (before.get("pid") and before.get("pid") != os.getpid()
            and not process_alive(before["pid"], before.get("pid_created"))):
        # the last writer was killed: its lock went with it; say so in the run's log
        try:
            with (path / "log.txt").open("a") as f:
                f.write(time.strftime("%H:%M:%S ") + f"taking over from pid {before['pid']}, which ended without "
                        "releasing the run\n")
        except OSError:
            pass
    return _write_holder(fd, what, handing_over)


def _write_holder(fd: int, what: str | None, handing_over: bool = False) -> int:
    info = {"pid": os.getpid(), "pid_created": process_start(os.getpid()), "since": time.time(),
            "command": what or " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:3]),
            **({"handing_over": True} if handing_over else {})}
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)  # (not os.pwrite, which Windows lacks)
    os.write(fd, json.dumps(info).encode())
    return fd


@contextlib.contextmanager
def writer_lock(run_dir: str | Path, what: str | None = None):
    """Hold ``run_dir``'s writer lock for the block (re-entrant within one process): every
    writer of a run (pre-training, fine-tuning, an ablation) runs inside one. Raises
    :class:`RunBusy` before anything is written when another live process holds it."""
    path = Path(run_dir)
    made, above = [], path.absolute()
    while not above.exists():  # the folders this lock makes, the run's first, then those above it
        made.append(above)
        above = above.parent
    key, existed = str(path.resolve()), not made
    with _held_guard:
        entry = _held.get(key)
        if entry is None:
            try:
                entry = _held[key] = [acquire_writer(path, what), 0]
            except OSError as e:
                if not is_disk_full(e) or isinstance(e, DiskFull):
                    raise
                # (a full disk met the lock's first bytes: a traceback, and a folder holding only the lock)
                if made:
                    _remove_made(path, made)
                raise DiskFull(sentence(path.parent if made else path, "start writing a run there",
                                        "free some space, then run the same again")) from None
        entry[1] += 1
    try:
        yield
    finally:
        with _held_guard:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                if not existed:  # refused before writing anything (bad data): leave no empty folder
                    _remove_made(path, made)
                with contextlib.suppress(OSError):  # a clean end (a Stop among them): the next writer takes
                    os.ftruncate(entry[0], 0)        # the lock over without saying its holder died
                release(entry[0])


def _remove_made(path: Path, made: list[Path]) -> None:
    """The folders a writer's lock made (the run's first), where they hold nothing but the locks."""
    with contextlib.suppress(OSError):
        locks = {WRITER_LOCK_NAME, START_LOCK_NAME}  # (.start.lock: a writer where locks stay put)
        if {p.name for p in path.iterdir()} <= locks:
            for name in locks:
                (path / name).unlink(missing_ok=True)
            for folder in made:  # (one that holds something since stops this)
                folder.rmdir()


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

            if refusal := new_run_refusal(run_dir):
                raise ValueError(refusal)
            with writer_lock(run_dir, what):
                _drop_stale_stop(Path(run_dir))
                return fn(*args, **kwargs)
        return locked
    return wrap


def _drop_stale_stop(run_dir: Path) -> None:
    """A STOP file found by a writer that took the run's lock itself, in a run an earlier process wrote, is a Stop
    meant for that process, which ended before it read it (killed, or cut off between its last save and clearing
    it): left there, it stopped this process's resume before its first step, as if asked. A background run's
    starter clears STOP before it hands the lock down, so one found by that process was asked since, for this
    very run, and stays."""
    key = str(run_dir.resolve())
    if key in _handed_down or _held.get(key, [None, 0])[1] != 1 or not (run_dir / "STOP").exists():
        return
    run = Run(run_dir)
    if not (run_dir / "status.json").exists():  # no process has written it yet: a Stop asked before its start is its
        return
    run.clear_stop()
    run.log("removed a STOP file left by an earlier process that ended before it stopped; this run goes on")


def writer_busy(run_dir: str | Path) -> str | None:
    """One sentence when a live process (other than this one) writes ``run_dir``, else None."""
    if str(Path(run_dir).resolve()) in _held:
        return None
    lock_path = Path(run_dir) / WRITER_LOCK_NAME
    if lock_path.exists() and _inherited_fd(lock_path) is not None:  # held for this process by its starter
        return None
    if not is_held(lock_path):
        return None
    return (f"{run_dir} is being written by {_describe_holder(read_holder(run_dir))}; wait for that run to end "
            "or stop it first")
