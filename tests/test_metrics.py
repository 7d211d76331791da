"""Fine-tuning metrics (bert_explorer.tasks.metrics and, for SQuAD, bert_explorer.tasks.squad).

Expected values are computed by hand (the arithmetic is in the comments) or, on random data,
by an independent library: scikit-learn and scipy (which the module now uses) for the
classification and correlation measures, seqeval for entity F1, and the definitions of the
official SQuAD v1.1/v2.0 evaluation scripts, written out below, for exact match and F1.
"""
import json
import math
import random

import numpy as np
import pytest

from bert_explorer.tasks import metrics as M
from bert_explorer.tasks import squad as S

approx = pytest.approx


# ------------------------------------------------------------------------------------------
# SQuAD
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("The  Cat!", "cat"),                            # lower, "!" removed, "the" removed, spaces
    ("a cat, an owl and THE dog.", "cat owl and dog"),
    ("  Eiffel   Tower. ", "eiffel tower"),
    ("theatre anthem", "theatre anthem"),            # articles only as whole words
    ("U.S.-born", "usborn"),                         # punctuation is deleted, not replaced
    ("the", ""),
    ("", ""),
    ("Zoë's café", "zoës café"),                      # non-ASCII letters are kept
])
def test_squad_normalize(text, expected):
    assert S.squad_normalize(text) == expected


def test_squad_exact_match():
    assert S.squad_exact_match("The Cat!", ["cat"]) == 1.0
    assert S.squad_exact_match("the big cat", ["a cat sat"]) == 0.0
    assert S.squad_exact_match("big cat", "the big cat.") == 1.0    # a single gold string is fine
    assert S.squad_exact_match("dog", ["cat", "a dog", "owl"]) == 1.0  # any gold answer


def test_squad_f1_partial_overlap():
    # pred "the big cat" -> "big cat" (2 tokens); gold "a cat sat" -> "cat sat" (2 tokens)
    # shared: {cat} = 1; P = 1/2, R = 1/2, F1 = 2·(1/2)(1/2)/(1/2 + 1/2) = 0.5
    assert S.squad_f1("the big cat", ["a cat sat"]) == approx(0.5)
    # pred "cat" (1 token); gold "the cat sat on the mat" -> "cat sat on mat" (4 tokens)
    # shared 1; P = 1/1, R = 1/4, F1 = 2·1·0.25/1.25 = 0.4
    assert S.squad_f1("cat", ["the cat sat on the mat"]) == approx(0.4)
    # repeated tokens count as many times as both share them: pred "cat cat", gold "cat"
    # shared min(2, 1) = 1; P = 1/2, R = 1/1, F1 = 2·0.5·1/1.5 = 2/3
    assert S.squad_f1("cat cat", ["cat"]) == approx(2 / 3)
    assert S.squad_f1("dog", ["cat"]) == 0.0
    assert S.squad_f1("", ["cat"]) == 0.0       # empty prediction for an answerable question
    assert S.squad_f1("The Cat.", ["cat"]) == 1.0


def test_squad_max_over_golds():
    # pred "the big dog" -> "big dog"
    # vs "dog":     shared 1, P = 1/2, R = 1/1, F1 = 2/3
    # vs "big cat": shared 1, P = 1/2, R = 1/2, F1 = 1/2   -> max = 2/3, and no exact match
    assert S.squad_f1("the big dog", ["dog", "big cat"]) == approx(2 / 3)
    assert S.squad_exact_match("the big dog", ["dog", "big cat"]) == 0.0
    # order of the golds does not matter
    assert S.squad_f1("the big dog", ["big cat", "dog"]) == approx(2 / 3)


def test_squad_v2_no_answer():
    for golds in ([""], [], ["", ""], ["the"]):   # "the" normalises to nothing: no answer
        assert S.squad_exact_match("", golds) == 1.0
        assert S.squad_f1("", golds) == 1.0
        assert S.squad_f1("  the . ", golds) == 1.0   # a prediction that normalises to empty
        assert S.squad_exact_match("cat", golds) == 0.0
        assert S.squad_f1("cat", golds) == 0.0
    # one real gold answer makes the question answerable: the empty prediction is then wrong
    assert S.squad_f1("", ["", "cat"]) == 0.0
    assert S.squad_exact_match("cat", ["", "cat"]) == 1.0


