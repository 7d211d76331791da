"""What every fine-tuning-like job shares after the forward pass: the task's loss, the dev
predictions in batches, and the dev metrics each benchmark reports (GLUE, CoNLL, SQuAD).

Full fine-tuning (``finetune.py``), feature-based transfer (``feature_based.py``) and the
left-to-right heads of the ablations (``experiments/ltr.py``) all read this module, so none of
them imports another.
"""
from __future__ import annotations

import math
import random
from contextlib import nullcontext

import torch
from torch import nn

from ..data.task_types import task_type
from ..model import IGNORE
from . import metrics as M
from .featurize import apply_null_threshold, collate, qa_predictions

def main_metric(task: str) -> str:
    """The number a run is judged by (the learning-rate grid keeps the best of it; Section 4)."""
    return task_type(task).main_metric


def task_loss(task: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of a head that returns plain logits (the feature-based and LTR heads; the
    BertFor* heads compute the same losses themselves): MSE for regression, per-token cross
    entropy for NER (sub-word and padding positions ignored), cross entropy otherwise. In float32
    even under autocast."""
    if task == "regression":
        return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())
    if task == "ner":
        return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)
    return nn.functional.cross_entropy(logits.float(), labels)


def word_tags(example: dict, feature: dict, output: torch.Tensor, label_names: list[str]) -> list[str]:
    """One tag per word of an NER example from per-WordPiece logits [T, labels]: the first piece
    of each word speaks for it (Section 5.3: "we use the representation of the first sub-token");
    a word cut off by the maximum length stays "O"."""
    tags = ["O"] * len(example["tokens"])
    seen = set()
    for t, w in enumerate(feature["word_ids"]):
        if w is not None and w not in seen:
            seen.add(w)
            tags[w] = label_names[int(output[t].argmax())]
    return tags


def batches(features: list, batch_size: int, shuffle_seed: int | None = None):
    """``features`` in batches, in a shuffled order when a seed is given."""
    order = list(range(len(features)))
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    for i in range(0, len(order), batch_size):
        yield [features[j] for j in order[i:i + batch_size]]


def predict_features(model, features, task, pad_id, device, batch_size=64, autocast=None):
    """Raw outputs of a BertFor* model for every feature: logits (start/end logits for QA), on the CPU."""
    model.eval()
    outs = []
    with torch.no_grad():
        for chunk in batches(features, batch_size):
            batch = {k: v.to(device) for k, v in collate(chunk, pad_id, task).items()
                     if k not in ("labels", "start_positions", "end_positions")}
            with autocast() if autocast else nullcontext():
                out = model(**batch)
            if task == "qa":
                outs.extend(zip(out.start_logits.float().cpu(), out.end_logits.float().cpu()))
            else:
                outs.extend(out.logits.float().cpu())
    return outs


def evaluate(task, examples, features, outputs, label_names, tune_null_threshold=True) -> dict:
    """Dev metrics: the measures GLUE, CoNLL and SQuAD report for each kind of task."""
    if task in ("classification", "pair-classification"):
        pred = [label_names[int(o.argmax())] for o in outputs]
        gold = [str(ex["label"]) for ex in examples]
        return M.classification_report(gold, pred, label_names)
    if task == "regression":
        return M.regression_report([float(ex["label"]) for ex in examples], [float(o.squeeze()) for o in outputs])
    if task == "multiple-choice":
        pred = [int(o.argmax()) for o in outputs]
        return {"accuracy": M.accuracy([int(ex["label"]) for ex in examples], pred)}
    if task == "ner":
        gold = [list(ex["tags"]) for ex in examples]
        pred = [word_tags(ex, f, o, label_names) for ex, f, o in zip(examples, features, outputs)]
        return M.entity_f1(gold, pred)
    if task == "qa":
        return _qa_scores(examples, features, outputs, tune_null_threshold)
    raise ValueError(task)


def _qa_scores(examples, features, outputs, tune_null_threshold: bool) -> dict:
    preds = qa_predictions(examples, features, [o[0] for o in outputs], [o[1] for o in outputs])
    golds = {ex.get("id", str(i)): [a["text"] for a in ex.get("answers", [])] or [""]
             for i, ex in enumerate(examples)}
    has_v2 = any(ex.get("is_impossible") for ex in examples)
    tau, result = 0.0, None
    if has_v2 and tune_null_threshold:
        # τ is chosen on dev to maximise F1 (Section 4.3).
        diffs = [d for d in (v["score"] - v["null_score"] for v in preds.values()) if math.isfinite(d)]
        # ... including "never answer" (a τ above every difference), as the official script does
        candidates = sorted({0.0, *diffs, *([max(diffs) + 1.0] if diffs else [])})
        for t in candidates:
            r = M.squad_scores(apply_null_threshold(preds, t - 1e-6), golds)
            if result is None or r["f1"] > result["f1"]:
                tau, result = t - 1e-6, r
    else:
        tau = float("-inf") if not has_v2 else 0.0
        result = M.squad_scores(apply_null_threshold(preds, tau), golds)
    # τ = -inf means "always answer" (SQuAD v1.1): stored as null to keep metrics.json strict JSON
    return {**result, "null_threshold": tau if math.isfinite(tau) else None}
