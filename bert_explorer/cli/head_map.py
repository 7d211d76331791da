"""``bert-explorer head-map``: every head of a model placed on a map by how alike it attends (Clark et al.
2019, Fig. 6), as the Attention page's *Head map* tab draws it.

    bert-explorer head-map build --model minilm-mlm-nsp                   # 200 Wikipedia segments, minutes
    bert-explorer head-map build --model minilm-mlm-nsp --segments 50 --json

The map (``analysis/attention/head_map.py``) is built once per weights, corpus, number of segments and
seed into the disk cache; a second call prints it at once. ``--background`` starts the build as its own
process (what the page does: ``python -m bert_explorer.cli.head_map build ...``; see :func:`main`).
"""
from __future__ import annotations

import sys

from .. import checkpoint
from ..analysis.attention import clark, head_map
from ..train.estimate import background_threads
from ..train.speed import niced_here, said
from .attention_measures import segment_build_options, start_segment_build
from .common import UserError, print_json, progress_lines, run_alone, run_or_background


def register(sub) -> None:
    s = sub.add_parser("head-map", help="every head on a map by the Jensen-Shannon distance between their attention "
                                        "over Wikipedia segments (Clark et al. 2019, Fig. 6)")
    actions = s.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="build the map (once; kept in the disk cache) and print it")
    segment_build_options(b, head_map.SEGMENTS, head_map.MAX_SEGMENTS, head_map.MAX_PIECES)
    b.set_defaults(func=cmd_build)


def cmd_build(args) -> int:
    corpus = args.corpus or clark.default_corpus()
    try:
        head_map.check_segments(args.segments)
    except ValueError as e:
        raise UserError(str(e)) from e
    loaded = checkpoint.load(args.model, "BertModel")
    path = head_map.map_path(loaded, corpus, args.segments, args.seed)

    def build():
        if not head_map.is_complete(path):
            told = said(head_map.estimate_seconds(loaded.config, args.segments), background_threads(),
                        niced=niced_here())  # (by name: passed third, niced_here() was read as the load, 0)
            print(f"mapping the heads over {args.segments:,} segments of {corpus}: "
                  f"{told}",
                  file=sys.stderr)
        head_map.build_map(loaded, corpus, args.segments, args.seed, progress_lines())
        return head_map.read_map(path)

    def start():
        start_segment_build(args, corpus, path, head_map.BUILD_COMMAND, "head map")

    show = (lambda m: print_json(record(args.model, m))) if args.json else (lambda m: _show(args.model, m))
    return run_or_background(args, build, show=show, start=start)


def record(model: str, m: head_map.HeadMap) -> dict:
    """The map as JSON: one entry per head (layers and heads from 1) with its place and measures, and the
    distances [N][N] in the same order."""
    return {"model": model, "corpus": m.corpus, "segments": m.segments, "seed": m.seed, "wordpieces": m.wordpieces,
            "explained": round(m.explained, 4), "rank_correlation": round(m.rank_correlation, 4),
            "heads": m.points().to_dict(orient="records"), "distances": m.distances.round(6).tolist(),
            "build_seconds": m.info.get("seconds")}


def _show(model: str, m: head_map.HeadMap) -> None:
    print(f"{model}: {m.num_layers * m.num_heads} heads over {m.segments:,} segments of {m.corpus} "
          f"({m.wordpieces:,} WordPieces); the two axes hold {m.explained:.0%} of the variance, and the map's "
          f"distances keep the order of the computed ones with Spearman's rho = {m.rank_correlation:.2f}")
    print(m.points()[["layer", "head", "x", "y", "behaviour"]].to_string(index=False))


def main(argv: list[str] | None = None) -> int:
    """``python -m bert_explorer.cli.head_map build ...``: this command on its own (the page's background build)."""
    return run_alone(register, "head-map", argv)


if __name__ == "__main__":
    sys.exit(main())
