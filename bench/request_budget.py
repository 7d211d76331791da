"""The cost model against the clock: does the worst accepted request stay within its budget?

    python bench/request_budget.py [--model minilm] [--threads 1] [--repeats 3]

``bert_explorer/limits.py`` sets every limit so that the worst input under it costs about
``limits.SECONDS`` of one core with the model that answers, from a FLOPs count at a stated rate. This
runs the largest list Tokens and embeddings § 5 accepts with that model (``compared`` sentences, each
long enough to be cut to 128 WordPieces, compared pair by pair), on ``--threads`` threads (1: what one
request gets on a class's server), ``--repeats`` times with new sentences, and prints each time against
the budget. Exits 1 when the median passes it.

Not part of the test suite: a test would time whatever else shares the machine. The load average
before and after is printed, since another process's work slows the request down with it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bert_explorer import checkpoint, limits
from bert_explorer.analysis import embeddings as emb

from estimates import load_text  # a sibling script: bench/ is on sys.path when one of its scripts runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", help="a model name or folder (default: minilm)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    loaded = checkpoint.load(checkpoint.resolve(args.model), "BertForPreTraining")
    lim = limits.for_config(loaded.config)
    sentence = " ".join(["the bank by the river"] * 30)  # 150 words, cut to 128 WordPieces (word_in_context)
    print(f"{args.model}: § 5 at its limit, {lim.compared} sentences of 128 WordPieces compared pair by pair, "
          f"{args.threads} thread(s); budget {limits.SECONDS:.0f} s; load average before {load_text()}")
    times = []
    for r in range(args.repeats):
        sentences = [f"{r} {k} {sentence}" for k in range(lim.compared)]  # new each time: nothing reused
        start = time.perf_counter()
        emb.contextual_similarity(loaded, "bank", sentences)
        times.append(time.perf_counter() - start)
        print(f"  run {r + 1}: {times[-1]:.2f} s ({times[-1] / limits.SECONDS:.0%} of the budget)")
    median = statistics.median(times)
    within = median <= limits.SECONDS
    print(f"median {median:.2f} s: {'within' if within else 'OVER'} the {limits.SECONDS:.0f} s budget; "
          f"load average after {load_text()}")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
