"""Fine-tuning with what transformers' Trainer users reach for: gradient accumulation, evaluation
every N steps, early stopping, the best checkpoint kept, and resuming a stopped run; the rules are
checked against transformers' Trainer itself on the same settings."""
import json

import pytest
import torch

from bert_explorer.model import BertConfig
from bert_explorer.model.heads import BertForSequenceClassification
from bert_explorer.runs.run import Run
from bert_explorer.train.engine import Epochs, Evaluating, fit
from bert_explorer.train.optim import make_optimizer
from bert_explorer.train.report import MemoryReporter

TINY = dict(vocab_size=60, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
            max_position_embeddings=32, dropout=0.0, attention_dropout=0.0)


def _data(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, 60, (n, 12), generator=g), torch.randint(0, 2, (n,), generator=g)


def test_accumulated_batches_give_the_update_of_the_larger_batch():
    """One step of batch 8 against one of 4 x 2 (the same eight examples: the same seeded order cut
    finer), fp32, AdamW: the same weights to 1e-6."""
    x, y = _data(8)
    weights = []
    for batch_size, accum in ((8, 1), (4, 2)):
        torch.manual_seed(0)
        model = BertForSequenceClassification(BertConfig(**TINY), num_labels=2)
        fitted = fit(MemoryReporter(), n_train=8, batch_size=batch_size, epochs=1, seed=3,
                     loss_of=lambda idx, m=model: m(input_ids=x[idx], labels=y[idx]).loss,
                     evaluate=lambda: {}, model=model, optimizer=make_optimizer(model, lr=1e-3), grad_accum=accum)
        assert fitted.step == 1
        weights.append(model.state_dict())
    for name, w in weights[0].items():
        torch.testing.assert_close(weights[1][name], w, rtol=0, atol=1e-6, msg=name)


def test_accumulation_weighs_each_micro_batch_by_what_its_loss_averages_over():
    """A tagging loss is a mean over a batch's labelled words, and an epoch's last batch can be short: each
    micro-batch counted 1/N of the step whatever it held, so 4 x 2 tagged sentences (0.64 apart) and batches of
    4 + 4 + 2 examples (the 2 weighing as 4) were not one batch's step. Weighed by its items (the task's
    ``loss_items``: labelled words; examples), they are: the same gradient to 1e-6 (SGD at lr 1: the update)."""
    from bert_explorer.model.heads import BertForTokenClassification
    from bert_explorer.tasks.registry import task_type

    ner = task_type("ner")
    g = torch.Generator().manual_seed(1)
    x = torch.randint(5, 60, (10, 12), generator=g)
    tags = torch.randint(0, 3, (10, 12), generator=g)
    tags[torch.rand(10, 12, generator=g) < torch.linspace(0.1, 0.9, 10)[:, None]] = -100  # 1 to 11 words tagged
    features = [{"labels": row.tolist()} for row in tags]
    y = torch.randint(0, 2, (10,), generator=g)
    for make, loss, items, n, big, small in (
            (lambda: BertForTokenClassification(BertConfig(**TINY), num_labels=3),
             lambda m, idx: m(input_ids=x[idx], labels=tags[idx]).loss,
             lambda idx: sum(ner.loss_items(features[j]) for j in idx), 8, (8, 1), (4, 2)),
            (lambda: BertForSequenceClassification(BertConfig(**TINY), num_labels=2),
             lambda m, idx: m(input_ids=x[idx], labels=y[idx]).loss, len, 10, (10, 1), (4, 3))):
        weights = []
        for batch_size, accum in (big, small):
            torch.manual_seed(0)
            model = make()
            fitted = fit(MemoryReporter(), n_train=n, batch_size=batch_size, epochs=1, seed=3,
                         loss_of=lambda idx, m=model: loss(m, idx), items_of=items, evaluate=lambda: {},
                         model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0), grad_accum=accum,
                         clip_grad_norm=None)
            assert fitted.step == 1
            weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        torch.testing.assert_close(weights[1], weights[0], rtol=0, atol=1e-6)


# The dev metric each evaluation reports, the same in both trainers: the rules are compared, not two
# models' noise. 0.605 beats 0.60 by less than the threshold; 0.69 and 0.70 do not beat 0.70.
SCRIPT = [0.50, 0.60, 0.605, 0.70, 0.69, 0.70, 0.71, 0.72, 0.73, 0.74, 0.75]
SETTINGS = {  # name: (eval_every, patience, threshold)
    "every 2 steps, patience 2": (2, 2, 0.01),
    "every 3 steps (not a divisor of the 20)": (3, None, 0.0),
    "after each epoch, patience 1": (None, 1, 0.0),
}


