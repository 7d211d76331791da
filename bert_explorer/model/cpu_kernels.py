"""Faster CPU training for the reference model, applied at load: ``cpu_kernels.apply(model, device)``.

The model in ``bert.py`` and ``heads.py`` is written as the paper reads: ``nn.Dropout``, one
attention path (PyTorch's fused kernel, or the explicit one when the probabilities are asked
for) and PyTorch's cross-entropy. On a CPU, training spends time in places the paper does not
care about, and this module swaps in faster code for them, leaving every result's distribution
as it was (in eval mode the very outputs, and the loss to float rounding):

* **Dropout from random integers.** PyTorch's CPU ``bernoulli_`` draws one floating-point
  number per element; drawing 32 random bits per element and comparing them with round(p·2³²)
  is several times faster for the same drop probability (exact to 1e-10). It draws another
  random stream than ``nn.Dropout``, so a seeded run drops other elements than the plain model
  would: the same distribution, not the same numbers.
* **Explicit attention in training.** PyTorch has no fused CPU attention with dropout (SDPA
  falls back to its own matmul + softmax + dropout there), so training takes the explicit path,
  whose dropout on the probabilities is the faster one above.
* **Cross-entropy a few rows at a time.** The masked-LM loss over [N, V] logits, computed in
  float32 32 rows at a time: under bf16 autocast it saves an fp32 copy of the whole matrix and
  the passes of a full log-softmax over it.

Each stays only while it measures faster. On a 2-core CPU with AVX512-BF16 (mini, 32 x 128,
``bench/train_step.py --cpu-kernels``) the three made a pre-training step 1.36x faster in bf16
(what ``--precision auto`` picks there) and 1.11x in fp32; leaving one out of the three cost
dropout 7 % / 5 % (bf16 / fp32), explicit attention 19 % / 7 %, cross-entropy 15 % / 5 %. On a
GPU nothing is swapped (its fused kernels already do this work), and inside ``torch.compile``
each kernel falls back to PyTorch's own op, which the compiler fuses itself.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .bert import BertSelfAttention
from .heads import BertForPreTraining

CE_ROWS = 32  # rows of logits at once in masked_lm_loss: 32 x 30,522 fp32 stays in cache


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout (Srivastava et al. 2014): zero each element with probability p and scale the rest
    by 1/(1-p), so the expected value is unchanged; identity outside training.

    The keep/drop draws are 32 random bits per element, compared with round(p·2³²), taken from
    the same seeded generator as ``torch.bernoulli``. Off the CPU, and inside torch.compile
    (which draws its own random numbers in fused code), PyTorch's dropout is used."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0 or torch.compiler.is_compiling():
        return F.dropout(x, p, training)
    n = x.numel()
    # One 64-bit draw gives two 32-bit lanes; the full signed range keeps every bit uniform.
    bits = torch.empty((n + 1) // 2, dtype=torch.int64).random_(-2**63, None).view(torch.int32)[:n]
    keep = bits.view(x.shape) >= (-2**31 + round(p * 2**32))
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))


class CPUDropout(nn.Dropout):
    """``nn.Dropout`` drawing its mask with :func:`dropout` (the same p, the same expectation)."""

    def forward(self, x):
        return dropout(x, self.p, self.training)


class CPUSelfAttention(BertSelfAttention):
    """Self-attention that trains on the explicit path, so that its dropout on the probabilities
    is :class:`CPUDropout` rather than the fused kernel's own draws."""

    def forward(self, hidden_states, mask=None, head_mask=None, output_attentions=False):
        explicit = (self.training and self.dropout.p > 0 and hidden_states.device.type == "cpu"
                    and not torch.compiler.is_compiling())
        context, probs = super().forward(hidden_states, mask, head_mask, output_attentions or explicit)
        return context, probs if output_attentions else None


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of [N, V] logits of any float dtype, computed in float32 CE_ROWS rows at
    a time: the same loss and gradient as ``F.cross_entropy(logits.float(), labels)``, without an
    fp32 copy of the whole [N, V] matrix and its log-softmax in memory."""

    @staticmethod
    def forward(ctx, logits, labels):
        n = logits.shape[0]
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)  # log Σ_v exp(z_v), per row
        for s in range(0, n, CE_ROWS):
            lse[s:s + CE_ROWS] = torch.logsumexp(logits[s:s + CE_ROWS].float(), dim=1)
        ctx.save_for_backward(logits, labels, lse)
        return (lse - logits.gather(1, labels[:, None]).squeeze(1).float()).mean()

    @staticmethod
    def backward(ctx, grad):
        logits, labels, lse = ctx.saved_tensors
        n = logits.shape[0]
        out = torch.empty_like(logits)
        scale = grad.float() / n
        for s in range(0, n, CE_ROWS):  # d loss / d z = (softmax(z) − one_hot(label)) / N
            p = (logits[s:s + CE_ROWS].float() - lse[s:s + CE_ROWS, None]).exp_()
            p[torch.arange(p.shape[0], device=p.device), labels[s:s + CE_ROWS]] -= 1
            out[s:s + CE_ROWS] = p.mul_(scale)
        return out, None


def masked_lm_loss(masked_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``BertForPreTraining.masked_lm_loss`` a few rows at a time; PyTorch's own off the CPU,
    inside torch.compile, or with no labelled rows."""
    if masked_logits.device.type != "cpu" or not len(labels) or torch.compiler.is_compiling():
        return F.cross_entropy(masked_logits.float(), labels)
    return _ChunkedCrossEntropy.apply(masked_logits, labels)


def apply(model: nn.Module, device: torch.device | str) -> nn.Module:
    """Swap the CPU kernels into ``model`` when it trains on the CPU (``device``); elsewhere leave it
    as it is. Returns the model.

    Modules change class in place (each new class is a subclass that adds no parameters), so the
    parameters, their names in a checkpoint, and an optimiser made before all stay as they were;
    the pre-training loss is replaced on the instance only, because the model's own class name
    is the architecture a checkpoint records."""
    if torch.device(device).type != "cpu":
        return model
    for module in model.modules():
        if type(module) is nn.Dropout:
            module.__class__ = CPUDropout
        elif type(module) is BertSelfAttention:
            module.__class__ = CPUSelfAttention
        elif isinstance(module, BertForPreTraining):
            module.masked_lm_loss = masked_lm_loss
    return model
