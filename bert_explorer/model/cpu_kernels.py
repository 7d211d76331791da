"""Faster CPU training for the reference model, applied at load: ``cpu_kernels.apply(model, device)``.

The model in ``bert.py`` and ``heads.py`` is written as the paper reads: ``nn.Dropout``, one
attention path (PyTorch's fused kernel, or the explicit one when the probabilities are asked
for) and PyTorch's cross-entropy. On a CPU, training spends time in places the paper does not
care about, and this module swaps in faster code for them, leaving every result's distribution
as it was (in eval mode the very outputs, and the loss to float rounding):

* **Dropout from random integers.** PyTorch's CPU ``bernoulli_`` draws one floating-point
  number per element; drawing 32 random bits per element and comparing them with round(p·2³¹)
  is several times faster for the same drop probability (exact to 1e-9), and the mask of 0 and 1
  is built from the draws in integer arithmetic and multiplied in (a comparison and a select ran
  six times slower per element than a product). It draws another random stream than
  ``nn.Dropout``, so a seeded run drops other elements than the plain model would: the same
  distribution, not the same numbers. Its mask is kept for the backward pass in the activations'
  dtype (``train/memory.py`` counts it so).
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

**Levers** (``LEVERS``) are further swaps that help on some CPUs and not others, so each is opt-in:
``apply(model, device, levers=...)`` takes the ones ``train.levers`` measured faster on this CPU.

* ``bf16 activations``: training under bf16 autocast, LayerNorm and the attention's softmax hand on bf16
  (each still computes in float32 inside its kernel) instead of float32 that the next matrix
  product casts back; the residual stream is then bf16, as in pure-bf16 training.
* ``fused loss gradient``: the masked-LM loss computes its gradient in the same pass as the loss
  (one exponential over the [N, V] logits instead of two), kept in the logits' dtype until the
  backward pass asks for it.
* ``16-bit dropout draws``: 16 random bits per element instead of 32, half the generator's work;
  the drop probability is then p rounded to a multiple of 2⁻¹⁵ (0.1 → 0.1000061), and the kept
  elements are scaled by 1/(1 − that probability), so the expected value stays exact.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from .bert import BertSelfAttention
from .heads import BertForPreTraining

CE_ROWS = 32  # rows of logits at once in masked_lm_loss: 32 x 30,522 fp32 stays in cache


_LANES = {32: torch.int32, 16: torch.int16}
# the integers as wide as each float dtype: a mask of 0 and 1 is built in their bits
_BITS_OF = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}


def drawn_probability(p: float, bits: int = 32) -> float:
    """The drop probability that ``bits`` random bits per element give for ``p``: p rounded to a
    multiple of 2^-(bits-1) (the comparison reads the top bits-1 of them: :func:`_keep_mask`)."""
    return round(p * 2**(bits - 1)) / 2**(bits - 1)


def _keep_mask(n: int, q: float, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """n elements of ``dtype``, 1 where kept and 0 where dropped, each dropped with probability ``q`` (a multiple of
    2^-(bits-1)), from ``bits`` random bits each.

    Built in integer arithmetic on the draws themselves, which vectorises: comparing the draws (a boolean) and
    selecting with it (``torch.where``) ran about six times slower per element than a product on the AMX Xeon.
    A draw d (uniform over the signed ``bits``-bit integers) is kept where d >= t, t = -2^(bits-1) + q·2^bits, an
    even number; then (d >> 1) - t/2 cannot overflow and its sign bit says dropped: shifted down it is -1
    (dropped) or 0 (kept), and its complement masked with the bits of 1.0 is the float 1.0 or 0.0."""
    per_draw = 64 // bits
    # One 64-bit draw gives 64/bits lanes; the full signed range keeps every bit uniform.
    lanes = torch.empty((n + per_draw - 1) // per_draw, dtype=torch.int64).random_(-2**63, None)
    drawn = lanes.view(_LANES[bits])[:n]
    half = (-2**(bits - 1) + round(q * 2**bits)) // 2
    dropped = drawn.bitwise_right_shift_(1).sub_(half).bitwise_right_shift_(bits - 1)  # -1 dropped, 0 kept
    ints = _BITS_OF[dtype]
    one = torch.tensor(1.0, dtype=dtype).view(ints).item()
    return (dropped if dropped.dtype == ints else dropped.to(ints)).bitwise_not_().bitwise_and_(one).view(dtype)


class _ScaledByMask(torch.autograd.Function):
    """x · mask · scale, rounded once (``addcmul`` computes in float32 for bf16), and the gradient the same way."""

    @staticmethod
    def forward(ctx, x, mask, scale):
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return torch.addcmul(x.new_zeros(()), x, mask, value=scale)

    @staticmethod
    def backward(ctx, grad):
        mask, = ctx.saved_tensors
        return torch.addcmul(grad.new_zeros(()), grad, mask, value=ctx.scale), None, None


def dropout(x: torch.Tensor, p: float, training: bool, bits: int = 32) -> torch.Tensor:
    """Dropout (Srivastava et al. 2014): zero each element with probability p and scale the rest
    by 1/(1-p), so the expected value is unchanged; identity outside training.

    The keep/drop draws are ``bits`` (32 or 16) random bits per element, compared with
    round(p·2^(bits-1)), taken from the same seeded generator as ``torch.bernoulli``; the scale uses
    that rounded probability, so the expectation is exact. Off the CPU, and inside torch.compile
    (which draws its own random numbers in fused code), PyTorch's dropout is used."""
    if not training or p == 0.0:
        return x
    if (x.device.type != "cpu" or not 0.0 < p < 1.0 or torch.compiler.is_compiling()
            or x.dtype not in _BITS_OF):
        return F.dropout(x, p, training)
    q = drawn_probability(p, bits)
    if not 0.0 < q < 1.0:  # p too close to 0 or 1 for this many bits
        q, bits = drawn_probability(p), 32
    mask = _keep_mask(x.numel(), q, bits, x.dtype).view(x.shape)
    # The scale multiplies in float32 arithmetic (a bf16 copy of 1/(1-q) would bias every kept element).
    return _ScaledByMask.apply(x, mask, 1.0 / (1.0 - q))


