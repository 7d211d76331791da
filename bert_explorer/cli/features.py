"""``bert-explorer features``: train a sparse autoencoder on one layer and read its features.

    bert-explorer features train --model minilm-mlm-nsp --layer 3           # minutes; kept in the cache
    bert-explorer features top --model minilm-mlm-nsp --layer 3 --feature 17 --output f17.csv
    bert-explorer features search --model minilm-mlm-nsp --layer 3 --word river
    bert-explorer features sentence --model minilm-mlm-nsp --layer 3 --text "the river bank flooded ."
    bert-explorer features steer --model minilm-mlm-nsp --layer 3 --feature 17 \\
        --text "she walked along the [MASK] ." --token [MASK] --amount 10

``--layer`` defaults to the middle layer; ``--k``, ``--width``, ``--tokens`` and ``--epochs`` pick
another SAE of the same layer (each setting is its own cache entry). The page starts
``python -m bert_explorer.cli.features build ...`` in the background, so this module also runs on
its own (:func:`main`).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys

import torch

from .. import checkpoint
from ..analysis.features import build as fb, splice
from ..analysis.features.sae import SaeConfig, TrainingStopped
from ..runs import neighbour_jobs
from ..train.speed import niced_here, said
from ..train.estimate import background_threads
from ..analysis.probes.pretraining_tasks import MAX_TOP_K
from ..safe_text import rows_csv
from .common import (UserError, check_output_file, number, output_file_args, print_json, progress_lines, run_command,
                     run_or_background, user_errors, whole, write_json, write_output)

MODEL_HELP = "a checkpoint directory or a short name (minilm-mlm-nsp, explorer-mini)"
FEATURE_HELP = "the feature's number, from 0 (as `features search` and `features sentence` show it)"


def _settings_args(p) -> None:
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--layer", type=int, default=None, help="1..L, the residual stream after that layer (default: the middle)")
    # (bounded as the page bounds them: --width 100000 asked for 26 GB, --k 0 was a traceback, --tokens 0 a "perfect"
    # SAE of nothing)
    p.add_argument("--k", type=whole(*fb.K_RANGE), default=SaeConfig.k,
                   help=f"active features per token, {fb.K_RANGE[0]} to {fb.K_RANGE[1]} (default {SaeConfig.k})")
    p.add_argument("--width", type=whole(*fb.WIDTH_RANGE), default=SaeConfig.width_factor,
                   help=f"features per hidden unit, {fb.WIDTH_RANGE[0]} to {fb.WIDTH_RANGE[1]} "
                        f"(default {SaeConfig.width_factor}: 8·H)")
    p.add_argument("--tokens", type=whole(*fb.TOKENS_RANGE), default=fb.DEFAULT_TOKENS,
                   help=f"WordPieces of activations, {fb.TOKENS_RANGE[0]:,} to {fb.TOKENS_RANGE[1]:,} (default 1 M)")
    p.add_argument("--epochs", type=whole(*fb.EPOCHS_RANGE), default=SaeConfig.epochs,
                   help=f"passes over them, {fb.EPOCHS_RANGE[0]} to {fb.EPOCHS_RANGE[1]} (default {SaeConfig.epochs})")
    p.add_argument("--corpus", default=fb.DEFAULT_CORPUS, help="a built-in corpus (default vital) or a text file")


def register(sub) -> None:
    s = sub.add_parser("features", help="a sparse autoencoder's features of one layer (train, browse, steer)")
    actions = s.add_subparsers(dest="action", required=True)
    t = actions.add_parser("train", help="train the SAE (activations, training, quality) into the disk cache")
    _settings_args(t)
    t.add_argument("--background", action="store_true", help="start as a background process and return")
    t.set_defaults(func=cmd_train)

    q = actions.add_parser("top", help="one feature's top activating contexts, histogram and words")
    _settings_args(q)
    q.add_argument("--feature", type=int, required=True, help=FEATURE_HELP)
    output_file_args(q, "write the contexts as CSV (.csv) or everything as JSON (.json)")
    q.set_defaults(func=cmd_top)

    w = actions.add_parser("search", help="the features that fire most on a word")
    _settings_args(w)
    w.add_argument("--word", required=True, help="the word to look for in the corpus")
    w.set_defaults(func=cmd_search)

    e = actions.add_parser("sentence", help="the features that fire on each WordPiece of a sentence")
    _settings_args(e)
    e.add_argument("--text", required=True, help="your sentence")
    output_file_args(e, "also write the result as JSON")
    e.set_defaults(func=cmd_sentence)

    g = actions.add_parser("steer", help="add or clamp a feature at a token; the masked-word probe before and after")
    _settings_args(g)
    g.add_argument("--feature", type=int, required=True, help=FEATURE_HELP)
    g.add_argument("--text", required=True, help="a sentence with [MASK]")
    g.add_argument("--token", default="[MASK]", help="the WordPiece to steer at (a word of the text or a position)")
    g.add_argument("--mode", choices=("add", "clamp"), default="add",
                   help="add --amount to the feature's activation, or clamp it to --amount (default add)")
    # (as the page bounds them: --amount nan answered NaN everywhere, --top-k -3 was a traceback)
    g.add_argument("--amount", type=number(-fb.MAX_AMOUNT, fb.MAX_AMOUNT), required=True,
                   help=f"added to the activation, or its clamped value, -{fb.MAX_AMOUNT:g} to {fb.MAX_AMOUNT:g}")
    g.add_argument("--top-k", type=whole(1, MAX_TOP_K), default=10,
                   help=f"the probe's top words before and after, each list this long, 1 to {MAX_TOP_K} (default 10)")
    g.set_defaults(func=cmd_steer)


def _loaded_and_settings(args):
    loaded = checkpoint.load(args.model, "BertForPreTraining")
    layer = args.layer if args.layer is not None else fb.default_layer(loaded)
    L = loaded.config.num_layers
    if not 1 <= layer <= L:
        raise UserError(f"layer {layer} does not exist: this model has layers 1-{L}")
    cfg = SaeConfig(k=args.k, width_factor=args.width, epochs=args.epochs)
    return loaded, fb.FeatureSettings(layer=layer, corpus=args.corpus, tokens=args.tokens, sae=cfg)


def cmd_train(args) -> int:
    loaded, settings = _loaded_and_settings(args)
    path = fb.entry_path(loaded, settings)

    def work():
        if not fb.is_complete(path):
            est = fb.estimate_seconds(loaded, settings, torch.get_num_threads())
            told = said(est['seconds'], torch.get_num_threads(), niced=niced_here())
            print(f"estimate: {told} ({est['tokens']:,} tokens)",
                  file=sys.stderr)
            _fewer_tokens(est, settings)
        try:
            return fb.Features(fb.build(loaded, settings, progress_lines())).meta
        except TrainingStopped:
            raise UserError(f"the SAE training of layer {settings.layer} was cancelled (its Cancel on the Features "
                            "page); nothing of it was kept: run the same command again to train it") from None

    def start():
        if why := neighbour_jobs.start_build(path, fb.build_argv(args.model, settings), one_at_a_time=False,
                                             command=fb.BUILDER, what="SAE"):
            print(why, file=sys.stderr)
        else:
            est = fb.estimate_seconds(loaded, settings, background_threads())
            print(f"training in the background, {said(est['seconds'], background_threads())}; "
                  f"progress in {neighbour_jobs.work_dir(path) / 'progress.json'}", file=sys.stderr)
            _fewer_tokens(est, settings)
    return run_or_background(args, work, show=_show_quality, start=start)


def _fewer_tokens(est: dict, settings) -> None:
    """A note where the corpus gives fewer tokens than asked (trained on 24 of the 10,000 asked, said only as "(24
    tokens)" at the end of the estimate line)."""
    if est["tokens"] < settings.tokens:
        print(f"note: {settings.corpus} gives {est['tokens']:,} of the {settings.tokens:,} tokens asked for: the SAE "
              "trains on those, and a few thousand tokens leave many of its features dead", file=sys.stderr)


