"""What every fine-tuning-like job shares after the forward pass: the task's loss, the dev
predictions in batches, and the dev metrics each benchmark reports (GLUE, CoNLL, SQuAD). What
differs between task types is in ``task_ops.py``; these functions look it up by the task's name.

Full fine-tuning (``finetune.py``), feature-based transfer (``feature_based.py``) and the
left-to-right heads of the ablations (``experiments/ltr.py``) all read this module, so none of
them imports another.
"""
from __future__ import annotations

import random
from contextlib import nullcontext

import torch

from ..data.task_types import task_type
from .task_ops import task_ops


def main_metric(task: str) -> str:
    """The number a run is judged by (the learning-rate grid keeps the best of it; Section 4)."""
    return task_type(task).main_metric


def task_loss(task: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of a head that returns plain logits (the feature-based and LTR heads; the
    BertFor* heads compute the same losses themselves): MSE for regression, per-token cross
    entropy for NER (sub-word and padding positions ignored), cross entropy otherwise. In float32
    even under autocast."""
    return task_ops(task).loss(logits, labels)


def batches(features: list, batch_size: int, shuffle_seed: int | None = None):
    """``features`` in batches, in a shuffled order when a seed is given."""
    order = list(range(len(features)))
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    for i in range(0, len(order), batch_size):
        yield [features[j] for j in order[i:i + batch_size]]


def predict_features(model, features, task, pad_id, device, batch_size=64, autocast=None):
    """Raw outputs of a BertFor* model for every feature: logits (start/end logits for QA), on the CPU."""
    ops = task_ops(task)
    model.eval()
    outs = []
    with torch.no_grad():
        for chunk in batches(features, batch_size):
            batch = {k: v.to(device) for k, v in ops.collate(chunk, pad_id).items()
                     if k not in ("labels", "start_positions", "end_positions")}
            with autocast() if autocast else nullcontext():
                out = model(**batch)
            outs.extend(ops.outputs(out))
    return outs


def evaluate(task, examples, features, outputs, label_names, tune_null_threshold=True) -> dict:
    """Dev metrics: the measures GLUE, CoNLL and SQuAD report for each kind of task."""
    return task_ops(task).evaluate(examples, features, outputs, label_names, tune_null_threshold)
