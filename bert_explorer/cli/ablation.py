"""The ablation command: run a grid of the paper's Section 5, or report on one.

    bert-explorer ablate --recipe cpu-small --output runs/ablation-cpu [--background]
    bert-explorer ablate --recipe miniatures --estimate          # the plan, its downloads and time; runs nothing
    bert-explorer ablate --recipe miniatures --task my.csv --output runs/minis   # another task than the recipe's
    bert-explorer ablate --report runs/ablation --format md

Before it starts, a run says on stderr what it will do: its cells, what it downloads (a recipe of
Google's pre-trained miniatures fetches them from the Hugging Face Hub, once, into its cache) and
the planner's time estimate (``grid.estimate``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..data.uploads.core import DataError
from ..data.uploads.names import slug
from ..data.uploads.reader import read_task_file
from ..experiments import grid
from ..experiments.runner import read_plan, run_ablation
from ..runs.run import Run, new_run_refusal
from ..runs.finder import is_ablation
from ..runs.report import duration_text
from ..train.estimate import background_threads
from ..train.speed import niced_here, said
from .common import UserError, run_or_background, start_run, user_errors


def register(sub) -> None:
    """Add ``ablate`` to the subcommands ``sub``."""
    s = sub.add_parser("ablate", help="run an ablation grid of Section 5 (Tables 5-8) headless, or report one")
    s.add_argument("--recipe", help="a shipped recipe (paper-mini, cpu-small, miniatures, table7, smoke) or a recipe JSON file")
    s.add_argument("--task", metavar="SPEC", help="fine-tune on this task instead of the recipe's: a file (CSV, TSV, "
                                                  "JSONL, CoNLL, SQuAD JSON), builtin:NAME or tiny:TASK; the recipe's "
                                                  "first task's limits (examples, dev fraction) are kept")
    s.add_argument("--model", metavar="SIZE|HUB_ID",
                   help="for a recipe of downloaded models (miniatures, table7): the model of the paper to start "
                        "from, a size (tiny, mini, small, medium, base, ...) or its Hub id "
                        "(google/bert_uncased_L-8_H-512_A-8)")
    s.add_argument("--estimate", action="store_true", help="print the plan (cells, downloads, estimated time) "
                                                            "and exit without running it")
    s.add_argument("--output", help="the ablation directory (plan.json, results.jsonl, pretrain/, cells/)")
    s.add_argument("--background", action="store_true", help="start as a background process and return")
    s.add_argument("--resume", action="store_true", help="continue: skip finished cells, retry failed ones")
    s.add_argument("--report", metavar="DIR", help="print the results of an ablation directory and exit")
    s.add_argument("--format", choices=["md", "csv"], default="md", help="--report format (default md)")
    s.add_argument("--config", help=argparse.SUPPRESS)  # start_background passes the recipe this way
    s.add_argument("--no-progress", action="store_true", help="no progress bars")
    s.set_defaults(func=cmd_ablate)


def cmd_ablate(args) -> int:
    """Run an ablation grid (Section 5, Tables 5-8) into a directory, or report one."""
    if args.report:
        if not Path(args.report).is_dir():
            raise UserError(f"{args.report} does not exist; give the folder an ablation ran in (its --output)")
        if not is_ablation(args.report) or not (Path(args.report) / "plan.json").exists():
            raise UserError(f"{args.report} is not an ablation directory (no plan.json); "
                            "run bert-explorer ablate first")
        from ..experiments import results  # pandas: imported by the commands that report, not by every start
        with user_errors():  # (a damaged plan.json is one sentence)
            plan, res, df = results.load(args.report, judge_old=True)
        print(results.to_csv(df) if args.format == "csv" else
              report_markdown(plan, res, df, f"Ablation {plan['recipe']['name']} ({args.report})",
                              _stopped(args.report)), end="")
        return 0
    if not args.output and not args.estimate:
        raise UserError("give --output DIR (the ablation directory), --estimate to see a recipe's plan, or --report "
                        "DIR to print a finished one")
    recipe = None
    source = args.config or args.recipe
    if source:
        with user_errors():  # a RecipeError says which recipe or field is wrong
            recipe = grid.load_recipe(source)
            if args.task:
                recipe = with_task(recipe, args.task)
            if args.model:
                recipe = with_model(recipe, args.model)
    elif not args.resume:
        raise UserError("give --recipe NAME|FILE (" + ", ".join(grid.list_recipes()) + ")")
    if args.estimate:
        if recipe is None:
            raise UserError("give --recipe NAME|FILE to estimate")
        print(plan_text(grid.expand(recipe), niced=args.background or niced_here()))
        return 0
    if args.resume and recipe is not None and (Path(args.output) / "plan.json").exists():
        _same_plan_or_refuse(recipe, Path(args.output))
        recipe = None  # the folder's own plan runs (and is said below), as it was made
    if args.background and recipe is None:
        if not (Path(args.output) / "plan.json").exists():
            raise UserError(f"{args.output} holds no ablation to resume; give --recipe NAME|FILE")
        with user_errors():
            recipe = read_plan(args.output)["recipe"]
    if not args.resume and (refusal := new_run_refusal(args.output, "ablate", stored_first=False)):
        raise UserError(refusal)  # (before the plan is said as if it would run there)
    if recipe is not None and not args.config:  # said once, by the command a person typed
        plan = grid.expand(recipe)
        refusal = grid.offline_refusal(plan)
        if refusal:
            raise UserError(refusal)
        # (a foreground run at normal priority was said as a background one: 1 min 40 s for 37 s)
        print(plan_text(plan, niced=args.background or niced_here()), file=sys.stderr)
    code = run_or_background(
        args, lambda: run_ablation(recipe, args.output, resume=args.resume, progress=not args.no_progress),
        show=lambda _: _show_ablation(args.output),
        start=lambda: start_run("ablate", recipe, args,
                                "started the ablation in the background: {path} (pid {pid})"))
    # a grid whose cells failed is not a success for a script that runs it (every cell failed, and it exited 0)
    failed = 0 if args.background else _failed_cells(Path(args.output))
    if failed:
        print(f"note: {failed} cell{'s' if failed != 1 else ''} of the ablation failed; {Path(args.output) / 'log.txt'} "
              "says why (exit status 1)", file=sys.stderr)
        return 1
    return code


def _failed_cells(folder: Path) -> int:
    try:
        failed = json.loads((folder / "status.json").read_text(encoding="utf-8")).get("failed", 0)
    except (OSError, ValueError, AttributeError):
        return 0
    return failed if isinstance(failed, int) and not isinstance(failed, bool) else 0


def _same_plan_or_refuse(recipe: dict, folder: Path) -> None:
    """--resume goes on with the folder's plan: a recipe given with it that plans other cells is refused (it
    was said as if it would run, then the folder's ran, and a background start wrote it into config.json)."""
    try:
        mine = json.loads((folder / "plan.json").read_text(encoding="utf-8"))
        cells, pretrainings = {c["id"] for c in mine["cells"]}, set(mine["pretrainings"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # the run itself says what is wrong with its plan
    theirs = grid.expand(recipe)
    if {c["id"] for c in theirs["cells"]} != cells or set(theirs["pretrainings"]) != pretrainings:
        raise UserError(f"{folder} holds the ablation of recipe {mine.get('recipe', {}).get('name', '?')}, and "
                        f"--resume goes on with its own plan: leave out --recipe (or --config, --task, --model) to "
                        f"continue it, or choose a new --output for recipe {recipe['name']}")


def with_model(recipe: dict, model: str) -> dict:
    """A recipe of downloaded models started from ``model`` (a size or the Hub id of one)."""
    if recipe.get("pretrained") != "hub" or "size" in recipe["axes"]:
        raise UserError(f"--model chooses the downloaded model of a recipe that varies no size (such as table7); "
                        f"recipe {recipe['name']} " + ("varies the size itself" if recipe.get("pretrained") == "hub"
                                                       else "pre-trains its models here"))
    size = next((s for s in grid.hub_sizes() if model in (s, grid.hub_repo(s))), None)
    if size is None:
        raise UserError(f"--model {model}: no pre-trained model of the paper has that name; give a size "
                        f"({', '.join(grid.hub_sizes()[:8])}, ...) or its Hub id, e.g. {grid.hub_repo('medium')}")
    return grid.validate({**recipe, "baseline": {**recipe["baseline"], "size": size}})


def with_task(recipe: dict, spec: str) -> dict:
    """The recipe with its tasks replaced by ``spec``, keeping the first task's limits (how many
    training and dev examples, the dev fraction) so that its time stays about the planned one."""
    first = dict(next(iter(recipe["tasks"].values())))
    for key in ("train", "dev", "paper_column", "task_type", "n_train", "n_dev", "task", "text_column",
                "text_pair_column", "label_column", "examples", "words_per_example"):
        first.pop(key, None)
    if not spec.startswith(("builtin:", "tiny:", "pairs:")):
        if not Path(spec).is_file():
            raise UserError(f"--task {spec}: no such file; give a task file, builtin:NAME or tiny:TASK")
        spec = str(Path(spec).resolve())  # a background run works in its own folder
        # read now, not when the first cell reads it: counted for the estimate, and its type kept, which the
        # directions of cells still to run wait on
        try:
            data = read_task_file(spec)
            first.update(grid.counted(data), task=data.task.name)
        except DataError as e:
            raise UserError(f"--task {spec}: {e}") from None
    name = slug(Path(spec.split(":", 1)[-1]).stem)[:40].replace("__", "_") or "task"
    return grid.validate({**recipe, "tasks": {name: {**first, "train": spec}}, "axis_tasks": {}})


def plan_text(plan: dict, niced: bool = True) -> str:
    """What a recipe will do, in a few lines: cells, pre-trainings or downloads, the estimate (for a run at low
    priority, as a background one is, unless not ``niced``: a command run in the foreground)."""
    recipe = plan["recipe"]
    cpu, gpu = grid.estimate(plan, "cpu"), grid.estimate(plan, "gpu")
    seeds = recipe.get("seeds")
    lines = [f"recipe {recipe['name']}: {len(plan['cells'])} cells"
             + (f" ({len(seeds)} seeds each setting)" if seeds else "")
             + ("" if recipe.get("pretrained") == "hub" else f", {len(plan['pretrainings'])} pre-trainings")
             + ", tasks " + ", ".join(f"{k} ({v['train']})" for k, v in recipe["tasks"].items()),
             f"estimated time: {said(cpu['total_s'], background_threads(), niced=niced)} on this machine's CPU, "
             f"{duration_text(gpu['total_s'])} on one GPU (from FLOPs and speeds measured here; expect up to a factor of "
             "two either way)"]
    if grid.downloads(plan):
        lines.append(grid.downloads_text(plan))
    return "\n".join(lines)


def _stopped(folder) -> str | None:
    """Why the cells still to run of the ablation in ``folder`` are not running, and how to run them; None while
    it runs."""
    from ..experiments import results
    return results.halted(Run(folder).status().get("state"),
                          f"bert-explorer ablate --resume --output {folder} runs them")


def report_markdown(plan: dict, res: dict, df, title: str, stopped: str | None = None) -> str:
    """The Markdown report; a recipe of downloaded miniatures adds its table beside Turc et al. 2019. ``stopped``:
    why the cells still to run are not running (``results.halted``), where the ablation is not."""
    from ..experiments import miniatures, results
    dirs = results.directions(res, plan["recipe"]["tasks"], waiting=results.pending(plan, res), stopped=stopped)
    text = results.to_markdown(df, dirs, title)
    if miniatures.is_miniatures(plan):
        minis = miniatures.table(plan, res)
        shown = miniatures.shown(minis)
        text += ("\n## Pre-trained miniatures beside Turc et al. 2019\n\n" + miniatures.caption(plan, res, minis)
                 + "\n\n" + results.markdown_table(shown, columns=list(shown.columns)) + "\n")
    return text


def _show_ablation(output: str) -> None:
    """The finished grid as a Markdown table on stdout, with the paper's numbers."""
    from ..experiments import results
    plan, res, df = results.load(output)
    print(report_markdown(plan, res, df, f"Ablation {plan['recipe']['name']} ({output})", _stopped(output)))
