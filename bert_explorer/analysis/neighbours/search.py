"""Nearest neighbours in a corpus: which tokens of BBC News does BERT see as most like yours?

exBERT's key feature (Hoover, Strobelt & Gehrmann 2020, "exBERT: A Visual Analysis Tool to
Explore Learned Representations in Transformer Models"): pick a token of your sentence and a
layer, and search a corpus for the tokens whose vectors at that layer are closest. BERT's
vectors are *contextual* (Devlin et al. 2019, Section 3; Section 5.3 uses them as features):
at the embeddings (layer 0) "bank" is one vector plus a position, so every "bank" of the
corpus is equally near; in the deep layers the vector carries the sentence, and the nearest
"bank"s should be the ones used in the same sense.

**What is indexed.** Every WordPiece of every sentence of the corpus, continuation pieces
("##ing") included, because the query is a WordPiece too (the page lists the pieces of your
sentence) and each piece has a vector of its own. Punctuation stays (you may ask about a
comma), but ``[CLS]`` and ``[SEP]`` are left out: they are not tokens of the text, and in the
deep layers their vectors stand for the whole sentence. Each sentence is encoded on its own as
``[CLS] sentence [SEP]`` (so a hit's context is exactly the sentence shown beside it); a
sentence longer than 126 WordPieces (10 in BBC News) is cut at word starts into windows that
fit 128. Sentences that occur twice (BBC News holds ~100 duplicated articles) are indexed
once, so the hits are not the same sentence over and over. BBC News gives 986,985 rows
(40,106 distinct sentences), 779 MB per layer.

**How it is stored.** One disk-cache entry per (model weights, corpus, layer)
(``disk_cache.entry``): ``vectors.npy`` [N, H] L2-normalised in fp16 (cosine = dot product),
``token_ids``, ``unit`` (which sentence), ``starts``/``ends`` (the hit's characters in its
sentence) as .npy, ``sentences.json`` (text and source, e.g. the BBC topic) and
``meta.json``. An entry appears in one rename when complete; the build writes finished
shards of 2,048 sentences into a work folder first, so a stopped build resumes where it was
(see ``index.py`` for the build and ``runs/neighbour_jobs.py`` for the lock that keeps it to one builder).

**How it is searched: exact, with PyTorch** (:func:`exact_search`; ``bench/neighbour_search.py``
measured the choices). On this 2-core CPU, BBC at layer 6 of minilm-mlm-nsp (986,985 × 384
fp16, 758 MB), one thread, median of 20 queries (the machine was shared, load ~4):

| method | build | added memory | one query | recall@10 |
|---|---:|---:|---:|---:|
| **ours**: fp16 matmul over the memory map + fp32 re-scoring of near-ties | none | 15 MB | 142 ms | 1.000 |
| fp16 → fp32 a chunk at a time (torch / numpy) | none | 0 | 2.4 / 2.8 s | 1.000 |
| fp16 matmul, top-k of its fp16 scores | none | 0 | 194 ms | 0.960 |
| numpy, an fp32 copy in memory | 5.6 s | 1,574 MB | 319 ms | 1.000 |
| faiss IndexFlatIP (fp32) | 7.2 s | 1,446 MB | 194 ms | 1.000 |
| faiss IndexScalarQuantizer fp16 | 3.9 s | 723 MB | 77 ms | 1.000 |
| faiss IVF3973 + SQfp16, nprobe 8 / 32 / 128 | 180 s | 943 MB | 1 / 1 / 4 ms | 0.94 / 0.99 / 1.00 |
| faiss HNSW32, efSearch 64 / 256 | ≈ 310 s | ≈ 1.5 GB | < 1 ms | 0.94 / 0.98 |

A query on the page is one search, so anything under half a second feels immediate: the
exact search at ~0.15 s is fast enough, and it is exact (a teaching tool should not hide a
neighbour), needs no new dependency, no build step beyond the vectors themselves, and no copy
of the matrix in memory (every process shares the memory-mapped file). faiss's fp16 flat index
is twice as fast but holds a private 723 MB copy in each process; IVF and HNSW answer in a
millisecond but take minutes to build, more memory, and miss some neighbours. They would pay
off for many queries per second or a corpus ten times larger.
"""
from __future__ import annotations

import json
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ... import disk_cache
from ...checkpoint import Loaded

from .index import MAX_PIECES, IndexMissing, check_layer, hidden_upto, is_complete, normalise

MARGIN = 0.01           # exact search: rows this close to the k-th fp16 score are scored again in fp32
MAX_CANDIDATES = 200_000
PAGE_CORPORA = {"bbc": "bbc"}  # what the page offers: label -> corpus (tests put a tiny file here)


