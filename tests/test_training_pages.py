"""The training pages (pre-train, fine-tune, runs), the GPU queue of background runs, and the
pre-training time-lapse. Everything is tiny: generated data, a 2-layer model, a few steps; runs
live under tmp_path (BERT_EXPLORER_RUNS), never under ./runs."""
import csv
import io
import json
import re
import os
import shutil
from pathlib import Path
import time

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint
from bert_explorer.analysis.attention.heads import attention_maps
from bert_explorer.analysis.attention.timelapse import timelapse
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.tasks.registry import CLASSIFICATION
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.runs.run import Run
from shared import save_tiny_base

TINY_PT = dict(corpus="tiny", size="tiny", vocab="train", vocab_size=300, batch_size=4, max_seq_length=48,
               log_every=1, eval_every=1000, eval_batches=2, seed=3, device="cpu")


def _page(name, **state):
    at = AppTest.from_file(f"../pages/{name}", default_timeout=120)
    for k, v in state.items():
        at.session_state[k] = v
    return at.run()


def _wait_for_run(root, timeout=240, skip=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = [p for p in root.iterdir() if (p / "status.json").exists() and p.name not in skip]
        if runs:
            status = Run(runs[0]).wait(timeout=max(1, deadline - time.time()))
            return Run(runs[0]), status
        time.sleep(0.2)
    raise AssertionError("no run appeared")


def _start_and_finish(at, root, **small):
    """Set the page's small settings (key: value), start the run and wait for it to finish."""
    for key, value in small.items():
        at.number_input(key=key).set_value(value)
    at.run()
    at.button(key="ft_start").click().run()
    assert not at.exception
    run, status = _wait_for_run(root)
    assert status["state"] == "finished", run.path.joinpath("log.txt").read_text()[-2000:]
    return run


def run_name(root, skip=()):
    (only,) = [p.name for p in root.iterdir() if (p / "status.json").exists() and p.name not in skip]
    return only


def _try(widgets, key):
    """The Fine-tune page's try box of the run shown (each run has its own: ``<key>_<run>``)."""
    (box,) = [w for w in widgets if w.key.startswith(key + "_")]
    return box


def _charts(at):
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _titles(at):
    return [(c.get("layout", {}).get("title") or {}).get("text", "") for c in _charts(at)]


# ----- pre-train page ---------------------------------------------------------------------------------
def test_pretrain_page_starts_a_run_and_shows_curves_and_timelapse(runs_root):
    old = Run(runs_root / "older").create({"size": "tiny"}, "pretrain")  # an earlier run, shown first
    old.write_status(state="stopped")
    at = _page("10_Pre-train.py")
    assert at.selectbox(key="pt_watch").value == "older"
    assert not at.exception
    assert any("Appendices A.1-A.2" in m.value for m in at.markdown)
    at.multiselect(key="pt_corpus").set_value(["tiny"])
    at.selectbox(key="pt_size").set_value("L2-H128")
    at.number_input(key="pt_steps").set_value(4)
    at.number_input(key="pt_batch").set_value(4)
    at.number_input(key="pt_seq").set_value(48)
    at.number_input(key="pt_vocab").set_value(300)
    at.number_input(key="pt_snapshots").set_value(2)
    at.number_input(key="pt_evals").set_value(2)
    at.selectbox(key="pt_device").set_value("cpu")
    at.run()
    assert not at.exception
    labels = {m.label: m.value for m in at.metric}
    assert labels["Parameters"].endswith("M") and any(k.startswith("Estimated time") for k in labels)
    assert any("**estimate**" in c.value for c in at.caption)

    at.button(key="pt_start").click().run()
    assert not at.exception and not at.warning
    assert at.selectbox(key="pt_watch").value == run_name(runs_root, {"older"})  # the new run is shown
    run, status = _wait_for_run(runs_root, skip={"older"})
    assert status["state"] == "finished", run.path.joinpath("log.txt").read_text()[-2000:]
    assert run.config()["size"] == "L2-H128" and run.config()["max_steps"] == 4
    assert [s for s, _ in run.checkpoints()] == [2, 4]

    at.run()
    assert not at.exception
    titles = _titles(at)
    assert "Training loss" in titles and "Held-out accuracy" in titles
    numbers = {m.label: m.value for m in at.metric}
    assert numbers["Loss"] != "—" and numbers["MLM accuracy (held out)"].endswith("%")
    assert numbers["Tokens/s"] != "—"
    heat = next(c for c in _charts(at) if "attention at each checkpoint" in c["layout"]["title"]["text"])
    assert len(heat["frames"]) == 2  # one frame per checkpoint
    assert [s["label"] for s in heat["layout"]["sliders"][0]["steps"]] == ["step 2", "step 4"]
    assert any("checkpoints/step-4" in c.value for c in at.caption)  # how to open it in the other pages
    # resume continues the finished run from its last checkpoint
    assert at.number_input(key=f"pt_resume_to_{run.path.name}").value == 5
    at.number_input(key=f"pt_resume_to_{run.path.name}").set_value(6)
    started_with = run.config()
    at.button(key="pt_resume").click().run()
    assert not at.exception
    status = run.wait(timeout=240)
    assert status["state"] == "finished" and status["step"] == 6
    # the run's own settings, one end moved: the decay is re-planned to it, and the log says so
    assert {k: v for k, v in run.config().items() if k not in ("max_steps", "warmup_steps")} == \
        {k: v for k, v in started_with.items() if k not in ("max_steps", "warmup_steps")}
    assert "schedule is re-planned from step 4" in run.path.joinpath("log.txt").read_text()
    assert [m["step"] for m in run.metrics() if m["split"] == "train"] == [4, 6]  # logged every 10 steps + the last

    # a run with more checkpoints than a time-lapse reads: evenly spaced ones, the first and the last, said so
    from bert_explorer import limits
    weights = (run.checkpoints()[-1][1] / "model.safetensors").stat().st_size
    limits_before = limits.TIMELAPSE_BYTES
    limits.TIMELAPSE_BYTES = 2.5 * weights  # two checkpoints' weights fit
    try:
        at.run()
    finally:
        limits.TIMELAPSE_BYTES = limits_before
    assert not at.exception
    heat = next(c for c in _charts(at) if "attention at each checkpoint" in c["layout"]["title"]["text"])
    assert [s["label"] for s in heat["layout"]["sliders"][0]["steps"]] == ["step 2", "step 6"]
    assert any(c.value.startswith("The time-lapse reads 2 of the run's 3 checkpoints, evenly spaced from step 2 to "
                                  "step 6") for c in at.caption)


def test_pretrain_page_estimate_counts_the_evaluations_and_the_loading(runs_root):
    """a 40-step warm start evaluated 10 times took five times its estimate. The page's
    estimate now has an evaluation part that grows with the evaluations asked for, and a loading part."""
    import re

    at = _page("10_Pre-train.py")
    at.number_input(key="pt_steps").set_value(40)
    at.number_input(key="pt_evals").set_value(10).run()
    assert not at.exception

    def parts():
        caption = next(c.value for c in at.caption if "**estimate**" in c.value)
        evals = re.search(r"Evaluation [^:]+: (\d+) held-out evaluations of about ([\d,]+) sequences", caption)
        assert evals and "Loading" in caption, caption
        return int(evals.group(1)), int(evals.group(2).replace(",", "")), caption

    n, sequences, caption = parts()
    assert n == 10 and sequences > 0  # the default corpus has held-out documents

    def seconds(text):  # "1 h 02 min", "3 min 05 s", "45 s"
        units = {"h": 3600, "min": 60, "s": 1}
        return sum(int(v) * units[u] for v, u in re.findall(r"(\d+) (h|min|s)\b", text))
    # the four parts add up to the idle machine's time the caption names (the headline adds today's load)
    idle = seconds(re.search(r"\*\*estimate\*\*: ([0-9hmins ]+) on an idle machine", caption).group(1))
    four = [seconds(re.search(rf"{part} ((?:\d+ (?:h|min|s)\b ?)+)", caption).group(1))
            for part in ("Training", "Evaluation", "Loading", "Saving")]
    assert abs(sum(four) - idle) <= 4, (four, idle)
    # the headline is the same idle machine's time (it showed the load of the moment's, 13 min 12 s beside 8 min
    # 22 s in the parts), the load's stretch said in words under it
    headline = next(m.value for m in at.metric if m.label.startswith("Estimated time"))
    assert abs(seconds(headline) - idle) <= 1, (headline, idle)
    assert any(c.value.startswith("On this machine now: about ") for c in at.caption)
    at.number_input(key="pt_evals").set_value(20).run()
    assert parts()[0] == 20
    # one estimate: the page's is the command line's (train.pretrain.estimate) of the settings the run reads
    from bert_explorer.runs.report import duration_text
    from bert_explorer.train.pretrain import estimate
    from bert_explorer.train.pretrain_config import PretrainConfig

    cfg = PretrainConfig(max_steps=40, eval_every=2, size=at.selectbox(key="pt_size").value,
                         batch_size=at.number_input(key="pt_batch").value, lr=at.number_input(key="pt_lr").value,
                         warmup_steps=4, save_every=8, corpus="+".join(at.multiselect(key="pt_corpus").value))
    said_idle = re.search(r"\*\*estimate\*\*: ([0-9hmins ]+) on an idle machine", parts()[2]).group(1)
    assert said_idle == duration_text(estimate(cfg, runs_root)["seconds"])


def test_pretrain_page_warm_starts_from_a_checkpoint_and_shows_its_precision(runs_root):
    at = _page("10_Pre-train.py")
    at.multiselect(key="pt_corpus").set_value(["tiny"])
    at.radio(key="pt_start_from").set_value("a checkpoint (warm start)").run()
    assert not at.exception
    at.selectbox(key="pt_init").set_value("minilm")
    assert at.number_input(key="pt_vocab").disabled  # a warm start keeps the checkpoint's vocabulary
    at.number_input(key="pt_steps").set_value(1)
    at.number_input(key="pt_batch").set_value(2)
    at.number_input(key="pt_seq").set_value(32)
    at.number_input(key="pt_evals").set_value(1)
    at.selectbox(key="pt_device").set_value("cpu")
    at.selectbox(key="pt_precision").set_value("fp32")
    at.run()
    labels = {m.label: m.value for m in at.metric}
    assert labels["Parameters"] == "22.9 M"  # MiniLM (22.7 M) with its fresh heads, not a preset's size
    at.button(key="pt_start").click().run()
    assert not at.exception
    run, status = _wait_for_run(runs_root)
    assert status["state"] == "finished", run.path.joinpath("log.txt").read_text()[-2000:]
    cfg = run.config()
    assert cfg["init"] == "minilm" and cfg["freeze_word_embeddings"] and cfg["precision"] == "fp32"
    assert "newly initialised (not in the checkpoint): masked-LM head, next-sentence head" in \
        run.path.joinpath("log.txt").read_text()
    at.run()
    assert any("Training precision: **fp32**" in c.value for c in at.caption)


def test_finetune_page_reads_a_parquet_upload_and_its_columns(runs_root, base_model):
    import pandas as pd

    buf = io.BytesIO()
    tiny = make_tiny("classification", n=48).examples
    pd.DataFrame({"review": [ex["text"] for ex in tiny], "sentiment": [ex["label"] for ex in tiny]}).to_parquet(buf)
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=("reviews.parquet", buf.getvalue()))
    assert not at.exception and not at.error
    assert "Detected task: **classification**" in at.success[0].value
    assert at.selectbox(key="ft_label_column").options == ["(detect)", "review", "sentiment"]
    assert len(at.dataframe[0].value) == 20 and not at.button(key="ft_start").disabled
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=("cut.parquet", buf.getvalue()[:300]))
    assert not at.exception and len(at.error) == 1 and "cut.parquet is not a complete Parquet file" in at.error[0].value
    assert at.button(key="ft_start").disabled


