"""Commands of the analysis pages: what each layer knows (probing) and two models side by side.

    bert-explorer probe-layers --model minilm-mlm-nsp --task ner,topic --output probe.json
    bert-explorer compare-models --model-a minilm-mlm-nsp --model-b runs/finetune-x/model --output cmp.json

``register(sub)`` adds both to the ``bert-explorer`` parser's subcommands.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import checkpoint
from ..analysis.comparison import held_out, two_models
from ..analysis.layers.probing import TASKS, ProbeSettings, cached_result, estimate_seconds, load_task, probe_layers
from ..analysis.probes.pretraining_tasks import MAX_TOP_K
from ..runs.report import duration_text
from ..train.configs import MAX_SEED
from ..train.speed import niced_here, said
from .common import (MODEL_HELP, UserError, check_output_file, number, output_file_args, read_lines, user_errors,
                     whole, write_json)

# What one command may ask: the page's most (100,000 sentences for a word task), L-BFGS iterations far past the
# default 100 (each probe's cost grows with them), and held-out sentences past all there are (about 1,190)
MAX_EXAMPLES, MAX_ITER, MAX_SENTENCES = 100_000, 10_000, 2_000
COMPARED_TOKENS = 64  # compare-models' WordPieces per sentence by default


def _bar(enabled: bool):
    """A one-line progress report on stderr (fraction, message), or nothing."""
    def report(fraction: float, message: str) -> None:
        sys.stderr.write(f"\r{fraction:6.1%}  {message[:90]:<90}")
        if fraction >= 1:
            sys.stderr.write("\n")
        sys.stderr.flush()
    return report if enabled else None


def _tasks(text: str) -> list[str]:
    tasks = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise argparse.ArgumentTypeError(f"unknown task {', '.join(unknown) or text!r}; choose from {', '.join(TASKS)} "
                                         "(several separated by commas)")
    return tasks


def _within_positions(max_tokens: int | None, *models) -> int:
    """A --max-tokens past the positions a model has learned, refused in one sentence; the most they read."""
    longest = min(m.config.max_position_embeddings for m in models)
    if max_tokens is not None and max_tokens > longest:
        raise UserError(f"--max-tokens {max_tokens:,} is more than the {longest:,} positions the model"
                        f"{'s have' if len(models) > 1 else ' has'} learned; give at most {longest:,}")
    return longest


def cmd_probe_layers(args) -> int:
    if "pos" in args.task and not args.pos_file:
        raise UserError("the pos task needs --pos-file FILE.conllu: no installable package ships an English "
                        "POS-tagged corpus, so give one (for example UD English-EWT's en_ewt-ud-train.conllu)")
    if args.pos_file and not Path(args.pos_file).is_file():
        raise UserError(f"--pos-file {args.pos_file} does not exist")
    check_output_file(args.output, args.overwrite)
    loaded = checkpoint.load(args.model, "BertModel")
    _within_positions(args.max_tokens, loaded)
    settings = ProbeSettings(args.max_examples, args.test_fraction, args.seed, args.max_tokens, args.l2, args.max_iter)
    if args.pos_file:  # the user's file is checked before any task runs (it failed after the others had)
        with user_errors():
            load_task("pos", settings, args.pos_file)
    results = {}
    for task in args.task:
        with user_errors():  # the data (a CoNLL-U file, a missing package) cannot be used
            if cached_result(loaded, task, settings, args.pos_file) is None:  # said before it starts
                est = estimate_seconds(loaded, task, settings, args.pos_file)
                told = said(est['seconds'], est['threads'], niced=niced_here())
                print(f"estimate for {task}: {told} (the layer vectors of "
                      f"{est['inputs']:,} inputs about {duration_text(est['features_seconds'])}, {est['probes']} probes "
                      f"on {est['rows']:,} rows about {duration_text(est['probes_seconds'])}; {est['basis']})",
                      file=sys.stderr, flush=True)
            results[task] = probe_layers(loaded, task, settings, args.pos_file, _bar(not args.no_progress))
        r = results[task]
        took = "from the cache" if r["from_cache"] else f"probes {r['seconds']['probes']:.0f} s"
        if r["seconds"]["features"] is not None:
            took += f", vectors {r['seconds']['features']:.0f} s" + (" (earlier)" if r["features_from_cache"] else "")
        print(f"{task}: {r['summary']} ({r['n_train']:,} train / {r['n_test']:,} test {r['units']}; {took})",
              file=sys.stderr)
    write_json(args.output, {"model": args.model, "tasks": results})
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_compare_models(args) -> int:
    check_output_file(args.output, args.overwrite)
    arch = "BertForPreTraining"  # fine-tuned and encoder-only checkpoints load too (heads reported missing)
    a, b = checkpoint.load(args.model_a, arch), checkpoint.load(args.model_b, arch)
    longest = _within_positions(args.max_tokens, a, b)
    max_tokens = args.max_tokens if args.max_tokens is not None else min(COMPARED_TOKENS, longest)
    if args.input:
        sentences, source = read_lines(args.input), f"the lines of {args.input}"
        if len(sentences) > MAX_SENTENCES:  # (5,000 lines ran 73 s without a word; --sentences is bounded so)
            raise UserError(f"{args.input} holds {len(sentences):,} lines, more than the {MAX_SENTENCES:,} sentences "
                            "one comparison runs through both models; give a shorter file")
    else:
        sentences, source = held_out.held_out_sentences(args.sentences)
        if len(sentences) < args.sentences:  # (5,000 became 1,189 without a word)
            print(f"note: there are {len(sentences):,} held-out sentences, not {args.sentences:,}: comparing all of "
                  "them", file=sys.stderr)
    if cut := sum(len(ids) > max_tokens - 2 for ids in a.tokenizer.ids_batch(sentences)):
        # (a line of 100,000 words was compared on its first 64 WordPieces, with nothing said)
        print(f"note: {cut:,} of the sentences {'is' if cut == 1 else 'are'} longer than the {max_tokens - 2:,} "
              f"WordPieces compared (--max-tokens {max_tokens} with [CLS] and [SEP]): each is compared on its first "
              "ones", file=sys.stderr)
    t0 = time.perf_counter()
    with user_errors():
        result = two_models.compare_models(a, b, sentences, max_tokens)
    seconds = time.perf_counter() - t0
    with user_errors():
        probes = two_models.probes_side_by_side(a, b, args.mask_text, (args.nsp_a, args.nsp_b), args.top_k)
    write_json(args.output, {"model_a": args.model_a, "model_b": args.model_b, "sentences_source": source,
                              **result, "probes": probes, "seconds": round(seconds, 1)})
    print(result["summary"], file=sys.stderr)
    print(f"wrote {args.output} ({seconds:.0f} s)", file=sys.stderr)
    return 0


def register(sub) -> None:
    """Add ``probe-layers`` and ``compare-models`` to an argparse subparsers object."""
    d = ProbeSettings()
    s = sub.add_parser("probe-layers", help="a linear probe on every layer (Tenney et al. 2019) with a control task "
                                            "(Hewitt & Liang 2019): what each layer knows")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.add_argument("--task", type=_tasks, default=["ner"],
                   help=f"one or more of {', '.join(TASKS)}, separated by commas (default ner)")
    output_file_args(s, "output .json: the score by layer of each task and its control", required=True)
    s.add_argument("--pos-file", help="a CoNLL-U file for the pos task (UPOS column)")
    s.add_argument("--max-examples", type=whole(1, MAX_EXAMPLES), default=None,
                   help="sentences (ner, pos) or articles (topic) to use; default all sentences, 1000 articles")
    s.add_argument("--test-fraction", type=number(0, 1, open_low=True, open_high=True), default=d.test_fraction,
                   help=f"share of the examples held out to score each probe (default {d.test_fraction})")
    s.add_argument("--seed", type=whole(0, MAX_SEED), default=d.seed,
                   help=f"chooses the held-out examples (default {d.seed})")
    s.add_argument("--max-tokens", type=whole(8, 512), default=None,
                   help="WordPieces per input, 8 to 512 (default 128; topic 64)")
    s.add_argument("--l2", type=number(0, 1e6), default=d.l2, help=f"weight decay of the probe (default {d.l2:g})")
    s.add_argument("--max-iter", type=whole(1, MAX_ITER), default=d.max_iter,
                   help=f"L-BFGS iterations per probe (default {d.max_iter})")
    s.add_argument("--no-progress", action="store_true", help="no progress line")
    s.set_defaults(func=cmd_probe_layers)

    s = sub.add_parser("compare-models", help="two models side by side: CKA per layer, attention change per head, "
                                              "and the masked-word / next-sentence probes of both")
    s.add_argument("--model-a", required=True, help=MODEL_HELP)
    s.add_argument("--model-b", required=True, help=MODEL_HELP)
    output_file_args(s, "output .json", required=True)
    s.add_argument("--sentences", type=whole(1, MAX_SENTENCES), default=64,
                   help=f"how many held-out BBC sentences, 1 to {MAX_SENTENCES:,} (default 64; there are about 1,190)")
    s.add_argument("--input", help="a text file of your own sentences, one a line (instead of the held-out ones)")
    s.add_argument("--max-tokens", type=whole(8, 512), default=None,
                   help=f"WordPieces per sentence, 8 to 512 (default {COMPARED_TOKENS}, or the models' positions if "
                        "fewer)")
    s.add_argument("--mask-text", default="the stock market [MASK] sharply after the news .",
                   help="sentence for the masked-word probe (default: %(default)r)")
    # --text and --text-b, as every other command names its two sentences; --nsp-a and --nsp-b stay for scripts
    s.add_argument("--nsp-a", "--text", dest="nsp_a", metavar="TEXT", default="the cat sat on the mat .",
                   help="sentence A of the next-sentence probe (default: %(default)r)")
    s.add_argument("--nsp-b", "--text-b", dest="nsp_b", metavar="TEXT", default="then it fell asleep in the sun .",
                   help="sentence B of the next-sentence probe (default: %(default)r)")
    s.add_argument("--top-k", type=whole(1, MAX_TOP_K), default=5,
                   help=f"how many words the masked-word probe lists, 1 to {MAX_TOP_K} (default 5)")
    s.set_defaults(func=cmd_compare_models)
