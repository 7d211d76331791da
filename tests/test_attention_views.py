"""The Attention page's views: the model view fits its frame, layers and heads count from 1,
and heads are labelled by a stated rule over Clark et al.'s (2019) measures."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from bert_explorer.analysis.attention import heads as attention_mod
from bert_explorer.analysis.attention.heads import (
    BROAD_ENTROPY,
    PATTERN_SHARE,
    AttentionResult,
    attention_maps,
    describe_behaviours,
    head_stats,
    head_stats_over,
    label_head,
    measure_heads,
    uniform_reference,
)
from bert_explorer.analysis.attention.bertviz_offline import (
    MODEL_VIEW_MAX_HEIGHT,
    MODEL_VIEW_MIN_SCALE,
    MV_FILTER_HEIGHT,
    SAVE_BAR_HEIGHT,
    fit_model_view,
    model_view_drawing,
    render,
)
from bert_explorer.analysis.attention.timelapse import TimeLapse
from bert_explorer.checkpoint import load
from shared import needs_model


# ----- 1. the model view fits its frame ----------------------------------------------------------

def test_model_view_size_follows_bertviz_layout():
    # 4 layers x 4 heads x 24 tokens: each token row is 7*12/4 = 21 px, a thumbnail 24*21 + 10 = 514 px,
    # 4 of them + the 38-px axis = 2,094 px: the picture that did not fit the old 770-px frame.
    assert model_view_drawing(4, 4, 24) == (970.0, 2094.0)
    # 12 heads: 7 px a row; 6 layers x (22*7 + 10) + 38
    assert model_view_drawing(6, 12, 22) == (970.0, 6 * (22 * 7 + 10) + 38)
    # a short input: the click-up detail view (18 px a token + 55) is the taller part
    assert model_view_drawing(1, 12, 5) == (970.0, 5 * 18 + 55)


def test_installed_bertviz_uses_the_layout_we_compute_with():
    import bertviz

    js = (Path(bertviz.__file__).parent / "model_view.js").read_text()
    for line in ("const DIV_WIDTH = 970;", "const THUMBNAIL_PADDING = 5;", "const DETAIL_BOX_HEIGHT = 18;",
                 "const DETAIL_PADDING = 15;", "const DETAIL_HEADING_HEIGHT = 25;", "const HEADING_TEXT_SIZE = 15;",
                 "const HEADING_PADDING = 5;", "const TEXT_SIZE = 13;", "const TEXT_PADDING = 5;",
                 "config.thumbnailBoxHeight = 7 * (12 / config.totalHeads);",
                 "config.divHeight = Math.max(config.numLayers * config.thumbnailHeight + axisSize, "
                 "config.detailHeight);"):
        assert line in js, line


@pytest.mark.parametrize("layers, heads, tokens, pair", [
    (4, 4, 24, True),     # explorer-mini, the page's default pair
    (4, 4, 64, False),
    (6, 12, 22, True),    # minilm-mlm-nsp
    (12, 12, 24, False),  # BERT-Base
    (12, 12, 64, True),
    (2, 4, 6, False),
    (24, 16, 128, True),  # BERT-Large, a long input
])
def test_the_whole_model_view_fits_the_frame(layers, heads, tokens, pair):
    fit = fit_model_view(layers, heads, tokens, pair)
    width, height = model_view_drawing(layers, heads, tokens)
    assert fit.drawing == (width, height)
    menu = SAVE_BAR_HEIGHT + (MV_FILTER_HEIGHT if pair else 0)  # the Save SVG row sits above the drawing
    assert width * fit.scale <= fit.width                       # every head
    assert menu + height * fit.scale <= fit.height              # every layer
    assert MODEL_VIEW_MIN_SCALE <= fit.scale <= 1
    # not huge: within the target height unless that would shrink it below legibility
    assert fit.height <= MODEL_VIEW_MAX_HEIGHT or fit.scale == MODEL_VIEW_MIN_SCALE
    assert fit.height <= menu + height * fit.scale + 12          # and no big empty band under it


def test_small_drawings_keep_their_size_and_the_frame_stays_small():
    fit = fit_model_view(1, 12, 5)
    assert fit.scale == 1 and fit.width == 970 and fit.height < 200
    mini = fit_model_view(4, 4, 24, pair=True)  # explorer-mini: 2,094 px high at bertviz's size
    assert mini.height <= MODEL_VIEW_MAX_HEIGHT and mini.scale < 0.5


def _params(html: str) -> dict:
    """bertviz's params; each filter's weights (a call that decodes them in the browser) as None."""
    html = re.sub(r"__beAttention\([0-9, ]*\)", "null", html)
    start = html.index("const params = ") + len("const params = ")
    return json.JSONDecoder().raw_decode(html, start)[0]


def _weights(html: str) -> np.ndarray:
    """The weights the page carries, [layer drawn, head, query, key], as the browser decodes them."""
    import base64

    start = html.index("var __beWeights = ") + len("var __beWeights = ")
    w = json.JSONDecoder().raw_decode(html, start)[0]
    T = w["tokens"]
    return np.stack([np.frombuffer(base64.b64decode(s), np.uint8).reshape(w["heads"], T, T) for s in w["layers"]]) / 255


def _fake(L=2, A=3, T=5, pair=False):
    rng = np.random.default_rng(0)
    att = rng.random((L, A, T, T))
    att /= att.sum(-1, keepdims=True)
    tokens = ["[CLS]", "a", "b", "c", "d", "e", "f"][:T - 1] + ["[SEP]"]
    segments = [0] * T if not pair else [0, 0, 0, 1, 1][:T]
    return AttentionResult(tokens, segments, att.astype(np.float32))


def test_model_view_html_is_scaled_to_the_fit():
    view = render(_fake(4, 4, 5), "model")
    assert view.fit == fit_model_view(4, 4, 5) and view.height == view.fit.height
    assert f"max-width: {view.fit.width}px" in view.html and 'setAttribute("viewBox"' in view.html
    assert render(_fake(4, 4, 5), "head").fit is None


# ----- the page carries its weights once and draws only the lines that can be seen ----------------

@pytest.mark.parametrize("view", ["head", "model"])
def test_the_weights_are_in_the_page_once_and_only_visible_lines_are_drawn(view):
    """bertviz's template marker stands in a comment too, so its page held every weight twice; and
    it drew a line for every weight. The page holds them once, and the installed bertviz's line
    drawing is the one the patches were written for (else every line would be drawn again)."""
    from bert_explorer.analysis.attention import bertviz_offline

    import base64

    r = _fake(L=2, A=3, T=6)
    html = render(r, view).html
    first = base64.b64encode(np.rint(r.attentions[0] * 255).astype(np.uint8).tobytes()).decode()
    assert html.count(first) == 1 and html.count('"attn": __beAttention(0, 6, 0, 6)') == 1
    assert not re.search(r'"attn": \[', html)  # bertviz's JSON weights are not there as well
    assert np.array_equal(_weights(html), np.rint(r.attentions * 255).astype(np.uint8) / 255)
    assert "// HACK:" not in html
    assert "__beVisible(d, " in html and "function __beVisible(row, shared)" in html
    body = bertviz_offline._number_from_one(_bertviz_body(r, view), view)[0]
    assert bertviz_offline._draw_visible_lines_only(body, view)[1]


@pytest.mark.parametrize("view", ["head", "model"])
def test_a_bertviz_that_writes_its_data_otherwise_gets_every_weight_as_json(monkeypatch, view):
    """Where the placeholders cannot be found (another bertviz), the page is bertviz's own, with its
    JSON weights in the same 1/255 steps: drawn right, only larger."""
    from bert_explorer.analysis.attention import bertviz_offline

    monkeypatch.setattr(bertviz_offline, "_ATTN", re.compile("no such data"))
    r = _fake(L=2, A=3, T=6, pair=True)
    html = render(r, view).html
    assert "var __beWeights" not in html
    params = _params(html)
    assert params["include_layers"] == [1, 2] and len(params["attention"]) == 5
    assert np.array_equal(np.array(params["attention"][0]["attn"]), np.rint(r.attentions * 255).astype(np.uint8) / 255)


def _bertviz_body(r, view):
    import torch
    from bertviz import head_view, model_view

    attention = [torch.from_numpy(r.attentions[i]).unsqueeze(0) for i in range(r.attentions.shape[0])]
    draw = head_view if view == "head" else model_view
    return draw(attention=attention, tokens=list(r.tokens), html_action="return").data


@pytest.mark.slow
def test_in_a_real_browser_each_weight_that_can_be_seen_has_its_line_where_bertviz_puts_it():
    """Head view of layer 1: with its 3 heads shown a line's opacity is weight / 3, so one line for
    every weight of at least 3/255 (an opacity under one step of an 8-bit colour draws nothing);
    head 1 alone (double-clicked): one line for every weight of at least 1/255, at the weight's
    opacity, from the query's row to the key's, and none for the hidden heads; and in the model
    view's thumbnails, one line per weight of at least 1/255 of every head."""
    if not shutil.which("chromium"):
        pytest.skip("Debian chromium is not installed")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    from bert_explorer.analysis.attention.bertviz_offline import MIN_VISIBLE_WEIGHT

    rng = np.random.default_rng(1)
    att = rng.random((2, 3, 9, 9)) ** 6  # many tiny weights, some large ones
    att /= att.sum(-1, keepdims=True)
    r = AttentionResult(["[CLS]"] + list("abcdefg") + ["[SEP]"], [0] * 9, att.astype(np.float32))
    rounded = np.rint(att * 255) / 255  # the page's weights: one byte each (the browser's own arithmetic)
    shown_alone, shown_of_three = rounded >= MIN_VISIBLE_WEIGHT, rounded / 3 >= MIN_VISIBLE_WEIGHT
    assert 0 < shown_of_three[0].sum() < shown_alone[0].sum() < shown_alone[0].size
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]
    read = """ls => ls.map(l => [+l.parentNode.parentNode.getAttribute('head-index'),
        +l.getAttribute('left-token-index'), +l.getAttribute('right-token-index'), +l.getAttribute('y1'),
        +l.getAttribute('y2'), +l.getAttribute('stroke-opacity')])"""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=args)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content(render(r, "head").html)
        page.wait_for_selector("#vis svg text")
        all_three = page.eval_on_selector_all("#vis #attention line", read)
        page.locator('#vis svg rect[y="0"]').first.dblclick()  # head 1's square: head 1 alone
        page.wait_for_timeout(300)
        alone = page.eval_on_selector_all("#vis #attention line", read)
        page.set_content(render(r, "model").html)
        page.wait_for_selector("#vis svg text")
        thumbnails = page.eval_on_selector_all("#vis line", "ls => ls.length")
        browser.close()
    assert not errors, errors
    for lines, shown, heads in ((all_three, shown_of_three[0], 3), (alone, shown_alone[0, :1], 1)):
        assert {(h, i, j) for h, i, j, *_ in lines} == {tuple(hij) for hij in np.argwhere(shown)}
        for h, i, j, y1, y2, opacity in lines:  # bertviz's rows: 22.5 px apart
            assert y2 - y1 == pytest.approx(22.5 * (j - i))
            assert opacity == pytest.approx(rounded[0, h, i, j] / heads, abs=1e-6)
    assert thumbnails == shown_alone.sum()


