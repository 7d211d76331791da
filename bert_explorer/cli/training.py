"""Commands that train or use what was trained: pre-training and its evaluation, fine-tuning, predict.

    bert-explorer pretrain --corpus bbc --size mini --max-steps 2000 --output runs/mini [--background]
    bert-explorer finetune --model minilm --train builtin:bbc-topics --output runs/bbc
    bert-explorer predict --model runs/bbc --text "Shares fell sharply after the bank's results." --json
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from .. import checkpoint, hub, hub_names
from ..model import PRESETS
from ..analysis.layers.features import PAIR_SEPARATOR, parse_example
from ..analysis.probes import quality
from ..tasks.base import cut_note
from ..tasks.registry import task_type
from ..checkpoint import CheckpointError
from ..train.speed import busy_text, niced_here, said
from ..train.estimate import background_threads, sequences_of
from ..train.finetune import FinetuneConfig, check_folder as check_finetuning_folder, check_start as check_finetuning, \
    estimate as finetune_estimate, few_steps_note, read_data, resume_refusal, run_finetuning, steps_text
from ..train.predict import Predictor
from ..train.pretrain import (check_start as check_pretraining, estimate as pretrain_estimate, run_pretraining,
                              text_changed)
from ..data.uploads.core import PAIR_NAMES, TEXT_NAMES, column_key
from ..runs.lock import RunBusy, writer_busy
from ..runs.run import Run, new_run_refusal, restart_refusal, runs_root
from ..train.pretrain_config import PretrainConfig, plateau_warning, rate_for_width, warmup_steps_of
from ..train.pretraining_data import held_out_text, split_corpus
from ..train.finetune_resume import resume_settings as resume_finetuning
from ..train.resume import resume_settings
from .follow import following
from .common import (MODEL_HELP, UserError, config_from, dataclass_args, given_settings, print_json, progress_lines,
                     read_lines, refuse_second_text, run_or_background, start_run, user_errors)


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
    dataclass_args(s, PretrainConfig, helps={"lr": "The peak learning rate of Adam (reached after the warm-up, then "
                                                   "decayed linearly). Default: 0.0005 for a model narrower than "
                                                   "BERT-Base (as the Pre-train page), the paper's 0.0001 for "
                                                   "BERT-Base and wider."})
    s.set_defaults(func=cmd_pretrain)

    s = sub.add_parser("evaluate-pretraining",
                       help="held-out MLM accuracy, MLM perplexity and NSP accuracy of a pre-trained model, "
                            "and the hand-written check set")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.add_argument("--config", help="the pre-training config of the run that made the model (its corpus, "
                                    "held-out fraction and seed give back the held-out documents). Default: "
                                    "the model's own training_args.json, else the documents minilm-mlm-nsp's "
                                    "run held out (those of its model card)")
    s.add_argument("--sequences", type=int, help="measure only the first N held-out sequences (default: all "
                                                 "of them, as the model cards count)")
    # only what picks and masks the held-out sequences, and where they run: the training settings
    # (learning rate, steps, checkpoints) had their flags and their training defaults here
    # (pretrain's sentences said "Where to train", "the initial weights" and "batch-size x grad-accum x devices")
    dataclass_args(s, PretrainConfig, only=EVALUATION_SETTINGS,
                   default_said="Default: the model's own pre-training (--config).", helps={
                       "device": "Where to measure: cpu, cuda, cuda:N, or auto (a GPU if there is one).",
                       "precision": "The arithmetic of the measurement: fp32, bf16, fp16, or auto.",
                       "batch_size": "Held-out sequences measured at once (changes the speed, not the figures).",
                       "seed": "The seed of the run that made the model: it chose which documents are held out and "
                               "the masks of the held-out sequences."})
    s.set_defaults(func=cmd_evaluate_pretraining)

    s = sub.add_parser("finetune", help="fine-tune (or feature-based transfer) on a task file or built-in dataset")
    s.add_argument("--output", required=True, help="run directory (metrics.json, model/)")
    s.add_argument("--config", help="JSON file of settings (flags override it)")
    s.add_argument("--background", action="store_true", help="start as a background process and return")
    s.add_argument("--resume", action="store_true",
                   help="continue a stopped run from its last checkpoint with the run's own settings (only "
                        "--device, --precision, --compile and --save-checkpoints may change); its result so far is "
                        "moved to set_aside/")
    s.add_argument("--no-progress", action="store_true",
                   help="show no progress bar while training (each evaluation's line is still said)")
    dataclass_args(s, FinetuneConfig)
    s.set_defaults(func=cmd_finetune)

    s = sub.add_parser("predict", help="predict with a fine-tuned model")
    s.add_argument("--model", required=True, help="a fine-tuning run directory or its model/ directory")
    s.add_argument("--text", help="input text (a pair as 'A ||| B')")
    # --text-b: the name the other commands give a second sentence
    s.add_argument("--text-pair", "--text-b", dest="text_pair", metavar="TEXT",
                   help="the second text of a pair task (or the choices of a multiple-choice model, 'choice 1 || "
                        "choice 2'), instead of 'A ||| B' in --text")
    s.add_argument("--input", help="file: one example per line (text, 'A ||| B', or a JSON object), or a CSV/TSV "
                                   "table read by its header (the model's training column, else text / sentence1 "
                                   "/ premise ...)")
    s.add_argument("--json", action="store_true", help="print JSON instead of one answer per line")
    s.set_defaults(func=cmd_predict)


def say_download(model: str | None) -> None:
    """A note before a command starts from a Hub model not downloaded yet: the download comes first, and took
    seconds (minutes for BERT-Base's 440 MB) of silence."""
    if model and hub_names.is_hub_name(str(model)) and hub.local_copy(str(model)) is None:
        print(f"note: downloading {model} from the Hugging Face Hub first (once: it opens offline after)",
              file=sys.stderr, flush=True)


def rate_for_model(cfg: PretrainConfig, args) -> PretrainConfig:
    """``cfg`` with the learning rate the Pre-train page starts from where --lr (or a --config's lr) was not given:
    this project's small models' rate below BERT-Base's width, the paper's from it (``rate_for_width``)."""
    if "lr" in given_settings(args, PretrainConfig):
        return cfg
    if not cfg.init:
        return replace(cfg, lr=rate_for_width(PRESETS[cfg.size].hidden_size))
    try:
        config = checkpoint.config_of(cfg.init)
    except (CheckpointError, OSError, ValueError):  # (the run's own check says what is wrong with it)
        config = None
    width = config.hidden_size if config else None
    if width is None and hub_names.is_hub_name(cfg.init):  # one of the paper's not downloaded yet: its width is known
        listed = hub.CATALOGUE.get(hub_names.canonical(cfg.init)) if cfg.init else None
        width = listed.hidden if listed else None
    return replace(cfg, lr=rate_for_width(width))


def length_for_model(cfg, args, cls, model: str | None):
    """``cfg`` with the default max_seq_length (128) cut to the positions ``model`` has learned where it has
    fewer, said in a note: the default was refused for such a model, though it was not the user's choice. A
    length given (a flag, a --config) is kept, and refused if too long; a Hub model not downloaded yet, or a
    broken one, is left to the run's own check."""
    if not model or "max_seq_length" in given_settings(args, cls):
        return cfg
    try:
        config = checkpoint.config_of(model)
    except (CheckpointError, OSError, ValueError):
        return cfg
    if config is None or config.max_position_embeddings >= cfg.max_seq_length:
        return cfg
    print(f"note: max_seq_length {config.max_position_embeddings}, the positions {model} has learned (the default, "
          f"{cfg.max_seq_length}, is longer)", file=sys.stderr)
    return replace(cfg, max_seq_length=config.max_position_embeddings)


def cmd_pretrain(args) -> int:
    cfg = _resumed_config(args) if args.resume else config_from(args, PretrainConfig)
    if not args.resume:  # refused here, in the foreground and before a background start: no folder is made
        say_download(cfg.init)
        cfg = length_for_model(cfg, args, PretrainConfig, cfg.init)
        cfg = rate_for_model(cfg, args)
        with user_errors(CheckpointError, typed=(args, PretrainConfig)):  # (a resumed run is checked by its process)
            refusal = new_run_refusal(args.output, "pretrain", stored_first=False)
            if refusal or Run(args.output).checkpoints():
                raise ValueError(refusal or f"{args.output} already holds checkpoints; pass --resume to continue it "
                                            "or choose a new --output")
            if refusal := writer_busy(args.output) or restart_refusal(args.output):
                raise ValueError(refusal)
            check_pretraining(cfg)

    def say_estimate(background: bool) -> None:
        """The run's estimate (``train.pretrain.estimate``), one line on stderr before it starts."""
        try:
            est = pretrain_estimate(cfg, runs_root(), threads=None if background else torch.get_num_threads())
        except (CheckpointError, OSError, KeyError, ValueError):  # the run itself says what is wrong, in a sentence
            return
        print(f"estimate: {said(est['seconds'], est['threads'], niced=background or niced_here())} "
              f"({cfg.max_steps:,} step{'s' if cfg.max_steps != 1 else ''} of {cfg.batch_size * cfg.grad_accum} x "
              f"{cfg.max_seq_length} tokens, "
              f"{held_out_text(est['held_out_evaluations'], est['held_out_reason'])}; {est['basis']})",
              file=sys.stderr, flush=True)

    # a resume of a run that kept no checkpoint trains again from step 0 with its settings: a new run's time, and
    # a word of it (one killed before its first save went on for ten minutes with nothing said)
    again = args.resume and not Run(args.output).resumable_checkpoints()

    def say_again() -> None:
        if again and first_rank():
            print(f"note: {args.output} kept no checkpoint, so it trains again from step 0 with its own settings "
                  f"({cfg.max_steps:,} steps)", file=sys.stderr, flush=True)
        elif not args.resume and first_rank() and cfg.max_steps and warmup_steps_of(cfg) > cfg.max_steps:
            # (50 warm-up steps of a 2-step run peaked at 4e-6 of the 1e-4 asked, with nothing said)
            peak = cfg.lr * cfg.max_steps / warmup_steps_of(cfg)
            print(f"note: the warm-up ({warmup_steps_of(cfg):,} steps) is longer than the run ({cfg.max_steps:,}): "
                  f"the learning rate rises the whole run and reaches only {peak:.2g} of the {cfg.lr:g} asked",
                  file=sys.stderr, flush=True)

    def work():
        if (not args.resume or again) and first_rank():  # (a resumed run's steps left are its log's to say)
            refuse_busy(args.output)  # (a folder in use: said before any estimate)
            say_again()
            say_estimate(background=False)
        return run_pretraining(cfg, args.output, resume=args.resume, progress=not args.no_progress)

    def start():
        if not args.resume or again:
            say_again()
            say_estimate(background=True)
        start_run("pretrain", cfg.to_dict(), args, "started pre-training in the background: {path} (pid {pid})")
    return run_or_background(args, work, show=lambda result: _show_pretraining(result, cfg.lr), start=start)


def _show_pretraining(result: dict, lr: float) -> None:
    """The result as JSON on stdout; on stderr, a model that never left the word-frequency plateau (its log
    said so, the terminal only "plateau": true), and what may take it off. Under torchrun, rank 0's only (each
    rank printed the same result)."""
    if os.environ.get("RANK", "0") != "0":
        return
    print_json(result)
    if warning := plateau_warning(result, lr):
        print(f"warning: this model {warning}", file=sys.stderr)


def writes_into(stream, path: Path) -> bool:
    """Does ``stream`` write into the file ``path`` (a background run's stderr is its log.txt)?"""
    try:
        mine, theirs = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):  # (no file behind the stream: a test's capture)
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def first_rank() -> bool:
    """Is this the process that speaks (rank 0 under torchrun, or the only one)?"""
    return os.environ.get("RANK", "0") == "0"


