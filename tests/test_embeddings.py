"""The input representation (paper, Section 3, Figure 2), its analyses and its page of the app (Tokens and embeddings)."""
import base64
import json
import re

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from bert_explorer.analysis import embeddings as emb
from bert_explorer.checkpoint import Loaded
from bert_explorer.checkpoint import load as load_checkpoint
from shared import needs_model, tiny_loaded


WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "bank", "river", "money", "sat", "on",
         "he", "she", "opened", "a", "account", "raised", "rates", "is", "open", "closed", "##ing", "un",
         "##der", ".", "walk", "##ed"]


@pytest.fixture(scope="module")
def tiny() -> Loaded:
    """A random 2-layer BERT with a small vocabulary: every test here must hold for any weights."""
    loaded = tiny_loaded(WORDS, positions=40,
                         initializer_range=0.3)  # larger than 0.02, so attention moves the vectors visibly
    with torch.no_grad():  # LayerNorm gains/biases away from 1/0, so a skipped LayerNorm would show
        for m in loaded.model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    return loaded


def test_parts_sum_and_layernorm_match_the_model(tiny):
    rep = emb.input_representation(tiny, "he sat on the river bank .", "she opened a bank account")
    bert = tiny.model.bert
    ids = torch.tensor([rep.input_ids])
    seg = torch.tensor([rep.segment_ids])
    assert rep.tokens[0] == "[CLS]" and rep.segment_ids[-1] == 1 and rep.segment_ids[0] == 0
    # each part is the right row of its table
    w = bert.embeddings
    np.testing.assert_allclose(rep.token, w.word_embeddings.weight[ids[0]].detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(rep.segment, w.token_type_embeddings.weight[seg[0]].detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(rep.position, w.position_embeddings.weight[: len(rep.tokens)].detach().numpy(),
                               atol=1e-6)
    np.testing.assert_allclose(rep.token + rep.segment + rep.position, rep.summed, atol=1e-6)
    with torch.no_grad():
        out = bert.embeddings(ids, seg)[0].numpy()                                          # [T, H]
        h0 = bert(ids, seg, output_hidden_states=True).hidden_states[0][0].numpy()          # [T, H]
    np.testing.assert_allclose(rep.after_layernorm, out, atol=1e-5)
    np.testing.assert_allclose(rep.after_layernorm, h0, atol=1e-5)
    assert not np.allclose(rep.summed, rep.after_layernorm, atol=1e-2)  # LayerNorm did something
    norms = rep.norms()
    assert set(norms) == set(emb.PARTS) and all(len(v) == len(rep.tokens) for v in norms.values())
    np.testing.assert_allclose(norms["token"], np.linalg.norm(rep.token, axis=-1), rtol=1e-6)
    frame = rep.norms_frame()
    assert len(frame) == len(emb.PARTS) * len(rep.tokens)
    # the page's caption: the range of the sums' lengths before and after LayerNorm, from the model's own h0
    lengths = np.linalg.norm(h0, axis=-1)
    shortest, longest, times = rep.length_range("after LayerNorm")
    assert (shortest, longest) == pytest.approx((lengths.min(), lengths.max()), rel=1e-5)
    assert times == pytest.approx(lengths.max() / lengths.min(), rel=1e-5)


def test_table_lists_pieces_ids_segments_positions(tiny):
    rep = emb.input_representation(tiny, "walked under", "bank")
    t = rep.table()
    assert t["piece"].tolist() == ["[CLS]", "walk", "##ed", "un", "##der", "[SEP]", "bank", "[SEP]"]
    assert t["segment"].tolist() == ["A"] * 6 + ["B"] * 2
    assert t["position"].tolist() == list(range(8))
    assert t["id"].tolist() == [WORDS.index(p) for p in t["piece"]]


def test_long_input_is_truncated_and_flagged(tiny):
    rep = emb.input_representation(tiny, " ".join(["bank"] * 60))
    assert rep.truncated and len(rep.tokens) == tiny.config.max_position_embeddings


def test_position_similarity_is_a_cosine_matrix(tiny):
    sim = emb.position_similarity(tiny, 16)
    assert sim.shape == (16, 16)
    np.testing.assert_allclose(np.diag(sim), 1.0)
    np.testing.assert_array_equal(sim, sim.T)
    assert (sim <= 1.0 + 1e-6).all() and (sim >= -1.0 - 1e-6).all()
    p = tiny.model.bert.embeddings.position_embeddings.weight.detach().numpy()
    expect = p[3] @ p[7] / (np.linalg.norm(p[3]) * np.linalg.norm(p[7]))
    assert sim[3, 7] == pytest.approx(expect, abs=1e-5)
    assert emb.position_similarity(tiny, 10_000).shape == (40, 40)  # clipped to the table


def test_pca_finds_the_direction_of_a_line():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=10)
    direction /= np.linalg.norm(direction)
    t = np.linspace(-5, 5, 30)
    points = 3.0 + t[:, None] * direction[None, :] + 0.01 * rng.normal(size=(30, 10))  # [N, H]
    proj = emb.pca_2d(points)
    assert proj.coords.shape == (30, 2)
    assert abs(proj.components[0] @ direction) > 0.999
    assert proj.explained_variance_ratio[0] > 0.99
    # the first coordinate is the position along the line (up to sign)
    assert abs(np.corrcoef(proj.coords[:, 0], t)[0, 1]) > 0.999
    with pytest.raises(ValueError):
        emb.pca_2d(points[:1])


def test_tsne_keeps_two_clusters_apart():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 8))
    b = rng.normal(size=(6, 8)) + 20.0
    proj = emb.project(np.vstack([a, b]), "tsne")
    assert proj.coords.shape == (12, 2) and proj.method == "tsne"
    ca, cb = proj.coords[:6], proj.coords[6:]
    within = max(np.linalg.norm(ca - ca.mean(0), axis=1).max(), np.linalg.norm(cb - cb.mean(0), axis=1).max())
    assert np.linalg.norm(ca.mean(0) - cb.mean(0)) > 2 * within
    with pytest.raises(ValueError, match="at least 4"):
        emb.tsne_2d(a[:3])
    with pytest.raises(ValueError, match="unknown projection"):
        emb.project(a, "umap")


