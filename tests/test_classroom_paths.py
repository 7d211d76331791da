"""In classroom mode no page shows a folder of the host: runs, checkpoints, uploads and caches are
named relative to the runs folder (or by their last part), never by their absolute path."""
import json
import os
import sys
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint
from bert_explorer.app import roles, state
from bert_explorer.app.widgets import MENU
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.runs.run import RUNS_ENV
from bert_explorer.runs.run import Run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def served(monkeypatch):
    """serve(address): pretend the server listens there (what `--server.address` sets)."""
    before = st_config.get_option("server.address")
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    yield lambda address: st_config.set_option("server.address", address)
    st_config.set_option("server.address", before)


def _runs_folder(root: Path) -> Path:
    """A runs folder as the pages leave it: a real pre-training with a checkpoint; a finished
    fine-tuning of that checkpoint (settings with absolute paths, as the Fine-tune page writes them,
    and a log that names them); a newer fine-tuning that failed on a missing file. Returns the
    checkpoint."""
    run_pretraining(PretrainConfig(corpus="tiny", size="tiny", vocab="train", vocab_size=300, batch_size=4,
                                   max_seq_length=48, log_every=1, eval_every=2, eval_batches=2, seed=3,
                                   device="cpu", max_steps=2, save_every=2), root / "pt-tiny", progress=False)
    Run(root / "pt-tiny").write_status(created=1.0)  # the oldest: the failed run is each list's first
    ckpt = root / "pt-tiny" / "checkpoints" / "step-2"
    src = checkpoint.load(ckpt, "BertModel")
    cfg = src.config
    cfg.id2label = {0: "neg", 1: "pos"}
    tuned = checkpoint.new_model("BertForSequenceClassification", cfg)
    tuned.bert.load_state_dict(src.model.state_dict(), strict=False)
    ft = root / "ft-tiny"
    data = ft / "data" / "reviews.csv"
    run = Run(ft).create({"model": str(ckpt.resolve()), "train": str(data.resolve())}, "finetune")
    checkpoint.save(tuned, src.tokenizer, ft / "model")  # (into the run's folder, as a fine-tuning makes it)
    run.log(f"classification: 300 train / 120 dev examples from {data.resolve()}")
    for step, loss in ((1, 0.70), (2, 0.69), (3, 0.66), (4, 0.40), (5, 0.35), (6, 0.30)):
        run.log_metrics({"step": step, "split": "train", "loss": loss})
    (ft / "metrics.json").write_text(json.dumps({"task": "classification", "dev_examples": 120,
                                                 "dev": {"accuracy": 0.8, "mcc": 0.6}}))
    run.write_status(state="finished", created=2.0, dev={"accuracy": 0.8, "mcc": 0.6})
    bad = Run(root / "ft-broken").create({"model": str(ckpt.resolve()), "train": str((root / "gone.csv").resolve())},
                                         "finetune")
    bad.log(f"failed: no such file: {(root / 'gone.csv').resolve()}")
    bad.write_status(state="failed", created=3.0, error=f"no such file: {(root / 'gone.csv').resolve()}")
    return ckpt


def _shown(at) -> str:
    """Everything the app sent to the browser: every element's message (text, labels, options,
    help, plot specs, JSON, code) and every table's cells."""
    out = []

    def walk(node):
        if getattr(node, "proto", None) is not None:
            out.append(str(node.proto))
        for child in (getattr(node, "children", None) or {}).values():
            walk(child)

    walk(at._tree)
    out += [df.value.to_string() for df in at.dataframe]
    return "\n".join(out)


def test_in_classroom_mode_no_page_shows_a_folder_of_the_host(tmp_path, monkeypatch, served):
    root = tmp_path / "runs"
    monkeypatch.setenv(RUNS_ENV, str(root))
    ckpt = _runs_folder(root)
    served("0.0.0.0")
    host = {str(tmp_path), str(tmp_path.resolve()), os.environ["BERT_EXPLORER_CACHE"], sys.prefix, str(ROOT)}
    for path, _, _ in MENU:
        at = AppTest.from_file(str(ROOT / path), default_timeout=120)
        at.session_state["be_model_choice"] = str(ckpt)  # the run's checkpoint, as picked in the sidebar
        at.run()
        assert not at.exception, (path, at.exception)
        shown = _shown(at)
        assert "Classroom mode" in shown, path
        leaks = [h for h in host if h in shown]
        assert not leaks, (path, leaks, shown[max(0, shown.find(leaks[0]) - 200):shown.find(leaks[0]) + 100])
        if path.endswith("7_Two_models.py"):  # the checkpoint's fine-tuning is model B, named by the run
            assert at.selectbox(key="two_model_b").value == str(root / "ft-tiny" / "model")
            assert "Model B is ft-tiny, the newest fine-tuning of model A that learned something" in shown
        if path.endswith("13_Runs.py"):  # the failed run's settings, log and error are there, without the host
            assert "runs/gone.csv" in shown and "runs/pt-tiny/checkpoints/step-2" in shown


