"""This machine's speed at each kind of work, measured here and kept; and the share of it a job gets now.

An estimate is the job's work counted (FLOPs and fixed costs) over a speed. Two faults made estimates
swing: the speed was one reading taken at that moment (a busy second read 48 GFLOP/s where the same CPU
does 593), and the share of that speed a model's layers reach was a constant measured on another CPU.
Here both are measured on the CPU the job runs on, and kept per machine:

* **How fast this CPU multiplies matrices** (:func:`matmul_flop_s`): the fastest of seven 1024² products on
  one thread, measured again now and then; the kept figure is the best reading of the last
  ``KEEP_S`` (a reading on a busy machine is slower, never faster, so the best is the idle machine's).
* **How fast one encoder layer of the job's width trains or runs forward** (:func:`layer_flop_s`): a real
  layer of this project's model (``BertLayer``, the CPU kernels as training applies them) timed on a batch
  of 4 × 128 positions with the job's threads and precision, kept the same way. The layer is what every
  job here spends its time in (training, fine-tuning, the index, the probes' vectors, the measures).

Both are said for an **idle machine**. :func:`share_now` is the part of it a job of ``threads`` threads
gets now, from the CPU time the system counted over the last minute at normal and at low priority (a
background job at low priority gets what normal work leaves); :func:`said` puts both in words: "about 1 min 50 s
on an idle machine, up to 4 min at the load now".

Kept in ``machine-speed.json`` in the disk cache's folder, under the machine's name (its CPU, cores and
PyTorch): a cache folder shared by two machines keeps each one's figures apart.
"""
from __future__ import annotations

import json
import os
import platform
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from .. import atomic, disk_cache, shared_work

SPEED_FILE = "machine-speed.json"
KEEP_S = 7 * 86400     # a kept best older than this is measured afresh (a new BIOS, a thermal change)
MEASURE_EVERY_S = 600  # a process measures a kept figure again at most this often (a better reading may come)
LAYER_BATCH, LAYER_POSITIONS = 4, 128
_lock = threading.Lock()
_measured_at: dict[str, float] = {}  # key -> when this process last measured it


def machine_name() -> str:
    """The CPU's model, its cores and PyTorch's version: what a kept speed belongs to."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}; {os.cpu_count() or 1} cores; torch {torch.__version__}"


def _path() -> Path:
    return disk_cache.cache_root() / SPEED_FILE


def _read() -> dict:
    try:
        data = json.loads(_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


# A speed measured on a busy machine, as an idle machine's: divided by the square root of the share of the cores
# a job at normal priority gets now, at most doubled. The share alone over-corrects a measurement that keeps its
# best of several tries, which finds the moments the other work leaves: measured here (train H=256 bf16, 1 thread,
# against the idle reading), at load 1.6 + 0.4 niced 0.82 of idle at nice 0 (share 0.76) and 0.85 at nice 10; at
# a load near 3 the share's correction halved cpu-small's 41 measured minutes (21.6 min said). Taken as they came,
# busy readings made an index's "idle" time 15 min 21 s where 6 min 27 s was measured idle, and cpu-small's 3 h
# 47 min at load 9.6 where 50 min is its idle estimate: under-corrected, a time said stays on the long side.
BUSY_READING_MOST = 2.0


def busy_share(n_threads: int, load: float | None = None) -> float:
    """The part of an idle machine's speed a speed measured beside other work (``load`` cores of it, else counted
    now) is taken to be: the square root of a normal-priority job's share, at least 1 / BUSY_READING_MOST."""
    return max(1 / BUSY_READING_MOST, share_now(n_threads, load=load, niced=False) ** 0.5)


