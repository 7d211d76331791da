"""Attention analysis (rows, head mask, head statistics, rollout), offline bertviz, the page."""
import base64
import json
import re

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from bert_explorer.analysis.attention.heads import (
    AttentionResult,
    attention_maps,
    attention_rollout,
    head_ablation,
    head_stats,
)
from bert_explorer.analysis.attention.bertviz_offline import render
from bert_explorer.checkpoint import encoder_of, load
import figcheck
from shared import needs_model


@pytest.fixture(scope="module")
def minilm():
    return load("minilm")


def test_every_attention_row_is_a_distribution(minilm):
    r = attention_maps(minilm, "the bank raised its rates .", "borrowers will pay more .")
    L, A, T, _ = r.attentions.shape
    assert (L, A) == (6, 12) and T == len(r.tokens)
    assert np.allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
    assert (r.attentions >= 0).all()
    assert r.tokens[r.sentence_b_start - 1] == "[SEP]" and r.segment_ids[r.sentence_b_start] == 1


def test_long_input_is_cut_and_says_so(minilm):
    r = attention_maps(minilm, "word " * 100, max_tokens=32)
    assert r.truncated and len(r.tokens) == 32 and r.attentions.shape[-1] == 32
    assert not attention_maps(minilm, "a short one .", max_tokens=32).truncated


def test_head_mask_zeroes_exactly_that_heads_output(minilm):
    attn = encoder_of(minilm.model).encoder.layer[0].attention.self
    h = torch.randn(1, 7, minilm.config.hidden_size)
    mask = torch.ones(minilm.config.num_heads)
    mask[3] = 0
    d = minilm.config.head_size
    with torch.no_grad():
        full, _ = attn(h)
        masked, _ = attn(h, head_mask=mask)
    assert torch.count_nonzero(masked[..., 3 * d:4 * d]) == 0
    assert torch.count_nonzero(full[..., 3 * d:4 * d]) > 0
    keep = torch.ones(full.shape[-1], dtype=torch.bool)
    keep[3 * d:4 * d] = False
    assert torch.allclose(masked[..., keep], full[..., keep])


def test_head_ablation_control_changes_nothing_and_silencing_changes_something(minilm):
    same = head_ablation(minilm, "the cat sat on the mat .", layer=2, head=5, keep=1.0)
    assert max(same["delta"]) == 0 and same["cls_cosine"] == pytest.approx(1.0, abs=1e-6)
    off = head_ablation(minilm, "the cat sat on the mat .", layer=2, head=5)
    assert max(off["relative_delta"]) > 1e-3 and off["cls_cosine"] < 1
    assert off["mlm"] is None  # MiniLM has no masked-LM head
    with pytest.raises(ValueError, match="layer 7, head 1 is not one of this model's heads: layers 1 to 6, heads 1 "
                                         "to 12"):  # (counted from 1, as the page and the CLI count them)
        head_ablation(minilm, "x", layer=6, head=0)


@needs_model("explorer-mini")
def test_head_ablation_reports_the_masked_word_before_and_after():
    from bert_explorer.analysis.probes.pretraining_tasks import mlm_top_k

    mini = load("explorer-mini", "BertForPreTraining")
    text = "the government said the [MASK] would rise ."
    out = head_ablation(mini, text, layer=3, head=0)
    (row,) = out["mlm"]
    # "before" is what the masked-word probe answers on the intact model, with its probability
    (probe,) = mlm_top_k(mini, text, 1)
    assert row["before"] == probe["predictions"][0]["token"]
    assert row["p_before"] == pytest.approx(probe["predictions"][0]["probability"], abs=1e-5)
    assert out["mlm_changed"] == int(row["before"] != row["after"]) and row["changed"] == (row["before"] != row["after"])


def _synthetic():
    """Three heads with known behaviour over [CLS] a b , c [SEP]."""
    tokens = ["[CLS]", "a", "b", ",", "c", "[SEP]"]
    T = len(tokens)
    prev = np.zeros((T, T))
    prev[0, 0] = 1
    for i in range(1, T):
        prev[i, i - 1] = 1
    sep = np.zeros((T, T))
    sep[:, T - 1] = 1
    uniform = np.full((T, T), 1 / T)
    return tokens, np.stack([prev, sep, uniform])[None]  # [1, 3, T, T]


