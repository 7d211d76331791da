"""Finding runs and their checkpoints under a runs folder: the one walker that the pages, the
sidebar and the CLI share (no Streamlit here).

The runs folder is ``./runs`` unless ``$BERT_EXPLORER_RUNS`` names another (tests point it at a
temporary one). A run is a folder holding ``status.json`` (``runs/run.py``). An ablation keeps its
pre-trainings and cells as runs of their own, inside it (``ABL/pretrain/<key>/``,
``ABL/cells/<id>/``): those are *grouped* under their ablation and get a readable label, so
that a dozen hash-named pre-trainings do not flood a list.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..data.objectives import BERT, OBJECTIVES
from .run import Run

# Folders inside a run that hold files, never other runs.
NOT_RUNS = {"checkpoints", "model", "tokenizer", "feature_head", "vocab", "data"}


def run_kind(run: Run) -> str:
    """pretrain, finetune, ablate, ... ("?" for a folder that does not say)."""
    return run.status().get("kind") or run.config().get("kind") or "?"


def find_runs(root: str | Path, kind: str | None = None, depth: int = 3) -> list[Run]:
    """Every run folder under ``root``, up to ``depth`` folders deep, newest first; ``kind``
    keeps one kind (pretrain, finetune, ablate)."""
    root = Path(root)
    found: list[Run] = []

    def walk(d: Path, level: int):
        try:
            children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for p in children:
            if (p / "status.json").is_file():
                found.append(Run(p))
            if level < depth and p.name not in NOT_RUNS:
                walk(p, level + 1)

    if root.is_dir():
        walk(root, 1)
    found = [r for r in found if run_kind(r) == kind] if kind else found
    return sorted(found, key=lambda r: r.status().get("created", 0), reverse=True)


def read_json(path: Path) -> dict:
    """A JSON object from ``path``; {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def is_ablation(path: str | Path) -> bool:
    p = Path(path)
    return (p / "plan.json").exists() or read_json(p / "config.json").get("kind") == "ablate"


def ablation_of(path: str | Path, root: str | Path) -> Path | None:
    """The ablation folder that ``path`` lies inside (ABL/pretrain/<key>, ABL/cells/<id>), or None."""
    path, root = Path(path), Path(root)
    parent = path.parent.parent  # ABL is two levels up
    return parent if root in parent.parents and is_ablation(parent) else None


def rel_name(path: str | Path, root: str | Path) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _pretraining_words(cfg: dict) -> str:
    """"L=2 H=128 · MLM+NSP · 80/10/10" from a pre-training config (ablation cells share it)."""
    objective = OBJECTIVES.get(cfg.get("objective") or BERT.name)  # (None: a name this version does not know)
    words = [str(cfg.get("size") or cfg.get("init") or "?"), str(cfg.get("objective") or BERT.name).upper()]
    if (objective is None or objective.masks) and cfg.get("mask_ratio") is not None:
        words.append("/".join(f"{100 * float(cfg.get(k, 0)):g}" for k in ("mask_ratio", "keep_ratio", "random_ratio")))
    return " · ".join(words)


def run_label(run: Run, root: str | Path) -> str:
    """What a person reads in a list: the folder's name, or for a run inside an ablation
    "ABL ▸ pre-training tiny · MLM+NSP · 80/10/10" / "ABL ▸ cell sst2 · tiny · …"."""
    abl = ablation_of(run.path, root)
    if abl is None:
        return rel_name(run.path, root)
    head = rel_name(abl, root)
    if run.path.parent.name == "pretrain":
        return f"{head} ▸ pre-training {_pretraining_words(run.config())} ({run.name[:6]})"
    if run.path.parent.name == "cells":
        return f"{head} ▸ cell {run.name.replace('__', ' · ')}"
    return f"{head} ▸ {rel_name(run.path, abl)}"


def run_groups(runs: list[Run], root: str | Path) -> dict[str, list[Run]]:
    """{"": the user's own runs (ablations as one run each), ablation name: the runs inside it}."""
    groups: dict[str, list[Run]] = {"": []}
    for r in runs:
        abl = ablation_of(r.path, root)
        groups.setdefault(rel_name(abl, root) if abl else "", []).append(r)
    return groups


@dataclass(frozen=True)
class CheckpointEntry:
    path: str    # the step-N folder: what checkpoint.load reads
    label: str   # "my-run · step 200" or "ABL ▸ pre-training tiny · MLM · step 200"
    group: str   # "" for the user's own runs, else the ablation's name


def run_checkpoints(root: str | Path) -> list[CheckpointEntry]:
    """Checkpoints of the pre-training runs under ``root``, ablations' included: runs in
    folder order, the newest step of each run first. A copied or half-renamed folder
    (``step-5-copy``) is not a checkpoint."""
    root = Path(root)
    found = []
    for cfg in (root.glob("**/checkpoints/step-*/config.json") if root.exists() else []):
        step = cfg.parent.name[len("step-"):]
        if step.isdigit():
            found.append((str(cfg.parents[2]), -int(step), cfg.parent))
    out = []
    for run_dir, neg_step, path in sorted(found):
        run = Run(run_dir)
        abl = ablation_of(run.path, root)
        out.append(CheckpointEntry(str(path), f"{run_label(run, root)} · step {-neg_step:,}",
                                   rel_name(abl, root) if abl else ""))
    return out


def finetuned_models(root: str | Path) -> list[CheckpointEntry]:
    """The saved models (``model/``) of the finished fine-tuning runs under ``root``, newest first, an
    ablation's cells left out (the Runs page opens those). Asked on every page run: the one walker, which
    does not descend into checkpoints."""
    return [CheckpointEntry(str(run.path / "model"), f"fine-tuned: {run_label(run, root)}", "")
            for run in find_runs(root, "finetune")
            if ablation_of(run.path, root) is None and (run.path / "model" / "config.json").is_file()
            and run.status().get("state") == "finished"]


def causal_checkpoints(root: str | Path) -> list[CheckpointEntry]:
    """The left-to-right (``causal: true``) checkpoints under ``root``: what the ablation
    studio's LTR pre-training writes (Table 5's "LTR & No NSP")."""
    return [c for c in run_checkpoints(root) if read_json(Path(c.path) / "config.json").get("causal")]
