"""After fine-tuning: the dev set example by example, its slices, its calibration and what
fine-tuning changed, on tiny fine-tuned runs of every task type (one small random BERT, trained in
seconds), through the library, the command line and the page."""
import json
import re
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint
from bert_explorer.analysis.after_finetuning import calibration, change, predictions, slices
from bert_explorer.tasks.multilabel import joined
from bert_explorer.tasks.spans import NO_ANSWER
from bert_explorer.tasks.tagging import marked
from bert_explorer.app import roles
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
from bert_explorer.train.predict import PREDICTIONS_FILE, Predictor
from bert_explorer.runs.run import Run
from bert_explorer.tasks.registry import task_type

TASKS = ["classification", "pair-classification", "regression", "ner", "qa", "multiple-choice", "multi-label"]
PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "12_After_fine_tuning.py")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, base_model):
    """A fine-tuned run of every task type under one runs folder, from one small random BERT
    (base_model, conftest.py). The classification run reads an uploaded CSV with a column the
    model never reads (source)."""
    root = tmp_path_factory.mktemp("runs")
    base = Path(base_model)
    tiny = make_tiny("classification", n=200, seed=0)
    upload = root.parent / "reviews.csv"
    pd.DataFrame({"text": [ex["text"] for ex in tiny.examples], "label": [ex["label"] for ex in tiny.examples],
                  "source": ["web" if i % 3 else "shop" for i in range(len(tiny.examples))]}).to_csv(upload, index=False)
    runs = {}
    for task in TASKS:
        train = str(upload) if task == "classification" else f"tiny:{task}"
        cfg = FinetuneConfig(model=str(base), train=train, task=task, max_train_examples=80, epochs=3,
                             batch_size=16, lr=1e-3, max_seq_length=64, device="cpu", precision="fp32", seed=0)
        run_finetuning(cfg, root / task)
        runs[task] = root / task
    return {"root": root, "base": base, "runs": runs}


def _dev(run_dir):
    return predictions.dev_examples(Run(run_dir))


# ----- the table ---------------------------------------------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_the_table_holds_predictor_predict_on_the_dev_set(task, tuned):
    run_dir = tuned["runs"][task]
    assert (run_dir / PREDICTIONS_FILE).is_file()  # kept at the end of training
    pred = predictions.load_predictions(run_dir)
    assert pred.record["computed"] == "at the end of training"
    dev = _dev(run_dir)
    assert [{k: v for k, v in ex.items()} for ex in pred.record["examples"]] == dev  # the run's own dev set
    answers = Predictor(run_dir).predict(dev)
    rows = pred.rows
    assert len(rows) == len(dev) > 0
    names = pred.label_names
    for row, ex, ans in zip(rows, dev, answers):
        if task in ("classification", "pair-classification"):
            assert row["predicted"] == ans["label"] and row["gold"] == ex["label"]
            assert row["p_predicted"] == pytest.approx(max(ans["probabilities"].values()), abs=1e-5)
            assert row["p_gold"] == pytest.approx(ans["probabilities"][ex["label"]], abs=1e-5)
            assert row["correct"] == (ans["label"] == ex["label"])
        elif task == "regression":
            assert row["predicted"] == pytest.approx(ans["score"], abs=1e-5) and row["correct"] is None
            assert row["error"] == pytest.approx(ans["score"] - ex["label"], abs=1e-5)
        elif task == "ner":
            assert row["predicted"] == marked(ex["tokens"], ans["tags"])
            assert row["correct"] == (ans["tags"] == ex["tags"] or row["correct_entities"] == row["gold_entities"]
                                      == row["predicted_entities"])
        elif task == "qa":
            assert row["predicted"] == (ans["answer"] or NO_ANSWER)
        elif task == "multi-label":
            assert row["predicted"] == joined(ans["labels"]) and row["gold"] == joined(ex["labels"])
            assert row["correct"] == (set(ans["labels"]) == set(ex["labels"]))
            # the probability of the predicted set: the product of every label's sigmoid or its complement
            p = ans["probabilities"]
            assert row["p_predicted"] == pytest.approx(
                np.prod([p[n] if n in ans["labels"] else 1 - p[n] for n in names]), abs=1e-5)
        else:
            assert row["predicted"].startswith(f"{ans['choice'] + 1}: ") and row["p_predicted"] == pytest.approx(
                max(ans["probabilities"]), abs=1e-5)
    # the whole table scores what the run reported (both in float32, by the same weights)
    reported = json.loads((run_dir / "metrics.json").read_text())["dev"]
    main = pred.task.main_metric
    assert slices.score(pred.task, rows)[main] == pytest.approx(reported[main], abs=1e-4)
    if task in ("classification", "pair-classification", "ner", "multiple-choice", "multi-label"):  # a probability
        assert all(0 <= r["p_gold"] <= r["p_predicted"] + 1e-9 <= 1 + 1e-9 for r in rows)
    else:
        assert all(r["p_gold"] is None and r["p_predicted"] is None for r in rows)


def test_views_sort_the_mistakes_by_confidence(tuned):
    rows = predictions.load_predictions(tuned["runs"]["classification"]).rows
    mistakes = predictions.view(rows, "confident mistakes")
    assert mistakes == sorted([r for r in rows if not r["correct"]], key=lambda r: -r["p_predicted"])
    unsure = predictions.view(rows, "unsure right answers")
    assert [r["p_predicted"] for r in unsure] == sorted(r["p_predicted"] for r in rows if r["correct"])
    gold = rows[0]["gold"]
    assert {r["gold"] for r in predictions.view(rows, "all", gold)} == {gold}


