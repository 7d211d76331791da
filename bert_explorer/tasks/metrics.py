"""Evaluation metrics for fine-tuning (paper, Section 4).

BERT is judged on many benchmarks, and each benchmark has its own way of keeping score. This
module computes all of them so that the numbers we print can be compared with the paper's
tables. Classification and correlations come from scikit-learn and scipy; entity F1 is written
here, following ``conlleval`` (checked against seqeval in the tests); SQuAD's exact match and F1
follow the official scripts in :mod:`.squad`:

==========================  ===============================================================
Benchmark                   What it reports
==========================  ===============================================================
MNLI, QNLI, RTE, SST-2,     accuracy: the fraction of examples whose predicted label is the
WNLI, SWAG                  gold label (:func:`accuracy`).
MRPC, QQP                   F1 of the positive class ("is a paraphrase" / "is a duplicate")
                            together with accuracy (:func:`binary_f1`), because the classes
                            are unbalanced and accuracy alone flatters a lazy model.
CoLA                        Matthews correlation coefficient (:func:`mcc`): about 70% of its
                            sentences are acceptable, so a model that always says
                            "acceptable" gets 70% accuracy but an MCC of 0.
STS-B                       Pearson and Spearman correlation between the predicted and the
                            human similarity scores (:func:`pearson`, :func:`spearman`).
CoNLL-2003 NER              entity-level F1 (:func:`entity_f1`): an entity counts only when
                            both its boundaries and its type are exactly right, as in the
                            ``conlleval`` script.
SQuAD v1.1 / v2.0           exact match and token-overlap F1 against the best of several
                            human answers (``squad.squad_scores``), following the official
                            evaluation scripts.
==========================  ===============================================================

Every function returns plain Python numbers, lists and dicts, so its result can be written to
``metrics.json`` as it is. Where a metric is undefined (a correlation with a constant input, an
F1 with nothing to count) we return ``0.0`` instead of ``nan``: it means "no evidence of skill",
it keeps the JSON valid, and model selection ("keep the checkpoint with the best score") still
works. Each such case is stated in the function's docstring.
"""
from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

__all__ = [
    "accuracy", "macro_f1", "binary_f1", "mcc", "pearson", "spearman", "confusion_matrix",
    "bio_entities", "entity_f1", "classification_report", "regression_report",
]


# scikit-learn's and scipy's metrics are imported on first use: the two take about 1.8 s to import
# on 2 cores, which a page needing only MIN_DEV_EXAMPLES (Two models) paid on its first visit.
def _skm():
    from sklearn import metrics
    return metrics


def _stats():
    from scipy import stats
    return stats


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------

def _plain(value):
    """A numpy scalar becomes the matching Python scalar (so that JSON can write it)."""
    return value.item() if isinstance(value, np.generic) else value


def _pair(y_true: Iterable, y_pred: Iterable) -> tuple[list, list]:
    """Both label sequences as lists of plain Python values, checked to have the same length."""
    t = [_plain(v) for v in y_true]
    p = [_plain(v) for v in y_pred]
    if len(t) != len(p):
        raise ValueError(f"y_true has {len(t)} items but y_pred has {len(p)}")
    return t, p


def _label_set(*sequences: list) -> list:
    """Every label that occurs, sorted when the labels can be sorted, else in order of appearance."""
    seen = dict.fromkeys(v for seq in sequences for v in seq)
    try:
        return sorted(seen)
    except TypeError:
        return list(seen)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


# ----------------------------------------------------------------------------------------------
# Classification: accuracy, F1, Matthews correlation, confusion matrix (scikit-learn)
# ----------------------------------------------------------------------------------------------

def accuracy(y_true: Iterable, y_pred: Iterable) -> float:
    """The fraction of examples whose predicted label equals the gold label.

    This is the headline number for MNLI, QNLI, RTE, SST-2, WNLI and SWAG, and it is reported
    next to F1 for MRPC and QQP. With no examples at all we return 0.0.
    """
    t, p = _pair(y_true, y_pred)
    return float(_skm().accuracy_score(t, p)) if t else 0.0


