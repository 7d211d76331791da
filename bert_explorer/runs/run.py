"""A run is a directory (docs/DESIGN.md). Pages and the CLI only ever talk to runs through it:

    run_dir/
      config.json          what was asked for (the CLI's --config reads the same file)
      status.json          state (queued/running/finished/stopped/failed), step, ETA, last metrics
      metrics.jsonl        one JSON object per logged step (train) or evaluation (eval)
      log.txt              human-readable log (stdout/stderr of a background run)
      checkpoints/step-N/  transformers-compatible checkpoints; the newest also holds
                           training_state.pt (optimiser, schedule, RNG, data position) to resume
      STOP                 present = "please stop cleanly at the next step"
      .start.lock          held while a run is being started or deleted (see start_background)
      .writer.lock         held by the one process that writes the run (see writer_lock)

Every run has its own directory, and one process writes it (``runs/lock.py``: a second writer
is refused with one sentence, the CLI exits 2); ``runs/background.py`` starts a run as a
process of its own and refuses a directory that a live process is still using, and on one GPU
background runs queue (``runs/gpu_queue.py``).

Every file is written so that a crash at any moment leaves the previous version readable:
status.json is replaced atomically (``atomic.py``), metrics are appended line by line,
checkpoints are written to a temporary directory and renamed into place.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from .. import atomic
from .lock import process_alive, process_start

ACTIVE_STATES = ("starting", "queued", "running")
DONE_STATES = ("finished", "stopped", "failed", "crashed")


class Run:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ----- files ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    def create(self, config: dict, kind: str) -> "Run":
        self.path.mkdir(parents=True, exist_ok=True)
        atomic.write_json(self.path / "config.json", {"kind": kind, **config}, indent=2, default=str)
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
        if (status.get("state") in ACTIVE_STATES and status.get("pid")
                and not process_alive(status["pid"], status.get("pid_start"))):
            status["state"] = "crashed"  # the process died without saying so: resumable
        return status

    def is_active(self) -> bool:
        """A live process is (or will soon be) working in this directory."""
        s = self.status()
        return s.get("state") in ACTIVE_STATES and process_alive(s.get("pid"), s.get("pid_start"))

    def write_status(self, **fields) -> None:
        p = self.path / "status.json"
        current = {}
        if p.exists():
            try:
                current = json.loads(p.read_text())
            except json.JSONDecodeError:
                pass
        if "pid" in fields:  # remember which process this pid is, in case it is later reused
            fields = {**fields, "pid_start": process_start(fields["pid"])}
        current.update(fields, updated=time.time())
        atomic.write_json(p, current, indent=2, default=str)

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
            if s.get("state") in DONE_STATES:
                return s
            time.sleep(poll)
        return self.status()
