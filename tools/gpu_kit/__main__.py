"""``python -m tools.gpu_kit``: prepare, plan, run (or dry-run) and join the GPU work."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import travel
from .travel import TravelError

# every step, in the order a loan should take them (steps.py has what each does; it imports the trainers,
# which --help, prepare and join never need)
STEPS = ("tests", "bench", "recipe-sweep", "paper-mini", "teaching-model", "explorer-mini")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.gpu_kit", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    steps_help = "comma-separated: " + ", ".join(STEPS)

    p = sub.add_parser("prepare", help="write the travel folder: corpora, data sets, word embeddings, pytest")
    p.add_argument("--into", default=".gpu-travel", help="the travel folder to write (default .gpu-travel)")
    p.add_argument("--only", default=None, help="comma-separated: corpora, tasks, base, pylib (default: all)")
    p.add_argument("--sample", type=int, default=None, help="keep N documents / examples (a small copy)")
    p.add_argument("--preset", type=int, default=9, help="xz level, 0-9 (default 9: smallest)")

    p = sub.add_parser("plan", help="print the planned minutes of the steps and the files they return")
    p.add_argument("--steps", default=",".join(STEPS), help=steps_help)

    p = sub.add_parser("run", help="run steps in one command (on the GPU machine), or --dry-run them here")
    p.add_argument("--steps", default=",".join(STEPS), help=steps_help)
    p.add_argument("--out", default=None, help="where the results to send back go ($OUT on the GPU machine)")
    p.add_argument("--work", default=".gpu-work", help="the steps' work folders (kept while the machine is)")
    p.add_argument("--travel", default=None, help="the prepared inputs (default .gpu-travel)")
    p.add_argument("--state", default=".gpu-state", help="carried state from earlier machines (travel.join)")
    p.add_argument("--budget-minutes", type=float, default=9.0, help="this command's time (default 9)")
    p.add_argument("--redo", default="", help="steps to run anew even where their result exists")
    p.add_argument("--dry-run", action="store_true", help="every step, tiny, on the CPU, imports blocked; then "
                                                          "check every returned file")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the dry run's child

    p = sub.add_parser("join", help="rebuild the returned archives (SHA-256 checked) and unpack them")
    p.add_argument("fetched", help="the folder the command's files were fetched into")
    p.add_argument("--into", default=".gpu-results", help="where the results are unpacked (default .gpu-results)")
    p.add_argument("--state", default=".gpu-state", help="where what the next call must carry is kept")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except (TravelError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _dispatch(args) -> int:
    if args.command == "prepare":
        what = tuple(args.only.split(",")) if args.only else travel.FOLDERS
        sizes = travel.prepare(args.into, what, args.sample, args.preset)
        total = travel.folder_bytes(args.into)
        tracked = travel.tracked_bytes(Path.cwd())
        print(f"{args.into}: {total / travel.MiB:.2f} MiB in all ({', '.join(f'{k} {v / travel.MiB:.2f}' for k, v in sizes.items())} MiB)")
        if tracked is not None:
            print(f"tracked tree {tracked / travel.MiB:.2f} MiB + {args.into} = {(tracked + total) / travel.MiB:.2f} MiB "
                  f"(the device tool carries at most {travel.TREE_LIMIT // travel.MiB} MiB; carry only the subfolders a "
                  "call's steps read)")
        return 0
    if args.command == "join":
        travel.join(args.fetched, args.into, args.state)
        return 0
    # Here, not at the top: the session imports the trainers (torch, scikit-learn: seconds), which
    # --help, prepare and join never use.
    from . import session

    if args.command == "plan":
        session.print_plan(session.parse_steps(args.steps))
        return 0
    names = session.parse_steps(args.steps)
    if args.dry_run:
        ignored = [f for f, given in (("--budget-minutes", args.budget_minutes != 9.0), ("--redo", bool(args.redo)),
                                      ("--state", args.state != ".gpu-state")) if given]
        if ignored:  # (a dry run runs every step anew, in its own state: they were dropped without a word)
            raise ValueError(f"{', '.join(ignored)} belong{'s' if len(ignored) == 1 else ''} to a real run: a dry run "
                             "runs every step anew, tiny, in a state of its own")
        return session.dry_run(names, Path(args.work) / "dry-run", Path(args.travel) if args.travel else None,
                               out=Path(args.out) if args.out else None)
    if args.out is None:
        raise ValueError("run needs --out: the folder whose files come back ($OUT on the GPU machine)")
    redo = set(session.parse_steps(args.redo)) if args.redo else set()
    if args.tiny and args.state == ".gpu-state":
        # the dry run's tiny steps never count as the real ones that came back from a GPU
        args.state = str(Path(args.work) / "state")
    outcomes = session.run_session(names, Path(args.out), Path(args.work), Path(args.travel or ".gpu-travel"),
                                   Path(args.state) if args.state else None, args.budget_minutes * 60,
                                   tiny=args.tiny, redo=redo)
    bad = [n for n, o in outcomes.items() if o.get("state") == "failed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
