"""What each kind of task does with the model (paper, Section 4, Figure 4): one small class per
target of the task registry (``data/task_types.py``), read by featurisation, the losses of the
plain-logit heads, the dev metrics and the predict API.

* class (single sentence, sentence pair): ``[CLS] A [SEP] (B [SEP])``; a softmax over the labels
  is read from the pooled [CLS]; cross entropy; accuracy, F1 and MCC as GLUE reports them.
* value (regression): the same input; one number from [CLS]; mean squared error; Pearson and
  Spearman correlations (STS-B).
* tags (NER): the words are split into WordPieces and only the *first* piece of each word carries
  the word's tag; the other pieces are ignored by the loss (Section 5.3); entity F1 (CoNLL).
* span (QA): ``[CLS] question [SEP] context [SEP]``; contexts longer than the window are cut into
  overlapping windows ("document stride"); the label is the answer's first and last token, or
  [CLS] when the window holds no answer (SQuAD 2.0's null answer); exact match and F1 (SQuAD).
* choice (multiple choice): one ``[CLS] context [SEP] choice [SEP]`` sequence per choice, one
  score per sequence, a softmax over the choices (SWAG); accuracy.

``task_ops(name)`` returns the object for a task type; every method takes and returns plain
lists and tensors, so full fine-tuning, feature-based transfer and the left-to-right heads share
them.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..data.task_types import task_type
from ..model import IGNORE
from . import metrics as M


def _inputs(e) -> dict:
    return {"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "attention_mask": e.attention_mask}


class TaskOps:
    """What every target shares; the subclasses below override what differs."""

    target = ""

    def featurize(self, examples, tok, label_names, max_seq_length, doc_stride, max_query_length) -> list[dict]:
        """One dict per model input (QA: per window) with ``example_index`` pointing back."""
        raise NotImplementedError

    def collate(self, features, pad_id: int) -> dict[str, torch.Tensor]:
        """Pad to the longest input in the batch and stack: [B, T] (multiple choice: [B, C, T])."""
        T = max(len(f["input_ids"]) for f in features)
        out = {k: torch.tensor([f[k] + [pad] * (T - len(f[k])) for f in features])
               for k, pad in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0))}
        if all("labels" in f for f in features):  # predicting needs none; a mixed batch is predicted too
            out["labels"] = self.label_tensor(features, T)
        return out

    def label_tensor(self, features, T: int) -> torch.Tensor:
        return torch.tensor([f["labels"] for f in features], dtype=torch.long)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss of a head that returns plain logits (the feature-based and LTR heads; the
        BertFor* heads compute the same losses themselves), in float32 even under autocast."""
        return nn.functional.cross_entropy(logits.float(), labels)

    def outputs(self, model_output) -> list:
        """A BertFor* model's output as one entry per input, on the CPU."""
        return list(model_output.logits.float().cpu())

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold=True) -> dict:
        """Dev metrics: the measures the task's benchmark reports."""
        raise NotImplementedError

    def predict(self, examples, features, outputs, label_names, null_threshold=None) -> list[dict]:
        """The model's answers to new ``examples``, one dict each, in the task's own terms."""
        return [self.answer(ex, f, o, label_names) for ex, f, o in zip(examples, features, outputs)]

    def answer(self, example, feature, output, label_names) -> dict:
        raise NotImplementedError


class ClassOps(TaskOps):
    """A label for a sentence or a pair, from [CLS] (Figure 4a, b)."""

    target = "class"

    def featurize(self, examples, tok, label_names, max_seq_length, doc_stride=None, max_query_length=None):
        pairs = [ex["text"] if not ex.get("text_pair") else (ex["text"], ex["text_pair"]) for ex in examples]
        index = {n: i for i, n in enumerate(label_names or [])}
        feats = []
        for i, (ex, e) in enumerate(zip(examples, tok.encode_batch(pairs, max_seq_length))):
            f = {**_inputs(e), "example_index": i}
            if "label" in ex and ex["label"] is not None:
                f["labels"] = self.label_id(ex["label"], index)
            feats.append(f)
        return feats

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


class ValueOps(ClassOps):
    """A real number for a sentence or a pair, from [CLS] (STS-B)."""

    target = "value"

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


class TagOps(TaskOps):
    """A tag per word, read at its first WordPiece (Figure 4d, Section 5.3)."""

    target = "tags"

    def featurize(self, examples, tok, label_names, max_seq_length, doc_stride=None, max_query_length=None):
        index = {n: i for i, n in enumerate(label_names)}
        feats = []
        for i, (ex, e) in enumerate(zip(examples, tok.encode_words([ex["tokens"] for ex in examples],
                                                                   max_seq_length))):
            f = {**_inputs(e), "example_index": i, "word_ids": e.word_ids}
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


class ChoiceOps(TaskOps):
    """Which of several candidate sequences: one score per [CLS], a softmax over them (SWAG)."""

    target = "choice"

    def featurize(self, examples, tok, label_names, max_seq_length, doc_stride=None, max_query_length=None):
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


