"""Helpers shared by the training pages (pre-train, fine-tune, runs): where runs live, how a
run's progress and curves are drawn, the runs table and uploads. (The time estimate is in
``train/estimate.py``, the run finder in ``train/run_finder.py``.)

A run is a directory (``bert_explorer.train.runs``); these helpers only read it. The pages
poll it: while a run is active its panel is a Streamlit *fragment* that redraws itself every
two seconds and reruns the whole page once the run has ended.

The runs root is ``RUNS_DIR`` (``./runs``) unless the environment variable
``BERT_EXPLORER_RUNS`` names another folder (tests point it at a temporary one).
"""
from __future__ import annotations

import io
import json
import os
import time
import zipfile
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from . import exports
from ..train import run_finder
from ..train.runs import ACTIVE_STATES, Run, start_background
from ..data.uploads.names import safe_filename, slug
from .state import mode_sentence, runs_root, without_host_paths, writes_allowed


STATE_LABELS = {"queued": "queued (waiting for the GPU)", "starting": "starting", "running": "running",
                "finished": "finished", "stopped": "stopped", "failed": "failed",
                "crashed": "crashed (the process ended without finishing)", "unknown": "unknown"}
LABELS = {"loss": "loss", "mlm_loss": "MLM loss", "nsp_loss": "NSP loss", "mlm_accuracy": "MLM accuracy",
          "nsp_accuracy": "NSP accuracy", "mlm_perplexity": "MLM perplexity", "tokens_per_s": "tokens/s",
          "mfu": "MFU", "accuracy": "accuracy", "macro_f1": "macro-F1", "f1": "F1", "mcc": "MCC",
          "pearson": "Pearson r", "spearman": "Spearman ρ", "exact_match": "exact match"}
NOT_METRICS = {"step", "time", "epoch", "lr_setting", "split", "eval_tokens", "total", "n_true", "n_pred",
               "n_correct", "null_threshold"}


# ----- where runs are -------------------------------------------------------------------------

def find_runs(root: Path | None = None, kind: str | None = None, depth: int = 3) -> list[Run]:
    """Every run under ``root`` (the runs folder by default), newest first; ``kind`` keeps one
    kind (pretrain, finetune, ablate). See ``train/run_finder.py``."""
    found = run_finder.find_runs(runs_root() if root is None else Path(root), depth)
    return [r for r in found if run_kind(r) == kind] if kind else found


def launch(kind: str, config: dict, run_dir: Path, *, resume: bool = False,
           remember: tuple[str, str] | None = None, upload: Path | None = None) -> bool:
    """Start a background run from a page. When the run directory is busy, the page shows the
    one-sentence reason and keeps going, and removes ``upload`` (the copy this attempt stored);
    ``remember`` = (session key, value) is set on success (e.g. which run to show next)."""
    if not writes_allowed():  # the pages hide their buttons too; this is the one gate
        st.error(mode_sentence())
        return False
    try:
        start_background(kind, config, run_dir, resume=resume)
    except RuntimeError as e:
        if upload is not None:
            upload.unlink(missing_ok=True)
        st.error(str(e))
        return False
    if remember:
        st.session_state[remember[0]] = remember[1]
    return True