def refuse_busy(folder: str) -> None:
    """A folder another live process writes: its one sentence (RunBusy), before anything else is said."""
    if busy := writer_busy(folder):
        raise RunBusy(busy)


def _resumed_config(args):
    """--resume: the run's own settings; of those given now, only what a resume may change
    (``train.pretrain.check_resume``): each change is said on stderr, any other is refused."""
    with user_errors(TypeError):
        cfg, notes = resume_settings(args.output, given_settings(args, PretrainConfig))
    if refusal := text_changed(args.output, cfg):  # (said here: a background start would fail in its log)
        raise UserError(refusal)
    for note in notes:
        print(f"note: resuming with {note}", file=sys.stderr)
    return cfg


EVALUATION_SETTINGS = (*quality.DOCUMENT_SETTINGS, "batch_size", "device", "precision")


def cmd_evaluate_pretraining(args) -> int:
    """Every held-out sequence by default, so that a model card's figures come out again; a
    measurement with the default documents is kept in the table of models measured on this
    machine (the Masked word probe shows it)."""
    given = given_settings(args, PretrainConfig)
    if args.sequences is not None and args.sequences < 1:
        raise UserError("--sequences must be at least 1")

    def work() -> dict:
        loaded = checkpoint.load(args.model, "BertForPreTraining", need_heads=("masked-LM head",))
        cfg, held_out = quality.held_out_settings(loaded)
        if given:  # the settings given change the model's own (only the documents' settings change what is read)
            base = cfg
            with user_errors(TypeError, typed=(args, PretrainConfig)):
                cfg = PretrainConfig.from_dict({**base.to_dict(), **given})
            if quality.document_settings(cfg) != quality.document_settings(base):
                held_out = f"from the settings given ({cfg.corpus}, {cfg.held_out_fraction:.0%} held out, seed {cfg.seed})"
        threads = torch.get_num_threads()
        # the sequences these settings hold out, at their length (counted from the words: cutting them is the
        # measurement's own first step); 1,818 of 128 was said whatever the documents or the length
        _, held_docs = split_corpus(cfg)
        counted = sequences_of(sum(len(s.split()) for d in held_docs for s in d), cfg.max_seq_length)
        n = min(args.sequences, counted) if args.sequences else counted
        idle_s = quality.estimate_seconds(loaded.config, n, seq_len=cfg.max_seq_length, threads=threads)
        # (the sequences there are, where fewer than asked: "measuring 16" was said of a corpus holding out 4)
        shown = ("every held-out sequence" if not args.sequences or args.sequences >= counted
                 else f"{n:,} held-out sequence{'s' if n != 1 else ''}")
        print(f"measuring {shown}: "
              f"{said(idle_s, threads, niced=niced_here())} "
              f"({busy_text()})", file=sys.stderr, flush=True)
        result = quality.measure(loaded, cfg, held_out, max_sequences=args.sequences, progress=progress_lines())
        quality.save(quality.entry_path(loaded, cfg, args.sequences), result)
        return result
    return run_or_background(args, work, show=_show_quality)


