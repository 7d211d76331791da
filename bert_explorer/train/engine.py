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
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .report import Reporter
from .trainer import Due, Trainer
from ..runs.run import Run
from ..runs.signals import StoppedBySignal, what_to_do
from ..tasks.base import Interrupted


# What a full disk leaves a fine-tuning-like run with: fit() keeps no checkpoint along the way,
# and the run's model is written only at its end (atomically), so nothing half-made is left.
# (a new folder: the same one, holding what this run logged, is refused)
AFTER_A_FULL_DISK = "fine-tuning keeps no checkpoint to resume from, so start it again in a new folder once space is " \
    "freed"


def total_steps(n_examples: int, batch_size: int, epochs: float, grad_accum: int = 1) -> int:
    """Optimiser steps for ``epochs`` passes over ``n_examples`` (a fraction of an epoch counts); with
    ``grad_accum`` a step reads that many batches (an epoch's last step the ones left, as transformers'
    Trainer does)."""
    return max(1, int(steps_per_epoch(n_examples, batch_size, grad_accum) * epochs))


def steps_per_epoch(n_examples: int, batch_size: int, grad_accum: int = 1) -> int:
    return math.ceil(math.ceil(n_examples / batch_size) / grad_accum)


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


@dataclass(frozen=True)
class Evaluating:
    """When a fine-tuning-like run is evaluated, and what it does with the measurements (the
    settings of transformers' Trainer of the same names in brackets): every ``every`` steps and at
    the end (``eval_strategy="steps"``), or after each epoch when None (``"epoch"``); stop after
    ``patience`` evaluations in a row whose main metric did not beat the best so far by more than
    ``threshold`` (``EarlyStoppingCallback``); keep the weights of the best evaluation, the first of
    equals (``load_best_model_at_end``)."""

    metric: str | None = None    # the metric a run is judged by (the task's main one)
    every: int | None = None
    patience: int | None = None
    threshold: float = 0.0
    keep_best: bool = False


@dataclass
class Fitted:
    step: int                    # optimiser steps taken
    stopped: bool                # a stop was requested (or early stopping ended it) before the planned end
    history: list[dict] = field(default_factory=list)  # dev metrics after each evaluation
    seconds: float = 0.0
    steps: list[int] = field(default_factory=list)     # the step of each evaluation
    best_step: int | None = None  # the evaluation with the best main metric (kept, with keep_best)
    best_state: dict | None = None  # its weights (keep_best), on the CPU
    early_stop: str | None = None  # why early stopping ended the run, or None

    @property
    def dev(self) -> dict:
        return self.history[-1] if self.history else {}

    @property
    def best(self) -> dict:
        return self.history[self.steps.index(self.best_step)] if self.best_step in self.steps else self.dev


