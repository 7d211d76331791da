import pandas as pd
import plotly.express as px
import streamlit as st

from bert_explorer import limits
from bert_explorer.safe_text import markdown_text as md
from bert_explorer.analysis.probes.check_set import cloze_score
from bert_explorer.analysis.probes.pretraining_tasks import (MLM_HEAD, copied_word, masking_demo, mlm_by_layer,
                                                             mlm_top_k, stored_evaluation)
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports, quality_view
from bert_explorer.app.keep import kept_widget, text_box
from bert_explorer.app.state import by_weights, load, picked_model
from bert_explorer.app.widgets import intro, needs_head, sentence_of
from bert_explorer.tokenizer import SPECIAL_TOKENS

intro("Masked word probe", """
BERT's first pre-training task (Devlin et al. 2019, Section 3.1, "Task #1: Masked LM"): hide a
word behind `[MASK]` and let the model guess it **from both sides at once**. Below you see the
MLM head's probabilities at each `[MASK]`, what each layer would guess if the head read it
directly, and how the paper corrupts a training sentence (15 % of WordPieces; 80 % `[MASK]`,
10 % a random token, 10 % unchanged).
""")

ARCH = "BertForPreTraining"
name, loaded = picked_model(ARCH)

EXAMPLE, EXAMPLE_WORD = "British Airways blamed high [MASK] prices for a fall in its profits.", "fuel"
text = kept_widget(st.text_input, "Sentence (write [MASK] where a word is hidden)", "mlm_text", EXAMPLE,
                   max_chars=limits.CHARS,
                     help="The example is a sentence of the check set, written from a news article that the "
                          "default model never saw in pre-training.")
words = text.split()
if 0 < len(words) <= 80:
    # A new sentence gets a fresh set of buttons (the key follows the text).
    clicked = st.pills("…or click words to hide them", list(range(len(words))), selection_mode="multi",
                       # (a pill draws Markdown: "**bold** $x^2$ :red[hi]" was drawn bold, typeset and red)
                       format_func=lambda i: md(words[i]), key=f"mlm_click_{abs(hash(text)) % 10**8}",
                       persist_state="session",
                       help="Each clicked word becomes one [MASK], even a word that is several WordPieces.")
    if clicked:
        text = " ".join("[MASK]" if i in clicked else w for i, w in enumerate(words))
        st.caption(f"The model sees: {md(text)}")  # (a backtick in the text broke the code span)
top_k = st.slider("Predictions per mask", 1, 20, 5, key="mlm_k", persist_state="session")


@by_weights(shared=True, show_spinner=False, max_entries=64)
def _mask_bars(model: str, text: str, top_k: int) -> list:
    """Each [MASK]'s predictions and their bar chart. A plotly figure takes longer to build than
    the model takes to answer, so it is built once for every session (a class asking the same
    sentence); nobody changes a figure once built."""
    bars = []
    for m in mlm_top_k(load(model, ARCH)[0], text, top_k):
        df = pd.DataFrame(m["predictions"])
        # The axis ends just past the top probability: on 0-1, guesses of 1-7 % are slivers.
        top = float(df["probability"].max())
        fig = px.bar(df[::-1], x="probability", y="token", orientation="h", text="probability",
                     title=f"[MASK] at position {m['position']}", range_x=[0, min(1.0, top * 1.2 + 0.01)])
        fig.update_traces(texttemplate="%{x:.1%}", textposition="outside", cliponaxis=False)
        fig.update_xaxes(tickformat=".1~%")  # the bars' own unit, per cent (0.5 %, 10 %: one decimal where needed)
        fig.update_yaxes(type="category")  # guesses "1", "2", "1990" are words here, not numbers on a line
        fig.update_layout(height=120 + 28 * len(df), margin=dict(l=10, r=40, t=40, b=10))
        bars.append((m, fig))
    return bars


@by_weights(max_entries=8)
def _cloze(model: str, top_k: int) -> dict:
    return cloze_score(load(model, ARCH)[0], top_k)


@by_weights(max_entries=64)
def _by_layer(model: str, text: str, top_k: int) -> list:
    return mlm_by_layer(load(model, ARCH)[0], text, top_k=top_k)


@by_weights(max_entries=64)
def _masking(model: str, text: str, seed: int) -> list:
    return masking_demo(load(model, ARCH)[0], text, seed)


bundle = ResultBundle("Masked word probe", name, {"text": text, "top_k": top_k})

