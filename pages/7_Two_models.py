from pathlib import Path

import numpy as np
import pandas as pd
import plotly.express as px
import streamlit as st

from bert_explorer import limits

from bert_explorer.analysis import estimates
from bert_explorer.analysis.comparison import candidates, two_models, verdict
from bert_explorer.app import runs_view as rv
from bert_explorer.app.keep import (SENTENCE_A, SENTENCE_A_DEFAULT, fit_kept, kept_widget, opening_index,
                                    past_the_model, text_box)
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.state import by_inputs, by_weights, load, picked_model, shown_path
from bert_explorer.app.roles import work_button, writes_allowed, writes_off
from bert_explorer.app.widgets import intro, sentence_of
from bert_explorer.checkpoint import DEFAULT_MODEL, CheckpointError
from bert_explorer.runs import finder
from bert_explorer.runs.run import runs_root
from bert_explorer.train.speed import said


@by_inputs(max_entries=1)
def _short_finetune_seconds() -> tuple[float, int]:
    """(idle seconds, threads) of the one-click fine-tuning here, kept for every session of the server."""
    return estimates.short_finetune_seconds()


def _short_finetune_time() -> str:
    # said as every time before a job is: this machine's speed and the load now (it quoted 15 minutes measured
    # once on a busy machine, where two runs took under 5)
    try:
        return said(*_short_finetune_seconds())
    except (CheckpointError, OSError, ValueError, KeyError):
        return "its time is said on the Fine-tune page"


intro("Two models side by side", """
What fine-tuning (Devlin et al. 2019, Section 4 and Figure 4) changes inside a BERT, read from two models.
The same sentences go through **model A** (the sidebar's model) and **model B**: by default the newest
fine-tuning of model A that learned something (the rule is stated below the choice), else the model that
A was pre-trained from. You see both models' masked-word and next-sentence guesses (where both have
those heads: a fine-tuned model keeps only its task's), how much each
attention head moved (Jensen-Shannon distance between the two heads' attention), and how alike each
layer's vectors stay (linear CKA, Kornblith et al. 2019; Merchant et al. 2020 located where fine-tuning
changes BERT with a kindred measure, representational similarity analysis).
""")

ARCH = two_models.ARCHITECTURE
root = runs_root()
name_a, loaded_a = picked_model(ARCH, "Choose model A in the sidebar.")

# ----- model B ----------------------------------------------------------------------------------
tuned = candidates.finetuned_models(root)
children = [m for m in tuned if candidates.same_model(m["base"], name_a)]
learned = [m for m in children if m["verdict"].learned]
base = candidates.base_of(name_a)
names = sorted((n for n in candidates.short_names() if n != name_a), key=lambda n: n != base)  # A's base first
checkpoints = candidates.pretraining_checkpoints(root)
options = {m["path"]: m["label"] for m in children + [m for m in tuned if m not in children]}
options.update({n: f"{n} ({'the model that A was pre-trained from' if n == base else 'short name'})" for n in names})
options.update({c.path: f"pre-training checkpoint: {c.label}" for c in checkpoints})
label_a = next((c.label for c in checkpoints if c.path == name_a), None) or shown_path(name_a)
options[name_a] = f"{label_a} (model A itself: every difference is 0)"
# The default B: the newest fine-tuning of A that learned something, else the model A was
# pre-trained from, else none (the page asks). It goes first, so that index 0 is the default and a
# choice already made in this session is kept as it is.
default = candidates.default_b(name_a, root)
if default:
    options = {default: options[default], **options}
waiting = st.session_state.get("two_waiting")  # a fine-tuning this page started or watched: use it once done
done = [m["path"] for m in children if waiting and Path(m["path"]).parent == Path(waiting)]
if done:
    st.session_state["two_model_b"] = done[0]
    del st.session_state["two_waiting"]
