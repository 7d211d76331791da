"""The After fine-tuning page's data from the command line, as CSV or JSON:

    bert-explorer after-finetuning runs/finetune-bbc --what predictions --format csv > dev.csv
    bert-explorer after-finetuning runs/finetune-bbc --what slices
    bert-explorer after-finetuning runs/finetune-bbc --what calibration --format json
    bert-explorer after-finetuning runs/finetune-bbc --what change --format json --output change.json

``register(sub)`` adds the command to the ``bert-explorer`` parser's subcommands.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..analysis.after_finetuning import calibration, change, predictions, slices
from ..safe_text import rows_csv
from .common import UserError, check_output_file, output_file_args, user_errors, write_output

WHAT = ("predictions", "slices", "calibration", "change")


def _plain(value):
    """JSON without NaN or infinity (strict readers refuse them): those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    return value


def after_finetuning_data(run_dir: str, what: str, store: bool = True) -> tuple[list[dict], dict]:
    """The rows (for CSV) and the whole result (for JSON) of one part of the page."""
    pred = predictions.load_predictions(run_dir, store=store)
    head = {"run": str(run_dir), "task": pred.task.name, "predictions": pred.source}
    if what == "predictions":
        return pred.rows, {**head, "rows": pred.rows}
    if what == "slices":
        rows = slices.slices(pred.task, pred.rows, pred.record.get("max_seq_length", 128),
                             predictions.extra_columns(pred.record))
        # (a table's cell says which metrics have no value there and why; JSON keeps the mapping)
        table = [{**r, "not_defined": "; ".join(f"{k}: {why}" for k, why in r["not_defined"].items())} for r in rows]
        return table, {**head, "main_metric": pred.task.main_metric,
                      "whole": slices.score(pred.task, pred.rows), "slices": rows}
    if what == "calibration":
        if not pred.task.calibrated:
            raise UserError(f"calibration applies to classification and pair classification (one label with a "
                            f"probability), not to {pred.task.name}; ask for --what predictions or slices")
        result = calibration.calibration(pred.rows)
        return result["bins"], {**head, **result}
    changed = change.what_changed(run_dir, pred.record["examples"], pred.task, pred.label_names,
                                  pred.record.get("max_seq_length", 128))
    layers = [{"layer": i, "cka": c} for i, c in enumerate(changed["cka_by_layer"])]
    coords = change.maps(changed, "pca")
    head_accuracy = slices.score(pred.task, pred.rows).get("accuracy")  # (the fine-tuned head's, on the same examples)
    return layers, {**head, "before": changed["before_name"], "after": changed["after"],
                    "separation": changed["separation"], "cka_by_layer": changed["cka_by_layer"],
                    "cka_tokens": changed["cka_tokens"], "summary": change.describe(changed, head_accuracy),
                    "pca": {"gold": changed["gold"], "before": coords["before"], "after": coords["after"]}}


def cmd_after_finetuning(args) -> int:
    if not (Path(args.run) / "config.json").is_file():
        raise UserError(f"{args.run} is not a run folder (it has no config.json); give the folder a fine-tuning "
                        f"run wrote (bert-explorer finetune --output FOLDER)")
    if args.output and Path(args.output).resolve().is_relative_to(Path(args.run).resolve()):
        # (--output runs/bbc/metrics.json --overwrite replaced the run's result with a CSV, and predict broke)
        raise UserError(f"{args.output} is inside the run folder {args.run}, whose files the run's pages and predict "
                        "read; write it outside the run")
    check_output_file(args.output, args.overwrite)
    with user_errors():
        rows, whole = after_finetuning_data(args.run, args.what, store=not args.no_store)
    text = rows_csv(_plain(rows)) if args.format == "csv" else json.dumps(_plain(whole), indent=1) + "\n"
    if args.output:
        with write_output(args.output) as f:
            f.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def register(sub) -> None:
    """Add ``after-finetuning`` to an argparse subparsers object."""
    s = sub.add_parser("after-finetuning", help="a fine-tuned run's dev set example by example, its score by slice, "
                                                "its calibration, or what fine-tuning changed (the After "
                                                "fine-tuning page)")
    s.add_argument("run", help="a fine-tuning run folder")
    s.add_argument("--what", choices=WHAT, default="predictions",
                   help="predictions: one row per dev example; slices: the main metric by gold answer, length and "
                        "the upload's other columns; calibration: the reliability diagram's bins and ECE; change: "
                        "CKA per layer and the [CLS] separation before and after fine-tuning")
    s.add_argument("--format", choices=("csv", "json"), default="csv", help="csv (the default) or json")
    output_file_args(s, "write here instead of to standard output")
    s.add_argument("--no-store", action="store_true",
                   help="an older run's predictions are computed and not kept in the run folder")
    s.set_defaults(func=cmd_after_finetuning)
