"""Commands that train or use what was trained: pre-training and its evaluation, fine-tuning, predict."""
from __future__ import annotations

import json
import sys

from ..tasks.base import TaskType
from .common import UserError, _config_from, _flag, _given_settings, _read_lines, _start_background, user_errors


def cmd_pretrain(args) -> int:
    from dataclasses import asdict

    from ..train.pretrain import PretrainConfig, run_pretraining

    cfg = _resumed_config(args) if args.resume else _config_from(args, PretrainConfig)
    if args.background:
        run = _start_background("pretrain", asdict(cfg), args.output, resume=args.resume)
        print(f"started pre-training in the background: {run.path} (pid {run.status().get('pid')})")
        return 0
    with user_errors():
        result = run_pretraining(cfg, args.output, resume=args.resume, progress=not args.no_progress)
    print(json.dumps(result, indent=2))
    return 0


def _resumed_config(args):
    """--resume: the run's own settings; of those given now, only what a resume may change
    (``train.pretrain.check_resume``): each change is said on stderr, any other is refused."""
    from ..train.pretrain import PretrainConfig, ResumeRefused, resume_settings

    try:
        cfg, notes = resume_settings(args.output, _given_settings(args, PretrainConfig))
    except ResumeRefused as e:
        raise UserError(e.sentence(_flag)) from e
    except (TypeError, ValueError) as e:
        raise UserError(str(e)) from e
    for note in notes:
        print(f"note: resuming with {note}", file=sys.stderr)
    return cfg


def cmd_evaluate_pretraining(args) -> int:
    from ..train.pretrain import PretrainConfig, evaluate_checkpoint

    cfg = _config_from(args, PretrainConfig)
    with user_errors():
        result = evaluate_checkpoint(args.model, cfg)
    print(json.dumps(result, indent=2))
    return 0


def cmd_finetune(args) -> int:
    from ..data.uploads.core import DataError
    from ..train.finetune import FinetuneConfig, run_finetuning

    cfg = _config_from(args, FinetuneConfig)
    if args.background:
        from dataclasses import asdict

        run = _start_background("finetune", asdict(cfg), args.output)
        print(f"started fine-tuning in the background: {run.path}")
        return 0
    try:
        result = run_finetuning(cfg, args.output)
    except (DataError, ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    if result.get("warning"):
        print(f"warning: {result['warning']}", file=sys.stderr)
    print(json.dumps({k: v for k, v in result.items() if k not in ("label_names", "warning")}, indent=2))
    return 0


def cmd_predict(args) -> int:
    from ..train.predict import Predictor

    try:
        predictor = Predictor(args.model)
    except FileNotFoundError as e:
        raise UserError(f"{args.model} is not a fine-tuning run or model directory ({e})") from e
    if args.input:
        examples = []
        for n, line in enumerate(_read_lines(args.input), 1):
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
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(r[predictor.task.answer_key])
    return 0


def _example(task: TaskType, text: str, pair: str | None = None) -> dict:
    """Plain text into the example layout of a task (a pair may be written 'A ||| B'; the
    choices of a multiple-choice model 'choice 1 || choice 2')."""
    if pair is None and "|||" in text:
        text, pair = (x.strip() for x in text.split("|||", 1))
    second = pair
    if task.inputs[-1].choices:
        second = [c.strip() for c in (pair or "").split("||")]
    try:
        return task.example_from_text(text, second)
    except ValueError as e:
        usage = " ".join(f"{flag} {i.cli}" for flag, i in zip(("--text", "--text-pair"), task.inputs))
        raise UserError(f"{e}: {usage}") from e