def test_an_older_run_computes_them_on_first_view_and_keeps_them_unless_writes_are_off(tuned, tmp_path):
    import shutil

    run_dir = tmp_path / "old"
    shutil.copytree(tuned["runs"]["pair-classification"], run_dir)
    (run_dir / PREDICTIONS_FILE).unlink()  # a run made before the file existed
    kept = predictions.load_predictions(run_dir)
    assert kept.stored and "at the end" not in kept.source and (run_dir / PREDICTIONS_FILE).is_file()
    first = json.loads((run_dir / PREDICTIONS_FILE).read_text())
    assert first["computed"] == "on first view"
    (run_dir / PREDICTIONS_FILE).unlink()
    shown = predictions.load_predictions(run_dir, store=False)  # classroom mode
    assert not shown.stored and not (run_dir / PREDICTIONS_FILE).exists() and "not kept" in shown.source
    assert shown.rows == kept.rows
    # a model written again since is not answered for by the old file
    (run_dir / PREDICTIONS_FILE).write_text(json.dumps({**first, "weights": [0, 0], "answers": []}))
    assert predictions.load_predictions(run_dir, store=False).rows == kept.rows


def test_a_runs_folder_moved_with_its_files_times_keeps_its_predictions(tuned, tmp_path):
    """A runs folder moved or copied as ``cp -a`` does keeps what its runs stored: the dev predictions
    are read, not computed again (the first visit of After fine-tuning stays quick); a model file
    written again since makes them stale."""
    import shutil

    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(tuned["runs"]["classification"], moved)  # (copy2: the files' times are kept)
    stored = json.loads((moved / PREDICTIONS_FILE).read_text())
    assert predictions.load_predictions(moved, store=False).source.startswith("Computed at the end")
    weights = moved / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes())  # the same bytes, written again: a new time
    again = predictions.load_predictions(moved, store=False)
    assert "not kept" in again.source and [r["predicted"] for r in again.rows] == \
        [r["predicted"] for r in predictions.rows_of(again.task, stored)]


# ----- slices -------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["classification", "multiple-choice", "qa", "ner", "regression"])
def test_slices_recombine_into_the_whole(task, tuned):
    pred = predictions.load_predictions(tuned["runs"][task])
    extra = predictions.extra_columns(pred.record)
    table = slices.slices(pred.task, pred.rows, 64, extra)
    whole = slices.score(pred.task, pred.rows)
    n = len(pred.rows)
    for by in {s["by"] for s in table}:
        part = [s for s in table if s["by"] == by]
        assert sum(s["count"] for s in part) == n
        if task in ("classification", "multiple-choice"):  # accuracy: the count-weighted mean of the slices
            assert sum(s["count"] * s["accuracy"] for s in part) / n == pytest.approx(whole["accuracy"])
        elif task == "qa":
            assert sum(s["count"] * s["f1"] for s in part) / n == pytest.approx(whole["f1"])
        elif task == "regression":
            assert sum(s["count"] * s["mse"] for s in part) / n == pytest.approx(whole["mse"])
    if task == "ner":  # entity F1 recombines from its counts: the slices' counts add up to the whole's
        rows = pred.rows
        for by in {s["by"] for s in table}:
            assert sum(s["count"] for s in table if s["by"] == by) == len(rows)
        got = slices.score(pred.task, rows)
        assert got["f1"] == pytest.approx(json.loads((tuned["runs"]["ner"] / "metrics.json").read_text())["dev"]["f1"])
    if task == "classification":  # the upload's other column is a slice, and small slices say so
        assert extra == ["source"] and {s["slice"] for s in table if s["by"] == "column source"} == {"web", "shop"}
        assert all(s["small"] and "so its score is" in s["small"] for s in table)


def test_length_bins_say_where_the_run_cut_the_input():
    assert slices.length_bin(10, 64) == "≤ 16"
    assert slices.length_bin(64, 64) == "33–64"
    assert slices.length_bin(65, 64) == "65–128 (cut at 64)"
    assert slices.length_bin(900, 128) == "> 512 (cut at 128)"
    # a bin that holds inputs the run cut and inputs it read whole: 120 pieces at 100 sat in a plain "65–128"
    assert slices.length_bin(120, 100) == slices.length_bin(70, 100) == "65–128 (partly cut at 100)"


def test_a_slice_of_one_gold_value_has_no_correlation_not_a_zero(tuned, monkeypatch):
    """A regression's slices by gold value held {0, 0, 0}, {1} and {2, 2} and drew Pearson r 0.000 three times
    beside the whole set's 0.856: inside one gold value there is no correlation to draw."""
    pred = predictions.load_predictions(tuned["runs"]["regression"])
    rows = [{**r, "gold": float(i % 3)} for i, r in enumerate(pred.rows)]  # three gold values, each a slice
    by_gold = [s for s in slices.slices(pred.task, rows, 64) if s["by"] == "gold value"]
    assert by_gold and all(s["pearson"] is None and s["spearman"] is None and s["mse"] is not None for s in by_gold)
    # a value's small slice is said as a correlation's, not as answers "right" by the point
    assert all("more or less right" not in (s["small"] or "") for s in slices.slices(pred.task, rows, 64))
    whole = [s for s in slices.slices(pred.task, rows, 64) if s["by"] != "gold value"]
    assert all(s["pearson"] is not None for s in whole if len({r["gold"] for r in rows}) > 1)
    at = _page(tuned, monkeypatch, "regression")
    assert not at.exception
    shown = at.radio(key="af_view_values").options
    assert len(shown) == len(set(shown)) == 3, shown  # ("largest errors first" was offered twice)
    # opened after a classifier's run, its radio has a choice selected (it had none: one key for both kinds)
    at.session_state["af_run"] = "classification"
    at.run()
    at.session_state["af_run"] = "regression"
    at.run()
    assert at.radio(key="af_view_values").value == "confident mistakes"
    # a slice with no correlation is said where its bar would stand (plotly draws no text on a missing bar)
    import figcheck
    by_gold = [f for f in figcheck.figures(at) if f.title.startswith("by gold value")]
    undefined = [s for s in slices.slices(pred.task, pred.rows, 64) if s["by"] == "gold value" and s["pearson"] is None]
    assert by_gold and len([a for f in by_gold for a in f.layout.get("annotations", [])
                            if "not defined" in a["text"]]) == len(undefined)
    assert all(re.fullmatch(r"\d+: gold [-\d.e]+ · predicted [-\d.e]+", o) for o in at.selectbox[-1].options[:3] if
               "gold" in o)  # a value to four figures, not 0.25388383865356445
    table = next(d.value for d in at.dataframe if "slice" in d.value.columns)
    assert not table.isna().any().any() and not table.isin(["None"]).any().any()  # a dash where nothing is
    # and the note says why a score is a dash, as the chart does where its bar would stand
    dashed = table[table["pearson"] == "—"]
    assert len(dashed) and dashed["note"].str.contains("not defined: one gold value").all(), dashed["note"].tolist()


