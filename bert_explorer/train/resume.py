"""Resuming a pre-training run: which checkpoint it goes on from, and what may change.

A resumed run is the same run: its settings are read back from the checkpoint it resumes from,
only the cadence of logs, evaluations and checkpoints, the device, the precision and max_steps (a
re-planned schedule) may be given anew, and newer checkpoints that cannot be resumed from are set
aside, never trained over.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors import safe_open

from ..data.corpora import user_text_digest
from ..runs.run import Run
from ..tokenizer import WordPieceTokenizer
from .pretrain_config import PretrainConfig, warmup_steps_of
from .report import Reporter


# ----- resuming: what may change ---------------------------------------------------------------
# A resumed run is the same run. Everything that decides its data (corpus, split, vocabulary,
# sequences, masks, batches), its model or its optimisation stays as the run was started; only
# these may be given anew, because they decide when it logs, evaluates and saves, and where the
# arithmetic runs, not what it learns from.
FREE_ON_RESUME = ("log_every", "eval_every", "save_every", "device", "precision", "compile")
# max_steps may change as well: the learning-rate schedule is then re-planned from the resumed
# step (see check_resume), and the log says so.


MEASURED_BY = {"eval_batches", "eval_corpora"}  # settings of the held-out measurement, not of what is trained


class ResumeRefused(ValueError):
    """A resume asked to change settings that decide the run's data or schedule. ``changed``
    maps each such setting to (asked, the run's own)."""

    def __init__(self, run_dir, changed: dict[str, tuple]):
        self.run_dir, self.changed = Path(run_dir), changed
        super().__init__(self.sentence())

    def sentence(self, spell=lambda name: name) -> str:
        """The refusal in one sentence; ``spell`` writes a setting's name (the CLI: as its --flag)."""
        def show(v):
            return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
        what = ", ".join(f"{spell(k)} {show(a)} (the run's: {show(s)})" for k, (a, s) in self.changed.items())
        # (eval_batches decides the held-out measurement, not the training: its curve would change measure mid-run)
        changes = ("the held-out measurement its curves have drawn so far" if set(self.changed) <= MEASURED_BY
                   else "the data or the schedule it has already trained on")
        return (f"{self.run_dir} resumes with the settings it was started with, and {what} would change {changes}; "
                f"leave {'them' if len(self.changed) > 1 else 'it'} out to resume, or start a new run in another "
                "folder")


@dataclass
class ResumePoint:
    """Where a resumed run goes on from: ``checkpoint`` (None before the first one, at step 0), and the
    newer checkpoints that cannot be resumed from (``skipped``: their folders, with ``why``), which a
    resume moves to ``set_aside/`` rather than train over them."""
    checkpoint: Path | None
    step: int
    skipped: list[Path]
    why: list[str]

    def said(self) -> str | None:
        """The log's sentence on what a resume from an older checkpoint costs, or None."""
        if not self.skipped:
            return None
        newest = int(self.skipped[-1].name[5:])
        return (f"{'; '.join(self.why)}: {'they are' if len(self.skipped) > 1 else 'it is'} moved to set_aside/ "
                f"and the run resumes from step {self.step}, so steps {self.step + 1}-{newest} are trained again")


# What a training state holds (``_save``): a file without these keys is not one.
STATE_KEYS = ("step", "optimizer", "scheduler", "scaler", "torch_rng")


def why_not_loadable(ckpt: Path) -> str | None:
    """Why the weights or the vocabulary of a checkpoint cannot be read, or None. The weights' header is checked
    against the file's length, the vocabulary read (a run whose checkpoints had lost it was resumed: its settings
    and state were rewritten before the vocabulary was missed, and it was left "failed")."""
    try:
        with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
            f.keys()
    except Exception as e:
        return f"{ckpt.name}'s model.safetensors cannot be read ({str(e).splitlines()[0][:80]})"
    try:
        WordPieceTokenizer.from_dir(ckpt)
    except (OSError, ValueError) as e:
        return f"{ckpt.name}'s vocabulary cannot be read ({str(e).splitlines()[0][:80]})"
    return None


def _why_not_resumable(ckpt: Path, step: int) -> str | None:
    """Why the checkpoint of ``step`` cannot be resumed from, or None. Cheap: the state is mapped, not
    read (a file cut short has no zip directory at its end); then its weights and vocabulary
    (:func:`_why_not_loadable`)."""
    state_file = ckpt / "training_state.pt"
    if not state_file.is_file():
        return f"{ckpt.name} keeps no training_state.pt"
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # a file cut short, or not a torch file at all: any of several errors
        return f"{ckpt.name}'s training_state.pt cannot be read ({str(e).splitlines()[0][:80]})"
    if not isinstance(state, dict) or not all(k in state for k in STATE_KEYS) or state["step"] != step:
        return f"{ckpt.name}'s training_state.pt is not the training state of step {step}"
    return why_not_loadable(ckpt)


def resume_point(run_dir) -> ResumePoint:
    """The newest checkpoint of a run that can be resumed from (its training state, weights and vocabulary
    read whole), with the newer ones that cannot. Two checkpoints keep their training state (``_save``), so
    losing the newest state costs one save interval. A run whose checkpoints none can resume from is
    refused (ValueError): training again from step 0 would write over them."""
    run = Run(run_dir)
    found = run.checkpoints()
    if not found:
        return ResumePoint(None, 0, [], [])
    why = []
    for step, ckpt in reversed(found):
        problem = _why_not_resumable(ckpt, step)
        if problem is None:
            newer = sorted((p for p in (run.path / "checkpoints").glob("step-*")
                            if p.name[5:].isdigit() and int(p.name[5:]) > step), key=lambda p: int(p.name[5:]))
            return ResumePoint(ckpt, step, newer, why)
        why.append(problem)
    # the newest weights a new run can start from (the newest folder's may be the damaged ones: --init refused it)
    usable = next((ckpt for _, ckpt in reversed(found) if why_not_loadable(ckpt) is None), None)
    raise ValueError(f"{run.path} cannot resume: none of its checkpoints can be resumed from ({'; '.join(why)}), and "
                     "training again from step 0 would write over them; "
                     + (f"start a new run that warm-starts from its last readable weights (init {usable}), or delete "
                        "this one" if usable is not None else "no checkpoint's weights and vocabulary read either, so "
                        "start a new run in another folder, or delete this one"))


def saved_settings(run_dir, point: ResumePoint | None = None) -> tuple[PretrainConfig, int]:
    """(the settings a run's training so far used, the step it resumes from). They are read from
    the checkpoint it resumes from (``training_args.json``, written with the weights; see
    :func:`resume_point`), else, when it stopped before its first checkpoint, from its ``config.json``.
    A file that is not valid JSON, or holds a setting training cannot use, is named in one sentence."""
    run = Run(run_dir)
    point = point or resume_point(run.path)
    args_file = point.checkpoint / "training_args.json" if point.checkpoint else run.path / "config.json"
    if not args_file.is_file():
        raise ValueError(f"{run.path} holds no pre-training run to resume; leave out --resume to start one there")
    try:
        saved = json.loads(args_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{args_file} is not valid JSON ({e}); mend it (or put back the file the run wrote) to "
                         "resume") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{args_file} must hold a JSON object of settings; mend it to resume")
    if saved.get("kind", "pretrain") != "pretrain":
        raise ValueError(f"{run.path} is a {saved['kind']} run, not a pre-training run")
    try:
        return PretrainConfig.from_dict(saved, strict=False), point.step
    except (ValueError, TypeError) as e:
        raise ValueError(f"{args_file} holds settings that training cannot use: {e}; mend the file to resume") from None


def check_resume(run_dir, saved: PretrainConfig, asked: PretrainConfig, step: int) -> tuple[PretrainConfig, list[str]]:
    """The settings a run resumed at ``step`` trains with: ``saved`` (its own), with the settings of
    ``asked`` that may change (FREE_ON_RESUME, max_steps), and a sentence for the log on each change.
    Raises ResumeRefused naming every other setting that differs, and ValueError when max_steps
    does not lie beyond ``step``.

    A new ``max_steps`` re-plans the learning-rate schedule from ``step``: the warm-up keeps its
    length and the linear decay now reaches zero at the new last step, as if the run had been
    planned that long from the start (the rate at ``step`` is that plan's, which the log gives)."""
    # by the settings' flat names, the masking ones included (a changed mask_ratio is named as such)
    mine, theirs = saved.to_dict(), asked.to_dict()
    fixed = [k for k in mine if k not in FREE_ON_RESUME + ("max_steps",)]
    changed = {k: (theirs[k], mine[k]) for k in fixed if theirs[k] != mine[k]}
    # No warm-up given means the run's own; a re-planned run states it as a number (10% of its first plan).
    if "warmup_steps" in changed and asked.warmup_steps in (None, warmup_steps_of(saved)):
        del changed["warmup_steps"]
    if changed:
        raise ResumeRefused(run_dir, changed)
    cfg, notes = saved, []
    for k in FREE_ON_RESUME:
        if getattr(asked, k) != getattr(saved, k):
            notes.append(f"{k} {getattr(saved, k)} -> {getattr(asked, k)} (it changes neither the data nor the schedule)")
            cfg = replace(cfg, **{k: getattr(asked, k)})
    if asked.max_steps != saved.max_steps:
        if asked.max_steps <= step:
            raise ValueError(f"{Path(run_dir)} is already at step {step}, so max_steps {asked.max_steps} leaves "
                             f"nothing to train; ask for more than {step} steps")
        cfg = replace(cfg, max_steps=asked.max_steps)
        if step:  # steps have run: keep their warm-up, whatever the new length would make of "10%"
            warmup = warmup_steps_of(saved)
            cfg = replace(cfg, warmup_steps=warmup)
            notes.append(f"max_steps {saved.max_steps} -> {asked.max_steps}: the learning-rate schedule is re-planned "
                         f"from step {step}: the warm-up stays {warmup} step{'s' if warmup != 1 else ''} and the rate "
                         f"now falls linearly to 0 at step {asked.max_steps} instead of {saved.max_steps}")
    return cfg, notes


def resume_settings(run_dir, changes: dict | None = None) -> tuple[PretrainConfig, list[str]]:
    """What ``bert-explorer pretrain --output RUN --resume`` and the Pre-train page's Resume train
    with: the run's own settings, with ``changes`` (the settings the user gave) applied where a
    resume allows them (:func:`check_resume`)."""
    saved, step = saved_settings(run_dir)
    try:
        asked = PretrainConfig.from_dict({**saved.to_dict(), **(changes or {})}, strict=False)
    except ValueError:  # a change that a resume refuses anyway is said as such (--mask-ratio 0.8 alone was "ratios
        mine = saved.to_dict()  # must sum to 1, got (0.8, 0.2, 0.1)", a sum the user never set)
        changed = {k: (v, mine[k]) for k, v in (changes or {}).items()
                   if k in mine and k not in FREE_ON_RESUME + ("max_steps",) and v != mine[k]}
        if changed:
            raise ResumeRefused(run_dir, changed) from None
        raise
    return check_resume(run_dir, saved, asked, step)


def set_lr_to_schedule(optimizer, scheduler, step: int, run: Reporter | None) -> None:
    """Set the learning rate of the next update to the schedule's value at ``step``. The
    optimiser's saved state holds the rate of the plan it was saved under; when max_steps was
    changed on resume (check_resume), the schedule is re-planned and the two differ: the log
    says by how much."""
    planned = [base * factor(step) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    before = [g["lr"] for g in optimizer.param_groups]
    if all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15) for a, b in zip(before, planned)):
        return
    for group, lr in zip(optimizer.param_groups, planned):
        group["lr"] = lr
    scheduler._last_lr = planned  # what get_last_lr() reports until the next step
    if run is not None:
        run.log(f"learning rate at step {step}: {before[0]:.3g} under the old plan, {planned[0]:.3g} under the new one")


