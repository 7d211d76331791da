"""Results of an ablation: our numbers beside the paper's, the four directions, exports, plots.

Our models are thousands of times smaller and see millions of tokens instead of 3.3 billion,
and our tasks stand in for GLUE and CoNLL, so the *levels* cannot match the paper. What can
be compared is the **direction** of each finding (Section 5):

1. NSP helps sentence-pair tasks (Table 5: BERT-Base vs No NSP);
2. a bidirectional model beats a left-to-right one, even with a BiLSTM on top (Table 5);
3. a bigger model beats a smaller one (Table 6);
4. frozen concat-last-4 features come close to fine-tuning and stay well above the embeddings
   alone (Table 7).

:func:`directions` says for each whether it held in our numbers. **The rule**: records of the
same cell (task and the four axes) are seeds of one setting; a setting's score is their mean
and its spread their standard deviation (sample std; 0 with a single seed). One comparison
"a beats b" is

* ``yes`` when mean(a) - mean(b) > the noise of the comparison,
* ``no`` when mean(b) - mean(a) > that noise,
* ``no difference measurable here`` otherwise.

The noise is the larger of the seeds' spread (the larger standard deviation of the two settings)
and, for an accuracy or an F1 measured on n dev examples, the sampling error of the difference at
95 %: 1.96 · sqrt(se_a² + se_b²), with se = sqrt(p (1 − p) / n) the standard error of a proportion p
(a two-proportion z-test). A cell of a labelled task whose score is not above the majority rate (always
answering the dev set's most frequent label) by more than 1.96 · se **did not learn**: it is flagged,
and a comparison of two such cells says no difference is measurable, whatever their scores.

A direction's verdict is ``yes`` when every comparison the grid allows is yes, ``no`` when any
is no, ``no difference measurable here`` when the rest are ties, ``not measured`` when the grid
lacks the cells it needs, ``pending`` while those cells are in the grid but still to run, and ``not run yet``
when the ablation stopped before them (``holds``: True, False, None for the last four).
"""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pandas as pd

from .. import hub_datasets, safe_text
from ..checkpoint import ASSETS
from ..data.pretraining import on_plateau
from ..data.objectives import BERT, NO_NSP
from ..hub_names import HubError
from ..runs.run import ACTIVE_STATES, DONE_STATES, Run
from ..tasks.metrics import Z95, did_not_learn, sampling_error
from ..tasks.registry import TASK_TYPES
from . import grid, paper
from .runner import read_plan, read_results

AXIS_ORDER = ("objective", "size", "transfer", "masking", "grid", "baseline")
AXIS_TITLES = {"objective": "Pre-training tasks (Table 5)", "size": "Model size (Table 6)",
               "transfer": "Feature-based vs fine-tuning (Table 7)", "masking": "Masking strategies (Table 8)",
               "grid": "Grid (every combination)", "baseline": "Baseline"}
COLUMNS = ["axis", "setting", "task", "task_type", "metric", "ours", "paper", "paper_task", "paper_metric",
           "paper_source",
           "paper_row", "state", "size", "objective", "transfer", "masking", "pretrain_mlm_ppl",
           "pretrain_nsp_acc", "seconds", "cell_id", "error", "seed"]


def _paper_for(axis: str, cell: dict, column: str | None, baseline: dict) -> dict | None:
    if axis in ("grid", "baseline"):
        # the one axis on which the cell differs from the baseline gives the table; none: Table 5's BERT-Base
        differs = [a for a in grid.AXES if cell[a] != baseline[a]]
        if len(differs) > 1:
            return None
        axis = differs[0] if differs else "objective"
    value = cell[axis]
    return paper.paper_number(axis, value, column, layers_hidden_heads=grid.size_lha(cell["size"]),
                              feature_based=cell["transfer"] != "fine-tune")


def data_of(spec: dict) -> str:
    """What a grid's task reads, as a reader knows it: tiny:classification, pairs:bbc, bbc-topics, reviews.csv,
    hf:nyu-mll/glue/sst2 (a Hub data set without its split, which says nothing of the task)."""
    train = str(spec.get("train", ""))
    if train.startswith("builtin:"):
        return train.removeprefix("builtin:")
    if hub_datasets.is_dataset_spec(train):
        return ":".join(train.split(":")[:2])
    return train if train.startswith(("tiny:", "pairs:")) else Path(train).name


