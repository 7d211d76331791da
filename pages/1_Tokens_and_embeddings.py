import re

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bert_explorer import limits
from bert_explorer.analysis import embeddings as emb
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.keep import (SENTENCE_A, SENTENCE_A_DEFAULT, SENTENCE_B, SENTENCE_B_DEFAULT, forget_outside,
                                   kept_widget, text_box)
from bert_explorer.app.state import by_weights, load, picked_model
from bert_explorer.app.widgets import intro, sentence_of
from bert_explorer.safe_text import chart_text, markdown_text as md

intro("Tokens and embeddings", """
Before any attention, BERT turns text into WordPieces and gives each one a vector: the sum of a
**token**, a **segment** (sentence A or B) and a **position** embedding (Devlin et al. 2019, Section 3,
"Input/Output Representations" and Figure 2), then a LayerNorm (Google's released code). Below you see the
pieces, the size of each part, how alike the learned positions are, a map of word vectors, and
how alike one word's vector stays across sentences as the layers add context.
""")

ARCH = "BertForPreTraining"  # loads encoder-only checkpoints too (heads reported missing)
name, loaded = picked_model(ARCH)


# Cached by the model's name, its weights and the inputs (app.state.by_weights): a checkpoint
# rewritten under the same path is computed anew. The model itself is cached by state.load.
@by_weights(max_entries=64, show_spinner=False)
def representation(name: str, a: str, b: str | None):
    return emb.input_representation(load(name, ARCH)[0], a, b)


@by_weights(max_entries=16, show_spinner=False)
def positions(name: str, n: int):
    return emb.position_similarity(load(name, ARCH)[0], n)


@by_weights(max_entries=64, show_spinner="Projecting…")
def word_map(name: str, words: tuple[str, ...], method: str):
    wv = emb.static_word_vectors(load(name, ARCH)[0], list(words))
    try:
        return wv, emb.project(wv.vectors, method)
    except ValueError as e:  # ("king king" is one point: said why, where two words were typed)
        raise ValueError(f"{str(e).rstrip('.')} (words of the same WordPieces are one point: a word typed twice, or "
                         "“Bank” and “bank” for an uncased model)") from None


@by_weights(max_entries=64, show_spinner="Projecting…")
def context_map(name: str, word: str, sentences: tuple[str, ...], layer: int, method: str):
    ctx = emb.word_in_context(load(name, ARCH)[0], word, list(sentences))
    return ctx, emb.project(ctx.vectors[:, layer], method)


@by_weights(max_entries=64, show_spinner=False)
def similarity(name: str, word: str, sentences: tuple[str, ...]):
    return emb.contextual_similarity(load(name, ARCH)[0], word, list(sentences))


def lines(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.splitlines() if s.strip())


L = loaded.config.num_layers
LIMITS = limits.for_config(loaded.config)  # what one request may cost the server with this model

# ----- 1. WordPieces --------------------------------------------------------------------------
st.subheader("1 · WordPieces, segments and positions")
c1, c2 = st.columns(2)
text_a = kept_widget(c1.text_input, "Sentence A", SENTENCE_A, SENTENCE_A_DEFAULT, max_chars=limits.CHARS)
text_b = kept_widget(c2.text_input, "Sentence B (optional)", SENTENCE_B, SENTENCE_B_DEFAULT, max_chars=limits.CHARS)
if not text_a.strip():
    st.info("Write sentence A to see its WordPieces.")
    st.stop()
rep = representation(name, text_a, text_b.strip() or None)
bundle = ResultBundle("Tokens and embeddings", name, {"text": text_a, "text_b": text_b.strip() or None})
if rep.truncated:
    st.warning(f"The input was cut to {len(rep.tokens)} WordPieces"
               f"{' (the longer sentence first)' if text_b.strip() else ''}: this page shows at "
               f"most {len(rep.tokens)}, one row and one bar each, though the model reads up to "
               f"{loaded.config.max_position_embeddings:,}. Shorten it to choose what is shown.")