# B as its default for another model A (never chosen by the user) follows A: explorer-mini chosen as A kept
# minilm, minilm-mlm-nsp's default, as if chosen. A B the user chose holds. Set here, not by the box's index: a
# browser's empty box (two models without a default in a row) kept its emptiness over the index of the next A's.
if (st.session_state.get("two_b_default_of") not in (None, name_a) and not st.session_state.get("two_b_chosen")) \
        or st.session_state.get("two_model_b") not in options:
    st.session_state["two_model_b"] = default
st.session_state["two_b_default_of"] = name_a
name_b = st.selectbox("Model B", list(options), format_func=options.get,
                      on_change=lambda: st.session_state.update(two_b_chosen=True),
                      key="two_model_b", placeholder="Choose model B", persist_state="session",
                      help="The default comes first: the newest fine-tuning of model A that learned something, "
                           "else the model that A was pre-trained from. Then fine-tuned runs of A, other "
                           "fine-tuned runs, the installed models and pre-training checkpoints.")

if len(children) == 1:
    tried = (f"the one finished fine-tuning of model A, {children[0]['name']}, does not count as having learned "
             f"something ({children[0]['verdict'].reason})")
elif children:
    tried = (f"none of the {len(children)} finished fine-tunings of model A counts as having learned something (the "
             f"newest, {children[0]['name']}: {children[0]['verdict'].reason})")
else:
    tried = "no finished fine-tuning of model A is in the runs folder"
picked = next((m for m in tuned if m["path"] == name_b), None)
if picked is not None and name_b == default:
    st.caption(f"Model B is {picked['name']}, the newest fine-tuning of model A that learned something: "
               f"{picked['verdict'].reason}. {verdict.LEARNED_RULE}")
elif picked is not None:
    # the rule judges the run from what it wrote down (its dev score, its loss), not the comparison below,
    # which is drawn whatever the verdict
    v = picked["verdict"]
    st.caption(f"By this page's rule, {picked['name']} "
               f"{'learned something' if v.learned else 'does not count as having learned something'}: {v.reason}. "
               f"{verdict.LEARNED_RULE}"
               + ("" if v.learned else " The comparison below shows what this fine-tuning changed all the same."))
elif name_b is not None and name_b == default:
    st.caption(f"Model B is {base}, the model that A was pre-trained from: {tried}."
               + (f" {verdict.LEARNED_RULE}" if children else ""))
elif name_b is None:
    st.info(f"Choose model B above: {tried}, and model A names no model it was pre-trained from."
            + (f" {verdict.LEARNED_RULE}" if children else ""))

# the offer of a fine-tuning of A, only while model B is none of A's fine-tunings: one chosen by hand is
# compared below, whatever the rule says of it
b_is_a_finetuning_of_a = any(m["path"] == name_b for m in children)
if not learned and not b_is_a_finetuning_of_a:
    active = [r for r in finder.find_runs(root, "finetune") if r.is_active() and
              candidates.same_model(r.config().get("model", ""), name_a)]
    if active:
        st.info(f"A fine-tuning of {label_a} is running ({finder.run_label(active[0], root)}); this page uses it as "
                "model B when it is done.")
        st.session_state["two_waiting"] = str(active[0].path)
        rv.run_panel(active[0], "finetune", "two")
        # (one started by accident is stopped here at once, as on its own page; it showed "starting" and no Stop)
        if work_button("Stop this fine-tuning", key="two_stop", help="It stops at its next step; the page then "
                       "offers the fine-tuning again."):
            active[0].request_stop()
            st.info("Stop requested: the fine-tuning stops at its next step.")
    elif candidates.same_model(name_a, DEFAULT_MODEL):
        if writes_allowed():
            st.info(f"To see what fine-tuning changes, fine-tune {label_a}. "
                    + candidates.SHORT_FINETUNE_NOTE.format(time=_short_finetune_time()))
        # in classroom mode the offer and its refusal are one sentence, not a button's promise over its "off"
        if not writes_off(f"To see what fine-tuning changes, model B would be {label_a} fine-tuned; fine-tuning it "
                          "here") and work_button("Fine-tune it on BBC topics", key="two_finetune"):
            run_dir = rv.new_run_dir("finetune-bbc-topics-short", root)
            if rv.launch("finetune", candidates.SHORT_FINETUNE, run_dir, remember=("two_waiting", str(run_dir))):
                st.rerun()
    else:  # (a student cannot fine-tune: it is the teacher's to do)
        st.caption(f"To see what fine-tuning changes, {'' if writes_allowed() else 'your teacher can '}fine-tune "
                   f"{label_a} on the Fine-tune page, or pick any model B above.")
