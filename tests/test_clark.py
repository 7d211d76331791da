"""Clark et al. (2019)'s measures over Wikipedia segments (``analysis/attention/clark.py``): the
word-level conversion by hand, the measures against transformers' own attention with a conversion
written here from the paper's words, the segments, the statements, the CLI, and the Attention page
(its background build, and Clark et al.'s statements beside bert-base-uncased only)."""
import json
import math
import time

import numpy as np
import pytest
import shared
import torch

from bert_explorer import checkpoint, hub
from bert_explorer.analysis.attention import clark
from bert_explorer.runs import neighbour_jobs as jobs

transformers = pytest.importorskip("transformers")

# Two short articles: split words ("dedekind", "unhappiness"), periods and commas, several sentences each.
DOCS = [
    ["Richard Dedekind was a German mathematician.", "He worked on abstract algebra, number theory and the reals.",
     "His cuts define the real numbers.", "Unhappiness with vague proofs drove him, and rigour followed."],
    ["The river flooded the town after three days of rain.", "Farmers lost their crops, cattle and homes.",
     "The government promised help.", "Engineers later built a higher embankment along the riverbank."],
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir):
    """A random BERT (2 layers, 4 heads, H = 32) with the real uncased vocabulary, its heads attending sharply."""
    return shared.sharp_uncased(tmp_path_factory.mktemp("tiny") / "model", minilm_dir)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ----- words from WordPieces --------------------------------------------------------------------------
def test_attention_to_a_split_word_is_summed_and_from_it_averaged():
    """[CLS] play ##ing [SEP]: "playing" is two pieces. Its column is the sum of their columns (it
    received both), its row the mean of their rows (each piece is one reader)."""
    att = torch.tensor([[0.1, 0.2, 0.3, 0.4],    # [CLS]
                        [0.5, 0.1, 0.1, 0.3],    # play
                        [0.1, 0.6, 0.2, 0.1],    # ##ing
                        [0.0, 0.3, 0.3, 0.4]],   # [SEP]
                       dtype=torch.float64)[None, None]
    words = clark.word_attention(att, [0, 1, 1, 2])[0, 0]
    expected = torch.tensor([[0.1, 0.2 + 0.3, 0.4],
                             [(0.5 + 0.1) / 2, (0.1 + 0.1 + 0.6 + 0.2) / 2, (0.3 + 0.1) / 2],
                             [0.0, 0.3 + 0.3, 0.4]], dtype=torch.float64)
    assert torch.allclose(words, expected)
    assert torch.allclose(words.sum(-1), torch.ones(3, dtype=torch.float64))  # still a distribution per word


def _their_word_attention(att: np.ndarray, tokens: list[str]) -> tuple[np.ndarray, list[str]]:
    """Written from the paper's sentence (Section 4.1), in loops, with words found from the pieces
    themselves: a piece starting with ## continues the word before it."""
    spans = []
    for i, t in enumerate(tokens):
        if t.startswith("##"):
            spans[-1].append(i)
        else:
            spans.append([i])
    n = len(spans)
    out = np.zeros(att.shape[:2] + (n, n))
    for l in range(att.shape[0]):
        for h in range(att.shape[1]):
            for u, fr in enumerate(spans):
                for v, to in enumerate(spans):
                    out[l, h, u, v] = np.mean([sum(att[l, h, i, j] for j in to) for i in fr])
    words = ["".join(tokens[i].removeprefix("##") for i in s) for s in spans]
    return out, words


def _their_measures(w: np.ndarray, words: list[str]) -> dict[str, np.ndarray]:
    """Each word's share to [SEP], [CLS], . and ,, previous and next word, averaged over all n words
    (a missing neighbour counting 0); entropy smoothed by 1e-4 as in their notebook."""
    L, A, n, _ = w.shape
    out = {k: np.zeros((L, A)) for k in clark.MEASURES}
    for l in range(L):
        for h in range(A):
            rows = w[l, h]
            out["to_sep"][l, h] = np.mean([sum(r[j] for j in range(n) if words[j] == "[SEP]") for r in rows])
            out["to_cls"][l, h] = np.mean([sum(r[j] for j in range(n) if words[j] == "[CLS]") for r in rows])
            out["to_punct"][l, h] = np.mean([sum(r[j] for j in range(n) if words[j] in ".,") for r in rows])
            out["to_prev"][l, h] = sum(rows[i, i - 1] for i in range(1, n)) / n
            out["to_next"][l, h] = sum(rows[i, i + 1] for i in range(n - 1)) / n
            out["to_self"][l, h] = np.mean([rows[i, i] for i in range(n)])
            ent = [-sum(p * math.log(p) for p in 0.9999 * r + 0.0001 / n) for r in rows]
            out["entropy"][l, h] = np.mean(ent)
            out["cls_entropy"][l, h] = ent[words.index("[CLS]")]
    return out