# ----- an index on disk, and searching it -------------------------------------------------------
@dataclass
class NeighbourIndex:
    """A built index, memory-mapped: opening it reads only the small arrays, and the vectors
    are paged in by the first search (and shared by every process through the page cache).

    While it is open the index is in use (``disk_cache.pin``): the cache never removes it to keep
    to its quota (removing a mapped file would free no room anyway until it is closed), and each
    search marks it used, so the indexes people search are the last to go."""
    path: Path
    vectors: np.ndarray      # [N, H] fp16, unit length (memory-mapped)
    token_ids: np.ndarray    # [N]
    unit: np.ndarray         # [N] which sentence
    starts: np.ndarray       # [N] first character of the hit in its sentence
    ends: np.ndarray         # [N] one past its last character
    texts: list[str]
    sources: list[str]
    meta: dict = field(default_factory=dict)
    pin: disk_cache.Pin | None = field(default=None, repr=False, compare=False)

    @classmethod
    def open(cls, path: Path) -> "NeighbourIndex":
        path = Path(path)
        pin = disk_cache.pin(path)
        try:
            if pin is None or not is_complete(path):
                raise IndexMissing(f"no complete index in {path}")
            s = json.loads((path / "sentences.json").read_text())
            # mode "c" (copy-on-write) maps the file like "r" but gives a writable array, which
            # torch.from_numpy takes without a warning; nothing ever writes to it.
            index = cls(path, np.load(path / "vectors.npy", mmap_mode="c"),
                        *(np.load(path / f"{n}.npy") for n in ("token_ids", "unit", "starts", "ends")),
                        s["text"], s["source"], json.loads((path / "meta.json").read_text()), pin)
        except BaseException:
            if pin is not None:
                pin.release()
            raise
        weakref.finalize(index, pin.release)  # in use until nobody holds the index any more
        return index

    def __len__(self) -> int:
        return len(self.token_ids)

    def search(self, query: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` rows with the largest cosine similarity to ``query`` [H] (best first):
        (similarities, rows). Exact: every row is scored (see the module's docstring)."""
        disk_cache.mark_used(self.path)
        return exact_search(self.vectors, query, k)


def exact_search(vectors, query: np.ndarray, k: int = 10, margin: float = MARGIN) -> tuple[np.ndarray, np.ndarray]:
    """Cosine top-k over an [N, H] matrix of unit vectors (fp16, memory-mapped): exact.

    1. One fp16 matrix-vector product scores every row. PyTorch's CPU kernel accumulates in
       fp32 and rounds the result to fp16, so each score is off by at most half an fp16 step
       (2.4e-4 near 1; measured on BBC: max 2.4e-4) — but rounding makes near-ties equal, and
       top-k alone then drops true neighbours (recall@10 0.96 in the benchmark).
    2. Every row scoring within ``margin`` (0.01, 40× that error) of the k-th best is a
       candidate, and the candidates — tens to a few thousand rows — are scored again in
       fp32. No true top-k row can be left out, so the answer is that of a full fp32 search,
       at the speed of the fp16 product (no fp32 copy of the matrix is ever made)."""
    V = vectors if isinstance(vectors, torch.Tensor) else torch.from_numpy(vectors)  # no copy of a memory map
    q = torch.from_numpy(np.ascontiguousarray(query, dtype=np.float32))
    q = q / q.norm().clamp_min(1e-12)
    k = min(k, len(V))
    if V.dtype == torch.float32:
        top = torch.topk(V @ q, k)
        return top.values.numpy(), top.indices.numpy()
    rough = V @ q.to(V.dtype)                                      # [N], fp16
    kth = torch.topk(rough, k).values[-1].float()
    candidates = torch.nonzero(rough.float() >= kth - margin).squeeze(1)
    if len(candidates) > MAX_CANDIDATES:                           # a flood of near-ties: score them all anyway
        candidates = torch.topk(rough, MAX_CANDIDATES).indices
    exact = V[candidates].float() @ q                               # [C], fp32
    top = torch.topk(exact, k)
    return top.values.numpy(), candidates[top.indices].numpy()


# ----- a query: your sentence, your token --------------------------------------------------------
def sentence_pieces(loaded: Loaded, text: str) -> list[str]:
    """The WordPieces of ``[CLS] text [SEP]`` as the query sees them (position 0 is [CLS])."""
    return loaded.tokenizer.encode(text, max_length=MAX_PIECES).tokens


def pick_token(loaded: Loaded, text: str, token: str | int) -> int:
    """The position (in ``[CLS] text [SEP]``, [CLS] = 0) of ``token``: a position, or a word
    whose first WordPiece's first occurrence is taken. Raises ValueError in one sentence."""
    pieces = sentence_pieces(loaded, text)
    if isinstance(token, int) or str(token).strip().lstrip("-").isdigit():
        i = int(token)
        if not 1 <= i <= len(pieces) - 2:
            raise ValueError(f"token position {i} is outside the sentence: its WordPieces are 1-{len(pieces) - 2} "
                             f"({' '.join(pieces[1:-1])})")
        return i
    want = loaded.tokenizer.tokenize(str(token))
    for i in range(1, len(pieces) - len(want)):
        if want and pieces[i:i + len(want)] == want:
            return i
    raise ValueError(f"{token!r} is not in the sentence; its WordPieces are: {' '.join(pieces[1:-1])}")


def query_vector(loaded: Loaded, text: str, position: int, layer: int) -> np.ndarray:
    """The unit vector [H] of the WordPiece at ``position`` of ``[CLS] text [SEP]`` at ``layer``,
    computed exactly as the corpus's were (one sentence, segment A)."""
    check_layer(loaded, layer)
    enc = loaded.tokenizer.encode(text, max_length=MAX_PIECES)
    if not 1 <= position <= len(enc.input_ids) - 2:
        raise ValueError(f"position {position} is not a WordPiece of the sentence (1-{len(enc.input_ids) - 2})")
    was_training = loaded.model.training
    loaded.model.eval()
    try:
        with torch.inference_mode():
            h = hidden_upto(loaded, loaded.tokenizer.tensors([enc]), [layer])[layer][0, position]  # [H]
    finally:
        loaded.model.train(was_training)
    return normalise(h.float()).numpy()


@dataclass
class Neighbours:
    """The answer to one query: its token and the hits, best first."""
    query_token: str
    query_id: int
    layer: int
    hits: list[dict]          # rank, similarity, token, same_token, sentence, start, end, source, left, right
    rows: int                 # size of the index searched
    seconds: float            # time of the search itself

    @property
    def same_token(self) -> int:
        return sum(h["same_token"] for h in self.hits)


MAX_HITS = 1000


def nearest(loaded: Loaded, index: NeighbourIndex, text: str, position: int, layer: int, k: int = 10,
            context_chars: int = 70) -> Neighbours:
    """The ``k`` corpus tokens nearest to the token at ``position`` of ``text``, at ``layer``.

    A sentence that occurs in several documents was indexed once, so no two hits share a
    context; the query's own sentence is found too if it is in the corpus (similarity 1)."""
    if index.meta.get("layer", layer) != layer:
        raise ValueError(f"this index is of layer {index.meta['layer']}, not {layer}")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_HITS:  # (each hit is a dict of its context:
        # a million asked of the BBC index were a million, built and printed)
        raise ValueError(f"the hits asked for must be a whole number from 1 to {MAX_HITS:,}, not {k!r}")
    q = query_vector(loaded, text, position, layer)
    t0 = time.time()
    sims, rows = index.search(q, k)
    seconds = time.time() - t0
    qid = loaded.tokenizer.encode(text, max_length=MAX_PIECES).input_ids[position]
    hits = []
    for rank, (s, r) in enumerate(zip(sims.tolist(), rows.tolist()), 1):
        u, a, b = int(index.unit[r]), int(index.starts[r]), int(index.ends[r])
        sentence = index.texts[u]
        left, right = sentence[:a], sentence[b:]
        # (a cosine of vectors stored in 16 bits, each of length 1 to 2e-3: 1.0000008 stood in a page's CSV)
        hits.append({"rank": rank, "similarity": min(1.0, max(-1.0, float(s))),
                     "token": loaded.tokenizer.id_to_token(int(index.token_ids[r])),
                     "same_token": int(index.token_ids[r]) == qid, "sentence": sentence, "start": a, "end": b,
                     "hit": sentence[a:b], "source": index.sources[u],
                     "left": ("…" if len(left) > context_chars else "") + left[-context_chars:],
                     "right": right[:context_chars] + ("…" if len(right) > context_chars else "")})
    return Neighbours(loaded.tokenizer.id_to_token(qid), qid, layer, hits, len(index), seconds)


def describe(result: Neighbours, layer_label: str) -> str:
    """One sentence that says what the model just found (the page's caption)."""
    k = len(result.hits)
    if not k:
        return "The index is empty."
    same = result.same_token
    sims = [h["similarity"] for h in result.hits]
    sources = {h["source"] for h in result.hits if h["source"]}
    what = (f"all {k} nearest tokens are “{result.query_token}” itself" if same == k else
            f"none of the {k} nearest tokens is “{result.query_token}”" if same == 0 else
            f"{same} of the {k} nearest tokens are “{result.query_token}” itself; the others are "
            + ", ".join(f"“{t}”" for t in dict.fromkeys(h["token"] for h in result.hits if not h["same_token"])))
    spread = f"cosine similarity {sims[0]:.3f} to {sims[-1]:.3f}"
    topics = f", from {len(sources)} source{'s' if len(sources) != 1 else ''} ({', '.join(sorted(sources))})" \
        if sources and len(sources) <= 5 else ""
    note = (" At the embeddings a token's vector is its word plus its position (and segment), so the same word "
            "at the same or a nearby position comes first, whatever its sense." if result.layer == 0 and same else "")
    return (f"At {layer_label}, {what} ({spread}{topics}); searched {result.rows:,} tokens in "
            f"{result.seconds * 1000:.0f} ms.{note}")
