"""The one trainer: pre-training (``pretrain.py``) and fine-tuning (full, feature-based, the
left-to-right heads: ``engine.py``) take every step here, and a step reads top to bottom in
:meth:`Trainer.train`.

A step: its batch, in micro-batches whose gradients add up (gradient accumulation: Appendix A.2's
batch of 256 sequences on hardware that holds fewer; each micro-batch's mean loss weighed by its items, its
masked tokens or labelled words, so that the step is the one big batch's), the forward pass under the
device's autocast, the objective's or the task's loss, the scaled backward pass (a loss scaler for fp16; a no-op
otherwise), then the update: unscale, clip the global gradient norm, the optimiser's step (the
scaler skips a step whose fp16 gradients overflowed), the schedule's step. After it, whatever is
due at the step reached: a log line, an evaluation, a time-lapse frame, a checkpoint.

What differs between pre-training and fine-tuning is the *job* (:class:`Job`): which examples a
batch holds, what its loss is, and what logging, evaluating, recording and saving mean for it.
Device, precision and scaler are the trainer's, written once. Why not Lightning Fabric or
Accelerate: docs/DESIGN.md.

**No host sync in a step.** On a GPU, reading a number the GPU computed (``.item()``, ``float()``,
a shape that depends on values) makes the host wait until every kernel queued before it has run. A
step that waited so could not prepare the next batch while the GPU still works on this one. So the
losses and the gradient norm stay on the device as tensors (:class:`Losses`) and become numbers only
where a step is logged, evaluated, recorded or saved, or where a caller reads them; the GPU's queue is
emptied (``synchronize``) only at those steps, so the seconds a log line counts are still the steps'
own.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from . import heap
from .report import Reporter


class Losses(Mapping):
    """A step's losses by name, kept as device tensors until first read; then numbers (one host
    sync for all of them). ``read`` says whether they have become numbers already."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self._tensors, self._values = tensors, None

    @property
    def read(self) -> bool:
        return self._values is not None

    def _numbers(self) -> dict[str, float]:
        if self._values is None:
            names = list(self._tensors)
            values = torch.stack([self._tensors[n].float() for n in names]).tolist() if names else []
            self._values = dict(zip(names, values))
        return self._values

    def __getitem__(self, name: str) -> float:
        return self._numbers()[name]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


@dataclass(frozen=True)
class Due:
    """What a job does after a step."""

    log: bool = False
    evaluate: bool = False
    frame: bool = False
    save: bool = False