def confusion_matrix(y_true: Iterable, y_pred: Iterable, labels: Sequence | None = None) -> list[list[int]]:
    """Count how often each true label was predicted as each label.

    Row ``i`` is the *true* label ``labels[i]`` and column ``j`` the *predicted* label
    ``labels[j]`` (scikit-learn's orientation). The diagonal holds the correct predictions;
    reading along a row shows what a class gets confused with. Without ``labels`` we use every
    label that occurs, sorted. An example whose true or predicted label is not in ``labels`` is
    left out.
    """
    t, p = _pair(y_true, y_pred)
    labels = _label_set(t, p) if labels is None else [_plain(v) for v in labels]
    if not labels or not set(t) & set(labels):  # scikit-learn refuses this case: nothing to count
        return [[0] * len(labels) for _ in labels]
    return _skm().confusion_matrix(t, p, labels=labels).tolist()


def binary_f1(y_true: Iterable, y_pred: Iterable, positive: Hashable) -> float:
    """F1 of one class, the ``positive`` one: the harmonic mean of precision and recall.

    GLUE reports this F1 for MRPC and QQP, with label 1 ("paraphrase", "duplicate") as the
    positive class. If the positive class occurs neither in the gold labels nor in the
    predictions, there is nothing to measure and we return 0.0.
    """
    t, p = _pair(y_true, y_pred)
    positive = _plain(positive)
    if not t or positive not in set(t) | set(p):
        return 0.0
    return float(_skm().f1_score(t, p, labels=[positive], average="macro", zero_division=0))


def macro_f1(y_true: Iterable, y_pred: Iterable, labels: Sequence | None = None) -> float:
    """The unweighted mean of the per-class F1 scores ("macro" average).

    Every class counts the same, however rare it is, so a model cannot score well by ignoring
    the small classes. A class that occurs in the gold labels but is never predicted has F1 = 0
    and pulls the mean down; a class in ``labels`` that occurs neither in the gold labels nor in
    the predictions is left out (scikit-learn would count it as 0; we do not punish a model for
    a class that the evaluation set does not contain). Returns 0.0 with no class to average.
    """
    t, p = _pair(y_true, y_pred)
    labels = _label_set(t, p) if labels is None else [_plain(v) for v in labels]
    present = [label for label in labels if label in set(t) | set(p)]
    if not present:
        return 0.0
    return float(_skm().f1_score(t, p, labels=present, average="macro", zero_division=0))


def mcc(y_true: Iterable, y_pred: Iterable) -> float:
    """Matthews correlation coefficient, the CoLA metric, for any number of classes
    (Gorodkin's R_K for more than two).

    It is the correlation between the true and the predicted labels: +1 for perfect
    predictions, 0 for predictions no better than chance (including always predicting the same
    class), -1 for perfectly wrong binary predictions. Unlike accuracy it is not fooled by
    unbalanced classes. Undefined cases (one class only, no examples) give 0.0.
    """
    t, p = _pair(y_true, y_pred)
    return float(_skm().matthews_corrcoef(t, p)) if t else 0.0


_NEGATION = re.compile(r"(not|non|no|un|in)[\s_-]*", re.IGNORECASE)


def positive_class(labels: Sequence) -> Hashable:
    """The class whose F1 a two-class task reports: the one the other negates ("duplicate" beside "not_duplicate",
    "entailment" beside "non-entailment"), else the second label (label 1 in GLUE's numbering: "equivalent" for
    MRPC, the 1 of 0/1). Label names are sorted as text, which would otherwise make "not_duplicate" positive."""
    a, b = labels
    for pos, neg in ((a, b), (b, a)):
        m = _NEGATION.match(str(neg))
        if m and str(neg)[m.end():].lower() == str(pos).lower():
            return pos
    return b


