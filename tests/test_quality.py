"""A model's quality measured here: held-out MLM/NSP accuracy and the check set, for any model, on the
page (in the background, kept by weights) and from the CLI (``analysis/probes/quality.py``)."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time

import pytest
import torch
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint
from bert_explorer.analysis.probes import quality
from bert_explorer.data.pretraining import collate
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.train.pretraining_data import held_out_instances, split_corpus
from shared import needs_model

TINY_RUN = dict(corpus="tiny", size="tiny", vocab="train", vocab_size=300, batch_size=4, max_seq_length=48,
                log_every=1, eval_every=1000, eval_batches=2, seed=3, device="cpu", max_steps=2, save_every=2,
                held_out_fraction=0.2)


@pytest.fixture
def tiny_run(runs_root, tiny_vocab):
    """A tiny pre-training run in the test's runs folder; its checkpoint folder (with training_args.json)."""
    run = runs_root / "tiny-pretrain"
    run_pretraining(PretrainConfig(**{**TINY_RUN, "vocab": tiny_vocab}), run, progress=False)
    return run / "checkpoints" / "step-2"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_measures_are_transformers_figures_on_the_same_held_out_sequences(tiny_run, cache):
    """Accuracy, perplexity and NSP accuracy of our measurement equal those computed from transformers'
    BertForPreTraining on the same weights and the same masked sequences (the run's held-out documents)."""
    transformers = pytest.importorskip("transformers")
    loaded = checkpoint.load(tiny_run, "BertForPreTraining")
    ours = quality.measure(loaded)
    assert ours["held_out_set"].startswith("held out by its own pre-training run (tiny")

    cfg = PretrainConfig.from_dict(json.loads((tiny_run / "training_args.json").read_text()), strict=False)
    held = held_out_instances(cfg, split_corpus(cfg)[1], loaded.tokenizer)
    hf = transformers.BertForPreTraining.from_pretrained(str(tiny_run)).eval()
    correct = total = nsp_right = 0
    ce = 0.0
    with torch.no_grad():
        for start in range(0, len(held), 8):
            b = collate(held[start:start + 8], loaded.tokenizer.pad_id, cfg.objective)
            out = hf(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
            where = b["labels"] != -100
            logits, labels = out.prediction_logits[where], b["labels"][where]
            ce += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(-1) == labels).sum().item()
            total += labels.numel()
            nsp_right += (out.seq_relationship_logits.argmax(-1) == b["next_sentence_label"]).sum().item()
    assert ours["held_out_sequences"] == len(held) and ours["masked_wordpieces"] == total
    assert ours["mlm_accuracy"] == pytest.approx(correct / total)
    assert ours["mlm_perplexity"] == pytest.approx(math.exp(ce / total), rel=1e-4)
    assert ours["nsp_accuracy"] == pytest.approx(nsp_right / len(held))
    assert ours["standard_vocabulary"] is False  # a vocabulary learnt on the tiny corpus


