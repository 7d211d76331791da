"""Every head of a model on one map, placed by what it does.

Clark et al. (2019, "What Does BERT Look At?", Section 6 and Fig. 6) asked which heads behave alike.
For two heads they took the Jensen-Shannon divergence between the two heads' attention
distributions, query token by query token, summed over many inputs, and drew all 144 heads of
BERT-Base in the plane with multidimensional scaling: heads close together attend alike, and heads
of one layer tend to sit together.

Here, for the loaded model:

* **The inputs**: ``segments`` inputs ``[CLS] A [SEP] B [SEP]`` of at most :data:`MAX_PIECES`
  WordPieces from a built-in Wikipedia corpus, cut exactly as for Clark et al.'s measures
  (``clark.make_segments``, the same seed, the same segments in every process).
* **The distance** between heads h and g: for every query token of every segment, the
  Jensen-Shannon distance between h's and g's attention rows (``comparison.measures.js_distance``:
  the square root of the divergence, base 2, a true metric in [0, 1]); averaged over the query
  tokens of a segment, then over the segments, each segment counting once. Two heads that attend
  the same way on every input are at distance 0.
* **The map**: classical multidimensional scaling (Torgerson 1952): square the distances, centre
  them twice, B = -1/2 · J D² J, and place the heads on the two eigenvectors of B with the largest
  eigenvalues, each scaled by the square root of its eigenvalue. Where the distances are those of
  points in a plane it gives them back exactly; otherwise it is the best two-dimensional picture in
  that least-squares sense, and :attr:`HeadMap.rank_correlation` says how well the map's distances keep
  the order of the computed ones (Spearman's ρ over all pairs of heads).
* **Colours and hover**: each head's layer, and its behaviour label and measures (``heads.head_stats``
  averaged over the same segments, labelled by ``heads.label_head``: the rule the head grid uses).

The distances cost (L · A)² / 2 · T² terms a segment, so the map is built once per weights in the
background (``python -m bert_explorer.cli.head_map build``, started by the Attention page through
``runs/neighbour_jobs``) into a disk-cache entry that the page then reads.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ... import disk_cache, limits
from ...checkpoint import Loaded, encoder_of
from ...runs import neighbour_jobs
from ..comparison.measures import js_distance
from . import clark
from .heads import MEASURES as HEAD_MEASURES
from .heads import head_stats, label_head

FORMAT = 1              # bump when head_map.json changes: older entries are then never read
FILE = "head_map.json"
MAX_PIECES = 64         # WordPieces a segment: the distances grow with its square
SEGMENTS = 200          # the default: enough that one odd segment does not move a head
MAX_SEGMENTS = 1_000
PREPARE_S = 9.0         # a background build's start, reading the Wikipedia dump and cutting it (clark.PREPARE_S)
JS_TERM_S = 1.8e-8      # seconds per Jensen-Shannon term (one head pair, one query, one key), measured here on Wikipedia
BUILD_COMMAND = ("bert_explorer.cli.head_map", "build")


@dataclass
class HeadMap:
    """Heads in order (layer 0 head 0, layer 0 head 1, …): ``distances`` [N, N] the mean JS distances,
    ``coords`` [N, 2] their places on the map, ``table`` one row per head (0-based layer and head, the
    measures of ``heads.head_stats``, ``behaviour``)."""
    distances: np.ndarray
    coords: np.ndarray
    table: pd.DataFrame
    num_layers: int
    num_heads: int
    segments: int
    wordpieces: int
    explained: float          # share of the positive eigenvalues' sum that the two axes hold
    rank_correlation: float   # Spearman's ρ between the map's and the computed distances, over all pairs
    corpus: str = "wiki"
    seed: int = 0
    info: dict = field(default_factory=dict)

    def map_distances(self) -> np.ndarray:
        return np.linalg.norm(self.coords[:, None] - self.coords[None], axis=-1)

    def points(self) -> pd.DataFrame:
        """One row per head as a person reads it (layers and heads from 1), with its place on the map."""
        t = self.table.copy()
        t.insert(0, "y", self.coords[:, 1].round(4))
        t.insert(0, "x", self.coords[:, 0].round(4))
        t["layer"] += 1
        t["head"] += 1
        return t

    def to_dict(self) -> dict:
        return {"format": FORMAT, "num_layers": self.num_layers, "num_heads": self.num_heads,
                "segments": self.segments, "wordpieces": self.wordpieces, "explained": self.explained,
                "rank_correlation": self.rank_correlation, "corpus": self.corpus, "seed": self.seed, "info": self.info,
                "distances": self.distances.round(6).tolist(), "coords": self.coords.round(6).tolist(),
                "table": self.table.to_dict(orient="list")}

    @classmethod
    def from_dict(cls, d: dict) -> "HeadMap":
        return cls(distances=np.array(d["distances"]), coords=np.array(d["coords"]), table=pd.DataFrame(d["table"]),
                   num_layers=d["num_layers"], num_heads=d["num_heads"], segments=d["segments"],
                   wordpieces=d["wordpieces"], explained=d["explained"], rank_correlation=d["rank_correlation"],
                   corpus=d["corpus"], seed=d["seed"], info=d.get("info", {}))


def head_distances(att) -> np.ndarray:
    """[N, N] for one input's attention [L, A, T, T] (N = L · A): the JS distance between every two
    heads' attention rows, averaged over the T query tokens. Symmetric, 0 on the diagonal."""
    a = np.asarray(att, dtype=np.float64)
    rows = a.reshape(-1, *a.shape[-2:])                       # [N, T, T]
    n = len(rows)
    out = np.zeros((n, n))
    for i in range(n):                                        # each pair once: the distance is symmetric
        out[i, i:] = js_distance(rows[i][None], rows[i:], axis=-1).mean(axis=-1)
    out = np.triu(out, 1)
    return out + out.T