def test_static_word_vectors_average_the_pieces(tiny):
    wv = emb.static_word_vectors(tiny, ["bank", "walked", "Bank", "river"])
    assert wv.words == ["bank", "walked", "river"]       # "Bank" lower-cases to a repeat
    assert wv.pieces[1] == ["walk", "##ed"]
    table = tiny.model.bert.embeddings.word_embeddings.weight.detach().numpy()
    np.testing.assert_allclose(wv.vectors[0], table[WORDS.index("bank")], atol=1e-6)
    np.testing.assert_allclose(wv.vectors[1], (table[WORDS.index("walk")] + table[WORDS.index("##ed")]) / 2,
                               atol=1e-6)


def test_same_sentence_twice_is_identical_at_every_layer(tiny):
    s = "he sat on the river bank ."
    res = emb.contextual_similarity(tiny, "bank", [s, s])
    assert res.cosine.shape == (1, tiny.config.num_layers + 1)
    np.testing.assert_allclose(res.cosine, 1.0, atol=1e-5)


def test_context_changes_the_word_after_layer_zero(tiny):
    # "bank" is token 1 in both sentences, both in segment A: the same input embedding.
    res = emb.contextual_similarity(tiny, "bank", ["bank is open", "bank is closed", "the bank raised rates"])
    assert res.pairs == [(0, 1), (0, 2), (1, 2)]
    assert res.cosine[0, 0] == pytest.approx(1.0, abs=1e-5)
    assert (res.cosine[0, 1:] < 0.999).all()                 # context has reached "bank"
    assert res.cosine[1, 0] < 0.999                           # another position already differs at layer 0
    assert res.context.spans == [(1, 2), (1, 2), (2, 3)]
    frame = res.frame()
    assert len(frame) == 3 * (tiny.config.num_layers + 1)
    assert set(frame["layer"]) == set(range(tiny.config.num_layers + 1))


def test_a_word_in_several_pieces_is_averaged(tiny):
    ctx = emb.word_in_context(tiny, "walked", ["he walked on", "she walked"])
    assert ctx.pieces == ["walk", "##ed"] and ctx.spans == [(2, 4), (2, 4)]
    enc = tiny.tokenizer.encode("he walked on")
    with torch.no_grad():
        hs = tiny.model.bert(**tiny.tokenizer.tensors([enc]), output_hidden_states=True).hidden_states
    np.testing.assert_allclose(ctx.vectors[0, -1], hs[-1][0, 2:4].mean(0).numpy(), atol=1e-5)
    assert ctx.vectors.shape == (2, tiny.config.num_layers + 1, tiny.config.hidden_size)


