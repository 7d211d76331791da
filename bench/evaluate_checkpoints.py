"""Held-out MLM accuracy, perplexity and NSP accuracy of every checkpoint of a pre-training run,
as a Markdown table (the model cards' "at each checkpoint" table).

    python bench/evaluate_checkpoints.py RUN_DIR [--sequences 640] [--steps 400,800] [--also minilm-mlm-nsp]

Each checkpoint is measured in fp32 by ``analysis.probes.quality.measure`` on the held-out documents of the
run's own config (the split is a pure function of corpus, fraction and seed), so the figures are
those of the weights, whatever precision the run trained in. ``--also`` adds other models (the
shipped copy of the last checkpoint) measured the same way.
"""
import argparse
import json
from pathlib import Path

from bert_explorer import checkpoint
from bert_explorer.analysis.probes.quality import measure
from bert_explorer.runs.run import Run
from bert_explorer.train.pretrain_config import PretrainConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--sequences", type=int, help="only the first N held-out sequences (default: all)")
    p.add_argument("--also", default="", help="comma-separated models to measure the same way")
    p.add_argument("--steps", default="", help="only these checkpoints, e.g. 400,800,1200 (default: all)")
    args = p.parse_args()
    wanted = {int(x) for x in args.steps.split(",") if x}
    run = Run(args.run)
    cfg = PretrainConfig.from_dict({**run.config(), "device": "cpu"}, strict=False)
    rows = [(f"step {step:,}", path) for step, path in run.checkpoints() if not wanted or step in wanted]
    rows += [(name, name) for name in args.also.split(",") if name]
    print(f"held out: {cfg.eval_corpora or cfg.corpus} documents of {cfg.corpus} "
          f"(fraction {cfg.held_out_fraction}, seed {cfg.seed}), fp32\n")
    print("| checkpoint | MLM accuracy | MLM perplexity | NSP accuracy | masked tokens | sequences |")
    print("|---|---|---|---|---|---|")
    out = {}
    for label, model in rows:
        r = measure(checkpoint.load(model, "BertForPreTraining", need_heads=("masked-LM head",)), cfg,
                    max_sequences=args.sequences)
        out[label] = r
        print(f"| {label} | {r['mlm_accuracy']:.1%} | {r['mlm_perplexity']:.1f} | "
              f"{r.get('nsp_accuracy', float('nan')):.1%} | {r['masked_wordpieces']:,} | {r['held_out_sequences']:,} |",
              flush=True)
    (Path(args.run) / "evaluation.json").write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
