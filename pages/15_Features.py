from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bert_explorer.safe_text import markdown_text as md
from bert_explorer.analysis.features import build as fb, splice
from bert_explorer.analysis.features.sae import SaeConfig
from bert_explorer.app import exports
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app.state import by_inputs, by_weights, load, picked_model, without_host_paths
from bert_explorer.app.roles import (busy_sentence, not_prepared, progress_line, running_beside, work_button,
                                     writes_allowed)
from bert_explorer.app.keep import fit_kept, opening_index, past_the_layers, text_box
from bert_explorer.app.widgets import WITH_HEADS, intro, why_no_head
from bert_explorer.data.corpora import corpus_title
from bert_explorer.runs import neighbour_jobs as jobs
from bert_explorer.runs.report import duration_text
from bert_explorer.train.estimate import background_threads
from bert_explorer.train.speed import said, seconds_now

intro("Features of a layer", """
A **sparse autoencoder** (SAE) rewrites each token's vector after one layer as a few active *features*
out of many (several times the layer's width), each a direction in the layer's space. This goes beyond the
BERT paper: it is interpretability work of later years (Bricken et al. 2023, "Towards Monosemanticity"; this
one is Gao et al. 2024's TopK SAE), applied to the encoder of Devlin et al. 2019, Section 3. Below: how much of
the layer it keeps, then each feature's top contexts in Wikipedia text, how often it fires and the words it
pushes up; the features of your own sentence; and what happens to the masked-word probe when you turn a feature
up or down at a token.
""")

ARCH = "BertForPreTraining"
name, loaded = picked_model(ARCH)
# (a model without a trained MLM head had the page closed, though an SAE needs none: its features, their contexts
# and a sentence's features are the encoder's; only the words, the loss with the SAE and steering read the head)
words_read = fb.reads_words(loaded)
if not words_read:
    st.info(f"This model has no trained masked-LM head: {why_no_head(loaded, fb.MLM_HEAD)}. Its SAE's features, "
            "their top contexts and the features of your sentence are shown below; the words a feature pushes up, "
            "the masked-LM loss with the SAE spliced in and steering read that head, and are left out. "
            + WITH_HEADS.replace("Pick", "For them, pick"))
L = loaded.config.num_layers
H = loaded.config.hidden_size


@by_inputs(shared=True, max_entries=4, show_spinner="Opening the SAE…")
def _open(path: str) -> fb.Features:
    return fb.Features(path)


@by_weights(max_entries=16, show_spinner="Timing a few training steps…")
def _estimate(model: str, layer: int, k: int, width: int) -> dict:
    return fb.estimate_seconds(load(model, ARCH)[0], _settings(layer, k, width), threads=background_threads())


def _settings(layer: int, k: int, width: int) -> fb.FeatureSettings:
    return fb.FeatureSettings(layer=layer, sae=SaeConfig(k=k, width_factor=width))


c1, c2, c3 = st.columns([1, 1, 1])
was = fit_kept("sae_layer", L)  # (a deeper model's layer: this one's last, said; Streamlit went to the default)
layer = c1.selectbox("Layer", list(range(1, L + 1)), **opening_index("sae_layer", fb.default_layer(loaded) - 1),
                     key="sae_layer", persist_state="session",
                     help="The SAE reads the residual stream after this encoder layer (its output, after LayerNorm).")
past_the_layers(was, L)  # (a layer the user chose is not replaced without a word)
every_sae = fb.trained(loaded)  # (read once a run: it lists the cache and reads each entry's meta)
trained = [m for m in every_sae if m["layer"] == layer]
k = c2.number_input("Active features per token (k)", *fb.K_RANGE, SaeConfig.k, 4, key="sae_k", persist_state="session",
                    help="TopK keeps the k largest features of each token and sets the rest to 0: the L0.")
width = c3.number_input("Features per hidden unit", *fb.WIDTH_RANGE, SaeConfig.width_factor, 2, key="sae_width",
                        persist_state="session",
                        help=f"The SAE's width: {SaeConfig.width_factor} gives {SaeConfig.width_factor * H:,} features here.")
