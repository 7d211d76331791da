"""BERT Explorer, home page: `streamlit run run_app.py --server.address 127.0.0.1 --browser.gatherUsageStats false`.

Every file in pages/ is a page (at /Attention for "2_Attention.py"); the sidebar menu is the
app's own (``bert_explorer.app.widgets.menu``), so this page is "Home" in it."""

import pandas as pd
import streamlit as st

from bert_explorer.app import gallery, prepare_view
from bert_explorer.app.models import available_models, builtin_corpora, default_model_sentence
from bert_explorer.app.roles import writes_allowed
from bert_explorer.app.state import model_picker, without_host_paths
from bert_explorer.app.widgets import menu

st.set_page_config(page_title="BERT Explorer", page_icon="🔎", layout="wide")
menu()
st.title("BERT Explorer")
st.info(default_model_sentence(), icon=":material/school:")
current = model_picker()
prepare_view.panel(current)  # the teacher's (or this machine's user's) "Prepare for class"
st.markdown(
    """
**BERT** (Devlin et al. 2019) is a stack of bidirectional Transformer encoder layers. It reads a
sentence (or a pair, `[CLS] A [SEP] B [SEP]`) as WordPiece tokens, adds token, segment and
position embeddings, and lets every token attend to every other token in every layer. It is
pre-trained on unlabelled text with two tasks — predict masked words (MLM) and tell whether
sentence B follows sentence A (NSP) — then fine-tuned with one small extra layer per task.

This app runs **our own PyTorch implementation** of that model (checked number-for-number
against Hugging Face `transformers` on the same weights), so what you see is what the paper
describes: Section 3 for the model and pre-training, Section 4 for fine-tuning, Section 5 for
the ablations.
"""
)
st.subheader("What each page shows")
st.markdown(
    """
| page | what you see | paper |
|---|---|---|
| **Tokens and embeddings** | WordPieces, the token + segment + position embeddings and their sum, learned positions, word maps, one word's vector in different contexts layer by layer | §3, Fig. 2 |
| **Attention** | every head's attention (bertviz head and model views, heatmaps), what each head does, attention rollout, switching a head off | §3 |
| **Inside one layer** | one encoder layer step by step with the loaded model's numbers: embeddings, queries, keys, values, scores, softmax, feed-forward, residuals and LayerNorm | §3, Vaswani et al. §3.2 |
| **Masked word probe** | BERT filling in `[MASK]`, what each layer would guess, the 80/10/10 corruption of a training sentence | §3.1 Task 1 |
| **Next sentence probe** | P(IsNext) for a pair, random B sentences from a corpus, many pairs at once | §3.1 Task 2 |
| **Attributions** | which tokens pushed a prediction (Integrated Gradients), split into token / segment / position parts | §3.1, §4 |
| **Two models side by side** | the same sentences through two models (e.g. before and after fine-tuning): their guesses, how far each head's attention moved, how alike each layer stays (CKA) | §4 |
| **What each layer knows** | a linear probe per layer, with a control task, reads off named entities, part of speech or topic: where the model keeps each | §5.3 |
| **Nearest neighbours** | the tokens of a whole corpus whose vectors at a layer are nearest to one token of your sentence | §3, §5.3 |
| **Pre-train**, **Fine-tune**, **Runs** | start pre-training or a one-click fine-tune in the background, watch the curves, compare runs | App. A.2, §4 |
| **After fine-tuning** | a fine-tuned run's dev set example by example (its most confident mistakes), its score by slice, its calibration, and the [CLS] vectors before and after fine-tuning | §4, Fig. 4 |
| **Ablation studio** | model size, No NSP, left-to-right, feature-based vs fine-tuning, masking ratios — ours beside the paper's numbers | §5, Tables 5-8 |
| **Features of a layer** | a sparse autoencoder trained on one layer: how much it keeps, each feature's top contexts and the words it pushes, the features of your sentence, steering a feature through the masked-word probe | Bricken et al. 2023, Gao et al. 2024 |
| **Guess with the class** | the teacher hides a word behind `[MASK]` (or asks "is B the next sentence?"), every student guesses, and Reveal puts the class's guesses beside the model's answer | §3.1 |

Pick the model in the sidebar: every page uses the same one.
"""
)

st.subheader("Models you can load")
st.caption("Short names work offline; any Hugging Face-style BERT checkpoint directory works too. "
           "L = layers, H = hidden units (the size of each token's vector), A = attention heads per layer: "
           "the paper's names (Devlin et al. 2019, Section 3).")
st.table(pd.DataFrame(available_models()).set_index("name"))  # a table wraps the descriptions

st.subheader("The paper's BERTs, one download away")
st.caption("Devlin et al.'s released models (Section 3: BERT-Base, L=12, H=768, A=12, 110 M parameters; BERT-Large, "
           "L=24, H=1024, A=16, 340 M) and Turc et al.'s 24 smaller BERTs (2019), on the Hugging Face Hub under "
           "Apache-2.0. " + ("Choose *the paper's BERTs (Hugging Face Hub)…* in the sidebar to download one in the "
                             "background (the app keeps working), or run `bert-explorer download bert-base-uncased` "
                             "where the app runs; once here, a model opens with no network." if writes_allowed() else
                             "In class, your teacher downloads the ones the lesson uses; once here, a model opens "
                             "with no network."))
st.table(gallery.big_models())
st.caption("The 24 miniatures as Turc et al.'s grid: L layers (rows) by H hidden units (columns), A = H/64 heads; "
           "each cell: parameters, and *here* or the download's size. BERT-Tiny is L=2/H=128, Mini 4/256, Small "
           "4/512, Medium 8/512; L=12/H=768 is BERT-Base's size (Turc et al.'s own pre-training of it).")
st.table(gallery.miniature_grid())

st.subheader("Built-in text, no download")
st.caption("Real corpora read from installed packages; pre-training and fine-tuning use them. "
           "Check each licence before you publish a model trained on it.")
st.table(pd.DataFrame(without_host_paths(builtin_corpora())).set_index("name"))  # (no host folder for a class)