if name_b is None:
    st.stop()

loaded_b, error = load(name_b, ARCH)
if error:
    st.error(error)
    st.stop()

# ----- what can be compared ---------------------------------------------------------------------------
c = two_models.comparable(loaded_a, loaded_b)
st.subheader("What can be compared")
st.markdown("\n".join(f"- {s}" for s in c.sentences))
bundle = ResultBundle("Two models side by side", f"A: {name_a} · B: {name_b}", {"model_a": name_a, "model_b": name_b})
bundle.add_data("what can be compared", c.sentences)


@by_weights(2, show_spinner="Running both models on the held-out sentences…", max_entries=16)
def _compare(a: str, b: str, n: int):
    return two_models.kept_comparison(load(a, ARCH)[0], load(b, ARCH)[0], n)


@by_weights(2, show_spinner=False, max_entries=32)
def _probes(a: str, b: str, masked: str, first: str, second: str):
    return two_models.probes_side_by_side(load(a, ARCH)[0], load(b, ARCH)[0], masked, (first, second))


@by_weights(2, show_spinner=False, max_entries=32)
def _maps(a: str, b: str, text: str):
    return two_models.head_maps(load(a, ARCH)[0], load(b, ARCH)[0], text)


# ----- the probes ----------------------------------------------------------------------------------------
if c.mlm or c.nsp:
    # only the probes both models can answer: a box that read nothing was drawn beside an answer that never came
    st.subheader(f"{' and '.join(p for p, on in (('Masked word', c.mlm), ('next sentence', c.nsp)) if on)}, "
                 "side by side".capitalize())
    p1, p2 = st.columns(2) if c.mlm and c.nsp else (st.container(), st.container())
    # (what the user typed holds when they leave the page and come back)
    masked = text_box(p1.text_input, "Sentence with [MASK]", "the stock market [MASK] sharply after the news .",
                      key="two_mlm", max_chars=limits.CHARS, persist_state="session") if c.mlm else ""
    first, second = (text_box(p2.text_input, "Sentence A", "the cat sat on the mat .", key="two_nsp_a",
                              max_chars=limits.CHARS, persist_state="session"),
                     text_box(p2.text_input, "Sentence B", "then it fell asleep in the sun .", key="two_nsp_b",
                              max_chars=limits.CHARS, persist_state="session")) if c.nsp else ("", "")
    probes = _probes(name_a, name_b, masked, first, second)
    bundle.inputs.update({"masked sentence": masked, "sentence A": first, "sentence B": second})
    if c.mlm and probes["mlm"] is None:
        p1.info("Write [MASK] where a word should be guessed.")
    elif probes["mlm"]:
        rows = []
        for k, (ma, mb) in enumerate(zip(probes["mlm"]["a"], probes["mlm"]["b"])):
            for ra, rb in zip(ma["predictions"], mb["predictions"]):
                rows.append({"[MASK]": k + 1, "model A": ra["token"], "P (A)": ra["probability"],
                             "model B": rb["token"], "P (B)": rb["probability"]})
        exports.table(pd.DataFrame(rows), "two_mlm_table", "masked word A and B", bundle, container=p1, hide_index=True)
    if probes["nsp"]:
        q1, q2 = p2.columns(2)
        q1.metric("P(IsNext), model A", f"{probes['nsp']['a']['is_next']:.3f}")
        q2.metric("P(IsNext), model B", f"{probes['nsp']['b']['is_next']:.3f}")
        bundle.add_data("P(IsNext)", {f"model {m.upper()}": probes["nsp"][m]["is_next"] for m in ("a", "b")})

