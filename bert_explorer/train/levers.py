"""Which CPU levers (``model.cpu_kernels.LEVERS`` and ``heap.LEVER``) make training faster on this CPU: measured
here and kept.

A lever is faster code for one kind of work that helps on some CPUs and not on others (a CPU whose
matrix units are fast spends its time elsewhere than one whose are slow). So none is on by default:
each one that acts on a job (``candidates``) is timed on this CPU, with it and without it, on a
training step of the job's own widths and vocabulary (one encoder layer standing for the job's L, the
job's heads, 1 to 16 sequences of 128, the job's threads and precision), and the job trains with the
levers that made that step at least ``GAIN`` faster. Steps with and without alternate, ``PAIRS`` pairs
(three times as many where those leave it in doubt), and the median ratio is kept per machine beside
the other speeds (``speed.kept``: a week, then measured again), so a model's first job pays one to
three seconds per lever (on the 2-core CPUs, explorer-mini) and later ones nothing.

``BERT_EXPLORER_CPU_LEVERS`` decides instead of the measurement: ``none``, ``all``, or lever names
separated by commas, for a benchmark, a test, or a user who wants the plain kernels. Estimates
(``estimate.py``) time the layer without levers: a job with levers ends sooner than said, not later.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict

import torch
from torch import nn

from ..model import IGNORE, BertConfig, BertForPreTraining, BertModel, cpu_kernels
from ..model.cpu_kernels import BF16_ACTIVATIONS, FUSED_LOSS
from . import heap, speed

ENV = "BERT_EXPLORER_CPU_LEVERS"
# the model's own (cpu_kernels) and the process's: glibc's heap kept between steps (heap.py), where it can be
LEVERS = cpu_kernels.LEVERS + ((heap.LEVER,) if heap.available() else ())
GAIN = 1.01       # a lever is taken when the step runs at least 1 % faster with it
PAIRS = 7         # pairs of timed steps (with, without) a lever is judged on
MORE_PAIRS, SURE = 14, 0.04  # ... and 14 more where the first seven's median is within 0.04 of GAIN
SEQ, MASKED = 128, 0.15
WORK_FLOPS = 24e9  # the timed step's work: up to about 100 ms on a 2-core CPU, 1 to 16 sequences of 128
# (On the 2-core EPYC, explorer-mini's pre-training: five pairs of 50 ms steps read a lever's gain
# anywhere in 0.88-1.10 in four tries; seven pairs of 100 ms steps, within 0.03 of one another. On the
# 2-core AMX Xeon, whose second core's speed comes and goes, seven pairs read the same lever 0.93-1.04;
# twenty-one, about half that spread.)


def override() -> tuple[str, ...] | None:
    """The levers ``BERT_EXPLORER_CPU_LEVERS`` names, or None where it is unset or ``measured``."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "measured"):
        return None
    if value == "none":
        return ()
    if value == "all":
        return LEVERS
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in LEVERS]
    if unknown:
        raise ValueError(f"{ENV}={value!r}: no CPU lever named {', '.join(unknown)}; say none, all, measured or "
                         f"some of: {', '.join(LEVERS)}")
    return names


