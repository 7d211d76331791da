"""Tagging every word (paper, Section 5.3 and Figure 4d: CoNLL-2003 NER).

The words are split into WordPieces and only the *first* piece of each word carries the word's
tag ("we use the representation of the first sub-token as the input to the token-level
classifier"); the other pieces are ignored by the loss. Scored by entity F1, as ``conlleval``.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from ..model import IGNORE
from . import metrics as M
from .base import Shown, TaskType, model_inputs, ratio


def marked(tokens: list[str], tags: list[str]) -> str:
    """The sentence with each entity in brackets and its type: "[Peter Blackburn]PER went home"."""
    words = list(tokens)
    for etype, a, b in M.bio_entities(tags):
        words[a] = "[" + words[a]
        words[b - 1] = words[b - 1] + "]" + etype
    return " ".join(words)


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


class TagTask(TaskType):
    """A tag per word, read at its first WordPiece (Figure 4d, Section 5.3)."""

    target: ClassVar[str] = "tags"
    architecture: ClassVar[str] = "BertForTokenClassification"
    label_key: ClassVar[str] = "tags"
    reads_cls: ClassVar[bool] = False
    labelled: ClassVar[bool] = True
    feature_based: ClassVar[bool] = True
    left_to_right: ClassVar[bool] = True
    answer_key: ClassVar[str] = "entities"
    per_token: ClassVar[bool] = True
    # (P = 0.01 beside a mistake read as no confidence, where each of its 30 words had 0.86)
    probability_of: ClassVar[str] = "its whole tagging (the product over the words: each word's own is higher)"
    table_reader: ClassVar[str] = "ner_records"
    table_columns: ClassVar[tuple[tuple[str, ...], ...]] = (("tokens", "words"),
                                                            ("tags", "nertags", "labels", "ner", "label"))
    after_finetuning: ClassVar[str] = (
        "NER gets the table (each sentence with the gold and predicted entities in brackets) and slices; not the "
        "[CLS] maps (its head reads every word, not [CLS]), calibration or attributions (the Attributions page "
        "explains one class of a whole input). Attention works for any input.")

    def row(self, example, answer):
        gold_ents, pred_ents = set(M.bio_entities(example["tags"])), set(M.bio_entities(answer["tags"]))
        return {"text": " ".join(example["tokens"]), "gold": marked(example["tokens"], example["tags"]),
                "predicted": marked(example["tokens"], answer["tags"]), "correct": gold_ents == pred_ents,
                "gold_entities": len(gold_ents), "predicted_entities": len(pred_ents),
                "correct_entities": len(gold_ents & pred_ents)}

    def score_rows(self, rows):  # conlleval's micro average: counts added up before dividing
        right = sum(r["correct_entities"] for r in rows)
        p = ratio(right, sum(r["predicted_entities"] for r in rows))
        rec = ratio(right, sum(r["gold_entities"] for r in rows))
        return {"f1": ratio(2 * p * rec, p + rec), "precision": p, "recall": rec}

    def gold_slices(self, rows):
        return "gold entities in the sentence", [str(min(r["gold_entities"], 3)) + ("+" if r["gold_entities"] >= 3 else "")
                                                 for r in rows]

    def undefined_scores(self, rows):
        # sentences with no entity (the slice "0"): no recall and so no F1, whatever the model does
        out = dict.fromkeys(("recall", "f1"), "no gold entity") if not sum(r["gold_entities"] for r in rows) else {}
        if not sum(r["predicted_entities"] for r in rows):
            out["precision"] = "no entity predicted"
        return out

    def why(self, row, example, answer):
        return {"gold": row["gold"], "predicted": row["predicted"]}

    def num_outputs(self, label_names):
        return len(label_names)

    def gold_labels(self, example):
        return list(example[self.label_key])

    def preview(self, example, shorten=str):
        return {"tokens": " ".join(example["tokens"]), "tags": " ".join(example["tags"])}

    def example_from_text(self, text, second=None):
        return {"tokens": text.split()}

    def featurize(self, examples, tok, label_names, max_seq_length=128, doc_stride=64, max_query_length=64):
        index = {n: i for i, n in enumerate(label_names)}
        feats = []
        for i, (ex, e) in enumerate(zip(examples, tok.encode_words([ex["tokens"] for ex in examples],
                                                                   max_seq_length))):
            f = {**model_inputs(e), "example_index": i, "word_ids": e.word_ids}
            if ex.get("tags"):
                labels, previous = [], None
                for w in e.word_ids:  # the first piece of each word carries its tag
                    labels.append(IGNORE if w is None or w == previous else index[ex["tags"][w]])
                    previous = w
                f["labels"] = labels
            feats.append(f)
        return feats

    def label_tensor(self, features, T):
        return torch.tensor([f["labels"] + [IGNORE] * (T - len(f["labels"])) for f in features])

    def loss_items(self, feature):  # the loss is a mean over the batch's labelled words (first pieces)
        return sum(label != IGNORE for label in feature.get("labels", ()))

    def loss(self, logits, labels):  # sub-word and padding positions are ignored
        return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold=True):
        gold = [list(ex["tags"]) for ex in examples]
        pred = [word_tags(ex, f, o, label_names) for ex, f, o in zip(examples, features, outputs)]
        return M.entity_f1(gold, pred)

    def answer(self, example, feature, output, label_names):
        tags = word_tags(example, feature, output, label_names)
        ents = [{"type": ty, "text": " ".join(example["tokens"][a:b]), "start": a, "end": b}
                for ty, a, b in M.bio_entities(tags)]
        return {"tokens": example["tokens"], "tags": tags, "entities": ents}

    def texts(self, example):
        return " ".join(example["tokens"]), None

    def probabilities(self, example, feature, output, label_names):
        """The probability of the whole tag sequence, word by word as the head reads it (each
        word's first WordPiece, independently): the product over the words. A word cut off by
        the maximum length is left out of both."""
        p = torch.softmax(output.float(), -1)
        gold, best, seen = 1.0, 1.0, set()
        for t, w in enumerate(feature["word_ids"]):
            if w is not None and w not in seen:
                seen.add(w)
                gold *= float(p[t, label_names.index(example["tags"][w])])
                best *= float(p[t].max())
        return gold, best

    def shown(self, answer, example):
        text = ", ".join(f"{e['text']} ({e['type']})" for e in answer["entities"]) or "none"
        return Shown("Entities", text, table={"word": answer["tokens"], "tag": answer["tags"]})