def store_upload(directory: Path, filename: str, data: bytes) -> Path:
    """Write an upload into ``directory`` under its (cleaned) name, never over an existing file:
    two tabs starting the same run at once each keep their own copy, and the one whose start
    is refused removes its copy again (see :func:`launch`)."""
    directory.mkdir(parents=True, exist_ok=True)
    stem, dot, ext = safe_filename(filename).rpartition(".")
    stem, ext = (stem, f".{ext}") if dot else (ext, "")
    for i in range(1, 10_000):
        path = directory / (f"{stem}{ext}" if i == 1 else f"{stem}-{i}{ext}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path
    raise RuntimeError(f"{directory} holds too many uploads called {filename}; choose another run name")


def watch_runs(kind: str, key: str, prefix: str, root: Path, empty: str,
               stop: bool = True) -> tuple[Run | None, dict]:
    """The page's "watch a run" block: pick one of the ``kind`` runs (the one in session key
    ``key`` first) and show its live panel; with no run yet, say ``empty`` and end the page
    (or, with ``stop=False``, return (None, {}) so the page can go on)."""
    runs = run_groups(find_runs(root, kind), root)[""]  # an ablation's cells stay on the Runs page
    if not runs:
        st.info(empty)
        if stop:
            st.stop()
        return None, {}
    run = pick_run("Run", runs, key, root)
    return run, run_panel(run, kind, prefix)


def pick_run(label: str, runs: list[Run], key: str, root: Path | None = None) -> Run:
    """A run chosen in a select box; ``st.session_state[key] = name`` before it is drawn (e.g.
    right after starting a run) selects that run, and a name that is gone (deleted) is forgotten."""
    names = [rel_name(r, root) for r in runs]
    labels = {n: run_label(r, root) for n, r in zip(names, runs)}
    if st.session_state.get(key) not in names:
        st.session_state.pop(key, None)
    return runs[names.index(st.selectbox(label, names, key=key, format_func=labels.get))]


def run_label(run: Run, root: Path | None = None) -> str:
    return run_finder.run_label(run, runs_root() if root is None else Path(root))


def run_groups(runs: list[Run], root: Path | None = None) -> dict[str, list[Run]]:
    """{"": the user's own runs (ablations as one run each), ablation name: the runs inside it}."""
    root = runs_root() if root is None else Path(root)
    groups: dict[str, list[Run]] = {"": []}
    for r in runs:
        abl = run_finder.ablation_of(r.path, root)
        groups.setdefault(run_finder.rel_name(abl, root) if abl else "", []).append(r)
    return groups


def group_title(group: str, groups: dict[str, list[Run]]) -> str:
    n = len(groups[group])
    return f"your runs ({n})" if not group else f"inside ablation {group} ({n} runs)"


def run_kind(run: Run) -> str:
    return run.status().get("kind") or run.config().get("kind") or "?"


def rel_name(run: Run, root: Path | None = None) -> str:
    return run_finder.rel_name(run.path, runs_root() if root is None else Path(root))


def new_run_dir(prefix: str, root: Path | None = None) -> Path:
    root = runs_root() if root is None else Path(root)
    base = f"{slug(prefix)}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = root / base, 2
    while path.exists():
        path, n = root / f"{base}-{n}", n + 1
    return path




# ----- formatting -----------------------------------------------------------------------------
def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400 * 2:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s < 86400 * 365:
        return f"{s / 86400:.1f} days"
    return f"{s / (86400 * 365):.1f} years"


def duration(status: dict) -> float | None:
    start = status.get("started") or status.get("created")
    if not start:
        return None
    end = time.time() if status.get("state") in ACTIVE_STATES else (
        status.get("finished") or status.get("updated") or start)
    return max(0.0, end - start)


def key_metrics(status: dict) -> dict:
    """The few numbers that say how a run is doing, from its status.json."""
    out = {}
    last = status.get("last") or {}
    if isinstance(last.get("loss"), (int, float)):
        out["loss"] = last["loss"]
    ev = status.get("eval_final") or status.get("eval") or {}
    for k in ("mlm_accuracy", "nsp_accuracy"):
        if isinstance(ev.get(k), (int, float)):
            out[k] = ev[k]
    dev = status.get("dev") or {}
    for k in ("accuracy", "macro_f1", "f1", "pearson", "exact_match"):
        if isinstance(dev.get(k), (int, float)):
            out[f"dev {k}"] = dev[k]
    return out


def run_row(run: Run, root: Path | None = None) -> dict:
    s, cfg = run.status(), run.config()
    step, total = s.get("step"), s.get("max_steps")
    metrics = key_metrics(s)
    return {"run": run_label(run, root), "kind": run_kind(run), "state": s.get("state", "unknown"),
            "device": s.get("device") or cfg.get("device") or "—",
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(s["started"])) if s.get("started") else "—",
            "duration": fmt_duration(duration(s)),
            "progress": f"{step:,} / {total:,}" if step is not None and total else (
                f"{s.get('done', 0)} / {s['cells_total']} cells" if s.get("cells_total") else
                (f"{step:,}" if step else "—")),
            "key metrics": " · ".join(f"{LABELS.get(k, k)} {v:.3g}" for k, v in metrics.items()) or "—"}


