"""Fine-tuning (paper, Section 3.2; its results are Section 4) and feature-based transfer (Section 5.3, Table 7).

Fine-tuning: every parameter of the pre-trained BERT is trained together with one new output
layer, for a few epochs at a small learning rate (the paper: batch 32, lr among 5e-5, 3e-5,
2e-5, 3 epochs, dropout 0.1; the 10% warm-up of Google's released scripts). Feature-based: BERT is
frozen; its activations are computed once, cached, and fed to a small new model (see ``feature_based.py``).

A fine-tuning run is a directory like a pre-training run: status.json, metrics.jsonl, log.txt,
``metrics.json`` (the dev metrics of the chosen model) and ``model/`` (a checkpoint that
transformers' BertFor* loads, with the label names in config.json).
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch

from .. import checkpoint, full_disk, hub, hub_datasets, hub_names
from ..data.tasks import check_dev_labels, load_builtin, train_dev_split
from ..data.tiny_tasks import make_tiny
from ..data.uploads.core import DataError, TaskData
from ..data.uploads.reader import read_parquet_split, read_task_file
from ..model.config import BertConfig
from ..runs.lock import writer_busy, writes_run
from ..runs.run import Run, new_run_refusal, restart_refusal
from ..runs.signals import StoppedBySignal, said, stopping_on_signals, what_to_do
from ..tasks.base import Interrupted, TaskType, padded_length
from ..tasks.metrics import small_dev_warning
from ..tokenizer import WordPieceTokenizer
from . import levers
from .device import pick_device, threads_text
from .engine import AFTER_A_FULL_DISK, Evaluating, epoch_batches, fit, marks_failure, total_steps
from .estimate import finetune_estimate, pretraining_parameters, words_of
from .feature_based import run_feature_based
from .finetune_config import DEV_EXAMPLES, MAX_DEV_EXAMPLES, MAX_TRAIN_EXAMPLES, FinetuneConfig
from .finetune_resume import (drop_resume_points, restore, resume_after_a_full_disk, resume_point,
                              resume_settings, save_checkpoint, set_aside_result)
from .memory import check_batch_fits
from .optim import linear_warmup_decay, make_optimizer
from .pretrain_config import positions_fit
from .predict import Predictor, store_dev_predictions

def read_spec(cfg: FinetuneConfig, spec: str) -> TaskData:
    """The data ``spec`` names (a file, builtin:NAME or tiny:TASK) as a run of ``cfg`` reads it."""
    if spec.startswith("builtin:"):
        return load_builtin(spec[len("builtin:"):], seed=cfg.seed)
    if spec.startswith("tiny:"):  # generated, learnable in seconds: tests and demos
        return make_tiny(spec[len("tiny:"):], n=cfg.max_train_examples or 64, seed=cfg.seed)
    if hub_datasets.is_dataset_spec(spec):  # a Hub data set's split: its Parquet files, read as an upload
        try:
            paths, where = hub_datasets.open_split(spec)
        except hub.HubError as e:
            raise DataError(f"{e}.") from None
        data = read_parquet_split(paths, spec, cfg.task, cfg.text_column, cfg.text_pair_column, cfg.label_column)
        data.notes.insert(0, f"read {where}")
        return data
    return read_task_file(spec, cfg.task, cfg.text_column, cfg.text_pair_column, cfg.label_column)


def read_data(cfg: FinetuneConfig) -> tuple[TaskData, TaskData]:
    train = read_spec(cfg, cfg.train)
    if cfg.dev:
        dev = read_spec(cfg, cfg.dev)
        check_dev_labels(train, dev)
    else:
        train, dev = train_dev_split(train, cfg.dev_fraction, cfg.seed)
    rng = random.Random(cfg.seed)
    for data, asked, cap, what in ((train, cfg.max_train_examples, MAX_TRAIN_EXAMPLES, "training"),
                                   (dev, cfg.max_dev_examples, DEV_EXAMPLES, "dev")):
        n = len(data.examples)
        if n > (asked or cap):
            data.examples = rng.sample(data.examples, asked or cap)
            if not asked:  # the user chose no number: say what was done with theirs
                why = ("the most one run keeps in memory" if what == "training" else
                       "what is scored after every epoch in seconds; max_dev_examples takes up to "
                       f"{MAX_DEV_EXAMPLES:,}")
                data.notes.append(f"{n:,} {what} examples: {asked or cap:,} of them are used, sampled with seed "
                                  f"{cfg.seed} ({why})")
    if repeated := repeats_of_training(train, dev, dev_given=bool(cfg.dev)):
        dev.notes.append(repeated)
    return train, dev


_GOLD_FIELDS = ("label", "labels", "tags", "answers", "is_impossible", "id")


def _read_of(example: dict) -> str:
    """What the model reads of an example, its gold answer and its id left out."""
    return json.dumps({k: v for k, v in example.items() if k not in _GOLD_FIELDS}, sort_keys=True, default=str)


def repeated_examples(data: TaskData) -> int:
    """How many examples repeat another one's text word for word (an upload split at random puts copies in
    train and dev alike: the Fine-tune page says so before the run)."""
    counts: dict[str, int] = {}
    for ex in data.examples:
        key = _read_of(ex)
        counts[key] = counts.get(key, 0) + 1
    return sum(c for c in counts.values() if c > 1)


def repeats_of_training(train: TaskData, dev: TaskData, dev_given: bool = False) -> str | None:
    """A sentence when dev examples repeat training ones word for word (a file with duplicate rows, split
    at random, or a dev file that shares rows with the training one): the model was scored on text it trained
    on, and its dev score flatters it."""
    seen = {_read_of(ex) for ex in train.examples}
    repeats = sum(_read_of(ex) in seen for ex in dev.examples)
    if not repeats:
        return None
    # (a dev file given already was told to give "a dev file of its own")
    fix = ("remove from the dev file the rows the training file has too" if dev_given else
           "remove the repeated rows from the file (or give a dev file of its own)")
    return (f"{repeats:,} of the {len(dev.examples):,} dev examples also stand word for word among the training "
            f"examples, so the dev score counts text the model trained on and flatters it; {fix}")


def estimate(cfg: FinetuneConfig, data: TaskData, n_dev: int | None = None, *, threads: int | None = None,
             process_start: bool = True, sample: int = 512) -> dict:
    """How long a run of ``cfg`` will take here (``train.estimate.finetune_estimate``), said before it
    starts (the Fine-tune page, ``bert-explorer finetune``), with the run's own counts. ``data`` is the
    training data as read; without ``n_dev`` (the size of a dev set given apart) the dev set is split
    off it as :func:`read_data` does; each part is sampled down as a run keeps it. The WordPieces are
    counted on up to ``sample`` examples spread over the data, featurised with the model's tokenizer
    as the run featurises them, and padded as its batches pad them (``engine.epoch_batches`` over
    that many lengths drawn from the sample as a full epoch would hold). Adds ``train_examples`` and
    ``dev_examples`` to the estimate, and ``train_available`` and ``dev_available``, the examples before
    sampling."""
    n = len(data.examples)
    if n_dev is None:  # train_dev_split's size of the dev set
        n_dev = min(n - 1, max(1, round(n * cfg.dev_fraction))) if n > 1 else 0
        n_train = n - n_dev
    else:
        n_train = n
    available, n_train = n_train, min(n_train, cfg.max_train_examples or MAX_TRAIN_EXAMPLES)
    dev_available, n_dev = n_dev, min(n_dev, cfg.max_dev_examples or DEV_EXAMPLES)
    step = max(1, n // sample)
    picked = data.examples[::step][:sample]
    tok = WordPieceTokenizer.from_dir(checkpoint.resolve(cfg.model))
    feats = data.task.featurize(picked, tok, label_names_of(data), cfg.max_seq_length, cfg.doc_stride)
    if not feats:
        raise ValueError("the data holds no example to fine-tune on")
    lengths = [padded_length(f) for f in feats]
    seqs = [len(f["input_ids"]) if f["input_ids"] and isinstance(f["input_ids"][0], list) else 1 for f in feats]
    per_example = len(feats) / max(1, len(picked))
    # An epoch's batches over as many features as the run has (drawn from the sample's, with its seed)
    n_feats = max(1, round(n_train * per_example))
    rng = random.Random(cfg.seed)
    drawn = list(range(len(feats))) if n_feats <= len(feats) else [rng.randrange(len(feats)) for _ in range(n_feats)]
    drawn = drawn[:n_feats]
    batches = epoch_batches(len(drawn), cfg.batch_size, cfg.seed, 0, [lengths[i] for i in drawn])
    padded = sum(len(b) * max(lengths[drawn[i]] for i in b) * seqs[drawn[b[0]]] for b in batches)
    tokens = padded / len(drawn) * per_example  # padded WordPieces an example costs in training
    positions = padded / max(1, sum(len(b) * seqs[drawn[b[0]]] for b in batches))
    dev_tokens = sum(l * c for l, c in zip(lengths, seqs)) / max(1, len(picked))  # read shortest first: unpadded
    mean_words = sum(map(words_of, picked)) / max(1, len(picked))
    est = finetune_estimate(cfg.model, n_train, n_dev, cfg.epochs, cfg.batch_size, cfg.max_seq_length, mean_words,
                            len(cfg.lr_grid) or 1, cfg.mode, tokens_per_example=tokens, features_per_example=per_example,
                            seq_len=positions, dev_tokens_per_example=dev_tokens, threads=threads,
                            precision=cfg.precision, process_start=process_start, grad_accum=cfg.grad_accum,
                            eval_every=cfg.eval_every, feature_mode=cfg.features)
    return {**est, "train_examples": n_train, "dev_examples": n_dev, "train_available": available,
            "dev_available": dev_available}


def dev_sample_note(n_dev: int, asked: int | None = None) -> str | None:
    """Where a dev set of ``n_dev`` examples is more than a run scores (``read_data`` samples it down to
    ``asked``, a run's max_dev_examples, else :data:`DEV_EXAMPLES`), how many it scores, in words; else None.
    Said where the dev data is chosen: a score on 2,000 of 9,815 examples read as the whole dev set's."""
    cap = asked or DEV_EXAMPLES
    if n_dev <= cap:
        return None
    return (f"a run scores {cap:,} of the {n_dev:,} dev examples, sampled at random with the run's seed (at most "
            f"{cap:,}, so that scoring after every epoch takes seconds)")


def steps_text(est: dict, cfg: FinetuneConfig) -> str:
    """"12 steps of 32 examples", "1 step of 8 examples" (a batch larger than the data holds all of it)."""
    per = min(cfg.batch_size * cfg.grad_accum, est["train_examples"])
    return f"{est['steps']:,} step{'' if est['steps'] == 1 else 's'} of {per:,} example{'' if per == 1 else 's'}"


# The paper fine-tunes for 3 epochs at batch 32 (Section A.3); its smallest GLUE training set, RTE's 2,490
# examples (GLUE's count), takes 234 steps that way. A run of far fewer steps is said before it starts.
FEW_STEPS = 100


def few_steps_note(n_train: int, cfg: FinetuneConfig) -> str | None:
    """One sentence where ``n_train`` examples give a run of fewer than :data:`FEW_STEPS` optimiser steps at
    ``cfg``'s epochs and batch, else None."""
    steps = total_steps(n_train, cfg.batch_size, cfg.epochs, cfg.grad_accum)
    if n_train <= 0 or steps >= FEW_STEPS:
        return None
    batch, plural = cfg.batch_size * cfg.grad_accum, lambda n: "" if n == 1 else "s"
    return (f"{n_train:,} training example{plural(n_train)} for {cfg.epochs:g} epoch{plural(cfg.epochs)} at batch "
            f"{batch} make only {steps} optimiser step{plural(steps)} "
            "(the paper's 3 epochs at batch 32 gave its smallest task, RTE's 2,490 examples, 234): if the dev score "
            "stays low, give more epochs or a smaller batch")


def label_names_of(train: TaskData) -> list[str] | None:
    """The names the output layer predicts (classes, NER tags): the data's own list, else every
    label the training examples use, sorted; None for values, spans and choices."""
    if train.task.labelled:
        if train.label_names:
            return list(train.label_names)
        values = {t for ex in train.examples for t in train.task.gold_labels(ex)}
        return sorted(map(str, values))
    return None


def _train_one(cfg: FinetuneConfig, lr: float, run: Run, train, dev, label_names, dev_feats, train_feats, dev_obj,
               resume: tuple | None = None):
    """Fine-tune at ``lr`` (``resume``: the checkpoint and training state it goes on from)."""
    torch.manual_seed(cfg.seed)
    task = train.task
    n_out = task.num_outputs(label_names)  # None: the architecture fixes it (QA, multiple choice)
    loaded = checkpoint.load(cfg.model, task.architecture, **({} if n_out is None else {"num_labels": n_out}))
    model = levers.apply(loaded.model.to(dev_obj.device), dev_obj.device, dev_obj.dtype, run.log, run,
                         resumed=resume is not None)
    model.config.problem_type = task.problem_type  # not the base model's
    weights = task.positive_weights(train.examples, label_names, cfg.pos_weight)
    if weights is not None:  # (kept out of the saved model: a training setting, not a weight)
        model.pos_weight = weights.to(dev_obj.device)
        run.log("positive examples weigh " + ", ".join(f"{n} {w:.1f}" for n, w in zip(label_names, weights.tolist()))
                + f" in the loss (pos_weight {cfg.pos_weight})")
    if label_names:
        model.config.id2label = dict(enumerate(label_names))
    optimizer = make_optimizer(model, lr, cfg.weight_decay)
    total = total_steps(len(train_feats), cfg.batch_size, cfg.epochs, cfg.grad_accum)
    scheduler = linear_warmup_decay(optimizer, int(cfg.warmup_fraction * total), total)
    scaler = dev_obj.grad_scaler()
    pad = loaded.tokenizer.pad_id
    resumed = None
    if resume is not None:
        ckpt, state = resume
        best = restore(state, model, optimizer, scheduler, scaler, ckpt)
        resumed = {"job": json.loads(state["job"]), "best_state": best}

    def on_evaluated(step, job):  # a checkpoint to resume from: at every evaluation when asked, and at a Stop
        if step and (cfg.save_checkpoints or job.stop_taken):  # (at step 0 there is nothing to go on from)
            save_checkpoint(run, (model, optimizer, scheduler, scaler), loaded.tokenizer, step, lr, job,
                            (len(train.examples), len(dev.examples)))
    forward = torch.compile(model) if cfg.compile else model  # dev answers and the saved model: the plain one

    def loss_of(indices):  # the BertFor* head computes its task's loss (Section 4)
        batch = task.collate([train_feats[j] for j in indices], pad)
        # whether the batch is padded, known here where it was padded: read on a GPU it would make the
        # host wait (train/trainer.py: no host sync in a step)
        mask = batch.get("attention_mask")
        known = {} if mask is None else {"has_padding": not bool(mask.all())}
        return forward(**{k: v.to(dev_obj.device, non_blocking=True) for k, v in batch.items()}, **known).loss

    def dev_metrics():  # a Stop during it is honoured between batches (fit then measures the model once)
        outputs = task.model_outputs(model, dev_feats, pad, dev_obj.device, autocast=dev_obj.autocast,
                                     stop=run.stop_requested)
        return task.evaluate(dev.examples, dev_feats, outputs, label_names)

    fitted = fit(run, n_train=len(train_feats), batch_size=cfg.batch_size, epochs=cfg.epochs, seed=cfg.seed,
                 loss_of=loss_of, evaluate=dev_metrics, model=model, optimizer=optimizer, scheduler=scheduler,
                 scaler=scaler, autocast=dev_obj.autocast, lr_setting=lr,
                 lengths=[padded_length(f) for f in train_feats],  # batches of similar lengths
                 grad_accum=cfg.grad_accum, evaluating=Evaluating(task.main_metric, cfg.eval_every,
                                                                  cfg.early_stopping_patience,
                                                                  cfg.early_stopping_threshold, cfg.keep_best),
                 resume=resumed, on_evaluated=on_evaluated,
                 items_of=lambda indices: sum(task.loss_items(train_feats[j]) for j in indices))
    if cfg.keep_best and fitted.best_state is not None:
        model.load_state_dict(fitted.best_state)
        run.log(f"kept the model of step {fitted.best_step} ({task.main_metric}={fitted.best[task.main_metric]:.4g}), "
                f"the best of {len(fitted.history)} evaluations" + (f" at lr {lr:g}" if cfg.lr_grid else ""))
    return model, loaded.tokenizer, fitted



def ltr_problem(model: str | Path, task: TaskType | None, mode: str) -> str | None:
    """One sentence when ``model`` is a left-to-right (causal) checkpoint that would be
    fine-tuned through [CLS] on ``task``: under a causal mask the first token sees only itself,
    so such a run cannot learn. None when the pair is fine (or the model cannot be read here)."""
    if mode != "fine-tune" or task is None or not task.reads_cls or hub_names.is_hub_name(str(model)):
        return None
    try:
        causal = json.loads((checkpoint.resolve(model) / "config.json").read_text()).get("causal", False)
    except (checkpoint.CheckpointError, OSError, ValueError):
        return None
    if not causal:
        return None
    what = (f"{Path(str(model)).name} is a left-to-right (LTR) model: under its causal mask [CLS] sees only "
            f"itself, so {task.name} fine-tuning through [CLS] cannot learn")
    if not task.feature_based:  # no BiLSTM head reads every token for it
        return f"{what}; choose a bidirectional checkpoint."
    return (f"{what}; choose the feature-based mode (its BiLSTM reads every token), a bidirectional checkpoint, "
            f"or the Ablation studio's LTR rows (they read the last token).")


def positions_of(model: str) -> int | None:
    """The positions ``model`` has learned (the longest input it reads), from its config alone; None for a
    Hub model not downloaded yet, or one that cannot be read (its run says why)."""
    try:
        config = checkpoint.config_of(model)
    except (checkpoint.CheckpointError, OSError):
        return None
    return None if config is None else config.max_position_embeddings


def check_start(cfg: FinetuneConfig) -> BertConfig | None:
    """What the model alone can refuse, in one sentence, before the data is read or a folder made (a refused
    start leaves nothing): a model that is not there or cannot be read (CheckpointError), a max_seq_length
    longer than its learned positions (every input would be cut there and fail later, as the saved model's
    predictions would), and a batch whose activations cannot fit where it trains. A Hub model not
    downloaded yet is checked by its run, once downloaded (a page must not download it). Returns the model's
    config (None for such a Hub model), for the checks that need the data too."""
    config = checkpoint.config_of(cfg.model)
    if config is None:
        return None
    positions_fit(cfg.max_seq_length, config.max_position_embeddings, f"the model {cfg.model}")
    if cfg.mode == "fine-tune":  # a feature-based run's BERT only reads, without gradients, 64 inputs at a time
        check_batch_fits(config, cfg.batch_size, cfg.max_seq_length, cfg.precision, cfg.device, cfg.model,
                         predicted=0.0)
    return config


def check_folder(run_dir: str | Path, stored_first: bool = True) -> None:
    """A new fine-tuning's folder, refused in one sentence before the data is read or anything written: a
    finished fine-tuning's, a run's of another kind, a file, or a folder of a person's own files (a ``data/``
    too, where no upload was stored there first: ``stored_first`` False)."""
    run = Run(run_dir)
    if run.kind() == "finetune" and ((run.path / "metrics.json").exists() or (run.path / "model").exists()):
        if run.status().get("state") != "finished" and run.resumable_checkpoints():  # (called "finished")
            raise ValueError(f"{run.path} holds a fine-tuning run that stopped before its end; pass --resume to "
                             "continue it or choose a new --output")
        raise ValueError(f"{run.path} already holds a finished fine-tuning run; choose a new --output")
    if refusal := (new_run_refusal(run.path, "finetune", stored_first) or writer_busy(run.path)
                   or restart_refusal(run.path)):
        raise ValueError(refusal)


def data_changed(run_dir: Path, state: dict, train, dev) -> str | None:
    """One sentence where the data a stopped run would resume on is not the data it trained on (its checkpoint's
    counts of training and dev examples), else None."""
    if state["examples"] == [len(train.examples), len(dev.examples)]:
        return None
    return (f"{run_dir} was trained on {state['examples'][0]:,} training and {state['examples'][1]:,} dev examples, "
            f"and its data now gives {len(train.examples):,} and {len(dev.examples):,}: the data changed, so it "
            "cannot resume; start a new run")


def resume_refusal(cfg: FinetuneConfig, run_dir: str | Path) -> str | None:
    """Why the stopped run in ``run_dir`` cannot resume with ``cfg`` (its own settings) on its data as it is now,
    said before a process is started for it (one started on it would fail before it trains, and a page would show
    the stopped run as crashed); None where it can."""
    point = resume_point(run_dir)
    train, dev = read_data(cfg)
    return data_changed(Path(run_dir), point[1], train, dev)


@writes_run("run_dir", "bert-explorer finetune")
def run_finetuning(cfg: FinetuneConfig, run_dir: str | Path, resume: bool = False) -> dict:
    """Fine-tune into ``run_dir``. With ``resume`` a stopped run goes on from its newest checkpoint
    with its own settings (``finetune_resume``: only the device, precision, compile and
    save_checkpoints may be given anew); anything else is refused before anything is written."""
    run, notes, point = Run(run_dir), [], None
    if resume:
        cfg, notes = resume_settings(run.path, asdict(cfg), FinetuneConfig)
        point = resume_point(run.path)
    else:
        check_folder(run.path)
    config = check_start(cfg)
    # Read and check the data before anything is written: a bad file leaves no half-made run.
    train, dev = read_data(cfg)
    if why := ltr_problem(cfg.model, train.task, cfg.mode):
        raise ValueError(why)
    if cfg.mode == "fine-tune" and train.examples and "choices" in train.examples[0]:
        # each example is a sequence per choice (SWAG: 4), which the check before the data could not know
        if config is not None:
            check_batch_fits(config, cfg.batch_size, cfg.max_seq_length, cfg.precision, cfg.device, cfg.model,
                             predicted=0.0, sequences_per_example=len(train.examples[0]["choices"]))
    if point is not None and (changed := data_changed(run.path, point[1], train, dev)):
        raise ValueError(changed)
    label_names = label_names_of(train)
    _check_room(run, cfg, config, resuming=point is not None)
    resumable = cfg.mode == "fine-tune" and len(cfg.lr_grid) <= 1  # (what finetune_resume refuses)
    run.create(asdict(cfg), "finetune")
    # Ctrl-C and SIGTERM are a Stop (runs/signals.py): the run ends at its next step, measured, with its model
    # and the checkpoint a Stop saves; the process then says how to go on and ends as the signal asked. From the
    # moment its status names this process (one between the two was the default's: the run read "crashed").
    with stopping_on_signals(run, resumable):
        for gone in run.clear_leftovers():  # (a checkpoint's write cut off by a kill: 4 times the model, for good)
            run.log(f"removed {gone.relative_to(run.path)}, left by a write that was cut off")
        result = _run(cfg, run, train, dev, label_names, notes, point)
    if run.signalled is not None:  # the process ends as the signal asked, saying how the run goes on
        step, total = result.get("steps", run.step_reached or 0), run.status().get("max_steps")
        if run.status().get("state") == "stopped":
            sentence = (f"{said(run.signalled)} at step {step:,}" + (f" of {total:,}" if total else "")
                        + f", its model so far measured and saved; {what_to_do(run, resumable)}")
        else:  # during the final evaluation or save: nothing was left to stop, and whatever ran it stops too
            sentence = f"{said(run.signalled)} after its last step: the run finished, its model saved"
        run.log(sentence)
        raise StoppedBySignal(run.signalled, sentence)
    return result


def _run(cfg: FinetuneConfig, run: Run, train, dev, label_names, notes: list[str], point) -> dict:
    """The run itself, once its data is read and checked: fine-tuning or feature-based, its result
    written, its status "finished" or "stopped"."""
    run.write_status(state="running", pid=os.getpid(), started=time.time())
    if point is not None:
        for line in [*(f"resuming with {n}" for n in notes), *set_aside_result(run, point[1]["step"])]:
            run.log(line)
        run.log(f"resuming at step {point[1]['step']} from {point[0].relative_to(run.path)}")
    for note in dict.fromkeys(train.notes + dev.notes):  # repairs, skipped rows, sampling: said once each
        run.log(f"note: {note}")
    warning = small_dev_warning(len(dev.examples), counted=train.task.right_or_wrong)
    if warning:
        run.log(f"warning: {warning}")
    if point is None and (few := few_steps_note(len(train.examples), cfg)):
        run.log(f"note: {few}")
    with marks_failure(run), full_disk.saving(run.path, "go on writing the run", AFTER_A_FULL_DISK):
        dev_obj = pick_device(cfg.device, cfg.precision)
        run.write_status(device=dev_obj.name, precision=dev_obj.precision)
        run.log(f"device {dev_obj.name}, precision {dev_obj.precision} (asked: {cfg.precision}), {threads_text()}")
        if cfg.mode == "feature-based":
            result = run_feature_based(cfg, run, train, dev, label_names, dev_obj)
        else:
            result = _fine_tune(cfg, run, train, dev, label_names, dev_obj, point)
        if missed := train.task.never_predicted(result["dev"]):  # (a headline over labels can hide one)
            run.log(f"warning: {missed}")
            warning = f"{warning.rstrip('.')}; {missed}" if warning else missed  # ("trust.; the model never")
        if warning:
            result["warning"] = warning
        # a Stop asked after the last step (during the final evaluation or save) finds nothing left to stop: the
        # run is finished, as trained; it only skips the second pass below, so that it ends at once
        stopped = result.pop("stopped")
        if not stopped and not run.stop_requested():  # the dev set answered example by example by the saved
            # model (After fine-tuning page); after a Stop that second pass is left to the page's first view
            store_dev_predictions(run.path, Predictor(run.path, dev_obj.device).dev_predictions(
                dev.examples, "at the end of training"))
        (run.path / "metrics.json").write_text(json.dumps(result, indent=2) + "\n")
        state = "stopped" if stopped else "finished"
        if state == "finished" and cfg.mode == "fine-tune" and (
                dropped := drop_resume_points(run, kept=cfg.save_checkpoints)):
            run.log(dropped)
        run.clear_stop()
        # (the step it ended at: status.json had it only as of the last log line)
        run.write_status(state=state, finished=time.time(), dev=result["dev"],
                         **({"step": result["steps"]} if "steps" in result else {}))
        return result


def _check_room(run: Run, cfg: FinetuneConfig, config: BertConfig | None, resuming: bool) -> None:
    """Before anything is written: room for what a fine-tuning writes at its fullest, counted from the model's
    config in float32: its model, the checkpoint a Stop saves to resume from (the weights and Adam's two moments;
    two of them while a new one replaces the last, with ``save_checkpoints``), the best model kept beside it
    (``keep_best``), and a quarter more for the file system. A disk too full is one sentence now: it was said
    after every step was trained, and with no checkpoint the run was lost. (A feature-based run writes a small
    head: nothing to count.)"""
    if config is None or cfg.mode != "fine-tune":
        return
    weights = pretraining_parameters(config)[0] * 4
    stop_saves = len(cfg.lr_grid) <= 1  # (a grid cannot resume part-way: a Stop there saves no checkpoint)
    copies = 1 + (6 if cfg.save_checkpoints else 3 if stop_saves else 0) + int(cfg.keep_best)
    needed = weights * copies * 1.25
    if full_disk.free_bytes(run.path) < needed:
        basis = (f"{copies} times the model's {full_disk.size_text(weights)} (the model"
                 + (", two checkpoints with Adam's moments" if cfg.save_checkpoints else
                    ", the checkpoint a Stop saves with Adam's moments" if stop_saves else "")
                 + (", the best model kept" if cfg.keep_best else "") + ") and a quarter more")
        then = resume_after_a_full_disk(run) if resuming else \
            "free some space, or choose a folder on a disk with room, then start it again"
        raise full_disk.DiskFull(full_disk.sentence(run.path, "fine-tune into it", then, needed, basis=basis))


def _fine_tune(cfg: FinetuneConfig, run: Run, train, dev, label_names, dev_obj, point) -> dict:
    """Full fine-tuning at each learning rate of the grid (one without it); the best on dev is saved
    as the run's model/ (Section 4: the paper picks the best learning rate on dev)."""
    tok = checkpoint.load(cfg.model).tokenizer
    train_feats = train.task.featurize(train.examples, tok, label_names, cfg.max_seq_length, cfg.doc_stride)
    dev_feats = dev.task.featurize(dev.examples, tok, label_names, cfg.max_seq_length, cfg.doc_stride)
    run.log(f"{train.task.name}: {len(train.examples)} train / {len(dev.examples)} dev examples from {train.source}")
    best, stopped, tried = None, False, []
    key = train.task.main_metric
    for lr in [point[1]["lr"]] if point else cfg.lr_grid or [cfg.lr]:
        model, tok, fitted = _train_one(cfg, lr, run, train, dev, label_names, dev_feats, train_feats, dev_obj,
                                        point)
        ev = fitted.best if cfg.keep_best else fitted.dev
        tried.append(f"{lr:g} ({ev[key]:.4g})")
        if best is None or ev[key] > best[2][key]:
            best = (lr, model, ev, fitted)
        if fitted.stopped:
            stopped = True
            break  # the rest of the learning-rate grid is not tried
    lr, model, ev, fitted = best
    if dev_obj.dtype is not None and not stopped:
        # the model as saved, scored once more in float32: the run's bf16 evaluation said Pearson r -0.372 where
        # the saved model, After fine-tuning and scipy on its predictions said -0.390 (one model, two scores)
        try:
            outputs = dev.task.model_outputs(model, dev_feats, tok.pad_id, dev_obj.device, stop=run.stop_requested)
            during, ev = ev, dev.task.evaluate(dev.examples, dev_feats, outputs, label_names)
            # (said: the curve's last point and the result differed with no word of why)
            run.log(f"the model kept, scored again in float32: {key}={ev[key]:.4g} (in {dev_obj.precision} during "
                    f"training: {during[key]:.4g})")
        except Interrupted:  # a Stop now: the training precision's figures stand, as for any stopped run
            pass
    if cfg.lr_grid and not point:  # else only metrics.json would say which rate the saved model/ was trained at
        untried = [f"{r:g}" for r in cfg.lr_grid[len(tried):]]
        run.log(f"learning rate {lr:g} kept, the best on dev ({key}={ev[key]:.4g}) of {', '.join(tried)}"
                + (f"; stopped before {', '.join(untried)}" if untried else ""))
    with full_disk.saving(run.path, "save the fine-tuned model", AFTER_A_FULL_DISK,
                          sum(p.numel() * p.element_size() for p in model.parameters())):
        checkpoint.save(model, tok, run.path / "model", extra_files={
            "training_args.json": json.dumps({**asdict(cfg), "lr": lr, "task": train.task.name,
                                              "null_threshold": ev.get("null_threshold")}, indent=2)})
    return {"task": train.task.name, "mode": "fine-tune", "lr": lr, "train_examples": len(train.examples),
            "dev_examples": len(dev.examples), "train_seconds": round(fitted.seconds, 1), "dev": ev,
            "label_names": label_names, "stopped": stopped, "steps": fitted.step,
            **({"best_step": fitted.best_step} if cfg.keep_best else {}),
            **({"early_stopping": fitted.early_stop} if fitted.early_stop else {})}
