"""Does a training's batch fit in the memory of the device it runs on? Said before anything is allocated.

A batch size is a number anyone can type: ``--batch-size 10000000`` on the smallest model asked the kernel
for 23 GB before it killed the run, which stayed "running" on disk. The memory a training step holds is
mostly the activations kept for the backward pass. Korthikanti et al. (2022, "Reducing activation
recomputation in large transformer models", Section 4.1) count a transformer layer's at
``s·b·h·(34 + 5·a·s/h)`` bytes in 16-bit arithmetic for ``b`` sequences of ``s`` tokens, width ``h`` and
``a`` heads (the second term: the attention scores, which this model keeps on the CPU); fp32 doubles it,
and the masked LM's logits (15 % of the tokens, all of them for a left-to-right model, one score a
WordPiece, and its gradient, in fp32) come on top. A step's peak is more than what it keeps (the
temporaries of each operation, the weights' gradients): measured here (``python bench/step_memory.py``), the
resident memory of one fp32 step of BERT-Mini (64 x 128), -Small (32 x 128) and -Medium (16 x 256) grew
1.51, 1.32 and 1.42 times the count, so the count is taken :data:`PEAK` times. Only what cannot fit is
refused: a batch whose peak passes the memory free now on a CPU, or all of a GPU's, which no run could hold.
"""
from __future__ import annotations

import os

import psutil
import torch

from ..model.config import BertConfig

LAYER_BYTES_PER_TOKEN_AND_UNIT = 34  # Korthikanti et al.: 16-bit activations of one layer, per token and unit
SCORES_BYTES = 5                     # and per head, token and position attended to (a·s/h per unit)
# Their count keeps each dropout mask in one byte (two masks of s·b·h and one of a·s²·b a layer), as PyTorch's
# dropout does; the CPU kernels' dropout (model/cpu_kernels.py) keeps it in the activations' dtype: two bytes in
# 16-bit, counted as 1 + 1; four in fp32, counted as (1 + 1)·wide
CPU_MASK_BYTES, CPU_SCORES_MASK_BYTES = 2, 1
PREDICTED = 0.15                     # the masked LM scores the masked tokens only
PEAK = 1.5                           # a step's peak over what it keeps (measured: 1.32-1.51 on this CPU)


def on_cuda(device: str) -> bool:
    """Whether a training asked to run on ``device`` ("auto", "cpu", "cuda", "cuda:1") runs on a GPU."""
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def activation_bytes(config: BertConfig, batch: int, seq: int, precision: str, predicted: float = PREDICTED,
                     device: str = "cpu") -> float:
    """About the peak bytes of one training step of ``batch`` sequences of ``seq`` WordPieces (module docstring);
    ``predicted``: the share of tokens scored over the vocabulary (0.15 for a masked LM, 1 for a left-to-right
    one, 0 for a task head). "auto" is 16-bit on a GPU; on a CPU it may stay fp32, and is counted as such."""
    wide = 2 if precision == "fp32" or (precision == "auto" and not on_cuda(device)) else 1
    tokens = float(batch) * float(seq)
    cpu = not on_cuda(device)
    per_unit = (LAYER_BYTES_PER_TOKEN_AND_UNIT + CPU_MASK_BYTES * cpu
                + (SCORES_BYTES + CPU_SCORES_MASK_BYTES * cpu) * config.num_heads * seq / config.hidden_size)
    layers = config.num_layers * tokens * config.hidden_size * per_unit * wide
    logits = tokens * predicted * config.vocab_size * 4 * 2
    return PEAK * (layers + logits)


NO_CUDA = "device cuda needs a CUDA GPU and this machine has none: choose auto or cpu"


def room_bytes(device: str) -> tuple[float, str]:
    """The memory a training on ``device`` can count on, and how to say it. On a CPU, the memory free now. On a
    GPU, all its memory: another run that holds it now is waited for (the GPU queue), so only what no run
    could hold is refused here (and asking a GPU what is free would make a CUDA context in the asker, an app
    server's too). The GPU is the one this process trains on: ``cuda:N``'s, or torchrun's LOCAL_RANK."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(NO_CUDA)
    if on_cuda(device):
        index = torch.device(device).index if device.startswith("cuda:") else int(os.environ.get("LOCAL_RANK", "0"))
        return float(torch.cuda.get_device_properties(index).total_memory), "the GPU holds"
    return float(psutil.virtual_memory().available), "is free here"


def check_batch_fits(config: BertConfig, batch: int, seq: int, precision: str, device: str, model: str,
                     predicted: float = PREDICTED, sequences_per_example: int = 1) -> None:
    """Refuse, in one sentence, a batch whose activations alone need more memory than the device has room for.
    ``sequences_per_example``: a multiple-choice example is one sequence per choice."""
    each = max(1, int(sequences_per_example))
    need = activation_bytes(config, batch * each, seq, precision, predicted, device)
    room, where = room_bytes(device)
    if need <= room:
        return
    from ..full_disk import size_text

    what = f"{batch:,} sequences" if each == 1 else f"{batch:,} examples of {each} choices (a sequence each)"
    said = (f"a batch of {what} of {seq:,} WordPieces on {model} would need about {size_text(need)} of "
            f"memory for its activations, and {size_text(room)} {where}")
    per = activation_bytes(config, each, seq, precision, predicted, device)
    if per > room:
        raise ValueError(f"{said}: even one {'sequence' if each == 1 else 'example'} needs about {size_text(per)}; "
                         f"choose a shorter max-seq-length or a smaller model")
    fits = int(room / per * (1 + 1e-9))  # (not 99 where 100 fit to the last rounding)
    raise ValueError(f"{said}: choose a batch of at most about {fits:,} (gradient accumulation adds batches up "
                     f"without the memory)")
