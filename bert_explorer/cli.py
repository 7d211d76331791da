"""``bert-explorer``: the headless front end. Every page of the app has a command here.

Mistakes a user can make (a wrong path, a malformed file, a model without the needed head)
end with one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import checkpoint
from .checkpoint import CheckpointError


class UserError(Exception):
    """A problem with the user's input; the message says what is wrong and what to do."""


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like -1,-2, got {text!r}")


def _read_lines(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"input file {path} does not exist")
    raw = p.read_bytes()
    if b"\x00" in raw[:4096]:
        raise UserError(f"{path} looks like a binary file; give a UTF-8 text file with one example per line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        print(f"note: {path} is not valid UTF-8; read it as Latin-1", file=sys.stderr)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise UserError(f"{path} is empty; write one example per line (a pair as 'A ||| B')")
    return lines


def cmd_extract_features(args) -> int:
    from .analysis.features import extract_features, parse_example

    lines = _read_lines(args.input)
    loaded = checkpoint.load(args.model, "BertModel")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for record in extract_features(loaded, [parse_example(x) for x in lines], args.layers,
                                           args.max_seq_length, args.batch_size):
                f.write(json.dumps(record) + "\n")
    except ValueError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(str(e)) from e
    tmp.replace(out)
    print(f"wrote features of {len(lines)} examples to {out}", file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    loaded = checkpoint.load(args.model)
    if loaded.report.missing:
        print(f"note: {loaded.report.summary()}", file=sys.stderr)
    checkpoint.save(loaded.model, loaded.tokenizer, args.output)
    print(f"exported {type(loaded.model).__name__} ({loaded.num_parameters:,} parameters) to {args.output}",
          file=sys.stderr)
    return 0


def cmd_export_delta(args) -> int:
    import torch

    dtype = {"fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    result = checkpoint.save_delta(args.model, args.base, args.output, dtype)
    print(f"wrote {args.output}: {result['stored']:,} parameters stored in {args.dtype}; borrowed from "
          f"{args.base}: {', '.join(result['borrowed'])}", file=sys.stderr)
    return 0


def cmd_info(args) -> int:
    loaded = checkpoint.load(args.model)
    c = loaded.config
    info = {
        "path": str(loaded.path), "architecture": type(loaded.model).__name__,
        "L": c.num_layers, "H": c.hidden_size, "A": c.num_heads, "vocab_size": c.vocab_size,
        "parameters": loaded.num_parameters, "lowercase": loaded.tokenizer.lowercase,
        "heads_missing": loaded.report.missing_heads,
    }
    print(json.dumps(info, indent=2))
    return 0


def _load_json_config(path: str | None) -> dict:
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {path} does not exist")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"config file {path} is not valid JSON (line {e.lineno}: {e.msg})") from e
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a JSON object of settings")
    return data


def _dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    """One --flag per config field; flags left out fall back to the config file, then the default."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        if hints[f.name] is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None)
            continue
        if typing.get_origin(hints[f.name]) is list:
            parser.add_argument(flag, dest=f.name, default=None, help="comma-separated numbers",
                                type=lambda t: [float(x) for x in t.split(",") if x.strip()])
            continue
        options = typing.get_args(hints[f.name]) or (hints[f.name],)  # X | None -> (X, NoneType)
        base = next(t for t in (str, float, int) if t in options)
        parser.add_argument(flag, dest=f.name, type=base, default=None,
                            help=f"default {f.default!r}" if f.default is not dataclasses.MISSING else None)


def _config_from(args, cls):
    import dataclasses

    data = _load_json_config(args.config)
    data.pop("kind", None)
    for f in dataclasses.fields(cls):
        v = getattr(args, f.name, None)
        if v is not None:
            data[f.name] = v
    try:  # a resumed run may have been written by an earlier version: its old keys are only warned about
        return cls.from_dict(data, strict=not getattr(args, "resume", False))
    except (TypeError, ValueError) as e:
        raise UserError(str(e)) from e


def _start_background(kind: str, config: dict, output, resume: bool = False):
    """Launch a background run; a directory that a live process already works in is one line."""
    from .train.runs import start_background

    try:
        return start_background(kind, config, output, resume=resume)
    except RuntimeError as e:
        raise UserError(str(e)) from e


def cmd_pretrain(args) -> int:
    from dataclasses import asdict

    from .train.pretrain import PretrainConfig, run_pretraining

    cfg = _config_from(args, PretrainConfig)
    if args.background:
        run = _start_background("pretrain", asdict(cfg), args.output, resume=args.resume)
        print(f"started pre-training in the background: {run.path} (pid {run.status().get('pid')})")
        return 0
    try:
        result = run_pretraining(cfg, args.output, resume=args.resume, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    print(json.dumps(result, indent=2))
    return 0


def cmd_evaluate_pretraining(args) -> int:
    from .train.pretrain import PretrainConfig, evaluate_checkpoint

    cfg = _config_from(args, PretrainConfig)
    try:
        result = evaluate_checkpoint(args.model, cfg)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    print(json.dumps(result, indent=2))
    return 0


def cmd_finetune(args) -> int:
    from .data.tasks import DataError
    from .train.finetune import FinetuneConfig, run_finetuning

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
    from .train.predict import Predictor

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
        raise UserError(f"the input does not fit a {predictor.task} model: {e}") from e
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(r.get("label", r.get("answer", r.get("score", r.get("entities", r.get("choice"))))))
    return 0


def _example(task: str, text: str, pair: str | None = None) -> dict:
    """Plain text into the example layout of a task (a pair may be written 'A ||| B')."""
    if pair is None and "|||" in text:
        text, pair = (x.strip() for x in text.split("|||", 1))
    if task == "ner":
        return {"tokens": text.split()}
    if task == "qa":
        if pair is None:
            raise UserError("a QA model needs a question and a context: --text QUESTION --text-pair CONTEXT")
        return {"question": text, "context": pair}
    if task == "multiple-choice":
        choices = [c.strip() for c in (pair or "").split("||")]
        if len(choices) < 2:
            raise UserError("a multiple-choice model needs --text CONTEXT --text-pair 'choice 1 || choice 2 || ...'")
        return {"context": text, "choices": choices}
    return {"text": text, "text_pair": pair}


def cmd_create_pretraining_data(args) -> int:
    from .data.corpora import load_corpus
    from .data.pretraining import MaskingConfig, create_instances, save_instances, statistics
    from .tokenizer import WordPieceTokenizer

    try:
        docs = load_corpus(args.input)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    tok = WordPieceTokenizer.from_dir(checkpoint.resolve(args.vocab))
    masking = MaskingConfig(args.masked_lm_prob, *args.ratios, args.max_predictions_per_seq, args.whole_word)
    instances = create_instances(docs, tok, args.max_seq_length, args.short_seq_prob, args.objective, masking,
                                 dupe_factor=args.dupe_factor, seed=args.seed)
    meta = {"vocab": args.vocab, "vocab_size": tok.vocab_size, "max_seq_length": args.max_seq_length,
            "objective": args.objective, "seed": args.seed, "corpus": args.input}
    save_instances(args.output, instances, meta)
    print(json.dumps({"instances": len(instances), **statistics(instances)}, indent=2))
    return 0


def cmd_probe(args) -> int:
    from .analysis.probes import load_for_probe, mlm_top_k, nsp_probability

    loaded = load_for_probe(args.model, args.task)
    try:
        if args.task == "mlm":
            result = mlm_top_k(loaded, args.text, args.top_k, args.text_b)
        else:
            result = nsp_probability(loaded, [(args.a, args.b)])[0]
    except ValueError as e:
        raise UserError(str(e)) from e
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.task == "mlm":
        for m in result:
            print(f"[MASK] at {m['position']}: " + ", ".join(
                f"{p['token']} {p['probability']:.3f}" for p in m["predictions"]))
    else:
        print(f"P(IsNext) = {result['is_next']:.3f}")
    return 0


def cmd_corpora(args) -> int:
    from .data.corpora import BUILTIN_CORPORA

    rows = [{"name": c.name, "installed": c.available, "description": c.description,
             "provenance": c.provenance, "licence": c.licence} for c in BUILTIN_CORPORA.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']}{'' if r['installed'] else ' (not installed)'}: {r['description']}\n"
                  f"  source:  {r['provenance']}\n  licence: {r['licence']}\n")
    return 0


def cmd_ablate(args) -> int:
    """Run an ablation grid (Section 5, Tables 5-8) into a directory, or report one."""
    from .experiments import grid, results
    from .experiments.runner import is_ablation, run_ablation

    if args.report:
        if not is_ablation(args.report) or not (Path(args.report) / "plan.json").exists():
            raise UserError(f"{args.report} is not an ablation directory (no plan.json); run bert-explorer ablate first")
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
    try:
        res = run_ablation(recipe, args.output, resume=args.resume, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from e
    plan, res, df = results.load(args.output)
    print(results.to_markdown(df, results.directions(res), f"Ablation {plan['recipe']['name']} ({args.output})"))
    return 0


def _ratios(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3:
        raise argparse.ArgumentTypeError("expected MASK,RANDOM,KEEP fractions like 0.8,0.1,0.1")
    return parts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bert-explorer", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    model_help = f"a checkpoint directory, a short name ({', '.join(checkpoint.SHORT_NAMES)}) or hf:<hub id>"

    s = sub.add_parser("extract-features", help="contextual token features as JSON lines (feature-based transfer)")
    s.add_argument("--model", required=True, help=model_help)
    s.add_argument("--input", required=True, help="text file: one example per line, a pair as 'A ||| B'")
    s.add_argument("--output", required=True, help="output .jsonl")
    s.add_argument("--layers", type=_int_list, default=[-1, -2, -3, -4], help="encoder layers, -1 = last")
    s.add_argument("--max-seq-length", type=int, default=128)
    s.add_argument("--batch-size", type=int, default=8)
    s.set_defaults(func=cmd_extract_features)

    s = sub.add_parser("export", help="write a model as a transformers-compatible checkpoint directory")
    s.add_argument("--model", required=True, help=model_help)
    s.add_argument("--output", required=True)
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("export-delta", help="write a model as a delta over an installed base model (only the "
                                            "tensors that differ from it, as the shipped minilm-mlm-nsp)")
    s.add_argument("--model", required=True, help=model_help)
    s.add_argument("--base", default="minilm", help="short name of the installed base model")
    s.add_argument("--output", required=True)
    s.add_argument("--dtype", choices=("fp16", "fp32"), default="fp16", help="how the stored tensors are kept")
    s.set_defaults(func=cmd_export_delta)

    s = sub.add_parser("pretrain", help="pre-train a BERT (MLM+NSP, MLM only or left-to-right) into a run directory")
    s.add_argument("--output", required=True, help="run directory (status.json, metrics.jsonl, checkpoints/)")
    s.add_argument("--config", help="JSON file of settings (flags override it)")
    s.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    s.add_argument("--background", action="store_true", help="start as a background process and return")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    from .train.pretrain import PretrainConfig
    _dataclass_args(s, PretrainConfig)
    s.set_defaults(func=cmd_pretrain)

    s = sub.add_parser("evaluate-pretraining",
                       help="held-out MLM accuracy, MLM perplexity and NSP accuracy of a pre-trained model")
    s.add_argument("--model", required=True, help=model_help)
    s.add_argument("--config", help="the pre-training config of the run that made the model (its corpus, "
                                    "held-out fraction and seed give back the held-out documents)")
    _dataclass_args(s, PretrainConfig)
    s.set_defaults(func=cmd_evaluate_pretraining)

    s = sub.add_parser("finetune", help="fine-tune (or feature-based transfer) on a task file or built-in dataset")
    s.add_argument("--output", required=True, help="run directory (metrics.json, model/)")
    s.add_argument("--config", help="JSON file of settings (flags override it)")
    s.add_argument("--background", action="store_true")
    s.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)
    s.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    from .train.finetune import FinetuneConfig
    _dataclass_args(s, FinetuneConfig)
    s.set_defaults(func=cmd_finetune)

    s = sub.add_parser("predict", help="predict with a fine-tuned model")
    s.add_argument("--model", required=True, help="a fine-tuning run directory or its model/ directory")
    s.add_argument("--text", help="input text (a pair as 'A ||| B')")
    s.add_argument("--text-pair")
    s.add_argument("--input", help="file: one example per line (text, 'A ||| B', or a JSON object)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_predict)

    s = sub.add_parser("create-pretraining-data", help="corpus -> masked MLM/NSP training instances (JSON lines)")
    s.add_argument("--input", required=True, help="built-in corpus name (bbc, wiki, lee, tiny) or a text file")
    s.add_argument("--output", required=True, help="instances file (.jsonl or .jsonl.gz)")
    s.add_argument("--vocab", default="minilm", help="model or directory whose vocab.txt to use")
    s.add_argument("--max-seq-length", type=int, default=128)
    s.add_argument("--max-predictions-per-seq", type=int, default=20)
    s.add_argument("--masked-lm-prob", type=float, default=0.15)
    s.add_argument("--ratios", type=_ratios, default=(0.8, 0.1, 0.1), help="MASK,RANDOM,KEEP (Table 8)")
    s.add_argument("--whole-word", action="store_true", help="mask all pieces of a word together")
    s.add_argument("--short-seq-prob", type=float, default=0.1)
    s.add_argument("--dupe-factor", type=int, default=1, help="copies of the data with different masks")
    s.add_argument("--objective", choices=["mlm+nsp", "mlm", "ltr"], default="mlm+nsp")
    s.add_argument("--seed", type=int, default=12345)
    s.set_defaults(func=cmd_create_pretraining_data)

    s = sub.add_parser("probe", help="masked-word or next-sentence probe")
    probes = s.add_subparsers(dest="task", required=True)
    m = probes.add_parser("mlm", help="top-k words at each [MASK]")
    m.add_argument("--model", required=True, help=model_help)
    m.add_argument("--text", required=True, help="a sentence with [MASK] where a word should be predicted")
    m.add_argument("--text-b", help="optional second sentence")
    m.add_argument("--top-k", type=int, default=5)
    m.add_argument("--json", action="store_true")
    n = probes.add_parser("nsp", help="P(B is the sentence after A)")
    n.add_argument("--model", required=True, help=model_help)
    n.add_argument("--a", required=True)
    n.add_argument("--b", required=True)
    n.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_probe)

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

    s = sub.add_parser("corpora", help="the built-in corpora, their provenance and licences")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_corpora)

    s = sub.add_parser("info", help="size and heads of a model")
    s.add_argument("--model", required=True, help=model_help)
    s.set_defaults(func=cmd_info)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .train.runs import RunBusy

    try:
        return args.func(args)
    except (UserError, CheckpointError, RunBusy) as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bert-explorer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
