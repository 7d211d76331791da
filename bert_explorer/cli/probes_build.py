"""The background probing of a model's layers, as the What each layer knows page runs it on its first visit:
what preparing a class starts (``analysis/lesson.py``, build "probes").

    python -m bert_explorer.cli.probes_build --model minilm-mlm-nsp

It probes every layer for the page's tasks with the page's settings (``probing.PAGE_TASKS``,
``PAGE_SETTINGS``), holding the build's lock (``runs/neighbour_jobs.py``: one builder per model, its progress
on disk for every session); each task's result is kept in the disk cache, where the page finds it.
"""
from __future__ import annotations

import sys

from .. import checkpoint
from ..analysis.layers import probing
from ..runs import neighbour_jobs as jobs
from .common import model_builder_main


def build(model: str) -> None:
    """Probe ``model`` for the page's tasks; a task already in the cache is read, not probed again."""
    loaded = checkpoint.load(model, "BertModel")
    path = probing.page_entry(loaded)
    with jobs.builder_lock(path):
        tasks = probing.PAGE_TASKS
        try:
            for k, task in enumerate(tasks):
                def progress(fraction: float, message: str, k=k, task=task) -> None:
                    jobs.write_progress(path, state="running", fraction=(k + fraction) / len(tasks),
                                        message=f"{task}: {message}")
                probing.probe_layers(loaded, task, probing.PAGE_SETTINGS[task], progress=progress)
        except BaseException as e:
            jobs.write_progress(path, state="failed", fraction=0.0, error=str(e) or type(e).__name__,
                                message="the probes failed")
            raise
        jobs.write_progress(path, state="done", fraction=1.0, message="probed")


def main(argv: list[str] | None = None) -> int:
    return model_builder_main(argv, "python -m bert_explorer.cli.probes_build",
                              "probe a model's layers as the What each layer knows page does", build)


if __name__ == "__main__":
    sys.exit(main())