def paper_task(metric: str, spec: dict) -> str:
    """The task the paper measured its number (``metric``) on, beside ours: "SST-2, not tiny:classification"; the
    paper's task alone where ours reads that benchmark's own data from the Hub (hf:nyu-mll/glue/sst2 is SST-2)."""
    train = str(spec.get("train", ""))
    try:
        hub = hub_datasets.parse(train) if hub_datasets.is_dataset_spec(train) else None
    except HubError:
        hub = None
    if hub and paper.hub_benchmark(hub.repo_id, hub.config) == paper.BENCHMARKS.get(metric):
        return metric
    return f"{metric}, not {data_of(spec)}"


def table(plan: dict, results: dict[str, dict], running: bool = True) -> pd.DataFrame:
    """One row per (axis, cell): a cell that is the baseline appears once under every axis,
    as the reference row of that axis' table. ``ours`` and ``paper`` are percentages. ``paper_task`` says
    beside the paper's number that it was measured on another task than ours (GLUE, SQuAD and CoNLL-2003 do
    not ship here: a task of ours stands in for the paper's column, so the levels are not like for like), and
    names the paper's task alone where ours reads its data from the Hub (:func:`paper_task`). ``running``: is
    the ablation running? A cell without a record is pending while it is, not run yet when it is not."""
    recipe = plan["recipe"]
    rows = []
    for cell in plan["cells"]:
        rec = results.get(cell["id"], {})
        spec = recipe["tasks"][cell["task"]]
        column = spec.get("paper_column") or paper.DEFAULT_COLUMN.get(TASK_TYPES.get(rec.get("task_type")))
        for axis in cell["axes"]:
            p = _paper_for(axis, cell, column, recipe["baseline"]) or {}
            setting = cell[axis] if axis in grid.AXES else " · ".join(cell[a] for a in grid.AXES)
            pre = rec.get("pretrain") or {}
            rows.append({
                "axis": axis, "setting": setting, "task": cell["task"],
                "task_type": rec.get("task_type") or spec.get("task_type"), "metric": rec.get("metric"),
                "ours": rec.get("score"), "paper": p.get("value"),
                "paper_task": paper_task(p["metric"], spec) if p.get("value") is not None else None,
                "paper_metric": p.get("metric"),
                "paper_source": p.get("source"), "paper_row": p.get("row"),
                "state": _state(rec) if rec or running else NOT_RUN,
                "size": cell["size"], "objective": cell["objective"],
                "transfer": cell["transfer"], "masking": cell["masking"],
                "pretrain_mlm_ppl": pre.get("mlm_perplexity"), "pretrain_nsp_acc": pre.get("nsp_accuracy"),
                "seconds": rec.get("seconds"), "cell_id": cell["id"], "error": rec.get("error"),
                "seed": cell.get("seed"),
            })
    df = pd.DataFrame(rows, columns=COLUMNS)
    if len(df):  # axes in the paper's order; inside an axis, tasks, then settings in the paper's order
        df["_a"] = df["axis"].map({a: i for i, a in enumerate(AXIS_ORDER)})
        df["_s"] = [_setting_rank(a, v) for a, v in zip(df["axis"], df["setting"])]
        df = df.sort_values(["_a", "task", "_s"], kind="stable").drop(columns=["_a", "_s"]).reset_index(drop=True)
    return df


def table7_caption(sub: pd.DataFrame) -> str:
    """What differs between our Table 7 (``sub``: its rows of the results table) and the paper's, said beside
    it (the report, the studio); of the paper's rows it speaks only of those the grid has."""
    settings = set(sub["setting"])
    text = (f"The paper's rows are BERT-Base on CoNLL-2003 (news; 204,567 training tokens, dev F1), ours "
            f"{', '.join(sorted(set(sub['size'])))} on {', '.join(sorted(set(sub['task'])))}: another model, another "
            "data set and far less of it, so the absolute scores are not the paper's and only the order of the rows "
            "compares.")
    if "fine-tune" not in settings:
        return text
    tuned = paper.TABLE7.rows["fine-tune"]["NER"]
    behind = {s: tuned - paper.TABLE7.rows[s]["NER"] for s in grid.FEATURE_MODES if s in settings}
    if others := [f"{s} by {gap:.1f} points" for s, gap in behind.items() if s != "concat-last-4"]:
        text += f" In the paper, fine-tuning is ahead of {' and of '.join(others)}."
    if "concat-last-4" in behind:
        # the one direction Table 7 gives (``directions``) is judged only where the embeddings row is there too
        text += (f" Concat-last-4 is {behind['concat-last-4']:.1f} points behind fine-tuning in the paper, so \"no "
                 "difference measurable here\" would be its finding too"
                 + ("; which differences this dev set resolves is in the directions below." if "embeddings" in settings
                    else "."))
    return text