def test_head_stats_name_known_patterns():
    tokens, att = _synthetic()
    stats = head_stats(att, tokens).set_index("head")
    assert stats.loc[0, "to_prev"] == pytest.approx(1.0) and stats.loc[0, "behaviour"] == "previous-token head"
    assert stats.loc[1, "to_sep"] == pytest.approx(1.0) and stats.loc[1, "behaviour"] == "[SEP] head"
    assert stats.loc[2, "behaviour"] == "broad"
    assert stats.loc[2, "entropy"] == pytest.approx(np.log(6))
    assert stats.loc[2, "uniform_entropy"] == pytest.approx(np.log(6))
    assert stats.loc[2, "entropy_ratio"] == pytest.approx(1.0)
    assert stats.loc[2, "to_punct"] == pytest.approx(1 / 6)
    assert stats.loc[1, "entropy"] == pytest.approx(0.0)


def test_head_stats_ignore_padding():
    tokens, att = _synthetic()
    padded = np.zeros((1, 3, 8, 8))
    padded[..., :6, :6] = att
    padded[..., 6:, 0] = 1  # whatever the padded rows hold must not count
    a = head_stats(att, tokens).drop(columns="behaviour")
    b = head_stats(padded, tokens + ["[PAD]", "[PAD]"]).drop(columns="behaviour")
    assert np.allclose(a.values, b.values)


def test_rollout_of_one_layer_is_half_attention_half_identity_and_rows_sum_to_one():
    _, att = _synthetic()
    r = attention_rollout(att)
    expected = 0.5 * att[0].mean(0) + 0.5 * np.eye(6)
    assert np.allclose(r[0], expected, atol=1e-6)
    two = np.concatenate([att, att])  # two layers: the product of the per-layer matrices
    r2 = attention_rollout(two)
    assert np.allclose(r2[1], expected @ expected, atol=1e-6)
    assert np.allclose(r2.sum(-1), 1, atol=1e-5)


def test_bertviz_views_are_self_contained(minilm):
    r = attention_maps(minilm, "it was </script><b>warm</b> there .", "the sun shone .")
    for view in ("head", "model"):
        page = render(r, view)
        assert "<script src=" not in page.html and "require.config" not in page.html
        assert "cdnjs" not in page.html and "d3js.org v5.7.0" in page.html  # d3 5.7.0 inlined
        body = page.html.split("window.require = requirejs;", 1)[1]
        assert "</script><b>" not in body  # the user's text cannot close the script early
        assert '"warm"' in body and page.layers == list(range(6)) and page.numbered_from == 1
    head = render(r, "head")
    assert "Sentence A -> Sentence B" in head.html  # the pair filter


def test_bertviz_keeps_fewer_layers_for_long_inputs_and_rounds(minilm):
    r = attention_maps(minilm, "word " * 60)
    small = render(r, "head", max_bytes=300_000)
    assert 1 <= len(small.layers) < 6 and small.layers[0] == 0
    assert small.size_bytes < render(r, "head").size_bytes
    assert "0.12300000" not in small.html
    with pytest.raises(ValueError):
        render(r, "head", layers=[7])


def _fake_result(T=5):
    att = np.full((1, 1, T, T), 1 / T, dtype=np.float32)
    return AttentionResult(["[CLS]", "a", "b", "c", "[SEP]"][:T], [0] * T, att)


def test_a_token_that_looks_like_html_cannot_close_the_script():
    r = _fake_result()
    r.tokens[1] = "</script><b>x"  # a hand-made token: the tokenizer would split it
    html = render(r, "head").html
    body = html.split("window.require = requirejs;", 1)[1]
    assert "</script><b>x" not in body and "<\\/script><b>x" in body


def test_render_rejects_an_unknown_view():
    with pytest.raises(ValueError, match="head' or 'model"):
        render(_fake_result(), "neuron")


# ----- the page ----------------------------------------------------------------------------------