def _show_quality(result: dict) -> None:
    """The figures as JSON on stdout; what they were measured on, in words, on stderr."""
    print_json(result)
    clozes, pairs = result["check_set_clozes"], result["check_set_pairs"]
    n_masked, n_pairs = result["masked_wordpieces"], result["held_out_sequences"]
    nsp = ""
    if "nsp_accuracy" in result:  # chance is 50 % (half the pairs are random); is this model above it?
        p, err = result["nsp_accuracy"], quality.margin_95(result["nsp_accuracy"], n_pairs)
        nsp = (f", NSP {p:.1%} ± {err * 100:.1f} points (chance 50 %"
               + ("; not told apart from chance on so few" if abs(p - 0.5) <= err else "") + ")")
    else:
        nsp = " (no trained NSP head)"
    mlm_err = quality.margin_95(result["mlm_accuracy"], n_masked)
    print(f"{result['model']}: MLM {result['mlm_accuracy']:.1%} ± {mlm_err * 100:.1f} points of {n_masked:,} masked "
          f"WordPieces"
          f"{nsp} on {n_pairs:,} sequences of {result['held_out_documents']:,} documents "
          f"{result['held_out_set']}; check set: {clozes[0]}/{clozes[1]} clozes"
          + (f", {pairs[0]}/{pairs[1]} pairs" if pairs[0] is not None else "")
          + ("" if result["standard_vocabulary"] else "; its vocabulary is not the standard uncased one: "
             "not comparable piece for piece"), file=sys.stderr)