@pytest.mark.parametrize("name, data, message", [
    ("empty.txt", b"", "empty.txt is empty"),
    ("photo.txt", b"\x89PNG\r\n\x1a\n\x00\x00rest", "binary file"),
    ("one.txt", b"A single document.\nWith two sentences.\n", "holds 1 document"),
    ("nul.txt", b"some text\x00\x01\x02 and binary", "binary file (it contains a NUL byte"),
    # random high bytes without a NUL, read as Latin-1: they were "6 documents, 172 words", and Start was offered
    ("noise.txt", b"\n\n".join(bytes((7 * i + 131 * k) % 128 + 128 for i in range(3000)) for k in range(6)),
     "noise.txt does not look like text"),
])
def test_pretrain_page_refuses_a_bad_corpus_upload(runs_root, name, data, message):
    at = _page("10_Pre-train.py", pt_upload_bytes=(name, data))
    at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    assert not at.exception
    assert len(at.error) == 1 and message in at.error[0].value
    assert at.error[0].value.count(". ") == 0  # one sentence
    assert at.button(key="pt_start").disabled
    assert not list(runs_root.iterdir())



def test_pretrain_page_takes_any_file_and_says_what_a_gz_is_and_reads_a_file_once(runs_root, monkeypatch):
    """The browser refused a .gz with a tooltip and the page kept the last file's message; a 60 MB upload was
    decoded and split again at every click (5 s each)."""
    import gzip

    import bert_explorer.data.corpus_upload as cu

    at = _page("10_Pre-train.py", pt_upload_bytes=("plain.txt.gz", gzip.compress(b"a text\n\nanother\n")))
    at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    (box,) = at.get("file_uploader")
    assert list(box.proto.type) == []  # any file reaches the page, which says what is wrong with it
    assert "plain.txt.gz is a binary file (a gzip archive)" in at.error[0].value
    calls = []
    real = cu.check_corpus_upload
    monkeypatch.setattr("bert_explorer.data.corpus_upload.check_corpus_upload",
                        lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    text = "\n\n".join(f"Document {i} says one thing.\nThen another thing {i}." for i in range(12)) + "\n"
    at.session_state["pt_upload_bytes"] = ("mine.txt", text.encode())
    at.run()
    at.number_input(key="pt_steps").set_value(7).run()
    at.number_input(key="pt_steps").set_value(9).run()
    assert not at.exception and at.success and len(calls) <= 1

def test_an_uploads_estimate_holds_out_what_the_run_will_hold_out(runs_root, tmp_path):
    """40 documents, each twice: the page said "10 held-out evaluations of about 0 sequences each", but the run
    drops a held-out document that is also in training word for word, holds none out, and evaluates nothing."""
    from bert_explorer.train.pretrain import estimate
    from bert_explorer.train.pretrain_config import PretrainConfig

    docs = [f"Document {i % 20} opens with a sentence about item {i % 20}.\nIts second sentence is here." for i in
            range(40)]
    text = "\n\n".join(docs) + "\n"
    at = _page("10_Pre-train.py", pt_upload_bytes=("twice.txt", text.encode()))
    at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    assert not at.exception
    caption = next(c.value for c in at.caption if "**estimate**" in c.value)
    assert "no held-out evaluation (fewer than two documents held out, and next-sentence pairs need two)" in caption
    (tmp_path / "twice.txt").write_text(text)  # and the run, reading the same file, says the same
    run = estimate(PretrainConfig(corpus=str(tmp_path / "twice.txt"), held_out_fraction=0.05), runs_root)
    assert run["held_out_evaluations"] == 0
    # "use only the first N documents": the words the run reads are those of the first N (the page counted all)
    at.number_input(key="pt_max_docs").set_value(10).run()
    caption = next(c.value for c in at.caption if "**estimate**" in c.value)
    first = sum(len(d.split()) for d in docs[:10])
    assert f"to tokenise {first:,} words" in caption, caption


def test_a_warm_start_begins_from_the_model_chosen_on_the_other_pages(runs_root):
    """With explorer-mini chosen in the sidebar, the warm start offered minilm-mlm-nsp first, without a word."""
    at = _page("10_Pre-train.py", be_model_choice="explorer-mini")
    at.radio(key="pt_start_from").set_value("a checkpoint (warm start)").run()
    assert not at.exception and at.selectbox(key="pt_init").value == "explorer-mini"


def test_a_pretraining_of_days_is_asked_for_twice(runs_root):
    """10,000,000 steps (118 days here) started with one click, where the Fine-tune page asks above 30 minutes."""
    at = _page("10_Pre-train.py")
    at.multiselect(key="pt_corpus").set_value(["tiny"])
    at.number_input(key="pt_steps").set_value(10_000_000)
    at.run()
    assert not at.exception and at.button(key="pt_start").disabled
    (box,) = [c for c in at.checkbox if c.key.startswith("pt_confirm_long")]
    assert box.label.startswith("Yes, pre-train for about ") and "(10,000,000 steps)" in box.label
    box.check().run()
    assert not at.button(key="pt_start").disabled
    assert not list(runs_root.iterdir())  # nothing started by asking
    # the tick is for the run it was given for: more steps ask again
    at.number_input(key="pt_steps").set_value(9_000_000).run()
    assert at.button(key="pt_start").disabled and not [c for c in at.checkbox if c.key.startswith("pt_confirm")
                                                       and c.value]
    at.number_input(key="pt_steps").set_value(4).run()  # a short run: no box
    assert not [c for c in at.checkbox if c.key.startswith("pt_confirm_long")] and not at.button(key="pt_start").disabled


@pytest.fixture
def any_speed(monkeypatch):
    """The page's defaults (1,000 steps of L4-H256) take 20 minutes on this 2-core CPU, near the half hour above
    which Start waits for a tick: on a busier or slower machine the tests of what Start does with a corpus found it
    disabled. They are not about the long-run question (tested on its own), which is asked of no run here."""
    from bert_explorer.train import estimate

    monkeypatch.setattr(estimate, "LONG_RUN_ASK_S", float("inf"))


@pytest.mark.parametrize("name, codec, note", [
    ("latin.txt", "latin-1", "read as Latin-1 because the file is not valid UTF-8"),
    ("unicode.txt", "utf-16", "read unicode.txt as UTF-16 (it starts with a UTF-16 byte-order mark)"),
    ("bare.txt", "utf-16-le", "read bare.txt as UTF-16 (it has no byte-order mark"),
])
def test_pretrain_page_reads_latin_1_and_utf_16_as_fine_tune_does_and_stores_utf_8(runs_root, any_speed, name, codec,
                                                                                    note):
    """Pre-train refused what Fine-tune reads ("save it as UTF-8 and upload it again")."""
    from bert_explorer.app import runs_view

    text = "\n\n".join(f"Caf\u00e9 number {d} opens.\nIt serves cr\u00e8me.\nAnd tea." for d in range(6))
    at = _page("10_Pre-train.py", pt_upload_bytes=(name, text.encode(codec)))
    at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    assert not at.exception and not at.error
    assert "6 documents" in at.success[0].value
    assert any(note in c.value.replace("\\", "") for c in at.caption)  # (shown escaped: its characters)
    launched = []
    real = runs_view.launch
    runs_view.launch = lambda kind, config, run_dir, **kw: launched.append(config) or True
    try:
        at.button(key="pt_start").click().run()
    finally:
        runs_view.launch = real
    (config,) = launched
    assert Path(config["corpus"]).read_bytes() == text.encode("utf-8")  # what the run reads: UTF-8


def test_pretrain_page_accepts_a_good_corpus_upload(runs_root, any_speed):
    text = "\n\n".join(f"Document {d} begins here.\nIt has a second sentence.\nAnd a third one." for d in range(6))
    at = _page("10_Pre-train.py", pt_upload_bytes=("mine.txt", text.encode()))
    at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    assert not at.exception and not at.error
    assert "6 documents" in at.success[0].value
    assert not at.button(key="pt_start").disabled
    # Start keeps the upload in the run's folder under a name a run may hold, so the run takes that folder
    from bert_explorer.app import runs_view

    launched = []
    real = runs_view.launch
    runs_view.launch = lambda kind, config, run_dir, **kw: launched.append((kind, config, run_dir)) or True
    try:
        at.button(key="pt_start").click().run()
    finally:
        runs_view.launch = real
    assert not at.exception
    (kind, config, run_dir), = launched
    assert Path(config["corpus"]).read_text() == text and Path(config["corpus"]).parent == run_dir
    Run(run_dir).create(config, kind)  # what the run's process does first: it refused a corpus-mine.txt
    # six short documents give far fewer WordPieces than the 8,000 asked: the parameters are those of the
    # vocabulary the run will learn (the page said 1.5 M for a run of 0.5 M)
    from bert_explorer.tokenizer import WordPieceTokenizer
    from bert_explorer.train.estimate import model_size

    pieces = WordPieceTokenizer.train([line for line in text.splitlines() if line.strip()], 8000).vocab_size
    assert pieces < 200
    assert any(f"The corpus gives **{pieces:,} WordPieces** of the 8,000 asked for" in c.value for c in at.caption)
    params = next(m.value for m in at.metric if m.label == "Parameters")
    assert params == f"{model_size('L4-H256', pieces, 128)[0] / 1e6:,.1f} M" != \
        f"{model_size('L4-H256', 8000, 128)[0] / 1e6:,.1f} M"


def test_a_small_built_in_corpus_is_estimated_with_the_vocabulary_it_gives(runs_root):
    """The tiny corpus gives 337 of 8,000 pieces: the page said 1.5 M parameters of a run that had 0.54 M (its
    FLOPs and time of the larger model), where an upload's smaller vocabulary was already counted."""
    from bert_explorer.train.estimate import model_size
    from bert_explorer.train.pretraining_data import learnt_vocab_size

    at = _page("10_Pre-train.py")
    at.multiselect(key="pt_corpus").set_value(["tiny"])
    at.selectbox(key="pt_size").set_value("L2-H128")
    at.run()
    assert not at.exception
    pieces = learnt_vocab_size(PretrainConfig(corpus="tiny", vocab_size=8000))
    assert pieces < 400
    assert any(f"The corpus gives **{pieces:,} WordPieces** of the 8,000 asked for" in c.value for c in at.caption)
    params = next(m.value for m in at.metric if m.label == "Parameters")
    assert params == f"{model_size('L2-H128', pieces, 128)[0] / 1e6:,.1f} M"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the bad value is cuda on a machine without a GPU")
def test_pretrain_page_says_a_bad_setting_at_once_and_starts_nothing(runs_root, any_speed):
    at = _page("10_Pre-train.py")
    assert not at.exception and not at.error and not at.button(key="pt_start").disabled
    assert any(c.value.startswith("Runs with: 1,000 steps of 32 sequences of 128 WordPieces, learning rate 0.0005 "
                                  "(100 warm-up steps), seed 0.") for c in at.caption)
    at.selectbox(key="pt_device").set_value("cuda").run()
    assert not at.exception
    assert [e.value for e in at.error] == ["device cuda needs a CUDA GPU and this machine has none: choose auto or cpu"]
    assert at.button(key="pt_start").disabled
    assert not list(runs_root.iterdir())


# ----- fine-tune page ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """A small random BERT (H=32, 200 pieces learnt on the tiny classification task): smaller than
    conftest's base_model, so that the page tests that train it stay quick."""
    return save_tiny_base(tmp_path_factory.mktemp("base"), ("classification",), vocab_size=200, hidden=32, heads=2,
                          positions=64)


def _csv(rows, header):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue().encode()


def _model_state(base_model):
    return {"be_model_choice": "a local directory…", "be_model_path": base_model}


def test_finetune_page_upload_detect_train_and_try(runs_root, base_model):
    data = _csv([(ex["text"], ex["label"]) for ex in make_tiny("classification", n=48).examples],
                ["review", "sentiment"])
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=("reviews.csv", data))
    assert not at.exception
    # the procedure is Section 3.2 (Section 4 holds the results): the intro cited Section 4 for it
    assert any("Section 3.2 and Figure 4" in m.value for m in at.markdown)
    assert not at.error
    assert "Detected task: **classification**" in at.success[0].value
    assert at.selectbox(key="ft_label_column").options == ["(detect)", "review", "sentiment"]
    preview = at.dataframe[0].value
    assert list(preview.columns) == ["text", "label"] and len(preview) == 20

    assert at.selectbox(key="ft_task").options[:2] == ["(detect)", "classification"]
    at.selectbox(key="ft_task").set_value(CLASSIFICATION)  # the box holds the task type itself
    at.selectbox(key="ft_label_column").set_value("sentiment")
    at.number_input(key="ft_epochs").set_value(1.0)
    at.number_input(key="ft_batch").set_value(16)
    at.number_input(key="ft_max_len").set_value(32)
    at.run()
    assert not at.exception
    assert at.success[0].value.startswith("Task (as chosen): **classification**")  # named, not detected
    # the settings the run will read, said beside the button (a box whose typed number is out of its range shows
    # it in red and keeps its last valid value: what runs is said here, not guessed from the boxes)
    said = " ".join(c.value for c in at.caption).replace("\\", "")
    assert ("the model chosen in the sidebar (choose another there), 1 epoch, learning rate 5e-05, batch 16, 32 "
            "WordPieces at most, 10% held out for dev (when no dev set is given), seed 0.") in said
    assert re.search(r"Runs with: \*\*[^*]+\*\*, the model chosen in the sidebar", said)  # which model, first
    at.button(key="ft_start").click().run()
    assert not at.exception
    run, status = _wait_for_run(runs_root)
    assert status["state"] == "finished", run.path.joinpath("log.txt").read_text()[-2000:]
    assert (run.path / "data" / "reviews.csv").read_bytes() == data  # the upload lives in the run
    assert run.config()["label_column"] == "sentiment" and run.config()["epochs"] == 1.0
    assert run.config()["task"] == "classification"  # the run's config.json keeps its name

    at.run()
    assert not at.exception
    labels = [m.label for m in at.metric]
    # named for when it was measured: After fine-tuning's "saved model" figure may differ in the third decimal
    assert "dev accuracy, saved model" in labels and "dev macro-F1, saved model" in labels
    assert "Confusion matrix (dev)" in _titles(at)
    assert at.get("download_button")
    _try(at.text_input, "ft_try_text").set_value("we saw the film and it was good").run()
    assert not at.exception
    pred = next(m for m in at.metric if m.label == "Prediction")
    assert pred.value in ("positive", "negative")
    (chart,) = [json.loads(e.proto.spec) for e in at.get("vega_lite_chart")]  # the labels' probabilities
    assert (chart["encoding"]["x"]["title"], chart["encoding"]["y"]["title"]) == ("label", "probability")