def _state(rec: dict) -> str:
    state = rec.get("status", "pending")
    if state != "finished":
        return state
    if did_not_learn(rec):
        state += f" · {DID_NOT_LEARN} (majority rate {float(rec['majority']):.1f})"
    return state + (f" · {PLATEAU}" if plateau(rec) else "")


def _setting_rank(axis: str, value: str) -> float:
    if axis == "size":
        return grid.encoder_parameters(value)
    order = {"objective": grid.OBJECTIVES, "transfer": grid.TRANSFERS, "masking": grid.MASKINGS}.get(axis, ())
    return order.index(value) if value in order else len(order)


def load(abl: str | Path, judge_old: bool = False) -> tuple[dict, dict[str, dict], pd.DataFrame]:
    """(plan, results, table) of an ablation directory. ``judge_old``: the pre-trainings of a run
    from before the word-frequency plateau was recorded are judged now (their corpus's entropy
    computed, once a machine: the report command does, a page does not)."""
    plan = read_plan(abl)
    if plan is None:
        raise FileNotFoundError(f"{abl} holds no ablation (no plan.json)")
    results = read_results(abl)
    if judge_old:
        results = with_plateau(abl, plan, results)
    return plan, results, table(plan, results, running=Run(abl).status().get("state") in ACTIVE_STATES)


def with_plateau(abl: str | Path, plan: dict, results: dict[str, dict]) -> dict[str, dict]:
    """``results`` with each pre-training's unigram entropy, where the run did not record it: from the
    settings its folder kept (its vocabulary among them), else the plan's."""
    from ..train.pretrain_config import PretrainConfig
    from ..train.pretraining_data import corpus_entropy

    entropies, out = {}, {}
    for cell_id, rec in results.items():
        pre, key = rec.get("pretrain") or {}, rec.get("pretrain_key")
        cfg = plan.get("pretrainings", {}).get(key)
        if not _unjudged(plan, rec):
            out[cell_id] = rec
            continue
        if key not in entropies:
            kept = Path(abl) / "pretrain" / key / "config.json"
            saved = json.loads(kept.read_text()) if kept.is_file() else {}
            settings = {k: v for k, v in {**cfg, **saved}.items() if k != "kind"}
            try:
                entropies[key] = corpus_entropy(PretrainConfig.from_dict(settings, strict=False))
            except (ValueError, OSError):  # a corpus or vocabulary that is not here: left unjudged
                entropies[key] = None
        out[cell_id] = {**rec, "pretrain": {**pre, "unigram_entropy": entropies[key]}} if entropies[key] else rec
    return out


def _unjudged(plan: dict, rec: dict) -> bool:
    """Is ``rec``'s model one of this grid's own pre-trainings whose plateau was never judged (it ran before
    the run recorded its corpus's unigram entropy)?"""
    pre, cfg = rec.get("pretrain") or {}, plan.get("pretrainings", {}).get(rec.get("pretrain_key"))
    return "unigram_entropy" not in pre and bool(pre.get("mlm_perplexity")) and bool(cfg) and "hub" not in cfg


def unjudged(plan: dict, results: dict[str, dict]) -> int:
    """How many of the grid's cells sit on a pre-training that was never judged by the plateau rule (the
    report command judges them: ``load(..., judge_old=True)``)."""
    return sum(_unjudged(plan, rec) for rec in results.values())


# ----- the four directions --------------------------------------------------------------------
def _finished(records) -> list[dict]:
    recs = records.values() if isinstance(records, dict) else records
    return [r for r in recs if r.get("status", "finished") == "finished" and r.get("score") is not None]


YES, NO, TIE, NOT_MEASURED = "yes", "no", "no difference measurable here", "not measured"
PENDING = "pending"  # the cells a direction needs are in the grid, still to run
NOT_RUN = "not run yet"  # ... and the ablation stopped before them: nothing is running them
NOT_MEASURABLE = "not measurable"  # neither cell learnt the task, or a cell's model never learnt language
DID_NOT_LEARN = "did not learn"
PLATEAU = "its model did not leave the word-frequency plateau"
RULE = ("A comparison counts as \"yes\" or \"no\" only when the mean difference is larger than its noise: the "
        "seeds' spread (the larger standard deviation of the two settings), or, where larger, the sampling error "
        "of two accuracies on these dev sets (1.96 · √(se₁² + se₂²), se = √(p(1−p)/n): a 95 % two-proportion "
        "test); else \"no difference measurable here\". A cell not above its dev set's majority rate by more than "
        "1.96 · se \"did not learn\": two such cells are \"not measurable\" (never told apart), and a yes or no "
        "against one says so. A cell whose pre-trained model did not leave the word-frequency plateau (its "
        "held-out loss not 0.1 nats below the corpus's unigram entropy: it learnt little beyond word counts) is "
        "not measurable either. A direction is \"yes\" when every "
        "measurable comparison is yes, \"no\" when any is no, \"not measurable\" when none is.")


