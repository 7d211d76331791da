"""What BERT reads before any attention: its input representation (Devlin et al. 2019,
Section 3, "Input/Output Representations", and Figure 2).

Every WordPiece becomes one vector of size H, and that vector is a sum of three learned
embeddings looked up in three tables:

* the **token** embedding: one row per vocabulary entry ("bank", "##ing", "[CLS]", ...);
* the **segment** embedding: row 0 for every token of sentence A (its [CLS] and first
  [SEP] included), row 1 for sentence B and its final [SEP];
* the **position** embedding: row t for the t-th token. BERT *learns* these rows, where
  the original Transformer used fixed sines and cosines.

The sum goes through a LayerNorm (and dropout, which is off at inference). The result is
``hidden_states[0]``, the "layer 0" every later layer builds on.

This module takes that sum apart and compares what comes out of it:

* ``input_representation``: the three parts, their sum and the LayerNorm output per token;
* ``position_similarity``: how alike the learned position vectors are to each other;
* ``pca_2d`` / ``tsne_2d`` / ``project``: a map of high-dimensional vectors on a page, and
  ``label_places``: where to write the names on it so that they don't overlap;
* ``static_word_vectors``: the token-table rows of some words (no context at all);
* ``word_in_context`` / ``contextual_similarity``: one word's vector in several sentences,
  at every layer: identical at layer 0 when the word sits at the same position, and pulled
  apart by context as the layers add up what each sentence says around it.

Plain PyTorch and numpy; the pages only draw what these functions return.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
import torch

from ..checkpoint import Loaded, encoder_of

PARTS = ("token", "segment", "position", "sum (before LayerNorm)", "after LayerNorm")


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().float().cpu().numpy()


# ----- the input representation, taken apart ------------------------------------------------

@dataclass
class InputRepresentation:
    """One input, decomposed as in Figure 2 of the paper; every array is [T, H].

    ``after_layernorm`` is exactly what ``BertEmbeddings`` returns in eval mode, i.e. the
    model's ``hidden_states[0]``.
    """

    tokens: list[str]
    input_ids: list[int]
    segment_ids: list[int]          # 0 = sentence A ([CLS] A [SEP]), 1 = sentence B (B [SEP])
    position_ids: list[int]         # 0 .. T-1
    token: np.ndarray               # [T, H] row input_ids[t] of the token table
    segment: np.ndarray             # [T, H] row segment_ids[t] of the segment table
    position: np.ndarray            # [T, H] row t of the position table
    summed: np.ndarray              # [T, H] token + segment + position
    after_layernorm: np.ndarray     # [T, H] LayerNorm(summed)
    truncated: bool = False         # the input was longer than max_tokens and was cut

    def norms(self) -> dict[str, np.ndarray]:
        """Euclidean length of each part, per token: {part name: [T]}."""
        arrays = (self.token, self.segment, self.position, self.summed, self.after_layernorm)
        return {name: np.linalg.norm(a, axis=-1) for name, a in zip(PARTS, arrays)}

    def length_range(self, part: str) -> tuple[float, float, float]:
        """The shortest and the longest length of ``part`` (a name of PARTS) over the tokens, and
        how many times the longest is the shortest: how much LayerNorm evens the sums out."""
        lengths = self.norms()[part]
        shortest, longest = float(lengths.min()), float(lengths.max())
        return shortest, longest, longest / shortest

    def table(self) -> pd.DataFrame:
        """One row per WordPiece: the piece, its vocabulary id, its segment and position."""
        return pd.DataFrame({
            "piece": self.tokens,
            "id": self.input_ids,
            "segment": ["A" if s == 0 else "B" for s in self.segment_ids],
            "segment id": self.segment_ids,
            "position": self.position_ids,
        })

    def norms_frame(self) -> pd.DataFrame:
        """The norms in long format (one row per token and part), ready for a grouped bar chart.
        ``label`` is "position: piece" so that a repeated piece keeps its own bar."""
        labels = [f"{t}: {tok}" for t, tok in zip(self.position_ids, self.tokens)]
        rows = [{"position": t, "label": labels[t], "piece": self.tokens[t], "part": part, "norm": float(v)}
                for part, values in self.norms().items() for t, v in enumerate(values)]
        return pd.DataFrame(rows)


def input_representation(loaded: Loaded, text: str, text_b: str | None = None,
                         max_tokens: int = 128) -> InputRepresentation:
    """Decompose the input representation of ``[CLS] text [SEP]`` (or ``[CLS] A [SEP] B [SEP]``).

    The three summands come from ``BertEmbeddings.parts`` (plain table look-ups); their sum
    is put through the model's own embedding LayerNorm. Dropout is left out, as in eval mode.
    What to look for: the token part carries most of the length; the segment part is the
    same vector for every token of a sentence; LayerNorm rescales every token to about the
    same length (roughly sqrt(H) times the LayerNorm gain), so the differences that survive
    are differences of direction, not of size.

    Inputs longer than ``max_tokens`` WordPieces are cut (longest sentence first) and
    ``truncated`` says so.
    """
    tok = loaded.tokenizer
    emb = encoder_of(loaded.model).embeddings
    max_tokens = min(max_tokens, loaded.config.max_position_embeddings)
    full_length = len(tok.encode(text, text_b).input_ids)
    enc = tok.encode(text, text_b, max_length=max_tokens)
    batch = tok.tensors([enc], device=_device(loaded.model))
    with torch.no_grad():
        token, segment, position = emb.parts(batch["input_ids"], batch["token_type_ids"])  # each [1, T, H]
        position = position.expand_as(token)                                               # [1, T, H]
        summed = token + segment + position                                                # [1, T, H]
        after = emb.LayerNorm(summed)                                                      # [1, T, H]
    T = len(enc.input_ids)
    return InputRepresentation(
        tokens=list(enc.tokens), input_ids=list(enc.input_ids), segment_ids=list(enc.token_type_ids),
        position_ids=list(range(T)),
        token=_numpy(token[0]), segment=_numpy(segment[0]), position=_numpy(position[0]),
        summed=_numpy(summed[0]), after_layernorm=_numpy(after[0]),
        truncated=full_length > T,
    )


def position_similarity(loaded: Loaded, n: int = 64) -> np.ndarray:
    """Cosine similarity between the first ``n`` learned position embeddings: [n, n].

    Entry (i, j) compares the vector added at position i with the one added at position j.
    The diagonal is 1 and the matrix is symmetric. In a well trained BERT a band runs along
    the diagonal: neighbouring positions got similar vectors, so the model can tell "near"
    from "far" although nothing told it that position 5 lies between 4 and 6. Positions that
    were rarely seen in pre-training (the far end of long sequences) are less orderly; a model
    early in its pre-training has no band yet (:func:`position_band` says which).
    """
    table = encoder_of(loaded.model).embeddings.position_embeddings.weight   # [P, H]
    n = max(1, min(int(n), table.shape[0]))
    with torch.no_grad():
        p = table[:n].float()                                                # [n, H]
        p = p / p.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        sim = p @ p.T                                                        # [n, n]
    sim = _numpy(sim)
    np.fill_diagonal(sim, 1.0)        # exactly 1, not 0.99999994
    return (sim + sim.T) / 2          # exactly symmetric despite rounding in the matmul


NEAR_POSITIONS = 2   # "neighbours": one or two positions apart
BAND = 0.1           # neighbours this much more alike than far positions: a band along the diagonal


def position_band(sim: np.ndarray) -> dict:
    """Whether a matrix of :func:`position_similarity` has a band along its diagonal: the mean cosine of
    positions one or two apart (``near``) against that of positions at least a quarter of the shown
    range apart (``far``, at least 3), and ``band`` when near exceeds far by :data:`BAND` or more. None
    for ``near``/``far`` where the matrix is too small to have such pairs."""
    n = sim.shape[0]
    far_from = max(NEAR_POSITIONS + 1, n // 4)
    gap = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    near_pairs, far_pairs = sim[(gap >= 1) & (gap <= NEAR_POSITIONS)], sim[gap >= far_from]
    near = float(near_pairs.mean()) if near_pairs.size else None
    far = float(far_pairs.mean()) if far_pairs.size else None
    return {"near": near, "far": far, "far_from": far_from,
            "band": near is not None and far is not None and near - far >= BAND}


# ----- maps of vectors in two dimensions -------------------------------------------------------

@dataclass
class Projection:
    """Points squeezed from H dimensions onto a plane: ``coords`` is [N, 2]."""

    coords: np.ndarray
    method: str                                     # "pca" or "tsne"
    explained_variance_ratio: np.ndarray | None = None  # PCA only: share of the variance per axis
    components: np.ndarray | None = None                # PCA only: [2, H] the two directions
    perplexity: float | None = None                     # t-SNE only: about how many neighbours each point keeps


def pca_2d(points) -> Projection:
    """Principal component analysis onto two axes, with numpy's SVD.

    Centre the points, then the right singular vectors of the centred matrix are the
    directions of largest spread; the first two are the axes of the map. Their share of the
    total variance (``explained_variance_ratio``) says how faithful the flat picture is: a
    small share means much of the structure lives in the dimensions we threw away.
    Distances on a PCA map are honest (a linear projection), unlike t-SNE's.
    """
    x = np.asarray(points, dtype=np.float64)                     # [N, H]
    if x.ndim != 2 or x.shape[0] < 2:
        n = x.shape[0] if x.ndim == 2 else 0
        raise ValueError(f"a map needs at least 2 points, and there {'is' if n == 1 else 'are'} {n}: add more")
    centred = x - x.mean(axis=0, keepdims=True)                  # [N, H]
    u, s, vt = np.linalg.svd(centred, full_matrices=False)       # u [N, K], s [K], vt [K, H]
    k = min(2, vt.shape[0])
    # An eigenvector's sign is arbitrary; fix it (largest loading positive) so maps don't flip.
    signs = np.sign(vt[np.arange(k), np.abs(vt[:k]).argmax(axis=1)])
    signs[signs == 0] = 1
    components = vt[:k] * signs[:, None]                         # [k, H]
    coords = centred @ components.T                              # [N, k]
    total = float((s**2).sum())
    ratio = (s[:k] ** 2) / total if total > 0 else np.zeros(k)
    if k < 2:                                                    # only possible with H = 1
        coords = np.hstack([coords, np.zeros((x.shape[0], 2 - k))])
        components = np.vstack([components, np.zeros((2 - k, x.shape[1]))])
        ratio = np.concatenate([ratio, np.zeros(2 - k)])
    return Projection(coords.astype(np.float32), "pca", ratio, components)


def tsne_2d(points, seed: int = 0, perplexity: float | None = None) -> Projection:
    """t-SNE onto two axes (van der Maaten & Hinton 2008; scikit-learn's implementation).

    t-SNE keeps each point's *near neighbours* near and lets everything else go: clusters on
    the map are meaningful, but the distances between clusters and their sizes are not.
    ``perplexity`` is roughly how many neighbours each point cares about; it must be smaller
    than the number of points, so for a handful of words it defaults to (N - 1) / 3.
    The same ``seed`` gives the same map.
    """
    # here, not at the top: scikit-learn takes seconds to import (1.7-3.8 s measured on 2 busy cores), and
    # on the Tokens and embeddings page only t-SNE needs it
    from sklearn.manifold import TSNE

    x = np.asarray(points, dtype=np.float64)                     # [N, H]
    n = x.shape[0] if x.ndim == 2 else 0
    if n < 4:
        raise ValueError(f"t-SNE needs at least 4 points, and there {'is' if n == 1 else 'are'} {n}: add more, or "
                         "choose PCA for fewer")
    if perplexity is None:
        perplexity = min(30.0, (n - 1) / 3)
    perplexity = float(min(max(perplexity, 1.0), n - 1.0))
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed,
                method="exact" if n <= 200 else "barnes_hut", learning_rate="auto")
    return Projection(tsne.fit_transform(x).astype(np.float32), "tsne", perplexity=perplexity)


def nearest_pairs(points, labels: list[str], k: int = 3) -> list[tuple[str, str, float]]:
    """The ``k`` most similar pairs of ``points`` ([N, H]) by cosine in their own H dimensions, most similar
    first: what a map of them should show near, and what a caption can say this model computed."""
    x = np.asarray(points, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    cos = x @ x.T
    pairs = sorted(((float(cos[i, j]), i, j) for i in range(len(x)) for j in range(i + 1, len(x))), reverse=True)
    return [(labels[i], labels[j], c) for c, i, j in pairs[:k]]


def map_caption(points, labels: list[str], proj: Projection, dims: int) -> str:
    """What a map of ``points`` shows, computed: the nearest pairs in the model's own space, and for t-SNE what
    its axes do not mean (its distances between groups, its units)."""
    # each word isolated in its own direction: a right-to-left word beside a number drew as "0.43 مرحبا"
    iso = "\u2068{}\u2069".format
    near = "; ".join(f"{iso(a)}–{iso(b)} {c:.2f}" for a, b, c in nearest_pairs(points, labels))
    text = f"Most similar in this model's own {dims} dimensions (cosine): {near}."
    if proj.method == "tsne":
        text += (f" t-SNE (perplexity {proj.perplexity:.1f}: about how many neighbours each point keeps near) "
                 "keeps near neighbours near; its axes have no units, and the distances between groups and their "
                 "sizes mean nothing.")
    return text


def project(points, method: str = "pca", seed: int = 0) -> Projection:
    """``pca_2d`` or ``tsne_2d`` by name."""
    if method == "pca":
        return pca_2d(points)
    if method == "tsne":
        return tsne_2d(points, seed=seed)
    raise ValueError(f"unknown projection {method!r}; choose 'pca' or 'tsne'")


# Where to write each label around its point, tried in this order (plotly's ``textposition``),
# with the direction the label is pushed: (x, y) in units of half its box, y upwards.
LABEL_PLACES = {"top center": (0, 1), "bottom center": (0, -1), "middle right": (1, 0), "middle left": (-1, 0),
                "top right": (1, 1), "top left": (-1, 1), "bottom right": (1, -1), "bottom left": (-1, -1)}


def _pixels(coords, width: float, height: float) -> np.ndarray:
    """[N, 2] points in pixels (y upwards) on axes that span them plus 5% each side, as plotly's autorange."""
    xy = np.asarray(coords, dtype=np.float64)[:, :2]
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    span = np.where(hi - lo > 0, hi - lo, 1.0)
    return (xy - lo + 0.05 * span) / (1.1 * span) * np.array([width, height])


def label_boxes(coords, labels, places, width: float = 600, height: float = 380, char: float = 7.0,
                line: float = 15.0, marker: float = 4.0) -> list[tuple[float, float, float, float] | None]:
    """The box (x0, y0, x1, y1, in pixels) each label takes on a chart ``width`` × ``height`` pixels
    wide, when label i is written at ``places[i]`` (None: not written).

    A character is about ``char`` pixels wide and a line ``line`` pixels high at plotly's default
    12 px font; the label starts ``marker`` pixels away from its point."""
    boxes = []
    for (x, y), label, place in zip(_pixels(coords, width, height), labels, places):
        if place is None or not str(label):
            boxes.append(None)
            continue
        w, h = char * len(str(label)), line
        dx, dy = LABEL_PLACES[place]
        cx, cy = x + dx * (marker + w / 2), y + dy * (marker + h / 2)
        boxes.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
    return boxes


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def label_places(coords, labels, width: float = 600, height: float = 380, char: float = 7.0, line: float = 15.0,
                 marker: float = 4.0) -> list[str | None]:
    """A ``textposition`` for each point such that no two labels overlap and no label covers
    another point, or None where every place is taken (that label is left to the hover text).

    Greedy, point by point: each label takes the first free place of ``LABEL_PLACES``. Names
    that land close on a map (germany and china, monday and tuesday) end up on different sides
    of their points instead of on top of each other. The sizes are those of ``label_boxes``."""
    size = dict(width=width, height=height, char=char, line=line, marker=marker)
    points = _pixels(coords, width, height)
    n = len(points)
    taken: list[tuple[float, float, float, float]] = []
    out: list[str | None] = []
    for i, label in enumerate(labels):
        chosen = None
        for place in LABEL_PLACES:
            box = label_boxes(coords, [label if j == i else "" for j in range(n)],
                              [place if j == i else None for j in range(n)], **size)[i]
            if box is None:
                break
            covers_a_point = any(box[0] - marker < x < box[2] + marker and box[1] - marker < y < box[3] + marker
                                 for j, (x, y) in enumerate(points) if j != i)
            if not covers_a_point and not any(_overlap(box, b) for b in taken):
                chosen = place
                taken.append(box)
                break
        out.append(chosen)
    return out


# ----- words: out of context and in context --------------------------------------------------

@dataclass
class WordVectors:
    """One vector per word (``vectors`` [N, H]) and the WordPieces each one came from."""

    words: list[str]
    pieces: list[list[str]]
    vectors: np.ndarray


def static_word_vectors(loaded: Loaded, words: list[str]) -> WordVectors:
    """The token-table rows of some words: BERT's embeddings *before* any context.

    A word the vocabulary splits into several WordPieces ("riverbank" -> "river", "##bank")
    gets the average of its pieces' rows; ``pieces`` records the split. A word the tokenizer
    cannot spell at all becomes [UNK]. Words that tokenize the same way are kept once (for an
    uncased model "Bank" and "bank" are one word).
    """
    tok = loaded.tokenizer
    table = encoder_of(loaded.model).embeddings.word_embeddings.weight       # [V, H]
    seen, kept, pieces, rows = set(), [], [], []
    for w in words:
        w = w.strip()
        ps = tok.tokenize(w) if w else []
        if not ps or tuple(ps) in seen:
            continue
        seen.add(tuple(ps))
        ids = [tok.token_to_id(p) for p in ps]
        with torch.no_grad():
            rows.append(_numpy(table[ids].float().mean(dim=0)))               # [H]
        kept.append(w)
        pieces.append(ps)
    if not kept:
        raise ValueError("type one or more words to place on the map")
    return WordVectors(kept, pieces, np.stack(rows))                          # vectors [N, H]


@dataclass
class WordInContext:
    """One word in S sentences: ``vectors[s, l]`` is its vector in sentence s after layer l
    (layer 0 = the input embeddings, layer L = the last encoder layer); [S, L+1, H]."""

    word: str
    pieces: list[str]               # the word's WordPieces
    sentences: list[str]
    spans: list[tuple[int, int]]    # per sentence: [start, end) token positions of the word
    tokens: list[list[str]]         # per sentence: its WordPieces, [CLS] and [SEP] included
    vectors: np.ndarray             # [S, L+1, H]

    @property
    def num_layers(self) -> int:
        return self.vectors.shape[1] - 1


def _find_word(word_pieces: list[str], tokens: list[str]) -> tuple[int, int] | None:
    """[start, end) of the first run of ``tokens`` that spells the whole word: the pieces
    match, the run starts a word (not on a "##" continuation) and ends one (the next token
    is not a continuation), so "bank" is not found inside "banking" -> "bank", "##ing"."""
    n = len(word_pieces)
    for start in range(len(tokens) - n + 1):
        end = start + n
        if tokens[start:end] != word_pieces:
            continue
        if end < len(tokens) and tokens[end].startswith("##"):
            continue
        return start, end
    return None


def word_in_context(loaded: Loaded, word: str, sentences: list[str], max_tokens: int = 128) -> WordInContext:
    """Run every sentence through the encoder and keep ``word``'s vector at every layer.

    The word is looked up by its WordPieces (so case follows the tokenizer: an uncased model
    finds "Bank" for "bank"); when a sentence holds it more than once, the first occurrence
    counts. A word split into several WordPieces is represented by **the average of its
    pieces' vectors** at each layer, the usual way to get one vector per word. A sentence
    without the word raises ValueError naming that sentence.
    """
    tok = loaded.tokenizer
    word = word.strip()
    pieces = tok.tokenize(word)
    if not pieces:
        raise ValueError("type the word to follow through the layers")
    sentences = [s for s in (s.strip() for s in sentences) if s]
    if not sentences:
        raise ValueError("type at least one sentence that holds the word")
    max_tokens = min(max_tokens, loaded.config.max_position_embeddings)
    encs = [tok.encode(s, max_length=max_tokens) for s in sentences]
    spans = []
    for s, e in zip(sentences, encs):
        span = _find_word(pieces, e.tokens)
        if span is None:
            if _find_word(pieces, tok.tokenize(s)) is not None:  # there, past the cut
                raise ValueError(f"the word {word!r} comes after the first {max_tokens} WordPieces of the sentence "
                                 f"{s[:60]!r}..., which is all that is read of it; shorten the sentence before it")
            raise ValueError(f"the word {word!r} (WordPieces {' '.join(pieces)}) is not in the sentence {s!r}")
        spans.append(span)
    batch = tok.tensors(encs, device=_device(loaded.model))  # padded to the longest: [S, T]
    with torch.no_grad():
        out = encoder_of(loaded.model)(**batch, output_hidden_states=True)
        hs = torch.stack(out.hidden_states, dim=1)             # [S, L+1, T, H]
        vectors = torch.stack([hs[i, :, a:b].mean(dim=1)        # [L+1, H], average over the pieces
                               for i, (a, b) in enumerate(spans)])  # [S, L+1, H]
    return WordInContext(word, pieces, sentences, spans, [list(e.tokens) for e in encs], _numpy(vectors))


@dataclass
class ContextSimilarity:
    """Cosine similarity of one word between pairs of sentences, per layer.

    ``cosine[p, l]`` compares sentences ``pairs[p]`` = (i, j) at layer l (0 = embeddings).
    """

    word: str
    sentences: list[str]
    pairs: list[tuple[int, int]]
    cosine: np.ndarray              # [P, L+1]
    context: WordInContext

    def frame(self, width: int = 32) -> pd.DataFrame:
        """Long format: one row per (pair, layer), with a short label for each pair."""
        def short(s):
            return s if len(s) <= width else s[: width - 1] + "…"
        rows = [{"pair": f"{i + 1} vs {j + 1}: “{short(self.sentences[i])}” / “{short(self.sentences[j])}”",
                 "layer": layer, "cosine": float(c)}
                for (i, j), cs in zip(self.pairs, self.cosine) for layer, c in enumerate(cs)]
        return pd.DataFrame(rows)

    def describe(self) -> str:
        """What this model did, in one or two sentences computed from ``cosine``."""
        first, last = self.cosine[:, 0].mean(), self.cosine[:, -1].mean()
        L = self.cosine.shape[1] - 1
        if last < first - 0.05:
            trend = f"so in this model the vectors drift apart: the mean cosine falls from {first:.2f} at layer 0 " \
                    f"to {last:.2f} at layer {L}."
        elif last > first + 0.05:
            trend = f"yet in this model the vectors grow more alike: the mean cosine rises from {first:.2f} at " \
                    f"layer 0 to {last:.2f} at layer {L}."
        else:
            trend = f"yet in this model the vectors hardly move: the mean cosine is {first:.2f} at layer 0 and " \
                    f"{last:.2f} at layer {L}."
        p_lo, p_hi = int(self.cosine[:, -1].argmin()), int(self.cosine[:, -1].argmax())
        text = "Each layer mixes in the rest of the sentence, " + trend
        if len(self.pairs) > 1:
            (i, j), (k, m) = self.pairs[p_hi], self.pairs[p_lo]
            text += (f" At layer {L} the most alike pair is {i + 1} vs {j + 1} ({self.cosine[p_hi, -1]:.2f}), "
                     f"the least alike {k + 1} vs {m + 1} ({self.cosine[p_lo, -1]:.2f}).")
        return text


def contextual_similarity(loaded: Loaded, word: str, sentences: list[str]) -> ContextSimilarity:
    """How alike is the same word in different sentences, layer by layer?

    At layer 0 a word's vector is token + segment + position embedding (after LayerNorm):
    it knows nothing of the other words, so "bank" in "river bank" and in "bank account"
    differ only if "bank" sits at another position. Each encoder layer then mixes in the
    rest of the sentence through self-attention, and the two "bank"s drift apart: BERT's
    representations are *contextual* (paper, Section 3; Ethayarajh 2019 measured this
    drift layer by layer). Compare every pair of the given sentences, [P, L+1].
    """
    ctx = word_in_context(loaded, word, sentences)
    v = ctx.vectors.astype(np.float64)                                       # [S, L+1, H]
    unit = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)  # [S, L+1, H]
    pairs = list(combinations(range(len(ctx.sentences)), 2))
    if not pairs:
        raise ValueError("give at least two sentences to compare")
    cosine = np.stack([(unit[i] * unit[j]).sum(-1) for i, j in pairs])      # [P, L+1]
    return ContextSimilarity(ctx.word, ctx.sentences, pairs, np.clip(cosine, -1.0, 1.0), ctx)
