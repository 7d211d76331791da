"""Ablation recipes and the cells they expand to (Devlin et al. 2019, Section 5, Tables 5-8).

A **recipe** is a JSON object::

    {"name": "cpu-small",
     "pretrain": {...},          # PretrainConfig settings every pre-training shares (corpus, steps, ...)
     "finetune": {...},          # FinetuneConfig settings every cell shares (epochs, lr, ...)
     "tasks": {"topics": {"train": "builtin:bbc-topics", "max_train_examples": 800},
               "pairs":  {"train": "pairs:bbc", "n_train": 2000, "n_dev": 500}},
     "baseline": {"size": "tiny", "objective": "mlm+nsp", "transfer": "fine-tune", "masking": "80/10/10"},
     "axes": {"objective": ["mlm+nsp", "mlm", "ltr", "ltr+bilstm"],   # Table 5
              "size": ["tiny", "mini"],                               # Table 6
              "transfer": ["fine-tune", "embeddings", "concat-last-4"],  # Table 7
              "masking": ["80/10/10", "100/0/0"]},                    # Table 8 (MASK/SAME/RND %)
     "axis_tasks": {"transfer": ["topics"]},    # optional: which tasks an axis runs on (default all)
     "grid": "one-at-a-time"}                    # or "product"

The paper changes **one thing at a time** around BERT-Base (MLM+NSP, fine-tuned, 80/10/10),
so that is the default: each axis varies its own setting while the others stay at the
baseline, and the baseline cell is shared by every axis. ``"grid": "product"`` runs every
combination instead.

Each **cell** = one pre-training configuration + one fine-tuning configuration. Cells whose
pre-training settings are identical share one pre-trained checkpoint, keyed by a hash of the
full :class:`PretrainConfig` (e.g. all transfer-mode cells reuse the baseline model, and LTR
and LTR+BiLSTM reuse the same left-to-right model).

Task ``train`` specs: ``builtin:<name>``, ``tiny:<task>``, a file path (CSV/TSV/JSONL/CoNLL/
SQuAD JSON), or ``pairs:<corpus>``: a sentence-pair task made from the corpus' documents
(:mod:`.pairs`), because no MNLI/QNLI-like data ships offline.

Two optional keys:

* ``"seeds": [0, 1, 2]`` fine-tunes every cell once per seed (the split, the sampling, the batches
  and the new output layer change with it); the results show each setting's mean ± spread.
* ``"pretrained": "hub"``: nothing is pre-trained here. Each size is Turc et al.'s (2019) miniature
  of that shape, pre-trained by Google with MLM + NSP and downloaded by name from the Hugging Face
  Hub (``google/bert_uncased_L-<L>_H-<H>_A-<H/64>``; ``hub.py``), once, into the standard cache, so
  only ``size`` (and ``transfer``) can vary: Table 6 with real pre-trained weights (the
  ``miniatures`` recipe). A "pre-training" of the plan is then a download.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import checkpoint, hub, hub_server
from ..data.objectives import (LEFT_TO_RIGHT, OBJECTIVES as PRETRAINING_OBJECTIVES, Objective, objective_type,
                               predicted_share)
from ..data.pretraining import MaskingConfig
from ..data.tasks import BUILTIN_TASKS
from ..data.uploads.names import safe_filename, slug
from ..model.config import PRESETS, preset
from ..tasks.base import TaskType
from ..tasks.registry import PAIR_CLASSIFICATION, TASK_TYPES, task_type as named_task_type
from ..train import estimate as est
from ..train.estimate import encoder_parameters as layer_parameters, flops_per_token
from ..train.finetune_config import DEV_EXAMPLES, FEATURE_MODES, MAX_DEV_EXAMPLES, MAX_TRAIN_EXAMPLES, FinetuneConfig
from ..train.pretrain_config import PretrainConfig, check_new_run
from . import paper

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
AXES = ("size", "objective", "transfer", "masking")


@dataclass(frozen=True)
class Table5Row:
    """A row of Table 5 (the objective axis of a recipe): a pre-training objective, and for "LTR &
    No NSP + BiLSTM" the randomly initialised BiLSTM added on top when fine-tuning (Section 5.1)."""

    objective: Objective
    bilstm: bool = False

    @property
    def name(self) -> str:  # what a recipe writes
        return self.objective.name + ("+bilstm" if self.bilstm else "")

    @property
    def label(self) -> str:
        return self.objective.label + (" + BiLSTM on top" if self.bilstm else "")


ROWS = {r.name: r for r in [*(Table5Row(o) for o in PRETRAINING_OBJECTIVES.values()), Table5Row(LEFT_TO_RIGHT, True)]}
OBJECTIVES = tuple(ROWS)
OBJECTIVE_LABELS = {name: r.label for name, r in ROWS.items()}
TRANSFERS = ("fine-tune",) + FEATURE_MODES
MASKINGS = tuple(paper.TABLE8.rows)  # "MASK/SAME/RND" in percent, the paper's six rows
DEFAULT_BASELINE = {"size": "mini", "objective": "mlm+nsp", "transfer": "fine-tune", "masking": "80/10/10"}
# task settings that are not FinetuneConfig fields; "examples" and "words_per_example": the size of a task
# file, counted where it was read (the studio's upload, ``ablate --task FILE``), for the estimate only
TASK_EXTRA_KEYS = ("paper_column", "n_train", "n_dev", "examples", "words_per_example")
MAX_SEEDS = 10  # each seed is a fine-tuning of every cell: a recipe's cost grows with them
MAX_CELLS = 1000  # the shipped recipes have 12-37; every size x objective x transfer x masking of the page,
                  # as a product, was 7,920 cells (849 days here) and seconds of planning at each click