def kept(key: str, measure, best: bool = True, n_threads: int = 1, cpu_timed: bool = False) -> float:
    """The reading of ``key`` kept for this machine (FLOP/s): measured with ``measure()`` when none is kept
    or the kept one is older than ``KEEP_S``; measured again when the kept one was taken on a busy machine
    and the machine is idle now (at most once every ``MEASURE_EVERY_S`` in a process). A speed measured on a
    busy machine is kept as an idle machine's (:data:`BUSY_READING_MOST`; ``n_threads``: the measurement's),
    the better of two such kept; an idle machine's reading replaces it. A reading that is not a speed
    (``best=False``: a ratio of two speeds, which a busy moment moves either way) keeps the newest idle
    reading instead. ``cpu_timed``: ``measure`` counts the CPU time its thread got (:func:`_seconds`), which the
    load does not stretch: a busy machine's reading is kept as it is, not divided by a guess of the share."""
    name, now = machine_name(), time.time()
    with _lock:
        mine = _read().get(name)
        kept_one = mine.get(key) if isinstance(mine, dict) else None
        if not (isinstance(kept_one, dict) and isinstance(kept_one.get("flop_s"), (int, float))
                and kept_one["flop_s"] > 0 and isinstance(kept_one.get("at"), (int, float))):
            kept_one = None  # a file edited by hand, or written by another version: measured again
        fresh = kept_one is not None and now - kept_one["at"] < KEEP_S
        idle = is_idle()
        if fresh and (kept_one.get("idle", True) or not idle or shared_work.asking_only_kept()
                      or time.monotonic() - _measured_at.get(key, -1e9) < MEASURE_EVERY_S):
            return float(kept_one["flop_s"])
        share = 1.0 if idle or not best or cpu_timed else busy_share(n_threads)
        measured = float(shared_work.computed(f"speed: {key}", measure))
        rate = measured / share
        _measured_at[key] = time.monotonic()
        if fresh and best and float(kept_one["flop_s"]) >= rate and not (idle and not kept_one.get("idle", True)):
            return float(kept_one["flop_s"])
        data = _read()
        if not isinstance(data.get(name), dict):
            data[name] = {}
        data[name][key] = {"flop_s": rate, "at": now, "idle": idle, "load": round(load_now(), 2),
                           **({} if idle else {"measured": measured, "share": round(share, 3)})}
        try:
            atomic.write_text(_path(), json.dumps(data, indent=1))
        except OSError:  # a read-only cache: the reading serves this process only
            pass
        return rate


def kept_together(keys: tuple[str, ...], measure) -> tuple[float, ...]:
    """Readings that one measurement gives together (``measure()`` returns one positive value a key), kept as
    one: read where every one is kept and fresh, else all measured again and written with the same state of
    the machine, taken before measuring (the measurement's own work would make a second key's look busy). A
    busy reading is measured again when the machine is idle, at most once every ``MEASURE_EVERY_S``; the newest
    idle reading is kept, as :func:`kept` keeps a ratio."""
    name, now = machine_name(), time.time()
    with _lock:
        mine = _read().get(name)
        readings = [mine.get(k) if isinstance(mine, dict) else None for k in keys]
        valid = all(isinstance(r, dict) and isinstance(r.get("flop_s"), (int, float)) and r["flop_s"] > 0
                    and isinstance(r.get("at"), (int, float)) and now - r["at"] < KEEP_S for r in readings)
        idle = is_idle()
        if valid and (all(r.get("idle", True) for r in readings) or not idle or shared_work.asking_only_kept()
                      or time.monotonic() - _measured_at.get(keys[0], -1e9) < MEASURE_EVERY_S):
            return tuple(float(r["flop_s"]) for r in readings)
        values = tuple(float(v) for v in shared_work.computed(f"speed: {keys[0]}", measure))
        _measured_at[keys[0]] = time.monotonic()
        data = _read()
        if not isinstance(data.get(name), dict):
            data[name] = {}
        for key, value in zip(keys, values):
            data[name][key] = {"flop_s": value, "at": now, "idle": idle, "load": round(load_now(), 2)}
        try:
            atomic.write_text(_path(), json.dumps(data, indent=1))
        except OSError:  # a read-only cache: the readings serve this process only
            pass
        return values


def is_kept(key: str) -> bool:
    """Is a reading of ``key`` kept for this machine, fresh enough that :func:`kept` reads it without measuring?"""
    mine = _read().get(machine_name())
    reading = mine.get(key) if isinstance(mine, dict) else None
    return (isinstance(reading, dict) and isinstance(reading.get("flop_s"), (int, float)) and reading["flop_s"] > 0
            and isinstance(reading.get("at"), (int, float)) and time.time() - reading["at"] < KEEP_S)


