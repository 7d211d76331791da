"""The ablation command: run a grid of the paper's Section 5, or report on one."""
from __future__ import annotations

import json
from pathlib import Path

from .common import UserError, _start_background, user_errors


def cmd_ablate(args) -> int:
    """Run an ablation grid (Section 5, Tables 5-8) into a directory, or report one."""
    from ..experiments import grid, results
    from ..experiments.runner import run_ablation
    from ..runs.finder import is_ablation

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
        try:
            recipe = grid.load_recipe(source)
        except grid.RecipeError as e:
            raise UserError(str(e)) from e
    elif not args.resume:
        raise UserError("give --recipe NAME|FILE (" + ", ".join(grid.list_recipes()) + ")")
    if args.background:
        if recipe is None:
            if not (Path(args.output) / "plan.json").exists():
                raise UserError(f"{args.output} holds no ablation to resume; give --recipe NAME|FILE")
            recipe = json.loads((Path(args.output) / "plan.json").read_text())["recipe"]
        run = _start_background("ablate", recipe, args.output, resume=args.resume)
        print(f"started the ablation in the background: {run.path} (pid {run.status().get('pid')})")
        return 0
    with user_errors():
        res = run_ablation(recipe, args.output, resume=args.resume, progress=not args.no_progress)
    plan, res, df = results.load(args.output)
    print(results.to_markdown(df, results.directions(res), f"Ablation {plan['recipe']['name']} ({args.output})"))
    return 0