def _timed_work(config: BertConfig, pretraining: bool, predicted: float = MASKED) -> tuple[int, int, float, float]:
    """The timed step of :func:`_training_step`: (sequences, their length, the fraction of positions its MLM head
    predicts, its FLOPs), for a job whose head predicts ``predicted`` of the positions (0.15 masked; a
    left-to-right model predicts every one)."""
    masked = predicted / max(1, config.num_layers)
    per_position = 6 * (4 * config.hidden_size ** 2 + 2 * config.hidden_size * config.intermediate_size)
    per_position += 6 * masked * config.vocab_size * config.hidden_size if pretraining else 0
    seq = min(SEQ, config.max_position_embeddings)
    batch = max(1, min(16 * SEQ // seq, round(WORK_FLOPS / (per_position * seq))))
    return batch, seq, masked, batch * seq * per_position


def _training_step(config: BertConfig, pretraining: bool, bf16: bool, levers: tuple[str, ...],
                   predicted: float = MASKED):
    """A function that runs one forward and backward pass of a one-layer model of ``config``'s widths and
    vocabulary (the job's own architecture: pre-training heads, or the encoder a fine-tuning trains) with
    the CPU kernels and ``levers``, on about ``WORK_FLOPS`` of work (sequences of 128, or the model's
    longest), and returns its seconds.

    The one layer stands for the job's L: its masked-LM head predicts a fraction ``predicted`` / L of the positions,
    so that the head weighs against the layer as it does against L layers. (With 0.15 the head of
    explorer-mini's 30,522 words weighed as much as its four layers, and a lever acting in every layer
    read about a quarter of its gain: bf16 activations 1.01× on the AMX Xeon, 1.07× in the whole step.)"""
    one = BertConfig(**{**asdict(config), "num_layers": 1})
    batch, seq, masked, _ = _timed_work(config, pretraining, predicted)
    torch.manual_seed(0)
    model = cpu_kernels.apply(BertForPreTraining(one) if pretraining else BertModel(one, add_pooling_layer=False),
                              "cpu", kernel_levers(levers)).train()
    heap_kept = heap.LEVER in levers
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, one.vocab_size, (batch, seq), generator=g)
    labels = torch.where(torch.rand(batch, seq, generator=g) < masked, ids, torch.full_like(ids, IGNORE))
    none = (labels == IGNORE).all(1)  # a sequence with no masked position gets one (not each: at L = 12 one
    labels[none, 0] = ids[none, 0]    # a sequence would have been 1/128 more, 1.6 times the head's share)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(ids, labels=labels) if pretraining else model(ids).last_hidden_state.float().square().mean()
        (out.mlm_loss if pretraining else out).backward()
        model.zero_grad(set_to_none=True)

    def once() -> float:
        # the heap as the step finds it in a run with the lever (its previous step's memory kept: where steps without
        # the lever gave it back in between, one untimed step first), or in one without (kept memory given back)
        if not heap_kept:
            heap.release()
        elif not heap.keeping():
            heap.keep()
            step()
        t = time.perf_counter()
        step()
        return time.perf_counter() - t
    return once


def gain(lever: str, config: BertConfig, pretraining: bool, n_threads: int, bf16: bool,
         predicted: float = MASKED) -> float:
    """How many times faster a training step of ``config``'s widths runs with ``lever`` on this CPU: the
    median over ``PAIRS`` pairs of steps with and without it, taken in turns (with, without, without, with,
    ...) so that a busy moment falls on both, or over ``MORE_PAIRS`` more where the first pairs leave the
    choice in doubt (their median within ``SURE`` of ``GAIN``); kept per machine."""
    def measure() -> float:
        # fork_rng: the job's own random stream (its initialisation, its dropout) goes on as if nothing was timed
        with speed.threads(n_threads), torch.random.fork_rng(devices=[]):
            try:
                with_ = _training_step(config, pretraining, bf16, (lever,), predicted=predicted)
                without = _training_step(config, pretraining, bf16, (), predicted=predicted)
                with_(), without()  # warm-up
                ratios = []
                for i in range(PAIRS + MORE_PAIRS):
                    if i == PAIRS and abs(statistics.median(ratios) - GAIN) >= SURE:
                        break  # clear enough already
                    if i % 2 == 0:
                        on, off = with_(), without()
                    else:
                        off, on = without(), with_()
                    ratios.append(off / on)
            finally:
                heap.release()  # given back, also after a failure: the heap's lever acts only while a job trains
        return statistics.median(ratios)
    return speed.kept(_key(lever, config, pretraining, n_threads, bf16, predicted), measure, best=False)


def _key(lever: str, config: BertConfig, pretraining: bool, n_threads: int, bf16: bool,
         predicted: float = MASKED) -> str:
    share = f" predicted={predicted:.3g}" if pretraining and abs(predicted - MASKED) > 1e-9 else ""
    return (f"lever {lever}: {'pre-training' if pretraining else 'encoder'} L={config.num_layers} "
            f"H={config.hidden_size} I={config.intermediate_size} V={config.vocab_size} threads={n_threads} "
            f"{'bf16' if bf16 else 'fp32'}{share}")


def measuring_seconds(config: BertConfig, pretraining: bool, bf16: bool, n_threads: int, layer_flop_s: float,
                      predicted: float = MASKED) -> float:
    """About how long choosing the levers takes here before a job of ``config`` trains its first step (an
    estimate's part): nothing where the override decides or every lever's reading is kept; else, for each lever
    not measured yet, 2·(PAIRS + 1) timed steps at ``layer_flop_s`` (a layer's training rate here), half as
    many again for the pairs added where in doubt, and the heap's untimed steps (about one in two of its timed
    ones). (A first job of explorer-mini measured for 6-8 s.)"""
    if override() is not None:
        return 0.0
    unmeasured = [n for n in candidates(pretraining, bf16)
                  if not speed.is_kept(_key(n, config, pretraining, n_threads, bf16, predicted))]
    steps = 2 * (PAIRS + 1) * 1.5 * len(unmeasured)
    steps += (PAIRS + 1) * 1.5 * 0.5 if heap.LEVER in unmeasured else 0  # its untimed steps (_training_step)
    return steps * _timed_work(config, pretraining, predicted)[3] / max(layer_flop_s, 1.0)


def candidates(pretraining: bool, bf16: bool) -> tuple[str, ...]:
    """The levers that act on such a job: bf16 activations under bf16 only, the fused loss in pre-training only."""
    return tuple(n for n in LEVERS if (n != BF16_ACTIVATIONS or bf16) and (n != FUSED_LOSS or pretraining))


def chosen(model: nn.Module, device, autocast_dtype: torch.dtype | None,
           n_threads: int | None = None, predicted: float = MASKED) -> tuple[str, ...]:
    """The levers ``model`` trains with on ``device`` (none off the CPU, nor for a model without an encoder
    config): the override where one is set, else those measured faster here on a step whose MLM head predicts
    ``predicted`` of the positions, as the job's does."""
    config = getattr(model, "config", None)
    if torch.device(device).type != "cpu" or not hasattr(config, "hidden_size"):
        return ()
    bf16 = autocast_dtype == torch.bfloat16
    n_threads = n_threads or torch.get_num_threads()
    pretraining = isinstance(model, BertForPreTraining)
    fixed = override()
    if fixed is not None:
        return tuple(n for n in candidates(pretraining, bf16) if n in fixed)
    return tuple(n for n in candidates(pretraining, bf16)
                 if gain(n, config, pretraining, n_threads, bf16, predicted) >= GAIN)


def apply(model: nn.Module, device, autocast_dtype: torch.dtype | None, log, run=None,
          resumed: bool = False, predicted: float = MASKED) -> nn.Module:
    """The CPU kernels and the levers chosen for ``model`` swapped in (``cpu_kernels.apply``); on the CPU,
    ``log`` (a run's) is told which levers (``said``). Returns the model.

    ``run`` (a run's folder, ``runs.run.Run``) keeps the levers in its status; a ``resumed`` run takes the ones
    it trained with again, not those measured faster now: a lever changes the dropout draws or the arithmetic,
    and a choice that flipped (a measurement expired, other threads) made the resumed steps another run's. The
    override (:data:`ENV`) still decides where it is set. ``predicted``: the share of positions the job's MLM head
    predicts (:func:`chosen`)."""
    before = (run.status().get("cpu_levers") if resumed and run is not None and hasattr(run, "status") else None)
    if isinstance(before, list) and override() is None and torch.device(device).type == "cpu":
        bf16 = autocast_dtype == torch.bfloat16
        levers = tuple(n for n in candidates(isinstance(model, BertForPreTraining), bf16) if n in before)
        log(f"CPU levers: {', '.join(levers) or 'none'} (as the run trained before it was resumed)")
    else:
        levers = chosen(model, device, autocast_dtype, predicted=predicted)
        if torch.device(device).type == "cpu":
            log(said(levers))
    if run is not None and torch.device(device).type == "cpu":
        run.write_status(cpu_levers=list(levers))
    model = cpu_kernels.apply(model, device, kernel_levers(levers))
    model.cpu_levers = levers  # read by the Trainer: the heap's lever acts while it trains (heap.kept)
    return model


def kernel_levers(levers) -> tuple[str, ...]:
    """The levers of ``levers`` that ``cpu_kernels.apply`` swaps into the model (all but the heap's)."""
    return tuple(n for n in levers if n in cpu_kernels.LEVERS)


def said(levers: tuple[str, ...]) -> str:
    """What a run's log says of its levers."""
    if override() is not None:
        return f"CPU levers: {', '.join(levers) or 'none'} (as {ENV} says)"
    if levers:
        return f"CPU levers: {', '.join(levers)} (each measured at least {GAIN - 1:.0%} faster on this CPU)"
    return f"CPU levers: none (none measured at least {GAIN - 1:.0%} faster on this CPU)"
