"""A practitioner's first hour: what using the app and the CLI for real found (a Pre-train page that
read the working folder, a large upload that could not be stopped, ablation verdicts drawn from noise,
a seed that did not fix the run)."""
import pytest
from streamlit.testing.v1 import AppTest

from bert_explorer.data import corpora


@pytest.fixture
def reading_forbidden(monkeypatch):
    """Fails the test if anything loads a corpus other than a built-in one (the page reads no file here)."""
    from bert_explorer.data import corpus_upload
    from bert_explorer.train import pretraining_data

    real = corpora.load_corpus

    def load(name, *args, **kwargs):
        if str(name) not in corpora.BUILTIN_CORPORA:
            raise AssertionError(f"{name!r} was read as a corpus")
        return real(name, *args, **kwargs)

    # every module that bound the name at import, imported before patching (one imported while patched
    # would keep the patch after the test)
    for module in (corpora, pretraining_data, corpus_upload):
        monkeypatch.setattr(module, "load_corpus", load)


@pytest.mark.parametrize("how", ["upload chosen, no file yet", "every built-in corpus removed"])
def test_the_pretrain_page_never_reads_the_working_folder(runs_root, reading_forbidden, how):
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    if how.startswith("upload"):
        at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    else:
        at.multiselect(key="pt_corpus").set_value([]).run()
    assert not at.exception and not at.error
    assert at.button(key="pt_start").disabled
    # the rest of the page is there: the run watcher and the time-lapse
    assert {"2. Watch a run", "3. Time-lapse: one sentence through training"} <= {h.value for h in at.subheader}


def test_an_empty_corpus_name_is_refused_by_the_library():
    from bert_explorer.train.pretrain_config import PretrainConfig

    with pytest.raises(ValueError, match="no corpus given"):
        corpora.load_corpus("")
    with pytest.raises(ValueError, match="names no corpus"):
        PretrainConfig(corpus="")
    with pytest.raises(ValueError, match="an empty part between two"):
        PretrainConfig(corpus="bbc++wiki")


# ----- the held-out evaluation of a stopped step; the CPU threads of a busy machine -----------------------
TINY = dict(corpus="tiny", size="tiny", vocab_size=300, batch_size=4, max_seq_length=48, log_every=1,
            eval_every=1000, eval_batches=2, seed=3, device="cpu", precision="fp32")


def test_a_stopped_runs_last_evaluation_is_in_its_curve(tmp_path, tiny_vocab):
    from bert_explorer.runs.run import Run
    from bert_explorer.train.pretrain import run_pretraining
    from bert_explorer.train.pretrain_config import PretrainConfig
    from bert_explorer.train.resume import resume_settings

    out = tmp_path / "run"

    def stop_at_3(step, _):
        if step == 3:
            Run(out).request_stop()

    cfg = PretrainConfig(**TINY, vocab=tiny_vocab, max_steps=6, save_every=100)
    assert run_pretraining(cfg, out, progress=False, on_step=stop_at_3)["state"] == "stopped"
    run_pretraining(resume_settings(out)[0], out, resume=True, progress=False)
    evals = [m for m in Run(out).metrics() if m["split"] == "eval"]
    assert [m["step"] for m in evals] == [3, 6]
    stopped = Run(out).checkpoints()[0][1]
    import json

    kept = json.loads((stopped / "eval_metrics.json").read_text())  # the curve's point is the checkpoint's
    assert evals[0]["mlm_accuracy"] == kept["mlm_accuracy"] and evals[0]["nsp_accuracy"] == kept["nsp_accuracy"]


@pytest.mark.parametrize("load, expected", [(1.6, 1), (0.2, 2), (5.0, 1)])
def test_the_cli_trains_with_the_cores_that_are_free(tmp_path, monkeypatch, load, expected):
    import os

    import torch

    from bert_explorer.cli import main
    from bert_explorer.train import pretrain

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    seen = []
    real = pretrain._pretrain
    monkeypatch.setattr(pretrain, "_pretrain", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    before = torch.get_num_threads()
    out = tmp_path / "run"
    assert main(["pretrain", "--output", str(out), *"--corpus tiny --size tiny --vocab-size 300 --batch-size 4 "
                 "--max-seq-length 48 --max-steps 1 --eval-batches 1 --device cpu --no-progress".split()]) == 0
    assert seen == [expected]
    s = "s" if expected != 1 else ""
    assert f"{expected} CPU thread{s} of 2 cores" in (out / "log.txt").read_text()
    assert torch.get_num_threads() == before  # the process's own count is put back


# ----- a large upload fine-tuned with one click ---------------------------------------------------------------
def _reviews_csv(n):
    import csv
    import io

    from bert_explorer.data.tiny_tasks import make_tiny

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["review", "sentiment"])
    w.writerows((ex["text"], ex["label"]) for ex in make_tiny("classification", n=n).examples)
    return buf.getvalue().encode()