@pytest.mark.parametrize("task", ["ner", "multi-label"])
def test_a_slice_with_nothing_to_find_has_no_f1_not_a_zero(tuned, task, tmp_path, capsys):
    """The NER slice "gold entities in the sentence = 0" scored entity F1 0 whatever the model did (no entity to
    recall) and the page called it the weakest slice; a multi-label slice of examples with no label did the same."""
    from bert_explorer.cli import main

    pred = predictions.load_predictions(tuned["runs"][task])
    gold, predicted, right = {"ner": ("gold_entities", "predicted_entities", "correct_entities"),
                              "multi-label": ("gold_labels", "predicted_labels", "right_labels")}[task]
    # half the rows hold nothing to find, and the model (rightly) found nothing there
    rows = [{**r, gold: 0, predicted: 0, right: 0} if i % 2 else r for i, r in enumerate(pred.rows)]
    empty = [s for s in slices.slices(pred.task, rows, 64) if s["by"].startswith("gold") and s["slice"] == "0"]
    assert len(empty) == 1 and empty[0][pred.task.main_metric] is None
    assert empty[0]["not_defined"][pred.task.main_metric] == {"ner": "no gold entity", "multi-label": "no gold label"}[task]
    others = [s for s in slices.slices(pred.task, rows, 64) if s["slice"] != "0" and s["count"] > 1]
    assert all(s[pred.task.main_metric] is not None and not s["not_defined"].get(pred.task.main_metric) for s in others)
    # the command line's table says it in a cell, its JSON as a mapping
    out = tmp_path / "slices.csv"
    assert main(["after-finetuning", str(tuned["runs"][task]), "--what", "slices", "--format", "csv",
                 "--output", str(out)]) == 0
    table = pd.read_csv(out)
    assert "not_defined" in table.columns and not table["not_defined"].astype(str).str.startswith("{").any()


def test_the_command_line_writes_no_file_into_the_run_and_predict_says_a_damaged_run(tuned, tmp_path, capsys):
    """`after-finetuning run --output run/metrics.json --overwrite` replaced the run's result with a CSV, and then
    `predict` on the run ended in a JSONDecodeError traceback."""
    import shutil

    from bert_explorer.cli import main

    run = tmp_path / "copy"
    shutil.copytree(tuned["runs"]["classification"], run)
    before = (run / "metrics.json").read_bytes()
    assert main(["after-finetuning", str(run), "--output", str(run / "metrics.json"), "--overwrite"]) == 2
    assert "is inside the run folder" in capsys.readouterr().err and (run / "metrics.json").read_bytes() == before
    (run / "model" / "training_args.json").write_text("a,b\n1,2\n")  # (a file written over by hand)
    assert main(["predict", "--model", str(run), "--text", "shares fell"]) == 2
    err = capsys.readouterr().err
    assert "training_args.json is not the JSON its run wrote" in err and "Traceback" not in err


def test_runs_with_no_saved_model_yet_are_named_not_left_out_silently(tuned, monkeypatch):
    """A run training now, or killed, was not in the list and nothing said so."""
    import shutil

    live = Run(tuned["root"] / "live").create({"model": "x"}, "finetune")
    live.write_status(state="running", pid=os.getpid(), step=91, max_steps=150)
    try:
        at = _page(tuned, monkeypatch, "classification")
        assert not at.exception
        assert any(c.value.replace("\\", "").startswith("Not listed, with no saved model yet: live (running at step 91)")
                   for c in at.caption), [c.value for c in at.caption]
    finally:
        shutil.rmtree(live.path)


def test_a_long_qa_passage_is_said_read_in_windows_not_cut(tuned):
    """QA reads a passage longer than the run's maximum length in overlapping windows (the document stride):
    its length slices say so; a classification run's long inputs were cut."""
    for task, how in (("qa", "in windows of 64"), ("classification", "cut at 64")):
        pred = predictions.load_predictions(tuned["runs"][task])
        rows = [{**r, "pieces": 300} for r in pred.rows]
        names = {s["slice"] for s in slices.slices(pred.task, rows, 64) if s["by"] == "length (WordPieces)"}
        assert names == {f"257–512 ({how})"}


