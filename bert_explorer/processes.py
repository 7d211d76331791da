"""Live processes told apart from dead ones, on every system (``psutil``).

The kernel hands a pid out again once its process is gone, so a process is named by its pid and its
creation time together: that pair names one process for good (``exec`` keeps both). The file locks
(``file_lock.py``), their records where a system has no locks of its own (``lock_backends.py``) and the
run system all ask here.
"""
from __future__ import annotations

import psutil

# Creation times are read from the wall clock at boot on Linux, which moves when the clock is set: a
# small tolerance keeps a live process itself after a correction, and a pid comes back to another
# process only after the kernel has handed out every other one, in practice far later than this.
SAME_START_S = 0.5


def pid_alive(pid: int | None) -> bool:
    """Is there a process ``pid``? A finished child that nobody waited for yet is a zombie: not alive
    for our purposes. (Not ``os.kill(pid, 0)``: on Windows that sends CTRL_C_EVENT.)"""
    if not _a_pid(pid):  # (no process has one; psutil refuses to be asked)
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # (a zombie too, where psutil says so by raising ZombieProcess)
        return False
    except psutil.AccessDenied:  # another user's: it exists
        return True


def process_start(pid: int | None) -> float | None:
    """When process ``pid`` was created (seconds since the epoch, ``psutil``), or None when it is gone
    or not ours to ask."""
    if not _a_pid(pid):
        return None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def process_alive(pid: int | None, created: float | None = None) -> bool:
    """Is the process that was ``pid`` when it was created at ``created`` still running? Without a
    recorded creation time this is :func:`pid_alive`; a pid whose process was created at another
    moment is another process, which took the pid over."""
    if not pid_alive(pid):
        return False
    if created is not None and (not isinstance(created, (int, float)) or isinstance(created, bool)):
        created = None  # (a status.json edited by hand: "x" stopped every listing of the runs)
    now = process_start(pid) if created is not None else None
    return created is None or now is None or abs(now - created) < SAME_START_S


def _a_pid(pid) -> bool:
    """Could ``pid`` name a process: a whole number above 0 that the system's pids reach (a status.json's "123",
    1e30 or true was a TypeError in every listing of the runs)?"""
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31