@pytest.mark.slow
def test_in_a_real_browser_a_pairs_filters_and_layers_draw_the_weights_sent_once():
    """A sentence pair's weights travel once, a byte each; bertviz's filters (all, A→A, B→B, A→B, B→A)
    are cut from them in the browser and each layer is decoded when it is picked: every filter of
    every layer draws the lines of its own block of the weights, where bertviz puts them."""
    if not shutil.which("chromium"):
        pytest.skip("Debian chromium is not installed")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    from bert_explorer.analysis.attention.bertviz_offline import MIN_VISIBLE_WEIGHT

    rng = np.random.default_rng(2)
    att = rng.random((3, 2, 8, 8)) ** 4
    att /= att.sum(-1, keepdims=True)
    r = AttentionResult(["[CLS]", "a", "b", "[SEP]", "c", "d", "e", "[SEP]"], [0] * 4 + [1] * 4, att.astype(np.float32))
    html = render(r, "head").html
    weights = _weights(html)
    assert weights.shape == (3, 2, 8, 8) and html.count("__beAttention(") == 5 + 1  # 5 filters; the function
    blocks = [(0, 8, 0, 8), (0, 4, 0, 4), (4, 8, 4, 8), (0, 4, 4, 8), (4, 8, 0, 4)]
    read = """ls => ls.map(l => [+l.parentNode.parentNode.getAttribute('head-index'),
        +l.getAttribute('left-token-index'), +l.getAttribute('right-token-index'), +l.getAttribute('stroke-opacity')])"""
    drawn = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content(html)
        page.wait_for_selector("#vis svg text")
        for f in range(len(blocks)):
            page.select_option("#filter", index=f)
            for layer in range(3):
                page.select_option("#layer", index=layer)
                page.wait_for_timeout(50)
                drawn[f, layer] = page.eval_on_selector_all("#vis #attention line", read)
        browser.close()
    assert not errors, errors
    for (f, layer), lines in drawn.items():
        r0, r1, c0, c1 = blocks[f]
        block = weights[layer, :, r0:r1, c0:c1]
        assert {(h, i, j) for h, i, j, _ in lines} == {tuple(x) for x in np.argwhere(block / 2 >= MIN_VISIBLE_WEIGHT)}
        assert all(o == pytest.approx(block[h, i, j] / 2, abs=1e-6) for h, i, j, o in lines)
    assert len({len(lines) for lines in drawn.values()}) > 3  # the filters and layers differ


