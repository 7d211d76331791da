"""Multi-label classification, a kind of answer added as one task file: its metrics against
scikit-learn's, and uploads in the three table formats read alike and checked like every upload."""
import csv
import json

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm
from sklearn.preprocessing import MultiLabelBinarizer

from bert_explorer.data.tasks import read_task_file
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.data.uploads.core import DataError
from bert_explorer.tasks.metrics import multilabel_report
from bert_explorer.tasks.registry import MULTI_LABEL


def test_micro_macro_f1_and_subset_accuracy_are_scikit_learns():
    rng = np.random.default_rng(3)
    names = ["art", "law", "sport", "tech", "war"]
    gold = [[n for n in names if rng.random() < 0.35] for _ in range(60)]
    pred = [[n for n in names if rng.random() < 0.4] for _ in range(60)]
    pred[0] = list(gold[0])  # at least one set exactly right
    mlb = MultiLabelBinarizer(classes=names).fit([names])
    g, p = mlb.transform(gold), mlb.transform(pred)
    ours = multilabel_report(gold, pred, names)
    assert ours["micro_f1"] == pytest.approx(skm.f1_score(g, p, average="micro", zero_division=0))
    assert ours["macro_f1"] == pytest.approx(skm.f1_score(g, p, average="macro", zero_division=0))
    assert ours["subset_accuracy"] == pytest.approx(skm.accuracy_score(g, p))
    per = skm.precision_recall_fscore_support(g, p, zero_division=0)
    assert [ours["per_class"][n]["f1"] for n in names] == pytest.approx(list(per[2]))
    assert [ours["per_class"][n]["support"] for n in names] == list(per[3])
    assert 0 < ours["subset_accuracy"] < 1 and 0 < ours["micro_f1"] < 1


@pytest.fixture
def sets(tmp_path):
    data = make_tiny("multi-label", n=40, seed=2)
    rows = [{"text": ex["text"], "labels": ex["labels"], "source": "web" if i % 2 else "book"}
            for i, ex in enumerate(data.examples)]
    with open(tmp_path / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "labels", "source"])
        w.writerows([r["text"], ";".join(r["labels"]), r["source"]] for r in rows)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    return tmp_path, data


@pytest.mark.parametrize("name", ["train.csv", "train.jsonl", "train.parquet"])
def test_an_upload_in_each_table_format_reads_as_the_same_label_sets(name, sets):
    folder, data = sets
    read = read_task_file(folder / name)
    assert read.task is MULTI_LABEL and read.label_names == ["city", "colour", "person"]
    assert [ex["labels"] for ex in read.examples] == [ex["labels"] for ex in data.examples]
    assert {ex["extra"]["source"] for ex in read.examples} == {"web", "book"}  # kept for the slices
    empty = sum(1 for ex in data.examples if not ex["labels"])
    assert empty and any(f"{empty} of 40 examples have no label" in n for n in read.notes)


def test_label_sets_are_checked_like_every_upload(tmp_path):
    one = tmp_path / "one.csv"  # a single label across the whole file: nothing to tell apart
    one.write_text("text,labels\n" + "".join(f"sentence {i},news;news\n" for i in range(20)))
    with pytest.raises(DataError, match="needs at least two"):
        read_task_file(one)
    long = tmp_path / "long.jsonl"  # a sentence where a label should be: a wrong column or separator
    long.write_text("".join(json.dumps({"text": f"t {i}", "labels": ["a", "b" * 300]}) + "\n" for i in range(20)))
    with pytest.raises(DataError, match="more than 200 characters"):
        read_task_file(long)
    missing = tmp_path / "missing.jsonl"  # null is a missing set (skipped, said); [] is the empty set
    missing.write_text("".join(json.dumps({"text": f"t {i}", "labels": None if i < 3 else (["a"] if i % 2 else [])})
                               + "\n" for i in range(3, 20)) + "".join(
        json.dumps({"text": f"x {i}", "labels": None}) + "\n" for i in range(3)) + json.dumps(
        {"text": "y", "labels": ["b", "a"]}) + "\n")
    read = read_task_file(missing)
    assert len(read.examples) == 18 and any("missing label set" in n for n in read.notes)


