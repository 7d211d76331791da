"""Where analyses keep what is slow to compute (layer features, nearest-neighbour indexes), so
that a second visit to a page is fast.

One folder per computation, named by what it depends on: the model's weights (their file's
size and modification time, plus the model's path), the corpus or task, and the settings. A
result is written into a temporary folder and renamed into place when complete, so a killed
build never leaves half an entry that a later visit would trust.

The folder is ``$BERT_EXPLORER_CACHE`` if set, else ``~/.cache/bert-explorer``.

**How much it keeps.** At most ``$BERT_EXPLORER_CACHE_GB`` gigabytes (10^9 bytes; decimals allowed,
``inf`` for no limit), 5 by default. Without a limit a shared server fills its disk: every
nearest-neighbour index is about 0.8 GB, and every new seed or sample size of a probe adds an
entry. What counts: the complete entries (``<kind>-<16 hex digits>``), and the work folders of
nearest-neighbour builds (``neighbours-work/<entry>``, their finished parts), a build that is
running counted at the room it reserved for itself (:func:`make_room`). When an entry has been
written, and before a build starts, the **least recently used** entries are removed until the
rest fits. "Used" is read or written: a reader marks its entry (:func:`reading`, :func:`pin`, which
set the folder's modification time), and the oldest mark goes first.

Never removed:

- an entry **in use**: one this process holds (:func:`pin`: a registry here) or any process reads
  (a shared ``flock`` on the entry's ``.in-use`` file for as long as it reads; the remover takes an
  exclusive one without waiting and passes the entry by when it cannot);
- the work folder of a build in progress (its builder holds the folder's ``lock``) or one touched
  in the last two minutes (a build just started, whose process has not taken the lock yet);
- temporary folders (``.<entry>.tmp-…``): a write in progress, never counted and never touched.

An entry is removed by renaming it aside first (one atomic step: a reader finds it whole or not
at all) and deleting it after. A single entry larger than the quota is kept alone: everything
else not in use goes, and it stays until something newer needs the room.

:func:`usage` (bytes used, quota) is cheap enough for every page run: it lists the cache's top
folder and reads one small file per entry, ``.bytes``, its size written once when the entry was
(so no entry is walked again), and walks only the work folders (a few dozen files each).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import threading
import time
import warnings
from collections import Counter
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import atomic, full_disk
from .fingerprint import fingerprint
from .full_disk import CacheNotKept
from . import file_lock, processes, shared_work

if TYPE_CHECKING:  # only named in annotations: the cache stays free of torch, so the run system can use it
    from .checkpoint import Loaded


QUOTA_ENV = "BERT_EXPLORER_CACHE_GB"
DEFAULT_QUOTA_GB = 5.0  # four BBC indexes and room for a fifth being built
WORK_FRESH_S = 120      # a work folder touched this recently belongs to a build that is starting or running

SIZE_FILE = ".bytes"       # in an entry: its size, written with it
IN_USE_FILE = ".in-use"    # in an entry: the file its readers hold a shared lock on
RESERVED_FILE = ".reserved"  # in a work folder: the room its build asked for (make_room)
EVICT_LOCK = ".evict.lock"  # in the cache: one removal pass at a time, so two never free the same room twice
ENTRY_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*-[0-9a-f]{16}")  # what entry_key makes
_ASIDE = re.compile(r"\..+\.evicted-(\d+)-[0-9a-f]+")  # an entry renamed aside, being deleted by that pid


class NoRoom(RuntimeError):
    """The cache's quota has no room for a build, and what fills it is in use; one sentence."""


def cache_root() -> Path:
    root = Path(os.environ.get("BERT_EXPLORER_CACHE") or Path.home() / ".cache" / "bert-explorer")
    root.mkdir(parents=True, exist_ok=True)
    return root


def work_root() -> Path:
    """Where builds keep a work folder per entry they are making (``runs/neighbour_jobs.py``)."""
    return cache_root() / "neighbours-work"


