from pathlib import Path

import pandas as pd
import streamlit as st

from bert_explorer import disk_cache, full_disk
from bert_explorer.runs import neighbour_jobs as jobs
from bert_explorer.analysis.neighbours import index as nbb
from bert_explorer.disk_cache import cache_root
from bert_explorer.analysis.neighbours import search as nb
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.state import by_inputs, by_weights, load, picked_model, shown_path, without_host_paths
from bert_explorer.app.roles import (busy_sentence, not_prepared, progress_line, running_beside, work_button,
                                     writes_allowed)
from bert_explorer.app.keep import fit_kept, opening_index, past_the_layers, text_box
from bert_explorer.app.widgets import intro
from bert_explorer.runs.report import duration_text
from bert_explorer.train.estimate import background_threads
from bert_explorer.train.speed import said, seconds_now

intro("Nearest neighbours", """
Pick one token of your sentence and a layer: the table lists the tokens of a whole corpus (BBC
News, about a million WordPieces) whose vectors at that layer are nearest to yours (cosine
similarity), each in its own sentence. This is the key feature of exBERT (Hoover et al. 2020).
BERT's vectors are **contextual** (Devlin et al. 2019, Section 3; Section 5.3 uses them as features):
at the embeddings (layer 0) a word's vector is its token embedding plus those of its segment and position,
normalised (LayerNorm),
so its neighbours are its uses in any sense, nearest where it stands at a similar place; in the deep layers the sentence has been mixed in, so the neighbours should be the uses
*in the same sense* — see for yourself whether this model does that.
""")

ARCH = "BertForPreTraining"  # loads encoder-only checkpoints too; only the encoder is used
EXAMPLE = "the bank put up interest rates again to slow down borrowing ."
EXAMPLE_WORD = "interest"
OTHER_SENSE = "she has shown no interest in football since she was a child ."

name, loaded = picked_model(ARCH)
L = loaded.config.num_layers


def layer_label(layer: int) -> str:
    return "the embeddings (layer 0)" if layer == 0 else f"layer {layer}"


@by_inputs(shared=True, max_entries=4, show_spinner="Opening the index…")
def _open(path: str) -> nb.NeighbourIndex:
    return nb.NeighbourIndex.open(path)


@by_weights(max_entries=32)
def _estimate(model: str, corpus, layer: int) -> dict:
    # the button below starts the build as a background process: its threads, its start
    return nbb.estimate_build_seconds(load(model, ARCH)[0], corpus, layer, threads=background_threads(),
                                      process_start=True)


@by_weights(max_entries=128, show_spinner="Searching…")
def _nearest(model: str, path: str, text: str, position: int, layer: int, k: int) -> nb.Neighbours:
    return nb.nearest(load(model, ARCH)[0], _open(path), text, position, layer, k)


corpora = list(nb.PAGE_CORPORA)
corpus_name = st.selectbox("Corpus", corpora, key="nn_corpus",
                           persist_state="session") if len(corpora) > 1 else corpora[0]
corpus = nb.PAGE_CORPORA[corpus_name]

c1, c2, c3, c4 = st.columns([4, 1.3, 1.3, 1])
# (the sentence, layer and hits hold when the student leaves the page and comes back, and the layer also when the
# sentence is emptied for a moment: it was back at the default, with no index, where the student had hits)
text = text_box(c1.text_input, "Your sentence", EXAMPLE, key="nn_text", max_chars=600, persist_state="session")
if not text.strip():
    st.info("Type a sentence to pick a token from.")
    st.stop()
pieces = nb.sentence_pieces(loaded, text)
positions = list(range(1, len(pieces) - 1))
if not positions:
    st.info("This sentence has no WordPieces; type some words.")
    st.stop()
start = next((i for i in positions if pieces[i] == EXAMPLE_WORD), 1)
position = c2.selectbox("Token", positions, index=positions.index(start), format_func=lambda i: f"{i}: {pieces[i]}",
                        key=f"nn_token_{hash(text)}", persist_state="session",
                        help="The WordPieces of your sentence, numbered from [CLS] = 0.")
