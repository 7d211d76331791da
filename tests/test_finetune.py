"""Fine-tuning each task end to end on tiny generated data: the loss falls, the dev metric
beats chance, and transformers' BertFor* loads the exported model and predicts the same."""
import json
import os
import shutil
from dataclasses import asdict

import pytest
import torch

from bert_explorer import checkpoint
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.tasks.base import padded_length
from bert_explorer.tasks.registry import task_type
from bert_explorer.train.finetune import FinetuneConfig, label_names_of, ltr_problem, run_finetuning
from bert_explorer.train.predict import Predictor
from bert_explorer.runs.run import Run

transformers = pytest.importorskip("transformers")
TASKS = ["classification", "pair-classification", "regression", "ner", "qa", "multiple-choice", "multi-label"]


# base_model (conftest.py): a small random BERT with a vocabulary learnt on the tiny tasks


CHANCE = {"classification": ("accuracy", 0.6), "pair-classification": ("accuracy", 0.6),
          "regression": ("pearson", 0.5), "ner": ("f1", 0.3), "qa": ("f1", 30.0),
          "multiple-choice": ("accuracy", 0.45),
          # a head that says yes to every label scores about 0.67 (each label is gold half the time)
          "multi-label": ("micro_f1", 0.8)}


def _hf_outputs(task, model_dir, batch):
    arch = {"ner": "BertForTokenClassification", "qa": "BertForQuestionAnswering",
            "multiple-choice": "BertForMultipleChoice"}.get(task, "BertForSequenceClassification")
    hf, info = getattr(transformers, arch).from_pretrained(str(model_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        out = hf.eval()(**batch)
    return torch.stack([out.start_logits, out.end_logits], -1) if task == "qa" else out.logits


@pytest.mark.parametrize("task", TASKS)
def test_finetune_learns_and_exports(task, base_model, tmp_path):
    cfg = FinetuneConfig(model=base_model, train=f"tiny:{task}", task=task, max_train_examples=160,
                         epochs={"qa": 10, "multiple-choice": 10, "multi-label": 16,
                                                     # 6 passed at one seed's draws only: 15 learn at any (0.93-0.98)
                                                     "regression": 15}.get(task, 6), batch_size=16, lr=1e-3,
                         max_seq_length=64, device="cpu", seed=0)
    result = run_finetuning(cfg, tmp_path / "run")
    metric, chance = CHANCE[task]
    assert result["dev"][metric] > chance, result["dev"]
    # the registry's metrics for this task type are what the run reports, the main one first
    assert task_type(task).main_metric == metric and set(task_type(task).metrics) <= set(result["dev"])
    assert type(checkpoint.load(tmp_path / "run" / "model").model).__name__ == task_type(task).architecture
    losses = [m["loss"] for m in json_lines(tmp_path / "run" / "metrics.jsonl") if m["split"] == "train"]
    # batches group similar lengths, so one batch's loss depends on its lengths (in the regression
    # task longer sentences hold more keywords): compare the first and last quarter of the run
    quarter = max(1, len(losses) // 4)
    assert sum(losses[-quarter:]) < sum(losses[:quarter])
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["dev"][metric] == result["dev"][metric]

    # transformers reads the exported model and gives the same outputs as ours
    model_dir = tmp_path / "run" / "model"
    ours = checkpoint.load(model_dir)
    data = make_tiny(task, n=8, seed=5)
    feats = data.task.featurize(data.examples, ours.tokenizer, result["label_names"], 64)
    batch = {k: v for k, v in data.task.collate(feats, ours.tokenizer.pad_id).items()
             if k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        out = ours.model(**batch)
    mine = torch.stack([out.start_logits, out.end_logits], -1) if task == "qa" else out.logits
    assert torch.allclose(mine, _hf_outputs(task, model_dir, batch), atol=1e-4)

    # and the predict API answers in the task's own terms, from those same outputs
    pred = Predictor(tmp_path / "run").predict(data.examples[:2])
    names = result["label_names"]
    if task in ("classification", "pair-classification"):
        assert [p["label"] for p in pred] == [names[int(i)] for i in mine[:2].argmax(-1)]
        # a batch of a labelled and an unlabelled example is predicted alike (labels are not needed)
        unlabelled = {k: v for k, v in data.examples[1].items() if k != "label"}
        assert Predictor(tmp_path / "run").predict([data.examples[0], unlabelled]) == pred
        assert sum(pred[0]["probabilities"].values()) == pytest.approx(1, abs=1e-5)
    elif task == "regression":
        assert [p["score"] for p in pred] == pytest.approx(mine[:2].squeeze(-1).tolist(), abs=1e-5)
    elif task == "multiple-choice":
        assert [p["choice"] for p in pred] == mine[:2].argmax(-1).tolist()
    elif task == "ner":
        first = {w: t for t, w in reversed(list(enumerate(feats[0]["word_ids"]))) if w is not None}
        assert pred[0]["tags"] == [names[int(mine[0, first[w]].argmax())] for w in range(len(data.examples[0]["tokens"]))]
    elif task == "multi-label":  # every label whose sigmoid passes 0.5, with the loss transformers computes
        assert [p["labels"] for p in pred] == [[n for n, x in zip(names, row) if x > 0] for row in mine[:2]]
        assert [p["labels"] for p in pred] != [names, names]  # not a head that says yes to everything
        hf = transformers.BertForSequenceClassification.from_pretrained(str(model_dir)).eval()
        assert hf.config.problem_type == "multi_label_classification"
        labels = data.task.label_tensor(feats, 0)
        with torch.no_grad():
            assert float(ours.model(**batch, labels=labels).loss) == pytest.approx(
                float(hf(**batch, labels=labels).loss), abs=1e-5)
    else:  # qa: the answer is a span of the context (or "" for no answer)
        assert all(p["answer"] in ex["context"] for p, ex in zip(pred, data.examples[:2]))


def json_lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize("mode", ["concat-last-4", "embeddings"])
def test_feature_based_classification(mode, base_model, tmp_path):
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", task="classification", mode="feature-based",
                         features=mode, max_train_examples=160, epochs=8, batch_size=16, device="cpu")
    result = run_finetuning(cfg, tmp_path / "run")
    assert result["mode"] == "feature-based" and result["features"] == mode
    assert result["dev"]["accuracy"] > 0.6
    pred = Predictor(tmp_path / "run").predict([{"text": make_tiny("classification", 4, 3).examples[0]["text"]}])
    assert pred[0]["label"] in result["label_names"]


def test_feature_based_ner(base_model, tmp_path):
    cfg = FinetuneConfig(model=base_model, train="tiny:ner", task="ner", mode="feature-based", features="last",
                         max_train_examples=160, epochs=8, batch_size=16, device="cpu")
    result = run_finetuning(cfg, tmp_path / "run")
    assert result["dev"]["f1"] > 0.3



def test_a_learning_rate_grid_says_in_its_log_which_rate_it_kept(base_model, tmp_path):
    """Section 4: the best learning rate on dev is kept; the log says which, beside each rate's score."""
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", task="classification", max_train_examples=32,
                         epochs=1, batch_size=16, lr_grid=[1e-3, 1e-6], max_seq_length=32, device="cpu", seed=0)
    result = run_finetuning(cfg, tmp_path / "run")
    last = next(line for line in (tmp_path / "run" / "log.txt").read_text().splitlines() if " kept, the best" in line)
    kept = f"learning rate {result['lr']:g} kept, the best on dev (accuracy={result['dev']['accuracy']:.4g}) of 0.001 ("
    assert kept in last and "), 1e-06 (" in last, last
    scores = [float(s.split(")")[0]) for s in last.split("of ", 1)[1].split(" (")[1:]]
    assert result["dev"]["accuracy"] == pytest.approx(max(scores), abs=1e-4)

def test_a_stop_request_ends_the_run_cleanly_with_a_saved_model(base_model, tmp_path):
    from bert_explorer.runs.run import Run

    run = Run(tmp_path / "stopped")
    run.path.mkdir()
    run.request_stop()  # asked before the first step: the run must still end with a usable model
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=64, epochs=3,
                         batch_size=16, device="cpu")
    result = run_finetuning(cfg, run.path)
    status = run.status()
    assert status["state"] == "stopped" and status["device"] == "cpu"
    assert not run.stop_requested()  # the request is used up
    assert not [m for m in run.metrics() if m["split"] == "train"]  # no step was taken
    assert (run.path / "model" / "model.safetensors").exists() and "accuracy" in result["dev"]


def test_dev_examples_that_repeat_training_ones_are_said(tmp_path):
    """A file with repeated rows, split at random, put the same text in train and dev: a dev accuracy of 1.000
    counted text the model trained on, and nothing said so."""
    from bert_explorer.train.finetune import read_data

    rows = [f"the match was {'won' if i % 2 else 'lost'} {i % 40},{'sport' if i % 2 else 'other'}" for i in range(120)]
    (tmp_path / "repeats.csv").write_text("text,label\n" + "\n".join(rows) + "\n")  # 40 texts, each 3 times
    train, dev = read_data(FinetuneConfig(model="minilm", train=str(tmp_path / "repeats.csv")))
    texts = {ex["text"] for ex in train.examples}
    repeats = sum(ex["text"] in texts for ex in dev.examples)
    assert repeats > 0
    assert f"{repeats:,} of the {len(dev.examples):,} dev examples also stand word for word among the training " \
           "examples" in " ".join(dev.notes)
    distinct = [f"the match number {i} was {'won' if i % 2 else 'lost'},{'sport' if i % 2 else 'other'}"
                for i in range(120)]
    (tmp_path / "distinct.csv").write_text("text,label\n" + "\n".join(distinct) + "\n")
    _, dev = read_data(FinetuneConfig(model="minilm", train=str(tmp_path / "distinct.csv")))
    assert not [n for n in dev.notes if "word for word" in n]
    assert "(or give a dev file of its own)" in " ".join(read_data(FinetuneConfig(
        model="minilm", train=str(tmp_path / "repeats.csv")))[1].notes)
    # a dev file given, sharing rows with the training file: not told to give a dev file of its own
    (tmp_path / "dev.csv").write_text("text,label\n" + "\n".join(rows[:20]) + "\n")
    _, dev = read_data(FinetuneConfig(model="minilm", train=str(tmp_path / "repeats.csv"), dev=str(tmp_path / "dev.csv")))
    said = " ".join(dev.notes)
    assert "remove from the dev file the rows the training file has too" in said and "of its own" not in said


def test_a_background_run_logs_each_note_of_its_data_once(base_model, tmp_path):
    """A run the app starts writes its stderr into its log.txt, and it logs its data's notes itself: each note
    (a file read as Latin-1, the split) stood twice in the Runs page's log, once without its time."""
    from bert_explorer.runs.background import start_background

    accented = "caf\xe9 "
    rows = [f"{accented if i % 7 == 0 else ''}{'good film' if i % 2 else 'bad film'} {i},{'pos' if i % 2 else 'neg'}"
            for i in range(60)]
    data = tmp_path / "latin.csv"
    data.write_bytes(("text,label\n" + "\n".join(rows) + "\n").encode("latin-1"))
    cfg = FinetuneConfig(model=base_model, train=str(data), epochs=1, batch_size=16, max_seq_length=32, device="cpu")
    run = start_background("finetune", asdict(cfg), tmp_path / "run")
    assert run.wait(timeout=240)["state"] == "finished", (run.path / "log.txt").read_text()[-2000:]
    log = (run.path / "log.txt").read_text().splitlines()
    latin = [line for line in log if "read as Latin-1" in line]
    assert len(latin) == 1, latin
    assert any(line.startswith("estimate: about ") for line in log)  # (what the page said, kept in the log)


def test_a_stop_asked_after_the_last_step_leaves_the_run_finished(base_model, tmp_path, monkeypatch):
    """A Stop (or Ctrl-C) during the final evaluation or save, after every step was trained, made the run
    "stopped", said that it kept no checkpoint, and its folder then refused a new start: a dead end for a run
    that had finished. It is "finished" now; only the answers of the dev set, a second pass, are left to the
    After fine-tuning page, so that it ends at once."""
    from bert_explorer.train import finetune

    trained = finetune._fine_tune

    def stop_once_trained(cfg, run, *a, **k):
        result = trained(cfg, run, *a, **k)
        run.request_stop()
        return result

    monkeypatch.setattr(finetune, "_fine_tune", stop_once_trained)
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=32, epochs=1,
                         batch_size=16, max_seq_length=32, device="cpu")
    result = run_finetuning(cfg, tmp_path / "run")
    run = Run(tmp_path / "run")
    assert run.status()["state"] == "finished" and result["steps"] == run.status()["step"] == 2
    assert not run.stop_requested() and not (run.path / "dev_predictions.json").exists()


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM and Ctrl-C as kill and a terminal send them")
@pytest.mark.parametrize("signum, checkpoints", [("SIGTERM", []), ("SIGINT", ["--save-checkpoints"])])
def test_sigterm_and_ctrl_c_stop_a_fine_tuning_with_a_checkpoint_to_resume_from(signum, checkpoints, base_model,
                                                                                 tmp_path):
    """Either signal is the app's Stop: the run ends at its step, measured, with its model and the checkpoint
    a Stop saves, "stopped"; stderr and the log say how to go on, the exit code is the signal's, and
    --resume trains the epochs left (none is lost)."""
    import signal

    from bert_explorer.cli import main
    from shared import signalled

    out = tmp_path / "run"
    flags = ["--model", base_model, "--train", "tiny:classification", "--max-train-examples", "64",
             "--batch-size", "4", "--epochs", "5", "--device", "cpu", "--output", str(out)]
    done = signalled(["finetune", *flags, *checkpoints], str(out / "status.json"), 1, getattr(signal, signum))
    assert done.returncode == 128 + getattr(signal, signum), done.stderr[-2000:]
    run = Run(out)
    status = run.status()
    step = status["step"]
    assert status["state"] == "stopped" and 0 < step < 75 and "error" not in status
    assert [s for s, _ in run.checkpoints()] == [step] and (out / "model" / "model.safetensors").is_file()
    said = {"SIGINT": "interrupted (Ctrl-C)", "SIGTERM": "stopped by SIGTERM"}[signum]
    sentence = (f"{said} at step {step} of 75, its model so far measured and saved; continue with "
                f"`bert-explorer finetune --output {out} --resume`")
    assert done.stderr.splitlines()[-1] == f"bert-explorer: {sentence}"
    assert (out / "log.txt").read_text().splitlines()[-1].endswith(sentence)

    assert main(["finetune", "--output", str(out), "--resume", "--no-progress"]) == 0
    assert run.status()["state"] == "finished" and json.loads((out / "metrics.json").read_text())["steps"] == 75
    # kept when asked for (--save-checkpoints: the last evaluation's weights; its training state, to resume from,
    # is of no use to a finished run), else the Stop's resume point is gone
    assert [s for s, _ in run.checkpoints()] == ([75] if checkpoints else [])
    assert not list(out.glob("checkpoints/*/training_state.pt"))