def test_a_model_from_elsewhere_is_measured_on_the_model_cards_documents(tmp_path):
    """A model with no run settings (a download, an upload) reads the documents the shipped model's run
    held out; a run's checkpoint its own run's."""
    folder = tmp_path / "upload"
    from shared import save_tiny_bert
    save_tiny_bert(folder, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a"])
    cfg, words = quality.held_out_settings(checkpoint.load(folder, "BertForPreTraining"))
    card = json.loads((checkpoint.resolve("minilm-mlm-nsp") / "training_args.json").read_text())
    assert quality.document_settings(cfg) == quality.document_settings(PretrainConfig.from_dict(card, strict=False))
    assert "minilm-mlm-nsp" in words and "bbc+sotu" in words


@needs_model("minilm-mlm-nsp")
def test_standard_vocabulary_is_told_apart(tmp_path):
    assert quality.standard_vocabulary(checkpoint.load("minilm-mlm-nsp", "BertForPreTraining").tokenizer)
    from shared import tiny_bert
    assert not quality.standard_vocabulary(tiny_bert(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"])[1])


def test_the_cli_prints_the_measures_with_the_check_set_and_keeps_them_for_the_page(tiny_run, cache):
    out = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "evaluate-pretraining", "--model", str(tiny_run)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["check_set_clozes"][1] == 32 and printed["check_set_pairs"][1] == 30
    assert printed["held_out_sequences"] == printed["held_out_sequences_all"]  # every held-out sequence by default
    assert "not comparable piece for piece" in out.stderr
    kept = quality.measured_models()
    assert [r["mlm_accuracy"] for r in kept] == [printed["mlm_accuracy"]]
    # the same entry the page looks for
    assert quality.stored(quality.entry_path(checkpoint.load(tiny_run, "BertForPreTraining"))) is not None

    refused = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "evaluate-pretraining", "--model",
                              str(tiny_run), "--sequences", "0"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--sequences" in refused.stderr


def test_the_cli_estimates_the_sequences_its_settings_hold_out_at_their_length(tiny_run, cache, monkeypatch,
                                                                               capsys):
    """The time said before a measurement counted 1,818 sequences of 128 whatever was measured: a larger held-out
    share or a longer length measures more; each is counted from the documents those settings hold out."""
    from bert_explorer import cli
    from bert_explorer.train.estimate import sequences_of
    from bert_explorer.train.pretraining_data import split_corpus

    asked = []
    monkeypatch.setattr(quality, "estimate_seconds", lambda config, n, seq_len=128, threads=None:
                        asked.append((n, seq_len)) or 1.0)
    monkeypatch.setattr(quality, "measure", lambda *a, **k: (_ for _ in ()).throw(SystemExit(0)))  # said: enough
    for flags in (["--held-out-fraction", "0.2"], ["--held-out-fraction", "0.6", "--max-seq-length", "64"]):
        with pytest.raises(SystemExit):
            cli.main(["evaluate-pretraining", "--model", str(tiny_run), *flags])
    cfg = PretrainConfig.from_dict({**json.loads((tiny_run / "training_args.json").read_text()),
                                    "held_out_fraction": 0.6, "max_seq_length": 64}, strict=False)
    words = sum(len(s.split()) for d in split_corpus(cfg)[1] for s in d)
    assert asked[1] == (sequences_of(words, 64), 64) and asked[1][0] > asked[0][0]
    assert "measuring every held-out sequence: " in capsys.readouterr().err  # (not "every held-out sequences")


def _wait_for(condition, seconds: float = 120.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.5)
    return False


def test_the_page_measures_a_model_in_the_background_once_asked_and_shows_it(tiny_run, cache):
    """A model with no evaluation of its own is measured when its Measure button is pressed (never on a
    visit: for BERT-Base that is minutes of CPU); the page then states the measured figures, and the
    table lists the model."""
    (tiny_run / "eval_metrics.json").unlink(missing_ok=True)  # no evaluation of its own
    loaded = checkpoint.load(tiny_run, "BertForPreTraining")
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = str(tiny_run)
    at.run()
    assert not at.exception
    path = quality.entry_path(loaded)
    time.sleep(1.0)
    assert not (cache / "neighbours-work" / path.name).exists()  # the visit started nothing
    # the time said may carry its own brackets ("(the machine is idle now)"): none around it
    assert re.fullmatch(r"Measure this model here: about [^()]+(\([^()]+\))?", at.button(key="mlm_measure").label)
    at.button(key="mlm_measure").click().run()
    assert _wait_for(lambda: quality.stored(path) is not None), (path.parent, list(cache.rglob("log.txt")))
    result = quality.stored(path)
    at.run()
    assert not at.exception
    said = [c.value for c in at.caption if "Measured on this machine" in c.value]
    assert said, [c.value for c in at.caption]
    assert f"{result['mlm_accuracy']:.1%} of {result['masked_wordpieces']:,} masked WordPieces" in said[0]
    assert "not comparable piece for piece" in said[0]
    table = [df for df in at.dataframe if "MLM accuracy" in df.value.columns]
    assert table and table[0].value["MLM accuracy"].tolist() == [f"{result['mlm_accuracy']:.1%}"]


def test_a_model_with_its_own_evaluation_is_measured_when_asked(tiny_run, cache):
    assert (tiny_run / "eval_metrics.json").is_file()
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = str(tiny_run)
    at.run()
    path = quality.entry_path(checkpoint.load(tiny_run, "BertForPreTraining"))
    time.sleep(1.0)
    assert not (quality.measured_root() / path.name).exists() and not (cache / "neighbours-work" / path.name).exists()
    at.button(key="mlm_measure").click().run()
    assert not at.exception
    assert _wait_for(lambda: quality.stored(path) is not None)


@pytest.mark.slow
@needs_model("minilm-mlm-nsp")
def test_evaluate_pretraining_agrees_with_the_model_card(cache):
    """Every held-out sequence the card counts, and the check set: the card's 42.2 %, 93.2 %, 17/32, 30/30."""
    out = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "evaluate-pretraining", "--model",
                          "minilm-mlm-nsp"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    card = (checkpoint.resolve("minilm-mlm-nsp") / "model_card.md").read_text()
    stored = json.loads((checkpoint.resolve("minilm-mlm-nsp") / "eval_metrics.json").read_text())
    assert r["held_out_sequences"] == stored["eval_sequences"] and r["masked_wordpieces"] == stored["eval_tokens"]
    assert round(r["mlm_accuracy"], 3) == stored["mlm_accuracy"] and round(r["nsp_accuracy"], 3) == stored["nsp_accuracy"]
    assert "{} / {}".format(*r["check_set_clozes"]) in card and "{} / {}".format(*r["check_set_pairs"]) in card


def test_prepare_class_quotes_at_its_end_the_time_its_starter_was_shown(tiny_run, cache, monkeypatch, capsys):
    """The Prepare panel showed "about 2 min 36 s here now"; the preparation it started estimated again a
    moment later, on a busier machine, and its last line said "said before: about 2 min 57 s". Given --said
    (the panel passes what it showed), both its lines quote that."""
    from bert_explorer.analysis import lesson
    from bert_explorer.cli import main

    (tiny_run / "eval_metrics.json").unlink(missing_ok=True)
    monkeypatch.setattr(lesson, "_declared", lambda: [])  # (the first visits are another test's)
    monkeypatch.setattr(lesson, "run", lambda build, report: "done")
    shown = "about 51 s on an idle machine, up to 2 min 36 s at the load now"
    assert main(["prepare-class", "--model", str(tiny_run), "--builds", "quality", "--said", shown]) == 0
    first, *_, last = capsys.readouterr().err.strip().splitlines()
    assert f"then 1 build(s) not yet done, {shown} for the builds (each page's own estimate" in first
    assert f"(said before: {shown}; load " in last


def test_prepare_class_measures_before_the_bell_and_the_first_visits_then_compute_nothing(tiny_run, cache, monkeypatch,
                                                                                          capsys):
    """`prepare-class` runs each page's declared first-visit work and the builds asked for; after it, the
    first-visit work finds everything kept (no computation), the status table says so, a second run skips
    it, and a student's first visit to the Masked word probe reads the measurement."""
    from bert_explorer import disk_cache
    from bert_explorer.analysis import lesson
    from bert_explorer.app import roles
    from bert_explorer.cli import main

    (tiny_run / "eval_metrics.json").unlink(missing_ok=True)
    assert main(["prepare-class", "--model", str(tiny_run), "--status", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["first-visits"] != "prepared" and row["quality"] == "not yet"
    assert main(["prepare-class", "--model", str(tiny_run), "--builds", "quality"]) == 0
    said = capsys.readouterr().err
    assert "first-visit work (seconds each, not estimated), then 1 build(s) not yet done, about " in said
    assert re.search(r": quality: done \(", said)
    # the end compares the builds' time with the time said for them at the start, in the same words
    told = re.search(r"not yet done, (about .*?) for the builds", said).group(1)
    assert re.search(r"prepared in [0-9a-z ]+: starting and reading the model [0-9a-z ]+, the first visits "
                     r"[0-9a-z ]+, the builds [0-9a-z ]+ "
                     rf"\(said before: {re.escape(told)}; load ", said)
    declared = {(page, what) for page, what, _ in lesson._declared()}
    assert {p for p, _ in declared} >= {"Features of a layer", "Nearest neighbours"}
    for page, what in declared:
        assert f": {page}: {what} (" in said

    computed = []
    real = disk_cache.kept_json
    monkeypatch.setattr(disk_cache, "kept_json", lambda kind, loaded, compute, **kw: real(
        kind, loaded, lambda: computed.append(kind) or compute(), **kw))
    loaded = checkpoint.load(tiny_run, "BertForPreTraining")
    for _page_name, _what, work in lesson._declared():
        work(loaded)
    assert computed == []  # prepared: every first-visit work reads what was kept

    assert main(["prepare-class", "--model", str(tiny_run), "--status", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["quality"] == "prepared" and row["sae"] == "not yet" and row["first-visits"] == "prepared"
    assert main(["prepare-class", "--model", str(tiny_run), "--builds", "quality"]) == 0
    again = capsys.readouterr().err
    assert re.search(r"then no build \(none asked for, or all done; [0-9.]+ of \d+ cores busy\)", again), again
    assert re.search(r"prepared in [0-9a-z ]+: starting and reading the model [0-9a-z ]+, the first visits [0-9a-z ]+, "
                     r"no build \(load [0-9.]+ on \d+ cores\)", again)
    # started by the panel, it counts from the teacher's press: the process's start and the models' reading too
    assert main(["prepare-class", "--model", str(tiny_run), "--builds", "quality", "--started",
                 str(time.time() - 30)]) == 0
    took = re.search(r"prepared in ([0-9a-z ]+): starting and reading the model ([0-9a-z ]+),", capsys.readouterr().err)
    assert all(re.fullmatch(r"[3-9]\d s|\d+ min( \d+ s)?", t) for t in took.groups()), took.groups()  # 30 s or more

    monkeypatch.setenv(roles.CLASSROOM_ENV, "1")
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = str(tiny_run)
    at.run()
    assert not at.exception and any("Measured on this machine" in c.value for c in at.caption)


def test_prepare_class_status_says_a_model_came_with_its_own_evaluation(cache, capsys):
    """The panel's table said "its own" of minilm-mlm-nsp's quality (its shipped evaluation, which every student
    sees), and `prepare-class --status` said "not yet" of the same."""
    from bert_explorer.cli import main

    assert main(["prepare-class", "--model", "minilm-mlm-nsp", "--status", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["quality"] == "its own"


def test_the_measurement_s_time_counts_the_model_s_own_held_out_text():
    """Every model's measurement was estimated on minilm-mlm-nsp's 1,818 held-out sequences: explorer-mini's
    1,024 were said as nearly twice their time (said 44.6 s, took 18 s)."""
    from bert_explorer import checkpoint
    from bert_explorer.analysis.probes import quality

    mini = checkpoint.load("explorer-mini", "BertForPreTraining")
    measured = 1024  # (held_out_sequences_all of its measurement)
    assert abs(quality.held_out_sequences(mini) - measured) / measured < 0.15
    assert quality.estimate_seconds(mini.config, quality.held_out_sequences(mini)) < \
        quality.estimate_seconds(mini.config)


@needs_model("minilm-mlm-nsp")
def test_preparing_every_build_leaves_out_the_quality_a_model_came_with(cache, runs_root, monkeypatch, capsys):
    """Home's "Select all" ticked the quality measurement of minilm-mlm-nsp, whose table said "its own": the
    preparation spent minutes measuring again the evaluation the model came with. It is left out, and said."""
    from bert_explorer.analysis import lesson
    from bert_explorer.cli import main

    at = AppTest.from_file("../run_app.py", default_timeout=180).run()
    at.multiselect(key="prep_builds").set_value(["quality"]).run()  # what "Select all" ticks among the rest
    assert not at.exception
    assert any("no build to run" in m.value for m in at.markdown)
    assert any(c.value.startswith("quality is not measured for minilm-mlm-nsp: it came with its own evaluation")
               for c in at.caption)

    monkeypatch.setattr(lesson, "_declared", lambda: [])  # (the first visits are another test's)
    monkeypatch.setattr(lesson, "run", lambda build, report: pytest.fail(f"{build.name} was built"))
    assert main(["prepare-class", "--model", "minilm-mlm-nsp", "--builds", "quality"]) == 0
    said = capsys.readouterr().err
    assert "minilm-mlm-nsp: quality: not built, the model came with its own" in said and "then no build" in said