def test_a_long_fine_tuning_is_estimated_and_asked_for_before_it_starts(runs_root, base_model, monkeypatch):
    from bert_explorer.train import estimate

    at = AppTest.from_file("../pages/11_Fine-tune.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = base_model
    at.session_state["ft_upload_bytes"] = ("reviews.csv", _reviews_csv(400))
    at.run()
    assert not at.exception
    (said,) = [c.value for c in at.caption if c.value.startswith("Estimated time on")]
    # 360 training examples (a tenth is the dev set), batch 32, 3 epochs: 12 steps an epoch
    assert "36 steps of 32 examples" in said and "40 dev examples scored after each epoch" in said
    assert not at.button(key="ft_start").disabled and not [c for c in at.checkbox if c.key.startswith("ft_confirm_long")]

    monkeypatch.setattr(estimate, "LONG_RUN_ASK_S", 0.001)  # as if it would take hours
    at.run()
    assert at.button(key="ft_start").disabled
    (box,) = [c for c in at.checkbox if c.key.startswith("ft_confirm_long")]
    assert box.label.startswith("Yes, fine-tune for about ") and "(36 steps)" in box.label
    box.check().run()
    assert not at.button(key="ft_start").disabled
    assert not list(runs_root.iterdir())  # nothing started by asking


def test_a_set_larger_than_a_run_keeps_is_sampled_and_said(monkeypatch, tmp_path):
    from bert_explorer.train import finetune

    monkeypatch.setattr(finetune, "MAX_TRAIN_EXAMPLES", 100)
    monkeypatch.setattr(finetune, "DEV_EXAMPLES", 20)
    f = tmp_path / "reviews.csv"
    f.write_bytes(_reviews_csv(400))
    train, dev = finetune.read_data(finetune.FinetuneConfig(train=str(f), seed=4))
    assert len(train.examples) == 100 and len(dev.examples) == 20
    assert "360 training examples: 100 of them are used, sampled with seed 4 (the most one run keeps in memory)" \
        in train.notes
    assert any(n.startswith("40 dev examples: 20 of them are used") for n in dev.notes)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="max_train_examples must be a whole number from 1 to 200,000"):
        finetune.FinetuneConfig(max_train_examples=1_666_770)


def test_a_stop_during_an_evaluation_ends_it_and_keeps_a_measured_model(tmp_path):
    import torch

    from bert_explorer.runs.run import Run
    from bert_explorer.tasks.base import Interrupted
    from bert_explorer.train.engine import fit

    run = Run(tmp_path / "r").create({}, "finetune")
    model = torch.nn.Linear(2, 1)
    calls = []

    def evaluate():
        calls.append(run.stop_requested())
        if run.stop_requested():  # what model_outputs does between two batches of a long dev set
            raise Interrupted("stopped after 64 of 166,677 inputs")
        if len(calls) == 1:
            run.request_stop()  # pressed while the first epoch's dev set is being scored
            raise Interrupted("stopped after 0 of 166,677 inputs")
        return {"accuracy": 0.5}

    fitted = fit(run, n_train=16, batch_size=4, epochs=3, seed=0, loss_of=lambda idx: model(torch.ones(len(idx), 2)).sum(),
                 evaluate=evaluate, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert fitted.stopped and fitted.step == 4 and fitted.dev == {"accuracy": 0.5}
    assert calls == [False, False]  # the request was taken: the one evaluation after it ran to its end
    assert "stop requested during the evaluation at step 4 of 12 (stopped after 0 of" in (run.path / "log.txt").read_text()


def test_model_outputs_stop_between_batches(base_model):
    from bert_explorer import checkpoint
    from bert_explorer.data.tiny_tasks import make_tiny
    from bert_explorer.tasks.base import Interrupted

    data = make_tiny("classification", n=200)
    loaded = checkpoint.load(base_model, data.task.architecture, num_labels=2)
    feats = data.task.featurize(data.examples, loaded.tokenizer, ["negative", "positive"], 32)
    asked = []
    with pytest.raises(Interrupted, match="stopped after 128 of 200 inputs"):
        data.task.model_outputs(loaded.model, feats, loaded.tokenizer.pad_id, "cpu",
                                stop=lambda: asked.append(1) or len(asked) > 2)


def test_a_crashed_runs_duration_ends_at_its_last_sign_of_life(tmp_path):
    import os
    import time

    from bert_explorer.runs.run import duration
    from bert_explorer.runs.run import Run

    run = Run(tmp_path / "r").create({}, "finetune")
    t0 = time.time() - 3600
    run.write_status(state="running", pid=2**22 + 12345, started=t0)  # a pid that is not alive
    os.utime(run.path / "status.json", (t0 + 1, t0 + 1))  # its last status: a second after it started
    run.log("step 900 of 140,634")
    os.utime(run.path / "log.txt", (t0 + 1800, t0 + 1800))  # ... but it logged for half an hour
    status = run.status()
    assert status["state"] == "crashed"
    assert duration(status) == pytest.approx(1800, abs=1)


# ----- any transformers BERT folder, and a fine-tuning run's folder, are models ---------------------------------
def test_a_folder_saved_by_transformers_and_a_run_folder_predict_and_export(base_model, tmp_path):
    transformers = pytest.importorskip("transformers")
    from bert_explorer.cli import main
    from bert_explorer.data.tiny_tasks import make_tiny
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
    from bert_explorer.train.predict import Predictor

    run = tmp_path / "run"
    run_finetuning(FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=32, epochs=1,
                                  batch_size=16, device="cpu"), run)
    examples = [{"text": ex["text"]} for ex in make_tiny("classification", n=12, seed=5).examples]
    ours = Predictor(run).predict(examples)

    # transformers 5 writes the fast tokenizer's tokenizer.json; a folder with no vocab.txt still reads
    saved = tmp_path / "saved-by-transformers"
    transformers.BertForSequenceClassification.from_pretrained(run / "model").save_pretrained(saved)
    transformers.AutoTokenizer.from_pretrained(run / "model").save_pretrained(saved)
    (saved / "vocab.txt").unlink(missing_ok=True)
    assert (saved / "tokenizer.json").is_file() and not (saved / "vocab.txt").exists()
    theirs = Predictor(saved).predict(examples)
    assert [r["label"] for r in theirs] == [r["label"] for r in ours]
    for a, b in zip(theirs, ours):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)

    # export takes the run's folder as predict does (its model/), and the export predicts the same
    assert main(["export", "--model", str(run), "--output", str(tmp_path / "exported")]) == 0
    again = Predictor(tmp_path / "exported").predict(examples)
    assert [r["label"] for r in again] == [r["label"] for r in ours]