# ----- CKA ----------------------------------------------------------------------------------------------
st.subheader("How alike each layer's vectors are (linear CKA)")
counts = [32, 64, 128, 200]
if not writes_allowed():  # a student's 200 sentences of a pair not compared yet held the server's CPU for 16 s
    counts = [m for m in counts if m == two_models.PAGE_SENTENCES
              or two_models.comparison_kept(load(name_a, ARCH)[0], load(name_b, ARCH)[0], m)]
    if len(counts) == 1:
        st.caption(f"These two models are compared on {counts[0]} held-out sentences; other counts are computed by "
                   "your teacher (each holds the server's CPU for a while).")
n = st.select_slider("Held-out sentences", counts, two_models.PAGE_SENTENCES, key="two_n", persist_state="session",
                     help="More sentences give steadier numbers and take longer.") if len(counts) > 1 else counts[0]
try:
    result, source = _compare(name_a, name_b, n)
except ValueError as e:  # (too few tokens to read CKA from: one sentence, not the exception's box)
    st.info(sentence_of(e))
    st.stop()
# the pair the numbers are of, named in each caption and chart: "CKA goes from 0.99 to 0.27" under an intro on
# fine-tuning read as fine-tuning's effect where B was the model A was pre-trained from
short = {**{m["path"]: m["name"] for m in tuned}, **{n: n for n in names}, **{c.path: c.label for c in checkpoints}}
label_b = short.get(name_b) or shown_path(name_b)
what = (" (A itself: every difference below is 0, a check of the measures)" if name_b == name_a else
        " (A fine-tuned)" if picked is not None and picked in children else
        " (the model A was pre-trained from: the differences are what A's pre-training changed)" if name_b == base
        else "")
pair = f"A is {label_a} and B is {label_b}{what}."
names_line = f"<br><sup>A: {label_a} · B: {label_b}</sup>"
# (the split is minilm-mlm-nsp's: other models may have read these sentences, which the caption said of neither)
seen = "" if "minilm-mlm-nsp" in (name_a, name_b) or "minilm-mlm-nsp" not in source else \
    " (held out from that model's pre-training, not from these models': they may have read them)"
st.caption(f"Sentences: {source}{seen}. {result['n_units']:,} {result['units']} ([CLS] and [SEP] left out).")
# the numbers behind the charts, in the zip too (they were only inside figures.html)
bundle.inputs["held-out sentences"] = n
bundle.add_data("comparison", {"sentences": source, result["units"]: result["n_units"],
                               **{k: result[k] for k in ("cka_by_layer", "cka_matrix", "attention_js")
                                  if result.get(k) is not None}})
if result["cka_by_layer"] is not None:
    df = pd.DataFrame({"layer": list(range(len(result["cka_by_layer"]))), "CKA": result["cka_by_layer"]})
    lowest = min(result["cka_by_layer"])
    bottom = 0.0 if lowest < 0.5 else float(np.floor(lowest * 20 - 0.5) / 20)  # zoom in on small changes, and say so
    fig = px.line(df, x="layer", y="CKA", markers=True, range_y=[bottom, 1.005],
                  title="CKA of each layer of A with the same layer of B (0 = embeddings)"
                        + (f"; the axis starts at {bottom:.2f}" if bottom > 0 else "") + names_line)
    fig.update_xaxes(dtick=1)
    exports.figure(fig, "two_cka_line", bundle=bundle)
    bundle.add_table("CKA by layer", df)  # (the numbers as a CSV too: they were only in data.json)
else:
    m = np.asarray(result["cka_matrix"])
    fig = px.imshow(m, x=[str(j) for j in range(m.shape[1])], y=[str(i) for i in range(m.shape[0])],
                    labels=dict(x="layer of B", y="layer of A", color="CKA"), zmin=0, zmax=1, text_auto=".2f",
                    color_continuous_scale="Viridis", aspect="auto",
                    title="CKA of every layer of A with every layer of B (0 = embeddings)" + names_line)
    fig.update_xaxes(type="category").update_yaxes(type="category")  # (layers named "0", "1": read as a number line)
    exports.figure(fig, "two_cka_matrix", bundle=bundle)
    bundle.add_table("CKA of every layer pair", pd.DataFrame(m, index=pd.Index(range(m.shape[0]), name="layer of A"),
                                                             columns=[f"layer {j} of B" for j in range(m.shape[1])]
                                                             ).reset_index())
