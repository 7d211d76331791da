"""A TopK sparse autoencoder (Gao et al. 2024, "Scaling and evaluating sparse autoencoders").

An SAE rewrites a hidden vector x [H] as a sparse sum of learned directions, its *features*:

    z = TopK(W_enc (x - b_pre) + b_enc)      # [F]: all but the k largest set to 0, then ReLU
    x^ = W_dec z + b_pre                      # [H]: each active feature adds its column of W_dec

with F = 8·H features by default, of which k are active on any token. Each column of W_dec has unit
length, so a feature's activation z_f is how far along its direction the token goes.

**Why TopK and not ReLU with an L1 penalty** (Bricken et al. 2023, "Towards Monosemanticity").
An L1 penalty buys sparsity by shrinking every activation towards zero, so the reconstruction is
biased low, and how sparse the result is depends on a coefficient that must be tuned per model and
layer. TopK sets the sparsity itself (L0 = k exactly, no tuning), does not shrink the activations
it keeps, and in Gao et al.'s measurements reaches a better reconstruction at the same sparsity.
Its one weakness, features that stop firing ("dead"), is met as they do: the encoder starts as the
transpose of the decoder, and an auxiliary loss (AuxK) asks the dead features to explain what the
live ones leave over.

Inputs are centred on their mean and scaled to unit mean squared norm before the SAE sees them
(stored with it), so the training loss is directly 1 - (fraction of variance explained), and the
same learning rate suits any model's hidden size and scale.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class SaeConfig:
    width_factor: int = 8        # features F = width_factor · H (3,072 for H = 384)
    k: int = 32                  # active features per token: the L0 (Gao et al. use 32 at this scale)
    epochs: int = 1              # passes over the activations (one of 1 M tokens fits the 10-minute budget)
    batch_size: int = 1024       # tokens per step
    lr: float = 5e-4             # Adam; inputs are normalised, so this holds for any H
    aux_k: int = 128             # dead features asked to explain the residual (Gao et al. use up to 512)
    aux_coef: float = 1 / 32     # weight of the AuxK loss (Gao et al.)
    dead_tokens: int = 200_000   # a feature silent for this many training tokens counts as dead for AuxK
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class TopKSAE(nn.Module):
    """The autoencoder, working on raw hidden vectors (the normalisation is inside)."""

    def __init__(self, hidden_size: int, n_features: int, k: int):
        super().__init__()
        self.k = int(k)
        self.W_enc = nn.Parameter(torch.empty(n_features, hidden_size))   # [F, H]
        self.b_enc = nn.Parameter(torch.zeros(n_features))
        self.W_dec = nn.Parameter(torch.empty(hidden_size, n_features))   # [H, F], unit columns
        self.b_pre = nn.Parameter(torch.zeros(hidden_size))
        self.register_buffer("mean", torch.zeros(hidden_size))            # input centring
        self.register_buffer("scale", torch.ones(()))                     # input scaling
        nn.init.normal_(self.W_dec)
        self.normalise_decoder()
        with torch.no_grad():
            self.W_enc.copy_(self.W_dec.T)  # Gao et al.: starting tied keeps features alive early on

    @property
    def n_features(self) -> int:
        return self.W_enc.shape[0]

    @torch.no_grad()
    def normalise_decoder(self) -> None:
        self.W_dec.div_(self.W_dec.norm(dim=0, keepdim=True).clamp_min(1e-8))

    def normalised(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.mean) / self.scale

    def pre_activations(self, xn: torch.Tensor) -> torch.Tensor:
        """W_enc (xn - b_pre) + b_enc [N, F], in bf16 where the CPU multiplies that fast (2.5x here):
        this product over all F features is the SAE's one large cost, in training and in use."""
        with torch.autocast("cpu", torch.bfloat16, enabled=xn.device.type == "cpu" and _bf16_fast()):
            return ((xn - self.b_pre) @ self.W_enc.T + self.b_enc).float()

    def encode_sparse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values [N, k], feature indices [N, k]) of each row's active features, in raw units of x."""
        vals, idx = self.pre_activations(self.normalised(x)).topk(self.k, dim=-1)
        return F.relu(vals) * self.scale, idx

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Dense activations [N, F] (zeros but for at most k per row), in raw units of x."""
        vals, idx = self.encode_sparse(x)
        return torch.zeros(x.shape[0], self.n_features, dtype=vals.dtype, device=vals.device).scatter_(-1, idx, vals)

    def decode_sparse(self, vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """The reconstruction [N, H] from sparse activations in raw units."""
        # embedding_bag sums the k chosen columns: k·H work per row instead of F·H for a dense product
        out = F.embedding_bag(idx, self.W_dec.T, per_sample_weights=vals.float(), mode="sum")
        return out + self.b_pre * self.scale + self.mean

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z.float() @ self.W_dec.T + self.b_pre * self.scale + self.mean

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode_sparse(*self.encode_sparse(x))

    def direction(self, feature: int) -> torch.Tensor:
        """The feature's direction in the hidden space [H]: unit length, so activation a adds a · it."""
        return self.W_dec[:, feature].detach()

    def state(self) -> dict:
        return {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}

    @classmethod
    def from_state(cls, state: dict, k: int) -> "TopKSAE":
        H, F_ = state["W_dec"].shape
        sae = cls(H, F_, k)
        sae.load_state_dict(state)
        return sae.eval()


