"""What is here: the built-in corpora (provenance, licence, installed or not) and a model's size and heads.

    bert-explorer corpora
    bert-explorer info --model minilm
"""
from __future__ import annotations

from .. import checkpoint
from ..data.corpora import BUILTIN_CORPORA
from .common import MODEL_HELP, print_json


def register(sub) -> None:
    """Add ``corpora`` and ``info`` to the subcommands ``sub``."""
    s = sub.add_parser("corpora", help="the built-in corpora, their provenance and licences")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_corpora)

    s = sub.add_parser("info", help="size and heads of a model")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.set_defaults(func=cmd_info)


def cmd_corpora(args) -> int:
    rows = [{"name": c.name, "installed": c.available, "description": c.description,
             "provenance": c.provenance, "licence": c.licence} for c in BUILTIN_CORPORA.values()]
    if args.json:
        print_json(rows)
    else:
        for r in rows:
            print(f"{r['name']}{'' if r['installed'] else ' (not installed)'}: {r['description']}\n"
                  f"  source:  {r['provenance']}\n  licence: {r['licence']}\n")
    return 0


def cmd_info(args) -> int:
    loaded = checkpoint.load(args.model)
    c = loaded.config
    print_json({
        "path": str(loaded.path), "architecture": type(loaded.model).__name__,
        "L": c.num_layers, "H": c.hidden_size, "A": c.num_heads, "vocab_size": c.vocab_size,
        "parameters": loaded.num_parameters, "lowercase": loaded.tokenizer.lowercase,
        "heads_missing": loaded.report.missing_heads,
    })
    return 0
