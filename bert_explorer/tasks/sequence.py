"""Tasks answered once per sentence or pair, from the pooled [CLS] vector (paper, Section 4.1,
Figure 4a and b): the input is ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``.

* :class:`LabelTask`: a softmax over the labels; cross entropy; accuracy, F1 and MCC as GLUE
  reports them (SST-2, CoLA, MNLI, QQP, MRPC ...).
* :class:`ValueTask`: one number; mean squared error; Pearson and Spearman correlations (STS-B).
"""
from __future__ import annotations

from collections import defaultdict
from typing import ClassVar

import torch
from torch import nn

from . import metrics as M
from .base import Shown, TaskType, label_sort_key, model_inputs, ratio


class SequenceTask(TaskType):
    """What a label and a value share: the ``[CLS] A [SEP] (B [SEP])`` input read at [CLS]."""

    architecture: ClassVar[str] = "BertForSequenceClassification"
    label_key: ClassVar[str] = "label"
    reads_cls: ClassVar[bool] = True
    feature_based: ClassVar[bool] = True
    left_to_right: ClassVar[bool] = True
    cls_map: ClassVar[bool] = True

    def featurize(self, examples, tok, label_names, max_seq_length=128, doc_stride=64, max_query_length=64):
        pairs = [ex["text"] if not ex.get("text_pair") else (ex["text"], ex["text_pair"]) for ex in examples]
        index = {n: i for i, n in enumerate(label_names or [])}
        feats = []
        for i, (ex, e) in enumerate(zip(examples, tok.encode_batch(pairs, max_seq_length))):
            f = {**model_inputs(e), "example_index": i}
            if ex.get(self.label_key) is not None:
                f["labels"] = self.label_id(ex[self.label_key], index)
            feats.append(f)
        return feats

    def label_id(self, label, index: dict):
        """The training target of one gold label: its index, or the number itself."""
        raise NotImplementedError

    def _texts(self, example: dict) -> dict:
        out = {"text": example["text"]}
        if example.get("text_pair"):
            out["text_pair"] = example["text_pair"]
        return out


class LabelTask(SequenceTask):
    """A label for a sentence or a pair, from [CLS] (Figure 4a, b)."""

    target: ClassVar[str] = "class"
    labelled: ClassVar[bool] = True
    answer_key: ClassVar[str] = "label"
    after_finetuning: ClassVar[str] = ("Classification and pairs get every part: the table, slices, the [CLS] maps "
                                       "before and after, calibration, and attributions.")
    gold_choosable: ClassVar[bool] = True
    calibrated: ClassVar[bool] = True

    def num_outputs(self, label_names):
        return len(label_names)

    def label_id(self, label, index: dict):
        return index[str(label)]

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold=True):
        pred = [label_names[int(o.argmax())] for o in outputs]
        gold = [str(ex["label"]) for ex in examples]
        return M.classification_report(gold, pred, label_names)

    def answer(self, example, feature, output, label_names):
        p = torch.softmax(output, -1)
        return {"label": label_names[int(p.argmax())],
                "probabilities": {n: round(float(x), 6) for n, x in zip(label_names, p)}}

    def probabilities(self, example, feature, output, label_names):
        p = torch.softmax(output.float(), -1)
        return float(p[label_names.index(str(example["label"]))]), float(p.max())

    def shown(self, answer, example):
        return Shown("Prediction", answer["label"], scores=answer["probabilities"])

    def dev_indices(self, examples, fraction, target, rng):
        """Stratified: each class keeps its share in both parts (largest remainders round the dev
        set to exactly ``target``); a class with a single example stays in train."""
        by_label = defaultdict(list)
        for i, ex in enumerate(examples):
            by_label[str(ex["label"])].append(i)
        labels = sorted(by_label, key=label_sort_key)
        quota = {lab: len(by_label[lab]) * fraction if len(by_label[lab]) > 1 else 0.0 for lab in labels}
        take = {lab: min(int(q), len(by_label[lab]) - 1) for lab, q in quota.items()}
        for lab in sorted(labels, key=lambda lab: take[lab] - quota[lab]):  # largest remainder first
            if sum(take.values()) >= target:
                break
            if quota[lab] > 0 and take[lab] < len(by_label[lab]) - 1:
                take[lab] += 1
        dev = []
        for lab in labels:
            idx = by_label[lab]
            rng.shuffle(idx)
            dev += idx[:take[lab]]
        if not dev:  # every class is a singleton: fall back to a random pick
            return super().dev_indices(examples, fraction, target, rng)
        return dev, "stratified by label"

    def row(self, example, answer):
        gold, pred = str(example["label"]), answer["label"]
        return {**self._texts(example), "gold": gold, "predicted": pred, "correct": gold == pred}

    def score_rows(self, rows):
        return {"accuracy": ratio(sum(bool(r["correct"]) for r in rows), len(rows))}

    def gold_slices(self, rows):
        return "gold label", [r["gold"] for r in rows]


class ValueTask(SequenceTask):
    """A real number for a sentence or a pair, from [CLS] (STS-B)."""

    target: ClassVar[str] = "value"
    labelled: ClassVar[bool] = False
    answer_key: ClassVar[str] = "score"
    problem_type: ClassVar[str | None] = "regression"  # BertForSequenceClassification's loss is then the MSE
    after_finetuning: ClassVar[str] = (
        "Regression gets the table, slices by its metric (Pearson r) and the [CLS] maps coloured by the gold value; "
        "not calibration (a value has no probability to compare with how often it is right) and not attributions "
        "(the Attributions page explains a class).")
    right_or_wrong: ClassVar[bool] = False

    def num_outputs(self, label_names):
        return 1

    def label_counts(self, examples):
        return {}

    def label_id(self, label, index: dict):
        return float(label)

    def label_tensor(self, features, T):
        return torch.tensor([f["labels"] for f in features], dtype=torch.float)

    def loss(self, logits, labels):
        return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold=True):
        return M.regression_report([float(ex["label"]) for ex in examples], [float(o.squeeze()) for o in outputs])

    def answer(self, example, feature, output, label_names):
        return {"score": float(output.squeeze())}

    def shown(self, answer, example):
        return Shown("Score", f"{answer['score']:.3f}")

    def row(self, example, answer):
        gold, pred = float(example["label"]), float(answer["score"])
        return {**self._texts(example), "gold": gold, "predicted": pred, "error": pred - gold, "correct": None}

    def score_rows(self, rows):
        return M.regression_report([r["gold"] for r in rows], [r["predicted"] for r in rows])

    def gold_slices(self, rows):
        return "gold value", M.quantile_bins([r["gold"] for r in rows])

    def undefined_scores(self, rows):
        # (a slice by gold value often holds one value: the metric's own 0.0, "no skill", drew three bars of 0.000
        # beside a whole set's 0.856)
        return dict.fromkeys(("pearson", "spearman"), "one gold value") if len({r["gold"] for r in rows}) < 2 else {}