settings = _settings(layer, int(k), int(width))
state = fb.state(loaded, settings)
path = Path(state["path"])
def _offer_training() -> None:
    """The estimate of training an SAE of these settings and the button that starts it (the teacher's: a
    student sees that it is not prepared, and learns when the teacher starts it)."""
    if not writes_allowed():
        not_prepared(f"The SAE of layer {layer} with these settings", entry=(loaded, path))
        busy_sentence()
        st.caption("Training is off in classroom mode for students (it would hold the server's CPU for minutes); "
                   "SAEs trained on this server before are offered to everyone.")
        _watch_for_a_build(name, layer, int(k), int(width), state["state"])
        return
    est = _estimate(name, layer, int(k), int(width))
    st.markdown(
        f"Training reads **{est['tokens']:,} WordPieces** of {corpus_title(fb.DEFAULT_CORPUS)} through the "
        f"model's {f'first {layer} layers' if layer > 1 else 'first layer'}, keeps their vectors (fp16, "
        f"{est['disk_bytes'] / 1e9:.1f} GB in the app's cache, within its limit), then trains an SAE of "
        f"{settings.sae.width_factor * H:,} features with k = {settings.sae.k}: **{said(est['seconds'], background_threads())}** "
        f"(on an idle machine: activations about {duration_text(est['activation_seconds'])}, training about "
        f"{duration_text(est['train_seconds'])}: {est['step_seconds']:.2f} s a step, timed on this machine; then the "
        f"features' statistics{' and the masked-LM loss with the SAE spliced in' if words_read else ''}, with the "
        f"job's start, about {duration_text(est['after_seconds'])}). It is kept for every later visit and every "
        "visitor.")
    if refusal := jobs.start_refusal(path, False, "SAE"):
        st.info(refusal)
        return
    running_beside()
    if work_button(f"Train the SAE of layer {layer} with k = {int(k)}", key="sae_train", type="primary"):
        refusal = jobs.start_build(path, fb.build_argv(name, settings), one_at_a_time=False,
                                   room_bytes=est["disk_bytes"], command=fb.BUILDER, what="SAE",
                                   lesson=f"Features of layer {layer}",
                                   said_s=seconds_now(est["seconds"], background_threads()))
        if not refusal:
            st.rerun()
        st.info(refusal)


@st.fragment(run_every=3.0)
def _watch_for_a_build(model: str, layer: int, k: int, width: int, seen: str) -> None:
    """Redraw a student's page when the SAE of these settings is no longer in the state ``seen`` (the teacher
    started it, or it is done): an open page said "not prepared" through the whole build."""
    if fb.state(load(model, ARCH)[0], _settings(layer, k, width))["state"] != seen:
        st.rerun()


elsewhere = sorted({m["layer"] for m in every_sae} - {layer})
if not trained and elsewhere and state["state"] not in ("ready", "building"):
    # (a student who met layer 3 kept from another model read "not prepared" of a model whose layer 2 was ready)
    st.info(f"No SAE of layer {layer} is trained for this model; SAEs of layer "
            f"{', '.join(map(str, elsewhere))} are: choose {'that layer' if len(elsewhere) == 1 else 'one'} above.")
if trained and state["state"] not in ("ready", "building"):
    labels = {m["path"]: f"layer {m['layer']}: {m['n_features']:,} features, k = {m['k']}, {m['tokens']:,} tokens"
              for m in trained}
    st.info(f"An SAE of layer {layer} with other settings is trained; it is shown below"
            + (". Train one with these settings below, or pick another of those trained." if writes_allowed()
               else ", or pick another of those trained."))
    if writes_allowed():  # (the button was never drawn here: another setting could not be trained at all)
        _offer_training()
    path = Path(st.selectbox("Trained SAEs of this layer", list(labels), format_func=labels.get, key="sae_pick",
                             persist_state="session"))
    state = {"state": "ready"}


