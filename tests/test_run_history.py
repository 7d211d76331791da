"""Runs that lose nothing: a resume never trains over a run's history, a delete removes only what
a run wrote, a full disk is found before training, and a hand-edited training_args.json is one
sentence that names the file."""
import errno
import re

import pytest

from bert_explorer import atomic, full_disk
from bert_explorer.cli import main
from bert_explorer.runs.background import delete, start_background
from bert_explorer.runs.run import Run
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.train.resume import resume_settings

TINY = dict(corpus="tiny", size="tiny", vocab_size=300, batch_size=4, max_seq_length=48, log_every=1,
            eval_every=1000, eval_batches=2, seed=3, device="cpu", precision="fp32")


def _files(d):
    """Every file under ``d`` with its bytes (the lock files only serialise writers)."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


def _train_losses(run_dir):
    return [(m["step"], m["loss"]) for m in Run(run_dir).metrics() if m["split"] == "train"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_vocab):
    """A finished pre-training of 6 steps with a checkpoint every 2: step-2, step-4, step-6."""
    out = tmp_path_factory.mktemp("history") / "run"
    run_pretraining(PretrainConfig(**TINY, vocab=tiny_vocab, max_steps=6, save_every=2), out, progress=False)
    return out


@pytest.fixture
def run_copy(finished, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def test_the_newest_two_checkpoints_keep_their_training_state(finished):
    states = {p.name: (p / "training_state.pt").exists() for _, p in Run(finished).checkpoints()}
    assert states == {"step-2": False, "step-4": True, "step-6": True}


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_lost_newest_state_resumes_from_the_one_before_and_sets_the_newest_aside(run_copy, damage, capsys):
    newest = run_copy / "checkpoints" / "step-6"
    state = newest / "training_state.pt"
    if damage == "deleted":
        state.unlink()
    else:
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    kept = _files(newest)
    first_losses = dict(_train_losses(run_copy))

    assert main(["pretrain", "--output", str(run_copy), "--resume", "--no-progress"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    # the damaged checkpoint is kept whole, out of the way of the one trained again
    assert _files(run_copy / "set_aside" / "step-6") == kept
    assert sorted(p.name for _, p in Run(run_copy).checkpoints()) == ["step-2", "step-4", "step-6"]
    assert (run_copy / "checkpoints" / "step-6" / "training_state.pt").exists()
    # steps 5 and 6 were trained again from step 4's state: the same losses as the first time
    again = _train_losses(run_copy)[-2:]
    assert [s for s, _ in again] == [5, 6]
    for step, loss in again:
        assert loss == pytest.approx(first_losses[step], abs=1e-6)
    log = (run_copy / "log.txt").read_text()
    why = "keeps no training_state.pt" if damage == "deleted" else "training_state.pt cannot be read"
    assert re.search(rf"step-6(\S*) {why}.*moved to set_aside/ and the run resumes from step 4, so steps 5-6 are "
                     r"trained again", log), log
    assert Run(run_copy).status()["state"] == "finished"


def test_a_run_no_checkpoint_can_resume_from_is_refused_in_one_sentence_and_untouched(run_copy, capsys):
    for name in ("step-4", "step-6"):  # as a run of an earlier version: only the newest kept a state, now lost
        (run_copy / "checkpoints" / name / "training_state.pt").unlink()
    before = _files(run_copy)
    assert main(["pretrain", "--output", str(run_copy), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "none of its checkpoints can be resumed from" in err
    assert "training again from step 0 would write over them" in err
    assert str(run_copy / "checkpoints" / "step-6") in err  # where its last weights are
    assert _files(run_copy) == before


def test_a_run_whose_checkpoints_lost_their_vocabulary_is_refused_untouched(run_copy, capsys):
    """Resumed with every checkpoint's vocabulary gone, a finished run had its max_steps rewritten, a "resuming"
    line logged and its state set to failed before the vocabulary was missed; the refusal then named step-6 for a
    new run's --init, whose weights were the damaged ones."""
    step4 = run_copy / "checkpoints" / "step-4"
    vocab = (step4 / "vocab.txt").read_text()
    for _, ckpt in Run(run_copy).checkpoints():
        (ckpt / "vocab.txt").unlink()
        (ckpt / "tokenizer.json").unlink(missing_ok=True)
    before = _files(run_copy)
    assert main(["pretrain", "--output", str(run_copy), "--resume", "--max-steps", "9", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "step-6's vocabulary cannot be read" in err, err
    assert "no checkpoint's weights and vocabulary read either" in err
    assert _files(run_copy) == before  # its settings, status and log as they were
    # the newest weights that read are named for a new run, not the newest folder
    (step4 / "vocab.txt").write_text(vocab)
    (run_copy / "checkpoints" / "step-4" / "training_state.pt").unlink()
    assert main(["pretrain", "--output", str(run_copy), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"init {step4})" in err, err


def test_leftovers_of_a_killed_save_go_at_the_next_start(run_copy):
    half = run_copy / "checkpoints" / ".step-8.tmp-k1llxd"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\0" * 4096)
    stray = run_copy / ".status.json.4242-17.tmp.json"
    stray.write_text("{")
    assert sorted(p.name for p in atomic.leftovers(run_copy / "checkpoints")) == [".step-8.tmp-k1llxd"]
    cfg, _ = resume_settings(run_copy, {"max_steps": 7})
    run_pretraining(cfg, run_copy, resume=True, progress=False)
    assert not half.exists() and not stray.exists()
    assert "removed checkpoints/.step-8.tmp-k1llxd, left by a write that was cut off" in (run_copy / "log.txt").read_text()


def test_resume_on_a_disk_still_too_full_refuses_before_training(run_copy, monkeypatch, capsys):
    newest = run_copy / "checkpoints" / "step-6"
    size = sum(f.stat().st_size for f in newest.rglob("*") if f.is_file())
    # a little more than one checkpoint's bytes is free: enough on paper, not with blocks and metadata
    monkeypatch.setattr(full_disk, "free_bytes", lambda folder: int(size * 1.05))
    lines = len(Run(run_copy).metrics())
    assert main(["pretrain", "--output", str(run_copy), "--resume", "--max-steps", "9", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    (err,) = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert re.search(rf"no space left in {re.escape(str(run_copy))} to save the checkpoint of step 8 \([\d.]+ [kM]B "
                     rf"free, about [\d.]+ [kM]B needed: the [\d.]+ [kM]B of step-6 and a quarter more\)", err), err
    assert len(Run(run_copy).metrics()) == lines  # no step was trained only to fail at its save
    assert Run(run_copy).status()["state"] == "failed"
    monkeypatch.undo()  # room again: the resume goes on from step 6
    assert main(["pretrain", "--output", str(run_copy), "--resume", "--max-steps", "9", "--no-progress"]) == 0
    assert [s for s, _ in _train_losses(run_copy)][-3:] == [7, 8, 9]


# ----- hand-edited settings ----------------------------------------------------------------------------
@pytest.mark.parametrize("edit, message", [
    (lambda text: text[:-3], r"is not valid JSON \(Expecting"),
    (lambda text: text.replace('"batch_size": 4', '"batch_size": -8'),
     r"holds settings that training cannot use: batch_size must be a whole number of at least 1, not -8"),
    (lambda text: text.replace('"max_seq_length": 48', '"max_seq_length": 100000'),
     r"holds settings that training cannot use: max_seq_length 100000 is longer than the 512 positions that size "
     r"tiny has learned; choose 512 or less"),
])
def test_a_hand_edited_training_args_file_is_named_in_one_sentence(run_copy, capsys, edit, message):
    args = run_copy / "checkpoints" / "step-6" / "training_args.json"
    args.write_text(edit(args.read_text()))
    before = _files(run_copy)
    assert main(["pretrain", "--output", str(run_copy), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert re.fullmatch(rf"bert-explorer: error: {re.escape(str(args))} {message}.*", err), err
    assert _files(run_copy) == before
    with pytest.raises(ValueError, match=re.escape(str(args))):  # the Pre-train page's Resume asks the same
        resume_settings(run_copy, {"max_steps": 9})


def test_a_sequence_longer_than_the_models_positions_is_refused(tmp_path, minilm_dir):
    with pytest.raises(ValueError, match="max_seq_length 100000 is longer than the 512 positions that size mini"):
        PretrainConfig(corpus="tiny", size="mini", max_seq_length=100000)
    with pytest.raises(ValueError, match="batch_size must be a whole number of at least 1, not 0"):
        PretrainConfig(corpus="tiny", batch_size=0)
    with pytest.raises(ValueError, match=r"max_seq_length 1024 is longer than the 512 positions that the model "):
        run_pretraining(PretrainConfig(corpus="tiny", init=str(minilm_dir), max_seq_length=1024, max_steps=1),
                        tmp_path / "warm", progress=False)
    assert not (tmp_path / "warm").exists()  # refused before anything was written


# ----- the app's own folders, and what a delete removes ----------------------------------------------------
def _uploaded_checkpoints(runs_root):
    uploads = runs_root / "uploaded-models"
    for name in ("my-bert", "class-model"):
        (uploads / name).mkdir(parents=True)
        (uploads / name / "config.json").write_text("{}")
        (uploads / name / "model.safetensors").write_bytes(b"\0" * 1000)
    return uploads


def test_a_run_cannot_be_made_in_the_apps_upload_folder(runs_root, capsys):
    uploads = _uploaded_checkpoints(runs_root)
    before = _files(uploads)
    for target in (uploads, uploads / "my-bert", runs_root / "uploaded-models-empty" / ".." / "uploaded-models"):
        with pytest.raises(ValueError, match="is where the app keeps uploaded checkpoints, not a run"):
            start_background("pretrain", {**TINY, "max_steps": 1}, target)
    assert main(["pretrain", "--output", str(uploads), *"--corpus tiny --size tiny --max-steps 1".split()]) == 2
    assert "where the app keeps uploaded checkpoints" in capsys.readouterr().err
    assert _files(uploads) == before and not (uploads / "status.json").exists()


def test_a_new_run_refuses_a_folder_holding_someone_elses_files(tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("months of work")
    with pytest.raises(ValueError, match=r"already holds files that no run writes \(thesis.tex\)"):
        run_pretraining(PretrainConfig(**TINY, max_steps=1), mine, progress=False)
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]


def test_delete_removes_what_the_run_wrote_and_refuses_a_folder_holding_more(finished, tmp_path, runs_root):
    import shutil

    # the red team's case: a run that was started inside the uploads folder (before it was refused)
    uploads = _uploaded_checkpoints(runs_root)
    for p in finished.iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, uploads / p.name)
    with pytest.raises(ValueError, match=r"also holds files that no run writes \(class-model/, my-bert/\), so it is "
                                         r"not deleted"):
        delete(Run(uploads))
    assert (uploads / "my-bert" / "model.safetensors").exists() and (uploads / "checkpoints" / "step-6").exists()

    # a symbolic link inside a run is not the run's: refused, and what it points at is left alone
    run = tmp_path / "linked"
    shutil.copytree(finished, run)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.csv").write_text("a,b\n")
    (run / "checkpoints" / "step-9").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match=r"checkpoints/step-9"):
        delete(Run(run))
    (run / "checkpoints" / "step-9").unlink()

    delete(Run(run))  # only what the run wrote: it goes whole
    assert not run.exists() and (outside / "data.csv").read_text() == "a,b\n"


def test_the_runs_page_says_why_a_folder_holding_more_is_not_deleted(runs_root, finished):
    import shutil

    from streamlit.testing.v1 import AppTest

    uploads = _uploaded_checkpoints(runs_root)
    for p in finished.iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, uploads / p.name)
    at = AppTest.from_file("../pages/13_Runs.py", default_timeout=120).run()
    at.selectbox(key="runs_delete_sel_0_").set_value("uploaded-models").run()
    assert not at.exception
    assert any("also holds files that no run writes (class-model/, my-bert/)" in w.value for w in at.warning)
    assert not [c for c in at.checkbox if c.key.startswith("runs_delete_confirm")]
    assert not [b for b in at.button if b.key == "runs_delete"]
    assert (uploads / "my-bert" / "config.json").exists()


# ----- a full disk at the start, a failed run's step, the model zip -----------------------------------------
def test_starting_a_run_on_a_full_disk_is_one_sentence_and_leaves_no_folder(tmp_path, monkeypatch, capsys):
    real = atomic.write_text

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "write_text", full)
    out = tmp_path / "new-run"
    with pytest.raises(full_disk.DiskFull, match=rf"no space left in {re.escape(str(tmp_path))} to start the run "
                                                 r"new-run \(.* free\); free some space, then start it again"):
        start_background("pretrain", {**TINY, "max_steps": 1}, out)
    assert not out.exists()
    args = ["pretrain", "--output", str(out), "--background", *"--corpus tiny --size tiny --max-steps 1".split()]
    assert main(args) == 1
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("estimate: ")]
    assert len(err) == 1 and "Traceback" not in err[0] and "no space left" in err[0]  # (after the time said)
    assert not out.exists()
    monkeypatch.setattr(atomic, "write_text", real)


def test_a_failed_run_says_the_step_it_reached(tmp_path):
    def crash(step, _):
        if step == 8:
            raise RuntimeError("simulated failure at step 8")

    out = tmp_path / "failing"
    with pytest.raises(RuntimeError):
        run_pretraining(PretrainConfig(**{**TINY, "log_every": 10}, max_steps=60, save_every=100), out,
                        progress=False, on_step=crash)
    status = Run(out).status()
    assert status["state"] == "failed" and status["step"] == 8 and status["max_steps"] == 60


def test_the_model_zip_holds_the_runs_own_files_and_follows_no_link(tmp_path):
    import io
    import zipfile

    from bert_explorer.app.runs_view import zip_dir

    model = tmp_path / "run" / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "vocab.txt").write_text("[PAD]\n")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("password")
    (tmp_path / "host-folder").mkdir()
    (tmp_path / "host-folder" / "id_rsa").write_text("key")
    (model / "link.txt").symlink_to(secret)
    (model / "linked-folder").symlink_to(tmp_path / "host-folder", target_is_directory=True)
    names = zipfile.ZipFile(io.BytesIO(zip_dir(model, "m"))).namelist()
    assert sorted(names) == ["m/config.json", "m/sub/vocab.txt"]
