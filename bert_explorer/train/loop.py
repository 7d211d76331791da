"""The one training loop: pre-training, fine-tuning, feature-based transfer and the left-to-right
heads all run here.

What a step does (which batch, the forward and backward passes, the update) is the caller's
``update(step)``; what is due after it (a log line, an evaluation, a checkpoint, a time-lapse
frame, the end of an epoch) is the caller's ``after(step, result)``; whether to stop before the
next one is ``stop(step)``. The loop owns only the count: from ``first`` up to ``last`` updates,
the reporter told the step reached (what a failure reports, ``engine.marks_failure``).
"""
from __future__ import annotations

from typing import Callable, TypeVar

from .report import Reporter

R = TypeVar("R")


def train_loop(reporter: Reporter, first: int, last: int, update: Callable[[int], R], *,
               stop: Callable[[int], bool], after: Callable[[int, R], bool | None] | None = None) -> tuple[int, bool]:
    """Run ``update`` for the steps ``first`` .. ``last - 1``; returns (the step reached, whether it
    stopped early). ``stop(step)`` is asked before each update; ``after(step, result)`` is called
    after it with the step count reached, and may end the loop as stopped by returning True."""
    step = first
    while step < last:
        if stop(step):
            return step, True
        result = update(step)
        step += 1
        reporter.step_reached = step
        if after is not None and after(step, result):
            return step, True
    return step, False
