"""Contextual features, as in google-research/bert's ``extract_features.py``.

The feature-based approach of the paper (Section 5.3, Table 7) uses the activations of one
or more layers as fixed input features for another model. This writes them out in the same
JSON-lines layout as the original script, so existing tools that read that format work:

    {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [{"index": -1, "values": [...]}, ...]}, ...]}

Layer indexes count encoder layers as the original does: -1 is the last layer, 0 the first
(the embedding output is not an encoder layer there).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from ...checkpoint import Loaded, encoder_of

PAIR_SEPARATOR = "|||"  # google-research/bert's extract_features.py writes a pair "A ||| B"


def parse_example(line: str) -> str | tuple[str, str]:
    """One input line: a sentence, or a pair written ``A ||| B``."""
    line = line.strip()
    if PAIR_SEPARATOR in line:
        a, b = line.split(PAIR_SEPARATOR, 1)
        return a.strip(), b.strip()
    return line


def extract_features(
    loaded: Loaded,
    examples: Iterable[str | tuple[str, str]],
    layers: list[int] = (-1, -2, -3, -4),
    max_seq_length: int = 128,
    batch_size: int = 8,
    decimals: int = 6,
) -> Iterator[dict]:
    """Yield one JSON-ready dict per example (padding positions are left out)."""
    encoder = encoder_of(loaded.model)
    L = encoder.config.num_layers
    for i in layers:
        if not -L <= i < L:
            raise ValueError(f"layer index {i} is out of range for a {L}-layer model (use {-L}..{L - 1})")
    device = next(encoder.parameters()).device
    batch: list = []
    index = 0

    def flush():
        nonlocal index
        encs = loaded.tokenizer.encode_batch(batch, max_length=max_seq_length)
        tensors = loaded.tokenizer.tensors(encs, device=device)
        with torch.no_grad():
            out = encoder(**tensors, output_hidden_states=True)
        per_layer = out.hidden_states[1:]  # encoder layers only, [B, T, H] each
        for b, enc in enumerate(encs):
            tokens = []
            for t, token in enumerate(enc.tokens):
                tokens.append({
                    "token": token,
                    "layers": [
                        {"index": li, "values": [round(float(x), decimals) for x in per_layer[li][b, t].tolist()]}
                        for li in layers
                    ],
                })
            yield {"linex_index": index, "features": tokens}
            index += 1

    for ex in examples:
        batch.append(ex)
        if len(batch) == batch_size:
            yield from flush()
            batch = []
    if batch:
        yield from flush()