def test_a_left_to_right_checkpoint_is_not_fine_tuned_through_cls(base_model, tmp_path):
    """Under a causal mask [CLS] sees only itself (Section 5.1's LTR model), so a [CLS] head
    cannot learn; the run is refused before anything is written."""
    ltr = tmp_path / "ltr"
    shutil.copytree(base_model, ltr)
    cfg = json.loads((ltr / "config.json").read_text())
    (ltr / "config.json").write_text(json.dumps({**cfg, "causal": True}))
    for task in ("classification", "pair-classification", "regression", "multiple-choice"):
        assert "left-to-right" in ltr_problem(str(ltr), task_type(task), "fine-tune")
        assert ltr_problem(base_model, task_type(task), "fine-tune") is None
    assert ltr_problem(str(ltr), task_type("ner"), "fine-tune") is None
    assert ltr_problem(str(ltr), task_type("qa"), "fine-tune") is None
    assert ltr_problem(str(ltr), task_type("classification"), "feature-based") is None
    assert "feature-based" not in ltr_problem(str(ltr), task_type("multiple-choice"), "fine-tune")  # no BiLSTM for it
    with pytest.raises(ValueError, match="left-to-right"):
        run_finetuning(FinetuneConfig(model=str(ltr), train="tiny:classification", epochs=1), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_ltr_fine_tuning_stops_cleanly_on_request(base_model, tmp_path):
    """The LTR head's own loop (Table 5 rows) honours a stop like ordinary fine-tuning: it
    evaluates the model as it is and says it stopped."""
    from bert_explorer.experiments.ltr import run_ltr_finetuning
    from bert_explorer.runs.run import Run

    ltr = tmp_path / "ltr"
    shutil.copytree(base_model, ltr)
    cfg = json.loads((ltr / "config.json").read_text())
    (ltr / "config.json").write_text(json.dumps({**cfg, "causal": True}))
    run = Run(tmp_path / "run")
    run.path.mkdir()
    run.request_stop()
    result = run_ltr_finetuning(FinetuneConfig(model=str(ltr), train="tiny:classification", epochs=3,
                                               device="cpu"), run.path)
    assert result["stopped_at_step"] == 0 and 0 <= result["dev"]["accuracy"] <= 1
    assert run.status()["state"] == "stopped"
    assert not [m for m in run.metrics() if m["split"] == "train"]
    assert [m["epoch"] for m in run.metrics() if m["split"] == "dev"] == [0]  # measured before any epoch


@pytest.mark.parametrize("mode", ["fine-tune", "feature-based"])
def test_a_full_disk_at_the_save_is_one_sentence_and_leaves_nothing_half_made(mode, base_model, tmp_path,
                                                                               monkeypatch):
    """The model (or the feature-based head) is written at the end; a full disk then says where, how
    much is free and that fine-tuning has no checkpoint to resume from. Feature-based transfer's cache
    of extracted features only saves time: on a full disk it is one warning and the run goes on."""
    import errno
    import warnings

    from bert_explorer.train import feature_based
    from bert_explorer.runs.run import Run

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "save_file", full)
    monkeypatch.setattr(feature_based, "save_file", full)
    run = Run(tmp_path / "run")
    run.path.mkdir()
    run.request_stop()  # no step needed: straight to the save
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=40, epochs=1,
                         batch_size=16, device="cpu", mode=mode, features="last")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # as a command sees them: the same sentence once (train and dev alike)
        with pytest.raises(OSError) as e:
            run_finetuning(cfg, run.path)
    what = "the fine-tuned model" if mode == "fine-tune" else "the feature-based head"
    assert str(e.value).startswith(f"no space left in {run.path} to save {what} (")
    assert str(e.value).endswith("needed); fine-tuning keeps no checkpoint to resume from, so start it again in a "
                                 "new folder once space is freed")
    assert run.status()["state"] == "failed" and run.status()["error"] == str(e.value)
    assert not (run.path / "model").exists() and not (run.path / "feature_head").exists()
    kept = [str(w.message) for w in caught if "keep the extracted features" in str(w.message)]
    assert len(kept) == (1 if mode == "feature-based" else 0)