def _page(model=None, **state):
    at = AppTest.from_file("../pages/2_Attention.py", default_timeout=120)
    if model:
        at.session_state["be_model_choice"] = model
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def test_attention_page_draws_bertviz_offline_and_plots():
    at = _page("minilm")
    assert not at.exception
    assert any("Section 3" in m.value for m in at.markdown)
    frames = list(at.get("iframe"))
    assert len(frames) == 1  # the chosen tab's view (the head view) ...
    # ... and no chart: the browser lays out what it is sent, hidden tabs too (a 128-token heatmap ~1 s)
    assert not at.get("plotly_chart")
    at.session_state["att_view"] = "Model view"
    frames += at.run().get("iframe")  # ... and the model view, once its tab is chosen
    assert len(frames) == 2 and "renderThumbnail" in frames[1].proto.srcdoc
    assert all("d3js.org v5.7.0" in f.proto.srcdoc and "cdnjs" not in f.proto.srcdoc for f in frames)
    drawn = {}
    for tab in ("Heatmap", "Head behaviours", "Rollout and flow"):
        at.session_state["att_view"] = tab
        drawn[tab] = [c.proto.spec for c in at.run().get("plotly_chart")]
        assert not at.exception and not at.get("iframe")
    assert [len(c) for c in drawn.values()] == [1, 1, 3]  # each tab sends its own charts only
    assert "each row sums to 1" in drawn["Heatmap"][0] and "rollout and attention flow" in drawn["Rollout and flow"][1]
    # every chart says what it shows: the head-behaviours grid its measure, the rollout its layer (and its rows
    # do sum to 1, as it says)
    grid = json.loads(drawn["Head behaviours"][0])
    assert grid["layout"]["title"]["text"].startswith("Attention to [CLS], each head of each layer (measured on ")
    rollout = json.loads(drawn["Rollout and flow"][0])
    assert rollout["layout"]["title"]["text"].startswith("Rollout after layer ")
    assert np.allclose(np.asarray(figcheck.decode(rollout["data"][0]["z"]), dtype=float).sum(axis=1), 1.0, atol=1e-3)
    at.session_state["att_view"] = "Heatmap"
    heat = at.run().get("plotly_chart")[0].proto.spec
    at.text_area(key="be_sentence_a").set_value("a completely different sentence about rivers .").run()
    assert not at.exception
    assert at.get("plotly_chart")[0].proto.spec != heat
    at.session_state["att_view"] = "Head view"
    assert "rivers" in at.run().get("iframe")[0].proto.srcdoc
    # a long input names every k-th token with its position (128 names overlapped into a smear), a short one each
    at.session_state["att_view"] = "Heatmap"
    short = json.loads(at.run().get("plotly_chart")[0].proto.spec)["layout"]["xaxis"]
    assert len(short["tickvals"]) == len(short["ticktext"]) and ":" not in short["ticktext"][1]
    at.text_area(key="be_sentence_a").set_value("the river bank " * 40).run()
    axis = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["xaxis"]
    assert 24 <= len(axis["tickvals"]) <= 48 and axis["ticktext"][1].startswith(f"{axis['tickvals'][1]}: ")


def test_attention_page_head_choice_and_truncation():
    at = _page("minilm", att_view="Heatmap")
    before = at.get("plotly_chart")[0].proto.spec
    at.selectbox(key="att_hm_head").set_value(4).run()
    assert at.get("plotly_chart")[0].proto.spec != before
    at.session_state["att_view"] = "Head view"  # the choice is kept while another tab is open
    at.run()
    at.session_state["att_view"] = "Heatmap"
    assert "head 5" in at.run().get("plotly_chart")[0].proto.spec
    at.text_area(key="be_sentence_a").set_value("long " * 200).run()
    assert not at.exception
    assert any("was cut to 128" in i.value and "raise *Max tokens*" in i.value for i in at.info)
    # at the slider's top there is nothing to raise it to (it said "raise Max tokens" at 512 all the same)
    at.sidebar.slider(key="att_max_tokens").set_value(at.sidebar.slider(key="att_max_tokens").max).run()
    at.text_area(key="be_sentence_a").set_value("a " * 900).run()  # (900 WordPieces in the box's 2,000 characters)
    assert not at.exception
    (said,) = [i.value for i in at.info if "was cut to 512" in i.value]
    assert "raise" not in said and said.endswith("512 is the most this page shows of this model (its positions).")


