"""The one count of training work: model FLOPs per token, used for MFU in pre-training logs, in
`bench/train_step.py`, in the ablation planner's time estimate and on the Pre-train page; and the one
estimate of how long work takes here: pre-training, fine-tuning, and the corpus-wide jobs (the
nearest-neighbour index, layer probing), each said before it starts.

Per token, a training step costs about 6·N (forward and backward through every weight that
is multiplied, N = the parameters outside the three embedding tables, which are looked up, not
multiplied) plus 12·L·H·T (attention: scores and the weighted sum, forward and backward, over T
positions) plus 6·V·H times the fraction of tokens that are predicted (the tied MLM decoder runs
only where there is a label: 15 % for MLM, every token for a left-to-right model).

The time a pre-training will take (the Pre-train page) is those FLOPs over a throughput: one
measured by an earlier run of the same size on this device, or one stated for the device; plus its
held-out evaluations (forward passes) and the loading before its first step.
"""
from __future__ import annotations

import functools
import math
import statistics
from pathlib import Path

import torch

from .. import checkpoint
from ..checkpoint import CheckpointError
from ..model import PRESETS, BertConfig, preset
from ..runs.background import background_env
from ..runs.finder import find_runs, rel_name
from ..runs.run import metrics_record, part_start
from . import levers, speed
from .device import PEAK_FLOPS
from .flops import encoder_parameters, flops_per_token, model_flops_per_token


# ----- the time a pre-training will take -------------------------------------------------------
ALIASES = {"L2-H128": "tiny", "L4-H256": "mini", "L4-H512": "small", "L8-H512": "medium"}
BATCH_APART = 2.0  # a run's sequences a step at most this many times the asked (batch 4 said 37 min of 7 for 32)


def size_options() -> list[str]:
    """The 24 miniatures of Turc et al. (L x H) and BERT-base."""
    return [n for n in PRESETS if n.startswith("L")] + ["base"]


def pretraining_parameters(config: BertConfig) -> tuple[int, int]:
    """(all weights, weights outside the three embedding tables) of a BertForPreTraining with
    ``config``, counted from the config alone (building even a shapes-only model first imports
    parts of torch that cost the Pre-train page about 3 s). The MLM output is tied to the word
    embeddings, so it adds only its bias; tests/test_estimate.py checks the count against built
    models."""
    H, I, V = config.hidden_size, config.intermediate_size, config.vocab_size
    tables = (V + config.max_position_embeddings + config.type_vocab_size) * H
    layer = (4 * (H * H + H) + 2 * H          # Q, K, V and the attention output; its LayerNorm
             + (H * I + I) + (I * H + H) + 2 * H)  # the feed-forward block; its LayerNorm
    rest = (2 * H                              # the embeddings' LayerNorm
            + config.num_layers * layer
            + H * H + H                        # the pooler
            + H * H + H + 2 * H + V            # the MLM head: transform, LayerNorm, output bias
            + 2 * H + 2)                       # the NSP classifier
    return tables + rest, rest


@functools.lru_cache(maxsize=128)
def model_size(size: str, vocab_size: int, seq_len: int, mlm_probability: float = 0.15) -> tuple[int, float]:
    """(parameters, training FLOPs per token) of a preset, or of a checkpoint's config (a warm
    start: its own vocabulary), from :func:`pretraining_parameters` and :func:`flops_per_token`."""
    config = (preset(size, vocab_size=vocab_size) if size in PRESETS
              else BertConfig.load(checkpoint.resolve(size)))
    total, outside_tables = pretraining_parameters(config)
    flops = flops_per_token(config.num_layers, config.hidden_size, config.vocab_size, outside_tables, seq_len,
                            mlm_probability)["total"]
    return total, flops


def _canonical(size: str) -> str:
    return {alias: name for name, alias in ALIASES.items()}.get(size, size)