def classical_mds(distances, dims: int = 2) -> tuple[np.ndarray, float]:
    """Points [N, dims] whose distances approximate ``distances`` (classical MDS), and the share of
    the positive eigenvalues' sum that the ``dims`` axes hold (1 = nothing is lost)."""
    d2 = np.asarray(distances, dtype=np.float64) ** 2
    n = len(d2)
    j = np.eye(n) - 1.0 / n
    b = -0.5 * j @ d2 @ j
    values, vectors = np.linalg.eigh((b + b.T) / 2)
    order = np.argsort(values)[::-1][:dims]
    kept = np.clip(values[order], 0.0, None)
    coords = vectors[:, order] * np.sqrt(kept)
    if coords.shape[1] < dims:                                # fewer heads than axes
        coords = np.pad(coords, ((0, 0), (0, dims - coords.shape[1])))
    positive = values[values > 0].sum()
    return coords, float(kept.sum() / positive) if positive > 0 else 1.0


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's ρ between the pairwise entries (above the diagonal) of two distance matrices."""
    upper = np.triu_indices(len(a), 1)
    if len(upper[0]) < 2:
        return 1.0
    x = pd.Series(a[upper]).rank().to_numpy()
    y = pd.Series(b[upper]).rank().to_numpy()
    if x.std() == 0 or y.std() == 0:
        return 1.0 if x.std() == y.std() else 0.0
    return float(np.corrcoef(x, y)[0, 1])


def from_distances(distances: np.ndarray, table: pd.DataFrame, num_layers: int, num_heads: int, **kw) -> HeadMap:
    coords, explained = classical_mds(distances)
    m = HeadMap(distances=distances, coords=coords, table=table, num_layers=num_layers, num_heads=num_heads,
                explained=explained, rank_correlation=0.0, **kw)
    m.rank_correlation = rank_correlation(m.map_distances(), distances)
    return m


def measure(loaded: Loaded, segments: list[clark.Segment], progress=None) -> HeadMap:
    """Run ``loaded`` over ``segments`` with its attentions and build the map (see the module's text)."""
    if not segments:
        raise ValueError("no segments to measure: the corpus gave none")
    report = progress or (lambda f, m: None)
    tok, model = loaded.tokenizer, encoder_of(loaded.model)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, sums, pieces = None, None, 0
    started = time.time()
    try:
        for done, s in enumerate(segments, 1):
            with torch.inference_mode():
                out = model(input_ids=torch.tensor([s.input_ids], device=device),
                            token_type_ids=torch.tensor([s.token_type_ids], device=device), output_attentions=True)
            att = torch.stack([a[0] for a in out.attentions]).float().cpu().numpy()   # [L, A, T, T]
            d = head_distances(att)
            total = d if total is None else total + d
            stats = head_stats(att, tok.convert_ids_to_tokens(s.input_ids))[list(HEAD_MEASURES)].to_numpy()
            sums = stats if sums is None else sums + stats
            pieces += len(s)
            clark.report_segments(report, done, len(segments), started)
    finally:
        model.train(was_training)
    L, A = att.shape[:2]
    table = pd.DataFrame(sums / len(segments), columns=list(HEAD_MEASURES))
    table.insert(0, "head", np.tile(np.arange(A), L))
    table.insert(0, "layer", np.repeat(np.arange(L), A))
    table["behaviour"] = [label_head(row) for _, row in table.iterrows()]
    return from_distances(total / len(segments), table, L, A, segments=len(segments), wordpieces=pieces,
                          info={"model": loaded.name or str(loaded.path), "seconds": round(time.time() - started, 1),
                                "threads": torch.get_num_threads(), "built": time.strftime("%Y-%m-%d %H:%M:%S")})