def cmd_finetune(args) -> int:
    if args.resume:
        with user_errors(TypeError):
            cfg, notes = resume_finetuning(args.output, given_settings(args, FinetuneConfig), FinetuneConfig)
            if args.background and (refusal := resume_refusal(cfg, args.output)):  # (said here, not in its log)
                raise UserError(refusal)
        for note in notes:
            print(f"note: resuming with {note}", file=sys.stderr)
    else:
        cfg = config_from(args, FinetuneConfig)
        say_download(cfg.model)
        cfg = length_for_model(cfg, args, FinetuneConfig, cfg.model)
        with user_errors(CheckpointError, typed=(args, FinetuneConfig)):  # refused here, not in a background process
            check_finetuning_folder(args.output, stored_first=False)
            check_finetuning(cfg)

    def say_estimate(background: bool, from_start: bool = False) -> None:
        """The run's estimate (``train.finetune.estimate``), one line on stderr before it starts: here with
        this process's threads, or as a background process with its threads and its start. A background
        run's own log (``from_start``) counts its process's start too, as the page or the command that
        started it did: the log's first line said 4 s of the job the page had said 6 s of."""
        try:
            train, dev = read_data(cfg)
        except (OSError, KeyError, ValueError) as e:  # data unreadable: the run here says why, in one sentence
            if background:  # a process started on it would only fail on it, leaving a failed run behind
                raise UserError(str(e) if isinstance(e, ValueError) else f"{cfg.train} cannot be read: {e}") from None
            return
        try:
            # (here: the threads this process trains with, chosen for the cores free now; None meant a
            # background run's one thread, and a 2-thread run here was said about twice too long)
            est = finetune_estimate(cfg, train, len(dev.examples), process_start=background or from_start,
                                    threads=background_threads() if background else torch.get_num_threads())
        except (CheckpointError, OSError, KeyError, ValueError):  # the model unreadable: the run says why
            return
        when = f"every {cfg.eval_every:,} steps" if cfg.eval_every else "after each epoch"
        told = said(est['seconds'], est['threads'], niced=background or niced_here())
        start = "the process's start, " if background or from_start else ""
        print(f"estimate: {told} ({steps_text(est, cfg)} of about "
              f"{est['tokens_per_example']:.0f} WordPieces, "
              f"{est['dev_examples']:,} dev examples scored {when}, and {start}the model read and saved; "
              f"{est['basis']})", file=sys.stderr, flush=True)
        if not writes_into(sys.stderr, Path(args.output) / "log.txt"):  # (a run the app started logs them itself)
            for note in dict.fromkeys(train.notes + dev.notes):  # (a file read as Latin-1, rows skipped, sampling)
                print(f"note: {note}", file=sys.stderr, flush=True)
            if few := few_steps_note(len(train.examples), cfg):
                print(f"note: {few}", file=sys.stderr, flush=True)
            try:
                cut = cut_note(train.examples, checkpoint.tokenizer_of(cfg.model), cfg.max_seq_length)
            except CheckpointError:  # (a model the run itself says it cannot read)
                cut = None
            if cut:
                print(f"note: {cut}", file=sys.stderr, flush=True)

    def work():
        if not args.resume:  # (a resumed run's steps left are its log's to say: it knows where it stopped)
            refuse_busy(args.output)  # (a folder in use: said before any estimate)
            say_estimate(background=False, from_start=writes_into(sys.stderr, Path(args.output) / "log.txt"))
        if not first_rank() or writes_into(sys.stderr, Path(args.output) / "log.txt"):  # (the log is its stderr)
            return run_finetuning(cfg, args.output, resume=args.resume)
        with following(args.output, bar=not args.no_progress):
            return run_finetuning(cfg, args.output, resume=args.resume)

    def start():
        if not args.resume:
            say_estimate(background=True)
        start_run("finetune", asdict(cfg), args, "started fine-tuning in the background: {path}")

    return run_or_background(args, work, show=lambda result: _show_finetuning(result, args.output), start=start)


