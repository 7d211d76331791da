"""The command line: every command, its options and help."""
from __future__ import annotations

import argparse

from .. import checkpoint
from .common import _dataclass_args, _int_list
from .explore import cmd_corpora, cmd_export, cmd_export_delta, cmd_extract_features, cmd_info, cmd_probe
from .training import cmd_evaluate_pretraining, cmd_finetune, cmd_predict, cmd_pretrain
from .ablation import cmd_ablate


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bert-explorer",
                                description="BERT Explorer from the command line: every page of the app has a "
                                            "command here.")
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
    s.add_argument("--resume", action="store_true",
                   help="continue from the run's last checkpoint with the run's own settings (only the cadence of "
                        "logs, evaluations and checkpoints, --device, --precision and --max-steps may change)")
    s.add_argument("--background", action="store_true", help="start as a background process and return")
    s.add_argument("--no-progress", action="store_true", help="show no progress bar while training")
    from ..train.pretrain import PretrainConfig
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
    s.add_argument("--background", action="store_true", help="start as a background process and return")
    s.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)
    from ..train.finetune import FinetuneConfig
    _dataclass_args(s, FinetuneConfig)
    s.set_defaults(func=cmd_finetune)

    s = sub.add_parser("predict", help="predict with a fine-tuned model")
    s.add_argument("--model", required=True, help="a fine-tuning run directory or its model/ directory")
    s.add_argument("--text", help="input text (a pair as 'A ||| B')")
    s.add_argument("--text-pair")
    s.add_argument("--input", help="file: one example per line (text, 'A ||| B', or a JSON object)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_predict)

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

    from . import after_finetuning, analysis, neighbours  # probe-layers, compare-models, neighbours, after-finetuning
    analysis.register(sub)
    neighbours.register(sub)
    after_finetuning.register(sub)

    s = sub.add_parser("corpora", help="the built-in corpora, their provenance and licences")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_corpora)

    s = sub.add_parser("info", help="size and heads of a model")
    s.add_argument("--model", required=True, help=model_help)
    s.set_defaults(func=cmd_info)
    return p