# ----- 2. layers (and heads) count from 1 --------------------------------------------------------

def test_bertviz_labels_count_layers_and_heads_from_one():
    r = _fake(L=2, A=3)
    model = render(r, "model")
    assert model.numbered_from == 1 and model.layers == [0, 1]  # internal indices stay 0-based
    params = _params(model.html)
    assert params["include_layers"] == [1, 2] and params["include_heads"] == [1, 2, 3]
    assert np.abs(_weights(model.html) - r.attentions).max() <= 0.5 / 255  # the data, in 1/255 steps
    head = render(r, "head", layers=[1])
    assert _params(head.html)["include_layers"] == [2] and head.layers == [1]


def test_names_and_timelapse_title_count_from_one():
    assert attention_mod.layer_name(0) == "layer 1" and attention_mod.head_name(11) == "head 12"
    assert TimeLapse("run", "text", layer=0, head=2, frames=[]).title == "Layer 1, head 3"


def test_behaviour_caption_counts_layers_from_one():
    import pandas as pd

    tokens, heads = _hand_made()
    one = head_stats(_stack(heads), tokens)            # one layer: index 0
    two = pd.concat([one, one.assign(layer=1)], ignore_index=True)
    text = describe_behaviours(two)
    assert "in layer 1 (" in text and "in layer 2 (" in text and "layer 0" not in text