@st.fragment(run_every=2.0)
def _watch(model: str, layer: int, k: int, width: int) -> None:
    s = fb.state(load(model, ARCH)[0], _settings(layer, k, width))
    if s["state"] != "building":
        st.rerun()
    st.progress(min(1.0, float(s.get("fraction") or 0.0)), text=progress_line(s, f"Features of layer {layer}"))
    if fb.stop_file(Path(s["path"])).exists():
        st.caption("Cancelling: the training stops at its next step.")
    elif work_button("Cancel", key="sae_cancel"):  # the teacher's, never a student's
        fb.request_stop(Path(s["path"]))
        st.rerun()
    st.caption("The training runs as its own process: you may leave this page; it goes on, and every visitor "
               "sees the same training.")


if state["state"] == "building":
    st.subheader(f"Training the SAE of layer {layer}")
    _watch(name, layer, int(k), int(width))
    st.stop()

if state["state"] != "ready":
    st.subheader(f"No SAE of layer {layer} with these settings yet")
    if state["state"] == "failed":
        st.error(without_host_paths(f"The last training failed: {state.get('error') or state.get('message')}"))
    elif state["state"] == "stopped":
        st.warning("The last training stopped before it finished (its process ended); train again to start over.")
    _offer_training()
    st.stop()

feats = _open(str(path))
meta = feats.meta
bundle = ResultBundle("Features of a layer", name, {"layer": meta["layer"], "k": meta["k"],
                                                    "features": meta["n_features"]})

# ----- its quality --------------------------------------------------------------------------------
st.subheader(f"How good the SAE of layer {meta['layer']} is")
q = st.columns(5)
q[0].metric("Variance explained", f"{meta['fve']:.3f}", help="1 - (squared error of the reconstruction) / "
            "(variance of the vectors), over every training token")
q[1].metric("Mean L0", f"{meta['mean_l0']:.1f}", help="features active per token (TopK: at most k)")
q[2].metric("Dead features", f"{meta['dead_fraction']:.1%}", help="never active on any of the training tokens")
q[3].metric("Dense features", f"{meta['dense_fraction']:.1%}", help="active on more than 10 % of tokens")
losses_read = words_read and meta.get("loss_recovered") is not None
q[4].metric("Loss recovered", f"{meta['loss_recovered']:.1%}" if losses_read else "—",
            help="(mean-replaced loss - SAE loss) / (mean-replaced loss - clean loss)" + (
                "" if losses_read else "; read with the masked-LM head, which this model has not trained"))
st.caption("In plain words: **variance explained** is how much of the layer's vectors the SAE rebuilds from its few "
           "features (1 = all of it; higher is better); **mean L0** is how many features are on for a token on "
           "average (fewer = sparser, easier to read); **dead** features never fire and teach nothing (fewer is "
           "better); **loss recovered** is how much of the model's masked-word skill survives when the layer is "
           "replaced by the SAE's rebuild (100 % = all of it).")
if losses_read:
    losses = pd.DataFrame({"model": ["clean", "layer replaced by the SAE", "layer replaced by its mean"],
                           "masked-LM loss": [meta["loss_clean"], meta["loss_sae"], meta["loss_mean"]]})
    fig = go.Figure(go.Bar(x=losses["masked-LM loss"], y=losses["model"], orientation="h",
                           text=[f"{v:.3f}" for v in losses["masked-LM loss"]], textposition="auto"))
    fig.update_layout(title=f"Masked-LM loss on {meta['eval_sequences']} held-out sequences", height=220,
                      xaxis_title="masked-LM loss (cross-entropy, nats)", yaxis_title=None, margin=dict(t=40, b=40))
    exports.figure(fig, "sae_losses", bundle=bundle)