def test_a_parquet_upload_is_fine_tuned_end_to_end(base_model, tmp_path):
    """A data set exported the way Hugging Face datasets are (Parquet, class ids as labels) is
    read with the CSV column rules and fine-tuned, and the model learns it."""
    import pandas as pd

    tiny = make_tiny("classification", n=200, seed=0)
    names = sorted({ex["label"] for ex in tiny.examples})
    pd.DataFrame({"sentence": [ex["text"] for ex in tiny.examples],
                  "label": [names.index(ex["label"]) for ex in tiny.examples]}).to_parquet(tmp_path / "train.parquet")
    cfg = FinetuneConfig(model=base_model, train=str(tmp_path / "train.parquet"), max_train_examples=160, epochs=6,
                         batch_size=16, lr=1e-3, max_seq_length=64, device="cpu", seed=0)
    result = run_finetuning(cfg, tmp_path / "run")
    assert result["dev"]["accuracy"] > CHANCE["classification"][1], result["dev"]
    assert type(checkpoint.load(tmp_path / "run" / "model").model).__name__ == "BertForSequenceClassification"
    assert Predictor(tmp_path / "run").label_names == [str(i) for i in range(len(names))]


@pytest.mark.parametrize("task", ["classification", "pair-classification", "ner"])
def test_dev_outputs_read_shortest_first_are_each_examples_own(task, base_model):
    """model_outputs batches the features by length; each output must still be its own feature's,
    in the features' order, and equal (fp32) to that feature run alone with no padding at all."""
    data = make_tiny(task, n=40, seed=3)
    names = label_names_of(data)
    loaded = checkpoint.load(base_model, task_type(task).architecture,
                             **({} if names is None else {"num_labels": len(names)}))
    feats = data.task.featurize(data.examples, loaded.tokenizer, names, 64)
    assert len({padded_length(f) for f in feats}) >= 3, "the features must differ in length for the order to matter"
    outs = data.task.model_outputs(loaded.model, feats, loaded.tokenizer.pad_id, "cpu", batch_size=8)
    for f, o in zip(feats, outs):
        alone = data.task.model_outputs(loaded.model, [f], loaded.tokenizer.pad_id, "cpu")[0]
        n = alone.shape[0]
        assert torch.allclose(o[:n], alone, atol=1e-5)


