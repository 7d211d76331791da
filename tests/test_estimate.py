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


def test_the_time_estimate_uses_a_measured_run_of_the_same_size_on_this_device(tmp_path):
    from bert_explorer.train.estimate import device_key, pretrain_estimate
    from bert_explorer.train.runs import Run

    run = Run(tmp_path / "earlier").create({"size": "mini", "vocab_size": 8000, "max_seq_length": 128}, "pretrain")
    run.write_status(state="finished", device=device_key())
    for step in range(1, 6):
        run.log_metrics({"step": step, "split": "train", "loss": 5.0, "tokens_per_s": 2000.0})
    est = pretrain_estimate("mini", steps=100, batch_size=32, seq_len=128, vocab_size=8000, root=tmp_path)
    # 100 x 32 x 128 tokens at the 2,000 tokens/s measured for this size here
    assert est["seconds"] == pytest.approx(100 * 32 * 128 / 2000.0, rel=1e-6)
    assert est["basis"].startswith("measured: run earlier")
    other = pretrain_estimate("tiny", steps=100, batch_size=32, seq_len=128, vocab_size=8000, root=tmp_path)
    assert other["basis"].startswith("stated:")  # another size is not measured by that run
