"""Commands that look at a model: probes, features, export, info, the built-in corpora."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import checkpoint
from .common import UserError, _read_lines


def cmd_extract_features(args) -> int:
    from ..analysis.features import extract_features, parse_example

    lines = _read_lines(args.input)
    loaded = checkpoint.load(args.model, "BertModel")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for record in extract_features(loaded, [parse_example(x) for x in lines], args.layers,
                                           args.max_seq_length, args.batch_size):
                f.write(json.dumps(record) + "\n")
    except ValueError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(str(e)) from e
    tmp.replace(out)
    print(f"wrote features of {len(lines)} examples to {out}", file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    loaded = checkpoint.load(args.model)
    if loaded.report.missing:
        print(f"note: {loaded.report.summary()}", file=sys.stderr)
    checkpoint.save(loaded.model, loaded.tokenizer, args.output)
    print(f"exported {type(loaded.model).__name__} ({loaded.num_parameters:,} parameters) to {args.output}",
          file=sys.stderr)
    return 0


def cmd_export_delta(args) -> int:
    import torch

    dtype = {"fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    result = checkpoint.save_delta(args.model, args.base, args.output, dtype)
    print(f"wrote {args.output}: {result['stored']:,} parameters stored in {args.dtype}; borrowed from "
          f"{args.base}: {', '.join(result['borrowed'])}", file=sys.stderr)
    return 0


def cmd_info(args) -> int:
    loaded = checkpoint.load(args.model)
    c = loaded.config
    info = {
        "path": str(loaded.path), "architecture": type(loaded.model).__name__,
        "L": c.num_layers, "H": c.hidden_size, "A": c.num_heads, "vocab_size": c.vocab_size,
        "parameters": loaded.num_parameters, "lowercase": loaded.tokenizer.lowercase,
        "heads_missing": loaded.report.missing_heads,
    }
    print(json.dumps(info, indent=2))
    return 0


def cmd_probe(args) -> int:
    from ..analysis.probes import load_for_probe, mlm_top_k, nsp_probability

    loaded = load_for_probe(args.model, args.task)
    try:
        if args.task == "mlm":
            result = mlm_top_k(loaded, args.text, args.top_k, args.text_b)
        else:
            result = nsp_probability(loaded, [(args.a, args.b)])[0]
    except ValueError as e:
        raise UserError(str(e)) from e
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.task == "mlm":
        for m in result:
            print(f"[MASK] at {m['position']}: " + ", ".join(
                f"{p['token']} {p['probability']:.3f}" for p in m["predictions"]))
    else:
        print(f"P(IsNext) = {result['is_next']:.3f}")
    return 0


def cmd_corpora(args) -> int:
    from ..data.corpora import BUILTIN_CORPORA

    rows = [{"name": c.name, "installed": c.available, "description": c.description,
             "provenance": c.provenance, "licence": c.licence} for c in BUILTIN_CORPORA.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']}{'' if r['installed'] else ' (not installed)'}: {r['description']}\n"
                  f"  source:  {r['provenance']}\n  licence: {r['licence']}\n")
    return 0
