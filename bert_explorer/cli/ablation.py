"""The ablation command: run a grid of the paper's Section 5, or report on one.

    bert-explorer ablate --recipe cpu-small --output runs/ablation-cpu [--background]
    bert-explorer ablate --report runs/ablation --format md
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..experiments import grid, results
from ..experiments.runner import run_ablation
from ..runs.finder import is_ablation
from .common import UserError, run_or_background, start_run, user_errors


def register(sub) -> None:
    """Add ``ablate`` to the subcommands ``sub``."""
    s = sub.add_parser("ablate", help="run an ablation grid of Section 5 (Tables 5-8) headless, or report one")
    s.add_argument("--recipe", help="a shipped recipe (paper-mini, cpu-small, smoke) or a recipe JSON file")
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
        if not is_ablation(args.report) or not (Path(args.report) / "plan.json").exists():
            raise UserError(f"{args.report} is not an ablation directory (no plan.json); "
                            "run bert-explorer ablate first")
        plan, res, df = results.load(args.report)
        dirs = results.directions(res)
        print(results.to_csv(df) if args.format == "csv" else
              results.to_markdown(df, dirs, f"Ablation {plan['recipe']['name']} ({args.report})"), end="")
        return 0
    if not args.output:
        raise UserError("give --output DIR (the ablation directory), or --report DIR to print a finished one")
    recipe = None
    source = args.config or args.recipe
    if source:
        with user_errors():  # a RecipeError says which recipe or field is wrong
            recipe = grid.load_recipe(source)
    elif not args.resume:
        raise UserError("give --recipe NAME|FILE (" + ", ".join(grid.list_recipes()) + ")")
    if args.background and recipe is None:
        if not (Path(args.output) / "plan.json").exists():
            raise UserError(f"{args.output} holds no ablation to resume; give --recipe NAME|FILE")
        recipe = json.loads((Path(args.output) / "plan.json").read_text())["recipe"]
    return run_or_background(
        args, lambda: run_ablation(recipe, args.output, resume=args.resume, progress=not args.no_progress),
        show=lambda _: _show_ablation(args.output),
        start=lambda: start_run("ablate", recipe, args,
                                "started the ablation in the background: {path} (pid {pid})"))


def _show_ablation(output: str) -> None:
    """The finished grid as a Markdown table on stdout, with the paper's numbers."""
    plan, res, df = results.load(output)
    print(results.to_markdown(df, results.directions(res), f"Ablation {plan['recipe']['name']} ({output})"))
