"""Building a cache entry in the background (a nearest-neighbour index, a model's measured quality):
one builder per entry, progress on disk.

An index takes minutes to build (``analysis/neighbours/index.py``), so the page starts the build as a
separate process, ``python -m bert_explorer.cli.neighbours build ...``, in its own process
session: it keeps going when the browser tab closes, when Streamlit reruns the page, and even
when the server stops. Every browser session (and the CLI) finds it through files in one work
folder per index, ``<cache>/neighbours-work/<entry name>/``:

| file | what |
|---|---|
| ``lock`` | a file lock (``file_lock.py``) held by the builder for the whole build; it goes with the builder, even by ``kill -9``, so a dead builder never blocks the next one |
| ``progress.json`` | state (starting, running, done, failed), fraction, message, pid; replaced atomically |
| ``log.txt`` | the background process's output (for a failed build) |
| ``shards/`` | finished parts of the index, each written whole; a stopped build resumes from them |
| ``.reserved`` | the room the build holds in the disk cache's quota while it runs (``disk_cache.make_room``) |

:func:`start_build` checks and starts in one step, under a lock of the whole server
(``neighbours-work/.start.lock``): two sessions pressing *Build* at the same instant, in two
threads or two processes, start one build. For the same index the second sees the lock held
(or a fresh "starting") and only watches; in classroom mode a second index waits until the
first is built; and a build that the disk cache's quota has no room for is refused
(``disk_cache.make_room``). A builder that finds the lock taken anyway stops at once with
:class:`BuildBusy` before writing anything.

The job-keeping itself is the rest of the run system's (the lock, the atomic write, the background
start, the log tail: ``runs/``, ``atomic.py``); what this module adds is the index's own: where its work
folder is, which command builds it, and what its states mean to the page. A build is not a run:
it has no run folder, settings or checkpoints, and its result is a cache entry.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .. import atomic, disk_cache
from ..disk_cache import cache_root
from .. import file_lock, processes
from .background import reap_when_done, spawn
from .finder import read_json
from .report import duration_text, seconds_left
from .report import log_tail as read_log_tail

# A "starting" build whose process has not taken the lock by then has failed to start; until then
# the disk cache leaves its work folder alone (a folder touched this recently is in use).
STARTING_GRACE_S = disk_cache.WORK_FRESH_S
START_LOCK_NAME = ".start.lock"  # in neighbours-work/: held while a build is checked and started


class BuildBusy(RuntimeError):
    """Another process is building this index right now."""


def work_dir(entry_path: Path) -> Path:
    """The work folder of the index whose finished entry will be ``entry_path``."""
    return disk_cache.work_root() / Path(entry_path).name


def read_progress(entry_path: Path) -> dict:
    return read_json(work_dir(entry_path) / "progress.json")


def write_progress(entry_path: Path, **fields) -> None:
    """The build's progress where pages and the CLI read it; a running build's start is kept (the time
    left is counted from it: ``report.seconds_left``)."""
    if fields.get("state") in ("starting", "running", "done", "failed", "stopped"):
        # the time said when the build was started (its starter wrote it with "starting"), kept for its time left
        # (also by the starter's second "starting", which names the process: it dropped it, and an SAE build's
        # page showed no time left for its first 100 s)
        before = read_progress(entry_path)
        fields.setdefault("said", before.get("said"))
    if fields.get("state") == "running":
        same = before.get("pid") == fields.get("pid", os.getpid())
        if "started" not in fields:
            fields["started"] = before["started"] if same and before.get("started") else time.time()
        # the first progress past 0 (report.seconds_left counts the rate from it, not from the start)
        if same and before.get("since"):
            fields["since"] = before["since"]
        elif (fields.get("fraction") or 0.0) > 0:
            fields["since"] = [time.time(), float(fields["fraction"])]
    atomic.write_json(work_dir(entry_path) / "progress.json",
                      {**fields, "pid": fields.get("pid", os.getpid()), "updated": time.time()})


@contextmanager
def builder_lock(entry_path: Path):
    """Hold the index's build lock for the ``with`` block, or raise BuildBusy at once."""
    d = work_dir(entry_path)
    while True:  # acquire_file: the lock of the folder that is there once it is taken, not of one the
        d.mkdir(parents=True, exist_ok=True)  # cache moved away meanwhile (a stopped build's parts)
        try:
            fd = file_lock.acquire_file(d / "lock", wait=False)
            break
        except FileNotFoundError:
            continue
    if fd is None:
        holder = read_progress(entry_path).get("pid")
        raise BuildBusy(f"this index is already being built by process {holder or '?'}; "
                        "wait for it (the page shows its progress)")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        file_lock.release(fd)


