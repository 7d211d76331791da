"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", Section 3).

Rollout (``heads.attention_rollout``) multiplies the layers' attention matrices: it adds up the
attention along *every* path from an input token to a position, as if each path could carry as
much as its weights allow, independently of the others. Attention flow reads the same matrices
as a **network of pipes** instead:

* one node per (layer, position): layer 0 holds the input tokens, layer l the positions after
  encoder layer l, so (L + 1) · T nodes;
* an edge from (l - 1, j) to (l, i) whose **capacity** is how much position i attends to j in
  layer l, with the heads averaged and the residual connection counted as attention to oneself,
  Â = 0.5 · A + 0.5 · I, rows re-normalised: exactly the matrices rollout multiplies;
* the flow from input token j to position p after layer l is the **maximum flow** from node
  (0, j) to node (l, p): the most that can be pushed through the pipes at once, where every pipe
  is shared by all the paths through it. By the max-flow min-cut theorem it equals the smallest
  total capacity of edges whose removal cuts (0, j) off from (l, p): the narrowest bottleneck.

So rollout can count one wide pipe many times (once per path through it); flow counts it once.
Abnar & Zuidema found flow's scores to agree better with what the input tokens matter for
(gradient and ablation importance) than rollout's, at a higher cost: T max-flows for one position.

The max-flow solver is Dinic's algorithm (1970) on a dense residual matrix: a breadth-first
search (vectorised with numpy) gives every node its distance from the source, then depth-first
searches push flow only along edges that go one step further, until none is left; repeat until
the sink cannot be reached. Two facts about this graph make it small: an input token other than
the source has no edge *into* it, and a position of the last layer other than the sink has no
edge *out of* it, so no flow ever passes through either and both are left out.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .heads import AttentionResult, attention_rollout, layer_matrices

MAX_TOKENS = 64  # T max-flows on an (L + 1) · T-node graph: the cost grows about as T³ · L (see FLOW_NOTE)
EPS = 1e-12      # a residual capacity at or below this is an empty pipe (float round-off, not flow)

TOO_LONG = ("Attention flow is computed for inputs of at most {max} tokens: it solves one max-flow problem per "
            "input token on a graph of (layers + 1) × tokens nodes, and this input has {T}")  # (what follows is the
# caller's: the page shows rollout for all of them, the command line asks for a shorter input)


def _levels(residual: np.ndarray, source: int) -> np.ndarray:
    """Breadth-first distance of every node from ``source`` along edges with room left (-1: unreached)."""
    level = np.full(len(residual), -1)
    level[source] = 0
    frontier, depth = np.array([source]), 0
    while frontier.size:
        depth += 1
        reached = (residual[frontier] > EPS).any(axis=0) & (level < 0)
        frontier = np.flatnonzero(reached)
        level[frontier] = depth
    return level


def max_flow(capacity, source: int, sink: int) -> float:
    """The maximum flow from ``source`` to ``sink`` through a graph given as a dense matrix of edge
    capacities (``capacity[u, v]``: how much may go from u to v; 0 = no edge), by Dinic's algorithm."""
    residual = np.array(capacity, dtype=np.float64)
    if residual.ndim != 2 or residual.shape[0] != residual.shape[1]:
        raise ValueError(f"capacities must be a square matrix, got shape {residual.shape}")
    if (residual < 0).any():
        raise ValueError("capacities must not be negative")
    if source == sink:
        raise ValueError("the source and the sink must be two different nodes")
    total = 0.0
    while True:
        level = _levels(residual, source)
        if level[sink] < 0:
            return total
        # Each node's edges into the next level, fixed for the phase; ``nxt[u]`` is the first not yet
        # found full or leading nowhere (Dinic's "current edge"), so every edge is passed over once.
        ahead = (residual > EPS) & (level[None, :] == level[:, None] + 1)
        ahead[:, level > level[sink]] = False
        edges = [np.flatnonzero(row) for row in ahead]
        nxt = [0] * len(residual)
        path = [source]
        while path:
            u = path[-1]
            if u == sink:  # push the bottleneck along the path and go back to the first full edge
                pairs = list(zip(path[:-1], path[1:]))
                push = min(residual[a, b] for a, b in pairs)
                for a, b in pairs:
                    residual[a, b] -= push
                    residual[b, a] += push
                total += push
                first_full = next(i for i, (a, b) in enumerate(pairs) if residual[a, b] <= EPS)
                del path[first_full + 1:]
                continue
            out = edges[u]
            while nxt[u] < len(out) and residual[u, out[nxt[u]]] <= EPS:
                nxt[u] += 1
            if nxt[u] < len(out):
                path.append(int(out[nxt[u]]))
            else:  # a dead end in this phase: never try it again, and leave the edge that led here
                path.pop()
                if path:
                    nxt[path[-1]] += 1


