"""Attention flow (``analysis/attention/flow.py``): the max-flow solver against every cut of small
graphs, the flow of an attention graph against the cuts of the whole (L + 1) · T-node graph, rollout
as it was, the length bound, and the CLI."""
import itertools
import json

import numpy as np
import pytest

from bert_explorer.analysis.attention import flow
from bert_explorer.analysis.attention.heads import attention_rollout


def min_cut(capacity: np.ndarray, source: int, sink: int) -> float:
    """The smallest capacity of a cut, by trying every set of nodes that holds the source and not the sink."""
    n = len(capacity)
    others = [v for v in range(n) if v not in (source, sink)]
    best = np.inf
    for picks in itertools.product((False, True), repeat=len(others)):
        side = np.zeros(n, bool)
        side[source] = True
        side[[v for v, p in zip(others, picks) if p]] = True
        best = min(best, capacity[side][:, ~side].sum())
    return best


def random_attention(L=3, A=2, T=3, seed=0, sharp=2.0):
    rng = np.random.default_rng(seed)
    a = np.exp(sharp * rng.normal(size=(L, A, T, T)))
    return a / a.sum(-1, keepdims=True)


@pytest.mark.parametrize("seed", range(6))
def test_max_flow_equals_the_minimum_cut_of_every_cut(seed):
    """Random directed graphs of 9 nodes, edges both ways and some missing: the flow needs paths that
    undo earlier flow (the residual's backward edges) to reach the minimum cut."""
    rng = np.random.default_rng(seed)
    cap = rng.uniform(0, 1, size=(9, 9)) * (rng.uniform(size=(9, 9)) < 0.5)
    np.fill_diagonal(cap, 0)
    got = flow.max_flow(cap, 0, 8)
    assert got == pytest.approx(min_cut(cap, 0, 8), abs=1e-9)


def test_a_graph_where_the_shortest_path_must_be_undone():
    """s->a->b->t is the shortest path and is filled first; then the only way to 2 is to send the
    flow on a->b back (s->c->d->b->a->e->f->t), along a residual edge that goes backwards."""
    s, a, b, t, c, d, e, f = range(8)
    cap = np.zeros((8, 8))
    for u, v in [(s, a), (a, b), (b, t), (s, c), (c, d), (d, b), (a, e), (e, f), (f, t)]:
        cap[u, v] = 1.0
    assert flow.max_flow(cap, s, t) == pytest.approx(2.0) == min_cut(cap, s, t)


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_attention_flow_equals_the_minimum_cut_of_the_whole_layered_graph(layer):
    """3 layers, 3 tokens: the whole graph has (L + 1) · T = 12 nodes and 2^10 cuts between an input
    token and a position. The solver works on a smaller graph (nodes no flow can pass are left out):
    its answer must still be the whole graph's minimum cut, for every input token and position."""
    att = random_attention()
    whole = flow.full_graph(flow.layer_matrices(att)[:layer + 1])
    T = 3
    for position in range(T):
        result = flow.attention_flow(att, position=position, layer=layer)
        for source in range(T):
            expected = min_cut(whole, source, (layer + 1) * T + position)
            assert result.flow[source] == pytest.approx(expected, abs=1e-9), (position, source)


def test_one_layer_of_flow_is_the_attention_itself_and_flow_is_not_rollout():
    att = random_attention(L=1)
    result = flow.attention_flow(att, position=2, layer=0)
    assert np.allclose(result.flow, flow.layer_matrices(att)[0, 2])
    deeper = flow.attention_flow(random_attention(L=4, T=5, seed=3), position=0)
    assert not np.allclose(deeper.flow_share, deeper.rollout, atol=1e-3)  # two measures, two answers
    assert deeper.flow.max() <= 1 + 1e-9 and deeper.flow_share.sum() == pytest.approx(1.0)


def test_rollout_is_unchanged():
    """Rollout as Abnar & Zuidema define it, written out here: heads averaged, 0.5 · A + 0.5 · I, rows
    re-normalised, multiplied layer after layer."""
    att = random_attention(L=4, A=3, T=6, seed=5)
    expected, rolled = [], np.eye(6)
    for layer in att:
        a = 0.5 * layer.mean(0) + 0.5 * np.eye(6)
        a = a / a.sum(-1, keepdims=True)
        rolled = a @ rolled
        expected.append(rolled)
    assert np.allclose(attention_rollout(att), np.array(expected), atol=1e-6)
    # by hand: one layer, one head, two tokens each attending fully to token 0
    hand = attention_rollout(np.array([[[[1.0, 0.0], [1.0, 0.0]]]]))
    assert np.allclose(hand[0], [[1.0, 0.0], [0.5, 0.5]])
    result = flow.attention_flow(att, position=1, layer=2)
    assert np.allclose(result.rollout, expected[2][1], atol=1e-6)


def test_inputs_longer_than_the_bound_are_refused_in_one_sentence():
    att = random_attention(L=1, A=1, T=flow.MAX_TOKENS + 1)
    with pytest.raises(ValueError, match=f"at most {flow.MAX_TOKENS} tokens.*this input has {flow.MAX_TOKENS + 1}"):
        flow.attention_flow(att)
    assert flow.attention_flow(random_attention(L=1, A=1, T=flow.MAX_TOKENS)).flow.shape == (flow.MAX_TOKENS,)


def test_cli_prints_flow_beside_rollout(minilm_dir, capsys):
    from bert_explorer.cli import main

    argv = ["attention-flow", "--model", str(minilm_dir), "--text", "the cat sat on the mat .", "--position", "0",
            "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    tokens = out["tokens"]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and out["layer"] == 6 and out["position"] == 0
    assert len(out["max_flow"]) == len(out["rollout_share"]) == len(tokens)
    assert sum(out["rollout_share"]) == pytest.approx(1.0, abs=1e-5)
    assert sum(out["flow_share"]) == pytest.approx(1.0, abs=1e-5) and out["seconds"] >= 0
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "[CLS]" in text and "max flow" in text and "rollout" in text
    long = " ".join(["word"] * 80)
    assert main(["attention-flow", "--model", str(minilm_dir), "--text", long]) == 2
    err = capsys.readouterr().err  # (it said "rollout is shown for all of them", the page's words: nothing was shown)
    assert f"at most {flow.MAX_TOKENS} tokens" in err and "this input has 82; shorten it to 64 tokens or fewer" in err
    assert "rollout" not in err
    # a position past the input is said as the command counts (it said "layer must be in 0..5", a layer never typed)
    assert main(["attention-flow", "--model", str(minilm_dir), "--text", "the cat sat .", "--position", "-1"]) == 2
    assert capsys.readouterr().err.strip().endswith("position -1 is not one of this input's positions, 0 ([CLS]) to 5")
    assert main(["attention-flow", "--model", str(minilm_dir), "--text", "  "]) == 2  # (a flow over [CLS] [SEP])
    assert "--text is empty" in capsys.readouterr().err
