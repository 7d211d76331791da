"""The operating system's file locks, one backend for each kind of system; ``file_lock.py`` is
their one user and the rest of the project only ever sees its functions.

Every backend gives the run system the same four promises: a lock belongs to one open file (a
second descriptor, even in the same process, is refused); there are exclusive and shared locks;
closing the descriptor lets the lock go; and a holder that dies, even by ``kill -9`` or a crash,
never blocks the next one.

``Flock`` (wherever ``fcntl`` exists: Linux, macOS, the BSDs). The kernel releases an ``flock``
with the last descriptor of its open file, which happens when its process ends. A descriptor
that a child inherits (``pass_fds``) shares the open file and so the lock: a starter hands a
background run its lock with no gap (``LOCKS_TRAVEL``). No library wraps this better: filelock's
``UnixFileLock`` is this same ``flock`` on a path, without shared locks.

``Windows`` (``msvcrt``, no ``fcntl``). ``LockFileEx`` on a byte far past the end of the file, so
that the holder record written in the file stays readable (Windows enforces byte-range locks on
reads); shared or exclusive, waiting or not. Windows releases such a lock when its handle is
closed or its process ends ("If a process terminates with a portion of a file locked or closes a
file that has outstanding locks, the locks are unlocked by the operating system"), so a killed
holder never blocks. filelock's ``WindowsFileLock`` and ``lock_descriptor`` use the same call, but
only exclusively and on byte zero (a reader of the holder record would be refused), hence these
few lines of our own. A Windows lock belongs to the process that took it, not to the handle a
child inherits: locks do not travel, and a starter hands a run over by letting its own lock go
under the run's start lock while the child takes it (``runs/background.py``).

``Records`` (neither ``fcntl`` nor ``msvcrt``: no file lock reaches Python at all). A lock is a
record of its holder, kept per locked file in ``bert-explorer-locks-<uid>/`` in the temporary folder:
the process (pid and creation time, ``psutil``), the descriptor and the mode. A record counts only
while that very process lives (a reused pid has another creation time) and still has that
descriptor open on that file, so ``kill -9`` and a plain ``os.close`` both let the lock go, as
with the kernel's locks. Records are read and changed under a ``filelock.SoftFileLock``, a marker
file that filelock itself takes over from a dead owner (it records pid, host and start time), so a
holder killed while changing records never blocks either. Locks do not travel. This is the
backend the test suite runs with ``fcntl`` hidden (``BERT_EXPLORER_HIDE_FCNTL=1``): it exercises,
on Linux, every part of the portable path that does not need Windows itself. It serves one user
(the folder is that user's) and reads other processes' open files through psutil, which sees
them on Linux, macOS and the BSDs.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

from .processes import process_alive, process_start

POLL_S = 0.05  # how often a waiting Records lock looks again (filelock's own default poll)


class Flock:
    name = "flock"
    travels = True  # an inherited descriptor shares the open file, and its lock

    def __init__(self, fcntl):
        self.fcntl = fcntl

    def lock(self, fd: int, exclusive: bool, wait: bool) -> bool:
        kind = self.fcntl.LOCK_EX if exclusive else self.fcntl.LOCK_SH
        if wait:
            self.fcntl.flock(fd, kind)
            return True
        try:
            self.fcntl.flock(fd, kind | self.fcntl.LOCK_NB)
            return True
        except (BlockingIOError, PermissionError):  # held by another open file
            return False
        except OSError as e:  # (a filesystem without working locks, ENOLCK: said "busy" for ever)
            raise OSError(e.errno, f"locks do not work on the filesystem of this folder ({e.strerror}); keep the "
                                   "runs and the cache on a local disk") from None

    def unlock(self, fd: int) -> None:
        # Never LOCK_UN: a child may share this open file, and its lock; closing the descriptor
        # lets the lock go once no copy of it is left.
        pass

    def held(self, path: Path) -> bool:
        """A probe that takes a shared lock and gives it back at once, so two probes never see each other."""
        fd = os.open(path, os.O_RDONLY)
        try:
            return not self.lock(fd, exclusive=False, wait=False)
        finally:
            os.close(fd)


class Windows:
    name = "windows"
    travels = False  # the lock belongs to the process that took it, not to a handle a child inherits
    ERROR_LOCK_VIOLATION, ERROR_NOT_LOCKED = 33, 158
    FAR = 1 << 30  # OffsetHigh of the locked byte: 2**62, past the end of any file we write

    def __init__(self, msvcrt):
        import ctypes
        from ctypes import wintypes

        class Overlapped(ctypes.Structure):
            _fields_ = [("Internal", ctypes.c_void_p), ("InternalHigh", ctypes.c_void_p),
                        ("Offset", wintypes.DWORD), ("OffsetHigh", wintypes.DWORD), ("hEvent", wintypes.HANDLE)]

        self.msvcrt, self.ctypes, self.Overlapped = msvcrt, ctypes, Overlapped
        self.kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        where = ctypes.POINTER(Overlapped)  # declared, so that a 64-bit HANDLE is passed whole
        self.kernel32.LockFileEx.argtypes = [wintypes.HANDLE, wintypes.DWORD, wintypes.DWORD, wintypes.DWORD,
                                             wintypes.DWORD, where]
        self.kernel32.UnlockFileEx.argtypes = [wintypes.HANDLE, wintypes.DWORD, wintypes.DWORD, wintypes.DWORD, where]
        self.kernel32.LockFileEx.restype = self.kernel32.UnlockFileEx.restype = wintypes.BOOL

    def _where(self):
        return self.ctypes.byref(self.Overlapped(Offset=0, OffsetHigh=self.FAR))

    def lock(self, fd: int, exclusive: bool, wait: bool) -> bool:
        flags = (0x2 if exclusive else 0) | (0 if wait else 0x1)  # LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY
        if self.kernel32.LockFileEx(self.msvcrt.get_osfhandle(fd), flags, 0, 1, 0, self._where()):
            return True
        if (err := self.ctypes.get_last_error()) == self.ERROR_LOCK_VIOLATION:
            return False
        raise self.ctypes.WinError(err)

    def unlock(self, fd: int) -> None:
        # Said explicitly rather than left to the close: Windows frees the locks of a closed handle
        # only "depending upon available system resources".
        if (not self.kernel32.UnlockFileEx(self.msvcrt.get_osfhandle(fd), 0, 1, 0, self._where())
                and (err := self.ctypes.get_last_error()) != self.ERROR_NOT_LOCKED):
            raise self.ctypes.WinError(err)

    def held(self, path: Path) -> bool:
        fd = os.open(path, os.O_RDONLY)
        try:
            if not self.lock(fd, exclusive=False, wait=False):
                return True
            self.unlock(fd)
            return False
        finally:
            os.close(fd)


class Records:
    name = "records"
    travels = False  # a record names its process: a descriptor handed to a child does not carry it

    def __init__(self):
        with warnings.catch_warnings():  # filelock warns that only its soft lock is here: that is the one we use
            warnings.simplefilter("ignore")
            from filelock import SoftFileLock
        self.SoftFileLock = SoftFileLock
        # one folder a user (a shared temporary folder holds every user's): another user's records would refuse
        # or forge every lock of ours
        uid = os.getuid() if hasattr(os, "getuid") else None
        self.root = Path(tempfile.gettempdir()) / ("bert-explorer-locks" + (f"-{uid}" if uid is not None else ""))
        self._checked = False

    def _own_root(self) -> Path:
        """The records' folder, made for this user alone (0700); one of that name another user owns is refused."""
        if not self._checked:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            if hasattr(os, "getuid") and (self.root.is_symlink() or self.root.stat().st_uid != os.getuid()):
                raise PermissionError(f"{self.root}, where this program keeps its lock records, belongs to another "
                                      "user or is a link; remove it, or set TMPDIR to a folder of your own")
            self._checked = True
        return self.root

    def _files(self, st: os.stat_result) -> tuple[Path, Path]:
        # Keyed by the file itself, not its path, like a kernel lock: a folder renamed away (the disk
        # cache moves an entry aside before deleting it) takes its locks with it.
        self._own_root()
        key = f"{st.st_dev}-{st.st_ino}"
        return self.root / f"{key}.json", self.root / f"{key}.mutex"

    def lock(self, fd: int, exclusive: bool, wait: bool) -> bool:
        st = os.fstat(fd)
        records, mutex = self._files(st)

        mine = {"pid": os.getpid(), "created": process_start(os.getpid()), "fd": fd, "exclusive": exclusive}
        while True:
            with self.SoftFileLock(str(mutex)):
                others = [r for r in self._live(records, st) if not _same_descriptor(r, fd)]
                if not any(exclusive or r.get("exclusive") for r in others):
                    _write(records, others + [mine])
                    return True
            if not wait:
                return False
            time.sleep(POLL_S)

    def unlock(self, fd: int) -> None:
        st = os.fstat(fd)
        records, mutex = self._files(st)
        with self.SoftFileLock(str(mutex)):
            _write(records, [r for r in self._live(records, st) if not _same_descriptor(r, fd)])

    def held(self, path: Path) -> bool:
        """Is there a live exclusive holder? (A shared probe would be refused only by one.) Records are
        replaced in one rename, so they are read without the mutex."""
        st = os.stat(path)
        return any(r.get("exclusive") for r in self._live(self._files(st)[0], st))

    def _live(self, records: Path, st: os.stat_result) -> list[dict]:
        try:
            found = json.loads(records.read_text())
        except (OSError, ValueError):
            return []
        return [r for r in found if isinstance(r, dict) and _holds(r, st)]


