"""The run system where there is no ``flock``: Windows takes ``LockFileEx``, and a system without
``fcntl`` or ``msvcrt`` records live holders (``lock_backends.py``). Neither hands a lock down
with a descriptor, so a background run's lock passes from starter to child under the run's start
lock instead; processes are told apart by pid and creation time (``psutil``) on every system.

Its promises are tested in a Python that cannot import ``fcntl`` (``tests/nofcntl/sitecustomize.py``,
switched on by ``BERT_EXPLORER_HIDE_FCNTL=1``): in the test process and every process it starts.
:func:`test_the_run_system_keeps_its_promises_without_fcntl` runs this file and the run system's
own tests for them that way; the tests below that say nothing about their backend run in the
ordinary run (``flock``) too. (Windows' own ``LockFileEx`` cannot be run here: it stands on the
system's promise that a dead process's locks are freed.)"""
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bert_explorer import file_lock as lock
from bert_explorer.runs.background import start_background, terminate_tree
from bert_explorer.file_lock import acquire_file, release
from bert_explorer.runs.lock import RunBusy, acquire_writer, read_holder, writer_lock
from bert_explorer.runs.run import DONE_STATES, Run
from test_runs import TINY, _holder  # a tiny pre-training; a process holding a run's writer lock

HIDDEN = os.environ.get("BERT_EXPLORER_HIDE_FCNTL") == "1"
without_fcntl = pytest.mark.skipif(not HIDDEN, reason="runs in the fcntl-hidden pytest that "
                                   "test_the_run_system_keeps_its_promises_without_fcntl starts")
# The run system's own tests of the promises, run again without fcntl (with this file's).
PROMISES = ["test_a_killed_holders_lock_is_taken_over", "test_the_library_and_the_app_launch_refuse_a_busy_run",
            "test_a_second_foreground_pretraining_is_refused_and_changes_nothing",
            "test_a_background_run_holds_the_lock_from_launch_to_end", "test_a_reused_pid_is_not_taken_for_the_run",
            "test_the_lock_is_reentrant_and_leaves_no_empty_folder", "test_delete_refuses_a_live_run_and_non_runs"]


@pytest.mark.skipif(HIDDEN, reason="this run is already the one without fcntl")
def test_the_run_system_keeps_its_promises_without_fcntl():
    here = Path(__file__).parent
    tests = [__file__] + [f"{here / 'test_runs.py'}::{name}" for name in PROMISES]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                       env={**os.environ, "BERT_EXPLORER_HIDE_FCNTL": "1"}, capture_output=True, text=True,
                       timeout=1200)
    summary = r.stdout.strip().splitlines()[-1]
    assert r.returncode == 0, r.stdout[-6000:]
    # every one of them ran, except this test itself, which skips itself there
    assert re.fullmatch(r"\d+ passed, 1 skipped in .*", summary), r.stdout[-3000:]