was = fit_kept("nn_layer", L)  # (a deeper model's layer: this one's last)
layer = c3.selectbox("Layer", list(range(L + 1)), **opening_index("nn_layer", nbb.opening_layer(loaded)),
                     key="nn_layer",
                     persist_state="session",
                     format_func=lambda i: "0 (embeddings)" if i == 0 else str(i),
                     help=f"0 = the embedding output (token + position + segment, then LayerNorm); 1-{L} = after "
                          "each encoder layer. Each layer has its own index.")
k = c4.number_input("Hits", 5, 50, 10, 5, key="nn_k", persist_state="session")
past_the_layers(was, L)  # (a layer the user chose is not replaced without a word)
st.caption(f"Try the same word in another sense, e.g. “{OTHER_SENSE}”, and compare layer 0 with layer {L}.")

state = nbb.index_state(loaded, corpus, layer)
path = state["path"]


# ----- no index yet: build it in the background --------------------------------------------------
@st.fragment(run_every=2.0)
def _watch(model: str, corpus, layer: int) -> None:
    s = nbb.index_state(load(model, ARCH)[0], corpus, layer)
    if s["state"] != "building":
        st.rerun()  # finished (or stopped): redraw the whole page
    st.progress(min(1.0, float(s.get("fraction") or 0.0)), text=progress_line(s, f"the index of {layer_label(layer)}"))
    st.caption("The build runs as its own process: you may leave this page or close the tab; it goes on, and "
               "every visitor sees the same build.")


if state["state"] == "building":
    st.subheader(f"Building the index of {layer_label(layer)}")
    _watch(name, corpus, layer)
    st.stop()

if state["state"] != "ready":
    st.subheader(f"No index of {layer_label(layer)} yet")
    if state["state"] == "stopped":
        st.warning(f"The last build of this index stopped at {float(state.get('fraction') or 0):.0%} before it "
                   "finished (its process ended); building again resumes from its last finished part.")
    elif state["state"] == "failed":
        st.error(without_host_paths(f"The last build of this index failed: {state.get('error') or state.get('message')}"))
        with st.expander("Its log"):
            st.code(without_host_paths(jobs.log_tail(Path(path))), language=None)
    if not writes_allowed():  # a student: nothing is counted or built on a visit
        not_prepared(f"The nearest-neighbour index of {layer_label(layer)}", entry=(loaded, path))
        busy_sentence()
        st.stop()
    with st.spinner("Counting the corpus's WordPieces…"):
        est = _estimate(name, corpus, layer)
    runs = "only looks up the embeddings" if layer == 0 else \
        f"runs the model's first {layer} layer{'s' if layer > 1 else ''}"
    st.markdown(
        f"The index holds every WordPiece of the corpus except [CLS] and [SEP]: **{est['tokens']:,} tokens** in "
        f"{est['sentences']:,} sentences, {est['disk_bytes'] / 1e6:,.0f} MB on disk (fp16). Building it {runs} over "
        f"all of them, in a background process: about {est['tokens_per_s']:,.0f} tokens/s here ({est['basis']}), "
        f"that is **{said(est['seconds'], est['threads'])}**. It is built once and kept for every later visit.")
    free = full_disk.free_bytes(cache_root())
    room = (f"While it runs the build needs about **{full_disk.size_text(est['build_disk_bytes'])}** free in the cache "
            f"folder {shown_path(cache_root())} (its finished parts and the index side by side); free there now: "
            f"{full_disk.size_text(free)}.")
    if free < est["build_disk_bytes"]:
        st.warning(f"{room} Free some space first: a build that runs out keeps its finished parts and resumes "
                   "from them, but cannot finish.")
    else:
        st.caption(room)
    used, quota = disk_cache.usage()
    if quota < float("inf"):
        st.caption(f"The cache keeps at most {full_disk.size_text(quota)} and holds {full_disk.size_text(used)} now; "
                   "to make room for a build, the entries used least recently are removed (never one in use).")
    st.caption(f"From a terminal, one pass through the model builds several layers at once: `bert-explorer "
               f"neighbours build --model {shown_path(name)} --layer 0,{L}`.")
    if refusal := jobs.start_refusal(Path(path), False):
        st.info(refusal)
        st.stop()
    running_beside()  # (it counted every build running as "other indexes")
    if work_button(f"Build the index of {layer_label(layer)}", key="nn_build", type="primary"):
        # asked again as it starts, under the server's lock: another session may have pressed at the same time
        refusal = jobs.start_build(Path(path), ["--model", name, "--layer", str(layer), "--corpus", str(corpus),
                                                "--no-progress"], one_at_a_time=False,
                                   room_bytes=est["build_disk_bytes"], lesson=f"the nearest-neighbour index of "
                                   f"{layer_label(layer)}", said_s=seconds_now(est["seconds"], est["threads"]))
        if not refusal:
            st.rerun()
        st.info(refusal)
    st.stop()

