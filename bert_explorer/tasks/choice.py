"""Multiple choice (paper, Section 4.4: SWAG): one ``[CLS] context [SEP] choice [SEP]`` sequence per
candidate, one score per sequence from its [CLS], a softmax over the candidates; accuracy."""
from __future__ import annotations

from typing import ClassVar

import torch

from . import metrics as M
from .base import Shown, TaskType, ratio


class ChoiceTask(TaskType):
    """Which of several candidate sequences: one score per [CLS], a softmax over them (SWAG)."""

    target: ClassVar[str] = "choice"
    architecture: ClassVar[str] = "BertForMultipleChoice"
    label_key: ClassVar[str] = "label"
    reads_cls: ClassVar[bool] = True
    labelled: ClassVar[bool] = False
    feature_based: ClassVar[bool] = False
    left_to_right: ClassVar[bool] = False
    answer_key: ClassVar[str] = "choice"
    after_finetuning: ClassVar[str] = (
        "Multiple choice gets the table (with its options) and slices; not the [CLS] maps (each option is a separate "
        "input), calibration or attributions. Attention shows the context with its gold ending.")
    gold_choosable: ClassVar[bool] = True
    table_reader: ClassVar[str] = "multiple_choice"

    def reads(self, table) -> bool:
        """A table of choices: two or more numbered columns (``ending0``, ``choice1``, ...) or one
        column of lists, and a column for the right one."""
        return ((len(table.ending_columns()) >= 2 or table.column(("choices", "endings", "options")) is not None)
                and table.choice_label_column() is not None)

    def dev_mismatch(self, train, dev):
        if train and dev and len(train[0]["choices"]) != len(dev[0]["choices"]):
            return (f"has {len(dev[0]['choices'])} choices per example but the training set has "
                    f"{len(train[0]['choices'])}; give both the same number of choices.")
        return None

    def row(self, example, answer):
        choices, gold, pred = example["choices"], int(example["label"]), int(answer["choice"])
        return {"text": example["context"], "choices": " | ".join(f"{k + 1}: {c}" for k, c in enumerate(choices)),
                "gold": f"{gold + 1}: {choices[gold]}", "predicted": f"{pred + 1}: {choices[pred]}",
                "gold_choice": gold + 1, "correct": gold == pred}

    def score_rows(self, rows):
        return {"accuracy": ratio(sum(bool(r["correct"]) for r in rows), len(rows))}

    def gold_slices(self, rows):
        return "gold choice", [f"choice {r['gold_choice']}" for r in rows]

    def preview(self, example, shorten=str):
        return {"context": shorten(example["context"]), "choices": " | ".join(example["choices"]),
                "label": example["label"]}

    def example_from_text(self, text, second=None):
        if len(second or []) < 2:
            raise ValueError("a multiple-choice model needs a context and at least two choices")
        return {"context": text, "choices": list(second)}

    def featurize(self, examples, tok, label_names, max_seq_length=128, doc_stride=64, max_query_length=64):
        feats = []
        for i, ex in enumerate(examples):
            encs = tok.encode_batch([(ex["context"], c) for c in ex["choices"]], max_seq_length)
            f = {"input_ids": [e.input_ids for e in encs], "token_type_ids": [e.token_type_ids for e in encs],
                 "attention_mask": [e.attention_mask for e in encs], "example_index": i}
            if ex.get("label") is not None:
                f["labels"] = int(ex["label"])
            feats.append(f)
        return feats

    def collate(self, features, pad_id):
        T = max(len(x) for f in features for x in f["input_ids"])
        C = max(len(f["input_ids"]) for f in features)
        if any(len(f["input_ids"]) != C for f in features):
            raise ValueError("every multiple-choice example needs the same number of choices")
        out = {k: torch.tensor([[x + [pad if k == "input_ids" else 0] * (T - len(x)) for x in f[k]]
                                for f in features])
               for k, pad in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0))}
        if all("labels" in f for f in features):  # predicting needs none; a mixed batch is predicted too
            out["labels"] = self.label_tensor(features, T)
        return out

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold=True):
        pred = [int(o.argmax()) for o in outputs]
        return {"accuracy": M.accuracy([int(ex["label"]) for ex in examples], pred)}

    def answer(self, example, feature, output, label_names):
        p = torch.softmax(output, -1)
        return {"choice": int(p.argmax()), "probabilities": [round(float(x), 6) for x in p]}

    def texts(self, example):  # the context, and the ending the model chose between (the gold one first)
        choices = example["choices"]
        label = example.get("label")
        return example["context"], choices[int(label)] if label is not None else choices[0]

    def probabilities(self, example, feature, output, label_names):
        p = torch.softmax(output.float(), -1)
        return float(p[int(example["label"])]), float(p.max())

    def shown(self, answer, example):
        return Shown("Choice", f"{answer['choice'] + 1}: {example['choices'][answer['choice']]}")
