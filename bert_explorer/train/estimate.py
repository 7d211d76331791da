"""The one count of training work: model FLOPs per token, used for MFU in pre-training logs, in
`bench/train_step.py`, in the ablation planner's time estimate and on the Pre-train page.

Per token, a training step costs about 6·N (forward and backward through every weight that
is multiplied, N = the parameters outside the three embedding tables, which are looked up, not
multiplied) plus 12·L·H·T (attention: scores and the weighted sum, forward and backward, over T
positions) plus 6·V·H times the fraction of tokens that are predicted (the tied MLM decoder runs
only where there is a label: 15 % for MLM, every token for a left-to-right model).
"""
from __future__ import annotations


def flops_per_token(num_layers: int, hidden_size: int, vocab_size: int, non_embedding_params: int,
                    seq_len: int, predicted_fraction: float) -> dict[str, float]:
    """The three terms and their total (``"total"``); ``"N"`` is the parameter count used."""
    parts = {"6N": 6.0 * non_embedding_params,
             "12LHT": 12.0 * num_layers * hidden_size * seq_len,
             "6VHp": 6.0 * vocab_size * hidden_size * predicted_fraction}
    return {**parts, "N": non_embedding_params, "total": sum(parts.values())}


def model_flops_per_token(model, seq_len: int, predicted_fraction: float) -> dict[str, float]:
    """:func:`flops_per_token` of a BertForPreTraining (or anything with ``.bert.embeddings``)."""
    c, emb = model.config, model.bert.embeddings
    tables = {id(emb.word_embeddings.weight), id(emb.position_embeddings.weight),
              id(emb.token_type_embeddings.weight)}
    n = sum(p.numel() for p in model.parameters() if id(p) not in tables)
    return flops_per_token(c.num_layers, c.hidden_size, c.vocab_size, n, seq_len, predicted_fraction)


def encoder_parameters(num_layers: int, hidden_size: int) -> int:
    """The weights of the Transformer layers without building the model: per layer 4·H² in
    attention and 8·H² in the feed-forward block (intermediate 4·H), plus their biases and
    LayerNorms (13·H)."""
    return num_layers * (12 * hidden_size * hidden_size + 13 * hidden_size)
