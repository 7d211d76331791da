import random

import pandas as pd
import streamlit as st

from bert_explorer.analysis.probes import NSP_HEAD, nsp_probability
from bert_explorer.app.state import load, model_picker
from bert_explorer.app.widgets import intro, needs_head

st.set_page_config(page_title="Next-sentence probe · BERT Explorer", layout="wide")
intro("Next-sentence probe", """
BERT's second pre-training task (Devlin et al. 2019, Section 3.1, "Task #2: Next Sentence
Prediction"): given `[CLS] A [SEP] B [SEP]`, is B the sentence that really followed A (IsNext)
or a random sentence from elsewhere in the corpus (NotNext)? The answer is read from the
pooled `[CLS]` vector. During pre-training half of the pairs are real and half are random.
""")


@st.cache_data
def corpus_sentences(name: str) -> list[str]:
    from bert_explorer.data.corpora import load_corpus
    return [s for doc in load_corpus(name) for s in doc if 5 <= len(s.split()) <= 40]


name = model_picker()
loaded, error = load(name, "BertForPreTraining") if name else (None, "Choose a model in the sidebar.")
if error:
    st.info(error)
    st.stop()
if not needs_head(loaded, NSP_HEAD, "judge whether B follows A"):
    st.stop()

st.session_state.setdefault("nsp_a", "the match was played in heavy rain on saturday .")
st.session_state.setdefault("nsp_b", "both teams struggled to keep the ball on the ground .")
a = st.text_area("Sentence A", key="nsp_a", height=70)
c1, c2 = st.columns([3, 1])
corpus = c2.selectbox("Random B from", ["bbc", "wiki", "lee"], key="nsp_corpus")
if c2.button("Draw a random B", key="nsp_draw"):
    st.session_state["nsp_b"] = random.choice(corpus_sentences(corpus))
b = c1.text_area("Sentence B", key="nsp_b", height=70)

if a.strip() and b.strip():
    p = nsp_probability(loaded, [(a, b)])[0]["is_next"]
    st.metric("P(IsNext)", f"{p:.1%}", help="softmax of the NSP head; index 0 = IsNext")
    st.progress(p)

st.subheader("Score several pairs at once")
st.caption("Edit the table: one pair per row. The real continuation should score higher than the swapped one.")
default = pd.DataFrame({
    "A": ["she opened the door .", "the bank raised interest rates .", "she opened the door ."],
    "B": ["a cold wind blew into the room .", "borrowers will pay more each month .",
          "borrowers will pay more each month ."]})
table = st.data_editor(default, num_rows="dynamic", key="nsp_table", width="stretch")
pairs = [(str(r.A), str(r.B)) for r in table.itertuples() if str(r.A).strip() and str(r.B).strip()]
if pairs:
    scored = pd.DataFrame(nsp_probability(loaded, pairs))[["a", "b", "is_next"]]
    st.dataframe(scored.rename(columns={"a": "A", "b": "B", "is_next": "P(IsNext)"}), hide_index=True)