def test_finetune_page_takes_a_dev_file_beside_an_upload_and_checks_its_labels(runs_root, base_model):
    """The page told a user to "give a dev file of its own" and had nowhere to give one."""
    rows = [(ex["text"], ex["label"]) for ex in make_tiny("classification", n=48).examples]
    dev_rows = [(ex["text"], ex["label"]) for ex in make_tiny("classification", n=12, seed=3).examples]
    at = _page("11_Fine-tune.py", **_model_state(base_model),
               ft_upload_bytes=("train.csv", _csv(rows, ["text", "label"])),
               ft_dev_upload_bytes=("dev.csv", _csv(dev_rows + [("a new kind of text", "neutral")], ["text", "label"])))
    assert not at.exception
    assert any("has labels that the training set (train.csv) never uses: 'neutral'" in e.value for e in at.error)
    assert at.button(key="ft_start").disabled
    at.session_state["ft_dev_upload_bytes"] = ("dev.csv", _csv(dev_rows, ["text", "label"]))
    at.number_input(key="ft_epochs").set_value(1.0)
    at.number_input(key="ft_max_len").set_value(32)
    at.run()
    said = [c.value.replace("\\", "") for c in at.caption]
    assert not at.error and any(c.startswith("Dev file dev.csv: 12 examples") for c in said)
    at.button(key="ft_start").click().run()
    run, status = _wait_for_run(runs_root)
    assert status["state"] == "finished", run.path.joinpath("log.txt").read_text()[-2000:]
    assert (run.path / "data" / "dev.csv").read_bytes() == _csv(dev_rows, ["text", "label"])
    assert Path(run.config()["dev"]) == (run.path / "data" / "dev.csv").resolve()
    assert json.loads((run.path / "metrics.json").read_text())["dev_examples"] == 12

def test_finetune_page_says_a_dev_set_larger_than_a_run_scores_is_sampled(runs_root, base_model):
    """A run scores at most 2,000 dev examples, sampled; the page showed a dev file of 2,400 as "2,400 examples,
    scored" and its estimate "2,000 dev examples scored", with no word that the rest were left out."""
    rows = [(f"film {i} was {'warm' if i % 2 else 'dull'}", i % 2) for i in range(60)]
    dev_rows = [(f"a film numbered {i} was {'warm' if i % 2 else 'dull'}", i % 2) for i in range(2400)]
    train = ("train.csv", _csv(rows, ["text", "label"]))
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=train,
               ft_dev_upload_bytes=("dev.csv", _csv(dev_rows, ["text", "label"])))
    assert not at.exception and not at.error
    said = [c.value.replace("\\", "") for c in at.caption]
    assert any(c.startswith("Dev file dev.csv: 2,400 examples, scored instead of a part of the training file; a run "
                            "scores 2,000 of the 2,400 dev examples, sampled at random") for c in said), said
    (estimate,) = [c for c in said if c.startswith("Estimated time on")]
    assert "2,000 dev examples (of the 2,400 the dev set holds, sampled: a run scores at most 2,000)" in estimate
    small = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=train,
                  ft_dev_upload_bytes=("dev.csv", _csv(dev_rows[:300], ["text", "label"])))
    assert not [c.value for c in small.caption if "sampled" in c.value]  # all 300 scored: nothing to say


@pytest.mark.parametrize("builtin, said, boxes", [
    ("tiny:classification", "The boxes start from the paper's own settings for a single-sentence classification "
                            "task, a GLUE task's (Section 4.1): batch 32, 3 epochs", (32, 5e-5, 3.0)),
    ("tiny:qa", "the paper used for a question-answering (QA) task: batch 32, lr 5e-5, 3 epochs (SQuAD v1.1 (§4.2)",
     (32, 5e-5, 3.0)),
    ("tiny:multiple-choice", "The boxes start from what the paper used for multiple-choice: batch 16, lr 2e-5, 3 "
                             "epochs (SWAG (§4.4)).", (16, 2e-5, 3.0)),
    ("tiny:ner", "For a named-entity (NER) task the paper gives no settings of its own: the boxes start from its GLUE",
     (32, 5e-5, 3.0)),
])
def test_finetune_page_starts_from_the_papers_settings_for_the_task_chosen(runs_root, base_model, builtin, said,
                                                                            boxes):
    """The page called batch 32, lr 5e-5 and 3 epochs "the paper's defaults" for every task: they are its GLUE
    settings (and SQuAD v1.1's); it fine-tuned SWAG at batch 16 and lr 2e-5, and the boxes said so in a caption
    while they held GLUE's."""
    import shared

    at = shared.fine_tune_page_on_builtin(base_model)
    at.selectbox(key="ft_builtin").set_value(builtin).run()
    assert not at.exception
    (settings,) = [c.value for c in at.caption if "Appendix A.3 suggests searching" in c.value]
    assert said in settings and "What you typed" not in settings
    assert not any("the paper's defaults" in m.value for m in at.markdown)
    assert tuple(at.number_input(key=k).value for k in ("ft_batch", "ft_lr", "ft_epochs")) == boxes


def test_finetune_settings_the_user_gave_hold_when_the_task_changes(runs_root, base_model):
    """The boxes follow the task chosen while the user leaves them; a value the user typed is theirs."""
    import shared

    at = shared.fine_tune_page_on_builtin(base_model)
    boxes = lambda: tuple(at.number_input(key=k).value for k in ("ft_batch", "ft_lr", "ft_epochs"))  # noqa: E731
    at.selectbox(key="ft_builtin").set_value("tiny:multiple-choice").run()
    assert boxes() == (16, 2e-5, 3.0)
    at.selectbox(key="ft_builtin").set_value("tiny:classification").run()
    assert boxes() == (32, 5e-5, 3.0)
    at.number_input(key="ft_epochs").set_value(2.0).run()
    at.selectbox(key="ft_builtin").set_value("tiny:multiple-choice").run()
    assert not at.exception and boxes() == (16, 2e-5, 2.0)
    (settings,) = [c.value for c in at.caption if "Appendix A.3 suggests searching" in c.value]
    assert "What you typed holds (epochs)" in settings
    at.number_input(key="ft_epochs").set_value(3.0).run()  # the paper's again: it follows the task once more
    at.selectbox(key="ft_builtin").set_value("tiny:qa").run()
    assert boxes() == (32, 5e-5, 3.0)


PRETRAIN_SETTINGS = ("pt_corpus_source", "pt_objective", "pt_corpus", "pt_start_from", "pt_size", "pt_steps",
                     "pt_batch", "pt_lr", "pt_seq", "pt_vocab", "pt_warmup", "pt_snapshots", "pt_max_docs", "pt_seed",
                     "pt_log_every", "pt_evals", "pt_device", "pt_precision", "pt_frames")


def _settings(at, keys) -> dict:
    kinds = ("number_input", "selectbox", "radio", "multiselect", "checkbox")
    shown = {box.key: box.value for kind in kinds for box in getattr(at, kind) if box.key in keys}
    assert set(shown) == set(keys)
    return shown