def plateau(r: dict) -> bool:
    """Did the pre-training this cell fine-tuned stay on the word-frequency plateau? (False where
    unknown: a downloaded model, or a run from before the rule without its corpus's entropy.)"""
    pre = r.get("pretrain") or {}
    if "plateau" in pre:
        return bool(pre["plateau"])
    if pre.get("unigram_entropy") and pre.get("mlm_perplexity"):
        return on_plateau(math.log(pre["mlm_perplexity"]), pre["unigram_entropy"])
    return False


def _settings(recs: list[dict]) -> list[dict]:
    """Records of the same cell (task + the four axes) are seeds of one setting: one dict per
    setting, its ``score`` the mean over seeds, ``spread`` their sample std (0 for one seed),
    ``seeds`` how many there were, and its dev set's ``majority`` rate the mean over the seeds too: a
    seed splits the data its own way (the split, the sampling), so each seed's dev set has its own
    (the first seed's 28.0 was said beside a mean over dev sets at 28.0 and 25.0)."""
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        groups.setdefault(_others(r), []).append(r)
    out = []
    for g in groups.values():
        scores = [float(r["score"]) for r in g]
        majorities = [float(r["majority"]) for r in g if r.get("majority") is not None]
        out.append({**g[0], "score": statistics.fmean(scores), "seeds": len(scores),
                    "spread": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                    **({"majority": statistics.fmean(majorities)} if len(majorities) == len(g) else {}),
                    "_waiting": [r["_waiting"] for r in g if r.get("_waiting")]})
    return out


def noise(a: dict, b: dict) -> float:
    """How large a difference between settings ``a`` and ``b`` must be to count (see the module's rule)."""
    spread = max(a.get("spread", 0.0), b.get("spread", 0.0))
    return max(spread, Z95 * (sampling_error(a) ** 2 + sampling_error(b) ** 2) ** 0.5)


def compare(a: dict, b: dict) -> str:
    """Does setting ``a`` beat setting ``b``? YES / NO when the mean difference is larger than
    its :func:`noise`, TIE (no difference measurable here) when it is not; NOT_MEASURABLE when
    neither learnt, or either's model never left the word-frequency plateau."""
    if (did_not_learn(a) and did_not_learn(b)) or plateau(a) or plateau(b):
        return NOT_MEASURABLE
    diff, spread = a["score"] - b["score"], noise(a, b)
    if diff > spread:
        return YES
    if -diff > spread:
        return NO
    return TIE


def verdict(outcomes: list[str]) -> str:
    """A direction from its measurable comparisons: every one YES -> YES; any NO -> NO; else TIE;
    none measurable -> NOT_MEASURABLE."""
    if not outcomes:
        return NOT_MEASURED
    outcomes = [o for o in outcomes if o != NOT_MEASURABLE]
    if not outcomes:
        return NOT_MEASURABLE
    if NO in outcomes:
        return NO
    return YES if all(o == YES for o in outcomes) else TIE


def _others(r: dict, *skip: str) -> tuple:
    return tuple(r[k] for k in ("task",) + grid.AXES if k not in skip)


def _pairs(recs, axis: str, better: str, worse: str):
    """(better record, worse record) for every two cells that differ only in ``axis``."""
    by = {}
    for r in recs:
        by.setdefault(_others(r, axis), {})[r[axis]] = r
    return [(g[better], g[worse]) for g in by.values() if better in g and worse in g]


def _fmt(r: dict) -> str:
    """A setting's score and, in one parenthesis, what is to know of it (its seeds, whether it learnt)."""
    notes = [f"{r['seeds']} seeds"] if r.get("seeds", 1) > 1 else []
    if did_not_learn(r):
        notes.append(f"{DID_NOT_LEARN}: majority rate {float(r['majority']):.1f}")
    if plateau(r):
        notes.append(PLATEAU)
    text = f"{r['score']:.1f}" + (f" ± {r['spread']:.1f}" if r.get("seeds", 1) > 1 else "")
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _tie(outcome: str) -> str:
    """The outcome of a comparison that is neither yes nor no, after its scores: a dash, not one more
    parenthesis beside a score's own."""
    return f" — {outcome}" if outcome in (TIE, NOT_MEASURABLE) else ""


