"""What a person reads about a run, in words: its state, how long it took, the few numbers that
say how it is doing, what deleting it removes, the end of its log. The pages and the CLI draw
these; long jobs that are not runs (the nearest-neighbour build) say their durations and show
their logs the same way.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from .finder import find_runs, run_kind, run_label
from .run import Run, duration
from ..tasks.metrics import did_not_learn

STATE_LABELS = {"queued": "queued (waiting for the GPU)", "starting": "starting", "running": "running",
                "finished": "finished", "stopped": "stopped", "failed": "failed",
                "crashed": "crashed (the process ended without finishing)", "unknown": "unknown"}
LABELS = {"loss": "loss", "mlm_loss": "MLM loss", "nsp_loss": "NSP loss", "mlm_accuracy": "MLM accuracy",
          "nsp_accuracy": "NSP accuracy", "mlm_perplexity": "MLM perplexity", "tokens_per_s": "tokens/s",
          "mfu": "MFU", "accuracy": "accuracy", "macro_f1": "macro-F1", "f1": "F1", "mcc": "MCC",
          "pearson": "Pearson r", "spearman": "Spearman ρ", "exact_match": "exact match",
          "micro_f1": "micro-F1", "subset_accuracy": "subset accuracy", "micro_precision": "micro precision",
          "micro_recall": "micro recall", "lr": "learning rate", "grad_norm": "gradient norm",
          "mse": "mean squared error"}

# Scores from 0 to 1 are said in per cent wherever a page shows them (the Pre-train tiles, the probe, a model's
# measured quality, a fine-tuning's dev scores, as the paper's tables give them): the Runs table said "dev accuracy
# 0.8" beside "MLM accuracy 8.3%", and SQuAD's "dev F1 33.3" on one page was 0.333 on another. A correlation, an
# error or a loss is a number.
# (A pre-training's accuracies are drawn in per cent too, PERCENT; a fine-tuning's curves keep each task's own scale,
# 0 to 1 or SQuAD's 0 to 100, on one axis with MCC and Pearson r.)
PERCENT = {"mlm_accuracy", "nsp_accuracy", "mfu"}
SCORES = {"accuracy", "macro_f1", "f1", "micro_f1", "subset_accuracy", "exact_match", "precision", "recall",
          "micro_precision", "micro_recall", "token_accuracy"}
# (by the names key_metrics gives them, on the fraction scale it puts SQuAD's on: a raw "f1" may be SQuAD's 33.3)
_SAID_IN_PERCENT = PERCENT | {f"dev {LABELS[k]}" for k in SCORES if k in LABELS}


def metric_text(key: str, value: float) -> str:
    """A run's number as the pages say it: "MLM accuracy" 0.0286 as "2.9%", "dev accuracy" 0.8 as "80.0%" (a fraction
    here: ``key_metrics``), a loss of 9.5491 as "9.55"."""
    return f"{value:.1%}" if key in _SAID_IN_PERCENT else f"{value:.3g}"


def score_text(key: str, value: float, percent_scale: bool = False) -> str:
    """A fine-tuning's dev score as every page says it: a score from 0 to 1 in per cent ("80.0%"; ``percent_scale``:
    the task's scores are per cent already, SQuAD's), a correlation or an error to three decimals."""
    if key in SCORES:
        return f"{value:.1f}%" if percent_scale else f"{value:.1%}"
    return f"{value:.3f}"


TRUST_OWN_RATE_AT = 0.2  # from this share of a job on, its own rate alone says its time left


def seconds_left(started: float | None, fraction: float, now: float | None = None,
                 since: tuple[float, float] | list | None = None, said: tuple | list | None = None) -> float | None:
    """The time a job has left, from the progress it has made so far (the rate of all of it, as tqdm's
    average: it corrects itself as the job goes, whatever an estimate said before it started); None
    until 2 % and 5 s of it have passed, or when the job is done. ``since`` = (time, fraction) of the job's
    first progress: the rate is counted from there, so that a start spent loading (no progress to show)
    does not read as slow work still to come. ``said`` = (time, seconds): the time said when the job was
    started, less the time since, until its own progress says more (a build that loads for half a minute
    before its first progress showed no time at all)."""
    fraction = float(fraction or 0.0)
    now = time.time() if now is None else now
    own = _own_rate_left(started, fraction, now, since)
    told = max(0.0, float(said[1]) - max(0.0, now - float(said[0]))) \
        if said and said[0] and said[1] is not None and fraction < 1 else None
    if own is None:  # (a job past the time said, with no rate of its own yet, has no time left to say: not "0 s")
        return told or None
    done = fraction - (float(since[1]) if since else 0.0)  # (a resumed job's own part: its rate's basis)
    if told and done < TRUST_OWN_RATE_AT:
        # the first few per cent's rate swings (a build a minute in said "50 min 56 s left" of a 6-minute job):
        # weighed against what was said before it started until a fifth is done, while what was said still
        # leaves time (a job past it has shown the estimate short: its own rate alone then)
        weight = max(0.0, done) / TRUST_OWN_RATE_AT
        return weight * own + (1 - weight) * told
    return own


def _own_rate_left(started, fraction: float, now: float, since) -> float | None:
    if since:
        done, elapsed = fraction - float(since[1]), now - float(since[0])
        return (1 - fraction) * elapsed / done if fraction < 1 and done >= 0.02 and elapsed >= 5 else None
    if not started or not 0.02 <= fraction < 1:
        return None
    elapsed = now - float(started)
    return elapsed * (1 - fraction) / fraction if elapsed >= 5 else None


def left_text(started: float | None, fraction: float, since: tuple[float, float] | list | None = None,
              said: tuple | list | None = None) -> str:
    """" · about 2 min 10 s left", or nothing while :func:`seconds_left` has nothing to say."""
    left = seconds_left(started, fraction, since=since, said=said)
    if left is None and said and said[0] and said[1] is not None and fraction < 1 \
            and time.time() - float(said[0]) > float(said[1]):  # (a build at 7 % said "about 0 s left")
        return f" · longer than the {duration_text(float(said[1]))} said before it started"
    return f" · about {duration_text(left)} left" if left is not None else ""


def duration_text(seconds: float | None) -> str:
    """"45 s", "12 min 05 s", "3 h 20 min", "4.5 days": a time taken or still to go."""
    if seconds is None:
        return "—"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400 * 2:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s < 86400 * 365:
        return f"{s / 86400:.1f} days"
    return f"{s / (86400 * 365):.1f} years"


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
    # SQuAD's scores are percentages (its official script's), every other task's fractions: one column of
    # "dev F1" held 25 for a SQuAD run beside 0.4 for an NER one. Shown here as fractions, all of them.
    scale = 100.0 if isinstance(dev.get("exact_match"), (int, float)) else 1.0
    for k in ("accuracy", "macro_f1", "f1", "pearson", "exact_match"):
        if isinstance(dev.get(k), (int, float)):
            out[f"dev {LABELS[k]}"] = dev[k] / scale if k in ("f1", "exact_match") else dev[k]
    return out


def ablation_summary(run: Run) -> tuple[str | None, str | None]:
    """An ablation's device and key figures, read from the runs inside it (its pre-trainings and cells; the
    ablation itself trains nothing): the devices they ran on, and its best cell by each cell's headline dev
    score (the first of :func:`key_metrics`). None for either where no run inside says."""
    inside = [r for r in find_runs(run.path) if r.path != run.path]
    devices = sorted({str(d) for r in inside if (d := r.status().get("device"))})
    scored: dict[str, list[tuple[float, str]]] = {}  # headline measure ("dev accuracy"): (score, cell) of each cell
    cells = {r.path.name: r.status() for r in inside if r.path.parent == run.path / "cells"}
    recorded = _recorded_cells(run.path)
    for name, rec in recorded.items():  # a copy that keeps only results.jsonl has no cells/
        cells.setdefault(name, {"dev": rec["dev"]})
    for name, status in cells.items():
        dev = [(k, v) for k, v in key_metrics(status).items() if k.startswith("dev ")]
        if dev:
            scored.setdefault(dev[0][0], []).append((dev[0][1], name))
    unlearnt = {name for name, rec in recorded.items() if did_not_learn(rec)}
    figures = " · ".join(f"best {measure} {metric_text(measure, value)} ({cell}"
                         f"{', which did not learn' if cell in unlearnt else ''}) of {len(cells)} "
                         f"{'cell' if len(cells) == 1 else 'cells'}"
                         for measure, cells in sorted(scored.items(), key=lambda mc: (-len(mc[1]), mc[0]))
                         for value, cell in [max(cells)])  # the measure most cells share first
    if recorded and len(unlearnt) == len(recorded):  # (its best read as a result where it was a majority rate)
        figures += (f" · none of its {len(recorded)} finished cells learnt: each scored within noise of always "
                    "answering its dev set's most frequent label")
    return ", ".join(devices) or None, figures or None


def _recorded_cells(abl: Path) -> dict[str, dict]:
    """The records of the finished cells that an ablation's results.jsonl holds (their dev scores, their score
    in per cent and their dev set's majority rate), by cell; a line that is not a JSON object (a write cut
    short) is passed over."""
    out = {}
    try:
        lines = (abl / "results.jsonl").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("status") == "finished" and isinstance(rec.get("dev"), dict):
            out[str(rec.get("cell_id"))] = rec
    return out


def run_row(run: Run, root: str | Path) -> dict:
    """One line of the runs table: label, kind, state, device, start, duration, progress, key numbers (an
    ablation's: its best cells, and the device its runs inside ran on)."""
    s, cfg = run.status(), run.config()
    step, total = s.get("step"), s.get("max_steps")
    metrics = key_metrics(s)
    device, figures = ablation_summary(run) if run_kind(run) == "ablate" else (None, None)
    state = s.get("state", "unknown")
    return {"run": run_label(run, root), "kind": run_kind(run),
            "state": "unknown (status.json unreadable)" if state == "unknown" and s.get("error") else state,
            "device": s.get("device") or cfg.get("device") or device or "—",
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(s["started"])) if s.get("started") else "—",
            "duration": duration_text(duration(s)),
            "progress": f"{step:,} / {total:,}" if step is not None and total else (
                f"{s.get('done', 0)} / {s['cells_total']} cells" if s.get("cells_total") else
                (f"{step:,}" if step else "—")),
            "key metrics": " · ".join(f"{LABELS.get(k, k)} {metric_text(k, v)}" for k, v in metrics.items())
            or figures or "—"}


