"""A practitioner's first hour: what using the app and the CLI for real found (a Pre-train page that
read the working folder, a large upload that could not be stopped, ablation verdicts drawn from noise,
a seed that did not fix the run)."""
import pytest
from streamlit.testing.v1 import AppTest

from bert_explorer.data import corpora


@pytest.fixture
def reading_forbidden(monkeypatch):
    """Fails the test if anything loads a corpus other than a built-in one (the page reads no file here)."""
    from bert_explorer.train import pretrain

    real = corpora.load_corpus

    def load(name, *args, **kwargs):
        if str(name) not in corpora.BUILTIN_CORPORA:
            raise AssertionError(f"{name!r} was read as a corpus")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(corpora, "load_corpus", load)
    monkeypatch.setattr(pretrain, "load_corpus", load)


@pytest.mark.parametrize("how", ["upload chosen, no file yet", "every built-in corpus removed"])
def test_the_pretrain_page_never_reads_the_working_folder(runs_root, reading_forbidden, how):
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    if how.startswith("upload"):
        at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    else:
        at.multiselect(key="pt_corpus").set_value([]).run()
    assert not at.exception and not at.error
    assert at.button(key="pt_start").disabled
    # the rest of the page is there: the run watcher and the time-lapse
    assert {"2. Watch a run", "3. Time-lapse: one sentence through training"} <= {h.value for h in at.subheader}


def test_an_empty_corpus_name_is_refused_by_the_library():
    from bert_explorer.train.pretrain import PretrainConfig

    with pytest.raises(ValueError, match="no corpus given"):
        corpora.load_corpus("")
    with pytest.raises(ValueError, match="names no corpus"):
        PretrainConfig(corpus="")
    with pytest.raises(ValueError, match="an empty part between two"):
        PretrainConfig(corpus="bbc++wiki")


# ----- the held-out evaluation of a stopped step; the CPU threads of a busy machine -----------------------
TINY = dict(corpus="tiny", size="tiny", vocab_size=300, batch_size=4, max_seq_length=48, log_every=1,
            eval_every=1000, eval_batches=2, seed=3, device="cpu", precision="fp32")


def test_a_stopped_runs_last_evaluation_is_in_its_curve(tmp_path, tiny_vocab):
    from bert_explorer.runs.run import Run
    from bert_explorer.train.pretrain import PretrainConfig, resume_settings, run_pretraining

    out = tmp_path / "run"

    def stop_at_3(step, _):
        if step == 3:
            Run(out).request_stop()

    cfg = PretrainConfig(**TINY, vocab=tiny_vocab, max_steps=6, save_every=100)
    assert run_pretraining(cfg, out, progress=False, on_step=stop_at_3)["state"] == "stopped"
    run_pretraining(resume_settings(out)[0], out, resume=True, progress=False)
    evals = [m for m in Run(out).metrics() if m["split"] == "eval"]
    assert [m["step"] for m in evals] == [3, 6]
    stopped = Run(out).checkpoints()[0][1]
    import json

    kept = json.loads((stopped / "eval_metrics.json").read_text())  # the curve's point is the checkpoint's
    assert evals[0]["mlm_accuracy"] == kept["mlm_accuracy"] and evals[0]["nsp_accuracy"] == kept["nsp_accuracy"]


@pytest.mark.parametrize("load, expected", [(1.6, 1), (0.2, 2), (5.0, 1)])
def test_the_cli_trains_with_the_cores_that_are_free(tmp_path, monkeypatch, load, expected):
    import os

    import torch

    from bert_explorer.cli import main
    from bert_explorer.train import pretrain

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    seen = []
    real = pretrain._pretrain
    monkeypatch.setattr(pretrain, "_pretrain", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    before = torch.get_num_threads()
    out = tmp_path / "run"
    assert main(["pretrain", "--output", str(out), *"--corpus tiny --size tiny --vocab-size 300 --batch-size 4 "
                 "--max-seq-length 48 --max-steps 1 --eval-batches 1 --device cpu --no-progress".split()]) == 0
    assert seen == [expected]
    s = "s" if expected != 1 else ""
    assert f"{expected} CPU thread{s} of 2 cores" in (out / "log.txt").read_text()
    assert torch.get_num_threads() == before  # the process's own count is put back