def test_a_reload_of_pretrain_keeps_every_setting_even_one_at_its_boxs_least_value(runs_root):
    """A reload is a new session, and Pre-train's settings (minutes of choices) went back to the page's defaults.
    They are kept in the page's address as the browser writes it: a value equal to a box's own first value is left
    out of it. That first value was the box's least number or first option, not the page's default: 1 step, 1
    sequence a batch or the first corpus alone came back from a reload as 1,000 steps, 32, and the default corpus."""
    from shared import address_of

    page = "../pages/10_Pre-train.py"
    at = AppTest.from_file(page, default_timeout=120).run()
    default = _settings(at, PRETRAIN_SETTINGS)
    names = at.multiselect(key="pt_corpus").options
    chosen = {"pt_steps": 1, "pt_batch": 1, "pt_lr": 1e-6, "pt_seq": 16, "pt_snapshots": 1, "pt_log_every": 1,
              "pt_evals": 1, "pt_warmup": 0.0, "pt_max_docs": 3, "pt_seed": 7, "pt_frames": 2, "pt_vocab": 200}
    for key, value in chosen.items():
        at.number_input(key=key).set_value(value)
    at.multiselect(key="pt_corpus").set_value(["tiny"] if names[0] != "tiny" else names[:2])
    at.radio(key="pt_objective").set_value("mlm").run()
    at.selectbox(key="pt_size").set_value("L2-H128").run()
    at.selectbox(key="pt_device").set_value("cpu").run()
    made = _settings(at, PRETRAIN_SETTINGS)
    assert not at.exception and all(made[k] != default[k] for k in (*chosen, "pt_corpus", "pt_objective", "pt_size"))

    reloaded = AppTest.from_file(page, default_timeout=120)
    reloaded.query_params.update(address_of(at))
    reloaded.run()
    assert not reloaded.exception and _settings(reloaded, PRETRAIN_SETTINGS) == made
    # what was left at the page's default is not in the address, and comes back as that default
    assert "pt_start_from" not in address_of(at) and "pt_steps" in address_of(at)

    lying = AppTest.from_file(page, default_timeout=120)
    lying.query_params.update(pt_steps="inf", pt_batch="99999999999", pt_lr="-1", pt_corpus=["../../etc/passwd"],
                              pt_size="gigantic", pt_device="tpu", pt_objective="<script>", pt_seq="1e400")
    lying.run()
    assert not lying.exception and _settings(lying, PRETRAIN_SETTINGS) == default


def test_a_reload_of_finetune_keeps_its_settings_and_what_the_user_typed_still_holds_when_the_task_changes(
        runs_root, base_model):
    """Fine-tune's data source, built-in set and advanced settings come back from the address after a reload. The
    batch, rate and epochs follow the task chosen unless the user typed their own: a number the address gives is
    the user's (the page says so) and holds when the task changes."""
    import shared
    from shared import address_of

    at = shared.fine_tune_page_on_builtin(base_model)
    at.selectbox(key="ft_builtin").set_value("tiny:multiple-choice").run()
    at.number_input(key="ft_batch").set_value(1).run()  # the box's least value, the user's own
    at.number_input(key="ft_seed").set_value(3).run()
    at.checkbox(key="ft_keep_best").check().run()
    address = address_of(at)
    assert address["ft_batch"] == "1" and "ft_lr" not in address  # the lr followed the task: not the user's

    reloaded = AppTest.from_file("../pages/11_Fine-tune.py", default_timeout=120)
    reloaded.session_state["be_model_choice"] = "a local directory…"
    reloaded.session_state["be_model_path"] = base_model
    reloaded.query_params.update(address)
    reloaded.run()
    boxes = lambda: tuple(reloaded.number_input(key=k).value for k in ("ft_batch", "ft_lr", "ft_epochs"))  # noqa
    assert not reloaded.exception and reloaded.selectbox(key="ft_builtin").value == "tiny:multiple-choice"
    assert boxes() == (1, 2e-5, 3.0) and reloaded.number_input(key="ft_seed").value == 3
    assert reloaded.checkbox(key="ft_keep_best").value
    (settings,) = [c.value for c in reloaded.caption if "Appendix A.3 suggests searching" in c.value]
    assert "What you typed holds (batch)" in settings
    reloaded.selectbox(key="ft_builtin").set_value("tiny:classification").run()
    assert not reloaded.exception and boxes() == (1, 5e-5, 3.0)


def test_the_uploaders_label_lists_every_format_the_reader_reads_and_no_other(runs_root, base_model, tmp_path):
    """The label named CSV, TSV, JSONL, Parquet, CoNLL and SQuAD JSON; a fastText file, a JSON array and a
    multi-label table, which the reader reads too, read as not accepted. Each format is read from a file of
    it here, and the label and help are checked against what was read."""
    import pandas as pd

    from bert_explorer.data.uploads.reader import FORMATS, read_task_file

    words = [("a warm film", "pos"), ("a dull film", "neg")] * 4
    squad = {"data": [{"paragraphs": [{"context": f"Paris is in France {i}.", "qas": [
        {"id": str(i), "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}]}]}
        for i in range(4)]}]}
    samples = {
        "a.csv": _csv(words, ["text", "label"]),
        "b.tsv": "text\tlabel\n".encode() + "".join(f"{t}\t{l}\n" for t, l in words).encode(),
        "c.csv": "text;label\n".encode() + "".join(f"{t};{l}\n" for t, l in words).encode(),
        "topics.csv": _csv([(t, "art;film" if l == "pos" else "film") for t, l in words], ["text", "labels"]),
        "d.jsonl": "".join(json.dumps({"text": t, "label": l}) + "\n" for t, l in words).encode(),
        "e.json": json.dumps([{"text": t, "label": l} for t, l in words]).encode(),
        "f.json": json.dumps(squad).encode(),
        "g.conll": "".join(f"Paris B-LOC\nis O\nfine{i} O\n\n" for i in range(4)).encode(),
        "h.txt": "".join(f"__label__{l} {t}\n" for t, l in words).encode(),
    }
    buf = io.BytesIO()
    pd.DataFrame({"text": [t for t, _ in words], "label": [l for _, l in words]}).to_parquet(buf)
    samples["i.parquet"] = buf.getvalue()
    read = {}
    for name, data in samples.items():
        (tmp_path / name).write_bytes(data)
        got = read_task_file(tmp_path / name)
        read[name] = (got.format, got.task.name)
    assert read["topics.csv"] == ("CSV", "multi-label") and read["h.txt"] == ("fastText", "classification")
    assert {fmt for fmt, _ in read.values()} == set(FORMATS)  # every format listed is one the reader reads

    at = _page("11_Fine-tune.py", **_model_state(base_model))
    (box,) = at.get("file_uploader")
    label, help_text = box.proto.label, box.proto.help
    for fmt in FORMATS:
        assert fmt in label and f"**{fmt}**" in help_text
    for words_said in ("'__label__x text' lines", "a JSON array", "labels joined by ';' for multi-label"):
        assert words_said in help_text
    assert "multi-label" in label and "multiple-choice" in label
    # a format that holds one kind of task is said with it, and the reader reads it as that task
    from bert_explorer.data.uploads.reader import ONE_TASK_FORMATS
    for fmt, task in ONE_TASK_FORMATS.items():
        assert f"{fmt} for {task}" in label and {t for f, t in read.values() if f == fmt} == {task}
    assert "fastText, for any task" not in label and "or Parquet for any task" in label


def test_finetune_page_says_when_an_upload_repeats_its_rows(runs_root, base_model):
    """105 distinct texts in 120 rows: a random split put copies in train and dev, and the dev accuracy of
    1.000 counted text the model had trained on, with nothing said."""
    rows = [(f"{'a warm and funny film' if i % 2 else 'a dull and slow film'} number {i % 40}", i % 2)
            for i in range(120)]  # 40 texts, each three times
    at = _page("11_Fine-tune.py", **_model_state(base_model),
               ft_upload_bytes=("repeats.csv", _csv(rows, ["text", "label"])))
    assert not at.exception
    assert [w.value for w in at.warning if w.value.startswith("120 of the 120 examples share their text word for word")]
    distinct = [(f"film {i} was {'warm' if i % 2 else 'dull'}", i % 2) for i in range(120)]
    at = _page("11_Fine-tune.py", **_model_state(base_model),
               ft_upload_bytes=("distinct.csv", _csv(distinct, ["text", "label"])))
    assert not [w.value for w in at.warning if "word for word" in w.value]


def test_finetune_page_trains_a_multi_label_upload_and_answers_with_a_set(runs_root, base_model):
    """A label set per row, joined by ';' in a CSV: detected, previewed, trained in the background
    and tried, with the set's own metrics (micro-F1 first) and one probability per label."""
    tiny = make_tiny("multi-label", n=60, seed=1)
    data = _csv([(ex["text"], ";".join(ex["labels"])) for ex in tiny.examples], ["text", "labels"])
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=("topics.csv", data))
    assert not at.exception and not at.error
    assert "Detected task: **multi-label**" in at.success[0].value
    assert list(at.dataframe[0].value.columns) == ["text", "labels"]
    run = _start_and_finish(at, runs_root, ft_epochs=1.0, ft_batch=16, ft_max_len=32)
    assert json.loads((run.path / "model" / "training_args.json").read_text())["task"] == "multi-label"
    at.run()
    assert not at.exception
    labels = [m.label for m in at.metric]
    assert "dev micro-F1, saved model" in labels and "dev subset accuracy, saved model" in labels
    _try(at.text_input, "ft_try_text").set_value("we saw Anna in Berlin").run()
    assert not at.exception
    answer = next(m for m in at.metric if m.label == "Labels")
    assert set(answer.value.split("; ")) <= {"city", "colour", "person", "(none)"}


@pytest.mark.parametrize("refused", [False, True])
def test_finetune_page_stores_an_upload_beside_another_tabs_copy(runs_root, base_model, monkeypatch, refused):
    """Two tabs starting the same run: the second one's upload goes beside the first one's copy
    (never over it, never an error), and a start that is refused removes its own copy again."""
    from bert_explorer.app import runs_view

    run_dir = runs_root / "finetune-reviews-same-second"
    (run_dir / "data").mkdir(parents=True)
    (run_dir / "data" / "reviews.csv").write_bytes(b"the other tab's copy")
    started = []

    def start(kind, config, path, resume=False):
        if refused:
            raise RuntimeError(f"{path.name} is being started by another tab.")
        started.append(config)

    monkeypatch.setattr(runs_view, "new_run_dir", lambda prefix, root=None: run_dir)
    monkeypatch.setattr(runs_view, "start_background", start)
    data = _csv([(ex["text"], ex["label"]) for ex in make_tiny("classification", n=48).examples],
                ["review", "sentiment"])
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=("reviews.csv", data))
    at.button(key="ft_start").click().run()
    assert not at.exception
    assert (run_dir / "data" / "reviews.csv").read_bytes() == b"the other tab's copy"
    if refused:
        assert at.error[0].value == "finetune-reviews-same-second is being started by another tab."
        assert sorted(p.name for p in (run_dir / "data").iterdir()) == ["reviews.csv"]
    else:
        assert (run_dir / "data" / "reviews-2.csv").read_bytes() == data
        assert started[0]["train"] == str((run_dir / "data" / "reviews-2.csv").resolve())


def _reviews_upload(base_model, monkeypatch, start):
    """The Fine-tune page with a small review upload, its runs started by ``start`` (start_background's stand-in)."""
    from bert_explorer.app import runs_view

    monkeypatch.setattr(runs_view, "start_background", start)
    data = _csv([(ex["text"], ex["label"]) for ex in make_tiny("classification", n=48).examples],
                ["review", "sentiment"])
    return _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=("reviews.csv", data))


def test_a_double_press_of_fine_tune_starts_one_run_and_says_so(runs_root, base_model, monkeypatch):
    """A double click reruns the page twice with the button pressed: the second press of the same settings and data
    starts nothing, takes its stored copy back and names the run the first press started; a press after the
    window starts a twin."""
    from bert_explorer.app import runs_view

    started = []

    def start(kind, config, path, resume=False):  # (as the launcher: "starting" until its process writes its pid)
        started.append(path)
        Run(path).write_status(state="starting", pid=None)

    at = _reviews_upload(base_model, monkeypatch, start)
    at.button(key="ft_start").click().run()
    at.button(key="ft_start").click().run()
    assert not at.exception and len(started) == 1
    assert [m.value for m in at.info if "pressed twice" in m.value] == [
        f"{started[0].name} was started moments ago with these same settings (the button was pressed twice), so no "
        f"second run was started; to start a twin of it, press again after 10 s."]
    assert sorted(p.name for p in runs_root.iterdir()) == [started[0].name]  # the second copy taken back
    Run(started[0]).write_status(state="failed")  # it failed at once: a press again is no second press
    at.button(key="ft_start").click().run()
    assert len(started) == 2 and started[1] != started[0]
    monkeypatch.setattr(runs_view, "REPEAT_WINDOW_S", 0.0)  # (as if the user waited, the second still starting)
    at.button(key="ft_start").click().run()
    assert len(started) == 3


