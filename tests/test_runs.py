"""The run system (bert_explorer/runs): one writer per run, starting and deleting runs, live and
dead processes, the GPU queue, background processes and finding runs.

One writer per run: every writer (CLI foreground and background, the app's launches,
ablations, pre-training and fine-tuning) holds the run's writer lock; a second writer is
refused with one sentence and exit code 2, changing nothing; a killed holder's lock is free."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bert_explorer import checkpoint
from bert_explorer.runs.background import background_env, delete, kill, start_background
from bert_explorer.runs.finder import run_checkpoints
from bert_explorer.runs.gpu_queue import gpu_queue_applies
from bert_explorer.processes import process_start
from bert_explorer.runs.lock import RunBusy, read_holder, writer_busy, writer_lock
from bert_explorer.runs.run import Run
from bert_explorer.runs.signals import stopping_on_signals
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig

TINY = dict(corpus="tiny", size="tiny", vocab="train", vocab_size=300, batch_size=4, max_seq_length=48, log_every=1,
            eval_every=1000, eval_batches=2, seed=3, device="cpu")
HOLD = ("import sys, time; from bert_explorer.runs.lock import writer_lock\n"
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
        # the first goes on training: at least two steps logged before it is stopped (on a fast machine the
        # second was refused before the first had logged its second step)
        while time.time() < deadline and first.poll() is None and \
                len([m for m in Run(out).metrics() if m["split"] == "train"]) < 2:
            time.sleep(0.05)
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


def test_a_run_being_handed_to_its_process_is_not_said_to_be_its_starters(tmp_path):
    """A second after Fine-tune was pressed, a command aimed at the same folder said it "is being written by pid
    31885", the app's server holding the lock for the run's process: "stop it first" sent the user to the app."""
    import os

    from bert_explorer.runs.lock import acquire_writer, release

    out = tmp_path / "handed"
    fd = acquire_writer(out, "bert-explorer finetune (background)", handing_over=True)
    try:
        said = writer_busy(out)
        assert said.startswith(f"{out} is being written by `bert-explorer finetune (background)`, starting since ")
        assert f"pid {os.getpid()}" not in said
    finally:
        release(fd)


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