def test_a_multiple_choice_feature_needs_its_longest_choice():
    assert padded_length({"input_ids": [[2, 5, 3], [2, 5, 6, 7, 3], [2, 3]]}) == 5
    assert padded_length({"input_ids": [2, 5, 6, 3]}) == 4


def test_the_compile_setting_trains_through_the_compiled_model_and_saves_the_plain_one(base_model, tmp_path,
                                                                                       monkeypatch):
    compiled = []
    real = torch.compile

    def compile_eagerly(module, **kw):  # dynamo's tracing without code generation: seconds, not minutes
        compiled.append(module)
        return real(module, backend="eager")

    monkeypatch.setattr(torch, "compile", compile_eagerly)
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=64, epochs=2,
                         batch_size=16, lr=1e-3, max_seq_length=32, device="cpu", seed=0, compile=True)
    result = run_finetuning(cfg, tmp_path / "run")
    assert len(compiled) == 1 and result["dev"]["accuracy"] > 0
    saved = checkpoint.load(tmp_path / "run" / "model")
    assert not saved.report.missing and not saved.report.unexpected
    assert not any("_orig_mod" in k for k in saved.model.state_dict())


def test_a_fine_tuning_writes_its_dev_metrics_for_tensorboard(base_model, tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=64, epochs=2,
                         batch_size=16, device="cpu")
    run_finetuning(cfg, tmp_path / "run")
    acc = event_accumulator.EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    dev = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
           if json.loads(line)["split"] == "dev"]
    lr = f"lr {cfg.lr:g}"  # (a learning-rate grid keeps each setting's curves apart)
    read = acc.Scalars(f"{lr}/dev/accuracy")
    assert [(e.step, round(e.value, 6)) for e in read] == [(m["step"], round(m["accuracy"], 6)) for m in dev]
    assert len(read) == 2 and f"{lr}/train/loss" in acc.Tags()["scalars"]