def _same_descriptor(record: dict, fd: int) -> bool:
    """Our own record on this descriptor: locking it again replaces it (as ``flock`` converts a lock)."""
    return record.get("pid") == os.getpid() and record.get("fd") == fd


def _holds(record: dict, st: os.stat_result) -> bool:
    """Does the process of ``record`` still live, and still have its descriptor open on this file?"""
    import psutil

    pid, fd = record.get("pid"), record.get("fd")
    if not record.get("created") or not process_alive(pid, record["created"]):
        return False
    if pid == os.getpid():
        try:
            held = os.fstat(fd)
        except OSError:  # closed since: the lock went with it
            return False
        return (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino)
    try:
        files = psutil.Process(pid).open_files()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's process that we cannot look into: assume it holds what it says
    return any(f.fd == fd and _is_file(f.path, st) for f in files)


def _is_file(path: str, st: os.stat_result) -> bool:
    try:
        there = os.stat(path)
    except OSError:  # removed since (a lock on a deleted file protects nothing)
        return False
    return (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino)


def _write(records: Path, holders: list[dict]) -> None:
    if not holders:
        records.unlink(missing_ok=True)
        return
    tmp = records.with_name(f"{records.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(holders))
    os.replace(tmp, records)  # readers see the old list or the new one, never half of one


def pick():
    """The backend of this system: ``flock`` where ``fcntl`` exists, ``LockFileEx`` on Windows,
    records where neither is there."""
    try:
        import fcntl
        return Flock(fcntl)
    except ImportError:
        pass
    with contextlib.suppress(ImportError):
        import msvcrt
        return Windows(msvcrt)
    return Records()
