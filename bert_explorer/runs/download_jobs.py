"""Downloading a hub model in the background: one downloader per model, its progress on disk.

BERT-Base is about 440 MB and BERT-Large 1.34 GB: minutes on a good connection, so the app starts the
download (``hub.download``) as a process of its own, ``python -m bert_explorer.runs.download_jobs REPO``,
in its own process session: the page stays usable, other sessions see the same progress, and a closed
tab or a rerun leaves it going. Every session finds it through files in one work folder per model,
``<cache>/downloads/<org--name>/``:

| file | what |
|---|---|
| ``lock`` | a file lock (``file_lock.py``) held by the downloader for the whole download; it goes with the process, even by ``kill -9`` |
| ``progress.json`` | state (starting, downloading, done, cancelled, failed), bytes done and in all, the file, the rate, the error, the downloader's pid and start time; replaced atomically |
| ``cancel`` | present = "stop at the next megabyte"; what was fetched stays in the Hugging Face cache, and the next download goes on from it |
| ``log.txt`` | the process's output |

Two sessions pressing *Download* at once start one downloader: the check and the start happen under
the work folder's start lock, and a downloader that finds the lock taken anyway ends at once.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .. import atomic, hub
from ..disk_cache import cache_root
from .. import file_lock
from ..processes import process_alive, process_start
from .background import reap_when_done, spawn
from .finder import read_json

STARTING_GRACE_S = 60  # a "starting" download with no process named yet whose process has not taken the lock by
# then failed to start (a process named is asked directly: one that died at its start read "downloading" for a minute)
PROGRESS_EVERY_S = 0.5


def work_dir(repo_id: str) -> Path:
    return cache_root() / "downloads" / hub.canonical(repo_id).replace("/", "--")


def read_progress(repo_id: str) -> dict:
    return read_json(work_dir(repo_id) / "progress.json")


def _write_progress(repo_id: str, **fields) -> None:
    atomic.write_json(work_dir(repo_id) / "progress.json", {**fields, "updated": time.time()})


def downloading(repo_id: str) -> bool:
    return file_lock.is_held(work_dir(repo_id) / "lock")


def state(repo_id: str) -> dict:
    """Where one model stands, for a page: ``state`` is "here" (in the cache, whole), "downloading"
    (with ``done``, ``total`` bytes, ``rate`` in bytes/s and ``eta_s``), "cancelled", "failed" (with
    ``error``), "stopped" (its process ended without finishing: downloading again goes on) or "missing"."""
    repo_id = hub.canonical(repo_id)
    if hub.local_copy(repo_id) is not None:
        return {"state": "here"}
    p = read_progress(repo_id)
    s = p.get("state")
    if s in ("cancelled", "failed"):  # said by the downloader as it ends (it still held its lock: "Starting…")
        return p
    if downloading(repo_id):
        return {**p, "state": "downloading", **({"cancelling": True} if cancel_asked(repo_id) else {})}
    if s == "starting" and (process_alive(p["pid"], p.get("created")) if p.get("pid") is not None else
                            time.time() - p.get("updated", 0) < STARTING_GRACE_S):
        return {**p, "state": "downloading"}
    if s in ("starting", "downloading"):
        return {**p, "state": "stopped"}
    return {"state": "missing"}


def start(repo_id: str) -> bool:
    """Start downloading ``repo_id`` in the background; False when it is here already or a downloader
    is at work on it (that one's progress is what every page shows)."""
    repo_id = hub.canonical(repo_id)
    d = work_dir(repo_id)
    d.mkdir(parents=True, exist_ok=True)
    with file_lock.holding(d / "start.lock"):  # the check and the start are one step: two clicks start one
        if hub.local_copy(repo_id) is not None or state(repo_id)["state"] == "downloading":
            return False
        (d / "cancel").unlink(missing_ok=True)
        _write_progress(repo_id, state="starting", done=0, total=0, file=None)
        with (d / "log.txt").open("a") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} download {repo_id}\n")
        # a download is network and disk, not arithmetic: one thread is plenty
        proc = spawn([sys.executable, "-m", "bert_explorer.runs.download_jobs", repo_id], d / "log.txt",
                     env={"OMP_NUM_THREADS": "1"})
        if read_progress(repo_id).get("state") == "starting":  # (not yet past its start: the process is named)
            _write_progress(repo_id, state="starting", done=0, total=0, file=None, pid=proc.pid,
                            created=process_start(proc.pid))
    reap_when_done(proc)
    return True


def cancel(repo_id: str) -> None:
    """Ask the downloader to stop; the bytes fetched stay, and the model is not listed until whole."""
    d = work_dir(repo_id)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cancel").touch()


def cancel_asked(repo_id: str) -> bool:
    """Has a Cancel been asked that the downloader has not yet taken (it stops within a second or two)?"""
    return (work_dir(repo_id) / "cancel").exists()


def _download(repo_id: str) -> int:
    """The background process: hold the lock, download, report progress, honour a cancel."""
    d = work_dir(repo_id)
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    if not file_lock.acquire(fd, wait=False):
        return 0  # another downloader is at work on this model
    t0, last = time.time(), [0.0, 0, 0]  # [when the progress was written, bytes then, bytes at the start]

    def progress(done, total, file):
        now = time.time()
        if not last[2]:
            last[2] = done  # bytes already here (a resumed download): not counted in the rate
        if now - last[0] >= PROGRESS_EVERY_S or done == total:
            rate = (done - last[2]) / max(now - t0, 1e-6)
            _write_progress(repo_id, state="downloading", done=done, total=total, file=file, rate=rate,
                            eta_s=(total - done) / rate if rate > 0 else None, pid=os.getpid())
            last[0], last[1] = now, done

    try:
        folder = hub.download(repo_id, progress, cancel=lambda: (d / "cancel").exists())
    except hub.DownloadCancelled as e:
        _write_progress(repo_id, state="cancelled", error=str(e), done=last[1])
        return 0
    except Exception as e:  # every failure is one sentence for the page (hub.HubError, full_disk.DiskFull, ...)
        _write_progress(repo_id, state="failed", error=str(e) or type(e).__name__, done=last[1])
        print(f"failed: {e}", flush=True)
        return 1
    finally:
        (d / "cancel").unlink(missing_ok=True)
    _write_progress(repo_id, state="done", folder=str(folder), seconds=round(time.time() - t0, 1))
    print(f"downloaded {repo_id} to {folder} in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_download(sys.argv[1]))
