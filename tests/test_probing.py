"""What each layer knows: the probe finds a planted feature, the control task stays at chance, the
features and results are cached, the CLI writes its JSON and the page shows the computed numbers."""
import argparse
import json
from collections import Counter

import numpy as np
import pytest
import torch

from bert_explorer import checkpoint
from bert_explorer.analysis.layers import probing
from bert_explorer.analysis.layers.vectors import sentence_vectors, word_vectors
from bert_explorer.tokenizer import SPECIAL_TOKENS
from shared import needs_model, save_tiny_bert


# ----- the probe on planted features ---------------------------------------------------------------------
def planted(n=3000, layers=4, hidden=16, answer_layer=2, labels=("NOUN", "VERB", "ADJ", "DET", "ADP"), seed=0):
    """Rows whose label is written linearly into one layer; the other layers are noise. Word types are
    drawn independently of the labels, so nothing in any layer tells a type's control label."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(labels), n)
    x = rng.normal(size=(n, layers, hidden)).astype(np.float16)
    direction = rng.normal(size=(len(labels), hidden))
    x[:, answer_layer] = (x[:, answer_layer] + 3 * direction[y]).astype(np.float16)
    types = [f"w{t}" for t in rng.integers(0, 400, n)]
    is_test = list(rng.random(n) < 0.25)
    return x, [labels[i] for i in y], types, is_test


def test_a_probe_reads_a_planted_layer_and_the_control_task_stays_at_chance():
    x, labels, types, is_test = planted()
    r = probing.probe_features(x, labels, types, is_test, "pos")
    assert r["score"][2] > 0.97                                      # the layer that holds the answer
    assert max(r["score"][i] for i in (0, 1, 3)) < 0.35              # noise layers: chance is 0.2
    assert max(r["control"]) < 0.35                                  # random labels per type: chance
    assert r["selectivity"][2] > 0.6
    assert r["majority_baseline"] < 0.3


def test_planted_entities_reach_full_macro_f1_without_counting_o():
    rng = np.random.default_rng(1)
    n = 3000
    tags = rng.choice(["O", "B-person", "I-person", "B-place"], n, p=[0.85, 0.06, 0.04, 0.05])
    names = sorted(set(tags))
    x = rng.normal(size=(n, 3, 12)).astype(np.float16)
    x[:, 1, :4] += (6 * np.eye(4)[[names.index(t) for t in tags]]).astype(np.float16)
    types = [f"w{t}" for t in rng.integers(0, 500, n)]
    is_test = list(rng.random(n) < 0.3)
    r = probing.probe_features(x, list(tags), types, is_test, "ner", groups=list(range(n)))
    assert r["score"][1] > 0.97 and r["entity_f1"][1] > 0.97
    assert r["score"][0] < 0.3 and max(r["control"]) < 0.3
    assert r["majority_baseline"] == 0.0  # always "O": no entity tag right, whatever the accuracy


def test_control_labels_are_fixed_per_type_and_follow_the_label_distribution():
    rng = np.random.default_rng(2)
    types = [f"w{i}" for i in rng.integers(0, 3000, 20000)]
    labels = list(rng.choice(["O", "B-x", "I-x"], 20000, p=[0.9, 0.06, 0.04]))
    control = probing.control_labels(types, labels, seed=5)
    by_type = {}
    for t, c in zip(types, control):
        assert by_type.setdefault(t, c) == c
    share = Counter(by_type.values())
    assert share["O"] / len(by_type) == pytest.approx(0.9, abs=0.03)
    assert probing.control_labels(types, labels, seed=5) == control  # deterministic


def test_fit_linear_separates_separable_classes():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 5))
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    predict = probing.fit_linear(x, y, 2)
    assert (predict(x) == y).mean() > 0.97


def test_read_conllu_takes_form_and_upos_and_skips_multiword_tokens(tmp_path):
    f = tmp_path / "a.conllu"
    f.write_text("# sent_id = 1\n1\tI\tI\tPRON\tPRP\t_\t2\tnsubj\t_\t_\n2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
                 "2\tdo\tdo\tAUX\tVBP\t_\t0\troot\t_\t_\n3\tn't\tnot\tPART\tRB\t_\t2\tadvmod\t_\t_\n\n"
                 "1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_\n")
    words, tags = probing.read_conllu(f)
    assert words == [["I", "do", "n't"], ["Yes"]] and tags == [["PRON", "AUX", "PART"], ["INTJ"]]
    (tmp_path / "empty.conllu").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no CoNLL-U sentences"):
        probing.read_conllu(tmp_path / "empty.conllu")


# ----- a real (tiny) model --------------------------------------------------------------------------------
WORDS = ["the", "a", "of", "to", "in", "and", "is", "@", "#", "!", ".", ","]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("tiny") / "model", SPECIAL_TOKENS + WORDS, hidden=16, positions=128)


def test_word_vectors_take_the_first_piece_of_each_word_at_every_layer(tiny_dir):
    loaded = checkpoint.load(tiny_dir, "BertModel")
    sentences = [["the", "cat", "is", "in", "a", "hat"], ["of", "."]]
    x, rows = word_vectors(loaded, sentences, batch_size=1)
    assert x.shape == (8, 3, 16) and x.dtype == np.float16
    assert rows == [(0, i) for i in range(6)] + [(1, 0), (1, 1)]
    enc = loaded.tokenizer.encode_words([sentences[1]])
    with torch.no_grad():
        hs = loaded.model(**loaded.tokenizer.tensors(enc), output_hidden_states=True).hidden_states
    assert np.allclose(x[6:, 2], hs[2][0, 1:3].numpy(), atol=1e-2)  # positions 1 and 2, after [CLS]
    pooled = sentence_vectors(loaded, ["the of", "a"], "mean")
    assert pooled.shape == (2, 3, 16)


def _quick(task):
    return probing.ProbeSettings(max_examples=40 if task == "ner" else 30, max_iter=20)


def test_probe_layers_runs_ner_and_topic_and_reads_them_back_from_the_cache(tiny_dir):
    loaded = checkpoint.load(tiny_dir, "BertModel")
    for task in ("ner", "topic"):
        assert probing.cached_result(loaded, task, _quick(task)) is None
        seen = []
        r = probing.probe_layers(loaded, task, _quick(task), progress=lambda f, m: seen.append(f))
        assert r["layers"] == [0, 1, 2] and len(r["score"]) == len(r["control"]) == len(r["selectivity"]) == 3
        assert r["from_cache"] is False and seen[-1] == pytest.approx(1.0) and seen == sorted(seen)
        assert np.allclose(np.subtract(r["score"], r["control"]), r["selectivity"], atol=1e-3)
        assert r["n_test"] > 0 and r["n_train"] > r["n_test"] and r["metric"] == probing.METRICS[task]
        assert f"{max(r['score']):.2f}" in r["summary"]
        # the margin written is the one the summary reads, at least the binomial's (0.0 beside "±0.068")
        assert r["margin"] == pytest.approx(probing.within_error(r)[0], abs=1e-4) and r["margin"] > 0
        again = probing.cached_result(loaded, task, _quick(task))
        assert again["from_cache"] and again["score"] == r["score"]
    assert "entity_f1" in r or task == "topic"


def test_a_full_cache_disk_still_gives_the_result_with_one_warning(tiny_dir, monkeypatch, tmp_path):
    """The layer vectors are only kept to save time: when the disk is full they are not kept, the
    probe runs on them all the same, and one warning says so (where, how much is free)."""
    import errno
    import warnings

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    loaded = checkpoint.load(tiny_dir, "BertModel")

    def full(file, arr, *args, **kwargs):
        with open(file, "wb") as f:
            f.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(probing.np, "save", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = probing.probe_layers(loaded, "ner", _quick("ner"))
    assert r["layers"] == [0, 1, 2] and len(r["score"]) == 3 and r["from_cache"] is False
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and said[0].startswith(f"no space left in {tmp_path / 'cache'} to keep the layer vectors "
                                                 "in the cache (")
    assert said[0].endswith("free); the result is used all the same, and computed again next time")
    assert not list((tmp_path / "cache").glob("probe-features-*"))  # nothing half-kept that a later visit would trust


def test_pos_without_a_file_says_what_to_give(tiny_dir):
    with pytest.raises(ValueError, match="CoNLL-U"):
        probing.load_task("pos", probing.ProbeSettings())


# ----- the command line ---------------------------------------------------------------------------------
def _cli(argv):
    from bert_explorer.cli.analysis import register
    from bert_explorer.cli.common import UserError

    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        return str(e)


def test_probe_layers_cli_writes_the_score_by_layer_of_each_task(tiny_dir, tmp_path):
    conllu = tmp_path / "pos.conllu"
    conllu.write_text("".join(f"1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\t{w}\t{w}\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
                              for w in ["cat", "dog", "a", "of"] * 10))
    out = tmp_path / "probe.json"
    assert _cli(["probe-layers", "--model", str(tiny_dir), "--task", "ner,pos", "--pos-file", str(conllu),
                 "--max-examples", "40", "--max-iter", "20", "--output", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["model"] == str(tiny_dir) and set(data["tasks"]) == {"ner", "pos"}
    for r in data["tasks"].values():
        assert r["layers"] == [0, 1, 2] and len(r["score"]) == 3 and "summary" in r and "seconds" in r
    assert data["tasks"]["pos"]["score"][0] == pytest.approx(1.0)  # DET/NOUN by position: the embeddings know it
    assert "needs --pos-file" in _cli(["probe-layers", "--model", str(tiny_dir), "--task", "pos",
                                       "--output", str(out)])


def test_a_conllu_file_too_thin_to_probe_is_one_sentence_before_any_task_runs(tiny_dir, tmp_path, monkeypatch):
    """One sentence, fifty copies of one, or one tag throughout: the probes ran ner and topic for minutes and then
    ended in an IndexError. The file is checked first, in one sentence."""
    line = "1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
    one_tag = "".join(f"1\t{w}\t{w}\tNOUN\t_\t_\t0\troot\t_\t_\n\n" for w in [f"w{i}" for i in range(40)])
    ran = []
    monkeypatch.setattr("bert_explorer.cli.analysis.probe_layers", lambda *a, **k: ran.append(a) or {})
    out = tmp_path / "probe.json"
    for name, text, said in (("one.conllu", line, "too few"), ("copies.conllu", line * 50, "too few"),
                             ("one-tag.conllu", one_tag, "one label only ('NOUN')")):
        f = tmp_path / name
        f.write_text(text)
        told = _cli(["probe-layers", "--model", str(tiny_dir), "--task", "ner,pos", "--pos-file", str(f),
                     "--output", str(out), "--no-progress"])
        assert isinstance(told, str) and said in told and name in told, told
    assert ran == [] and not out.exists()  # nothing ran, nothing written


# ----- the page -----------------------------------------------------------------------------------------
def test_a_negative_selectivity_says_where_the_control_moved_not_only_its_ends():
    """"the control score goes from 0.34 at the embeddings to 0.34 at layer 4" of a control that moved between."""
    result = {"task": "ner", "metric": "macro-F1", "score": [0.01, 0.02, 0.02, 0.01, 0.01],
              "control": [0.34, 0.44, 0.40, 0.37, 0.34], "selectivity": [-0.33, -0.42, -0.38, -0.36, -0.33],
              "majority_baseline": 0.0, "n_test": 800, "units": "words"}
    text = probing.describe(result)
    assert "the control score ranges from 0.34 at the embeddings (layer 0) to 0.44 at layer 1" in text, text
    result["control"] = [0.34] * 5
    assert "the control score is 0.34 at every layer" in probing.describe(result)


@needs_model("explorer-mini")
def test_probing_page_runs_with_a_progress_bar_then_reads_the_cache():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/8_What_each_layer_knows.py", default_timeout=180)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.session_state["probe_n_sent"] = 60
    at.session_state["probe_n_art"] = 40
    at.run()
    assert not at.exception, at.exception
    assert any("Tenney et al. 2019" in m.value and "Hewitt & Liang" in m.value for m in at.markdown)
    assert "probe_run" in {b.key for b in at.button}
    zips = lambda: [b for b in at.get("download_button") if "probe_bundle" in b.proto.id]  # noqa: E731
    assert not zips()  # nothing computed: no zip of nothing offered
    at.button(key="probe_run").click().run()
    assert not at.exception, at.exception
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 2 and zips()
    loaded = checkpoint.load("explorer-mini", "BertModel")
    ner = probing.cached_result(loaded, "ner", probing.ProbeSettings(max_examples=60))
    assert ner is not None and ner["summary"] in [m.value for m in at.markdown]
    at2 = AppTest.from_file("../pages/8_What_each_layer_knows.py", default_timeout=60)
    at2.session_state["be_model_choice"] = "explorer-mini"
    at2.session_state["probe_n_sent"] = 60
    at2.session_state["probe_n_art"] = 40
    at2.run()
    assert not at2.exception and "probe_run" not in {b.key for b in at2.button}  # all cached: shown at once
    assert len(at2.get("plotly_chart")) == 2
    assert any("read from the cache" in c.value for c in at2.caption)
    # the table (and its CSV) names its rows: which numbers are the task's, the control's, the selectivity
    table = next(d.value for d in at2.dataframe if "probe" in d.value.columns)
    assert table["probe"].tolist() == ["task", "control", "selectivity"]
    assert list(table.columns[1:]) == [f"layer {i}" for i in ner["layers"]]
    assert table.iloc[0, 1:].tolist() == [round(v, 3) for v in ner["score"]]


@needs_model("explorer-mini")
def test_after_the_probes_run_the_not_computed_note_and_its_button_are_gone(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))  # nothing computed yet, whatever ran before
    at = AppTest.from_file("../pages/8_What_each_layer_knows.py", default_timeout=180)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.session_state["probe_tasks"] = ["topic"]
    at.session_state["probe_n_art"] = 20
    at.run()
    assert any("Not computed yet" in i.value for i in at.info)
    at.button(key="probe_run").click().run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 1                       # the results are there...
    assert not any("Not computed yet" in i.value for i in at.info)  # ...and the note above them is gone
    assert "probe_run" not in {b.key for b in at.button}


def test_a_tie_between_layers_is_said_as_a_tie_not_a_peak():
    """Six layers at 0.975 and one at 0.95 on 40 held-out articles were captioned "peaks at the embeddings
    (layer 0): 0.97" (argmax names the first of tied layers)."""
    result = {"task": "topic", "metric": "accuracy", "score": [0.975, 0.975, 0.975, 0.975, 0.95, 0.975, 0.975],
              "control": [0.3] * 7, "selectivity": [0.675, 0.675, 0.675, 0.675, 0.65, 0.675, 0.675],
              "majority_baseline": 0.25, "n_test": 40, "units": "articles"}
    text = probing.describe(result)
    assert text.startswith("Topic (accuracy) has no single peak: 0.97 at the embeddings (layer 0), layer 1, layer 2, "
                           "layer 3, layer 5 and layer 6 alike (one of its 40 held-out articles is 0.025 of the score)"), text
    assert "peaks at" not in text
    result["score"] = [0.8, 0.8, 0.8, 0.8, 0.99, 0.8, 0.8]
    assert probing.describe(result).startswith("Topic (accuracy) peaks at layer 4: 0.99")