def test_a_long_inputs_views_offer_every_layer_and_draw_the_model_view_legibly():
    """A long input: bertviz draws a window of its tokens and a few layers at a time, any of them
    (only layers 1, 3 and 6 were offered), with the model view at a scale whose labels
    can be read (it was 40 %)."""
    from bert_explorer.analysis.attention.bertviz_offline import MODEL_VIEW_LEGIBLE_SCALE, model_view_drawing

    at = AppTest.from_file("../pages/2_Attention.py", default_timeout=300)
    at.session_state["att_max_tokens"] = 512
    at.session_state["be_sentence_a"] = " ".join(f"word{i % 50} is here ." for i in range(60))
    at.session_state["be_sentence_b"] = ""
    at.run()
    assert not at.exception
    (head,) = (f.proto.srcdoc for f in at.get("iframe"))  # the chosen tab's view only
    assert not at.multiselect  # the head view carries all 6 layers of a 128-token window (a byte a weight)
    at.session_state["att_view"] = "Model view"
    at.run()
    layers = at.multiselect(key="att_window_layers_model")  # the model view draws them all at once: some
    assert layers.options == [str(i) for i in range(1, 7)] and 0 < len(layers.value) < 6
    layers.set_value([1, 3]).run()  # layers 2 and 4, which were never offered before
    assert not at.exception
    (model,) = (f.proto.srcdoc for f in at.get("iframe"))
    assert "renderThumbnail" in model and "renderThumbnail" not in head
    assert re.search(r'"include_layers": \[1, 2, 3, 4, 5, 6\]', head)
    assert re.search(r'"include_layers": \[2, 4\]', model)
    drawn = float(re.search(r"max-width: (\d+)px", model).group(1)) / model_view_drawing(2, 12, 128)[0]
    assert drawn >= MODEL_VIEW_LEGIBLE_SCALE - 0.01
    assert any("Showing layers 2, 4 of 1–6" in c.value for c in at.caption)


def _bar_values(chart) -> list[float]:
    """The y values of a plotly bar chart drawn by a page (plotly may ship them as base64 bytes)."""
    y = json.loads(chart.proto.spec)["data"][0]["y"]
    if isinstance(y, dict):  # {"dtype": "f8", "bdata": ...}
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]).tolist()
    return list(y)


@needs_model("explorer-mini")
def test_attention_page_ablation_shows_what_head_ablation_computes():
    """Switching a head off on the page gives the numbers of ``head_ablation`` itself (the [CLS]
    cosine, the per-token relative change, the masked word before and after), and silencing a
    head that matters changes the last layer."""
    text, text_b = "the [MASK] sat on the mat .", "then it fell asleep in the sun ."
    mini = load("explorer-mini", "BertForPreTraining")
    at = _page("explorer-mini")  # a model with a trained MLM head
    assert not [c for c in at.get("plotly_chart") if "switched off" in c.proto.spec]  # (computed only when opened)
    at.session_state["att_view"] = "Switch a head off"
    at.text_area(key="be_sentence_a").set_value(text)
    at.text_area(key="be_sentence_b").set_value(text_b).run()
    max_tokens = at.slider(key="att_max_tokens").value
    # the head whose silencing moves the last layer most: one that matters
    L, A = mini.config.num_layers, mini.config.num_heads
    layer, head = max(((la, h) for la in range(L) for h in range(A)), key=lambda lh: max(
        head_ablation(mini, text, text_b, *lh, max_tokens=max_tokens)["relative_delta"]))
    at.selectbox(key="att_abl_layer").set_value(layer)
    at.selectbox(key="att_abl_head").set_value(head).run()
    assert not at.exception
    direct = head_ablation(mini, text, text_b, layer, head, max_tokens=max_tokens)
    assert max(direct["relative_delta"]) > 0.01 and direct["cls_cosine"] < 1

    cosine = next(m for m in at.metric if m.label == "[CLS] vector, cosine with the intact model")
    assert cosine.value == f"{direct['cls_cosine']:.4f}"
    chart = next(c for c in at.get("plotly_chart") if "switched off" in c.proto.spec)
    assert _bar_values(chart) == pytest.approx(direct["relative_delta"], rel=1e-5, abs=1e-7)
    other = head_ablation(mini, text, text_b, layer, (head + 1) % A, max_tokens=max_tokens)
    assert _bar_values(chart) != pytest.approx(other["relative_delta"], rel=1e-3)  # the chosen head, not another
    (row,) = direct["mlm"]  # one [MASK]
    table = at.dataframe[-1].value
    assert len(table) == 1 and {k: table[k][0] for k in ("position", "before", "after", "changed")} == {
        k: row[k] for k in ("position", "before", "after", "changed")}
    assert table["p_before"].tolist() == pytest.approx([r["p_before"] for r in direct["mlm"]], rel=1e-5)
    assert table["p_after"].tolist() == pytest.approx([r["p_after"] for r in direct["mlm"]], rel=1e-5)