@without_fcntl
def test_without_fcntl_the_portable_backend_is_the_one_in_use():
    with pytest.raises(ImportError):
        importlib.import_module("fcntl")
    assert lock.BACKEND.name == "records" and not lock.LOCKS_TRAVEL
    r = subprocess.run([sys.executable, "-c", "from bert_explorer import file_lock; print(file_lock.BACKEND.name)"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "records", r.stderr  # and in every process the tests start


# ----- (a) a holder killed with kill -9 never blocks the next one -------------------------------------------
def test_a_killed_holder_never_blocks_the_next_writer(tmp_path):
    out = tmp_path / "killed"
    holder = _holder(out)
    with pytest.raises(RunBusy, match=f"pid {holder.pid}"):
        acquire_writer(out)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    t0 = time.monotonic()
    with writer_lock(out, "the next writer"):
        assert read_holder(out)["pid"] == os.getpid()
    assert time.monotonic() - t0 < 5  # taken at once: nothing waited for the dead holder
    assert f"taking over from pid {holder.pid}" in (out / "log.txt").read_text()


def test_a_waiting_lock_is_had_as_soon_as_its_holder_is_killed(tmp_path):
    """The other locks (a GPU's, an index build's, a cache entry's) free themselves the same way."""
    path = tmp_path / "some.lock"
    hold = ("import sys, time; from bert_explorer.file_lock import acquire_file\n"
            "fd = acquire_file(sys.argv[1]); print('held', flush=True); time.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert lock.is_held(path) and acquire_file(path, wait=False) is None
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert not lock.is_held(path)
    fd = acquire_file(path, wait=False)
    assert fd is not None
    release(fd)


# ----- (b) a second writer is refused before it writes anything ---------------------------------------------
def test_a_second_writer_is_refused_before_it_writes(tmp_path):
    out = tmp_path / "busy"
    holder = _holder(out)
    try:
        before = sorted(p.name for p in out.iterdir())
        for _ in range(3):  # as often as it asks
            with pytest.raises(RunBusy, match=f"pid {holder.pid}.*a test holder"):
                with writer_lock(out, "a second writer"):
                    (out / "written").write_text("the second writer got in")
        assert sorted(p.name for p in out.iterdir()) == before and read_holder(out)["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_belongs_to_one_open_file_and_shared_ones_go_together(tmp_path):
    """What the disk cache counts on: readers share an entry's lock, a remover waits for all of them,
    and a second descriptor of the same process is another holder (as with ``flock``)."""
    path = tmp_path / ".in-use"
    a, b = acquire_file(path, shared=True), acquire_file(path, shared=True, wait=False)
    assert a is not None and b is not None and not lock.is_held(path)  # readers never block readers
    assert acquire_file(path, wait=False) is None  # a remover waits for every reader
    release(a)
    assert acquire_file(path, wait=False) is None
    os.close(b)  # closing the descriptor lets its lock go too (the disk cache releases a pin so)
    c = acquire_file(path, wait=False)
    assert c is not None and lock.is_held(path)
    assert acquire_file(path, shared=True, wait=False) is None
    release(c)


# ----- (c) a background run's lock passes from its starter to its process with no gap -----------------------
ADVERSARY = """
import sys, time
from pathlib import Path
from bert_explorer.file_lock import release
from bert_explorer.runs.lock import RunBusy, acquire_writer
from bert_explorer.runs.run import Run

run_dir, tries = Path(sys.argv[1]), 0
while not (run_dir / "status.json").exists():  # from the moment the starter holds the lock and says so
    time.sleep(0.001)
while True:
    try:
        fd = acquire_writer(run_dir, "an adversary")
    except RunBusy:
        tries += 1
        time.sleep(0.005)
        continue
    print(tries, Run(run_dir).status().get("state"), flush=True)  # what the run was doing when we got in
    release(fd)
    break
"""


def test_a_background_runs_lock_passes_to_its_process_with_no_gap(tmp_path):
    """Another writer tries again and again from the moment the start is written: it gets the lock
    only once the run has ended, never in between the starter and the process it started."""
    out = tmp_path / "handed"
    adversary = subprocess.Popen([sys.executable, "-c", ADVERSARY, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        run = start_background("pretrain", {**TINY, "max_steps": 3}, out)
        assert run.wait(timeout=240)["state"] == "finished", (out / "log.txt").read_text()[-2000:]
        tries, state = adversary.communicate(timeout=60)[0].split()
    finally:
        adversary.kill()
    assert int(tries) > 0 and state in DONE_STATES  # it tried while the run lived, and got in after


# ----- (d) a reused pid is not the process that held the lock ------------------------------------------------
@without_fcntl
def test_a_record_whose_pid_was_reused_or_whose_file_was_closed_holds_nothing(tmp_path):
    """A holder's record names its process by pid and creation time, and its descriptor: the same pid
    in a process created at another moment is another process, and a closed descriptor holds nothing."""
    path = tmp_path / "some.lock"
    path.touch()
    opener = "import os, sys, time; print(os.open(sys.argv[1], os.O_RDWR), flush=True); time.sleep(60)"
    stranger = subprocess.Popen([sys.executable, "-c", opener, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        fd = int(stranger.stdout.readline())
        records, _ = lock.BACKEND._files(os.stat(path))
        created = psutil.Process(stranger.pid).create_time()
        claims = [({"created": created, "fd": fd}, True),  # that process, with that file open there: it holds it
                  ({"created": created - 60, "fd": fd}, False),  # that pid, but a process created at another moment
                  ({"created": created, "fd": fd + 50}, False)]  # that process, but not that descriptor
        for claim, holds in claims:
            records.write_text(json.dumps([{"pid": stranger.pid, "exclusive": True, **claim}]))
            assert lock.is_held(path) is holds, claim
            mine = acquire_file(path, wait=False)
            assert (mine is None) is holds, claim
            if mine is not None:
                release(mine)
    finally:
        stranger.kill()
        stranger.wait()


def test_a_run_whose_pid_went_to_another_process_reads_crashed(tmp_path):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = Run(tmp_path / "r").create({}, "pretrain")
        run.write_status(state="running", pid=stranger.pid)
        assert run.is_active() and run.status()["pid_created"] == psutil.Process(stranger.pid).create_time()
        status = json.loads((run.path / "status.json").read_text())
        (run.path / "status.json").write_text(json.dumps({**status, "pid_created": status["pid_created"] - 60}))
        assert run.status()["state"] == "crashed" and not run.is_active()
    finally:
        stranger.kill()
        stranger.wait()


# ----- what Windows runs in place of POSIX's process sessions and exec --------------------------------------
def test_terminate_tree_ends_a_process_and_what_it_started():
    """Windows' kill: no process group to signal, so the process and all it started, found first."""
    parent = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60 & wait"])
    deadline = time.time() + 10
    while len(psutil.Process(parent.pid).children()) < 2 and time.time() < deadline:
        time.sleep(0.05)
    children = psutil.Process(parent.pid).children(recursive=True)
    assert len(children) == 2
    terminate_tree(parent.pid)
    parent.wait(timeout=10)
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def test_the_launcher_can_run_its_command_in_its_own_process(tmp_path):
    """Where ``exec`` would start a new process (Windows), the launcher runs ``python -m ...`` itself:
    the same pid, the command's own arguments, and its exit code."""
    (tmp_path / "says_who.py").write_text("import os, sys; print(os.getpid(), sys.argv[1:]); sys.exit(3)\n")
    script = ("import os, sys; from bert_explorer.runs.background import _run_here\n"
              "print(os.getpid(), flush=True)\n"
              "sys.exit(_run_here([sys.executable, '-m', 'says_who', 'a', 'b']))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    launcher, command = r.stdout.splitlines()
    assert r.returncode == 3, r.stderr
    assert command == f"{launcher} ['a', 'b']"


def test_a_filesystem_without_working_locks_is_said_not_read_as_busy(tmp_path):
    """flock's ENOLCK (NFS without its lock daemon) was read as "another holds it": every run refused as busy for
    ever, the cause said nowhere."""
    import errno
    from types import SimpleNamespace

    from bert_explorer.lock_backends import Flock

    def flock(fd, kind):
        raise OSError(errno.ENOLCK, "No locks available")

    backend = Flock(SimpleNamespace(LOCK_EX=2, LOCK_SH=1, LOCK_NB=4, flock=flock))
    (tmp_path / "f").write_text("")
    with pytest.raises(OSError, match=r"locks do not work on the filesystem of this folder \(No locks available\)"):
        backend.held(tmp_path / "f")
    def taken(fd, kind):
        raise BlockingIOError(errno.EWOULDBLOCK, "busy")

    busy = Flock(SimpleNamespace(LOCK_EX=2, LOCK_SH=1, LOCK_NB=4, flock=taken))
    assert busy.held(tmp_path / "f")  # held by another: busy, as before


def test_the_lock_records_folder_is_the_users_own(tmp_path, monkeypatch):
    """The records' folder was one for every user, made 0755: on a shared machine another user's folder refused
    (or forged) every lock. It is named by the user's id, made 0700, and one another user owns is refused."""
    import tempfile

    from bert_explorer.lock_backends import Records

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    backend = Records()
    assert backend.root == tmp_path / f"bert-explorer-locks-{os.getuid()}"
    fd = os.open(tmp_path / "locked", os.O_RDWR | os.O_CREAT)
    try:
        assert backend.lock(fd, exclusive=True, wait=False) and backend.held(tmp_path / "locked")
        backend.unlock(fd)
    finally:
        os.close(fd)
    assert backend.root.stat().st_mode & 0o777 == 0o700
    if os.getuid() != 0:
        return  # (giving a folder to another user needs root)
    other = Records()
    other.root = tmp_path / "theirs"
    other.root.mkdir()
    os.chown(other.root, 65534, 65534)
    fd = os.open(tmp_path / "locked", os.O_RDWR)
    try:
        with pytest.raises(PermissionError, match="belongs to another user or is a link; remove it, or set TMPDIR"):
            other.lock(fd, exclusive=True, wait=False)
    finally:
        os.close(fd)
