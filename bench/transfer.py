"""Fine-tuning against feature-based transfer on the built-in real tasks: dev metrics and time.

    python bench/transfer.py [--models minilm-mlm-nsp,explorer-mini,minilm] [--tasks bbc-topics,tweets]
                             [--max-train 1000] [--max-dev 500] [--epochs 3] [--out runs/transfer]
                             [--modes fine-tune,feature-based] [--max-seq-length 128]

Each cell is one `bert-explorer finetune` run (the same code as the CLI and the app) into its
own run directory under --out, so its metrics.json, log and curves stay there to look at. Two
modes per (model, task): fine-tuning every weight (Section 4 of the paper) and the
feature-based transfer of Table 7 with the concatenation of the last four layers feeding a new
2-layer BiLSTM. A cell that already has a metrics.json is read back, not run again.

Not a speed race, so there is no transformers anchor: the figures are the dev scores of
small models on small real data, and the wall-clock seconds of each run on this machine.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

MODES = (("fine-tune", None), ("feature-based", "concat-last-4"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="minilm-mlm-nsp,explorer-mini,minilm")
    p.add_argument("--tasks", default="bbc-topics,tweets")
    p.add_argument("--max-train", type=int, default=1000)
    p.add_argument("--max-dev", type=int, default=500)
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--out", default="runs/transfer")
    p.add_argument("--modes", default="fine-tune,feature-based")
    p.add_argument("--max-seq-length", type=int, default=128)
    args = p.parse_args()
    modes = [m for m in MODES if m[0] in args.modes.split(",")]
    rows = []
    for task in args.tasks.split(","):
        for model in args.models.split(","):
            for mode, features in modes:
                run_dir = Path(args.out) / f"{task}-{model}-{mode}"
                metrics = run_dir / "metrics.json"
                seconds = None
                if not metrics.exists():
                    cfg = FinetuneConfig(model=model, train=f"builtin:{task}", mode=mode,
                                         features=features or "concat-last-4", epochs=args.epochs,
                                         max_train_examples=args.max_train, max_dev_examples=args.max_dev,
                                         max_seq_length=args.max_seq_length)
                    t = time.perf_counter()
                    run_finetuning(cfg, run_dir)
                    seconds = time.perf_counter() - t
                result = json.loads(metrics.read_text())
                dev = result["dev"]
                rows.append({"task": task, "model": model, "mode": mode if mode == "fine-tune" else f"features: {features}",
                             "train/dev": f"{result['train_examples']}/{result['dev_examples']}",
                             "accuracy": dev.get("accuracy"), "macro_f1": dev.get("macro_f1"),
                             "wall_s": round(seconds, 1) if seconds else None})
                print(json.dumps(rows[-1]), flush=True)
    print("\n| task | model | mode | train/dev | dev accuracy | dev macro-F1 | wall s |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['model']} | {r['mode']} | {r['train/dev']} | {r['accuracy']:.3f} | "
              f"{r['macro_f1']:.3f} | {r['wall_s'] if r['wall_s'] is not None else 'earlier run'} |")


if __name__ == "__main__":
    main()