def test_waiting_for_a_run_waits_for_its_process_to_let_the_run_go(tmp_path):
    """A run writes its end before it releases the writer lock (tens of milliseconds under load): Run.wait
    returned at "stopped", and a resume at once found the run busy."""
    run = Run(tmp_path / "ending")
    run.create({"size": "tiny"}, "pretrain")
    run.write_status(state="stopped")
    script = ("import sys, time; from bert_explorer.file_lock import acquire_file; "
              f"fd = acquire_file({str(run.path / '.writer.lock')!r}); print('held', flush=True); time.sleep(1.5)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        assert holder.stdout.readline().strip() == "held"
        began = time.monotonic()
        assert run.wait(timeout=30, poll=0.05)["state"] == "stopped"
        assert time.monotonic() - began > 0.5 and writer_busy(run.path) is None
    finally:
        holder.kill()
        holder.wait()


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


# ----- starting, stopping and deleting runs ---------------------------------------------------------
def test_delete_refuses_a_live_run_and_non_runs(tmp_path):
    live = Run(tmp_path / "live").create({}, "pretrain")
    live.write_status(state="running", pid=os.getpid())
    with pytest.raises(RuntimeError, match="stop it"):
        delete(live)
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not a run directory"):
        delete(Run(tmp_path / "plain"))


@pytest.mark.skipif(os.name != "posix", reason="a signal sent to this very process")
def test_a_signal_is_a_stop_a_second_ctrl_c_aborts_and_the_handlers_are_put_back(tmp_path, capfd):
    """Inside ``stopping_on_signals`` Ctrl-C asks the run to stop (no STOP file: one could outlive the process
    and stop its resume), and says so at once; once taken, a last evaluation is not cut short; a second signal
    of either kind aborts at once, saying why; afterwards the process's own handlers are back."""
    run = Run(tmp_path / "r").create({}, "pretrain")
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts a process
    term = signal.getsignal(signal.SIGTERM)

    def delivered():  # (Python runs a handler between two bytecodes, soon after the signal arrives)
        for _ in range(200):
            time.sleep(0.005)

    run.step_reached = 3  # (before a first step, a signal ends the process at once: the test below)
    try:
        with stopping_on_signals(run):
            os.kill(os.getpid(), signal.SIGINT)
            delivered()
            assert run.signalled == signal.SIGINT and run.stop_requested()
            assert not (run.path / "STOP").exists()
            assert capfd.readouterr().err == ("\nbert-explorer: interrupted (Ctrl-C): the run stops at its next step "
                                              "and saves a checkpoint to resume from; Ctrl-C again ends it at "
                                              "once\n")
            run.clear_stop()  # the loop took it
            assert not run.stop_requested() and run.signalled == signal.SIGINT
            with pytest.raises(KeyboardInterrupt, match="^Ctrl-C a second time, before the stop was saved: ended at "
                                                         "once; it kept no checkpoint to resume from"):
                os.kill(os.getpid(), signal.SIGINT)
                delivered()
        with stopping_on_signals(run, resumable=False):  # a container's stop: SIGTERM, then another
            run.signalled = None
            os.kill(os.getpid(), signal.SIGTERM)
            delivered()
            assert run.signalled == signal.SIGTERM
            with pytest.raises(KeyboardInterrupt, match="^SIGTERM a second time, before the stop was saved"):
                os.kill(os.getpid(), signal.SIGTERM)
                delivered()
        # a second signal once the stop was saved (its status written, its checkpoint kept) says so, and the run
        # stays "stopped": it was turned to "failed" with "before the stop was saved" of a saved stop
        from bert_explorer.train.engine import marks_failure
        with stopping_on_signals(run):
            run.signalled = None
            os.kill(os.getpid(), signal.SIGINT)
            delivered()
            run.write_status(state="stopped", step=3)
            with pytest.raises(KeyboardInterrupt, match="^Ctrl-C a second time, after the stop was saved"):
                with marks_failure(run):
                    os.kill(os.getpid(), signal.SIGINT)
                    delivered()
        assert run.status()["state"] == "stopped"
        # a rank that is not the first: its stop would not count, so none is promised (it trained on to the end,
        # then said "stopped by SIGTERM after its last step" and exited 143: torchrun reported a failure)
        capfd.readouterr()
        rank = Run(tmp_path / "r")
        rank.step_reached = 3
        with stopping_on_signals(rank, main=False):
            os.kill(os.getpid(), signal.SIGTERM)
            delivered()
            assert rank.signalled is None and not rank.stop_requested()
            assert "not the run's first (rank 0), which alone stops the run: it stops at its next step if that one " \
                "was signalled too" in capfd.readouterr().err
            with pytest.raises(KeyboardInterrupt, match="^SIGTERM a second time"):
                os.kill(os.getpid(), signal.SIGTERM)
                delivered()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is term
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(os.name != "posix", reason="a signal sent to this very process")
@pytest.mark.parametrize("kind", ["pretrain", "finetune"])
def test_a_signal_before_the_first_step_ends_at_once_and_leaves_the_run_stopped(kind, tmp_path):
    """While a run reads its data or builds its model nothing is trained that a save would keep: the first
    signal ends it at once (a container's stop would not wait for a large corpus to be tokenised), the run
    "stopped", not "failed" (``marks_failure`` inside leaves it so), with how to go on: a pre-training resumes
    from step 0 with its settings. One rank of several (``main=False``) writes nothing."""
    from bert_explorer.runs.signals import StoppedBySignal
    from bert_explorer.train.engine import marks_failure

    run = Run(tmp_path / "r").create({}, kind)
    run.write_status(state="running", pid=os.getpid())
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(StoppedBySignal) as stopped:
            with stopping_on_signals(run), marks_failure(run):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(200):  # (reading the data)
                    time.sleep(0.005)
        go_on = (f"start it from step 0 with its settings with `bert-explorer pretrain --output {run.path} --resume`"
                 if kind == "pretrain" else "start it again with the same command")
        sentence = f"stopped by SIGTERM before its first step, nothing trained to save; {go_on}"
        assert str(stopped.value) == sentence and stopped.value.exit_code == 128 + signal.SIGTERM
        if kind == "finetune":  # the same command's folder check takes it (it said "a new --output")
            from bert_explorer.train.finetune import check_folder
            check_folder(run.path)
        status = run.status()
        assert status["state"] == "stopped" and "error" not in status and "finished" in status
        assert (run.path / "log.txt").read_text().splitlines()[-1].endswith(sentence)

        other = Run(tmp_path / "rank1")
        with pytest.raises(StoppedBySignal):
            with stopping_on_signals(other, main=False):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(200):
                    time.sleep(0.005)
        assert not other.path.exists()
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(os.name != "posix", reason="a signal sent to this very process")
@pytest.mark.parametrize("kind", ["pretrain", "finetune"])
def test_a_signal_just_after_the_run_is_written_leaves_it_stopped_not_crashed(kind, tmp_path, monkeypatch,
                                                                              base_model):
    """The run's status names its process from the moment it is written; the handlers came only after the corpus
    was hashed (or a cut-off write cleared): a Ctrl-C then took the process's own way out, and the run read
    "crashed" (seen in a Ctrl-C test on a busy machine). Here the signal is sent from inside that moment."""
    from bert_explorer.runs.signals import StoppedBySignal
    from bert_explorer.train import pretrain
    from bert_explorer.train.finetune import run_finetuning
    from bert_explorer.train.finetune_config import FinetuneConfig

    class OwnWayOut(Exception):
        pass

    def own(signum, frame):  # the process's handler before the run's: what a signal outside a run does
        raise OwnWayOut

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200):
            time.sleep(0.005)
        return None if kind == "pretrain" else []

    out = tmp_path / "run"
    if kind == "pretrain":
        monkeypatch.setattr(pretrain, "user_text_digest", signalled)
        start = lambda: run_pretraining(PretrainConfig(corpus="tiny", size="tiny", vocab="train", vocab_size=300,  # noqa: E731
                                                       batch_size=4, max_seq_length=32, device="cpu", max_steps=2),
                                        out, progress=False)
    else:
        monkeypatch.setattr(Run, "clear_leftovers", signalled)
        start = lambda: run_finetuning(FinetuneConfig(model=base_model, train="tiny:classification",  # noqa: E731
                                                      task="classification", epochs=1, device="cpu"), out)
    before = signal.signal(signal.SIGTERM, own)
    try:
        with pytest.raises(StoppedBySignal, match="before its first step"):
            start()
    finally:
        signal.signal(signal.SIGTERM, before)
    status = Run(out).status()
    assert status["state"] == "stopped" and "error" not in status