def _transformers_trainer(tmp_path, eval_every, patience, threshold):
    """transformers' Trainer on 40 examples, batch 4, 3 batches a step, 5 epochs: the steps it evaluated,
    the step it stopped at and the best step it chose."""
    import transformers
    from transformers import EarlyStoppingCallback, TrainerCallback, TrainingArguments

    x, y = _data(40)
    rows = [{"input_ids": x[i], "attention_mask": torch.ones(12, dtype=torch.long), "labels": y[i]}
            for i in range(40)]
    evaluated = []

    class Seen(TrainerCallback):
        def on_evaluate(self, args, state, control, **kwargs):
            evaluated.append(state.global_step)

    config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    strategy = "steps" if eval_every else "epoch"
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=4, gradient_accumulation_steps=3,
        num_train_epochs=5, eval_strategy=strategy, save_strategy=strategy, **(
            {"eval_steps": eval_every, "save_steps": eval_every} if eval_every else {}),
        load_best_model_at_end=True, metric_for_best_model="accuracy", greater_is_better=True, use_cpu=True,
        report_to=[], disable_tqdm=True, logging_strategy="no", save_only_model=True, seed=0)
    callbacks = [Seen()] + ([EarlyStoppingCallback(patience, threshold)] if patience else [])
    trainer = transformers.Trainer(model=transformers.BertForSequenceClassification(config), args=args,
                                   train_dataset=rows, eval_dataset=rows[:8], callbacks=callbacks,
                                   compute_metrics=lambda _: {"accuracy": SCRIPT[len(evaluated)]})
    trainer.train()
    return evaluated, trainer.state.global_step, trainer.state.best_global_step


@pytest.mark.parametrize("name", SETTINGS)
def test_evaluations_early_stopping_and_the_best_step_are_transformers_trainers(name, tmp_path):
    eval_every, patience, threshold = SETTINGS[name]
    theirs = _transformers_trainer(tmp_path, eval_every, patience, threshold)
    x, y = _data(40)
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY), num_labels=2)
    seen = []

    def evaluate():
        seen.append(len(seen))
        return {"accuracy": SCRIPT[len(seen) - 1]}
    fitted = fit(MemoryReporter(), n_train=40, batch_size=4, epochs=5, seed=0,
                 loss_of=lambda idx: model(input_ids=x[idx], labels=y[idx]).loss, evaluate=evaluate, model=model,
                 optimizer=make_optimizer(model, lr=1e-4), grad_accum=3,
                 evaluating=Evaluating("accuracy", eval_every, patience, threshold, keep_best=True))
    ours = (fitted.steps, fitted.step, fitted.best_step)
    assert ours == theirs, (ours, theirs)
    assert fitted.stopped is False  # early stopping ends a run as finished, not stopped


def _finetune(tmp_path, name, **settings):
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

    cfg = FinetuneConfig(**{"model": "minilm-mlm-nsp", "train": "tiny:classification", "epochs": 2, "batch_size": 8,
                            "max_seq_length": 24, "device": "cpu", "precision": "fp32", "seed": 0, **settings})
    return cfg, run_finetuning(cfg, tmp_path / name)


