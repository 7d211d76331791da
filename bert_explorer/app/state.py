"""The sidebar every page shares: which model, what it is, where it runs.

Models are cached with ``st.cache_resource`` (one copy per server, not per browser tab).
Session-state keys carry the ``be_`` prefix so they never collide with a page's own.
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st
import torch

from .. import checkpoint
from ..checkpoint import CheckpointError, Loaded

RUNS_DIR = Path("runs")


def run_checkpoints(root: Path = RUNS_DIR) -> list[str]:
    """Checkpoints written by pre-training runs under ./runs (newest step of each run first)."""
    found = []
    if root.exists():
        for cfg in sorted(root.glob("*/checkpoints/step-*/config.json")):
            found.append(str(cfg.parent))
    return sorted(found, key=lambda p: (Path(p).parents[1].name, -int(Path(p).name[5:])))


@st.cache_resource(show_spinner="Loading the model…")
def _load(name: str, architecture: str | None) -> Loaded:
    return checkpoint.load(name, architecture)


def load(name: str, architecture: str | None = None) -> tuple[Loaded | None, str | None]:
    """(model, None) or (None, one-sentence reason) — pages show the reason, never a traceback."""
    try:
        return _load(name, architecture), None
    except CheckpointError as e:
        return None, str(e)


def device_name() -> str:
    if torch.cuda.is_available():
        return f"CUDA ({torch.cuda.get_device_name(0)})"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "Apple MPS"
    return "CPU"


def model_picker(default: str = "explorer-mini") -> str:
    """Sidebar: choose a model by short name, from a run, or by path; show what it is."""
    names = [n for n, (locate, _) in checkpoint.SHORT_NAMES.items() if locate() is not None]
    options = names + run_checkpoints() + ["a local directory…"]
    index = options.index(default) if default in options else 0
    choice = st.sidebar.selectbox("Model", options, index=index, key="be_model_choice",
                                  help="Short names need no download; runs are listed from ./runs.")
    if choice == "a local directory…":
        choice = st.sidebar.text_input("Checkpoint directory", key="be_model_path",
                                       placeholder="/path/to/a/bert (config.json, model.safetensors, vocab.txt)")
    if choice:
        loaded, error = load(choice, "BertForPreTraining")
        if error:
            st.sidebar.error(error)
        else:
            c = loaded.config
            heads = [h for h in ("masked-LM head", "next-sentence head") if h not in loaded.report.missing]
            st.sidebar.markdown(
                f"**L** = {c.num_layers} layers · **H** = {c.hidden_size} · **A** = {c.num_heads} heads  \n"
                f"{loaded.num_parameters / 1e6:.1f} M parameters · vocab {c.vocab_size:,}  \n"
                f"pre-training heads: {', '.join(heads) if heads else 'none (encoder only)'}  \n"
                f"device: {device_name()}")
    return choice
