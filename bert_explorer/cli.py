"""``bert-explorer``: the headless front end. Every page of the app has a command here.

Mistakes a user can make (a wrong path, a malformed file, a model without the needed head)
end with one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import checkpoint
from .checkpoint import CheckpointError


class UserError(Exception):
    """A problem with the user's input; the message says what is wrong and what to do."""


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like -1,-2, got {text!r}")


def _read_lines(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"input file {path} does not exist")
    raw = p.read_bytes()
    if b"\x00" in raw[:4096]:
        raise UserError(f"{path} looks like a binary file; give a UTF-8 text file with one example per line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        print(f"note: {path} is not valid UTF-8; read it as Latin-1", file=sys.stderr)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise UserError(f"{path} is empty; write one example per line (a pair as 'A ||| B')")
    return lines


def cmd_extract_features(args) -> int:
    from .analysis.features import extract_features, parse_example

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bert-explorer", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    model_help = f"a checkpoint directory, a short name ({', '.join(checkpoint.SHORT_NAMES)}) or hf:<hub id>"

    s = sub.add_parser("extract-features", help="contextual token features as JSON lines (feature-based transfer)")
    s.add_argument("--model", required=True, help=model_help)
    s.add_argument("--input", required=True, help="text file: one example per line, a pair as 'A ||| B'")
    s.add_argument("--output", required=True, help="output .jsonl")
    s.add_argument("--layers", type=_int_list, default=[-1, -2, -3, -4], help="encoder layers, -1 = last")
    s.add_argument("--max-seq-length", type=int, default=128)
    s.add_argument("--batch-size", type=int, default=8)
    s.set_defaults(func=cmd_extract_features)

    s = sub.add_parser("export", help="write a model as a transformers-compatible checkpoint directory")
    s.add_argument("--model", required=True, help=model_help)
    s.add_argument("--output", required=True)
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("info", help="size and heads of a model")
    s.add_argument("--model", required=True, help=model_help)
    s.set_defaults(func=cmd_info)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UserError, CheckpointError) as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bert-explorer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
