"""Prepare a class before the bell: each page's first-visit work and the long builds, for the lesson's models.

    bert-explorer prepare-class --model minilm-mlm-nsp bert-base-uncased --builds quality sae
    bert-explorer prepare-class --model bert-base-uncased --status

It says the builds' estimate first, then runs each model's first-visit work (kept on disk) and the builds
asked for, one after another as the same background processes the pages start (low priority), with a
progress line for each; Ctrl-C stops the build at work, whose finished parts stay: the same command goes on
from there, and whatever is prepared already is skipped. ``--status`` prints what is prepared, model by model.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import time

from .. import checkpoint, disk_cache, full_disk
from ..analysis import lesson
from ..analysis.probes.pretraining_tasks import stored_evaluation
from ..runs.report import duration_text
from ..train.estimate import background_threads
from ..train import speed
from .common import UserError, print_json


def register(sub) -> None:
    s = sub.add_parser("prepare-class", help="prepare the lesson's models before class: each page's first-visit "
                                             "work and the long builds (quality, SAE, head map, Clark, index)")
    s.add_argument("--model", nargs="+", default=[checkpoint.DEFAULT_MODEL], metavar="NAME",
                   help=f"the lesson's models (default {checkpoint.DEFAULT_MODEL})")
    s.add_argument("--builds", nargs="*", default=["quality"], choices=list(lesson.BUILDS), metavar="BUILD",
                   help="long builds to run too: " + "; ".join(f"{k}: {v}" for k, v in lesson.BUILDS.items())
                        + " (default: quality)")
    s.add_argument("--status", action="store_true", help="only say what is prepared, model by model")
    s.add_argument("--json", action="store_true", help="with --status: the table as JSON")
    # The builds' time as the app's Prepare panel showed it, quoted again at the end instead of an estimate
    # made a moment later. Only the app passes it (a person has been told nothing to quote), so --help hides it.
    s.add_argument("--said", metavar="TEXT", help=argparse.SUPPRESS)
    # (the panel's: when the teacher pressed Prepare, so that the last line counts the process's start too)
    s.add_argument("--started", type=float, metavar="EPOCH_SECONDS", help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_prepare_class)


FIRST_VISITS = "first-visits"


def visits_word(left: list) -> str:
    """The first visits' column: "prepared", "not yet", or how many of them are kept ("4 of 6")."""
    total = lesson.first_visits_total()
    return "prepared" if not left else "not yet" if len(left) >= total else f"{total - len(left)} of {total}"


def _entries() -> set[str]:
    """The names of the results the cache holds now."""
    root = disk_cache.cache_root()
    return {p.name for p in root.iterdir() if disk_cache.ENTRY_NAME.fullmatch(p.name)} if root.is_dir() else set()


@contextlib.contextmanager
def _signals_stop():
    """SIGTERM (a kill, a container's stop) and SIGHUP (the terminal closed) stop the preparation as Ctrl-C does:
    the build it started stops, what is done stays. They ended the command and left its build running unwatched."""
    wanted = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    try:
        before = [(sig, signal.signal(sig, interrupt)) for sig in wanted]
    except ValueError:  # (not the main thread: a test's, or an embedding program's; Ctrl-C only)
        before = []
    try:
        yield
    finally:
        for sig, handler in before:
            signal.signal(sig, handler)


