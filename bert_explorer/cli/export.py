"""Commands that hand a model to other programs: its contextual features (google-research/bert's
``extract_features.py`` format), the model itself as a transformers checkpoint, or as a delta over
an installed base model.

    bert-explorer extract-features --model minilm --input sentences.txt --output features.jsonl --layers=-1,-2
    bert-explorer export --model minilm-mlm-nsp --output my-bert/
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from .. import checkpoint
from ..analysis.layers.features import extract_features, parse_example
from .common import (MODEL_HELP, UserError, came_in_meanwhile, check_output_file, int_list, new_folder,
                     output_file_args, read_lines, user_errors, whole, write_output)


def register(sub) -> None:
    """Add ``extract-features``, ``export`` and ``export-delta`` to the subcommands ``sub``."""
    s = sub.add_parser("extract-features", help="contextual token features as JSON lines (feature-based transfer)")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.add_argument("--input", required=True, help="text file: one example per line, a pair as 'A ||| B'")
    output_file_args(s, "output .jsonl", required=True)
    s.add_argument("--layers", type=int_list, default=None,
                   help="encoder layers, -1 = last (default -1,-2,-3,-4: the last four, as google-research/bert's "
                        "script; all of them for a model of fewer layers)")
    s.add_argument("--max-seq-length", type=whole(3, 8192), default=128,
                   help="WordPieces per example, [CLS] and [SEP] included; longer ones are cut (default 128)")
    s.add_argument("--batch-size", type=whole(1, 1024), default=8,
                   help="examples run through the model at once (default 8)")
    s.set_defaults(func=cmd_extract_features)

    s = sub.add_parser("export", help="write a model as a transformers-compatible checkpoint directory")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.add_argument("--output", required=True, help="a new or empty folder to write the checkpoint into (config.json, "
                                                   "model.safetensors, vocab.txt)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("export-delta", help="write a model as a delta over an installed base model (only the "
                                            "tensors that differ from it, as the shipped minilm-mlm-nsp)")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.add_argument("--base", default="minilm", help="short name of the installed base model (default minilm)")
    s.add_argument("--output", required=True, help="a new or empty folder to write the delta into")
    s.add_argument("--dtype", choices=("fp16", "fp32"), default="fp16",
                   help="how the stored tensors are kept (default fp16)")
    s.set_defaults(func=cmd_export_delta)


def cmd_extract_features(args) -> int:
    check_output_file(args.output, args.overwrite)
    lines = read_lines(args.input)
    loaded = checkpoint.load(args.model, "BertModel")
    positions = loaded.config.max_position_embeddings
    if args.max_seq_length > positions:  # (8192 was taken for a model of 512 positions without a word)
        raise UserError(f"--max-seq-length {args.max_seq_length} is longer than the {positions} positions that "
                        f"{args.model} has learned; choose {positions} or less")
    # (the default asked a 2-layer model for layer -3: "out of range", of a number the user never typed)
    layers = args.layers if args.layers is not None else [-i for i in range(1, min(4, loaded.config.num_layers) + 1)]
    with user_errors(), write_output(args.output) as f:  # a layer out of range leaves no half-written file
        for record in extract_features(loaded, [parse_example(x) for x in lines], layers,
                                       args.max_seq_length, args.batch_size):
            f.write(json.dumps(record) + "\n")
    print(f"wrote features of {len(lines)} example{'' if len(lines) == 1 else 's'} to {Path(args.output)}",
          file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    output = new_folder(args.output, "the exported model")  # checked before the seconds of loading the model
    loaded = checkpoint.load(args.model)
    if loaded.report.missing:
        print(f"note: {loaded.report.summary()}", file=sys.stderr)
    # keep what the source folder says about the model (training settings, held-out scores, time-lapse)
    about = checkpoint.about_files(checkpoint.resolve(args.model))
    with came_in_meanwhile(args.output, "the exported model"):
        checkpoint.save(loaded.model, loaded.tokenizer, output, extra_files=about, into_empty=True)
    print(f"exported {type(loaded.model).__name__} ({loaded.num_parameters:,} parameters) to {args.output}",
          file=sys.stderr)
    return 0


def cmd_export_delta(args) -> int:
    dtype = {"fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    output = new_folder(args.output, "the delta checkpoint")
    with came_in_meanwhile(args.output, "the delta checkpoint"):
        result = checkpoint.save_delta(args.model, args.base, output, dtype, into_empty=True)
    print(f"wrote {args.output}: {result['stored']:,} parameters stored in {args.dtype}; borrowed from "
          f"{args.base}: {', '.join(result['borrowed'])}", file=sys.stderr)
    return 0