def test_behaviour_caption_calls_equal_layers_neither_broader_nor_narrower():
    """Two layers at 100 % of uniform were said to show "narrower attention in the first layer"."""
    import pandas as pd

    tokens, heads = _hand_made()
    one = head_stats(_stack(heads), tokens)
    same = describe_behaviours(pd.concat([one, one.assign(layer=1)], ignore_index=True))
    assert "(about as broad in the first layer as in the last)" in same and "narrower" not in same
    broader = one.assign(layer=1, entropy=one["entropy"] / 2, entropy_ratio=one["entropy_ratio"] / 2)
    assert "(broader attention in the first layer)" in describe_behaviours(pd.concat([one, broader]))
    alone = describe_behaviours(one)
    assert "in layer 1 (" in alone and "first layer" not in alone and " and " not in alone.split("Mean entropy")[1]


# ----- 3. head behaviours: Clark et al.'s measures, our thresholds -------------------------------

TOKENS = ["[CLS]", "the", "cat", "sat", ",", "on", "the", "mat", ".", "[SEP]"]


def _rows(targets_per_row):
    T = len(TOKENS)
    m = np.zeros((T, T))
    for i, targets in enumerate(targets_per_row):
        m[i, targets] = 1 / len(targets)
    return m


def _hand_made():
    """Heads with a known behaviour over TOKENS: name -> [T, T]."""
    T = len(TOKENS)
    content = [1, 2, 3, 5, 6, 7]
    return TOKENS, {
        "previous-token head": _rows([[0]] + [[i - 1] for i in range(1, T)]),
        "next-token head": _rows([[i + 1] for i in range(T - 1)] + [[T - 1]]),
        "[SEP] head": _rows([[T - 1]] * T),
        "[CLS] head": _rows([[0]] * T),
        "punctuation head": _rows([[4, 8]] * T),
        "self head": np.eye(T),
        "broad": np.full((T, T), 1 / T),
        # spread over 6 of the 10 tokens: entropy log 6 = 78 % of uniform's log 10. The old rule
        # (entropy >= 0.7 log T) called such heads "broad"; they are far from uniform.
        "mixed": _rows([content] * T),
        # one content word per query (e.g. a "coreference" head): narrow but no positional pattern
        "mixed ": _rows([[7], [3], [7], [2], [2], [7], [3], [2], [3], [7]]),
    }


