"""Where analyses keep what is slow to compute (layer features, nearest-neighbour indexes), so
that a second visit to a page is fast.

One folder per computation, named by what it depends on: the model's weights (their file's
size and modification time, plus the model's path), the corpus or task, and the settings. A
result is written into a temporary folder and renamed into place when complete, so a killed
build never leaves half an entry that a later visit would trust.

The folder is ``$BERT_EXPLORER_CACHE`` if set, else ``~/.cache/bert-explorer``.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from . import atomic, full_disk
from .full_disk import CacheNotKept

if TYPE_CHECKING:  # only named in annotations: the cache stays free of torch, so the run system can use it
    from .checkpoint import Loaded


def cache_root() -> Path:
    root = Path(os.environ.get("BERT_EXPLORER_CACHE") or Path.home() / ".cache" / "bert-explorer")
    root.mkdir(parents=True, exist_ok=True)
    return root


def model_identity(loaded: Loaded) -> dict:
    """What identifies the weights of a loaded model on disk."""
    identity = {"path": str(Path(loaded.path).resolve())}
    for name in ("model.safetensors", "delta.safetensors", "base.json"):
        f = Path(loaded.path) / name
        if f.exists():
            st = f.stat()
            identity[name] = [st.st_size, st.st_mtime_ns]
    return identity


def entry_key(kind: str, loaded: Loaded | None, **settings) -> str:
    """A folder name for ``kind`` computed from ``loaded``'s weights with ``settings``."""
    blob = json.dumps({"model": model_identity(loaded) if loaded is not None else None, **settings},
                      sort_keys=True, default=str)
    return f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def entry(kind: str, loaded: Loaded | None, **settings) -> Path:
    """The folder of a cache entry (it exists only once complete)."""
    return cache_root() / entry_key(kind, loaded, **settings)


@contextmanager
def writing(path: Path, *, optional: str | None = None):
    """Yield a temporary folder to fill; on success it becomes ``path`` in one rename.

    If another process finished the same entry first, its copy is kept and ours dropped.
    ``optional`` names, in words, what an entry holds that only saves time later (a result the
    caller already has): on a full disk that entry is then left out with one CacheNotKept
    warning, and the caller goes on after the ``with`` block with its result, uncached.
    """
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
    except BaseException as e:
        if optional is None or not (full_disk.is_disk_full(e) or no_room and isinstance(e, OSError)):
            raise
        warnings.warn(CacheNotKept(full_disk.sentence(path.parent, f"keep {optional} in the cache",
                                                      "the result is used all the same, and computed again next time")),
                      stacklevel=3)