exports.table(rep.table(), "emb_tokens", "wordpieces", bundle, hide_index=True)
st.caption("Words missing from the vocabulary are split into pieces; `##` marks a piece that continues a word. "
           "`[CLS]` starts every input, `[SEP]` ends each sentence; sentence B's tokens get segment 1.")
# what the table alone did not say: a special token typed as text is read as that token (a second [CLS] with id
# 101 stood in sentence A), and an [UNK] stands for a whole word
typed = [t for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]") if t in text_a or t in text_b]
if typed:
    st.caption(f"{', '.join(f'`{t}`' for t in typed)} typed in the text {'is' if len(typed) == 1 else 'are'} read as "
               f"the special token{'' if len(typed) == 1 else 's'} {'itself' if len(typed) == 1 else 'themselves'}, "
               "as BERT's own tokenizer reads them, not as letters: the model sees them as it sees the ones it adds.")
unknown = rep.tokens.count("[UNK]") - sum(text.count("[UNK]") for text in (text_a, text_b))
if unknown > 0:
    st.caption(f"{unknown} piece{' is' if unknown == 1 else 's are'} `[UNK]`: a word holding a character this "
               "vocabulary has no piece for (an emoji, a character of a script it never saw) becomes one `[UNK]`, "
               "whole.")

# ----- 2. The three parts --------------------------------------------------------------------
st.subheader("2 · Token + segment + position, then LayerNorm")
log_y = st.checkbox("Logarithmic axis", True, key="emb_norm_log", persist_state="session",
                    help="LayerNorm makes vectors much longer than the raw parts; a log axis shows both.")
fig = px.bar(rep.norms_frame(), x="label", y="norm", color="part", barmode="group", log_y=log_y,
             category_orders={"part": list(emb.PARTS)}, labels={"label": "position: piece", "norm": "length ‖v‖"},
             title="Length of each part of the input vector, per WordPiece")
fig.update_layout(height=420, margin=dict(l=10, r=10, t=50, b=10), legend_title_text="")
if log_y:  # ticks at 1, 2, 5 x each power of ten, each a whole number: plotly's own label 0.4 ... 0.9 "4 5 6 7 8 9"
    fig.update_yaxes(tickvals=[m * 10.0 ** e for e in range(-3, 4) for m in (1, 2, 5)], tickformat="~g")
exports.figure(fig, "emb_norms", bundle=bundle)
before, after = rep.length_range("sum (before LayerNorm)"), rep.length_range("after LayerNorm")
st.caption("The segment vector is one and the same for every token of a sentence; the position vector changes "
           f"with each slot. Before LayerNorm the sums have lengths {before[0]:.1f} to {before[1]:.1f} "
           f"(the longest {before[2]:.1f} times the shortest); after it, {after[0]:.1f} to "
           f"{after[1]:.1f} ({after[2]:.1f} times). LayerNorm gives every token mean 0 and variance 1 over its "
           "units; its learned gain and bias, unit by unit, then " + (
               "make the lengths differ again." if after[2] >= 1.05 else
               f"leave them within {after[2] - 1:.0%} of each other in this model.")
           + " This is layer 0, what the first encoder layer reads.")

# ----- 3. Positions ---------------------------------------------------------------------------
st.subheader("3 · Learned position embeddings")
max_n = min(256, loaded.config.max_position_embeddings)
forget_outside("emb_pos_n", 8, max_n)
n = st.slider("Positions shown", 8, max_n, min(64, max_n), step=8, key="emb_pos_n", persist_state="session")
sim = positions(name, n)
fig = px.imshow(sim.round(3), zmin=-1, zmax=1, color_continuous_scale="RdBu_r", origin="upper",
                labels={"x": "position j", "y": "position i", "color": "cosine"},
                title=f"Cosine similarity between the first {n} position embeddings")
