"""Fine-tuning-like work (Section 4 and 5.3) on the one trainer (``trainer.py``): full
fine-tuning, the feature-based BiLSTM on frozen activations, and the left-to-right heads of the
ablations differ only in the model and the loss they hand to :func:`fit`.

:func:`fit` gives the trainer an :class:`Epochs` job: the epochs and their shuffled order (batches
of similar lengths when the lengths are given, see :func:`epoch_batches`), a clean stop when the
run's STOP file appears, logging to the run (any ``report.Reporter``: a run folder, or one in
memory), and the dev evaluation after every epoch. :func:`marks_failure` gives every run the same
"failed" status when anything goes wrong.
"""
from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .report import Reporter
from .trainer import Due, Trainer
from ..tasks.base import Interrupted


# What a full disk leaves a fine-tuning-like run with: fit() keeps no checkpoint along the way,
# and the run's model is written only at its end (atomically), so nothing half-made is left.
AFTER_A_FULL_DISK = "fine-tuning keeps no checkpoint to resume from, so start it again once space is freed"


def total_steps(n_examples: int, batch_size: int, epochs: float) -> int:
    """Optimiser steps for ``epochs`` passes over ``n_examples`` (a fraction of an epoch counts)."""
    return max(1, int(math.ceil(n_examples / batch_size) * epochs))