def test_measures_equal_transformers_attention_made_word_level_independently(tiny):
    """Each segment through transformers' BertModel (eager attention, the same weights, no padding),
    made word-level and measured with the loops above: the same numbers as ``clark.measure`` with its
    batches, padding and matrix products. Words and WordPieces give different numbers here, so a
    conversion left out would be seen."""
    segments = clark.make_segments(tiny.tokenizer, DOCS, segments=10, seed=1, max_len=24)
    assert any(len(s.words) < len(s) for s in segments)  # split words are there
    theirs = transformers.BertModel.from_pretrained(str(tiny.path), attn_implementation="eager").eval()
    expected = {k: np.zeros((2, 4)) for k in clark.MEASURES}
    for s in segments:
        with torch.no_grad():
            out = theirs(input_ids=torch.tensor([s.input_ids]), token_type_ids=torch.tensor([s.token_type_ids]),
                         output_attentions=True)
        att = torch.stack(out.attentions)[:, 0].double().numpy()     # [L, A, T, T]
        w, words = _their_word_attention(att, tiny.tokenizer.convert_ids_to_tokens(s.input_ids))
        assert words == s.words
        for k, v in _their_measures(w, words).items():
            expected[k] += v / len(segments)
    ours = clark.measure(tiny, segments)
    assert ours.segments == len(segments) and ours.words == sum(len(s.words) for s in segments)
    for k in clark.MEASURES:
        np.testing.assert_allclose(ours.heads[k], expected[k], atol=1e-5, err_msg=k)
    pieces = clark.measure(tiny, segments, word_level=False)
    assert not np.allclose(pieces.heads["to_prev"], ours.heads["to_prev"], atol=1e-3)
    assert ours.uniform["entropy"] < pieces.uniform["entropy"]  # fewer words than pieces: log n is smaller


# ----- the segments ------------------------------------------------------------------------------------
def _doc_words(tokenizer, doc):
    return [w for sent in clark._sentence_words(tokenizer, doc) for _, w in sent]


def _find(run, words):
    return next(i for i in range(len(words) - len(run) + 1) if words[i:i + len(run)] == run)


def test_segments_are_cls_a_sep_b_sep_of_consecutive_text_in_the_piece_budget_and_the_seed_decides(tiny):
    tok = tiny.tokenizer
    segments = clark.make_segments(tok, DOCS, segments=1000, seed=3, max_len=20)
    docs = [_doc_words(tok, d) for d in DOCS]
    assert len(segments) >= 3
    for s in segments:
        assert len(s) <= 20 and s.words[0] == "[CLS]" and s.words[-1] == "[SEP]" and s.words.count("[SEP]") == 2
        sep = s.words.index("[SEP]")
        a, b = s.words[1:sep], s.words[sep + 1:-1]
        assert a and b
        first_b = s.groups.index(sep + 1)
        assert s.token_type_ids == [0] * first_b + [1] * (len(s) - first_b)
        for i, t in enumerate(tok.convert_ids_to_tokens(s.input_ids)):
            assert (s.groups[i] == s.groups[i - 1]) == t.startswith("##")  # a word's pieces stay together
        # A and B are runs of whole words of one document, B after A
        doc = next(d for d in docs if any(d[i:i + len(a)] == a for i in range(len(d))))
        assert _find(a, doc) + len(a) <= _find(b, doc)
    again = clark.make_segments(tok, DOCS, segments=1000, seed=3, max_len=20)
    assert [s.input_ids for s in again] == [s.input_ids for s in segments]
    other = clark.make_segments(tok, DOCS, segments=1000, seed=4, max_len=20)
    assert [s.input_ids for s in other] != [s.input_ids for s in segments]
    assert len(clark.make_segments(tok, DOCS, segments=2, seed=3, max_len=20)) == 2
    for bad in (0, 1001):
        with pytest.raises(ValueError, match="between 1 and 1,000"):
            clark.make_segments(tok, DOCS, segments=bad)