fig.update_layout(height=520, margin=dict(l=10, r=10, t=50, b=10))
exports.figure(fig, "emb_pos_heatmap", bundle=bundle)
band = emb.position_band(sim)
st.caption("BERT learns one vector per position instead of the Transformer's fixed sinusoids (Figure 2): "
           "nothing tells it that position 5 lies between 4 and 6. " + (
    f"In this model, positions one or two apart have a mean cosine of {band['near']:.2f} and positions "
    f"{band['far_from']} or more apart {band['far']:.2f}: " + (
        "the red band along the diagonal is neighbouring positions that ended up with similar vectors."
        if band["band"] else "no band along the diagonal, so this model's position vectors do not (yet) "
                             "place neighbouring positions near each other.")
    if band["near"] is not None and band["far"] is not None else ""))

# ----- 4. A map ------------------------------------------------------------------------------
st.subheader("4 · A map of the vectors")
c1, c2 = st.columns([2, 1])
source = c1.radio("Vectors", ["words, out of context (token embeddings)", "one word in several sentences"],
                  key="emb_proj_source", persist_state="session", horizontal=True)
method = c2.radio("Projection", ["PCA", "t-SNE"], key="emb_proj_method", persist_state="session", horizontal=True,
                  help="PCA: a linear view, distances are honest. t-SNE: keeps near neighbours near, "
                       "distances between clusters mean little.")
method_key = "pca" if method == "PCA" else "tsne"
try:
    if source.startswith("words"):
        words_text = text_box(st.text_area,
            f"Words (spaces or commas; at most {LIMITS.words})", key="emb_words", persist_state="session", height=80,
            max_chars=limits.LIST_CHARS,
            value="king queen man woman boy girl monday tuesday friday sunday january march july "
                  "paris london france germany china one two three four red green blue")
        words = tuple(w for w in re.split(r"[,\s]+", words_text) if w)
        limits.check(len(words), LIMITS.words, "words", "the map places a label for each, so keep the ones you "
                     "want to compare")
        wv, proj = word_map(name, words, method_key)
        labels, hover = wv.words, [" ".join(p) for p in wv.pieces]
        # a word of the same pieces as an earlier one shares its point, said (15 words typed, 12 points drawn)
        point_of = {tuple(p): w for w, p in zip(wv.words, wv.pieces)}
        merged = list(dict.fromkeys(f"{md(w)} (= {md(point_of[tuple(ps)])}"
                                    + (", both `[UNK]`)" if ps == ["[UNK]"] else ")")
                                    for w in words if w not in wv.words
                                    and tuple(ps := loaded.tokenizer.tokenize(w)) in point_of))
        title = "Token embeddings (rows of the token table; split words averaged over their pieces)"
        names, vectors = None, wv.vectors
    else:
        c1, c2 = st.columns([1, 3])
        word = text_box(c1.text_input, "Word", "bank", key="emb_proj_word", persist_state="session", max_chars=100)
        forget_outside("emb_proj_layer", 0, L)
        layer = c1.slider("Layer (0 = embeddings)", 0, L, L, key="emb_proj_layer", persist_state="session")
        sentences = lines(text_box(c2.text_area, f"Sentences, one per line (at most {LIMITS.map_sentences})",
                                       key="emb_proj_sentences", persist_state="session", height=170,
                                       max_chars=limits.LIST_CHARS, value=(
            "we walked along the river bank at dawn .\nthe boat drifted towards the muddy bank .\n"
            "fish gathered near the bank of the stream .\nthe bank raised interest rates again .\n"
            "she opened a savings account at the bank .\nthe central bank warned about inflation .")))
        limits.check(len(sentences), LIMITS.map_sentences, "sentences", "each one runs through the model")
        ctx, proj = context_map(name, word, sentences, layer, method_key)
        labels, hover = [f"{i + 1}" for i in range(len(ctx.sentences))], list(ctx.sentences)
        vectors = ctx.vectors[:, layer]
        title = f"“{ctx.word}” in {len(ctx.sentences)} sentences, layer {layer}"
        # the key: one legend entry per sentence, named by its number
        names = [f"{i + 1}: {s if len(s) <= 60 else s[:59] + '…'}" for i, s in enumerate(ctx.sentences)]
    places = emb.label_places(proj.coords, labels)
    points = [[i] for i in range(len(labels))] if names else [list(range(len(labels)))]
    # (the user's words as typed: plotly drew a typed "<b>x</b>" as a bold x)
    fig = go.Figure([go.Scatter(
        x=proj.coords[idx, 0], y=proj.coords[idx, 1], mode="markers+text",
        name=chart_text(names[idx[0]]) if names else "words",
        text=[chart_text(labels[i]) if places[i] else "" for i in idx],
        textposition=[places[i] or "top center" for i in idx],
        hovertext=[chart_text(hover[i]) for i in idx], hovertemplate="<b>%{hovertext}</b><extra></extra>",
        cliponaxis=False)
        for idx in points])
    fig.update_layout(title=chart_text(title), height=480 + (30 * len(names) if names else 0), xaxis_title=f"{method} 1",
                      yaxis_title=f"{method} 2", showlegend=bool(names), margin=dict(l=10, r=10, t=50, b=10),
                      legend=dict(orientation="h", y=-0.15, title_text="sentence"))
    exports.figure(fig, "emb_proj", bundle=bundle)
    if source.startswith("words") and merged:
        st.caption(f"{len(merged)} word{' shares' if len(merged) == 1 else 's share'} the point of an earlier one, "
                   f"as the same WordPieces: {', '.join(merged)}.")
    hidden = [labels[i] for i, p in enumerate(places) if p is None]
    if hidden:
        st.caption(f"{len(hidden)} labels would cover others and are left off: {', '.join(hidden)}; hover a point "
                   "for its name.")
    if proj.explained_variance_ratio is not None:
        r = proj.explained_variance_ratio
        st.caption(f"The two PCA axes hold {r[0]:.0%} and {r[1]:.0%} of the variance; the rest is not shown.")
    # what this model computed, for either map and either projection (t-SNE's and the sentences' had no caption)
    st.caption(emb.map_caption(vectors, [f"sentence {x}" for x in labels] if names else labels, proj,
                               vectors.shape[-1]))
