"""Table 6 with real pre-trained weights: Turc et al.'s miniatures fine-tuned here, beside the papers.

Devlin et al. 2019 (Table 6) find that a bigger BERT fine-tunes better on every task they tried.
The studio's own size axis pre-trains its models from zero on a CPU, where a few million tokens are
far too few for that to show. Turc et al. 2019 ("Well-Read Students Learn Better") released 24 BERTs
that Google pre-trained as BERT itself was (MLM + NSP, BooksCorpus + Wikipedia), L in {2, ..., 12}
layers by H in {128, 256, 512, 768}. The ``miniatures`` recipe (``"pretrained": "hub"``, see
:mod:`.grid`) downloads a few of them by name and fine-tunes each on one task with several seeds;
this module sets what such a run measured beside the papers:

* :func:`table`: one row per size: our dev score (the mean over seeds, their standard deviation as
  the spread) and Turc et al.'s GLUE test scores for the same model;
* :func:`figure`: score against parameters on a log scale: ours with error bars, Turc et al.'s GLUE
  score and their number for the column our task stands in for, and Table 6's same column, each a
  named series;
* :func:`caption`: a few sentences computed from this run's records, with the verdict of "bigger
  beats smaller" by the studio's rule (:func:`.results.directions`).

The papers' numbers are theirs (GLUE's test server for Turc et al., GLUE dev for Table 6), shown
for their direction; only "ours" is measured by the run.
"""
from __future__ import annotations

import statistics

import pandas as pd

from .. import hub, hub_names
from ..tasks.registry import TASK_TYPES
from . import grid, paper, results

COLUMNS = ["task", "size", "model", "L", "H", "parameters_M", "metric", "ours", "spread", "seeds", "turc_name",
           "turc_glue", "turc_column", "turc_value", "state"]


def is_miniatures(plan: dict | None) -> bool:
    """Does the plan compare sizes of downloaded miniatures (no pre-training here)? (A plan of one downloaded
    model, as table7's, is not: its page showed a one-point "Model size" chart beside Turc et al.'s GLUE.)"""
    return bool(plan) and plan["recipe"].get("pretrained") == "hub" and \
        len({c["size"] for c in plan["cells"]}) > 1


def _column(plan: dict, task: str, task_type: str | None) -> str | None:
    spec = plan["recipe"]["tasks"][task]
    return spec.get("paper_column") or paper.DEFAULT_COLUMN.get(TASK_TYPES.get(task_type))


def table(plan: dict, res: dict[str, dict]) -> pd.DataFrame:
    """One row per task and size (the baseline's transfer), smallest first: ``ours`` is the mean dev
    score of the finished seeds in percent, ``spread`` their sample standard deviation (0 for one
    seed), ``seeds`` how many finished of how many planned (``state``); ``turc_glue`` and
    ``turc_value`` are Turc et al.'s GLUE score and their number in ``turc_column`` (the paper column
    our task stands in for, else None)."""
    transfer = plan["recipe"]["baseline"]["transfer"]
    groups: dict[tuple, list[dict]] = {}
    for cell in plan["cells"]:
        if cell["transfer"] == transfer:
            groups.setdefault((cell["task"], cell["size"]), []).append(cell)
    rows = []
    for (task, size), cells in groups.items():
        recs = [res.get(c["id"], {}) for c in cells]
        done = [r for r in recs if r.get("status") == "finished" and r.get("score") is not None]
        scores = [float(r["score"]) for r in done]
        L, H, _ = grid.size_lha(size)
        repo = grid.hub_repo(size)
        turc_key = (L, H)
        column = _column(plan, task, next((r.get("task_type") for r in done), None)
                         or plan["recipe"]["tasks"][task].get("task_type"))
        turc = paper.MINIATURES.rows.get(turc_key, {})
        failed = sum(r.get("status") == "failed" for r in recs)
        flagged = [r for r in done if results.did_not_learn(r)]
        state = f"{len(done)} of {len(cells)} seeds finished" + (f", {failed} failed" if failed else "") + \
            (f", {len(flagged)} {results.DID_NOT_LEARN}" if flagged else "")
        rows.append({
            "task": task, "size": size, "model": repo, "L": L, "H": H,
            "parameters_M": round(hub.CATALOGUE[repo].parameters / 1e6, 1) if repo else None,
            "metric": next((r.get("metric") for r in done), None),
            "ours": statistics.fmean(scores) if scores else None,
            "spread": statistics.stdev(scores) if len(scores) > 1 else (0.0 if scores else None),
            "seeds": len(scores), "turc_name": paper.MINIATURES.row_labels.get(turc_key),
            "turc_glue": turc.get("GLUE score"), "turc_column": column if column in paper.MINIATURES.columns else None,
            "turc_value": turc.get(column), "state": state})
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["task", "parameters_M"], kind="stable").reset_index(drop=True) if len(df) else df


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """The table as a person reads it: ours as "mean ± spread", the papers' columns named by source."""
    # (the papers' numbers beside ours, the long state last: at 1,400 px "Turc: same column" and the state's
    # "did not learn" were past the table's right edge)
    out = pd.DataFrame({
        "task": df["task"], "model": df["model"], "L/H": [f"{L}/{H}" for L, H in zip(df["L"], df["H"])],
        "metric": df["metric"],
        "ours (dev, mean ± std)": [None if pd.isna(m) else f"{m:.1f} ± {s:.1f} ({n} seeds)"
                                   for m, s, n in zip(df["ours"], df["spread"], df["seeds"])],
        "Turc: same column (test)": [None if pd.isna(v) else f"{c} {v:.1f}"
                                     for c, v in zip(df["turc_column"], df["turc_value"])],
        "Turc: GLUE score (test)": df["turc_glue"], "parameters (M)": df["parameters_M"],
        "Turc et al. 2019: model": df["turc_name"], "state": df["state"]})
    return out


