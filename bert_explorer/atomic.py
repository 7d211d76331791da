"""Writing so that a crash at any moment leaves either the old version or the new one, never half.

Everything that others read while it is being written (a run's ``status.json``, a checkpoint
folder, a cache entry, the GPU kit's manifest) is written under a temporary name beside its
final place and renamed into place when complete: a rename within one file system is atomic,
so a reader sees the old file (or no file) until the new one is whole. This module is the one
place that does it, once for a file (:func:`replacing`) and once for a folder (:func:`folder`).

Temporary names start with a dot and name the final one (``.status.json.<pid>-<thread>.tmp``,
``.step-200.tmp-<random>``): the finders skip them, and a cleaner can find its own leftovers.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


# The temporary names below, and the aside name of a replaced folder: ".NAME.<pid>-<thread>.tmp[.suffix]",
# ".NAME.tmp-<random>", ".NAME.old-<pid>-<thread>".
_LEFTOVER = re.compile(r"\..+\.(\d+-\d+\.tmp(\.[^/]*)?|tmp-[A-Za-z0-9_]+|old-\d+-\d+)")


def is_leftover(name: str) -> bool:
    """Is ``name`` one of this module's temporary names (a write not finished, or killed)?"""
    return bool(_LEFTOVER.fullmatch(name))


def leftovers(folder: str | Path) -> list[Path]:
    """This module's temporary files and folders directly in ``folder``: what a process killed in the
    middle of a write left there. Only whoever alone writes ``folder`` may remove them."""
    folder = Path(folder)
    try:
        return sorted(p for p in folder.iterdir() if is_leftover(p.name))
    except OSError:
        return []


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; when the block ends without an error it
    replaces ``path`` in one rename, and on any error it is removed (its room goes back at once).

    The temporary name keeps ``path``'s suffix, so writers that choose a format by the name
    (numpy's ``savez`` adds ``.npz`` to a name without it) write where they are told. It names
    the process and the thread: two Streamlit sessions (threads of one process) may write the
    same file at once, and each replaces it whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Replace ``path``'s content with ``text`` (UTF-8) in one rename."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | Path, data, **dumps) -> Path:
    """Replace ``path`` with ``data`` as JSON (``dumps``: json.dumps's options), ending in a newline."""
    return write_text(path, json.dumps(data, **dumps) + "\n")


@contextmanager
def folder(path: str | Path, *, replace: bool = True, into_empty: bool = False) -> Iterator[Path]:
    """Yield a new temporary folder beside ``path`` to fill; when the block ends without an
    error it becomes ``path`` in one rename, and on any error it is removed.

    Where ``path`` already exists, ``replace=True`` swaps it out (the old folder is renamed
    aside first and removed after, so ``path`` is missing for the instant between two renames,
    never half written); ``replace=False`` keeps it and drops ours: another process finished
    the same result first (a cache entry, a vocabulary), and both are equally good.
    ``into_empty=True`` (a folder the user named) takes the place of an empty folder only: the
    kernel's rename refuses a folder that holds anything at that instant, so files that came in
    while ours was written are kept and FileExistsError is raised."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
        if into_empty:
            try:
                os.rename(tmp, final)  # replaces an empty folder in one step, never a full one
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                raise FileExistsError(errno.ENOTEMPTY, "the folder is no longer empty", str(final)) from None
            return
        if not final.exists():
            try:
                os.rename(tmp, final)
                return
            except OSError:  # another process put its own there first (a non-empty folder)
                if not final.exists():
                    raise
        if not replace:
            shutil.rmtree(tmp, ignore_errors=True)
            return
        old = final.with_name(f".{final.name}.old-{os.getpid()}-{threading.get_ident()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def usual_mode(path: str | Path) -> None:
    """Give ``path`` the mode every other new file of this process gets (0644 under the usual umask). A
    writer that makes its file private (safetensors' ``save_file`` writes 0600) would otherwise leave one
    file of a checkpoint unreadable to the people its other files are readable to."""
    path = Path(path)
    probe = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp.mode")
    probe.touch()
    try:
        os.chmod(path, probe.stat().st_mode & 0o777)
    finally:
        probe.unlink(missing_ok=True)