except ValueError as e:
    st.info(sentence_of(e))

# ----- 5. Context ----------------------------------------------------------------------------
st.subheader("5 · The same word in different contexts, layer by layer")
c1, c2 = st.columns([1, 3])
ctx_word = text_box(c1.text_input, "Word", "bank", key="emb_ctx_word", persist_state="session", max_chars=100)
ctx_sentences = lines(text_box(c2.text_area, f"Sentences, one per line (at most {LIMITS.compared})",
                               key="emb_ctx_sentences", persist_state="session",
                                   height=110, max_chars=limits.LIST_CHARS, value=(
    "he sat on the river bank\nshe opened a bank account\nthe bank raised rates")))
try:
    limits.check(len(ctx_sentences), LIMITS.compared, "sentences to compare",
                 f"each pair is a line on the chart ({LIMITS.compared} give {LIMITS.compared * (LIMITS.compared - 1) // 2})")
    res = similarity(name, ctx_word, ctx_sentences)
    fig = px.line(res.frame(), x="layer", y="cosine", color="pair", markers=True,
                  title=f"Cosine similarity of “{res.word}” between sentences (layer 0 = input embeddings)")
    fig.update_layout(height=420, margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.2),
                      xaxis=dict(dtick=1))
    exports.figure(fig, "emb_ctx_chart", bundle=bundle)
    split = len(res.context.pieces) > 1
    st.caption(("“" + res.word + "” is split into " + " ".join(res.context.pieces) + "; its vector is the average "
                "of the pieces. " if split else "") +
               "At layer 0 the word knows only itself and its position: the same word at the same position "
               "gives 1.0. " + res.describe())
except ValueError as e:
    st.info(sentence_of(e))

st.divider()
exports.bundle_button(bundle, "emb_bundle")
