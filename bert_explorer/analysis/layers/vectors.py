"""Every layer's vectors for words and sentences, computed once with the model frozen.

The probing page (``probing.py``) trains a small classifier on each layer's vectors; it needs the
vectors of thousands of words at every layer (the embedding output, then layers 1..L, as in
``hidden_states``). They are computed here in batches of similar length (little padding, so
little wasted work) and returned in the input's order as float16: half the memory and disk of
float32, and far more precision than a linear probe can use.

* ``word_vectors``: the vector of the **first WordPiece** of each word, as the BERT paper does
  for NER (Section 5.3: "we use the representation of the first sub-token as the input to the
  token-level classifier").
* ``sentence_vectors``: one vector per text, the mean of its WordPieces' vectors (``"mean"``:
  [CLS] and [SEP] left out) or the [CLS] vector (``"cls"``). At the embedding layer the [CLS]
  vector is the same for every input, so mean pooling is the fairer way to ask what each layer
  knows about a whole text.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from ...checkpoint import Loaded, encoder_of

Progress = Callable[[float, str], None]


def _batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first: a memory problem shows at once)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _hidden(loaded: Loaded, encs) -> np.ndarray:
    """[B, L+1, T, H] float32 hidden states of one padded batch."""
    encoder = encoder_of(loaded.model)
    device = next(encoder.parameters()).device
    with torch.no_grad():
        out = encoder(**loaded.tokenizer.tensors(encs, device=device), output_hidden_states=True)
    return torch.stack(out.hidden_states, 1).float().cpu().numpy()


def encode_words(loaded: Loaded, sentences: Sequence[Sequence[str]], max_tokens: int = 128) -> list:
    """The encodings :func:`word_vectors` runs through the model (and its estimate counts)."""
    return loaded.tokenizer.encode_words([list(s) for s in sentences], max_length=max_tokens)


def encode_texts(loaded: Loaded, texts: Sequence[str], max_tokens: int = 128) -> list:
    """The encodings :func:`sentence_vectors` runs through the model (and its estimate counts)."""
    return loaded.tokenizer.encode_batch(list(texts), max_length=max_tokens)


def first_pieces(enc) -> list[tuple[int, int]]:
    """(word, position) of the first WordPiece of each word that ``enc`` kept: one row each."""
    firsts, seen = [], set()
    for t, w in enumerate(enc.word_ids):
        if w is not None and w not in seen:
            seen.add(w)
            firsts.append((w, t))
    return firsts


def batch_shapes(encs, batch_size: int = 32) -> list[tuple[int, int]]:
    """(inputs, padded positions) of each forward batch over ``encs``, as the vectors are computed."""
    lengths = [len(e.input_ids) for e in encs]
    return [(len(idx), max(lengths[i] for i in idx)) for idx in _batches(lengths, batch_size)]


def word_vectors(loaded: Loaded, sentences: Sequence[Sequence[str]], max_tokens: int = 128, batch_size: int = 32,
                 progress: Progress | None = None) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Vectors [N, L+1, H] (float16) of the first WordPiece of each word, and for each row its
    (sentence, word) index. A word cut off by ``max_tokens`` has no row."""
    encs = encode_words(loaded, sentences, max_tokens)
    L, H = loaded.config.num_layers, loaded.config.hidden_size
    per_sentence: list[np.ndarray | None] = [None] * len(encs)
    firsts: list[list[tuple[int, int]]] = [[] for _ in encs]
    batches = _batches([len(e.input_ids) for e in encs], batch_size)
    for k, idx in enumerate(batches):
        hs = _hidden(loaded, [encs[i] for i in idx])
        for b, i in enumerate(idx):
            firsts[i] = first_pieces(encs[i])
            per_sentence[i] = hs[b][:, [t for _, t in firsts[i]]].transpose(1, 0, 2).astype(np.float16)
        if progress:
            progress((k + 1) / len(batches), f"vectors of {sum(len(b) for b in batches[:k + 1]):,} of "
                                             f"{len(encs):,} sentences")
    rows = [(s, w) for s in range(len(encs)) for w, _ in firsts[s]]
    chunks = [x for x in per_sentence if x is not None and len(x)]
    return (np.concatenate(chunks) if chunks else np.zeros((0, L + 1, H), np.float16)), rows


def sentence_vectors(loaded: Loaded, texts: Sequence[str], pool: str = "mean", max_tokens: int = 128,
                     batch_size: int = 32, progress: Progress | None = None) -> np.ndarray:
    """One vector per text at every layer: [N, L+1, H] float16 (mean of the WordPieces or [CLS])."""
    if pool not in ("mean", "cls"):
        raise ValueError(f"pool must be 'mean' or 'cls', not {pool!r}")
    encs = encode_texts(loaded, texts, max_tokens)
    L, H = loaded.config.num_layers, loaded.config.hidden_size
    out = np.zeros((len(encs), L + 1, H), np.float16)
    batches = _batches([len(e.input_ids) for e in encs], batch_size)
    for k, idx in enumerate(batches):
        hs = _hidden(loaded, [encs[i] for i in idx])
        for b, i in enumerate(idx):
            if pool == "cls":
                out[i] = hs[b, :, 0]
            else:
                keep = [t for t, w in enumerate(encs[i].word_ids) if w is not None]
                out[i] = hs[b][:, keep].mean(1) if keep else hs[b, :, 0]
        if progress:
            progress((k + 1) / len(batches), f"vectors of {sum(len(b) for b in batches[:k + 1]):,} of "
                                             f"{len(encs):,} texts")
    return out