st.caption(f"{meta['n_features']:,} features, k = {meta['k']}, trained on {meta['tokens']:,} tokens of "
           f"{corpus_title(meta['corpus'])} ({meta['settings']['epochs']} pass{'es' if meta['settings']['epochs'] > 1 else ''}) in "
           f"{duration_text(meta['seconds'])} ({duration_text(meta['activation_seconds'])} of it reading the "
           f"activations), on {meta['threads']} thread{'s' if meta['threads'] > 1 else ''}. The losses replace the "
           "layer's output at every WordPiece but [CLS] and [SEP] (the SAE never saw them).")

# ----- the browser ---------------------------------------------------------------------------------
st.subheader("Browse the features")
s1, s2 = st.columns([1, 2])
word = text_box(s2.text_input, "Find features by a word", "", key="sae_word", persist_state="session", max_chars=40,
                     help="The features with the highest mean activation on this word across the corpus")
if word.strip():
    hits = pd.DataFrame(feats.search(loaded.tokenizer, word))
    # a word of several WordPieces is searched by its first ("xyzzy" answered for "x" without a word)
    pieces = loaded.tokenizer.encode(word.strip()).tokens[1:-1]
    searched = pieces[0] if pieces else word
    if len(pieces) > 1:
        s2.caption(f"“{md(word.strip())}” is {len(pieces)} WordPieces ({', '.join(md(p) for p in pieces)}): the "
                   f"features below are those of its first, **{md(searched)}**.")
    if hits.empty:
        s2.info(f"“{md(searched)}” does not occur in the corpus's {meta['tokens']:,} tokens.")
    else:
        exports.table(hits, "sae_search", f"features of {searched}", bundle, container=s2, hide_index=True,
                      height=200)
alive = [int(f) for f in (feats.table["density"] > 0).nonzero()[0]]
default = int(hits["feature"].iloc[0]) if word.strip() and not hits.empty else (alive[0] if alive else 0)
# (each SAE its own: feature 100 of one is not feature 100 of another, and a smaller one reset it without a word)
feature = int(s1.number_input("Feature", 0, feats.n_features - 1, default, 1,
                              key=f"sae_feature_{word}_{path.name}", persist_state="session"))
bundle.inputs["feature"] = feature
summary = feats.summary(feature)
s1.markdown(f"Fires on **{summary['density']:.3%}** of tokens; largest activation {summary['max_activation']:.2f}, "
            f"mean when active {summary['mean_activation']:.2f}.")
if words_read:
    wordsd = feats.words(feature, loaded.tokenizer)
    s1.markdown("**Pushes up**: " + ", ".join(f"`{w}`" for w, _ in wordsd["up"]) +
                "  \n**Pushes down**: " + ", ".join(f"`{w}`" for w, _ in wordsd["down"]))
    s1.caption("Words read straight through the MLM head (the feature added to the layer's mean vector), skipping "
               "the layers above, as the *logit lens* does (reading a middle layer's vector with the output head, "
               "as if it were the last layer's); steering below runs them.")

contexts = pd.DataFrame(feats.top_contexts(feature))
if contexts.empty:
    st.info(f"Feature {feature} never fires on the corpus (a dead feature).")
else:
    shown = contexts[["activation", "left", "token", "right", "source"]].rename(columns={
        "left": "left context", "token": "token", "right": "right context"})
    exports.table(shown, "sae_contexts", f"feature {feature} top contexts", bundle, hide_index=True,
                  column_config={"activation": st.column_config.ProgressColumn(
                      "activation", format="%.2f", min_value=0.0, max_value=float(contexts["activation"].max())),
                      "left context": st.column_config.TextColumn(width="large"),
                      "token": st.column_config.TextColumn(width="small", help="the token it fires on"),
                      "right context": st.column_config.TextColumn(width="large")})
    edges = [summary["bin_width"] * i for i in range(len(summary["histogram"]) + 1)]
    hfig = go.Figure(go.Bar(x=[(a + b) / 2 for a, b in zip(edges, edges[1:])], y=summary["histogram"],
                            width=summary["bin_width"] * 0.95))
    hfig.update_layout(title=f"Feature {feature}: activations when it fires", height=260, yaxis_type="log",
                       xaxis_title="activation", yaxis_title="tokens (log scale)", margin=dict(t=40, b=40))
    # ticks at the powers of ten alone, in full (plotly's own log ticks read "10, 2, 5, 100, 2, 5": a "5" taken
    # for 5 tokens)
    hfig.update_yaxes(dtick=1, tickformat=",d")
    exports.figure(hfig, "sae_hist", bundle=bundle)