WORLD_SIZE_KEY = "world_size"  # in a checkpoint's training_args.json: how many processes trained it


def world_size_refusal(run_dir: Path, latest: Path, world_size: int) -> str | None:
    """Why a resume by ``world_size`` processes may not go on from ``latest``, or None. Step s reads the
    sequences from ((s·grad_accum + micro)·world_size + rank)·batch_size on: with another number of processes
    a resume would read sequences trained already, skip others, and step with another batch. The number is
    the checkpoint's (else, for a checkpoint saved before it was kept, the run's status)."""
    try:
        saved = json.loads((latest / "training_args.json").read_text(encoding="utf-8")).get(WORLD_SIZE_KEY)
    except (OSError, ValueError, AttributeError):
        saved = None
    if not isinstance(saved, int):
        saved = Run(run_dir).status().get("world_size")
    if not isinstance(saved, int) or saved == world_size:
        return None
    again = (f"`torchrun --nproc_per_node {saved} -m bert_explorer.cli pretrain --output {run_dir} --resume`"
             if saved > 1 else f"`bert-explorer pretrain --output {run_dir} --resume` (without torchrun)")
    return (f"{run_dir} was trained by {saved} process(es) and this resume runs {world_size}: each step reads its "
            f"data from a place set by their number, so it would read sequences trained already and step with "
            f"another batch; resume it with {saved}: {again}")


