"""Several pre-trainings on the one GPU at once, each in its own process.

A pre-training of paper-mini's sizes uses a fraction of an H200: its host masks every batch in
Python (27-46 ms a step whatever the size, measured on the H200's host), so one run after another
leaves the GPU mostly waiting. Here each pre-training is a child process (its own Python for the
masking, its own CUDA context on the same GPU), ``workers`` at a time, the host's cores shared
between them (``OMP_NUM_THREADS``). Two kinds of child:

    python -m tools.gpu_kit.side_by_side pretrain SETTINGS.json RUN_DIR DEADLINE
    python -m tools.gpu_kit.side_by_side ablation ABLATION_DIR KEY
    python -m tools.gpu_kit.side_by_side cells ABLATION_DIR CELL_ID [CELL_ID ...]

The first trains ``SETTINGS`` into ``RUN_DIR`` (resuming what it finds there) and stops cleanly at
``DEADLINE`` (seconds since the epoch): a checkpoint is saved and a later command goes on from it.
The second runs the pre-training ``KEY`` of an ablation's plan exactly as the ablation runner
would (``runner.ensure_pretrained``), so that the runner afterwards finds it finished and only
fine-tunes; it stops at the ablation's STOP file, which the session touches at the deadline.
The third fine-tunes cells of an ablation whose models are ready, one after another (a process
starts once for several), and appends each record to ``results.jsonl`` as the ablation's own loop
does (``runner.fine_tune_cell``); at the ablation's STOP file it starts no further cell. A cell
killed half-way leaves no record and is run again.
No job is started after the deadline or once the stop file (``stop``) exists; one still running a
little after the deadline is ended.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .offline import python_command

REPO = Path(__file__).resolve().parents[2]
GRACE_S = 30           # after the deadline, how long a child gets to save its checkpoint before it is ended
STOPPED_EXIT = 3       # a child's exit code when it stopped at the deadline (resumable), not failed


@dataclass(frozen=True)
class Job:
    name: str
    args: tuple[str, ...]     # the child's arguments after this module's name
    run_dir: Path             # where its status.json says how far it is


def pretrain_job(name: str, settings: dict, run_dir: Path, deadline: float) -> Job:
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    spec = run_dir.parent / f"{run_dir.name}.settings.json"
    spec.write_text(json.dumps(settings, indent=2) + "\n")
    return Job(name, ("pretrain", str(spec), str(run_dir), repr(deadline)), run_dir)


def ablation_job(abl: Path, key: str, name: str) -> Job:
    return Job(name, ("ablation", str(abl), key), Path(abl) / "pretrain" / key)


def cells_job(abl: Path, cell_ids: list[str], name: str) -> Job:
    return Job(name, ("cells", str(abl), *cell_ids), Path(abl) / "cells" / cell_ids[0])


def _step_of(job: Job) -> int | None:
    try:
        return json.loads((job.run_dir / "status.json").read_text()).get("step")
    except (OSError, ValueError):
        return None


def run_jobs(jobs: list[Job], workers: int, deadline: float, logs: Path, say=print, every: float = 30.0,
             stop: Path | None = None) -> dict:
    """Run ``jobs``, at most ``workers`` at a time; returns {name: {"exit_code", "state", "seconds"}}
    (state: finished, stopped, failed, or not started when the deadline or ``stop`` came first). Each
    child's printout is kept in ``logs/NAME.txt``."""
    def may_start() -> bool:
        return time.time() < deadline and not (stop is not None and stop.exists())

    logs.mkdir(parents=True, exist_ok=True)
    workers = max(1, min(workers, len(jobs)))
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    waiting, running, done = list(jobs), {}, {}
    last_said = time.time()
    while waiting or running:
        while waiting and len(running) < workers and may_start():
            job = waiting.pop(0)
            out = open(logs / f"{job.name}.txt", "w")
            proc = subprocess.Popen(python_command("-m", "tools.gpu_kit.side_by_side", *job.args), cwd=REPO,
                                    env=env, stdout=out, stderr=subprocess.STDOUT)
            running[job.name] = (job, proc, out, time.time())
        for name, (job, proc, out, t0) in list(running.items()):
            code = proc.poll()
            if code is None and time.time() > deadline + GRACE_S:
                proc.send_signal(signal.SIGTERM)
                try:
                    code = proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
            if code is None:
                continue
            out.close()
            state = "finished" if code == 0 else "stopped" if code == STOPPED_EXIT else "failed"
            done[name] = {"exit_code": code, "state": state, "seconds": round(time.time() - t0, 1)}
            del running[name]
            if state == "failed":
                tail = (logs / f"{name}.txt").read_text(errors="replace").strip().splitlines()[-1:] or [""]
                say(f"  {name}: FAILED (exit code {code}): {tail[0][:300]}")
        if not running and waiting and not may_start():
            for job in waiting:
                done[job.name] = {"exit_code": None, "state": "not started", "seconds": 0.0}
            waiting = []
        if time.time() - last_said >= every and (running or waiting):
            last_said = time.time()
            steps = ", ".join(f"{n} {s}" for n, (j, *_) in running.items() if (s := _step_of(j)) is not None)
            say(f"  side by side: {len(done)} done, {len(running)} running ({steps or 'starting'}), "
                f"{len(waiting)} waiting; {deadline - time.time():.0f} s left")
        time.sleep(0.2)
    return done


def main(argv: list[str]) -> int:
    from bert_explorer.runs.signals import StoppedBySignal

    try:
        return _job(argv)
    except StoppedBySignal:  # the SIGTERM after the grace: the run stopped at its step and saved, resumable
        return STOPPED_EXIT


def _job(argv: list[str]) -> int:
    # imported here: the parent process never trains
    from bert_explorer.experiments import runner

    from .context import Context, pretrain

    kind = argv[0]
    if kind == "pretrain":
        settings, run_dir, deadline = json.loads(Path(argv[1]).read_text()), Path(argv[2]), float(argv[3])
        ctx = Context(run_dir.parent, Path("."), None, deadline, False)
        result = pretrain(ctx, settings, run_dir)
        return 0 if result.get("state") == "finished" else STOPPED_EXIT
    if kind == "ablation":
        abl, key = Path(argv[1]), argv[2]
        try:
            runner.ensure_pretrained(abl, key, runner.read_plan(abl)["pretrainings"][key])
        except runner.AblationStopped:
            return STOPPED_EXIT
        return 0
    if kind == "cells":
        abl = Path(argv[1])
        plan = runner.read_plan(abl)
        cells = {c["id"]: c for c in plan["cells"]}
        failed = 0
        for cell_id in argv[2:]:
            if (abl / "STOP").exists():
                return STOPPED_EXIT
            cell, started = cells[cell_id], time.time()
            key = cell["pretrain_key"]
            cfg = plan["pretrainings"][key]
            model_dir = runner.ensure_downloaded(cfg) if "hub" in cfg else runner.ensure_pretrained(abl, key, cfg)
            record = runner.fine_tune_cell(abl, plan, cell, model_dir, runner.pretrain_summary(abl, key, cfg))
            failed += record["status"] != "finished"
            print(f"{cell_id}: {record.get('score') if record['status'] == 'finished' else record.get('error')} "
                  f"({time.time() - started:.0f} s)", flush=True)
        return 1 if failed else 0
    raise SystemExit(f"unknown job kind {kind!r}: pretrain, ablation or cells")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
