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
refused: a batch whose peak passes the memory free now, which no run could hold.
"""
from __future__ import annotations

import psutil
import torch

from ..model.config import BertConfig

LAYER_BYTES_PER_TOKEN_AND_UNIT = 34  # Korthikanti et al.: 16-bit activations of one layer, per token and unit
SCORES_BYTES = 5                     # and per head, token and position attended to (a·s/h per unit)
PREDICTED = 0.15                     # the masked LM scores the masked tokens only
PEAK = 1.5                           # a step's peak over what it keeps (measured: 1.32-1.51 on this CPU)


def activation_bytes(config: BertConfig, batch: int, seq: int, precision: str, predicted: float = PREDICTED) -> float:
    """About the peak bytes of one training step of ``batch`` sequences of ``seq`` WordPieces (module docstring);
    ``predicted``: the share of tokens scored over the vocabulary (0.15 for a masked LM, 1 for a left-to-right
    one, 0 for a task head)."""
    wide = 2 if precision in ("fp32", "auto") else 1  # "auto" may stay fp32: counted as the larger
    tokens = float(batch) * float(seq)
    per_unit = LAYER_BYTES_PER_TOKEN_AND_UNIT + SCORES_BYTES * config.num_heads * seq / config.hidden_size
    layers = config.num_layers * tokens * config.hidden_size * per_unit * wide
    logits = tokens * predicted * config.vocab_size * 4 * 2
    return PEAK * (layers + logits)


def free_bytes(device: str) -> float:
    """Memory free now where the training runs: the GPU's for cuda, else the machine's."""
    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        index = torch.device(device if device.startswith("cuda") else "cuda").index or 0
        return float(torch.cuda.mem_get_info(index)[0])
    return float(psutil.virtual_memory().available)


def check_batch_fits(config: BertConfig, batch: int, seq: int, precision: str, device: str, model: str,
                     predicted: float = PREDICTED) -> None:
    """Refuse, in one sentence, a batch whose activations alone need more memory than is free now."""
    need, free = activation_bytes(config, batch, seq, precision, predicted), free_bytes(device)
    if need > free:
        from ..full_disk import size_text

        per = activation_bytes(config, 1, seq, precision, predicted)
        fits = max(1, int(free / per * (1 + 1e-9)))  # (not 99 where 100 fit to the last rounding)
        raise ValueError(f"a batch of {batch:,} sequences of {seq:,} WordPieces on {model} would need about "
                         f"{size_text(need)} of memory for its activations, and {size_text(free)} of memory is free here: choose a "
                         f"batch of at most about {fits:,} (gradient accumulation adds batches up without the "
                         f"memory)")