def _show_quality(meta: dict) -> None:
    print_json({k: v for k, v in meta.items() if k not in ("history", "weights")})


def _open(args):
    loaded, settings = _loaded_and_settings(args)
    path = fb.entry_path(loaded, settings)
    if not fb.is_complete(path):
        # the settings given beside the defaults name the SAE: the command says them all (without them it
        # trained the default SAE, minutes, and the search still found none)
        given = "".join(f" --{flag} {shlex.quote(str(value))}" for flag, value, default in (
            ("k", args.k, SaeConfig.k), ("width", args.width, SaeConfig.width_factor),
            ("tokens", args.tokens, fb.DEFAULT_TOKENS), ("epochs", args.epochs, SaeConfig.epochs),
            ("corpus", args.corpus, fb.DEFAULT_CORPUS)) if value != default)
        raise UserError(f"no SAE of layer {settings.layer} with these settings yet: train it first with "
                        f"`bert-explorer features train --model {shlex.quote(args.model)} --layer {settings.layer}"
                        f"{given}`")
    return loaded, fb.Features(path)


def cmd_top(args) -> int:
    check_output_file(args.output, args.overwrite)
    with user_errors(ValueError):
        loaded, feats = _open(args)
        contexts = feats.top_contexts(args.feature)
        # (words only where a trained MLM head reads them: an untrained one's random words were printed)
        words = feats.words(args.feature, loaded.tokenizer) if fb.reads_words(loaded) else {}
        result = {**feats.summary(args.feature), **words, "contexts": contexts}
    for c in contexts:
        print(f"{c['activation']:7.2f}  {c['left'][-50:]:>50} [[{c['token']}]] {c['right'][:50]}")
    print(f"density {result['density']:.4%}; " + (f"pushes up: {', '.join(w for w, _ in result['up'])}; "
                                                   f"down: {', '.join(w for w, _ in result['down'])}" if words else
                                                   "no words: this model has no trained masked-LM head to read them"))
    if args.output:
        if args.output.lower().endswith(".csv"):
            # every cell as the other CSVs of the command line write it: a context that starts a formula
            # ("=HYPERLINK(...") ran as one in a spreadsheet, and a token "-" was read as one
            with write_output(args.output) as f:
                f.write(rows_csv(contexts) if contexts else "activation\n")
        else:
            write_json(args.output, result)
    return 0