def test_squad_scores_v2_breakdown():
    golds = {"q1": ["Paris", "paris, France"], "q2": ["a cat sat"], "q3": [""], "q4": [], "q5": ["x"]}
    preds = {"q1": "Paris.", "q2": "the big cat", "q3": "", "q4": "something", "extra": "ignored"}
    # q1: EM 1, F1 1      q2: EM 0, F1 0.5 (above)      q3: no answer, empty pred: EM 1, F1 1
    # q4: no answer but answered: EM 0, F1 0          q5: no prediction: EM 0, F1 0
    # EM = 2/5 = 40 %, F1 = (1 + 0.5 + 1 + 0 + 0)/5 = 2.5/5 = 50 %
    # has answer (q1, q2, q5): EM 1/3, F1 1.5/3 = 50 %; no answer (q3, q4): EM = F1 = 1/2
    r = S.squad_scores(preds, golds)
    assert r["exact_match"] == approx(40.0)
    assert r["f1"] == approx(50.0)
    assert r["total"] == 5
    assert r["has_answer_exact_match"] == approx(100 / 3)
    assert r["has_answer_f1"] == approx(50.0)
    assert r["has_answer_total"] == 3
    assert r["no_answer_exact_match"] == approx(50.0)
    assert r["no_answer_f1"] == approx(50.0)
    assert r["no_answer_total"] == 2
    json.dumps(r)


def test_squad_scores_v1_has_no_breakdown():
    r = S.squad_scores({"a": "the cat", "b": "dog"}, {"a": ["cat"], "b": ["big dog"]})
    # a: EM 1, F1 1; b: "dog" vs "big dog": P = 1, R = 1/2, F1 = 2/3 -> EM 50 %, F1 = (1 + 2/3)/2
    assert r == {"exact_match": approx(50.0), "f1": approx(100 * (5 / 3) / 2), "total": 2}
    assert S.squad_scores({}, {}) == {"exact_match": 0.0, "f1": 0.0, "total": 0}


# ------------------------------------------------------------------------------------------
# NER: entities and entity-level F1
# ------------------------------------------------------------------------------------------

def test_bio_entities_bio():
    assert M.bio_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    assert M.bio_entities(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]
    assert M.bio_entities(["O", "O"]) == []
    assert M.bio_entities([]) == []
    assert M.bio_entities(["B-MISC"]) == [("MISC", 0, 1)]           # entity at the very end