def fit(run: Reporter, *, n_train: int, batch_size: int, epochs: float, seed: int,
        loss_of: Callable[[list[int]], torch.Tensor], evaluate: Callable[[], dict],
        model: torch.nn.Module, optimizer, scheduler=None, scaler=None, autocast=None,
        clip_grad_norm: float | None = 1.0, lr_setting: float | None = None,
        lengths: list[int] | None = None, grad_accum: int = 1, evaluating: Evaluating = Evaluating(),
        resume: dict | None = None, on_evaluated: Callable[[int, "Epochs"], None] | None = None,
        items_of: Callable[[list[int]], int] = len) -> Fitted:
    """Train for ``epochs`` over ``n_train`` examples and evaluate as ``evaluating`` says (after each
    epoch by default).

    ``loss_of(indices)`` runs the forward pass on those training examples and returns the loss
    (under ``autocast``, the device's mixed precision, when given); ``evaluate()`` returns the dev
    metrics (it may put the model in eval mode: fit puts it back in training mode). The batches of
    epoch e are :func:`epoch_batches` (bucketed by ``lengths`` when given); a step reads
    ``grad_accum`` of them, each one's mean loss weighed by ``items_of(indices)``, what that mean is over
    (examples by default; a tagging task's labelled words), so that a step is one big batch's (a short last
    batch of an epoch counts its few examples, not a full batch's share). ``on_evaluated(step, job)`` is
    called after each evaluation (a checkpoint to resume from); ``resume`` is :meth:`Epochs.state` of that
    checkpoint, the trainer's step, model, optimiser and random state being restored by the caller.

    A Stop (the run's STOP file) is honoured between two steps, and inside an evaluation that raises
    ``tasks.base.Interrupted`` (one that asks ``run.stop_requested`` between its batches): the request
    is taken (the STOP file removed, ``Fitted.stopped`` set) and the model is evaluated once as it is,
    so the run ends with a usable, measured model."""
    per_epoch = steps_per_epoch(n_train, batch_size, grad_accum)
    trainer = Trainer(model, optimizer, scheduler, scaler, autocast or contextlib.nullcontext, clip_grad_norm)
    job = Epochs(run, total_steps(n_train, batch_size, epochs, grad_accum), per_epoch, grad_accum,
                 lambda epoch: epoch_batches(n_train, batch_size, seed, epoch, lengths), loss_of, evaluate, model,
                 {} if lr_setting is None else {"lr_setting": lr_setting}, scheduler, evaluating, on_evaluated,
                 items_of)
    if resume:
        trainer.step = job.restore(resume["job"], resume.get("best_state"))
    stopped = trainer.train(job, job.total)
    if stopped and not job.measured_stop:
        if job.steps and job.steps[-1] == trainer.step:  # measured at this very step: once is enough
            if on_evaluated is not None:
                on_evaluated(trainer.step, job)
        else:  # a clean stop: the model as it is now, evaluated (and kept)
            job.evaluate(trainer.step, scheduled=False)
    stopped = stopped and job.early_stop is None  # early stopping is how such a run ends, not a stop
    return Fitted(trainer.step, stopped, job.history, time.time() - job.t0, job.steps, job.best_step,
                  job.best_state, job.early_stop)


def time_left(started: float, steps_done: int, steps_to_go: int) -> float:
    """Seconds a run has left at the rate of every step this process has taken (its evaluations and saves
    counted in, as they recur): steadier than the last few steps' rate, which leapt by half at each
    evaluation, and right for a resumed run (counted from its own start)."""
    return (time.time() - started) / max(1, steps_done) * max(0, steps_to_go)