def flow_graph(layers: np.ndarray, source: int, sink: int) -> tuple[np.ndarray, int, int]:
    """The capacities of the graph that carries the flow from input token ``source`` to position
    ``sink`` through the first ``len(layers)`` layers ([l, T, T] matrices of ``layer_matrices``),
    with the nodes that no flow can pass left out: [source, layer 1's T positions, …, layer
    l - 1's, sink]. Returns (capacity matrix, source node, sink node)."""
    n_layers, T = layers.shape[0], layers.shape[-1]
    if n_layers == 1:
        return np.array([[0.0, layers[0, sink, source]], [0.0, 0.0]]), 0, 1
    n = 2 + (n_layers - 1) * T
    cap = np.zeros((n, n))
    first, last = 1, 1 + (n_layers - 2) * T       # the first node of layer 1 and of layer l - 1
    cap[0, first:first + T] = layers[0][:, source]  # the input token to every position of layer 1
    for l in range(1, n_layers - 1):               # layer l's position j to layer l + 1's position i
        lo = first + (l - 1) * T
        cap[lo:lo + T, lo + T:lo + 2 * T] = layers[l].T
    cap[last:last + T, n - 1] = layers[-1][sink]   # every position of layer l - 1 to the sink
    return cap, 0, n - 1


def full_graph(layers: np.ndarray) -> np.ndarray:
    """The whole (l + 1) · T-node graph of Abnar & Zuidema, node l · T + i for position i after layer
    l (layer 0 = the input tokens): for tests and for reading; :func:`flow_graph` is what is solved."""
    n_layers, T = layers.shape[0], layers.shape[-1]
    cap = np.zeros(((n_layers + 1) * T,) * 2)
    for l in range(n_layers):
        cap[l * T:(l + 1) * T, (l + 1) * T:(l + 2) * T] = layers[l].T
    return cap


@dataclass
class FlowResult:
    """The flow from every input token into one position, beside rollout's shares for the same position."""
    tokens: list[str]
    position: int            # 0-based; the position the flow goes to
    layer: int               # 0-based; after this encoder layer
    flow: np.ndarray         # [T]: the max flow from each input token (each at most 1: the sink takes in 1)
    rollout: np.ndarray      # [T]: rollout's row of the same position and layer (sums to 1)
    seconds: float           # the time the T max-flows took

    @property
    def flow_share(self) -> np.ndarray:
        """The flows scaled to sum to 1, as Abnar & Zuidema normalise them to compare with rollout."""
        total = self.flow.sum()
        return self.flow / total if total > 0 else self.flow

    def table(self):
        import pandas as pd

        return pd.DataFrame({"position": np.arange(len(self.tokens)), "token": self.tokens,
                             "max flow": self.flow.round(6), "flow share": self.flow_share.round(6),
                             "rollout share": self.rollout.round(6)})


def check_length(T: int) -> None:
    if T > MAX_TOKENS:
        raise ValueError(TOO_LONG.format(max=MAX_TOKENS, T=T) + f"; shorten it to {MAX_TOKENS} tokens or fewer")


def attention_flow(att: AttentionResult | np.ndarray, position: int = 0, layer: int | None = None,
                   tokens: list[str] | None = None) -> FlowResult:
    """The maximum flow from every input token to ``position`` (0-based; 0 = [CLS]) after ``layer``
    (0-based; the last by default), with rollout's row of the same position beside it. Inputs of
    more than :data:`MAX_TOKENS` tokens are refused in one sentence (``ValueError``)."""
    layers = layer_matrices(att)
    L, T = layers.shape[0], layers.shape[-1]
    check_length(T)
    layer = L - 1 if layer is None else layer
    if not 0 <= layer < L:  # (said as the pages and the CLI count: layers from 1, positions from 0 = [CLS])
        raise ValueError(f"layer {layer + 1} is not one of this model's layers, 1 to {L}")
    if not 0 <= position < T:
        raise ValueError(f"position {position} is not one of this input's positions, 0 ([CLS]) to {T - 1}")
    tokens = tokens if tokens is not None else getattr(att, "tokens", [str(i) for i in range(T)])
    used = layers[:layer + 1]
    started = time.perf_counter()
    flow = np.array([max_flow(*flow_graph(used, source, position)) for source in range(T)])
    seconds = time.perf_counter() - started
    rollout = attention_rollout(att)[layer, position].astype(np.float64)
    return FlowResult(tokens=list(tokens), position=position, layer=layer, flow=flow, rollout=rollout,
                      seconds=seconds)
