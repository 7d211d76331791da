"""A run is a directory (docs/DESIGN.md). Pages and the CLI only ever talk to runs through it:

    run_dir/
      config.json          what was asked for (the CLI's --config reads the same file)
      status.json          state (queued/running/finished/stopped/failed), step, ETA, last metrics
      metrics.jsonl        one JSON object per logged step (train) or evaluation (eval)
      log.txt              human-readable log (stdout/stderr of a background run)
      checkpoints/step-N/  transformers-compatible checkpoints; the newest two also hold
                           training_state.pt (optimiser, schedule, RNG, data position) to resume
      set_aside/step-N/    checkpoints that could not be resumed from, moved out of the way of
                           a resume from an older one (never overwritten, never deleted unasked)
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

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from .. import atomic
from ..processes import process_alive, process_start

RUNS_DIR = Path("runs")
RUNS_ENV = "BERT_EXPLORER_RUNS"  # another runs folder (tests point it at a temporary one)


def runs_root() -> Path:
    """Where runs live: ./runs, or the folder named by $BERT_EXPLORER_RUNS."""
    return Path(os.environ.get(RUNS_ENV) or RUNS_DIR)


RUN_KINDS = ("pretrain", "finetune", "ablate")
KIND_WORDS = {"pretrain": "pre-training", "finetune": "fine-tuning", "ablate": "ablation"}
ACTIVE_STATES = ("starting", "queued", "running")
LAUNCH_GRACE_S = 40.0  # a starter waits 30 s for its process's pid (runs.background), then says "failed"
WRITER_LOCK_NAME = ".writer.lock"  # held by the one process that writes a run (``runs.lock``)
DONE_STATES = ("finished", "stopped", "failed", "crashed")
LAUNCH_TO_START_S = 1800.0  # the longest a launched process takes to begin its part (82 s seen at load 7): an older
# launch, left by a process killed before its start, is not taken by a later part begun from a terminal

# What a run writes at its top level, and nothing else: deleting a run removes exactly these, and
# a folder holding anything more is not the run's alone (it is refused as a new run's folder, and
# deleting it is refused). Pre-training: checkpoints/, tokenizer/, timelapse.json, set_aside/, an
# uploaded corpus (corpus.txt, corpus-2.txt, ...); every training run: tensorboard/; fine-tuning: model/ or feature_head/, metrics.json,
# dev_predictions.json, an uploaded data/; an ablation: plan.json, results.jsonl, vocab/, data/ and its
# runs in pretrain/ and cells/ (each a run by the same rule); the locks of the run system.
RUN_FILES = {"config.json", "status.json", "metrics.jsonl", "metrics.json", "log.txt", "STOP", "timelapse.json",
             "dev_predictions.json", "plan.json", "results.jsonl", ".start.lock", ".writer.lock", ".gpu.lock"}
RUN_FOLDERS = {"checkpoints", "tokenizer", "model", "feature_head", "data", "vocab", "set_aside", "tensorboard",
               ".gpu.lock.queue"}
NESTED_RUNS = {"pretrain", "cells"}  # an ablation's own runs
_UPLOADED_CORPUS = re.compile(r"corpus(-\d+)?\.txt")
_CHECKPOINT = re.compile(r"step-\d+")
# The folders of the runs root that belong to the app, never to a run.
UPLOADS_DIR = "uploaded-models"
APP_FOLDERS = {UPLOADS_DIR: "where the app keeps uploaded checkpoints"}


METRICS_READ_BYTES = 16 * 2**20  # a longer metrics.jsonl is read thinned (Run.metrics)


def metrics_record(line: bytes | str) -> dict | None:
    """One line of metrics.jsonl as its record, or None where it is none (cut mid-write, not text, not an object:
    a list there stopped every later estimate and the Runs page with a traceback)."""
    try:
        record = json.loads(line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line)
    except (json.JSONDecodeError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


TENSORBOARD_DIR = "tensorboard"  # a run's TensorBoard event files, beside metrics.jsonl
NOT_SCALARS = ("step", "split", "time", "epoch", "lr_setting")


class Run:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        # The last step a training loop finished in this process: status.json has it only as of the
        # last log line, and a run that fails in between says the step it really reached.
        self.step_reached: int | None = None
        self._tensorboard = None  # its TensorBoard writer once a metric is logged; False without tensorboard
        self._metrics_ended = False  # metrics.jsonl's last line checked whole before this object first appends
        # The signal that asked this process to stop (``runs/signals.py``), or None: a Stop like the STOP
        # file's, kept in memory because a file could outlive the process and stop the run's resume at once.
        self.signalled: int | None = None
        self._signal_taken = False

    # ----- files ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    def is_run(self) -> bool:
        """Has a run been made here: settings that name a kind of run, or a status a run writes (a
        checkpoint folder's config.json is a model's, not a run's; a person's own status.json or
        config.json, which a run would write over, is not a run's either)?"""
        if self.kind() is not None:
            return True
        return self._status_file().get("state") in (*ACTIVE_STATES, *DONE_STATES)

    def kind(self) -> str | None:
        """"pretrain", "finetune" or "ablate": the kind of run made here, from its settings or its status."""
        kind = self.config().get("kind") or self._status_file().get("kind")
        return kind if kind in RUN_KINDS else None

    def _status_file(self) -> dict:
        try:
            status = json.loads((self.path / "status.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return status if isinstance(status, dict) else {}

    def create(self, config: dict, kind: str, own: bool = True) -> "Run":
        """Write the run's settings (and a first status), in a folder that is new, empty or this
        run's already; any other folder is refused (:func:`new_run_refusal`), and so is a run of
        another kind (its settings, log and status would be written over). ``own``: the run's first
        status names this process (a starter that launches another names none: its launcher writes its own)."""
        if refusal := new_run_refusal(self.path, kind):
            raise ValueError(refusal)
        self.path.mkdir(parents=True, exist_ok=True)
        atomic.write_json(self.path / "config.json", {"kind": kind, **config}, indent=2, default=str)
        if not (self.path / "status.json").exists():
            # starting, by this process: a command killed while it read its data left "queued" and no pid, listed as
            # waiting for the GPU for ever ("queued" is the GPU queue's, which names its process too)
            self.write_status(state="starting", kind=kind, created=time.time(),
                              pid=os.getpid() if own else None)
        return self

    def config(self) -> dict:
        p = self.path / "config.json"
        try:
            config = json.loads(p.read_text()) if p.exists() else {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return config if isinstance(config, dict) else {}

    def status(self) -> dict:
        p = self.path / "status.json"
        try:
            status = json.loads(p.read_text(encoding="utf-8"))
        except OSError:
            return {"state": "unknown"}
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            status = None
        if not isinstance(status, dict):  # (shown as "unknown" with no word of why)
            return {"state": "unknown", "error": "its status.json cannot be read (it is not a JSON object: cut, or "
                                                 "edited), so its state is unknown; its other files are kept"}
        if (status.get("state") in ACTIVE_STATES and status.get("pid")
                and not process_alive(status["pid"], status.get("pid_created"))):
            status["state"] = "crashed"  # the process died without saying so: resumable
            status["last_seen"] = self.last_seen()
        return status

    def last_seen(self) -> float | None:
        """When the run's process last wrote anything (its status, log or metrics): the end of a
        run that died without saying so, whose status may be hours older than its last log line."""
        times = []
        for name in ("status.json", "log.txt", "metrics.jsonl"):
            try:
                times.append((self.path / name).stat().st_mtime)
            except OSError:
                pass
        return max(times) if times else None

    def is_active(self) -> bool:
        """A live process is (or will soon be) working in this directory: one of its pid, or one a starter is
        launching now (state "starting" with no pid yet, written within :data:`LAUNCH_GRACE_S`: a double click
        on a page's button started a second run beside the first in that gap)."""
        s = self.status()
        if s.get("state") == "starting" and not s.get("pid"):
            return time.time() - float(s.get("updated") or 0) < LAUNCH_GRACE_S
        return s.get("state") in ACTIVE_STATES and process_alive(s.get("pid"), s.get("pid_created"))

    def write_status(self, **fields) -> None:
        p = self.path / "status.json"
        current = {}
        if p.exists():
            try:
                current = json.loads(p.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                pass
            if not isinstance(current, dict):  # (a damaged one is written anew: a list stopped every write)
                current = {}
        if "pid" in fields:  # remember which process this pid is (its creation time), in case it is later reused
            fields = {**fields, "pid_created": process_start(fields["pid"])}
        if "started" in fields:
            if current.get("started") and current.get("started_by") != fields.get("pid"):
                fields = _another_part(current, fields)
            fields["started_by"] = fields.get("pid")  # (its launcher wrote the same pid before it started)
            # the part's process, launched by the app (``launched``: its launcher's write), began before it began to
            # read its data: its start is part of its time (82 s at load 7, where "took 1 min 03 s" was said of a run
            # the user waited 2 min 14 s for); a later part not launched so is not given this one's launch
            launched, began = current.get("launched"), fields.get("part_started", fields["started"])
            fields["part_launched"] = launched if isinstance(launched, (int, float)) and not isinstance(
                launched, bool) and began - LAUNCH_TO_START_S <= launched <= began else None
            fields["launched"] = None
        elif fields.get("state") in DONE_STATES:  # a launch that ended before its part started is no later part's
            fields["launched"] = None
        now = time.time()
        if fields.get("started_by", current.get("started_by")) == os.getpid():
            fields["part_seen"] = now  # the part's own last sign of life (a starter's writes are not)
        current.update(fields, updated=now)
        atomic.write_json(p, current, indent=2, default=str)
        if fields.get("state") in DONE_STATES:
            self.close_tensorboard()

    def close_tensorboard(self) -> None:
        """End the TensorBoard writer (and its thread) of a run that ended: an ablation makes a run a cell,
        and each writer left open kept a thread for the life of the process. A later metric opens another."""
        if self._tensorboard:
            self._tensorboard.close()
            self._tensorboard = None

    def log_metrics(self, record: dict) -> None:
        with (self.path / "metrics.jsonl").open("a+b") as f:
            if not self._metrics_ended:
                # a line a kill cut mid-write is ended first: appended to, it swallowed the resumed run's first
                # record (both unreadable as one line); alone it is skipped as a cut line (metrics())
                self._metrics_ended = True
                if f.seek(0, os.SEEK_END) > 0:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        f.write(b"\n")
            f.write((json.dumps(record) + "\n").encode())
            f.flush()
        self._to_tensorboard(record)

    def _to_tensorboard(self, record: dict) -> None:
        """The same record as TensorBoard scalars in ``tensorboard/`` (``tensorboard --logdir runs/`` shows
        every run), when tensorboard is installed (``pip install -e ".[tensorboard]"``): tagged
        ``<split>/<metric>`` (``lr 3e-05/dev/accuracy`` in a learning-rate grid) at the record's step."""
        if self._tensorboard is False or not isinstance(record.get("step"), int):
            return
        if self._tensorboard is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is an optional extra
                self._tensorboard = False
                return
            # a resume's steps trained again: the earlier process's events from there on are dropped, as their
            # lines of metrics.jsonl were set aside (TensorBoard showed steps 910-930 twice)
            self._tensorboard = SummaryWriter(str(self.path / TENSORBOARD_DIR),
                                              purge_step=getattr(self, "_purge_from", None))
        prefix = str(record.get("split", "train"))
        if isinstance(record.get("lr_setting"), (int, float)):
            prefix = f"lr {record['lr_setting']:g}/{prefix}"
        for key, value in record.items():
            if key not in NOT_SCALARS and isinstance(value, (int, float)) and not isinstance(value, bool):
                self._tensorboard.add_scalar(f"{prefix}/{key}", value, record["step"], walltime=record.get("time"))
        self._tensorboard.flush()  # (a run killed later keeps what it logged, as metrics.jsonl does)

    def metrics(self) -> list[dict]:
        """The records of metrics.jsonl, in order. A line that is no record (cut by a crash mid-write, bytes that
        are not text, a JSON value that is not an object) is skipped. A file longer than
        :data:`METRICS_READ_BYTES` (a long run that logged every step: 100 MB took 880 MB and 2 s a read, at
        every redraw of a page) is read thinned: every evaluation line, and every k-th training line, its last
        one kept, so that about that many bytes are read as records."""
        p = self.path / "metrics.jsonl"
        try:
            every = max(1, -(-p.stat().st_size // METRICS_READ_BYTES))
            f = p.open("rb")
        except OSError:
            return []
        out, n_train, skipped = [], 0, None  # skipped: (where it goes, the line) of the last training line left out
        with f:
            for raw in f:
                if every > 1 and b'"split": "train"' in raw:
                    n_train += 1
                    if (n_train - 1) % every:
                        skipped = (len(out), raw)
                        continue
                    skipped = None
                if (record := metrics_record(raw)) is not None:
                    out.append(record)
        if skipped is not None and (record := metrics_record(skipped[1])) is not None:
            out.insert(skipped[0], record)
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
        """The newest checkpoint that holds a training state (readable or not: pre-training's
        ``resume_point`` tries each, newest first)."""
        cps = self.resumable_checkpoints()
        return cps[-1] if cps else None

    def resumable_checkpoints(self) -> list[Path]:
        """The checkpoints holding a ``training_state.pt``, oldest first."""
        return [p for _, p in self.checkpoints() if (p / "training_state.pt").exists()]

    def set_aside(self, checkpoint: Path) -> Path:
        """Move ``checkpoint`` to ``set_aside/`` (under a new name if one is there already), so that a
        resume from an older step trains past it without writing over it."""
        d = self.path / "set_aside"
        d.mkdir(exist_ok=True)
        target, n = d / checkpoint.name, 2
        while target.exists():
            target, n = d / f"{checkpoint.name}-{n}", n + 1
        checkpoint.rename(target)
        return target

    def set_aside_metrics_after(self, step: int) -> int:
        """Move the lines of metrics.jsonl logged after ``step`` (the steps a resume from ``step`` trains
        again) to ``set_aside/metrics-after-step-<step>.jsonl``, so that metrics.jsonl holds each step once;
        the number of lines moved. Nothing is lost: they are kept beside the checkpoints set aside."""
        p = self.path / "metrics.jsonl"
        if not p.is_file():
            return 0
        kept, later = [], []
        for line in p.read_bytes().splitlines():  # (bytes: a line that is not UTF-8 stopped every resume)
            record = metrics_record(line)  # (a line cut off by a kill, or no record: kept where it is, as the
            logged = record.get("step", 0) if record else 0  # readers skip it)
            (later if isinstance(logged, (int, float)) and logged > step else kept).append(line)
        if later:
            d = self.path / "set_aside"
            d.mkdir(exist_ok=True)
            with (d / f"metrics-after-step-{step}.jsonl").open("ab") as f:
                f.write(b"\n".join(later) + b"\n")
            with atomic.replacing(p) as tmp:
                tmp.write_bytes(b"".join(line + b"\n" for line in kept))
        self._purge_from = step + 1  # (for the TensorBoard events too, where a writer starts after this)
        return len(later)

    def clear_leftovers(self) -> list[Path]:
        """Remove what a killed write left behind (``atomic``'s temporary files and folders) in the run
        and in its checkpoints/: only a run's writer calls this, so none of them is still being written."""
        gone = []
        for folder in (self.path, self.path / "checkpoints"):
            for p in atomic.leftovers(folder):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                gone.append(p)
        return gone

    # ----- control --------------------------------------------------------------------------
    def request_stop(self) -> None:
        (self.path / "STOP").touch()

    def stop_requested(self) -> bool:
        """A Stop asked and not yet taken: the STOP file, or a signal to this process."""
        return (self.signalled is not None and not self._signal_taken) or (self.path / "STOP").exists()

    def clear_stop(self) -> None:
        """The Stop is taken (what runs after it, a last evaluation, is not cut short); ``signalled`` still
        says which signal asked for it."""
        (self.path / "STOP").unlink(missing_ok=True)
        self._signal_taken = self.signalled is not None

    def wait(self, timeout: float = 600, poll: float = 0.5) -> dict:
        """The run's status once it has ended and its process has let go of the run: the end is written before
        the writer lock is released (tens of milliseconds on a busy machine), and a resume at once found the run
        busy."""
        from ..file_lock import is_held

        end = time.time() + timeout
        while time.time() < end:
            s = self.status()
            if s.get("state") in DONE_STATES and not is_held(self.path / WRITER_LOCK_NAME):
                return s
            time.sleep(poll)
        return self.status()


# ----- what belongs to a run -------------------------------------------------------------------------
def is_run_entry(name: str, is_dir: bool) -> bool:
    """Does a run write an entry of this name at its top level (``RUN_FILES``, ``RUN_FOLDERS``, ...)?"""
    if atomic.is_leftover(name):
        return True
    if is_dir:
        return name in RUN_FOLDERS or name in NESTED_RUNS
    return name in RUN_FILES or bool(_UPLOADED_CORPUS.fullmatch(name))


def foreign_entries(path: str | Path) -> list[Path]:
    """What lies in the run folder ``path`` that no run writes: entries of other names at its top
    level or in its checkpoints/, and whatever is foreign in the runs of an ablation's pretrain/ and
    cells/ (each of which must itself be a run). A symbolic link is foreign wherever it points."""
    path = Path(path)
    if not path.is_dir():
        return []
    found = []
    for p in sorted(path.iterdir()):
        if p.is_symlink() or not is_run_entry(p.name, p.is_dir()):
            found.append(p)
        elif p.name == "checkpoints" and p.is_dir():
            found += [c for c in sorted(p.iterdir())
                      if c.is_symlink() or not (c.is_dir() and (_CHECKPOINT.fullmatch(c.name) or atomic.is_leftover(c.name)))]
        elif p.name in NESTED_RUNS and p.is_dir():
            for inner in sorted(p.iterdir()):
                found += foreign_entries(inner) if inner.is_dir() and not inner.is_symlink() and Run(inner).is_run() \
                    else [inner]
    return found


def shown_entries(paths: list[Path], root: Path, most: int = 3) -> str:
    """"notes.txt, my-bert/ and 4 more": what a refusal names."""
    names = [p.relative_to(root).as_posix() + ("/" if p.is_dir() and not p.is_symlink() else "") for p in paths]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def new_run_refusal(path: str | Path, kind: str | None = None, stored_first: bool = True) -> str | None:
    """Why a run (of ``kind``, where given) cannot be written in ``path``, in one sentence, or None: it is
    one of the app's own folders in the runs root (or lies inside one), a file, a run of another kind (its
    settings, log and status would be written over), or it is not a run yet and already holds files.
    ``stored_first``: an upload may have been stored there for the run (a corpus, a ``data/``); where the
    check comes before anything is stored (a command's ``--output``, a page before it stores), pass False:
    such files are then a person's own, and a run's deletion would later take them away."""
    given, path, root = Path(path), Path(path).resolve(), runs_root().resolve()
    for name, what in APP_FOLDERS.items():
        if path == root / name or root / name in path.parents:
            return f"{runs_root() / name} is {what}, not a run; choose another name for the run"
    path = given
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder; give a new or empty folder for the run"
    if Run(path).is_run():
        return _another_kind(path, kind)
    # a run may hold runs (an ablation its cells; a warm start beside its source), which the Runs page lists and
    # a deletion names, but not in one of a run's own folders: runs/a/set_aside was a run that a's next resume
    # could write into and the page listed as "a/set_aside"
    for inner, above in zip([path.absolute(), *path.absolute().parents], list(path.absolute().parents)[:12]):
        if inner.name in RUN_FOLDERS and above.is_dir() and Run(above).is_run():
            return (f"{path} lies inside {inner.name}/ of the run {above}, a folder the run writes itself; choose a "
                    "folder outside it")
    foreign = foreign_entries(path)
    if foreign:
        return (f"{path} already holds files that no run writes ({shown_entries(foreign, path)}); choose a new "
                "or empty folder for the run, so that nothing in it is overwritten")
    # files of a run's names in a folder that is no run: a person's own (their config.json, log.txt), which the
    # run would write over; only what a start puts there first (an uploaded corpus or data, locks) is not refused
    taken = [p for p in sorted(path.iterdir()) if not _before_a_run(p, stored_first)] if path.is_dir() else []
    if taken and Run(path).is_run():
        # a start beside this one made the run between the look above and the listing (two tabs pressing Start
        # on one folder: the files were its, config.json first); whether it may go on is the start lock's to say
        return _another_kind(path, kind)
    if taken:
        return (f"{path} holds {shown_entries(taken, path)} but is not a run's folder; choose a new or empty folder "
                "for the run, so that nothing in it is overwritten")
    return None


def _another_kind(path: Path, kind: str | None) -> str | None:
    """Why a run of ``kind`` may not be written in the run ``path``: it is a run of another kind."""
    mine = Run(path).kind()
    if kind is not None and mine not in (None, kind):
        return (f"{path} holds a {KIND_WORDS[mine]} run; choose a new folder for this {KIND_WORDS.get(kind, kind)}, "
                "so that nothing in that run is overwritten")
    return None


def restart_refusal(path: str | Path) -> str | None:
    """Why a new run (not a resume) may not start in ``path``, an existing pre-training or fine-tuning that
    logged steps, in one sentence, or None (a live writer's is :func:`runs.lock.writer_busy`'s to say, asked
    first). A run killed before its first checkpoint was started anew
    there without a word: its settings replaced, its metrics.jsonl then holding two runs' steps. One that
    logged nothing (it failed reading its data) may start again."""
    run = Run(path)
    if not run.is_run() or run.kind() not in ("pretrain", "finetune"):
        return None
    trained = [m["step"] for m in run.metrics() if isinstance(m.get("step"), int)]
    if not trained:
        return None
    state = run.status().get("state")
    ended = f"ended {state}" if state in DONE_STATES else "ended without finishing"  # (killed: "running" still)
    again = (f", or train it again from step 0 with its own settings: `bert-explorer {run.kind()} --output {run.path} "
             "--resume`" if run.kind() == "pretrain" and not run.resumable_checkpoints() else "")
    return (f"{run.path} holds a {KIND_WORDS[run.kind()]} run that logged {max(trained):,} step(s) and {ended}; "
            f"a new run there would replace its settings and mix its metrics, so choose a new folder (or delete that "
            f"run first){again}")


def _before_a_run(p: Path, stored_first: bool = True) -> bool:
    """What a run's folder may hold before the run is made there: an upload stored first (a corpus, data/;
    only where one may have been), the start's locks, a cut-off write's leftovers."""
    return (atomic.is_leftover(p.name)
            or p.name in ("STOP", ".start.lock", ".writer.lock", ".gpu.lock", ".gpu.lock.queue")
            or (stored_first and ((p.name == "data" and p.is_dir()) or bool(_UPLOADED_CORPUS.fullmatch(p.name)))))


def remove_run_files(path: str | Path) -> None:
    """Delete exactly what a run wrote in ``path`` (see :func:`foreign_entries`; the caller has checked
    that there is nothing else), links removed without following them, then the folder once it is empty."""
    path = Path(path)
    locks = []
    for p in sorted(path.iterdir()):
        if p.name in (".start.lock", ".writer.lock"):
            locks.append(p)  # held by the deleter: they go last
        elif p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    for p in locks:
        # Windows refuses to remove a file that is open, and the deleter holds both: there the folder
        # stays, holding only them, which is no run (nor anything a new run refuses)
        with contextlib.suppress(PermissionError):
            p.unlink(missing_ok=True)
    try:
        path.rmdir()
    except OSError:
        pass  # something was put there meanwhile: it stays, with the folder


def _another_part(before: dict, fields: dict) -> dict:
    """A resumed run starts another part: it keeps the run's first start, and the time its earlier parts
    took is added to this one's (:func:`duration`), so that a run stopped and resumed does not say it took
    only its last part. The part before ended when it said so (``finished``), or, cut short, at its last
    write (``part_seen``); the starter's writes since then are not its time."""
    start = part_start(before)
    end = before.get("finished") or before.get("part_seen") or start
    return {"finished": None, **fields, "started": before["started"], "part_started": fields["started"],
            "earlier_seconds": float(before.get("earlier_seconds") or 0.0) + max(0.0, end - start)}


def part_start(status: dict) -> float | None:
    """When the run's latest part began: when the app launched its process, where it did, else when it began to
    read its data (``started``), else when the run was made."""
    start = status.get("part_started") or status.get("started") or status.get("created")
    launched = status.get("part_launched")
    if isinstance(launched, (int, float)) and not isinstance(launched, bool) and start and launched < start:
        return float(launched)
    return start


def duration(status: dict) -> float | None:
    """Seconds the run has taken (to now while it is active), or None before it started: from its start to
    its end, or, for a run stopped and resumed, its earlier parts' time and this part's (``Run.write_status``)."""
    start = part_start(status)
    if not start:
        return None
    state = status.get("state")
    end = time.time() if state in ACTIVE_STATES else (  # a crash: its last sign of life
        (status.get("last_seen") if state == "crashed" else None) or status.get("finished")
        or status.get("last_seen") or status.get("updated") or start)
    return float(status.get("earlier_seconds") or 0.0) + max(0.0, end - start)