def test_bio_entities_conlleval_iob1():
    # I- without a B-: an I-X after O (or at the start) begins an entity
    assert M.bio_entities(["I-PER", "I-PER", "O", "I-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    # I-Y right after an X entity: the type changes, so X ends and Y begins
    assert M.bio_entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    # IOB1 uses B- only between two adjacent entities of the same type
    assert M.bio_entities(["I-ORG", "I-ORG", "B-ORG", "I-ORG"]) == [("ORG", 0, 2), ("ORG", 2, 4)]
    # a tag without prefix is read as I- (IO scheme)
    assert M.bio_entities(["PER", "PER", "O", "LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]


def test_bio_entities_bioes_and_bilou():
    tags = ["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "S-ORG", "S-ORG"]
    assert M.bio_entities(tags) == [("PER", 0, 1), ("LOC", 1, 4), ("ORG", 5, 6), ("ORG", 6, 7)]
    # E closes the entity: an I after it begins a new one (conlleval)
    assert M.bio_entities(["B-X", "E-X", "I-X"]) == [("X", 0, 2), ("X", 2, 3)]
    assert M.bio_entities(["U-PER", "B-LOC", "I-LOC", "L-LOC"]) == [("PER", 0, 1), ("LOC", 1, 4)]


def test_bio_entities_round_trip_random():
    # Random non-overlapping spans written as strict BIO must be read back exactly.
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(0, 15)
        tags, spans, i = ["O"] * n, [], 0
        while i < n:
            if rng.random() < 0.4:
                length = rng.randint(1, min(4, n - i))
                etype = rng.choice(["PER", "LOC", "ORG"])
                tags[i] = f"B-{etype}"
                for j in range(i + 1, i + length):
                    tags[j] = f"I-{etype}"
                spans.append((etype, i, i + length))
                i += length
            else:
                i += 1
        assert M.bio_entities(tags) == spans


def test_entity_f1_boundary_and_type_errors_and_per_type():
    gold = [["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG"]]
    pred = [["B-PER", "O", "O", "B-LOC", "O", "B-MISC"]]
    # gold entities: PER(0,2) LOC(3,4) ORG(5,6); predicted: PER(0,1) LOC(3,4) MISC(5,6)
    # correct: LOC only -> P = 1/3, R = 1/3, F1 = 1/3
    # PER(0,1): wrong boundary -> a false positive AND a false negative (PER(0,2) missed)
    # MISC(5,6): wrong type   -> a false positive AND a false negative (ORG missed)
    r = M.entity_f1(gold, pred)
    assert (r["precision"], r["recall"], r["f1"]) == (approx(1 / 3), approx(1 / 3), approx(1 / 3))
    assert (r["n_true"], r["n_pred"], r["n_correct"]) == (3, 3, 1)
    assert r["per_type"] == {
        "LOC": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1},
        "MISC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0},   # 1 pred, 0 gold
        "ORG": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},    # 0 pred, 1 gold
        "PER": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},    # 1 pred, 1 gold, 0 right
    }
    # token accuracy: tokens 0, 2, 3, 4 right = 4/6
    assert r["token_accuracy"] == approx(4 / 6)
    json.dumps(r)


def test_entity_f1_micro_average_over_sentences():
    gold = [["B-PER", "I-PER", "O"], ["B-LOC"], ["O", "B-PER"]]
    pred = [["B-PER", "I-PER", "I-PER"], ["B-LOC"], ["O", "O"]]
    # sentence 1: gold PER(0,2), pred PER(0,3): boundary too long -> 1 FP + 1 FN
    # sentence 2: LOC right -> 1 TP
    # sentence 3: PER missed -> 1 FN
    # micro: correct 1, predicted 2, gold 3 -> P = 1/2, R = 1/3, F1 = 2·(1/2)(1/3)/(5/6) = 0.4
    r = M.entity_f1(gold, pred)
    assert r["precision"] == approx(0.5)
    assert r["recall"] == approx(1 / 3)
    assert r["f1"] == approx(0.4)
    # PER: pred 1, gold 2, right 0; LOC: 1/1/1
    assert r["per_type"]["PER"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2}
    assert r["per_type"]["LOC"]["f1"] == 1.0


def test_entity_f1_i_without_b_matches_conlleval():
    # conlleval reads "I-PER I-PER" as the same entity as "B-PER I-PER"
    r = M.entity_f1([["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]])
    assert r["f1"] == 1.0
    assert r["token_accuracy"] == approx(2 / 3)   # but tag by tag, token 0 differs
    # a flat list is one sentence
    assert M.entity_f1(["B-LOC", "O"], ["B-LOC", "O"])["f1"] == 1.0


def test_entity_f1_edge_cases():
    r = M.entity_f1([["O", "O"]], [["O", "O"]])        # no entities anywhere: all zeros
    assert (r["precision"], r["recall"], r["f1"], r["per_type"]) == (0.0, 0.0, 0.0, {})
    r = M.entity_f1([["B-PER"]], [["O"]])              # nothing predicted: P is 0, not nan
    assert (r["precision"], r["recall"], r["f1"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        M.entity_f1([["O", "O"]], [["O"]])
    with pytest.raises(ValueError):
        M.entity_f1([["O"], ["O"]], [["O"]])


# ------------------------------------------------------------------------------------------
# Classification
# ------------------------------------------------------------------------------------------

# Multi-class example used below:
Y_TRUE = [0, 0, 1, 1, 2, 2]
Y_PRED = [0, 1, 1, 1, 2, 0]
# confusion (rows true, cols pred): true 0 -> pred 0, 1; true 1 -> 1, 1; true 2 -> 2, 0
#   [[1, 1, 0],
#    [0, 2, 0],
#    [1, 0, 1]]


def test_confusion_matrix_orientation():
    # one example, true 0 predicted 1: row "true 0", column "predicted 1"
    assert M.confusion_matrix([0], [1], labels=[0, 1]) == [[0, 1], [0, 0]]
    assert M.confusion_matrix(Y_TRUE, Y_PRED, [0, 1, 2]) == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    # the order of labels decides the order of rows and columns
    assert M.confusion_matrix(["b", "a"], ["a", "a"], labels=["b", "a"]) == [[0, 1], [0, 1]]
    assert M.confusion_matrix(["b", "a"], ["a", "a"]) == [[1, 0], [1, 0]]   # default: sorted


def test_accuracy_and_macro_f1_by_hand():
    assert M.accuracy(Y_TRUE, Y_PRED) == approx(4 / 6)
    # class 0: TP 1, FP 1 (idx 5), FN 1 (idx 1) -> F1 = 2·1/(2 + 1 + 1) = 1/2
    # class 1: TP 2, FP 1 (idx 1), FN 0         -> F1 = 4/5
    # class 2: TP 1, FP 0, FN 1 (idx 5)         -> F1 = 2/3
    # macro = (1/2 + 4/5 + 2/3)/3 = 59/90
    assert M.macro_f1(Y_TRUE, Y_PRED) == approx((0.5 + 0.8 + 2 / 3) / 3)
    assert M.accuracy([], []) == 0.0
    with pytest.raises(ValueError):
        M.accuracy([1, 2], [1])


def test_macro_f1_missing_classes():
    # class 0: TP 1, FP 1 -> 2/3; class 1: in gold, never predicted -> 0
    # class 2: listed but absent from gold and pred -> skipped; macro = (2/3 + 0)/2 = 1/3
    assert M.macro_f1([0, 1], [0, 0], labels=[0, 1, 2]) == approx(1 / 3)
    assert M.macro_f1([0, 1], [0, 0]) == approx(1 / 3)
    assert M.macro_f1([], []) == 0.0


def test_binary_f1_by_hand():
    y_true = [1, 1, 1, 0, 0, 0]
    y_pred = [1, 1, 0, 0, 0, 1]
    # positive 1: TP 2, FP 1, FN 1 -> F1 = 4/(4 + 1 + 1) = 2/3; positive 0 is symmetric here
    assert M.binary_f1(y_true, y_pred, positive=1) == approx(2 / 3)
    assert M.binary_f1(y_true, y_pred, positive=0) == approx(2 / 3)
    # always predicting 0: no true positives -> 0
    assert M.binary_f1(y_true, [0] * 6, positive=1) == 0.0


def test_mcc_by_hand():
    # binary: TP 2, TN 2, FP 1, FN 1 -> (2·2 − 1·1)/√(3·3·3·3) = 3/9 = 1/3
    assert M.mcc([1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1]) == approx(1 / 3)
    # multi-class (Gorodkin): n = 6, c = 4, t = (2, 2, 2), p = (2, 3, 1)
    # Σ p·t = 4 + 6 + 2 = 12; numerator = 4·6 − 12 = 12
    # n² − Σp² = 36 − 14 = 22; n² − Σt² = 36 − 12 = 24 -> MCC = 12/√(22·24) = 12/√528
    assert M.mcc(Y_TRUE, Y_PRED) == approx(12 / math.sqrt(528))
    assert M.mcc([0, 1, 0, 1], [0, 1, 0, 1]) == 1.0
    assert M.mcc([0, 1, 0, 1], [1, 0, 1, 0]) == -1.0
    # undefined (one predicted class, or one true class): 0
    assert M.mcc([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0
    assert M.mcc([1, 1, 1], [0, 1, 0]) == 0.0
    assert M.mcc([], []) == 0.0


def test_classification_against_sklearn_random():
    skm = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for trial in range(60):
        k = int(rng.integers(2, 6))
        n = int(rng.integers(k, 80))
        y_true = rng.integers(0, k, n)
        # a noisy copy: agree with the gold label about half of the time
        y_pred = np.where(rng.random(n) < 0.5, y_true, rng.integers(0, k, n))
        labels = list(range(k))
        assert M.accuracy(y_true, y_pred) == approx(skm.accuracy_score(y_true, y_pred))
        assert M.mcc(y_true, y_pred) == approx(skm.matthews_corrcoef(y_true, y_pred), abs=1e-12)
        assert M.confusion_matrix(y_true, y_pred, labels) == \
            skm.confusion_matrix(y_true, y_pred, labels=labels).tolist()
        present = sorted(set(y_true.tolist()) | set(y_pred.tolist()))  # same rule: skip absent
        assert M.macro_f1(y_true, y_pred, labels) == approx(
            skm.f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0))
        if k == 2:
            assert M.binary_f1(y_true, y_pred, 1) == approx(
                skm.f1_score(y_true, y_pred, pos_label=1, zero_division=0))


def test_classification_report():
    y_true = np.array(["1", "1", "1", "0", "0", "0"])   # numpy input, string labels (MRPC)
    y_pred = ["1", "1", "0", "0", "0", "1"]
    r = M.classification_report(y_true, y_pred, ["0", "1"])
    assert r["accuracy"] == approx(4 / 6)
    assert r["f1"] == approx(2 / 3)                        # positive class "1", as above
    assert r["mcc"] == approx(1 / 3)
    assert r["macro_f1"] == approx(2 / 3)
    assert r["confusion_matrix"] == [[2, 1], [1, 2]]
    assert r["labels"] == ["0", "1"]
    # "1": TP 2, FP 1, FN 1 -> P = R = 2/3, support 3
    assert r["per_class"]["1"] == {"precision": approx(2 / 3), "recall": approx(2 / 3),
                                   "f1": approx(2 / 3), "support": 3}
    assert r["f1_of"] == "1"
    json.dumps(r)
    # more than two classes: no binary "f1"; numpy integer labels still become JSON
    r = M.classification_report(np.array(Y_TRUE), np.array(Y_PRED), np.arange(3))
    assert "f1" not in r and r["labels"] == [0, 1, 2]
    assert r["mcc"] == approx(12 / math.sqrt(528))
    json.dumps(r)


# ------------------------------------------------------------------------------------------
# Regression
# ------------------------------------------------------------------------------------------

def test_pearson_spearman_by_hand():
    assert M.pearson([1, 2, 3], [2, 4, 6]) == approx(1.0)
    assert M.pearson([1, 2, 3], [3, 2, 1]) == approx(-1.0)
    # monotonic but not linear: Spearman 1, Pearson < 1
    assert M.spearman([1, 2, 3, 4], [1, 4, 9, 100]) == approx(1.0)
    assert M.pearson([1, 2, 3, 4], [1, 4, 9, 100]) < 0.9
    # ties: x = (1, 2, 2, 3) -> ranks (1, 2.5, 2.5, 4); y = (1, 3, 2, 4) -> ranks (1, 3, 2, 4)
    # centred (mean 2.5): (−1.5, 0, 0, 1.5) and (−1.5, .5, −.5, 1.5)
    # dot = 2.25 + 2.25 = 4.5; |x|² = 4.5; |y|² = 5 -> ρ = 4.5/√22.5 = √0.9
    assert M.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == approx(math.sqrt(0.9))


def test_correlation_undefined_is_zero():
    assert M.pearson([1, 1, 1], [1, 2, 3]) == 0.0
    assert M.pearson([0.1] * 10, list(range(10))) == 0.0
    assert M.spearman([1, 2, 3], [5, 5, 5]) == 0.0
    assert M.pearson([1], [2]) == 0.0 and M.spearman([], []) == 0.0
    with pytest.raises(ValueError):
        M.pearson([1, 2], [1, 2, 3])


def test_correlations_against_scipy_random():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for trial in range(50):
        n = int(rng.integers(3, 200))
        x = rng.normal(size=n) * 5
        y = x + rng.normal(size=n) * rng.uniform(0.1, 10)
        if trial % 2:   # STS-B-like scores on a 0..5 grid: many ties
            x, y = np.round(np.clip(x, 0, 5)), np.round(np.clip(y, 0, 5) * 2) / 2
            if x.min() == x.max() or y.min() == y.max():
                continue
        assert M.pearson(x, y) == approx(stats.pearsonr(x, y)[0], abs=1e-10)
        assert M.spearman(x, y) == approx(stats.spearmanr(x, y)[0], abs=1e-10)


def test_regression_report():
    # errors (0, 1, −1, 2): squared 0 + 1 + 1 + 4 = 6, mean 1.5
    r = M.regression_report([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 4.0, 2.0])
    assert r["mse"] == approx(1.5)
    assert r["pearson"] == approx(M.pearson([1, 2, 3, 4], [1, 1, 4, 2]))
    assert set(r) == {"pearson", "spearman", "mse"}
    json.dumps(r)


def test_entity_f1_against_seqeval_random():
    """seqeval's default (conlleval-style) mode on random tag sequences, I- without B- included."""
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = random.Random(3)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG", "B-ORG"]
    for _ in range(30):
        gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 8))]
        pred = [[t if rng.random() < 0.7 else rng.choice(tags) for t in s] for s in gold]
        ours = M.entity_f1(gold, pred)
        assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, pred), abs=1e-9)
        assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, pred), abs=1e-9)
        assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, pred), abs=1e-9)