def test_a_run_that_ends_closes_its_tensorboard_writer_and_its_thread(tmp_path):
    """Each run's TensorBoard writer kept a thread for the life of the process: an ablation (a run per cell
    and per pre-training) left 20 threads after 20 runs. A run's writer ends with the run."""
    pytest.importorskip("torch.utils.tensorboard")

    def writers() -> int:  # (threads of this test's kind: an earlier test's background run is reaped by another)
        return sum(1 for t in threading.enumerate() if not t.name.startswith("reap-"))
    before = writers()
    for i in range(5):
        run = Run(tmp_path / f"r{i}").create({}, "finetune")
        run.log_metrics({"step": 1, "split": "train", "loss": 1.0})
        assert writers() > before  # its writer's thread, while it runs
        run.write_status(state="finished")
    assert writers() == before
    assert all(list((tmp_path / f"r{i}" / "tensorboard").glob("events.out.tfevents.*")) for i in range(5))


def test_a_resume_drops_the_tensorboard_events_of_the_steps_it_trains_again(tmp_path):
    """metrics.jsonl set aside the steps a resume trained again; the TensorBoard events kept both copies (the
    killed process's 650-930 and the resumed one's 910-1500)."""
    pytest.importorskip("torch.utils.tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = Run(tmp_path / "r").create({}, "pretrain")
    for step in range(1, 6):
        first.log_metrics({"step": step, "split": "train", "loss": 10.0 - step})
    first.write_status(state="crashed")  # (the writer ends with the run)
    again = Run(tmp_path / "r")
    assert again.set_aside_metrics_after(3) == 2
    for step in (4, 5, 6):
        again.log_metrics({"step": step, "split": "train", "loss": 1.0})
    again.write_status(state="finished")
    events = EventAccumulator(str(tmp_path / "r" / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("train/loss")
    assert [e.step for e in scalars] == [1, 2, 3, 4, 5, 6]
    assert [e.value for e in scalars][3:] == [1.0, 1.0, 1.0]  # the resumed run's, not the first's


def _files(folder: Path) -> dict:
    """Every file's bytes, but the writer's empty lock a refused command may leave in a run's folder."""
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".writer.lock"}


def test_a_persons_files_of_a_runs_names_and_a_run_of_another_kind_are_never_written_over(tmp_path, base_model,
                                                                                          capsys):
    """A folder holding a person's own status.json passed for a run, and pre-training then wrote over their
    config.json, log.txt and status.json; a pre-training given a fine-tuning's folder wrote over that run (its
    history gone, "no fine-tuning run to resume"); --output naming a file was a traceback. Each is one
    sentence now, before anything is written."""
    from bert_explorer import cli

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": 1}')
    (mine / "log.txt").write_text("my notes\n")
    (mine / "status.json").write_text("my status")
    (tmp_path / "metrics-only").mkdir()
    (tmp_path / "metrics-only" / "metrics.json").write_text('{"my": "results"}')
    (tmp_path / "file.txt").write_text("mine")
    tuned = Run(tmp_path / "tuned").create({"model": base_model}, "finetune")
    tuned.write_status(state="finished")
    (tuned.path / "metrics.json").write_text("{}")
    before = _files(tmp_path)
    pretrain = ["pretrain", "--corpus", "tiny", "--size", "tiny", "--max-steps", "2", "--no-progress", "--output"]
    finetune = ["finetune", "--model", base_model, "--train", "tiny:classification", "--output"]
    for argv, said in ((pretrain + [str(mine)], "holds config.json, log.txt, status.json but is not a run's folder"),
                       (finetune + [str(mine)], "is not a run's folder"),
                       (finetune + [str(tmp_path / "metrics-only")], "holds metrics.json but is not a run's folder"),
                       (pretrain + [str(tuned.path)], "holds a fine-tuning run; choose a new folder for this "
                                                      "pre-training"),
                       (["ablate", "--recipe", "smoke", "--output", str(tuned.path)], "holds a fine-tuning run"),
                       (pretrain + [str(tmp_path / "file.txt")], "file.txt is a file, not a folder"),
                       (finetune + [str(tmp_path / "file.txt")], "file.txt is a file, not a folder")):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    assert _files(tmp_path) == before
    assert not Run(mine).is_run() and Run(tuned.path).kind() == "finetune"


def test_a_persons_data_folder_is_not_taken_for_an_upload_stored_before_the_run(tmp_path, base_model, capsys):
    """A folder holding only the person's own data/ (or corpus.txt) passed for one where the app had stored an
    upload: the run wrote beside them, and deleting the run later took their data away. A command checks its
    --output before it stores anything, so such files are refused there; the run's own process, which starts
    after the app stored the upload, still accepts them."""
    from bert_explorer import cli
    from bert_explorer.runs.run import new_run_refusal

    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "train.csv").write_text("text,label\nmy own,1\n")
    corpus = tmp_path / "corpus-only"
    corpus.mkdir()
    (corpus / "corpus.txt").write_text("my own book\n")
    before = _files(tmp_path)
    for argv, said in ((["finetune", "--model", base_model, "--train", "tiny:classification", "--output", str(mine)],
                        "holds data/ but is not a run's folder"),
                       (["pretrain", "--corpus", "tiny", "--size", "tiny", "--max-steps", "2", "--no-progress",
                         "--output", str(corpus)], "holds corpus.txt but is not a run's folder"),
                       (["ablate", "--recipe", "smoke", "--output", str(mine)], "holds data/ but is not a run's")):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    assert _files(tmp_path) == before
    # after the app stored an upload there (data/ or corpus.txt, then the run's start): taken
    assert new_run_refusal(mine, "finetune") is None and new_run_refusal(corpus, "pretrain") is None


def test_a_reused_pid_is_not_taken_for_the_run(tmp_path):
    """A run that died leaves its pid behind; once the kernel gives that pid to another process,
    the run must read "crashed" and Stop must not signal the stranger."""
    before = time.time()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        run = Run(tmp_path / "r").create({}, "pretrain")
        run.write_status(state="running", pid=stranger.pid)
        start = run.status()["pid_created"]
        # it is the moment the process was created (seconds since the epoch): between the moments around
        # Popen, however long a busy machine took to get here (a second's slack for clock corrections)
        assert before - 1 < start < time.time() + 1
        assert start != process_start(os.getpid()) and run.is_active()
        # the same pid, but the process the run recorded started at another moment
        status = json.loads((run.path / "status.json").read_text())
        (run.path / "status.json").write_text(json.dumps({**status, "pid_created": status["pid_created"] - 1}))
        assert run.status()["state"] == "crashed" and not run.is_active()
        kill(run)
        time.sleep(0.2)
        assert stranger.poll() is None  # still running: not ours to stop
    finally:
        stranger.kill()
        stranger.wait()


def test_two_starts_on_one_directory_at_once_launch_one_process(tmp_path):
    """Two tabs pressing Start on the same run folder at the same instant."""
    barrier = threading.Barrier(2)
    outcomes = []

    def press_start():
        barrier.wait()
        try:
            outcomes.append(start_background("pretrain", {**TINY, "max_steps": 2000}, tmp_path / "same"))
        except RuntimeError as e:
            outcomes.append(e)

    threads = [threading.Thread(target=press_start) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(timeout=120)
        runs = [o for o in outcomes if isinstance(o, Run)]
        errors = [o for o in outcomes if isinstance(o, RuntimeError)]
        assert len(runs) == 1 and len(errors) == 1, outcomes
        assert "already" in str(errors[0]) and "choose another directory" in str(errors[0])
        run = runs[0]
        deadline = time.time() + 120
        while time.time() < deadline and run.status().get("step", 0) < 3:
            time.sleep(0.2)
        status = run.status()  # the launcher exec'd into the trainer: same pid, same start time
        assert status["state"] == "running" and status["pid_created"] == process_start(status["pid"])
    finally:
        Run(tmp_path / "same").request_stop()
    assert run.wait(timeout=120)["state"] == "stopped"
    steps = [m["step"] for m in run.metrics() if m["split"] == "train"]
    assert len(steps) >= 3 and steps == list(range(1, len(steps) + 1))  # one trainer wrote them



@pytest.mark.parametrize("kind, said", [(None, None), ("pretrain", None),
                                        ("finetune", "holds a pre-training run; choose a new folder")])
def test_a_start_that_looks_while_another_tab_makes_the_run_is_told_of_that_run(tmp_path, monkeypatch, kind, said):
    """The test above, on a loaded machine: the second start looked at the folder (no run yet), the first then
    wrote its config.json, status.json and log.txt, and the second's listing found them: "holds config.json,
    log.txt, status.json but is not a run's folder", a ValueError that blamed the person for the other tab's run
    instead of the start lock's "already running". Here the other tab starts between the look and the listing."""
    from bert_explorer.runs import run as run_module

    folder = tmp_path / "same"
    folder.mkdir()
    looked, real = [], run_module.foreign_entries

    def the_other_tab_starts_meanwhile(path):
        found = real(path)
        if not looked:
            looked.append(path)
            Run(folder).create({**TINY}, "pretrain", own=False)
            (folder / "log.txt").write_text("")
        return found

    monkeypatch.setattr(run_module, "foreign_entries", the_other_tab_starts_meanwhile)
    refusal = run_module.new_run_refusal(folder, kind)
    assert looked and Run(folder).kind() == "pretrain"  # the other tab's run was made inside the check
    assert refusal == said or (said and refusal.startswith(f"{folder} {said}")), refusal


# ----- the GPU queue -------------------------------------------------------------------------------------
def test_gpu_queue_switch(monkeypatch):
    monkeypatch.delenv("BERT_EXPLORER_GPU_QUEUE", raising=False)
    assert gpu_queue_applies({"device": "cpu"}) is False
    assert gpu_queue_applies({"device": "cpu"}, gpu_queue=True) is True
    monkeypatch.setenv("BERT_EXPLORER_GPU_QUEUE", "1")
    assert gpu_queue_applies({"device": "cpu"}) is True
    monkeypatch.setenv("BERT_EXPLORER_GPU_QUEUE", "0")
    assert gpu_queue_applies({"device": "cuda"}) is False


def test_gpu_queue_runs_one_at_a_time_without_corrupting_each_other(tmp_path):
    root = tmp_path / "q"
    cfg_a, cfg_b = {**TINY, "max_steps": 3, "seed": 1}, {**TINY, "max_steps": 4, "seed": 2}
    a = start_background("pretrain", cfg_a, root / "a", gpu_queue=True)
    b = start_background("pretrain", cfg_b, root / "b", gpu_queue=True)
    c = start_background("pretrain", cfg_a, root / "c", gpu_queue=True)

    # b waits while a holds the GPU
    deadline = time.time() + 60
    while time.time() < deadline and b.status().get("state") != "queued":
        time.sleep(0.1)
    assert b.status()["state"] == "queued" and a.status()["state"] in ("starting", "running")
    # a directory that a live process works in is refused
    with pytest.raises(RuntimeError, match="already"):
        start_background("pretrain", cfg_a, root / "a", gpu_queue=True)
    # a queued run can be stopped before it trains
    c.request_stop()
    assert c.wait(timeout=30)["state"] == "stopped" and not c.checkpoints()

    sa, sb = a.wait(timeout=240), b.wait(timeout=240)
    assert sa["state"] == sb["state"] == "finished", (a.path / "log.txt").read_text()[-1500:]
    assert sb["started"] >= sa["finished"]  # b trained only after a was done
    assert sb["queued_s"] > 0 and "waiting for the GPU" in (b.path / "log.txt").read_text()
    for run, cfg in ((a, cfg_a), (b, cfg_b)):
        assert run.config()["seed"] == cfg["seed"] and run.config()["max_steps"] == cfg["max_steps"]
        lines = (run.path / "metrics.jsonl").read_text().splitlines()
        rows = [json.loads(x) for x in lines]  # every line is whole JSON
        assert [r["step"] for r in rows if r["split"] == "train"] == list(range(1, cfg["max_steps"] + 1))
        assert run.checkpoints()[-1][0] == cfg["max_steps"]
        checkpoint.load(run.checkpoints()[-1][1], "BertForPreTraining")

def test_background_runs_leave_a_core_to_the_app(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert background_env({})["OMP_NUM_THREADS"] == "1"
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert background_env({})["OMP_NUM_THREADS"] == "15"
    assert background_env({"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"  # the user's choice stands

def test_sidebar_lists_run_checkpoints_newest_first_and_skips_odd_folders(tmp_path):
    for step in ("step-5", "step-20", "step-5-copy"):
        d = tmp_path / "runA" / "checkpoints" / step
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
    nested = tmp_path / "abl" / "pretrain" / "k1" / "checkpoints" / "step-3"
    nested.mkdir(parents=True)
    (nested / "config.json").write_text("{}")
    found = [str(Path(c.path).relative_to(tmp_path)) for c in run_checkpoints(tmp_path)]
    assert found == ["abl/pretrain/k1/checkpoints/step-3", "runA/checkpoints/step-20", "runA/checkpoints/step-5"]

def _proc_state(pid):
    """The process's state letter (R, S, Z for a zombie, ...), or None once it has been reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0]
    except OSError:
        return None


def test_a_finished_background_run_leaves_no_zombie_process(tmp_path):
    """The server waits for the runs it started: one that ended is not kept as a zombie child
    until the server stops."""
    run = start_background("pretrain", {**TINY, "size": "no-such-size", "max_steps": 1}, tmp_path / "bad")
    pid = run.status()["pid"]
    assert run.wait(timeout=120)["state"] in ("failed", "crashed")
    deadline = time.time() + 60
    while _proc_state(pid) not in ("Z", None) and time.time() < deadline:
        time.sleep(0.05)  # the process writes "failed", then exits
    deadline = time.time() + 10
    while _proc_state(pid) == "Z" and time.time() < deadline:
        time.sleep(0.05)
    assert _proc_state(pid) is None


def test_a_run_stopped_and_resumed_keeps_its_first_start_and_adds_up_its_parts(tmp_path):
    """A pre-training stopped after 40 s and resumed said "took 9 s", the time of its last part, and the
    Runs table gave the resume as its start. Each part now adds to the run's time, a crash's part up to its
    last sign of life, and the start stays the first."""
    from bert_explorer.runs.report import run_row
    from bert_explorer.runs.run import duration

    run = Run(tmp_path / "r").create({}, "pretrain")
    now = time.time()
    run.write_status(state="running", pid=os.getpid(), started=now - 300)
    run.write_status(state="stopped", finished=now - 260)                      # a first part of 40 s
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    run.write_status(state="running", pid=int(dead), started=now - 200)       # a second part, which crashed
    status = json.loads((run.path / "status.json").read_text())               # its last write: 30 s in
    (run.path / "status.json").write_text(json.dumps({**status, "part_seen": now - 170}))
    assert run.status()["state"] == "crashed"
    run.write_status(state="starting", pid=None)                              # a starter's writes are no part's
    run.write_status(state="running", pid=os.getpid(), started=now - 20)      # resumed 20 s ago
    s = run.status()
    assert s["started"] == now - 300
    assert duration(s) == pytest.approx(40 + 30 + 20, abs=2)
    run.write_status(step=5)  # the same process writes on: still the same part
    assert run.status()["part_started"] == now - 20
    run.write_status(state="finished", finished=now)
    assert duration(run.status()) == pytest.approx(90, abs=0.01)
    assert run_row(run, tmp_path)["duration"] == "1 min 30 s"
    assert run_row(run, tmp_path)["started"] == time.strftime("%Y-%m-%d %H:%M", time.localtime(now - 300))


def test_a_run_the_app_launched_counts_its_process_start_in_its_time(tmp_path):
    """Started from the page at 16:10:12, "starting" for 82 s under load, stopped 45 s into its steps: the page said
    "took 1 min 03 s" where the user had waited 2 min 14 s. A part the app launches counts from its launch; a part
    resumed from a terminal is not given the app's earlier launch."""
    from bert_explorer.runs.run import duration

    run = Run(tmp_path / "r").create({}, "pretrain")
    now = time.time()
    run.write_status(state="starting", pid=None, launched=now - 300)          # the app's launcher
    other = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True).stdout.strip()
    run.write_status(state="running", pid=int(other), started=now - 220)      # its process, 80 s later
    run.write_status(state="stopped", finished=now - 200)
    assert duration(run.status()) == pytest.approx(100, abs=0.01)
    run.write_status(state="running", pid=os.getpid(), started=now - 50)      # resumed from a terminal
    run.write_status(state="stopped", finished=now - 40)
    assert duration(run.status()) == pytest.approx(110, abs=0.01)
    run.write_status(state="starting", pid=None, launched=now - 30)           # resumed from the app
    run.write_status(state="running", pid=int(other), started=now - 20)
    run.write_status(state="finished", finished=now)
    assert duration(run.status()) == pytest.approx(140, abs=0.01)
    # a launch whose process never began its part (it failed to start; or was killed before) is no later part's
    for ended in ({"state": "failed", "pid": None}, {}):
        again = Run(tmp_path / f"again{len(ended)}").create({}, "pretrain")
        again.write_status(state="running", pid=int(other), started=now - 100_000)
        again.write_status(state="stopped", finished=now - 99_900)
        again.write_status(state="starting", pid=None, launched=now - 90_000)
        if ended:
            again.write_status(**ended)
        again.write_status(state="running", pid=os.getpid(), started=now - 50)  # from a terminal
        again.write_status(state="finished", finished=now)
        assert duration(again.status()) == pytest.approx(150, abs=0.01)


def test_the_runs_key_metrics_put_squads_percentages_on_the_scale_of_the_other_tasks():
    """SQuAD's F1 and exact match are percentages (its official script's scores), NER's F1 a fraction: one
    "dev F1" column of the Runs page held 25 beside 0.4."""
    from bert_explorer.runs.report import key_metrics
    from bert_explorer.tasks.squad import squad_scores

    golds = {"q1": ["the red fox"], "q2": ["paris"], "q3": ["blue"], "q4": ["a black cat"]}
    scores = squad_scores({"q1": "the red fox", "q2": "london", "q3": "", "q4": "cat"}, golds)
    assert scores["exact_match"] == 25.0  # the official script's scale
    qa = key_metrics({"dev": {"f1": scores["f1"], "exact_match": scores["exact_match"]}})
    assert qa["dev exact match"] == 0.25 and qa["dev F1"] == scores["f1"] / 100 < 1
    assert key_metrics({"dev": {"f1": 0.4, "precision": 0.5}}) == {"dev F1": 0.4}


def test_what_a_stopped_run_of_several_processes_is_told_names_torchrun(tmp_path):
    """Each rank of a torchrun run stopped by SIGTERM said to go on with `bert-explorer pretrain --output ...
    --resume`: one process, which its resume now refuses. The sentence names torchrun and the count."""
    from bert_explorer.runs.signals import what_to_do

    run = Run(tmp_path / "ddp").create({"size": "tiny"}, "pretrain")
    step = run.path / "checkpoints" / "step-4"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"")
    (step / "training_state.pt").write_bytes(b"")
    run.write_status(state="stopped", world_size=2)
    assert what_to_do(run) == (f"continue with `torchrun --nproc_per_node 2 -m bert_explorer.cli pretrain --output "
                               f"{run.path} --resume`")
    run.write_status(state="stopped", world_size=1)
    assert what_to_do(run) == f"continue with `bert-explorer pretrain --output {run.path} --resume`"


def test_a_metrics_line_cut_by_a_kill_does_not_swallow_the_next_record(tmp_path):
    """kill -9 mid-write left `{"step": 105, "split": "tr` at the end of metrics.jsonl; the resumed run appended
    its step 105 to that line and Run.metrics() skipped both. The cut line is ended first."""
    run = Run(tmp_path / "r").create({"size": "tiny"}, "pretrain")
    run.log_metrics({"step": 100, "split": "train", "loss": 7.0})
    with (run.path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 105, "split": "tr')
    resumed = Run(run.path)
    resumed.log_metrics({"step": 105, "split": "train", "loss": 6.9})
    resumed.log_metrics({"step": 110, "split": "train", "loss": 6.8})
    assert [m["step"] for m in Run(run.path).metrics()] == [100, 105, 110]


def test_metrics_lines_that_are_no_records_are_skipped_and_a_huge_file_is_read_thinned(tmp_path, monkeypatch):
    """Bytes that are not UTF-8, or a JSON value that is not an object, made the Runs page a traceback; a 100 MB
    metrics.jsonl took 880 MB and 2 s at every redraw."""
    from bert_explorer.runs import run as run_module

    run = Run(tmp_path / "r").create({"size": "tiny"}, "pretrain")
    run.log_metrics({"step": 1, "split": "train", "loss": 7.0})
    with (run.path / "metrics.jsonl").open("ab") as f:
        f.write(b'\xff\xfe garbage\n[1, 2, 3]\n"text"\n')
    run.log_metrics({"step": 2, "split": "train", "loss": 6.9})
    assert [m["step"] for m in Run(run.path).metrics()] == [1, 2]
    assert Run(run.path).set_aside_metrics_after(1) == 1  # (a resume read the file as UTF-8 and stopped there)
    assert [m["step"] for m in Run(run.path).metrics()] == [1]
    assert b"\xff\xfe garbage" in (run.path / "metrics.jsonl").read_bytes()  # kept where it was

    big = Run(tmp_path / "big").create({"size": "tiny"}, "pretrain")
    for step in range(1, 101):
        big.log_metrics({"step": step, "split": "train", "loss": 7.0})
        if step % 25 == 0:
            big.log_metrics({"step": step, "split": "eval", "mlm_accuracy": 0.1})
    everything = Run(big.path).metrics()
    monkeypatch.setattr(run_module, "METRICS_READ_BYTES", (big.path / "metrics.jsonl").stat().st_size // 10)
    thinned = Run(big.path).metrics()
    steps = [m["step"] for m in thinned if m["split"] == "train"]
    assert len(steps) <= 12 and steps[0] == 1 and steps[-1] == 100  # the first and the last training line kept
    assert [m for m in thinned if m["split"] == "eval"] == [m for m in everything if m["split"] == "eval"]
    assert [m["step"] for m in thinned] == sorted(m["step"] for m in thinned)  # in order


@pytest.mark.parametrize("damaged", [b'{"state": "runn', b"[1, 2]", b"\xff\xfe"])
def test_a_damaged_status_is_said_as_such_and_written_anew(tmp_path, damaged):
    """A cut or edited status.json read "unknown" in the runs table with no word of why, and a list there made every
    write of the run's status an AttributeError."""
    from bert_explorer.runs.report import run_row

    run = Run(tmp_path / "r").create({"size": "tiny"}, "pretrain")
    (run.path / "status.json").write_bytes(damaged)
    assert run.status()["error"].startswith("its status.json cannot be read")
    assert run_row(run, tmp_path)["state"] == "unknown (status.json unreadable)"
    run.write_status(state="stopped", step=3)
    assert run.status()["state"] == "stopped" and "error" not in run.status()
    assert "error" not in Run(tmp_path / "none").status()  # no status at all is no damage


@pytest.mark.parametrize("edited", [{"pid": "123"}, {"pid": 1e30}, {"pid": True}, {"pid": 1, "pid_created": "x"}])
def test_a_status_with_a_pid_that_is_no_pid_lists_the_runs(tmp_path, edited, capsys, monkeypatch):
    """A status.json edited to "pid": "123" (or 1e30, or a creation time "x") made `bert-explorer runs` and every
    page that lists runs a TypeError; such a pid names no process of this run."""
    from bert_explorer.cli import main

    run = Run(tmp_path / "r").create({"size": "tiny"}, "pretrain")
    (run.path / "status.json").write_text(json.dumps({"state": "running", **edited}))
    run.status()
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(tmp_path))
    assert main(["runs"]) == 0 and "r " in capsys.readouterr().out


def test_a_new_run_inside_another_runs_folder_is_refused(tmp_path):
    """--output runs/a/set_aside made a run inside one of run a's own folders, which the Runs page listed as
    "a/set_aside". A run beside them (a warm start into runs/a/warm), and an ablation's cells, stay allowed."""
    from bert_explorer.runs.run import new_run_refusal

    run = Run(tmp_path / "a").create({"size": "tiny"}, "pretrain")
    said = new_run_refusal(run.path / "set_aside", "pretrain")
    assert said == (f"{run.path / 'set_aside'} lies inside set_aside/ of the run {run.path}, a folder the run writes "
                    "itself; choose a folder outside it")
    assert new_run_refusal(run.path / "checkpoints" / "mine", "pretrain").startswith(f"{run.path / 'checkpoints'}")
    assert new_run_refusal(run.path / "warm", "pretrain") is None  # a run beside the run's own folders, as before
    ablation = Run(tmp_path / "abl").create({"recipe": {}}, "ablate")
    assert new_run_refusal(ablation.path / "cells" / "one", "finetune") is None


def test_a_run_name_with_accents_keeps_its_letters():
    """The page's run name "Ünïcode" became the folder "n-code"."""
    from bert_explorer.data.uploads.names import slug

    assert slug("Ünïcode") == "Unicode" and slug("café au lait") == "cafe-au-lait" and slug("日本") == "run"


def test_resuming_a_pretraining_as_a_fine_tuning_says_which_it_is(tmp_path):
    """`finetune --output <a pre-training> --resume` advised to leave out --resume, a start then refused too."""
    from bert_explorer.train.finetune import FinetuneConfig
    from bert_explorer.train.finetune_resume import resume_settings

    run = Run(tmp_path / "pt").create({"size": "tiny"}, "pretrain")
    with pytest.raises(ValueError) as e:
        resume_settings(run.path, {}, FinetuneConfig)
    assert str(e.value) == (f"{run.path} holds a pre-training run, not a fine-tuning; resume it with `bert-explorer "
                            f"pretrain --output {run.path} --resume`, or give this fine-tuning a new --output")


def test_a_run_whose_command_died_before_its_first_step_is_crashed_not_queued_for_ever(tmp_path):
    """A pre-training killed while it read its data left status "queued" with no pid: listed as queued for ever, and
    the Runs page said another run was using the GPU on a machine without one."""
    import subprocess
    import sys

    folder = tmp_path / "k1"
    subprocess.run([sys.executable, "-c", "import sys; from bert_explorer.runs.run import Run; "
                    "Run(sys.argv[1]).create({}, 'pretrain')", str(folder)], check=True)
    status = Run(folder).status()
    assert status["state"] == "crashed" and not Run(folder).is_active()
    assert Run(tmp_path / "mine").create({}, "pretrain").status()["state"] == "starting"  # while its process lives
    # a starter that launches the run's process names none (the app's own pid, alive while the app lives, read as
    # the run's where a write after it failed)
    started = Run(tmp_path / "launched").create({}, "pretrain", own=False)
    assert started.status().get("pid") is None and started.is_active()  # (for the launch's grace)


def test_a_torchrun_process_that_lost_another_says_so_and_how_the_run_goes_on(tmp_path, monkeypatch):
    """Rank 1 of a 2-process pre-training was killed: rank 0's status and log held gloo's text word for word
    ("Read error ... Connection reset by peer ... GLHF"), with no sentence on how the run goes on."""
    import torch.distributed as dist

    from bert_explorer.train import engine

    run = Run(tmp_path / "ddp2").create({}, "pretrain")
    run.write_status(state="running", world_size=2, step=29)
    ckpt = run.path / "checkpoints" / "step-20"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"")
    (ckpt / "training_state.pt").write_bytes(b"")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:41820: "
                        "Connection reset by peer\nException raised from ... GLHF!")
    with pytest.raises(RuntimeError):
        with engine.marks_failure(run):
            raise gloo
    error = run.status()["error"]
    assert error.startswith("another process of this 2-process run stopped answering ([../third_party/gloo")
    assert "continue with `torchrun --nproc_per_node 2 -m bert_explorer.cli pretrain --output" in error
    assert "\n" not in error
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)  # one process: its own error, as it was
    with pytest.raises(RuntimeError):
        with engine.marks_failure(run):
            raise RuntimeError("out of memory")
    assert run.status()["error"] == "out of memory"