def _stack(heads):
    return np.stack(list(heads.values()))[None]  # [1, A, T, T]


def test_hand_made_heads_get_their_labels():
    tokens, heads = _hand_made()
    stats = head_stats(_stack(heads), tokens)
    assert list(stats["behaviour"]) == [name.strip() for name in heads]
    by = dict(zip(heads, stats.to_dict("records")))
    assert by["previous-token head"]["to_prev"] == pytest.approx(1.0)
    assert by["next-token head"]["to_next"] == pytest.approx(1.0)
    assert by["punctuation head"]["to_punct"] == pytest.approx(1.0)
    assert by["broad"]["entropy_ratio"] == pytest.approx(1.0)
    assert by["mixed"]["entropy_ratio"] == pytest.approx(np.log(6) / np.log(10))


def test_thresholds_are_where_the_rule_says():
    T = len(TOKENS)
    uniform = np.full((T, T), 1 / T)
    prev = _hand_made()[1]["previous-token head"]

    def mix(w):  # w of the rows on the previous token, the rest uniform
        return w * prev + (1 - w) * uniform

    shares = [head_stats(mix(w)[None, None], TOKENS).loc[0, "to_prev"] for w in (0.5, 0.4)]
    labels = [head_stats(mix(w)[None, None], TOKENS).loc[0, "behaviour"] for w in (0.5, 0.4)]
    assert shares[0] >= PATTERN_SHARE > shares[1]
    assert labels == ["previous-token head", "mixed"]
    assert label_head({**dict.fromkeys(attention_mod.TARGETS, 0.1), "entropy_ratio": BROAD_ENTROPY}) == "broad"
    assert label_head({**dict.fromkeys(attention_mod.TARGETS, 0.1), "entropy_ratio": BROAD_ENTROPY - 0.01}) == "mixed"


