"""Is the fine-tuned classifier as sure as it is right? A reliability diagram and the expected
calibration error of its dev predictions (Guo et al. 2017, "On Calibration of Modern Neural
Networks", Section 2).

(Not to be confused with ``analysis/attributions/reliability.py``, the rule that says when an attribution's
integral is accurate enough to trust.)

The model's *confidence* in an answer is its softmax probability of the class it chose. Sort the
dev examples into M bins of equal width by confidence ((0, 1/M], (1/M, 2/M], ...); in each bin
compare the mean confidence with the accuracy, the share of answers that were right. A calibrated
model is right 80 % of the time when it is 80 % sure: its bars lie on the diagonal. The expected
calibration error is the gap, weighted by how many examples each bin holds:

    ECE = Σ_m (|B_m| / n) · |acc(B_m) − conf(B_m)|

0 is perfectly calibrated; a model that says 0.99 and is right 80 % of the time scores 0.19.
It applies to the tasks whose answer is one label with a probability (classification and pairs);
a value (regression) has no confidence to compare.
"""
from __future__ import annotations

BINS = 10


def reliability_bins(confidence: list[float], correct: list[bool], bins: int = BINS) -> list[dict]:
    """One dict per bin of equal width: its edges, count, mean confidence and accuracy (None for an
    empty bin). A confidence on an edge belongs to the lower bin ((lo, hi]); 0 goes to the first."""
    if len(confidence) != len(correct):
        raise ValueError(f"{len(confidence)} confidences but {len(correct)} right-or-wrong answers")
    members: list[list[int]] = [[] for _ in range(bins)]
    for i, c in enumerate(confidence):
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"confidence {c} is not a probability (between 0 and 1)")
        k = next(k for k in range(bins) if c <= (k + 1) / bins)  # (lo, hi]: compared with the edge itself
        members[k].append(i)
    out = []
    for k, idx in enumerate(members):
        n = len(idx)
        out.append({"lower": k / bins, "upper": (k + 1) / bins, "count": n,
                    "confidence": sum(confidence[i] for i in idx) / n if n else None,
                    "accuracy": sum(bool(correct[i]) for i in idx) / n if n else None})
    return out


def expected_calibration_error(bin_rows: list[dict]) -> float:
    """ECE from :func:`reliability_bins`: the count-weighted mean gap between accuracy and confidence."""
    n = sum(b["count"] for b in bin_rows)
    if n == 0:
        return 0.0
    return sum(b["count"] / n * abs(b["accuracy"] - b["confidence"]) for b in bin_rows if b["count"])


def calibration(rows: list[dict], bins: int = BINS) -> dict:
    """The reliability diagram and ECE of prediction rows (``predictions.rows_of``): ``bins``,
    ``ece``, ``n``, the mean confidence and the accuracy, and one sentence with these numbers."""
    conf = [float(r["p_predicted"]) for r in rows]
    right = [bool(r["correct"]) for r in rows]
    table = reliability_bins(conf, right, bins)
    ece = expected_calibration_error(table)
    n = len(rows)
    mean_conf = sum(conf) / n if n else 0.0
    acc = sum(right) / n if n else 0.0
    worst = max((b for b in table if b["count"]), key=lambda b: abs(b["accuracy"] - b["confidence"]), default=None)
    if n == 0:
        sentence = "There are no dev predictions to measure calibration on."
    else:
        lean = ("over-confident: it is surer than it is right" if mean_conf > acc + 0.01 else
                "under-confident: it is right more often than it is sure" if mean_conf < acc - 0.01 else
                "as sure on average as it is right")
        sentence = (f"On {n} dev examples the model's mean confidence is {mean_conf:.1%} and its accuracy "
                    f"{acc:.1%}: {lean}. ECE = {ece:.3f} ({bins} bins)")
        if worst is not None:
            # (the bin in per cent, as the confidences beside it: "(0.2, 0.3]" beside "a confidence of 24.6%")
            sentence += (f"; the largest gap is in the bin of confidences ({worst['lower']:.0%}, "
                         f"{worst['upper']:.0%}], where "
                         f"{worst['count']} answers had a mean confidence of {worst['confidence']:.1%} and "
                         f"{worst['accuracy']:.1%} were right.")
        else:
            sentence += "."
    return {"bins": table, "ece": ece, "n": n, "mean_confidence": mean_conf, "accuracy": acc,
            "sentence": sentence}