def test_layers_within_the_best_ones_sampling_error_are_not_said_to_be_passed_by_a_peak():
    """0.92-0.94 at every layer on 200 held-out articles was captioned "peaks at layer 6: 0.94": a 95 % sampling
    error of ±3.3 points there covers every layer, so no layer stands out."""
    result = {"task": "topic", "metric": "accuracy", "score": [0.92, 0.925, 0.93, 0.93, 0.935, 0.93, 0.94],
              "control": [0.3] * 7, "selectivity": [0.6] * 7, "majority_baseline": 0.25, "n_test": 200,
              "units": "articles"}
    text = probing.describe(result)
    assert text.startswith("Topic (accuracy) is highest at layer 6: 0.94, but the embeddings (layer 0), layer 1, "
                           "layer 2, layer 3, layer 4 and layer 5 come within its sampling error (±0.033 on 200 "
                           "held-out articles), so no single layer stands out"), text
    assert "peaks at" not in text
    result["score"][5] = 0.91  # one layer within 3.3 points of the best, the rest further
    result["score"][:5] = [0.70, 0.72, 0.80, 0.85, 0.88]
    assert probing.describe(result).startswith("Topic (accuracy) is highest at layer 6: 0.94, but layer 5 comes within")
    result["score"][5] = 0.90  # 4 points below: told apart
    assert probing.describe(result).startswith("Topic (accuracy) peaks at layer 6: 0.94")


