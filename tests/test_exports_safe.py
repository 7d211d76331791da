"""Uploaded text handed on safely: a CSV the app or the command line writes runs no formula when a
spreadsheet opens it (OWASP, CSV injection), and the After fine-tuning page shows an uploaded passage
or token as its characters, never as a Markdown image that every student's browser would fetch."""
import csv
import io
import re
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from bert_explorer.analysis.after_finetuning import predictions
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.experiments import results
from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

FORMULAS = ["=1+1", "+cmd|' /C calc'!A0", "@SUM(1)", "-2+3"]
IMAGE = "![x](http://127.0.0.1:9/pixel.png)"
PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "12_After_fine_tuning.py")


def _cells(text: str) -> list[list[str]]:
    """A CSV's cells exactly as a spreadsheet receives them (no type guessing)."""
    return list(csv.reader(io.StringIO(text)))


def _a_table() -> pd.DataFrame:
    return pd.DataFrame({"text": FORMULAS + ["plain", "-"], "score": [-0.5, 1.0, -2.0, 0.25, 3.0, -1.0],
                         "count": [-1, 2, 3, 4, 5, 6]})


def _check_csv(text: str, column: str, originals: list[str], numbers: dict[str, list[float]] | None = None) -> None:
    """Each text cell of ``column`` that starts a formula is the original with a quote in front;
    the number columns are written as numbers (a minus sign, no quote) and read back as numbers."""
    cells = _cells(text)
    at = cells[0].index(column)
    for row, original in zip(cells[1:], originals):
        assert row[at] == ("'" + original if original[0] in "=+-@" and original != "-1" else original)
    for name, values in (numbers or {}).items():
        i = cells[0].index(name)
        assert [float(row[i]) for row in cells[1:]] == values  # unquoted: the spreadsheet reads a number
        assert pd.api.types.is_numeric_dtype(pd.read_csv(io.StringIO(text))[name])


# ----- the CSVs the app writes ------------------------------------------------------------------------
def test_the_result_bundle_and_a_tables_csv_button_quote_formulas_and_keep_numbers():
    bundle = ResultBundle("After fine-tuning", "model", {"run": "r"})
    bundle.add_table("dev predictions", _a_table())
    with zipfile.ZipFile(io.BytesIO(bundle.zip_bytes())) as z:
        text = z.read("tables/dev-predictions.csv").decode("utf-8")
    _check_csv(text, "text", FORMULAS + ["plain", "-"], {"score": [-0.5, 1.0, -2.0, 0.25, 3.0, -1.0],
                                                        "count": [-1, 2, 3, 4, 5, 6]})
    assert "'=1+1" in text and "\n=1+1" not in text


def test_a_column_named_by_an_upload_is_a_cell_too():
    bundle = ResultBundle("p", "m", {})
    bundle.add_table("t", pd.DataFrame({"=HYPERLINK(\"http://127.0.0.1:9\")": ["a"], "n": [-3]}))
    with zipfile.ZipFile(io.BytesIO(bundle.zip_bytes())) as z:
        header = _cells(z.read("tables/t.csv").decode())[0]
    assert header == ["'=HYPERLINK(\"http://127.0.0.1:9\")", "n"]


@pytest.mark.parametrize("write", ["rows_csv", "frame_csv"])
def test_every_csv_writer_neutralises_a_header_named_by_an_upload(write):
    """An uploaded file's column or label names become CSV headers (the after-finetuning CLI writes its rows
    with rows_csv; tables go through frame_csv): a header that starts a formula is a cell like any other."""
    from bert_explorer import safe_text

    rows = [{"=HYPERLINK(\"http://127.0.0.1:9\")": "a", "+cmd": 1, "label": "@SUM(1)"}]
    text = safe_text.rows_csv(rows) if write == "rows_csv" else safe_text.frame_csv(pd.DataFrame(rows))
    header, row = _cells(text)
    assert header == ["'=HYPERLINK(\"http://127.0.0.1:9\")", "'+cmd", "label"]
    assert row == ["a", "1", "'@SUM(1)"]
    assert list(safe_text.read_csv(text).columns) == list(rows[0])  # read back as it was


def test_the_ablation_results_csv_quotes_formulas_and_parses_back_as_it_was():
    df = pd.DataFrame([{c: None for c in results.EXPORT_COLUMNS} for _ in FORMULAS + ["-"]])
    df["setting"] = FORMULAS + ["-"]
    df["task"] = ["sst", "=A1", "ner", "qa", "-1"]
    df["ours"] = [-0.5, 80.0, 70.5, -1.0, 0.0]
    df["paper"] = [91.0, None, 88.5, 90.0, 92.0]
    text = results.to_csv(df)
    _check_csv(text, "setting", FORMULAS + ["-"], {"ours": [-0.5, 80.0, 70.5, -1.0, 0.0]})
    assert _cells(text)[2][results.EXPORT_COLUMNS.index("task")] == "'=A1"
    back = results.read_csv(text)
    assert back["setting"].tolist() == FORMULAS + ["-"] and back["task"].tolist()[:4] == ["sst", "=A1", "ner", "qa"]
    assert back["ours"].tolist() == [-0.5, 80.0, 70.5, -1.0, 0.0] and back["paper"].iloc[0] == 91.0


