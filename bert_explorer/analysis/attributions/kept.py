"""Attributions kept on disk, by the model's weights and the question asked.

The app keeps every result in memory for all sessions of one server (``app.state.by_weights``); a
new server process (a restart, a second worker) would integrate its page's example again on the
first visit: seconds on BERT-Base, before anything is shown. Kept in the disk cache
(``disk_cache``: bounded by its quota, entries written whole or not at all), the example is read
back instead.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from ... import disk_cache, limits
from ...checkpoint import Loaded
from ..first_visit import first_visit
from ..probes.pretraining_tasks import MLM_HEAD
from .integrated_gradients import DEFAULT_BASELINE, EXAMPLE_MASKED, Attributions, affordable, explain_masked_word
from .reliability import DEFAULT_STEPS, MAX_STEPS, step_schedule

# Bump when the same model and question would be attributed differently (the integration, the
# baselines, the fields of Attributions).
VERSION = 2  # 2: kept as disk_cache.kept_json writes it


def kept(kind: str, loaded: Loaded, compute: Callable[[], Attributions], **question) -> Attributions:
    """``compute()``'s attributions for ``loaded`` and ``question`` (the text, the word or label, the
    steps and baseline: whatever changes the answer), read from the disk cache when an earlier
    process kept them there, else computed and kept. A question that fails (no [MASK], too long)
    raises as ``compute`` does and keeps nothing."""
    data = disk_cache.kept_json(f"attributions-{kind}", loaded, lambda: asdict(compute()), what="an attribution",
                                version=VERSION, **question)
    try:
        return Attributions(**{**data, "steps_tried": [tuple(s) for s in data.get("steps_tried", [])]})
    except TypeError:  # kept with other fields (VERSION not bumped): computed again, not kept
        return compute()


def integration(loaded: Loaded, steps: int = DEFAULT_STEPS, baseline: str = DEFAULT_BASELINE) -> dict:
    """The page's integration settings: the steps to try, the most they may cost (the server's limit for
    this model, ``limits.Limits.token_steps``: WordPieces × steps, every attempt added) and the baseline."""
    return dict(n_steps=steps, max_steps=max(MAX_STEPS, steps), baseline=baseline,
                token_steps=limits.for_config(loaded.config).token_steps)


def integration_run(loaded: Loaded, text: str, text_b: str | None = None, steps: int = DEFAULT_STEPS,
                    baseline: str = DEFAULT_BASELINE) -> dict:
    """:func:`integration` for the input ``text`` (and ``text_b``) as the server's limit lets it run: the
    schedule cut to what this input's WordPieces afford. Two slider settings above that limit run the same
    steps, so a cache keyed on these settings computes them once (dragging the slider past the cap cost
    seconds of CPU per value, for the same result)."""
    settings = integration(loaded, steps, baseline)
    pieces = len(loaded.tokenizer.encode(text, text_b or None,
                                         max_length=loaded.config.max_position_embeddings).input_ids)
    try:
        run = affordable(step_schedule(steps, settings["max_steps"]), pieces, settings["token_steps"])
    except limits.TooLarge:  # (the attribution refuses it itself, after its own checks of the input)
        return settings
    # a schedule cut to fit is a prefix of the doubling, or its first attempt alone cut down: the same steps
    return {**settings, "n_steps": run[0], "max_steps": run[-1]}


@first_visit("Attributions", "Integrated Gradients of its example sentence")
def explain_the_example(loaded: Loaded) -> None:
    if MLM_HEAD not in loaded.report.missing:  # (a model without the head: the page says so, nothing to keep)
        settings = integration_run(loaded, EXAMPLE_MASKED)  # the page's key: the schedule cut to the server's limit
        kept("masked-word", loaded, lambda: explain_masked_word(loaded, EXAMPLE_MASKED, None, **settings),
             text=EXAMPLE_MASKED, word=None, **settings)
