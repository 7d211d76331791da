from pathlib import Path

import numpy as np
import pandas as pd
import plotly.express as px
import streamlit as st

from bert_explorer import limits
from bert_explorer.analysis.attention import clark, flow, head_map
from bert_explorer.runs import neighbour_jobs as jobs
from bert_explorer.data.corpora import corpus_title
from bert_explorer.train.estimate import background_threads
from bert_explorer.train.speed import said, seconds_now

from bert_explorer.analysis.attention.heads import (BEHAVIOUR_RULE, COLUMN_NAMES, LABELS, REFERENCE_INPUTS,
                                              attention_maps, attention_rollout, behaviour_table, describe_behaviours,
                                              head_ablation, head_name, input_measures, layer_name,
                                              reference_measures, stats_of_measures, uniform_of_tokens, window)
from bert_explorer.analysis.attention.bertviz_offline import (MODEL_VIEW_LEGIBLE_SCALE, MODEL_VIEW_MIN_SCALE, OfflineAssetsMissing,
                                                    layers_within_budget, render)
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.keep import (SENTENCE_A, SENTENCE_A_DEFAULT, SENTENCE_B, SENTENCE_B_DEFAULT, fit_kept,
                                   forget_outside, kept_tabs, kept_widget, past_the_model)
from bert_explorer.app.state import by_weights, load, picked_model, shown_path, without_host_paths
from bert_explorer.app.roles import (busy_sentence, not_prepared, progress_line, running_beside, work_button,
                                     writes_allowed)
from bert_explorer.app.models import how_to_get
from bert_explorer.app.widgets import intro

intro("Attention", """
Every encoder layer of BERT runs several **self-attention heads** side by side (their number is
the paper's A; Devlin et al. 2019, Section 3, after Vaswani et al. 2017): each token spreads one unit
of attention over all tokens, left *and* right, and takes in a weighted mix of their vectors. Below you see those weights for
your sentence — drawn by bertviz (lines, darker = more attention), as heatmaps, summarised per
head, followed through the layers (rollout), and what happens when one head is switched off. Under
*Head behaviours* the same measures can be taken over a thousand Wikipedia segments, as Clark et al.
(2019, "What Does BERT Look At?") took them for bert-base-uncased, and read beside what they found.
Layers and heads are **counted from 1**, as Clark et al. count them: layer 1 is the first encoder layer (the
embeddings, where other pages show them, are layer 0) and head 1 the first head of a layer.
""")

STATS = {"to_cls": "attention to [CLS]", "to_sep": "attention to [SEP]", "to_self": "attention to itself",
         "to_prev": "attention to the previous token", "to_next": "attention to the next token",
         "to_punct": "attention to periods and commas", "entropy": "entropy (nats; high = spread out)",
         "entropy_ratio": "entropy / entropy of uniform attention (1 = uniform)"}

name, loaded = picked_model("BertForPreTraining")
# The caches below are keyed by the model's weights (app.state.by_weights): a run re-written under
# the same path is not served from an earlier copy.


DRAWN_TOKENS = 128  # bertviz draws at most this many tokens: its data grow with T² and the browser slows


# A resource, not data: a 512-token input's L × A × T × T attention is 75 MB for the default model,
# and cache_data would unpickle a copy of it on every rerun. Nothing below changes it in place.
@by_weights(shared=True, show_spinner=False, max_entries=8)
def _attention(model: str, text: str, text_b: str | None, max_tokens: int):
    return attention_maps(load(model, "BertForPreTraining")[0], text, text_b, max_tokens)


@by_weights(show_spinner=False, max_entries=16)
def _rollout(model: str, text: str, text_b: str | None, max_tokens: int):
    return attention_rollout(_attention(model, text, text_b, max_tokens))


@by_weights(show_spinner="Computing the attention flow…", max_entries=16)
def _flow(model: str, text: str, text_b: str | None, max_tokens: int, position: int, layer: int):
    return flow.attention_flow(_attention(model, text, text_b, max_tokens), position, layer)


@by_weights(show_spinner=False, max_entries=16)
def _head_measures(model: str, text: str, text_b: str | None, max_tokens: int, with_reference: bool):
    own = _attention(model, text, text_b, max_tokens)
    measures, tokens = [input_measures(own)], [own.tokens]
    if with_reference:  # kept on disk by the weights (prepare-class computes it before class)
        ref = reference_measures(load(model, "BertForPreTraining")[0], max_tokens)
        measures, tokens = measures + ref["measures"], tokens + ref["tokens"]
    return stats_of_measures(measures), uniform_of_tokens(tokens), len(measures)