def classification_report(y_true: Iterable, y_pred: Iterable, labels: Sequence | None = None,
                          positive: Hashable | None = None) -> dict:
    """Everything the fine-tuning loop records for a classification task, in one call.

    Returns a dict with

    * ``accuracy``, ``macro_f1`` and ``mcc`` (see those functions);
    * ``f1``: for a two-class task only, the F1 of the positive class, as GLUE reports for MRPC
      and QQP. The positive class is ``positive`` if given, else :func:`positive_class`'s; ``f1_of`` names it;
    * ``per_class``: ``{label: {precision, recall, f1, support}}``, support being the number of
      gold examples of that class (keys are the labels turned into strings, so that JSON keeps
      them as they are);
    * ``confusion_matrix`` (rows = true, columns = predicted) and the ``labels`` that index it.
    """
    t, p = _pair(y_true, y_pred)
    labels = _label_set(t, p) if labels is None else [_plain(v) for v in labels]
    report = {"accuracy": accuracy(t, p), "macro_f1": macro_f1(t, p, labels), "mcc": mcc(t, p)}
    if len(labels) == 2:
        positive = positive_class(labels) if positive is None else positive
        report["f1"], report["f1_of"] = binary_f1(t, p, positive), str(positive)
    if t and labels:
        prec, rec, f1, support = _skm().precision_recall_fscore_support(t, p, labels=labels, zero_division=0)
    else:
        prec = rec = f1 = support = [0] * len(labels)
    report["per_class"] = {str(label): {"precision": float(a), "recall": float(b), "f1": float(c), "support": int(d)}
                           for label, a, b, c, d in zip(labels, prec, rec, f1, support)}
    report["confusion_matrix"] = confusion_matrix(t, p, labels)
    report["labels"] = list(labels)
    return report


# ----------------------------------------------------------------------------------------------
# Regression: Pearson and Spearman correlation (STS-B, scipy)
# ----------------------------------------------------------------------------------------------

def _vectors(x: Iterable, y: Iterable) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(list(x), dtype=np.float64).ravel()
    b = np.asarray(list(y), dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"x has {a.size} values but y has {b.size}")
    return a, b


def _defined(a: np.ndarray, b: np.ndarray) -> bool:
    """A correlation needs two values and some variation on both sides."""
    return a.size >= 2 and a.min() != a.max() and b.min() != b.max()


def pearson(x: Iterable[float], y: Iterable[float]) -> float:
    """Pearson correlation: how well a straight line relates the two lists of numbers (−1..+1).
    STS-B reports it (with Spearman) between the predicted similarity and the human rating.

    If either input is constant or has fewer than two values, the correlation is undefined:
    scipy returns ``nan`` there, we return 0.0 (a model that predicts the same score for every
    pair has shown no skill).
    """
    a, b = _vectors(x, y)
    return float(np.clip(_stats().pearsonr(a, b).statistic, -1.0, 1.0)) if _defined(a, b) else 0.0


def spearman(x: Iterable[float], y: Iterable[float]) -> float:
    """Spearman rank correlation: the Pearson correlation of the *ranks* (ties share the mean
    rank), so any monotonic relationship scores 1. STS-B reports it next to Pearson. A constant
    input gives 0.0 (scipy: ``nan``), as in :func:`pearson`.
    """
    a, b = _vectors(x, y)
    return float(_stats().spearmanr(a, b).statistic) if _defined(a, b) else 0.0


def regression_report(y_true: Iterable[float], y_pred: Iterable[float]) -> dict:
    """What the fine-tuning loop records for a regression task such as STS-B: ``pearson``,
    ``spearman`` and the mean squared error ``mse`` (the training loss, for reference).
    With no examples, all three are 0.0."""
    a, b = _vectors(y_true, y_pred)
    mse = float(np.mean((a - b) ** 2)) if a.size else 0.0
    return {"pearson": pearson(a, b), "spearman": spearman(a, b), "mse": mse}


# ----------------------------------------------------------------------------------------------
# Named-entity recognition: entities from tags, entity-level F1 (CoNLL-2003)
# ----------------------------------------------------------------------------------------------

