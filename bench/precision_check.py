"""Does bf16 autocast train as well as fp32? A short pre-training of BERT-Tiny in both
precisions over three seeds, compared on the held-out masked-LM loss.

    python bench/precision_check.py [--steps 300] [--seeds 0,1,2] [--output runs/precision-check]

bf16 keeps fp32's exponent range with 8 bits of mantissa: under autocast the matrix products run
in bf16 while the weights, the optimiser state and the loss stay fp32. The question is whether
that rounding changes where training gets to. If the bf16 runs land within the spread of the
fp32 seeds, it does not (at this scale). On a CPU without native bf16 the arithmetic is the same,
only slower; the script prints the tokens/s of each run too.
"""
import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

from bert_explorer.train.pretrain import run_pretraining

from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.runs.run import Run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--output", help="keep the runs here (default: a temporary folder)")
    args = p.parse_args()
    root = Path(args.output or tempfile.mkdtemp(prefix="precision-check-"))
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {"fp32": [], "bf16": []}
    print(f"BERT-Tiny (L2/H128), BBC News (first 400 documents), batch 32 x 64, {args.steps} steps, lr 1e-3")
    for seed in seeds:
        for precision in ("fp32", "bf16"):
            cfg = PretrainConfig(corpus="bbc", max_docs=400, size="tiny", vocab_size=4000, max_seq_length=64,
                                 batch_size=32, lr=1e-3, max_steps=args.steps, eval_every=10**9,
                                 save_every=10**9, eval_batches=20, log_every=50, seed=seed, device="cpu",
                                 precision=precision)
            t = time.time()
            out = run_pretraining(cfg, root / f"{precision}-seed{seed}", progress=False)
            tps = [m["tokens_per_s"] for m in Run(root / f"{precision}-seed{seed}").metrics()
                   if m["split"] == "train"]
            loss = math.log(out["mlm_perplexity"])
            results[precision].append(loss)
            print(f"seed {seed}  {precision}: held-out MLM loss {loss:.4f}, MLM accuracy "
                  f"{out['mlm_accuracy']:.2%}, {statistics.median(tps):,.0f} tokens/s, {time.time() - t:.0f} s")
    for precision, losses in results.items():
        spread = max(losses) - min(losses)
        print(f"{precision}: mean {statistics.mean(losses):.4f}, min {min(losses):.4f}, max {max(losses):.4f}, "
              f"spread {spread:.4f}")
    diff = abs(statistics.mean(results["bf16"]) - statistics.mean(results["fp32"]))
    fp32_spread = max(results["fp32"]) - min(results["fp32"])
    verdict = "within" if diff <= fp32_spread else "outside"
    print(f"|mean bf16 - mean fp32| = {diff:.4f}: {verdict} the fp32 seeds' spread ({fp32_spread:.4f})")
    (root / "precision_check.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