def build_entry(entry_path: Path, is_complete, work, progress=None) -> Path:
    """Build one cache entry that is a few files (a measurement, a map): ``work(say)`` computes them,
    reporting with ``say(fraction, message)``, and returns {file name: text}; they are written into
    ``entry_path`` in one rename. An entry built already is returned at once. Holds the build's lock
    (:class:`BuildBusy` when another process builds it now) and writes its progress where every page
    and the CLI read it; a failure is written there too, in one sentence, and raised again."""
    entry_path = Path(entry_path)
    if is_complete(entry_path):
        return entry_path
    report = progress or (lambda f, m: None)
    with builder_lock(entry_path):
        if is_complete(entry_path):  # finished while we waited
            return entry_path
        started = time.time()

        def say(fraction: float, message: str, state: str = "running") -> None:
            write_progress(entry_path, state=state, fraction=fraction, message=message, started=started)
            report(fraction, message)

        try:
            files = work(say)
            with disk_cache.writing(entry_path) as tmp:
                for name, text in files.items():
                    (tmp / name).write_text(text)
            say(1.0, f"done in {duration_text(time.time() - started)}", state="done")
        except Exception as e:  # (a kill leaves "running": the page then says "stopped")
            write_progress(entry_path, state="failed", error=f"{type(e).__name__}: {e}", fraction=0.0,
                           message=f"failed: {e}")
            raise
    return entry_path


def lock_held(entry_path: Path) -> bool:
    """Is a builder working on this index now?"""
    return file_lock.is_held(work_dir(entry_path) / "lock")


def build_state(entry_path: Path, complete: bool) -> dict:
    """Where the build of one index stands, for a page or the CLI:

    ``state`` is "ready" (the index exists), "building" (a builder is at work, or was just
    started), "stopped" (a builder ended without finishing: building again resumes),
    "failed" (it raised an error, in ``error``) or "missing" (never built). ``fraction`` and
    ``message`` come from the builder's last report."""
    if complete:
        return {"state": "ready", "fraction": 1.0}
    p = read_progress(entry_path)
    if lock_held(entry_path):
        return {**p, "state": "building"}
    s = p.get("state")
    if s == "starting" and time.time() - p.get("updated", 0) < STARTING_GRACE_S and (
            p.get("pid") is None or processes.pid_alive(p.get("pid"))):
        return {**p, "state": "building"}
    if s == "failed":
        return p
    if s in ("starting", "running"):
        return {**p, "state": "stopped"}
    return {"state": "missing", "fraction": 0.0}


def log_tail(entry_path: Path, lines: int = 20) -> str:
    """The end of the build's log ("" before there is one)."""
    return read_log_tail(work_dir(entry_path) / "log.txt", lines) or ""


def start_refusal(entry_path: Path, one_at_a_time: bool, what: str = "index") -> str | None:
    """Why the build of ``entry_path`` may not start now, in one sentence, or None: it is built,
    it is being built, or (``one_at_a_time``, classroom mode, so the class does not starve the
    server's CPU) another build is (of any kind: they share the CPU). A page shows it in place of
    its button; :func:`start_build` asks again, under its lock. ``what`` names the entry in the
    sentence ("index", "measurement")."""
    entry_path = Path(entry_path)
    if entry_path.is_dir():
        return f"This {what} is already built."
    if build_state(entry_path, False)["state"] == "building":
        return f"This {what} is already being built; wait for it to finish (its progress shows on the page)."
    if one_at_a_time and (running := builds_running()):
        return (f"Another background build is running on this server now ({running[0].get('message') or 'starting'}); "
                "in classroom mode one runs at a time. Come back when it is done.")
    return None


