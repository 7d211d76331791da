"""One writer per run: every writer (CLI foreground and background, the app's launches,
ablations, pre-training and fine-tuning) holds the run's writer lock; a second writer is
refused with one sentence and exit code 2, changing nothing; a killed holder's lock is free."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bert_explorer.train.pretrain import PretrainConfig, run_pretraining
from bert_explorer.train.run_lock import RunBusy, read_holder, writer_busy, writer_lock
from bert_explorer.train.runs import Run, delete, start_background

TINY = dict(corpus="tiny", size="tiny", vocab="train", vocab_size=300, batch_size=4, max_seq_length=48, log_every=1,
            eval_every=1000, eval_batches=2, seed=3, device="cpu")
HOLD = ("import sys, time; from bert_explorer.train.run_lock import writer_lock\n"
        "with writer_lock(sys.argv[1], 'a test holder'):\n"
        "    print('held', flush=True); time.sleep(600)\n")


def _holder(run_dir):
    """Another process holding the run's writer lock (like a training run in progress)."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def _snapshot(d):
    # (.start.lock is an empty file that only serialises starts and deletes)
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name != ".start.lock"}


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "bert_explorer.cli", *args], capture_output=True, text=True,
                          timeout=240, **kw)


def test_a_second_foreground_pretraining_is_refused_and_changes_nothing(tmp_path):
    out = tmp_path / "r2"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**TINY, "max_steps": 2}))
    # a run already half-written by its process, which still holds the lock
    out.mkdir()
    Run(out).create({**TINY}, "pretrain")
    Run(out).log_metrics({"split": "train", "step": 1, "loss": 5.0})
    holder = _holder(out)
    try:
        before = _snapshot(out)
        r = _cli("pretrain", "--config", str(cfg), "--output", str(out), "--no-progress")
        assert r.returncode == 2, r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in r.stderr
        assert str(out) in lines[0] and f"pid {holder.pid}" in lines[0] and "a test holder" in lines[0]
        assert _snapshot(out) == before
        # the background path says the same, before it writes config.json
        r = _cli("pretrain", "--config", str(cfg), "--output", str(out), "--background")
        assert r.returncode == 2 and f"pid {holder.pid}" in r.stderr
        assert _snapshot(out) == before
    finally:
        holder.kill()
        holder.wait()


def test_two_real_pretrainings_on_one_folder_one_runs_one_is_refused(tmp_path):
    """The issue's case: the same command twice, a moment apart (the first still training)."""
    out = tmp_path / "same"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**TINY, "max_steps": 100000, "save_every": 100000}))
    first = subprocess.Popen([sys.executable, "-m", "bert_explorer.cli", "pretrain", "--config", str(cfg),
                              "--output", str(out), "--no-progress"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not read_holder(out).get("pid") == first.pid:
            time.sleep(0.05)
        second = _cli("pretrain", "--config", str(cfg), "--output", str(out), "--no-progress")
        assert first.poll() is None  # the first was still at work when the second was refused
    finally:
        Run(out).request_stop()
    first_out, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err[-2000:]
    assert second.returncode == 2 and f"pid {first.pid}" in second.stderr
    steps = [m["step"] for m in Run(out).metrics() if m["split"] == "train"]
    assert len(steps) >= 2 and steps == list(range(1, len(steps) + 1))  # every step logged once, by one writer


def test_the_library_and_the_app_launch_refuse_a_busy_run(tmp_path):
    out = tmp_path / "busy"
    holder = _holder(out)
    try:
        with pytest.raises(RunBusy, match=f"pid {holder.pid}"):
            run_pretraining(PretrainConfig(**TINY, max_steps=1), out, progress=False)
        with pytest.raises(RuntimeError, match=f"pid {holder.pid}"):  # what the pages' launch() shows
            start_background("pretrain", {**TINY, "max_steps": 1}, out)
        assert not (out / "config.json").exists() and not (out / "status.json").exists()
        assert "a test holder" in writer_busy(out)
    finally:
        holder.kill()
        holder.wait()
    assert writer_busy(out) is None


def test_a_background_run_holds_the_lock_from_launch_to_end(tmp_path):
    run = start_background("pretrain", {**TINY, "max_steps": 100000, "save_every": 100000}, tmp_path / "bg")
    try:
        deadline = time.time() + 120
        while time.time() < deadline and run.status().get("step", 0) < 1:
            time.sleep(0.2)
        pid = run.status()["pid"]
        assert read_holder(run.path)["pid"] == pid  # the trainer adopted the lock its starter took
        with pytest.raises(RunBusy, match=f"pid {pid}"):
            run_pretraining(PretrainConfig(**TINY, max_steps=1), run.path, progress=False)
        with pytest.raises(RuntimeError):
            delete(run)
    finally:
        run.request_stop()
    assert run.wait(timeout=120)["state"] == "stopped"
    assert writer_busy(run.path) is None


def test_a_killed_holders_lock_is_taken_over(tmp_path):
    out = tmp_path / "killed"
    holder = _holder(out)
    assert writer_busy(out) is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with writer_lock(out, "the next writer"):
        assert read_holder(out)["pid"] == os.getpid()
    assert f"taking over from pid {holder.pid}" in (out / "log.txt").read_text()


def test_the_lock_is_reentrant_and_leaves_no_empty_folder(tmp_path):
    with writer_lock(tmp_path / "a"):
        with writer_lock(tmp_path / "a"):  # an ablation calling a writer on its own folder
            pass
        assert writer_busy(tmp_path / "a") is None  # this process holds it: not "busy" for itself
    assert not (tmp_path / "a").exists()  # nothing was written: no empty run folder is left