def head_from_selection(selection, num_heads: int) -> tuple[int, int] | None:
    """The (layer, head), 0-based, of the first point clicked on the map (Streamlit's plotly selection
    state), or None when none is: each point carries its 1-based layer and head in ``customdata``."""
    points = (selection or {}).get("points") or []
    for p in points:
        data = p.get("customdata")
        if data is not None and len(data) >= 2:
            return int(data[0]) - 1, int(data[1]) - 1
    return None


# ----- the cost, the cache entry and its build -------------------------------------------------------------
def check_segments(segments: int) -> None:
    if not 1 <= int(segments) <= MAX_SEGMENTS:
        raise ValueError(f"the number of segments must be between 1 and {MAX_SEGMENTS:,}, not {segments}")


def estimate_seconds(config, segments: int) -> float:
    """About how long ``segments`` segments take on an idle machine, in a background build: the corpus
    read and cut, a forward pass of MAX_PIECES WordPieces each (``limits``) at this CPU's measured rate
    (``train.estimate.cpu_flop_s``) and (L · A)² / 2 · T² Jensen-Shannon terms."""
    from ...train.estimate import background_threads, cpu_flop_s

    T = min(MAX_PIECES, config.max_position_embeddings)
    forward = limits.forward_flops(config.num_layers, config.hidden_size, config.intermediate_size, T) * T
    n = config.num_layers * config.num_heads
    rate, _ = cpu_flop_s("forward", config.hidden_size, background_threads(), False, config.intermediate_size)
    return PREPARE_S + segments * (forward / rate + n * n / 2 * T * T * JS_TERM_S)


def map_path(loaded: Loaded, corpus: str = "wiki", segments: int = SEGMENTS, seed: int = 0) -> Path:
    """Where the map of (these weights, corpus, segments, seed) lives once built."""
    return disk_cache.entry("head-map", loaded, corpus=str(corpus), segments=int(segments), seed=int(seed),
                            max_pieces=MAX_PIECES, format=FORMAT)


def is_complete(path: Path) -> bool:
    return (Path(path) / FILE).is_file()


def read_map(path: Path) -> HeadMap | None:
    """The map built into ``path``, or None when there is none (yet)."""
    data = disk_cache.read_json(path, FILE)
    return HeadMap.from_dict(data) if data and data.get("format") == FORMAT else None


def build_map(loaded: Loaded, corpus: str = "wiki", segments: int = SEGMENTS, seed: int = 0,
              progress=None) -> Path:
    """Build the map of ``loaded`` on ``segments`` segments of ``corpus`` into its cache entry and return
    the entry's folder (at once when it is built already); one builder at a time, its progress on disk."""
    check_segments(segments)
    if corpus not in clark.CORPORA:
        raise ValueError(f"no built-in Wikipedia corpus called {corpus!r}: {' or '.join(clark.CORPORA)}")
    path = map_path(loaded, corpus, segments, seed)

    def work(say) -> dict[str, str]:
        say(0.0, f"cutting the {corpus} corpus into segments…")
        max_len = min(MAX_PIECES, loaded.config.max_position_embeddings)
        chosen = clark.make_segments(loaded.tokenizer, corpus, segments, seed, max_len)
        result = measure(loaded, chosen, lambda f, m: say(0.98 * f, m))
        result.corpus, result.seed = corpus, seed
        return {FILE: json.dumps(result.to_dict())}

    return neighbour_jobs.build_entry(path, is_complete, work, progress)