def cmd_prepare_class(args) -> int:
    if args.json and not args.status:  # (it prepared for minutes, its progress where JSON was asked for)
        raise UserError("--json prints the table of --status: give --status too (a preparation's progress is lines "
                        "on stderr)")
    if args.started is not None and not (math.isfinite(args.started) and 0 < args.started):
        raise UserError(f"--started must be a time in seconds since 1970, not {args.started!r}")
    begun = min(args.started or time.time(), time.time())
    models = {name: checkpoint.load(name, "BertForPreTraining") for name in args.model}
    # (a status says each build's state, the shipped ones too; a preparation runs only what the models lack)
    plan = {name: lesson.builds(name, loaded, set(lesson.BUILDS) if args.status else set(args.builds),
                                estimate=not args.status, shipped_too=args.status)
            for name, loaded in models.items()}
    if args.status:
        said = {"missing": "not yet", "building": "building", "stopped": "stopped", "failed": "failed"}
        rows = [{"model": name, FIRST_VISITS: visits_word(lesson.first_visits_left(models[name])),
                 **{key: "prepared" if not (left := [b for b in parts if not b.done()])
                    # (a build at work, stopped or failed is said as such, before "its own": the evaluation a
                    # model came with hid the quality build running beside it)
                    else said[state] if (state := left[0].state()["state"]) in ("building", "stopped", "failed")
                    else "its own" if key == "quality" and stored_evaluation(models[name])
                    else said.get(state, "not yet")
                    for key, parts in lesson.by_key(bs).items()}}
                for name, bs in plan.items()]
        if args.json:
            print_json(rows)
        else:
            columns = [FIRST_VISITS, *lesson.BUILDS]
            print("model".ljust(28) + "".join(k.ljust(14 if k == FIRST_VISITS else 12) for k in columns))
            for r in rows:
                print(r["model"][:27].ljust(28) + "".join(str(r.get(k, "")).ljust(14 if k == FIRST_VISITS else 12)
                                                          for k in columns))
            print(f"({FIRST_VISITS}: the work each page does on its first visit for a model, "
                  f"{lesson.first_visits_total()} pages; its own: the evaluation the model came with, which the Masked "
                  "word probe shows every student without a build)")
        return 0
    todo = [(name, b) for name, bs in plan.items() for b in bs if not b.done()]
    total = sum(b.seconds for _, b in todo)
    # The first visits are not estimated (seconds each: 15-20 s in all for the default model, and for a model
    # of BERT-Base's size, on 2 busy cores), so the time said is the builds' alone, and the last line
    # compares it with the builds' time taken
    # (its own work, starting and reading the models, is no load the builds will share)
    told = args.said or speed.said(total, background_threads(), without_own=True)
    builds = f"then {len(todo)} build(s) not yet done, {told} for the builds (each page's own estimate" if todo else \
        "then no build (none asked for, or all done"
    print(f"preparing {len(models)} model(s): first each page's first-visit work (seconds each, not estimated), "
          f"{builds}; {speed.busy_text()})", file=sys.stderr, flush=True)
    for name, loaded in models.items():
        for key in [k for k in args.builds if lesson.ships(k, loaded)]:
            print(f"{name}: {key}: not built, the model came with its own (its evaluation, which the Masked word "
                  "probe shows every student)", file=sys.stderr, flush=True)
    t0, failed = time.time(), []
    lesson.write_plan(todo, None)  # (a student's page reads where its build stands in this queue)
    for name, loaded in models.items():
        for page, what, work in lesson._declared():
            t = time.time()
            work(loaded)
            print(f"{name}: {page}: {what} ({time.time() - t:.1f} s)", file=sys.stderr, flush=True)
    t_builds = time.time()
    kept_before = _entries()
    for k, (name, b) in enumerate(todo):
        lesson.write_plan(todo, k)
        last = [-1.0]

        def report(fraction, message, name=name, b=b):
            if fraction - last[0] >= 0.05:
                last[0] = fraction
                print(f"{name}: {b.name} {fraction:4.0%} {message}", file=sys.stderr, flush=True)
        t = time.time()
        try:
            with _signals_stop():
                said = lesson.run(b, report)  # (a Ctrl-C stops the build if this preparation started it)
        except KeyboardInterrupt:  # (exits 130 as every command's Ctrl-C, not 2 as a mistake of the user's)
            raise KeyboardInterrupt(f"stopped during {b.name} of {name}; what was prepared is kept and the same "
                                    "command goes on from there") from None
        print(f"{name}: {b.name}: {said} ({duration_text(time.time() - t)})", file=sys.stderr, flush=True)
        if said not in ("done", "already done"):
            failed.append(f"{b.name} of {name}: {said}")
    lesson.write_plan(todo, len(todo))
    if gone := sorted(kept_before - _entries()):
        # (the cache's limit made room for these builds by removing the least recently used results, among them
        # what an earlier preparation made for another model, with nothing said)
        kinds = ", ".join(sorted({g.rsplit("-", 1)[0] for g in gone}))
        print(f"note: {len(gone)} earlier result(s) left the cache while it prepared ({kinds}): the cache's limit "
              f"({full_disk.size_text(disk_cache.quota_bytes())}, {disk_cache.QUOTA_ENV}) makes room by removing the "
              f"least recently used; prepare them again, or raise {disk_cache.QUOTA_ENV} to keep them all",
              file=sys.stderr, flush=True)
    builds = f", the builds {duration_text(time.time() - t_builds)} (said before: {told}; " if todo else ", no build ("
    # from the start (the panel's Prepare: 28 s of a process starting and reading its models were not counted)
    print(f"prepared in {duration_text(time.time() - begun)}: starting and reading the model"
          f"{'s' if len(models) != 1 else ''} {duration_text(t0 - begun)}, the first visits "
          f"{duration_text(t_builds - t0)}{builds}{speed.load_text()})", file=sys.stderr)
    if failed:
        raise UserError("not everything was prepared: " + "; ".join(failed))
    return 0