def quota_bytes() -> float:
    """The most the cache keeps, from ``$BERT_EXPLORER_CACHE_GB`` (read at each call, so a test or
    a server can change it): a number of gigabytes, or the default 5 when unset. A value that
    is not a number of at least 0 is said in a warning and the default used."""
    text = os.environ.get(QUOTA_ENV, "").strip()
    if not text:
        return DEFAULT_QUOTA_GB * 1e9
    try:
        gb = float(text)
        if gb < 0 or math.isnan(gb):
            raise ValueError
    except ValueError:
        warnings.warn(f"{QUOTA_ENV}={text!r} is not a number of gigabytes; the cache keeps the default "
                      f"{DEFAULT_QUOTA_GB:g} GB", stacklevel=2)
        return DEFAULT_QUOTA_GB * 1e9
    return gb * 1e9


def model_identity(loaded: Loaded) -> dict:
    """What identifies the weights of a loaded model on disk (``fingerprint.fingerprint``)."""
    return {"weights": fingerprint(loaded.path)}


def entry_key(kind: str, loaded: Loaded | None, **settings) -> str:
    """A folder name for ``kind`` computed from ``loaded``'s weights with ``settings``."""
    blob = json.dumps({"model": model_identity(loaded) if loaded is not None else None, **settings},
                      sort_keys=True, default=str)
    return f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def entry(kind: str, loaded: Loaded | None, **settings) -> Path:
    """The folder of a cache entry (it exists only once complete)."""
    return cache_root() / entry_key(kind, loaded, **settings)


@contextmanager
def writing(path: Path, *, optional: str | None = None, quota: bool = True):
    """Yield a temporary folder to fill; on success it becomes ``path`` in one rename.

    If another process finished the same entry first, its copy is kept and ours dropped.
    ``optional`` names, in words, what an entry holds that only saves time later (a result the
    caller already has): on a full disk that entry is then left out with one CacheNotKept
    warning, and the caller goes on after the ``with`` block with its result, uncached.

    Once the entry is in place the least recently used others are removed until the cache fits
    its quota (``quota=False``: the caller reserved the room before, see :func:`make_room`)."""
    no_room = False
    try:
        with ExitStack() as stack:
            try:  # an entry another process finished first is kept, ours dropped (replace=False)
                tmp = stack.enter_context(atomic.folder(path, replace=False))
            except OSError as e:
                if optional is None or not full_disk.is_disk_full(e):
                    raise
                # Not even room for the folder. The block must still run (a context manager cannot
                # skip it): it gets a folder that does not exist, so its first write fails and is
                # forgiven below.
                no_room, tmp = True, path.parent / f".{path.name}.no-room"
            yield tmp
            (tmp / SIZE_FILE).write_text(str(_tree_bytes(tmp)))  # usage() reads this instead of walking the entry
    except BaseException as e:
        if optional is None or not (full_disk.is_disk_full(e) or no_room and isinstance(e, OSError)):
            raise
        warnings.warn(CacheNotKept(full_disk.sentence(path.parent, f"keep {optional} in the cache",
                                                      "the result is used all the same, and computed again next time")),
                      stacklevel=3)
    else:
        if quota and Path(path).parent.resolve() == cache_root().resolve():
            with suppress(OSError):  # keeping to the quota is housekeeping: it never fails a result
                _fit(keep=Path(path))


# ----- in use: read by this process or another ------------------------------------------------------
_pins: Counter = Counter()  # absolute entry path -> how many pins of this process hold it
_pins_guard = threading.Lock()


def _key(path: Path) -> str:
    return os.path.abspath(path)


def mark_used(path: Path) -> None:
    """Say that the entry ``path`` was just used: the last to be removed when room is needed."""
    with suppress(OSError):
        os.utime(path)


def _unpin(key: str) -> None:
    with _pins_guard:
        _pins[key] -= 1
        if _pins[key] <= 0:
            del _pins[key]