def test_measures_are_averaged_over_inputs_each_counting_once():
    tokens, heads = _hand_made()
    prev, uniform = heads["previous-token head"], heads["broad"]
    short = ["[CLS]", "a", ".", "[SEP]"]
    short_prev = np.eye(4, k=-1)
    short_prev[0, 0] = 1
    stats = head_stats_over([(prev[None, None], tokens), (uniform[None, None], tokens),
                             (short_prev[None, None], short)])
    assert stats.loc[0, "to_prev"] == pytest.approx((1 + 1 / 10 + 1) / 3)
    assert stats.loc[0, "behaviour"] == "previous-token head"
    with pytest.raises(ValueError, match="different sizes"):
        head_stats_over([(prev[None, None], tokens), (_stack(heads), tokens)])


def test_uniform_reference_is_the_baseline_of_the_same_tokens():
    tokens, _ = _hand_made()
    ref = uniform_reference([(np.zeros((1, 1, 10, 10)), tokens)])
    assert ref["to_sep"] == pytest.approx(0.1) and ref["to_punct"] == pytest.approx(0.2)
    assert ref["entropy"] == pytest.approx(np.log(10)) and ref["entropy_ratio"] == pytest.approx(1.0)


def test_caption_counts_labels_and_names_the_strongest_head():
    tokens, heads = _hand_made()
    stats = head_stats(_stack(heads), tokens)
    text = describe_behaviours(stats, "these inputs", uniform_reference([(_stack(heads), tokens)]))
    assert text.startswith("On these inputs, of this model's 9 heads: 1 previous-token head; 1 next-token head; "
                           "1 [SEP] head; 1 [CLS] head; 1 punctuation head; 1 self head; 1 broad; 2 mixed.")
    assert "layer 1, head 1 gives 1.00 of its attention to the previous token (uniform attention would give 0.10)" \
        in text


@needs_model("minilm-mlm-nsp")
def test_the_real_minilm_has_a_previous_token_head_and_many_cls_heads():
    stats = head_stats_over(measure_heads(load("minilm-mlm-nsp", "BertForPreTraining")))
    prev = stats[stats["behaviour"] == "previous-token head"]
    assert len(prev) >= 1 and (prev["to_prev"] > 0.9).all() and (prev["layer"] == 0).all()
    assert (stats["behaviour"] == "[CLS] head").sum() > len(stats) / 2
    assert all(label_head(row) == row["behaviour"] for row in stats.to_dict("records"))


# ----- the page ----------------------------------------------------------------------------------

@pytest.fixture
def frames_asked(monkeypatch):
    """Every st.iframe call the page makes: (html, height)."""
    import streamlit

    calls, original = [], streamlit.iframe

    def record(src, *args, **kwargs):
        calls.append((src, kwargs.get("height")))
        return original(src, *args, **kwargs)

    monkeypatch.setattr(streamlit, "iframe", record)
    return calls


def _page(model, tab: str | None = None):
    at = AppTest.from_file("../pages/2_Attention.py", default_timeout=180)
    at.session_state["be_model_choice"] = model
    if tab:
        at.session_state["att_view"] = tab
    return at.run()


@needs_model("explorer-mini")
def test_page_gives_explorer_minis_model_view_a_frame_that_holds_it(frames_asked):
    at = _page("explorer-mini", "Model view")
    assert not at.exception
    html, height = [c for c in frames_asked if "renderThumbnail" in c[0]][-1]
    r = attention_maps(load("explorer-mini", "BertForPreTraining"), at.text_area(key="be_sentence_a").value,
                       at.text_area(key="be_sentence_b").value, at.sidebar.slider(key="att_max_tokens").value)
    drawing_w, drawing_h = model_view_drawing(4, 4, len(r.tokens))
    shown = re.search(r"max-width: (\d+)px", html)
    assert shown, "the model view is not scaled"
    scale = int(shown.group(1)) / drawing_w
    assert SAVE_BAR_HEIGHT + MV_FILTER_HEIGHT + drawing_h * scale <= height <= MODEL_VIEW_MAX_HEIGHT
    assert any("Drawn at" in c.value and "4 layers × 4 heads" in c.value for c in at.caption)