def runs_table(root: Path | None = None, runs: list[Run] | None = None, inside: str = "") -> pd.DataFrame:
    """One row per run; ``inside`` an ablation, its name is left out of each run's label."""
    rows = [run_row(r, root) for r in (find_runs(root) if runs is None else runs)]
    if inside:
        for row in rows:
            row["run"] = row["run"].removeprefix(f"{inside} ▸ ")
    return pd.DataFrame(rows, columns=["run", "kind", "state", "device", "started", "duration", "progress",
                                       "key metrics"])


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def what_goes(run: Run) -> str:
    """What deleting ``run`` removes, for its confirmation: its log and metrics, and the large
    parts named one by one (checkpoints, a fine-tuned model folder, the runs inside an
    ablation), with the space they take."""
    parts = []
    inside = [r for r in run_finder.find_runs(run.path) if r.path != run.path]
    if inside:
        parts.append(_count(len(inside), "run inside it", "runs inside it"))
    n_ckpt = len(run.checkpoints())
    if n_ckpt:
        parts.append(_count(n_ckpt, "checkpoint", "checkpoints"))
    if (run.path / "model").is_dir():
        parts.append("fine-tuned model folder (model/)")
    if (run.path / "feature_head").is_dir():
        parts.append("feature-based head folder (feature_head/)")
    named = ["its log", "metrics"] + parts
    return f"{', '.join(named[:-1])} and {named[-1]}, {_size(run.path) / 1e6:,.1f} MB in all"


def log_tail(run: Run, lines: int = 200) -> str:
    p = run.path / "log.txt"
    if not p.exists():
        return "(no log yet)"
    text = p.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(empty log)"


# ----- curves -----------------------------------------------------------------------------------
def _latest_rows(rows: list[dict]) -> list[dict]:
    """After a resume some steps are logged twice: the later line wins."""
    keep: dict[tuple, dict] = {}
    for r in rows:
        keep[(r.get("split"), r.get("lr_setting"), r.get("epoch"), r.get("step"))] = r
    return sorted(keep.values(), key=lambda r: (r.get("lr_setting") or 0, r.get("step") or 0))


def numeric_keys(rows: list[dict]) -> list[str]:
    keys = []
    for r in rows:
        for k, v in r.items():
            if k not in NOT_METRICS and k not in keys and isinstance(v, (int, float)) and not isinstance(v, bool):
                keys.append(k)
    return keys


def line_figure(rows: list[dict], keys: list[str], title: str, split: str | None = None,
                y_range: tuple | None = None, labels: dict | None = None):
    """One line per metric in ``keys`` (a grid of learning rates: one per lr too), or None."""
    labels = {**LABELS, **(labels or {})}
    rows = [r for r in _latest_rows(rows) if split is None or r.get("split") == split]
    lrs = {r.get("lr_setting") for r in rows}
    data = [{"step": r.get("step"), "value": r[k],
             "series": labels.get(k, k) + (f" (lr {r['lr_setting']:g})" if len(lrs) > 1 else "")}
            for r in rows for k in keys if isinstance(r.get(k), (int, float))]
    if not data:
        return None
    fig = px.line(pd.DataFrame(data), x="step", y="value", color="series", title=title,
                  markers=len(data) <= 60)
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=40, b=10), legend_title_text="")
    if y_range:
        fig.update_yaxes(range=list(y_range))
    return fig


def pretrain_figures(rows: list[dict]) -> dict:
    total = {"loss": "total (MLM + NSP)"} if any(r.get("nsp_loss") for r in rows) else {"loss": "total"}
    figs = {"loss": line_figure(rows, ["loss", "mlm_loss", "nsp_loss"], "Training loss", "train", labels=total),
            "accuracy": line_figure(rows, ["mlm_accuracy", "nsp_accuracy"], "Held-out accuracy", "eval", (0, 1)),
            "speed": line_figure(rows, ["tokens_per_s"], "Throughput (tokens/s)", "train"),
            "mfu": line_figure(rows, ["mfu"], "Model FLOPs utilisation", "train")}
    return {k: f for k, f in figs.items() if f is not None}


def finetune_figures(rows: list[dict]) -> dict:
    dev_keys = [k for k in numeric_keys([r for r in rows if r.get("split") == "dev"])
                if k not in ("mse",)]
    figs = {"loss": line_figure(rows, ["loss"], "Training loss", "train"),
            "dev": line_figure(rows, dev_keys, "Dev metrics after each epoch", "dev")}
    return {k: f for k, f in figs.items() if f is not None}