def test_a_perfect_score_is_not_said_to_peak_over_layers_one_article_below():
    """20 held-out articles: 1.00 at layer 1 and 0.95 at four others was captioned "peaks at layer 1", the margin
    of a perfect score drawn again with replacement being 0."""
    result = {"task": "topic", "metric": "accuracy", "score": [0.95, 1.0, 0.9, 0.85, 0.95, 0.95, 0.95],
              "control": [0.2] * 7, "selectivity": [0.75, 0.8, 0.7, 0.65, 0.75, 0.75, 0.75],
              "majority_baseline": 0.25, "n_test": 20, "units": "articles", "margin": 0.0}
    text = probing.describe(result)
    assert text.startswith("Topic (accuracy) is highest at layer 1: 1.00, but the embeddings (layer 0), layer 4, "
                           "layer 5 and layer 6 come within its sampling error (±0.068 on 20 held-out "
                           "articles)"), text


@needs_model("explorer-mini")
def test_a_student_is_told_how_the_teacher_prepares_the_probes(monkeypatch, tmp_path):
    """A student read "your teacher can prepare it", but Home's Prepare for class has no build for the probes:
    the teacher prepares them by running them on this page."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.app import roles

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(roles.CLASSROOM_ENV, "1")
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    at = AppTest.from_file("../pages/8_What_each_layer_knows.py", default_timeout=180)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.run()
    assert not at.exception and "probe_run" not in {b.key for b in at.button}  # the defaults take minutes
    assert any(i.value.endswith("is not prepared for this model yet; your teacher can prepare it by running the "
                                "probes once on this page, with these settings, or (with the page's own settings) by "
                                "preparing the class with the build probes.") for i in at.info)
    # while the teacher's preparation runs the build probes, the page's own settings are on their way
    from bert_explorer.analysis import lesson

    monkeypatch.setattr(lesson, "preparation", lambda: {"running": True, "builds": ["probes"],
                                                         "models": ["explorer-mini"]})
    at.run()
    assert any(i.value.endswith("your teacher's preparation, running now, builds it in its turn; where it is in the "
                                "queue is said once the preparation has read its models.") for i in at.info)
    at.number_input(key="probe_n_art").set_value(120).run()  # other settings: the build makes the page's own only
    assert not any("running now" in i.value for i in at.info)


def test_the_ner_margin_is_the_held_out_sentences_and_copies_stay_on_one_side():
    """The NER caption's ±1.3 points came from every held-out word, though the score is a macro-F1 over the 5 % of
    words that are entities and a sentence's words are not independent: the held-out sentences drawn again say
    about ±8.6. And WNUT-16 repeats tweets word for word: 27 of 479 held-out sentences were copies of training
    ones. The margin is now the sentences' (bootstrap), and every copy of an input lies on one side."""
    import random as rnd

    g = rnd.Random(0)
    tags = ["B-loc", "B-person", "B-org"]
    gold, pred, groups = [], [], []
    for sentence in range(200):  # 20 words a sentence, one entity word in each, right two times in three
        for w in range(20):
            y = tags[sentence % 3] if w == 0 else "O"
            gold.append(y)
            pred.append(y if w or g.random() < 0.67 else "O")
            groups.append(sentence)
    margin = probing.sampling_margin("ner", gold, pred, groups)
    p, n_words = probing.score("ner", gold, pred), len(gold)
    binomial = 1.96 * (p * (1 - p) / n_words) ** 0.5
    assert margin > 3 * binomial and 0.04 < margin < 0.15, (margin, binomial)
    result = {"task": "ner", "metric": "macro-F1", "score": [0.60, 0.66, 0.70], "control": [0.3] * 3,
              "selectivity": [0.3, 0.36, 0.4], "majority_baseline": 0.0, "n_test": 4000, "units": "words",
              "margin": margin, "n_test_groups": 200}
    assert probing.within_error(result) == (margin, [1] if 0.70 - margin <= 0.66 else [])
    assert f"(±{margin:.2g} on 4,000 held-out words of 200 sentences)" in probing.describe(result)

    keys = ["a b", "c d", "a b", "e f", "a b", "g h", "c d"] * 10 + [f"u{i}" for i in range(30)]
    test = probing._split(keys, 0.3, seed=1)
    for key in set(keys):
        assert len({t for k, t in zip(keys, test) if k == key}) == 1, key  # every copy on one side
    assert 0.2 < sum(test) / len(keys) < 0.45
    data = probing.load_task("ner", probing.ProbeSettings())
    held = {" ".join(w.lower() for w in x) for x, t in zip(data.inputs, data.is_test) if t}
    trained = {" ".join(w.lower() for w in x) for x, t in zip(data.inputs, data.is_test) if not t}
    assert not held & trained  # (27 held-out sentences were copies before)


