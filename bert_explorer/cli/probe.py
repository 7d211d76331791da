"""``bert-explorer probe mlm|nsp``: the pre-training heads asked directly, as the Probes page does.

    bert-explorer probe mlm --model minilm-mlm-nsp --text "the capital of france is [MASK] ." --top-k 5
    bert-explorer probe nsp --model minilm-mlm-nsp --a "the match ended in a draw ." --b "both teams scored twice ."
"""
from __future__ import annotations

import sys

from ..analysis.probes.pretraining_tasks import cut_sentence, load_for_probe, mlm_top_k, nsp_probability
from .common import MODEL_HELP, UserError, print_json, user_errors


def register(sub) -> None:
    """Add ``probe mlm`` and ``probe nsp`` to the subcommands ``sub``."""
    s = sub.add_parser("probe", help="masked-word or next-sentence probe")
    probes = s.add_subparsers(dest="task", required=True)
    m = probes.add_parser("mlm", help="top-k words at each [MASK]")
    m.add_argument("--model", required=True, help=MODEL_HELP)
    m.add_argument("--text", required=True, help="a sentence with [MASK] where a word should be predicted")
    m.add_argument("--text-b", help="optional second sentence")
    m.add_argument("--top-k", type=int, default=5, help="how many words to list at each [MASK] (1 to 100; default 5)")
    m.add_argument("--json", action="store_true", help="print JSON instead of one line per [MASK]")
    n = probes.add_parser("nsp", help="P(B is the sentence after A)")
    n.add_argument("--model", required=True, help=MODEL_HELP)
    # --text and --text-b, as every other command names its two sentences; --a and --b stay for scripts
    n.add_argument("--a", "--text", dest="a", required=True, metavar="TEXT", help="sentence A")
    n.add_argument("--b", "--text-b", dest="b", required=True, metavar="TEXT",
                   help="sentence B, the one that may follow A")
    n.add_argument("--json", action="store_true", help="print JSON instead of one line")
    s.set_defaults(func=cmd_probe)


def cmd_probe(args) -> int:
    empty = [f"--{n} (sentence {n.upper()})" for n in ("a", "b") if args.task == "nsp" and not getattr(args, n).strip()]
    if empty:
        # (an empty sentence still gets a probability, 0.999 for A = "": a number about nothing)
        raise UserError(f"{' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty; give both sentences")
    loaded = load_for_probe(args.model, args.task)
    with user_errors():
        if args.task == "mlm":
            result = mlm_top_k(loaded, args.text, args.top_k, args.text_b)
        else:
            result = nsp_probability(loaded, [(args.a, args.b)])[0]
    longest = loaded.config.max_position_embeddings
    if args.task == "mlm" and len(result) < (written := f"{args.text} {args.text_b or ''}".count("[MASK]")):
        print(f"note: {written - len(result)} of the text's {written} [MASK]s lie past the "
              f"{longest:,} WordPieces the model reads, and are not predicted", file=sys.stderr)
    elif args.task == "mlm" and (n := len(loaded.tokenizer.encode(args.text, args.text_b).input_ids)) > longest:
        print(f"note: the text is {n:,} WordPieces with [CLS] and [SEP], more than the {longest:,} this model reads: "
              "the predictions are from its first ones, and the rest was not read", file=sys.stderr)
    if args.task == "nsp" and (cut := cut_sentence(result, longest)):
        print(f"note: {cut}", file=sys.stderr)
    if args.json:
        print_json(result)
    elif args.task == "mlm":
        for m in result:
            print(f"[MASK] at {m['position']}: " + ", ".join(
                f"{p['token']} {p['probability']:.3f}" for p in m["predictions"]))
    else:
        print(f"P(IsNext) = {result['is_next']:.3f}")
    return 0