def test_a_fold_that_could_not_be_scored_is_not_counted_as_wrong():
    """Cross-validated probe accuracy divided by every example, though a fold whose training part held one
    class was skipped: perfectly separable vectors scored below 1."""
    import numpy as np

    from bert_explorer.analysis.after_finetuning import change

    gold = ["a"] * 9 + ["b"]  # the one "b" is in one fold: that fold's training part holds only "a"
    x = np.array([[0.0, 1.0]] * 9 + [[5.0, -5.0]])
    result = change.probe_separation(x, gold, labelled=True, folds=5)
    assert result["probe_accuracy"] == 1.0


def test_an_id_column_is_not_sliced_but_a_measure_or_a_category_is():
    """An upload's "id" column gave 12 slices of one example each ("16 of 16 slices hold fewer than 100")."""
    from bert_explorer.tasks.registry import TASK_TYPES

    task = TASK_TYPES["classification"]
    rows = [{"example": i, "gold": "a" if i % 3 else "b", "predicted": "a", "correct": bool(i % 3), "pieces": 10,
             "id": str(100 + i), "review_no": 7 * i, "price": 1.5 + i * 0.37, "source": "web" if i % 2 else "shop",
             "note": f"free text {i}"} for i in range(12)]
    by = {s["by"] for s in slices.slices(task, rows, 64, ["id", "review_no", "price", "source", "note"])}
    assert "column price" in by and "column source" in by  # a measure is binned, a category kept
    assert not by & {"column id", "column review_no", "column note"}


# ----- calibration -------------------------------------------------------------------------------
def test_calibration_against_a_hand_computation():
    conf = [0.95, 0.95, 0.85, 0.55, 0.3, 0.0]
    right = [True, False, True, True, False, False]
    bins = calibration.reliability_bins(conf, right)
    by_upper = {round(b["upper"], 1): b for b in bins if b["count"]}
    # (0.9, 1]: two at 0.95, one right; (0.8, 0.9]: 0.85 right; (0.5, 0.6]: 0.55 right; 0.3 is on an
    # edge and goes to (0.2, 0.3]; 0 goes to the first bin
    assert {k: b["count"] for k, b in by_upper.items()} == {1.0: 2, 0.9: 1, 0.6: 1, 0.3: 1, 0.1: 1}
    assert by_upper[1.0]["accuracy"] == 0.5 and by_upper[1.0]["confidence"] == pytest.approx(0.95)
    ece = (2 * 0.45 + 0.15 + 0.45 + 0.3 + 0.0) / 6
    assert calibration.expected_calibration_error(bins) == pytest.approx(ece)
    rows = [{"p_predicted": c, "correct": r} for c, r in zip(conf, right)]
    result = calibration.calibration(rows)
    assert result["ece"] == pytest.approx(ece) and f"ECE = {ece:.3f}" in result["sentence"]
    with pytest.raises(ValueError, match="not a probability"):
        calibration.reliability_bins([1.2], [True])


