"""Nearest neighbours in a corpus (exBERT's search): the index against brute force, its building
(atomic, resumable, one builder, cached), the CLI and the page, all on a corpus of a few
dozen sentences so the file runs in seconds."""
import json
import re
import time

import numpy as np
import pytest
import torch

from bert_explorer import checkpoint
from bert_explorer.analysis.neighbours import index as nbb
from bert_explorer.runs import neighbour_jobs as jobs
from bert_explorer.analysis.neighbours import search as nb
from bert_explorer.data.corpora import tiny_corpus
import shared

SENTENCES = [
    "The bank raised interest rates again.", "She sat on the river bank and watched the water.",
    "Interest in the film was huge.", "The match ended in a draw after extra time.",
    "He lit a match in the dark.", "Shares in the bank fell sharply on Monday.",
    "The record label signed the band.", "She set a world record in the final.",
] + [s for doc in tiny_corpus(8, seed=3) for s in doc]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir):
    return shared.tiny_uncased(tmp_path_factory.mktemp("tiny") / "model", minilm_dir, layers=2)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of the test's own: every test builds from nothing."""
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


pytestmark = pytest.mark.usefixtures("one_thread")


_VECTORS = {}


def brute_force(loaded, sentences, text, position, layer, k):
    """Top-k cosine over every WordPiece of every (distinct) sentence, from the full forward pass
    of each sentence on its own: (similarity, sentence, first character) best first."""
    enc_model = checkpoint.encoder_of(loaded.model).eval()

    def vectors(sentence):
        if (sentence, layer) not in _VECTORS:
            enc = loaded.tokenizer.encode(sentence)
            with torch.no_grad():
                h = enc_model(**loaded.tokenizer.tensors([enc]), output_hidden_states=True).hidden_states[layer][0]
            _VECTORS[sentence, layer] = enc, torch.nn.functional.normalize(h, dim=-1)
        return _VECTORS[sentence, layer]

    _, q = vectors(text)
    rows = []
    for s in dict.fromkeys(sentences):
        enc, v = vectors(s)
        sims = (v @ q[position]).tolist()
        rows += [(sims[t], s, enc.offsets[t][0]) for t in range(1, len(enc.input_ids) - 1)]
    return sorted(rows, key=lambda r: -r[0])[:k], len(rows)


@pytest.mark.parametrize("layer", [0, 2])
def test_index_finds_the_same_neighbours_as_brute_force(tiny, cache, layer):
    paths = nbb.build_index(tiny, SENTENCES, [0, 2])
    index = nb.NeighbourIndex.open(paths[layer])
    assert index.vectors.dtype == np.float16
    assert np.allclose(np.linalg.norm(index.vectors.astype(np.float32), axis=1), 1, atol=2e-3)
    for text, word in [("the bank raised rates .", "bank"), ("a world record in the final", "record"),
                       ("the team lost the match", "match")]:
        position = nb.pick_token(tiny, text, word)
        result = nb.nearest(tiny, index, text, position, layer, k=8)
        truth, n_rows = brute_force(tiny, SENTENCES, text, position, layer, 8)
        assert len(index) == n_rows  # every WordPiece of every distinct sentence, no [CLS]/[SEP]
        # the same similarities, rank by rank (fp16 storage: ties may swap, values may not)
        assert np.allclose([h["similarity"] for h in result.hits], [t[0] for t in truth], atol=2e-3)
        # and each hit really has the similarity it reports
        by_place = {(s, a): sim for sim, s, a in brute_force(tiny, SENTENCES, text, position, layer, n_rows)[0]}
        for h in result.hits:
            assert abs(by_place[(h["sentence"], h["start"])] - h["similarity"]) < 2e-3
            assert h["left"].endswith(h["sentence"][:h["start"]][-70:])
            assert h["hit"] == h["sentence"][h["start"]:h["end"]]


def test_a_similarity_is_a_cosine_within_one(tiny, cache, monkeypatch):
    """Vectors stored in 16 bits have lengths of 1 to within 2e-3: the Nearest neighbours CSV held a similarity of
    1.0000008 for the query's own sentence."""
    index = nb.NeighbourIndex.open(nbb.build_index(tiny, SENTENCES, [0])[0])
    search = index.search
    monkeypatch.setattr(index, "search", lambda q, k: (lambda s, r: (s * 1.001, r))(*search(q, k)))
    text = SENTENCES[0]
    result = nb.nearest(tiny, index, text, 1, 0, k=4)
    assert result.hits[0]["similarity"] == 1.0 and all(-1 <= h["similarity"] <= 1 for h in result.hits)


