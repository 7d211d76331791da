"""Tasks answered once per sentence or pair, from the pooled [CLS] vector (paper, Section 4.1,
Figure 4a and b): the input is ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``.

* :class:`LabelTask`: a softmax over the labels; cross entropy; accuracy, F1 and MCC as GLUE
  reports them (SST-2, CoLA, MNLI, QQP, MRPC ...).
* :class:`ValueTask`: one number; mean squared error; Pearson and Spearman correlations (STS-B).
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from . import metrics as M
from .base import Shown, TaskType, model_inputs


class SequenceTask(TaskType):
    """What a label and a value share: the ``[CLS] A [SEP] (B [SEP])`` input read at [CLS]."""

    architecture: ClassVar[str] = "BertForSequenceClassification"
    label_key: ClassVar[str] = "label"
    reads_cls: ClassVar[bool] = True
    feature_based: ClassVar[bool] = True
    left_to_right: ClassVar[bool] = True

    def featurize(self, examples, tok, label_names, max_seq_length=128, doc_stride=64, max_query_length=64):
        pairs = [ex["text"] if not ex.get("text_pair") else (ex["text"], ex["text_pair"]) for ex in examples]
        index = {n: i for i, n in enumerate(label_names or [])}
        feats = []
        for i, (ex, e) in enumerate(zip(examples, tok.encode_batch(pairs, max_seq_length))):
            f = {**model_inputs(e), "example_index": i}
            if "label" in ex and ex["label"] is not None:
                f["labels"] = self.label_id(ex["label"], index)
            feats.append(f)
        return feats

    def label_id(self, label, index: dict):
        """The training target of one gold label: its index, or the number itself."""
        raise NotImplementedError


class LabelTask(SequenceTask):
    """A label for a sentence or a pair, from [CLS] (Figure 4a, b)."""

    target: ClassVar[str] = "class"
    labelled: ClassVar[bool] = True
    answer_key: ClassVar[str] = "label"

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


class ValueTask(SequenceTask):
    """A real number for a sentence or a pair, from [CLS] (STS-B)."""

    target: ClassVar[str] = "value"
    labelled: ClassVar[bool] = False
    answer_key: ClassVar[str] = "score"
    problem_type: ClassVar[str | None] = "regression"  # BertForSequenceClassification's loss is then the MSE

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