class RecipeError(ValueError):
    """A recipe that cannot run; the message says which field and what to write instead."""


# ----- recipes ------------------------------------------------------------------------------
def list_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.json"))


def load_recipe(name_or_path: str | Path) -> dict:
    """A shipped recipe by name (``paper-mini``, ``cpu-small``, ``smoke``) or a JSON file."""
    p = Path(name_or_path)
    if not p.is_file():
        shipped = RECIPES_DIR / f"{name_or_path}.json"
        if not shipped.is_file():
            raise RecipeError(f"unknown recipe {str(name_or_path)!r}; choose one of {', '.join(list_recipes())} "
                              f"or give a JSON file")
        p = shipped
    try:
        recipe = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RecipeError(f"recipe {p} is not valid JSON (line {e.lineno}: {e.msg})") from e
    if not isinstance(recipe, dict):
        raise RecipeError(f"recipe {p} must hold a JSON object")
    recipe.pop("kind", None)  # a run directory's config.json says kind: ablate
    recipe.setdefault("name", p.stem)
    return validate(recipe)


def parse_masking(text: str) -> tuple[float, float, float]:
    """ "80/10/10" (MASK/SAME/RND in percent, the order of Table 8) -> (mask, same, random) fractions."""
    try:
        parts = [float(x) for x in str(text).split("/")]
    except ValueError:
        parts = []
    if len(parts) != 3 or not all(math.isfinite(x) for x in parts) or min(parts) < 0 or abs(sum(parts) - 100) > 1e-6:
        raise RecipeError(f"masking {text!r} must be MASK/SAME/RND percentages that add up to 100, like 80/10/10")
    return parts[0] / 100, parts[1] / 100, parts[2] / 100


def size_lha(size: str) -> tuple[int, int, int]:
    c = PRESETS[size]
    return c.num_layers, c.hidden_size, c.num_heads


def encoder_parameters(size: str) -> int:
    """Parameters of the Transformer layers (no embeddings), about: see ``train/estimate.py``."""
    L, H, _ = size_lha(size)
    return layer_parameters(L, H)


def task_type(train_spec: str) -> TaskType | None:
    """The task type a spec will give, where it is known without reading a file."""
    if train_spec.startswith("builtin:"):
        info = BUILTIN_TASKS.get(train_spec[len("builtin:"):])
        return info.task if info else None
    if train_spec.startswith("tiny:"):
        return TASK_TYPES.get(train_spec[len("tiny:"):])
    if train_spec.startswith("pairs:"):
        return PAIR_CLASSIFICATION
    return None


def task_name(source: str, taken=()) -> str:
    """The name a grid built in the studio gives the task it reads from ``source`` (an uploaded file's name,
    or builtin:<name>, tiny:<task>, pairs:<corpus>): what its cells, tables, charts and directions call it,
    so an upload reads as its file ("reviews.csv") and a built-in set as itself ("bbc-topics"). A plain word
    (:func:`validate`), and none of ``taken``, the grid's other tasks."""
    source = str(source)
    if source.startswith("builtin:"):
        name = slug(source.removeprefix("builtin:"))
    elif source.startswith(("tiny:", "pairs:")):
        name = slug(source.replace(":", "-", 1))
    else:
        name = safe_filename(source)
    name = re.sub(r"_{2,}", "_", name)  # "__" separates the parts of a cell's id
    while name in taken:
        name = f"your-{name}"
    return name


