"""Did a fine-tuning run learn something? The rule the Two models page uses to pick its default
model B, judged only from what the run wrote down, so a page, the CLI or a test gets the same answer.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ...tasks.metrics import MIN_DEV_EXAMPLES

# Dev scores that are 0 for a model no better than chance (always the majority class included),
# in the order a run is read for one: Matthews correlation (classification), Pearson r (regression).
CHANCE_FREE_SCORES = {"mcc": "MCC", "pearson": "Pearson r"}
# The training loss must fall by at least a tenth. Measured with minilm-mlm-nsp on
# bbc-topics (211 dev articles): 6 steps on 60 articles lowered it by 2 % (dev MCC 0.38, CKA above 0.998
# in every layer: the new output layer learned, the encoder hardly moved); SHORT_FINETUNE's 40 steps by
# 20 % (dev MCC 0.74, CKA 0.97 in layer 6; with the CPU-stage weights 24 %, MCC 0.79, CKA 0.95).
MIN_LOSS_DROP = 0.10


@dataclass(frozen=True)
class Verdict:
    learned: bool
    reason: str    # one clause with this run's own numbers ("its dev MCC 0.38 on 211 examples ...")


def learned_something(run) -> Verdict:
    """Did this fine-tuning run learn something? Judged only from what the run wrote down
    (``status.json``, ``metrics.json``, ``metrics.jsonl``), so a page, the CLI or a test gets the same
    answer. It counts when all of these hold:

    1. It **finished** (not stopped, failed or crashed) and kept its model.
    2. Its dev set had at least ``MIN_DEV_EXAMPLES`` (100) examples: on fewer, one example moves
       accuracy by more than a point and chance alone swings it by ten (``small_dev_warning``).
    3. Its dev score is **clear of chance**, where the task records a score that is 0 at chance:
       MCC (classification) or Pearson r (regression) above 2/√n for n dev examples. For a
       prediction unrelated to the truth, √n times either score is close to a standard normal
       number (for two classes n·MCC² is the χ² statistic of the confusion table), so guessing
       stays under 2/√n about 98 times in 100; we use the same margin for more classes. NER, SQuAD
       and multiple choice record no such score (their F1 and accuracy are not 0 at chance): for
       them this test is skipped.
    4. Its **training loss fell** by at least a tenth (``MIN_LOSS_DROP``): the mean of its last
       three logged losses is at most 9/10 of the mean of its first three. A run of a few steps can
       lift the dev score through its new output layer alone while the encoder, which this page
       compares, has hardly moved; its loss then stays near where it started.
    """
    status = run.status()
    state = status.get("state", "unknown")
    if state != "finished":
        return Verdict(False, f"it is {state}, not finished")
    if not (run.path / "model" / "config.json").is_file():
        return Verdict(False, "it kept no model")
    try:
        result = json.loads((run.path / "metrics.json").read_text())
    except (OSError, ValueError):
        result = {}
    n = result.get("dev_examples") if isinstance(result, dict) else None
    if not isinstance(n, int):
        return Verdict(False, "it recorded no dev score (metrics.json)")
    if n < MIN_DEV_EXAMPLES:
        return Verdict(False, f"it was scored on {n} dev example{'s' if n != 1 else ''}, fewer than "
                              f"{MIN_DEV_EXAMPLES}, so its score is mostly chance")
    dev = result.get("dev") or {}
    said = []
    key = next((k for k in CHANCE_FREE_SCORES if isinstance(dev.get(k), (int, float))), None)
    if key:
        score, margin = float(dev[key]), 2 / n ** 0.5
        what = f"its dev {CHANCE_FREE_SCORES[key]} {score:.2f} on {n} examples"
        if score <= margin:
            return Verdict(False, f"{what} is within chance (not above 2/√{n} = {margin:.2f})")
        said.append(f"{what} is clear of chance (above 2/√{n} = {margin:.2f})")
    lr = result.get("lr")
    losses = [float(r["loss"]) for r in run.metrics() if r.get("split") == "train"
              and isinstance(r.get("loss"), (int, float)) and (lr is None or r.get("lr_setting") in (None, lr))]
    if len(losses) < 2:
        return Verdict(False, "it logged too few training losses to tell whether they fell")
    k = min(3, len(losses) // 2)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    fell = 1 - last / first if first > 0 else 0.0
    how = (f"its training loss went from {first:.2f} to {last:.2f} ({fell:.0%} lower; the mean of its first and of "
           f"its last {k} logged losses)")
    if fell < MIN_LOSS_DROP:
        return Verdict(False, "; ".join(said + [f"{how}: less than the {MIN_LOSS_DROP:.0%} fall that counts"]))
    return Verdict(True, " and ".join(said + [how]))


LEARNED_RULE = (f"A fine-tuning counts as having learned something when it finished, was scored on at least "
                f"{MIN_DEV_EXAMPLES} dev examples, its dev MCC (classification) or Pearson r (regression) is above "
                f"2/√n for n dev examples, and its training loss fell by at least {MIN_LOSS_DROP:.0%}.")