@contextmanager
def threads(n: int):
    """PyTorch's CPU threads set to ``n`` for the ``with`` block, the count before put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


# A thread's CPU clock that ticks finely enough to time one product (Windows' ticks every 15.6 ms).
FINE_THREAD_CLOCK = time.get_clock_info("thread_time").resolution <= 1e-6


def _seconds(work, n_threads: int) -> float:
    """How long ``work()`` takes on an idle machine: on one thread, the CPU time it got (the load does not move
    it: PyTorch computes on the calling thread, the backward pass too, and a run at low priority measuring beside
    six busy cores got a tenth of its wall clock's time); on several, or where the thread's clock is coarse, the
    wall clock's time (several threads' CPU time counts their waits on each other too)."""
    wall, cpu = time.perf_counter(), time.thread_time()
    work()
    used = time.thread_time() - cpu
    return used if n_threads == 1 and FINE_THREAD_CLOCK and used > 0 else time.perf_counter() - wall


def _matmul_rate(bf16: bool) -> float:
    dtype = torch.bfloat16 if bf16 else torch.float32
    with threads(1):
        a, b = torch.randn(1024, 1024).to(dtype), torch.randn(1024, 1024).to(dtype)
        a @ b  # warm-up
        best = min(_seconds(lambda: a @ b, 1) for _ in range(7))
    return 2.0 * 1024 ** 3 / best


def matmul_flop_s(bf16: bool = False) -> float:
    """FLOP/s of one thread of this CPU multiplying 1024 × 1024 matrices (fp32 or bf16), on an idle machine."""
    return kept(f"matmul {'bf16' if bf16 else 'fp32'}", lambda: _matmul_rate(bf16), cpu_timed=True)


def layer_flops(hidden: int, intermediate: int, positions: int) -> float:
    """FLOPs of one encoder layer's forward pass, per position: 2·(4·H² + 2·H·I) for the weights and
    4·H·T for attention's scores and weighted sum over T positions."""
    return 2.0 * (4 * hidden * hidden + 2 * hidden * intermediate) + 4.0 * hidden * positions