class Pin:
    """An entry held in use until :meth:`release` (or the end of the process): see :func:`pin`."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = Path(path), fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)  # lets the shared lock go
        _unpin(_key(self.path))


def pin(path: Path) -> Pin | None:
    """Hold the entry ``path`` in use, and mark it used: no process removes it until the pin is
    released. None when there is no such entry (never made, or just removed). For a reader that
    keeps an entry open (a memory-mapped index); a read of a moment uses :func:`reading`."""
    key = _key(path)
    with _pins_guard:  # registered before the lock is taken, so no thread of ours removes it in between
        _pins[key] += 1
    try:  # (the entry's own file: opening it fails once the entry is gone, it never makes one)
        fd = file_lock.acquire_file(Path(path) / IN_USE_FILE, shared=True)
    except (FileNotFoundError, NotADirectoryError):
        _unpin(key)
        return None
    mark_used(path)
    return Pin(path, fd)


@contextmanager
def reading(path: Path):
    """Hold the entry ``path`` in use for the ``with`` block and mark it used; yields whether the
    entry is there. Check and read inside the block: the entry cannot be removed in between."""
    held = pin(path)
    try:
        yield held is not None
    finally:
        if held is not None:
            held.release()


def read_json(path: Path, name: str) -> dict | None:
    """The JSON file ``name`` of the entry ``path`` (held in use while it is read), or None when the
    entry or the file is not there (yet)."""
    with reading(Path(path)) as there:
        if not there:
            return None
        try:
            return json.loads((Path(path) / name).read_text())
        except FileNotFoundError:
            return None


def kept_json(kind: str, loaded: Loaded | None, compute, *, what: str, **settings):
    """``compute()``'s result (JSON data) for ``loaded`` and ``settings``, read back when an earlier
    process kept it in the entry ``entry(kind, loaded, **settings)``, else computed and kept there
    (``what`` names it, in words, for the one warning of a full disk: the result is returned either
    way). ``settings`` hold whatever changes the answer, a format version among them."""
    path = entry(kind, loaded, **settings)
    data = read_json(path, "result.json")
    if data is not None:
        return data
    result = shared_work.computed(f"kept: {kind}", compute)
    with writing(path, optional=what) as tmp:
        (tmp / "result.json").write_text(json.dumps(result, default=float))
    return result


# ----- the quota -------------------------------------------------------------------------------------
@dataclass
class _Item:
    """One thing the quota counts: an entry, or a build's work folder."""
    path: Path
    bytes: int
    used: float          # when it was last read or written
    work: bool = False   # a work folder
    busy: bool = False   # a work folder in use (its build runs, or has just started)


def _tree_bytes(folder: Path) -> int:
    total = 0
    with suppress(OSError), os.scandir(folder) as it:
        for e in it:
            with suppress(OSError):
                total += _tree_bytes(Path(e.path)) if e.is_dir(follow_symlinks=False) else e.stat().st_size
    return total


def _entry_bytes(path: Path) -> int:
    try:
        return int((path / SIZE_FILE).read_text())
    except (OSError, ValueError):  # an entry from before sizes were kept: walked once, then kept
        n = _tree_bytes(path)
        with suppress(OSError):
            st = path.stat()
            # written beside and renamed, but never with atomic.write_text: that makes the folder when
            # it is missing, and an entry removed meanwhile must not come back as an empty folder
            part = path / f"{SIZE_FILE}.{os.getpid()}-{threading.get_ident()}.tmp"
            part.write_text(str(n))
            os.replace(part, path / SIZE_FILE)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # writing its size is no use of it
        return n


def _touched(folder: Path) -> float:
    """When a build last wrote to its work folder (its progress, log, parts or reservation; not
    its lock, which a remover opens too)."""
    newest = 0.0
    with suppress(OSError), os.scandir(folder) as it:
        for e in it:
            if e.name != "lock":
                with suppress(OSError):
                    newest = max(newest, e.stat(follow_symlinks=False).st_mtime)
    return newest


def _work_item(folder: Path) -> _Item:
    newest = _touched(folder)
    busy = time.time() - newest < WORK_FRESH_S or file_lock.is_held(folder / "lock")
    size = _tree_bytes(folder)
    if busy:
        with suppress(OSError, ValueError):
            size = max(size, int((folder / RESERVED_FILE).read_text()))
    return _Item(folder, size, newest, work=True, busy=busy)


