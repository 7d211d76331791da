"""``bert-explorer attention-flow``: how much of each input token reaches one position, by attention
flow and by rollout (Abnar & Zuidema 2020), as the Attention page's *Flow and rollout* tab shows it.

    bert-explorer attention-flow --model minilm-mlm-nsp --text "the cat sat on the mat ." --position 0
    bert-explorer attention-flow --model minilm-mlm-nsp --text "..." --text-b "..." --layer 3 --json
"""
from __future__ import annotations

from .. import checkpoint
from ..analysis.attention import flow
from ..analysis.attention.heads import attention_maps
from .common import MODEL_HELP, UserError, print_json, user_errors


def register(sub) -> None:
    s = sub.add_parser("attention-flow", help="attention flow beside attention rollout (Abnar & Zuidema 2020): how "
                                              f"much of each input token reaches one position (at most "
                                              f"{flow.MAX_TOKENS} tokens)")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.add_argument("--text", required=True, help="sentence A")
    s.add_argument("--text-b", help="optional sentence B")
    s.add_argument("--position", type=int, default=0, help="the position the flow goes to, from 0 ([CLS], the default)")
    s.add_argument("--layer", type=int, default=None, help="after which encoder layer, counted from 1 (default: the last)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=cmd_flow)


def cmd_flow(args) -> int:
    if not args.text.strip():  # (a flow over [CLS] [SEP] alone was printed, and exit 0)
        raise UserError("--text is empty; give the sentence whose attention flow to follow")
    loaded = checkpoint.load(args.model, "BertModel")
    T = len(loaded.tokenizer.encode(args.text, args.text_b).input_ids)
    L = loaded.config.num_layers
    layer = L if args.layer is None else args.layer
    with user_errors():
        flow.check_length(T)  # before the model runs: the refusal costs nothing
        if not 1 <= layer <= L:
            raise ValueError(f"--layer must be between 1 and {L} (layers count from 1)")
        att = attention_maps(loaded, args.text, args.text_b, max_tokens=flow.MAX_TOKENS)
        result = flow.attention_flow(att, position=args.position, layer=layer - 1)
    if args.json:
        print_json(record(args.model, result))
        return 0
    print(f"{args.model}: into position {result.position} ({result.tokens[result.position]}) after layer "
          f"{result.layer + 1}; {len(result.tokens)} max-flows in {result.seconds:.2f} s")
    print(result.table().to_string(index=False))
    return 0


def record(model: str, r: flow.FlowResult) -> dict:
    """The flow as JSON: layers counted from 1, positions from 0."""
    return {"model": model, "tokens": r.tokens, "position": r.position, "layer": r.layer + 1,
            "max_flow": r.flow.round(6).tolist(), "flow_share": r.flow_share.round(6).tolist(),
            "rollout_share": r.rollout.round(6).tolist(), "seconds": round(r.seconds, 3)}