if needs_head(loaded, MLM_HEAD, "predict masked words"):
    try:
        ids = loaded.tokenizer.encode(text).input_ids  # (at most CHARS characters)
        limit = limits.for_config(loaded.config).masks
        limits.check(ids.count(loaded.tokenizer.mask_id), limit, "[MASK]s",
                     f"hide at most {limit} words at a time (each [MASK] gets its own chart)")
        bars = _mask_bars(name, text, top_k)
        longest = loaded.config.max_position_embeddings
        if len(ids) > longest and bars:  # (none read at all: the probe's own sentence says so)
            st.caption(f"This text is {len(ids):,} WordPieces with [CLS] and [SEP], more than the {longest:,} this "
                       f"model reads: the predictions below are from its first {longest:,}, and the rest was not "
                       "read (a [MASK] there gets no prediction).")
    except ValueError as e:
        if not ("[MASK]" not in text and "[MASK]" in (st.session_state.get("mlm_text") or "")):
            st.info(sentence_of(e))  # (else the box has said that every [MASK] lies past what it reads: once is enough)
        bars = []
    results = [m for m, _ in bars]
    for m, fig in bars:
        exports.figure(fig, f"mlm_bar_{m['position']}", bundle=bundle)
        copied = copied_word(text, m["predictions"])
        if copied:
            st.caption(f"The top answer, **{copied}**, is a word of the sentence itself: an under-trained masked LM "
                       "often copies a word it can see instead of predicting the hidden one.")
        top = m["predictions"][0]["token"] if m["predictions"] else ""
        if top.startswith("##"):
            pieces = loaded.tokenizer.encode(text).tokens
            before = pieces[m["position"] - 1] if 0 < m["position"] <= len(pieces) else ""
            joined = (f": here “{before.removeprefix('##')}” + “{top[2:]}” = “{before.removeprefix('##')}{top[2:]}”"
                      if before.removeprefix("##").isalpha() else "")
            st.caption(f"The top answer, **{top}**, is not a word of its own: a WordPiece that starts with ## continues "
                       f"the piece before it{joined}. The model proposes an ending for the word in front of the blank "
                       "rather than a new word.")
    if results and text == EXAMPLE:
        found = EXAMPLE_WORD in [p["token"] for p in results[0]["predictions"]]
        st.caption(f"In the article the hidden word was **{EXAMPLE_WORD}**: it is {'' if found else 'not '}among "
                   f"this model's top {top_k}.")
    if results:
        evaluation = stored_evaluation(loaded)
        cloze = _cloze(name, 5)
        if evaluation:
            tokens = f" of {evaluation['eval_tokens']:,}" if evaluation.get("eval_tokens") else ""
            held_out = (f"Its first guess is right for {evaluation['mlm_accuracy']:.1%}{tokens} masked WordPieces of "
                        "held-out text, as measured after its training (eval_metrics.json, stored with the model). ")
        else:
            held_out = "No held-out evaluation is stored with this model (its folder has no eval_metrics.json). "
        st.caption(f"**How good this model is at this.** {held_out}On the check set of hand-written sentences "
                   f"(bench/check_set.json), {cloze['solved']} of {cloze['total']} hidden words are among its top "
                   f"{cloze['top_k']} (computed now).")
        bundle.add_data("how_good", {"stored_evaluation": evaluation, "check_set_cloze": cloze,
                                     "measured_here": quality_view.measured_here(name, loaded, evaluation)})
        st.subheader("Layer by layer")
        st.caption("The MLM head applied to every layer's vector at the first [MASK] (layer 0 = the input "
                   "embeddings). The head was trained on the last layer only, so early rows are a rough lens.")
        rows = _by_layer(name, text, 3)
        exports.table(pd.DataFrame([{"layer": r["layer"], **{f"#{i + 1}": f"{p['token']} ({p['probability']:.1%})"
                                                               for i, p in enumerate(r["predictions"])}}
                                     for r in rows]), "mlm_layers", "guesses layer by layer", bundle, hide_index=True)
        bundle.add_data("predictions", results)
        # the bars' numbers as a table too (they were only in data.json)
        bundle.add_table("predictions at each mask", pd.DataFrame(
            [{"mask position": m["position"], "rank": i + 1, "word": p["token"], "probability": p["probability"]}
             for m in results for i, p in enumerate(m["predictions"])]))

st.subheader("How a training sentence is corrupted")
c1, c2 = st.columns([3, 1])
demo_text = text_box(c1.text_input, "Sentence to corrupt",
                     "the quick brown fox jumps over the lazy dog near the river bank .",
                     key="mlm_demo_text", persist_state="session", max_chars=limits.CHARS)
seed = c2.number_input("Seed", 0, 10_000, 0, key="mlm_demo_seed", persist_state="session")
if not demo_text.strip():  # (an empty box drew [CLS] [SEP] and "0 of 0 WordPieces chosen; change the seed")
    st.info("Write a sentence to corrupt: the table shows which of its WordPieces pre-training would choose.")
else:
    rows = _masking(name, demo_text, int(seed))
    df = pd.DataFrame(rows)
    # (a plain table with a tick column: a styled one cost a fifth of the page's server time)
    exports.table(df, "mlm_demo", "masking demo", bundle, hide_index=True,
                  column_config={"chosen": st.column_config.CheckboxColumn("chosen")})
    # a special token is never chosen: "change the seed to draw again" was said where no seed could choose one
    # (not named "words": the pills above read that name, on every later run of their widget state)
    choosable = int((~df["original"].isin(SPECIAL_TOKENS)).sum())
    st.caption(f"{int(df['chosen'].sum())} of {len(df) - 2} WordPieces chosen; change the seed to draw again."
               if choosable else "No WordPiece here can be chosen: pre-training never masks a special token "
                             f"({', '.join(SPECIAL_TOKENS)}); write some words.")

quality_view.every_model_measured()

st.divider()
exports.bundle_button(bundle, "mlm_bundle")
