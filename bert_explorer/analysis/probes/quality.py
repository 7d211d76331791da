"""How good is this model at its pre-training tasks? Measured here, for any model with both heads.

The two tasks BERT is pre-trained on (Devlin et al. 2019, Section 3.1) are also the plainest
measure of a pre-trained model: on documents it never trained on, how often is its first guess
for a masked WordPiece right (MLM accuracy, and the perplexity of its guesses), and how often does
it tell a real next sentence from a random one (NSP accuracy)? Beside them, the hand-written check
set (``bench/check_set.json``): everyday clozes and sentence pairs a teacher would ask.

**Which documents.** A model pre-trained by this project carries its run's settings
(``training_args.json``), and the documents that run held out are a pure function of them: it is
measured on those. Any other model (a downloaded BERT-Base, an upload) is measured on the
documents held out by the shipped model's run (``minilm-mlm-nsp``: 124 BBC News and State of the
Union documents, 1,818 sequences of up to 128 WordPieces), so that every such model is measured
on the same text as the one on the model card. A model from elsewhere may have read these
documents in its own pre-training; nothing here can tell.

**Comparable piece for piece.** The held-out sequences are cut and masked by the model's own
tokenizer. With the standard uncased vocabulary (30,522 WordPieces: BERT-Base, the miniatures,
MiniLM) that gives exactly the pieces and masks of the card's figures; another vocabulary masks
other pieces, and its figures are marked "not comparable piece for piece".

Measuring every sequence takes a minute for the default model on two cores and about a quarter
of an hour for BERT-Base, so pages start it in the background (``cli/quality.py``) and keep the
result by the weights' fingerprint: ``<cache>/measured/quality-<key>/result.json``. Those small
files are never evicted: together they are the table of every model measured on this machine.
"""
from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import replace
from pathlib import Path

from ... import atomic, checkpoint, disk_cache, limits
from ...train.device import pick_device
from ...train.pretrain import evaluate
from ...train.pretrain_config import PretrainConfig
from ...train.pretraining_data import held_out_instances, split_corpus
from .check_set import load_check_set, score_check_set
from .pretraining_tasks import NSP_HEAD

REFERENCE = "minilm-mlm-nsp"  # whose run's held-out documents measure every model from elsewhere
RESULT_FILE = "result.json"
KIND = "quality"
HELD_OUT_PREPARE_S = 6.0  # the corpora split and the held-out documents cut into sequences: 5.7 s measured (idle EPYC)
BUILDER = ("bert_explorer.cli.quality",)  # the module a page starts in the background to measure a model


def reference_folder() -> Path:
    return checkpoint.resolve(REFERENCE)


