"""The run panels shared by the training pages (pre-train, fine-tune, runs, ablations, two
models): starting a run from a page, picking one, its live progress, numbers and curves, the
runs table, and a fine-tuned model's download and cached predictor.

A run is a directory (``bert_explorer.runs``); these panels only read it, through the run
system's finder (``runs/finder.py``) and words (``runs/report.py``); the curves are
``app/run_figures.py``. The pages poll a run: while it is active its panel is a Streamlit
*fragment* that redraws itself every two seconds and reruns the whole page once the run has ended.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time
import zipfile
from pathlib import Path

import pandas as pd
import streamlit as st

from . import exports
from .. import full_disk
from ..data.uploads.names import safe_filename, slug
from ..full_disk import DiskFull
from ..runs import finder
from ..runs.background import start_background
from ..runs.report import STATE_LABELS, duration_text, run_log_tail, run_row
from ..runs.run import ACTIVE_STATES, Run, duration
from ..runs.signals import command_of, processes_of
from ..tasks.metrics import small_dev_warning
from ..train.predict import Predictor
from ..train.pretrain_config import plateau_warning
from .run_figures import figures
from .state import by_inputs, weights_version, without_host_paths
from .roles import mode_sentence, writes_allowed


# ----- starting and picking runs ---------------------------------------------------------------
def launch(kind: str, config: dict, run_dir: Path, *, resume: bool = False,
           remember: tuple[str, str] | None = None, upload: Path | list[Path] | None = None) -> bool:
    """Start a background run from a page. When the run directory is busy, the page shows the
    one-sentence reason and keeps going, and removes ``upload`` (the copy or copies this attempt stored);
    ``remember`` = (session key, value) is set on success (e.g. which run to show next)."""
    stored_files = [upload] if isinstance(upload, Path) else upload or []

    def take_back() -> None:
        for stored in stored_files:
            stored.unlink(missing_ok=True)
            _drop_if_left_empty(stored.parent, run_dir)

    if not writes_allowed():  # the pages hide their buttons too; this is the one gate
        take_back()
        st.error(mode_sentence())
        return False
    press = _press_key(kind, config, run_dir, resume, stored_files)
    if (earlier := _pressed_moments_ago(press)) is not None:
        take_back()
        st.info(f"{earlier} was started moments ago with these same settings (the button was pressed twice), so no "
                f"second run was started; to start a twin of it, press again after {REPEAT_WINDOW_S:g} s.")
        return False
    st.session_state[_LAST_PRESS] = (press, time.monotonic(), str(run_dir))  # before the start: a rerun may cut in
    try:
        start_background(kind, config, run_dir, resume=resume)
    except (RuntimeError, ValueError, DiskFull) as e:  # busy, not a run's folder, no room: one sentence each
        st.session_state.pop(_LAST_PRESS, None)
        take_back()
        st.error(without_host_paths(str(e)))
        return False
    except BaseException:  # (no run started: a press again is no second press)
        st.session_state.pop(_LAST_PRESS, None)
        raise
    if remember:
        st.session_state[remember[0]] = remember[1]
    return True


# A double click on a start button reruns the page twice, each rerun with the button pressed: two runs of one
# click. A start of the same kind, settings and data as this browser tab's previous start within this many
# seconds is taken as that second press; a user who wants a twin run presses again after it.
REPEAT_WINDOW_S = 10.0
_LAST_PRESS = "_runs_view_last_press"


def _press_key(kind: str, config: dict, run_dir: Path, resume: bool, stored: list[Path]) -> str:
    """What a start is, apart from the folder a new run was given: its kind, its settings (with the new run's
    own folder taken out of the paths into it), the data it stored, and for a resume the run it resumes."""
    settings = json.dumps(config, sort_keys=True, default=str)
    if not resume:
        settings = settings.replace(str(run_dir.resolve()), "<run>").replace(str(run_dir), "<run>")
    digest = hashlib.sha256(f"{kind}\n{resume}\n{run_dir if resume else ''}\n{settings}".encode())
    for path in stored:
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())  # (an upload, already bounded in size)
        except OSError:
            digest.update(str(path).encode())
    return digest.hexdigest()


def _pressed_moments_ago(press: str) -> str | None:
    """The name of the run this tab started with the same ``press`` less than REPEAT_WINDOW_S ago and still
    starting or running, if any (one that failed at once, or was stopped since, may be started again)."""
    last = st.session_state.get(_LAST_PRESS)
    if last and last[0] == press and time.monotonic() - last[1] < REPEAT_WINDOW_S and Run(last[2]).is_active():
        return Path(last[2]).name
    return None


def _drop_if_left_empty(folder: Path, run_dir: Path) -> None:
    """Remove ``folder`` and its parents up to ``run_dir`` where an upload left them empty and no run
    was made there: a refused start leaves no half-made run behind."""
    for d in [folder, *folder.parents]:
        if d != run_dir and run_dir not in d.parents:
            break
        if Run(d).is_run():
            break
        try:
            d.rmdir()  # only an empty folder goes
        except OSError:
            break


def store_upload(directory: Path, filename: str, data: bytes) -> Path | None:
    """Write an upload into ``directory`` under its (cleaned) name, never over an existing file:
    two tabs starting the same run at once each keep their own copy, and the one whose start
    is refused removes its copy again (see :func:`launch`). On a full disk nothing is left half
    written, the page says so in one sentence, and None is returned (no run is started)."""
    try:
        return _store(directory, filename, data)
    except DiskFull as e:
        st.error(without_host_paths(str(e)))
        return None


def _store(directory: Path, filename: str, data: bytes) -> Path:
    stem, dot, ext = safe_filename(filename).rpartition(".")
    stem, ext = (stem, f".{ext}") if dot else (ext, "")
    made = [d for d in [directory, *directory.parents] if not d.exists()]
    with full_disk.saving(directory, f"keep the uploaded {safe_filename(filename)}", "free some space and start again"):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for i in range(1, 10_000):
                path = directory / (f"{stem}{ext}" if i == 1 else f"{stem}-{i}{ext}")
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    continue
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                except BaseException:
                    path.unlink(missing_ok=True)
                    raise
                return path
        except OSError:
            for d in made:  # innermost first: the folders this call made, if still empty
                try:
                    d.rmdir()
                except OSError:
                    pass
            raise
    raise RuntimeError(f"{directory} holds too many uploads called {filename}; choose another run name")


def watch_runs(kind: str, key: str, prefix: str, root: Path, empty: str,
               stop: bool = True) -> tuple[Run | None, dict]:
    """The page's "watch a run" block: pick one of the ``kind`` runs (the one in session key
    ``key`` first) and show its live panel; with no run yet, say ``empty`` and end the page
    (or, with ``stop=False``, return (None, {}) so the page can go on)."""
    runs = finder.run_groups(finder.find_runs(root, kind), root)[""]  # an ablation's cells stay on the Runs page
    if not runs:
        st.info(empty)
        if stop:
            st.stop()
        return None, {}
    run = pick_run("Run", runs, key, root)
    return run, run_panel(run, kind, prefix)


def pick_run(label: str, runs: list[Run], key: str, root: Path) -> Run:
    """A run chosen in a select box; ``st.session_state[key] = name`` before it is drawn (e.g.
    right after starting a run) selects that run, and a name that is gone (deleted) is forgotten."""
    names = [finder.rel_name(r.path, root) for r in runs]
    labels = {n: finder.run_label(r, root) for n, r in zip(names, runs)}
    if st.session_state.get(key) not in names:
        st.session_state.pop(key, None)
    return runs[names.index(st.selectbox(label, names, key=key, format_func=labels.get, persist_state="session"))]


def new_run_dir(prefix: str, root: Path) -> Path:
    """A folder for a new run under ``root`` that no run has yet: ``<prefix>-<date>-<time>``."""
    root = Path(root)
    base = f"{slug(prefix)}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = root / base, 2
    while path.exists():
        path, n = root / f"{base}-{n}", n + 1
    return path


def runs_table(root: Path, runs: list[Run] | None = None, inside: str = "") -> pd.DataFrame:
    """One row per run; ``inside`` an ablation, its name is left out of each run's label."""
    rows = [run_row(r, root) for r in (finder.find_runs(root) if runs is None else runs)]
    if inside:
        for row in rows:
            row["run"] = row["run"].removeprefix(f"{inside} ▸ ")
    return pd.DataFrame(rows, columns=["run", "kind", "state", "device", "started", "duration", "progress",
                                       "key metrics"])


