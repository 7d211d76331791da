"""What every GPU step shares: the context a step runs in, what it reports, a pre-training that
stops at the command's deadline, and the light copy of a folder that comes back. It lies below the
steps, the side-by-side runner and the sweep, which all use it."""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bert_explorer.runs.run import Run
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig


@dataclass
class Context:
    """What a step gets from the session."""

    work: Path                 # this step's folder (kept on the machine between commands)
    travel: Path               # the prepared inputs (travel.py)
    state: Path | None         # this step's carried state from an earlier machine (travel.join), if any
    deadline: float            # time.time() by which the step must have stopped
    dry_run: bool
    say: Callable[[str], None] = print
    stop_files: list[Path] = field(default_factory=list)  # touched at the deadline
    state_root: Path | None = None  # every step's carried state (another step's result is read there)

    @property
    def returns(self) -> Path:
        d = self.work / "return"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def seconds_left(self) -> float:
        return self.deadline - time.time()


@dataclass
class Outcome:
    state: str                 # finished | stopped | failed
    summary: dict = field(default_factory=dict)
    resume: str | None = None  # the folder inside return/ that the next machine continues from


class _Heartbeat:
    """A line every ``every`` seconds while a run trains (the command's printout is its only
    live view), and the deadline turned into the run's STOP file."""

    def __init__(self, ctx: Context, run_dir: Path, max_steps: int, every: float = 30.0):
        self.ctx, self.run_dir, self.max_steps, self.every = ctx, run_dir, max_steps, every
        self.last, self.last_step = time.time(), None

    def __call__(self, step: int, losses: dict) -> None:
        now = time.time()
        if now >= self.ctx.deadline and not (self.run_dir / "STOP").exists():
            self.ctx.say(f"  deadline of this command reached at step {step}: stopping cleanly (a checkpoint is saved)")
            (self.run_dir / "STOP").touch()
        if self.last_step is None:
            self.last, self.last_step = now, step
        elif now - self.last >= self.every:
            ms = 1e3 * (now - self.last) / max(1, step - self.last_step)  # evaluations and saves included
            self.last, self.last_step = now, step
            self.ctx.say(f"  step {step:,}/{self.max_steps:,}  loss {losses.get('loss', 0):.3f}  {ms:.0f} ms/step  "
                         f"({self.ctx.seconds_left():.0f} s left in this command)")


def copy_run_files(run_dir: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "status.json", "metrics.jsonl", "log.txt"):
        if (run_dir / name).is_file():
            shutil.copy(run_dir / name, into / name)


def pretrain(ctx: Context, settings: dict, run_dir: Path) -> dict:
    run = Run(run_dir)
    resume = run.latest_checkpoint() is not None
    if resume:
        ctx.say(f"  resuming {run_dir} from {run.latest_checkpoint().name}")
    elif run.checkpoints():  # checkpoints without optimiser state: a resume is impossible; start over
        shutil.rmtree(run_dir / "checkpoints")
    if run_dir.exists():
        run.clear_stop()  # left by a command that reached its deadline
    cfg = PretrainConfig.from_dict(settings)
    return run_pretraining(cfg, run_dir, resume=resume, progress=False,
                           on_step=_Heartbeat(ctx, run_dir, cfg.max_steps))


# What of an ablation folder comes back and travels again: everything but models, vocabularies,
# generated data (a later command makes them again where it needs them) and the cells' dev
# predictions (15 of paper-mini's 15.3 MiB; the report reads only results.jsonl).
_HEAVY = ("checkpoints", "model", "feature_head", "tokenizer", "data", "vocab", "dev_predictions.json")


def light_copy(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n in _HEAVY or n.endswith(".lock")
                                                       or n == "STOP"])