def test_a_stopped_fine_tuning_resumes_to_the_weights_of_one_that_never_stopped(tmp_path, monkeypatch):
    """Stopped at step 5 (a Stop saves a checkpoint), then resumed: the same kept model, bit for bit, as
    the run that never stopped; the stopped run's result is set aside, each step is logged once, and the
    Stop's checkpoint is removed at the end (the run was not asked to keep checkpoints)."""
    from safetensors.torch import load_file

    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
    from bert_explorer.train.resume import ResumeRefused

    settings = {"grad_accum": 2, "eval_every": 2, "keep_best": True, "batch_size": 4}
    # With these dropout draws the best model (step 2) is kept apart from the Stop's checkpoint (step 5): the
    # resume loads both, and must leave the random state as the checkpoint saved it.
    monkeypatch.setenv("BERT_EXPLORER_CPU_LEVERS", "16-bit dropout draws")
    _, whole = _finetune(tmp_path, "whole", **settings)
    after = Epochs.after
    monkeypatch.setattr(Epochs, "after", lambda job, step, losses: (
        job.reporter.request_stop() if step == 5 else None) or after(job, step, losses))
    cfg, stopped = _finetune(tmp_path, "stopped", **settings)
    monkeypatch.setattr(Epochs, "after", after)
    run = Run(tmp_path / "stopped")
    assert run.status()["state"] == "stopped" and [s for s, _ in run.checkpoints()] == [5]
    with pytest.raises(ResumeRefused, match=r"lr 0\.001 \(the run's: 5e-05\)"):
        run_finetuning(FinetuneConfig(**{**cfg.__dict__, "lr": 1e-3}), run.path, resume=True)
    # a checkpoint that lost its vocabulary is refused before anything moves (its result was set aside and the run
    # marked failed, then "give the checkpoint's file as it was written")
    kept = [f for f in (run.path / "checkpoints" / "step-5").iterdir() if f.name in ("vocab.txt", "tokenizer.json")]
    for f in kept:
        f.rename(tmp_path / f.name)
    listed = sorted(p.relative_to(run.path).as_posix() for p in run.path.rglob("*"))
    with pytest.raises(ValueError, match=r"step-5's vocabulary cannot be read .*start it again in a new folder"):
        run_finetuning(cfg, run.path, resume=True)
    assert sorted(p.relative_to(run.path).as_posix() for p in run.path.rglob("*")) == listed
    assert run.status()["state"] == "stopped"
    for f in kept:
        (tmp_path / f.name).rename(f)
    half = run.path / "checkpoints" / ".step-7.tmp-k1llxd"  # a checkpoint's write cut off by a kill
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\0" * 4096)
    resumed = run_finetuning(cfg, run.path, resume=True)
    assert not half.exists() and "removed checkpoints/.step-7.tmp-k1llxd, left by a write that was cut off" in \
        (run.path / "log.txt").read_text()
    assert run.status()["state"] == "finished" and resumed["steps"] == whole["steps"]
    assert resumed["best_step"] == whole["best_step"] and resumed["dev"] == whole["dev"]
    a = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    b = load_file(str(run.path / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (run.path / "set_aside" / "model").is_dir() and (run.path / "set_aside" / "metrics.json").is_file()
    train_steps = [r["step"] for r in run.metrics() if r["split"] == "train"]
    assert train_steps == sorted(set(train_steps))  # the steps trained again are logged once
    log = (run.path / "log.txt").read_text()
    assert "resuming at step 5 from checkpoints/step-5" in log and f"kept the model of step {whole['best_step']}" in log
    # the Stop's checkpoint (and the best kept beside it) was only a point to resume from: gone once finished
    assert not (run.path / "checkpoints").exists() and "removed the checkpoint a Stop saved to resume from (step-5)" in log
    with pytest.raises(ValueError, match="is a finished fine-tuning run: there is nothing left to train"):
        run_finetuning(cfg, run.path, resume=True)
    with pytest.raises(ValueError, match="kept no checkpoint to resume from"):
        Run(tmp_path / "whole").write_status(state="stopped")
        run_finetuning(cfg, tmp_path / "whole", resume=True)


def test_settings_are_bounded_in_one_sentence():
    from bert_explorer.train.finetune import FinetuneConfig

    for bad, said in (({"grad_accum": 0}, "grad_accum must be a whole number of at least 1 and at most 1,024"),
                      ({"grad_accum": 5000}, "at most 1,024, not 5000"),
                      ({"eval_every": 0}, "eval_every must be a whole number of at least 1, not 0"),
                      ({"early_stopping_patience": 2.5}, "early_stopping_patience must be a whole number"),
                      ({"early_stopping_threshold": -1}, "early_stopping_threshold must be a number of at least 0"),
                      # the page's own range, so that the CLI and the page hold out the same shares
                      ({"dev_fraction": 0.99}, r"dev_fraction must be from 0.01 to 0.5 \(the share"),
                      ({"dev_fraction": 0.001}, "not 0.001")):
        with pytest.raises(ValueError, match=said):
            FinetuneConfig(**bad)


def test_early_stopping_and_the_best_model_in_a_real_run(tmp_path):
    """A run that stops early keeps the model of its best evaluation and says both in its log and result."""
    _, result = _finetune(tmp_path, "early", epochs=6, eval_every=2, early_stopping_patience=1, keep_best=True,
                          lr=3e-4)
    log = (tmp_path / "early" / "log.txt").read_text()
    lines = [json.loads(x) for x in (tmp_path / "early" / "metrics.jsonl").read_text().splitlines()]
    dev = [r for r in lines if r["split"] == "dev"]
    assert [r["step"] for r in dev] == list(range(2, 2 * len(dev) + 1, 2))
    best = max(dev, key=lambda r: r["accuracy"])  # the first of equals
    assert result["best_step"] == best["step"] and result["dev"]["accuracy"] == best["accuracy"]
    assert f"kept the model of step {best['step']}" in log
    if "early_stopping" in result:  # it stopped before its 6 epochs: one evaluation without a new best
        assert result["steps"] == dev[-1]["step"] < 48 and "early stopping at step" in log
        assert dev[-1]["accuracy"] <= dev[-2]["accuracy"] or dev[-1]["accuracy"] <= best["accuracy"]


def test_the_end_of_a_run_removes_only_its_resume_points(tmp_path):
    """Not asked to keep checkpoints, the end of a resumed run removed its whole checkpoints/ folder: the
    evaluation checkpoints of a part that had asked for them, and a file of the user's beside them."""
    from bert_explorer.train.finetune_resume import STATE_FILE, drop_resume_points

    run = Run(tmp_path / "r").create({"model": "x"}, "finetune")
    for step, state in ((3, False), (5, True)):
        d = run.path / "checkpoints" / f"step-{step}"
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"weights")
        if state:
            (d / STATE_FILE).write_bytes(b"state")
    (run.path / "checkpoints" / "notes.txt").write_text("mine")
    said = drop_resume_points(run, kept=False)
    assert said.startswith("removed the checkpoint a Stop saved to resume from (step-5)")
    assert [s for s, _ in run.checkpoints()] == [3] and (run.path / "checkpoints" / "notes.txt").read_text() == "mine"


def test_a_fine_tuning_without_room_for_its_model_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """Every step was trained on a disk with 2 MB free, then the model could not be saved: the run was lost (it keeps
    no checkpoint), and "start it again" in the same folder was refused. A resume refused so had its result set
    aside and was marked failed first, and was told it kept no checkpoint beside the one it had."""
    from bert_explorer import full_disk
    from bert_explorer.train import finetune

    free = {"bytes": 2_000_000}
    monkeypatch.setattr(full_disk, "free_bytes", lambda folder: free["bytes"])
    monkeypatch.setattr(finetune, "_train_one", lambda *a, **k: pytest.fail("trained without room to save"))
    with pytest.raises(full_disk.DiskFull, match=r"to fine-tune into it \(2 MB free, about [\d.]+ MB needed: 4 times the "
                                                 r"model's [\d.]+ MB \(the model, the checkpoint a Stop saves with "
                                                 r"Adam's moments\) and a quarter more\); free some space, or choose a "
                                                 r"folder on a disk with room, then start it again"):
        _finetune(tmp_path, "full")
    assert not (tmp_path / "full").exists()  # nothing written: the same folder takes the same command again
    with pytest.raises(full_disk.DiskFull, match=r"8 times the model's .*two checkpoints with Adam's moments, the "
                                                 r"best model kept\)"):
        _finetune(tmp_path, "full-2", save_checkpoints=True, keep_best=True)
    # a stopped run resumed on a full disk: refused as it is, and told how it goes on
    monkeypatch.undo()
    after = Epochs.after
    monkeypatch.setattr(Epochs, "after", lambda job, step, losses: (
        job.reporter.request_stop() if step == 3 else None) or after(job, step, losses))
    cfg, _ = _finetune(tmp_path, "stopped")
    monkeypatch.setattr(Epochs, "after", after)
    run = Run(tmp_path / "stopped")
    listed = sorted(p.relative_to(run.path).as_posix() for p in run.path.rglob("*"))
    monkeypatch.setattr(full_disk, "free_bytes", lambda folder: 2_000_000)
    with pytest.raises(full_disk.DiskFull, match=r"bert-explorer finetune --output .*stopped --resume` continues from"):
        finetune.run_finetuning(cfg, run.path, resume=True)
    assert sorted(p.relative_to(run.path).as_posix() for p in run.path.rglob("*")) == listed
    assert run.status()["state"] == "stopped"
