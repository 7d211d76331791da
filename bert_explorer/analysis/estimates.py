"""The speed readings behind the times the pages say before a job, declared as first-visit work.

A page that says how long a job will take times this CPU first (an encoder layer's training rate, the rest
of a pre-training step: ``train.speed``) and keeps the reading for the machine. Taken on a page's first
visit, that is up to half a second of a student's wait on a busy machine; ``bert-explorer prepare-class``
runs these once before class, whichever model it prepares (a reading is the machine's, read back for the
next model)."""
from __future__ import annotations

import torch

from ..data.tasks import load_builtin
from ..experiments import grid
from ..model.config import preset
from ..train.device import autocast_dtype
from ..train.estimate import background_threads, cpu_pretraining_step
from ..train.finetune import FinetuneConfig, estimate as finetune_estimate
from ..train.pretrain_config import PretrainConfig, predicted_fraction
from .comparison.candidates import SHORT_FINETUNE
from .first_visit import first_visit

ABLATION_RECIPE = "cpu-small"  # the Ablation studio's first recipe shown


def short_finetune_seconds() -> tuple[float, int]:
    """(idle seconds, threads) of the one-click fine-tuning of the Two models page: the Fine-tune page's
    estimate of it."""
    config = FinetuneConfig(**SHORT_FINETUNE)
    est = finetune_estimate(config, load_builtin(config.train.removeprefix("builtin:")))
    return est["seconds"], est["threads"]


@first_visit("Pre-train", "this machine's speed behind the estimate of a run of the page's default settings")
def default_pretraining_speed(loaded) -> None:
    # the page's boxes start from PretrainConfig's defaults (size, objective, vocabulary, batch, length, precision)
    cfg = PretrainConfig()
    bf16 = autocast_dtype(torch.device("cpu"), cfg.precision) is not None
    cpu_pretraining_step(preset(cfg.size, vocab_size=cfg.vocab_size), cfg.batch_size, cfg.max_seq_length,
                         predicted_fraction(cfg), bf16, background_threads())


@first_visit("Two models", "this machine's speed behind the time of its one-click fine-tuning")
def short_finetune_speed(loaded) -> None:
    short_finetune_seconds()


@first_visit("Ablation studio", f"this machine's speed behind the estimate of its first recipe, {ABLATION_RECIPE}")
def ablation_speed(loaded) -> None:
    if ABLATION_RECIPE in grid.list_recipes():
        grid.estimate(grid.expand(grid.load_recipe(ABLATION_RECIPE)), "cpu")
