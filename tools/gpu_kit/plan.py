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
BENCH_ARGS = ["--size", "base", "--batch", "128", "--seq", "128", "--steps", "20", "--warmup", "5",
              "--device", "cuda", "--precision", "bf16", "--compile", "--levers"]

# ----- the tiny versions, for --dry-run on the CPU ------------------------------------------------
_TINY_PRETRAIN = {"max_docs": 60, "max_seq_length": 32, "batch_size": 4, "max_steps": 4, "warmup_steps": 1,
                  "eval_every": 2, "save_every": 2, "eval_batches": 1, "log_every": 1, "precision": "fp32",
                  "device": "cpu", "held_out_fraction": 0.1}
TEACHING_TINY = {**TEACHING, **_TINY_PRETRAIN, "eval_corpora": None}
EXPLORER_TINY = {**EXPLORER, **_TINY_PRETRAIN, "size": "tiny", "eval_corpora": None, "save_every": 1}
BENCH_TINY_ARGS = ["--size", "tiny", "--batch", "2", "--seq", "16", "--steps", "1", "--warmup", "1",
                   "--device", "cpu", "--precision", "fp32", "--levers"]


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


def plan_paper_mini(recipe: dict) -> Planned:
    plan = grid.expand(recipe)
    e = grid.estimate(plan, "gpu")
    n_pre, n_cells = len(plan["pretrainings"]), len(plan["cells"])
    seconds = 2 * START_S + e["total_s"]
    return Planned(seconds, [
        f"start-up {START_S:.0f} s in each of its two commands (assumed)",
        f"{n_pre} pre-trainings {e['pretrain_s']:.0f} s and {n_cells} fine-tuning cells {e['finetune_s']:.0f} s "
        f"(experiments.grid.estimate on 'gpu', train/estimate.py's rates, measured on an H200)",
    ], {"paper-mini.tar (results.jsonl, plan, logs and metrics of every run; no models)": 600_000})


def plan_bench() -> Planned:
    # BERT-Base in bf16: ours and transformers', each eager and compiled, and ours with one lever off
    # twice (--levers): 6 models, 25 steps each of 128 x 128, plus building them and compiling two
    _, fpt = est.model_size("base", 30522, 128)
    steps = 6 * 25 * 128 * 128 * fpt / est.GPU_FLOP_S_BASE
    seconds = START_S + 45 + 2 * COMPILE_S + steps
    return Planned(seconds, [f"start-up {START_S:.0f} s, building and moving 6 BERT-Bases 45 s, compiling two "
                             f"{2 * COMPILE_S:.0f} s (assumed)",
                             f"timed steps {steps:.0f} s ({fpt / 1e6:.0f} MFLOP/token at "
                             f"{est.GPU_FLOP_S_BASE / 1e12:.0f} TFLOP/s in bf16)"],
                   {"bench.tar (the benchmark's printout)": 20_000})


def plan_tests() -> Planned:
    return Planned(START_S + 100, [f"start-up {START_S:.0f} s, the GPU tests 100 s (assumed: they are written "
                                   "elsewhere in the kit and not yet timed)"],
                   {"tests.tar (pytest's printout and junit.xml)": 50_000})