@by_weights(show_spinner=False, max_entries=32)
def _ablation(model: str, text: str, text_b: str | None, layer: int, head: int, max_tokens: int):
    return head_ablation(load(model, "BertForPreTraining")[0], text, text_b, layer, head, max_tokens=max_tokens)


@by_weights(show_spinner="Drawing with bertviz…", max_entries=16)
def _bertviz(model: str, text: str, text_b: str | None, max_tokens: int, view: str, start: int,
             layers: tuple[int, ...] | None = None):
    # a long input's model view is drawn large enough to read (its frame grows instead)
    return render(window(_attention(model, text, text_b, max_tokens), start, DRAWN_TOKENS), view,
                  layers=list(layers) if layers else None,
                  min_scale=MODEL_VIEW_LEGIBLE_SCALE if layers is not None else MODEL_VIEW_MIN_SCALE)


c1, c2 = st.columns(2)
text = kept_widget(c1.text_area, "Sentence A", SENTENCE_A, SENTENCE_A_DEFAULT, height=70, max_chars=limits.CHARS)
text_b = kept_widget(c2.text_area, "Sentence B (optional)", SENTENCE_B, SENTENCE_B_DEFAULT, height=70,
                     max_chars=limits.CHARS)
text_b = text_b.strip() or None
# every layer's and head's attention is kept for the page: the most that fit the server's memory for one request
most = max(16, limits.for_config(loaded.config).attention_tokens // 16 * 16)
forget_outside("att_max_tokens", 16, most)
max_tokens = st.sidebar.slider("Max tokens", 16, most, min(128, most), 16, key="att_max_tokens",
                               persist_state="session",
                               help="Attention data grows with the square of the length; longer inputs are cut. "
                                    f"bertviz draws at most {DRAWN_TOKENS} of them; the heatmaps and the download "
                                    "keep them all.")
if not text.strip():
    st.info("Type a sentence A to see its attention.")
    st.stop()

result = _attention(name, text, text_b, max_tokens)
L, A = result.num_layers, result.num_heads
if result.truncated:  # (at the slider's top there is no more to raise it to: said so, not "raise it")
    st.info(f"The input was cut to {max_tokens} WordPieces (longest sentence first) to keep the page fast; "
            + ("raise *Max tokens* in the sidebar to see more." if max_tokens < most else
               f"{max_tokens} is the most this page shows of this model "
               + ("(its positions)." if most >= loaded.config.max_position_embeddings else
                  "(what one request may keep in the server's memory).")))
T = len(result.tokens)
# bertviz's view on screen (its tab is chosen below; a click on a tab reruns the page): its layers are picked here
open_view = {"Head view": "head", "Model view": "model"}.get(st.session_state.get("att_view", "Head view"))
start, drawn_layers = 0, {"head": None, "model": None}
fits = {v: layers_within_budget(window(result, 0, DRAWN_TOKENS), view=v) for v in drawn_layers}
w1, w2 = st.columns([3, 1]) if T > DRAWN_TOKENS or (open_view and len(fits[open_view]) < L) else (None, None)
if T > DRAWN_TOKENS:
    start = w1.slider("bertviz draws the tokens from position", 0, T - DRAWN_TOKENS, 0, 16, key="att_window",
                      persist_state="session", help="Drawing every line of a long input would freeze the browser.")
    st.caption(f"Your input has {T} tokens: bertviz draws tokens {start}–{start + DRAWN_TOKENS - 1} and the "
               "attention among them (weights to tokens outside that window are not drawn). The heatmaps, the "
               "head measures and the download use all {T}.".replace("{T}", str(T)))
if open_view and len(fits[open_view]) < L:
    # Every layer can be drawn, some at a time: all of them would be too many weights for the page (the head
    # view: bytes to send; the model view: lines to draw in every thumbnail).
    most = len(fits[open_view])
    picked = kept_widget(w2.multiselect, "Layers bertviz draws", f"att_window_layers_{open_view}", fits[open_view],
                         valid=lambda v: isinstance(v, list) and len(v) <= most and all(0 <= i < L for i in v),
                         options=list(range(L)), max_selections=most, format_func=lambda i: f"{i + 1}",
                         help=f"Any {most} of the {L} layers at a time in the {open_view} view.")
    drawn_layers[open_view] = tuple(sorted(picked or fits[open_view]))
bundle = ResultBundle("Attention", name, {"text": text, "text_b": text_b, "max_tokens": max_tokens})
bundle.add_array("attentions [layer, head, query, key]", result.attentions, "float16")
bundle.add_data("tokens", result.tokens)



LABELLED_TOKENS = 48  # the most token names an axis of a heatmap at most 900 px high shows without overlapping


def token_axes(fig) -> None:
    """Token names on both axes: each one for a short input; for a longer one every k-th, with its position
    (128 names overlapped into a smear), the hover naming each; the plot stays at most 900 px high."""
    if T <= DRAWN_TOKENS:
        every = -(-T // LABELLED_TOKENS)
        ticks = dict(tickmode="array", tickvals=list(range(0, T, every)),
                     ticktext=result.tokens[::every] if every == 1 else
                     [f"{i}: {result.tokens[i]}" for i in range(0, T, every)])
        fig.update_layout(xaxis=ticks, yaxis=ticks)
    fig.update_layout(height=min(900, 260 + 16 * T))


# ----- Clark et al. (2019) over Wikipedia: measured in the background, read beside the paper -------------
CLARK_CORPUS = clark.default_corpus()


@st.fragment(run_every=2.0)
def _build_progress(path: str, file: str, lesson: str) -> None:
    """A background build's progress bar, until the entry ``path`` holds ``file``."""
    s = jobs.build_state(Path(path), (Path(path) / file).is_file())
    if s["state"] != "building":
        st.rerun()  # done (or stopped): redraw the page with the result
    st.progress(min(1.0, float(s.get("fraction") or 0.0)), text=progress_line(s, lesson))
    st.caption("The measurement runs as its own process: you may leave this page; it goes on, and every visitor "
               "sees the same one.")


def _build_start(path, state: dict, segments: int, *, what: str, key: str, label: str, cost_s: float,
                 command: tuple[str, ...]) -> None:
    """The button that starts a build over Wikipedia segments in the background: the teacher's in
    classroom mode (a student is told it is not prepared, and what the server prepares now)."""
    if not writes_allowed():
        not_prepared(f"This {what} over {segments:,} segments", entry=(loaded, path))
        busy_sentence()
        return
    if state["state"] == "stopped":
        st.warning(f"The last {what} stopped at {float(state.get('fraction') or 0):.0%} (its process ended).")
    elif state["state"] == "failed":
        st.error(without_host_paths(f"The last {what} failed: {state.get('error') or state.get('message')}"))
        with st.expander("Its log"):
            st.code(without_host_paths(jobs.log_tail(path)), language=None)
    if refusal := jobs.start_refusal(path, False, what):
        st.info(refusal)
        return
    running_beside()
    if work_button(f"{label}: {said(cost_s, background_threads())}", key=key,
                 help="Runs in the background and is kept for every later visit. The time is this machine's: its "
                      "speed measured here, shared with what else runs now."):
        refusal = jobs.start_build(path, ["--model", name, "--segments", str(segments), "--corpus", CLARK_CORPUS],
                                   one_at_a_time=False, command=command, what=what,
                                   lesson=f"Attention's {what} over {segments:,} segments",
                                   said_s=seconds_now(cost_s, background_threads()))
        if not refusal:
            st.rerun()
        st.info(refusal)


def _built(path: Path, file: str, read, segments: int, **start):
    """What the background build put in the cache entry ``path`` (``read(path)``), or None while there is
    nothing yet: then the build's progress, or the button that starts it (``_build_start``'s ``start``)."""
    state = jobs.build_state(path, (path / file).is_file())
    if state["state"] == "ready" and (done := read(path)) is not None:
        return done
    if state["state"] == "building":
        _build_progress(str(path), file, f"Attention's {start['what']} over {segments:,} segments")
    else:
        _build_start(path, state, segments, **start)
        if not writes_allowed():  # a student's open page learns when the teacher starts it
            _watch_for_a_build(str(path), file, state["state"])
    return None


@st.fragment(run_every=3.0)
def _watch_for_a_build(path: str, file: str, seen: str) -> None:
    """Redraw the page when the build of ``path`` is no longer in the state ``seen`` (started, or done)."""
    if jobs.build_state(Path(path), (Path(path) / file).is_file())["state"] != seen:
        st.rerun()


def clark_section() -> None:
    """This model's measures over Wikipedia segments, and, for bert-base-uncased only, Clark et al.'s."""
    st.subheader("Over Wikipedia, as Clark et al. (2019) measured")
    st.caption(f"Clark et al. ran bert-base-uncased over 1,000 Wikipedia segments `[CLS] A [SEP] B [SEP]` of at most "
               f"{clark.MAX_PIECES} WordPieces (A and B consecutive text of one article, nothing masked); their "
               "published code counts these measures on WordPieces. Here the attention is made word-level, as their "
               "Section 4.1 does for its analysis: attention *to* a split word is the sum over its pieces, *from* it "
               "the mean, so the numbers differ a little from counts by pieces. This model runs over the built-in "
               "Wikipedia text "
               f"({corpus_title(CLARK_CORPUS)}); every number below is computed from this model.")
    segments = int(st.number_input("Segments", 1, clark.MAX_SEGMENTS, clark.MAX_SEGMENTS, 100, key="att_clark_segments",
                                   persist_state="session",
                                   help=f"At most {clark.MAX_SEGMENTS:,}, as in the paper; fewer are quicker and "
                                        "noisier. Each number of segments is measured (and kept) on its own."))
    measured = _built(clark.measures_path(loaded, CLARK_CORPUS, segments), clark.FILE, clark.read_measures, segments,
                      what="measurement", key="att_clark_build", label=f"Measure this model on {segments:,} segments",
                      cost_s=clark.estimate_seconds(loaded.config, segments), command=clark.BUILD_COMMAND)
    reference = clark.is_reference_model(name)
    ours = clark.statements(measured) if measured else None
    if reference:
        left, right = st.columns(2)
        left.markdown(f"**This model** ({measured.segments:,} segments, computed here)" if measured else
                      "**This model**: not measured yet")
        right.markdown("**Clark et al. (2019)**, bert-base-uncased")
        for key, topic in clark.STATEMENT_TOPICS.items():
            left, right = st.columns(2)
            if ours:
                left.markdown(f"*{topic}*: {ours[key]}")
            right.markdown(f"*{topic}*: {clark.CLARK_STATEMENTS[key]}")
    else:
        if ours:
            st.markdown("\n".join(f"- *{topic}*: {ours[key]}" for key, topic in clark.STATEMENT_TOPICS.items()))
        st.caption(f"Clark et al.'s findings are about bert-base-uncased ({clark.REFERENCE_MODEL}) only, so they are "
                   f"shown beside that model alone. It {how_to_get(clark.REFERENCE_MODEL)}")
    if measured:
        exports.table(clark.layer_table(measured), "att_clark_layers", "Clark et al. measures per layer", bundle,
                      hide_index=True)
        bundle.add_table("Clark et al. measures per head", clark.head_table(measured))
        st.caption(f"Each layer's measures averaged over its {A} heads, over {measured.words:,} words in "
                   f"{measured.segments:,} segments; attention spread evenly over the same words would give [SEP] "
                   f"{measured.uniform['to_sep']:.3f}, [CLS] {measured.uniform['to_cls']:.3f}, periods and commas "
                   f"{measured.uniform['to_punct']:.3f}, the previous word {measured.uniform['to_prev']:.3f}, "
                   f"entropy {measured.uniform['entropy']:.2f} nats."
                   + (f" From a terminal: `bert-explorer attention-measures build --model {shown_path(name)} "
                      f"--segments {segments}`." if writes_allowed() else ""))  # (a student has no terminal there)


# ----- heads on a map (Clark et al. 2019, Fig. 6): built in the background, read from the cache ------------
def _open_clicked_head(chart_key: str) -> None:
    """A click on the map opens that head in the heatmap (runs before the page reruns, so it may set the
    heatmap's choices and the open tab)."""
    picked = head_map.head_from_selection((st.session_state.get(chart_key) or {}).get("selection"), A)
    if picked is not None:
        st.session_state["att_hm_layer"], st.session_state["att_hm_head"] = picked
        st.session_state["att_view"] = "Heatmap"


# The two maps stand side by side, so they share no colour: the layers on a sequential scale (deeper is
# lighter, as their order is), each behaviour in a colour of its own that is the same for every model.
def _layer_colours(n: int) -> dict[str, str]:
    return dict(zip((f"layer {i}" for i in range(1, n + 1)),
                    px.colors.sample_colorscale("Viridis", [i / max(1, n - 1) for i in range(n)])))


BEHAVIOUR_COLOURS = dict(zip(LABELS, ("#d95f02", "#e7298a", "#a6761d", "#e6ab02", "#7570b3", "#66a61e",
                                      "#e41a1c", "#999999")))  # ... broad, mixed (grey: no one behaviour)
BEHAVIOUR_SYMBOLS = dict(zip(LABELS, ("diamond", "square", "triangle-up", "cross", "x", "star", "triangle-down",
                                      "circle")))


def _map_figure(points: pd.DataFrame, colour: str, title: str):
    shown = points.assign(**{"layer name": points["layer"].map(lambda l: f"layer {l}")})
    measures = {COLUMN_NAMES[c]: ":.3f" for c in COLUMN_NAMES if c in points.columns}
    # a behaviour is told by its marker's shape too (colour alone: the reds, orange and pink read alike to many)
    fig = px.scatter(shown.rename(columns=COLUMN_NAMES), x="x", y="y", color=colour, title=title,
                     symbol=colour if colour == "behaviour" else None,
                     symbol_map=BEHAVIOUR_SYMBOLS if colour == "behaviour" else {},
                     color_discrete_map={**_layer_colours(L), **BEHAVIOUR_COLOURS},
                     custom_data=["layer", "head", "behaviour"], hover_data={"x": False, "y": False, **measures},
                     hover_name=shown.apply(lambda r: f"layer {r['layer']}, head {r['head']} ({r['behaviour']})",
                                            axis=1),
                     category_orders={"layer name": [f"layer {i}" for i in range(1, L + 1)]},
                     labels={"x": "map axis 1", "y": "map axis 2", "layer name": "layer"})
    fig.update_traces(marker=dict(size=11, line=dict(width=1, color="white")))
    fig.update_yaxes(scaleanchor="x", scaleratio=1)  # distances on the map read the same both ways
    fig.update_layout(height=520, legend=dict(orientation="h", y=-0.15), margin=dict(t=70))
    return fig


def head_map_tab() -> None:
    st.caption("Each dot is one head of this model, placed so that heads that attend alike lie close together: "
               "for every two heads, the Jensen-Shannon distance between their attention rows, query token by "
               "query token, averaged over Wikipedia segments, then drawn in the plane by classical "
               "multidimensional scaling. Clark et al. (2019, \"What Does BERT Look At?\", Section 6 and Fig. 6) drew "
               "BERT-Base's heads this way and found heads of one layer, and heads of one behaviour, close "
               "together. Hover a dot for the head's measures; click it to open that head in the *Heatmap* tab.")
    st.caption("In plain words: the **Jensen-Shannon distance** says how differently two heads spread their attention "
               "over the same tokens (0 = exactly alike, 1 = nothing in common); **multidimensional scaling** places "
               "the dots so that their distances on the page come as close as a flat map allows to the measured ones; "
               "**Spearman's ρ** says whether the map keeps which pairs are nearer than which (1 = the same order, 0 "
               "= no relation): the closer to 1, the more the map can be trusted.")
    segments = int(st.number_input("Segments", 1, head_map.MAX_SEGMENTS, head_map.SEGMENTS, 50, key="att_map_segments",
                                   persist_state="session",
                                   help=f"[CLS] A [SEP] B [SEP] of at most {head_map.MAX_PIECES} WordPieces each "
                                        f"({corpus_title(CLARK_CORPUS)}). Each number of segments is built (and kept) on its own."))
    built = _built(head_map.map_path(loaded, CLARK_CORPUS, segments), head_map.FILE, head_map.read_map, segments,
                   what="head map", key="att_map_build", label=f"Map this model's {L * A} heads over {segments:,} segments",
                   cost_s=head_map.estimate_seconds(loaded.config, segments), command=head_map.BUILD_COMMAND)
    if built is None:
        return
    points = built.points()
    left, right = st.columns(2)
    for where, colour, heading, key in ((left, "layer name", "by layer", "att_map_layers"),
                                        (right, "behaviour", "by behaviour", "att_map_behaviours")):
        fig = _map_figure(points, colour, f"{L * A} heads, coloured {heading}")
        exports.figure(fig, key, f"head map coloured {heading}", bundle, container=where,
                       on_click=lambda k=key: _open_clicked_head(k), drawn=tabs[5].open)
    d, n = built.distances, L * A
    same = np.equal.outer(built.table["layer"].to_numpy(), built.table["layer"].to_numpy())
    off = ~np.eye(n, dtype=bool)
    i, j = np.unravel_index(np.argmin(np.where(off, d, np.inf)), d.shape)
    far_i, far_j = np.unravel_index(np.argmax(d), d.shape)

    def who(k: int) -> str:
        return f"layer {points['layer'][k]} head {points['head'][k]}"

    st.caption(f"{n} heads over {built.segments:,} segments ({built.wordpieces:,} WordPieces of "
               f"{corpus_title(built.corpus)}). "
               f"Mean JS distance between two heads of the same layer {d[same & off].mean():.3f}, of different "
               f"layers {d[~same].mean():.3f}; the closest pair is {who(i)} and {who(j)} ({d[i, j]:.3f}), the "
               f"farthest {who(far_i)} and {who(far_j)} ({d[far_i, far_j]:.3f}). The two axes hold "
               f"{built.explained:.0%} of what the distances spread, and the map's distances keep the order of "
               f"the computed ones with Spearman's ρ = {built.rank_correlation:.2f} (1 = the same order). Behaviour "
               "labels are the head grid's rule, measured over the same segments."
               + (f" From a terminal: `bert-explorer head-map build --model {shown_path(name)} --segments {segments}`."
                  if writes_allowed() else ""))
    exports.table(points.rename(columns=COLUMN_NAMES), "att_map_points", "head map", bundle, hide_index=True)
    bundle.add_array("JS distance between heads [head, head]", built.distances, "float32")


# The browser draws what it is sent even in a hidden tab: the bertviz views (thousands of SVG lines; a long
# input's window move drew both, 3.6 s on 2 cores) and the plotly charts (a 128-token heatmap's labels,
# about 1 s each). So each tab's drawings are sent only while it is open (a click on a tab reruns the
# page); the rest of every tab runs on every rerun, so its widgets keep their values and the zip holds
# every result.
tabs = kept_tabs(["Head view", "Model view", "Heatmap", "Head behaviours", "Rollout and flow", "Head map",
                  "Switch a head off"], "att_view", on_change="rerun")


def _bertviz_html(view_name: str) -> str | None:
    try:
        return _bertviz(name, text, text_b, max_tokens, view_name, start, drawn_layers[view_name]).html
    except OfflineAssetsMissing:
        return None  # the zip goes without it, as the page went without drawing it


def bertviz_tab(tab, view_name: str, caption: str) -> None:
    if not tab.open:
        # not drawn now; the page's zip still holds it (rendered when the zip is made)
        bundle.add_view(f"bertviz {view_name} view", lambda: _bertviz_html(view_name))
        return
    st.caption(caption)
    try:
        view = _bertviz(name, text, text_b, max_tokens, view_name, start, drawn_layers[view_name])
    except OfflineAssetsMissing as e:
        st.warning(f"bertviz cannot draw offline: {e}")
        return
    if view.layers != list(range(L)):
        st.caption(f"Showing layers {', '.join(str(i + 1) for i in view.layers)} of 1–{L} to keep the page light; "
                   "pick others under *Layers bertviz draws*.")
    if view.numbered_from == 0:
        st.caption("bertviz numbers layers and heads from 0 inside this drawing: its layer 0 is our layer 1.")
    if view.fit is not None and view.fit.scale < 1:
        st.caption(f"Drawn at {view.fit.scale:.0%} of bertviz's size so that all {len(view.layers)} layers × "
                   f"{A} heads fit in the frame.")
    st.iframe(view.html, height=view.height)
    exports.view(view.html, f"att_{view_name}_view", f"bertviz {view_name} view", bundle)


with tabs[0]:
    bertviz_tab(tabs[0], "head", "Pick a layer; click a coloured square to show or hide a head (double-click: that head "
                f"alone), hover a token to see only its lines. With the {A} heads shown each line's darkness is its "
                f"weight ÷ {A}, so a weight under {A}/255 ≈ {A / 255:.3f} is too light to see and is not drawn; a head "
                "alone draws every weight from 1/255. For a pair, *Attention* filters A→A, B→B, A→B and B→A.")
with tabs[1]:
    bertviz_tab(tabs[1], "model", f"All heads of all layers at once: one small picture per (layer, head), layers 1–{L} "
                f"from top to bottom, heads 1–{A} from left to right; click a picture to enlarge it. Look for "
                "heads that all point to [SEP] or [CLS], and for diagonal heads that look one token back or ahead.")

with tabs[2]:
    h1, h2 = st.columns(2)
    was = fit_kept("att_hm_layer", L - 1), fit_kept("att_hm_head", A - 1)
    layer = h1.selectbox("Layer", range(L), key="att_hm_layer",
                         persist_state="session", format_func=lambda i: f"{i + 1}")
    head = h2.selectbox("Head", range(A), key="att_hm_head", persist_state="session", format_func=lambda i: f"{i + 1}")
    past_the_model(was, L, A)
    fig = px.imshow(result.attentions[layer, head], x=list(range(len(result.tokens))),
                    y=list(range(len(result.tokens))), color_continuous_scale="Blues", zmin=0, zmax=1,
                    labels=dict(x="attended token (key)", y="attending token (query)", color="weight"),
                    aspect="auto", title=f"{layer_name(layer).capitalize()}, {head_name(head)}: each row sums to 1")
    token_axes(fig)
    exports.figure(fig, "att_heatmap", f"attention of layer {layer + 1} head {head + 1}", bundle, drawn=tabs[2].open)

with tabs[3]:
    st.caption("Each head measured as Clark et al. (2019, \"What Does BERT Look At?\") did: the share of its "
               "attention (averaged over the query tokens) that goes to [CLS], to [SEP], to periods and commas, to "
               "the previous and the next token and to itself, and the entropy of its attention beside that of "
               "uniform attention. In BERT-Base they found heads that look almost only at the previous or next "
               "token, heads that park on [SEP], and broad heads in the first layers. " + BEHAVIOUR_RULE)
    with_reference = st.checkbox(f"Average over the {len(REFERENCE_INPUTS)} built-in sentences too", True,
                                 key="att_reference", persist_state="session",
                                 help="One input can make a head look special; several show what it usually does. "
                                      "Each input counts once.")
    stats, uniform, n_inputs = _head_measures(name, text, text_b, max_tokens, with_reference)
    measured_on = (f"your input and the {n_inputs - 1} built-in sentences" if with_reference else "your input")
    st.markdown(describe_behaviours(stats, measured_on, uniform))
    st.caption(f"For comparison, uniform attention on the same tokens would give [CLS] {uniform['to_cls']:.2f}, "
               f"[SEP] {uniform['to_sep']:.2f}, periods and commas {uniform['to_punct']:.2f}, previous / next "
               f"token and itself {uniform['to_prev']:.2f}, entropy {uniform['entropy']:.2f} nats.")
    stat = st.selectbox("Pattern", list(STATS), format_func=STATS.get, key="att_stat", persist_state="session")
    grid = stats.pivot(index="layer", columns="head", values=stat)
    fig = px.imshow(grid.values, x=[head_name(h) for h in grid.columns], y=[layer_name(i) for i in grid.index],
                    color_continuous_scale="Viridis", text_auto=".2f", aspect="auto",
                    zmin=0, zmax=None if stat == "entropy" else 1,
                    labels=dict(color=COLUMN_NAMES[stat] if stat.startswith("entropy") else
                                f"attention weight to {COLUMN_NAMES[stat]}"),
                    title=f"{STATS[stat][0].upper()}{STATS[stat][1:]}, each head of each layer "
                          f"(measured on {measured_on})")
    fig.update_layout(height=140 + 48 * L)
    exports.figure(fig, "att_stats_grid", f"head measure {stat}", bundle, drawn=tabs[3].open)
    exports.table(behaviour_table(stats), "att_behaviours", "head behaviours", bundle, hide_index=True)
    bundle.add_table("head measures", stats)
    clark_section()

with tabs[4]:
    st.caption("Attention rollout and attention flow (Abnar & Zuidema 2020, \"Quantifying Attention Flow in "
               "Transformers\") both follow attention through the layers: the heads of a layer are averaged and the "
               "residual connection counts as attention to oneself (0.5 · A + 0.5 · I). **Rollout** multiplies the "
               "layers: row *i* adds up every path from each input token to position *i*, so a wide pipe shared by "
               "many paths is counted once per path. **Flow** treats the weights as pipe capacities and asks how "
               "much could reach position *i* from each input token at once (a maximum flow), so a shared pipe "
               "is counted once.")
    rollout = _rollout(name, text, text_b, max_tokens)
    r1, r2 = st.columns(2)
    forget_outside("att_rollout_layer", 1, L)
    r_layer = r1.slider("After layer", 1, L, L, key="att_rollout_layer", persist_state="session") - 1 if L > 1 else 0
    f_position = r2.selectbox("Into position", range(T), key="att_flow_position", persist_state="session",
                              format_func=lambda i: f"{i}: {result.tokens[i]}")
    fig = px.imshow(rollout[r_layer], color_continuous_scale="Oranges", zmin=0, aspect="auto",
                    labels=dict(x="input token", y="position", color="share"),
                    title=f"Rollout after layer {r_layer + 1}: how much of each position comes from each input "
                          "token (each row sums to 1)")
    token_axes(fig)
    exports.figure(fig, "att_rollout", f"attention rollout after layer {r_layer + 1}", bundle, drawn=tabs[4].open)
    bundle.add_array("rollout [layer, position, input token]", rollout, "float16")
    if T > flow.MAX_TOKENS:
        st.info(flow.TOO_LONG.format(max=flow.MAX_TOKENS, T=T) + "; rollout is shown for all of them.")
    elif tabs[4].open:  # T max-flows: computed while this tab is open, as the head switch-off is
        fl = _flow(name, text, text_b, max_tokens, f_position, r_layer)
        shares = pd.DataFrame({"token": [f"{i}: {t}" for i, t in enumerate(result.tokens)] * 2,
                               "share": [*fl.rollout, *fl.flow_share],
                               "measure": ["rollout"] * T + ["attention flow"] * T})
        fig = px.bar(shares, x="token", y="share", color="measure", barmode="group",
                     title=f"Into position {f_position} ({result.tokens[f_position]}) after {layer_name(r_layer)}: "
                           "rollout and attention flow")
        exports.figure(fig, "att_flow", f"rollout and attention flow into position {f_position}", bundle)
        top_r, top_f = int(fl.rollout.argmax()), int(fl.flow_share.argmax())
        st.caption(f"The {T} max-flows on this model's graph of {r_layer + 2} × {T} nodes took {fl.seconds:.2f} s "
                   f"on this server. Rollout gives the most to {top_r}: {result.tokens[top_r]} "
                   f"({fl.rollout[top_r]:.3f}), flow to {top_f}: {result.tokens[top_f]} ({fl.flow_share[top_f]:.3f}); "
                   f"the flows themselves range from {fl.flow.min():.3f} to {fl.flow.max():.3f} (at most 1: "
                   "position *i* takes in one unit) and are scaled to sum to 1 here, as in the paper. From a "
                   f"terminal: `bert-explorer attention-flow --model {shown_path(name)} --text \"…\" --position "
                   f"{f_position} --layer {r_layer + 1}`.")
        exports.table(fl.table(), "att_flow_table", "attention flow and rollout", bundle, hide_index=True)
    cls_share = pd.DataFrame({"token": [f"{i}: {t}" for i, t in enumerate(result.tokens)],
                              "share": rollout[r_layer][0]})
    fig = px.bar(cls_share, x="token", y="share", title="What the [CLS] vector is made of (row 0)")
    exports.figure(fig, "att_rollout_cls", "what the CLS vector is made of", bundle, drawn=tabs[4].open)

with tabs[5]:
    head_map_tab()

with tabs[6]:
    # Computed only while open, as the bertviz views: it runs the model twice more (with and without the
    # head), the largest share of a new sentence's time on BERT-Base. Its choices are kept meanwhile.
    st.caption("The head mask multiplies one head's output by 0. In BERT-Base, Michel et al. (2019) found that "
               "many heads can go with little change and a few matter a lot; try it on this model. With a "
               "masked-LM model, put a [MASK] in sentence A to see whether the predicted word changes.")
    m1, m2 = st.columns(2)
    a_layer = kept_widget(m1.selectbox, "Layer", "att_abl_layer", 0, valid=lambda v: v in range(L),
                          options=range(L), format_func=lambda i: f"{i + 1}")
    a_head = kept_widget(m2.selectbox, "Head", "att_abl_head", 0, valid=lambda v: v in range(A),
                         options=range(A), format_func=lambda i: f"{i + 1}")
    if tabs[6].open:
        abl = _ablation(name, text, text_b, a_layer, a_head, max_tokens)
        st.metric("[CLS] vector, cosine with the intact model", f"{abl['cls_cosine']:.4f}",
                  help="1 = unchanged. The [CLS] vector feeds NSP and sentence classifiers.")
        df = pd.DataFrame({"token": [f"{i}: {t}" for i, t in enumerate(abl["tokens"])],
                           "relative change": abl["relative_delta"]})
        fig = px.bar(df, x="token", y="relative change",
                     title=f"‖h′ − h‖ / ‖h‖ of the last layer, {layer_name(a_layer)}, {head_name(a_head)} "
                           "switched off")
        exports.figure(fig, "att_ablation", f"layer {a_layer + 1} head {a_head + 1} switched off", bundle)
        if abl["mlm"]:
            exports.table(pd.DataFrame(abl["mlm"]), "att_ablation_mlm", "masked word with the head off", bundle,
                          hide_index=True)

st.divider()
exports.bundle_button(bundle, "att_bundle")