def text_changed(run_dir: str | Path, cfg: PretrainConfig) -> str | None:
    """One sentence where the user's text the run ``run_dir`` started on (its digest, recorded at its start) is not
    what ``cfg.corpus`` names now, said before a resume writes anything; else None (a run of built-in corpora, or
    one started before digests were recorded: its sequences are counted once they are built)."""
    was = Run(run_dir).status().get("corpus_sha256")
    now = user_text_digest(cfg.corpus) if was else None
    if not was or now is None or was == now:  # (a file no longer there is the corpus check's to say)
        return None
    return (f"{run_dir} was trained on text that {cfg.corpus} no longer holds: the text changed since it stopped, so "
            "it cannot resume; put the text back as it was, or start a new run")


def data_changed(run: Reporter, data) -> str | None:
    """One sentence where a resumed run's corpus now gives other sequences than the run trained on (the counts its
    start recorded: the same settings over the same text give the same ones), else None. A corpus file edited
    after a stop made a resume train on another split with nothing said."""
    status = run.status() if callable(run.status) else run.status
    was = (status.get("train_sequences"), status.get("held_out_sequences"))
    if None in was or was == (len(data.train), len(data.held)):
        return None
    return (f"{getattr(run, 'path', 'the run')} was trained on {was[0]:,} training and {was[1]:,} held-out sequences, "
            f"and its corpus now gives {len(data.train):,} and {len(data.held):,}: the text changed since it "
            "stopped, so it cannot resume; put the text back as it was, or start a new run")