NEAR_NSP = ("a pair task built here, whether two segments come from the same article, which is nearer to NSP "
            "itself than Table 5's MNLI or QNLI are")


def pending(plan: dict, results: dict[str, dict]) -> list[dict]:
    """The plan's cells still to run (queued or running): no record yet, or none that says finished or failed."""
    return [c for c in plan["cells"] if results.get(c["id"], {}).get("status") not in ("finished", "failed")]


def halted(state: str | None, resume: str = "") -> str | None:
    """Why an ablation in ``state`` leaves its cells still to run unrun, and ``resume``, how to run them: "the
    ablation stopped; Resume runs them"; None while it runs."""
    if state in ACTIVE_STATES:
        return None
    return (f"the ablation {state}" if state in DONE_STATES else "the ablation is not running") + \
        (f"; {resume}" if resume else "")


def directions(records, tasks: dict | None = None, waiting=(), stopped: str | None = None) -> list[dict]:
    """``[{"key", "direction", "verdict", "holds", "detail", "paper"}]`` from result records
    (dicts with task, task_type, size, objective, transfer, masking and score; several records
    of one cell are its seeds). ``verdict`` is yes / no / not distinguishable / not measured
    (the rule is in the module docstring); ``holds`` is True for yes, False for no, else None.
    ``tasks``: the recipe's tasks by name, where a detail should say what a task is (``pairs:``).
    ``waiting``: the grid's cells still to run (:func:`pending`); a direction not measured yet that they
    would measure is ``pending``, its detail naming them, not "not measured". ``stopped``: why they are not
    running (:func:`halted`), where the ablation is not: then such a direction is ``not run yet``, not pending."""
    out = _directions(records, tasks)
    if not waiting:
        return [{k: v for k, v in d.items() if k != "_used"} for d in out]
    done = _finished(records)
    kinds = {r["task"]: r.get("task_type") for r in done}  # an upload's type is known once a cell has read it
    stand_ins = [{**c, "task_type": kinds.get(c["task"]) or (tasks or {}).get(c["task"], {}).get("task_type"),
                  "score": 0.0, "status": "finished", "_waiting": c["id"]} for c in waiting]
    for d, then in zip(out, _directions(done + stand_ins, tasks)):
        needed = list(dict.fromkeys(cell for r in then["_used"] for cell in r["_waiting"]))
        if d["verdict"] == NOT_MEASURED and needed:
            shown = ", ".join(needed[:3]) + (f" and {len(needed) - 3} more" if len(needed) > 3 else "")
            cells = f"{len(needed)} cell{'s' if len(needed) > 1 else ''}"
            if stopped is None:
                d.update(verdict=PENDING, detail=f"waiting for {cells} still to run: {shown}")
            else:
                d.update(verdict=NOT_RUN, detail=f"{cells} not run yet ({stopped}): {shown}")
    for d in out:
        d.pop("_used")
    return out