class TrainingStopped(RuntimeError):
    """``should_stop`` said so between two steps (the page's Cancel)."""


Progress = Callable[[float, str], None]


def train_sae(acts: np.ndarray | torch.Tensor, cfg: SaeConfig | None = None, *, progress: Progress | None = None,
              should_stop: Callable[[], bool] | None = None) -> tuple[TopKSAE, dict]:
    """Train a TopK SAE on ``acts`` [N, H] (any float dtype; fp16 is read a batch at a time) and
    return (sae, history) where history holds the loss curve and the seconds taken."""
    cfg = cfg or SaeConfig()
    data = torch.as_tensor(acts)
    N, H = data.shape
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    sae = TopKSAE(H, cfg.width_factor * H, min(cfg.k, cfg.width_factor * H))
    with torch.no_grad():  # centring and scale from a sample: 64 k rows settle both to three digits
        sample = data[torch.randperm(N, generator=gen)[:65536]].float()
        sae.mean.copy_(sample.mean(0))
        sae.scale.copy_(((sample - sae.mean) ** 2).sum(-1).mean().sqrt().clamp_min(1e-8))
    opt = torch.optim.Adam(sae.parameters(), lr=cfg.lr, betas=(0.9, 0.999))
    steps_per_epoch = max(1, N // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warm, decay_from = max(1, total // 20), int(total * 0.8)
    # a linear warm-up, then flat, then a linear decay over the last fifth (Gao et al. decay too)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, 1.0, (total - s) / max(1, total - decay_from)))
    since_fired = torch.zeros(sae.n_features)
    history, t0, step = {"step": [], "fve": [], "aux": []}, time.time(), 0
    report = progress or (lambda f, m: None)
    for epoch in range(cfg.epochs):
        order = torch.randperm(N, generator=gen)
        for b in range(steps_per_epoch):
            if should_stop is not None and should_stop():
                raise TrainingStopped("stopped")
            xn = sae.normalised(data[order[b * cfg.batch_size:(b + 1) * cfg.batch_size]])  # [B, H]
            pre = sae.pre_activations(xn)                                               # [B, F]
            vals, idx = pre.topk(sae.k, dim=-1)
            z = torch.zeros_like(pre).scatter(-1, idx, F.relu(vals))                    # [B, F], k non-zero
            # a dense product: on a CPU the sparse gather/scatter alternatives measured slower
            with torch.autocast("cpu", torch.bfloat16, enabled=_bf16_fast()):
                recon = (z @ sae.W_dec.T).float() + sae.b_pre
            err = xn - recon
            mse = (err ** 2).sum(-1).mean()  # = 1 - FVE, since E|xn|^2 = 1
            loss = mse
            fired = torch.zeros(sae.n_features, dtype=torch.bool).index_fill_(0, idx[vals > 0].unique(), True)
            since_fired = torch.where(fired, 0.0, since_fired + xn.shape[0])
            dead = since_fired >= cfg.dead_tokens
            aux = torch.zeros(())
            if dead.any():  # AuxK: the dead features' best guess at what the live ones missed
                ka = min(cfg.aux_k, int(dead.sum()))
                av, ai = pre.masked_fill(~dead, float("-inf")).topk(ka, dim=-1)
                aux_recon = F.embedding_bag(ai, sae.W_dec.T, per_sample_weights=F.relu(av), mode="sum")
                e = err.detach()
                aux = ((e - aux_recon) ** 2).sum(-1).mean() / (e ** 2).sum(-1).mean().clamp_min(1e-8)
                loss = loss + cfg.aux_coef * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            sae.normalise_decoder()
            step += 1
            if step % 20 == 0 or step == total:
                fve = 1 - float(mse.detach())
                history["step"].append(step)
                history["fve"].append(round(fve, 4))
                history["aux"].append(round(float(aux.detach()), 4))
                rate = step / max(time.time() - t0, 1e-6)
                report(step / total, f"step {step:,} of {total:,} (epoch {epoch + 1}): variance explained "
                                     f"{fve:.3f}, {int(dead.sum()):,} features silent; this stage about "
                                     f"{_minutes((total - step) / rate)} left")
    history["seconds"] = round(time.time() - t0, 1)
    history["steps"] = total
    return sae.eval(), history


def _bf16_fast() -> bool:
    from ...train.device import cpu_bf16_is_fast
    return cpu_bf16_is_fast()


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# ----- how good it is ------------------------------------------------------------------------------
DENSE_ABOVE = 0.1  # a feature firing on more than a tenth of all tokens reads as "dense" (Anthropic's cut-off)


@torch.no_grad()
def statistics(sae: TopKSAE, acts, batch: int = 8192, on_batch: Callable[[int], None] | None = None) -> dict:
    """Over every row of ``acts``: variance explained, mean L0, each feature's firing count and
    largest activation, and the sparse codes themselves (values fp16 [N, k], indices int16 [N, k])
    that the browser reads (top contexts, search by word, histograms)."""
    data = torch.as_tensor(acts)
    N, _ = data.shape
    counts = torch.zeros(sae.n_features, dtype=torch.long)
    maxes = torch.zeros(sae.n_features)
    sums = torch.zeros(sae.n_features, dtype=torch.float64)
    err_sq = var_sq = l0 = 0.0
    vals_out = np.zeros((N, sae.k), np.float16)
    idx_out = np.zeros((N, sae.k), np.int16 if sae.n_features < 32768 else np.int32)
    for a in range(0, N, batch):
        x = data[a:a + batch].float()
        vals, idx = sae.encode_sparse(x)
        recon = sae.decode_sparse(vals, idx)
        err_sq += float(((x - recon) ** 2).sum())
        var_sq += float(((x - sae.mean) ** 2).sum())
        on = vals > 0
        l0 += float(on.sum())
        counts += torch.bincount(idx[on], minlength=sae.n_features)
        maxes.scatter_reduce_(0, idx.flatten(), vals.flatten(), reduce="amax")
        sums.index_add_(0, idx.flatten(), vals.flatten().double())
        vals_out[a:a + batch] = vals.numpy()
        idx_out[a:a + batch] = idx.numpy()
        if on_batch:
            on_batch(min(batch, N - a))
    density = counts.double() / max(N, 1)
    return {"fve": 1 - err_sq / max(var_sq, 1e-12), "mean_l0": l0 / max(N, 1),
            "dead_fraction": float((counts == 0).double().mean()),
            "dense_fraction": float((density > DENSE_ABOVE).double().mean()),
            "density": density.numpy().astype(np.float32), "max_activation": maxes.numpy(),
            "mean_activation": (sums / counts.clamp_min(1)).numpy().astype(np.float32),
            "values": vals_out, "indices": idx_out}


def fve(sae: TopKSAE, x: torch.Tensor) -> float:
    """Fraction of variance of ``x`` [N, H] that the reconstruction explains (1 = perfect)."""
    with torch.no_grad():
        x = x.float()
        return 1 - float(((x - sae(x)) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())


def best_cosines(sae: TopKSAE, directions: torch.Tensor) -> torch.Tensor:
    """For each row of ``directions`` [D, H], the highest cosine with any feature's direction."""
    d = F.normalize(directions.float(), dim=-1)
    w = F.normalize(sae.W_dec.detach().float(), dim=0)
    return (d @ w).max(dim=-1).values


def train_flops_per_token(H: int, F_: int) -> float:
    """Floating-point operations of one training token: the encoder's product forward and its weight
    gradient (2 · 2·H·F); the decoder reads only k columns, negligible beside them."""
    return 4.0 * H * F_ * (1 + 0.15)  # (+ the top-k and the optimiser's pass over W_enc)