# How many batches' worth of shuffled examples are sorted by length together (see epoch_batches):
# wide enough that a batch finds examples of nearly its own length, narrow enough that which
# examples meet in a batch still changes from epoch to epoch on a large set.
BUCKET_BATCHES = 50
# Lengths are compared in steps of this many tokens: examples a few tokens apart stay mixed in
# their shuffled order. Sorting by the exact length would let a label that adds a token (the "not"
# of a contradiction) sort the batches by label, and batches of one label each train badly.
BUCKET_TOKENS = 8
# Bucketing changes which examples share a batch, and where length goes with the label (short
# sports reports, long tech ones) that costs a little randomness: it is used only when it saves at
# least this fraction of the padded tokens. A set cut to max_seq_length nearly everywhere keeps
# the plain shuffled batches, exactly as without lengths.
BUCKET_MIN_SAVING = 0.1


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, lengths: list[int] | None = None) -> list[list[int]]:
    """The batches of one epoch, as lists of example indices: every example exactly once.

    The examples are shuffled with ``random.Random(seed * 1000 + epoch)`` and cut into batches in
    that order. With ``lengths`` (the tokens each example needs) the batches are *bucketed*: each
    run of ``BUCKET_BATCHES`` batches of the shuffled order is sorted by length in steps of
    ``BUCKET_TOKENS`` (ties keep their shuffled order) before it is cut, and the batches are then shuffled, so a batch holds examples
    of similar lengths and is padded only to its own longest, while the order stays random and
    reproducible. Padding is invisible to the model (masked keys get zero attention), so this
    changes which examples share a batch, not what the model computes for each one."""
    rng = random.Random(seed * 1000 + epoch)
    order = list(range(n))
    rng.shuffle(order)
    plain = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    if lengths is None:
        return plain
    window = batch_size * BUCKET_BATCHES
    batches = []
    for w in range(0, n, window):
        part = sorted(order[w:w + window], key=lambda j: -(-lengths[j] // BUCKET_TOKENS))  # stable: ties stay shuffled
        batches += [part[i:i + batch_size] for i in range(0, len(part), batch_size)]
    rng.shuffle(batches)

    def padded(bs):
        return sum(len(b) * max(lengths[i] for i in b) for b in bs)
    return batches if padded(batches) <= (1 - BUCKET_MIN_SAVING) * padded(plain) else plain


@dataclass
class Fitted:
    step: int                    # optimiser steps taken
    stopped: bool                # a stop was requested before the planned end
    history: list[dict] = field(default_factory=list)  # dev metrics after each epoch
    seconds: float = 0.0

    @property
    def dev(self) -> dict:
        return self.history[-1] if self.history else {}


def fit(run: Reporter, *, n_train: int, batch_size: int, epochs: float, seed: int,
        loss_of: Callable[[list[int]], torch.Tensor], evaluate: Callable[[], dict],
        model: torch.nn.Module, optimizer, scheduler=None, scaler=None, autocast=None,
        clip_grad_norm: float | None = 1.0, lr_setting: float | None = None,
        lengths: list[int] | None = None) -> Fitted:
    """Train for ``epochs`` over ``n_train`` examples and evaluate after each epoch.

    ``loss_of(indices)`` runs the forward pass on those training examples and returns the loss
    (under ``autocast``, the device's mixed precision, when given); ``evaluate()`` returns the dev
    metrics (it may put the model in eval mode: fit puts it back in training mode). The batches of
    epoch e are :func:`epoch_batches` (bucketed by ``lengths`` when given).

    A Stop (the run's STOP file) is honoured between two steps, and inside an evaluation that raises
    ``tasks.base.Interrupted`` (one that asks ``run.stop_requested`` between its batches): the request
    is taken (the STOP file removed, ``Fitted.stopped`` set) and the model is evaluated once as it is,
    so the run ends with a usable, measured model."""
    trainer = Trainer(model, optimizer, scheduler, scaler, autocast or contextlib.nullcontext, clip_grad_norm)
    job = Epochs(run, total_steps(n_train, batch_size, epochs), math.ceil(n_train / batch_size),
                 lambda epoch: epoch_batches(n_train, batch_size, seed, epoch, lengths), loss_of, evaluate, model,
                 {} if lr_setting is None else {"lr_setting": lr_setting}, scheduler)
    stopped = trainer.train(job, job.total)
    if stopped and not job.measured_stop:
        job.evaluate(trainer.step)  # a clean stop: the model as it is now, evaluated (and kept)
    return Fitted(trainer.step, stopped, job.history, time.time() - job.t0)


class Epochs:
    """The job of fine-tuning-like training (``trainer.Job``): the epochs' batches, the log lines,
    an evaluation after each epoch (and at the end, and at a stop), and the dev metrics of each."""

    def __init__(self, run, total: int, per_epoch: int, batches_of, loss_of, evaluate, model, tag: dict,
                 scheduler):
        self.reporter, self.total, self.per_epoch, self.batches_of = run, total, per_epoch, batches_of
        self.loss_of, self.evaluate_dev, self.model, self.tag, self.scheduler = loss_of, evaluate, model, tag, scheduler
        self.log_every = max(1, min(10, total // 20))  # a short run still draws a loss curve, not a dot
        self.history, self.batches, self.t0 = [], {}, time.time()
        self.measured_stop = False  # a Stop taken during an evaluation, which then measured the model once more

    def batch(self, step: int, micro: int) -> list[int]:
        epoch, i = divmod(step, self.per_epoch)  # per_epoch: the batches of one epoch, bucketed or not
        if epoch not in self.batches:  # the epoch's order, made when it starts
            self.batches = {epoch: self.batches_of(epoch)}
            self.model.train()  # the evaluation after the last epoch left it in eval mode
        return self.batches[epoch][i]

    def loss(self, forward, indices: list[int]):
        loss = self.loss_of(indices)
        return loss, {"loss": loss}

    def stop_requested(self, step: int) -> bool:
        if not self.reporter.stop_requested():
            return False
        self.reporter.log(f"stop requested at step {step} of {self.total}")
        self.reporter.clear_stop()  # taken: the evaluation after it runs to its end
        return True

    def due(self, step: int) -> Due:
        end = step == self.total
        return Due(log=step % self.log_every == 0 or end, evaluate=step % self.per_epoch == 0 or end)

    def log(self, step: int, losses: dict, grad_norm: float, seconds: float) -> None:
        rec = {"step": step, "split": "train", **self.tag, "loss": round(losses["loss"], 5),
               **({"lr": self.scheduler.get_last_lr()[0]} if self.scheduler else {}), "time": time.time()}
        self.reporter.log_metrics(rec)
        self.reporter.write_status(step=step, max_steps=self.total, last=rec,
                                   eta_s=round((time.time() - self.t0) / step * (self.total - step)))

    def evaluate(self, step: int) -> tuple[dict, bool]:
        """The dev metrics now, logged and kept; and whether a Stop came during the evaluation."""
        epoch, stopping = len(self.history) + 1, False
        try:
            ev = self.evaluate_dev()
        except Interrupted as e:  # a Stop during an epoch's evaluation: the model as it is, measured once
            self.reporter.log(f"stop requested during the evaluation of epoch {epoch} ({e}) at step {step} of "
                              f"{self.total}")
            self.reporter.clear_stop()
            ev, stopping = self.evaluate_dev(), True
        row = {"step": step, "split": "dev", "epoch": epoch, **self.tag,
               **{k: v for k, v in ev.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
               "time": time.time()}
        self.reporter.log_metrics(row)
        lr = self.tag.get("lr_setting")
        self.reporter.log((f"lr {lr:g} " if lr is not None else "") + f"epoch {epoch}: " + ", ".join(
            f"{k}={v:.4g}" for k, v in row.items() if k not in ("step", "split", "epoch", "time", "lr_setting")))
        self.history.append(ev)
        self.measured_stop = self.measured_stop or stopping
        return ev, stopping

    def frame(self, step: int, measured) -> None:  # fine-tuning records no time-lapse
        pass

    def save(self, step: int, measured) -> None:  # the caller saves the model it keeps
        pass

    def after(self, step: int, losses: dict) -> None:
        pass


@contextlib.contextmanager
def marks_failure(run: Reporter):
    """Any exception inside (Ctrl-C and a native panic included) leaves the run "failed" with
    the reason and the step it reached (``Run.step_reached``), never "running", and is raised on."""
    try:
        yield
    except BaseException as e:
        reached = {} if run.step_reached is None else {"step": run.step_reached}
        run.write_status(state="failed", error=str(e) or type(e).__name__, **reached)
        run.log(f"failed: {e}")
        raise
