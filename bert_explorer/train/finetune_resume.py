"""Checkpoints of a fine-tuning run, and resuming one with pre-training's rules.

A checkpoint is written at an evaluation (every one with ``save_checkpoints``; always at a Stop):
``checkpoints/step-N/`` holds the model as transformers loads it and ``training_state.pt`` (the
optimiser, the schedule, the loss scaler, the random states, the learning rate, and where the
evaluations stood: each one's metrics, the best, early stopping's count). The newest is kept; with
``keep_best`` the best evaluation's weights are kept beside it in ``checkpoints/best/``.

A resumed run is the same run: its settings are read back from its ``config.json``, and only those
that decide where and in what arithmetic it runs may be given anew (:data:`FREE_ON_RESUME`);
anything else is refused in one sentence, as are a finished run, a run with no checkpoint, a
learning-rate grid and the feature-based mode. What the stopped run left as its result (``model/``,
``metrics.json``, its dev answers) and the metric lines after the checkpoint are moved to
``set_aside/``, never written over.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict, replace
from pathlib import Path

import torch

from .. import checkpoint, full_disk
from ..runs.run import KIND_WORDS, Run
from .optim import load_optimizer_state
from .resume import ResumeRefused, STATE_KEYS, why_not_loadable

FREE_ON_RESUME = ("device", "precision", "compile", "save_checkpoints")
STATE_FILE = "training_state.pt"
RESULT_FILES = ("model", "metrics.json", "dev_predictions.json")


def save_checkpoint(run: Run, trainer_parts: tuple, tok, step: int, lr: float, job, examples: tuple[int, int]) -> Path:
    """Write the checkpoint of ``step`` (``trainer_parts``: model, optimiser, schedule, scaler) and
    remove the older ones; with a kept best that is not this step, its weights too."""
    model, optimizer, scheduler, scaler = trainer_parts

    def write_state(d: Path):
        with open(d / STATE_FILE, "wb") as f:  # through a Python file: a full disk says ENOSPC
            torch.save({"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                        "scaler": scaler.state_dict() if scaler is not None else {},
                        "torch_rng": torch.get_rng_state(),
                        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                        "lr": lr, "job": json.dumps(job.state()), "examples": list(examples)}, f)

    folder = run.path / "checkpoints"
    bytes_needed = sum(p.numel() * p.element_size() * 3 for p in model.parameters())
    with full_disk.saving(run.path, f"save the checkpoint of step {step}", lambda: resume_after_a_full_disk(run),
                          bytes_needed):
        path = checkpoint.save(model, tok, folder / f"step-{step}", write_extra=write_state)
        if job.best_state is not None and job.best_step != step:  # the best is an earlier step's: kept apart
            best = copy.deepcopy(model)
            best.load_state_dict(job.best_state)
            checkpoint.save(best, tok, folder / "best")
        elif (folder / "best").exists():  # the best is this step's: an older best folder would mislead a resume
            _remove(folder / "best")
    for older in [p for s, p in run.checkpoints() if s < step]:  # this run's own, superseded
        _remove(older)
    return path


def drop_resume_points(run: Run, kept: bool) -> str | None:
    """At the end of a run, what only a resume could use: a finished run cannot be resumed. Not asked to keep
    checkpoints (not ``kept``), the ones its Stops saved go, whole: each holds the optimiser's state beside
    the weights, about four times the model's size, and the sidebar would offer it as a model. Asked to keep
    them, their weights stay and their training state goes (182 MB of a 273 MB checkpoint of a small model).
    The sentence for the log."""
    folder = run.path / "checkpoints"
    if not folder.is_dir():
        return None
    if not kept:  # the resume points only (a checkpoint holding a training state), and the best kept beside
        # them (model/ holds it now): a checkpoint without one, or anything else in the folder, stays
        points = [(s, ckpt) for s, ckpt in run.checkpoints() if (ckpt / STATE_FILE).is_file()]
        for _, ckpt in points:
            _remove(ckpt)
        if points and (folder / "best" / "model.safetensors").is_file():
            _remove(folder / "best")
        if not any(folder.iterdir()):
            folder.rmdir()
        return (f"removed the checkpoint a Stop saved to resume from ({', '.join(f'step-{s}' for s, _ in points)}): "
                "the run finished, its model is in model/ (--save-checkpoints keeps them)") if points else None
    steps = [s for s, _ in run.checkpoints()]
    named = ", ".join(f"step-{s}" for s in steps) or "its folder"
    states = [p for _, ckpt in run.checkpoints() if (p := ckpt / STATE_FILE).is_file()]
    for p in states:
        p.unlink()
    return (f"removed the training state of {named} ({STATE_FILE}: the optimiser's, to resume from; the run "
            "finished): their weights are kept") if states else None


def _remove(folder: Path) -> None:
    for f in sorted(folder.rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    folder.rmdir()


def resume_after_a_full_disk(run: Run) -> str:
    return (f"the run's last good checkpoint (if any) is in {run.path / 'checkpoints'}, and `bert-explorer finetune "
            f"--output {run.path} --resume` continues from it once space is freed")


def resume_settings(run_dir, asked: dict, config_cls):
    """(the run's own settings with what may change applied, the sentences for the log) of a fine-tuning
    run resumed with the settings ``asked`` (the ones a person gave: the rest are the run's)."""
    run = Run(run_dir)
    saved = run.config()
    if saved.get("kind") in KIND_WORDS and saved.get("kind") != "finetune":  # (starting one there is refused too)
        raise ValueError(f"{run.path} holds a {KIND_WORDS[saved['kind']]} run, not a fine-tuning; resume it with "
                         f"`bert-explorer {saved['kind']} --output {run.path} --resume`, or give this fine-tuning a "
                         "new --output")
    if saved.get("kind") != "finetune":
        raise ValueError(f"{run.path} holds no fine-tuning run to resume; leave out --resume to start one there")
    state = run.status().get("state")
    if state == "finished":
        raise ValueError(f"{run.path} is a finished fine-tuning run: there is nothing left to train; start a new run "
                         "in another folder")
    mine = config_cls.from_dict({k: v for k, v in saved.items() if k != "kind"}, strict=False)
    theirs = config_cls.from_dict({**asdict(mine), **asked}, strict=False)
    changed = {k: (getattr(theirs, k), getattr(mine, k)) for k in asdict(mine)
               if k not in FREE_ON_RESUME and getattr(theirs, k) != getattr(mine, k)}
    if changed:
        raise ResumeRefused(run.path, changed)
    if len(mine.lr_grid) > 1:
        raise ValueError(f"{run.path} tries {len(mine.lr_grid)} learning rates: a grid cannot resume part-way; start "
                         "it again, or resume runs of one learning rate")
    if mine.mode != "fine-tune":
        raise ValueError(f"{run.path} is a feature-based run, which keeps no checkpoint (its BERT features are cached, "
                         "so starting it again is quick); start a new run")
    notes, cfg = [], mine
    for k in FREE_ON_RESUME:
        if getattr(theirs, k) != getattr(mine, k):
            notes.append(f"{k} {getattr(mine, k)} -> {getattr(theirs, k)} (it changes neither the data nor the "
                         "schedule)")
            cfg = replace(cfg, **{k: getattr(theirs, k)})
    return cfg, notes


def resume_point(run_dir) -> tuple[Path, dict]:
    """(the newest checkpoint whose training state reads whole, that state); refused in one sentence
    when there is none."""
    run = Run(run_dir)
    why = []
    for step, ckpt in reversed(run.checkpoints()):
        try:
            state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            why.append(f"{ckpt.name} keeps no {STATE_FILE}")
            continue
        except Exception as e:  # a file cut short, or not a torch file: any of several errors
            why.append(f"{ckpt.name}'s {STATE_FILE} cannot be read ({str(e).splitlines()[0][:80]})")
            continue
        if not (isinstance(state, dict) and all(k in state for k in STATE_KEYS + ("job", "lr"))
                and state["step"] == step):
            why.append(f"{ckpt.name}'s {STATE_FILE} is not the training state of step {step}")
        elif problem := why_not_loadable(ckpt):  # (found after its result was set aside and the run marked failed)
            why.append(problem)
        else:
            return ckpt, state
    detail = f" ({'; '.join(why)})" if why else ""
    # (a new folder: the same one is refused, it holds what this run logged)
    raise ValueError(f"{run.path} kept no checkpoint to resume from{detail}: a run saves one when it is stopped, "
                     "and at every evaluation with --save-checkpoints; start it again in a new folder")


def set_aside_result(run: Run, step: int) -> list[str]:
    """Move what the stopped run left as its result, and the metric lines after ``step``, to
    ``set_aside/``; the sentences for the log."""
    said = []
    for name in RESULT_FILES:
        if (run.path / name).exists():
            moved = run.set_aside(run.path / name)
            said.append(f"moved {name} (the stopped run's result) to {moved.relative_to(run.path)}")
    if moved_lines := run.set_aside_metrics_after(step):
        said.append(f"moved {moved_lines} line(s) of metrics.jsonl logged after step {step} to "
                    f"set_aside/metrics-after-step-{step}.jsonl")
    return said


def restore(state: dict, model, optimizer, scheduler, scaler, ckpt: Path) -> dict | None:
    """The model, optimiser, schedule, scaler and random states as the checkpoint left them; returns
    the kept best weights (None: the best was the checkpoint's own step, or nothing was kept)."""
    model.load_state_dict(checkpoint.load(ckpt, type(model).__name__).model.state_dict())
    load_optimizer_state(optimizer, state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and (state["scaler"] or not scaler.is_enabled()):
        scaler.load_state_dict(state["scaler"])
    best = ckpt.parent / "best"
    kept = checkpoint.load(best, type(model).__name__).model.state_dict() if (best / "model.safetensors").exists() else None
    # The random states last: building the kept model above draws its initial weights from them.
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return kept