def group_title(group: str, groups: dict[str, list[Run]], own: bool = True) -> str:
    """The name of a group of ``finder.run_groups``: "your runs (3)", "inside ablation abl (12 runs)";
    ``own=False`` (a student, who starts none of them): "the class's runs (3)"."""
    n = len(groups[group])
    whose = "your" if own else "the class's"
    return f"{whose} runs ({n})" if not group else f"inside ablation {group} ({n} runs)"


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def what_deleting_removes(run: Run) -> str:
    """What deleting ``run`` removes, for its confirmation: its log and metrics, and the large
    parts named one by one (checkpoints, a fine-tuned model folder, the runs inside an
    ablation), with the space they take."""
    parts = []
    inside = [r for r in find_runs(run.path) if r.path != run.path]
    if inside:
        parts.append(_count(len(inside), "run inside it", "runs inside it"))
    n_ckpt = len(run.checkpoints())
    if n_ckpt:
        parts.append(_count(n_ckpt, "checkpoint", "checkpoints"))
    n_aside = len(list((run.path / "set_aside").glob("step-*")))
    if n_aside:
        parts.append(_count(n_aside, "checkpoint set aside by a resume", "checkpoints set aside by a resume"))
    if (run.path / "model").is_dir():
        parts.append("fine-tuned model folder (model/)")
    if (run.path / "feature_head").is_dir():
        parts.append("feature-based head folder (feature_head/)")
    named = ["its log", "metrics"] + parts
    return f"{', '.join(named[:-1])} and {named[-1]}, {_size(run.path) / 1e6:,.1f} MB in all"


def log_tail(log_file: str | Path, lines: int = 200) -> str | None:
    """The last ``lines`` lines of a log (a run's ``log.txt``, a background job's), or None
    where there is no log (yet)."""
    try:
        text = Path(log_file).read_text(errors="replace").splitlines()
    except OSError:
        return None
    return "\n".join(text[-lines:])


def run_log_tail(run: Run, lines: int = 200) -> str:
    """The end of a run's log, or a word saying there is none yet."""
    tail = log_tail(run.path / "log.txt", lines)
    return "(no log yet)" if tail is None else tail or "(empty log)"


def finetune_result(run: Run) -> dict | None:
    """A finished fine-tuning's final scores (its ``metrics.json``), or None."""
    p = run.path / "metrics.json"
    try:
        return json.loads(p.read_text()) if p.exists() else None
    except json.JSONDecodeError:
        return None