# ----- what fine-tuning changed -------------------------------------------------------------------
def _cls(model_dir, examples, task, label_names):
    loaded = checkpoint.load(model_dir)
    feats = task.featurize(examples, loaded.tokenizer, label_names, 64)
    batch = {k: v for k, v in task.collate(feats, loaded.tokenizer.pad_id).items()
             if k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        return checkpoint.encoder_of(loaded.model).eval()(**batch).last_hidden_state[:, 0].numpy()


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_the_maps_compare_the_base_model_with_the_fine_tuned_one(task, tuned):
    run_dir = tuned["runs"][task]
    pred = predictions.load_predictions(run_dir)
    changed = change.what_changed(run_dir, pred.record["examples"], pred.task, pred.label_names, 64)
    assert Path(changed["before"]) == tuned["base"].resolve() and Path(changed["after"]) == run_dir / "model"
    before = _cls(tuned["base"], pred.record["examples"], pred.task, pred.label_names)
    after = _cls(run_dir / "model", pred.record["examples"], pred.task, pred.label_names)
    assert np.allclose(changed["c_before"], before, atol=1e-5) and np.allclose(changed["c_after"], after, atol=1e-5)
    assert not np.allclose(before, after, atol=1e-3)  # fine-tuning moved C
    cka = changed["cka_by_layer"]
    assert len(cka) == 3 and all(0 <= c <= 1 + 1e-9 for c in cka)
    maps = change.maps(changed, "pca")
    assert maps["before"].shape == maps["after"].shape == (len(pred.rows), 2)
    sep = changed["separation"]
    if task == "classification":
        assert 0 <= sep["before"]["probe_accuracy"] <= 1 and -1 <= sep["after"]["silhouette"] <= 1
        said = change.describe(changed)
        assert f"{sep['before']['probe_accuracy']:.1%}" in said and f"{sep['after']['probe_accuracy']:.1%}" in said
    else:
        assert "probe_r2" in sep["after"]
    with pytest.raises(ValueError, match="not to ner"):
        ner = predictions.load_predictions(tuned["runs"]["ner"])
        change.what_changed(tuned["runs"]["ner"], ner.record["examples"], ner.task, ner.label_names)


def test_probe_separation_tells_separated_from_mixed_vectors():
    rng = np.random.default_rng(0)
    gold = ["a"] * 30 + ["b"] * 30
    apart = np.concatenate([rng.normal(0, 1, (30, 8)), rng.normal(6, 1, (30, 8))])
    mixed = rng.normal(0, 1, (60, 8))
    good, bad = change.probe_separation(apart, gold, True), change.probe_separation(mixed, gold, True)
    assert good["probe_accuracy"] > 0.95 and bad["probe_accuracy"] < 0.8
    assert good["silhouette"] > 0.5 > bad["silhouette"]


# ----- the command line ------------------------------------------------------------------------------
def test_the_cli_gives_the_same_data_as_csv_and_json(tuned, capsys):
    from bert_explorer.cli import main

    run_dir = str(tuned["runs"]["classification"])
    assert main(["after-finetuning", run_dir, "--what", "predictions", "--format", "csv"]) == 0
    import io

    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    rows = predictions.load_predictions(run_dir).rows
    assert list(table["predicted"]) == [r["predicted"] for r in rows] and "source" in table
    assert main(["after-finetuning", run_dir, "--what", "calibration", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ece"] == pytest.approx(calibration.calibration(rows)["ece"])
    assert main(["after-finetuning", str(tuned["runs"]["regression"]), "--what", "calibration"]) == 2
    err = capsys.readouterr().err
    assert "calibration applies to classification" in err and err.count("\n") == 1


# ----- the page --------------------------------------------------------------------------------------
PARTS = {"classification": {"by gold label", "by length (WordPieces)", "by column source", "CLS before and after",
                            "separation", "CKA", "Reliability"},
         "regression": {"by gold value", "by length (WordPieces)", "CLS before and after", "separation", "CKA"},
         "ner": {"by gold entities in the sentence", "by length (WordPieces)"},
         "qa": {"by gold answer", "by length (WordPieces)"},
         "multiple-choice": {"by gold choice", "by length (WordPieces)"},
         "multi-label": {"by gold labels in the example", "by length (WordPieces)", "Reliability"}}
TITLES = {"CLS before and after": "C of the", "separation": "How well C separates", "CKA": "Layer by layer: CKA",
          "Reliability": "Reliability diagram"}


def _page(tuned, monkeypatch, run, from_home=False):
    """The page on its own, or (``from_home``) opened from the app's home page, so that it can open others."""
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(tuned["root"]))
    at = AppTest.from_file("../run_app.py" if from_home else PAGE, default_timeout=120)
    at.session_state["af_run"] = run
    if from_home:
        at.run()
        at.switch_page("pages/12_After_fine_tuning.py")
    return at.run()


@pytest.mark.parametrize("task", list(PARTS))
def test_the_page_shows_the_parts_that_apply_to_the_task_type(task, tuned, monkeypatch):
    import figcheck

    at = _page(tuned, monkeypatch, task)
    assert not at.exception
    if "CKA" in PARTS[task]:  # asked for with a button: a first visit does not load the base model
        assert not [f for f in figcheck.figures(at) if f.title.startswith("C of the")]
        at.button(key="af_changed").click().run()
        assert not at.exception
    titles = [f.title for f in figcheck.figures(at)]  # (figcheck checked each: series named, CKA within [0, 1])
    wanted = {TITLES.get(p, p) for p in PARTS[task]}
    assert all(any(t.startswith(w) for t in titles) for w in wanted), titles
    assert len(titles) == len(wanted), titles
    captions = " ".join(c.value for c in at.caption)
    assert "so its score is" in captions  # the small-data sentence where a slice is small
    assert (f": {task_type(task).in_words}," in captions) if task_type(task).in_words else f": a {task} task," in \
        captions.replace("\\", "")  # ("a ner task" was said of NER)
    if task == "classification":
        rows = predictions.load_predictions(tuned["runs"][task]).rows
        sep = change.what_changed(tuned["runs"][task], predictions.load_predictions(tuned["runs"][task])
                                  .record["examples"], predictions.load_predictions(tuned["runs"][task]).task,
                                  predictions.load_predictions(tuned["runs"][task]).label_names, 64)
        from bert_explorer.analysis.after_finetuning import slices as sl

        head = sl.score(task_type(task), rows)["accuracy"]  # (the fine-tuned head's, beside the probe's)
        assert change.describe(sep, head) in captions  # the caption is this run's own numbers
        maps = next(f for f in figcheck.figures(at) if f.title.startswith("C of the"))
        assert [maps.axis_title(a) for a in ("x", "y", "x2", "y2")] == \
            ["principal component 1", "principal component 2"] * 2  # both maps' axes say what they are
        shown = list(at.dataframe[0].value.columns)  # the probabilities in view, the long text last
        assert shown.index("p_predicted") < shown.index("text") and shown[-1] == "text"
        assert calibration.calibration(rows)["sentence"] in captions
        # the bars say their values as the caption does (per cent beside a bare 0-1 axis), and the reliability
        # diagram's axes are in per cent as its hover, table and sentence
        drawn = next(f for f in figcheck.figures(at) if f.title.startswith("How well C separates"))
        before = drawn.traces[0]
        assert before.raw["text"][0] == f"{sep['separation']['before']['probe_accuracy']:.1%}"
        assert before.raw["text"][0] in change.describe(sep, head)
        assert before.raw["text"][1] == f"{sep['separation']['before']['silhouette']:.2f}"
        diagram = next(f for f in figcheck.figures(at) if f.title.startswith("Reliability diagram"))
        assert diagram.layout["xaxis"]["tickformat"] == diagram.layout["yaxis"]["tickformat"] == ".0%"
        assert diagram.layout["xaxis"]["dtick"] == 0.1  # each bin's edge (ten bins were ticked 0 %, 50 %, 100 %)
        said = calibration.calibration(rows)["sentence"]
        assert "the largest gap" not in said or re.search(r"the bin of confidences \(\d+%, \d+%\]", said), said
        bins = next(d for d in at.dataframe if "confidence" in d.value.columns).value
        assert bins["lower"].iloc[1] == "10%"  # the bins' edges in per cent, as their confidences


@pytest.fixture(scope="module")
def numbered(tmp_path_factory, base_model):
    """A run fine-tuned on an upload whose labels are 0 and 1 and whose other column holds years: names that
    look like numbers."""
    root = tmp_path_factory.mktemp("numbered")
    tiny = make_tiny("classification", n=80, seed=1)
    upload = root.parent / "numbered.csv"
    pd.DataFrame({"text": [ex["text"] for ex in tiny.examples],
                  "label": [int(ex["label"] == "positive") for ex in tiny.examples],
                  "year": [2019 + i % 2 for i in range(len(tiny.examples))]}).to_csv(upload, index=False)
    cfg = FinetuneConfig(model=str(base_model), train=str(upload), task="classification", epochs=1, batch_size=16,
                         lr=1e-3, max_seq_length=32, device="cpu", precision="fp32", seed=0)
    run_finetuning(cfg, root / "numbered")
    return {"root": root}


def test_slices_draw_names_that_look_like_numbers_as_names_and_say_each_score(numbered, monkeypatch):
    """The slices of gold labels 0 and 1 stood on a number line ticked -0.5 ... 1.5, and the label the model
    never got right had no bar to see."""
    import figcheck

    at = _page(numbered, monkeypatch, "numbered")
    assert not at.exception
    figs = {f.title.split("<br>")[0]: f for f in figcheck.figures(at)}
    for title, names in (("by gold label", ["0", "1"]), ("by column year", ["2019", "2020"])):
        fig = figs[title]
        assert figcheck.names_read_as_numbers(fig) == [] and fig.layout["xaxis"]["type"] == "category"
        (bars,) = fig.traces
        assert bars.x.tolist() == names
        # every bar says its score, a score of 0 too: "0.0%" stands where no bar can be seen; in per cent, as the
        # axis (the Runs table said "dev accuracy 0.8" beside "MLM accuracy 8.3%")
        assert bars.raw["text"] == [f"{v:.1%}" for v in bars.y.tolist()]
        assert fig.layout["yaxis"]["tickformat"] == ".1~%"  # (".0%" ticked 0-2 % as "0%, 1%, 1%, 2%, 2%")
    # side by side, the charts share one scale (0.2 bars filled a chart of 0-0.2 beside one of 0-1)
    ranges = {tuple(f.layout["yaxis"]["range"]) for t, f in figs.items() if t.startswith("by ")}
    assert len(ranges) == 1 and list(ranges)[0][0] == 0
    # and a slice by gold label is read beside what the model answers most
    rows = predictions.load_predictions(numbered["root"] / "numbered").rows
    top, times = Counter(r["predicted"] for r in rows).most_common(1)[0]
    assert any(f"This model answered {top} for {times:,} of the {len(rows):,} dev examples" in c.value
               for c in at.caption)


def test_the_calibration_table_says_an_empty_bin_has_no_score(numbered, monkeypatch):
    """An empty bin's confidence and accuracy read "None"."""
    at = _page(numbered, monkeypatch, "numbered")
    table = next(d.value for d in at.dataframe if "confidence" in d.value.columns)
    empty = table[table["count"] == 0]
    assert len(empty) and (empty[["confidence", "accuracy"]] == "—").all().all()
    assert not table.isna().any().any() and "None" not in table.astype(str).values
    rows = predictions.load_predictions(numbered["root"] / "numbered").rows
    bins = calibration.calibration(rows)["bins"]
    assert table["accuracy"].tolist() == ["—" if b["accuracy"] is None else f"{b['accuracy']:.1%}" for b in bins]


def test_what_changed_is_computed_once_asked_and_then_shown_to_every_visitor(tuned, monkeypatch):
    """Comparing before and after loads a second model and runs the dev set twice: a first visit does
    not do it; one click does, and a later visitor (another session) sees the result without asking."""
    import figcheck
    from bert_explorer import shared_work

    shared_work.RESULTS.clear()  # (what earlier tests of this process computed is kept for every session)
    first = _page(tuned, monkeypatch, "regression")
    assert not [f for f in figcheck.figures(first) if f.title.startswith("Layer by layer: CKA")]
    first.button(key="af_changed").click().run()
    assert [f for f in figcheck.figures(first) if f.title.startswith("Layer by layer: CKA")]
    later = _page(tuned, monkeypatch, "regression")
    assert not [b for b in later.button if b.key == "af_changed"]
    assert [f for f in figcheck.figures(later) if f.title.startswith("Layer by layer: CKA")]


def test_a_student_cannot_start_the_comparison_before_and_after_and_is_told_the_teacher_can(tuned, monkeypatch):
    """In class, a student's Compare took 12.5 s of the server's CPU (more with the dev set): the teacher asks
    for it once (every visitor then sees it) and a student is told so, with no button."""
    from bert_explorer import shared_work

    shared_work.RESULTS.clear()
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(tuned["root"]))
    monkeypatch.setattr(roles, "writes_allowed", lambda: False)
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state["af_run"] = "regression"
    at.run()
    assert not at.exception and not [b for b in at.button if b.key == "af_changed"]
    assert ("The comparison before and after fine-tuning is not prepared for this model yet; your teacher can "
            "prepare it by pressing Compare on this page.") in [i.value for i in at.info]


def test_classroom_mode_computes_an_old_runs_predictions_without_writing(tuned, monkeypatch, tmp_path):
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(tuned["runs"]["multiple-choice"], root / "old")
    (root / "old" / PREDICTIONS_FILE).unlink()
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(root))
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        at = AppTest.from_file(PAGE, default_timeout=120).run()
    finally:
        st_config.set_option("server.address", before)
    assert not at.exception
    assert not (root / "old" / PREDICTIONS_FILE).exists()
    assert any("not kept: in classroom mode the app writes nothing" in c.value for c in at.caption)