class Epochs:
    """The job of fine-tuning-like training (``trainer.Job``): the epochs' batches, the log lines,
    the evaluations (after each epoch or every N steps, and at the end, and at a stop), early
    stopping and the best evaluation's weights."""

    def __init__(self, run, total: int, per_epoch: int, grad_accum: int, batches_of, loss_of, evaluate, model,
                 tag: dict, scheduler, evaluating: Evaluating = Evaluating(), on_evaluated=None, items_of=len):
        self.reporter, self.total, self.per_epoch, self.grad_accum = run, total, per_epoch, grad_accum
        self.items_of = items_of
        self.batches_of, self.loss_of, self.evaluate_dev, self.model = batches_of, loss_of, evaluate, model
        self.tag, self.scheduler, self.evaluating, self.on_evaluated = tag, scheduler, evaluating, on_evaluated
        self.log_every = max(1, min(10, total // 20))  # a short run still draws a loss curve, not a dot
        self.history, self.steps, self.epoch_batches, self.t0 = [], [], {}, time.time()
        self.t0_step = 0  # the step this process started from (a resumed run's is its checkpoint's)
        self.measured_stop = False  # a Stop taken during an evaluation, which then measured the model once more
        self.stop_taken = False     # a Stop was taken (between steps or during an evaluation)
        self.best_step, self.best_value, self.best_state, self.waited, self.early_stop = None, None, None, 0, None

    def batches(self, step: int) -> list[list[int]]:
        epoch, i = divmod(step, self.per_epoch)  # per_epoch: the steps of one epoch
        if epoch not in self.epoch_batches:  # the epoch's order, made when it starts
            self.epoch_batches = {epoch: self.batches_of(epoch)}
            self.model.train()  # the evaluation after the last epoch left it in eval mode
        return self.epoch_batches[epoch][i * self.grad_accum:(i + 1) * self.grad_accum]

    def loss(self, forward, indices: list[int]):
        loss = self.loss_of(indices)
        return loss, {"loss": loss}

    def shares(self, batches: list[list[int]]) -> list[dict[str, float]]:
        """Each micro-batch's share of the step's loss: its items (``items_of``) over the step's."""
        items = [self.items_of(indices) for indices in batches]
        total = sum(items)
        return [{"loss": n / total if total else 1 / len(batches)} for n in items]

    def stop_requested(self, step: int) -> bool:
        if not self.reporter.stop_requested():
            return False
        self.stop_taken = True
        self.reporter.log(f"stop requested at step {step} of {self.total}")
        self.reporter.clear_stop()  # taken: the evaluation after it runs to its end
        return True

    def due(self, step: int) -> Due:
        end, every = step == self.total, self.evaluating.every
        return Due(log=step % self.log_every == 0 or end,
                   evaluate=end or (step % every == 0 if every else step % self.per_epoch == 0))

    def log(self, step: int, losses: dict, grad_norm: float, seconds: float, lr: float) -> None:
        rec = {"step": step, "split": "train", **self.tag, "loss": round(losses["loss"], 5),
               **({"lr": lr} if self.scheduler else {}), "time": time.time()}
        self.reporter.log_metrics(rec)
        self.reporter.write_status(step=step, max_steps=self.total, last=rec,
                                   eta_s=round(time_left(self.t0, step - self.t0_step, self.total - step)))

    def evaluate(self, step: int, scheduled: bool = True) -> tuple[dict, bool]:
        """The dev metrics now, logged and kept; and whether to stop after them (a Stop came during
        the evaluation, or early stopping's patience ran out). An evaluation a Stop asked for between
        two scheduled ones (``scheduled=False``) is logged but neither a best nor a step of patience:
        a run stopped and resumed then judges the evaluations one that never stopped judges."""
        stopping = False
        try:
            ev = self.evaluate_dev()
        except Interrupted as e:  # a Stop during an evaluation: the model as it is, measured once
            self.reporter.log(f"stop requested during the evaluation at step {step} of {self.total} ({e})")
            self.reporter.clear_stop()
            ev, stopping, self.stop_taken = self.evaluate_dev(), True, True
        self.model.train()  # evaluating put it in eval mode; training goes on with dropout
        # how far through the data, in epochs: the epoch's number at its end, a fraction elsewhere (every N steps,
        # a Stop's evaluation); counting the evaluations instead numbered the epochs after a Stop's one too high
        epoch = step // self.per_epoch if step % self.per_epoch == 0 else round(step / self.per_epoch, 2)
        row = {"step": step, "split": "dev", "epoch": epoch, **self.tag,
               **{k: v for k, v in ev.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
               "time": time.time()}
        self.reporter.log_metrics(row)
        lr = self.tag.get("lr_setting")
        self.reporter.log((f"lr {lr:g} " if lr is not None else "")
                          + (f"step {step}: " if self.evaluating.every else f"epoch {epoch}: ") + ", ".join(
            f"{k}={v:.4g}" for k, v in row.items() if k not in ("step", "split", "epoch", "time", "lr_setting")))
        self.history.append(ev)
        self.steps.append(step)
        stopping = (scheduled and self._judge(step, ev)) or stopping
        self.measured_stop = self.measured_stop or stopping
        if self.on_evaluated is not None:
            self.on_evaluated(step, self)
        return ev, stopping

    def _judge(self, step: int, ev: dict) -> bool:
        """Early stopping against the best before this evaluation (as transformers' callback, which
        runs before the Trainer updates its best), then the best itself: a strictly higher value.
        True: patience has run out."""
        e = self.evaluating
        value = ev.get(e.metric) if e.metric else None
        if value is None:
            return False
        best = self.best_value
        self.waited = 0 if best is None or (value > best and abs(value - best) > e.threshold) else self.waited + 1
        if best is None or value > best:
            self.best_step, self.best_value = step, value
            if e.keep_best:
                self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        if e.patience is not None and self.waited >= e.patience:
            self.early_stop = (f"early stopping at step {step}: {e.metric} has not beaten its best "
                               f"({self.best_value:.4g} at step {self.best_step}) by more than {e.threshold:g} in "
                               f"{self.waited} evaluation{'s' * (self.waited != 1)}")
            self.reporter.log(self.early_stop)
            return True
        return False

    def state(self) -> dict:
        """What a checkpoint keeps of this job, to resume it (JSON; the best weights apart)."""
        return {"history": self.history, "steps": self.steps, "best_step": self.best_step,
                "best_value": self.best_value, "waited": self.waited}

    def restore(self, state: dict, best_state: dict | None = None) -> int:
        """This job as :meth:`state` left it (``best_state``: the kept best weights, when the best was
        an earlier evaluation than the checkpoint's); returns the step it had reached."""
        self.history, self.steps = list(state["history"]), list(state["steps"])
        self.best_step, self.best_value, self.waited = state["best_step"], state["best_value"], state["waited"]
        step = self.steps[-1] if self.steps else 0
        self.t0, self.t0_step = time.time(), step
        if self.evaluating.keep_best:
            self.best_state = best_state if best_state is not None and self.best_step != step else \
                {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return step

    def frame(self, step: int, measured) -> None:  # fine-tuning records no time-lapse
        pass

    def save(self, step: int, measured) -> None:  # the caller saves the model it keeps (on_evaluated)
        pass

    def after(self, step: int, losses: dict) -> None:
        pass


@contextlib.contextmanager
def marks_failure(run: Reporter):
    """Any exception inside (Ctrl-C and a native panic included) leaves the run "failed" with
    the reason and the step it reached (``Run.step_reached``), never "running", and is raised on. A signal
    before the first step is a stop, not a failure (``runs.signals.stopping_on_signals`` says so)."""
    try:
        yield
    except StoppedBySignal as e:
        if not e.before_a_step:
            _failed(run, e)
        raise
    except BaseException as e:
        _failed(run, e)
        raise


_LOST_PEER = re.compile(r"gloo|nccl|connection (reset|closed)|broken pipe|process ?group|timed out", re.IGNORECASE)


def _other_process_lost(e: BaseException) -> int | None:
    """The process count of a torchrun run whose exchange with another process failed (that one was killed or
    died): the error is the collective's, not this process's own; None otherwise."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist.get_world_size() if isinstance(e, RuntimeError) and _LOST_PEER.search(str(e)) else None


def _failed(run: Reporter, e: BaseException) -> None:
    status = run.status() if callable(run.status) else run.status  # (a Run's is read, a MemoryReporter's kept)
    if getattr(run, "signalled", None) is not None and status.get("state") in ("stopped", "finished"):
        return  # a second signal once the stop's end was written and saved: "failed" it was not
    reached = {} if run.step_reached is None else {"step": run.step_reached}
    # Ctrl-C's KeyboardInterrupt says nothing of itself: the log said "failed: " and no more
    reason = str(e) or ("interrupted (Ctrl-C)" if isinstance(e, KeyboardInterrupt) else type(e).__name__)
    if world := _other_process_lost(e):  # (the status said gloo's 20 lines, "Connection reset by peer ... GLHF")
        first = reason.strip().splitlines()[0][:120] if reason.strip() else type(e).__name__
        reason = (f"another process of this {world}-process run stopped answering ({first}); "
                  + (f"{what_to_do(run)}" if isinstance(run, Run) else "start it again"))
    run.write_status(state="failed", error=reason, **reached)
    run.log(f"failed: {reason}")
