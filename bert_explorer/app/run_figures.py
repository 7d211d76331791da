"""The curves of runs as plotly figures: a run's losses, accuracies and speed over its steps, and
one metric of several runs side by side. Figures only (no Streamlit): the pages show them with
``app/exports.py``'s download buttons (``runs_view.show_figures``).
"""
from __future__ import annotations

import pandas as pd
import plotly.express as px

from ..runs.report import LABELS, PERCENT

NOT_METRICS = {"step", "time", "epoch", "lr_setting", "split", "eval_tokens", "eval_pairs", "total", "n_true", "n_pred",
               "n_correct", "null_threshold", "other_cores"}  # (counts and the machine's state: no run's measure)


def latest_rows(rows: list[dict]) -> list[dict]:
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


def _regression(rows: list[dict]) -> bool:
    return any(isinstance(r.get(k), (int, float)) for r in rows for k in ("mse", "pearson"))


def measure_title(key: str, rows: list[dict] = ()) -> str:
    """A run's measure as its axis names it, with its unit: "MLM accuracy (%)", "loss (cross-entropy, nats)"
    (a regression's loss is its mean squared error)."""
    name = LABELS.get(key, key)
    if key in PERCENT:
        return f"{name} (%)"
    if key.endswith("loss"):
        return f"{name} ({'squared error' if key == 'loss' and _regression(rows) else 'cross-entropy, nats'})"
    return name


def _shown(key: str, value: float) -> float:
    return 100 * value if key in PERCENT else value  # in per cent, as the tiles say it


def line_figure(rows: list[dict], keys: list[str], title: str, split: str | None = None,
                y_range: tuple | None = None, labels: dict | None = None, from_zero: bool = False,
                y_title: str | None = None):
    """One line per metric in ``keys`` (a grid of learning rates: one per lr too), or None. ``from_zero``: a
    rate's axis starts at 0 (on its own, plotly spans one reading of 4,199 tokens/s as 4,198.5 to 4,199.5).
    ``y_title`` names the measure and its unit (plotly's own says "value")."""
    labels = {**LABELS, **(labels or {})}
    rows = [r for r in latest_rows(rows) if split is None or r.get("split") == split]
    lrs = {r.get("lr_setting") for r in rows}
    data = [{"step": r.get("step"), "value": _shown(k, r[k]),
             "series": labels.get(k, k) + (f" (lr {r['lr_setting']:g})" if len(lrs) > 1 else "")}
            for r in rows for k in keys if isinstance(r.get(k), (int, float))]
    if not data:
        return None
    markers = len(data) <= 60
    several = len({d["series"] for d in data}) > 1
    # a symbol and a dash of its own per series: lines that coincide (four dev scores all at 1.0, macro-F1
    # under MCC) each still show, the later drawn in dashes or dots over the earlier, markers or not
    fig = px.line(pd.DataFrame(data), x="step", y="value", color="series", title=title, markers=markers,
                  symbol="series" if markers else None, line_dash="series" if several else None,
                  line_dash_sequence=["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"])
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=40, b=10), legend_title_text="")
    if y_title or len({d["series"] for d in data}) == 1:  # the axis says which measure, not plotly's "value"
        fig.update_yaxes(title_text=y_title or data[0]["series"])
    steps = [d["step"] for d in data if isinstance(d["step"], (int, float))]
    if steps and max(steps) - min(steps) < 10:  # plotly's own ticks would fall between steps (1, 1.5, 2)
        fig.update_xaxes(dtick=1)
    if y_range:
        fig.update_yaxes(range=list(y_range))
    elif from_zero:
        fig.update_yaxes(rangemode="tozero")
    return fig


def pretrain_figures(rows: list[dict]) -> dict:
    total = {"loss": "total (MLM + NSP)"} if any(r.get("nsp_loss") for r in rows) else {"loss": "total"}
    figs = {"loss": line_figure(rows, ["loss", "mlm_loss", "nsp_loss"], "Training loss", "train", labels=total,
                                y_title=measure_title("loss")),
            "accuracy": line_figure(rows, ["mlm_accuracy", "nsp_accuracy"], "Held-out accuracy", "eval", (0, 100),
                                    y_title="held-out accuracy (%)"),
            "speed": line_figure(rows, ["tokens_per_s"], "Throughput (tokens/s)", "train", from_zero=True),
            "mfu": line_figure(rows, ["mfu"], "Model FLOPs utilisation", "train", from_zero=True,
                               y_title=measure_title("mfu"))}
    return {k: f for k, f in figs.items() if f is not None}