def test_a_taggings_confidence_is_said_to_be_of_the_whole_tagging(tuned, monkeypatch):
    """An NER run's most confident mistakes were listed at "P = 0.01", read as no confidence at all: it is the
    probability of the whole tagging, a product over the sentence's words."""
    at = _page(tuned, monkeypatch, "ner")
    caption = next(c.value for c in at.caption if c.value.startswith("The most confident mistakes"))
    assert caption.startswith("The most confident mistakes (P: this model's probability of its whole tagging (the "
                              "product over the words: each word's own is higher)): example ")
    other = _page(tuned, monkeypatch, "classification")
    assert any(c.value.startswith("The most confident mistakes (P: this model's probability of its answer): ")
               for c in other.caption)
    labels = _page(tuned, monkeypatch, "multi-label")  # (a product over every label too)
    said = [c.value for c in labels.caption if c.value.startswith("The most confident mistakes")]
    assert said and all(c.startswith("The most confident mistakes (P: this model's probability of its whole set "
                                     "of labels") for c in said), said


def test_a_run_opens_on_its_most_confident_mistake_and_another_run_on_its_own(tuned, monkeypatch):
    """The page opens on the mistakes, the most confident first, and "Why this answer?" on the top one (it
    opened on the dev set's first example, right or wrong). Switched from a SQuAD run to a classification
    run, the Example box still read "0: gold Warsaw · predicted …", the other run's example."""
    at = _page(tuned, monkeypatch, "qa")
    assert at.radio(key="af_view").value == "confident mistakes"
    qa_view = predictions.view(predictions.load_predictions(tuned["runs"]["qa"]).rows, "confident mistakes")
    assert qa_view and at.selectbox(key="af_example_qa").value == qa_view[0]["example"]
    at.selectbox(key="af_run").set_value("classification").run()
    assert not at.exception
    rows = predictions.load_predictions(tuned["runs"]["classification"]).rows
    top = predictions.view(rows, "confident mistakes")[0]
    assert top["p_predicted"] == max(r["p_predicted"] for r in rows if not r["correct"])
    box = next(b for b in at.selectbox if b.label == "Example")
    assert box.value == top["example"]
    assert box.format_func(box.value).startswith(f"{top['example']}: gold {top['gold']} · predicted {top['predicted']}")



