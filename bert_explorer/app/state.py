"""The sidebar every page shares: which model, what it is, where it runs.

Models are cached with ``st.cache_resource`` (one copy per server, not per browser tab).
Session-state keys carry the ``be_`` prefix so they never collide with a page's own.
"""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st
import torch

from .. import checkpoint
from ..checkpoint import CheckpointError, Loaded

# The app's own model calls are small (one sentence); half the cores is plenty and leaves the
# rest to background runs, which take all cores but one (train/runs.py, background_env).
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))

RUNS_DIR = Path("runs")
UPLOADS = "uploaded-models"  # checkpoints uploaded as .zip, under the runs folder
RUNS_ENV = "BERT_EXPLORER_RUNS"  # another runs folder (tests point it at a temporary one)


def runs_root() -> Path:
    """Where runs live: ./runs, or the folder named by $BERT_EXPLORER_RUNS."""
    return Path(os.environ.get(RUNS_ENV) or RUNS_DIR)


def run_checkpoints(root: Path | None = None) -> list[str]:
    """Checkpoints written by pre-training runs under the runs folder, ablation studies'
    pre-trainings included (newest step of each run first)."""
    root = runs_root() if root is None else root
    found = []
    for cfg in (root.glob("**/checkpoints/step-*/config.json") if root.exists() else []):
        step = cfg.parent.name[len("step-"):]
        if step.isdigit():  # a copied or half-renamed folder (step-5-copy) is not a checkpoint
            found.append((str(cfg.parents[2]), -int(step), str(cfg.parent)))
    return [path for *_, path in sorted(found)]


@st.cache_resource(show_spinner="Loading the model…", max_entries=8)
def _load(name: str, architecture: str | None, version: tuple) -> Loaded:
    return checkpoint.load(name, architecture)


def _version(name: str) -> tuple:
    """What identifies the weights behind a name: a run re-created under the same path must
    not be served from the cache."""
    if str(name).startswith("hf:"):
        return ()  # resolving a hub id downloads it: leave that to the load itself
    try:
        w = checkpoint.resolve(name) / "model.safetensors"
        return (w.stat().st_mtime_ns, w.stat().st_size) if w.exists() else ()
    except CheckpointError:
        return ()


def load(name: str, architecture: str | None = None) -> tuple[Loaded | None, str | None]:
    """(model, None) or (None, one-sentence reason) — pages show the reason, never a traceback."""
    try:
        return _load(name, architecture, _version(name)), None
    except CheckpointError as e:
        return None, str(e)


def device_name() -> str:
    if torch.cuda.is_available():
        return f"CUDA ({torch.cuda.get_device_name(0)})"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "Apple MPS"
    return "CPU"


def uploaded_checkpoints() -> list[str]:
    d = runs_root() / UPLOADS
    return sorted(str(p.parent) for p in d.glob("*/config.json")) if d.is_dir() else []


def _upload_checkpoint() -> str | None:
    """A .zip of a transformers-style BERT folder, unpacked under runs/uploaded-models/."""
    f = st.sidebar.file_uploader("Checkpoint (.zip of config.json, model.safetensors, vocab.txt)", type=["zip"],
                                 key="be_model_zip")
    if f is None:
        return None
    from ..data.uploads import slug

    target = runs_root() / UPLOADS / slug(Path(f.name).stem)
    if not (target / "config.json").exists():
        try:
            checkpoint.unpack_zip(f.getvalue(), target)
        except CheckpointError as e:
            st.sidebar.error(str(e))
            return None
    return str(target)


def model_picker(default: str = checkpoint.DEFAULT_MODEL) -> str:
    """Sidebar: choose a model by short name, from a run, or by path; show what it is."""
    names = [n for n, (locate, _) in checkpoint.SHORT_NAMES.items() if locate() is not None]
    options = names + run_checkpoints() + uploaded_checkpoints() + ["a local directory…", "upload a checkpoint (.zip)…"]
    index = options.index(default) if default in options else 0
    choice = st.sidebar.selectbox("Model", options, index=index, key="be_model_choice",
                                  help="Short names need no download; runs are listed from ./runs.")
    if choice == "upload a checkpoint (.zip)…":
        choice = _upload_checkpoint()
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