def _official_normalize(s):
    """The official SQuAD script's normalize_answer: lower case, no punctuation, no articles,
    single spaces (in that script's order)."""
    import re
    import string

    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _official_f1(prediction, truth):
    from collections import Counter

    p, g = _official_normalize(prediction).split(), _official_normalize(truth).split()
    if not p or not g:  # v2.0: an empty answer scores 1 only against an empty answer
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


@pytest.mark.parametrize("pred,golds", [
    ("The Eiffel Tower!", ["the eiffel tower", "Eiffel Tower in Paris"]),
    ("an apple a day", ["A day, an apple"]),
    ("  Paris,   France ", ["paris france", "France"]),
    ("", [""]),                       # v2.0: no answer, rightly
    ("Paris", [""]),                  # v2.0: an answer where there is none
    ("", ["Paris"]),                  # v2.0: no answer where there is one
    ("the the the", ["the"]),         # only articles: empty after normalisation
    ("1,000 people", ["1000 people", "a thousand people"]),
])
def test_squad_scores_follow_the_official_definitions(pred, golds):
    em = max(float(_official_normalize(pred) == _official_normalize(g)) for g in golds)
    f1 = max(_official_f1(pred, g) for g in golds)
    assert S.squad_exact_match(pred, golds) == pytest.approx(em)
    assert S.squad_f1(pred, golds) == pytest.approx(f1)