class Job(Protocol):
    """What one kind of training gives the trainer (``pretrain.Pretraining``, ``engine.Epochs``)."""

    reporter: Reporter

    def stop_requested(self, step: int) -> bool: ...  # asked before each step (a user's Stop, SIGTERM)

    def batches(self, step: int) -> list: ...  # the micro-batches of ``step`` (gradients add up)

    def loss(self, forward, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...  # (the loss, its parts)

    # for each micro-batch of ``batches``, the share of the step each part of its loss carries ({part: share};
    # the loss is the sum of those parts): a mean over a micro-batch's items (its masked tokens, its labelled
    # sequences or words) weighed by its items over the step's makes the step one big batch's
    def shares(self, batches: list) -> list[dict[str, float]]: ...

    def due(self, step: int) -> Due: ...

    def log(self, step: int, losses: dict[str, float], grad_norm: float, seconds: float, lr: float) -> None: ...

    def evaluate(self, step: int) -> tuple[dict | None, bool]: ...  # (the measurement, stop after it)

    def frame(self, step: int, measured: dict | None) -> None: ...

    def save(self, step: int, measured: dict | None) -> None: ...

    def after(self, step: int, losses: Losses) -> None: ...  # a progress bar, a caller's on_step


def _mean_over_ranks(parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each part of a step's loss averaged over the processes of a DDP run (every rank calls it at the same step)."""
    import torch.distributed as dist

    names = sorted(parts)
    both = torch.stack([parts[name].detach().float() for name in names])
    dist.all_reduce(both)
    return dict(zip(names, both / dist.get_world_size()))


class Diverged(ValueError):
    """The training loss stopped being a number: the weights are lost to it, and more steps cannot mend them."""


@dataclass
class Trainer:
    """The model and what updates it: the optimiser and schedule, the loss scaler and the autocast
    of the device's precision, gradient clipping; ``step`` is the updates done (restored on a
    resume)."""

    model: torch.nn.Module             # the plain module: clipped, measured, saved
    optimizer: torch.optim.Optimizer
    scheduler: object = None           # a learning-rate schedule stepped after each update, or None
    scaler: object = None              # torch.amp.GradScaler; None: a disabled one (fp32, bf16)
    autocast: Callable = nullcontext   # the device's mixed precision (``Device.autocast``)
    clip_grad_norm: float | None = 1.0
    forward: torch.nn.Module | None = None  # what a step runs (compiled, or in DDP); the model by default
    distributed: bool = False          # DDP: gradients are averaged only on a step's last micro-batch
    step: int = 0
    synchronize: Callable[[], None] = field(default=lambda: None)  # a GPU's queue emptied before timing

    def __post_init__(self):
        self.scaler = self.scaler or torch.amp.GradScaler(enabled=False)
        self.forward = self.forward or self.model

    def train(self, job: Job, last: int) -> bool:
        """Steps until ``last`` updates are done; True when it stopped before (a Stop asked, or one the job took
        during an evaluation). The heap kept where a module's levers name it (an LTR head's encoder, the model)."""
        with heap.kept(any(heap.LEVER in getattr(m, "cpu_levers", ()) for m in self.model.modules())):
            seconds = 0.0  # spent in steps since the last log line: not evaluating, not saving
            while self.step < last:
                if job.stop_requested(self.step):
                    return True
                started, parts_sum = time.time(), {}
                batches = job.batches(self.step)
                shares = job.shares(batches)  # (weighed so that the step is one big batch's)
                for micro, batch in enumerate(batches):
                    last_micro = micro == len(batches) - 1
                    with self.forward.no_sync() if self.distributed and not last_micro else nullcontext():
                        with self.autocast():
                            _, parts = job.loss(self.forward, batch)
                        weights = shares[micro]  # the loss again, of its parts each weighed by its share of the step
                        loss = sum(parts[name] * w for name, w in weights.items())
                        self.scaler.scale(loss).backward()
                    counted = {**{name: part * weights[name] for name, part in parts.items() if name in weights},
                               "loss": loss}
                    for name, part in counted.items():  # on the device: no sync (module docstring)
                        part = part.detach()
                        parts_sum[name] = part if name not in parts_sum else parts_sum[name] + part
                self.scaler.unscale_(self.optimizer)  # the clip and the log see the true gradients
                grad_norm = (torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
                             if self.clip_grad_norm is not None else None)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                # the rate this step trained at: the scheduler's "last" rate, read after its step, is the next one's
                # (step 1 of a 2-step warm-up was logged at the peak rate, the last step at 0)
                lr = float(self.optimizer.param_groups[0]["lr"])
                if self.scheduler is not None:
                    self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                due = job.due(self.step)
                if due.log or due.evaluate or due.frame or due.save:
                    self.synchronize()  # this step's seconds end when its kernels have run
                seconds += time.time() - started
                job.reporter.step_reached = self.step
                # under DDP the step's gradient is the ranks' mean, and so is its loss (rank 0 logged its own alone); at
                # every step, since only rank 0 logs (a few numbers beside the gradients' all-reduce; the stop flag's
                # broadcast already waits for the host at every step)
                losses = Losses(_mean_over_ranks(parts_sum) if self.distributed else parts_sum)
                if due.log or self.distributed:  # (every rank, every step under DDP: its ranks hold one mean loss, and
                    self._check_finite(losses, lr)  # rank 0 alone refusing it left the others waiting in the next step)
                if due.log:
                    norm = float("nan") if grad_norm is None else float(grad_norm)
                    job.log(self.step, dict(losses), norm, seconds, lr)
                    seconds = 0.0
                measured, stop = job.evaluate(self.step) if due.evaluate else (None, False)
                if due.frame:
                    job.frame(self.step, measured)
                if due.save:
                    job.save(self.step, measured)
                job.after(self.step, losses)
                if stop:
                    return True
            return False

    def _check_finite(self, losses: Losses, lr: float) -> None:
        """A loss that is NaN or infinite (under fp16's loss scaler: with weights that are no longer numbers): the
        weights have gone with it, and a run that went on would save them and end "finished" (an lr of 1e9 did)."""
        loss = losses["loss"]
        if math.isfinite(loss):
            return
        # fp16's loss scaler skips a step whose gradients overflowed, and such a step's loss may read inf: the run
        # has diverged only where the weights themselves are no longer numbers (they stay so: a skip cannot mend them)
        if self.scaler.is_enabled() and all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            return
        raise Diverged(f"the training loss became {loss} at step {self.step:,} (learning rate {lr:g}): the training "
                       "diverged and the weights it reached are not numbers; start again with a lower learning rate")
