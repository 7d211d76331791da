"""A run's process: started in the background, killed, and its folder deleted.

:func:`start_background` launches ``bert-explorer <kind> --config RUN/config.json`` as a process
session of its own, so it keeps running when the browser tab, or the Streamlit server, goes away;
:func:`spawn` is that start for any long job (the nearest-neighbour build uses it too): one CPU
core is left to the app (:func:`background_env`) and a thread waits for the process so that it
leaves no zombie behind. Starting and deleting a run both happen under its ``.start.lock``, so
a run is never deleted while it is being started.

``python -m bert_explorer.runs.background RUN [--gpu-lock LOCK] [--writer-lock] -- CMD ...`` is
the small launcher in between: it records its pid, waits for the GPU when asked
(``runs/gpu_queue.py``), then becomes CMD.

The run's writer lock passes from the starter to the process with no gap (``runs/lock.py``). On
Linux and macOS an ``flock`` travels with a descriptor: the starter hands its descriptor down
(``pass_fds``), and the launcher ``exec``s into CMD, keeping the pid, the descriptor and the lock.
On Windows (and with the records of ``lock_backends.py``) a lock stays with the process that
took it and a handle cannot carry it, so the starter lets its lock go while it holds the run's
``.start.lock``, and the launcher (``--writer-lock``) takes the writer lock itself before it
records its pid, which the starter waits for before it lets ``.start.lock`` go; every other writer
takes ``.start.lock`` around the writer lock. On Windows ``exec`` would start a new process (a new
pid) and end this one, dropping its locks, so the launcher runs CMD (``python -m MODULE ...``) in
its own process instead.

A run's process is a session of its own on POSIX (``start_new_session``): a stopped server or a
closed terminal does not end it, and :func:`kill` signals the whole session (the launcher became
the trainer; any worker it started). On Windows it is a process group of its own
(``CREATE_NEW_PROCESS_GROUP``: the server's Ctrl+C does not reach it) without a console window,
and :func:`kill` ends the process and every process it started (``psutil``), since Windows has
no signal for a group.
"""
from __future__ import annotations

import contextlib
import errno
import os
import runpy
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from .gpu_queue import GPU_LOCK_NAME, gpu_queue_applies, wait_for_gpu
from ..file_lock import LOCKS_TRAVEL, holding, release
from ..processes import process_alive
from .lock import START_LOCK_NAME, WRITER_FD_ENV, RunBusy, acquire_writer, writer_busy
from .run import ACTIVE_STATES, Run, foreign_entries, new_run_refusal, remove_run_files, shown_entries
from .. import full_disk


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


NICE = 10  # a background process's niceness: the people using the app (a class) come first


def spawn(argv: list[str], log_file: str | Path, env: dict | None = None, pass_fds: tuple = ()) -> subprocess.Popen:
    """Start ``argv`` as a process session (Windows: process group) of its own, so that a closed tab
    or a stopped server does not end it, its output appended to ``log_file``, no input, in
    :func:`background_env` plus ``env``, at low priority (``nice`` 10; below normal on Windows): the
    server's answers to the people using it run first, a build or a training takes the CPU they leave.
    The caller waits for it or hands it to :func:`reap_when_done`. ``pass_fds`` (POSIX only):
    descriptors the process inherits."""
    if os.name == "posix":
        detach = {"start_new_session": True, "pass_fds": pass_fds}
        # `nice` sets the priority and then becomes the process (same pid), so every thread the process
        # starts later inherits it; setting it from here after the start could miss threads already made
        # (`nice -n` adds to the caller's own: a build started by an already-niced preparation ran at 19)
        if shutil.which("nice") and (more := NICE - os.nice(0)) > 0:
            argv = ["nice", "-n", str(more), *argv]
    else:
        detach = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.CREATE_NO_WINDOW
                  | subprocess.BELOW_NORMAL_PRIORITY_CLASS}
    with Path(log_file).open("a") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=os.getcwd(), env={**background_env(), **(env or {})}, **detach)
    if os.name == "posix":
        session_at_low_priority(proc.pid)
    return proc


