"""recipe-sweep: the learning rate and warm-up that take paper-mini's pre-trainings off the
word-frequency plateau, chosen by short pre-trainings run side by side on the one GPU.

At paper-mini's shipped recipe (lr 1e-3, 40 warm-up steps of 400) six of its eleven pre-trainings
ended on the plateau (held-out loss at the corpus's unigram entropy: word counts learnt, nothing
more), and which runs left it did not follow the setting. The sweep pre-trains the baseline size
(BERT-Small in paper-mini) with each of three objectives (MLM+NSP, MLM, LTR) at every learning rate
x warm-up of :data:`plan.SWEEP`, with paper-mini's corpus, vocabulary, batch and masking, evaluating
on the held-out documents four times in each run.

**The choice.** A setting (learning rate, warm-up) is *good* where every objective's final held-out
loss is off the plateau (``data.pretraining.on_plateau``) and every masked-LM objective predicts at
least :data:`TARGET_MLM_ACCURACY` of the held-out masked words. Among the settings (good ones first),
the one whose weakest objective ends furthest below the plateau (the smallest of entropy - held-out
loss over the three) is chosen. **The steps**: where a run of the chosen setting ended more than
:data:`MEMORISING_NATS` above its best held-out loss, it had begun to memorise the corpus, and the
recipe's steps are cut to the earliest such best step; otherwise the sweep's own steps stand. The
choice is written to ``chosen.json``, which paper-mini reads (on this machine, or carried from an
earlier one) in place of its shipped pre-training settings.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from bert_explorer.experiments import grid

from . import plan, side_by_side
from .context import Outcome, light_copy

TARGET_MLM_ACCURACY = 0.20   # issue's bar for a paper-mini pre-training that can be read
MEMORISING_NATS = 0.05       # a final held-out loss this far above the run's best: memorising
CHOSEN = "chosen.json"


def read_row(run: dict, run_dir: Path) -> dict:
    """What one run reached: its held-out curve, its final loss against the plateau, how many passes
    over the training sequences it made."""
    row = {k: run[k] for k in ("name", "lr", "warmup", "objective")}
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {**row, "state": "not started"}
    evals = []
    if (run_dir / "metrics.jsonl").is_file():
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec.get("split") == "eval" and rec.get("mlm_perplexity"):
                evals.append((rec["step"], math.log(rec["mlm_perplexity"]), rec.get("mlm_accuracy")))
    final = status.get("eval_final") or {}
    row.update(state=status.get("state"), step=status.get("step"))
    if not evals or not final.get("mlm_perplexity"):
        return row
    best = min(evals, key=lambda e: e[1])
    loss = math.log(final["mlm_perplexity"])
    sequences = status.get("train_sequences")
    row.update(held_out_loss=round(loss, 4), accuracy=final.get("mlm_accuracy"),
               entropy=final.get("unigram_entropy"), plateau=final.get("plateau"),
               below=None if final.get("unigram_entropy") is None else round(final["unigram_entropy"] - loss, 4),
               best_step=best[0], best_loss=round(best[1], 4), curve=[[s, round(l, 4)] for s, l, _ in evals],
               passes=None if not sequences else round(status["step"] * run["settings"]["batch_size"] / sequences, 2))
    return row


def _masks(objective: str) -> bool:
    return grid.ROWS[objective].objective.masks


def _nats(below: float) -> str:
    return f"{below:.2f} nats below" if below >= 0 else f"{-below:.2f} nats above"


def choose(rows: list[dict], sweep_steps: int) -> dict:
    """The chosen setting (module docstring): {"lr", "warmup", "max_steps", "good", "weakest_below", "why"}."""
    settings = {}
    for r in rows:
        settings.setdefault((r["lr"], r["warmup"]), []).append(r)
    scored = []
    for (lr, warmup), group in settings.items():
        measured = [r for r in group if r.get("below") is not None]
        if not measured or len(measured) < len(group):
            continue  # a setting with a run that did not finish is not chosen
        good = all(not r["plateau"] for r in measured) and all(
            (r["accuracy"] or 0) >= TARGET_MLM_ACCURACY for r in measured if _masks(r["objective"]))
        scored.append((good, min(r["below"] for r in measured), lr, warmup, measured))
    if not scored:
        return {"lr": None, "why": "no setting has every run finished and measured: nothing to choose from"}
    good, weakest, lr, warmup, group = max(scored, key=lambda s: (s[0], s[1]))
    memorising = [r for r in group if r["held_out_loss"] - r["best_loss"] > MEMORISING_NATS]
    steps = min(r["best_step"] for r in memorising) if memorising else sweep_steps
    why = (f"lr {lr:g} with {warmup:.0%} warm-up: "
           + ("every objective off the plateau and every masked LM at "
              f">= {TARGET_MLM_ACCURACY:.0%} held-out accuracy" if good else
              "NO setting took every objective off the plateau with every masked LM at "
              f">= {TARGET_MLM_ACCURACY:.0%}; this one came closest")
           + f"; its weakest objective ended {_nats(weakest)} the plateau"
           + (f"; steps cut to {steps} where {', '.join(r['objective'] for r in memorising)} was best on held-out "
              "text (later it memorised)" if memorising else f"; {steps} steps (no run memorised by then)"))
    return {"lr": lr, "warmup": warmup, "warmup_steps": max(1, round(warmup * steps)), "max_steps": steps,
            "good": good, "weakest_below": weakest, "why": why}


def table(rows: list[dict], chosen: dict) -> str:
    """The sweep as a Markdown table, the chosen setting first in words."""
    lines = [f"# recipe-sweep\n\nChosen: {chosen['why']}.\n",
             "| objective | lr | warm-up | steps | held-out acc. | held-out loss | plateau (entropy) | below it "
             "| best at step | passes | state |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["objective"], -r["lr"], r["warmup"])):
        if r.get("held_out_loss") is None:
            lines.append(f"| {r['objective']} | {r['lr']:g} | {r['warmup']:.0%} | {r.get('step') or '-'} "
                         f"| - | - | - | - | - | - | {r.get('state')} |")
            continue
        lines.append(f"| {r['objective']} | {r['lr']:g} | {r['warmup']:.0%} | {r['step']} | {100 * r['accuracy']:.1f} % "
                     f"| {r['held_out_loss']:.3f} | {'yes' if r['plateau'] else 'no'} ({r['entropy']:.2f}) "
                     f"| {r['below']:.2f} | {r['best_step']} | {r['passes']} | {r['state']} |")
    return "\n".join(lines) + "\n"


def chosen_recipe(work_root: Path, state_root: Path | None) -> dict | None:
    """The sweep's choice, from this machine's work folder or carried from an earlier machine."""
    for p in [work_root / "recipe-sweep" / "return" / "sweep" / CHOSEN] + (
            [state_root / "recipe-sweep" / "resume" / CHOSEN] if state_root is not None else []):
        if p.is_file():
            chosen = json.loads(p.read_text())
            return chosen if chosen.get("lr") is not None else None
    return None


def apply(recipe: dict, chosen: dict) -> dict:
    """paper-mini with the sweep's pre-training settings."""
    r = json.loads(json.dumps(recipe))
    steps = chosen["max_steps"]
    r["pretrain"].update(lr=chosen["lr"], warmup_steps=chosen["warmup_steps"], max_steps=steps, eval_every=steps,
                         save_every=max(1, steps // 2))
    r["description"] = (f"{r.get('description', '')} Pre-training settings chosen by the GPU kit's recipe-sweep: "
                        f"{chosen['why']}.").strip()
    return r


def run(ctx, recipe: dict, sweep: dict, workers: int):
    """The step: every run side by side (resuming what this machine or an earlier one got through),
    then the table and the choice. Returns a context.Outcome."""

    work = ctx.work / "sweep"
    if ctx.state is not None and (ctx.state / "resume").is_dir() and not work.exists():
        ctx.say(f"  continuing the sweep that an earlier machine sent back ({ctx.state / 'resume'})")
        shutil.copytree(ctx.state / "resume", work)
    todo = plan.sweep_runs(recipe, sweep)
    for r in todo:  # carried without its checkpoints (they do not travel): it starts over
        d = work / r["name"]
        if d.is_dir() and read_row(r, d).get("state") != "finished" and not (d / "checkpoints").is_dir():
            shutil.rmtree(d)
    jobs = [side_by_side.pretrain_job(r["name"], r["settings"], work / r["name"], ctx.deadline) for r in todo
            if read_row(r, work / r["name"]).get("state") != "finished"]
    ctx.say(f"  {len(todo)} pre-trainings of {recipe['baseline']['size']}, {sweep['max_steps']} steps each, "
            f"{len(todo) - len(jobs)} finished earlier; {workers} side by side")
    ran = side_by_side.run_jobs(jobs, workers, ctx.deadline, ctx.work / "printouts", say=ctx.say)
    rows = [read_row(r, work / r["name"]) for r in todo]
    chosen = choose(rows, sweep["max_steps"])
    (work / CHOSEN).write_text(json.dumps(chosen, indent=2) + "\n")
    (work / "sweep.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = table(rows, chosen)
    (work / "sweep.md").write_text(text)
    for line in text.splitlines():
        ctx.say("  " + line)
    light_copy(work, ctx.returns / "sweep")
    finished = sum(r.get("state") == "finished" for r in rows)
    failed = sum(o["state"] == "failed" for o in ran.values())
    state = "finished" if finished == len(rows) else "failed" if failed else "stopped"
    return Outcome(state, {"runs": len(rows), "finished": finished, "failed": failed, "chosen_lr": chosen["lr"],
                           "chosen_warmup": chosen.get("warmup"), "chosen_steps": chosen.get("max_steps"),
                           "chosen_good": chosen.get("good")}, resume="sweep")