def finetune_figures(rows: list[dict]) -> dict:
    dev_keys = [k for k in numeric_keys([r for r in rows if r.get("split") == "dev"])
                if k not in ("mse",)]
    # (a run evaluated every N steps was titled "after each epoch" too: an epoch's end is a whole epoch number)
    epochs = [r.get("epoch") for r in rows if r.get("split") == "dev"]
    ends = [isinstance(e, (int, float)) and float(e).is_integer() for e in epochs]  # an epoch's end, each
    steps = sorted({r["step"] for r in rows if r.get("split") == "dev" and isinstance(r.get("step"), int)})
    # every N steps: the evaluations before the last at N, 2N, 3N, ... (a Stop's evaluation at step 12 between two
    # epoch ends titled a run's curve "every 12 steps")
    every = steps[0] if len(steps) > 2 and steps[:-1] == [steps[0] * (i + 1) for i in range(len(steps) - 1)] else None
    title = ("Dev metrics after each epoch" if all(ends) else
             f"Dev metrics every {every:,} steps and at the end" if every else
             "Dev metrics after each epoch and where the run was stopped" if len(ends) > 1 and ends.count(False) == 1
             else "Dev metrics at each evaluation")
    figs = {"loss": line_figure(rows, ["loss"], "Training loss", "train", y_title=measure_title("loss", rows)),
            "dev": line_figure(rows, dev_keys, title, "dev")}
    if figs["dev"] is not None:
        _on_the_score_scale(figs["dev"], [r[k] for r in rows if r.get("split") == "dev" for k in dev_keys
                                          if isinstance(r.get(k), (int, float))], "exact_match" in dev_keys)
    return {k: f for k, f in figs.items() if f is not None}


def _on_the_score_scale(fig, values: list[float], percent: bool) -> None:
    """A dev score's whole scale, not plotly's span of its values: four scores at 1.0 stood on an axis
    from 0 to 2. Scores are bounded by 1 (SQuAD's, percentages, by 100); MCC and Pearson r go down to -1.
    A little room past each end, so that a marker on the bound is drawn whole."""
    top = 100.0 if percent else 1.0
    if not values or not all(-top <= v <= top for v in values):
        return  # a measure off the scale: plotly's own span hides nothing of it
    low = -top if min(values) < 0 else 0.0
    fig.update_yaxes(range=[low - 0.05 * top, top + 0.05 * top],
                     title_text="dev score (%, 100 = perfect)" if percent else "dev score (1 = perfect)")


def figures(kind: str, rows: list[dict]) -> dict:
    if kind == "pretrain":
        return pretrain_figures(rows)
    if kind == "finetune":
        return finetune_figures(rows)
    return {k: f for k, f in {"all": line_figure(rows, numeric_keys(rows)[:6], "Logged metrics")}.items() if f}


KIND_NAMES = {"pretrain": "pre-training", "finetune": "fine-tuning", "ablation": "ablation"}


SPLIT_WORDS = {"train": "training steps", "dev": "dev set", "eval": "held out"}


def compare_figure(named_rows: dict[str, list[dict]], key: str, split: str | None = None,
                   kinds: dict[str, str] | None = None):
    """One metric of several runs over their steps. ``kinds`` names each run's kind ("pretrain",
    "finetune"): runs of different kinds get a panel each, with its own axis, since a pre-training's
    loss (masked LM plus next sentence) and a fine-tuning's loss (its task's) are not one quantity."""
    kinds = kinds or {}
    data = [{"step": r.get("step"), "value": _shown(key, r[key]), "run": name,
             "kind": KIND_NAMES.get(kinds.get(name, ""), kinds.get(name) or "run")}
            for name, rows in named_rows.items() for r in latest_rows(rows)
            if isinstance(r.get(key), (int, float)) and (split is None or r.get("split") == split)]
    if not data:
        return None
    frame = pd.DataFrame(data)
    panels = list(dict.fromkeys(frame["kind"]))
    several = len(panels) > 1
    # which rows it is read from: a fine-tuning's accuracy is its dev set's, a pre-training's held out (the
    # title said "accuracy" alone)
    splits = sorted({SPLIT_WORDS.get(r.get("split"), r.get("split") or "logged") for rows in named_rows.values()
                     for r in latest_rows(rows) if isinstance(r.get(key), (int, float))
                     and (split is None or r.get("split") == split)})
    title = f"{LABELS.get(key, key)} ({' and '.join(splits)})"
    fig = px.line(frame, x="step", y="value", color="run", title=title, markers=len(data) <= 80,
                  facet_row="kind" if several else None, category_orders={"kind": panels})
    # a regression's loss is a squared error only where every run drawn is one
    every = all(_regression(rows) for rows in named_rows.values())
    fig.update_yaxes(title_text=measure_title(key, [r for rows in named_rows.values() for r in rows] if every else []))
    if several:
        fig.update_yaxes(matches=None)  # each kind its own scale
        fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))  # "kind=fine-tuning" -> the kind
    fig.update_layout(height=380 * (len(panels) if several else 1), margin=dict(l=10, r=10, t=40, b=10))
    return fig


MATRIX_CLASSES = 30  # the classes a confusion matrix draws, each a row and a column that can be read


def confusion_shown(matrix: list[list[int]], labels: list[str], most: int = MATRIX_CLASSES
                    ) -> tuple[list[list[int]], list[str], str, str | None]:
    """(matrix, labels, title, a caption or None) of a confusion matrix as drawn: with more than ``most`` classes
    (500 drew a colour bar 15,000 pixels tall and no cell to read), the ``most`` with the most dev examples, in
    their order, and the answers among them."""
    title = "Confusion matrix (dev)"
    if len(labels) <= most:
        return matrix, labels, title, None
    kept = sorted(sorted(range(len(labels)), key=lambda i: -sum(matrix[i]))[:most])
    return ([[matrix[i][j] for j in kept] for i in kept], [labels[i] for i in kept],
            f"{title}: the {most} classes with the most dev examples, of {len(labels):,}",
            f"The matrix shows the {most} classes with the most dev examples and the answers among them (an answer "
            "of another class is left out of its row); the table beside it holds every class.")
