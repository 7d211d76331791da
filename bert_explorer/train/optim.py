"""The optimiser and schedule of the paper (Appendix A.2).

Adam with lr 1e-4, β1 = 0.9, β2 = 0.999, L2 weight decay 0.01, learning-rate warm-up over the
first steps, then linear decay to zero. The decay is decoupled (AdamW, as in the released
code's AdamWeightDecayOptimizer) and, as there, not applied to LayerNorm parameters or biases:
shrinking a LayerNorm gain or a bias towards zero is not a useful regulariser. One difference from
that optimiser: PyTorch's AdamW corrects the moments' bias (the released code does not), as
transformers' Trainer does; the first update is then about lr per weight, where the released code's
is (1 − β1) / √(1 − β2) ≈ 3.2 times that, early in the warm-up where the rate is small anyway.
"""
from __future__ import annotations

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay, seen = [], [], set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:  # tied weights appear under two names
            continue
        seen.add(id(p))
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, lr: float = 1e-4, weight_decay: float = 0.01,
                   betas=(0.9, 0.999), eps: float = 1e-6, extra_groups: list[dict] = ()) -> torch.optim.AdamW:
    """AdamW over ``model`` (decay on matrices only), plus ``extra_groups`` with their own
    settings (e.g. a new head with a larger learning rate). Fused on a GPU and on the CPU (:func:`use_fused`)."""
    groups = param_groups(model, weight_decay) + list(extra_groups)
    # eps 1e-6 as in the original BERT optimiser (PyTorch's default is 1e-8).
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=use_fused(groups) or None)


def use_fused(groups: list[dict]) -> bool:
    """Fused AdamW (one kernel updates every parameter, instead of several passes per tensor)
    when every parameter is a floating-point tensor on one kind of device, a CUDA GPU or the
    CPU: the same update, fewer passes over memory. For a small BERT the update touches every
    parameter and its two moments each step, and the word embeddings alone are most of them."""
    params = [p for g in groups for p in g["params"]]
    return (bool(params) and all(p.is_floating_point() for p in params)
            and len({p.device.type for p in params}) == 1 and params[0].device.type in ("cuda", "cpu"))


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a saved optimiser state but keep this optimiser's own choice of implementation.

    ``load_state_dict`` also copies the saved ``fused``/``foreach`` flags: a run saved on a GPU
    and resumed on the CPU would otherwise ask for fused AdamW on CPU tensors (which older
    PyTorch refuses), and a CPU run resumed on a GPU would lose the fused kernel."""
    own = [{k: g.get(k) for k in ("fused", "foreach")} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for g, flags in zip(optimizer.param_groups, own):
        g.update(flags)


def linear_warmup_decay(optimizer, warmup_steps: int, total_steps: int):
    """lr × (step + 1)/warmup during warm-up (the first step already trains, at lr/warmup; the
    last warm-up step reaches lr), then lr × (total - step)/(total - warmup), floored at 0."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
