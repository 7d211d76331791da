"""Heads on a map (``analysis/attention/head_map.py``): the distances between heads, classical
multidimensional scaling, the cache entry and the CLI, and the Attention page's *Head map* tab."""
import json
import re

import figcheck
import numpy as np
import pytest
import shared

from bert_explorer import checkpoint
from bert_explorer.analysis.attention import clark, flow, head_map
from bert_explorer.analysis.comparison.measures import js_distance
from bert_explorer.tokenizer import WordPieceTokenizer

DOCS = [
    ["Richard Dedekind was a German mathematician.", "He worked on abstract algebra, number theory and the reals.",
     "His cuts define the real numbers.", "Unhappiness with vague proofs drove him, and rigour followed."],
    ["The river flooded the town after three days of rain.", "Farmers lost their crops, cattle and homes.",
     "The government promised help.", "Engineers later built a higher embankment along the riverbank."],
]


def _tiny(folder, minilm_dir, layers: int, heads: int, twins: bool = False):
    """A random BERT whose heads attend sharply; with ``twins`` head 2 of layer 1 is given head 1's
    queries and keys, so the same attention."""
    def same_as_head_1(model):
        first = model.encoder.layer[0].attention.self
        for proj in (first.query, first.key):
            proj.weight[8:16] = proj.weight[0:8]
            proj.bias[8:16] = proj.bias[0:8]

    return shared.sharp_uncased(folder / "model", minilm_dir, layers, heads, hidden=8 * heads,
                                edit=same_as_head_1 if twins else None)


@pytest.fixture(scope="module")
def segments(minilm_dir):
    return clark.make_segments(WordPieceTokenizer(minilm_dir / "vocab.txt"), DOCS, segments=6, seed=1, max_len=24)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(clark, "load_corpus", lambda name: DOCS * 3)  # (the real corpus takes seconds to cut)
    return tmp_path / "cache"


def test_distances_are_the_mean_js_distance_of_the_rows():
    rng = np.random.default_rng(0)
    att = np.exp(2 * rng.normal(size=(2, 2, 5, 5)))
    att /= att.sum(-1, keepdims=True)
    d = head_map.head_distances(att)
    flat = att.reshape(4, 5, 5)
    for i in range(4):
        for j in range(4):
            expected = np.mean([js_distance(flat[i, q], flat[j, q]) for q in range(5)])
            assert d[i, j] == pytest.approx(expected, abs=1e-12)
    assert np.allclose(d, d.T) and np.all(np.diag(d) == 0) and d[0, 1] > 0


def test_two_heads_with_identical_attention_sit_at_distance_zero(tmp_path, minilm_dir, segments):
    loaded = _tiny(tmp_path, minilm_dir, layers=2, heads=3, twins=True)
    m = head_map.measure(loaded, segments)
    assert m.distances[0, 1] == pytest.approx(0.0, abs=1e-9)
    assert np.allclose(m.coords[0], m.coords[1], atol=1e-6)       # one place on the map
    others = m.distances[np.triu_indices(6, 1)][1:]
    assert (others > 1e-3).all()                                   # every other pair is apart
    assert list(m.table["layer"]) == [0, 0, 0, 1, 1, 1] and list(m.table["head"]) == [0, 1, 2] * 2
    assert m.table.loc[0, "to_prev"] == pytest.approx(m.table.loc[1, "to_prev"])


def test_three_heads_are_drawn_at_exactly_their_distances(tmp_path, minilm_dir, segments):
    """Any three distances that obey the triangle inequality are those of a triangle in the plane, so
    the map must keep them exactly, and with them their order."""
    loaded = _tiny(tmp_path, minilm_dir, layers=1, heads=3)
    m = head_map.measure(loaded, segments)
    computed, drawn = m.distances, m.map_distances()
    assert np.allclose(drawn, computed, atol=1e-6)
    upper = np.triu_indices(3, 1)
    assert list(np.argsort(drawn[upper])) == list(np.argsort(computed[upper]))
    assert len(set(np.round(computed[upper], 4))) == 3             # three different distances to order
    assert m.explained == pytest.approx(1.0) and m.rank_correlation == pytest.approx(1.0)


def test_the_maps_distances_keep_the_order_of_the_computed_ones_on_a_tiny_model(tmp_path, minilm_dir, segments):
    """2 layers x 4 heads: eight random heads do not fit the plane exactly, so the map keeps the order of
    their distances only in part; it says how much (Spearman's rho over the 28 pairs, computed here
    independently), and far more than a random placement would."""
    loaded = _tiny(tmp_path, minilm_dir, layers=2, heads=4)
    m = head_map.measure(loaded, segments)
    upper = np.triu_indices(8, 1)
    a, b = m.map_distances()[upper], m.distances[upper]
    ranks = lambda x: np.argsort(np.argsort(x))
    rho = np.corrcoef(ranks(a), ranks(b))[0, 1]
    assert m.rank_correlation == pytest.approx(rho)
    assert rho > 0.5
    rng = np.random.default_rng(0)
    shuffled = rng.normal(size=(8, 2))
    c = np.linalg.norm(shuffled[:, None] - shuffled[None], axis=-1)[upper]
    assert abs(np.corrcoef(ranks(c), ranks(b))[0, 1]) < rho


def test_classical_mds_gives_points_of_the_plane_back():
    rng = np.random.default_rng(3)
    pts = rng.normal(size=(7, 2))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    coords, explained = head_map.classical_mds(d)
    assert np.allclose(np.linalg.norm(coords[:, None] - coords[None], axis=-1), d, atol=1e-9)
    assert explained == pytest.approx(1.0)


