"""Every task type in every mode it supports, on tiny data with fixed seeds: a fingerprint of the
dev metrics, the logged losses and the predictions, to show that a refactoring changed nothing.

    PYTHONPATH=. python bench/task_equality.py --out /tmp/eq-after.json
    python bench/task_equality.py --compare /tmp/eq-before.json /tmp/eq-after.json

Modes: full fine-tuning (all six task types, classification over a two-rate grid), feature-based
transfer (Section 5.3: the task types whose ``feature_based`` is set) and the left-to-right heads
of the ablations (Table 5: last token and BiLSTM, on a causal model). Each cell fine-tunes a
small random BERT on 96 ``tiny:<task>`` examples (30 % held out for dev) for three epochs (NER ten) on the CPU in float32 with one thread,
then, where the run keeps a model, asks ``Predictor.predict`` about six new examples.

Recorded per cell: ``metrics.json``'s dev metrics (everything but the clock), every line of
``metrics.jsonl`` without its ``time``, and the predictions, each hashed with SHA-256 over their
JSON (sorted keys). Two outputs are equal when every hash is; ``--compare`` names the cells and
the parts that differ. It only uses the public entry points (``run_finetuning``,
``run_ltr_finetuning``, ``Predictor``), so the same script runs on the code before and after.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from bert_explorer.tasks.registry import TASK_TYPES, task_types_with

TASKS = tuple(TASK_TYPES)                # every task type, by name (a run's config names its task)
FEATURE_BASED = task_types_with("feature_based")    # the task types Section 5.3's frozen-feature BiLSTM can do
LEFT_TO_RIGHT = task_types_with("left_to_right")    # the task types the ablations' left-to-right heads can do
CLOCK = ("time", "train_seconds", "feature_seconds")


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _base_models(root: Path) -> tuple[str, str]:
    """A bidirectional and a left-to-right (causal) random BERT sharing the tiny tasks' vocabulary."""
    import torch

    from bert_explorer import checkpoint
    from bert_explorer.data.tiny_tasks import make_tiny
    from bert_explorer.model import BertConfig, BertForPreTraining
    from bert_explorer.tokenizer import WordPieceTokenizer

    texts = []
    for task in TASKS:
        for ex in make_tiny(task, n=200, seed=1).examples:
            texts += [ex[k] for k in ("text", "text_pair", "question", "context") if ex.get(k)]
            texts += [" ".join(ex["tokens"])] if "tokens" in ex else []
            texts += ex.get("choices", [])
    # A vocabulary written out rather than trained: tokenizers' trainer breaks ties in a
    # different order from one process to the next, and the comparison needs the same model.
    words = sorted({w for t in texts for w in t.lower().split()})
    chars = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars),
             *(w for w in words if len(w) > 1)]
    tok = WordPieceTokenizer({v: i for i, v in enumerate(dict.fromkeys(vocab))})
    out = []
    for name, causal in (("bidirectional", False), ("left-to-right", True)):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_layers=2, num_heads=4,
                                              intermediate_size=128, max_position_embeddings=128, causal=causal))
        checkpoint.save(model, tok, root / name)
        out.append(str(root / name))
    return out[0], out[1]


def _cell(run_dir: Path, result: dict, predictions: list | None) -> dict:
    dev = {k: v for k, v in result["dev"].items() if k not in CLOCK}
    logged = [{k: v for k, v in json.loads(line).items() if k not in CLOCK}
              for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    kept = {k: v for k, v in result.items() if k not in CLOCK and k != "dev"}
    cell = {"dev": _digest(dev), "logged": _digest(logged), "result": _digest(kept),
            "main": {k: dev[k] for k in list(dev)[:3] if isinstance(dev[k], (int, float))},
            "train_losses": [r["loss"] for r in logged if r.get("split") == "train"]}
    if predictions is not None:
        cell["predictions"] = _digest(predictions)
    return cell


def run_all(work: Path, only: set[str] | None = None) -> dict:
    import torch

    from bert_explorer.data.tiny_tasks import make_tiny
    from bert_explorer.experiments.ltr import run_ltr_finetuning
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
    from bert_explorer.train.predict import Predictor

    torch.set_num_threads(1)
    bidirectional, causal = _base_models(work / "base")
    common = dict(max_train_examples=96, dev_fraction=0.3, batch_size=16, lr=1e-3,
                  max_seq_length=48, device="cpu", precision="fp32", seed=0)
    cells = [(t, "fine-tune", {}) for t in TASKS]
    cells += [(t, "feature-based", {"features": f}) for t in FEATURE_BASED for f in ("concat-last-4", "sum-last-4")]
    cells += [(t, f"left-to-right {h}", {"head": h}) for t in LEFT_TO_RIGHT for h in ("last-token", "bilstm")]
    out = {}
    for task, mode, extra in cells:
        name = f"{task} / {mode}" + (f" {extra['features']}" if "features" in extra else "")
        if only and task not in only:
            continue
        common["epochs"] = 10 if task == "ner" else 3  # NER's tags need longer to leave "O" everywhere
        run_dir = work / "runs" / name.replace(" / ", "__").replace(" ", "_")
        if mode.startswith("left-to-right"):
            cfg = FinetuneConfig(model=causal, train=f"tiny:{task}", task=task, **common)
            result = run_ltr_finetuning(cfg, run_dir, head=extra["head"])
            predictions = None  # the LTR runs keep their score, not their model
        else:
            grid = [1e-3, 5e-4] if (task, mode) == ("classification", "fine-tune") else []
            cfg = FinetuneConfig(model=bidirectional, train=f"tiny:{task}", task=task, mode=mode, lr_grid=grid,
                                 features=extra.get("features", "concat-last-4"), **common)
            result = run_finetuning(cfg, run_dir)
            predictions = Predictor(run_dir).predict(make_tiny(task, n=6, seed=7).examples)
        out[name] = _cell(run_dir, result, predictions)
        print(f"{name:48s} dev {out[name]['dev'][:12]}  logged {out[name]['logged'][:12]}  "
              f"predictions {out[name].get('predictions', '-')[:12]}  {out[name]['main']}", flush=True)
    out["*all*"] = _digest({k: {p: v[p] for p in ("dev", "logged", "result", "predictions") if p in v}
                            for k, v in out.items()})
    return out


def compare(a_path: str, b_path: str) -> int:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    differ = 0
    for name in sorted(set(a) | set(b)):
        if name == "*all*":
            continue
        if name not in a or name not in b:
            print(f"{name}: only in {'the second' if name not in a else 'the first'}")
            differ += 1
            continue
        parts = [p for p in ("dev", "logged", "result", "predictions") if a[name].get(p) != b[name].get(p)]
        print(f"{name:48s} {'identical' if not parts else 'DIFFERS in ' + ', '.join(parts)}")
        differ += bool(parts)
    print(f"{len(set(a) - {'*all*'})} cells; {differ} differ; overall {a.get('*all*', '')[:16]} vs "
          f"{b.get('*all*', '')[:16]}")
    return 1 if differ else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="where to write the fingerprints (JSON)")
    p.add_argument("--tasks", help="only these task types (comma-separated)")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two outputs and exit")
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    with tempfile.TemporaryDirectory(prefix="task-equality-") as tmp:
        os.environ["BERT_EXPLORER_CACHE"] = str(Path(tmp) / "cache")  # a fresh feature cache
        result = run_all(Path(tmp), set(args.tasks.split(",")) if args.tasks else None)
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(f"overall {result['*all*']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