def session_at_low_priority(pid: int) -> None:
    """Put the session of ``pid`` (a process that leads a session of its own) at :data:`NICE` where Linux
    schedules sessions as groups (its "autogroup", on by default on most distributions): there a process's
    nice value weighs only against the processes of its own session, and every session gets an equal part
    of the CPU. Measured on 2 cores beside two busy processes of another session: a job at nice 10 in a
    session of its own took 2.1 times its idle time (half a core, not the tenth that nice 10 promises), 12
    times with its session at nice 10. Where there is no autogroup there is nothing to do.

    Without CAP_SYS_ADMIN the kernel takes one such write in 100 ms from the whole machine and answers EAGAIN
    to the others: two jobs started together (two students, the GPU kit's side-by-side runs) left the
    second at normal priority. It is tried again for up to a second."""
    for _ in range(AUTOGROUP_TRIES):
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(NICE))
            return
        except OSError as e:  # not Linux, a kernel without autogroups, or the process has ended already
            if e.errno != errno.EAGAIN:
                return
            time.sleep(AUTOGROUP_WAIT_S)


AUTOGROUP_TRIES, AUTOGROUP_WAIT_S = 10, 0.11  # (the kernel's limit: one unprivileged write per 100 ms)


def start_background(kind: str, config: dict, run_dir: str | Path, resume: bool = False,
                     gpu_queue: bool | None = None, gpu_lock: str | Path | None = None) -> Run:
    """Launch ``bert-explorer <kind> --config run_dir/config.json`` as its own process session,
    so it keeps running when the browser tab (or the Streamlit server) goes away.

    Refuses (RuntimeError) a directory in which a live process is still working. When the GPU
    queue applies (see :func:`runs.gpu_queue.gpu_queue_applies`) the process first waits its turn for the
    runs root's ``.gpu.lock`` (state "queued"), then becomes the trainer, which keeps the lock
    until it exits. The runs root is the run directory's parent; runs kept deeper (the cells of
    an ablation grid) pass ``gpu_lock`` to share the one lock of the GPU.

    A folder that is not a run yet must be new or empty (``run.new_run_refusal``: ValueError). On a
    full disk the start is one sentence (``full_disk.DiskFull``) and leaves no half-made run: a folder
    this call made is removed again."""
    run = Run(run_dir)
    made = not run.path.exists()
    if refusal := new_run_refusal(run.path):
        raise ValueError(refusal)
    try:
        with full_disk.saving(run.path.parent if made else run.path, f"start the run {run.path.name}",
                              "free some space, then start it again"):
            run.path.mkdir(parents=True, exist_ok=True)
            return _start_in(run, kind, config, resume, gpu_queue, gpu_lock)
    except full_disk.DiskFull:
        if made and run.path.is_dir() and not foreign_entries(run.path):
            remove_run_files(run.path)  # only what this start wrote: the folder did not exist before
        raise


def _start_in(run: Run, kind: str, config: dict, resume: bool, gpu_queue: bool | None,
              gpu_lock: str | Path | None) -> Run:
    # The check and the launch happen under the run's own lock, so two tabs pressing Start on
    # one directory at the same instant launch one process, and the other is told why.
    with holding(run.path / START_LOCK_NAME):
        if run.is_active():
            s = run.status()
            raise RuntimeError(f"{run.path} is already {s.get('state')} (pid {s.get('pid')}); stop that run "
                               f"first or choose another directory")
        # The writer lock is taken here, before config.json is written, and passes to the process
        # (see the module's docstring): held without a gap from this check to the run's end.
        fd = acquire_writer(run.path, f"bert-explorer {kind} (background)", gated=True, handing_over=True)
        try:
            if not resume and run.is_run():  # a new start would write over its settings and status
                raise ValueError(f"{run.path} holds a run already; resume it, or choose a new folder for a new run")
        except BaseException:
            release(fd)
            raise
        return _launch_background(run, kind, config, resume, gpu_queue, gpu_lock, fd)