BUILD_INDEX = ("bert_explorer.cli.neighbours", "build")  # the command that builds a nearest-neighbour index


def start_build(entry_path: Path, argv: list[str], *, one_at_a_time: bool, room_bytes: float = 0,
                command: tuple[str, ...] = BUILD_INDEX, what: str = "index", lesson: str | None = None,
                said_s: float | None = None) -> str | None:
    """Start ``python -m <command> <argv>`` (by default ``bert_explorer.cli.neighbours build``: any
    builder that takes :func:`builder_lock` and reports with :func:`write_progress`) as its own
    process session, and return None; or start nothing and return one sentence why (:func:`start_refusal`, or the
    disk cache has no room for the build's ``room_bytes``: ``disk_cache.make_room``).

    The check and the start are one step: both happen under the server's start lock (a
    file lock, so it holds between processes as between the threads of one), and the build is
    "starting" on disk before the lock is let go. Two sessions pressing *Build* together start
    one build, and the second is told why. The build gets one CPU core fewer than the machine has
    (``runs.background.spawn``), so the app stays responsive while it builds. ``lesson`` names the build
    in a lesson's words ("Features of layer 3"), for what a student is told while it runs (:func:`preparing`);
    ``said_s``, the time said for it now (``speed.seconds_now``), is its time left until its progress says more."""
    entry_path = Path(entry_path)
    disk_cache.work_root().mkdir(parents=True, exist_ok=True)
    with file_lock.holding(disk_cache.work_root() / START_LOCK_NAME):
        if why := start_refusal(entry_path, one_at_a_time, what):
            return why
        if room_bytes and (why := disk_cache.make_room(room_bytes, work_dir(entry_path))):
            return why
        atomic.write_json(work_dir(entry_path) / LESSON_FILE, {"lesson": lesson or f"a {what}"})
        _spawn_builder(entry_path, [*command, *argv], said_s)
    return None


LESSON_FILE = "lesson.json"  # what a build is, in a lesson's words, beside its progress


def preparing() -> list[dict]:
    """What the server prepares now, for a student: each running build's ``lesson`` (its name in a
    lesson's words, as the page that started it said) and ``seconds_left`` (from its progress so far,
    None until there is enough of it); never the builder's own progress line."""
    out = []
    for b in builds_running():
        lesson = read_json(disk_cache.work_root() / b["entry"] / LESSON_FILE).get("lesson")
        out.append({"lesson": lesson or "work started from a terminal",
                     "seconds_left": seconds_left(b.get("started"), b.get("fraction") or 0.0, since=b.get("since"),
                                                  said=b.get("said"))})
    return out


def _spawn_builder(entry_path: Path, command: list[str], said_s: float | None = None) -> None:
    d = work_dir(entry_path)
    d.mkdir(parents=True, exist_ok=True)
    # "starting" first, so every session sees the build at once; the builder replaces it
    # with "running" (and its pid) as soon as it holds the lock.
    write_progress(entry_path, state="starting", fraction=0.0, message="starting the build process…", pid=None,
                   said=[time.time(), said_s] if said_s is not None else None)
    with (d / "log.txt").open("a") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n")
    proc = spawn([sys.executable, "-m", *command], d / "log.txt")
    if read_progress(entry_path).get("state") == "starting":  # name the process, so a crash at start shows
        write_progress(entry_path, state="starting", fraction=0.0, message="starting the build process…",
                       pid=proc.pid)
    reap_when_done(proc)  # nobody else waits for it: without this an ended build stays a zombie of the server


def builds_running() -> list[dict]:
    """The progress of every index being built on this machine now, or just started (any model,
    corpus, layer)."""
    root = disk_cache.work_root()
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if d.is_dir() and not d.name.startswith("."):
            state = build_state(cache_root() / d.name, False)
            if state["state"] == "building":
                out.append({**state, "entry": d.name})
    return out