# ----- multi-label that says what it learnt ---------------------------------------------------------------
def _skewed(folder, n=120):
    """One common label (in about three examples of four) and three rare ones (one in twelve each)."""
    rows = []
    for i in range(n):
        labels = (["news"] if i % 4 else []) + [r for k, r in enumerate(["art", "law", "war"]) if i % 12 == 3 * k + 1]
        rows.append({"text": f"item {i} about {' and '.join(labels) or 'nothing'}", "labels": labels})
    (folder / "skewed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "skewed.jsonl", rows


def test_balanced_positive_weights_are_each_labels_negatives_over_positives(tmp_path):
    import torch

    path, rows = _skewed(tmp_path)
    names = ["art", "law", "news", "war"]
    w = MULTI_LABEL.positive_weights(rows, names, "balanced")
    for name, weight in zip(names, w.tolist()):
        pos = sum(name in r["labels"] for r in rows)
        assert weight == pytest.approx((len(rows) - pos) / pos)
    assert w[names.index("news")] < 1 < w[names.index("art")]
    assert MULTI_LABEL.positive_weights(rows, names, "none") is None
    assert MULTI_LABEL.positive_weights(rows, names, "3").tolist() == [3.0] * 4
    # the head's loss is torch's BCEWithLogitsLoss with that pos_weight (transformers' without it)
    from bert_explorer.model import BertConfig
    from bert_explorer.model.heads import BertForSequenceClassification

    config = BertConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    config.problem_type = "multi_label_classification"
    model = BertForSequenceClassification(config, num_labels=4).eval()
    ids, labels = torch.randint(5, 50, (3, 7)), torch.tensor([[1.0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 1, 0]])
    with torch.no_grad():
        logits = model(ids).logits
        assert model(ids, labels=labels).loss.item() == pytest.approx(
            torch.nn.BCEWithLogitsLoss()(logits, labels).item())
        model.pos_weight = w
        assert model(ids, labels=labels).loss.item() == pytest.approx(
            torch.nn.BCEWithLogitsLoss(pos_weight=w)(logits, labels).item())


def test_a_run_names_the_labels_it_never_predicted_and_prints_each_labels_scores(base_model, tmp_path, capsys,
                                                                                 monkeypatch):
    """The issue's run learnt only its common label and reported micro-F1 0.739 with no warning."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.cli import main

    path, _ = _skewed(tmp_path)
    out = tmp_path / "runs" / "skewed"
    assert main(["finetune", "--model", base_model, "--train", str(path), "--output", str(out), "--epochs", "1",
                 "--batch-size", "16", "--device", "cpu", "--precision", "fp32"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    per = result["dev"]["per_class"]
    missed = [n for n, v in per.items() if v["support"] and not v["predicted"]]
    table = captured.err[captured.err.index("label "):]
    for name, v in per.items():  # each label's line: F1 and support as the report has them
        assert any(line.split()[:2] == [name, f"{v['f1']:.3f}"] and line.split()[4] == f"{v['support']:,}"
                   for line in table.splitlines()), (name, table)
    assert "Micro-F1 counts every label's right and wrong decisions together" in captured.err
    if missed:  # named, in the CLI's warning and in the run's log
        warned = next(line for line in captured.err.splitlines() if line.startswith("warning: "))
        assert f"the model never predicted {len(missed)} of the labels its dev set holds ({', '.join(missed)})" in warned
        assert "never predicted" in (out / "log.txt").read_text()
    else:
        assert "never predicted" not in captured.err
    # After fine-tuning: each label's scores, recomputed from the saved model's answers, and the same warning
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(tmp_path / "runs"))
    at = AppTest.from_file("../pages/12_After_fine_tuning.py", default_timeout=300).run()
    assert not at.exception
    (shown,) = [d.value for d in at.dataframe if "support" in d.value.columns]
    assert sorted(shown["label"]) == sorted(n for n, v in per.items() if v["support"] or v["predicted"])
    assert any(c.value.startswith("Micro-F1 counts every label's") for c in at.caption)
    assert any("never predicted" in w.value for w in at.warning) == bool(missed)


def test_pos_weight_is_bounded_and_for_multi_label_only(base_model, tmp_path):
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

    for bad in ("heavy", "0", "1000"):
        with pytest.raises(ValueError, match="pos_weight must be none, balanced or a number above 0"):
            FinetuneConfig(pos_weight=bad)
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", pos_weight="balanced", epochs=1, device="cpu")
    with pytest.raises(ValueError, match=r"label weights \(pos_weight\) are for multi-label classification, not "
                                         "classification; leave pos_weight at none"):
        run_finetuning(cfg, tmp_path / "run")


def test_balanced_weights_are_said_in_the_log(base_model, tmp_path):
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

    path, rows = _skewed(tmp_path)
    run_finetuning(FinetuneConfig(model=base_model, train=str(path), pos_weight="balanced", epochs=1, batch_size=16,
                                  device="cpu", precision="fp32"), tmp_path / "run")
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "positive examples weigh art " in log and "in the loss (pos_weight balanced)" in log


def test_the_fine_tune_page_offers_label_weights_where_the_task_weighs_labels(runs_root, base_model):
    from shared import fine_tune_page_on_builtin

    at = fine_tune_page_on_builtin(base_model)
    at.selectbox(key="ft_pos_weight").set_value("balanced").run()
    at.selectbox(key="ft_builtin").set_value("tiny:classification").run()
    assert [e.value for e in at.error] == ["Label weights (pos_weight) are for multi-label classification, not "
                                           "classification; leave pos_weight at none."]
    assert at.button(key="ft_start").disabled
    at.selectbox(key="ft_builtin").set_value("tiny:multi-label").run()
    assert not at.error and not at.button(key="ft_start").disabled