def test_a_missing_word_raises_a_clear_error(tiny):
    with pytest.raises(ValueError, match="'bank'.*not in the sentence 'she opened a account'"):
        emb.contextual_similarity(tiny, "bank", ["he sat on the river bank", "she opened a account"])
    # a word is not found inside a longer word: "walk" + "##ed" is "walked", not "walk"
    with pytest.raises(ValueError, match="not in the sentence"):
        emb.word_in_context(tiny, "walk", ["he walked"])
    with pytest.raises(ValueError, match="at least two"):
        emb.contextual_similarity(tiny, "bank", ["the bank"])
    # there, but past the WordPieces that are read: said so, not "not in the sentence"
    with pytest.raises(ValueError, match=r"'bank' comes after the first 16 WordPieces of the sentence 'the river"):
        emb.word_in_context(tiny, "bank", ["the river " + "x " * 30 + "bank"], max_tokens=16)


@needs_model("explorer-mini")
def test_river_bank_drifts_away_from_money_bank_on_the_default_model():
    """On a model that knows English (minilm-mlm-nsp), "bank" by a river and "bank" of money
    start alike (the same word embedding) and drift apart through the layers, while the two
    money senses stay close: contextual vectors separate word senses."""
    loaded = load_checkpoint("minilm-mlm-nsp", "BertForPreTraining")
    res = emb.contextual_similarity(loaded, "bank", ["he sat on the river bank", "she opened a bank account",
                                                     "the bank raised rates"])
    assert res.pairs == [(0, 1), (0, 2), (1, 2)] and res.cosine.shape == (3, 7)  # embeddings + 6 layers
    river_money, money_money = res.cosine[:2], res.cosine[2]
    assert (river_money[:, 0] > 0.9).all() and money_money[0] > 0.9  # the word embedding: all alike
    assert (money_money[-1] > river_money[:, -1] + 0.1).all()        # the last layer: senses apart
    assert (river_money[:, 0] - river_money[:, -1] > 1.5 * (money_money[0] - money_money[-1])).all()


# ----- the page -------------------------------------------------------------------------------

PAGE = "../pages/1_Tokens_and_embeddings.py"


def _run(model: str | None = None):
    at = AppTest.from_file(PAGE, default_timeout=120)
    if model:
        at.session_state["be_model_choice"] = model
    return at.run()


def _check_page(at):
    assert not at.exception, at.exception
    assert any("Section 3" in m.value for m in at.markdown)
    charts = at.get("plotly_chart")
    assert len(charts) == 4  # norms, positions heatmap, projection, context lines
    for chart in charts:
        spec = json.loads(chart.proto.spec)
        assert spec["data"], "a chart with no traces"
        for trace in spec["data"]:
            values = trace.get("z") if trace.get("type") == "heatmap" else trace.get("y")
            assert values is not None and len(_values(values)) > 0
    table = at.dataframe[0].value
    assert list(table.columns[:5]) == ["piece", "id", "segment", "segment id", "position"]
    return table


