"""How fast does the host build a pre-training batch? Ours against transformers' masking collator.

    python bench/masking.py [--batch 128] [--seq 128] [--docs 300] [--batches 30] [--corpus bbc]

On a GPU a small BERT's step waits for the host to build its batch (27-46 ms a step was measured on
the H200's host for paper-mini's sizes), so this is the floor of such a step. Both sides get the
same sequences: the training instances ``train/pretraining_data.py`` builds for the corpus (two
segments packed up to ``--seq`` WordPieces, the standard uncased vocabulary).

* ours: what a pre-training step does on the host before moving the batch (``pretrain.host_batch``):
  new masks for each sequence (dynamic masking, 15 %, 80/10/10, drawn per batch), padding to the
  longest, the NSP labels, the labelled positions and whether the batch is padded.
* transformers: ``DataCollatorForLanguageModeling(mlm_probability=0.15)`` on the same sequences
  (its masks drawn with torch's generator, 80/10/10, special tokens excluded), padded by its
  tokenizer-free path to the longest, the NSP labels added as a tensor.

Batches alternate ours, transformers, transformers, ours, ...; the medians are compared. Not part
of the test suite.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from bert_explorer import checkpoint
from bert_explorer.model import IGNORE
from bert_explorer.train.device import pick_device
from bert_explorer.train.pretrain import host_batch
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.train.pretraining_data import pretraining_data
from bert_explorer.train.report import MemoryReporter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--docs", type=int, default=300, help="documents of the corpus read (the instances' source)")
    ap.add_argument("--batches", type=int, default=30, help="timed batches per side")
    ap.add_argument("--corpus", default="bbc")
    args = ap.parse_args()

    import transformers
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    cfg = PretrainConfig(corpus=args.corpus, size="mini", vocab="minilm-mlm-nsp", max_seq_length=args.seq,
                         batch_size=args.batch, max_docs=args.docs, device="cpu", precision="fp32")
    data = pretraining_data(cfg, MemoryReporter(), pick_device("cpu", "fp32"), None)
    hf_tok = BertTokenizerFast(vocab_file=str(checkpoint.ASSETS / "minilm-mlm-nsp" / "vocab.txt"), do_lower_case=True)
    hf_collate = DataCollatorForLanguageModeling(hf_tok, mlm=True, mlm_probability=0.15, return_tensors="pt")

    def ours(first: int) -> dict:
        return host_batch(data, cfg, first)

    def theirs(first: int) -> dict:
        items = [data.train[data.sampler(first + j)] for j in range(args.batch)]
        features = [{"input_ids": x.original_ids(), "token_type_ids": x.token_type_ids} for x in items]
        batch = hf_collate(features)
        batch["next_sentence_label"] = torch.tensor([int(bool(x.is_random_next)) for x in items])
        return batch

    sides = {"ours": ours, "transformers": theirs}
    times = {name: [] for name in sides}
    for i in range(args.batches + 2):
        order = list(sides) if i % 2 == 0 else list(sides)[::-1]
        for name in order:
            t = time.perf_counter()
            sides[name](i * args.batch)
            if i >= 2:  # two untimed first
                times[name].append(time.perf_counter() - t)
    labelled = float((ours(0)["labels"] != IGNORE).float().mean())
    print(f"bench/masking.py  {len(data.train):,} sequences of <= {args.seq} WordPieces ({args.corpus}, "
          f"{args.docs} documents), batch {args.batch}, {args.batches} batches a side; "
          f"{labelled:.1%} of our first batch's positions labelled")
    print(f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores);  torch {torch.__version__}, "
          f"transformers {transformers.__version__};  load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"{name:>13}: median {med[name] * 1e3:6.1f} ms a batch (min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f})"
              f"  = {args.batch / med[name]:,.0f} sequences/s")
    print(f"ours / transformers: {med['transformers'] / med['ours']:.2f}x as fast")


if __name__ == "__main__":
    main()
