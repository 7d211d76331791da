import random

import pandas as pd
import streamlit as st

from bert_explorer import limits
from bert_explorer.analysis.probes.check_set import load_check_set
from bert_explorer.analysis.probes.pretraining_tasks import NSP_HEAD, cut_sentence, nsp_probability, nsp_table_summary
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.keep import kept_table, kept_widget
from bert_explorer.app.state import by_inputs, by_weights, load, picked_model
from bert_explorer.app.widgets import intro, needs_head, sentence_of
from bert_explorer.data.corpora import corpus_title

intro("Next sentence probe", """
BERT's second pre-training task (Devlin et al. 2019, Section 3.1, "Task #2: Next Sentence
Prediction"): given `[CLS] A [SEP] B [SEP]`, is B the sentence that really followed A (IsNext)
or a random sentence from elsewhere in the corpus (NotNext)? The answer is read from the
pooled `[CLS]` vector. During pre-training half of the pairs are real and half are random.
""")


@by_inputs(max_entries=4)
def corpus_sentences(name: str) -> list[str]:
    from bert_explorer.data.corpora import load_corpus
    return [s for doc in load_corpus(name) for s in doc if 5 <= len(s.split()) <= 40]


@by_weights(show_spinner=False, max_entries=32)
def _scored(model: str, pairs: tuple[tuple[str, str], ...]) -> list[dict]:
    """P(IsNext) of each pair, kept by the weights: a new sentence B runs one pair, not the table again
    (six pairs through BERT-Base took most of a second on every change)."""
    return nsp_probability(load(model, "BertForPreTraining")[0], list(pairs))


name, loaded = picked_model("BertForPreTraining")
if not needs_head(loaded, NSP_HEAD, "judge whether B follows A"):
    st.stop()

# The examples come from the hand-written check set: sentences from news and State of the Union
# documents that the default model's pre-training held out (bench/check_set.json), taken in
# their file order, not picked for a good score.
examples = load_check_set()["nsp"]
a = kept_widget(st.text_area, "Sentence A", "nsp_a", examples[0]["a"], height=70, max_chars=limits.CHARS)
c1, c2 = st.columns([3, 1])
corpus = c2.selectbox("Random B from", ["bbc", "sotu", "vital", "wiki", "lee"], key="nsp_corpus",
                      format_func=corpus_title, persist_state="session")
if c2.button("Draw a random B", key="nsp_draw"):
    st.session_state["nsp_b"] = random.choice(corpus_sentences(corpus))
    st.session_state["nsp_drawn"] = (st.session_state["nsp_b"], corpus)  # (said below while B is the one drawn)
b = kept_widget(c1.text_area, "Sentence B", "nsp_b", examples[0]["b"], height=70, max_chars=limits.CHARS)
bundle = ResultBundle("Next sentence probe", name, {"text_a": a, "text_b": b})

if a.strip() and b.strip():
    scored = _scored(name, ((a, b),))[0]
    p = scored["is_next"]
    if cut := cut_sentence(scored, loaded.config.max_position_embeddings):
        st.warning(cut)
    st.metric("P(IsNext)", f"{p:.1%}", help="softmax of the NSP head; index 0 = IsNext")
    bundle.add_data("p_is_next", p)
    st.progress(p)
    if (a, b) == (examples[0]["a"], examples[0]["b"]):
        st.caption("This pair is two consecutive sentences of a held-out BBC article: a real IsNext pair. "
                   f"This model {'agrees' if p > 0.5 else 'disagrees'} (P(IsNext) {'>' if p > 0.5 else '≤'} 0.5).")
    elif (drawn := st.session_state.get("nsp_drawn")) and drawn[0] == b:
        st.caption(f"B was drawn at random from {corpus_title(drawn[1])}: it did not follow A, a NotNext pair like the "
                   "half of pre-training's pairs whose B is random (Section 3.1). This model "
                   f"{'agrees' if p <= 0.5 else 'disagrees'} (P(IsNext) {'≤' if p <= 0.5 else '>'} 0.5).")
else:
    missing = " and ".join(f"sentence {n}" for n, t in (("A", a), ("B", b)) if not t.strip())
    st.info(f"Write {missing}: the probe asks whether B follows A.")

st.subheader("Score several pairs at once")
st.caption("One pair per row; *real* marks a B that truly followed A in a held-out document, *random* a B "
           "from another document (as in pre-training). Edit, add or delete rows.")
default = pd.DataFrame({"pair": ["real" if e["is_next"] else "random" for e in examples[1:4] + examples[15:18]],
                        "A": [e["a"] for e in examples[1:4] + examples[15:18]],
                        "B": [e["b"] for e in examples[1:4] + examples[15:18]]})
table = kept_table(default, "nsp_table", num_rows="dynamic", width="stretch", hide_index=True,
                       column_config={"pair": st.column_config.SelectboxColumn(options=["real", "random", ""])})
# (a cell left empty or cleared is NaN or None: as text, "nan" and "None" were scored as sentences, 98.97 % IsNext)
rows = [r._replace(pair="" if pd.isna(r.pair) else r.pair) for r in table.itertuples()
        if not (pd.isna(r.A) or pd.isna(r.B)) and str(r.A).strip() and str(r.B).strip()]
try:  # the table's size comes from the browser: bounded here, before the model reads it
    bound = limits.for_config(loaded.config)
    limits.check(len(rows), bound.pairs, "pairs", "score them in smaller tables")
    limits.check(max((len(str(r.A)) + len(str(r.B)) for r in rows), default=0), 2 * limits.CHARS,
                 "characters in one pair", "shorten its sentences")
    # and what the model reads: the rows padded to the longest, each at most what the model reads (the pairs'
    # bound counts 2 x 128 WordPieces a pair; 8 pairs of 512 took BERT-Base twice its 10 s)
    longest = max((len(e.input_ids) for e in loaded.tokenizer.encode_batch([(str(r.A), str(r.B)) for r in rows])),
                  default=0)
    limits.check(len(rows) * min(longest, bound.tokens), bound.forward_tokens,
                 "WordPieces to score (the rows, each padded to the longest pair)",
                 "score fewer or shorter pairs at once")
except limits.TooLarge as e:
    st.info(sentence_of(e))
    rows = []
if rows:
    scored = _scored(name, tuple((str(r.A), str(r.B)) for r in rows))
    frame = pd.DataFrame({"pair": [r.pair for r in rows], "P(IsNext)": [x["is_next"] for x in scored],
                          "A": [r.A for r in rows], "B": [r.B for r in rows]})
    exports.table(frame, "nsp_scored", "pairs scored", bundle, static=True, hide_index=True,
                  formats={"P(IsNext)": "{:.4f}"})  # static: the sentences wrap, none is cut
    st.caption(nsp_table_summary(frame["pair"].tolist(), frame["P(IsNext)"].tolist()))
    if cut := [i + 1 for i, x in enumerate(scored) if cut_sentence(x, loaded.config.max_position_embeddings)]:
        st.warning(f"Row{'s' if len(cut) > 1 else ''} {', '.join(map(str, cut))}: longer than the "
                   f"{loaded.config.max_position_embeddings:,} WordPieces this model reads, so the longer sentence "
                   "lost its last pieces until the pair fit (longest first); P(IsNext) is for what was kept.")

st.divider()
exports.bundle_button(bundle, "nsp_bundle")
