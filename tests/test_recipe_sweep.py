"""The GPU kit's recipe-sweep: how a setting is chosen from its runs, and pre-trainings side by
side that stop at the deadline and go on from their checkpoints."""
from __future__ import annotations

import json
import time

import pytest

from bert_explorer.experiments import grid
from tools.gpu_kit import plan, side_by_side, sweep


def _row(objective, lr, warmup, loss, entropy=7.15, accuracy=0.3, best_step=1000, best_loss=None):
    from bert_explorer.data.pretraining import on_plateau

    return {"objective": objective, "lr": lr, "warmup": warmup, "held_out_loss": loss, "entropy": entropy,
            "below": entropy - loss, "plateau": on_plateau(loss, entropy), "accuracy": accuracy,
            "best_step": best_step, "best_loss": loss if best_loss is None else best_loss, "state": "finished"}


def test_the_setting_whose_weakest_objective_is_furthest_below_the_plateau_is_chosen():
    rows = [  # lr 1e-3: MLM far below, but MLM+NSP stuck on the plateau (the shipped recipe's failure)
        _row("mlm+nsp", 1e-3, 0.05, 7.10), _row("mlm", 1e-3, 0.05, 4.0), _row("ltr", 1e-3, 0.05, 5.0),
        # lr 5e-4: every objective off it, the weakest 1.15 nats below
        _row("mlm+nsp", 5e-4, 0.2, 6.0), _row("mlm", 5e-4, 0.2, 5.5), _row("ltr", 5e-4, 0.2, 5.2),
        # lr 2e-4: every objective 1.35+ nats below, but a masked LM under 20 % held-out accuracy
        _row("mlm+nsp", 2e-4, 0.2, 5.8, accuracy=0.15), _row("mlm", 2e-4, 0.2, 5.7), _row("ltr", 2e-4, 0.2, 5.0)]
    chosen = sweep.choose(rows, 1000)
    assert (chosen["lr"], chosen["warmup"], chosen["good"], chosen["max_steps"]) == (5e-4, 0.2, True, 1000)
    assert chosen["warmup_steps"] == 200 and abs(chosen["weakest_below"] - 1.15) < 1e-9
    assert "every objective off the plateau" in chosen["why"] and "1.15 nats below" in chosen["why"]
    # without the good setting, the closest one is chosen and said to fall short
    fallback = sweep.choose([r for r in rows if r["lr"] != 5e-4], 1000)
    assert fallback["lr"] == 2e-4 and not fallback["good"] and "NO setting" in fallback["why"]


def test_a_run_that_began_to_memorise_cuts_the_steps_and_an_unfinished_setting_is_not_chosen():
    rows = [_row("mlm", 1e-3, 0.05, 5.0), _row("ltr", 1e-3, 0.05, 5.6, best_step=500, best_loss=5.3),
            _row("mlm", 2e-4, 0.05, 3.0), {"objective": "ltr", "lr": 2e-4, "warmup": 0.05, "state": "stopped"}]
    chosen = sweep.choose(rows, 1000)
    assert chosen["lr"] == 1e-3 and chosen["max_steps"] == 500 and chosen["warmup_steps"] == 25
    assert "steps cut to 500 where ltr was best" in chosen["why"]
    recipe = sweep.apply(grid.load_recipe("paper-mini"), chosen)
    assert {k: recipe["pretrain"][k] for k in ("lr", "warmup_steps", "max_steps")} == {
        "lr": 1e-3, "warmup_steps": 25, "max_steps": 500}
    assert "recipe-sweep" in recipe["description"] and grid.validate(recipe)
    # the shipped recipe is untouched
    assert grid.load_recipe("paper-mini")["pretrain"]["max_steps"] == 400