def show_figures(figs: dict, prefix: str, per_row: int = 2) -> None:
    items = list(figs.items())
    for i in range(0, len(items), per_row):
        cols = st.columns(per_row)
        for col, (name, fig) in zip(cols, items[i:i + per_row]):
            exports.figure(fig, f"{prefix}_fig_{name}", container=col)


# ----- progress -------------------------------------------------------------------------------
def show_progress(status: dict, stopping: bool = False) -> None:
    """The run's bar: its state, its step, and the time left as its status last said it, less the time since.
    ``stopping``: a Stop was asked and the run has not taken it yet (it goes on to its next step or the end of
    its cell, then saves): said at once, where the bar read "running" for 11-16 s after the click."""
    state = status.get("state", "unknown")
    step, total = status.get("step") or 0, status.get("max_steps")
    if state == "queued":
        who = status.get("waiting_for")
        st.info(f"Queued: another run{f' ({Path(who).name})' if who else ''} is using the GPU. This one starts "
                f"by itself when the GPU is free (one training run per GPU at a time).")
    if state == "unknown" and status.get("error"):
        st.warning(f"This run: {status['error']}.")
    stopping = stopping and state in ACTIVE_STATES
    text = "stopping (a Stop was asked: it saves at its next step)" if stopping else STATE_LABELS.get(state, state)
    if total:
        text += f" · step {step:,} of {total:,}"
    eta, quiet = status.get("eta_s"), 0.0
    if eta is not None and status.get("updated"):  # said when the status was written: less the time since
        quiet = max(0.0, time.time() - float(status["updated"]))
    if state == "running" and not stopping and eta is not None and total and step < total:
        if quiet > max(60.0, eta):  # past what it said, with no step since: no count down to "about 0 s"
            text += f" · no new step for {duration_text(quiet)} (the machine may be busy)"
        else:
            eta = max(0.0, eta - quiet)
            end = time.strftime("%H:%M", time.localtime(time.time() + eta))
            text += f" · about {duration_text(eta)} left (ETA {end})"
    elif state not in ACTIVE_STATES and duration(status):
        text += f" · took {duration_text(duration(status))}"
    st.progress(min(1.0, step / total) if total else (1.0 if state == "finished" else 0.0), text=text)


