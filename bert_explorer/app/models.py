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
        row = {"name": name, "description": description, "installed": d is not None}
        if d is not None:
            cfg = json.loads((d / "config.json").read_text())
            row.update(L=cfg.get("num_hidden_layers"), H=cfg.get("hidden_size"), A=cfg.get("num_attention_heads"),
                       architecture=(cfg.get("architectures") or ["BertModel"])[0])
        rows.append(row)
    return rows


def builtin_corpora() -> list[dict]:
    return [{"name": c.name, "description": c.description, "source": c.provenance, "licence": c.licence,
             "installed": c.available} for c in BUILTIN_CORPORA.values()]