def _launch_background(run: Run, kind: str, config: dict, resume: bool, gpu_queue: bool | None,
                       gpu_lock: str | Path | None, writer_fd: int) -> Run:
    """Write the run's start, launch its process and let ``writer_fd`` go (the process holds the lock
    then). Called under the run's ``.start.lock``."""
    try:
        run.create(config, kind, own=False)  # (the app's own pid would read as the run's, alive while the app lives)
        run.clear_stop()
        run.write_status(state="starting", pid=None, kind=kind, error=None, launched=time.time())
        launcher = [sys.executable, "-m", "bert_explorer.runs.background", str(run.path)]
        if gpu_queue_applies(config, gpu_queue):
            launcher += ["--gpu-lock", str(Path(gpu_lock) if gpu_lock else run.path.parent / GPU_LOCK_NAME)]
        if LOCKS_TRAVEL:  # the process inherits our descriptor, and with it the lock
            hand_down = {"env": {WRITER_FD_ENV: str(writer_fd)}, "pass_fds": (writer_fd,)}
        else:  # it takes the lock itself, while we hold .start.lock for it
            release(writer_fd)
            writer_fd, hand_down = None, {}
            launcher.append("--writer-lock")
        proc = spawn(launcher + ["--"] + _command(run, kind, resume), run.path / "log.txt", **hand_down)
    finally:
        if writer_fd is not None:
            release(writer_fd)  # the child holds its own copy of the lock now
    # The launcher writes its own pid (no race with its "queued"), having taken the writer lock
    # where it takes it itself; wait for it, briefly.
    deadline = time.time() + 30
    while run.status().get("pid") != proc.pid and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    if run.status().get("pid") != proc.pid:
        if proc.poll() is None:  # too slow to start: end it, so it cannot begin training after "failed"
            terminate(proc.pid)
            proc.wait()
        run.write_status(state="failed", pid=None, error="the background process did not start; see log.txt")
    reap_when_done(proc)  # only now: while a thread waits for it, proc.poll() above could not see it end
    return run


def _command(run: Run, kind: str, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "bert_explorer.cli", kind, "--config", str(run.path / "config.json"),
           "--output", str(run.path)]
    cmd.append("--no-progress")  # (a progress bar is for a terminal, not for log.txt)
    if resume:
        cmd.append("--resume")
    return cmd


def reap_when_done(proc: subprocess.Popen) -> None:
    """Wait for the background process in a thread of its own, so that when it ends the kernel
    can forget it. A child nobody waits for stays a zombie (an entry in the process table) until
    the server itself stops; a long-lived app that starts many runs would pile them up."""
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()


def kill(run: Run) -> None:
    """Hard stop (the clean way is request_stop); the last checkpoint stays intact."""
    s = run.status()
    pid = s.get("pid")
    # a pid whose process ended may already belong to another one: only ours is signalled
    if s.get("state") in ACTIVE_STATES and process_alive(pid, s.get("pid_created")):
        terminate(pid)


def terminate(pid: int) -> None:
    """End the background process ``pid`` and what it started: SIGTERM to its session on POSIX, else
    :func:`terminate_tree`."""
    if os.name == "posix":
        os.killpg(os.getpgid(pid), signal.SIGTERM)
    else:
        terminate_tree(pid)


