"""SQuAD v1.1 and v2.0 scores (paper, Sections 4.2-4.3): exact match and token-overlap F1 against
the best of several human answers, following the official evaluation scripts (normalisation:
lower case, no punctuation, no articles, single spaces); v2.0 adds the has-answer / no-answer
split."""
from __future__ import annotations

import re
import string
from collections import Counter


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


_PUNCTUATION = frozenset(string.punctuation)  # ASCII punctuation, as in the official script
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def squad_normalize(text: str) -> str:
    """Put an answer in the form the official SQuAD v1.1/v2.0 evaluation compares.

    In this order: lower-case; delete every ASCII punctuation character; replace the articles
    "a", "an" and "the" (whole words only) by a space; collapse runs of whitespace into single
    spaces and strip the ends. So ``"The  Cat!"`` becomes ``"cat"``, and "the Eiffel Tower"
    matches "Eiffel Tower.". Note that punctuation is deleted, not replaced: "U.S." becomes
    "us" and "well-known" becomes "wellknown".
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _gold_list(golds) -> list[str]:
    """The gold answers that still say something after normalisation. An empty list means the
    question has no answer (SQuAD 2.0); golds like "" or "the" count as "no answer", as in the
    official v2.0 script."""
    if isinstance(golds, str):
        golds = [golds]
    return [g for g in golds if squad_normalize(g)]


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    """Bag-of-words F1 between two token lists: a token shared k times counts k times."""
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_exact_match(pred: str, golds) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0.

    SQuAD lists several human answers per question and the prediction is compared with each,
    keeping the best. ``golds`` is a list of answers (a single string is accepted too). If no
    gold answer is left after normalisation, the question has no answer (SQuAD 2.0) and the
    score is 1.0 exactly when the prediction is empty too.
    """
    pred_norm, golds = squad_normalize(pred), _gold_list(golds)
    if not golds:
        return float(pred_norm == "")
    return float(any(pred_norm == squad_normalize(g) for g in golds))


def squad_f1(pred: str, golds) -> float:
    """Token-overlap F1 between the prediction and the best-matching gold answer, in [0, 1].

    Both are normalised (:func:`squad_normalize`) and split on whitespace. With ``same`` the
    number of tokens they share (counting repeats), precision = same / prediction tokens,
    recall = same / gold tokens and F1 = 2·P·R / (P + R). Partial answers get partial credit:
    "the big cat" against "a cat sat" shares one token of two, so F1 = 0.5. We keep the maximum
    over the gold answers. A question with no answer (SQuAD 2.0) scores 1.0 if the prediction
    is empty, else 0.0; an empty prediction for an answerable question scores 0.0.
    """
    pred_tokens, golds = squad_normalize(pred).split(), _gold_list(golds)
    if not golds:
        return float(not pred_tokens)
    return max(_token_f1(pred_tokens, squad_normalize(g).split()) for g in golds)


def squad_scores(predictions: dict[str, str], golds: dict[str, list[str]]) -> dict:
    """Exact match and F1 over a whole SQuAD data set, in percent, as the paper reports them.

    ``golds`` maps each question id to its gold answers; a question with no answer (SQuAD 2.0)
    has ``[]`` or ``[""]``. ``predictions`` maps question ids to answer strings, ``""`` meaning
    "no answer". Every question in ``golds`` is scored; a question without a prediction scores
    0 (as in the v1.1 script); predictions for unknown ids are ignored.

    Returns ``{"exact_match", "f1", "total"}``. When some questions have no answer, the scores
    are also broken down, like the official v2.0 script's HasAns/NoAns lines, into
    ``has_answer_exact_match``, ``has_answer_f1``, ``has_answer_total`` and the same with
    ``no_answer_`` (a group with no question is left out).
    """
    em: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qid, answers in golds.items():
        if qid in predictions:
            em[qid] = squad_exact_match(predictions[qid], answers)
            f1[qid] = squad_f1(predictions[qid], answers)
        else:
            em[qid] = f1[qid] = 0.0

    def summary(ids: list[str], prefix: str = "") -> dict:
        n = len(ids)
        return {f"{prefix}exact_match": 100.0 * _ratio(sum(em[i] for i in ids), n),
                f"{prefix}f1": 100.0 * _ratio(sum(f1[i] for i in ids), n), f"{prefix}total": n}

    result = summary(list(golds))
    no_answer = [qid for qid, answers in golds.items() if not _gold_list(answers)]
    if no_answer:
        has_answer = [qid for qid, answers in golds.items() if _gold_list(answers)]
        if has_answer:
            result.update(summary(has_answer, "has_answer_"))
        result.update(summary(no_answer, "no_answer_"))
    return result
