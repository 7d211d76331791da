"""Small page helpers: the teaching blurb and the "this model cannot do that" message."""
from __future__ import annotations

import streamlit as st

from ..checkpoint import Loaded


def intro(title: str, text: str) -> None:
    st.title(title)
    st.markdown(text)


def needs_head(loaded: Loaded, head: str, what: str) -> bool:
    """True if the model has a trained ``head``; otherwise explain and point to one that has."""
    if head in loaded.report.missing:
        st.warning(
            f"This model has no trained {head}, so it cannot {what}. MiniLM was trained as a sentence "
            "encoder and its pre-training heads were not released. Pick **minilm-mlm-nsp** in the "
            "sidebar (MiniLM given both heads by this project's pre-training), **explorer-mini**, or "
            "a checkpoint from your own pre-training run.")
        return False
    return True