def test_a_start_that_raised_is_no_press_to_refuse_the_next(runs_root, base_model, monkeypatch):
    """A start that failed with an error of another kind (a folder that cannot be written) was remembered as
    started: the next press within 10 s was told a run had started moments ago, where none had."""
    started = []

    def start(kind, config, path, resume=False):
        if not started:
            started.append(None)
            raise PermissionError(13, "Permission denied", str(path))
        started.append(path)
        Run(path).write_status(state="starting", pid=None)

    at = _reviews_upload(base_model, monkeypatch, start)
    at.button(key="ft_start").click().run()
    assert at.exception  # (said as it is)
    at.button(key="ft_start").click().run()
    assert len(started) == 2 and started[1] is not None
    assert not [m for m in at.info if "pressed twice" in m.value]


@pytest.mark.parametrize("task", ["ner", "qa"])
def test_finetune_page_builtin_ner_and_qa_results(runs_root, base_model, task):
    at = _page("11_Fine-tune.py", **_model_state(base_model))
    at.radio(key="ft_source").set_value("Built-in dataset").run()
    at.selectbox(key="ft_builtin").set_value(f"tiny:{task}")
    run = _start_and_finish(at, runs_root, ft_epochs=1.0, ft_max_len=48)
    assert run.config()["train"] == f"tiny:{task}"
    at.run()
    assert not at.exception
    labels = [m.label for m in at.metric]
    if task == "ner":
        assert "dev F1, saved model" in labels
        assert any("Entities by type" in m.value for m in at.markdown)
        _try(at.text_input, "ft_try_text").set_value("Anna flew to Paris").run()
        assert not at.exception and any("Entities:" in m.value for m in at.markdown)
    else:
        assert "dev exact match, saved model" in labels and "dev F1, saved model" in labels
        questions = at.dataframe[-1].value
        assert list(questions.columns) == ["question", "context", "gold", "predicted"] and len(questions) > 0
        _try(at.text_input, "ft_try_text").set_value("what colour is the car?")
        _try(at.text_area, "ft_try_pair").set_value("the car is red .").run()
        assert not at.exception and any(m.label == "Answer" for m in at.metric)


