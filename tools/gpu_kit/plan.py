"""The steps' settings and their planned minutes on the GPU.

Every step has real settings (what the GPU run uses) and tiny ones (what ``--dry-run`` runs on the
CPU). Planned minutes come from ``train/estimate.py``: its FLOPs count per token and its stated
GPU assumption (``GPU_FLOP_S_SMALL``, the step floors, the host's masking rate), plus the fixed
costs of a step stated here, each with where its number comes from. They are a plan, not a
measurement: the GPU runs measure them.

A command may run for at most 10 minutes; :data:`BUDGET_S` (9) is what the session plans for,
and each step is sized to fit one command, except paper-mini, which continues in a second one
(the ablation runner skips what has finished).
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

from bert_explorer import checkpoint
from bert_explorer.experiments import grid
from bert_explorer.experiments.grid import vocab_size_of
from bert_explorer.model import PRESETS
from bert_explorer.train import estimate as est

BUDGET_S = 9 * 60
COMPILE_S = 45                 # torch.compile of one BERT-Base's training step (assumed)
STOPPABLE_MIN_S = 120          # a training step started with less than planned needs at least this
WRAP_UP_S = 60                 # kept free at the end of a command: the last evaluation, saving, packing
START_S = 20                   # Python, torch and CUDA start-up of a command (assumed)
# Reading, tokenising and building the instances of the teaching corpora (five corpora + WordNet,
# 4.8 M WordPieces + 0.6 M), measured here on the 2-core CPU (shared with other jobs):
# 18 s. The GPU machine's host is assumed 1.3x faster per core (as estimate.HOST_MASKING_SEQ_PER_S).
DATA_S_PER_MILLION_TOKENS = 18 / 5.4 / 1.3
TEACHING_TOKENS_M = 5.4        # the five corpora (4.8 M training WordPieces) + WordNet (0.6 M)
EXPLORER_TOKENS_M = 4.8        # the five corpora
PAPER_MINI_TOKENS_M = 1.66     # bbc+wiki+lee: paper-mini's corpus (1.66 M WordPieces, its LTR run)

TIME_LAPSE_POINTS = 12         # explorer-mini keeps a checkpoint at this many evenly spaced steps

# continue minilm-mlm-nsp on the GPU, much longer: the config its second stage ran with, kept beside
# the first stage's (assets/pretrain-minilm-mlm-nsp.json)
TEACHING = json.loads((Path(__file__).resolve().parents[2] / "assets" / "pretrain-minilm-mlm-nsp-gpu.json").read_text())
EXPLORER = {  # explorer-mini from zero: 4 layers, H=256, the standard uncased vocabulary
    "size": "mini", "vocab": "minilm-mlm-nsp", "corpus": "bbc+sotu+vital+wiki+lee", "eval_corpora": "bbc+sotu",
    "held_out_fraction": 0.05, "objective": "mlm+nsp", "max_seq_length": 128,
    "batch_size": 128, "lr": 5e-4, "warmup_steps": 400, "max_steps": 5000,
    "eval_every": 500, "save_every": 500, "eval_batches": 40, "log_every": 100,
    "seed": 0, "precision": "bf16",
}
# BERT-Base in bf16, with the levers on for both models (SDPA, fused AdamW, torch.compile); a batch
# of 128 x 128 so that the GPU, not the launching of kernels, sets the pace
# (--levers adds ours with explicit attention, with unfused AdamW, and compiled with CUDA graphs; --profile
# adds where the step goes, by the kernels' GPU time), then the same eager pair at twice the batch
BENCH_ARGS = ["--size", "base", "--batch", "128", "--seq", "128", "--steps", "20", "--warmup", "5",
              "--device", "cuda", "--precision", "bf16", "--compile", "--levers", "--profile"]
BENCH_LARGE_BATCH_ARGS = ["--size", "base", "--batch", "256", "--seq", "128", "--steps", "10", "--warmup", "3",
                          "--device", "cuda", "--precision", "bf16"]

# recipe-sweep (sweep.py): paper-mini's baseline size pre-trained with each objective at every learning
# rate x warm-up (a fraction of the steps), side by side on the one GPU
SWEEP = {"lrs": [1e-3, 5e-4, 2e-4], "warmups": [0.05, 0.2], "objectives": ["mlm+nsp", "mlm", "ltr"],
         "max_steps": 1000, "eval_points": 4}
# How many pre-trainings share the GPU at once (side_by_side.py): the H200's host has 16 cores and each
# run masks its batches on one of them; 9 puts the sweep's 18 runs in two waves.
SIDE_BY_SIDE_WORKERS = 9
# Runs side by side slow each other down where the GPU, not the host, becomes the limit: assumed 1.5x
# for the sizes of paper-mini (the GPU run measures it; its printout has each run's ms a step)
SIDE_BY_SIDE_SLOWDOWN = 1.5
# paper-mini's cells fine-tuned with three seeds each: noise-aware verdicts (experiments/results.py)
PAPER_MINI_SEEDS = (0, 1, 2)

# ----- the tiny versions, for --dry-run on the CPU ------------------------------------------------
_TINY_PRETRAIN = {"max_docs": 60, "max_seq_length": 32, "batch_size": 4, "max_steps": 4, "warmup_steps": 1,
                  "eval_every": 2, "save_every": 2, "eval_batches": 1, "log_every": 1, "precision": "fp32",
                  "device": "cpu", "held_out_fraction": 0.1}
TEACHING_TINY = {**TEACHING, **_TINY_PRETRAIN, "eval_corpora": None}
EXPLORER_TINY = {**EXPLORER, **_TINY_PRETRAIN, "size": "tiny", "eval_corpora": None, "save_every": 1}
BENCH_TINY_ARGS = ["--size", "tiny", "--batch", "2", "--seq", "16", "--steps", "1", "--warmup", "1",
                   "--device", "cpu", "--precision", "fp32", "--levers", "--profile"]
# two runs, one wave on the dry run's 2 cores: the path, not the choice (tests/test_recipe_sweep.py has that)
SWEEP_TINY = {"lrs": [1e-3, 2e-4], "warmups": [0.25], "objectives": ["mlm"], "max_steps": 4, "eval_points": 2}
SIDE_BY_SIDE_TINY_WORKERS = 2   # the dry run's CPU has 2 cores


def tiny_paper_mini(recipe: dict) -> dict:
    """paper-mini shrunk for the CPU: every axis keeps its first and last values (sizes: tiny and
    L4-H128) on one task each, a few steps and examples; the same tasks, corpus, vocabulary and
    grid, so every kind of cell runs once (LTR + BiLSTM, a feature-based head, each task type)."""
    r = copy.deepcopy(recipe)
    r["pretrain"].update(_TINY_PRETRAIN, eval_every=1000, save_every=1)
    r["finetune"].update({"epochs": 1, "batch_size": 8, "max_seq_length": 32, "device": "cpu"})
    for spec in r["tasks"].values():
        if spec["train"].startswith("pairs:"):
            spec.update(n_train=24, n_dev=16)
        else:
            spec.update(max_train_examples=40, max_dev_examples=16)
    r["baseline"]["size"] = "tiny"
    r["axes"] = {axis: (["tiny", "L4-H128"] if axis == "size" else [values[0], values[-1]])
                 for axis, values in r["axes"].items()}
    tasks = list(r["tasks"])
    r["axis_tasks"] = {axis: [tasks[i % len(tasks)]] for i, axis in enumerate(r["axes"])}
    r["name"] += "-dry-run"
    return r


# ----- planned minutes -------------------------------------------------------------------------
@dataclass
class Planned:
    seconds: float
    basis: list[str] = field(default_factory=list)   # how the seconds were found, term by term
    returns: dict[str, int] = field(default_factory=dict)  # the files the step sends back (bytes, about)

    @property
    def minutes(self) -> float:
        return self.seconds / 60


def _pretrain_seconds(settings: dict, size: str | None, data_tokens_m: float) -> Planned:
    if size is None:  # a warm start: its checkpoint's size (the tracked config)
        size = str(checkpoint.ASSETS / "minilm-mlm-nsp")
        params, fpt = est.model_size(size, 0, settings["max_seq_length"])
        hidden = 384
    else:
        params, fpt = est.model_size(size, vocab_size_of(settings), settings["max_seq_length"])
        hidden = PRESETS[size].hidden_size
    steps, bs, seq = settings["max_steps"], settings["batch_size"], settings["max_seq_length"]
    train = est.gpu_pretrain_seconds(fpt, hidden, steps, bs, seq)
    data = data_tokens_m * DATA_S_PER_MILLION_TOKENS
    # each evaluation: eval_batches forward passes (a third of a training step's work); each save:
    # the weights and AdamW's two moments, float32, about 1 GB/s to local disk
    evals = (steps // settings["eval_every"] + 1) * settings["eval_batches"] * est.GPU_STEP_FLOOR_S
    saves = (steps // settings["save_every"] + 1) * (12 * params / 1e9 + 0.5)
    total = START_S + data + train + evals + saves + 10
    step_s = train / steps
    return Planned(total, [
        f"start-up {START_S:.0f} s (assumed)",
        f"data {data:.0f} s ({data_tokens_m} M WordPieces tokenised into instances; measured here, /1.3)",
        f"training {train:.0f} s = {steps:,} steps x {step_s * 1e3:.0f} ms ({fpt / 1e6:.0f} MFLOP/token, "
        f"batch {bs} x {seq}; estimate.gpu_pretrain_seconds: the longest of FLOPs at "
        f"{est.gpu_flop_s(hidden) / 1e12:.0f} TFLOP/s, the {est.GPU_STEP_FLOOR_S * 1e3:.0f} ms step floor and "
        f"{bs / est.HOST_MASKING_SEQ_PER_S * 1e3:.0f} ms of masking on the host)",
        f"evaluations {evals:.0f} s, checkpoints {saves:.0f} s, packing 10 s",
    ]), params


def plan_teaching() -> Planned:
    planned, params = _pretrain_seconds(TEACHING, None, TEACHING_TOKENS_M)
    # the returned model: what training changed (all but the frozen word embeddings) in float16
    trained = params - 30522 * 384
    planned.returns = {"teaching-model.tar (model in fp16 without the word embeddings, vocabulary, logs)":
                       2 * trained + 1_200_000}
    return planned


def plan_explorer() -> Planned:
    planned, params = _pretrain_seconds(EXPLORER, EXPLORER["size"], EXPLORER_TOKENS_M)
    planned.returns = {"explorer-mini.tar (final model in fp16, vocabulary, logs, time-lapse frames)":
                       2 * params + 1_500_000}
    return planned


def _side_by_side_seconds(total_s: float, runs: int) -> float:
    waves = -(-runs // SIDE_BY_SIDE_WORKERS)
    return SIDE_BY_SIDE_SLOWDOWN * total_s * waves / max(1, runs)


def plan_paper_mini(recipe: dict) -> Planned:
    plan = grid.expand(recipe)
    e = grid.estimate(plan, "gpu")
    n_pre, n_cells = len(plan["pretrainings"]), len(plan["cells"])
    pre_s = _side_by_side_seconds(e["pretrain_s"], n_pre)
    # the cells shared out among the processes side by side, each starting once
    cells_s = SIDE_BY_SIDE_SLOWDOWN * e["finetune_s"] / min(SIDE_BY_SIDE_WORKERS, n_cells) + START_S
    seconds = 2 * START_S + pre_s + cells_s
    return Planned(seconds, [
        f"start-up {START_S:.0f} s in each of its two commands (assumed)",
        f"{n_pre} pre-trainings {e['pretrain_s']:.0f} s one after another, {pre_s:.0f} s side by side "
        f"({SIDE_BY_SIDE_WORKERS} at once, each {SIDE_BY_SIDE_SLOWDOWN:g}x slower: assumed), then {n_cells} "
        f"fine-tuning cells {e['finetune_s']:.0f} s one after another, {cells_s:.0f} s shared among "
        f"{min(SIDE_BY_SIDE_WORKERS, n_cells)} processes, each starting once (experiments.grid.estimate on 'gpu', train/estimate.py's rates, measured on "
        "an H200); with "
        "recipe-sweep's settings where it ran first (its steps may differ)",
    ], {"paper-mini.tar (results.jsonl, plan, logs and metrics of every run; no models)": 1_500_000})


def sweep_runs(recipe: dict, sweep: dict) -> list[dict]:
    """The sweep's pre-trainings: {"name", "lr", "warmup", "objective", "settings"} each."""
    size, masking = recipe["baseline"]["size"], recipe["baseline"]["masking"]
    steps = sweep["max_steps"]
    out = []
    for objective in sweep["objectives"]:
        base = grid.pretrain_config(recipe, size, objective, masking)
        for lr in sweep["lrs"]:
            for warmup in sweep["warmups"]:
                name = f"{objective.replace('+', '-')}_lr{lr:g}_wu{round(100 * warmup)}"
                settings = {**base, "lr": lr, "warmup_steps": max(1, round(warmup * steps)), "max_steps": steps,
                            "eval_every": max(1, steps // sweep["eval_points"]), "save_every": max(1, steps // 2)}
                out.append({"name": name, "lr": lr, "warmup": warmup, "objective": objective, "settings": settings})
    return out


def plan_sweep(recipe: dict) -> Planned:
    runs = sweep_runs(recipe, SWEEP)
    one, _ = _pretrain_seconds(runs[0]["settings"], runs[0]["settings"]["size"], PAPER_MINI_TOKENS_M)
    all_s = _side_by_side_seconds(len(runs) * (one.seconds - START_S), len(runs))
    return Planned(START_S + all_s, [
        f"start-up {START_S:.0f} s (assumed)",
        f"{len(runs)} pre-trainings of {runs[0]['settings']['size']} ({len(SWEEP['objectives'])} objectives x "
        f"{len(SWEEP['lrs'])} learning rates x {len(SWEEP['warmups'])} warm-ups, {SWEEP['max_steps']:,} steps each), "
        f"{SIDE_BY_SIDE_WORKERS} at once, each {SIDE_BY_SIDE_SLOWDOWN:g}x slower than alone (assumed): "
        f"{all_s:.0f} s; one alone: " + one.basis[2],
    ], {"recipe-sweep.tar (the table, the choice, each run's log and metrics; no models)": 300_000})


def plan_bench() -> Planned:
    # BERT-Base in bf16: ours and transformers', each eager and compiled, ours with one lever off three
    # times and ours compiled with CUDA graphs (--levers): 8 models, 25 steps each of 128 x 128 (the graphs'
    # 25 more untimed), 3 profiled models x 2 steps; then ours and transformers' eager, 13 steps of 256 x 128
    _, fpt = est.model_size("base", 30522, 128)
    steps = (8 * 25 + 25 + 3 * 2 + 2 * 13 * 2) * 128 * 128 * fpt / est.GPU_FLOP_S_BASE
    seconds = 2 * START_S + 50 + 15 + 3 * COMPILE_S + steps
    return Planned(seconds, [f"start-up {START_S:.0f} s twice, building and moving 8 + 2 BERT-Bases 65 s, compiling "
                             f"three {3 * COMPILE_S:.0f} s (assumed)",
                             f"steps {steps:.0f} s ({fpt / 1e6:.0f} MFLOP/token at "
                             f"{est.GPU_FLOP_S_BASE / 1e12:.0f} TFLOP/s in bf16)"],
                   {"bench.tar (the benchmark's two printouts)": 40_000})


def plan_tests() -> Planned:
    return Planned(START_S + 100, [f"start-up {START_S:.0f} s, the GPU tests 100 s (assumed: they are written "
                                   "elsewhere in the kit and not yet timed)"],
                   {"tests.tar (pytest's printout and junit.xml)": 50_000})
