"""Several labels for one text, or none: multi-label classification from the pooled [CLS] vector.

Beyond the paper, whose classification tasks each give one label (Section 4.1), but with its
recipe: the ``[CLS] A [SEP]`` input and one new output layer on the pooled vector. Each label gets
its own sigmoid and a binary cross-entropy (transformers' ``problem_type`` =
``"multi_label_classification"``, so its ``BertForSequenceClassification`` trains and answers the
saved model the same way); a label is predicted when its probability passes 0.5. Scored by micro-F1
(the run is judged by it), macro-F1 and subset accuracy (the whole set right).

An example holds ``labels``: a list of label names. Uploads give them as a list (JSON lines,
Parquet) or as one cell separated by ``;`` (CSV, TSV).
"""
from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from . import metrics as M
from .base import Shown
from .sequence import SequenceTask

SEPARATOR = ";"   # between the labels of one cell, in a table and in the rows a page shows
THRESHOLD = 0.5   # a label is predicted where its sigmoid passes this
MAX_POS_WEIGHT = 100.0  # (train/finetune.py's bound of the setting)


def joined(labels) -> str:
    return f"{SEPARATOR} ".join(labels) if labels else "(none)"


class MultiLabelTask(SequenceTask):
    """A set of labels for a sentence (or pair), one sigmoid per label from [CLS]."""

    target: ClassVar[str] = "labels"
    label_key: ClassVar[str] = "labels"
    probability_of: ClassVar[str] = ("its whole set of labels (the product over every label of its yes or no: each "
                                     "label's own is higher)")
    labelled: ClassVar[bool] = True
    answer_key: ClassVar[str] = "labels"
    problem_type: ClassVar[str | None] = "multi_label_classification"
    # the frozen-feature BiLSTM and the left-to-right heads are written for one label per input
    feature_based: ClassVar[bool] = False
    left_to_right: ClassVar[bool] = False
    cls_map: ClassVar[bool] = False
    calibrated: ClassVar[bool] = True
    table_reader: ClassVar[str] = "multi_label"
    after_finetuning: ClassVar[str] = (
        "Multi-label classification gets the table (each example's gold and predicted label sets), slices and "
        "calibration of the whole set (the model's probability of the set it predicts, the product of its "
        "labels' sigmoids, against how often the set is exactly right); not the [CLS] maps (an example has several "
        "gold labels, so no single colour) and not attributions (the Attributions page explains one class).")

    def reads(self, table) -> bool:
        """A table with a column of label sets: lists, or labels joined by ``;``."""
        return table.label_set_column() is not None

    def num_outputs(self, label_names):
        return len(label_names)

    def gold_labels(self, example):
        return list(example[self.label_key])

    def label_id(self, labels, index: dict):
        """The training target of one gold set: 1.0 at each of its labels, 0.0 elsewhere."""
        hot = [0.0] * len(index)
        for name in labels:
            hot[index[str(name)]] = 1.0
        return hot

    def label_tensor(self, features, T):
        return torch.tensor([f["labels"] for f in features], dtype=torch.float)

    def loss(self, logits, labels):
        return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())

    def positive_weights(self, examples, label_names, setting):
        """Each label's weight of its positive examples in the loss: "balanced" is its negatives over its
        positives in ``examples`` (a label present in 5 % weighs 19), at most MAX_POS_WEIGHT; a number is
        every label's."""
        if str(setting) == "none":
            return None
        if str(setting) != "balanced":
            return torch.full((len(label_names),), float(setting))
        n = len(examples)
        pos = [sum(1 for ex in examples if name in map(str, ex["labels"])) for name in label_names]
        return torch.tensor([min(MAX_POS_WEIGHT, (n - p) / p) if p else MAX_POS_WEIGHT for p in pos])

    def _predicted(self, output, label_names) -> tuple[list[str], torch.Tensor]:
        p = torch.sigmoid(output.float())
        return [n for n, x in zip(label_names, p) if float(x) > THRESHOLD], p

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold=True):
        predicted = [self._predicted(o, label_names)[0] for o in outputs]
        return M.multilabel_report([list(map(str, ex["labels"])) for ex in examples], predicted, label_names)

    def answer(self, example, feature, output, label_names):
        labels, p = self._predicted(output, label_names)
        return {"labels": labels, "probabilities": {n: round(float(x), 6) for n, x in zip(label_names, p)}}

    def probabilities(self, example, feature, output, label_names):
        """The probability of the gold set and of the predicted set, each label's sigmoid taken as
        independent (which is how the head is trained): a product over every label."""
        p = torch.sigmoid(output.float()).tolist()
        gold = set(map(str, example["labels"]))

        def of(chosen) -> float:
            return math.prod(x if n in chosen else 1 - x for n, x in zip(label_names, p))

        return of(gold), of({n for n, x in zip(label_names, p) if x > THRESHOLD})

    # micro-F1 adds up every label's decisions before dividing: a common label decides it
    headline_note: ClassVar[str] = (
        "Micro-F1 counts every label's right and wrong decisions together, so the most frequent label weighs most: "
        "a model that learnt only a common label still scores well on it. Macro-F1 is the mean of each label's own "
        "F1, rare labels counted as much as common ones; the table gives each label's.")

    def per_label(self, report):
        per = report.get("per_class") or {}
        return sorted(({"label": name, "F1": v["f1"], "precision": v["precision"], "recall": v["recall"],
                        "support": v["support"], "predicted": v["predicted"]} for name, v in per.items()),
                      key=lambda r: (-r["support"], r["label"]))

    def never_predicted(self, report):
        missed = [name for name, v in (report.get("per_class") or {}).items() if v["support"] and not v["predicted"]]
        if not missed:
            return None
        return (f"the model never predicted {len(missed)} of the labels its dev set holds ({', '.join(missed)}): "
                "their F1 is 0, and micro-F1 hides it. Try pos_weight balanced (Advanced settings; --pos-weight "
                "balanced), more epochs, or more examples of them")

    def report_of_rows(self, rows) -> dict:
        """The dev report recomputed from the After fine-tuning page's rows (the saved model's answers)."""
        def labels(cell):
            return [] if cell == "(none)" else cell.split(f"{SEPARATOR} ")

        gold, pred = [labels(r["gold"]) for r in rows], [labels(r["predicted"]) for r in rows]
        return M.multilabel_report(gold, pred, sorted({x for g in gold + pred for x in g}))

    def shown(self, answer, example):
        return Shown("Labels", joined(answer["labels"]), scores=answer["probabilities"])

    def preview(self, example, shorten=str):
        row = super().preview(example, shorten)
        row["labels"] = joined(example["labels"])
        return row

    # ----- after fine-tuning ------------------------------------------------------------------------
    def row(self, example, answer):
        gold, pred = [str(x) for x in example["labels"]], list(answer["labels"])
        return {**self._texts(example), "gold": joined(gold), "predicted": joined(pred),
                "correct": set(gold) == set(pred), "gold_labels": len(gold), "predicted_labels": len(pred),
                "right_labels": len(set(gold) & set(pred))}

    def score_rows(self, rows):
        report = self.report_of_rows(rows)
        return {k: report[k] for k in ("micro_f1", "macro_f1", "subset_accuracy")}

    def undefined_scores(self, rows):
        # examples with no label (the slice "0"): an F1 counts the gold labels found, and there are none to find
        return dict.fromkeys(("micro_f1", "macro_f1"), "no gold label") if not sum(r["gold_labels"] for r in rows) \
            else {}

    def gold_slices(self, rows):
        return "gold labels in the example", [str(min(r["gold_labels"], 3)) + ("+" if r["gold_labels"] >= 3 else "")
                                              for r in rows]