def validate(recipe: dict) -> dict:
    """Check a recipe and fill in defaults; raise :class:`RecipeError` naming the bad field."""
    r = json.loads(json.dumps(recipe))  # a deep copy that is also proof it is JSON
    r.setdefault("name", "custom")
    r.setdefault("description", "")
    r.setdefault("grid", "one-at-a-time")
    if r["grid"] not in ("one-at-a-time", "product"):
        raise RecipeError(f"grid must be 'one-at-a-time' or 'product', not {r['grid']!r}")
    for part in ("pretrain", "finetune"):
        r.setdefault(part, {})
        if not isinstance(r[part], dict):
            raise RecipeError(f"{part} must be an object of settings")
    _check_set_by_the_grid(r)
    try:  # the most a new run may ask, too: checked before a plan is said or a folder written, not at each cell
        check_new_run(PretrainConfig.from_dict({k: v for k, v in r["pretrain"].items() if k != "vocab"}))
    except (TypeError, ValueError) as e:
        raise RecipeError(f"pretrain settings: {e}") from e
    tasks = r.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise RecipeError("tasks must name at least one task, e.g. {\"topics\": {\"train\": \"builtin:bbc-topics\"}}")
    for name, spec in tasks.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("train"), str):
            raise RecipeError(f"task {name!r} needs a train spec: builtin:<name>, tiny:<task>, pairs:<corpus> "
                              f"or a file path")
        if "__" in name or "/" in name or not name.strip():
            raise RecipeError(f"task name {name!r} must be a plain word (no '/' or '__')")
        kind = task_type(spec["train"])
        if spec["train"].startswith("builtin:") and kind is None:
            raise RecipeError(f"task {name!r}: no built-in data set {spec['train']!r}; choose one of "
                              f"{', '.join('builtin:' + n for n in BUILTIN_TASKS)}")
        if spec.get("task") is not None:  # declared, as its fine-tuning reads it: a file's name says no type
            try:
                kind = named_task_type(str(spec["task"]))
            except ValueError as e:
                raise RecipeError(f"task {name!r}: {e}") from None
        col = spec.get("paper_column") or paper.DEFAULT_COLUMN.get(kind)
        if col is not None and col not in paper.COLUMNS:
            raise RecipeError(f"task {name!r}: paper_column must be one of {', '.join(paper.COLUMNS)}")
        spec["paper_column"] = col
        spec["task_type"] = kind.name if kind else None  # a plan is JSON: the name
    baseline = {**DEFAULT_BASELINE, **r.get("baseline", {})}
    axes = r.get("axes", {})
    unknown = set(axes) - set(AXES)
    if unknown:
        raise RecipeError(f"unknown axis {sorted(unknown)[0]!r}; axes are {', '.join(AXES)}")
    allowed = {"size": tuple(PRESETS), "objective": OBJECTIVES, "transfer": TRANSFERS, "masking": None}
    for axis in AXES:
        values = [baseline[axis]] + list(axes.get(axis, []))
        for v in values:
            if axis == "masking":
                parse_masking(v)
            elif v not in allowed[axis]:
                raise RecipeError(f"{axis} {v!r} is not known; choose from {', '.join(allowed[axis])}")
    r["baseline"] = baseline
    r["axes"] = {a: list(dict.fromkeys(axes[a])) for a in AXES if axes.get(a)}
    transfers = {baseline["transfer"], *r["axes"].get("transfer", [])}
    for name, spec in tasks.items():
        _check_task_settings(r, name, spec, transfers)
    _check_left_to_right_rows(r, {baseline["objective"], *r["axes"].get("objective", [])})
    seeds = r.get("seeds")
    if seeds is not None and (not isinstance(seeds, list) or not 1 <= len(seeds) <= MAX_SEEDS
                              or len(set(map(str, seeds))) != len(seeds)
                              or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
        shown = repr(seeds)  # (a thousand seeds were echoed whole: about 5,000 characters)
        raise RecipeError(f"seeds must be a list of 1 to {MAX_SEEDS} different whole numbers, like [0, 1, 2], "
                          f"not {shown if len(shown) <= 80 else shown[:60] + f'... ({len(seeds)} values)'}")
    if r.get("pretrained") not in (None, "hub"):
        raise RecipeError(f"pretrained must be \"hub\" (download Turc et al.'s miniatures) or left out (pre-train "
                          f"here), not {r['pretrained']!r}")
    if r.get("pretrained") == "hub":
        _check_hub_recipe(r)
    for axis, names in r.setdefault("axis_tasks", {}).items():
        missing = [n for n in names if n not in tasks]
        if axis not in AXES or missing:
            raise RecipeError(f"axis_tasks[{axis!r}] names {missing or axis!r}, which is not a task or axis")
    cells = len(_combinations(r, r["axis_tasks"])) * len(r.get("seeds") or [None])
    if cells > MAX_CELLS:  # before a plan is built or estimated: the page builds it again at every click
        raise RecipeError(f"this grid has {cells:,} cells, more than the {MAX_CELLS:,} one ablation runs; vary fewer "
                          f"values at once (one at a time, not the product) or split it into several ablations")
    _check_twin_sizes([baseline["size"], *r["axes"].get("size", [])])
    return r


# What each cell sets itself, from the grid's baseline and axes: a recipe's pretrain or finetune that also set
# one was silently overruled (a recipe's "size": "L4-H128" pre-trained mini), so it is refused, saying where.
_GRID_PRETRAIN = {"size": "baseline.size (or axes.size)", "objective": "baseline.objective (or axes.objective)",
                  **{k: "baseline.masking, as MASK/SAME/RND like \"80/10/10\" (or axes.masking)"
                     for k in ("mask_ratio", "keep_ratio", "random_ratio", "masking")}}
_GRID_FINETUNE = {"model": "the grid (each cell fine-tunes its own pre-training)",
                  "mode": "baseline.transfer (or axes.transfer)", "features": "baseline.transfer (or axes.transfer)",
                  "train": "each task's own train"}
_TASK_BOUNDS = {"n_train": MAX_TRAIN_EXAMPLES, "n_dev": MAX_DEV_EXAMPLES, "examples": MAX_TRAIN_EXAMPLES + MAX_DEV_EXAMPLES,
               "words_per_example": 100_000}


def _check_set_by_the_grid(r: dict) -> None:
    for part, grid_sets in (("pretrain", _GRID_PRETRAIN), ("finetune", _GRID_FINETUNE)):
        for key in r[part]:
            if key in grid_sets:
                raise RecipeError(f"{part}.{key} is set for each cell by {grid_sets[key]}: move it there")
    if "init" in r["pretrain"] and r["pretrain"]["init"] is not None:
        raise RecipeError("pretrain.init cannot be part of a recipe: each cell pre-trains its size from zero (a warm "
                          "start would make every size the one model it starts from); warm-start a single run with "
                          "`bert-explorer pretrain --init`")


def architecture(size: str) -> tuple[int, int, int, int]:
    """What makes two sizes one model: (layers, hidden size, heads, feed-forward size)."""
    c = PRESETS[size]
    return c.num_layers, c.hidden_size, c.num_heads, c.intermediate_size


def _check_twin_sizes(sizes: list[str]) -> None:
    """Two names of one architecture (tiny is L2-H128) would pre-train and fine-tune the same model twice, and
    "bigger beats smaller" would compare it with itself; the grid asks for one of them."""
    seen: dict[tuple, str] = {}
    for size in dict.fromkeys(sizes):
        twin = seen.setdefault(architecture(size), size)
        if twin != size:
            L, H, A, ffn = architecture(size)
            raise RecipeError(f"sizes {twin} and {size} are the same model ({L} layers, hidden size {H}, {A} heads, "
                              f"feed-forward {ffn}), which would be trained twice for one row; keep one of them")


def _check_task_settings(r: dict, name: str, spec: dict, transfers=("fine-tune",)) -> None:
    """A task's fine-tuning settings as the cells will read them, strictly (a misspelt key, or one the grid
    sets, would have been dropped and the cells run at the defaults), for each transfer the grid gives it
    (a learning-rate grid is fine-tuning's only), and its sizes bounded before anything is made of them (a
    pair task's n_train is built in memory)."""
    for key, cap in _TASK_BOUNDS.items():
        v, whole = spec.get(key), key != "words_per_example"  # (a mean: a fraction of a word)
        if v is not None and (not isinstance(v, int if whole else (int, float)) or isinstance(v, bool)
                              or not (1 if whole else 0) <= v <= cap):
            raise RecipeError(f"task {name!r}: {key} must be {'a whole number' if whole else 'a number'} from "
                              f"{1 if whole else 0} to {cap:,}, not {v!r}")
    for key in spec:
        if key in _GRID_FINETUNE and key != "train":
            raise RecipeError(f"task {name!r}: {key} is set for each cell by {_GRID_FINETUNE[key]}: leave it out")
    settings = {**r["finetune"], **{k: v for k, v in spec.items() if k not in TASK_EXTRA_KEYS + ("task_type",)}}
    for transfer in sorted(transfers):
        mode = {"mode": "fine-tune"} if transfer == "fine-tune" else {"mode": "feature-based", "features": transfer}
        try:
            FinetuneConfig.from_dict({**settings, **mode, "model": "minilm"})
        except (TypeError, ValueError) as e:
            cells = "" if transfer == "fine-tune" else f" (its {transfer} cells)"
            raise RecipeError(f"task {name!r}{cells}: fine-tuning settings (the recipe's finetune and the task's "
                              f"own): {e}") from e


# What the left-to-right cells' own fine-tuning (experiments/ltr.py: Table 5's LTR rows, a head on the last token
# or a BiLSTM) does not do: a grid that set one would have compared its bidirectional cells, tuned so, with LTR
# cells that were not (the best of four learning rates against one).
_NOT_FOR_LTR = {"lr_grid": "tries one learning rate", "grad_accum": "adds up no batches",
                "eval_every": "evaluates after each epoch", "early_stopping_patience": "never stops early",
                "keep_best": "keeps its last weights", "pos_weight": "weighs no labels"}


def _check_left_to_right_rows(r: dict, objectives: set) -> None:
    if not objectives & {"ltr", "ltr+bilstm"}:
        return
    for where, settings in [("finetune", r["finetune"]), *((f"task {n!r}", t) for n, t in r["tasks"].items())]:
        for key, why in _NOT_FOR_LTR.items():
            v = settings.get(key)
            if v not in (None, False, [], 1, "none") and not (key == "lr_grid" and len(v) == 1):
                raise RecipeError(f"{where}: {key} does not apply to the left-to-right cells, whose fine-tuning {why}; "
                                  "leave it out, or leave out the ltr rows, so that every row is tuned alike")


def hub_repo(size: str) -> str | None:
    """The Hub id of Turc et al.'s miniature with the shape of preset ``size`` (A = H/64), or None."""
    if size not in PRESETS:
        return None
    L, H, A = size_lha(size)
    repo = f"google/bert_uncased_L-{L}_H-{H}_A-{H // 64}"
    return repo if A == H // 64 and repo in hub.CATALOGUE else None


def hub_sizes() -> list[str]:
    """The size names that have a downloadable miniature (the short names first: tiny, mini, ...)."""
    named = [s for s in PRESETS if not s.startswith("L") and hub_repo(s)]
    return named + [s for s in PRESETS if s.startswith("L") and hub_repo(s) and s not in est.ALIASES]


def _check_hub_recipe(r: dict) -> None:
    """A recipe of downloaded miniatures varies only what Google's models leave free."""
    fixed = [a for a in ("objective", "masking") if a in r["axes"]]
    if fixed:
        raise RecipeError(f"a recipe of downloaded miniatures (pretrained: hub) cannot vary {fixed[0]}: Google "
                          "pre-trained them all with MLM + NSP and 80/10/10 masking; vary size (and transfer)")
    r["baseline"].update(objective="mlm+nsp", masking="80/10/10")
    for size in [r["baseline"]["size"]] + r["axes"].get("size", []):
        if hub_repo(size) is None:
            raise RecipeError(f"size {size!r} has no pre-trained miniature on the Hub; choose from "
                              f"{', '.join(hub_sizes())}")


# ----- cells --------------------------------------------------------------------------------
@dataclass
class Cell:
    task: str
    size: str
    objective: str
    transfer: str
    masking: str
    axes: list[str] = field(default_factory=list)  # the axes whose table this cell is a row of
    pretrain_key: str = ""
    finetune: dict = field(default_factory=dict)   # FinetuneConfig settings without the model
    seed: int | None = None                        # set when the recipe names seeds

    @property
    def id(self) -> str:
        return "__".join([self.task, self.size, self.objective.replace("+", "-"), self.transfer,
                          self.masking.replace("/", "-")] + ([] if self.seed is None else [f"seed-{self.seed}"]))

    def to_dict(self) -> dict:
        return {"id": self.id, **asdict(self)}


def pretrain_config(recipe: dict, size: str, objective: str, masking: str) -> dict:
    """The full PretrainConfig (as a dict) that a cell needs. LTR+BiLSTM pre-trains the LTR model
    (the BiLSTM is added at fine-tuning, Section 5.1); an LTR model masks nothing, so its
    masking ratios are the defaults whatever the cell says and every LTR cell shares it.
    In a recipe of downloaded miniatures it is ``{"hub": <Hub id>, "size": size}``: a download."""
    if recipe.get("pretrained") == "hub":
        return {"hub": hub_repo(size), "size": size}
    pretrained_with = ROWS[objective].objective
    mask, same, rnd = parse_masking(masking if pretrained_with.masks else "80/10/10")
    d = {**recipe["pretrain"], "size": size, "objective": pretrained_with.name,
         "mask_ratio": mask, "keep_ratio": same, "random_ratio": rnd}
    vocab = d.get("vocab", "train")
    cfg = PretrainConfig.from_dict({k: v for k, v in d.items() if k != "vocab"}).to_dict()
    cfg["vocab"] = vocab  # "shared" = one WordPiece vocabulary for the whole ablation (runner.py)
    return cfg


# Settings added to PretrainConfig after ablations were first run, with the value that means
# "as before": left out of the key at that value, so earlier ablation folders are still found.
_LATER_FIELDS = {"eval_corpora": None, "init": None, "freeze_word_embeddings": False, "mlm_only_corpus": None}


def pretrain_key(cfg: dict) -> str:
    cfg = {k: v for k, v in cfg.items() if not (k in _LATER_FIELDS and v == _LATER_FIELDS[k])}
    if "max_predictions_per_seq" in cfg and cfg["max_predictions_per_seq"] is None:  # (once a fixed 20 by default:
        # keyed as it was where that 20 never cut the rate, so that earlier ablation folders are still found)
        cfg["max_predictions_per_seq"] = MaskingConfig(mlm_probability=cfg.get("mlm_probability", 0.15)).cap_key(
            int(cfg.get("max_seq_length", 128)))
    if "precision" in cfg and "amp" not in cfg:  # `amp: true` became `precision: auto`
        precision = cfg.pop("precision")
        cfg["amp"] = precision == "auto" if precision in ("auto", "fp32") else precision
    return hashlib.sha1(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:12]


def finetune_config(recipe: dict, task: str, transfer: str) -> dict:
    spec = recipe["tasks"][task]
    d = {**recipe["finetune"], **{k: v for k, v in spec.items() if k not in TASK_EXTRA_KEYS + ("task_type",)}}
    d["mode"] = "fine-tune" if transfer == "fine-tune" else "feature-based"
    if transfer != "fine-tune":
        d["features"] = transfer
    d.pop("model", None)
    names = set(FinetuneConfig.__dataclass_fields__)
    return {k: v for k, v in d.items() if k in names}


def _combinations(recipe: dict, axis_tasks: dict) -> list[tuple[str, dict, str]]:
    """(task, settings, axis) for every cell the grid asks for, duplicates included."""
    base, axes = recipe["baseline"], recipe["axes"]
    out = []
    if recipe["grid"] == "product":
        values = {a: list(dict.fromkeys([base[a]] + axes.get(a, []))) if a in axes else [base[a]] for a in AXES}
        for task in recipe["tasks"]:
            for combo in itertools.product(*(values[a] for a in AXES)):
                out.append((task, dict(zip(AXES, combo)), "grid"))
        return out
    for axis in AXES:
        if axis not in axes:
            continue
        for task in axis_tasks.get(axis) or list(recipe["tasks"]):
            for v in dict.fromkeys([base[axis]] + axes[axis]):  # the baseline is every axis' reference
                out.append((task, {**base, axis: v}, axis))
    if not out:  # no axes: just the baseline
        out = [(t, dict(base), "baseline") for t in recipe["tasks"]]
    return out


def expand(recipe: dict) -> dict:
    """The plan of a recipe: ``{"recipe", "cells": [cell dicts], "pretrainings": {key: config}}``.

    Cells are ordered so that all cells of one pre-trained model follow its pre-training (the
    baseline model first), which makes early results arrive early."""
    recipe = validate(recipe)
    cells: dict[str, Cell] = {}
    pretrainings: dict[str, dict] = {}
    for task, s, axis in _combinations(recipe, recipe.get("axis_tasks", {})):
        if ROWS[s["objective"]].bilstm and s["transfer"] != "fine-tune":
            continue  # the BiLSTM variant is a fine-tuning set-up; frozen LTR features are plain "ltr"
        for seed in recipe.get("seeds") or [None]:
            cell = Cell(task, s["size"], s["objective"], s["transfer"], s["masking"], seed=seed)
            if cell.id in cells:
                if axis not in cells[cell.id].axes:
                    cells[cell.id].axes.append(axis)
                continue
            cfg = pretrain_config(recipe, s["size"], s["objective"], s["masking"])
            cell.pretrain_key = pretrain_key(cfg)
            pretrainings.setdefault(cell.pretrain_key, cfg)
            cell.finetune = finetune_config(recipe, task, s["transfer"])
            if seed is not None:
                cell.finetune["seed"] = seed
            cell.axes = [axis]
            cells[cell.id] = cell
    order = {k: i for i, k in enumerate(pretrainings)}
    ordered = sorted(cells.values(), key=lambda c: order[c.pretrain_key])  # stable: creation order within
    return {"recipe": recipe, "cells": [c.to_dict() for c in ordered], "pretrainings": pretrainings}


def pretraining_label(cfg: dict) -> str:
    if "hub" in cfg:
        return f"{cfg['size']} · {cfg['hub']} (pre-trained by Google, downloaded)"
    ratios = f"{cfg['mask_ratio'] * 100:g}/{cfg['keep_ratio'] * 100:g}/{cfg['random_ratio'] * 100:g}"
    return f"{cfg['size']} · {cfg['objective']}" + (f" · {ratios}" if objective_type(cfg["objective"]).masks else "")


# ----- time estimate ------------------------------------------------------------------------
# On a CPU every rate is this machine's, measured (``train/estimate.cpu_flop_s``: a layer of the size's
# width timed here on a background run's threads, in the precision training picks on this CPU), as for
# every other job's estimate; each training step adds its AdamW update (``OPTIMIZER_S_PER_PARAMETER`` a
# parameter: for the miniatures the word embeddings, 30,522 x H, weigh as much as the layers).
# The GPU's rates are assumptions stated once, in train/estimate.py (GPU_FLOP_S_SMALL, step floors).
_TASK_SIZES = {  # built-in data: (examples, WordPieces per example, about)
    "bbc-topics": (2225, 140), "tweets": (38000, 30), "wnut16": (2394, 30), "pang-lee": (200, 30),
    "synthetic-qa": (420, 100), "synthetic-mc": (300, 4 * 16),
}


def _flops_per_token(size: str, seq: int, vocab: int, predicted: float = 0.15) -> float:
    """``train/estimate.py``'s count for a preset size; an LTR model predicts every token."""
    L, H, _ = size_lha(size)
    return flops_per_token(L, H, vocab, encoder_parameters(size), seq, predicted)["total"]


def _bf16(precision: str) -> bool:
    """Does a CPU run of the recipe's precision train in bf16 here?"""
    from ..train.device import autocast_dtype

    import torch

    chosen = precision if precision in ("auto", "fp32", "bf16") else "auto"  # (fp16 is a GPU's: refused there)
    return autocast_dtype(torch.device("cpu"), chosen) is not None


def _cpu_train_flop_s(size: str, precision: str = "auto") -> float:
    """This CPU's training rate for the size in the recipe's precision (measured here, an idle machine's:
    ``est.cpu_flop_s``; fp32 trains about half as fast as bf16 where the CPU has it)."""
    c = PRESETS[size]
    return est.cpu_flop_s("train", c.hidden_size, est.background_threads(), _bf16(precision), c.intermediate_size)[0]


def _optimizer_s(size: str, vocab: int) -> float:
    """A CPU training step's AdamW update of every parameter of the size with this vocabulary."""
    return est.pretraining_parameters(preset(size, vocab_size=max(1, vocab)))[0] * est.OPTIMIZER_S_PER_PARAMETER


def _train_tps(size: str, seq: int, vocab: int, device: str, predicted: float = 0.15, precision: str = "auto") -> float:
    """Training tokens/s of the size's arithmetic (a step's optimizer update apart: :func:`_optimizer_s`)."""
    L, H, _ = size_lha(size)
    flops = _flops_per_token(size, seq, vocab, predicted)
    return (_cpu_train_flop_s(size, precision) if device == "cpu" else est.gpu_flop_s(H)) / flops


def _finetune_tps(size: str, seq: int, device: str, precision: str = "auto") -> float:
    """Fine-tuning tokens/s: :func:`_train_tps` without a decoder."""
    return _train_tps(size, seq, 0, device, precision=precision)


def vocab_size_of(cfg: dict) -> int:
    """The number of WordPieces a pre-training reads: ``vocab_size`` for a vocabulary it learns
    ("train", "shared"), else the lines of the fixed vocab.txt it names (a checkpoint or folder)."""
    vocab = cfg.get("vocab", "train")
    if vocab in ("train", "shared"):
        return int(cfg.get("vocab_size", 8000))
    folder = Path(vocab) if (Path(vocab) / "vocab.txt").is_file() else checkpoint.resolve(vocab)
    with open(folder / "vocab.txt", encoding="utf-8") as f:
        return sum(1 for _ in f)


def _task_tokens(spec: dict, ft: dict) -> tuple[int, int]:
    """(training examples, tokens per example) a task's fine-tuning will see, about."""
    train = spec["train"]
    if train.startswith("builtin:"):
        n, t = _TASK_SIZES.get(train[8:], (1000, 64))
    elif train.startswith("tiny:"):
        n, t = ft.get("max_train_examples") or 64, 14
    elif train.startswith("pairs:"):
        n, t = spec.get("n_train", 2000), 130  # two 2-sentence segments
    else:  # a file: its counted size where known (an uploaded review set of 80 rows was taken for 1,000)
        n, t = file_task_size(spec)
    n = int(n * (1 - ft.get("dev_fraction", 0.1))) if not train.startswith("pairs:") else n
    if ft.get("max_train_examples"):
        n = min(n, ft["max_train_examples"])
    return n, min(t, ft.get("max_seq_length", 128))


def file_task_size(spec: dict) -> tuple[int, int]:
    """(examples, WordPieces per example) of a task file: as counted where it was read (``examples``,
    ``words_per_example`` in its spec, see :func:`counted`), else 1,000 of 64 (assumed)."""
    if isinstance(spec.get("examples"), int) and spec["examples"] > 0:
        words = spec.get("words_per_example")
        return spec["examples"], round(words * est.TOKENS_PER_WORD + 3) if isinstance(words, (int, float)) else 64
    return 1000, 64


def counted(data) -> dict:
    """What a task spec keeps of a task file read (``TaskData``) for the estimate: its examples and their
    mean words (on up to 512 spread over it)."""
    step = max(1, len(data.examples) // 512)
    picked = data.examples[::step][:512]
    # no more than a fine-tuning keeps of a file (a 260,000-row upload was refused as "examples must be a whole
    # number from 1 to 220,000", a field nobody typed)
    return {"examples": min(len(data.examples), _TASK_BOUNDS["examples"]),
            "words_per_example": round(sum(map(est.words_of, picked)) / max(1, len(picked)), 1)}


def _dev_examples(spec: dict, ft: dict) -> int:
    """How many dev examples a fine-tuning scores after each epoch (and once more for the run's dev
    predictions), about: the held-out fraction of the task, at most ``max_dev_examples`` (else the
    2,000 that ``finetune.read_data`` keeps)."""
    train = spec["train"]
    if train.startswith("pairs:"):
        n = spec.get("n_dev", 500)
    elif train.startswith("tiny:"):
        n = int((ft.get("max_train_examples") or 64) * ft.get("dev_fraction", 0.1))
    else:
        total = _TASK_SIZES.get(train[8:], (1000, 64))[0] if train.startswith("builtin:") else file_task_size(spec)[0]
        n = int(total * ft.get("dev_fraction", 0.1))
    return max(1, min(n, ft.get("max_dev_examples") or DEV_EXAMPLES))


def estimate(plan: dict, device: str = "cpu") -> dict:
    """A rough time estimate in seconds: ``{"pretrain_s", "finetune_s", "total_s"}``.

    ``device`` is "cpu" (this machine's CPU, idle: its rates measured here) or "gpu" (one H100 or H200). It
    counts FLOPs and adds fixed costs per run; expect it to be right within a factor of about two."""
    device = "cpu" if device == "cpu" else "gpu"
    pre = 0.0
    for cfg in plan["pretrainings"].values():
        if "hub" in cfg:  # downloaded, not pre-trained: its bytes are in downloads(), the network's speed unknown
            continue
        seq, bs = cfg["max_seq_length"], cfg["batch_size"] * cfg.get("grad_accum", 1)
        # a left-to-right model predicts every token, a masked LM the masked ones
        predicted = predicted_share(cfg["objective"], cfg.get("mlm_probability", 0.15))
        vocab = vocab_size_of(cfg)
        if device == "gpu":
            L, H, _ = size_lha(cfg["size"])
            secs = est.gpu_pretrain_seconds(_flops_per_token(cfg["size"], seq, vocab, predicted), H,
                                            cfg["max_steps"], bs, seq)
        else:
            # (the Pre-train page also times the step outside the layers, est.cpu_pretraining_step; the planner
            # keeps the count that cpu-small's 41 measured minutes on the 2-core EPYC were checked against)
            tokens = cfg["max_steps"] * bs * seq * 0.9  # sequences are not all full
            secs = tokens / _train_tps(cfg["size"], seq, vocab, device, predicted, cfg.get("precision", "auto")) + \
                cfg["max_steps"] * _optimizer_s(cfg["size"], vocab)
        # corpus, instances, evaluations, checkpoints (measured on the smoke recipe's tiny runs: 0.2-0.4 s each,
        # after the first's 3.6 s, which the start below counts)
        pre += secs + (0.5 if cfg["corpus"] == "tiny" else 25 if device == "cpu" else est.GPU_PRETRAIN_RUN_S)
    ft_total = 0.0
    recipe = plan["recipe"]
    for cell in plan["cells"]:
        ft = cell["finetune"]
        n, t = _task_tokens(recipe["tasks"][cell["task"]], ft)
        epochs = ft.get("epochs", 3)
        seq = ft.get("max_seq_length", 128)
        L, H, _ = size_lha(cell["size"])
        tps = _finetune_tps(cell["size"], seq, device, ft.get("precision", "auto"))  # no MLM decoder when fine-tuning
        if cell["transfer"] == "fine-tune" and not ROWS[cell["objective"]].bilstm:
            # + the dev set forward only (a third of a training token's FLOPs) after every epoch (or every
            # eval_every steps) and once more for the run's dev predictions; a run for each learning rate tried
            steps = math.ceil(epochs * math.ceil(n / (ft.get("batch_size", 32) * ft.get("grad_accum", 1))))
            dev_passes = (math.ceil(steps / ft["eval_every"]) if ft.get("eval_every") else math.ceil(epochs)) + 1
            settings = len(ft.get("lr_grid") or []) or 1
            secs = settings * (n * t * epochs + dev_passes * _dev_examples(recipe["tasks"][cell["task"]], ft) * t
                               * est.FORWARD_SHARE) / tps
            if device == "cpu":
                secs += settings * epochs * math.ceil(n / ft.get("batch_size", 32)) * _optimizer_s(cell["size"], 30522)
        else:  # frozen features (inference, ~3x faster per token) + a 2-layer BiLSTM with H units per direction
            lstm_flops = est.bilstm_flops_per_token(H, min(4, L) * H if cell["transfer"] == "concat-last-4" else H)
            lstm_rate = est.bilstm_flop_s(H, device == "cpu")
            if ROWS[cell["objective"]].bilstm:  # trained together with the model
                secs = n * t * epochs / tps + n * t * epochs * lstm_flops / lstm_rate
            else:  # frozen features: one forward pass of BERT, then only the head trains
                secs = 1.3 * n * t / (3 * tps) + n * t * epochs * lstm_flops / lstm_rate
        if device == "gpu":
            steps = epochs * max(1, n // ft.get("batch_size", 32))
            secs = max(secs, steps * est.GPU_FT_STEP_FLOOR_S)
        small = ft["train"].startswith(("tiny:", "pairs:tiny"))
        # reading data, loading and saving models (a tiny task's cell: 0.1-0.5 s measured)
        ft_total += secs + (0.3 if small else 5 if device == "cpu" else est.GPU_FINETUNE_RUN_S)
    # the process's start and its first run's warm-up (imports, the kernels' first calls): 3-5 s measured; a
    # smoke recipe said 20-32 s and took 9-11 s
    start = ABLATION_START_S if plan["cells"] else 0.0
    return {"pretrain_s": round(pre), "finetune_s": round(ft_total), "total_s": round(start + pre + ft_total)}


ABLATION_START_S = 4.0


# ----- downloads (a recipe of pre-trained miniatures) -------------------------------------------
def downloads(plan: dict) -> list[dict]:
    """The Hub models a plan starts from: ``[{"repo", "title", "size", "bytes", "here"}]``, ``bytes``
    about what a download fetches (``hub_names.HubModel.download_bytes``), ``here`` whether the Hugging Face
    cache already holds a whole copy (then nothing is fetched)."""
    out = []
    for cfg in plan["pretrainings"].values():
        if "hub" in cfg:
            m = hub.CATALOGUE[cfg["hub"]]
            out.append({"repo": m.repo_id, "title": m.title, "size": cfg["size"], "bytes": m.download_bytes,
                        "here": hub.local_copy(m.repo_id) is not None})
    return out


def downloads_text(plan: dict) -> str:
    """One line: what starting the plan downloads, and how much (empty when it downloads nothing)."""
    found = downloads(plan)
    if not found:
        return ""
    todo = [d for d in found if not d["here"]]
    size = lambda b: f"{b / 1e6:,.0f} MB" if b >= 1e6 else f"{b / 1e3:,.0f} kB"  # noqa: E731
    if not todo:
        return (f"All {len(found)} models are on this machine already (the Hugging Face cache): nothing is downloaded."
                if len(found) > 1 else "The model is on this machine already (the Hugging Face cache): nothing is "
                                       "downloaded.")
    here = [d["repo"] for d in found if d["here"]]
    return (f"Downloads {len(todo)} model{'s' if len(todo) > 1 else ''} from the Hugging Face Hub when it starts "
            f"(about {size(sum(d['bytes'] for d in todo))} in all, once, into the Hugging Face cache): "
            + ", ".join(f"{d['repo']} ({size(d['bytes'])})" for d in todo)
            + (f"; already here: {', '.join(here)}" if here else "") + ".")


def offline_refusal(plan: dict) -> str | None:
    """One sentence when the plan needs a model that is not here and this machine may not download
    (``HF_HUB_OFFLINE``); None when it can start. (No network at all is found when the download
    starts: those cells then fail with the Hub's own sentence, and the others go on.)"""
    missing = [d["repo"] for d in downloads(plan) if not d["here"]]
    if not missing or not hub_server.offline():
        return None
    return (f"This recipe starts from {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not on this "
            f"machine, and this machine is set to work offline (HF_HUB_OFFLINE): run `bert-explorer download "
            f"{' '.join(missing)}` where there is internet (or unset HF_HUB_OFFLINE), then start it again.")


# ----- a grid built from a few choices (the page's "build my own") ----------------------------
def custom_recipe(tasks: dict, sizes: list[str], objectives: list[str], transfers: list[str], maskings: list[str],
                  *, corpus: str = "bbc", max_steps: int | None = None, grid_mode: str = "one-at-a-time",
                  base: str = "cpu-small", name: str = "custom", seeds: list[int] | None = None) -> dict:
    """A recipe with the shared settings of the shipped recipe ``base`` and these axes.

    The baseline is the paper's (MLM+NSP, fine-tuning, 80/10/10) where chosen, and the
    smallest chosen size, so the cells of the other axes are the cheapest ones. With a base of
    downloaded miniatures (``miniatures``) nothing is pre-trained: ``corpus`` and ``max_steps``
    do not apply, and ``seeds`` (else the base's) are the fine-tuning seeds."""
    b = load_recipe(base)
    pick = lambda values, preferred: preferred if preferred in values else values[0]  # noqa: E731
    sizes = sorted(sizes or [b["baseline"]["size"]], key=encoder_parameters)
    objectives = objectives or ["mlm+nsp"]
    transfers = transfers or ["fine-tune"]
    maskings = maskings or ["80/10/10"]
    pretrain = {**b["pretrain"], "corpus": corpus} if b.get("pretrained") != "hub" else dict(b["pretrain"])
    if max_steps and b.get("pretrained") != "hub":
        pretrain.update(max_steps=int(max_steps), warmup_steps=max(1, int(max_steps) // 10),
                        eval_every=max(1, int(max_steps) // 2), save_every=max(1, int(max_steps) // 2))
    recipe = {
        "name": name, "description": f"built in the app from {base}'s settings", "grid": grid_mode,
        "pretrain": pretrain, "finetune": dict(b["finetune"]), "tasks": tasks,
        "baseline": {"size": sizes[0], "objective": pick(objectives, "mlm+nsp"),
                     "transfer": pick(transfers, "fine-tune"), "masking": pick(maskings, "80/10/10")},
        "axes": {a: v for a, v in (("size", sizes), ("objective", objectives), ("transfer", transfers),
                                   ("masking", maskings)) if len(v) > 1},
    }
    for key, value in (("pretrained", b.get("pretrained")), ("seeds", seeds or b.get("seeds"))):
        if value:
            recipe[key] = value
    return validate(recipe)
