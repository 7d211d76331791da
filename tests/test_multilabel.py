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