def test_a_run_trained_in_bf16_reports_the_saved_models_float32_dev_score(base_model, tmp_path):
    """A regression run in bf16 (the CPU's auto precision) said dev Pearson r -0.372 in metrics.json, the CLI and the
    Fine-tune page, where the saved model scored in float32 (After fine-tuning, scipy on its predictions) said
    -0.390: one model, two scores. The run's dev score is now the saved model's, in float32."""
    from bert_explorer.train.finetune import read_data

    cfg = FinetuneConfig(model=base_model, train="tiny:regression", task="regression", max_train_examples=96,
                         epochs=2, batch_size=16, lr=1e-3, max_seq_length=32, device="cpu", seed=0, precision="bf16")
    result = run_finetuning(cfg, tmp_path / "run")
    saved = checkpoint.load(tmp_path / "run" / "model")
    dev = result["dev"]
    _, dev_data = read_data(cfg)  # the run's own dev split
    feats = dev_data.task.featurize(dev_data.examples, saved.tokenizer, result["label_names"], 32)
    outputs = dev_data.task.model_outputs(saved.model, feats, saved.tokenizer.pad_id, "cpu")
    fp32 = dev_data.task.evaluate(dev_data.examples, feats, outputs, result["label_names"])
    assert dev == pytest.approx(fp32, abs=1e-9)
    # the training precision's last evaluation is in metrics.jsonl, as the curves draw it
    last = [m for m in json_lines(tmp_path / "run" / "metrics.jsonl") if m.get("split") == "dev"][-1]
    assert "pearson" in last
    # and the log says both, where the curve's last point and the result differ
    said = (tmp_path / "run" / "log.txt").read_text()
    assert (f"the model kept, scored again in float32: pearson={dev['pearson']:.4g} (in bf16 during training: "
            f"{last['pearson']:.4g})") in said
