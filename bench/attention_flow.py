"""How long attention flow takes at the longest input it accepts (64 tokens), beside rollout.

    python bench/attention_flow.py [--model minilm-mlm-nsp] [--repeats 3]

Two paragraphs of a BBC-style report are cut to 64 WordPieces; the T max-flows into [CLS] after the last
layer are timed (``FlowResult.seconds``), as the Attention page and ``bert-explorer attention-flow`` compute
them, and rollout of the same input for comparison.
"""
import argparse
import time

import torch

from bert_explorer import checkpoint
from bert_explorer.analysis.attention import flow
from bert_explorer.analysis.attention.heads import attention_maps, attention_rollout

TEXT = ("Shares in the company fell sharply on Monday, after the results were published and analysts said that the "
        "outlook for the rest of the year was weaker than expected, with sales down in Europe and Asia.")
TEXT_B = ("The chief executive said the firm would cut costs and close two factories before the end of the year, and "
          "that the board would meet again in March.")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm-mlm-nsp")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    loaded = checkpoint.load(args.model, "BertModel")
    att = attention_maps(loaded, TEXT, TEXT_B, max_tokens=flow.MAX_TOKENS)
    print(f"{args.model}: {len(att.tokens)} tokens x {att.num_layers} layers, {torch.get_num_threads()} torch threads")
    for _ in range(args.repeats):
        started = time.perf_counter()
        attention_rollout(att)
        rollout_s = time.perf_counter() - started
        r = flow.attention_flow(att, position=0)
        print(f"  flow: {len(att.tokens)} max-flows in {r.seconds:.2f} s; rollout {rollout_s * 1000:.1f} ms")


if __name__ == "__main__":
    main()