class CPUDropout(nn.Dropout):
    """``nn.Dropout`` drawing its mask with :func:`dropout` (the same p, the same expectation);
    ``bits = 16`` is the ``16-bit dropout draws`` lever."""

    bits = 32

    def forward(self, x):
        return dropout(x, self.p, self.training, self.bits)


def _bf16_autocast(x: torch.Tensor) -> bool:
    """Does ``x`` run under the CPU's bf16 autocast now (outside torch.compile)?"""
    return (x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and torch.get_autocast_dtype("cpu") == torch.bfloat16 and not torch.compiler.is_compiling())


class BF16LayerNorm(nn.LayerNorm):
    """LayerNorm that, training under the CPU's bf16 autocast, takes and gives bf16 (its kernel
    normalises in float32 with the float32 gain and bias); elsewhere ``nn.LayerNorm``."""

    def forward(self, x):
        if not (self.training and _bf16_autocast(x)):
            return super().forward(x)
        with torch.autocast("cpu", enabled=False):
            return F.layer_norm(x.to(torch.bfloat16), self.normalized_shape, self.weight, self.bias, self.eps)


class CPUSelfAttention(BertSelfAttention):
    """Self-attention that trains on the explicit path, so that its dropout on the probabilities
    is :class:`CPUDropout` rather than the fused kernel's own draws."""

    bf16_probabilities = False  # the ``bf16 activations`` lever

    def forward(self, hidden_states, mask=None, head_mask=None, output_attentions=False):
        explicit = (self.training and self.dropout.p > 0 and hidden_states.device.type == "cpu"
                    and not torch.compiler.is_compiling())
        if explicit and head_mask is None and not output_attentions:
            bf16 = self.bf16_probabilities and _bf16_autocast(hidden_states)
            return self._training_path(hidden_states, mask, bf16), None
        context, probs = super().forward(hidden_states, mask, head_mask, output_attentions or explicit)
        return context, probs if output_attentions else None

    def _training_path(self, hidden_states, mask, bf16: bool):
        """The explicit path as training takes it. 1/√d scales the query projection (its [H, H] weights and
        its bias) instead of the [B, A, T, T] scores: one elementwise pass over the scores fewer, forward and
        backward; where 1/√d is a power of two (d = 16, 64, 256) the scores are the very same numbers. With
        ``bf16`` (the ``bf16 activations`` lever) the probabilities are bf16: softmax's kernel sums in float32
        and writes bf16, which the dropout and the product with V read without a cast."""
        bias = None if self.query.bias is None else self.query.bias * self.scale
        q = self._split_heads(F.linear(hidden_states, self.query.weight * self.scale, bias))
        k = self._split_heads(self.key(hidden_states))
        v = self._split_heads(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2))  # bf16 under autocast
        with torch.autocast("cpu", enabled=False) if bf16 else contextlib.nullcontext():
            if mask is not None:
                scores = scores + (mask.to(scores.dtype) if bf16 else mask)
            probs = scores.softmax(dim=-1)
            context = torch.matmul(self.dropout(probs), v.to(probs.dtype) if bf16 else v)
        B, A, T, d = context.shape
        return context.transpose(1, 2).reshape(B, T, A * d)


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