def test_a_private_server_shows_the_real_paths_and_classroom_mode_the_runs_folder(tmp_path, monkeypatch, served):
    root = tmp_path / "runs"
    monkeypatch.setenv(RUNS_ENV, str(root))
    inside, outside = root / "a" / "checkpoints" / "step-2", Path(sys.prefix) / "lib" / "corpus.txt"
    text = f"warm start from {inside} and {outside}; 80/10/10 masking, 1,000 tokens/s, see https://x.org/a/b"
    served("127.0.0.1")
    assert state.shown_path(inside) == str(inside) and state.without_host_paths(text) == text
    served("0.0.0.0")
    assert state.shown_path(inside) == "runs/a/checkpoints/step-2" and state.shown_path(root) == "runs"
    assert state.shown_path(outside) == "corpus.txt" and state.shown_path("explorer-mini") == "explorer-mini"
    assert state.without_host_paths(text) == ("warm start from runs/a/checkpoints/step-2 and corpus.txt; 80/10/10 "
                                              "masking, 1,000 tokens/s, see https://x.org/a/b")
    assert state.without_host_paths({"model": str(inside), "steps": [2, str(outside)]}) == {
        "model": "runs/a/checkpoints/step-2", "steps": [2, "corpus.txt"]}
    monkeypatch.setenv(roles.WRITES_ENV, "1")  # writing turned on: the host's folders are open anyway
    assert state.shown_path(inside) == str(inside)


def test_in_classroom_mode_a_page_s_download_names_no_folder_of_the_host(tmp_path, monkeypatch, served):
    import io
    import zipfile

    from bert_explorer.app.result_bundle import ResultBundle
    from bert_explorer.app.exports import shown_bundle

    root = tmp_path / "runs"
    monkeypatch.setenv(RUNS_ENV, str(root))
    ckpt = str(root / "pt" / "checkpoints" / "step-2")
    bundle = ResultBundle("Two models side by side", f"A: {ckpt} · B: minilm", {"model_a": ckpt, "model_b": "minilm"})
    served("0.0.0.0")
    with zipfile.ZipFile(io.BytesIO(shown_bundle(bundle).zip_bytes())) as z:
        files = {n: z.read(n).decode("utf-8", "replace") for n in z.namelist()}
    manifest = json.loads(files["input.json"])
    assert manifest["model"] == "A: runs/pt/checkpoints/step-2 · B: minilm"
    assert manifest["inputs"] == {"model_a": "runs/pt/checkpoints/step-2", "model_b": "minilm"}
    assert not any(str(tmp_path) in text for text in files.values())
    served("127.0.0.1")  # on a private server the download names the folder, to make the figures again
    assert shown_bundle(bundle).manifest()["inputs"]["model_a"] == ckpt


def test_a_student_is_never_told_to_do_what_classroom_mode_keeps_from_them(tmp_path, monkeypatch, served):
    """With no runs yet, the pages told a student to "start one above" (a section hidden from them), to start
    one on the Pre-train page, or to pick BERT-Base in the sidebar where it is not downloaded; in private mode
    they still say how."""
    from bert_explorer import hub

    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setattr(hub, "local_copy", lambda repo_id, *a, **k: None)  # BERT-Base not on this machine
    pages = ("run_app.py", "pages/10_Pre-train.py", "pages/12_After_fine_tuning.py", "pages/13_Runs.py")
    for address, said in (("0.0.0.0", "your teacher can"), ("127.0.0.1", None)):
        served(address)
        for path in pages:
            at = AppTest.from_file(str(ROOT / path), default_timeout=120).run()
            assert not at.exception, (path, at.exception)
            shown = _shown(at)
            if said:
                assert said in shown and "start one above" not in shown and "in the sidebar, or run" not in shown, \
                    (path, shown[:3000])
            else:
                assert "your teacher can" not in shown, path
    assert "start one above" in _shown(AppTest.from_file(str(ROOT / "pages/10_Pre-train.py"), default_timeout=120).run())
