"""Every loss a few small trainings log, to the last digit: to check that a change to the training
code changed no random draw and no data order.

Runs, on the CPU in fp32 with seed 0: a pre-training of each objective (MLM + NSP stopped after
step 5 and resumed to its end, with two micro-batches a step; MLM only; left-to-right), a
fine-tuning of the default model on a tiny classification set (two learning rates), a fine-tuning
on tiny NER and a feature-based run. It writes every metrics line's losses and dev scores as JSON;
with ``--compare FILE`` (a trace written before the change) it prints each difference and exits 1
if there is one.

    python bench/loss_trace.py --out /tmp/before.json         # before the change
    python bench/loss_trace.py --compare /tmp/before.json     # after it

Not a benchmark: no timing. It takes about a minute on a 2-core machine. The CPU levers are off
(``BERT_EXPLORER_CPU_LEVERS=none``) unless that variable names them.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from bert_explorer.runs.run import Run
from bert_explorer.train import levers
from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig

KEYS = ("step", "split", "epoch", "loss", "mlm_loss", "nsp_loss", "lr", "grad_norm", "mlm_accuracy",
        "mlm_perplexity", "nsp_accuracy", "accuracy", "macro_f1", "f1", "precision", "recall", "lr_setting")


def _lines(run_dir: Path) -> list[dict]:
    """The metrics lines (losses as logged, to 5 decimals), then a fingerprint of every weight the run
    saved last: a change in any draw or order changes the weights' bits, whatever the logs round."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.append({k: rec[k] for k in KEYS if k in rec})
    saved = sorted(run_dir.rglob("*.safetensors"), key=lambda p: (p.stat().st_mtime_ns, str(p)))
    if saved:
        digest = hashlib.sha256()
        for name, tensor in sorted(load_file(str(saved[-1])).items()):
            digest.update(name.encode() + tensor.contiguous().view(torch.uint8).numpy().tobytes())
        out.append({"weights": str(saved[-1].relative_to(run_dir)), "sha256": digest.hexdigest()[:16]})
    return out


def pretraining(root: Path, objective: str, stop_after: int | None) -> list[dict]:
    cfg = PretrainConfig(corpus="tiny", size="tiny", objective=objective, max_steps=10, batch_size=8,
                         grad_accum=2 if stop_after else 1, max_seq_length=32, vocab_size=200, log_every=1,
                         eval_every=3, save_every=4, eval_batches=2, seed=0, device="cpu", precision="fp32")
    run_dir = root / f"pretrain-{objective.replace('+', '-')}"

    def stop(step, _losses):
        if stop_after and step == stop_after:
            Run(run_dir).request_stop()
    run_pretraining(cfg, run_dir, progress=False, on_step=stop)
    if stop_after:
        run_pretraining(cfg, run_dir, resume=True, progress=False)
    return _lines(run_dir)


def finetuning(root: Path, name: str, **settings) -> list[dict]:
    cfg = FinetuneConfig(**{"epochs": 2, "batch_size": 8, "max_seq_length": 32, "seed": 0, "device": "cpu",
                            "precision": "fp32", **settings})
    run_dir = root / name
    run_finetuning(cfg, run_dir)
    return _lines(run_dir)


def trace() -> dict:
    torch.set_num_threads(1)  # the same arithmetic order on any machine's core count
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        return {
            "pretrain mlm+nsp (stopped at 5, resumed)": pretraining(root, "mlm+nsp", 5),
            "pretrain mlm": pretraining(root, "mlm", None),
            "pretrain ltr": pretraining(root, "ltr", None),
            "fine-tune classification": finetuning(root, "ft-cls", train="tiny:classification",
                                                   lr_grid=[5e-5, 1e-4]),
            "fine-tune ner": finetuning(root, "ft-ner", train="tiny:ner"),
            "feature-based classification": finetuning(root, "fb-cls", train="tiny:classification",
                                                       mode="feature-based", features="sum-last-4"),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the trace to this JSON file")
    ap.add_argument("--compare", help="compare with a trace written before")
    args = ap.parse_args()
    # The CPU levers chosen by measurement could differ between the two runs compared: off unless named.
    os.environ.setdefault(levers.ENV, "none")
    got = trace()
    if args.out:
        Path(args.out).write_text(json.dumps(got, indent=1) + "\n")
    n = sum(map(len, got.values()))
    print(f"{n} metrics lines from {len(got)} trainings")
    if not args.compare:
        return 0
    before = json.loads(Path(args.compare).read_text())
    differences = 0
    for name in before.keys() | got.keys():
        a, b = before.get(name, []), got.get(name, [])
        if len(a) != len(b):
            print(f"{name}: {len(a)} lines before, {len(b)} now")
            differences += 1
        for x, y in zip(a, b):
            if x != y:
                differences += 1
                print(f"{name}: {x} -> {y}")
    print("identical to the last digit" if not differences else f"{differences} difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