def _table6_points(column: str | None) -> list[tuple[float, float, str]]:
    """(parameters in millions, value, label) of Table 6 in ``column``, the rows with A = H/64 (the
    L=6, H=768, A=3 row has the same parameters as A=12: one point per size)."""
    if column not in paper.TABLE6.columns:
        return []
    out = []
    for (L, H, A), row in paper.TABLE6.rows.items():
        if A == H // 64 and row.get(column) is not None:
            params = hub_names.HubModel(f"L{L}-H{H}", "", L, H).parameters / 1e6
            out.append((params, row[column], paper.TABLE6.row_labels[(L, H, A)]))
    return sorted(out)


def figure(df: pd.DataFrame):
    """Score against parameters (millions, log scale): ours per task (mean, with the seeds' standard
    deviation as error bars), Turc et al.'s GLUE score and same-column scores for the same models, and
    Devlin et al.'s Table 6 in that column; every series named by its source."""
    # only for the figure: the GPU machine has no plotly (tools/gpu_kit/offline.py)
    import plotly.graph_objects as go

    fig = go.Figure()
    columns = list(dict.fromkeys(df["turc_column"].dropna()))
    for task, g in df.groupby("task", sort=False):
        g = g[g["ours"].notna()]
        if not len(g):
            continue
        metric = next((m for m in g["metric"] if isinstance(m, str)), "score")
        seeds = int(g["seeds"].max())
        fig.add_scatter(x=g["parameters_M"], y=g["ours"], mode="lines+markers", marker_size=10,
                        name=f"ours: {task}, {metric} on dev (mean of {seeds} seed{'s' if seeds > 1 else ''})",
                        error_y=dict(type="data", array=g["spread"].fillna(0).tolist()),
                        hovertext=[f"{m} ({n})" for m, n in zip(g["model"], g["state"])])
    turc = df.drop_duplicates("size")
    turc = turc[turc["turc_glue"].notna()]
    if len(turc):
        fig.add_scatter(x=turc["parameters_M"], y=turc["turc_glue"], mode="lines+markers", marker_symbol="diamond",
                        line_dash="dot", name="Turc et al. 2019: GLUE score (test)", hovertext=turc["turc_name"])
    for column in columns:
        t = df[(df["turc_column"] == column) & df["turc_value"].notna()].drop_duplicates("size")
        if len(t):
            fig.add_scatter(x=t["parameters_M"], y=t["turc_value"], mode="lines+markers", marker_symbol="diamond-open",
                            line_dash="dot", name=f"Turc et al. 2019: {column} (test)", hovertext=t["turc_name"])
        points = _table6_points(column)
        if points:
            fig.add_scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                            marker_symbol="square", line_dash="dash", hovertext=[p[2] for p in points],
                            name=f"Devlin et al. 2019, Table 6: {column} (dev)")
    # whole numbers at 1-2-5 steps: plotly's own labels between 10 and 100 read "2, 5" (meaning 20 and 50)
    ticks = [m * 10 ** e for e in range(-1, 4) for m in (1, 2, 5)]
    fig.update_layout(title="Model size (Table 6) with Google's pre-trained miniatures", yaxis_title="score (%)",
                      xaxis_title="parameters (millions, log scale)", xaxis_type="log", legend_title_text="",
                      height=420, margin=dict(t=50, b=40))
    fig.update_xaxes(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    return fig


def caption(plan: dict, res: dict[str, dict], df: pd.DataFrame) -> str:
    """What this run measured, in a few sentences computed from its records; the papers' numbers are
    named as theirs."""
    seeds = len(plan["recipe"].get("seeds") or [None])
    parts = []
    for task, g in df.groupby("task", sort=False):
        g = g[g["ours"].notna()]
        if not len(g):
            continue
        metric = next((m for m in g["metric"] if isinstance(m, str)), "score")
        parts.append(f"{task} ({metric} on its dev set): " + " → ".join(
            f"{s} {m:.1f} ± {sd:.1f}" + (f" ({n} seed{'s' if n > 1 else ''})" if n != seeds else "")
            for s, m, sd, n in zip(g["size"], g["ours"], g["spread"], g["seeds"])))
    if not parts:
        return ("No cell of this run has finished yet: the table and chart show only the papers' numbers until "
                "one does.")
    big = next(d for d in results.directions(res) if d["key"] == "bigger_beats_smaller")
    sizes = df["size"].nunique()
    return (f"This run fine-tuned {sizes} of Google's pre-trained miniatures (downloaded from the Hugging Face Hub, "
            f"not pre-trained here), {seeds} seed{'s' if seeds > 1 else ''} each; mean ± standard deviation over the "
            "seeds (a seed also splits the data its own way, so the spread holds its dev set's draw too): "
            + "; ".join(parts) + f". Bigger beats smaller (Table 6) in this run: {big['verdict']} (the "
            "largest model against the smallest, the difference held against the seeds' spread and the dev set's "
            "sampling error). The numbers of Turc et al. 2019 (GLUE's test server) and of Devlin et al. 2019, Table 6 "
            "(GLUE dev) beside them are the papers' own, shown for their direction: this run did not measure them, "
            "and its task is not theirs.")