st.markdown(f"{pair} {result['captions']['cka']}")

# ----- attention ------------------------------------------------------------------------------------------
if result["attention_js"] is not None:
    st.subheader("How much each head's attention moved (Jensen-Shannon distance)")
    js = np.asarray(result["attention_js"])
    L, A = js.shape
    fig = px.imshow(js, x=[f"head {h + 1}" for h in range(A)], y=[f"layer {i + 1}" for i in range(L)],
                    zmin=0, zmax=max(0.05, float(js.max())), text_auto=".2f", color_continuous_scale="Reds",
                    aspect="auto", labels=dict(color="mean JS distance"))
    fig.update_layout(height=140 + 44 * L)
    # named: a figure without a title was listed in the zip's README by its key, "two_js_grid"
    exports.figure(fig, "two_js_grid", "attention moved by each head (mean Jensen-Shannon distance)", bundle=bundle)
    bundle.add_table("attention moved by each head", pd.DataFrame(
        js, index=pd.Index(range(1, L + 1), name="layer"), columns=[f"head {h + 1}" for h in range(A)]).reset_index())
    st.caption("Each cell: the JS distance (base 2: 0 = the same attention, 1 = no token in common) between the two "
               f"models' attention rows, averaged over every token of the held-out sentences. {pair} "
               + result["captions"]["attention"])
    worst = np.unravel_index(int(js.argmax()), js.shape)
    h1, h2, h3 = st.columns([1, 1, 3])
    was = fit_kept("two_layer", L - 1), fit_kept("two_head", A - 1)  # (kept across pages; a shallower pair's last)
    layer = h1.selectbox("Layer", range(L), **opening_index("two_layer", int(worst[0])),
                         format_func=lambda i: f"{i + 1}", key="two_layer",
                         persist_state="session")
    head = h2.selectbox("Head", range(A), **opening_index("two_head", int(worst[1])),
                        format_func=lambda i: f"{i + 1}", key="two_head",
                        persist_state="session")
    past_the_model(was, L, A)
    # the sentence the other pages share (typed on Tokens and embeddings, it carried to Attention but not here)
    text = kept_widget(h3.text_input, "Sentence for the maps", SENTENCE_A, SENTENCE_A_DEFAULT, max_chars=limits.CHARS)
    if text.strip():
        maps = _maps(name_a, name_b, text)
        bundle.inputs.update({"sentence for the maps": text, "map layer": layer + 1, "map head": head + 1})
        tokens = maps["tokens"]
        ticks = dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=tokens)
        cols = st.columns(2)
        for col, which in zip(cols, ("a", "b")):
            fig = px.imshow(maps[which][layer, head], zmin=0, zmax=1, color_continuous_scale="Blues", aspect="auto",
                            labels=dict(x="attended token", y="attending token", color="weight"),
                            title=f"Model {which.upper()} ({label_a if which == 'a' else label_b}): layer {layer + 1}, "
                                  f"head {head + 1}")
            fig.update_layout(xaxis=ticks, yaxis=ticks, height=260 + 16 * len(tokens))
            exports.figure(fig, f"two_map_{which}", bundle=bundle, container=col)
        whole = len(loaded_a.tokenizer.tokenize(text)) + 2  # ([CLS] and [SEP]: a longer one is cut without a word)
        cut = f", the first {len(tokens)} of its {whole:,} WordPieces: the maps read no further" \
            if whole > len(tokens) else ""
        st.caption(f"On this sentence, layer {layer + 1} head {head + 1} moved by {maps['js'][layer, head]:.2f} "
                   f"(mean JS distance over its {len(tokens)} tokens{cut}).")

st.divider()
exports.bundle_button(bundle, "two_bundle")