def _show_finetuning(result: dict, output: str | None = None) -> None:
    """The scores as JSON on stdout; a warning about the dev set (too small to trust), each label's scores and
    where the model is (``output``, the run's folder) on stderr."""
    if result.get("warning"):
        print(f"warning: {result['warning']}", file=sys.stderr)
    if per := task_type(result["task"]).per_label(result.get("dev") or {}):  # each label's scores, most frequent first
        print(f"{'label':<24}{'F1':>7}{'precision':>11}{'recall':>8}{'support':>9}{'predicted':>11}", file=sys.stderr)
        for r in per:
            print(f"{r['label'][:23]:<24}{r['F1']:>7.3f}{r['precision']:>11.3f}{r['recall']:>8.3f}{r['support']:>9,}"
                  f"{r['predicted']:>11,}", file=sys.stderr)
        print(task_type(result["task"]).headline_note, file=sys.stderr)
    print_json({k: v for k, v in result.items() if k not in ("label_names", "warning")})
    if output is not None and (Path(output) / "model").is_dir() and result.get("steps") == 0:
        # (stopped before its first step: "the fine-tuned model is in" it, of a run that had trained nothing)
        print(f"stopped before its first step: {Path(output) / 'model'} holds the pre-trained model with an untrained "
              "task head (its dev scores are that head's guesses), not a fine-tuned model; start it again with the "
              "same command", file=sys.stderr)
    elif output is not None and (Path(output) / "model").is_dir():
        print(f"the fine-tuned model is in {Path(output) / 'model'} (transformers' BertFor* loads it as it is); try "
              f"it with `bert-explorer predict --model {output} --text \"...\"`", file=sys.stderr)
    elif output is not None and (Path(output) / "feature_head").is_dir():
        print(f"the feature-based head is in {Path(output) / 'feature_head'}; try it with `bert-explorer predict "
              f"--model {output} --text \"...\"`", file=sys.stderr)


