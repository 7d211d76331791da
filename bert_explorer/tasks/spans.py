"""Extractive question answering (paper, Sections 4.2-4.3, Figure 4c: SQuAD v1.1 and v2.0).

The input is ``[CLS] question [SEP] context [SEP]``; a context longer than the window is cut into
overlapping windows (the "document stride"). The label is the answer's first and last token, or
[CLS] when the window holds no answer (SQuAD 2.0's null answer). A span (i, j) scores S·T_i + E·T_j;
SQuAD 2.0 answers only when the best span beats the null score at [CLS] by a threshold τ chosen
on dev. Scored by exact match and F1, as the official scripts (:mod:`.squad`).
"""
from __future__ import annotations

import math
from typing import ClassVar

import torch

from collections import defaultdict

from .base import Shown, TaskType, model_inputs, ratio
from .squad import squad_exact_match, squad_f1, squad_scores

NO_ANSWER = "(no answer)"


def _finite(x):
    return x if isinstance(x, (int, float)) and abs(x) != float("inf") else None


def answer_pieces(context: str, gold: str, predicted: str) -> list[tuple[str, bool, bool]]:
    """The passage cut where the gold answer and the model's answer (the first occurrence of each)
    begin and end: ``(text, in the gold answer, in the model's answer)`` in order, the pieces adding up
    to the passage, so that a page can mark both answers, apart or overlapping, and show the passage's
    own characters between the marks."""
    spans = []
    for answer in (gold, predicted):
        i = context.find(answer) if answer else -1
        spans.append((i, i + len(answer)) if i >= 0 else (0, 0))
    cuts = sorted({0, len(context), *(x for span in spans for x in span)})
    return [(context[a:b], spans[0][0] <= a < spans[0][1], spans[1][0] <= a < spans[1][1])
            for a, b in zip(cuts, cuts[1:])]


class SpanTask(TaskType):
    """The answer's first and last token in a passage (Figure 4c, SQuAD v1.1 and v2.0)."""

    target: ClassVar[str] = "span"
    architecture: ClassVar[str] = "BertForQuestionAnswering"
    label_key: ClassVar[str] = "answers"
    reads_cls: ClassVar[bool] = False
    labelled: ClassVar[bool] = False
    feature_based: ClassVar[bool] = False
    left_to_right: ClassVar[bool] = False
    answer_key: ClassVar[str] = "answer"
    reads_in_windows: ClassVar[bool] = True  # (``qa_windows``: the document stride)
    percent: ClassVar[bool] = True
    table_reader: ClassVar[str] = "qa"
    table_columns: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("question",), ("context", "passage", "paragraph"), ("answers", "answer", "answertext", "answerstart",
                                                             "isimpossible"))
    after_run_answers: ClassVar[bool] = True  # with the no-answer threshold tuned on dev (Section 4.3)
    after_finetuning: ClassVar[str] = (
        "Question answering gets the table (the passage with both answers marked) and slices; not the [CLS] maps "
        "(its head reads every token of the passage), calibration or attributions. Attention works for any input.")

    def dev_indices(self, examples, fraction, target, rng):
        """Questions on the same passage stay together, so that no dev passage was seen in training."""
        groups = defaultdict(list)
        for i, ex in enumerate(examples):
            groups[ex["context"]].append(i)
        keys = list(groups)
        rng.shuffle(keys)
        dev = []
        for k in keys:  # a passage whose questions would pass the target is left to training
            if len(dev) + len(groups[k]) <= target:
                dev += groups[k]
        if not dev:  # every passage holds more questions than the target: the one with fewest, if near the target
            smallest = min(groups.values(), key=len)
            if len(smallest) > 2 * max(1, target) or 2 * len(smallest) > len(examples):
                return super().dev_indices(examples, fraction, target, rng)  # ("at random", said in the notes)
            dev = list(smallest)
        return dev, "by context (questions on one paragraph stay together)"

    def row(self, example, answer):
        golds = [a["text"] for a in example.get("answers") or []]
        pred = answer["answer"]
        em, f1 = squad_exact_match(pred, golds or [""]), squad_f1(pred, golds or [""])
        return {"text": example["question"], "text_pair": example["context"], "gold": " | ".join(golds) or NO_ANSWER,
                "predicted": pred or NO_ANSWER, "correct": bool(em), "exact_match": 100.0 * em, "f1": 100.0 * f1,
                "span_score": _finite(answer.get("score")), "null_score": _finite(answer.get("null_score"))}

    def score_rows(self, rows):  # SQuAD's scores are means over questions, in percent
        return {"f1": ratio(sum(r["f1"] for r in rows), len(rows)),
                "exact_match": ratio(sum(r["exact_match"] for r in rows), len(rows))}

    def gold_slices(self, rows):
        return "gold answer", ["unanswerable" if r["gold"] == NO_ANSWER else "answerable" for r in rows]

    def why(self, row, example, answer):
        gold_text = (example.get("answers") or [{"text": ""}])[0]["text"]
        return {"question": example["question"],
                "pieces": answer_pieces(example["context"], gold_text, answer["answer"])}

    def label_counts(self, examples):
        return {}

    def summary_counts(self, examples):  # SQuAD 2.0: questions the passage does not answer
        return {"unanswerable": sum(bool(ex.get("is_impossible")) for ex in examples)}

    def preview(self, example, shorten=str):
        return {"question": example["question"], "context": shorten(example["context"]),
                "answer": " | ".join(a["text"] for a in example.get("answers", [])) or "(no answer)"}

    def example_from_text(self, text, second=None):
        if second is None:
            raise ValueError("a QA model needs a question and a context")
        return {"question": text, "context": second}

    def featurize(self, examples, tok, label_names, max_seq_length=128, doc_stride=64, max_query_length=64):
        return qa_windows(examples, tok, max_seq_length, doc_stride, max_query_length)

    def collate(self, features, pad_id):
        out = super().collate(features, pad_id)
        out["start_positions"] = torch.tensor([f["start_positions"] for f in features])
        out["end_positions"] = torch.tensor([f["end_positions"] for f in features])
        return out

    def batch_outputs(self, model_output):
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

    def texts(self, example):
        return example["question"], example["context"]

    def shown(self, answer, example):
        return Shown("Answer", answer["answer"] or "(no answer)")


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
            f = {**model_inputs(w), "example_index": i, "offsets": w.offsets, "sequence_ids": w.sequence_ids}
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
            r = squad_scores(apply_null_threshold(preds, t - 1e-6), golds)
            if result is None or r["f1"] > result["f1"]:
                tau, result = t - 1e-6, r
    else:
        tau = float("-inf") if not has_v2 else 0.0
        result = squad_scores(apply_null_threshold(preds, tau), golds)
    # τ = -inf means "always answer" (SQuAD v1.1): stored as null to keep metrics.json strict JSON
    return {**result, "null_threshold": tau if math.isfinite(tau) else None}
