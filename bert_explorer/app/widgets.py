"""Small page helpers: the teaching blurb and the "this model cannot do that" message."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import streamlit as st

from ..checkpoint import Loaded
from . import roles


# The menu (Streamlit's own, built from pages/, is turned off in .streamlit/config.toml:
# it would call the home page "run app"). Paths are relative to run_app.py.
MENU = [("run_app.py", "Home", ":material/home:"),
        ("pages/1_Tokens_and_embeddings.py", "Tokens and embeddings", ":material/text_fields:"),
        ("pages/2_Attention.py", "Attention", ":material/visibility:"),
        ("pages/3_Inside_one_layer.py", "Inside one layer", ":material/stacks:"),
        ("pages/4_Masked_word_probe.py", "Masked word probe", ":material/theater_comedy:"),
        ("pages/5_Next_sentence_probe.py", "Next sentence probe", ":material/arrow_forward:"),
        ("pages/6_Attributions.py", "Attributions", ":material/calculate:"),
        ("pages/7_Two_models.py", "Two models side by side", ":material/compare:"),
        ("pages/8_What_each_layer_knows.py", "What each layer knows", ":material/layers:"),
        ("pages/9_Nearest_neighbours.py", "Nearest neighbours", ":material/scatter_plot:"),
        ("pages/10_Pre-train.py", "Pre-train", ":material/fitness_center:"),
        ("pages/11_Fine-tune.py", "Fine-tune", ":material/tune:"),
        ("pages/12_After_fine_tuning.py", "After fine-tuning", ":material/fact_check:"),
        ("pages/13_Runs.py", "Runs", ":material/folder_open:"),
        ("pages/14_Ablation_studio.py", "Ablation studio", ":material/science:"),
        ("pages/15_Features.py", "Features of a layer", ":material/category:"),
        ("pages/16_Guess_with_the_class.py", "Guess with the class", ":material/quiz:")]
# (Material Symbols ship inside Streamlit, so they draw offline on any machine; emoji need a font.)


def menu() -> None:
    """The sidebar menu of every page, "Home" first; and the teacher's role taken from the teacher's
    link or the teacher's browser (``roles.adopt``), before anything on the page asks who may write."""
    roles.adopt()
    with st.sidebar:
        for path, label, icon in MENU:
            try:
                st.page_link(path, label=label, icon=icon)
            except st.errors.StreamlitAPIException:
                return  # a page run on its own (a test harness) has no menu of pages to link to
        st.divider()


def intro(title: str, text: str | Callable[[], str]) -> None:
    """The top of a page: its browser-tab title, the menu, its title and what it shows. ``title`` is the
    page's label in MENU: one name per page, in the menu, the tab and the heading. A text that depends on
    who reads it (the teacher, a student) is a function: it is read after the menu has taken the role."""
    st.set_page_config(page_title=f"{title} · BERT Explorer", layout="wide")
    menu()
    st.title(title)
    st.markdown(text() if callable(text) else text)


def why_no_head(loaded: Loaded, head: str) -> str:
    """Why this model has no trained ``head``: MiniLM's is known; of another model (a fine-tuned encoder, an
    upload) only that its files hold no such weights."""
    untrained = loaded.report.untrained.get(head)
    return (f"it was pre-trained with {untrained}, so the {head} it saved was never trained (its weights are "
            "as they were drawn at the start)" if untrained else
            "MiniLM was trained as a sentence encoder and its pre-training heads were not released"
            if Path(loaded.name or loaded.path).name == "minilm" else
            "its files hold no weights for that head (a model fine-tuned for a task, or saved as an encoder alone, "
            "keeps none)")


# where a model with the head is found
WITH_HEADS = ("Pick **minilm-mlm-nsp** in the sidebar (MiniLM given both heads by this project's pre-training), "
              "**explorer-mini**, or a checkpoint from your own pre-training run.")


def needs_head(loaded: Loaded, head: str, what: str) -> bool:
    """True if the model has a trained ``head``; otherwise explain and point to one that has."""
    if head in loaded.report.missing:
        st.warning(f"This model has no trained {head}, so it cannot {what}: {why_no_head(loaded, head)}. {WITH_HEADS}")
        return False
    return True


_MARKUP = re.compile(r"([$*~])")  # what Streamlit's Markdown makes maths, emphasis or strikethrough of


def sentence_of(error) -> str:
    """An error's message as the page shows it: one sentence, its first letter a capital and a full stop at its
    end (the analyses word their errors for the command line's "bert-explorer: error: ...": "give a word to look
    for" read as a fragment on a page)."""
    text = str(error).strip()
    if text and text[-1].isalnum() or text.endswith((")", "”", "'", '"')):
        text += "."
    first = text.split(maxsplit=1)[0] if text else ""
    text = text if any(c.isupper() for c in first[1:]) else text[:1].upper() + text[1:]  # ("t-SNE needs ...")
    # the user's words inside it shown as typed: a word "$x$" was typeset as maths, "**x**" lost its stars
    return _MARKUP.sub(r"\\\1", text)