def cmd_predict(args) -> int:
    try:
        predictor = Predictor(args.model)
    except FileNotFoundError as e:
        raise UserError(f"{args.model} is not a fine-tuning run or model directory ({e})") from e
    except ValueError as e:  # a run's file changed or cut since (a metrics.json written over: a traceback)
        raise UserError(str(e)) from e
    if args.input and Path(args.input).suffix.lower() in (".csv", ".tsv"):
        # a table's rows by its header (read as lines, its header was an example and a row's label part of its text)
        examples = [_from_record(predictor, row, f"{args.input} row {n}")
                    for n, row in enumerate(_table_rows(args.input), 1)]
    elif args.input:
        examples = []
        for n, line in enumerate(read_lines(args.input), 1):
            try:
                examples.append(_from_record(predictor, json.loads(line), f"{args.input} line {n}")
                                if line.lstrip().startswith("{") else
                                _example(predictor, line, where=f"{args.input} line {n}"))
            except json.JSONDecodeError as e:
                raise UserError(f"{args.input} line {n} is not valid JSON ({e.msg})") from e
    elif args.text:
        examples = [_example(predictor, args.text, args.text_pair, where="--text")]
    else:
        raise UserError("give --text (and --text-pair) or --input FILE")
    if len(examples) > MAX_PREDICTED:
        raise UserError(f"{args.input} holds {len(examples):,} examples, more than the {MAX_PREDICTED:,} one predict "
                        "answers (about the most of a fine-tuning's data); split it into smaller files")
    results = []
    for start in range(0, len(examples), PREDICT_CHUNK):  # a chunk's features at a time: memory stays a chunk's
        chunk = examples[start:start + PREDICT_CHUNK]
        try:
            answers = predictor.predict(chunk)
        except (KeyError, ValueError) as e:
            raise UserError(f"the input does not fit a {predictor.task.name} model: {e}") from e
        if args.json:
            results += answers
            continue
        for r, example in zip(answers, chunk):  # said as they come: the first answers before the last are computed
            print(predictor.task.shown(r, example).text, flush=True)  # each task's answer as a person reads it
    if args.json:
        print_json(results)
    return 0