def _layer_rate(work: str, hidden: int, intermediate: int, n_threads: int, bf16: bool) -> float:
    """Time one encoder layer of width ``hidden`` on 4 × 128 positions: a forward pass without gradients
    ("forward") or a forward and backward pass ("train", 3 × the forward's FLOPs); the best of three after
    a warm-up."""
    from ..model import BertConfig, cpu_kernels
    from ..model.bert import BertLayer

    heads = max(1, hidden // 64)
    config = BertConfig(vocab_size=8, hidden_size=hidden, num_layers=1, num_heads=heads,
                        intermediate_size=intermediate)
    torch.manual_seed(0)
    layer = cpu_kernels.apply(BertLayer(config), "cpu")
    x = torch.randn(LAYER_BATCH, LAYER_POSITIONS, hidden)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    def once() -> None:
        if work == "train":
            layer.train()
            xi = x.clone().requires_grad_(True)
            with autocast:
                out, _ = layer(xi)
            out.float().sum().backward()
        else:
            layer.eval()
            with torch.no_grad(), autocast:
                layer(x)

    with threads(n_threads):
        once()
        best = min(_seconds(once, n_threads) for _ in range(3))
    flops = LAYER_BATCH * LAYER_POSITIONS * layer_flops(hidden, intermediate, LAYER_POSITIONS)
    return flops * (3.0 if work == "train" else 1.0) / best


def layer_flop_s(work: str, hidden: int, n_threads: int, bf16: bool = False, intermediate: int | None = None) -> float:
    """FLOP/s of ``work`` ("train" or "forward") through encoder layers of width ``hidden`` on ``n_threads``
    threads of this CPU, in bf16 autocast or not, on an idle machine: measured on a real layer, kept."""
    intermediate = intermediate or 4 * hidden
    key = f"{work} H={hidden} I={intermediate} threads={n_threads} {'bf16' if bf16 else 'fp32'}"
    return kept(key, lambda: _layer_rate(work, hidden, intermediate, n_threads, bf16), n_threads=n_threads,
                cpu_timed=n_threads == 1)


# A pre-training step outside its encoder layers, timed on this many sequences of LAYER_POSITIONS: two sizes, a
# line through them (the work a step pays once, the work each position adds).
OUTSIDE_FEW, OUTSIDE_MANY = 2, 8


def _outside_layers(config, n_threads: int, bf16: bool, predicted: float) -> tuple[float, float]:
    """(seconds a step, seconds a position) of a pre-training step's work outside its encoder layers: the
    embeddings, the MLM head on ``predicted`` of the positions and the NSP head, forward and backward, the
    gradients' clipping and AdamW's update of their parameters (the word matrix is most of a small model's).
    ``config``'s model (its widths, vocabulary, tied or untied decoder) without an encoder layer, with the CPU
    kernels, timed on OUTSIDE_FEW and OUTSIDE_MANY sequences (the median of three each, after a warm-up). On an
    AMX Xeon this was half of explorer-mini's step on 4 sequences, which the encoder layer's rate alone did not
    say."""
    from dataclasses import asdict

    from torch import nn

    from ..model import IGNORE, BertConfig, BertForPreTraining, cpu_kernels
    from .optim import make_optimizer

    config = BertConfig(**{**asdict(config), "num_layers": 1})
    vocab = config.vocab_size
    seconds = {}
    with threads(n_threads), torch.random.fork_rng(devices=[]):  # the job's random stream goes on untouched
        torch.manual_seed(0)
        model = BertForPreTraining(config)
        model.bert.encoder.layer = nn.ModuleList()  # what is left of a step without its layers
        model = cpu_kernels.apply(model, "cpu").train()
        optimizer = make_optimizer(model, lr=1e-4, weight_decay=0.01)
        for sequences in (OUTSIDE_FEW, OUTSIDE_MANY):
            g = torch.Generator().manual_seed(sequences)
            ids = torch.randint(0, vocab, (sequences, LAYER_POSITIONS), generator=g)
            labels = torch.where(torch.rand(ids.shape, generator=g) < predicted, ids, torch.full_like(ids, IGNORE))
            labels[:, 1] = ids[:, 1]  # at least one predicted position a sequence
            nsp = torch.randint(0, 2, (sequences,), generator=g)

            def once() -> None:
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss = model(ids, labels=labels, next_sentence_label=nsp).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            once()
            times = sorted(_seconds(once, n_threads) for _ in range(3))
            seconds[sequences] = times[1]
    per_position = max(1e-12, (seconds[OUTSIDE_MANY] - seconds[OUTSIDE_FEW])
                       / ((OUTSIDE_MANY - OUTSIDE_FEW) * LAYER_POSITIONS))
    return max(1e-6, seconds[OUTSIDE_FEW] - OUTSIDE_FEW * LAYER_POSITIONS * per_position), per_position


def outside_layers_seconds(config, n_threads: int, bf16: bool = False, predicted: float = 0.15) -> tuple[float, float]:
    """(seconds a step, seconds a position) a pre-training step of ``config`` spends outside its encoder layers on
    ``n_threads`` threads of this CPU, idle (:func:`_outside_layers`); measured once, kept."""
    key = (f"outside layers H={config.hidden_size} I={config.intermediate_size} V={config.vocab_size} "
           f"{'tied' if config.tie_word_embeddings else 'untied'} predicted={predicted:.3g} threads={n_threads} "
           f"{'bf16' if bf16 else 'fp32'}")
    # seconds, not a speed: a busy reading is longer, not a floor; one CPU thread's are its CPU time (_seconds)
    return kept_together((f"{key}: a step", f"{key}: a position"),
                         lambda: _outside_layers(config, n_threads, bf16, predicted))


# ----- the share of the machine a job gets now ---------------------------------------------------------
# A thread at nice 10 beside a busy one at nice 0 gets about a tenth of their core (the kernel's weights,
# 110 against 1024): measured here, a one-thread job at nice 10 took 1.19 s beside one busy process at nice 0
# on 2 cores (idle 1.13 s: a core of its own), 13.3 s beside two (the load average of 1.9 said 1.6 s), and
# 1.92 s beside two busy processes at nice 10 (said 1.71 s). The load average cannot tell them apart.
# (Where Linux schedules each session as a group, a nice value weighs only inside its session: the app puts
# a background job's session at nice 10 too, ``runs.background.session_at_low_priority``, without which the
# same job took 2.1 times its idle time beside two busy processes of another session, not 10.)
CRUMBS = 0.1
FRESH_SAMPLE_S = 0.5  # what a process that counted nothing in the window counts first
BUSY_WINDOW_S = 60.0  # how far back the CPU time counted for "now" reaches (the load average's minute)
_busy_lock = threading.Lock()
_cpu_samples: list[tuple] = []  # (monotonic time, /proc/stat's first line, this process's CPU seconds)


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def load_now() -> float:
    """The machine's load average over the last minute (0 where the system keeps none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0


def load_text() -> str:
    """"load 1.3 on 2 cores": what a transcript says of the machine beside the time a job took (the last
    minute's load average)."""
    return f"load {load_now():.1f} on {os.cpu_count() or 1} cores"


def busy_text() -> str:
    """"1.3 of 2 cores busy": what a transcript says of the machine beside a time said before a job, the
    figure :func:`said` reads (the minute's load average beside it said "load 2.6" next to "the machine is idle
    now" once a burst of other work had ended)."""
    busy, cores = sum(busy_cores()), os.cpu_count() or 1
    # (the minute's load may say more work than there are cores: "5.1 of 2 cores" read as nonsense)
    return f"{busy:.1f} of {cores} cores busy" if busy <= cores else \
        f"every core busy ({busy:.1f} cores' worth of work on {cores})"


def _cpu_times() -> list[int] | None:
    """/proc/stat's CPU times (user, nice, system, idle, iowait, irq, softirq, steal), or None where the
    file is missing or counts other CPUs than this process may use (a container shown the host's)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
        if sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit()) != (os.cpu_count() or 1):
            return None
        return [int(x) for x in lines[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None


def busy_cores(without_own: bool = False) -> tuple[float, float]:
    """(cores busy with work at normal priority, cores busy with low-priority work such as this app's
    background jobs) over about the last minute: the CPU time the system counted, where it counts it
    (Linux); elsewhere the load average, all of it taken as normal priority. A call with nothing counted in
    the last minute (a command's first) counts half a second, and where the minute's load average says less
    than that half second, takes the middle of the two: a burst of other work (a test run's start, an install)
    read the machine as busy for minutes (said 5 min 35 s for a job that took 65 s); where it says more (a lull
    in the half second), takes the minute's. ``without_own``: this process's own CPU time is not counted (a
    preparation that worked for a minute, then waits on the builds it starts, read its own work as the load they
    would share: 10 times a build's idle time said)."""
    first = _cpu_times()
    if first is None:
        return load_now(), 0.0
    now = time.monotonic()
    with _busy_lock:
        _cpu_samples[:] = [x for x in _cpu_samples if now - x[0] <= BUSY_WINDOW_S]
        base = next((x for x in _cpu_samples if now - x[0] >= FRESH_SAMPLE_S / 2), None)
        fresh = base is None
        if fresh:  # nothing counted yet in this window: count half a second now
            base = (now, first, _own_cpu())
            _cpu_samples.append(base)
            time.sleep(FRESH_SAMPLE_S)
            now, first = time.monotonic(), _cpu_times() or first
        own = _own_cpu()
        if now - _cpu_samples[-1][0] >= 1.0:  # (never empty here: a class's renders, one a second is enough)
            _cpu_samples.append((now, first, own))
    d = [b - a for a, b in zip(base[1], first)]
    total = sum(d)
    if total <= 0:
        return load_now(), 0.0
    cores = os.cpu_count() or 1
    user, nice, system, _idle, _iowait, irq, softirq, steal = d
    normal, low = cores * (user + system + irq + softirq + steal) / total, cores * nice / total
    minute = load_now() if fresh else 0.0
    if 0.0 < minute < normal + low:  # half a second against the last minute: neither alone says the next minutes
        scale = (minute + normal + low) / 2 / (normal + low)
        normal, low = normal * scale, low * scale
    elif minute > normal + low:  # a lull in the half second: the minute's runnable processes still compete (a
        # command read 1.0 busy core at load 5 and said "about 20 s" with no range for a run of 35 s); the excess
        # is shared as the half second shared its work (all of it normal where it saw none)
        seen = normal + low
        normal, low = (normal + (minute - seen) * (normal / seen if seen else 1.0),
                       low + (minute - seen) * (low / seen if seen else 0.0))
    if without_own and len(base) > 2 and now > base[0]:
        mine = max(0.0, (own - base[2]) / (now - base[0]))
        if niced_here():
            low = max(0.0, low - mine)
        else:
            normal = max(0.0, normal - mine)
    return normal, low


class OtherWork:
    """The cores other processes kept busy between two calls of :meth:`sample` (this process's own CPU time taken
    out of the system's), for a run to log beside its speed: a speed measured while other work ran is not an idle
    machine's (a run trained at 6,954 tokens/s under load was then taken for the machine's speed, and a run of
    30,000 tokens/s was said to take four times its time). None where the system does not count CPU time."""

    def __init__(self):
        self.last = (time.monotonic(), _cpu_times(), os.times())

    def sample(self) -> float | None:
        now, times, own = time.monotonic(), _cpu_times(), os.times()
        then, before, own_before = self.last
        if times is None or before is None or now - then < 1.0:  # (log steps a tenth of a second apart add up)
            return None
        self.last = (now, times, own)
        d = [b - a for a, b in zip(before, times)]
        if sum(d) <= 0:
            return None
        cores = os.cpu_count() or 1
        busy = cores * (sum(d) - d[3] - d[4]) / sum(d)  # (all but idle and iowait)
        mine = (own.user - own_before.user + own.system - own_before.system) / (now - then)
        return round(max(0.0, busy - mine), 2)


def idle_rate(rate: float, other_cores: float | None, n_threads: int) -> float:
    """A speed measured while ``other_cores`` were busy with other work, as an idle machine's: corrected as a busy
    speed reading is (:func:`kept`, :func:`busy_share`)."""
    if other_cores is None or other_cores < 0.5:
        return rate
    return rate / busy_share(n_threads, other_cores)


def is_idle() -> bool:
    """Does other work leave at least half the cores free now?"""
    normal, low = busy_cores()
    return normal + low < 0.5 * (os.cpu_count() or 1)


def share_now(n_threads: int, load: float | None = None, niced: bool = True, without_own: bool = False) -> float:
    """The part of an idle machine's speed a job of ``n_threads`` threads gets now.

    A job at normal priority shares the cores with the other work at normal priority, cores / (busy +
    threads) a thread, and hardly notices low-priority work. A low-priority job (``niced``: every
    background job of the app) gets the cores that normal work leaves, shared with the other low-priority
    work, and a tenth of a core where none is left. ``load``: the cores busy at normal priority, given
    (else counted, :func:`busy_cores`). At most all of it, at least :data:`CRUMBS`."""
    cores = os.cpu_count() or 1
    normal, low = (max(0.0, load), 0.0) if load is not None else \
        busy_cores(without_own=True) if without_own else busy_cores()
    threads = max(1, int(n_threads))
    if niced:
        share = (cores - normal) / (low + threads)
    else:
        share = cores / (normal + threads)
    return max(CRUMBS, min(1.0, share))


def niced_here() -> bool:
    """Does this process run at low priority (a background job, or a command started under ``nice``)?
    A command's own work is estimated at the priority it runs at."""
    return hasattr(os, "nice") and os.nice(0) > 0


def seconds_now(idle_seconds: float, n_threads: int, load: float | None = None, niced: bool = True,
                without_own: bool = False) -> float:
    """``idle_seconds`` of work, as long as it takes on this machine now (at low priority unless not ``niced``;
    ``without_own``: this process's own work is not counted as the load, :func:`busy_cores`)."""
    share = share_now(n_threads, load, niced, without_own=True) if without_own else share_now(n_threads, load, niced)
    return idle_seconds / share


def said(idle_seconds: float, n_threads: int, *, load: float | None = None, niced: bool = True,
         without_own: bool = False) -> str:
    """"about 1 min 50 s on an idle machine, up to 4 min 10 s at the load now", or "about 1 min 50 s (the
    machine is idle now)" when the load takes less than a tenth: a time said before a job starts, for a job at
    low priority (the app's background jobs) or, not ``niced``, at normal priority (a command's own work).

    A range, not one figure: the load of the last minute seldom lasts a whole job. Said as "about 2 h 33 min
    here now", a 12-minute index build was never started; the other work's bursts ended sooner (a
    pre-training said 2 min 06 s took 55 s, 38 s idle)."""
    from ..runs.report import duration_text

    now = seconds_now(idle_seconds, n_threads, load, niced, without_own=True) if without_own else \
        seconds_now(idle_seconds, n_threads, load, niced)
    if now <= 1.1 * idle_seconds:
        # (load 2.3 on 2 cores said "idle" of a one-thread job that the other work left a core: true of the
        # job's speed, not of the machine). The idle figure itself, within a tenth of now's: a page's headline
        # of 49 min 54 s beside "about 50 min 40 s" below it read as two estimates of one job.
        busy = load if load is not None else sum(busy_cores(without_own=True) if without_own else busy_cores())
        if busy < 0.5:
            return f"about {duration_text(idle_seconds)} (the machine is idle now)"
        return f"about {duration_text(idle_seconds)} (the other work now leaves it the cores it uses)"
    return f"about {duration_text(idle_seconds)} on an idle machine, up to {duration_text(now)} at the load now"