def _pretrain_numbers(status: dict, rows: list[dict], lr=None, name: str = "this run") -> None:
    last = status.get("last") or {}
    ev = status.get("eval_final") or status.get("eval") or {}
    c = st.columns(5)
    c[0].metric("Loss", f"{last['loss']:.3f}" if "loss" in last else "—")
    c[1].metric("MLM accuracy (held out)", f"{ev['mlm_accuracy']:.1%}" if "mlm_accuracy" in ev else "—")
    c[2].metric("NSP accuracy (held out)", f"{ev['nsp_accuracy']:.1%}" if "nsp_accuracy" in ev else "—")
    c[3].metric("Tokens/s", f"{last['tokens_per_s']:,.0f}" if "tokens_per_s" in last else "—")
    c[4].metric("MFU", f"{last['mfu']:.1%}" if "mfu" in last else "n/a",
                help="Model FLOPs utilisation: achieved FLOP/s (tokens/s × FLOPs per token) over the "
                     "GPU's dense bf16 peak. Not shown on a CPU, which has no stated peak.")
    # a small corpus holds out a few sentences: 23 masked words and 3 pairs gave 30 % and 67 % (the Fine-tune
    # page warned of a small dev set, this one said nothing)
    for n, sample, unit in ((ev.get("eval_tokens"), "The held-out masked-word sample", "masked word"),
                            (ev.get("eval_pairs"), "The held-out next-sentence sample", "sentence pair")):
        if isinstance(n, int) and (why := small_dev_warning(n, sample, unit)):
            st.warning(why)
    if status.get("precision"):
        st.caption(f"Training precision: **{status['precision']}** on {status.get('device', 'this device')}.")
    final = status.get("eval_final") or {}
    # (a resumed run keeps its earlier part's final evaluation in its status while it trains again: not a verdict
    # on the model now training)
    if (warning := plateau_warning(final, lr)) and status.get("state") not in ACTIVE_STATES:
        # (named: above it, the page sets up a new run, perhaps of another size, which "this model" was read as)
        st.warning(f"The model of {name} {warning}")