def _items() -> list[_Item]:
    """Everything the quota counts, now."""
    root, out = cache_root(), []
    with os.scandir(root) as it:
        for e in it:
            if ENTRY_NAME.fullmatch(e.name) and e.is_dir(follow_symlinks=False):
                with suppress(OSError):
                    out.append(_Item(Path(os.path.abspath(e.path)), _entry_bytes(Path(e.path)), e.stat().st_mtime))
    if work_root().is_dir():
        with os.scandir(work_root()) as it:
            out += [_work_item(Path(os.path.abspath(e.path))) for e in it
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
    return out


def usage() -> tuple[int, float]:
    """(bytes the cache holds, its quota in bytes): what a page or the CLI shows."""
    return sum(i.bytes for i in _items()), quota_bytes()


def _move_aside(item: _Item, gone: list[Path]) -> bool:
    """Rename ``item`` out of the cache's sight (into ``gone``, to be deleted) unless it is in use;
    True when it no longer counts."""
    if item.busy or _pins.get(_key(item.path)):
        return False
    try:  # a work folder's lock is its builder's; an entry's is its readers'
        fd = file_lock.acquire_file(item.path / ("lock" if item.work else IN_USE_FILE), wait=False)
    except (FileNotFoundError, NotADirectoryError):
        return True  # another process removed it first
    if fd is None:
        return False
    try:
        if item.work and time.time() - _touched(item.path) < WORK_FRESH_S:
            return False  # a build started on it meanwhile
        aside = cache_root() / f".{item.path.name}.evicted-{os.getpid()}-{secrets.token_hex(4)}"
        with suppress(FileNotFoundError):
            os.rename(item.path, aside)
            gone.append(aside)
        return True
    finally:
        os.close(fd)


@contextmanager
def _removing():
    """One removal pass: under the cache's removal lock, with a list to put what was moved aside
    (and what a killed pass left) in, which is deleted after the lock is let go."""
    root, gone = cache_root(), []
    try:
        with file_lock.holding(root / EVICT_LOCK):
            with os.scandir(root) as it:
                gone += [Path(e.path) for e in it if (m := _ASIDE.fullmatch(e.name)) and not processes.pid_alive(int(m[1]))]
            yield gone
    finally:
        for p in gone:
            shutil.rmtree(p, ignore_errors=True)


def _evict(items: list[_Item], target: float, keep: Path | None, gone: list[Path]) -> int:
    """Remove the least recently used of ``items`` until they hold at most ``target`` bytes (never
    ``keep``, never one in use); what they hold after."""
    held = sum(i.bytes for i in items)
    for item in sorted(items, key=lambda i: i.used):
        if held <= target:
            break
        if item.path != keep and _move_aside(item, gone):
            held -= item.bytes
    return held


def _fit(keep: Path) -> None:
    """After ``keep`` was written: remove the least recently used entries until the cache fits."""
    with _removing() as gone:
        _evict(_items(), quota_bytes(), Path(os.path.abspath(keep)), gone)


def make_room(needed: float, folder: Path) -> str | None:
    """Make room for a build that will hold at most ``needed`` bytes (its parts in the work
    folder ``folder``, which it may already hold some of, and the entry it makes), and reserve
    it: the folder counts at least that much while the build runs, so entries written meanwhile
    make room for it too. None when the room is there, else one sentence why not.

    The least recently used others go first; when what is left is in use, the build waits. A
    build larger than the whole quota may start when nothing else is left, as an entry larger
    than the quota is kept alone."""
    folder = Path(os.path.abspath(folder))
    folder.mkdir(parents=True, exist_ok=True)
    quota = quota_bytes()
    with _removing() as gone:
        held = _evict([i for i in _items() if i.path != folder], quota - needed, None, gone)
        if held > max(0.0, quota - needed):
            size = full_disk.size_text
            return (f"The cache has no room for this build: it needs about {size(needed)} of the {size(quota)} "
                    f"the cache may keep ({QUOTA_ENV}), and {size(held)} of that is in use now (indexes open, "
                    "builds running); try again when they are done, or raise the limit.")
        atomic.write_text(folder / RESERVED_FILE, str(int(needed)))
    return None


def release_room(folder: Path) -> None:
    """The build in ``folder`` is over: it counts at what it holds, no longer at what it reserved."""
    (Path(folder) / RESERVED_FILE).unlink(missing_ok=True)
