"""Where training runs: CUDA (several GPUs with torchrun), Apple MPS, or the CPU.

Training precision is one switch, ``precision``: ``fp32``, ``bf16``, ``fp16`` or ``auto``.

* On CUDA, ``auto`` computes in bfloat16 under autocast where the GPU supports it (Ampere and
  later): same exponent range as float32, so no loss scaling is needed. Older GPUs get float16
  with a GradScaler, which multiplies the loss so small gradients do not underflow.
* On the CPU, ``auto`` uses bfloat16 autocast only where the CPU multiplies bf16 natively
  (AVX512-BF16 or AMX): there it is 2-4x faster. A CPU without those instructions emulates
  bf16 hundreds of times slower than fp32, so there ``auto`` stays float32. The decision reads
  the CPU's flags, confirms them with a tiny timed matmul, and is cached for the process.
* MPS always trains in float32 (a bf16/fp16 request there gives fp32, and the log says so). Analysis, probes and feature extraction never use this: they run fp32, so
  their numbers match transformers exactly.
"""
from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.distributed as dist

from . import speed

# Dense bf16/fp16 tensor-core peaks (FLOP/s) for the model-FLOPs-utilisation figure.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12, "V100": 125e12,
              "T4": 65e12, "4090": 165e12, "3090": 71e12}


@dataclass
class Device:
    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    dtype: torch.dtype | None = None  # autocast dtype, None = float32
    # Started by torchrun: a process group is joined and training goes through DDP, even with
    # one process (on a one-GPU machine that is how the NCCL path gets exercised at all).
    distributed: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def backend(self) -> str | None:
        """The process group's backend (nccl on CUDA, gloo on the CPU), None outside torchrun."""
        return dist.get_backend() if self.distributed else None

    def autocast(self):
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def grad_scaler(self):
        # Only float16 needs loss scaling (its smallest normal number is 6e-5, so small gradients
        # underflow to zero), and float16 training happens only on CUDA.
        return torch.amp.GradScaler("cuda", enabled=self.dtype == torch.float16)

    @property
    def precision(self) -> str:
        return precision_name(self.dtype)

    @property
    def name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return self.device.type

    def peak_flops(self) -> float | None:
        if self.device.type != "cuda":
            return None
        name = self.name
        return next((v for k, v in PEAK_FLOPS.items() if k in name), None)


PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")  # what a run may be asked to train on


def device_refusal(name: str) -> str | None:
    """Why ``name`` is no device a run can train on, in one sentence, or None ("tpu" and "CPU" reached
    torch's own error, a traceback)."""
    import re

    if isinstance(name, str) and (name in ("auto", "cpu", "cuda", "mps") or re.fullmatch(r"cuda:\d{1,3}", name)):
        return None
    return f"device must be one of {', '.join(DEVICES)} (N a GPU's number), not {str(name)[:40]!r}"


def precision_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def _cpu_flags() -> set[str] | None:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8", errors="replace"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None  # not Linux: no flags to read, the timing alone decides


BF16_FAST = 1 / 0.8  # bf16 is worth autocast where a product runs at least this many times faster


@lru_cache(maxsize=None)
def cpu_bf16_is_fast() -> bool:
    """Does this CPU multiply bf16 matrices faster than fp32? Flags first (no bf16 instructions
    means slow emulation: not worth timing), then one thread's products both ways (``speed.matmul_flop_s``:
    timed on the CPU time the thread got, so the load moves neither, and kept for the machine). Timed on the
    wall clock in each process, a page that estimated a run in bf16 launched one that timed its products at
    low priority under load and trained in fp32, 26 times slower than said."""
    if os.environ.get("BERT_EXPLORER_CPU_BF16") in ("0", "1"):  # an explicit answer wins
        return os.environ["BERT_EXPLORER_CPU_BF16"] == "1"
    flags = _cpu_flags()
    if flags is not None and not flags & {"avx512_bf16", "amx_bf16"}:
        return False
    return speed.matmul_flop_s(bf16=True) >= BF16_FAST * speed.matmul_flop_s(bf16=False)


def autocast_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """The autocast dtype for training on ``device`` (None = plain float32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "fp32" or device.type == "mps":
        return None
    if device.type == "cuda":
        if precision == "auto":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise ValueError("this GPU has no bf16; use fp16 (with loss scaling) or auto")
        return torch.bfloat16 if precision == "bf16" else torch.float16
    if precision == "fp16":
        raise ValueError("fp16 training needs a CUDA GPU; on the CPU use bf16 or fp32")
    if precision == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if cpu_bf16_is_fast() else None


def precision_from(config: dict) -> str:
    """Older configs said ``amp: true/false``; ``precision`` replaces it (false = fp32)."""
    if "precision" in config:
        return config["precision"]
    return "auto" if config.get("amp", True) else "fp32"


def pick_device(requested: str = "auto", precision: str = "auto") -> Device:
    """Choose the device and training precision; under torchrun (which sets RANK, WORLD_SIZE and
    TORCHELASTIC_RUN_ID) join the process group, also when it runs one process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launched = world > 1 or "TORCHELASTIC_RUN_ID" in os.environ
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else (
            "mps" if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available() else "cpu")
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA was requested but no CUDA GPU is visible")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device(requested)
    dtype = autocast_dtype(device, precision)
    if launched and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)
    return Device(device, rank, world, local, dtype, distributed=launched)


def app_threads() -> int:
    """The threads the app's server computes with (``app.state`` sets them on its first model): half the
    cores, which leaves the rest to background runs (all cores but one), or the user's OMP_NUM_THREADS."""
    if "OMP_NUM_THREADS" in os.environ:
        return torch.get_num_threads()
    return max(1, (os.cpu_count() or 2) // 2)


@contextmanager
def threads_for_free_cores(environ: dict | None = None):
    """Inside the block, PyTorch's CPU threads are as many as the machine's cores that are free now:
    its cores less its load average (at least one), unless the user set OMP_NUM_THREADS. Threads on
    busy cores spin and wait on each other: on a busy 2-core machine, 100 tiny pre-training steps took
    198.7 s with two threads and 19.5 s with one. Background runs get cores - 1 (``runs.background``);
    this is the foreground's choice (the CLI's training commands). The count before is put back after."""
    environ = os.environ if environ is None else environ
    before = torch.get_num_threads()
    if "OMP_NUM_THREADS" not in environ:
        cores = os.cpu_count() or 1
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # no load average on this system: every core
            load = 0.0
        torch.set_num_threads(max(1, min(cores, round(cores - load))))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def threads_text() -> str:
    """"2 CPU threads of 2 cores": what a run's log says it trains with."""
    n, cores = torch.get_num_threads(), os.cpu_count() or 1
    return f"{n} CPU thread{'s' if n != 1 else ''} of {cores} core{'s' if cores != 1 else ''}"


def check_ranks_in_sync(run, dev: Device, model) -> None:
    """Every rank holds its own copy of the weights; DDP keeps them identical by averaging
    gradients. Check it: gather a checksum of each rank's parameters."""
    checksum = torch.tensor([sum(p.double().sum().item() for p in model.parameters())], device=dev.device)
    sums = [torch.zeros_like(checksum) for _ in range(dev.world_size)]
    dist.all_gather(sums, checksum)
    if dev.is_main:
        sums = [float(x.item()) for x in sums]
        run.write_status(rank_checksums=sums, ranks_in_sync=max(sums) - min(sums) <= 1e-6 * abs(sums[0]))