class SpanOps(TaskOps):
    """The answer's first and last token in a passage (Figure 4c, SQuAD v1.1 and v2.0)."""

    target = "span"

    def featurize(self, examples, tok, label_names, max_seq_length, doc_stride, max_query_length):
        return qa_windows(examples, tok, max_seq_length, doc_stride, max_query_length)

    def collate(self, features, pad_id):
        out = super().collate(features, pad_id)
        out["start_positions"] = torch.tensor([f["start_positions"] for f in features])
        out["end_positions"] = torch.tensor([f["end_positions"] for f in features])
        return out

    def outputs(self, model_output):
        return list(zip(model_output.start_logits.float().cpu(), model_output.end_logits.float().cpu()))

    def evaluate(self, examples, features, outputs, label_names, tune_null_threshold=True):
        return qa_scores(examples, features, outputs, tune_null_threshold)

    def predict(self, examples, features, outputs, label_names, null_threshold=None):
        # key by position so repeated or missing ids cannot merge two questions
        keyed = [{**ex, "id": str(i)} for i, ex in enumerate(examples)]
        preds = qa_predictions(keyed, features, [o[0] for o in outputs], [o[1] for o in outputs])
        answer = apply_null_threshold(preds, null_threshold) if null_threshold is not None else {
            k: v["text"] for k, v in preds.items()}
        return [{"answer": answer[str(i)], "score": preds[str(i)]["score"],
                 "null_score": preds[str(i)]["null_score"]} for i in range(len(examples))]


def qa_windows(examples, tok, max_seq_length, doc_stride, max_query_length) -> list[dict]:
    """``[CLS] question [SEP] context-window [SEP]`` for every window of each context, with the
    answer's first and last token in the window (both 0, i.e. [CLS], when it is not inside)."""
    feats = []
    for i, ex in enumerate(examples):
        question = " ".join(tok.tokenize(ex["question"])[:max_query_length]).replace(" ##", "")
        q_len = len(tok.tokenize(question))  # WordPieces, not words
        room = max_seq_length - q_len - 3    # context tokens per window ([CLS] q [SEP] ... [SEP])
        if room < 2:
            raise ValueError(f"max_seq_length {max_seq_length} leaves no room for the context after a "
                             f"{q_len}-piece question; raise max_seq_length or shorten the question")
        # tokenizers' stride = context tokens two neighbouring windows share; each window moves
        # doc_stride tokens along the context
        windows = tok.encode_windows(question, ex["context"], max_seq_length,
                                     stride=min(room - 1, max(0, room - doc_stride)))
        answers = ex.get("answers") or []
        for w in windows:
            f = {**_inputs(w), "example_index": i, "offsets": w.offsets, "sequence_ids": w.sequence_ids}
            start = end = 0  # [CLS]: no answer in this window
            if answers and not ex.get("is_impossible"):
                text = answers[0]["text"]  # the span without surrounding spaces
                a0 = answers[0]["answer_start"] + len(text) - len(text.lstrip())
                a1 = answers[0]["answer_start"] + len(text.rstrip())
                ctx = [t for t, s in enumerate(w.sequence_ids) if s == 1]
                if ctx and w.offsets[ctx[0]][0] <= a0 and w.offsets[ctx[-1]][1] >= a1:
                    start = next(t for t in ctx if w.offsets[t][1] > a0)
                    end = next(t for t in reversed(ctx) if w.offsets[t][0] < a1)
            f["start_positions"], f["end_positions"] = start, end
            feats.append(f)
    return feats


def qa_predictions(examples, features, start_logits, end_logits, max_answer_length: int = 30,
                   n_best: int = 20) -> dict[str, dict]:
    """Best span per question over all its windows. Score of span (i, j) = S·T_i + E·T_j with
    i <= j inside the context; the null score s_null = S·C + E·C at [CLS] (minimum over windows,
    as in the original code). Returns {id: {"text", "score", "null_score"}}."""
    best: dict[int, dict] = {}
    for f, s, e in zip(features, start_logits, end_logits):
        i = f["example_index"]
        ctx = [t for t, sid in enumerate(f["sequence_ids"]) if sid == 1]
        entry = best.setdefault(i, {"text": "", "score": float("-inf"), "null_score": float("inf")})
        entry["null_score"] = min(entry["null_score"], float(s[0] + e[0]))
        if not ctx:
            continue
        lo, hi = ctx[0], ctx[-1]
        s_ctx, e_ctx = s[lo:hi + 1], e[lo:hi + 1]
        starts = torch.topk(s_ctx, min(n_best, len(s_ctx))).indices.tolist()
        ends = torch.topk(e_ctx, min(n_best, len(e_ctx))).indices.tolist()
        for a in starts:
            for b in ends:
                if b < a or b - a + 1 > max_answer_length:
                    continue
                score = float(s_ctx[a] + e_ctx[b])
                if score > entry["score"]:
                    ctx_text = examples[i]["context"]
                    entry.update(score=score, text=ctx_text[f["offsets"][lo + a][0]:f["offsets"][lo + b][1]])
    return {examples[i].get("id", str(i)): v for i, v in best.items()}


def apply_null_threshold(preds: dict[str, dict], tau: float) -> dict[str, str]:
    """SQuAD 2.0 (Section 4.3): answer with the best span only when its score > s_null + τ."""
    return {k: (v["text"] if v["score"] > v["null_score"] + tau else "") for k, v in preds.items()}


def qa_scores(examples, features, outputs, tune_null_threshold: bool = True) -> dict:
    """SQuAD's exact match and F1 of the best spans; on SQuAD 2.0 data (some questions have no
    answer) with the null threshold τ chosen on dev when ``tune_null_threshold``."""
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


OPS: dict[str, TaskOps] = {ops.target: ops for ops in (ClassOps(), ValueOps(), TagOps(), SpanOps(), ChoiceOps())}


def task_ops(task: str) -> TaskOps:
    """The behaviour of task type ``task`` (a registry name); an unknown name is a ValueError."""
    return OPS[task_type(task).target]