# Tag prefixes we understand. B = begin, I = inside, E = end, S = single-token entity;
# BILOU's L (last) and U (unit) mean the same as E and S.
_PREFIX_ALIASES = {"B": "B", "I": "I", "E": "E", "S": "S", "L": "E", "U": "S"}


def _split_tag(tag: str) -> tuple[str, str]:
    """"B-PER" -> ("B", "PER"); "O" -> ("O", ""). A tag with no known prefix, like "PER", is
    read as "I-PER" (the IO scheme, where neighbouring tokens of one type form one entity)."""
    if tag in ("O", "", None):
        return "O", ""
    head, sep, rest = tag.partition("-")
    if sep and head.upper() in _PREFIX_ALIASES:
        return _PREFIX_ALIASES[head.upper()], rest
    return "I", tag


def _entity_ends(prev: str, prev_type: str, tag: str, tag_type: str) -> bool:
    """Does an entity end between the previous token and this one? (conlleval's rules.)"""
    if prev in ("E", "S"):
        return True  # E and S close their entity themselves
    if prev in ("B", "I") and tag in ("B", "S", "O"):
        return True  # a new beginning, or leaving the entity
    return prev != "O" and prev_type != tag_type  # the type changes


def _entity_starts(prev: str, prev_type: str, tag: str, tag_type: str) -> bool:
    """Does an entity start at this token? (conlleval's rules.)"""
    if tag in ("B", "S"):
        return True
    if tag in ("I", "E") and prev in ("O", "E", "S"):
        return True  # IOB1: an I- (or E-) with nothing open before it begins an entity
    return tag != "O" and prev_type != tag_type  # the type changes


