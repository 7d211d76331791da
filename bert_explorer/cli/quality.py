"""The background measurement of a model's quality, one builder per model: what a page starts.

    python -m bert_explorer.cli.quality --model hf:google-bert/bert-base-uncased

It measures the model as ``bert-explorer evaluate-pretraining --model NAME`` does, on every held-out
sequence (``analysis/probes/quality.py``), holding the measurement's lock (``runs/neighbour_jobs.py``:
one builder per model, its progress on disk for every session), and keeps the result by the
weights' fingerprint. It runs as its own process, so it goes on when the browser tab closes.
"""
from __future__ import annotations

import sys

from .. import checkpoint
from ..analysis.probes import quality
from ..runs import neighbour_jobs as jobs
from .common import model_builder_main

def build(model: str) -> dict:
    """Measure ``model`` and keep the result; the result (the kept one, if another process finished first)."""
    loaded = checkpoint.load(model, "BertForPreTraining", need_heads=("masked-LM head",))
    path = quality.entry_path(loaded)
    if (done := quality.stored(path)) is not None:
        return done
    with jobs.builder_lock(path):
        def progress(fraction: float, message: str) -> None:
            jobs.write_progress(path, state="running", fraction=fraction, message=message)
        try:
            result = quality.measure(loaded, progress=progress)
        except BaseException as e:
            jobs.write_progress(path, state="failed", fraction=0.0, error=str(e) or type(e).__name__,
                                message="the measurement failed")
            raise
        quality.save(path, result)
        jobs.write_progress(path, state="done", fraction=1.0, message="measured")
    return result


def main(argv: list[str] | None = None) -> int:
    return model_builder_main(argv, "python -m bert_explorer.cli.quality",
                              "measure a model's held-out MLM/NSP accuracy and the check set", build)


if __name__ == "__main__":
    sys.exit(main())