def test_the_view_and_the_example_chosen_hold_when_the_user_leaves_the_page_and_comes_back(tuned, monkeypatch):
    """"every example" chosen, then Runs and back: the page was on "the wrong answers, the most confident first"."""
    at = _page(tuned, monkeypatch, "classification", from_home=True)
    at.radio(key="af_view").set_value("all").run()
    second = 1  # the second example of the dev set, in dev order
    next(b for b in at.selectbox if b.label == "Example").set_value(second).run()
    at.switch_page("pages/13_Runs.py").run()
    at.switch_page("pages/12_After_fine_tuning.py").run()
    assert not at.exception and at.radio(key="af_view").value == "all"
    assert next(b for b in at.selectbox if b.label == "Example").value == second


def test_what_was_typed_to_try_a_model_holds_when_the_user_leaves_the_fine_tune_page(tuned, monkeypatch):
    """Typed on the Fine-tune page's Try the model, then After fine-tuning and back: the box was empty."""
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(tuned["root"]))
    at = AppTest.from_file("../run_app.py", default_timeout=120).run()
    at.switch_page("pages/11_Fine-tune.py").run()
    at.selectbox(key="ft_watch").set_value("classification").run()
    assert not at.exception, at.exception
    at.text_input(key="ft_try_text_classification").set_value("a good and warm film").run()
    said = next(m for m in at.metric if m.label == "Prediction").value
    at.switch_page("pages/12_After_fine_tuning.py").run()
    at.switch_page("pages/11_Fine-tune.py").run()
    assert not at.exception and at.text_input(key="ft_try_text_classification").value == "a good and warm film"
    assert next(m for m in at.metric if m.label == "Prediction").value == said
    # After fine-tuning opens on the run watched here (it opened on the newest, another run, with nothing said)
    at.selectbox(key="ft_watch").set_value("regression").run()
    at.switch_page("pages/12_After_fine_tuning.py").run()
    assert not at.exception and at.selectbox(key="af_run").value == "regression"

def test_why_this_answer_opens_attributions_with_the_example_and_the_run(tuned, monkeypatch):
    at = _page(tuned, monkeypatch, "classification", from_home=True)
    rows = predictions.load_predictions(tuned["runs"]["classification"]).rows
    at.radio(key="af_view").set_value("all").run()  # (example 3 is right: not among the mistakes)
    at.selectbox(key="af_example_classification").set_value(rows[3]["example"]).run()
    at.button(key="af_to_attr").click().run()
    assert not at.exception
    assert at.session_state["attr_clf_text"] == rows[3]["text"]
    assert Path(at.session_state["attr_run"]) == tuned["runs"]["classification"] / "model"
    assert at.text_input(key="attr_clf_text").value == rows[3]["text"]  # the Attributions page, filled in


def test_attention_on_this_example_chooses_the_fine_tuned_model(tuned, monkeypatch):
    from bert_explorer.app.keep import SENTENCE_A, SENTENCE_B

    at = _page(tuned, monkeypatch, "pair-classification", from_home=True)
    top = predictions.view(predictions.load_predictions(tuned["runs"]["pair-classification"]).rows,
                           "confident mistakes")[0]  # (the example the page opens on)
    at.button(key="af_to_attention").click().run()
    assert not at.exception
    assert at.session_state[SENTENCE_A] == top["text"] and at.session_state[SENTENCE_B] == top["text_pair"]
    model = tuned["runs"]["pair-classification"] / "model"
    assert at.sidebar.selectbox(key="be_model_choice").value == str(model)  # listed and chosen on the Attention page
    # and said once where the choice is: it holds for every page (the Attention page had said nothing of it)
    assert [i.value for i in at.sidebar.info if i.value.startswith("The model of every page is now fine-tuned: ")]
    at.run()
    assert not [i.value for i in at.sidebar.info if i.value.startswith("The model of every page is now")]


