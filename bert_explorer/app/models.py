"""What the app knows about the models a user can pick (cheap: reads config.json only)."""
from __future__ import annotations

import json

from .. import checkpoint
from ..data.corpora import BUILTIN_CORPORA


def available_models() -> list[dict]:
    """One row per short name: where it comes from and its size, without loading weights."""
    rows = []
    for name, (locate, description) in checkpoint.SHORT_NAMES.items():
        d = locate()
        row = {"name": name, "description": description, "installed": "yes" if d is not None else "no"}
        if d is not None:
            cfg = json.loads((d / "config.json").read_text())
            row.update(L=cfg.get("num_hidden_layers"), H=cfg.get("hidden_size"), A=cfg.get("num_attention_heads"),
                       architecture=(cfg.get("architectures") or ["BertModel"])[0])
        rows.append(row)
    return rows


def builtin_corpora() -> list[dict]:
    return [{"name": c.name, "description": c.description, "source": c.provenance, "licence": c.licence,
             "installed": "yes" if c.available else "no"} for c in BUILTIN_CORPORA.values()]


def default_model_sentence() -> str:
    """The top of Home: the model every page starts on is a small one trained here, not the paper's
    BERT-Base, which is one download away (or here already). Every figure is read from the configs."""
    from .. import hub, hub_names

    name, d = checkpoint.DEFAULT_MODEL, checkpoint.SHORT_NAMES[checkpoint.DEFAULT_MODEL][0]()
    base = hub.CATALOGUE["google-bert/bert-base-uncased"]
    shape = ""
    if d is not None:
        cfg = json.loads((d / "config.json").read_text())
        L, H, V = cfg.get("num_hidden_layers"), cfg.get("hidden_size"), cfg.get("vocab_size")
        size = hub_names.HubModel(name, name, L, H, vocab_size=V).parameters / 1e6
        shape = f", a small BERT ({L} layers, H = {H}, about {size:,.0f} M parameters) trained by this project"
    return (f"Every page starts on **{name}**{shape}: it is not the paper's BERT-Base, and it knows less English. "
            f"**BERT-Base** ({base.layers} layers, H = {base.hidden}, {base.parameters / 1e6:,.0f} M parameters) "
            + how_to_get(base.repo_id))


def how_to_get(repo_id: str) -> str:
    """How this session gets one of the paper's BERTs, from "is": on this machine, or one download away, which
    only a session that may write can start (a student in classroom mode reads that the teacher can)."""
    from .. import hub
    from .roles import writes_allowed

    model = hub.CATALOGUE[repo_id]
    if hub.local_copy(repo_id) is not None:
        return "is on this machine: choose it in the sidebar (*the paper's BERTs (Hugging Face Hub)…*)."
    size = f"one download away (about {model.download_bytes / 1e6:,.0f} MB)"
    if not writes_allowed():
        return f"is {size}, not on this machine yet: your teacher can download it for the class."
    return (f"is {size}: choose *the paper's BERTs (Hugging Face Hub)…* in the sidebar, or run "
            f"`bert-explorer download {repo_id.split('/')[-1]}` where the app runs.")
