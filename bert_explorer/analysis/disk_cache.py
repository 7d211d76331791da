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
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..checkpoint import Loaded


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
def writing(path: Path):
    """Yield a temporary folder to fill; on success it becomes ``path`` in one rename.

    If another process finished the same entry first, its copy is kept and ours dropped.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
