"""A runs folder like a practitioner's after a few days: what first visits are measured with.

    python bench/runs_folder.py /tmp/bench-runs [--base minilm-mlm-nsp]
    BERT_EXPLORER_RUNS=/tmp/bench-runs python bench/browser_interactions.py ...

It makes, with the project's own commands (small settings, so it takes minutes on 2 cores):

* 3 pre-training runs (BBC News; Tiny with MLM+NSP, Mini with MLM only, Tiny left-to-right), each with
  two checkpoints;
* 10 fine-tuning runs from ``--base`` covering every task type: three classifications (BBC topics,
  tweets, Pang & Lee), a sentence pair, a regression, NER (WNUT-16), QA, multiple choice, a
  feature-based run and a learning-rate grid;
* one ablation of paper-mini's size: its 37 cells (its axes and tasks' types), at smoke settings.

An empty runs folder hides what a page does per run (list them, read their metrics, load their
models); this one shows it. Nothing here is part of the tests.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "bert_explorer" / "experiments" / "recipes"

PRETRAININGS = {
    "pretrain-tiny-mlm-nsp": ["--size", "tiny", "--objective", "mlm+nsp"],
    "pretrain-mini-mlm": ["--size", "mini", "--objective", "mlm"],
    "pretrain-tiny-ltr": ["--size", "tiny", "--objective", "ltr"],
}
SMALL_PRETRAINING = ["--corpus", "bbc", "--max-docs", "400", "--vocab", "minilm-mlm-nsp", "--max-steps", "40",
                     "--save-every", "20", "--eval-every", "20", "--eval-batches", "4", "--batch-size", "16",
                     "--max-seq-length", "64", "--device", "cpu", "--no-progress"]

FINETUNINGS = {
    "ft-bbc-topics": ["--train", "builtin:bbc-topics"],
    "ft-tweets": ["--train", "builtin:tweets"],
    "ft-pang-lee": ["--train", "builtin:pang-lee"],
    "ft-pairs": ["--train", "tiny:pair-classification"],
    "ft-regression": ["--train", "tiny:regression"],
    "ft-wnut16-ner": ["--train", "builtin:wnut16"],
    "ft-qa": ["--train", "builtin:synthetic-qa"],
    "ft-multiple-choice": ["--train", "builtin:synthetic-mc"],
    "ft-feature-based": ["--train", "builtin:bbc-topics", "--mode", "feature-based", "--features", "concat-last-4"],
    "ft-lr-grid": ["--train", "builtin:bbc-topics", "--lr-grid", "5e-5,3e-5"],
}
SMALL_FINETUNING = ["--max-train-examples", "96", "--max-dev-examples", "300", "--epochs", "1", "--batch-size", "16",
                    "--max-seq-length", "64", "--device", "cpu"]


def ablation_recipe(folder: Path) -> Path:
    """paper-mini's grid (its axes, baseline and task types: 37 cells) at the smoke recipe's settings."""
    paper, smoke = (json.loads((RECIPES / f"{n}.json").read_text()) for n in ("paper-mini", "smoke"))
    recipe = {**paper, "name": "paper-mini-sized", "pretrain": smoke["pretrain"], "finetune": smoke["finetune"],
              "description": "paper-mini's 37 cells at smoke settings (bench/runs_folder.py): a runs folder of "
                             "realistic shape, not results",
              "tasks": {"topics": {"train": "tiny:classification", "max_train_examples": 32, "paper_column": "SST-2"},
                        "pairs": {"train": "pairs:tiny", "n_train": 32, "n_dev": 16, "paper_column": "MNLI-m"},
                        "ner": {"train": "tiny:ner", "max_train_examples": 32, "paper_column": "NER"}}}
    path = folder / "paper-mini-sized.json"
    path.write_text(json.dumps(recipe, indent=1))
    return path


def run(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "bert_explorer.cli", *argv], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--base", default="minilm-mlm-nsp", help="the model the fine-tuning runs start from")
    args = p.parse_args()
    root = Path(args.folder).resolve()
    root.mkdir(parents=True, exist_ok=True)
    for name, extra in PRETRAININGS.items():
        if not (root / name).exists():
            print(f"{name}: {run(['pretrain', *SMALL_PRETRAINING, *extra, '--output', str(root / name)]):.0f} s", flush=True)
    for name, extra in FINETUNINGS.items():
        if not (root / name).exists():
            print(f"{name}: {run(['finetune', '--model', args.base, *SMALL_FINETUNING, *extra, '--output', str(root / name)]):.0f} s",
                  flush=True)
    if not (root / "ablation-paper-mini-sized").exists():
        with tempfile.TemporaryDirectory() as tmp:
            print(f"ablation: {run(['ablate', '--recipe', str(ablation_recipe(Path(tmp))), '--no-progress', '--output', str(root / 'ablation-paper-mini-sized')]):.0f} s",
                  flush=True)
    print(f"runs folder ready: {root}")


if __name__ == "__main__":
    main()