# ----- your sentence -------------------------------------------------------------------------------
st.subheader("The features of your sentence")
text = text_box(st.text_input, "Sentence", "the river bank flooded after the storm , so the bank closed early .",
                     key="sae_text", persist_state="session", max_chars=400)
if text.strip():
    bundle.inputs["sentence"] = text  # (what the tables came from, in the zip's input.json: only the SAE was there)
    rows = feats.sentence(loaded, text)
    table = pd.DataFrame([{"#": r["position"], "token": r["token"],
                           "features (activation)": "(left out of the SAE's training)" if r.get("left_out") else
                           ", ".join(f"{f} ({v:.1f})" for f, v in r["features"])}
                          for r in rows])
    exports.table(table, "sae_sentence", "features of the sentence", bundle, hide_index=True)

# ----- steering ------------------------------------------------------------------------------------
st.subheader("Steer a feature through the masked-word probe")
st.caption("The feature's direction is added at one token (or its activation clamped to a value; 0 switches it "
           "off) after this layer; the model runs on and the MLM head guesses the [MASK] again.")
if not words_read:
    st.info("Steering reads the masked-LM head's guesses, and this model has no trained one.")
else:
    g1, g2, g3, g4 = st.columns([3, 1.2, 1, 1])
    cloze = text_box(g1.text_input, "Sentence with [MASK]", "she swam across the [MASK] to the other side .",
                     key="sae_cloze", persist_state="session", max_chars=300)
    pieces = [loaded.tokenizer.id_to_token(i) for i in loaded.tokenizer.encode(cloze).input_ids]
    if "[MASK]" not in pieces:
        st.info("Write [MASK] where a word should be guessed.")
    else:
        pos = g2.selectbox("At token", list(range(1, len(pieces) - 1)), index=pieces.index("[MASK]") - 1,
                           format_func=lambda i: f"{i}: {pieces[i]}", key=f"sae_pos_{hash(cloze)}",
                           persist_state="session")
        mode = g3.selectbox("How", ["add", "clamp"], key="sae_mode", persist_state="session")
        amount = g4.number_input("Amount", -fb.MAX_AMOUNT, fb.MAX_AMOUNT,
                                 float(round(summary["max_activation"], 1) or 5.0), 1.0, key=f"sae_amount_{feature}",
                                 persist_state="session", help="added to the activation, or the value it is clamped to")
        bundle.inputs["steering"] = {"sentence": cloze, "token": int(pos), "how": mode, "amount": float(amount)}
        steer_rows = pd.DataFrame(splice.steering_table(loaded, feats.sae, feats.layer, cloze, feature, pos, mode,
                                                        amount))
        for c in ("rank before", "rank after"):  # not in that top-k: a blank cell
            steer_rows[c] = [str(int(r)) if r == r and r is not None else "" for r in steer_rows[c]]
        exports.table(steer_rows, "sae_steer", f"steering feature {feature}", bundle, hide_index=True,
                      column_config={c: st.column_config.NumberColumn(format="%.4f")
                                     for c in ("before", "after", "change")})
        sfig = go.Figure([go.Bar(name=n, x=steer_rows["word"], y=steer_rows[n]) for n in ("before", "after")])
        sfig.update_layout(title=f"The probe's guesses before and after steering feature {feature}", barmode="group",
                           height=300, yaxis_title="probability", xaxis_title=None, margin=dict(t=40, b=40))
        exports.figure(sfig, "sae_steer_fig", bundle=bundle)

st.divider()
bundle.add_array("feature direction", feats.sae.direction(feature).numpy())
exports.bundle_button(bundle, "sae_bundle")