def _perfect_run_of_labels_0_and_1(runs_root, base_model):
    """The Fine-tune page on a finished run whose labels are 0 and 1 and whose four dev scores are all 1.0, an
    upload of 80 examples (8 for dev, as the run's) in its box."""
    perfect = {"accuracy": 1.0, "macro_f1": 1.0, "mcc": 1.0, "f1": 1.0}
    run = _fake_run(runs_root, "ft-01", "finetune", "finished",
                    [{"step": s, "split": "dev", "epoch": s // 3, **perfect} for s in (3, 6, 9)], step=9, max_steps=9)
    dev = {**perfect, "labels": ["0", "1"], "confusion_matrix": [[4, 0], [0, 4]],
           "per_class": {k: {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 4} for k in ("0", "1")}}
    (run.path / "metrics.json").write_text(json.dumps({"task": "classification", "dev": dev, "label_names": ["0", "1"],
                                                       "train_examples": 72, "dev_examples": 8}))
    data = _csv([(f"review number {i}", i % 2) for i in range(80)], ["text", "label"])
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=("pairs.csv", data))
    assert not at.exception
    return at


def test_finetune_page_says_the_scores_by_class_in_per_cent_as_its_tiles(runs_root, base_model):
    """The tiles said "dev accuracy 100.0%" beside a table of precision, recall and F1 by class as 1.0."""
    at = _perfect_run_of_labels_0_and_1(runs_root, base_model)
    (table,) = [d for d in at.dataframe if {"precision", "recall", "f1"} <= set(d.value.columns)]
    config = json.loads(table.proto.columns)
    assert {c: config[c]["type_config"]["format"] for c in ("precision", "recall", "f1")} == dict.fromkeys(
        ("precision", "recall", "f1"), "percent") and "support" not in config
    assert [m.value for m in at.metric if m.label.startswith("dev accuracy")] == ["100.0%"]


def test_finetune_page_draws_labels_that_look_like_numbers_as_names(runs_root, base_model):
    """Labels 0 and 1 stood on a number line in the confusion matrix, ticked -0.5, 0, 0.5, 1, 1.5."""
    import figcheck

    at = _perfect_run_of_labels_0_and_1(runs_root, base_model)
    confusion = next(f for f in figcheck.figures(at) if f.title == "Confusion matrix (dev)")
    assert figcheck.names_read_as_numbers(confusion) == []
    assert [confusion.layout[a]["type"] for a in ("xaxis", "yaxis")] == ["category", "category"]


def test_finetune_page_draws_bounded_scores_on_their_scale_and_says_a_small_dev_set_once(runs_root, base_model):
    """Four dev scores, all 1.0, were drawn on an axis up to 2 where only the top line showed; the page said
    its 8 dev examples twice, once for the upload and once for the run that had the same 8."""
    import figcheck

    at = _perfect_run_of_labels_0_and_1(runs_root, base_model)
    scores = next(f for f in figcheck.figures(at) if f.title == "Dev metrics after each epoch")
    low, high = scores.layout["yaxis"]["range"]
    assert -0.1 <= low <= 0 and 1 < high <= 1.1  # scores bounded by 1, with a little room for the markers
    assert scores.axis_title("y") == "dev score (1 = perfect)"
    # and the lines stand where that axis puts them: the scores themselves, 1.0 (a per-cent format for the tables
    # drew them at 100 on this 0-1 axis)
    assert all(max(t.y) == 1.0 for t in scores.traces), [list(t.y) for t in scores.traces]
    symbols = [t.raw["marker"]["symbol"] for t in scores.traces]
    assert len(scores.traces) == 4 and len(set(symbols)) == 4  # four lines on one another, each still seen
    # and a dash of its own: the later lines drawn in dashes or dots let the earlier show through (a line of
    # more than 60 points has no markers; macro-F1 drawn just under MCC was hidden)
    assert len({t.raw["line"]["dash"] for t in scores.traces}) == 4
    said = [w.value for w in at.warning if w.value.startswith("The dev set has only 8 examples")]
    assert len(said) == 1



def test_finetune_page_says_before_the_start_how_few_steps_a_small_upload_makes(runs_root, base_model):
    """100 rows for the paper's 3 epochs at batch 32 are 9 optimiser steps (90 train rows once 10 % is held out
    for dev): said beside the button, and not for a set that makes enough."""
    rows = "".join(f"{'good fine' if i % 2 else 'bad poor'} film {i} {'good film ' * 6},{i % 2}\n"
                   for i in range(100))
    at = _page("11_Fine-tune.py", **_model_state(base_model),
               ft_upload_bytes=("small.csv", f"text,label\n{rows}".encode()))
    assert not at.exception
    said = [i.value for i in at.info if "optimiser step" in i.value]
    assert said == ["90 training examples for 3 epochs at batch 32 make only 9 optimiser steps (the paper's 3 epochs "
                    "at batch 32 gave its smallest task, RTE's 2,490 examples, 234): if the dev score stays low, give "
                    "more epochs or a smaller batch."]
    at.number_input(key="ft_epochs").set_value(40.0).run()  # 3 x 40 = 120 steps: enough to say nothing
    assert not at.exception and not [i for i in at.info if "optimiser step" in i.value]
    assert not [i for i in at.info if "WordPieces a run reads" in i.value]  # short texts: nothing is cut
    at.number_input(key="ft_max_len").set_value(16).run()  # every text is longer than 16 WordPieces: said
    assert not at.exception and any(i.value.startswith("100 of the 100 examples (100%) are longer than the 16 "
                                                       "WordPieces a run reads") for i in at.info)



def test_finetune_page_says_an_ner_sentence_longer_than_a_run_reads_is_answered_o_past_it(runs_root, base_model):
    sentence = "".join(f"word{j} O\n" for j in range(30)) + "Paris B-LOC\n\n"
    at = _page("11_Fine-tune.py", **_model_state(base_model),
               ft_upload_bytes=("long.conll", (sentence * 40).encode()))
    at.number_input(key="ft_max_len").set_value(16).run()
    said = [i.value for i in at.info if "WordPieces a run reads" in i.value]
    assert not at.exception and said and said[0].startswith("40 of the 40 examples (100%) are longer than the 16")
    assert "the words past it are answered O and scored as such" in said[0]

@pytest.mark.parametrize("name, data, message", [
    ("empty.csv", b"", "empty.csv is empty"),
    ("sheet.csv", b"PK\x03\x04 not really a workbook", "binary file"),
    ("nolabel.csv", b"text\nthe film was good\nthe film was bad\nnice one\nawful one\nfine\n", "has no label column"),
])
def test_finetune_page_shows_one_sentence_for_a_bad_upload(runs_root, base_model, name, data, message):
    at = _page("11_Fine-tune.py", **_model_state(base_model), ft_upload_bytes=(name, data))
    assert not at.exception
    assert len(at.error) == 1 and message in at.error[0].value and name in at.error[0].value
    assert at.button(key="ft_start").disabled
    at.radio(key="ft_source").set_value("Built-in dataset").run()  # the page keeps working
    assert not at.exception and not at.error
    at.selectbox(key="ft_builtin").set_value("tiny:ner")
    at.toggle(key="ft_builtin_preview").set_value(True).run()
    assert not at.exception
    assert "Detected task: **ner**" in at.success[0].value
    assert not at.button(key="ft_start").disabled
    assert not list(runs_root.iterdir())


def test_finetune_page_refuses_cls_fine_tuning_of_a_left_to_right_model(runs_root, base_model, tmp_path):
    ltr = tmp_path / "ltr"
    shutil.copytree(base_model, ltr)
    cfg = json.loads((ltr / "config.json").read_text())
    (ltr / "config.json").write_text(json.dumps({**cfg, "causal": True}))
    at = _page("11_Fine-tune.py", **_model_state(str(ltr)))
    assert not at.exception  # "Upload a file" is chosen and nothing is uploaded yet
    at.radio(key="ft_source").set_value("Built-in dataset").run()
    at.selectbox(key="ft_builtin").set_value("tiny:classification").run()
    assert not at.exception
    assert len(at.error) == 1 and "left-to-right" in at.error[0].value and "feature-based" in at.error[0].value
    assert at.button(key="ft_start").disabled
    at.radio(key="ft_mode").set_value("feature-based").run()  # a BiLSTM reads every token: allowed
    assert not at.exception and not at.error and not at.button(key="ft_start").disabled
    at.radio(key="ft_mode").set_value("fine-tune")
    at.selectbox(key="ft_builtin").set_value("tiny:ner").run()  # each token's label is read at that token
    assert not at.error and not at.button(key="ft_start").disabled


def test_finetune_page_says_a_bad_setting_at_once_and_starts_nothing(runs_root, base_model):
    at = _page("11_Fine-tune.py", **_model_state(base_model))
    at.radio(key="ft_source").set_value("Built-in dataset").run()
    at.selectbox(key="ft_builtin").set_value("tiny:classification").run()
    at.radio(key="ft_mode").set_value("feature-based").run()
    assert not at.exception and not at.error and not at.button(key="ft_start").disabled
    at.checkbox(key="ft_lr_grid").check().run()  # a learning-rate grid, which a frozen BERT would silently ignore
    assert not at.exception
    assert len(at.error) == 1 and "lr_grid" in at.error[0].value and "feature-based" in at.error[0].value
    assert at.error[0].value.count(". ") == 0  # one sentence
    assert at.button(key="ft_start").disabled
    assert not list(runs_root.iterdir())
    at.radio(key="ft_mode").set_value("fine-tune").run()  # the grid is what fine-tuning tries: allowed
    assert not at.exception and not at.error and not at.button(key="ft_start").disabled


# ----- runs page ------------------------------------------------------------------------------------------
def _fake_run(root, name, kind, state, metrics, pid=None, **status):
    run = Run(root / name).create({"size": "tiny"} if kind == "pretrain" else {"model": "x"}, kind)
    for m in metrics:
        run.log_metrics(m)
    run.log(f"hello from {name}")
    now = time.time()
    run.write_status(state=state, started=now - 90, finished=now, device="cpu", pid=pid, **status)
    return run


def test_a_pre_training_on_a_small_held_out_sample_says_its_accuracies_are_mostly_chance(runs_root):
    """A small upload held out 23 masked words and 3 sentence pairs: 30.4 % and 66.7 % were shown as they
    were. The numbers now come with the same sentence as a small dev set's; a large sample gets none."""
    held = {"mlm_accuracy": 0.304, "eval_tokens": 23, "nsp_accuracy": 0.667, "eval_pairs": 3}
    _fake_run(runs_root, "pt-small", "pretrain", "finished", [{"step": 5, "split": "eval", **held}], step=5,
              max_steps=5, eval=held)
    _fake_run(runs_root, "pt-large", "pretrain", "finished", [], step=5, max_steps=5,
              eval={**held, "eval_tokens": 5000, "eval_pairs": 400})
    at = _page("13_Runs.py")
    at.selectbox(key="runs_sel_0_").set_value("pt-small").run()
    assert not at.exception
    said = [w.value for w in at.warning]
    assert ("The held-out masked-word sample has only 23 masked words, so its score is mostly chance: one masked "
            "word more or less right moves the score by about 4 points") in " ".join(said)
    assert any(w.startswith("The held-out next-sentence sample has only 3 sentence pairs, so its score is mostly "
                            "chance") for w in said)
    at.selectbox(key="runs_sel_0_").set_value("pt-large").run()
    assert not [w.value for w in at.warning if "held-out" in w.value]


def test_a_killed_run_says_how_it_goes_on(runs_root, capsys):
    """A fine-tuning killed at step 70 with a checkpoint at 60: the Runs page showed its log and nothing of the
    checkpoint; the Fine-tune page offered no Resume for a "crashed" run; After fine-tuning called it an ablation
    cell."""
    from bert_explorer.cli import main

    run = _fake_run(runs_root, "killed", "finetune", "running", [{"step": 60, "split": "dev", "accuracy": 0.9},
                                                                    {"step": 70, "split": "train", "loss": 0.5}],
                    pid=4194303, step=70, max_steps=150)  # (a process that is not there)
    step = run.path / "checkpoints" / "step-60"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"")
    (step / "training_state.pt").write_bytes(b"")
    assert run.status()["state"] == "crashed"
    at = _page("13_Runs.py")
    at.selectbox(key="runs_sel_0_").set_value("killed").run()
    assert not at.exception
    assert any(c.value.startswith("It kept a checkpoint at step 60: it goes on from there with Resume on the "
                                  "Fine-tune page, or with `bert-explorer finetune --output ") and "--resume`" in c.value
               for c in at.caption), [c.value for c in at.caption]
    # compared, its dev score is its last evaluation's, said so (it was "—" beside the curve that drew 0.9)
    at.multiselect(key="runs_compare_0_").set_value(["killed"]).run()
    table = at.dataframe[-1].value
    from bert_explorer.runs import report
    assert table.loc["killed", "dev accuracy"] == report.metric_text("dev accuracy", 0.9), table
    assert any(c.value == "Dev scores of the last evaluation before the run ended, not a final one: killed (step 60)."
               for c in at.caption)
    # a pre-training killed before its first checkpoint: its Resume trains it again from step 0, as said
    _fake_run(runs_root, "pt-killed", "pretrain", "running", [{"step": 5, "split": "train", "loss": 7.0}],
              pid=4194303, step=5, max_steps=100)
    at = _page("13_Runs.py")
    box = next(b for b in at.selectbox if b.key.startswith("runs_sel_") and "pt-killed" in b.options)
    box.set_value("pt-killed").run()
    assert any(c.value.startswith("It kept no checkpoint: Resume on the Pre-train page, or `bert-explorer pretrain "
                                  "--output ") and "trains it again from step 0" in c.value for c in at.caption)
    ft = _page("11_Fine-tune.py", ft_watch="killed")
    assert [b for b in ft.button if b.key == "ft_resume"]
    assert main(["after-finetuning", str(run.path)]) == 2
    assert "killed kept no fine-tuned model (its process ended before the end of training)" in capsys.readouterr().err


def test_the_table_of_all_runs_redraws_itself_while_a_run_is_active(runs_root, monkeypatch):
    """The table said "starting · 4 s" beside a run panel at step 12: it was drawn once. While a run is active
    it is a fragment that redraws every few seconds; with none active it is drawn once."""
    import streamlit as st

    asked = []
    real = st.fragment

    def spy(func=None, *, run_every=None, **kw):
        def wrap(f):
            asked.append((f.__name__, run_every))
            return real(f, run_every=run_every, **kw)
        return wrap(func) if func is not None else wrap

    monkeypatch.setattr(st, "fragment", spy)
    _fake_run(runs_root, "pt-done", "pretrain", "finished", [], step=3, max_steps=3)
    assert not _page("13_Runs.py").exception and ("_all_runs", None) in asked
    asked.clear()
    _fake_run(runs_root, "pt-live", "pretrain", "running", [], pid=os.getpid(), step=1, max_steps=10)
    at = _page("13_Runs.py")
    assert not at.exception and ("_all_runs", 5.0) in asked
    assert "running" in " ".join(map(str, at.dataframe[0].value["state"]))
    # a running run is stopped from here too (only Refresh and Delete were offered): its page's Stop
    box = next(b for b in at.selectbox if b.key.startswith("runs_sel_"))
    box.set_value("pt-live").run()
    at.button(key="runs_stop").click().run()
    assert not at.exception and Run(runs_root / "pt-live").stop_requested()
    assert any(i.value.startswith("Stop requested") for i in at.info)
    # a cell of an ablation is not stopped alone: its half-trained score would enter the table as a finished cell's
    Run(runs_root / "abl").create({"recipe": "smoke"}, "ablate").write_status(state="running", pid=os.getpid())
    cell = Run(runs_root / "abl" / "cells" / "c1").create({"model": "x"}, "finetune")
    cell.write_status(state="running", pid=os.getpid(), step=1, max_steps=10)
    at = _page("13_Runs.py")
    at.selectbox(key="runs_group_0").set_value("abl").run()
    at.selectbox(key="runs_sel_0_abl").set_value("abl/cells/c1").run()
    assert not at.exception and "runs_stop" not in {b.key for b in at.button}
    assert any(c.value.startswith("This run is part of the ablation abl: stop the ablation") for c in at.caption)


def test_runs_page_lists_opens_compares_and_deletes(runs_root):
    import figcheck

    a = _fake_run(runs_root, "pt-a", "pretrain", "finished",
                  [{"step": s, "split": "train", "loss": 9 - s, "tokens_per_s": 1000} for s in (1, 2, 3)]
                  + [{"step": 3, "split": "eval", "mlm_accuracy": 0.2, "nsp_accuracy": 0.6}],
                  step=3, max_steps=3, last={"loss": 6.0}, eval={"mlm_accuracy": 0.2, "nsp_accuracy": 0.6})
    _fake_run(runs_root, "ft-b", "finetune", "finished",
              [{"step": s, "split": "train", "loss": 2 - s / 10} for s in (10, 20)]
              + [{"step": 20, "split": "dev", "epoch": 1, "accuracy": 0.75}], dev={"accuracy": 0.75, "macro_f1": 0.7})
    busy = _fake_run(runs_root, "pt-busy", "pretrain", "running", [], pid=os.getpid(), step=1, max_steps=10)
    _fake_run(runs_root, "abl", "ablate", "finished", [], cells_total=2, done=2)  # an ablation and a cell of it
    _fake_run(runs_root / "abl" / "cells", "c1", "finetune", "finished", [], dev={"accuracy": 0.5})

    at = _page("13_Runs.py")
    assert not at.exception
    table = at.dataframe[0].value.set_index("run")
    # the ablation is one row; what is inside it is one choice away
    assert set(table.index) == {"pt-a", "ft-b", "pt-busy", "abl"}
    assert table.loc["abl", "progress"] == "2 / 2 cells"
    assert table.loc["pt-a", "kind"] == "pretrain" and table.loc["ft-b", "state"] == "finished"
    # in per cent, as the Pre-train tiles say it (the table said 0.2 beside a tile's 20.0%)
    assert table.loc["pt-a", "duration"] == "1 min 30 s" and "MLM accuracy 20.0%" in table.loc["pt-a", "key metrics"]
    assert table.loc["ft-b", "key metrics"] == "dev accuracy 75.0% · dev macro-F1 70.0%"  # named as the curves are
    at.selectbox(key="runs_group_0").set_value("abl").run()
    inside = at.dataframe[0].value.set_index("run")
    assert list(inside.index) == ["cell c1"] and inside.loc["cell c1", "kind"] == "finetune"
    at.selectbox(key="runs_group_0").set_value("").run()

    at.selectbox(key="runs_sel_0_").set_value("pt-a").run()
    assert not at.exception
    assert any("hello from pt-a" in c.value for c in at.code)
    assert "Training loss" in _titles(at) and "Held-out accuracy" in _titles(at)
    charts = {c["layout"]["title"]["text"]: c for c in _charts(at)}
    # each axis names its measure and unit (plotly's own said "value"); the accuracies in per cent, as the tiles
    assert charts["Training loss"]["layout"]["yaxis"]["title"]["text"] == "loss (cross-entropy, nats)"
    held = charts["Held-out accuracy"]
    assert held["layout"]["yaxis"]["title"]["text"] == "held-out accuracy (%)"
    assert held["layout"]["yaxis"]["range"] == [0, 100]
    assert {tr["name"]: figcheck.decode(tr["y"]).tolist() for tr in held["data"]} == \
        {"MLM accuracy": [20.0], "NSP accuracy": [60.0]}
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["MLM accuracy (held out)"] == "20.0%"

    at.multiselect(key="runs_compare_0_").set_value(["pt-a", "ft-b"]).run()
    at.selectbox(key="runs_compare_metric").set_value("loss").run()
    assert not at.exception
    # the rows it is read from are named: "accuracy" alone did not say dev or training
    compare = next(c for c in _charts(at) if c["layout"]["title"]["text"] == "loss (training steps)")
    assert {tr["name"] for tr in compare["data"]} == {"pt-a", "ft-b"}
    # a pre-training's loss and a fine-tuning's are not one quantity: a panel each, each its own axis
    axes = {tr["name"]: tr.get("yaxis", "y") for tr in compare["data"]}
    assert axes["pt-a"] != axes["ft-b"]
    assert sorted(a["text"] for a in compare["layout"]["annotations"]) == ["fine-tuning", "pre-training"]
    assert compare["layout"]["yaxis"]["title"]["text"] == "loss (cross-entropy, nats)"
    at.selectbox(key="runs_compare_metric").set_value("nsp_accuracy").run()  # a run that never logged it is said
    assert "Not drawn: ft-b, which logged no NSP accuracy (a fine-tuning logs its task's scores, a pre-training " \
        "its own: compare runs of one kind)." in [c.value for c in at.caption]  # (no word of an ablation)
    at.selectbox(key="runs_compare_metric").set_value("loss").run()
    finals = next(d.value for d in at.dataframe if "MLM accuracy" in d.value.columns)
    assert not finals.isna().any().any() and finals.loc["ft-b", "MLM accuracy"] == "—"  # not a raw None
    assert finals.loc["pt-a", "MLM accuracy"] == "20.0%" and finals.loc["ft-b", "dev accuracy"] == "75.0%"

    # a running run is refused, even with the confirmation ticked
    at.selectbox(key="runs_delete_sel_0_").set_value("pt-busy").run()
    at.checkbox(key="runs_delete_confirm_0_pt-busy").check().run()
    at.button(key="runs_delete").click().run()
    assert not at.exception
    assert any("stop it before deleting it" in e.value for e in at.error)
    assert busy.path.exists()

    # a finished one goes, after the confirmation
    at.selectbox(key="runs_delete_sel_0_").set_value("pt-a").run()
    at.checkbox(key="runs_delete_confirm_0_pt-a").check().run()
    at.button(key="runs_delete").click().run()
    assert not at.exception
    assert any("Deleted pt-a" in s.value for s in at.success)
    assert not a.path.exists()
    assert set(at.dataframe[0].value["run"]) == {"ft-b", "pt-busy", "abl"}
    assert not any(c.value for c in at.checkbox)  # no confirmation carries over to another run


def test_runs_page_gives_an_ablation_its_device_and_best_cells(runs_root):
    """An ablation's row read "device —" and "key metrics —": the ablation trains nothing itself, its
    pre-trainings and cells do, and they say where they ran and what they scored."""
    abl = Run(runs_root / "abl").create({"name": "smoke"}, "ablate")
    abl.write_status(state="finished", started=time.time() - 60, finished=time.time(), cells_total=3, done=3)
    _fake_run(abl.path / "pretrain", "p1", "pretrain", "finished", [], step=5, max_steps=5)
    for name, dev in (("task-a", {"accuracy": 0.5}), ("task-b", {"accuracy": 0.875, "macro_f1": 0.8}),
                      ("pairs-a", {"pearson": 0.25})):
        _fake_run(abl.path / "cells", name, "finetune", "finished", [], dev=dev)
    Run(abl.path / "cells" / "pairs-a").write_status(device="cuda")
    at = _page("13_Runs.py")
    assert not at.exception
    row = at.dataframe[0].value.set_index("run").loc["abl"]
    assert row["device"] == "cpu, cuda"
    assert row["key metrics"] == ("best dev accuracy 87.5% (task-b) of 2 cells · "
                                  "best dev Pearson r 0.25 (pairs-a) of 1 cell")


def test_runs_page_reads_best_cells_from_results_jsonl_when_cells_are_gone(runs_root):
    """A copy of an ablation that keeps its plan and results.jsonl but not its cells/ (the GPU runs shipped in
    docs/) showed "—": its results say what each cell scored."""
    abl = Run(runs_root / "abl").create({"name": "copied"}, "ablate")
    abl.write_status(state="finished", started=time.time() - 60, finished=time.time(), cells_total=3, done=2)
    records = [{"cell_id": "topics__small", "status": "finished", "dev": {"accuracy": 0.70, "macro_f1": 0.69}},
               {"cell_id": "topics__medium", "status": "finished", "dev": {"accuracy": 0.75}},
               {"cell_id": "pairs__small", "status": "failed", "error": "out of memory"}]
    (abl.path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n{\"cell_id\": \"cut")
    at = _page("13_Runs.py")
    assert not at.exception
    row = at.dataframe[0].value.set_index("run").loc["abl"]
    assert row["key metrics"] == "best dev accuracy 75.0% (topics__medium) of 2 cells"


def test_runs_page_says_an_ablation_whose_cells_learnt_nothing(runs_root):
    """An ablation whose every cell stayed at its dev set's majority rate read "best dev accuracy 28.0%" in the
    runs table, and comparing finished ablations said "These runs have not logged any metrics yet"."""
    abl = Run(runs_root / "abl").create({"name": "minis"}, "ablate")
    abl.write_status(state="finished", started=time.time() - 60, finished=time.time(), cells_total=2, done=2)
    records = [{"cell_id": f"topics__{size}", "status": "finished", "dev": {"accuracy": score / 100},
                "score": score, "metric": "accuracy", "dev_examples": 100, "majority": 28.0}
               for size, score in (("tiny", 28.0), ("mini", 25.0))]
    (abl.path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    Run(runs_root / "abl2").create({"name": "smoke"}, "ablate").write_status(state="finished")
    at = _page("13_Runs.py")
    assert not at.exception
    row = at.dataframe[0].value.set_index("run").loc["abl"]
    assert row["key metrics"] == ("best dev accuracy 28.0% (topics__tiny, which did not learn) of 2 cells · none of "
                                  "its 2 finished cells learnt: each scored within noise of always answering its dev "
                                  "set's most frequent label")
    assert any(i.value.startswith("An ablation's own folder logs no metrics: its pre-trainings and fine-tuned cells")
               for i in at.info), [i.value for i in at.info]


def test_runs_page_delete_after_delete_removes_exactly_the_confirmed_runs(runs_root):
    """After one delete every picker is rebuilt, and the next delete acts on the run its
    confirmation names (it once named one run while the picker showed another)."""
    for name in ("r1", "r2", "r3", "r4"):
        _fake_run(runs_root, name, "pretrain", "finished", [], step=1, max_steps=1)
    at = _page("13_Runs.py")
    for gen, victim in enumerate(("r2", "r3")):
        at.selectbox(key=f"runs_delete_sel_{gen}_").set_value(victim).run()
        box = at.checkbox(key=f"runs_delete_confirm_{gen}_{victim}")
        assert f"delete {victim} " in box.label
        box.check().run()
        at.button(key="runs_delete").click().run()
        assert not at.exception and any(f"Deleted {victim}." in s.value for s in at.success)
        # the new picker shows a run that exists, and the confirmation below it names that run, unticked
        shown = at.selectbox(key=f"runs_delete_sel_{gen + 1}_").value
        assert (runs_root / shown).is_dir()
        assert at.checkbox(key=f"runs_delete_confirm_{gen + 1}_{shown}").value is False
        assert f"delete {shown} " in at.checkbox(key=f"runs_delete_confirm_{gen + 1}_{shown}").label
    assert sorted(p.name for p in runs_root.iterdir() if p.is_dir()) == ["r1", "r4"]


def test_runs_page_delete_answers_every_click_and_names_what_goes(runs_root):
    """Delete is never greyed out: a click without the tick, or one that arrives just after the
    picker was switched to another run, deletes nothing and says so; a fine-tune's confirmation
    names its model folder (it has no checkpoints)."""
    for name in ("r1", "r2", "r3"):
        _fake_run(runs_root, name, "pretrain", "finished", [], step=1, max_steps=1)
    ft = _fake_run(runs_root, "ft", "finetune", "finished", [], dev={"accuracy": 0.5})
    (ft.path / "model").mkdir()
    (ft.path / "model" / "model.safetensors").write_bytes(b"0" * 2_000_000)
    at = _page("13_Runs.py")

    at.selectbox(key="runs_delete_sel_0_").set_value("ft").run()
    label = at.checkbox(key="runs_delete_confirm_0_ft").label
    assert "fine-tuned model folder (model/)" in label and "checkpoint" not in label
    assert "2.0 MB in all" in label

    at.selectbox(key="runs_delete_sel_0_").set_value("r2").run()
    at.button(key="runs_delete").click().run()  # no tick
    assert not at.exception
    assert [e.value for e in at.error] == ["Nothing was deleted: tick “Yes, delete r2 …” above the Delete button "
                                           "first, then press Delete again."]
    at.checkbox(key="runs_delete_confirm_0_r2").check().run()
    at.selectbox(key="runs_delete_sel_0_").set_value("r3")  # switched, and Delete pressed at once
    at.button(key="runs_delete").click().run()
    assert not at.exception and "Nothing was deleted" in at.error[0].value and "r3" in at.error[0].value
    assert all((runs_root / n).is_dir() for n in ("r1", "r2", "r3", "ft"))


def test_ablation_checkpoints_are_grouped_in_the_sidebar_with_readable_names(runs_root, tiny_run):
    """One ablation's hash-named pre-trainings are one entry of the model list, opened in a
    second list that names each by its size, objective and masking."""
    import shutil

    abl = runs_root / "abl-1"
    Run(abl).create({"recipe": "x"}, "ablate")
    for key, objective in (("3f2a9c0d11aa", "mlm+nsp"), ("77b1e0c2d3ff", "mlm")):
        dst = Run(abl / "pretrain" / key).create({"size": "tiny", "objective": objective, "mask_ratio": 0.8,
                                                   "keep_ratio": 0.1, "random_ratio": 0.1}, "pretrain")
        shutil.copytree(tiny_run / "checkpoints", dst.path / "checkpoints")
    shutil.copytree(tiny_run, runs_root / "mine")
    at = _page("4_Masked_word_probe.py")
    assert not at.exception
    box = at.sidebar.selectbox(key="be_model_choice")
    run_entries = [o for o in box.options if "mine" in o or "abl-1" in o]
    assert any(o.startswith("mine · step") for o in run_entries)
    assert "checkpoints of ablation abl-1 (4)…" in run_entries  # two pre-trainings x two steps
    assert not any("3f2a9c0d11aa" in o for o in box.options)
    box.set_value("ablation:abl-1").run()
    inner = at.sidebar.selectbox(key="be_model_in_ablation:abl-1")
    assert any(o.startswith("pre-training tiny · MLM+NSP · 80/10/10") for o in inner.options)
    assert any(o.startswith("pre-training tiny · MLM · 80/10/10") for o in inner.options)
    assert not at.exception and str(abl / "pretrain") in inner.value
    # the pre-training picked inside the group is kept in the page's address with the group: a reload opens it
    from shared import address_of

    first = inner.value
    inner.set_value(str(abl / "pretrain" / "77b1e0c2d3ff" / "checkpoints" / "step-2")).run()
    picked = at.sidebar.selectbox(key="be_model_in_ablation:abl-1").value
    reloaded = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    reloaded.query_params.update(address_of(at))
    reloaded.run()
    assert not reloaded.exception and reloaded.sidebar.selectbox(key="be_model_choice").value == "ablation:abl-1"
    assert reloaded.sidebar.selectbox(key="be_model_in_ablation:abl-1").value == picked != first
    # and it holds on the other pages, as the model picked does
    home = AppTest.from_file("../run_app.py", default_timeout=120).run()
    home.sidebar.selectbox(key="be_model_choice").set_value("ablation:abl-1").run()
    home.sidebar.selectbox(key="be_model_in_ablation:abl-1").set_value(picked).run()
    for page in ("pages/3_Inside_one_layer.py", "run_app.py"):
        home.switch_page(page).run()
        assert not home.exception and home.sidebar.selectbox(key="be_model_in_ablation:abl-1").value == picked, page


# ----- time-lapse ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("tl") / "run"
    cfg = PretrainConfig(**{**TINY_PT, "max_steps": 4, "save_every": 2, "eval_every": 2})
    run_pretraining(cfg, d, progress=False)
    return d


def test_timelapse_one_frame_per_checkpoint(tiny_run):
    tl = timelapse(tiny_run, "the ball is very [MASK] today .", layer=1, head=1, top_k=3)
    assert tl.steps == [2, 4]
    stack = tl.attention_stack()
    T = len(tl.tokens)
    assert stack.shape == (2, T, T) and tl.tokens[0] == "[CLS]"
    assert np.allclose(stack.sum(-1), 1, atol=1e-4)
    assert not np.allclose(stack[0], stack[1])  # training moved the head
    # the frame is exactly what attention_maps gives on that checkpoint
    loaded = checkpoint.load(tiny_run / "checkpoints" / "step-4", "BertForPreTraining")
    assert np.allclose(stack[1], attention_maps(loaded, tl.text, max_tokens=64).attentions[1, 1], atol=1e-6)
    for f in tl.frames:
        (m,) = f.predictions
        probs = [p["probability"] for p in m["predictions"]]
        assert len(probs) == 3 and probs == sorted(probs, reverse=True)
        assert "mlm_accuracy" in f.eval  # held-out metrics logged at that step
    assert len(tl.top_k_rows()) == 2
    rise = tl.emergence(3)
    assert len(rise) == 3 and all(len(p) == 2 and all(0 <= x <= 1 for x in p) for p in rise.values())
    # the last checkpoint's favourite word is the first key, and its probability matches the top-k
    first = next(iter(rise))
    assert rise[first][-1] == pytest.approx(tl.frames[-1].predictions[0]["predictions"][0]["probability"], abs=1e-5)


def test_timelapse_choices_and_errors(tiny_run, tmp_path):
    tl = timelapse(tiny_run, "the ball is red .", layer=0, head=0, steps=[4])
    assert tl.steps == [4] and tl.frames[0].predictions == [] and tl.emergence() == {}
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        timelapse(tiny_run, "a [MASK] b", layer=5)
    with pytest.raises(ValueError, match="head 9 does not exist"):
        timelapse(tiny_run, "a [MASK] b", head=9)
    Run(tmp_path / "empty").create({}, "pretrain")
    with pytest.raises(ValueError, match="no saved checkpoint"):
        timelapse(tmp_path / "empty", "a [MASK] b")


@pytest.mark.parametrize("n_docs", [2, 3, 4, 10, 40, 1000])
def test_held_out_fraction_leaves_documents_on_both_sides(n_docs):
    from bert_explorer.data.corpus_upload import held_out_fraction
    from bert_explorer.data.corpora import split_documents

    train, held = split_documents([[f"doc {i} ."] for i in range(n_docs)], held_out_fraction(n_docs))
    assert len(train) >= 2 or n_docs < 3
    assert len(held) >= (2 if n_docs >= 4 else 1)
    assert len(train) + len(held) == n_docs and train


def test_uploaded_names_cannot_leave_the_runs_folder():
    from bert_explorer.data.uploads.names import safe_filename, slug

    assert slug("../../etc/passwd") == "etc-passwd" and slug("/abs/path") == "abs-path" and slug("") == "run"
    assert safe_filename("../../x/evil name.csv") == "evil-name.csv"
    assert safe_filename("..") == "run" and safe_filename("a\\b\\c.txt") == "c.txt"


def test_uploads_are_never_written_over_and_a_refused_start_takes_its_copy_back(tmp_path):
    from bert_explorer.app import runs_view as rv

    # (the Pre-train page stores an uploaded corpus as corpus.txt in its run's folder)
    first = rv.store_upload(tmp_path / "run", "corpus.txt", b"first")
    second = rv.store_upload(tmp_path / "run", "corpus.txt", b"second")
    assert first != second and first.read_bytes() == b"first" and second.read_bytes() == b"second"
    assert first.parent == second.parent == tmp_path / "run" and second.name == "corpus-2.txt"
    # the run directory is busy (a live process works in it): the start is refused, our copy removed
    busy = Run(tmp_path / "run").create({}, "pretrain")
    busy.write_status(state="running", pid=os.getpid())
    assert rv.launch("pretrain", {**TINY_PT, "corpus": str(second)}, busy.path, upload=second) is False
    assert not second.exists() and first.read_bytes() == b"first"


def test_finetune_page_sets_the_trainer_settings_and_resumes_a_stopped_run(runs_root, base_model, monkeypatch):
    """Accumulation, evaluation every N steps, early stopping and keep-the-best from the Advanced
    settings reach the run; a run stopped part-way shows Resume, which trains it to its end."""
    from bert_explorer.train.engine import Epochs

    at = _page("11_Fine-tune.py", **_model_state(base_model))
    at.radio(key="ft_source").set_value("Built-in dataset").run()
    at.selectbox(key="ft_builtin").set_value("tiny:classification")
    at.checkbox(key="ft_keep_best").check()
    run = _start_and_finish(at, runs_root, ft_epochs=2.0, ft_batch=8, ft_max_len=32, ft_grad_accum=2,
                            ft_eval_every=2, ft_patience=3)
    cfg = run.config()
    assert (cfg["grad_accum"], cfg["eval_every"], cfg["early_stopping_patience"], cfg["keep_best"]) == (2, 2, 3, True)
    assert "kept the model of step" in run.path.joinpath("log.txt").read_text()
    at.run()
    assert not [b for b in at.button if b.key == "ft_resume"]  # a finished run has nothing to resume

    # a run stopped at its third step (in this process: the page watches it like any other)
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
    after = Epochs.after
    monkeypatch.setattr(Epochs, "after", lambda job, step, losses: (
        job.reporter.request_stop() if step == 3 else None) or after(job, step, losses))
    stopped = runs_root / "finetune-stopped"
    run_finetuning(FinetuneConfig(**{k: v for k, v in cfg.items() if k != "kind"}), stopped)
    monkeypatch.setattr(Epochs, "after", after)
    assert Run(stopped).status()["state"] == "stopped"
    at.run()
    at.selectbox(key="ft_watch").set_value("finetune-stopped").run()
    at.button(key="ft_resume").click().run()
    assert not at.exception and not at.error
    status = Run(stopped).wait(timeout=240)
    assert status["state"] == "finished", stopped.joinpath("log.txt").read_text()[-2000:]
    assert "resuming at step 3 from checkpoints/step-3" in stopped.joinpath("log.txt").read_text()


def test_a_resume_on_changed_data_is_refused_before_a_process_starts_and_the_run_stays_stopped(runs_root, base_model,
                                                                                                 monkeypatch, tmp_path):
    """A run of the CLI's on a file the user then grew: the page's Resume launched a process that failed before
    training, and the stopped run read "crashed" with Resume still offered."""
    from bert_explorer.train.engine import Epochs
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

    data = tmp_path / "mine.csv"
    data.write_text(_csv([(ex["text"], ex["label"]) for ex in make_tiny("classification", n=48).examples],
                         ["text", "label"]).decode())
    after = Epochs.after
    monkeypatch.setattr(Epochs, "after", lambda job, step, losses: (
        job.reporter.request_stop() if step == 2 else None) or after(job, step, losses))
    stopped = runs_root / "finetune-mine"
    run_finetuning(FinetuneConfig(model=base_model, train=str(data), epochs=2, batch_size=8, max_seq_length=32), stopped)
    monkeypatch.setattr(Epochs, "after", after)
    assert Run(stopped).status()["state"] == "stopped"
    with open(data, "a") as f:  # the file grows after the stop
        f.write("".join(f"a new good row {i},{i % 2}\n" for i in range(30)))
    launched = []
    monkeypatch.setattr("bert_explorer.app.runs_view.launch", lambda *a, **k: launched.append(a) or True)
    at = _page("11_Fine-tune.py", **_model_state(base_model))
    at.selectbox(key="ft_watch").set_value("finetune-mine").run()
    at.button(key="ft_resume").click().run()
    assert not at.exception and not launched
    assert any("the data changed, so it cannot resume" in e.value for e in at.error), [e.value for e in at.error]
    assert Run(stopped).status()["state"] == "stopped"

def test_a_run_stopped_before_its_first_step_is_said_not_shown_as_a_fine_tuned_model(runs_root, base_model):
    """Stopped 6 s after Fine-tune: the page showed "dev accuracy, saved model 0.600", Try the model and a download,
    with nothing said of the untrained head the run's log named."""
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

    run = Run(runs_root / "finetune-stopped-early")
    run.path.mkdir()
    run.request_stop()  # before the first step
    run_finetuning(FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=32, epochs=1,
                                  batch_size=16, max_seq_length=32, device="cpu"), run.path)
    at = _page("11_Fine-tune.py", **_model_state(base_model))
    at.selectbox(key="ft_watch").set_value("finetune-stopped-early").run()
    assert not at.exception
    assert any(w.value.startswith("This run stopped before its first step: its model is the pre-trained one with an "
                                  "untrained task head") for w in at.warning)

def test_an_uploaded_sentence_too_long_for_the_runs_sequences_is_said_with_that_length(runs_root):
    """Sentences were said cut only past 400 words (512 WordPieces), whatever the run's length: at the default 128,
    a sentence of 150 words is cut too, unsaid."""
    text = "\n\n".join(f"Document {i} says one thing.\nThen another thing {i}." for i in range(12)) + "\n\n" + \
        " ".join(["word"] * 150) + "\n"
    at = _page("10_Pre-train.py", pt_upload_bytes=("mine.txt", text.encode()))
    at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    assert not at.exception
    said = [w.value for w in at.warning if "longer than about" in w.value]
    assert said == ["mine\\.txt: 1 of its sentences is longer than about 100 words, more than a sequence of 128 "
                    "WordPieces holds: each is cut to what fits and the rest is not trained on; end its sentences "
                    "with a full stop, put one sentence on each line, or raise the sequence length."]
    at.number_input(key="pt_seq").set_value(256).run()
    assert not [w for w in at.warning if "longer than about" in w.value]


def _stopped_with_a_checkpoint(runs_root, name: str, step: int, max_steps: int, **status):
    """The Runs page on a stopped pre-training that kept a checkpoint at ``step``."""
    run = _fake_run(runs_root, name, "pretrain", "stopped", [{"step": step, "split": "train", "loss": 5.0}],
                    step=step, max_steps=max_steps)
    run.write_status(**status)
    folder = run.path / "checkpoints" / f"step-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "training_state.pt").write_bytes(b"")
    at = _page("13_Runs.py")
    at.selectbox(key="runs_sel_0_").set_value(name).run()
    return at


def test_a_stopped_run_says_how_it_goes_on(runs_root):
    """Stop's help promises a checkpoint to resume from; the Runs page then said "stopped · step 247 of 3,000" and
    nothing of it (only a failed or crashed run was told how it goes on)."""
    at = _stopped_with_a_checkpoint(runs_root, "halted", 247, 3000)
    assert not at.exception
    assert any(c.value.startswith("It kept a checkpoint at step 247: it goes on from there with Resume on the "
                                  "Pre-train page, or with `bert-explorer pretrain --output ") for c in at.caption), \
        [c.value for c in at.caption]


def test_a_run_of_several_processes_is_told_to_go_on_with_as_many(runs_root):
    """A crashed torchrun pre-training was told to go on with `bert-explorer pretrain ... --resume` (and the page's
    Resume, one process), which refused: "was trained by 2 process(es) and this resume runs 1"."""
    at = _stopped_with_a_checkpoint(runs_root, "ddp2", 30, 200, world_size=2)
    assert not at.exception
    said = [c.value for c in at.caption if c.value.startswith("It kept a checkpoint at step 30")]
    assert said and "trained by 2 processes, it goes on from there with as many, `torchrun --nproc_per_node 2 -m " \
        "bert_explorer.cli pretrain --output " in said[0] and "Resume on the" not in said[0], said