def _panel(run: Run, status: dict, kind: str, prefix: str) -> None:
    rows = run.metrics()
    if kind == "pretrain":  # its status is written at log steps, its metrics at evaluations too (one count of
        # steps; a fine-tuning grid starts it again for each learning rate): the bar never trails the curves
        logged = max((r["step"] for r in rows if isinstance(r.get("step"), int)), default=0)
        status = {**status, "step": max(status.get("step") or 0, logged)}
    show_progress(status, stopping=run.stop_requested())
    if kind == "pretrain":
        _pretrain_numbers(status, rows, run.config().get("lr"), run.name)
    if status.get("state") in ("failed", "crashed"):
        st.error(without_host_paths(f"{status.get('error') or 'The run ended without finishing.'} The end of its log:"))
        st.code(without_host_paths(run_log_tail(run, 15)), language=None)
        st.caption(go_on_sentence(run, kind))
    elif status.get("state") == "stopped":  # (Stop's help promises a checkpoint to resume from: say where it is)
        st.caption(go_on_sentence(run, kind))
    show_figures(figures(kind, rows), prefix)


def go_on_sentence(run: Run, kind: str) -> str:
    """How a run that ended without finishing goes on (a killed run was shown its log and nothing more): from
    its newest checkpoint, on its page or from a terminal, or, with none, not at all."""
    kept = run.resumable_checkpoints()
    if not kept and kind == "pretrain":  # (its Resume trains it again from step 0: "start a new run" was said)
        return without_host_paths(f"It kept no checkpoint: Resume on the Pre-train page, or `bert-explorer pretrain "
                                  f"--output {run.path} --resume`, trains it again from step 0 with its settings.")
    if not kept:
        saves = (" (a fine-tuning saves one at each evaluation with “A checkpoint at each evaluation” ticked, "
                 "`--save-checkpoints`)" if kind == "finetune" else "")
        return f"It kept no checkpoint to resume from: start it again as a new run{saves}."
    page = {"pretrain": "Pre-train", "finetune": "Fine-tune"}.get(kind)
    if page is None:
        return "It kept checkpoints: its page resumes it."
    step = kept[-1].name.split('-')[-1]
    if (world := processes_of(run)) > 1:  # (the page's Resume starts one process, which such a run refuses)
        return without_host_paths(f"It kept a checkpoint at step {step}: trained by {world} processes, it goes on "
                                  f"from there with as many, `{command_of(run)} {kind} --output {run.path} --resume`.")
    return without_host_paths(f"It kept a checkpoint at step {step}: it goes on from there with Resume on the {page} "
                              f"page, or with `bert-explorer {kind} --output {run.path} --resume`.")


@st.fragment(run_every=2.0)
def _live(path: str, kind: str, prefix: str) -> None:
    run = Run(path)
    status = run.status()
    _panel(run, status, kind, prefix)
    if status.get("state") not in ACTIVE_STATES:
        st.rerun()  # the run ended: redraw the whole page (results, checkpoints, buttons)


def run_panel(run: Run, kind: str, prefix: str) -> dict:
    """Progress, numbers and curves of a run; redrawn every 2 s while it is active."""
    status = run.status()
    if status.get("state") in ACTIVE_STATES and run.is_active():
        _live(str(run.path), kind, prefix)
    else:
        _panel(run, status, kind, prefix)
    return status


# ----- fine-tuned models --------------------------------------------------------------------------
def own_files(path: Path) -> list[Path]:
    """The plain files inside ``path``, its subfolders included, never through a symbolic link: a link
    in a run folder may point anywhere on the host, and what it points at is not the run's to hand out."""
    found = []
    for folder, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        found += [Path(folder, f) for f in files if not os.path.islink(os.path.join(folder, f))
                  and os.path.isfile(os.path.join(folder, f))]
    return sorted(found)


def zip_dir(path: Path, top: str | None = None) -> bytes:
    """A zip (in memory) of a directory's own files (:func:`own_files`), under ``top/``."""
    path = Path(path)
    top = top or path.name
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in own_files(path):
            z.write(f, f"{top}/{f.relative_to(path).as_posix()}")
    return buf.getvalue()


@by_inputs(max_entries=2, show_spinner="Packing the model…")
def _zip_cached(path: str, top: str, stamp: tuple) -> bytes:
    return zip_dir(Path(path), top)


def zip_model(path: Path, top: str) -> bytes:
    """zip_dir, packed once per version of the folder (not on every rerun of the page)."""
    stamp = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in own_files(Path(path)))
    return _zip_cached(str(path), top, stamp)


@by_inputs(shared=True, max_entries=4, show_spinner="Loading the fine-tuned model…")
def _predictor(path: str, version: tuple):
    return Predictor(path)


def predictor(run: Run):
    """The run's fine-tuned model, cached under its weights' version (``state.weights_version``, as
    every page's cache): a run whose model or feature head is written again is loaded again."""
    return _predictor(str(run.path), weights_version(str(run.path)))