def test_scipy_and_scikit_learn_are_imported_only_when_a_metric_is_computed():
    """The Two models page needs MIN_DEV_EXAMPLES only: importing the metrics must not cost it the
    1.8 s of importing scipy and scikit-learn on its first visit."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; import bert_explorer.tasks.metrics as m; "
            "assert 'scipy' not in sys.modules and 'sklearn' not in sys.modules, 'imported early'; "
            "assert m.pearson([1, 2, 3], [1, 2, 4]) > 0.9 and m.accuracy([1, 0], [1, 1]) == 0.5")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_two_class_f1_is_of_the_class_the_other_negates_not_of_the_second_in_text_order():
    """QQP's labels as names sort "duplicate" before "not_duplicate": a lazy model answering "not_duplicate" to all
    of a set that is 80 % so scored F1 0.89 (the F1 of "not_duplicate"); the F1 of "duplicate" is 0."""
    gold = ["not_duplicate"] * 8 + ["duplicate"] * 2
    r = M.classification_report(gold, ["not_duplicate"] * 10, ["duplicate", "not_duplicate"])
    assert (r["f1"], r["f1_of"]) == (0.0, "duplicate")
    assert M.positive_class(["entailment", "non-entailment"]) == "entailment"
    assert M.positive_class(["Acceptable", "unacceptable"]) == "Acceptable"
    assert M.positive_class(["negative", "positive"]) == "positive"  # no negation: the second, as GLUE's label 1
    assert M.positive_class(["0", "1"]) == "1"
