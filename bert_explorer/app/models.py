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
    from .. import hub

    name, d = checkpoint.DEFAULT_MODEL, checkpoint.SHORT_NAMES[checkpoint.DEFAULT_MODEL][0]()
    base = hub.CATALOGUE["google-bert/bert-base-uncased"]
    shape = ""
    if d is not None:
        cfg = json.loads((d / "config.json").read_text())
        L, H, V = cfg.get("num_hidden_layers"), cfg.get("hidden_size"), cfg.get("vocab_size")
        size = hub.HubModel(name, name, L, H, vocab_size=V).parameters / 1e6
        shape = f", a small BERT ({L} layers, H = {H}, about {size:,.0f} M parameters) trained by this project"
    here = hub.local_copy(base.repo_id) is not None
    return (f"Every page starts on **{name}**{shape}: it is not the paper's BERT-Base, and it knows less English. "
            f"**BERT-Base** ({base.layers} layers, H = {base.hidden}, {base.parameters / 1e6:,.0f} M parameters) "
            + ("is on this machine: choose it in the sidebar (*the paper's BERTs (Hugging Face Hub)…*)."
               if here else
               f"is one download away (about {base.download_bytes / 1e6:,.0f} MB): choose *the paper's BERTs (Hugging "
               "Face Hub)…* in the sidebar, or run `bert-explorer download bert-base-uncased` where the app runs."))