def figures(kind: str, rows: list[dict]) -> dict:
    if kind == "pretrain":
        return pretrain_figures(rows)
    if kind == "finetune":
        return finetune_figures(rows)
    return {k: f for k, f in {"all": line_figure(rows, numeric_keys(rows)[:6], "Logged metrics")}.items() if f}


def compare_figure(named_rows: dict[str, list[dict]], key: str, split: str | None = None):
    data = [{"step": r.get("step"), "value": r[key], "run": name}
            for name, rows in named_rows.items() for r in _latest_rows(rows)
            if isinstance(r.get(key), (int, float)) and (split is None or r.get("split") == split)]
    if not data:
        return None
    fig = px.line(pd.DataFrame(data), x="step", y="value", color="run", title=LABELS.get(key, key),
                  markers=len(data) <= 80)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def show_figures(figs: dict, prefix: str, per_row: int = 2) -> None:
    items = list(figs.items())
    for i in range(0, len(items), per_row):
        cols = st.columns(per_row)
        for col, (name, fig) in zip(cols, items[i:i + per_row]):
            exports.figure(fig, f"{prefix}_fig_{name}", container=col)


# ----- progress -------------------------------------------------------------------------------
def show_progress(status: dict) -> None:
    state = status.get("state", "unknown")
    step, total = status.get("step") or 0, status.get("max_steps")
    if state == "queued":
        who = status.get("waiting_for")
        st.info(f"Queued: another run{f' ({Path(who).name})' if who else ''} is using the GPU. This one starts "
                f"by itself when the GPU is free (one training run per GPU at a time).")
    text = STATE_LABELS.get(state, state)
    if total:
        text += f" · step {step:,} of {total:,}"
    eta = status.get("eta_s")
    if state == "running" and eta is not None and total and step < total:
        end = time.strftime("%H:%M", time.localtime(time.time() + eta))
        text += f" · about {fmt_duration(eta)} left (ETA {end})"
    elif state not in ACTIVE_STATES and duration(status):
        text += f" · took {fmt_duration(duration(status))}"
    st.progress(min(1.0, step / total) if total else (1.0 if state == "finished" else 0.0), text=text)


def _pretrain_numbers(status: dict, rows: list[dict]) -> None:
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
    if status.get("precision"):
        st.caption(f"Training precision: **{status['precision']}** on {status.get('device', 'this device')}.")


def _panel(run: Run, status: dict, kind: str, prefix: str) -> None:
    show_progress(status)
    rows = run.metrics()
    if kind == "pretrain":
        _pretrain_numbers(status, rows)
    if status.get("state") in ("failed", "crashed"):
        st.error(without_host_paths(f"{status.get('error') or 'The run ended without finishing.'} The end of its log:"))
        st.code(without_host_paths(log_tail(run, 15)), language=None)
    show_figures(figures(kind, rows), prefix)


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
def zip_dir(path: Path, top: str | None = None) -> bytes:
    """A zip (in memory) of a directory, its files under ``top/``."""
    path = Path(path)
    top = top or path.name
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(path.rglob("*")):
            if f.is_file():
                z.write(f, f"{top}/{f.relative_to(path).as_posix()}")
    return buf.getvalue()


@st.cache_data(max_entries=2, show_spinner="Packing the model…")
def _zip_cached(path: str, top: str, stamp: tuple) -> bytes:
    return zip_dir(Path(path), top)


def zip_model(path: Path, top: str) -> bytes:
    """zip_dir, packed once per version of the folder (not on every rerun of the page)."""
    files = sorted(Path(path).rglob("*"))
    stamp = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file())
    return _zip_cached(str(path), top, stamp)


@st.cache_resource(max_entries=4, show_spinner="Loading the fine-tuned model…")
def _predictor(path: str, stamp: float):
    from ..train.predict import Predictor

    return Predictor(path)


def predictor(run: Run):
    """The run's fine-tuned model, cached (reloaded if the run's model changes)."""
    stamp = max((p.stat().st_mtime for p in (run.path / "model", run.path / "feature_head") if p.exists()),
                default=0.0)
    return _predictor(str(run.path), stamp)


def finetune_result(run: Run) -> dict | None:
    p = run.path / "metrics.json"
    try:
        return json.loads(p.read_text()) if p.exists() else None
    except json.JSONDecodeError:
        return None
