"""A run is a directory (docs/DESIGN.md). Pages and the CLI only ever talk to runs through it:

    run_dir/
      config.json          what was asked for (the CLI's --config reads the same file)
      status.json          state (queued/running/finished/stopped/failed), step, ETA, last metrics
      metrics.jsonl        one JSON object per logged step (train) or evaluation (eval)
      log.txt              human-readable log (stdout/stderr of a background run)
      checkpoints/step-N/  transformers-compatible checkpoints; the newest also holds
                           training_state.pt (optimiser, schedule, RNG, data position) to resume
      STOP                 present = "please stop cleanly at the next step"
      .start.lock          held while a run is being started or deleted (see start_background)
      .writer.lock         held by the one process that writes the run (see writer_lock)

Every run has its own directory, and one process writes it (``run_lock.py``: a second writer
is refused with one sentence, the CLI exits 2), and :func:`start_background` refuses a directory
that a live process is still using. On one GPU, background
runs queue: each waits in state "queued" until it holds ``.gpu.lock`` in the runs root (an
``flock``, released by the kernel when the holder exits, even by a crash), first come first
served (tickets in ``.gpu.lock.queue/``). On a CPU-only machine runs go side by side
(``BERT_EXPLORER_GPU_QUEUE=1`` or ``gpu_queue=True`` forces the queue, e.g. in tests; ``=0``
turns it off).

Every file is written so that a crash at any moment leaves the previous version readable:
status.json is replaced atomically, metrics are appended line by line, checkpoints are
written to a temporary directory and renamed into place.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .run_lock import (WRITER_FD_ENV, RunBusy, acquire_writer, pid_alive, process_alive, process_start,
                       writer_busy)

try:
    import fcntl  # POSIX file locks; without them (Windows) runs are never queued
except ImportError:  # pragma: no cover
    fcntl = None

ACTIVE_STATES = ("starting", "queued", "running")
DONE_STATES = ("finished", "stopped", "failed", "crashed")
GPU_QUEUE_ENV = "BERT_EXPLORER_GPU_QUEUE"
GPU_LOCK_NAME = ".gpu.lock"


def _write_json_atomic(path: Path, data: dict) -> None:
    # pid and thread: two Streamlit sessions (threads of one process) may write the same file
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


class Run:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ----- files ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    def create(self, config: dict, kind: str) -> "Run":
        self.path.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(self.path / "config.json", {"kind": kind, **config})
        if not (self.path / "status.json").exists():
            self.write_status(state="queued", kind=kind, created=time.time())
        return self

    def config(self) -> dict:
        p = self.path / "config.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def status(self) -> dict:
        p = self.path / "status.json"
        try:
            status = json.loads(p.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"state": "unknown"}
        if (status.get("state") in ACTIVE_STATES and status.get("pid")
                and not process_alive(status["pid"], status.get("pid_start"))):
            status["state"] = "crashed"  # the process died without saying so: resumable
        return status

    def is_active(self) -> bool:
        """A live process is (or will soon be) working in this directory."""
        s = self.status()
        return s.get("state") in ACTIVE_STATES and process_alive(s.get("pid"), s.get("pid_start"))

    def write_status(self, **fields) -> None:
        p = self.path / "status.json"
        current = {}
        if p.exists():
            try:
                current = json.loads(p.read_text())
            except json.JSONDecodeError:
                pass
        if "pid" in fields:  # remember which process this pid is, in case it is later reused
            fields = {**fields, "pid_start": process_start(fields["pid"])}
        current.update(fields, updated=time.time())
        _write_json_atomic(p, current)

    def log_metrics(self, record: dict) -> None:
        with (self.path / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def metrics(self) -> list[dict]:
        p = self.path / "metrics.jsonl"
        if not p.exists():
            return []
        out = []
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a crash mid-write
        return out

    def log(self, message: str) -> None:
        with (self.path / "log.txt").open("a") as f:
            f.write(time.strftime("%H:%M:%S ") + message + "\n")

    def checkpoints(self) -> list[tuple[int, Path]]:
        d = self.path / "checkpoints"
        if not d.exists():
            return []
        found = []
        for p in d.iterdir():
            if p.name.startswith("step-") and (p / "model.safetensors").exists():
                try:
                    found.append((int(p.name[5:]), p))
                except ValueError:
                    pass
        return sorted(found)

    def latest_checkpoint(self) -> Path | None:
        cps = [p for _, p in self.checkpoints() if (p / "training_state.pt").exists()]
        return cps[-1] if cps else None

    # ----- control --------------------------------------------------------------------------
    def request_stop(self) -> None:
        (self.path / "STOP").touch()

    def stop_requested(self) -> bool:
        return (self.path / "STOP").exists()

    def clear_stop(self) -> None:
        (self.path / "STOP").unlink(missing_ok=True)

    def wait(self, timeout: float = 600, poll: float = 0.5) -> dict:
        end = time.time() + timeout
        while time.time() < end:
            s = self.status()
            if s.get("state") in DONE_STATES:
                return s
            time.sleep(poll)
        return self.status()


def uses_gpu(config: dict) -> bool:
    device = str(config.get("device", "auto"))
    if device != "auto":
        return device.startswith("cuda")
    import torch

    return torch.cuda.is_available()


def gpu_queue_applies(config: dict, gpu_queue: bool | None = None) -> bool:
    """``gpu_queue`` if given, else the environment variable, else: does the run use a GPU?"""
    if gpu_queue is None and os.environ.get(GPU_QUEUE_ENV, "").strip():
        gpu_queue = os.environ[GPU_QUEUE_ENV].strip().lower() not in ("0", "false", "no", "off")
    if gpu_queue is None:
        gpu_queue = uses_gpu(config)
    return bool(gpu_queue) and fcntl is not None


def background_env(environ: dict | None = None) -> dict:
    """The environment of a background run: one CPU core fewer than the machine has for its
    math threads, so the app (and the person using it) keeps a core. When busy cores are
    oversubscribed, PyTorch's CPU threads spin and wait on each other: on a 2-core machine a
    training step and a page's model call each became 10-20x slower side by side with two
    threads each, while one thread each kept both at full speed. A user's own
    OMP_NUM_THREADS is left alone."""
    env = dict(os.environ if environ is None else environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) - 1)))
    return env


def start_background(kind: str, config: dict, run_dir: str | Path, resume: bool = False,
                     gpu_queue: bool | None = None, gpu_lock: str | Path | None = None) -> Run:
    """Launch ``bert-explorer <kind> --config run_dir/config.json`` as its own process session,
    so it keeps running when the browser tab (or the Streamlit server) goes away.

    Refuses (RuntimeError) a directory in which a live process is still working. When the GPU
    queue applies (see :func:`gpu_queue_applies`) the process first waits its turn for the
    runs root's ``.gpu.lock`` (state "queued"), then becomes the trainer, which keeps the lock
    until it exits. The runs root is the run directory's parent; runs kept deeper (the cells of
    an ablation grid) pass ``gpu_lock`` to share the one lock of the GPU."""
    run = Run(run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    # The check and the launch happen under the run's own lock, so two tabs pressing Start on
    # one directory at the same instant launch one process, and the other is told why.
    with _start_lock(run):
        if run.is_active():
            s = run.status()
            raise RuntimeError(f"{run.path} is already {s.get('state')} (pid {s.get('pid')}); stop that run "
                               f"first or choose another directory")
        # The writer lock is taken here, before config.json is written, and handed down to the
        # process (which adopts it): held without a gap from this check to the run's end.
        fd = acquire_writer(run.path, f"bert-explorer {kind} (background)")
        try:
            return _launch_background(run, kind, config, resume, gpu_queue, gpu_lock, fd)
        finally:
            if fd is not None:
                os.close(fd)  # the child holds its own copy of the lock now


@contextlib.contextmanager
def _start_lock(run: Run):
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(run.path / ".start.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _launch_background(run: Run, kind: str, config: dict, resume: bool, gpu_queue: bool | None,
                       gpu_lock: str | Path | None, writer_fd: int | None = None) -> Run:
    run.create(config, kind)
    run.clear_stop()
    run.write_status(state="starting", pid=None, kind=kind, error=None)
    cmd = [sys.executable, "-m", "bert_explorer.cli", kind, "--config", str(run.path / "config.json"),
           "--output", str(run.path)]
    if kind != "finetune":  # pre-training and ablations draw progress bars (not for log.txt); fine-tuning none
        cmd.append("--no-progress")
    if resume:
        cmd.append("--resume")
    launcher = [sys.executable, "-m", "bert_explorer.train.runs", str(run.path)]
    if gpu_queue_applies(config, gpu_queue):
        launcher += ["--gpu-lock", str(Path(gpu_lock) if gpu_lock else run.path.parent / GPU_LOCK_NAME)]
    env = background_env()
    if writer_fd is not None:
        env[WRITER_FD_ENV] = str(writer_fd)
    with (run.path / "log.txt").open("a") as log:
        proc = subprocess.Popen(launcher + ["--"] + cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=os.getcwd(),
                                env=env, pass_fds=() if writer_fd is None else (writer_fd,))
    # The launcher writes its own pid (no race with its "queued"); wait for it, briefly.
    deadline = time.time() + 30
    while run.status().get("pid") != proc.pid and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    if run.status().get("pid") != proc.pid:
        if proc.poll() is None:  # too slow to start: end it, so it cannot begin training after "failed"
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
        run.write_status(state="failed", pid=None, error="the background process did not start; see log.txt")
    _reap_when_done(proc)
    return run


def _reap_when_done(proc: subprocess.Popen) -> None:
    """Wait for the background process in a thread of its own, so that when it ends the kernel
    can forget it. A child nobody waits for stays a zombie (an entry in the process table) until
    the server itself stops; a long-lived app that starts many runs would pile them up."""
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()


def _earlier_waiter(queue_dir: Path, ticket: Path) -> bool:
    """Is a live process queued before us? Tickets are named <time>-<pid>, so they sort by
    arrival (first come, first served); those of dead processes are swept away."""
    for t in queue_dir.iterdir():
        if t.name < ticket.name:
            try:
                pid = int(t.name.rsplit("-", 1)[1])
            except (IndexError, ValueError):
                continue
            if pid_alive(pid):
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
            if not _earlier_waiter(queue_dir, ticket):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    pass
            if not told:
                holder = _lock_holder(lock_path)
                run.write_status(waiting_for=holder)
                run.log(f"queued: waiting for the GPU{f' (held by {holder})' if holder else ''}")
                told = True
            time.sleep(poll)
    finally:
        ticket.unlink(missing_ok=True)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"run": str(run.path), "pid": os.getpid()}).encode(), 0)
    os.set_inheritable(fd, True)
    waited = time.time() - since
    run.write_status(state="starting", waiting_for=None, queued_s=round(waited, 1))
    if told:
        run.log(f"got the GPU after {waited:.0f} s in the queue")
    return fd


def kill(run: Run) -> None:
    """Hard stop (the clean way is request_stop); the last checkpoint stays intact."""
    s = run.status()
    pid = s.get("pid")
    # a pid whose process ended may already belong to another one: only ours is signalled
    if s.get("state") in ACTIVE_STATES and process_alive(pid, s.get("pid_start")):
        os.killpg(os.getpgid(pid), signal.SIGTERM)


def delete(run: Run) -> None:
    """Remove a run directory; a run that a live process is working in (or that is being
    started at this moment) is refused."""
    if not (run.path / "status.json").is_file() and not (run.path / "config.json").is_file():
        raise ValueError(f"{run.path} is not a run directory (no status.json or config.json)")
    with _start_lock(run):
        if run.is_active():
            raise RuntimeError(f"{run.name} is {run.status().get('state')}; stop it before deleting it")
        try:  # no writer may start (or still be at work) while its files go
            fd = acquire_writer(run.path, "delete")
        except RunBusy:
            raise RunBusy(writer_busy(run.path) or f"{run.name} is being written; stop it first") from None
        try:
            shutil.rmtree(run.path)
        finally:
            if fd is not None:
                os.close(fd)


def _launch(argv: list[str]) -> int:
    """``python -m bert_explorer.train.runs RUN_DIR [--gpu-lock LOCK] -- CMD ...``: record our pid,
    wait for the GPU if asked, then become CMD (same pid, the lock's descriptor inherited)."""
    split = argv.index("--")
    own, cmd = argv[:split], argv[split + 1:]
    run_dir, gpu_lock = own[0], own[own.index("--gpu-lock") + 1] if "--gpu-lock" in own else None
    run = Run(run_dir)
    run.write_status(pid=os.getpid())
    if gpu_lock and wait_for_gpu(run, Path(gpu_lock)) is None:
        return 0
    sys.stdout.flush()
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(_launch(sys.argv[1:]))