def test_the_sidebar_lists_every_finished_fine_tuning_and_opens_its_encoder(tuned, monkeypatch):
    """A fine-tuned model could be opened only from this page ("Attention on this example"); the sidebar's
    list now holds each finished fine-tuning's model, by its run's name, and opens its encoder."""
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(tuned["root"]))
    at = AppTest.from_file("../run_app.py", default_timeout=120).run()
    picker = at.sidebar.selectbox(key="be_model_choice")
    assert {f"fine-tuned: {run_dir.name}" for run_dir in tuned["runs"].values()} <= set(picker.options)
    picker.set_value(str(tuned["runs"]["classification"] / "model")).run()
    assert not at.exception
    assert any("pre-training heads: none (encoder only)" in m.value for m in at.sidebar.markdown)


def test_the_cka_sentence_says_no_layer_moved_when_every_layer_rounds_to_one():
    """"fine-tuning moved layer 6 most (CKA 1.00)" was said beside 1.00 at every layer."""
    from bert_explorer.analysis.after_finetuning import change

    changed = {"separation": {"before": {"probe_r2": 0.1}, "after": {"probe_r2": 0.2}}, "gold": [0.0] * 10,
               "labelled": False, "cka_tokens": 500, "cka_by_layer": [1.0, 0.999, 0.998]}
    assert "fine-tuning barely moved any layer (CKA 1.00 at two decimals in every one)" in change.describe(changed)
    changed["cka_by_layer"] = [1.0, 0.97, 0.99]
    assert "fine-tuning moved layer 1 most (CKA 0.97)" in change.describe(changed)


def test_the_pages_zip_holds_the_numbers_drawn(tuned, monkeypatch):
    """The zip held the calibration and CKA figures as HTML alone: their bins and layers are tables in it now,
    equal to what the page computed. (Last in the file: its Compare is kept for every later visit of the run, and
    the page test above checks a first visit computes none.)"""
    import io
    import zipfile

    from bert_explorer.app import exports
    from bert_explorer.app.result_bundle import safe_name

    kept = []
    monkeypatch.setattr(exports, "bundle_button", lambda bundle, key, container=None: kept.append(bundle))
    at = _page(tuned, monkeypatch, "classification")
    at.button(key="af_changed").click().run()
    assert not at.exception
    with zipfile.ZipFile(io.BytesIO(kept[-1].zip_bytes())) as z:
        names = set(z.namelist())
        bins = pd.read_csv(io.BytesIO(z.read(f"tables/{safe_name('calibration bins')}.csv")))
        cka = pd.read_csv(io.BytesIO(z.read(f"tables/{safe_name('CKA by layer')}.csv")))
    assert f"tables/{safe_name('separation before and after')}.csv" in names
    rows = predictions.load_predictions(tuned["runs"]["classification"]).rows
    want = calibration.calibration(rows)["bins"]
    assert list(bins["count"]) == [b["count"] for b in want]
    assert len(cka) == len(kept[-1].figures["CKA by layer"].data[0].y)
    assert list(cka["cka"]) == pytest.approx(list(kept[-1].figures["CKA by layer"].data[0].y))


def test_the_probe_sentence_stands_beside_what_the_most_frequent_label_scores():
    """"31.7 % before and 30.0 % after" read as some separation, where always answering business (20 of 60)
    scores 33.3 %."""
    from bert_explorer.analysis.after_finetuning import change

    gold = ["business"] * 20 + ["sport"] * 15 + ["politics"] * 10 + ["tech"] * 10 + ["entertainment"] * 5
    changed = {"separation": {"before": {"probe_accuracy": 0.317, "silhouette": None},
                              "after": {"probe_accuracy": 0.30, "silhouette": None}},
               "gold": gold, "labelled": True, "cka_tokens": 500, "cka_by_layer": [1.0, 0.9]}
    assert ("for 31.7% of the 60 dev examples before fine-tuning and 30.0% after (5-fold cross-validated), where "
            "always answering the most frequent label, business, scores 33.3%") in change.describe(changed)


def test_a_probe_on_few_dev_examples_is_said_to_learn_from_few():
    """50.0 % before and after on 20 dev examples, beside the fine-tuned head's 80.0 % on the same examples: no
    caption said why the probe reads less than the classifier."""
    from bert_explorer.analysis.after_finetuning import change

    changed = {"separation": {"before": {"probe_accuracy": 0.5, "silhouette": None},
                              "after": {"probe_accuracy": 0.5, "silhouette": None}},
               "gold": ["neg"] * 10 + ["pos"] * 10, "labelled": True, "cka_tokens": 300, "cka_by_layer": [1.0, 1.0]}
    assert ("The probe learns from these 20 examples alone, about 16 at a time: so few let it read less than the "
            "fine-tuned head, which learnt from the whole training set and answers 80.0% of them") in \
        change.describe(changed, 0.8)
    assert "learns from these" not in change.describe(changed, 0.45)  # (a probe above the head: nothing to say)
    assert "learns from these" not in change.describe(changed, 0.5)  # (nor at its score)
    # ten of each: no one label is "the most frequent"
    assert "always answering the most frequent of the labels that tie (neg, pos), scores 50.0%" in \
        change.describe(changed)
    assert "learns from these" not in change.describe(changed)
    changed["gold"] = ["neg"] * 100 + ["pos"] * 100
    assert "learns from these" not in change.describe(changed, 0.8)