class _FusedCrossEntropy(torch.autograd.Function):
    """The same mean cross-entropy as :class:`_ChunkedCrossEntropy`, its gradient (softmax − one-hot) / N
    computed in the forward pass from the same exponentials and kept in the logits' dtype (the
    logits themselves are then not kept). The gradient is handed to the backward pass once."""

    @staticmethod
    def forward(ctx, logits, labels):
        n, v = logits.shape
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        grad = torch.empty_like(logits) if ctx.needs_input_grad[0] else None
        # float32 work rows: the gradient's own rows where it is float32, else a buffer of CE_ROWS rows
        in_place = grad is not None and grad.dtype == torch.float32
        buf = None if in_place else torch.empty(min(n, CE_ROWS), v, dtype=torch.float32, device=logits.device)
        for s in range(0, n, CE_ROWS):
            e = (grad[s:s + CE_ROWS] if in_place else buf[:min(CE_ROWS, n - s)]).copy_(logits[s:s + CE_ROWS])
            top = e.amax(1, keepdim=True)
            total = e.sub_(top).exp_().sum(1, keepdim=True)  # e = exp(z − max z)
            lse[s:s + CE_ROWS] = (top + total.log()).squeeze(1)
            if grad is not None:
                e.mul_(total.reciprocal_().mul_(1.0 / n))  # softmax / N
                e[torch.arange(e.shape[0], device=e.device), labels[s:s + CE_ROWS]] -= 1.0 / n
                if not in_place:
                    grad[s:s + CE_ROWS] = e
        ctx.grad = grad
        return (lse - logits.gather(1, labels[:, None]).squeeze(1).float()).mean()

    @staticmethod
    def backward(ctx, g):
        grad, ctx.grad = ctx.grad, None
        if grad is None:
            raise RuntimeError("the fused masked-LM loss gives its gradient once: backward ran through it twice")
        return (grad if float(g) == 1.0 else grad.mul_(float(g))), None


def fused_masked_lm_loss(masked_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """:func:`masked_lm_loss` with its gradient computed in the forward pass (the ``fused loss gradient``
    lever); PyTorch's own where that one is."""
    if masked_logits.device.type != "cpu" or not len(labels) or torch.compiler.is_compiling():
        return F.cross_entropy(masked_logits.float(), labels)
    return _FusedCrossEntropy.apply(masked_logits, labels)


def masked_lm_loss(masked_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``BertForPreTraining.masked_lm_loss`` a few rows at a time; PyTorch's own off the CPU,
    inside torch.compile, or with no labelled rows."""
    if masked_logits.device.type != "cpu" or not len(labels) or torch.compiler.is_compiling():
        return F.cross_entropy(masked_logits.float(), labels)
    return _ChunkedCrossEntropy.apply(masked_logits, labels)


BF16_ACTIVATIONS, FUSED_LOSS, DROPOUT_16 = "bf16 activations", "fused loss gradient", "16-bit dropout draws"
LEVERS = (BF16_ACTIVATIONS, FUSED_LOSS, DROPOUT_16)


def apply(model: nn.Module, device: torch.device | str, levers=()) -> nn.Module:
    """Swap the CPU kernels into ``model`` when it trains on the CPU (``device``), and the ``levers``
    named (of ``LEVERS``); elsewhere leave it as it is. Returns the model.

    Modules change class in place (each new class is a subclass that adds no parameters), so the
    parameters, their names in a checkpoint, and an optimiser made before all stay as they were;
    the pre-training loss is replaced on the instance only, because the model's own class name
    is the architecture a checkpoint records."""
    unknown = set(levers) - set(LEVERS)
    if unknown:
        raise ValueError(f"no CPU lever named {', '.join(sorted(unknown))}; the levers are {', '.join(LEVERS)}")
    if torch.device(device).type != "cpu":
        return model
    for module in model.modules():
        if type(module) is nn.Dropout:
            module.__class__ = CPUDropout
        elif type(module) is BertSelfAttention:
            module.__class__ = CPUSelfAttention
        elif isinstance(module, BertForPreTraining):
            module.masked_lm_loss = fused_masked_lm_loss if FUSED_LOSS in levers else masked_lm_loss
        if type(module) in (nn.LayerNorm, BF16LayerNorm):
            module.__class__ = BF16LayerNorm if BF16_ACTIVATIONS in levers else nn.LayerNorm
        if isinstance(module, CPUSelfAttention):
            module.bf16_probabilities = BF16_ACTIVATIONS in levers
        if isinstance(module, CPUDropout):
            module.bits = 16 if DROPOUT_16 in levers else 32
    return model
