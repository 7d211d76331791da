"""On one GPU, background runs take turns: each waits in state "queued" until it holds
``.gpu.lock`` in the runs root (a file lock, ``file_lock.py``: it goes with the holder when it
exits, even by a crash), first come first served (tickets in ``.gpu.lock.queue/``). Two
trainings side by side on one GPU would each run out of memory or crawl.

On a CPU-only machine runs go side by side (``BERT_EXPLORER_GPU_QUEUE=1`` or ``gpu_queue=True``
forces the queue, e.g. in tests; ``=0`` turns it off).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .. import file_lock, processes
from .run import Run

GPU_QUEUE_ENV = "BERT_EXPLORER_GPU_QUEUE"
GPU_LOCK_NAME = ".gpu.lock"


def uses_gpu(config: dict) -> bool:
    device = str(config.get("device", "auto"))
    if device != "auto":
        return device.startswith("cuda")
    import torch  # here, not at the top: nothing else in the run system needs torch, which takes seconds to import

    return torch.cuda.is_available()


def gpu_queue_applies(config: dict, gpu_queue: bool | None = None) -> bool:
    """``gpu_queue`` if given, else the environment variable, else: does the run use a GPU?"""
    if gpu_queue is None and os.environ.get(GPU_QUEUE_ENV, "").strip():
        gpu_queue = os.environ[GPU_QUEUE_ENV].strip().lower() not in ("0", "false", "no", "off")
    if gpu_queue is None:
        gpu_queue = uses_gpu(config)
    return bool(gpu_queue)


def _earlier_waiter(queue_dir: Path, ticket: Path) -> bool:
    """Is a live process queued before us? Tickets are named <time>-<pid>, so they sort by
    arrival (first come, first served); those of dead processes are swept away."""
    for t in queue_dir.iterdir():
        if t.name < ticket.name:
            try:
                pid = int(t.name.rsplit("-", 1)[1])
            except (IndexError, ValueError):
                continue
            if processes.pid_alive(pid):
                return True
            t.unlink(missing_ok=True)
    return False


def _lock_holder(lock_path: Path) -> str | None:
    try:
        return json.loads(lock_path.read_text()).get("run")
    except (OSError, ValueError, AttributeError):
        return None


def wait_for_gpu(run: Run, lock_path: Path, poll: float = 0.5) -> int | None:
    """Block in state "queued" until this process holds ``lock_path``; return the locked file
    descriptor (inheritable, so the trainer exec'd next keeps the lock), or None if a stop was
    requested while waiting (the run is then "stopped" and nothing was trained)."""
    lock_path = Path(lock_path)
    queue_dir = lock_path.with_name(lock_path.name + ".queue")
    queue_dir.mkdir(parents=True, exist_ok=True)
    since = time.time()
    ticket = queue_dir / f"{since:017.6f}-{os.getpid()}"
    ticket.write_text(str(run.path))
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    run.write_status(state="queued", queued_since=since)
    told = False
    try:
        while True:
            if run.stop_requested():
                os.close(fd)
                run.clear_stop()
                run.write_status(state="stopped", finished=time.time(), waiting_for=None)
                run.log("stopped while queued for the GPU; nothing was trained")
                return None
            if not _earlier_waiter(queue_dir, ticket) and file_lock.acquire(fd, wait=False):
                break
            if not told:
                holder = _lock_holder(lock_path)
                run.write_status(waiting_for=holder)
                run.log(f"queued: waiting for the GPU{f' (held by {holder})' if holder else ''}")
                told = True
            time.sleep(poll)
    finally:
        ticket.unlink(missing_ok=True)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)  # (not os.pwrite, which Windows lacks)
    os.write(fd, json.dumps({"run": str(run.path), "pid": os.getpid()}).encode())
    os.set_inheritable(fd, True)
    waited = time.time() - since
    run.write_status(state="starting", waiting_for=None, queued_s=round(waited, 1), launched=time.time())  # (its
    # time in the queue is no part of the run's)
    if told:
        run.log(f"got the GPU after {waited:.0f} s in the queue")
    return fd