def test_a_click_on_the_map_names_its_head():
    assert head_map.head_from_selection({"points": [{"customdata": [3, 7, "broad"]}]}, 12) == (2, 6)
    assert head_map.head_from_selection({"points": []}, 12) is None
    assert head_map.head_from_selection(None, 12) is None


def test_cli_builds_once_and_prints_the_map(tmp_path, minilm_dir, cache, monkeypatch, capsys):
    from bert_explorer.cli import main

    loaded = _tiny(tmp_path, minilm_dir, layers=2, heads=2)
    argv = ["head-map", "build", "--model", str(loaded.path), "--segments", "3", "--corpus", "wiki", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    built = head_map.read_map(head_map.map_path(loaded, "wiki", 3))
    assert out["segments"] == built.segments == 3 and len(out["heads"]) == 4
    assert [(h["layer"], h["head"]) for h in out["heads"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert np.allclose(out["distances"], built.distances, atol=1e-6)
    monkeypatch.setattr(head_map, "measure", lambda *a, **k: pytest.fail("measured again"))
    assert main(argv[:-1]) == 0
    assert "Spearman's rho" in capsys.readouterr().out
    assert main(["head-map", "build", "--model", str(loaded.path), "--segments", "0"]) == 2


# ----- the page -----------------------------------------------------------------------------------------
def _page(**state):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/2_Attention.py", default_timeout=180)
    for k, v in state.items():
        at.session_state[k] = v
    return at.run()


def test_the_page_draws_the_map_of_the_default_model_and_flow_beside_rollout(cache):
    """With the map of minilm-mlm-nsp built (3 segments here), the Head map tab draws every head, coloured
    by layer and by behaviour, with its measures on hover, and says how faithful the map is; the Rollout
    and flow tab draws both for the default input, with the time the flows took. (The figure checker
    checks every chart drawn.)"""
    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertModel")
    head_map.build_map(loaded, clark.default_corpus(), 3)
    built = head_map.read_map(head_map.map_path(loaded, clark.default_corpus(), 3))
    at = _page(att_map_segments=3, att_view="Head map")
    assert not at.exception
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    maps = [c for c in charts if "heads, coloured by" in json.dumps(c["layout"].get("title", ""))]
    assert maps, "no head map drawn"
    names = {t.get("name") for c in maps for t in c["data"]}
    assert {"layer 1", "layer 6"} <= names and set(built.table["behaviour"]) <= names
    hover = maps[0]["data"][0]["hovertemplate"]
    assert "[SEP]" in hover and "previous token" in hover and "entropy" in hover  # the head's measures
    # the table of the heads names every measure in words (it showed a raw "uniform_entropy")
    points = next(d.value for d in at.dataframe if {"x", "y", "previous token"} <= set(d.value.columns))
    assert not [c for c in points.columns if "_" in c], list(points.columns)
    assert sum(len(figcheck.decode(t["x"])) for t in maps[0]["data"]) == 72     # every head once
    # side by side, the two maps share no colour (dark blue was layer 1 on one and "broad" on the other); the
    # layers' colours are distinct and go in their order along one scale, light for the last
    colours = [{t["name"]: t["marker"]["color"] for t in c["data"]} for c in maps]
    by_layer, by_behaviour = (colours if "layer 1" in colours[0] else colours[::-1])
    assert not set(by_layer.values()) & set(by_behaviour.values())
    layer_colours = [by_layer[f"layer {i}"] for i in range(1, 7)]
    assert len(set(layer_colours)) == 6
    brightness = [sum(int(v) for v in re.findall(r"[\d.]+", c)[:3]) for c in layer_colours]  # "rgb(r, g, b)"
    assert brightness == sorted(brightness), layer_colours
    # a behaviour is told by its shape too, not by colour alone (red, orange and pink read alike to many)
    behaviour_map = next(c for c in maps if "by behaviour" in json.dumps(c["layout"].get("title", "")))
    shapes = {t["name"]: t["marker"].get("symbol") for t in behaviour_map["data"]}
    assert None not in shapes.values() and len(set(shapes.values())) == len(shapes), shapes
    texts = [c.value for c in at.caption] + [m.value for m in at.markdown]
    assert any(f"Spearman's ρ = {built.rank_correlation:.2f}" in t for t in texts)
    assert any("Clark et al. (2019" in t for t in texts)
    at = _page(att_view="Rollout and flow", att_flow_position=2)
    assert not at.exception
    flows = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    bars = next(c for c in flows if "rollout and attention flow" in json.dumps(c["layout"].get("title", "")))
    assert {t["name"] for t in bars["data"]} == {"rollout", "attention flow"}
    texts = [c.value for c in at.caption] + [m.value for m in at.markdown]
    assert any(re.search(r"The \d+ max-flows on this model.s graph of 7 × \d+ nodes took [\d.]+ s", t) for t in texts)
    assert any("Abnar & Zuidema" in t for t in texts)


def test_above_the_bound_the_page_says_why_there_is_no_flow_and_keeps_rollout(cache):
    at = _page(att_view="Rollout and flow", be_sentence_a=" ".join(["word"] * 80))
    assert not at.exception
    assert any(f"at most {flow.MAX_TOKENS} tokens" in i.value for i in at.info)
    titles = [json.dumps(json.loads(c.proto.spec)["layout"].get("title", "")) for c in at.get("plotly_chart")]
    assert not any("rollout and attention flow" in t for t in titles) and any("[CLS] vector" in t for t in titles)