def bio_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Read the entities out of one sentence's tags, as ``(type, start, end)`` spans with
    ``end`` exclusive: ``["B-PER", "I-PER", "O", "B-LOC"]`` gives
    ``[("PER", 0, 2), ("LOC", 3, 4)]``.

    CoNLL-2003 marks entities with BIO tags: B-X begins an entity of type X, I-X continues it,
    O is outside any entity. We read the tags the way the official ``conlleval`` script does,
    which also accepts the older IOB1 scheme and sloppy model output:

    * an I-X after O (or at the start of the sentence) begins a new entity, as if it were B-X;
    * an I-X right after an entity of another type ends that entity and begins a new one;
    * a B-X always begins a new entity, even right after another X.

    The BIOES/IOBES scheme (E-X ends an entity, S-X is a one-token entity) and BILOU (L-X,
    U-X) are read too, so the same function serves every tagging scheme.
    """
    entities: list[tuple[str, int, int]] = []
    prev, prev_type, start = "O", "", None
    for i, raw in enumerate(list(tags) + ["O"]):  # the final O closes the last entity
        tag, tag_type = _split_tag(raw)
        if start is not None and _entity_ends(prev, prev_type, tag, tag_type):
            entities.append((prev_type, start, i))
            start = None
        if i < len(tags) and _entity_starts(prev, prev_type, tag, tag_type):
            start = i
        prev, prev_type = tag, tag_type
    return entities


def _sentences(seqs) -> list[list[str]]:
    """A list of tag sequences; a single flat list of tags counts as one sentence."""
    seqs = list(seqs)
    if seqs and isinstance(seqs[0], str):
        return [seqs]
    return [list(s) for s in seqs]


def entity_f1(true_tag_seqs, pred_tag_seqs) -> dict:
    """Entity-level precision, recall and F1, the CoNLL-2003 NER metric.

    Both arguments are lists of sentences, each a list of tags (one flat list is taken as one
    sentence). The entities of every sentence are read with :func:`bio_entities`; a predicted
    entity is correct only if a gold entity has *exactly* the same start, end and type. So a
    predicted entity with a wrong boundary counts twice against the model: once as a false
    positive (the entity it predicted does not exist) and once as a false negative (the real
    entity was missed). The counts are added up over the whole data set before dividing
    ("micro" average), like ``conlleval`` and ``seqeval``'s default:

        precision = correct / predicted entities,   recall = correct / gold entities,
        F1 = 2·P·R / (P + R)

    Returns ``{"precision", "recall", "f1", "per_type", "token_accuracy", "n_true", "n_pred",
    "n_correct"}``, with ``per_type = {type: {"precision", "recall", "f1", "support"}}`` for
    every type seen in the gold or the predicted tags (support = number of gold entities of
    that type). ``token_accuracy`` is the fraction of tokens whose tag is right, the first line
    conlleval prints; it is not the CoNLL score. Anything with a zero denominator is 0.0.
    """
    gold_sents, pred_sents = _sentences(true_tag_seqs), _sentences(pred_tag_seqs)
    if len(gold_sents) != len(pred_sents):
        raise ValueError(f"{len(gold_sents)} gold sentences but {len(pred_sents)} predicted")
    gold: set[tuple] = set()
    pred: set[tuple] = set()
    tokens = right_tokens = 0
    for k, (g, p) in enumerate(zip(gold_sents, pred_sents)):
        if len(g) != len(p):
            raise ValueError(f"sentence {k}: {len(g)} gold tags but {len(p)} predicted tags")
        gold.update((k, *e) for e in bio_entities(g))
        pred.update((k, *e) for e in bio_entities(p))
        tokens += len(g)
        right_tokens += sum(a == b for a, b in zip(g, p))
    correct = gold & pred

    def scores(n_correct: int, n_pred: int, n_gold: int) -> dict:
        precision, recall = _ratio(n_correct, n_pred), _ratio(n_correct, n_gold)
        return {"precision": precision, "recall": recall,
                "f1": _ratio(2 * precision * recall, precision + recall)}

    per_type = {}
    for etype in sorted({e[1] for e in gold | pred}):
        n_gold = sum(e[1] == etype for e in gold)
        per_type[etype] = {**scores(sum(e[1] == etype for e in correct), sum(e[1] == etype for e in pred),
                                    n_gold), "support": n_gold}
    return {**scores(len(correct), len(pred), len(gold)), "per_type": per_type,
            "token_accuracy": _ratio(right_tokens, tokens),
            "n_true": len(gold), "n_pred": len(pred), "n_correct": len(correct)}


# How many dev examples a score needs before it means something (the fine-tuning pages and runs warn
# below it; the Two models page does not count a run scored on fewer as having learned something).
MIN_DEV_EXAMPLES = 100


# ----- whether a fine-tuning learnt anything (an ablation's cells, the Runs page's summary of them) ------------
# A cell's record: its dev ``score`` in per cent (as the paper prints it), its ``metric``, its ``dev_examples``
# and its dev set's ``majority`` rate in per cent (always answering the most frequent label).
Z95 = 1.96  # a two-sided 95 % interval of a normal distribution
PROPORTIONS = {"accuracy", "f1", "macro_f1", "exact_match"}  # metrics that are (close to) a share of examples


def sampling_error(r: dict) -> float:
    """The standard error, in points, of a setting's score as a proportion of its n dev examples
    (0 where the metric is not a proportion or n is unknown)."""
    n = r.get("dev_examples")
    if r.get("metric") not in PROPORTIONS or not n or r.get("score") is None:
        return 0.0
    p = min(max(float(r["score"]) / 100, 0.0), 1.0)
    return 100 * (p * (1 - p) / n) ** 0.5


def did_not_learn(r: dict) -> bool:
    """Is the setting's score within sampling noise of always answering the most frequent label?"""
    if r.get("majority") is None or r.get("score") is None:
        return False
    # the majority rate inside the score's own 95 % interval (at a rate of 0, as NER's F1 of answering no
    # entity, the interval of the majority itself would be empty: any lucky entity would count as learnt)
    noise = Z95 * max(sampling_error(r), sampling_error({**r, "score": r["majority"]}))
    return float(r["score"]) <= float(r["majority"]) + noise