def cmd_search(args) -> int:
    if not args.word.strip():  # (an empty word printed "“” does not occur in the corpus" and [], rc 0)
        raise UserError("--word is empty: give a word to find the features of")
    with user_errors(ValueError):
        loaded, feats = _open(args)
        hits = feats.search(loaded.tokenizer, args.word)
    # a word of several WordPieces is searched by its first, said as the page says it ("zzzqqq" answered for "z")
    if len(pieces := loaded.tokenizer.tokenize(args.word.strip())) > 1:
        print(f"note: “{args.word.strip()}” is {len(pieces)} WordPieces ({', '.join(pieces)}): the features below are "
              f"those of its first, “{pieces[0]}”", file=sys.stderr)
    if not hits:
        print(f"“{args.word}” does not occur in the corpus", file=sys.stderr)
    print_json(hits)
    return 0


def cmd_sentence(args) -> int:
    check_output_file(args.output, args.overwrite)
    with user_errors(ValueError):
        loaded, feats = _open(args)
        rows = feats.sentence(loaded, args.text)
    for r in rows:
        print(f"{r['position']:3d} {r['token']:>15}  " + ("(left out of the SAE's training)" if r.get("left_out") else
                                                         ", ".join(f"{f}:{v:.1f}" for f, v in r["features"])))
    if args.output:
        write_json(args.output, {"text": args.text, "layer": feats.layer, "tokens": rows})
    return 0


def cmd_steer(args) -> int:
    with user_errors(ValueError):
        loaded, feats = _open(args)
        if not fb.reads_words(loaded):
            raise UserError(f"{args.model} has no trained masked-LM head, and steering reads its guesses at the "
                            "[MASK]; steer a model that has one (minilm-mlm-nsp, explorer-mini, a pre-training run)")
        feats.check(args.feature)
        pieces = [loaded.tokenizer.id_to_token(i) for i in loaded.tokenizer.encode(args.text).input_ids]
        pos = int(args.token) if args.token.isdigit() else (pieces.index(args.token) if args.token in pieces else None)
        if pos is None or not 0 <= pos < len(pieces):  # (position 99 of 6 was an IndexError)
            raise UserError(f"{args.token!r} is not a WordPiece of the text nor one of its positions (0 to "
                            f"{len(pieces) - 1}): {' '.join(pieces)}")
        rows = splice.steering_table(loaded, feats.sae, feats.layer, args.text, args.feature, pos, args.mode,
                                     args.amount, args.top_k)
    print(f"{'word':>15} {'before':>8} {'after':>8} {'change':>8}")
    for r in rows:
        print(f"{r['word']:>15} {r['before']:8.4f} {r['after']:8.4f} {r['change']:+8.4f}")
    return 0


# ----- the background builder: python -m bert_explorer.cli.features build ... -------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_explorer.cli.features",
                                     description="train an SAE into the cache (what the page starts)")
    sub = parser.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build")
    _settings_args(b)
    args = parser.parse_args(argv)
    args.func = _run_build
    return run_command(args)


def _run_build(args) -> int:
    loaded, settings = _loaded_and_settings(args)
    with user_errors():
        try:
            meta = fb.Features(fb.build(loaded, settings)).meta
        except TrainingStopped:
            raise UserError(f"the SAE training of layer {settings.layer} was cancelled") from None
    print(json.dumps({k: meta[k] for k in ("fve", "mean_l0", "dead_fraction", "loss_recovered", "seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
