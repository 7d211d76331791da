"""One count of training FLOPs (train/estimate.py) for the logs, the bench and the planner."""
import pytest

from bert_explorer.model import BertForPreTraining, preset
from bert_explorer.train.estimate import encoder_parameters, flops_per_token, model_flops_per_token


@pytest.mark.parametrize("size", ["tiny", "mini", "small"])
def test_the_planners_count_without_a_model_matches_the_built_model(size):
    model = BertForPreTraining(preset(size, vocab_size=8000))
    c = model.config
    built = model_flops_per_token(model, 128, 0.15)
    planned = flops_per_token(c.num_layers, c.hidden_size, c.vocab_size,
                              encoder_parameters(c.num_layers, c.hidden_size), 128, 0.15)
    layers = sum(p.numel() for p in model.bert.encoder.parameters())
    assert encoder_parameters(c.num_layers, c.hidden_size) == layers  # 12·H² + 13·H per layer, exactly
    # the built count adds the pooler, the heads and the embedding LayerNorm: a few per cent
    assert 1.0 < built["total"] / planned["total"] < 1.15


def test_only_the_looked_up_tables_are_left_out_of_n():
    model = BertForPreTraining(preset("tiny", vocab_size=1000))
    emb = model.bert.embeddings
    tables = emb.word_embeddings.weight.numel() + emb.position_embeddings.weight.numel() + \
        emb.token_type_embeddings.weight.numel()
    total_params = sum(p.numel() for p in model.parameters())  # the tied decoder weight counts once
    f = model_flops_per_token(model, 64, 0.15)
    assert f["N"] == total_params - tables
    assert f["total"] == pytest.approx(6 * f["N"] + 12 * 2 * 128 * 64 + 6 * 1000 * 128 * 0.15)
