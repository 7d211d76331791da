"""What a training loop tells the world, and how it is told to stop: a small protocol.

A run folder (``runs.run.Run``) implements it, writing a log, metric lines and a status file that
the app and ``status`` read; :class:`MemoryReporter` implements it in memory, so that a notebook
or a test trains with no folder at all. The trainer and its jobs (``trainer.Trainer``, ``engine.fit``) know only
this protocol; ``path`` says where a run keeps its files (checkpoints, vocabulary, time-lapse), or
None where nothing is written (``pretrain.pretrain``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class Reporter(Protocol):
    step_reached: int | None     # the last step finished (what a failure reports)
    path: Path | None            # the run's folder, or None: the training keeps everything in memory

    def log(self, message: str) -> None: ...

    def log_metrics(self, record: dict) -> None: ...

    def write_status(self, **fields) -> None: ...

    def stop_requested(self) -> bool: ...

    def clear_stop(self) -> None: ...


@dataclass
class MemoryReporter:
    """Everything a loop reports, kept in lists and a dict; ``stop_at`` asks for a stop once the
    loop has reached that step (a user's Stop, in a test)."""

    stop_at: int | None = None
    path: None = None
    lines: list[str] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    status: dict = field(default_factory=dict)
    step_reached: int | None = None

    def log(self, message: str) -> None:
        self.lines.append(message)

    def log_metrics(self, record: dict) -> None:
        self.metrics.append(dict(record))

    def write_status(self, **fields) -> None:
        self.status.update(fields)

    def stop_requested(self) -> bool:
        return self.stop_at is not None and (self.step_reached or 0) >= self.stop_at

    def clear_stop(self) -> None:
        self.stop_at = None
