"""A run is a directory (DESIGN.md). Pages and the CLI only ever talk to runs through it:

    run_dir/
      config.json          what was asked for (the CLI's --config reads the same file)
      status.json          state (queued/running/finished/stopped/failed), step, ETA, last metrics
      metrics.jsonl        one JSON object per logged step (train) or evaluation (eval)
      log.txt              human-readable log (stdout/stderr of a background run)
      checkpoints/step-N/  transformers-compatible checkpoints; the newest also holds
                           training_state.pt (optimiser, schedule, RNG, data position) to resume
      STOP                 present = "please stop cleanly at the next step"

Every file is written so that a crash at any moment leaves the previous version readable:
status.json is replaced atomically, metrics are appended line by line, checkpoints are
written to a temporary directory and renamed into place.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A finished child that nobody waited for is a zombie: not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class Run:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ----- files ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    def create(self, config: dict, kind: str) -> "Run":
        self.path.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(self.path / "config.json", {"kind": kind, **config})
        if not (self.path / "status.json").exists():
            self.write_status(state="queued", kind=kind, created=time.time())
        return self

    def config(self) -> dict:
        p = self.path / "config.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def status(self) -> dict:
        p = self.path / "status.json"
        try:
            status = json.loads(p.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"state": "unknown"}
        if status.get("state") == "running" and status.get("pid") and not pid_alive(status["pid"]):
            status["state"] = "crashed"  # the process died without saying so: resumable
        return status

    def write_status(self, **fields) -> None:
        p = self.path / "status.json"
        current = {}
        if p.exists():
            try:
                current = json.loads(p.read_text())
            except json.JSONDecodeError:
                pass
        current.update(fields, updated=time.time())
        _write_json_atomic(p, current)

    def log_metrics(self, record: dict) -> None:
        with (self.path / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def metrics(self) -> list[dict]:
        p = self.path / "metrics.jsonl"
        if not p.exists():
            return []
        out = []
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a crash mid-write
        return out

    def log(self, message: str) -> None:
        with (self.path / "log.txt").open("a") as f:
            f.write(time.strftime("%H:%M:%S ") + message + "\n")

    def checkpoints(self) -> list[tuple[int, Path]]:
        d = self.path / "checkpoints"
        if not d.exists():
            return []
        found = []
        for p in d.iterdir():
            if p.name.startswith("step-") and (p / "model.safetensors").exists():
                try:
                    found.append((int(p.name[5:]), p))
                except ValueError:
                    pass
        return sorted(found)

    def latest_checkpoint(self) -> Path | None:
        cps = [p for _, p in self.checkpoints() if (p / "training_state.pt").exists()]
        return cps[-1] if cps else None

    # ----- control --------------------------------------------------------------------------
    def request_stop(self) -> None:
        (self.path / "STOP").touch()

    def stop_requested(self) -> bool:
        return (self.path / "STOP").exists()

    def clear_stop(self) -> None:
        (self.path / "STOP").unlink(missing_ok=True)

    def wait(self, timeout: float = 600, poll: float = 0.5) -> dict:
        end = time.time() + timeout
        while time.time() < end:
            s = self.status()
            if s.get("state") in ("finished", "stopped", "failed", "crashed"):
                return s
            time.sleep(poll)
        return self.status()


def start_background(kind: str, config: dict, run_dir: str | Path, resume: bool = False) -> Run:
    """Launch ``bert-explorer <kind> --config run_dir/config.json`` as its own process session,
    so it keeps running when the browser tab (or the Streamlit server) goes away."""
    run = Run(run_dir).create(config, kind)
    run.clear_stop()
    cmd = [sys.executable, "-m", "bert_explorer.cli", kind, "--config", str(run.path / "config.json"),
           "--output", str(run.path), "--no-progress"]
    if resume:
        cmd.append("--resume")
    log = (run.path / "log.txt").open("a")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=os.getcwd())
    run.write_status(state="starting", pid=proc.pid)
    return run


def kill(run: Run) -> None:
    """Hard stop (the clean way is request_stop); the last checkpoint stays intact."""
    pid = run.status().get("pid")
    if pid_alive(pid):
        os.killpg(os.getpgid(pid), signal.SIGTERM)


def list_runs(root: str | Path) -> list[Run]:
    root = Path(root)
    if not root.exists():
        return []
    runs = [Run(p) for p in root.iterdir() if (p / "status.json").exists()]
    return sorted(runs, key=lambda r: r.status().get("created", 0), reverse=True)