# ----- fine-tuned runs on uploads that carry formulas and an image link ----------------------------------
@pytest.fixture(scope="module")
def uploaded_runs(tmp_path_factory, base_model):
    """A QA run and an NER run, each trained (briefly) on an uploaded file: the QA questions start with
    formulas, and every question, passage and NER sentence holds an image link."""
    root = tmp_path_factory.mktemp("runs")
    data = root.parent
    qa = make_tiny("qa", n=48, seed=0).examples
    records = []
    for i, ex in enumerate(qa):
        context = f"{IMAGE} {ex['context']}"
        answer = ex["answers"][0]["text"]
        records.append({"question": f"{FORMULAS[i % 4]} {ex['question']} {IMAGE}", "context": context,
                        "answer_text": answer, "answer_start": ex["answers"][0]["answer_start"] + len(IMAGE) + 1})
        assert context[records[-1]["answer_start"]:].startswith(answer)
    pd.DataFrame(records[:40]).to_csv(data / "qa-train.csv", index=False)
    pd.DataFrame(records[40:]).to_csv(data / "qa-dev.csv", index=False)
    ner = make_tiny("ner", n=48, seed=0).examples
    for name, part in (("ner-train.conll", ner[:40]), ("ner-dev.conll", ner[40:])):
        (data / name).write_text("\n\n".join("\n".join(f"{t}\t{g}" for t, g in zip([IMAGE, *ex["tokens"]],
                                                                                      ["O", *ex["tags"]]))
                                             for ex in part) + "\n")
    for task in ("qa", "ner"):
        ext = "csv" if task == "qa" else "conll"
        cfg = FinetuneConfig(model=str(base_model), train=str(data / f"{task}-train.{ext}"),
                             dev=str(data / f"{task}-dev.{ext}"), task=task, epochs=1, batch_size=16, lr=1e-3,
                             max_seq_length=64, device="cpu", precision="fp32", seed=0)
        run_finetuning(cfg, root / task)
    return root


def test_the_cli_after_finetuning_csv_quotes_the_uploaded_questions(uploaded_runs, capsys):
    from bert_explorer.cli import main

    run = uploaded_runs / "qa"
    assert main(["after-finetuning", str(run), "--what", "predictions", "--format", "csv"]) == 0
    text = capsys.readouterr().out
    rows = predictions.load_predictions(run).rows
    questions = [r["text"] for r in rows]
    assert all(any(q.startswith(f) for q in questions) for f in FORMULAS)  # every kind is in the dev set
    cells = _cells(text)
    at = cells[0].index("text")
    assert [row[at] for row in cells[1:]] == ["'" + q for q in questions]
    table = pd.read_csv(io.StringIO(text))
    for name in ("f1", "exact_match", "pieces"):  # the app's numbers stay numbers
        assert pd.api.types.is_numeric_dtype(table[name]) and table[name].tolist() == [r[name] for r in rows]
    scores = [r["span_score"] for r in rows if r["span_score"] is not None]
    assert [v for v in table["span_score"].dropna()] == pytest.approx(scores)


# ----- the page shows the upload's text as text ------------------------------------------------------
MARKDOWN_ELEMENTS = ("markdown", "caption", "info", "warning", "success", "error", "title", "header", "subheader")


def _unescaped(value: str) -> str:
    """The characters a Markdown backslash escape shows (a word joiner, U+2060, shows nothing: markdown_text puts
    one after an address's "://" so that no link is made of it)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", value).replace("\u2060", "")


def _page(root, monkeypatch, run: str) -> AppTest:
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(root))
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state["af_run"] = run
    return at.run()


@pytest.mark.parametrize("run", ["qa", "ner"])
def test_after_finetuning_shows_an_image_link_in_the_data_as_text(run, uploaded_runs, monkeypatch):
    at = _page(uploaded_runs, monkeypatch, run)
    assert not at.exception
    at.radio(key="af_view").set_value("all").run()  # (the page opens on the mistakes; this one is example 0)
    at.selectbox(key=f"af_example_{run}").set_value(0).run()
    assert not at.exception
    pred = predictions.load_predictions(uploaded_runs / run)
    example, row = pred.record["examples"][0], pred.rows[0]  # the example shown first
    rendered = [e.value for kind in MARKDOWN_ELEMENTS for e in getattr(at, kind)]
    # no Markdown that the browser renders holds the link as Markdown: no image to fetch
    assert not [v for v in rendered if IMAGE in v or re.search(r"(?<!\\)!\[[^\]]*\]\(http", v)]
    # and the example is still shown, as its characters, in "Why this answer?"
    plain = [_unescaped(v) for v in rendered] + [e.value for e in at.text] + [e.value for e in at.code]
    wanted = example["question"] if run == "qa" else row["gold"]  # the question, the sentence with its entities
    assert IMAGE in wanted and any(wanted in v for v in plain)


def test_a_bare_address_in_shown_text_is_no_link_and_reads_as_typed():
    """GitHub's Markdown made links of "https://...", "www...." and "name@host" in a teacher's question, escapes and
    all (checked in Chromium: three <a> on the board). Its rule: a scheme's "://", or "www.", or an "@", followed
    by the address's characters; a word joiner (drawn as nothing) keeps each apart."""
    import re

    from bert_explorer.safe_text import markdown_text

    typed = "see https://evil.example/x, WWW.evil.example and me@evil.example [a](b) *c*"
    shown = markdown_text(typed)
    assert not re.search(r"://[\w.-]|\bwww\.|@[\w-]", re.sub(r"\\(.)", r"\1", shown), re.IGNORECASE)
    assert re.sub(r"\\(.)", r"\1", shown).replace("\u2060", "") == typed  # the characters typed, and no more