def _directions(records, tasks: dict | None) -> list[dict]:
    """:func:`directions` from the records alone; each direction's ``_used`` holds the settings it compared."""
    recs = _settings(_finished(records))
    built_pairs = {name for name, spec in (tasks or {}).items() if str(spec.get("train", "")).startswith("pairs:")}
    out = []

    def add(key, outcomes, detail, comps=(), used=None):
        title, paper_says = paper.DIRECTIONS[key]
        v = verdict(outcomes)
        said = v
        # a yes or no read against a cell that did not learn says so beside it (a teacher read cpu-small's "NSP
        # helps: yes", where the recipe's own text calls its MLM-only cell a run that learnt nothing)
        if v in (YES, NO) and any(o == v and did_not_learn(a) != did_not_learn(b) for (a, b), o in zip(comps, outcomes)):
            said = f"{v}, against a cell that {DID_NOT_LEARN}"
        out.append({"key": key, "direction": title, "verdict": said, "holds": {YES: True, NO: False}.get(v),
                    "detail": detail, "paper": paper_says, "later": paper.LATER_WORK.get(key, ""),
                    "_used": [r for pair in comps for r in pair] if used is None else used})

    # 1. NSP helps pair tasks
    pair_recs = [r for r in recs if TASK_TYPES.get(r.get("task_type")) in paper.NSP_TASK_TYPES]
    comps = _pairs(pair_recs, "objective", BERT.name, NO_NSP.name)
    outcomes = [compare(a, b) for a, b in comps]
    add("nsp_helps_pairs", outcomes,
        "; ".join(f"{a['task']} ({a['size']}, {a['transfer']}): MLM+NSP {_fmt(a)} vs MLM only {_fmt(b)}{_tie(o)}"
                  for (a, b), o in zip(comps, outcomes)) or "needs MLM+NSP and MLM-only cells on a sentence-pair task",
        comps)
    if near := sorted({a["task"] for a, _ in comps} & built_pairs):  # (the direction's one "yes" in cpu-small)
        out[-1]["detail"] += f". {', '.join(near)}: {NEAR_NSP}"

    # 2. bidirectional beats LTR (the paper compares No NSP with LTR & No NSP; MLM+NSP stands in)
    comps = []
    for ltr in (name for name, row in grid.ROWS.items() if row.objective.left_to_right):
        found = _pairs(recs, "objective", NO_NSP.name, ltr) or _pairs(recs, "objective", BERT.name, ltr)
        comps += found
    outcomes = [compare(a, b) for a, b in comps]
    add("bidirectional_beats_ltr", outcomes,
        "; ".join(f"{a['task']}: {a['objective']} {_fmt(a)} vs {b['objective']} {_fmt(b)}{_tie(o)}"
                  for (a, b), o in zip(comps, outcomes))
        or "needs a bidirectional (MLM) cell and an LTR cell on the same task", comps)

    # 3. bigger beats smaller: in every group of cells that differ only in size, the largest model
    #    beats the smallest (the full order is in the detail)
    groups = {}
    for r in recs:
        groups.setdefault(_others(r, "size"), []).append(r)
    outcomes, details, compared, used = [], [], [], []
    for g in groups.values():
        if len({r["size"] for r in g}) < 2:
            continue
        used += g
        g = sorted(g, key=lambda r: grid.encoder_parameters(r["size"]))
        learnt = [r for r in g if not plateau(r)]  # no direction is read from a model that learnt only word counts
        measurable = len({r["size"] for r in learnt}) > 1
        outcomes.append(compare(learnt[-1], learnt[0]) if measurable else NOT_MEASURABLE)
        compared.append((learnt[-1], learnt[0]) if measurable else (g[-1], g[-1]))
        details.append(f"{g[0]['task']}: " + " → ".join(f"{r['size']} {_fmt(r)}" for r in g) + _tie(outcomes[-1]))
    add("bigger_beats_smaller", outcomes, "; ".join(details) or "needs two or more sizes on the same task", compared,
        used)

    # 4. concat-last-4 close to fine-tuning, well above embeddings: nearer to the fine-tuned score
    #    than to the embeddings' (paper: 0.3 below fine-tuning, 5.1 above the embeddings), i.e. above
    #    the midpoint of the two; both comparisons use the largest spread of the three settings
    groups = {}
    for r in recs:
        groups.setdefault(_others(r, "transfer"), {})[r["transfer"]] = r
    outcomes, details, used = [], [], []
    for g in groups.values():
        if not {"fine-tune", "concat-last-4", "embeddings"} <= set(g):
            continue
        ft, cc, em = (g[k] for k in ("fine-tune", "concat-last-4", "embeddings"))
        used += [ft, cc, em]
        spread = max(r.get("spread", 0.0) for r in (ft, cc, em))
        middle = {"score": (ft["score"] + em["score"]) / 2, "spread": spread}
        scores = f"{ft['task']}: fine-tune {_fmt(ft)}, concat-last-4 {_fmt(cc)}, embeddings {_fmt(em)}"
        if (did_not_learn(cc) and did_not_learn(ft)) or any(map(plateau, (ft, cc, em))):
            outcomes.append(NOT_MEASURABLE)  # how close to fine-tuning cannot be told where neither learnt
            details.append(scores + _tie(outcomes[-1]))
            continue
        above, nearer = compare({**cc, "spread": spread}, em), compare(cc, middle)
        outcomes.append(verdict([above, nearer]))
        # Both halves in words: "no difference measurable here" alone read as "concat-last-4 is as good as
        # fine-tuning" beside 77.2 / 66.0 / 61.2, where fine-tuning led by 11.2 points, beyond the noise
        below_ft, above_em = ft["score"] - cc["score"], cc["score"] - em["score"]

        def gap(points: float, outcome: str, word: str, other: str, what: str) -> str:
            where = f"{abs(points):.1f} points {word if points >= 0 else other} {what}"
            return where + (" (within the noise)" if outcome == TIE else " (measurably)" if outcome in (YES, NO)
                            else f" ({outcome})")
        details.append(
            f"{scores} — concat-last-4 is {gap(below_ft, compare(ft, cc), 'below', 'above', 'fine-tuning')} and "
            f"{gap(above_em, above, 'above', 'below', 'the embeddings')}: "
            + {YES: "nearer fine-tuning than the embeddings", NO: "nearer the embeddings than fine-tuning",
               TIE: "whether it is nearer fine-tuning or the embeddings is within the noise"}[nearer])
    add("concat_close_to_finetune", outcomes,
        "; ".join(details) or "needs fine-tune, concat-last-4 and embeddings cells on the same task", used=used)
    return out