def test_the_real_sweep_fits_its_budget_and_covers_the_three_objectives():
    recipe = grid.load_recipe("paper-mini")
    runs = plan.sweep_runs(recipe, plan.SWEEP)
    assert len(runs) == 18 and len({r["name"] for r in runs}) == 18
    assert {r["settings"]["objective"] for r in runs} == {"mlm+nsp", "mlm", "ltr"}
    # paper-mini's corpus, vocabulary, size and batch: only the learning rate, warm-up and steps differ
    base = grid.pretrain_config(recipe, "small", "mlm", "80/10/10")
    mlm = [r["settings"] for r in runs if r["objective"] == "mlm"]
    assert all({k: s[k] for k in base if k not in ("lr", "warmup_steps", "max_steps", "eval_every", "save_every")}
               == {k: v for k, v in base.items() if k not in ("lr", "warmup_steps", "max_steps", "eval_every",
                                                            "save_every")} for s in mlm)
    assert plan.plan_sweep(recipe).minutes <= 6  # the budget for this step


def test_side_by_side_pretrainings_stop_at_the_deadline_and_go_on_from_their_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # far more steps than the deadline allows, on any machine
    settings = {**plan.EXPLORER_TINY, "corpus": "tiny", "max_steps": 10**6, "save_every": 10**6,
                "eval_every": 10**6, "log_every": 10**6}
    deadline = time.time() + 5  # children take 3-6 s to start here: some stop at their first step
    jobs = [side_by_side.pretrain_job(f"run{i}", {**settings, "seed": i}, tmp_path / f"run{i}", deadline)
            for i in range(2)]
    lines = []
    first = side_by_side.run_jobs(jobs, 2, deadline, tmp_path / "out", say=lines.append, every=1)
    assert {o["state"] for o in first.values()} == {"stopped"}, (first, lines)
    steps = []
    for i in range(2):
        status = json.loads((tmp_path / f"run{i}" / "status.json").read_text())
        assert status["state"] == "stopped" and status["step"] > 0
        steps.append(status["step"])
    assert any("side by side: 0 done, 2 running" in line for line in lines)
    # the next command, with time enough for 10 more steps: each run goes on where it stopped
    again = [side_by_side.pretrain_job(j.name, {**settings, "seed": i, "max_steps": steps[i] + 10}, j.run_dir,
                                       time.time() + 300) for i, j in enumerate(jobs)]
    second = side_by_side.run_jobs(again, 2, time.time() + 300, tmp_path / "out", say=lines.append)
    assert {o["state"] for o in second.values()} == {"finished"}, second
    for i in range(2):
        log = (tmp_path / f"run{i}" / "log.txt").read_text()
        assert f"resuming at step {steps[i]}" in log and f"finished at step {steps[i] + 10}" in log


def test_a_job_that_fails_is_named_with_its_last_line(tmp_path):
    bad = side_by_side.Job("broken", ("pretrain", str(tmp_path / "missing.json"), str(tmp_path / "r"), "0"),
                           tmp_path / "r")
    lines = []
    done = side_by_side.run_jobs([bad], 1, time.time() + 60, tmp_path / "out", say=lines.append)
    assert done["broken"]["state"] == "failed"
    assert any("broken: FAILED" in line and "missing.json" in line for line in lines)


@pytest.mark.parametrize("below,text", [(1.5, "1.50 nats below"), (-0.25, "0.25 nats above")])
def test_the_choice_says_which_side_of_the_plateau(below, text):
    assert sweep._nats(below) == text


def test_cells_appending_side_by_side_never_interleave_their_lines(tmp_path):
    """Cells fine-tuned in several processes append to one results.jsonl: every record comes back
    whole (records of 9 KB, more than a write buffer holds)."""
    import multiprocessing

    from bert_explorer.experiments import runner

    def append(worker):
        for i in range(150):
            runner._append_result(tmp_path, {"cell_id": f"{worker}-{i}", "status": "finished", "pad": "x" * 9000})

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=append, args=(w,)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 450 and len({json.loads(line)["cell_id"] for line in lines}) == 450
