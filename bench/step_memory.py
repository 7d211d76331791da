"""How much memory one training step takes, against what ``train/memory.py`` counts before a run starts.

    .venv/bin/python bench/step_memory.py [--cases mini:64:128,small:32:128,medium:16:256]

Each case (size:batch:positions) runs in a process of its own: a pre-training model of that size (8,000
WordPieces, fp32, with the CPU kernels as training applies them: the explicit attention, the dropout's masks), one forward and backward pass of
random WordPieces with 15 % of them masked, and the growth of the process's peak resident memory over
the step, beside the count (``memory.activation_bytes``) and their ratio (the count includes its stated
PEAK factor, so 1.00 is exact). Not part of the test suite: seconds a case.
"""
from __future__ import annotations

import argparse
import subprocess
import sys

STEP = r'''
import gc, resource, sys, torch
from bert_explorer.model import BertForPreTraining, cpu_kernels, preset
from bert_explorer.train.memory import activation_bytes
size, b, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
torch.set_num_threads(1)
cfg = preset(size, vocab_size=8000)
model = cpu_kernels.apply(BertForPreTraining(cfg), "cpu").train()  # as training runs on a CPU
ids = torch.randint(5, 8000, (b, s))
labels = torch.full((b, s), -100)
picked = torch.rand(b, s) < 0.15
labels[picked] = ids[picked]
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
out = model(input_ids=ids, token_type_ids=torch.zeros_like(ids), attention_mask=torch.ones_like(ids),
            labels=labels, next_sentence_label=torch.zeros(b, dtype=torch.long))
out.loss.backward()
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
print(grew, activation_bytes(cfg, b, s, "fp32"))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="mini:64:128,small:32:128,medium:16:256")
    args = ap.parse_args()
    print(f"{'size':<8}{'batch':>6}{'positions':>10}{'peak grew':>12}{'counted':>10}{'grew/counted':>14}")
    for case in args.cases.split(","):
        size, b, s = case.split(":")
        out = subprocess.run([sys.executable, "-c", STEP, size, b, s], capture_output=True, text=True, check=True)
        grew, counted = map(float, out.stdout.split())
        print(f"{size:<8}{b:>6}{s:>10}{grew / 1e9:>10.2f} GB{counted / 1e9:>7.2f} GB{grew / counted:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
