"""Turning task examples into model inputs, one recipe per task (paper, Section 4, Figure 4).

* single sentence / sentence pair / regression: ``[CLS] A [SEP] (B [SEP])``; the label is read
  from the pooled [CLS].
* NER: the words are split into WordPieces and only the *first* piece of each word carries
  the word's tag; the other pieces are ignored by the loss (Section 5.3).
* span QA: ``[CLS] question [SEP] context [SEP]``; contexts longer than the window are cut
  into overlapping windows ("document stride"); the label is the answer's first and last
  token, or [CLS] when the window holds no answer (SQuAD 2.0's null answer).
* multiple choice: one ``[CLS] context [SEP] choice [SEP]`` sequence per choice.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..data.task_types import TASKS
from ..model import IGNORE
from ..tokenizer import WordPieceTokenizer



def _inputs(e) -> dict:
    return {"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "attention_mask": e.attention_mask}


def featurize(task: str, examples: Sequence[dict], tok: WordPieceTokenizer, label_names: list[str] | None,
              max_seq_length: int = 128, doc_stride: int = 64, max_query_length: int = 64) -> list[dict]:
    """One dict per model input (QA: per window) with ``example_index`` pointing back."""
    if task in ("classification", "pair-classification", "regression"):
        pairs = [ex["text"] if not ex.get("text_pair") else (ex["text"], ex["text_pair"]) for ex in examples]
        index = {n: i for i, n in enumerate(label_names or [])}
        feats = []
        for i, (ex, e) in enumerate(zip(examples, tok.encode_batch(pairs, max_seq_length))):
            f = {**_inputs(e), "example_index": i}
            if "label" in ex and ex["label"] is not None:
                f["labels"] = float(ex["label"]) if task == "regression" else index[str(ex["label"])]
            feats.append(f)
        return feats
    if task == "ner":
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
    if task == "qa":
        return _featurize_qa(examples, tok, max_seq_length, doc_stride, max_query_length)
    if task == "multiple-choice":
        feats = []
        for i, ex in enumerate(examples):
            encs = tok.encode_batch([(ex["context"], c) for c in ex["choices"]], max_seq_length)
            f = {"input_ids": [e.input_ids for e in encs], "token_type_ids": [e.token_type_ids for e in encs],
                 "attention_mask": [e.attention_mask for e in encs], "example_index": i}
            if ex.get("label") is not None:
                f["labels"] = int(ex["label"])
            feats.append(f)
        return feats
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def _featurize_qa(examples, tok, max_seq_length, doc_stride, max_query_length) -> list[dict]:
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


def collate(features: Sequence[dict], pad_id: int, task: str) -> dict[str, torch.Tensor]:
    """Pad to the longest input in the batch and stack: [B, T] (multiple choice: [B, C, T])."""
    if task == "multiple-choice":
        T = max(len(x) for f in features for x in f["input_ids"])
        C = max(len(f["input_ids"]) for f in features)
        if any(len(f["input_ids"]) != C for f in features):
            raise ValueError("every multiple-choice example needs the same number of choices")
        out = {k: torch.tensor([[x + [pad if k == "input_ids" else 0] * (T - len(x)) for x in f[k]]
                                for f in features])
               for k, pad in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0))}
    else:
        T = max(len(f["input_ids"]) for f in features)
        out = {k: torch.tensor([f[k] + [pad] * (T - len(f[k])) for f in features])
               for k, pad in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0))}
    if "labels" in features[0]:
        if task == "ner":
            out["labels"] = torch.tensor([f["labels"] + [IGNORE] * (T - len(f["labels"])) for f in features])
        else:
            out["labels"] = torch.tensor([f["labels"] for f in features],
                                         dtype=torch.float if task == "regression" else torch.long)
    if "start_positions" in features[0]:
        out["start_positions"] = torch.tensor([f["start_positions"] for f in features])
        out["end_positions"] = torch.tensor([f["end_positions"] for f in features])
    return out


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
