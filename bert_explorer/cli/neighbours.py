"""``bert-explorer neighbours``: build a corpus index of contextual token vectors and search it.

    bert-explorer neighbours build --model minilm-mlm-nsp --layer 6            # BBC News, minutes
    bert-explorer neighbours query --model minilm-mlm-nsp --layer 6 \\
        --text "the bank raised interest rates" --token bank --k 10 --output hits.json

``--layer`` counts as the app does: 0 is the embeddings, 1..L the encoder layers. ``build``
takes several layers at once (``--layer 0,6``): one pass through the model fills them all.
The page starts ``python -m bert_explorer.cli.neighbours build ...`` in the background, so
this module also runs on its own (see :func:`main`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tqdm import tqdm

from .. import checkpoint
from ..analysis.neighbours import index as nbb, search as nb
from ..data.corpora import BUILTIN_CORPORA
from ..runs import neighbour_jobs
from ..train.speed import niced_here, said
from ..train.estimate import background_threads
from .common import (UserError, check_output_file, int_list, output_file_args, progress_lines, run_alone,
                     run_or_background, user_errors, whole, write_json)

MODEL_HELP = "a checkpoint directory or a short name (minilm-mlm-nsp, explorer-mini, minilm)"
CORPUS_HELP = "a built-in corpus (bbc, the default) or a text file / folder of .txt files"


def register(sub) -> None:
    """Add ``neighbours build`` and ``neighbours query`` to the subcommands ``sub``."""
    s = sub.add_parser("neighbours", help="nearest tokens in a corpus at one layer (exBERT's search)")
    actions = s.add_subparsers(dest="action", required=True)

    b = actions.add_parser("build", help="build the index of (model, corpus, layer) into the disk cache")
    b.add_argument("--model", required=True, help=MODEL_HELP)
    b.add_argument("--layer", required=True, type=int_list, help="0 = embeddings, 1..L = layers; several as 0,6")
    b.add_argument("--corpus", default="bbc", help=CORPUS_HELP)
    b.add_argument("--background", action="store_true", help="start as a background process and return")
    b.add_argument("--no-progress", action="store_true", help="no progress bar (one line per shard instead)")
    b.set_defaults(func=cmd_build)

    q = actions.add_parser("query", help="the corpus tokens nearest to one token of your sentence")
    q.add_argument("--model", required=True, help=MODEL_HELP)
    q.add_argument("--layer", required=True, type=int, help="0 = embeddings, 1..L = layers")
    q.add_argument("--text", required=True, help="your sentence")
    q.add_argument("--token", required=True, help="a word of the sentence (its first WordPiece is used) or a "
                                                  "position (1 = the first WordPiece after [CLS])")
    q.add_argument("--k", type=whole(1, nb.MAX_HITS), default=10,
                   help=f"how many neighbours, 1 to {nb.MAX_HITS:,} (default 10)")
    q.add_argument("--corpus", default="bbc", help=CORPUS_HELP)
    output_file_args(q, "also write the result as JSON to this file")
    q.add_argument("--json", action="store_true", help="print JSON instead of a table")
    q.set_defaults(func=cmd_query)


def _check_corpus(corpus: str) -> None:
    if corpus not in BUILTIN_CORPORA and not Path(corpus).expanduser().exists():
        raise UserError(f"no corpus called {corpus!r}: give a text file, a folder, or one of "
                        f"{', '.join(BUILTIN_CORPORA)}")


def cmd_build(args) -> int:
    _check_corpus(args.corpus)
    loaded = checkpoint.load(args.model, "BertModel")
    with user_errors():
        for layer in args.layer:
            nbb.check_layer(loaded, layer)
    return run_or_background(args, lambda: _build(loaded, args), show=_show_built,
                             start=lambda: _start_builds(loaded, args))


def _build(loaded, args) -> dict:
    """Build the indexes of ``args.layer`` here, with a progress bar or lines; {layer: path}. The
    estimate of the layers not built yet is said first, on stderr."""
    todo = [l for l in args.layer if not nbb.is_complete(nbb.index_path(loaded, args.corpus, l))]
    if todo:
        _say_estimate(nbb.estimate_build_seconds(loaded, args.corpus, todo), todo, niced_here())
    progress, close = _progress(args.no_progress)
    try:
        return nbb.build_index(loaded, args.corpus, args.layer, progress)
    finally:
        close()


def _start_builds(loaded, args) -> None:
    """--background: one build process per layer not built yet (the neighbour index's own jobs,
    which a page polls), each said on stderr."""
    for layer in args.layer:
        path = nbb.index_path(loaded, args.corpus, layer)
        if nbb.is_complete(path):
            print(f"layer {layer}: already built ({path})", file=sys.stderr)
            continue
        _say_estimate(nbb.estimate_build_seconds(loaded, args.corpus, layer, threads=background_threads(),
                                                 process_start=True), [layer], niced=True)
        if why := neighbour_jobs.start_build(path, ["--model", args.model, "--layer", str(layer), "--corpus",
                                                      args.corpus, "--no-progress"], one_at_a_time=False):
            print(f"layer {layer}: {why}", file=sys.stderr)  # (the builder makes room in the cache itself)
        else:
            print(f"layer {layer}: building in the background; progress in "
                  f"{neighbour_jobs.work_dir(path) / 'progress.json'}", file=sys.stderr)


def _say_estimate(est: dict, layers: list[int], niced: bool) -> None:
    """The estimate of a build, one line on stderr, before it starts (``niced``: at low priority)."""
    print(f"estimate for layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}: "
          f"{said(est['seconds'], est['threads'], niced=niced)} ({est['tokens']:,} tokens of {est['sentences']:,} "
          f"sentences, about "
          f"{est['tokens_per_s']:,.0f} tokens/s: {est['basis']})", file=sys.stderr, flush=True)


def _show_built(paths: dict) -> None:
    for layer, path in paths.items():
        meta = json.loads((path / "meta.json").read_text())
        size = sum(f.stat().st_size for f in path.iterdir()) / 1e6
        print(f"layer {layer}: {meta['rows']:,} tokens of {meta['sentences']:,} sentences, {size:,.0f} MB, "
              f"built in {meta['build_seconds']:.0f} s -> {path}", file=sys.stderr)


def _progress(quiet: bool):
    """A progress callback (fraction, message) and its closer: a tqdm bar on a terminal, else plain lines (a
    bar piped into a log file wrote a carriage-returned line for every update)."""
    if quiet or not sys.stderr.isatty():
        return progress_lines(), lambda: None
    bar = tqdm(total=1000, unit="‰", dynamic_ncols=True, bar_format="{l_bar}{bar}| {desc}")

    def update(fraction: float, message: str) -> None:
        bar.n = int(1000 * fraction)
        bar.set_description_str(message[:100], refresh=False)
        bar.refresh()
    return update, bar.close


def cmd_query(args) -> int:
    _check_corpus(args.corpus)
    check_output_file(args.output, args.overwrite)
    loaded = checkpoint.load(args.model, "BertModel")
    with user_errors():
        nbb.check_layer(loaded, args.layer)
        position = nb.pick_token(loaded, args.text, args.token)
    path = nbb.index_path(loaded, args.corpus, args.layer)
    if not nbb.is_complete(path):
        raise UserError(f"the index of layer {args.layer} of {args.model} over {args.corpus} is not built yet; "
                        f"build it with: bert-explorer neighbours build --model {args.model} --layer {args.layer} "
                        f"--corpus {args.corpus}")
    result = nb.nearest(loaded, nb.NeighbourIndex.open(path), args.text, position, args.layer, args.k)
    layer_label = "the embeddings (layer 0)" if args.layer == 0 else f"layer {args.layer}"
    record = {"model": args.model, "corpus": args.corpus, "layer": args.layer, "text": args.text,
              "position": position, "token": result.query_token, "k": args.k,
              "caption": nb.describe(result, layer_label), "search_seconds": result.seconds,
              "hits": [{k: h[k] for k in ("rank", "similarity", "token", "same_token", "sentence", "start", "end",
                                          "source")} for h in result.hits]}
    if args.output:
        write_json(args.output, record, ensure_ascii=False)
    if args.json:
        print(json.dumps(record, indent=1, ensure_ascii=False))
        return 0
    print(f"query: “{result.query_token}” (WordPiece {position}) of: {args.text}")
    for h in result.hits:
        context = f"{h['left']}[{h['hit']}]{h['right']}"
        print(f"{h['rank']:>3}  {h['similarity']:.3f}  {h['token']:<14} {h['source']:<14} {context}")
    print(record["caption"])
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bert_explorer.cli.neighbours build|query ...``: this command on its own, with
    the CLI's handling of user errors (one line, exit 2)."""
    return run_alone(register, "neighbours", argv, interrupted="interrupted (building again resumes from the last finished shard)")


if __name__ == "__main__":
    sys.exit(main())