def _values(v):
    """Plotly JSON stores numbers plain or as {"dtype", "bdata"} (base64); either way, non-empty."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
    return np.asarray(v)


def _norms_spec(at):
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")][0]


@needs_model("explorer-mini")
def test_page_shows_tables_and_charts_and_follows_sentence_a():
    at = _run()
    table = _check_page(at)
    assert table["piece"].tolist()[0] == "[CLS]" and "B" in table["segment"].tolist()
    norms = _norms_spec(at)
    # the log axis is ticked at 1, 2, 5 x powers of ten (plotly's own minor ticks read "4 5 6 7 8 9" for 0.4 ... 0.9)
    assert norms["layout"]["yaxis"]["type"] == "log" and {0.5, 1, 2, 10} <= set(norms["layout"]["yaxis"]["tickvals"])
    at.text_input(key="be_sentence_a").set_value("a completely different sentence about rivers").run()
    assert not at.exception
    new_table = at.dataframe[0].value
    assert new_table["piece"].tolist() != table["piece"].tolist()
    assert "rivers" in new_table["piece"].tolist() or "river" in new_table["piece"].tolist()
    assert _norms_spec(at) != norms
    assert not [c for c in at.caption if "typed in the text" in c.value or "`[UNK]`:" in c.value]
    # a special token typed as text is read as that token, and an [UNK] stands for a whole word: both said (a
    # second [CLS], id 101, stood in sentence A without a word)
    at.text_input(key="be_sentence_a").set_value("[CLS] the river 🍕 [SEP] flooded").run()
    pieces = at.dataframe[0].value["piece"].tolist()
    assert pieces.count("[CLS]") == 2 and "[UNK]" in pieces
    said = " ".join(c.value for c in at.caption)
    assert "`[CLS]`, `[SEP]` typed in the text are read as the special tokens themselves" in said
    assert "1 piece is `[UNK]`: a word holding a character this vocabulary has no piece for" in said


@needs_model("explorer-mini")
def test_page_tsne_context_map_and_missing_word():
    at = _run()
    at.radio(key="emb_proj_source").set_value("one word in several sentences")
    at.radio(key="emb_proj_method").set_value("t-SNE").run()
    assert not at.exception and len(at.get("plotly_chart")) == 4
    # the map says what this model computed: the nearest sentences' uses of the word, by cosine in its own space,
    # and what t-SNE's axes do not mean (the map had no caption; its axes spanned ±400)
    sentences = [x.strip() for x in at.text_area(key="emb_proj_sentences").value.splitlines() if x.strip()]
    ctx = emb.word_in_context(load_checkpoint(at.sidebar.selectbox(key="be_model_choice").value),
                              at.text_input(key="emb_proj_word").value, sentences)
    layer = at.slider(key="emb_proj_layer").value
    (a, b, c), *_ = emb.nearest_pairs(ctx.vectors[:, layer], [f"sentence {i + 1}" for i in range(len(ctx.sentences))])
    (said,) = [x.value for x in at.caption if x.value.startswith("Most similar in this model's own")]
    # (each name isolated in its own direction, U+2068 ... U+2069: an Arabic word beside a number drew reversed)
    assert f"(cosine): \u2068{a}\u2069–\u2068{b}\u2069 {c:.2f};" in said and "t-SNE (perplexity 1.7:" in said
    assert "distances between groups and their sizes mean nothing" in said
    at.text_input(key="emb_ctx_word").set_value("zebra").run()
    assert not at.exception
    assert any("not in the sentence" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 3  # the context chart gives way to the message
    # the word as typed: "$x$" was typeset as maths inside the message, "**x**" lost its stars
    at.text_input(key="emb_ctx_word").set_value("$x$ **y**").run()
    (said,) = [i.value for i in at.info if "not in the sentence" in i.value]
    assert "\\$x\\$ \\*\\*y\\*\\*" in said and not re.search(r"(?<!\\)[$*]", said), said


@needs_model("minilm")
def test_page_works_with_minilm():
    at = _run("minilm")
    table = _check_page(at)
    assert table["id"].tolist()[0] == 101  # [CLS] in the bert-base-uncased vocabulary
    heat = [c for c in at.get("plotly_chart") if "heatmap" in c.proto.spec]
    assert heat


def test_labels_of_close_points_go_to_different_sides():
    """Two names that land nearly on one spot (germany and china on the default model's PCA) are
    written on different sides; a crowd too dense for every label leaves some to the hover text."""
    coords = np.array([[0.0, 0.0], [0.02, 0.01], [1.0, 1.0], [0.5, -1.0]])
    labels = ["germany", "china", "king", "red"]
    places = emb.label_places(coords, labels)
    assert places[0] and places[1] and places[0] != places[1]
    boxes = [b for b in emb.label_boxes(coords, labels, places) if b]
    assert len(boxes) == 4
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3])
    crowd = np.zeros((30, 2)) + np.random.default_rng(0).normal(scale=1e-3, size=(30, 2))
    crowd[0] = [1, 1]
    assert None in emb.label_places(crowd, [f"word{i}" for i in range(30)])


def _projection(at):
    from figcheck import figures
    return next(f for f in figures(at) if "1" in f.axis_title("x") and f.axis_title("x").split()[0] in ("PCA", "t-SNE"))


@needs_model("explorer-mini")
def test_page_word_map_labels_do_not_overlap_and_the_caption_reads_the_lengths():
    at = _run()
    assert not at.exception
    fig = _projection(at)
    coords, labels, places = [], [], []
    for t in fig.traces:
        pos = t.raw.get("textposition", "top center")
        pos = [pos] * len(t.x) if isinstance(pos, str) else list(pos)
        for x, y, text, p in zip(t.x, t.y, t.raw.get("text") or [""] * len(t.x), pos):
            coords.append((float(x), float(y)))
            labels.append(str(text))
            places.append(p if text else None)
    boxes = [(lab, b) for lab, b in zip(labels, emb.label_boxes(np.array(coords), labels, places)) if b]
    assert len(boxes) > len(labels) / 2  # most words are written
    clashes = [(la, lb) for i, (la, a) in enumerate(boxes) for lb, b in boxes[i + 1:]
               if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]
    assert not clashes, f"labels written over each other: {clashes}"
    # the norms caption states the lengths the chart draws after LayerNorm
    from figcheck import figures
    norms = figures(at)[0]
    after = next(np.asarray(t.y, dtype=float) for t in norms.traces if t.name == "after LayerNorm")
    caption = next(c.value for c in at.caption if "LayerNorm" in c.value and "length" in c.value)
    assert f"after it, {after.min():.1f} to {after.max():.1f}" in caption
    assert "about the same length" not in caption


@needs_model("explorer-mini")
def test_page_context_map_has_a_key_from_numbers_to_sentences():
    at = _run()
    at.radio(key="emb_proj_source").set_value("one word in several sentences")
    at.radio(key="emb_proj_method").set_value("t-SNE").run()
    assert not at.exception
    sentences = at.text_area(key="emb_proj_sentences").value.splitlines()
    fig = _projection(at)
    assert fig.layout.get("showlegend") is True
    numbered = {str(t.raw["text"][0]): t.name for t in fig.traces if t.raw.get("text") is not None and len(t.x) == 1}
    for i, s in enumerate(sentences, start=1):
        assert numbered.get(str(i), "").startswith(f"{i}: {s[:40]}"), (i, numbered)


def test_position_band_tells_a_band_from_none():
    n = 32
    gap = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    banded = np.exp(-gap / 3.0)                    # neighbours alike, far positions not
    flat = np.eye(n) + (1 - np.eye(n)) * 0.05      # every pair alike as any other
    b, f = emb.position_band(banded), emb.position_band(flat)
    assert b["band"] and b["near"] == pytest.approx(np.mean([np.exp(-1 / 3), np.exp(-2 / 3)]), abs=0.02)
    assert b["far_from"] == 8 and b["far"] < 0.1
    assert not f["band"] and f["near"] == pytest.approx(0.05) and f["far"] == pytest.approx(0.05)
    assert emb.position_band(np.eye(2))["far"] is None


@needs_model("explorer-mini")
def test_position_caption_reads_the_heatmap_it_is_drawn_under():
    """The caption said "a bright band along the diagonal means ..." under a 40-step model's noise. It now
    gives this model's figures, which are those of the matrix drawn."""
    import re

    at = _run()
    (heat,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "position embeddings" in c.proto.spec]
    z = heat["data"][0]["z"]  # plotly's typed array: {"dtype", "bdata", "shape": "64, 64"}
    z = _values(z).astype(float).reshape([int(k) for k in z["shape"].split(",")])
    band = emb.position_band(z)
    (said,) = [c.value for c in at.caption if "Transformer's fixed sinusoids" in c.value]
    near, far = map(float, re.search(r"mean cosine of (-?[\d.]+) and positions \d+ or more apart (-?[\d.]+)", said).groups())
    assert near == pytest.approx(band["near"], abs=0.006) and far == pytest.approx(band["far"], abs=0.006)
    assert ("the red band along the diagonal" in said) == band["band"]


def test_nearest_pairs_are_by_cosine_in_the_vectors_own_space():
    pairs = emb.nearest_pairs([[1.0, 0.0], [10.0, 1.0], [1.0, 1.0], [-1.0, 0.1]], ["a", "b", "c", "d"], k=2)
    assert [(x, y) for x, y, _ in pairs] == [("a", "b"), ("b", "c")]
    assert pairs[0][2] == pytest.approx(10 / np.sqrt(101))
