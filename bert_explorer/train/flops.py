"""One count of training FLOPs (6·N + 12·L·H·T + 6·V·H·p a token) and of an encoder's weights, for the logs, the
bench, the estimates and the planner."""
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


def encoder_parameters(num_layers: int, hidden_size: int, intermediate_size: int | None = None) -> int:
    """The weights of the Transformer layers without building the model: per layer 4·H² in
    attention and 2·H·I in the feed-forward block (I = 4·H unless given: 8·H²), plus their biases
    and LayerNorms (9·H + I: 13·H)."""
    H, I = hidden_size, intermediate_size or 4 * hidden_size
    return num_layers * (4 * H * H + 2 * H * I + 9 * H + I)