@needs_model("minilm-mlm-nsp")
def test_page_counts_layers_and_heads_from_one():
    at = _page("minilm-mlm-nsp")
    assert not at.exception
    assert any("counted from 1" in m.value for m in at.markdown)
    assert at.selectbox(key="att_hm_layer").options == [str(i) for i in range(1, 7)]
    assert at.selectbox(key="att_hm_head").options == [str(i) for i in range(1, 13)]
    assert at.selectbox(key="att_abl_layer").options[0] == "1"
    rollout = at.slider(key="att_rollout_layer")
    assert (rollout.min, rollout.max, rollout.value) == (1, 6, 6)
    at.session_state["att_view"] = "Heatmap"
    assert at.run().get("plotly_chart")[0].proto.spec.count("Layer 1, head 1") == 1
    at.session_state["att_view"] = "Head behaviours"
    grid = json.loads(at.run().get("plotly_chart")[0].proto.spec)
    assert grid["data"][0]["y"][0] == "layer 1" and grid["data"][0]["x"][0] == "head 1"
    table = at.dataframe[0].value
    assert table["layer"].min() == 1 and table["layer"].max() == 6 and table["head"].max() == 12
    summary = next(m.value for m in at.markdown if "of this model's 72 heads" in m.value)
    assert "in layer 1 (" in summary and "in layer 6 (" in summary and "layer 0" not in summary


@needs_model("minilm-mlm-nsp")
def test_page_shows_the_measures_the_thresholds_and_their_source():
    at = _page("minilm-mlm-nsp")
    table = at.dataframe[0].value
    assert {"[CLS]", "[SEP]", ". and ,", "previous token", "next token", "entropy (nats)", "entropy / uniform",
            "label"} <= set(table.columns)
    assert table["previous token"].dtype.kind == "f" and len(table) == 72
    rule = next(c.value for c in at.caption if "Clark et al." in c.value and "thresholds are ours" in c.value)
    assert f"{PATTERN_SHARE:.0%}" in rule and f"{BROAD_ENTROPY:.0%}" in rule
    # the summary counts what the table says
    counts = table["label"].value_counts()
    summary = next(m.value for m in at.markdown if "of this model's 72 heads" in m.value)
    assert f"{counts['[CLS] head']} [CLS] heads" in summary
    at.checkbox(key="att_reference").uncheck().run()
    assert any("On your input, of this model's 72 heads" in m.value for m in at.markdown)


# ----- a real browser: every layer and head inside the frame -------------------------------------

@pytest.mark.slow
@needs_model("explorer-mini")
@pytest.mark.parametrize("frame_width", [1200, 640])
def test_model_view_in_a_real_browser_shows_every_thumbnail_inside_the_frame(frame_width):
    if not shutil.which("chromium"):
        pytest.skip("Debian chromium is not installed")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    r = attention_maps(load("explorer-mini", "BertForPreTraining"), "the cat sat on the mat because it was warm .",
                       "then it fell asleep in the sun .")
    view = render(r, "model")
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=args)
        page = browser.new_page(viewport={"width": frame_width, "height": view.height})  # the iframe's size
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content(view.html)
        page.wait_for_selector("#vis svg text")
        svg = page.evaluate("""() => { const s = document.querySelector('#vis svg').getBoundingClientRect();
            return [s.left, s.top, s.right, s.bottom]; }""")
        labels = page.eval_on_selector_all("#vis svg text", "ts => ts.map(t => t.textContent)")
        browser.close()
    assert not errors, errors
    left, top, right, bottom = svg
    assert left >= 0 and top >= 0 and right <= frame_width and bottom <= view.height
    assert labels[:10] == ["Heads", "1", "2", "3", "4", "Layers", "1", "2", "3", "4"]


