"""The disk cache keeps to its quota, and a nearest-neighbour build starts in one step.

A red team on a classroom server found that nothing capped the cache (each index is ~0.8 GB, each
new probe seed one more entry) and that two students pressing Build together started two builds.
Every test here pays none of that: entries of a few kB, a quota of a few kB
($BERT_EXPLORER_CACHE_GB as a fraction of a GB), and the build's process never started."""
import gc
import json
import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from bert_explorer import disk_cache
from bert_explorer.analysis.neighbours import search as nb
from bert_explorer.runs import neighbour_jobs as jobs

KB = 1000


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache of the test's own that keeps at most 10 kB: two entries of 4 kB fit, three do not."""
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(disk_cache.QUOTA_ENV, str(10 * KB / 1e9))
    return tmp_path / "cache"


def put(name: str, kb: int = 4, age_s: float = 0) -> Path:
    """Write an entry of ``kb`` kB, last used ``age_s`` seconds ago."""
    path = disk_cache.entry("probe-result", None, name=name)
    with disk_cache.writing(path) as tmp:
        (tmp / "result.json").write_bytes(b"x" * kb * KB)
    if age_s:
        used_ago(path, age_s)
    return path


def used_ago(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_the_least_recently_used_entries_are_removed_first(cache):
    a, b = put("a", age_s=300), put("b", age_s=200)
    c = put("c")  # 12 kB > 10 kB: the oldest goes
    assert not a.exists() and b.exists() and c.exists()
    used_ago(c, 100)
    with disk_cache.reading(b) as there:  # a read is a use: b is now the newest
        assert there
    d = put("d")
    assert b.exists() and not c.exists() and d.exists()
    assert disk_cache.usage() == (8 * KB, 10 * KB)
    assert not [p for p in cache.iterdir() if ".evicted-" in p.name]  # moved aside, then deleted


def test_an_entry_held_in_this_process_is_never_removed(cache):
    a = put("a", age_s=300)
    held = disk_cache.pin(a)
    b = put("b", age_s=200)
    put("c")
    assert a.exists() and not b.exists()  # the next least recently used went instead
    held.release()
    put("d")
    assert not a.exists()


def test_an_entry_read_by_another_process_is_never_removed(cache):
    a = put("a", age_s=300)
    read = ("import sys; from bert_explorer import disk_cache\n"
            "held = disk_cache.pin(sys.argv[1]); print(held is not None, flush=True); sys.stdin.read()")
    reader = subprocess.Popen([sys.executable, "-c", read, str(a)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline().strip() == "True"  # it holds the entry's shared lock now
        os.utime(a, (time.time() - 300,) * 2)  # (pinning marked it used: make it the oldest again)
        put("b", age_s=200)
        put("c")
        assert a.exists()
    finally:
        reader.communicate("")  # it ends, and its lock with it
    put("d")
    assert not a.exists()


def test_a_half_written_entry_and_a_killed_write_are_never_touched(cache):
    killed = cache / f".{disk_cache.entry_key('probe-result', None, name='killed')}.tmp-abc123"
    killed.mkdir(parents=True)
    (killed / "result.json").write_bytes(b"x" * 50 * KB)
    late = disk_cache.entry("probe-result", None, name="late")
    with disk_cache.writing(late) as tmp:
        (tmp / "result.json").write_bytes(b"x" * 3 * KB)
        put("a", age_s=300)
        put("b", age_s=200)
        put("c")  # over the quota while the write is half done
        assert (tmp / "result.json").stat().st_size == 3 * KB
    assert late.exists() and (killed / "result.json").stat().st_size == 50 * KB
    assert disk_cache.usage()[0] <= 10 * KB  # neither is counted until it is an entry


def test_an_entry_larger_than_the_quota_is_kept_alone(cache):
    put("a", age_s=300), put("b", age_s=200)
    big = put("big", kb=20)
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [big.name]


def test_usage_counts_entries_by_their_kept_size_and_a_builds_parts(cache):
    a = put("a", kb=3)
    old = disk_cache.entry("probe-result", None, name="from before sizes were kept")
    old.mkdir()
    (old / "result.json").write_bytes(b"x" * 2 * KB)
    parts = jobs.work_dir(disk_cache.entry("neighbours", None, name="x")) / "shards"
    parts.mkdir(parents=True)
    (parts / "shard-00000.npz").write_bytes(b"x" * KB)
    dead = cache / f".{a.name}.evicted-999999999-ab"  # a removal killed half way (pid 999999999 is no process)
    dead.mkdir()
    assert disk_cache.usage() == (6 * KB, 10 * KB)
    assert (old / disk_cache.SIZE_FILE).read_text() == str(2 * KB)  # walked once, then kept
    put("b", kb=1)
    assert not dead.exists()  # the next removal pass finishes it


def test_the_quota_is_read_from_its_setting(cache, monkeypatch):
    monkeypatch.setenv(disk_cache.QUOTA_ENV, "2.5")
    assert disk_cache.usage()[1] == 2.5e9
    monkeypatch.delenv(disk_cache.QUOTA_ENV)
    assert disk_cache.quota_bytes() == 5e9
    monkeypatch.setenv(disk_cache.QUOTA_ENV, "lots")
    with pytest.warns(UserWarning, match="BERT_EXPLORER_CACHE_GB='lots' is not a number"):
        assert disk_cache.quota_bytes() == 5e9


def test_an_open_index_is_in_use_until_it_is_dropped(cache):
    path = disk_cache.entry("neighbours", None, name="tiny")
    with disk_cache.writing(path) as tmp:
        np.save(tmp / "vectors.npy", np.zeros((100, 16), np.float16))  # 3.3 kB
        for name in ("token_ids", "unit", "starts", "ends"):
            np.save(tmp / f"{name}.npy", np.zeros(100, np.int32))
        (tmp / "sentences.json").write_text(json.dumps({"text": ["a"], "source": [""]}))
        (tmp / "meta.json").write_text("{}")
    used_ago(path, 300)
    index = nb.NeighbourIndex.open(path)
    used_ago(path, 300)
    put("a", age_s=200), put("b")
    assert path.exists()
    del index
    gc.collect()
    put("c")
    assert not path.exists()


# ----- a build: room in the quota, and one start at a time --------------------------------------------
@pytest.fixture
def no_process(monkeypatch):
    """The build's process is never started: its start is counted instead."""
    started = []

    def spawn(argv, log_file, *a, **k):
        started.append(argv)
        return types.SimpleNamespace(pid=os.getpid())  # a live process, as a starting build has
    monkeypatch.setattr(jobs, "spawn", spawn)
    monkeypatch.setattr(jobs, "reap_when_done", lambda proc: None)
    return started


def test_a_build_the_quota_has_no_room_for_is_refused_in_a_sentence(cache, no_process):
    a = put("a", kb=8)
    index = disk_cache.entry("neighbours", None, name="x")
    with disk_cache.reading(a):  # what fills the cache is in use
        why = jobs.start_build(index, ["--never-run"], one_at_a_time=False, room_bytes=5 * KB)
    assert why.startswith("The cache has no room for this build: it needs about 5 kB of the 10 kB")
    assert why.count(". ") == 0 and why.endswith(".") and no_process == [] and a.exists()
    assert jobs.start_build(index, ["--never-run"], one_at_a_time=False, room_bytes=5 * KB) is None
    assert not a.exists() and len(no_process) == 1  # room was made: the least recently used went
    assert disk_cache.usage()[0] == 5 * KB  # the build counts at the room it reserved


def test_a_build_in_progress_keeps_its_parts_and_a_stopped_one_makes_room(cache):
    running, stopped = (disk_cache.entry("neighbours", None, name=n) for n in ("running", "stopped"))
    for path in (running, stopped):
        shards = jobs.work_dir(path) / "shards"
        shards.mkdir(parents=True)
        (shards / "shard-00000.npz").write_bytes(b"x" * 3 * KB)
        for p in (shards, shards.parent):
            used_ago(p, 600)
    with jobs.builder_lock(running):
        used_ago(jobs.work_dir(running) / "shards", 600)
        put("a", age_s=300)
        put("b")  # 3 + 3 + 4 + 4 kB: the stopped build's parts are the least recently used
        assert jobs.work_dir(running).exists() and not jobs.work_dir(stopped).exists()


def test_two_sessions_pressing_build_together_start_one_build(cache, no_process, monkeypatch):
    """Classroom mode: two sessions (threads of one server) press Build on two different layers at
    the same instant. Making room takes a moment, as it does on a full cache: without one lock
    around the check and the start, both pass the check before either has started."""
    make_room = disk_cache.make_room
    monkeypatch.setattr(disk_cache, "make_room", lambda *a: time.sleep(0.2) or make_room(*a))
    monkeypatch.setenv(disk_cache.QUOTA_ENV, "1")
    together, answers = threading.Barrier(2), {}

    def press(layer):
        together.wait()
        answers[layer] = jobs.start_build(disk_cache.entry("neighbours", None, layer=layer), ["--layer", str(layer)],
                                          one_at_a_time=True, room_bytes=KB)
    threads = [threading.Thread(target=press, args=(layer,)) for layer in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    started, refused = [a for a in answers.values() if a is None], [a for a in answers.values() if a]
    assert len(no_process) == 1 and len(started) == 1
    assert "in classroom mode one runs at a time" in refused[0]


def test_private_mode_may_build_two_indexes_side_by_side(cache, no_process):
    for layer in (1, 2):
        assert jobs.start_build(disk_cache.entry("neighbours", None, layer=layer), [], one_at_a_time=False) is None
    assert len(no_process) == 2 and len(jobs.builds_running()) == 2


PRESS = """
import os, sys, time, types
from bert_explorer import disk_cache
from bert_explorer.runs import neighbour_jobs as jobs
jobs.spawn = lambda argv, log, *a, **k: types.SimpleNamespace(pid=os.getpid())
jobs.reap_when_done = lambda proc: None
make_room = disk_cache.make_room
disk_cache.make_room = lambda *a: time.sleep(0.2) or make_room(*a)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
print(repr(jobs.start_build(disk_cache.entry("neighbours", None, layer=sys.argv[1]), [], one_at_a_time=True,
                            room_bytes=1000)), flush=True)
sys.stdin.read()  # alive until the test has both answers: a starting build's process is alive
"""


def test_two_server_processes_pressing_build_together_start_one_build(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.QUOTA_ENV, "1")
    go = tmp_path / "go"
    presses = [subprocess.Popen([sys.executable, "-c", PRESS, str(layer), str(go)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for layer in (1, 2)]
    try:
        time.sleep(0.5)  # both imported and waiting
        go.touch()
        answers = [p.stdout.readline().strip() for p in presses]
    finally:
        for p in presses:
            p.communicate("")
    assert answers.count("None") == 1
    assert "in classroom mode one runs at a time" in [a for a in answers if a != "None"][0]
