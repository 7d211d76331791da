"""``bert-explorer attention-measures``: where every head looks over Wikipedia, as Clark et al. (2019) measured.

    bert-explorer attention-measures build --model minilm-mlm-nsp                  # 1,000 segments, minutes
    bert-explorer attention-measures build --model bert-base-uncased --segments 200 --json

The measures (``analysis/attention/clark.py``) are built once per weights, corpus and number of
segments into the disk cache; a second call prints them at once. ``--background`` starts the build as
its own process (what the Attention page does: ``python -m bert_explorer.cli.attention_measures
build ...``, so this module also runs on its own, see :func:`main`).
"""
from __future__ import annotations

import argparse
import sys

from .. import checkpoint
from ..analysis.attention import clark
from ..runs import neighbour_jobs
from ..runs.report import duration_text
from .common import MODEL_HELP, UserError, print_json, run_command, run_or_background

def register(sub) -> None:
    """Add ``attention-measures build`` to the subcommands ``sub``."""
    s = sub.add_parser("attention-measures", help="where every head looks over 1,000 Wikipedia segments "
                                                  "(Clark et al. 2019): [SEP], [CLS], punctuation, neighbours, entropy")
    actions = s.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="measure the model (once; kept in the disk cache) and print the measures")
    b.add_argument("--model", required=True, help=MODEL_HELP)
    b.add_argument("--segments", type=int, default=clark.MAX_SEGMENTS,
                   help=f"how many segments [CLS] A [SEP] B [SEP] of at most {clark.MAX_PIECES} WordPieces "
                        f"(1-{clark.MAX_SEGMENTS:,}; default {clark.MAX_SEGMENTS:,}, as in the paper)")
    b.add_argument("--corpus", choices=clark.CORPORA, default=None,
                   help="the built-in Wikipedia text: wiki (the dump, the default when installed) or vital "
                        "(lead sections)")
    b.add_argument("--seed", type=int, default=0, help="chooses the segments and where A ends (default 0)")
    b.add_argument("--wordpieces", action="store_true",
                   help="measure WordPieces instead of words (Clark et al.'s published code does so for these "
                        "counts; their Section 4.1 makes attention word-level)")
    b.add_argument("--json", action="store_true", help="print JSON instead of sentences and a table")
    b.add_argument("--background", action="store_true", help="start as a background process and return")
    b.set_defaults(func=cmd_build)


def cmd_build(args) -> int:
    corpus = args.corpus or clark.default_corpus()
    try:
        clark.check_segments(args.segments)
    except ValueError as e:
        raise UserError(str(e)) from e
    loaded = checkpoint.load(args.model, "BertModel")
    path = clark.measures_path(loaded, corpus, args.segments, args.seed, not args.wordpieces)

    def build():
        if not clark.is_complete(path):
            print(f"measuring {args.segments:,} segments of {corpus}: about "
                  f"{duration_text(clark.estimate_seconds(loaded.config, args.segments))} on one core",
                  file=sys.stderr)
        clark.build_measures(loaded, corpus, args.segments, args.seed, not args.wordpieces, _progress())
        return clark.read_measures(path)

    def start():
        argv = ["--model", args.model, "--segments", str(args.segments), "--corpus", corpus, "--seed", str(args.seed)]
        if why := neighbour_jobs.start_build(path, argv + (["--wordpieces"] if args.wordpieces else []),
                                             one_at_a_time=False, command=clark.BUILD_COMMAND, what="measurement"):
            print(why, file=sys.stderr)
        else:
            print(f"measuring in the background; progress in {neighbour_jobs.work_dir(path) / 'progress.json'}",
                  file=sys.stderr)

    show = (lambda m: print_json(record(args.model, m))) if args.json else (lambda m: _show(args.model, m))
    return run_or_background(args, build, show=show, start=start)


def record(model: str, m: clark.ClarkMeasures) -> dict:
    """The measures as JSON: this model's statements (and Clark et al.'s, for bert-base-uncased only),
    the per-layer means and every head's measures ([L][A], layers and heads from 0)."""
    return {"model": model, "corpus": m.corpus, "segments": m.segments, "seed": m.seed, "word_level": m.word_level,
            "words": m.words, "wordpieces": m.wordpieces, "uniform": m.uniform,
            "statements": clark.statements(m),
            "clark_et_al_2019": clark.CLARK_STATEMENTS if clark.is_reference_model(model) else None,
            "layers": clark.layer_table(m).to_dict(orient="records"),
            "heads": {k: v.round(6).tolist() for k, v in m.heads.items()},
            "build_seconds": m.info.get("seconds")}


def _show(model: str, m: clark.ClarkMeasures) -> None:
    unit = "words" if m.word_level else "WordPieces"
    print(f"{model}: {m.segments:,} segments of {m.corpus} ({m.words:,} words, {m.wordpieces:,} WordPieces), "
          f"measured on {unit}")
    ours, theirs = clark.statements(m), clark.CLARK_STATEMENTS if clark.is_reference_model(model) else None
    for key, topic in clark.STATEMENT_TOPICS.items():
        print(f"\n{topic}\n  this model: {ours[key]}")
        if theirs:
            print(f"  Clark et al. 2019: {theirs[key]}")
    if not theirs:
        print(f"\n(Clark et al.'s statements are about {clark.REFERENCE_MODEL} only.)")
    print()
    print(clark.layer_table(m).to_string(index=False))


def _progress():
    """A line on stderr every 5 % (what a background build's log keeps)."""
    last = [-1]

    def say(fraction: float, message: str) -> None:
        step = int(fraction * 20)
        if step != last[0]:
            last[0] = step
            print(f"{fraction:4.0%} {message}", file=sys.stderr, flush=True)
    return say


def main(argv: list[str] | None = None) -> int:
    """``python -m bert_explorer.cli.attention_measures build ...``: this command on its own, with the
    CLI's handling of user errors (one line, exit 2)."""
    parser = argparse.ArgumentParser(prog="bert-explorer attention-measures")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["attention-measures", *(sys.argv[1:] if argv is None else argv)])
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