# ----- the index exists: search it -------------------------------------------------------------------
result = _nearest(name, path, text, position, layer, int(k))
bundle = ResultBundle("Nearest neighbours", name, {"text": text, "token": pieces[position], "position": position, "layer": layer, "k": int(k), "corpus": str(corpus)})
st.subheader(f"Nearest to “{pieces[position]}” (WordPiece {position}) at {layer_label(layer)}")
st.caption(nb.describe(result, layer_label(layer)))
table = pd.DataFrame([{"#": h["rank"], "similarity": h["similarity"], "left context": h["left"], "hit": h["hit"],
                       "right context": h["right"], "same token": "✓" if h["same_token"] else "",
                       "source": h["source"]} for h in result.hits])
bundle.add_table("nearest tokens", table)
st.dataframe(table, hide_index=True, width="stretch", key="nn_hits", column_config={
    "similarity": st.column_config.ProgressColumn("similarity", format="%.3f", min_value=0.0, max_value=1.0,
                                                  help="cosine similarity of the two vectors at this layer"),
    "left context": st.column_config.TextColumn(alignment="right", width="medium"),
    "hit": st.column_config.TextColumn("hit", help="the corpus token found, in its sentence", width="small"),
    "right context": st.column_config.TextColumn(width="medium"),
    "same token": st.column_config.TextColumn(help="the same WordPiece as your token", width="small")})

built = [l for l in range(L + 1) if l != layer and nbb.is_complete(nbb.index_path(loaded, corpus, l))]
if built and st.checkbox(f"Compare with the other layer{'s' if len(built) > 1 else ''} that ha"
                         f"{'ve' if len(built) > 1 else 's'} an index: {', '.join(map(str, built))}",
                         key="nn_compare", persist_state="session"):
    rows = []
    for l in sorted(built + [layer]):
        r = _nearest(name, str(nbb.index_path(loaded, corpus, l)), text, position, l, int(k))
        rows.append({"layer": l, f"same token in the top {k}": r.same_token,
                     "nearest other tokens": ", ".join(dict.fromkeys(h["token"] for h in r.hits
                                                                     if not h["same_token"]))
                                             or f"none: only “{r.hits[0]['token']}”",
                     "similarity of hit 1": r.hits[0]["similarity"], f"similarity of hit {k}": r.hits[-1]["similarity"],
                     "sources": ", ".join(f"{s} {n}" for s, n in pd.Series([h["source"] for h in r.hits])
                                          .value_counts().items())})
    bundle.add_table("nearest tokens by layer", pd.DataFrame(rows))
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="nn_layers", column_config={
        c: st.column_config.NumberColumn(format="%.3f") for c in ("similarity of hit 1", f"similarity of hit {k}")})
    st.caption("Read down the table: how the neighbours of the same token change as context is mixed in.")
meta = _open(path).meta
st.caption(f"Index: {meta['rows']:,} tokens of {meta['sentences']:,} sentences ({meta['corpus']}), built "
           f"{meta['built']} in {duration_text(meta['build_seconds'])}. Exact search (every token is scored).")

st.divider()
exports.bundle_button(bundle, "nn_bundle")
