"""Where training runs: CUDA (several GPUs with torchrun), Apple MPS, or the CPU.

On CUDA we compute in bfloat16 under autocast where the GPU supports it (Ampere and later):
same exponent range as float32, so no loss scaling is needed. Older GPUs get float16 with a
GradScaler, which multiplies the loss so small gradients do not underflow. On the CPU and MPS
everything stays float32 (``nullcontext``).
"""
from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist

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

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def autocast(self):
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def grad_scaler(self):
        return torch.amp.GradScaler("cuda", enabled=self.dtype == torch.float16)

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


def pick_device(requested: str = "auto", amp: bool = True) -> Device:
    """Choose the device; under torchrun (RANK/WORLD_SIZE set) join the process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
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
        dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if amp else None
    else:
        device, dtype = torch.device(requested), None
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)
    return Device(device, rank, world, local, dtype)
