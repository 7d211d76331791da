"""Score a model on a small hand-written check set: cloze sentences and next-sentence pairs.

Held-out MLM accuracy counts every masked WordPiece of running text, most of them easy
("the", "of") or hopeless (a name). A teacher needs a different question answered: does the
model on screen fill in an obvious word, and tell a real continuation from a random one? The
check set (``bench/check_set.json``) asks exactly that, with sentences written by hand from
documents the shipped models never trained on.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ... import shipped
from .pretraining_tasks import mlm_top_k, nsp_probability

CHECK_SET = shipped.check_set()


def load_check_set(path: str | Path = CHECK_SET) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def answered(answers: list[str], words: list[str]) -> bool:
    """Is an accepted answer among ``words``, in capitals or not? The answers are written in lower case, and a cased
    model's "States" after "the United" is the word asked for."""
    said = {w.lower() for w in words}
    return any(a.lower() in said for a in answers)


def score_check_set(loaded, check_set: dict, top_k: int = 5) -> dict:
    """{"cloze_solved", "cloze_total", "nsp_correct", "nsp_total", "rows"}; a cloze is solved when
    an accepted answer is among the top ``top_k`` words, a pair when P(IsNext) > 0.5 matches."""
    rows, solved = [], 0
    for item in check_set["cloze"]:
        preds = [p["token"] for p in mlm_top_k(loaded, item["text"], top_k)[0]["predictions"]]
        ok = answered(item["answers"], preds)
        solved += ok
        rows.append({"kind": "cloze", "text": item["text"], "expected": item["answers"], "got": preds, "ok": ok})
    pairs = [(p["a"], p["b"]) for p in check_set["nsp"]]
    correct = 0
    for item, r in zip(check_set["nsp"], nsp_probability(loaded, pairs)):
        ok = (r["is_next"] > 0.5) == item["is_next"]
        correct += ok
        rows.append({"kind": "nsp", "text": f"{item['a']} || {item['b']}", "expected": item["is_next"],
                     "got": round(r["is_next"], 3), "ok": ok})
    return {"cloze_solved": solved, "cloze_total": len(check_set["cloze"]),
            "nsp_correct": correct, "nsp_total": len(check_set["nsp"]), "rows": rows}


def cloze_score(loaded, top_k: int = 5) -> dict:
    """{"solved", "total", "top_k"}: how many clozes of the check set have an accepted answer
    among the model's top ``top_k`` words at the first [MASK] (the same count as
    ``score_check_set``).

    All sentences go through the model in one padded batch, and the MLM head (a ``vocab``-wide
    output, half the work of a small model) runs on the first [MASK] of each sentence only, as in
    pre-training: the Masked word probe shows this count on its first visit."""
    items = load_check_set()["cloze"]
    tok = loaded.tokenizer
    encs = [tok.encode(item["text"], max_length=loaded.config.max_position_embeddings) for item in items]
    firsts = [e.input_ids.index(tok.mask_id) for e in encs]  # each check-set cloze has a [MASK]
    batch = tok.tensors(encs, device=next(loaded.model.parameters()).device)
    rows = torch.arange(len(encs), device=batch["input_ids"].device)
    with torch.no_grad():
        seq = loaded.model.bert(**batch).last_hidden_state[rows, torch.tensor(firsts, device=rows.device)]  # [N, H]
        top = loaded.model.cls.predictions(seq).float().topk(top_k, dim=-1).indices.tolist()
    solved = sum(answered(item["answers"], [tok.id_to_token(i) for i in ids]) for item, ids in zip(items, top))
    return {"solved": solved, "total": len(items), "top_k": top_k}