def test_exact_search_is_exact_among_near_ties():
    """fp16 scores make near-ties equal; the fp32 re-scoring must still return the true top k."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 64)).astype(np.float32)
    x = base[rng.integers(0, 40, 20_000)] + 2e-3 * rng.standard_normal((20_000, 64)).astype(np.float32)
    v = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)
    full = torch.from_numpy(v).float()
    missed = 0  # how often the fp16 scores alone would get the top 10 wrong
    for q in v[:5].astype(np.float32):
        sims, rows = nb.exact_search(v, q, 10)
        truth = torch.topk(full @ torch.nn.functional.normalize(torch.from_numpy(q), dim=0), 10)
        assert np.allclose(sims, truth.values.numpy(), atol=1e-6)
        assert np.allclose((full[rows] @ torch.from_numpy(q / np.linalg.norm(q))).numpy(), sims, atol=1e-6)
        fp16_only = torch.topk(torch.from_numpy(v) @ torch.from_numpy(q).half(), 10).indices
        missed += not np.allclose((full[fp16_only] @ torch.from_numpy(q / np.linalg.norm(q))).numpy(), sims, atol=1e-6)
    assert missed > 0  # the data does have the near-ties that the re-scoring is for


def test_hidden_upto_equals_the_full_forward(tiny):
    enc = tiny.tokenizer.batch(["the bank raised rates .", "a match"])
    with torch.no_grad():
        full = checkpoint.encoder_of(tiny.model)(**enc, output_hidden_states=True).hidden_states
        part = nbb.hidden_upto(tiny, enc, [0, 1, 2])
    for layer in (0, 1, 2):
        assert torch.allclose(part[layer], full[layer], atol=1e-5)


def test_long_sentences_are_cut_at_word_starts_and_duplicates_dropped(tiny):
    long = " ".join(["unbelievably"] * 40 + ["interesting"] * 60) + "."
    units = nbb.corpus_units(tiny.tokenizer, [long, "a short one .", "a short one ."])
    assert units.texts.count("a short one .") == 1
    assert all(p <= nbb.MAX_PIECES - 2 for p in units.pieces) and len(units.texts) >= 3
    for t in units.texts[:-1]:
        assert not tiny.tokenizer.tokenize(t)[0].startswith("##")
    assert sum(units.pieces[:-1]) == len(tiny.tokenizer.tokenize(long))  # no piece lost


def test_a_second_build_reuses_the_cache(tiny, cache, monkeypatch):
    first = nbb.build_index(tiny, SENTENCES, 1)
    monkeypatch.setattr(nbb, "_encode_shard", lambda *a, **k: pytest.fail("the model ran again"))
    assert nbb.build_index(tiny, SENTENCES, 1) == first
    assert nbb.index_state(tiny, SENTENCES, 1)["state"] == "ready"
    assert nbb.index_state(tiny, SENTENCES, 2)["state"] == "missing"


def test_an_interrupted_build_leaves_no_entry_and_resumes(tiny, cache, monkeypatch):
    monkeypatch.setattr(nbb, "SHARD_SENTENCES", 8)
    path = nbb.index_path(tiny, SENTENCES, 2)
    with pytest.raises(KeyboardInterrupt):  # as if killed after two shards
        nbb.build_index(tiny, SENTENCES, 2, stop_after_shards=2)
    assert not path.exists() and not nbb.is_complete(path)
    assert nbb.index_state(tiny, SENTENCES, 2)["state"] == "stopped"  # the lock is free, the work is not done
    with pytest.raises(nbb.IndexMissing):
        nb.NeighbourIndex.open(path)
    # a kill in the middle of writing the entry leaves a temporary folder, which is never trusted
    stale = path.parent / f".{path.name}.x1y2"
    (stale / "sub").mkdir(parents=True)
    (stale / "vectors.npy").write_bytes(b"half")
    assert not nbb.is_complete(path)

    computed = []
    real = nbb._encode_shard
    monkeypatch.setattr(nbb, "_encode_shard", lambda loaded, texts, *a: computed.append(len(texts)) or
                        real(loaded, texts, *a))
    nbb.build_index(tiny, SENTENCES, 2)
    distinct = len(dict.fromkeys(SENTENCES))
    assert sum(computed) == distinct - 16  # the two finished shards were not computed again
    assert not stale.exists() and nbb.is_complete(path)
    assert not (jobs.work_dir(path) / "shards").exists()
    resumed = nb.NeighbourIndex.open(path)

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(cache.parent / "fresh"))  # the same index in one go
    fresh = nb.NeighbourIndex.open(nbb.build_index(tiny, SENTENCES, 2)[2])
    assert np.array_equal(np.asarray(resumed.vectors), np.asarray(fresh.vectors))
    assert np.array_equal(resumed.unit, fresh.unit) and resumed.texts == fresh.texts


def test_a_failed_build_says_why(tiny, cache, monkeypatch):
    monkeypatch.setattr(nbb, "_encode_shard", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("out of memory")))
    with pytest.raises(RuntimeError):
        nbb.build_index(tiny, SENTENCES, 1)
    s = nbb.index_state(tiny, SENTENCES, 1)
    assert s["state"] == "failed" and "out of memory" in s["error"]


def _full_after_two_parts(monkeypatch):
    """np.savez as on a disk that fills up during the third part: half a file, then ENOSPC."""
    import errno

    real, written = np.savez, []

    def savez(file, **arrays):
        if len(written) >= 2:
            with open(file, "wb") as f:
                f.write(b"half a part")
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(file)
        return real(file, **arrays)

    monkeypatch.setattr(nbb.np, "savez", savez)
    return real


def test_a_full_disk_keeps_the_finished_parts_and_says_what_the_build_needs(tiny, cache, monkeypatch):
    monkeypatch.setattr(nbb, "SHARD_SENTENCES", 8)
    path = nbb.index_path(tiny, SENTENCES, 2)
    savez = _full_after_two_parts(monkeypatch)
    with pytest.raises(OSError) as e:
        nbb.build_index(tiny, SENTENCES, 2)
    shards = jobs.work_dir(path) / "shards"
    n = -(-len(dict.fromkeys(SENTENCES)) // 8)
    takes = nbb.full_disk.size_text(nbb.build_disk_bytes(nbb.corpus_units(tiny.tokenizer, SENTENCES).tokens, 32))
    assert str(e.value).startswith(f"no space left in {cache} to write the index of layer 2 (")
    assert str(e.value).endswith(f"free); 2 of its {n} parts are finished and kept, so building again resumes from "
                                 f"them once space is freed (the build takes about {takes} while it runs: its parts "
                                 "and the finished index side by side)")
    state = nbb.index_state(tiny, SENTENCES, 2)
    assert state["state"] == "failed" and state["error"] == str(e.value)  # the page shows this sentence
    assert sorted(p.name for p in shards.iterdir()) == ["shard-00000.npz", "shard-00001.npz"]  # no half part
    assert not path.exists()

    monkeypatch.setattr(nbb.np, "savez", savez)  # space is freed
    computed = []
    real = nbb._encode_shard
    monkeypatch.setattr(nbb, "_encode_shard", lambda loaded, texts, *a: computed.append(len(texts)) or
                        real(loaded, texts, *a))
    nbb.build_index(tiny, SENTENCES, 2)
    assert sum(computed) == len(dict.fromkeys(SENTENCES)) - 16 and nbb.is_complete(path)


def test_one_builder_per_index(tiny, cache):
    path = nbb.index_path(tiny, SENTENCES, 1)
    with jobs.builder_lock(path):  # another process is building it
        assert nbb.index_state(tiny, SENTENCES, 1)["state"] == "building"
        assert "already being built" in jobs.start_build(path, ["--never-run"], one_at_a_time=False)  # no second build
        with pytest.raises(jobs.BuildBusy):
            nbb.build_index(tiny, SENTENCES, 1)
        assert [b["entry"] for b in jobs.builds_running()] == [path.name]
    assert jobs.builds_running() == []


def test_pick_token_and_layers_are_checked(tiny):
    assert nb.pick_token(tiny, "the bank raised rates", "bank") == 2
    assert nb.pick_token(tiny, "the bank raised rates", "3") == 3
    with pytest.raises(ValueError, match="not in the sentence"):
        nb.pick_token(tiny, "the bank raised rates", "river")
    with pytest.raises(ValueError, match="outside the sentence"):
        nb.pick_token(tiny, "the bank", 5)
    with pytest.raises(ValueError, match="layers 1-2"):
        nb.query_vector(tiny, "the bank", 1, 3)


# ----- the command line ---------------------------------------------------------------------------
@pytest.fixture
def corpus_file(tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_text("\n".join(SENTENCES) + "\n")  # one sentence a line
    return f


def test_cli_builds_and_queries(tiny, cache, corpus_file, tmp_path, capsys):
    from bert_explorer.cli.neighbours import main

    model = str(tiny.path)
    assert main(["query", "--model", model, "--layer", "2", "--text", "the bank", "--token", "bank",
                 "--corpus", str(corpus_file)]) == 2
    assert "not built yet" in capsys.readouterr().err
    # no --no-progress: stderr is not a terminal here, as in a log file, so lines, not a bar's carriage returns
    assert main(["build", "--model", model, "--layer", "0,2", "--corpus", str(corpus_file)]) == 0
    err = capsys.readouterr().err
    assert "layer 0:" in err and "layer 2:" in err
    assert "\r" not in err and re.search(r"^100% ", err, re.M), err
    out = tmp_path / "hits.json"
    assert main(["query", "--model", model, "--layer", "2", "--text", "the bank raised rates", "--token", "bank",
                 "--k", "5", "--corpus", str(corpus_file), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["token"] == "bank" and len(record["hits"]) == 5 and record["position"] == 2
    assert record["hits"][0]["similarity"] >= record["hits"][-1]["similarity"]
    assert record["caption"] in printed
    h = record["hits"][0]
    assert h["sentence"][h["start"]:h["end"]].lower().startswith(h["token"].lstrip("#"))
    # mistakes are one line and exit 2
    assert main(["query", "--model", model, "--layer", "2", "--text", "the bank", "--token", "river",
                 "--corpus", str(corpus_file)]) == 2
    assert "not in the sentence" in capsys.readouterr().err
    assert main(["build", "--model", model, "--layer", "7", "--corpus", str(corpus_file)]) == 2
    assert "layer 7 does not exist" in capsys.readouterr().err
    assert main(["build", "--model", model, "--layer", "1", "--corpus", "no-such-corpus"]) == 2


def test_register_adds_the_command_to_a_parser():
    import argparse

    from bert_explorer.cli.neighbours import cmd_build, cmd_query, register

    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="command"))
    a = p.parse_args(["neighbours", "build", "--model", "m", "--layer", "0,6"])
    assert a.func is cmd_build and a.layer == [0, 6] and a.corpus == "bbc"
    a = p.parse_args(["neighbours", "query", "--model", "m", "--layer", "3", "--text", "x", "--token", "x"])
    assert a.func is cmd_query and a.k == 10


def test_the_hits_asked_for_are_bounded(capsys):
    """--k 100000000 was taken: on the BBC index a million hits, each a dict of its context, built and printed."""
    from bert_explorer.cli import main

    with pytest.raises(SystemExit) as e:
        main(["neighbours", "query", "--model", "minilm", "--layer", "0", "--text", "x", "--token", "x",
              "--k", "100000000"])
    assert e.value.code == 2 and "--k: expected a whole number from 1 to 1,000, got 100,000,000" in \
        capsys.readouterr().err
    with pytest.raises(ValueError, match="the hits asked for must be a whole number from 1 to 1,000"):
        nb.nearest(None, type("Index", (), {"meta": {}})(), "x", 1, 0, k=10**8)


# ----- the page ---------------------------------------------------------------------------------------
def _page(monkeypatch, corpus_file):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(nb, "PAGE_CORPORA", {"tiny": str(corpus_file)})
    at = AppTest.from_file("../pages/9_Nearest_neighbours.py", default_timeout=120)
    return at


def test_page_offers_a_build_then_shows_hits(cache, corpus_file, monkeypatch):
    at = _page(monkeypatch, corpus_file).run()
    assert not at.exception
    assert any("exBERT" in m.value and "Devlin et al. 2019" in m.value for m in at.markdown)
    assert at.button(key="nn_build").label == "Build the index of layer 6"
    assert any("tokens/s" in m.value and "about" in m.value for m in at.markdown)  # the measured estimate
    # Prepare for class builds the index of the layer the page opens on, so a prepared class sees hits at once,
    # and the embeddings' (layer 0), which the page's caption asks to compare it with (a student got "not prepared")
    from bert_explorer.analysis import lesson
    embeddings, prepared = lesson.builds(checkpoint.DEFAULT_MODEL, checkpoint.load(checkpoint.DEFAULT_MODEL,
                                                                                   "BertModel"), {"index"}, estimate=False)
    assert prepared.argv[prepared.argv.index("--layer") + 1] == str(at.selectbox(key="nn_layer").value) == "6"
    assert embeddings.argv[embeddings.argv.index("--layer") + 1] == "0" and embeddings.name == "index (layer 0)"
    assert any("compare layer 0 with layer 6" in c.value for c in at.caption)

    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertModel")  # the page's model, built here directly
    nbb.build_index(loaded, str(corpus_file), [0, 6])
    at.run()
    assert not at.exception
    hits = at.dataframe[0].value
    assert len(hits) == 10 and hits["similarity"].is_monotonic_decreasing
    assert any("10 nearest tokens" in c.value and "searched" in c.value for c in at.caption)
    at.selectbox(key="nn_layer").set_value(0).run()
    assert not at.exception
    assert "interest" in set(at.dataframe[0].value["hit"].str.lower())
    at.checkbox(key="nn_compare").check().run()
    layers = at.dataframe[1].value  # (AppTest does not see data frames' keys)
    assert list(layers["layer"]) == [0, 6]
    assert all(layers["nearest other tokens"])  # (here other tokens are among the 10)


def test_page_says_when_every_hit_is_the_same_token(cache, tmp_path, monkeypatch):
    corpus = tmp_path / "rates.txt"  # "interest" 12 times, so the 10 nearest are all "interest"
    corpus.write_text("\n".join(f"the bank raised interest rates by {n} points ." for n in range(12)) + "\n")
    at = _page(monkeypatch, corpus)
    nbb.build_index(checkpoint.load(checkpoint.DEFAULT_MODEL, "BertModel"), str(corpus), [0, 6])
    at.run()
    at.checkbox(key="nn_compare").check().run()
    assert not at.exception
    layers = at.dataframe[1].value
    assert list(layers["same token in the top 10"]) == [10, 10]
    assert list(layers["nearest other tokens"]) == ["none: only “interest”"] * 2  # not an empty cell


def test_page_button_builds_in_the_background(cache, corpus_file, monkeypatch):
    at = _page(monkeypatch, corpus_file).run()
    at.selectbox(key="nn_layer").set_value(1)
    at.button(key="nn_build").click().run()
    assert not at.exception
    assert any("Building the index of layer 1" in h.value for h in at.subheader)
    deadline = time.time() + 180
    while time.time() < deadline and not len(at.dataframe):
        time.sleep(2)
        at.run()
    assert not at.exception
    assert len(at.dataframe[0].value) == 10


def test_page_says_why_a_build_did_not_start(cache, corpus_file, monkeypatch):
    """Pressing Build starts nothing when the cache's quota has no room and what fills it is in
    use (here a probe's result being read): the page says so in one sentence."""
    from bert_explorer import disk_cache

    at = _page(monkeypatch, corpus_file).run()
    monkeypatch.setenv(disk_cache.QUOTA_ENV, "0.000001")  # 1 kB
    monkeypatch.setattr(jobs, "spawn", lambda *a, **k: pytest.fail("a build was started"))
    other = disk_cache.entry("probe-result", None, name="open")
    with disk_cache.writing(other) as tmp:
        (tmp / "result.json").write_bytes(b"x" * 2000)
    with disk_cache.reading(other):
        at.button(key="nn_build").click().run()
    assert not at.exception
    assert any(i.value.startswith("The cache has no room for this build") for i in at.info)


def test_page_says_a_full_disk_and_how_much_space_the_build_needs(cache, corpus_file, monkeypatch):
    from bert_explorer import full_disk

    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertModel")  # the page's model and layer
    monkeypatch.setattr(nbb, "SHARD_SENTENCES", 8)
    savez = _full_after_two_parts(monkeypatch)
    with pytest.raises(OSError):
        nbb.build_index(loaded, str(corpus_file), 6)
    monkeypatch.setattr(nbb.np, "savez", savez)
    monkeypatch.setattr(full_disk, "free_bytes", lambda folder: 1_000)  # and there is still no room
    at = _page(monkeypatch, corpus_file).run()
    assert not at.exception
    error = at.error[0].value
    assert error.startswith(f"The last build of this index failed: no space left in {cache} to write the index of "
                            "layer 6") and "2 of its" in error and "building again resumes from them" in error
    assert not any(e.value.startswith("OSError") for e in at.error)
    est = nbb.estimate_build_seconds(loaded, str(corpus_file), 6)
    need = full_disk.size_text(est["build_disk_bytes"])
    assert any(f"the build needs about **{need}** free in the cache folder {cache}" in w.value
               and "free there now: 1 kB" in w.value for w in at.warning)


def test_in_classroom_mode_only_the_teacher_builds_an_index(cache, corpus_file, monkeypatch):
    """Served to a class, a student's visit counts and builds nothing (minutes of CPU): one sentence says
    the index is not prepared; the teacher's session (the teacher's link) has the Build button."""
    from streamlit import config as st_config

    from bert_explorer.app import roles

    monkeypatch.delenv("BERT_EXPLORER_ALLOW_WRITES", raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        at = _page(monkeypatch, corpus_file).run()
        assert not at.exception and not [b for b in at.button if b.key == "nn_build"]
        assert any("is not prepared for this model yet; your teacher can prepare it" in i.value and
                   ("(the build index)" in i.value or "on this page with these settings" in i.value) for i in at.info)
        assert not any("tokens/s" in m.value for m in at.markdown)  # nothing was counted for the estimate
        teacher = _page(monkeypatch, corpus_file)
        teacher.query_params[roles.QUERY] = roles.token()
        teacher.run()
        assert not teacher.exception and teacher.button(key="nn_build")
    finally:
        st_config.set_option("server.address", before)


def test_the_intro_does_not_call_a_word_at_layer_0_one_vector_wherever_it_stands(cache, corpus_file, monkeypatch):
    """Layer 0 adds the position embedding (Devlin et al. 2019, Figure 2): the same word at two
    places is two vectors, so the page must not say it is one; it says where the difference comes from."""
    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertModel")
    a, b = "the bank put up interest rates again .", "interest in football has grown ."
    va = nb.query_vector(loaded, a, nb.pick_token(loaded, a, "interest"), 0)
    vb = nb.query_vector(loaded, b, nb.pick_token(loaded, b, "interest"), 0)
    assert float(va @ vb) < 0.999  # unit vectors: not the same vector
    at = _page(monkeypatch, corpus_file).run()
    intro = next(m.value for m in at.markdown if "exBERT" in m.value)
    assert "same vector wherever" not in intro
    assert "position" in intro.split("layer 0")[1].split(";")[0]


def test_an_estimate_reads_the_corpus_counts_kept_from_the_first_one(tiny, cache, monkeypatch):
    """A page's first visit shows the build's estimate: the corpus is tokenised for it once, its
    counts kept in the disk cache; the next estimate (another server, the same vocabulary and
    corpus) reads them and counts the same tokens and sentences without tokenising anything."""
    first = nbb.estimate_build_seconds(tiny, SENTENCES, 1)
    units = nbb.corpus_units(tiny.tokenizer, SENTENCES)
    assert (first["tokens"], first["sentences"]) == (units.tokens, len(units.pieces))
    nbb._last_units.clear()  # a new process: nothing kept in memory

    def no_tokenising(*a, **k):
        raise AssertionError("tokenised again")

    monkeypatch.setattr(nbb, "corpus_units", no_tokenising)
    again = nbb.estimate_build_seconds(tiny, SENTENCES, 1)
    assert (again["tokens"], again["sentences"], again["seconds"]) == (first["tokens"], first["sentences"],
                                                                       first["seconds"])
    other = [s + " too" for s in SENTENCES]  # another corpus is counted anew
    with pytest.raises(AssertionError, match="tokenised again"):
        nbb.estimate_build_seconds(tiny, other, 1)