@pytest.mark.skipif(not shutil.which("node"), reason="needs node to run the page's script")
@pytest.mark.parametrize("width,height,viewbox", [("100%", "525px", "0 0 812 525"),   # bertviz's head view
                                                  ("970", "1100", "0 0 970 1100")])   # the model view
def test_saved_svg_has_a_viewbox_of_four_numbers(width, height, viewbox):
    """The *Save SVG* button's script, run in node against a stand-in for the browser's DOM: the
    head view's SVG says width="100%" height="525px", which cannot go into a viewBox; the saved
    file gets the drawn size in pixels instead."""
    import subprocess
    from bert_explorer.analysis.attention import bertviz_offline

    script = re.search(r"<script>(.*)</script>", bertviz_offline._SAVE_SVG, re.S).group(1)
    dom = """
    const attrs = {width: %s, height: %s}, copy = {attrs: {}, setAttribute(k, v) { this.attrs[k] = String(v); },
                   getAttribute(k) { return this.attrs[k] === undefined ? null : this.attrs[k]; }};
    Object.assign(copy.attrs, attrs);
    const svg = {getAttribute: k => attrs[k] === undefined ? null : attrs[k], cloneNode: () => copy,
                 getBoundingClientRect: () => ({width: 812.4, height: 525})};
    let onClick;
    const holder = {parentNode: {insertBefore() {}, firstChild: null}};
    const button = {parentNode: holder, addEventListener(kind, f) { onClick = f; }};
    global.document = {getElementById: () => button, querySelector: () => svg,
                       body: {appendChild() {}}, createElement: () => ({click() {}, remove() {}})};
    global.getComputedStyle = () => ({fontFamily: "sans-serif", backgroundColor: "white"});
    global.XMLSerializer = class { serializeToString() { return ""; } };
    global.Blob = class {};
    global.URL = {createObjectURL: () => "blob:"};
    """ % (json.dumps(width), json.dumps(height))
    run = subprocess.run(["node", "-e", dom + script + "\nonClick(); console.log(JSON.stringify(copy.attrs));"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    saved = json.loads(run.stdout)
    assert re.fullmatch(r"-?[0-9.]+( -?[0-9.]+){3}", saved["viewBox"]), saved["viewBox"]
    assert saved["viewBox"] == viewbox


def test_the_heads_measures_on_the_built_in_sentences_are_kept_on_disk_and_read_back_as_computed(tmp_path, monkeypatch):
    """Head behaviours' reference (14 s of a first visit on BERT-Base) is kept by the weights, so
    prepare-class computes it before class; read back, it gives the table and the uniform baseline that
    measuring the maps again gives, and any cut above the longest sentence reads the same entry."""
    import pandas as pd

    from bert_explorer import disk_cache
    from bert_explorer.checkpoint import DEFAULT_MODEL

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    loaded = load(DEFAULT_MODEL, "BertForPreTraining")
    kept = attention_mod.reference_measures(loaded, 128)
    computed = []
    real = disk_cache.kept_json
    monkeypatch.setattr(disk_cache, "kept_json", lambda kind, l, compute, **kw: real(
        kind, l, lambda: computed.append(kind) or compute(), **kw))
    assert attention_mod.reference_measures(loaded, 64) == kept and computed == []  # 64 > the longest sentence
    fresh = attention_mod.measure_heads(loaded, attention_mod.REFERENCE_INPUTS, 128)
    pd.testing.assert_frame_equal(attention_mod.stats_of_measures(kept["measures"]),
                                  attention_mod.head_stats_over(fresh), rtol=1e-9)
    assert attention_mod.uniform_of_tokens(kept["tokens"]) == attention_mod.uniform_reference(fresh)
