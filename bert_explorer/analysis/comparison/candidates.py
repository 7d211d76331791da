"""Which models there are to compare: the installed short names, the pre-training checkpoints and
the finished fine-tuning runs (each with its verdict: did it learn something?), and the short
fine-tuning the Two models page offers when there is none.
"""
from __future__ import annotations

import json
from pathlib import Path

from ...checkpoint import BASE_FILE, SHORT_NAMES, CheckpointError, resolve
from ...runs.finder import find_runs, run_checkpoints, run_label
from .verdict import learned_something

# The default pair's model B: the default model fine-tuned briefly on BBC topics. Measured on this
# project's 2-core CPU (fp32): 40 steps of 16 × 128 and the evaluation of 211 dev
# articles took 14 min 36 s of wall clock while other work shared the CPU (5 min 2 s of CPU time);
# dev accuracy 0.82 with the CPU-stage weights, 0.79 with those shipped now.
SHORT_FINETUNE = {"model": "minilm-mlm-nsp", "train": "builtin:bbc-topics", "epochs": 1.0, "max_train_examples": 640,
                  "batch_size": 16, "max_seq_length": 128, "seed": 0}
SHORT_FINETUNE_NOTE = ("One click fine-tunes it on 640 BBC News articles for one epoch (40 steps; dev accuracy 79 % "
                       "when we ran it): {time}. The page uses it as model B when it is done.")


def same_model(a: str | Path, b: str | Path) -> bool:
    """Do two names (short names or folders) point at the same checkpoint folder?"""
    if str(a) == str(b):
        return True
    try:
        return resolve(a).resolve() == resolve(b).resolve()
    except (CheckpointError, OSError):
        return False


def base_of(name: str | Path) -> str | None:
    """The installed model that ``name`` was warm-started from, as its ``base.json`` names it."""
    try:
        return json.loads((resolve(name) / BASE_FILE).read_text()).get("model")
    except (CheckpointError, OSError, ValueError, AttributeError):
        return None


def finetuned_models(root: str | Path) -> list[dict]:
    """Finished fine-tuning runs under ``root`` that kept their model, newest first: path, base
    model, label, and whether each learned something (:func:`learned_something`)."""
    out = []
    for run in find_runs(root):
        cfg = run.config()
        model = run.path / "model"
        if cfg.get("kind") == "finetune" and (model / "config.json").is_file() and \
                run.status().get("state") == "finished":
            train = str(cfg.get("train", "?")).replace("builtin:", "")
            base = str(cfg.get("model", "?"))
            out.append({"path": str(model), "base": base, "name": run_label(run, root),
                        "label": f"fine-tuned: {run_label(run, root)} ({Path(train).name or train}, "
                                 f"from {Path(base).name or base})",
                        "verdict": learned_something(run)})
    return out


def pretraining_checkpoints(root: str | Path):
    return [c for c in run_checkpoints(root) if not c.group]


def default_b(name_a: str, root: str | Path) -> str | None:
    """The Two models page's default model B for model A: the newest fine-tuning of A that learned
    something, else the installed model A was pre-trained from, else None (the page asks)."""
    learned = [m for m in finetuned_models(root) if same_model(m["base"], name_a) and m["verdict"].learned]
    base = base_of(name_a)
    return learned[0]["path"] if learned else (base if base != name_a and base in short_names() else None)


def short_names() -> list[str]:
    return [n for n, (locate, _) in SHORT_NAMES.items() if locate() is not None]
