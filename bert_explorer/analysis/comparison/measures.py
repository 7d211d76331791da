"""The two measures of how far two models' representations and attention lie apart.

* **Linear CKA** (Kornblith et al. 2019, "Similarity of Neural Network Representations
  Revisited", Section 3): run the same sentences through both models, stack the vectors of one
  layer into matrices X (n × H_a) and Y (n × H_b), centre every column, and compute

      CKA(X, Y) = ‖YᵀX‖²_F / (‖XᵀX‖_F · ‖YᵀY‖_F)

  1 means the two layers arrange the n tokens in the same way up to a rotation and a uniform
  scaling; 0 means their similarity structures have nothing in common. It does not need the same
  width (H), which is why it can compare a 384-wide layer with a 256-wide one. Merchant et al.
  (2020, "What Happens To BERT Embeddings During Fine-tuning?") used it to show that fine-tuning
  changes mostly the top layers of BERT.
* **Jensen-Shannon distance between attention rows**: for a query token, each head gives a
  probability distribution over the tokens; the JS divergence of the two models' distributions
  (base 2, so it lies in [0, 1]) has a square root that is a true distance, 0 for the same row and
  1 for rows with no token in common. Averaged over the query tokens of every sentence, one number
  per (layer, head) says how much that head's attention moved.

Plain numpy on arrays: nothing here runs a model (``two_models`` does).
"""
from __future__ import annotations

import numpy as np


def linear_cka(x, y) -> float:
    """Linear CKA of two representations of the same n examples (rows): x [n, p], y [n, q]."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"CKA needs two matrices with the same number of rows, got {x.shape} and {y.shape}")
    x = x - x.mean(axis=0, keepdims=True)
    y = y - y.mean(axis=0, keepdims=True)
    cross = np.linalg.norm(y.T @ x) ** 2
    norm = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return float(cross / norm) if norm > 0 else 0.0


def js_distance(p, q, axis: int = -1) -> np.ndarray:
    """Jensen-Shannon distance (base 2, in [0, 1]) between distributions along ``axis``."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    p = p / np.clip(p.sum(axis=axis, keepdims=True), 1e-12, None)
    q = q / np.clip(q.sum(axis=axis, keepdims=True), 1e-12, None)
    m = (p + q) / 2

    def kl(a):  # sum a log2(a / m); terms with a = 0 contribute 0
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(a > 0, a * np.log2(np.where(a > 0, a, 1) / np.where(m > 0, m, 1)), 0.0).sum(axis=axis)

    return np.sqrt(np.clip((kl(p) + kl(q)) / 2, 0.0, 1.0))


def cka_matrix(layers_a: list[np.ndarray], layers_b: list[np.ndarray], diagonal: bool = False) -> np.ndarray:
    """CKA of every layer of A (rows) with every layer of B (columns); with ``diagonal`` only
    layer i with layer i (the rest is NaN). Same formula as :func:`linear_cka`, with each layer
    centred and its own norm ‖XᵀX‖ computed once."""
    xs = [np.asarray(x, np.float64) - np.asarray(x, np.float64).mean(0) for x in layers_a]
    ys = [np.asarray(y, np.float64) - np.asarray(y, np.float64).mean(0) for y in layers_b]
    nx = [np.linalg.norm(x.T @ x) for x in xs]
    ny = [np.linalg.norm(y.T @ y) for y in ys]
    out = np.full((len(xs), len(ys)), np.nan)
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            if diagonal and i != j:
                continue
            out[i, j] = np.linalg.norm(y.T @ x) ** 2 / (nx[i] * ny[j]) if nx[i] * ny[j] > 0 else 0.0
    return out


def attention_change(att_a: list[np.ndarray], att_b: list[np.ndarray]) -> np.ndarray:
    """Mean JS distance between the two models' attention rows, per (layer, head): [L, A],
    averaged over every query token of every sentence (each token counts once)."""
    total, count = None, 0
    for a, b in zip(att_a, att_b):
        if a.shape != b.shape:
            raise ValueError(f"attention of shape {a.shape} and {b.shape}: the models tokenised a sentence "
                             "differently or have different heads")
        d = js_distance(a, b).sum(axis=-1)          # [L, A]: summed over the query tokens
        total = d if total is None else total + d
        count += a.shape[-2]
    if total is None:
        raise ValueError("no sentences to compare")
    return total / count