def device_key() -> str:
    """The device name a pre-training run records in status.json on this machine."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _recent_metrics(run, n_bytes: int = 32768) -> list[dict]:
    """The last lines of metrics.jsonl (a long run's file is large; the end is enough)."""
    p = run.path / "metrics.jsonl"
    if not p.exists():
        return []
    size = p.stat().st_size
    with p.open("rb") as f:
        f.seek(max(0, size - n_bytes))
        lines = f.read().decode("utf-8", errors="replace").splitlines()
    if size > n_bytes:
        lines = lines[1:]  # the first line was cut by the seek
    return [record for line in lines if (record := metrics_record(line)) is not None]


def _predicted_fraction(cfg: dict) -> float:
    """The share of a run's tokens its MLM decoder predicts: the masked ones, or every one for a left-to-right
    model (a run's config, as saved)."""
    from ..data.objectives import predicted_share

    try:
        return predicted_share(cfg.get("objective", "mlm+nsp"), float(cfg.get("mlm_probability", 0.15)))
    except (KeyError, ValueError, TypeError):  # (an objective this version does not know: a masked LM's)
        return 0.15


def _vocabulary_of(run, cfg: dict) -> int:
    """The vocabulary a run trained with: its tokenizer's (a small corpus learns fewer pieces than asked)."""
    vocab = run.path / "tokenizer" / "vocab.txt"
    try:
        return sum(1 for _ in vocab.open(encoding="utf-8")) if vocab.is_file() else int(cfg.get("vocab_size", 8000))
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return int(cfg.get("vocab_size", 8000))


def measured_throughput(root: Path, size: str | None = None, predicted_fraction: float = 0.15,
                        precision: str | None = None, threads: int | None = None, corpus: str | None = None,
                        seq_len: int | None = None, batch: int | None = None) -> tuple[float, str] | None:
    """Effective FLOP/s of an earlier pre-training run of the same size on this device, from
    its logged tokens/s: (flop_s, where it comes from), or None. (Other sizes would mislead:
    small models keep a CPU or GPU far less busy than large ones.) A run of another objective (a
    left-to-right model's decoder predicts every token, a masked LM's 15 %), another precision or, on a
    CPU, another count of threads measured another speed: not taken, where its status says them.

    Of several such runs the fastest is taken (its speed read as an idle machine's): other work only slows
    a run, and the load now is said beside the idle figure (a run slowed by two busy loops, 1,684 tokens/s,
    was taken before one at 13,746, and a 46-second run was said to take 9 minutes). A run on the same
    ``corpus`` at the same ``seq_len`` that logged how full its sequences were (``fill``) gives its FLOP/s
    per sequence slot: the estimate counts every slot (steps x batch x seq_len), and short documents leave
    most of them empty; another corpus is counted as full. A batch ``BATCH_APART`` times off is not taken."""
    found = list(_measured_runs(root, size, predicted_fraction, precision, threads, corpus, seq_len, batch))
    if not found:
        return None
    flop_s, said = max(found, key=lambda x: x[0])
    return flop_s, said + (f" (the fastest of {len(found)} runs of this size here)" if len(found) > 1 else "")


def _measured_runs(root, size, predicted_fraction, precision, threads, corpus, seq_len, batch=None):
    """(FLOP/s, where it comes from) of each earlier run :func:`measured_throughput` may take."""
    dev = device_key()
    for run in find_runs(root):
        try:
            yield from _measured_run(run, dev, root, size, predicted_fraction, precision, threads, corpus, seq_len, batch)
        except (ValueError, TypeError, KeyError, AttributeError, statistics.StatisticsError, CheckpointError):
            continue  # a run whose files were edited or damaged (or of a model not here) is no speed: others are


def _measured_run(run, dev, root, size, predicted_fraction, precision, threads, corpus, seq_len, batch):
    """The (FLOP/s, where it comes from) of ``run``, where :func:`measured_throughput` may take it."""
    s, cfg = run.status(), run.config()
    if (s.get("kind") or cfg.get("kind")) != "pretrain":
        return
    run_size = cfg.get("init") or cfg.get("size")  # a warm start has the size of its checkpoint
    if s.get("device") != dev or _canonical(str(run_size)) != _canonical(str(size)):
        return
    fraction = _predicted_fraction(cfg)
    if abs(fraction - predicted_fraction) > 1e-9 or (precision and s.get("precision", precision) != precision) \
            or (dev == "cpu" and threads and s.get("threads", threads) != threads):
        return
    if batch and (per_step := int(cfg.get("batch_size") or 0) * int(cfg.get("grad_accum") or 1)) and \
            not 1 / BATCH_APART <= per_step / batch <= BATCH_APART:
        return
    rows = [m for m in _recent_metrics(run) if m.get("split") == "train"
            and isinstance(m.get("tokens_per_s"), (int, float)) and m["tokens_per_s"] > 0][-20:]
    if len(rows) < 3:  # (a run of a step or two logged its start-up as its speed)
        return
    tps = statistics.median(m["tokens_per_s"] for m in rows)
    _, fpt = model_size(run_size, _vocabulary_of(run, cfg), int(cfg.get("max_seq_length", 128)), fraction)
    said = f"measured: run {rel_name(run.path, root)} of this size trained at {tps:,.0f} tokens/s here"
    # other work on the CPU while it trained (logged beside its speed): its speed as an idle machine's
    other = [m["other_cores"] for m in rows if isinstance(m.get("other_cores"), (int, float))]
    if dev == "cpu" and other and (idle := speed.idle_rate(tps, statistics.median(other),
                                                            int(s.get("threads") or threads or 1))) > tps:
        said += f" while other work kept {statistics.median(other):.1f} cores busy ({idle:,.0f} on an idle machine)"
        tps = idle
    fills = [m["fill"] for m in rows if isinstance(m.get("fill"), (int, float)) and 0 < m["fill"] <= 1]
    if fills and corpus is not None and cfg.get("corpus") == corpus \
            and int(cfg.get("max_seq_length", 128)) == int(seq_len or 128):
        fill = statistics.median(fills)
        said += f", its sequences {fill:.0%} full on this corpus"
        tps /= fill
    yield tps * fpt, said


def stated_throughput() -> tuple[float, str]:
    """The effective FLOP/s stated for this machine's GPU (a CPU's is measured: :func:`cpu_flop_s`)."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        peak = next((v for k, v in PEAK_FLOPS.items() if k in name), None)
        if peak:
            return 0.4 * peak, (f"stated: 40 % of the {name}'s dense bf16 peak ({peak / 1e12:,.0f} TFLOP/s), a "
                                f"typical utilisation for BERT pre-training")
        return 40e12, f"stated: 40 TFLOP/s, a rough figure for a recent GPU ({name} has no peak in our table)"
    if device_key() == "mps":
        return 2e12, "stated: about 2 TFLOP/s, a rough figure for an Apple GPU"
    raise ValueError("a CPU's speed is measured here (cpu_flop_s), not stated")


# Around the steps: a background run starts a Python process, imports torch, reads and splits the
# corpus, tokenises it into sequences and builds (or loads) the model before its step 1.
PROCESS_START_S = 2.5              # a fresh Python process importing torch and the package: 1.8-2.1 s measured
                                   # (2-core EPYC, idle)
CORPUS_WORDS_PER_S = 100_000.0     # stated: tokenising into sequences; measured 200,000 words/s (bbc, minilm
                                   # vocabulary, 2-core CPU), halved for a busy machine
WORDS_PER_TOKEN_SLOT = 0.58        # measured: bbc at 128 tokens gives a sequence per 74 words (pairs, short ones)
FORWARD_SHARE = 1 / 3              # an evaluation runs the forward pass only: a third of a training step's FLOPs
CHECKPOINT_BYTES_PER_S = 500e6     # stated: writing a checkpoint (weights and Adam's moments); measured 2.1-2.6 GB/s
                                   # for mini and small on a 2-core CPU, a quarter for a slower disk
CHECKPOINT_BYTES_PER_PARAMETER = 12  # float32 weights plus Adam's two moments (train/pretrain._save)


def evaluations_of(steps: int, eval_every: int) -> int:
    """How many held-out evaluations a run of ``steps`` makes: one every ``eval_every`` steps and
    one at the end (``pretrain._pretrain``)."""
    eval_every = max(1, int(eval_every))
    return steps // eval_every + (1 if steps % eval_every else 0)


def checkpoints_of(steps: int, save_every: int) -> int:
    """How many checkpoints a run of ``steps`` writes: one every ``save_every`` steps before the
    last, and one at the end (``pretrain._pretrain``)."""
    return (max(1, int(steps)) - 1) // max(1, int(save_every)) + 1


def sequences_of(words: int, seq_len: int) -> int:
    """About how many sequences of up to ``seq_len`` tokens ``words`` words of text make."""
    return int(round(words / (WORDS_PER_TOKEN_SLOT * seq_len)))


def measured_loading(root: Path, corpus: str | None) -> tuple[float, str] | None:
    """Seconds from its start to its first step (status ``created``, a resumed run's last part's launch, to ``ready``:
    the process started, the corpus read and tokenised, the model built) of the latest pre-training run on this
    corpus on this device, or None. (``started``, when the data began to be read, left the tokenising out.)"""
    dev = device_key()
    for run in find_runs(root):
        s, cfg = run.status(), run.config()
        if (s.get("kind") or cfg.get("kind")) != "pretrain" or s.get("device") != dev or cfg.get("corpus") != corpus:
            continue
        # from the earlier of its process's start and "created" (a command writes it after its imports, 3.5 s in)
        pid_start = s.get("pid_created") if isinstance(s.get("pid_created"), (int, float)) else None
        start = part_start(s) if s.get("part_started") else \
            min(s["created"], pid_start) if s.get("created") and pid_start else s.get("created")
        if start and s.get("ready") and s["ready"] >= start:
            return float(s["ready"] - start), f"measured: run {rel_name(run.path, root)} on this corpus"
    return None


def levers_seconds(config: BertConfig, pretraining: bool, bf16: bool, threads: int, predicted: float = 0.15) -> float:
    """About how long a CPU job of ``config`` spends choosing its CPU levers before its first step here (none
    once they are measured for its widths and ``predicted`` share: ``levers.measuring_seconds``)."""
    rate, _ = cpu_flop_s("train", config.hidden_size, threads, bf16, config.intermediate_size)
    return levers.measuring_seconds(config, pretraining, bf16, threads, rate, predicted)


def _levers_text(seconds: float) -> str:
    return (f"; and about {seconds:,.0f} s to time this CPU's speed-ups for the model's widths, once here"
            if seconds >= 0.5 else "")


def cpu_pretraining_step(config: BertConfig, batch_size: int, seq_len: int, predicted_fraction: float, bf16: bool,
                         threads: int) -> tuple[float, float, float]:
    """(seconds, the part outside the encoder layers, the layer's training FLOP/s) of a pre-training step of
    ``config`` on this CPU, in the precision it trains in, on its threads, idle: its L encoder layers at the rate
    one trains at here with AdamW's update of their parameters, and the rest (embeddings, heads, the clipping
    and update of their parameters) timed here on its own model (``speed.outside_layers_seconds``)."""
    H, I, L = config.hidden_size, config.intermediate_size, config.num_layers
    layer_rate, _ = cpu_flop_s("train", H, threads, bf16, I)
    per_step, per_position = speed.outside_layers_seconds(config, threads, bf16, predicted_fraction)
    positions = batch_size * seq_len
    layers_s = L * (positions * 3 * speed.layer_flops(H, I, seq_len) / layer_rate
                    + encoder_parameters(1, H, I) * OPTIMIZER_S_PER_PARAMETER)
    rest_s = per_step + positions * per_position
    return layers_s + rest_s, rest_s, layer_rate


def _cpu_pretraining_rate(size: str, vocab_size: int, bf16: bool, threads: int, batch_size: int, seq_len: int,
                          predicted_fraction: float, flops_per_token_: float) -> tuple[float, str, float]:
    """A pre-training's rate on this CPU (:func:`cpu_pretraining_step`), what it rests on, and the layer's rate,
    which its evaluations' forward passes go at."""
    config = preset(size, vocab_size=vocab_size) if size in PRESETS else BertConfig.load(checkpoint.resolve(size))
    step_s, rest_s, layer_rate = cpu_pretraining_step(config, batch_size, seq_len, predicted_fraction, bf16, threads)
    rate = flops_per_token_ * batch_size * seq_len / step_s
    plural = "s" if threads != 1 else ""
    return rate, (f"{rate / 1e9:,.0f} GFLOP/s on {threads} CPU thread{plural} of an idle machine: an encoder layer "
                  f"of width {config.hidden_size} timed here (training, {'bf16' if bf16 else 'fp32'}), and the rest "
                  f"of a step (embeddings, heads, their AdamW update: {rest_s * 1e3:,.0f} ms of {step_s * 1e3:,.0f} "
                  "ms a step) timed here"), layer_rate


def pretrain_estimate(size: str, steps: int, batch_size: int, seq_len: int, vocab_size: int, root: Path,
                      evaluations: int = 0, held_out_sequences: int = 0, eval_batches: int = 50,
                      corpus: str | None = None, corpus_words: int = 0, checkpoints: int = 1,
                      predicted_fraction: float = 0.15, precision: str = "auto", threads: int | None = None) -> dict:
    """Parameters and an estimated wall-clock time of a pre-training run, in four parts:

    * ``train_seconds``: steps x batch x seq_len tokens, times the FLOPs per token of
      ``model_flops_per_token``, over a throughput measured on this device (a previous run) or
      stated for it;
    * ``eval_seconds``: ``evaluations`` forward passes over min(``held_out_sequences``,
      ``eval_batches`` x batch) held-out sequences, at a third of a training token's FLOPs;
    * ``loading_seconds``: from the run's start to its first step, measured by an earlier run on
      ``corpus`` here, or stated: a process start plus tokenising ``corpus_words`` words;
    * ``checkpoint_seconds``: ``checkpoints`` writes of the weights and Adam's moments, at a stated
      rate of writing.

    ``seconds`` is their sum. ``predicted_fraction``: the tokens the MLM decoder predicts (the objective's:
    ``mlm_probability`` for a masked LM, every one, 1.0, for a left-to-right model); ``precision``, the
    run's setting, and its threads (default: a background run's) pick the rate it trains at."""
    from .device import autocast_dtype, precision_name

    params, fpt = model_size(size, vocab_size, seq_len, predicted_fraction)
    tokens = steps * batch_size * seq_len
    on = torch.device("cuda" if device_key() not in ("cpu", "mps") else "cpu")
    dtype = autocast_dtype(on, precision) if on.type == "cpu" or torch.cuda.is_available() else None
    threads = threads or background_threads()
    flop_s, basis = measured_throughput(root, size, predicted_fraction, precision_name(dtype), threads, corpus,
                                        seq_len, batch_size) \
        or (stated_throughput() if device_key() != "cpu" else (None, None))
    eval_flop_s = flop_s
    if flop_s is None:  # timed here: the step's parts; an evaluation's forward pass goes at the layer's rate
        flop_s, basis, eval_flop_s = _cpu_pretraining_rate(size, vocab_size, dtype is not None, threads, batch_size,
                                                           seq_len, predicted_fraction, fpt)
    train = tokens * fpt / flop_s
    eval_sequences = min(int(held_out_sequences), eval_batches * batch_size)
    eval_tokens = evaluations * eval_sequences * seq_len
    evaluation = eval_tokens * fpt * FORWARD_SHARE / eval_flop_s
    loading, loading_basis = measured_loading(root, corpus) or (
        PROCESS_START_S + corpus_words / CORPUS_WORDS_PER_S,
        f"stated: {PROCESS_START_S:.0f} s to start and about {CORPUS_WORDS_PER_S:,.0f} words/s to tokenise "
        f"{corpus_words:,} words")
    if on.type == "cpu":  # a first job of these widths here times the CPU levers before its first step
        config = preset(size, vocab_size=vocab_size) if size in PRESETS else BertConfig.load(checkpoint.resolve(size))
        choosing = levers_seconds(config, True, dtype is not None, threads, predicted_fraction)
        loading, loading_basis = loading + choosing, loading_basis + _levers_text(choosing)
    checkpoint_bytes = params * CHECKPOINT_BYTES_PER_PARAMETER
    saving = checkpoints * checkpoint_bytes / CHECKPOINT_BYTES_PER_S
    return {"parameters": params, "flops_per_token": fpt, "tokens": tokens, "flop_per_s": flop_s, "basis": basis,
            "eval_flop_per_s": eval_flop_s,
            "threads": threads,
            "train_seconds": train, "evaluations": evaluations, "eval_sequences": eval_sequences,
            "eval_tokens": eval_tokens, "eval_seconds": evaluation,
            "loading_seconds": loading, "loading_basis": loading_basis,
            "checkpoints": checkpoints, "checkpoint_bytes": checkpoint_bytes, "checkpoint_seconds": saving,
            "checkpoint_basis": f"stated: about {CHECKPOINT_BYTES_PER_S / 1e6:,.0f} MB/s written",
            "seconds": train + evaluation + loading + saving}


# planning work for a GPU: stated in gpu_plan.py, read through this module by the planner and the GPU kit
from .gpu_plan import (GPU_ASSUMED, GPU_FINETUNE_RUN_S, GPU_FLOP_S_BASE, GPU_FLOP_S_SMALL,  # noqa: F401
                       GPU_FT_STEP_FLOOR_S, GPU_PRETRAIN_RUN_S, GPU_STEP_FLOOR_S, HOST_MASKING_SEQ_PER_S,
                       gpu_flop_s, gpu_pretrain_seconds)


# ----- the time of work on this machine's CPU ------------------------------------------------------
# A model's arithmetic is timed on this CPU (``speed.py``): one encoder layer of the job's width, with the
# job's threads and precision, kept per machine as an idle machine's figure. Every estimate below is for
# an idle machine; ``speed.said`` and ``speed.seconds_now`` scale it by the share of the CPU the job gets
# now. A linear probe's L-BFGS evaluations multiply thin matrices ([n, H] @ [H, labels]) on one thread:
# PROBE_SHARE of the thread's measured matrix speed (0.4 measured on this project's 2-core EPYC).
PROBE_SHARE = 0.4


def cpu_flop_s(work: str, hidden_size: int, threads: int, bf16: bool = False,
               intermediate_size: int | None = None) -> tuple[float, str]:
    """(FLOP/s, where it comes from) of ``work`` ("forward", "train" or "probe") for a model of width
    ``hidden_size`` on ``threads`` CPU threads of this machine when it is idle, in bf16 autocast or not:
    measured here (``speed.layer_flop_s``, ``speed.matmul_flop_s``) and kept."""
    threads = max(1, int(threads))
    plural = "s" if threads != 1 else ""
    precision = "bf16" if bf16 else "fp32"
    if work == "probe":
        peak = speed.matmul_flop_s(bf16)
        rate = PROBE_SHARE * peak
        return rate, (f"{rate / 1e9:,.0f} GFLOP/s: {PROBE_SHARE:.0%} of this CPU's {peak / 1e9:,.0f} GFLOP/s a thread "
                      f"at multiplying {precision} matrices, measured here")
    rate = speed.layer_flop_s(work, hidden_size, threads, bf16, intermediate_size)
    return rate, (f"{rate / 1e9:,.0f} GFLOP/s on {threads} CPU thread{plural} of an idle machine: an encoder layer "
                  f"of width {hidden_size} timed here ({'training' if work == 'train' else 'forward'}, {precision})")


def background_threads() -> int:
    """The threads a background process (an index build, a run the app starts) computes with."""
    try:
        return max(1, int(background_env()["OMP_NUM_THREADS"]))
    except ValueError:
        return max(1, torch.get_num_threads())


def forward_flops(num_layers: int, hidden_size: int, seq_len: int, intermediate_size: int | None = None) -> float:
    """FLOPs of one WordPiece's forward pass through ``num_layers`` encoder layers at ``seq_len``
    positions: a third of :func:`flops_per_token`'s training count, 2·N + 4·L·H·T, with no decoder.
    The embeddings alone (``num_layers`` = 0) are looked up, not multiplied: no FLOPs."""
    n = encoder_parameters(num_layers, hidden_size, intermediate_size)
    return FORWARD_SHARE * flops_per_token(num_layers, hidden_size, 0, n, seq_len, 0.0)["total"]


def batches_flops(shapes, num_layers: int, hidden_size: int, intermediate_size: int | None = None) -> float:
    """FLOPs of forward passes over padded batches ``shapes``: (sequences, positions) each; every
    padded position costs as much as a real one."""
    return sum(b * t * forward_flops(num_layers, hidden_size, t, intermediate_size) for b, t in shapes)


# The nearest-neighbour index: besides the model's layers, each WordPiece is tokenised (twice: once to
# cut the corpus, once in its shard), embedded, made an fp16 vector of unit length, written into its
# shard and then into the index. Measured with bench/estimates.py at layer 0 (one thread): about
# INDEX_TOKEN_S + INDEX_TOKEN_H_S·H seconds a WordPiece.
INDEX_BUILD_S = 0.2     # and once a layer: its index assembled from the parts, the sentences written
INDEX_TOKEN_S = 7e-6
INDEX_TOKEN_H_S = 1.5e-8
MODEL_LOAD_BYTES_PER_S = 250e6   # building a model (its random initialisation) and reading its weights, per fp32
                                 # byte: measured 0.75 s for MiniLM (22.7 M parameters), 1.2-3.8 s for BERT-Base


def index_build_estimate(layers_run: int, hidden_size: int, shapes, tokens: int, threads: int,
                         process_start: bool = False, model_bytes: int = 0, n_layers: int = 1,
                         intermediate_size: int | None = None) -> dict:
    """Seconds of building the neighbour index of ``n_layers`` layers in one pass that runs
    ``layers_run`` encoder layers (none for the embeddings): the forward passes over the build's own
    batches ``shapes``, at :func:`cpu_flop_s`, plus the per-WordPiece work around them for ``tokens``
    WordPieces (the vectors made and written once for each layer); ``process_start`` adds a
    background process's start and its loading of the model (``model_bytes``)."""
    flops = batches_flops(shapes, layers_run, hidden_size, intermediate_size)
    flop_s, basis = cpu_flop_s("forward", hidden_size, threads, intermediate_size=intermediate_size)
    forward = flops / flop_s
    around = tokens * (INDEX_TOKEN_S + INDEX_TOKEN_H_S * hidden_size * max(1, n_layers)) + INDEX_BUILD_S * n_layers
    start = (PROCESS_START_S + model_bytes / MODEL_LOAD_BYTES_PER_S) if process_start else 0.0
    seconds = forward + around + start
    return {"flops": flops, "flop_per_s": flop_s, "basis": basis, "forward_seconds": forward,
            "around_seconds": around, "start_seconds": start, "seconds": seconds,
            "tokens_per_s": tokens / max(seconds - start, 1e-9), "threads": threads}


# ----- the time a fine-tuning will take --------------------------------------------------------------
# Above this, the Fine-tune and Pre-train pages ask before they start (a 199 MB upload once started a 140,634-step
# run in one click, days on a CPU; 10,000,000 pre-training steps, 118 days, started with one click too).
LONG_RUN_ASK_S = 30 * 60
TOKENS_PER_WORD = 1.3  # stated: English prose in the uncased WordPiece vocabulary (BBC: 1.2-1.3)


def words_of(example: dict) -> int:
    """The words of one example, every text field counted (a pair's two texts, QA's question and
    context, NER's tokens, every choice)."""
    n = 0
    for v in example.values():
        if isinstance(v, str):
            n += len(v.split())
        elif isinstance(v, list):
            n += sum(len(x.split()) for x in v if isinstance(x, str))
    return n


# The feature-based head (Section 5.3): a 2-layer BiLSTM of H units a direction over the frozen features, trained
# in float32 on its small matrices. Measured on this project's 2-core EPYC (explorer-mini, concat-last-4, 300
# BBC articles of 128 WordPieces, 3 epochs, one thread): about 50 GFLOP/s, near a probe's share of the thread's
# matrix speed (``PROBE_SHARE``); a GPU is assumed at a few TFLOP/s (sequential steps of small products).
GPU_BILSTM_FLOP_S = 5e12


def bilstm_flops_per_token(hidden: int, d_in: int) -> float:
    """Training FLOPs a token of the feature-based head's BiLSTM: forward, two directions × (layer 1:
    8·H·(d_in + H), four gates over the input and the state; layer 2: 8·H·(2H + H)); a training step
    three times the forward."""
    return 3 * 2 * (8 * hidden * (d_in + hidden) + 8 * hidden * 3 * hidden)


def bilstm_flop_s(hidden: int, on_cpu: bool) -> float:
    """The rate the BiLSTM head trains at: a probe's share of one CPU thread's matrix speed, or a GPU's."""
    return cpu_flop_s("probe", hidden, 1)[0] if on_cpu else GPU_BILSTM_FLOP_S


OPTIMIZER_S_PER_PARAMETER = 2e-9  # a fine-tuning step's AdamW update, the gradients' zeroing and clipping: measured
                                  # 0.8-1.0 ns a parameter for the fused AdamW alone on one thread
FINETUNE_RUN_S = 2.0               # the data read and featurised, the first step's warm-up, the predictions written


def _finetune_rates(hidden: int, threads: int | None, precision: str, on_cpu: bool, intermediate: int | None = None):
    """FLOP/s of fine-tuning's training steps, its dev passes (in the run's precision) and the final
    fp32 pass, and what they rest on: measured rates of this CPU, or a GPU's stated throughput."""
    if not on_cpu:
        rate, basis = stated_throughput()
        return rate, rate, rate, basis
    from .device import autocast_dtype

    threads = threads or background_threads()
    bf16 = autocast_dtype(torch.device("cpu"), precision) is not None
    train_rate, basis = cpu_flop_s("train", hidden, threads, bf16, intermediate)
    return (train_rate, cpu_flop_s("forward", hidden, threads, bf16, intermediate)[0],
            cpu_flop_s("forward", hidden, threads, False, intermediate)[0], basis)


def finetune_estimate(model: str, n_train: int, n_dev: int, epochs: float, batch_size: int, max_seq_length: int,
                      mean_words: float, lr_settings: int = 1, mode: str = "fine-tune", *,
                      tokens_per_example: float | None = None, features_per_example: float = 1.0,
                      seq_len: float | None = None, dev_tokens_per_example: float | None = None,
                      threads: int | None = None, precision: str = "auto", process_start: bool = True,
                      grad_accum: int = 1, eval_every: int | None = None, feature_mode: str = "last") -> dict:
    """Steps and seconds of a fine-tuning of ``model`` (a name or folder) on this machine, in parts:

    * ``train_seconds``: every parameter trained (6·N + 12·L·H·T FLOPs per token, no MLM decoder) over
      ``n_train`` examples of ``tokens_per_example`` padded WordPieces (``train.finetune.estimate`` counts
      them on the data, featurised as the run does; else ``mean_words`` words at about 1.3 WordPieces
      each plus [CLS] and [SEP]s, cut at ``max_seq_length``), in ``features_per_example`` inputs each
      (QA's windows) of ``seq_len`` positions, plus each step's optimiser update;
    * ``eval_seconds``: the dev set (``dev_tokens_per_example``, unpadded: it is read shortest first)
      forward after each epoch or every ``eval_every`` steps (a third of a step's FLOPs a token), once
      more at the end in fp32 (the dev predictions the After fine-tuning page reads), and, for a run in
      bf16, once more in fp32 to score the model kept;
    * ``loading_seconds``: the process's start (``process_start``: a run the page starts in the
      background), the model read once for its tokenizer, once for each learning rate and once to
      predict, and the fine-tuned model saved.

    On a CPU the rate is :func:`cpu_flop_s` for ``threads`` threads (default: a background run's), bf16
    where ``precision`` picks it (``device.autocast_dtype``); on a GPU, :func:`stated_throughput`. The
    feature-based mode reads every example forward once, then trains its BiLSTM head (``feature_mode``:
    concat-last-4 feeds it the last four layers side by side) for the epochs, scoring the dev set with it."""
    from .engine import total_steps  # engine imports torch's training pieces: only when estimating

    config = BertConfig.load(checkpoint.resolve(model))
    L, H = config.num_layers, config.hidden_size
    tokens = tokens_per_example or min(max_seq_length, mean_words * TOKENS_PER_WORD + 3)
    seq = max(1, int(round(seq_len or tokens / max(features_per_example, 1e-9))))  # the positions of one input
    dev_tokens = dev_tokens_per_example or tokens
    train_fpt = flops_per_token(L, H, config.vocab_size, encoder_parameters(L, H, config.intermediate_size), seq,
                                0.0)["total"]
    forward_fpt = train_fpt * FORWARD_SHARE
    features = max(1, int(round(n_train * features_per_example)))
    per_setting = total_steps(features, batch_size, epochs, grad_accum)
    steps = per_setting * lr_settings
    parameters = pretraining_parameters(config)[0]
    on_cpu = device_key() == "cpu"
    train_rate, eval_rate, final_rate, basis = _finetune_rates(H, threads, precision, on_cpu, config.intermediate_size)
    # engine.fit: after each epoch (the last one cut short too), or every eval_every steps and at the end
    evaluations = lr_settings * (math.ceil(per_setting / eval_every) if eval_every else max(1, math.ceil(epochs)))
    if mode == "feature-based":  # BERT frozen: its features once, forward only; then the BiLSTM head trains
        lstm = bilstm_flops_per_token(H, (min(4, L) if feature_mode == "concat-last-4" else 1) * H)
        head_rate = bilstm_flop_s(H, on_cpu)
        train_s = n_train * tokens * forward_fpt / eval_rate + epochs * n_train * tokens * lstm / head_rate
        eval_s = n_dev * dev_tokens * (forward_fpt / eval_rate + evaluations * lstm * FORWARD_SHARE / head_rate)
    else:
        # total_steps counts the last batch of an epoch whole: the tokens are the examples', epochs times over
        train_s = lr_settings * epochs * n_train * tokens * train_fpt / train_rate
        # each step's optimiser update on a CPU; on a GPU, no step is quicker than its floor
        train_s = train_s + steps * parameters * OPTIMIZER_S_PER_PARAMETER if on_cpu else \
            max(train_s, steps * GPU_FT_STEP_FLOOR_S)
        # a run trained in bf16 scores its kept model once more in fp32 before the final pass (train.finetune)
        rescored = 1 / final_rate if eval_rate != final_rate else 0.0
        eval_s = n_dev * dev_tokens * forward_fpt * (evaluations / eval_rate + 1 / final_rate + rescored)
    loads = (2 + (lr_settings if mode != "feature-based" else 0)) * 4 * parameters / MODEL_LOAD_BYTES_PER_S
    saving = 4 * parameters / CHECKPOINT_BYTES_PER_S
    loading = (PROCESS_START_S if process_start else 0.0) + FINETUNE_RUN_S + loads + saving
    if on_cpu and mode != "feature-based":  # a first fine-tuning of these widths here times the CPU levers
        from .device import autocast_dtype

        loading += levers_seconds(config, False, autocast_dtype(torch.device("cpu"), precision) is not None,
                                  threads or background_threads())
    return {"steps": steps, "seconds": loading + train_s + eval_s, "train_seconds": train_s, "eval_seconds": eval_s,
            "loading_seconds": loading, "tokens_per_example": tokens, "basis": basis,
            "threads": threads or background_threads()}
