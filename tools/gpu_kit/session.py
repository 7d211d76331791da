"""One command for the GPU work: run the chosen steps within one command's time budget.

    python -m tools.gpu_kit run --out "$OUT" --steps teaching-model

It prints the planned minutes of every step first. Then, step by step: a step whose result is
already in the work folder (``.gpu-work/STEP/return/result.json``: this machine finished it) or in
the carried state (``.gpu-state/STEP/result.json``: an earlier machine did) is skipped; otherwise
it checks the travel folders it reads and runs. At the deadline (the budget less a minute for
wrapping up) the running step is asked to stop cleanly: training saves a checkpoint, and the
next command on the same machine goes on from it. After each step its results are packed into
``$OUT`` at once (travel.pack), so what a command had finished comes back even if it is killed.
A step is not started when its planned minutes exceed what is left, unless it is the first.

``--dry-run`` does all of it on the CPU with tiny settings, in a child process where the packages
the GPU machine lacks cannot be imported (offline.py), and then checks that every returned file
is there, readable and within the limits of the way back.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

from safetensors import safe_open

from bert_explorer.data import prepared

from . import plan, travel
from .context import Context, Outcome
from .offline import ABSENT_ON_GPU
from .steps import REPO, STEPS

# Single trainings that stop cleanly at the deadline and still send back a model: worth starting
# with less time than planned, where a step that cannot be cut (the bench) is better left whole.
STOPPABLE = ("teaching-model", "explorer-mini")


def parse_steps(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown or not names:
        raise ValueError(f"no step called {', '.join(unknown) or repr(text)}; choose from {', '.join(STEPS)}")
    return names


def print_plan(names, say=print) -> dict:
    """The planned minutes of each step with real settings, how they were found, and the files
    each would send back. Returns {step: Planned}."""
    planned = {n: STEPS[n].planned() for n in names}
    say(f"Plan (real settings on {plan.est.GPU_ASSUMED}; rates measured on an H200, in train/estimate.py; "
        f"one command <= {plan.BUDGET_S // 60} min):")
    for n, p in planned.items():
        sizes = ", ".join(f"{what}: {b / travel.MiB:.1f} MiB" for what, b in p.returns.items())
        parts = sum(max(1, -(-b // travel.PART_BYTES)) if b > travel.RETURN_LIMITS.file_bytes else 1
                    for b in p.returns.values())
        say(f"  {n:<15} {p.minutes:5.1f} min   returns {sizes} -> {parts} archive file(s) + 1 manifest")
        for line in p.basis:
            say(f"  {'':<15}   {line}")
    say(f"  {'total':<15} {sum(p.minutes for p in planned.values()):5.1f} min")
    return planned


def run_session(names, out: Path, work: Path, travel_dir: Path, state: Path | None = None,
                budget_s: float = plan.BUDGET_S, tiny: bool = False, redo=(), say=print) -> dict:
    """Run ``names`` in order; returns {step: outcome dict}."""
    # The built-in corpora and data sets are read from the travel folder's prepared copies.
    before = os.environ.get(prepared.ENV)
    os.environ[prepared.ENV] = str(Path(travel_dir).resolve())
    try:
        return _run_steps(names, out, work, travel_dir, state, budget_s, tiny, redo, say)
    finally:
        if before is None:
            os.environ.pop(prepared.ENV, None)
        else:
            os.environ[prepared.ENV] = before


def _stop_at_deadline(ctx: Context) -> None:
    for path in ctx.stop_files:
        if path.parent.is_dir():
            path.touch()


def start_decision(name: str, planned_s: float, left_s: float, started: int) -> str:
    """"start" (it fits, or it is the command's first step), "short" (a training that stops at the
    deadline and still sends back a model: started with less than planned) or "skip"."""
    if not started or planned_s <= left_s + plan.WRAP_UP_S:
        return "start"
    if name in STOPPABLE and left_s >= plan.STOPPABLE_MIN_S:
        return "short"
    return "skip"


def _run_steps(names, out: Path, work: Path, travel_dir: Path, state: Path | None, budget_s: float, tiny: bool,
               redo, say) -> dict:
    t0 = time.time()
    deadline = t0 + budget_s - plan.WRAP_UP_S
    out.mkdir(parents=True, exist_ok=True)
    returned: dict[str, dict] = {}
    session = {"started": t0, "tiny": tiny, "steps_asked": list(names), "archives": returned, "outcomes": {}}
    planned = print_plan(names, say if not tiny else (lambda s: None))  # the dry run's parent printed it
    say(f"Running {', '.join(names)}{' (tiny settings, CPU: the dry run)' if tiny else ''}; "
        f"work folder {work}, results to {out}")
    outcomes, started = {}, 0
    for name in names:
        step, wdir = STEPS[name], work / name
        if name in redo:
            shutil.rmtree(wdir, ignore_errors=True)
        done_here = wdir / "return" / "result.json"
        if done_here.is_file():
            say(f"[{name}] finished earlier on this machine: not run again (--redo {name} runs it anew)")
            outcomes[name] = _pack(name, wdir, out, json.loads(done_here.read_text()), returned, session, say)
            continue
        if state is not None and (state / name / "result.json").is_file():
            say(f"[{name}] finished on an earlier machine ({state / name}): skipped")
            outcomes[name] = {"state": "finished earlier"}
            continue
        left = deadline - time.time()
        decision = "start" if tiny else start_decision(name, planned[name].seconds, left, started)
        if decision == "short":
            say(f"[{name}] {left / 60:.1f} min left of its planned {planned[name].minutes:.1f}: it trains until "
                "the deadline and sends back its newest checkpoint")
        elif decision == "skip":
            say(f"[{name}] not started: planned {planned[name].minutes:.1f} min, {left / 60:.1f} min left in this "
                "command; run it in the next one")
            outcomes[name] = {"state": "not started"}
            continue
        started += 1
        say(f"[{name}] {step.what}: planned {planned[name].minutes:.1f} min, {max(0, left) / 60:.1f} min left")
        t1 = time.time()
        ctx = Context(wdir, travel_dir, state / name if state is not None and (state / name).is_dir() else None,
                      deadline, tiny, say, state_root=state)
        shutil.rmtree(wdir / "return", ignore_errors=True)
        watcher = threading.Timer(max(0.0, deadline - time.time()), _stop_at_deadline, (ctx,))
        watcher.daemon = True
        watcher.start()
        try:
            travel.verify(travel_dir, step.needs)
            outcome = step.run(ctx)
        except Exception as e:  # the step failed; the session goes on and says why
            (ctx.returns / "error.txt").write_text(traceback.format_exc())
            outcome = Outcome("failed", {"error": f"{type(e).__name__}: {e}"})
            say(f"[{name}] FAILED: {type(e).__name__}: {e}")
        finally:
            watcher.cancel()
        record = {"step": name, "state": outcome.state, "seconds": round(time.time() - t1, 1),
                  "planned_seconds": round(planned[name].seconds), "tiny": tiny, "summary": outcome.summary,
                  "resume": outcome.resume}
        (ctx.returns / "outcome.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        if outcome.state == "finished":
            (ctx.returns / "result.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        say(f"[{name}] {outcome.state} in {record['seconds']:.0f} s: "
            + ", ".join(f"{k}={v}" for k, v in outcome.summary.items() if not isinstance(v, (list, dict))))
        outcomes[name] = _pack(name, wdir, out, record, returned, session, say)
    session.update(outcomes=outcomes, seconds=round(time.time() - t0, 1))
    travel.write_return_manifest(out, session)
    problems = travel.return_problems(out)
    say(f"Returned: {_listing(out)}" + (f"; PROBLEMS: {'; '.join(problems)}" if problems else "; within the limits "
        f"of the way back ({travel.RETURN_LIMITS.files} files, {travel.RETURN_LIMITS.file_bytes // travel.MiB} MiB "
        f"each, {travel.RETURN_LIMITS.total_bytes // travel.MiB} MiB together)"))
    return outcomes


def _pack(name: str, wdir: Path, out: Path, record: dict, returned: dict, session: dict, say) -> dict:
    """Pack the step's return/ into out and list it in the manifest, unless that would break the
    limits of the way back."""
    archive = travel.pack(wdir / "return", out, name)
    returned[name] = {**archive, **{k: record.get(k) for k in ("state", "seconds", "planned_seconds", "resume")}}
    session["outcomes"][name] = record
    travel.write_return_manifest(out, session)
    problems = travel.return_problems(out)
    if problems:
        travel.remove_archive(out, name)
        del returned[name]
        travel.write_return_manifest(out, session)
        say(f"[{name}] its results stay in {wdir / 'return'}: sending them would break the limits of the way back "
            f"({'; '.join(problems)}); run this step alone in a command to fetch them")
        return {**record, "returned": False}
    sizes = ", ".join(f"{p['file']} {p['bytes'] / travel.MiB:.2f} MiB" for p in archive["parts"])
    say(f"[{name}] returned: {sizes}")
    return {**record, "returned": [p["file"] for p in archive["parts"]]}


def _listing(out: Path) -> str:
    files = sorted(p for p in out.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    return f"{len(files)} files, {total / travel.MiB:.2f} MiB"


# ----- the dry run ---------------------------------------------------------------------------------
def dry_run(names, work: Path, travel_dir: Path | None = None, say=print, out: Path | None = None) -> int:
    """Every step with tiny settings on the CPU, in a child process that cannot import the
    packages the GPU machine lacks, its lines said as they come; then every returned file is checked. The
    returned files go to ``out`` (default ``work/out``); the steps' work folders (a gigabyte of tiny runs) are
    removed when the dry run passes and kept, their size said, when it fails. Returns an exit code."""
    t0 = time.time()
    print_plan(names, say)
    work.mkdir(parents=True, exist_ok=True)
    if travel_dir is None:
        travel_dir = work / "travel"
        if not all((travel_dir / f / travel.MANIFEST).is_file() for f in travel.FOLDERS):
            say(f"Preparing a sample travel folder ({travel_dir}: 60 documents of each corpus)")
            travel.prepare(travel_dir, sample=60, preset=1, say=lambda s: None)
    out = Path(out) if out is not None else work / "out"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work / "steps", ignore_errors=True)
    say(f"Dry run: child process with {', '.join(ABSENT_ON_GPU)} made unimportable")
    cmd = [sys.executable, "-m", "tools.gpu_kit.offline", "tools.gpu_kit", "run", "--tiny",
           "--steps", ",".join(names), "--out", str(out), "--work", str(work / "steps"), "--travel", str(travel_dir)]
    # tiny models on a CPU: one thread each is faster than several fighting over the cores
    env = {**os.environ, "BERT_EXPLORER_CACHE": str(work / "cache"), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(REPO) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # its lines as they come (they were shown only at the end: a minute and a half of nothing after the plan)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for line in proc.stdout:
        say("  | " + line.rstrip("\n"))
    proc.wait()
    problems = [] if proc.returncode == 0 else [f"the child exited with code {proc.returncode}"]
    problems += check_returned(out, names, say)
    seconds = time.time() - t0
    say(f"Dry run {'PASSED' if not problems else 'FAILED'} in {seconds:.0f} s" +
        ("" if not problems else ": " + "; ".join(problems)) + f"; the returned files are in {out}")
    scratch = [work / "steps", work / "cache"]
    size = sum(travel.folder_bytes(d) for d in scratch if d.is_dir())
    if not problems:
        for d in scratch:
            shutil.rmtree(d, ignore_errors=True)
        say(f"(its work folders, {size / travel.MiB:,.0f} MiB of tiny runs, were removed)")
    else:
        say(f"(its work folders, {size / travel.MiB:,.0f} MiB, are kept to read: {', '.join(map(str, scratch))})")
    return 0 if not problems else 1


def check_returned(out: Path, names, say=print) -> list[str]:
    """Every step came back, joins by SHA-256, and every file in it reads; within the limits."""
    problems = travel.return_problems(out)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            joined = travel.join(out, Path(tmp) / "results", Path(tmp) / "state", say=lambda s: None)
        except travel.TravelError as e:
            return problems + [str(e)]
        for name in names:
            if name not in joined:
                problems.append(f"{name} sent nothing back")
                continue
            record = json.loads((Path(tmp) / "results" / name / "outcome.json").read_text())
            if record["state"] not in ("finished",):
                problems.append(f"{name} ended {record['state']}")
            files = [p for p in sorted((Path(tmp) / "results" / name).rglob("*")) if p.is_file()]
            for p in files:
                error = _unreadable(p)
                if error:
                    problems.append(f"{name}: {p.name} is not readable ({error})")
            parts = [f"{q} {(out / q).stat().st_size / 1024:.0f} KiB" for q in record_files(out, name)]
            say(f"  {name:<15} {record['state']:<9} {len(files):>2} files in {', '.join(parts)}")
    return problems


def record_files(out: Path, name: str) -> list[str]:
    m = json.loads((out / travel.RETURN_MANIFEST).read_text())
    return [p["file"] for p in m["archives"][name]["parts"]]


def _unreadable(p: Path) -> str | None:
    try:
        if p.suffix == ".json":
            json.loads(p.read_text())
        elif p.suffix == ".jsonl":
            for line in p.read_text().splitlines():
                json.loads(line)
        elif p.suffix == ".safetensors":
            with safe_open(str(p), "pt") as f:
                for k in f.keys():
                    f.get_tensor(k)
        elif p.suffix == ".xml":
            ET.parse(p)
        elif p.name.startswith("events.out.tfevents"):  # a run's TensorBoard scalars (runs/run.py)
            _tfrecords(p)
        else:
            p.read_text(encoding="utf-8")
    except Exception as e:  # whatever fails to read is the answer
        return f"{type(e).__name__}: {e}"
    return None


def _tfrecords(p: Path) -> None:
    """Read a TensorBoard event file record by record (TFRecord framing: an 8-byte length, its 4-byte check,
    the record, its 4-byte check); a file cut short or padded raises."""
    import struct

    data, at = p.read_bytes(), 0
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"a record's header is cut short at byte {at}")
        (length,) = struct.unpack("<Q", data[at:at + 8])
        at += 12 + length + 4
        if at > len(data):
            raise ValueError(f"a record of {length} bytes runs past the end of the file")