# ----- exports --------------------------------------------------------------------------------
EXPORT_COLUMNS = ["axis", "setting", "task", "metric", "ours", "paper", "paper_task", "paper_metric", "paper_source",
                  "state", "size", "objective", "transfer", "masking", "pretrain_mlm_ppl", "cell_id"]


def to_csv(df: pd.DataFrame) -> str:
    """The results as CSV, their text cells safe to open in a spreadsheet (``safe_text.csv_cell``);
    :func:`read_csv` reads it back as it was."""
    return safe_text.frame_csv(df[EXPORT_COLUMNS])


def _md_cell(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    if isinstance(v, float):
        v = f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame, columns=("setting", "task", "metric", "ours", "paper", "paper_task",
                                               "state")) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(_md_cell(row[c]) for c in columns) + " |")
    return "\n".join(lines)


def to_markdown(df: pd.DataFrame, dirs: list[dict], title: str = "Ablation results") -> str:
    """Tables per axis (ours beside the paper, percent) and the directions check."""
    parts = [f"# {title}", "",
             "Ours: dev score in percent (accuracy, or F1 for NER/QA). Paper: Devlin et al. 2019 "
             "(Tables 5-8) or Turc et al. 2019 (miniatures), as named in each table.", ""]
    for axis in AXIS_ORDER:
        sub = df[df["axis"] == axis]
        if not len(sub):
            continue
        sources = sorted({s for s in sub["paper_source"].dropna()})
        # a seeded grid's rows of one setting differ only by their seed: the page shows it, so does this
        seeded = "seed" in sub and sub["seed"].notna().any()
        if seeded:
            sub = sub.assign(seed=sub["seed"].map(lambda v: "" if pd.isna(v) else str(int(v))))
        # the paper's task names its metric too ("MNLI-m, not pairs:tiny"), as on the page
        columns = ("setting", "task", *(("seed",) if seeded else ()), "metric", "ours", "paper", "paper_task", "state")
        parts += [f"## {AXIS_TITLES[axis]}", "", markdown_table(sub, columns), ""]
        if sources:
            parts += ["Paper numbers: " + "; ".join(sources) + ".", ""]
        if axis == "transfer":
            parts += [table7_caption(sub), ""]
    parts += ["## Directions", "", RULE, "", "| direction | held in ours | our numbers | paper | later work |",
              "|---|---|---|---|---|"]
    for d in dirs:
        parts.append(f"| {_md_cell(d['direction'])} | {d['verdict']} | {_md_cell(d['detail'])} | "
                     f"{_md_cell(d['paper'])} | {_md_cell(d.get('later', ''))} |")
    return "\n".join(parts) + "\n"