# predict --input: the most examples one command answers (fine-tuning keeps 200,000 of a file), and how many at a
# time (the features of 243,000 rows at once took 4.4 GB before the first answer)
MAX_PREDICTED = 200_000
PREDICT_CHUNK = 256


def _table_rows(path: str) -> list[dict]:
    """The rows of a CSV or TSV file as {column: cell}, read as fine-tuning reads an upload's bytes."""
    import csv
    import io

    lines = read_lines(path)  # (decoded as an upload is; blank lines dropped)
    csv.field_size_limit(max(csv.field_size_limit(), 100_000_000))  # (a 5 MB review is a cell; the file is bounded)
    reader = csv.DictReader(io.StringIO("\n".join(lines)), delimiter="\t" if path.lower().endswith(".tsv") else ",",
                            strict=True)  # (a quote never closed swallowed the rows after it without a word)
    try:
        if not reader.fieldnames:
            raise UserError(f"{path} has no header line naming its columns")
        return list(reader)
    except csv.Error as e:  # (a traceback ended such a file)
        raise UserError(f"{path} cannot be read as a table at line {reader.line_num}: {e}; check its quotes and "
                        "separators") from None


def _from_record(predictor, record, where: str) -> dict:
    """A JSON object or a table row as the model's example: its own keys (text, text_pair) as they are, else the
    columns the model's training file named, else the names fine-tuning reads a text or a pair from
    (sentence1 / sentence2, review, premise / hypothesis, ...)."""
    if not isinstance(record, dict):
        raise UserError(f"{where} is not a JSON object")
    task = predictor.task
    if "text" in record or task.inputs[-1].choices:  # already in the example's layout
        for key in ("text", "text_pair"):  # ({"text": 5} or null was a TypeError; "" answered a label of nothing)
            if key in record and not (isinstance(record[key], str) and record[key].strip()):
                raise UserError(f"{where} has no text in '{key}' ({ascii(record[key])[:40]}); give the words to "
                                "answer for")
        if "text_pair" in record:
            refuse_second_text(task, getattr(predictor, "task_named", False), f"{where} has a 'text_pair': give "
                                                                                "'text' alone")
        return record
    named = {column_key(k): v for k, v in record.items()}
    trained_text, trained_pair = getattr(predictor, "columns", (None, None))

    def first(names):
        keys = [column_key(n) for n in names if n]
        return next((named[k] for k in keys if k in named and str(named[k]).strip()), None)
    text = first([trained_text, *TEXT_NAMES])
    if text is None:
        raise UserError(f"{where} has no text: its keys are {', '.join(map(str, record))[:200]}; give 'text' (and "
                        "'text_pair' for a pair), or the column the model was trained on")
    pair = first([trained_pair, *PAIR_NAMES]) if len(task.inputs) > 1 else None
    return _example(predictor, str(text), None if pair is None else str(pair), where=where)


def _example(predictor, text: str, pair: str | None = None, where: str = "--text") -> dict:
    """Plain text into the example layout of the predictor's task (a pair may be written 'A ||| B'; the
    choices of a multiple-choice model 'choice 1 || choice 2'). A second text for a run fine-tuned on one
    text at a time is refused, however it was written (``where``: the flag or the line it came from)."""
    task = predictor.task
    written = pair is None and PAIR_SEPARATOR in text
    if written:
        text, pair = parse_example(text)
    if pair is not None:
        refuse_second_text(task, getattr(predictor, "task_named", False),
                           f"{where} holds a second text after {PAIR_SEPARATOR}; give one text" if written else
                           "give --text alone, without --text-pair")
    second = pair
    if task.inputs[-1].choices:
        second = [c.strip() for c in (pair or "").split("||")]
    try:
        return task.example_from_text(text, second)
    except ValueError as e:
        usage = " ".join(f"{flag} {i.cli}" for flag, i in zip(("--text", "--text-pair"), task.inputs))
        raise UserError(f"{e}: {usage}") from e
