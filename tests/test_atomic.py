"""The one atomic write (bert_explorer/atomic.py): a write that is killed part-way leaves the old
file or folder whole, and nothing half-written where a reader would look."""
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from bert_explorer import atomic

# A child process that starts replacing PATH and is killed (SIGKILL: no cleanup runs) half-way.
KILLED_FILE = """
import os, signal, sys
from bert_explorer import atomic
with atomic.replacing(sys.argv[1]) as tmp:
    with open(tmp, "w") as f:
        f.write('{"half": ')
        f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""
KILLED_FOLDER = """
import os, signal, sys
from pathlib import Path
from bert_explorer import atomic
with atomic.folder(sys.argv[1]) as tmp:
    (tmp / "config.json").write_text("{}")
    os.kill(os.getpid(), signal.SIGKILL)  # before model.safetensors
"""


def _killed(script, *args):
    p = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr


def test_a_killed_file_write_leaves_the_old_file_and_no_half_file_where_readers_look(tmp_path):
    status = tmp_path / "status.json"
    atomic.write_json(status, {"state": "running", "step": 3})
    _killed(KILLED_FILE, status)
    assert json.loads(status.read_text()) == {"state": "running", "step": 3}
    # the half-written file is hidden beside it (a dot name that no finder lists), never at the path
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["status.json"]


def test_a_killed_folder_write_leaves_the_old_folder_and_no_half_folder(tmp_path):
    ckpt = tmp_path / "checkpoints" / "step-2"
    with atomic.folder(ckpt) as tmp:
        (tmp / "config.json").write_text("{}")
        (tmp / "model.safetensors").write_bytes(b"old weights")
    _killed(KILLED_FOLDER, ckpt)
    assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "model.safetensors"]
    assert (ckpt / "model.safetensors").read_bytes() == b"old weights"
    visible = [p.name for p in ckpt.parent.iterdir() if not p.name.startswith(".")]
    assert visible == ["step-2"]
    # a first write killed the same way leaves no folder at all
    _killed(KILLED_FOLDER, tmp_path / "checkpoints" / "step-4")
    assert not (tmp_path / "checkpoints" / "step-4").exists()


def test_an_error_while_writing_keeps_the_old_version_and_removes_the_temporary_one(tmp_path):
    f, d = tmp_path / "frames.json", tmp_path / "entry"
    atomic.write_text(f, "old")
    with atomic.folder(d) as tmp:
        (tmp / "a").write_text("old")
    for target, ctx in ((f, atomic.replacing), (d, atomic.folder)):
        with pytest.raises(OSError, match="no room"):
            with ctx(target) as tmp:
                (tmp / "a" if ctx is atomic.folder else tmp).write_text("new, half")
                raise OSError("no room")
    assert f.read_text() == "old" and (d / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry", "frames.json"]  # no temporary left behind


def test_a_completed_write_replaces_the_whole_file_or_folder(tmp_path):
    f, d = tmp_path / "plan.json", tmp_path / "ckpt"
    atomic.write_json(f, {"cells": [1, 2]}, indent=2)
    assert json.loads(f.read_text()) == {"cells": [1, 2]} and f.read_text().endswith("\n")
    for content in ("one", "two"):
        with atomic.folder(d) as tmp:
            (tmp / content).write_text(content)
    assert [p.name for p in d.iterdir()] == ["two"]  # the old folder's files are gone with it
    assert oct(d.stat().st_mode & 0o777) == oct(0o755)  # an ordinary folder, not mkdtemp's private one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "plan.json"]


def test_keeping_an_existing_folder_drops_the_later_copy(tmp_path):
    """Two processes finishing the same cache entry: the first stays, the second is dropped whole."""
    d = tmp_path / "entry"
    with atomic.folder(d, replace=False) as tmp:
        (tmp / "first").write_text("1")
    with atomic.folder(d, replace=False) as tmp:
        (tmp / "second").write_text("2")
    assert [p.name for p in d.iterdir()] == ["first"] and [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_threads_writing_one_file_each_replace_it_whole(tmp_path):
    """Two Streamlit sessions are threads of one process: their temporary names must differ."""
    status = tmp_path / "status.json"
    errors = []

    def write(n):
        try:
            for i in range(200):
                atomic.write_json(status, {"writer": n, "i": i, "pad": "x" * 5000})
        except Exception as e:  # noqa: BLE001 - a clash shows as any error
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for _ in range(200):
        if status.exists():
            assert json.loads(status.read_text())["pad"] == "x" * 5000  # never a half file
    for t in threads:
        t.join()
    assert not errors and os.listdir(tmp_path) == ["status.json"]


def test_numpy_keeps_the_name_it_is_given(tmp_path):
    """np.savez adds .npz to a name without it: the temporary name keeps the suffix, so the
    part lands where the rename expects it."""
    np = pytest.importorskip("numpy")
    part = tmp_path / "shard-00000.npz"
    with atomic.replacing(part) as tmp:
        np.savez(tmp, v=np.arange(3))
    assert list(np.load(part)["v"]) == [0, 1, 2] and os.listdir(tmp_path) == ["shard-00000.npz"]