def parse_markdown_tables(text: str) -> list[pd.DataFrame]:
    """The pipe tables of a Markdown text back as DataFrames (strings) - for tests and reuse."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
            continue
        if len(current) >= 2:
            split = lambda ln: [c.strip().replace("\\|", "|")  # noqa: E731
                                for c in ln.strip().strip("|").replace("\\|", "\0").split("|")]
            header = split(current[0])
            body = [[c.replace("\0", "|") for c in split(ln)] for ln in current[2:]]
            tables.append(pd.DataFrame(body, columns=[h.replace("\0", "|") for h in header]))
        current = []
    return tables


def read_csv(text: str) -> pd.DataFrame:
    return safe_text.read_csv(text)


# ----- plots ------------------------------------------------------------------------------------
def figures(df: pd.DataFrame) -> dict:
    """One plotly figure per axis: our score per setting (bars, one colour per task; the mean of
    its seeds, their standard deviation as error bars) and the paper's number for the same setting
    (diamonds), both in percent. The paper's numbers are drawn once however many of our tasks stand
    beside them: tasks given the same numbers (Table 7 has NER only) share one series of diamonds."""
    # only for the figures: the GPU machine has no plotly (tools/gpu_kit/offline.py), and its CLI
    # imports this module
    import plotly.graph_objects as go

    figs = {}
    for axis in AXIS_ORDER:
        sub = df[(df["axis"] == axis)]
        if not len(sub):
            continue
        fig = go.Figure()
        settings = list(dict.fromkeys(sub["setting"]))
        papers: dict[tuple, dict] = {}  # the paper's numbers per setting -> its metric and our tasks beside them
        for task, g in sub.groupby("task", sort=False):
            seeds = g.groupby("setting", sort=False)["ours"]
            spread = seeds.std().reindex(settings) if seeds.count().max() > 1 else None
            g = g.drop_duplicates("setting").set_index("setting").reindex(settings)
            g["ours"] = seeds.mean().reindex(settings)
            fig.add_bar(x=settings, y=g["ours"], name=f"ours: {task}",
                        error_y=None if spread is None else dict(type="data", array=spread.fillna(0).tolist()),
                        hovertext=[f"{m or ''} ({s})" + (f", mean of {k:.0f} seeds" if k > 1 else "")
                                   for m, s, k in zip(g["metric"], g["state"], seeds.count().reindex(settings))])
            if g["paper"].notna().any():
                metric = next((m for m in g["paper_metric"] if isinstance(m, str)), "paper")
                values = tuple(None if pd.isna(v) else float(v) for v in g["paper"])  # NaN would never match
                sources = [src if isinstance(src, str) else "" for src in g["paper_source"]]
                papers.setdefault(values, {"metric": metric, "tasks": [], "sources": sources})["tasks"].append(task)
        for values, p in papers.items():
            # a diamond of another paper says so: the size chart's small models are Turc et al.'s GLUE test
            # scores, not Table 6's dev scores (the chart's title names Table 6)
            others = list(dict.fromkeys(src for src, v in zip(p["sources"], values)
                                        if v is not None and src and not src.startswith("Devlin")))
            fig.add_scatter(x=settings, y=list(values), mode="markers", marker_symbol="diamond", marker_size=12,
                            name=f"paper: {p['metric']} (for {', '.join(map(str, p['tasks']))})"
                                 + "".join(f"; points from {o}" for o in others),
                            hovertext=[src for src in p["sources"]])
        # every setting labelled (plotly drops category labels that would overlap: Table 7's seven lost three),
        # and the legend under the chart, where it covers no diamond near 100 %
        fig.update_xaxes(tickmode="array", tickvals=settings, ticktext=settings, automargin=True)
        fig.update_layout(title=AXIS_TITLES[axis], barmode="group", yaxis_title="score (%)",
                          xaxis_title=axis, legend_title_text="", height=440, margin=dict(t=50, b=40),
                          legend=dict(orientation="h", yanchor="top", y=-0.25, x=0))
        figs[axis] = fig
    return figs


# ----- reports that ship with the app ----------------------------------------------------------------
def shipped_reports() -> dict[str, tuple[str, str]]:
    """The ablation reports in ``assets/`` (``ablation-<recipe>.md``), measured by the team with a
    shipped recipe: ``{recipe: (how it was measured, the report)}``, both Markdown as the page shows
    them inside an expander. The page shows them so that a student reads the results without
    re-running the grid (cpu-small took 41 CPU minutes)."""
    out = {}
    for path in sorted(ASSETS.glob("ablation-*.md")):
        text = path.read_text(encoding="utf-8")
        comment = re.match(r"\s*<!--(.*?)-->\s*", text, flags=re.S)
        how = _how_measured(comment.group(1)) if comment else ""
        report = text[comment.end():] if comment else text
        # one level of page below the expander's title: the report's "# title" reads as a section
        out[path.stem[len("ablation-"):]] = (how, re.sub(r"^(#{1,4}) ", r"\1## ", report, flags=re.M))
    return out


def _how_measured(comment: str) -> str:
    """A report's opening comment as Markdown: its prose joined, each command on a line of its own as
    code (a command's ``$OUT`` would otherwise read as mathematics), what follows a command after two
    spaces back in prose."""
    parts = []
    for line in comment.strip().splitlines():
        line = line.strip()
        if line.startswith(("python ", "bert-explorer ")):
            command, rest = (re.split(r"\s{2,}", line, maxsplit=1) + [""])[:2]
            parts.append("  \n`" + command + "`" + ("  \n" + rest.replace("$", "\\$") if rest else "") + "  \n")
        elif line:
            parts.append(line.replace("$", "\\$") + " ")
    return "".join(parts).strip()