def test_preparing_a_class_probes_the_page_s_tasks_as_its_first_visit_would(tiny_dir, monkeypatch, tmp_path):
    """Preparing a class left What each layer knows cold ("no build for it at all": the teacher had to run it on
    the page). A "probes" build runs the page's tasks with the page's settings, kept where the page reads them."""
    from bert_explorer.analysis import lesson
    from bert_explorer.cli import probes_build

    quick = {t: _quick(t) for t in probing.PAGE_TASKS}
    monkeypatch.setattr(probing, "PAGE_SETTINGS", quick)
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))  # (other tests probed these tasks)
    model = str(tiny_dir)
    loaded = checkpoint.load(model, "BertModel")
    (build,) = lesson.builds(model, loaded, ["probes"])
    assert build.key == "probes" and build.command == probing.BUILDER and build.seconds > 0
    assert not build.done()
    probes_build.build(model)
    assert build.done() and build.state()["state"] in ("ready", "done")
    for t in probing.PAGE_TASKS:
        assert probing.cached_result(loaded, t, quick[t]) is not None  # what the page's visit reads


def test_a_conllu_upload_too_thin_to_probe_is_said_at_once_on_the_page(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    from bert_explorer.app import guard

    class Upload:  # what st.file_uploader hands the page: one sentence
        name = "few.conllu"

        def getvalue(self):
            return b"1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\t_\t_\t0\troot\t_\t_\n\n"

    monkeypatch.setattr(guard, "uploader", lambda container, label, key=None, **kw: Upload())
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    at = AppTest.from_file("../pages/8_What_each_layer_knows.py", default_timeout=180)
    at.session_state["probe_tasks"] = ["pos"]
    at.run()
    assert not at.exception
    (error,) = [e.value.replace("\\", "") for e in at.error]
    assert error.startswith("few.conllu (CoNLL-U, UPOS column) gives 1 different sentence") and "too few" in error \
        and error.count("few.conllu") == 1, error


@needs_model("explorer-mini")
def test_a_student_is_refused_probes_whose_cpu_is_over_the_gate_though_their_time_is_under(monkeypatch, tmp_path):
    """A student ran probes estimated at 10 s that cost 14.9 s of CPU: the gate compared the time, in which the
    layer vectors' threads count once, with a bound of CPU seconds."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.app import roles

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(roles.CLASSROOM_ENV, "1")
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    # 4 s of layer vectors on 2 threads and 3 s of probes and scorings: 7 s of time, 11 s of CPU
    monkeypatch.setattr(probing.probing_time, "probing_estimate", lambda *a, **k: {
        "features_seconds": 4.0, "probes_seconds": 2.0, "scoring_seconds": 1.0, "seconds": 7.0,
        "cpu_seconds": 11.0, "basis": "a stated rate", "probes": 14, "scorings": 215})
    at = AppTest.from_file("../pages/8_What_each_layer_knows.py", default_timeout=180)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.session_state["probe_tasks"] = ["topic"]
    at.session_state["probe_n_art"] = 37
    at.session_state["probe_seed"] = 4242  # (settings no other test estimates: the page keeps its estimates)
    at.run()
    assert not at.exception and "probe_run" not in {b.key for b in at.button}
    assert any(c.value.startswith("These settings cost about 11 s of CPU on an idle machine; fewer sentences or "
                                  "articles (Settings) may bring it under 10 s") for c in at.caption), \
        [c.value for c in at.caption]


@needs_model("explorer-mini")
def test_the_teacher_is_told_that_the_probes_run_here_hold_the_students_heavy_requests(monkeypatch):
    """The teacher's Run the probes runs in the page, in the heavy queue's one turn: a student's Attributions
    waited 36.7 s behind it (2.9 s alone), and nothing said so."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.app import roles

    monkeypatch.setenv(roles.CLASSROOM_ENV, "1")
    monkeypatch.setenv(roles.TOKEN_ENV, "tok")
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    at = AppTest.from_file("../pages/8_What_each_layer_knows.py", default_timeout=180)
    at.query_params[roles.QUERY] = "tok"
    at.session_state["be_model_choice"] = "explorer-mini"
    at.session_state["probe_n_sent"] = 2000  # (well over a student's 10 s on any machine)
    at.run()
    assert not at.exception and "probe_run" in {b.key for b in at.button}
    assert any(c.value.startswith("While the probes run here (") and "the students' heavy requests" in c.value
               for c in at.caption)
