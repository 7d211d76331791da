"""``bert-explorer attention-measures``: where every head looks over Wikipedia, as Clark et al. (2019) measured.

    bert-explorer attention-measures build --model minilm-mlm-nsp                  # 1,000 segments, minutes
    bert-explorer attention-measures build --model bert-base-uncased --segments 200 --json

The measures (``analysis/attention/clark.py``) are built once per weights, corpus and number of
segments into the disk cache; a second call prints them at once. ``--background`` starts the build as
its own process (what the Attention page does: ``python -m bert_explorer.cli.attention_measures
build ...``, so this module also runs on its own, see :func:`main`).
"""
from __future__ import annotations

import sys

from .. import checkpoint
from ..analysis.attention import clark
from ..runs import neighbour_jobs
from ..train.estimate import background_threads
from ..train.configs import MAX_SEED
from ..train.speed import niced_here, said
from .common import MODEL_HELP, UserError, print_json, progress_lines, run_alone, run_or_background, whole


def register(sub) -> None:
    """Add ``attention-measures build`` to the subcommands ``sub``."""
    s = sub.add_parser("attention-measures", help="where every head looks over 1,000 Wikipedia segments "
                                                  "(Clark et al. 2019): [SEP], [CLS], punctuation, neighbours, entropy")
    actions = s.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="measure the model (once; kept in the disk cache) and print the measures")
    segment_build_options(b, clark.MAX_SEGMENTS, clark.MAX_SEGMENTS, clark.MAX_PIECES, ", as in the paper")
    b.add_argument("--wordpieces", action="store_true",
                   help="measure WordPieces instead of words (Clark et al.'s published code does so for these "
                        "counts; their Section 4.1 makes attention word-level)")
    b.set_defaults(func=cmd_build)


def segment_build_options(b, default: int, most: int, pieces: int, why: str = "") -> None:
    """The options of a build over Clark et al.'s Wikipedia segments (``clark.make_segments``): the model,
    how many segments, the corpus, the seed, JSON output and starting in the background."""
    b.add_argument("--model", required=True, help=MODEL_HELP)
    b.add_argument("--segments", type=int, default=default,
                   help=f"how many segments [CLS] A [SEP] B [SEP] of at most {pieces} WordPieces "
                        f"(1-{most:,}; default {default:,}{why})")
    b.add_argument("--corpus", choices=clark.CORPORA, default=None,
                   help="the built-in Wikipedia text: wiki (the dump, the default when installed) or vital "
                        "(lead sections)")
    b.add_argument("--seed", type=whole(0, MAX_SEED), default=0,
                   help="chooses the segments and where A ends (default 0)")
    b.add_argument("--json", action="store_true", help="print JSON instead of sentences and a table")
    b.add_argument("--background", action="store_true", help="start as a background process and return")


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
            told = said(clark.estimate_seconds(loaded.config, args.segments), background_threads(),
                        niced=niced_here())  # (by name: passed third, niced_here() was read as the load, 0)
            print(f"measuring {args.segments:,} segments of {corpus}: "
                  f"{told}",
                  file=sys.stderr)
        clark.build_measures(loaded, corpus, args.segments, args.seed, not args.wordpieces, progress_lines())
        return clark.read_measures(path)

    def start():
        start_segment_build(args, corpus, path, clark.BUILD_COMMAND, "measurement",
                            ["--wordpieces"] if args.wordpieces else [])

    show = (lambda m: print_json(record(args.model, m))) if args.json else (lambda m: _show(args.model, m))
    return run_or_background(args, build, show=show, start=start)


def start_segment_build(args, corpus: str, path, command: tuple[str, ...], what: str, more: list[str] = ()) -> None:
    """Start the build of ``path`` (options of :func:`segment_build_options`) as its own process and say
    where its progress is, or why it did not start."""
    argv = ["--model", args.model, "--segments", str(args.segments), "--corpus", corpus, "--seed", str(args.seed)]
    if why := neighbour_jobs.start_build(path, [*argv, *more], one_at_a_time=False, command=command, what=what):
        print(why, file=sys.stderr)
    else:
        print(f"building the {what} in the background; progress in "
              f"{neighbour_jobs.work_dir(path) / 'progress.json'}", file=sys.stderr)


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


def main(argv: list[str] | None = None) -> int:
    """``python -m bert_explorer.cli.attention_measures build ...``: this command on its own, with the
    CLI's handling of user errors (one line, exit 2)."""
    return run_alone(register, "attention-measures", argv)


if __name__ == "__main__":
    sys.exit(main())