# ----- what the measures say ---------------------------------------------------------------------------
def _synthetic(L=12, A=12) -> clark.ClarkMeasures:
    heads = {k: np.full((L, A), 0.05) for k in clark.MEASURES}
    heads["to_sep"][5:10] = 0.6                      # layers 6-10
    heads["to_prev"][1, 2] = heads["to_prev"][6, 0] = 0.7
    heads["entropy"][:] = 1.0
    heads["entropy"][0:2] = 3.0                      # layers 1-2 broad
    heads["to_cls"][0:2] = 0.3
    heads["to_punct"][10:12] = 0.2
    heads["cls_entropy"][-1] = np.arange(A) / 4.0    # mean 1.375
    return clark.ClarkMeasures(heads=heads, uniform={"to_sep": 0.02, "to_cls": 0.01, "to_punct": 0.1,
                                                     "to_prev": 0.01, "entropy": 4.5},
                               segments=1000, words=100_000, wordpieces=110_000)


def test_the_statements_are_computed_from_the_measures():
    ours = clark.statements(_synthetic())
    assert set(ours) == set(clark.CLARK_STATEMENTS) == set(clark.STATEMENT_TOPICS)
    assert ours["sep"].startswith("Over half of the attention in layers 6-10 goes to [SEP] (the most: layer 6, 60%;")
    assert "broadest attention (highest mean entropy) is in layers 1 and 2 (3.00, 3.00 nats)" in ours["early_late"]
    assert "[CLS] in layers 1 and 2 (30.0%, 30.0%)" in ours["early_late"]
    assert "periods and commas in layers 11 and 12 (20.0%, 20.0%)" in ours["early_late"]
    assert ours["previous"] == ("2 heads put more than 50% of their attention on the previous word: layer 2 head 3 "
                                "(70%); layer 7 head 1 (70%).")
    assert "entropy of 1.38 nats" in ours["cls_entropy"] and "layer 12" in ours["cls_entropy"]
    quiet = _synthetic()
    quiet.heads["to_sep"][:] = 0.1
    quiet.heads["to_prev"][:] = 0.2
    quiet.heads["to_prev"][3, 5] = 0.4
    ours = clark.statements(quiet)
    assert ours["sep"].startswith("In no layer does over half of the attention go to [SEP]; the most is layer 1, 10%")
    assert ours["previous"] == ("No head puts more than 50% of its attention on the previous word; the most is "
                                "layer 4 head 6, 40%.")


def test_only_bert_base_uncased_is_the_reference_model():
    for name in ("google-bert/bert-base-uncased", "bert-base-uncased", "hf:google-bert/bert-base-uncased",
                 "hf:bert-base-uncased"):
        assert clark.is_reference_model(name), name
    for name in ("minilm-mlm-nsp", "google-bert/bert-base-cased", "bert-large-uncased", "/models/bert-base-uncased",
                 "hf:../../etc", "", None):
        assert not clark.is_reference_model(name), name


