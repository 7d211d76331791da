"""Building a nearest-neighbour index in the background: one builder per index, progress on disk.

An index takes minutes to build (``analysis/neighbours/index.py``), so the page starts the build as a
separate process, ``python -m bert_explorer.cli.neighbours build ...``, in its own process
session: it keeps going when the browser tab closes, when Streamlit reruns the page, and even
when the server stops. Every browser session (and the CLI) finds it through files in one work
folder per index, ``<cache>/neighbours-work/<entry name>/``:

| file | what |
|---|---|
| ``lock`` | an ``flock`` held by the builder for the whole build; the kernel drops it when the builder ends, even by ``kill -9``, so a dead builder never blocks the next one |
| ``progress.json`` | state (starting, running, done, failed), fraction, message, pid; replaced atomically |
| ``log.txt`` | the background process's output (for a failed build) |
| ``shards/`` | finished parts of the index, each written whole; a stopped build resumes from them |

Two sessions pressing *Build* for the same index start at most one build: the second sees
the lock held (or a fresh "starting") and only watches; a builder that finds the lock taken
anyway stops at once with :class:`BuildBusy` before writing anything.

The job-keeping itself is the rest of the run system's (the lock, the atomic write, the background
start, the log tail: ``runs/``, ``atomic.py``); what this module adds is the index's own: where its work
folder is, which command builds it, and what its states mean to the page. A build is not a run:
it has no run folder, settings or checkpoints, and its result is a cache entry.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .. import atomic
from ..disk_cache import cache_root
from . import lock
from .background import reap_when_done, spawn
from .report import log_tail as read_log_tail

STARTING_GRACE_S = 120  # a "starting" build whose process has not taken the lock by then has failed to start


class BuildBusy(RuntimeError):
    """Another process is building this index right now."""


def work_dir(entry_path: Path) -> Path:
    """The work folder of the index whose finished entry will be ``entry_path``."""
    return cache_root() / "neighbours-work" / Path(entry_path).name


def read_progress(entry_path: Path) -> dict:
    try:
        return json.loads((work_dir(entry_path) / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def write_progress(entry_path: Path, **fields) -> None:
    atomic.write_json(work_dir(entry_path) / "progress.json",
                      {**fields, "pid": fields.get("pid", os.getpid()), "updated": time.time()})


@contextmanager
def builder_lock(entry_path: Path):
    """Hold the index's build lock for the ``with`` block, or raise BuildBusy at once."""
    d = work_dir(entry_path)
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not lock.take(fd, wait=False):
            holder = read_progress(entry_path).get("pid")
            raise BuildBusy(f"this index is already being built by process {holder or '?'}; "
                            "wait for it (the page shows its progress)")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def lock_held(entry_path: Path) -> bool:
    """Is a builder working on this index now?"""
    return lock.is_held(work_dir(entry_path) / "lock")


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
            p.get("pid") is None or lock.pid_alive(p.get("pid"))):
        return {**p, "state": "building"}
    if s == "failed":
        return p
    if s in ("starting", "running"):
        return {**p, "state": "stopped"}
    return {"state": "missing", "fraction": 0.0}


def log_tail(entry_path: Path, lines: int = 20) -> str:
    """The end of the build's log ("" before there is one)."""
    return read_log_tail(work_dir(entry_path) / "log.txt", lines) or ""


def start_background(entry_path: Path, argv: list[str]) -> subprocess.Popen | None:
    """Start ``python -m bert_explorer.cli.neighbours build <argv>`` as its own process session
    (None when a builder is already at work). It gets one CPU core fewer than the machine has
    (``runs.background.spawn``), so the app stays responsive while it builds."""
    if lock_held(entry_path):
        return None
    d = work_dir(entry_path)
    d.mkdir(parents=True, exist_ok=True)
    # "starting" first, so every session sees the build at once; the builder replaces it
    # with "running" (and its pid) as soon as it holds the lock.
    write_progress(entry_path, state="starting", fraction=0.0, message="starting the build process…", pid=None)
    with (d / "log.txt").open("a") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} build {' '.join(argv)}\n")
    proc = spawn([sys.executable, "-m", "bert_explorer.cli.neighbours", "build", *argv], d / "log.txt")
    if read_progress(entry_path).get("state") == "starting":  # name the process, so a crash at start shows
        write_progress(entry_path, state="starting", fraction=0.0, message="starting the build process…",
                       pid=proc.pid)
    reap_when_done(proc)  # nobody else waits for it: without this an ended build stays a zombie of the server
    return proc


def builds_running() -> list[dict]:
    """The progress of every index being built on this machine now (any model, corpus, layer)."""
    root = cache_root() / "neighbours-work"
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        entry_path = cache_root() / d.name
        if lock_held(entry_path):
            out.append({**read_progress(entry_path), "entry": d.name})
    return out
