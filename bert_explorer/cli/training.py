"""Commands that train or use what was trained: pre-training and its evaluation, fine-tuning, predict.

    bert-explorer pretrain --corpus bbc --size mini --max-steps 2000 --output runs/mini [--background]
    bert-explorer finetune --model minilm --train builtin:bbc-topics --output runs/bbc
    bert-explorer predict --model runs/bbc --text "Shares fell sharply after the bank's results." --json
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict

from ..analysis.layers.features import PAIR_SEPARATOR, parse_example
from ..tasks.base import TaskType
from ..train.finetune import FinetuneConfig, run_finetuning
from ..train.predict import Predictor
from ..train.pretrain import PretrainConfig, evaluate_checkpoint, resume_settings, run_pretraining
from .common import (MODEL_HELP, UserError, config_from, dataclass_args, given_settings, print_json, read_lines,
                     run_or_background, start_run, user_errors)


def register(sub) -> None:
    """Add ``pretrain``, ``evaluate-pretraining``, ``finetune`` and ``predict`` to the subcommands ``sub``."""
    s = sub.add_parser("pretrain", help="pre-train a BERT (MLM+NSP, MLM only or left-to-right) into a run directory")
    s.add_argument("--output", required=True, help="run directory (status.json, metrics.jsonl, checkpoints/)")
    s.add_argument("--config", help="JSON file of settings (flags override it)")
    s.add_argument("--resume", action="store_true",
                   help="continue from the run's last checkpoint with the run's own settings (only the cadence of "
                        "logs, evaluations and checkpoints, --device, --precision and --max-steps may change)")
    s.add_argument("--background", action="store_true", help="start as a background process and return")
    s.add_argument("--no-progress", action="store_true", help="show no progress bar while training")
    dataclass_args(s, PretrainConfig)
    s.set_defaults(func=cmd_pretrain)

    s = sub.add_parser("evaluate-pretraining",
                       help="held-out MLM accuracy, MLM perplexity and NSP accuracy of a pre-trained model")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.add_argument("--config", help="the pre-training config of the run that made the model (its corpus, "
                                    "held-out fraction and seed give back the held-out documents)")
    dataclass_args(s, PretrainConfig)
    s.set_defaults(func=cmd_evaluate_pretraining)

    s = sub.add_parser("finetune", help="fine-tune (or feature-based transfer) on a task file or built-in dataset")
    s.add_argument("--output", required=True, help="run directory (metrics.json, model/)")
    s.add_argument("--config", help="JSON file of settings (flags override it)")
    s.add_argument("--background", action="store_true", help="start as a background process and return")
    dataclass_args(s, FinetuneConfig)
    s.set_defaults(func=cmd_finetune)

    s = sub.add_parser("predict", help="predict with a fine-tuned model")
    s.add_argument("--model", required=True, help="a fine-tuning run directory or its model/ directory")
    s.add_argument("--text", help="input text (a pair as 'A ||| B')")
    s.add_argument("--text-pair")
    s.add_argument("--input", help="file: one example per line (text, 'A ||| B', or a JSON object)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_predict)


def cmd_pretrain(args) -> int:
    cfg = _resumed_config(args) if args.resume else config_from(args, PretrainConfig)
    return run_or_background(
        args, lambda: run_pretraining(cfg, args.output, resume=args.resume, progress=not args.no_progress),
        start=lambda: start_run("pretrain", asdict(cfg), args,
                                "started pre-training in the background: {path} (pid {pid})"))


def _resumed_config(args):
    """--resume: the run's own settings; of those given now, only what a resume may change
    (``train.pretrain.check_resume``): each change is said on stderr, any other is refused."""
    with user_errors(TypeError):
        cfg, notes = resume_settings(args.output, given_settings(args, PretrainConfig))
    for note in notes:
        print(f"note: resuming with {note}", file=sys.stderr)
    return cfg


def cmd_evaluate_pretraining(args) -> int:
    cfg = config_from(args, PretrainConfig)
    return run_or_background(args, lambda: evaluate_checkpoint(args.model, cfg))


def cmd_finetune(args) -> int:
    cfg = config_from(args, FinetuneConfig)
    return run_or_background(args, lambda: run_finetuning(cfg, args.output), show=_show_finetuning,
                             start=lambda: start_run("finetune", asdict(cfg), args,
                                                     "started fine-tuning in the background: {path}"))


def _show_finetuning(result: dict) -> None:
    """The scores as JSON on stdout; a warning about the dev set (too small to trust) on stderr."""
    if result.get("warning"):
        print(f"warning: {result['warning']}", file=sys.stderr)
    print_json({k: v for k, v in result.items() if k not in ("label_names", "warning")})


def cmd_predict(args) -> int:
    try:
        predictor = Predictor(args.model)
    except FileNotFoundError as e:
        raise UserError(f"{args.model} is not a fine-tuning run or model directory ({e})") from e
    if args.input:
        examples = []
        for n, line in enumerate(read_lines(args.input), 1):
            try:
                examples.append(json.loads(line) if line.lstrip().startswith("{") else _example(predictor.task, line))
            except json.JSONDecodeError as e:
                raise UserError(f"{args.input} line {n} is not valid JSON ({e.msg})") from e
    elif args.text:
        examples = [_example(predictor.task, args.text, args.text_pair)]
    else:
        raise UserError("give --text (and --text-pair) or --input FILE")
    try:
        results = predictor.predict(examples)
    except (KeyError, ValueError) as e:
        raise UserError(f"the input does not fit a {predictor.task.name} model: {e}") from e
    if args.json:
        print_json(results)
    else:
        for r in results:
            print(r[predictor.task.answer_key])
    return 0


def _example(task: TaskType, text: str, pair: str | None = None) -> dict:
    """Plain text into the example layout of a task (a pair may be written 'A ||| B'; the
    choices of a multiple-choice model 'choice 1 || choice 2')."""
    if pair is None and PAIR_SEPARATOR in text:
        text, pair = parse_example(text)
    second = pair
    if task.inputs[-1].choices:
        second = [c.strip() for c in (pair or "").split("||")]
    try:
        return task.example_from_text(text, second)
    except ValueError as e:
        usage = " ".join(f"{flag} {i.cli}" for flag, i in zip(("--text", "--text-pair"), task.inputs))
        raise UserError(f"{e}: {usage}") from e