# ----- the CLI ------------------------------------------------------------------------------------------
def test_cli_builds_once_and_prints_the_measures(tiny, cache, monkeypatch, capsys):
    from bert_explorer.cli import main

    monkeypatch.setattr(clark, "load_corpus", lambda name: DOCS * 3)  # (the real corpus takes seconds to cut)
    argv = ["attention-measures", "build", "--model", str(tiny.path), "--segments", "4", "--corpus", "wiki", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    path = clark.measures_path(tiny, "wiki", 4)
    built = clark.read_measures(path)
    assert out["segments"] == built.segments == 4 and out["clark_et_al_2019"] is None
    assert out["statements"] == clark.statements(built)
    assert np.allclose(out["heads"]["to_sep"], built.heads["to_sep"], atol=1e-6)
    assert [r["layer"] for r in out["layers"]] == [1, 2]
    monkeypatch.setattr(clark, "measure", lambda *a, **k: pytest.fail("measured again"))
    assert main(argv[:-1]) == 0  # the second time it is read from the cache
    text = capsys.readouterr().out
    assert clark.statements(built)["previous"] in text and "about google-bert/bert-base-uncased only" in text
    assert main(["attention-measures", "build", "--model", str(tiny.path), "--segments", "1001"]) == 2
    assert "between 1 and 1,000" in capsys.readouterr().err


# ----- the page -----------------------------------------------------------------------------------------
def _page(**state):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/2_Attention.py", default_timeout=120)
    for k, v in state.items():
        at.session_state[k] = v
    return at.run()


def _texts(at) -> list[str]:
    return [m.value for m in at.markdown] + [c.value for c in at.caption]


def test_the_page_measures_the_default_model_in_the_background_then_shows_what_it_computed(cache, monkeypatch):
    """minilm-mlm-nsp: the button says what the measurement costs; it starts the build as its own
    process; the page then shows the statements and the table that the entry holds, and none of
    Clark et al.'s numbers (they are about bert-base-uncased)."""
    from bert_explorer.runs.report import duration_text
    from bert_explorer.train import speed

    monkeypatch.setattr(speed, "busy_cores", lambda: (0.0, 0.0))  # an idle machine: the time said is the idle one
    at = _page(att_clark_segments=2)
    assert not at.exception
    button = at.button(key="att_clark_build")
    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertModel")
    cost = clark.estimate_seconds(loaded.config, 2)
    assert button.label == f"Measure this model on 2 segments: about {duration_text(cost)} (the machine is idle now)"
    assert any("are about bert-base-uncased (google-bert/bert-base-uncased) only" in t for t in _texts(at))
    assert not any("3.89" in t or "Clark et al. (2019)**" in t for t in _texts(at))
    button.click().run()
    assert not at.exception
    path = clark.measures_path(loaded, clark.default_corpus(), 2)
    deadline = time.time() + 120
    while time.time() < deadline and not clark.is_complete(path):
        assert clark.measures_state(path)["state"] == "building" or clark.is_complete(path), jobs.log_tail(path)
        time.sleep(1)
    at.run()
    assert not at.exception
    built = clark.read_measures(path)
    shown = next(d.value for d in at.dataframe if "[CLS] entropy (nats)" in d.value.columns)
    assert list(shown["layer"]) == list(range(1, loaded.config.num_layers + 1))
    assert np.allclose(shown["[SEP]"], built.layer_means("to_sep").round(3))
    page = "\n".join(_texts(at))
    for statement in clark.statements(built).values():
        assert statement in page
    assert not any("3.89" in t for t in _texts(at))
    assert not [b for b in at.button if b.key == "att_clark_build"]  # built: nothing more to start


def test_in_classroom_mode_a_student_starts_no_measurement_and_reads_what_the_server_prepares(cache, monkeypatch):
    """Each "Segments" value is a build of its own: a student could start one after another, so only the
    teacher starts them; a student reads that it is not prepared, and what is being prepared instead."""
    from streamlit import config as st_config

    monkeypatch.delenv("BERT_EXPLORER_ALLOW_WRITES", raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        other = cache / "neighbours-someone-elses"
        jobs.atomic.write_json(jobs.work_dir(other) / jobs.LESSON_FILE, {"lesson": "Features of layer 3"})
        with jobs.builder_lock(other):
            at = _page(att_clark_segments=3)
            assert not at.exception
            assert not [b for b in at.button if b.key == "att_clark_build"]
            # 3 segments, not the page's own 1,000 that Prepare for class builds: the teacher builds it on the page
            assert any(i.value == "This measurement over 3 segments is not prepared for this model yet; your teacher "
                       "can prepare it on this page with these settings (Home's Prepare for class builds each page's "
                       "own settings, not these)." for i in at.info)
            assert any(c.value == "The server is preparing Features of layer 3 for the class." for c in at.caption)
    finally:
        st_config.set_option("server.address", before)


def test_beside_bert_base_uncased_the_page_shows_clark_et_als_statements_with_their_figures(tmp_path, cache,
                                                                                             monkeypatch):
    """A tiny random model in bert-base-uncased's layout, served under its name by the local stand-in
    of the Hub and then opened offline: its measures (built here) and Clark et al.'s four
    statements side by side, each statement of theirs citing its figure or section."""
    import hub_standin

    base = clark.REFERENCE_MODEL
    hub_standin.write_bert_base_layout(tmp_path / "hub" / base, seed=1)
    with hub_standin.HubStandin(tmp_path / "hub") as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        hub.download(base)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(clark, "load_corpus", lambda name: DOCS * 3)
    loaded = checkpoint.load(base, "BertModel")
    clark.build_measures(loaded, clark.default_corpus(), 3)
    built = clark.read_measures(clark.measures_path(loaded, clark.default_corpus(), 3))
    at = _page(be_model_choice=base, att_clark_segments=3)
    assert not at.exception
    page = _texts(at)
    assert "**Clark et al. (2019)**, bert-base-uncased" in page and "**This model** (3 segments, computed here)" in page
    for key, topic in clark.STATEMENT_TOPICS.items():
        assert f"*{topic}*: {clark.CLARK_STATEMENTS[key]}" in page
        assert f"*{topic}*: {clark.statements(built)[key]}" in page
    assert "(Fig. 2)" in clark.CLARK_STATEMENTS["sep"] and "3.89 nats" in clark.CLARK_STATEMENTS["cls_entropy"]
    assert not any("only, so they are shown beside that model alone" in t for t in page)