def _pretraining_settings(folder: Path) -> dict | None:
    """The pre-training settings stored with a model (its run's ``training_args.json``), or None
    when it has none (a downloaded or uploaded model) or they are not a pre-training's."""
    try:
        data = json.loads((Path(folder) / "training_args.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "corpus" in data and "mlm_probability" in data else None


def held_out_settings(loaded) -> tuple[PretrainConfig, str]:
    """(the settings that give back the held-out documents, in words which ones): the model's own
    run's, else the reference model's (see the module's docstring)."""
    own = _pretraining_settings(loaded.path)
    if own is not None:
        cfg = PretrainConfig.from_dict(own, strict=False)
        return cfg, f"held out by its own pre-training run ({cfg.corpus}, {cfg.held_out_fraction:.0%}, seed {cfg.seed})"
    cfg = PretrainConfig.from_dict(_pretraining_settings(reference_folder()), strict=False)
    return cfg, f"held out by {REFERENCE}'s run ({cfg.eval_corpora or cfg.corpus}; the model card's documents)"


def standard_vocabulary(tokenizer) -> bool:
    """Does the model cut text into exactly the pieces of the standard uncased vocabulary?"""
    from ...tokenizer import WordPieceTokenizer
    return tokenizer.fingerprint() == WordPieceTokenizer.from_dir(reference_folder()).fingerprint()


def margin_95(accuracy: float, n: int) -> float:
    """The sampling error of an accuracy measured on ``n`` items: 1.96 standard errors, sqrt(p(1 - p) / n)
    with p at least a little off 0 and 1 (the normal approximation; ±9.8 points for 50 % on 100 pairs)."""
    import math

    p = min(max(accuracy, 0.5 / max(n, 1)), 1 - 0.5 / max(n, 1))
    return 1.96 * math.sqrt(p * (1 - p) / max(n, 1))


def held_out_sequences(loaded) -> int:
    """About how many held-out sequences the measurement reads for this model (its own run's held-out documents,
    else the reference's): their words, counted (a second or two the first time; kept for the process), as a
    pre-training's estimate counts them. The 1,818 of minilm-mlm-nsp's held-out set said explorer-mini's 1,024 as
    nearly twice that."""
    cfg, _ = held_out_settings(loaded)
    return _held_out_sequences(json.dumps(cfg.to_dict(), sort_keys=True, default=str))


@functools.lru_cache(maxsize=32)
def _held_out_sequences(settings: str) -> int:
    from ...train.estimate import sequences_of
    from ...train.pretraining_data import corpus_words

    cfg = PretrainConfig.from_dict(json.loads(settings), strict=False)
    return max(1, sequences_of(corpus_words(cfg)[1], cfg.max_seq_length))


def estimate_seconds(config, sequences: int = 1818, seq_len: int = 128, threads: int | None = None) -> float:
    """About how long the measurement takes on an idle machine, in a background build: every held-out
    WordPiece's forward pass (``limits.forward_flops``) plus the check set's, in float32, at this CPU's
    measured rate (``train.estimate.cpu_flop_s``); and the process's start and the held-out documents
    cut into sequences."""
    from ...train import estimate as est

    threads = threads or est.background_threads()  # (a build the page starts runs in the background)
    rate, _ = est.cpu_flop_s("forward", config.hidden_size, threads, False, config.intermediate_size)
    forward = (sequences + 62) * seq_len * limits.forward_flops(
        config.num_layers, config.hidden_size, config.intermediate_size, seq_len) / rate
    # around it: the process starts, reads the model, splits the corpora and cuts every held-out document
    # into sequences, however few are measured (a 0.5 M-parameter model spent 15-20 s of CPU there on a busy
    # machine and a second in its layers)
    start = est.PROCESS_START_S + 4 * est.pretraining_parameters(config)[0] / est.MODEL_LOAD_BYTES_PER_S
    return start + HELD_OUT_PREPARE_S + forward


def measure(loaded, cfg: PretrainConfig | None = None, held_out: str | None = None, max_sequences: int | None = None,
            progress=None) -> dict:
    """Held-out MLM accuracy and perplexity, NSP accuracy and the check set, in float32.

    ``cfg`` chooses the held-out documents (default :func:`held_out_settings`; ``held_out`` says
    which in words); ``max_sequences`` reads only the first so many held-out sequences (default:
    every one). ``progress(fraction, message)`` is told as batches finish."""
    start = time.monotonic()
    if cfg is None:
        cfg, held_out = held_out_settings(loaded)
    say = progress or (lambda fraction, message: None)
    say(0.0, "reading the held-out documents…")
    _, held_docs = split_corpus(cfg)
    held = held_out_instances(cfg, held_docs, loaded.tokenizer)
    if not held:
        raise ValueError(f"corpus {cfg.corpus!r} leaves no held-out sequences at fraction {cfg.held_out_fraction}")
    n = len(held) if max_sequences is None else min(len(held), max_sequences)
    cfg = replace(cfg, eval_batches=math.ceil(n / cfg.batch_size))
    dev = pick_device("cpu" if cfg.device == "auto" and not _on_gpu(loaded) else cfg.device, "fp32")
    loaded.model.to(dev.device)
    result = evaluate(loaded.model, held[:n], cfg, loaded.tokenizer, dev,
                      on_batch=lambda done, total: say(0.95 * done / total, f"{done:,} of {total:,} held-out sequences"))
    say(0.95, "the check set…")
    check = score_check_set(loaded, load_check_set())
    if NSP_HEAD in loaded.report.missing:  # a freshly initialised head: its answers measure nothing
        result.pop("nsp_accuracy", None)
        check["nsp_correct"] = None
    return {
        "model": loaded.name or str(loaded.path),
        **{k: result[k] for k in ("mlm_accuracy", "mlm_perplexity", "nsp_accuracy") if k in result},
        "masked_wordpieces": result["eval_tokens"],
        "held_out_documents": len(held_docs),
        "held_out_sequences": n,
        "held_out_sequences_all": len(held),
        "held_out_set": held_out or f"{cfg.corpus}, {cfg.held_out_fraction:.0%} held out, seed {cfg.seed}",
        "standard_vocabulary": standard_vocabulary(loaded.tokenizer),
        "check_set_clozes": [check["cloze_solved"], check["cloze_total"]],
        "check_set_pairs": [check["nsp_correct"], check["nsp_total"]],
        "parameters": loaded.num_parameters,
        "seconds": round(time.monotonic() - start, 1),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _on_gpu(loaded) -> bool:
    return next(loaded.model.parameters()).device.type != "cpu"


# ----- kept by the weights: the table of every model measured here -----------------------------------
def measured_root() -> Path:
    return disk_cache.cache_root() / "measured"


def entry_path(loaded, cfg: PretrainConfig | None = None, max_sequences: int | None = None) -> Path:
    """Where the measurement of these weights on these documents is kept (it exists once done)."""
    cfg = cfg or held_out_settings(loaded)[0]
    return measured_root() / disk_cache.entry_key(KIND, loaded, held_out=document_settings(cfg),
                                                  sequences=max_sequences)


# What picks and masks the held-out sequences (not the cadence or optimiser of the run)
DOCUMENT_SETTINGS = ("corpus", "max_docs", "held_out_fraction", "eval_corpora", "seed", "max_seq_length",
                     "short_seq_prob", "objective", "mlm_probability", "mask_ratio", "random_ratio", "keep_ratio",
                     "max_predictions_per_seq", "whole_word")


def document_settings(cfg: PretrainConfig) -> dict:
    """:data:`DOCUMENT_SETTINGS` of ``cfg`` (the masked-LM cap as ``MaskingConfig.cap_key`` keys it, so that a
    measurement kept when the default was a fixed 20 is found again)."""
    out = {k: v for k, v in cfg.to_dict().items() if k in DOCUMENT_SETTINGS}
    out["max_predictions_per_seq"] = cfg.masking.cap_key(cfg.max_seq_length)
    return out


def save(path: Path, result: dict) -> None:
    atomic.write_json(Path(path) / RESULT_FILE, result)


def stored(path: Path) -> dict | None:
    try:
        data = json.loads((Path(path) / RESULT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "mlm_accuracy" in data else None


def measured_models() -> list[dict]:
    """Every measurement kept on this machine, newest first (each with its ``entry`` name)."""
    root = measured_root()
    rows = [{**r, "entry": d.name} for d in (sorted(root.iterdir()) if root.is_dir() else [])
            if d.is_dir() and (r := stored(d))]
    return sorted(rows, key=lambda r: r.get("measured_at", ""), reverse=True)