def small_dev_warning(n_dev: int, subject: str = "The dev set", unit: str = "example",
                      counted: bool = True) -> str | None:
    """One plain sentence when a dev set (or a part of it, named by ``subject``; its items called ``unit``)
    is too small for its score to mean much, else None. An accuracy measured on n examples has a standard
    error of up to 0.5/sqrt(n): at 6 examples that is ±20 points, and one example more or less right moves
    the score by 1/n (an F1 or an exact match about as much). A score that counts no right answers
    (``counted=False``: a correlation, an error of values) is said to be uncertain without those figures."""
    if n_dev >= MIN_DEV_EXAMPLES:
        return None
    whole = subject == "The dev set"
    units = unit if n_dev == 1 else f"{unit}s"
    if n_dev == 0:
        return ("There is no dev example at all, so no score can be measured; add data or raise the dev fraction."
                if whole else f"{subject} has no {unit} at all, so no score can be measured.")
    advice = (f"; use at least {MIN_DEV_EXAMPLES * 10:,} labelled examples ({MIN_DEV_EXAMPLES} for dev) for a score "
              f"you can trust." if whole else f"; a score on at least {MIN_DEV_EXAMPLES} {unit}s can be trusted.")
    # 1/sqrt(n) = 2 x the largest standard error, 0.5/sqrt(n) (a score near 50 %): about a 95 % interval there.
    # A score far from 50 % is less noisy, so the sentence says "up to", and calls the score "mostly chance"
    # only where even that is a coin's worth: ±20 points or more (25 examples or fewer).
    noise = 100 / n_dev ** 0.5
    if not counted:
        return (f"{subject} has only {n_dev} {units}, so its score is "
                f"{'mostly chance' if noise >= 20 else 'uncertain'}: a correlation or an error measured on so few "
                f"moves a lot with each {unit}{advice}")
    return (f"{subject} has only {n_dev} {units}, so its score is "
            f"{'mostly chance' if noise >= 20 else 'uncertain'}: one {unit} more or less right moves the score by "
            f"about {100 / n_dev:.0f} points and the noise alone is up to about ±{noise:.0f} points{advice}")


def quantile_bins(values: list[float], k: int = 4) -> list[str]:
    """Each value's bin among k bins holding about equal numbers of values: "[0.20, 1.40]"."""
    x = np.asarray(values, dtype=float)
    edges = np.unique(np.quantile(x, np.linspace(0, 1, k + 1)))
    if len(edges) < 2:
        return [f"{x[0]:.3g}"] * len(x)
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    return [f"[{edges[i]:.3g}, {edges[i + 1]:.3g}]" for i in idx]


def multilabel_report(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], labels: Sequence[str]) -> dict:
    """Multi-label classification, each example a set of labels: micro-F1 (true and false positives
    and negatives added up over every label first), macro-F1 (the mean of each label's own F1; a
    label never gold nor predicted counts 0, as scikit-learn's zero_division=0), subset accuracy
    (the whole set right), and each label's precision, recall, F1, support and how often it was predicted."""
    per = {}
    tp_all = fp_all = fn_all = 0
    for label in labels:
        tp = sum(1 for g, p in zip(gold, predicted) if label in g and label in p)
        fp = sum(1 for g, p in zip(gold, predicted) if label not in g and label in p)
        fn = sum(1 for g, p in zip(gold, predicted) if label in g and label not in p)
        prec, rec = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
        per[str(label)] = {"precision": prec, "recall": rec, "f1": _ratio(2 * prec * rec, prec + rec),
                           "support": tp + fn, "predicted": tp + fp}
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
    prec, rec = _ratio(tp_all, tp_all + fp_all), _ratio(tp_all, tp_all + fn_all)
    return {"micro_f1": _ratio(2 * prec * rec, prec + rec),
            "macro_f1": sum(v["f1"] for v in per.values()) / len(per) if per else 0.0,
            "subset_accuracy": _ratio(sum(set(g) == set(p) for g, p in zip(gold, predicted)), len(gold)),
            "micro_precision": prec, "micro_recall": rec, "per_class": per}