def terminate_tree(pid: int) -> None:
    """End process ``pid`` and every process it started, found before any of them ends (an orphan is
    no longer anyone's child). Windows has no signal for a process group: ``os.kill`` with
    CTRL_C_EVENT is refused to a new group and CTRL_BREAK_EVENT needs a console."""
    try:
        top = psutil.Process(pid)
        tree = [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()


def delete_refusal(run: Run) -> str | None:
    """Why deleting ``run`` would remove more than the run wrote, in one sentence, or None."""
    foreign = foreign_entries(run.path)
    if not foreign:
        return None
    return (f"{run.name} also holds files that no run writes ({shown_entries(foreign, run.path)}), so it is not "
            f"deleted: move them out of {run.path} first, or delete the folder yourself")


# the page of each kind of run that has its Stop button (the Runs page lists and deletes, it stops nothing)
STOPPED_ON = {"pretrain": "Pre-train page", "finetune": "Fine-tune page", "ablate": "Ablation studio page"}


def delete(run: Run) -> None:
    """Remove what a run wrote in its directory (``run.RUN_FILES``, ``run.RUN_FOLDERS``, the runs inside
    an ablation), and the directory itself; a folder that holds anything else is refused (ValueError,
    :func:`delete_refusal`), and so is a run that a live process is working in (or that is being
    started at this moment)."""
    if not run.is_run():
        raise ValueError(f"{run.path} is not a run directory (no status.json, nor the config.json of a run)")
    with holding(run.path / START_LOCK_NAME):
        if run.is_active():
            raise RuntimeError(f"{run.name} is {run.status().get('state')}; stop it before deleting it (its "
                               f"{STOPPED_ON.get(run.kind(), 'page')} has the Stop button)")
        try:  # no writer may start (or still be at work) while its files go
            fd = acquire_writer(run.path, "delete", gated=True)
        except RunBusy:
            raise RunBusy(writer_busy(run.path) or f"{run.name} is being written; stop it first") from None
        try:
            if refusal := delete_refusal(run):
                raise ValueError(refusal)
            remove_run_files(run.path)
        finally:
            release(fd)


def _launch(argv: list[str]) -> int:
    """``python -m bert_explorer.runs.background RUN_DIR [--gpu-lock LOCK] [--writer-lock] -- CMD ...``:
    take the writer lock if asked (the starter holds ``.start.lock`` for us meanwhile), record our
    pid, wait for the GPU if asked, then become CMD (same pid, the locks' descriptors inherited)."""
    split = argv.index("--")
    own, cmd = argv[:split], argv[split + 1:]
    run_dir, gpu_lock = own[0], own[own.index("--gpu-lock") + 1] if "--gpu-lock" in own else None
    run = Run(run_dir)
    if "--writer-lock" in own:
        try:
            fd = acquire_writer(run.path, f"bert-explorer {cmd[3] if len(cmd) > 3 else ''} (background)",
                                gated=True)
        except RunBusy as e:
            run.write_status(state="failed", error=str(e))
            return 2
        os.set_inheritable(fd, True)
        os.environ[WRITER_FD_ENV] = str(fd)  # CMD adopts it, as it would a starter's
    run.write_status(pid=os.getpid())
    if gpu_lock and wait_for_gpu(run, Path(gpu_lock)) is None:
        return 0
    sys.stdout.flush()
    return _become(cmd)


def _become(cmd: list[str]) -> int:
    """Run ``cmd`` as this very process: ``exec`` where it keeps the pid (POSIX), else :func:`_run_here`."""
    if os.name == "posix":
        os.execv(cmd[0], cmd)
    return _run_here(cmd)


def _run_here(cmd: list[str]) -> int:
    """Run ``python -m MODULE ARGS`` in this process and return its exit code: on Windows, where
    ``exec`` would start a new process (a new pid) and end this one, with the locks it holds."""
    if cmd[1:2] != ["-m"]:
        raise ValueError(f"cannot run {cmd} in this process: only `python -m MODULE ...` commands")
    sys.argv = [cmd[2], *cmd[3:]]
    try:
        runpy.run_module(cmd[2], run_name="__main__", alter_sys=True)
    except SystemExit as e:  # the CLI ends with sys.exit(code)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(_launch(sys.argv[1:]))
