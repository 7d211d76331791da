"""The CPU levers change the speed of training, not what it learns, and each is taken only where it
measured faster on this CPU.

``model/cpu_kernels.py`` holds the levers (bf16 activations, the fused loss gradient, 16-bit dropout
draws); ``train/levers.py`` times each on this CPU and keeps the choice. The checks: each lever's
arithmetic against PyTorch's own (the loss and its gradient, the drop rate and the scale), a short
bf16 training with all of them against the plain kernels (no further from them than bf16 itself is
from float32), and the choice: the override, the measurement kept per machine, the run's log.
"""
import json
import os

import pytest
import torch
from torch import nn

from bert_explorer.model import BertConfig, BertForPreTraining, BertForSequenceClassification, cpu_kernels
from bert_explorer.train import heap, levers, speed

from test_cpu_kernels import CONFIG, _batch  # the kernels' tiny model and its batch


def test_levers_swap_in_and_out_and_keep_the_parameters():
    torch.manual_seed(0)
    model = cpu_kernels.apply(BertForPreTraining(BertConfig(**CONFIG)), "cpu", cpu_kernels.LEVERS)
    before = dict(model.named_parameters())
    assert all(type(m) is cpu_kernels.BF16LayerNorm for m in model.modules() if isinstance(m, nn.LayerNorm))
    assert all(m.bits == 16 for m in model.modules() if isinstance(m, cpu_kernels.CPUDropout))
    assert model.masked_lm_loss is cpu_kernels.fused_masked_lm_loss
    cpu_kernels.apply(model, "cpu")  # no lever named: the plain kernels again
    assert all(type(m) is nn.LayerNorm for m in model.modules() if isinstance(m, nn.LayerNorm))
    assert all(m.bits == 32 for m in model.modules() if isinstance(m, cpu_kernels.CPUDropout))
    assert model.masked_lm_loss is cpu_kernels.masked_lm_loss
    assert dict(model.named_parameters()) == before and type(model) is BertForPreTraining
    with pytest.raises(ValueError, match="no CPU lever named faster"):
        cpu_kernels.apply(model, "cpu", ("faster",))


def test_the_fused_loss_gradient_serves_evaluation_and_one_backward_pass():
    """Its loss and gradient against PyTorch's: ``test_cpu_kernels.py``, beside the kernel's own."""
    torch.manual_seed(0)
    logits = torch.randn(40, 1000).requires_grad_()
    labels = torch.randint(0, 1000, (40,))
    expected = torch.nn.functional.cross_entropy(logits, labels).item()
    with torch.no_grad():  # evaluation: the loss alone, no gradient computed or kept
        assert cpu_kernels.fused_masked_lm_loss(logits, labels).item() == pytest.approx(expected, rel=1e-6)
    twice = cpu_kernels.fused_masked_lm_loss(logits, labels)
    twice.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="gives its gradient once"):
        twice.backward()


def test_16_bit_draws_drop_the_rounded_probability_and_keep_the_expectation():
    q = cpu_kernels.drawn_probability(0.1, 16)
    assert q == 6554 / 65536 and abs(q - 0.1) < 2 ** -17
    x = torch.ones(500, 1000)
    torch.manual_seed(3)
    y = cpu_kernels.dropout(x, 0.1, training=True, bits=16)
    assert abs((y == 0).float().mean().item() - q) < 0.003  # 500k draws: the standard error is 0.0004
    assert torch.allclose(y[y != 0], torch.tensor(1 / (1 - q)))  # scaled by the probability actually drawn
    # the four 16-bit lanes of each 64-bit draw are independent and unbiased
    for lane in range(4):
        assert abs((y.view(-1)[lane::4] == 0).float().mean().item() - q) < 0.005
    torch.manual_seed(3)
    assert torch.equal(cpu_kernels.dropout(x, 0.1, training=True, bits=16), y)  # the seed decides the mask
    assert cpu_kernels.dropout(x, 1e-6, training=True, bits=16).eq(0).sum() < 10  # too small for 16 bits: 32


def test_bf16_dropout_scales_in_float32_so_kept_elements_are_not_biased():
    """A bf16 copy of 1/0.9 is 1.109375: every kept element would come out 0.16 % small. The scale is
    applied in float32 arithmetic and rounded once, which rounds as often up as down."""
    torch.manual_seed(0)
    x = torch.randn(400, 1000).bfloat16()
    y = cpu_kernels.dropout(x, 0.1, training=True)
    kept = y != 0
    ratio = (y[kept].float() / (x[kept].float() / 0.9))
    assert abs(ratio.mean().item() - 1) < 2e-4


def _train(levers_on: tuple, bf16: bool, steps: int = 6) -> list[float]:
    torch.manual_seed(0)
    model = cpu_kernels.apply(BertForPreTraining(BertConfig(**CONFIG)), "cpu", levers_on).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        torch.manual_seed(100 + step)  # the same dropout draws for each model at each step
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**_batch()).loss  # one batch, learnt by heart
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_bf16_activations_and_the_fused_loss_stay_within_bf16s_own_noise():
    """Six AdamW steps on one batch with the same weights and dropout draws: with the two levers that keep
    the draws (bf16 activations, the fused loss), the losses are no further from the plain kernels' in
    bf16 than bf16 itself is from float32."""
    fp32 = _train((), bf16=False)
    plain = _train((), bf16=True)
    fast = _train((cpu_kernels.BF16_ACTIVATIONS, cpu_kernels.FUSED_LOSS), bf16=True)
    bf16_noise = max(abs(a - b) for a, b in zip(plain, fp32))
    assert 0 < bf16_noise < 0.1
    assert max(abs(a - b) for a, b in zip(fast, plain)) <= 2 * bf16_noise, (fast, plain, fp32)
    assert fast[-1] < fast[0] - 0.3  # and it learns


def test_bf16_activations_hand_on_bf16_in_training_only():
    torch.manual_seed(0)
    model = cpu_kernels.apply(BertForPreTraining(BertConfig(**CONFIG)), "cpu", (cpu_kernels.BF16_ACTIVATIONS,))
    batch = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.train()
        assert model.bert(batch["input_ids"]).last_hidden_state.dtype == torch.bfloat16
        model.eval()  # evaluation and the probes compute as the plain model does
        assert model.bert(batch["input_ids"]).last_hidden_state.dtype == torch.float32


def test_the_override_names_the_levers_and_refuses_unknown_names(monkeypatch):
    model = BertForPreTraining(BertConfig(**CONFIG))
    classifier = BertForSequenceClassification(BertConfig(**CONFIG), num_labels=2)
    monkeypatch.setenv(levers.ENV, "all")
    assert levers.chosen(model, "cpu", torch.bfloat16) == levers.LEVERS
    assert cpu_kernels.FUSED_LOSS not in levers.chosen(classifier, "cpu", torch.bfloat16)  # no MLM loss there
    assert cpu_kernels.BF16_ACTIVATIONS not in levers.chosen(model, "cpu", None)  # fp32: nothing to keep in bf16
    assert levers.chosen(model, "cuda", torch.bfloat16) == ()  # a GPU keeps PyTorch's kernels
    monkeypatch.setenv(levers.ENV, "none")
    assert levers.chosen(model, "cpu", torch.bfloat16) == ()
    assert "as BERT_EXPLORER_CPU_LEVERS says" in levers.said(())
    monkeypatch.setenv(levers.ENV, "16-bit dropout draws")
    assert levers.chosen(model, "cpu", torch.bfloat16) == (cpu_kernels.DROPOUT_16,)
    monkeypatch.setenv(levers.ENV, "faster")
    with pytest.raises(ValueError, match="no CPU lever named faster; say none, all, measured"):
        levers.chosen(model, "cpu", torch.bfloat16)


def test_each_lever_is_taken_where_it_measured_faster_and_the_reading_is_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path))
    monkeypatch.setenv(levers.ENV, "measured")
    model = BertForPreTraining(BertConfig(**CONFIG, max_position_embeddings=64))  # timed on sequences of 64
    torch.manual_seed(7)
    state = torch.get_rng_state()
    chosen = levers.chosen(model, "cpu", torch.bfloat16, n_threads=1)  # measured here, for real
    assert torch.equal(torch.get_rng_state(), state)  # the job's random stream goes on as if nothing was timed
    kept = json.loads((tmp_path / speed.SPEED_FILE).read_text())[speed.machine_name()]
    gains = {name: kept[key]["flop_s"] for name in levers.LEVERS
             for key in kept if key.startswith(f"lever {name}: pre-training L=2 H=32 I=64 V=100 threads=1 bf16")}
    assert set(gains) == set(levers.LEVERS) and all(0.2 < g < 5 for g in gains.values())
    assert chosen == tuple(n for n in levers.LEVERS if gains[n] >= levers.GAIN)

    # A second job of these widths reads the kept choice; what it would measure does not matter.
    monkeypatch.setattr(levers, "_training_step", lambda *a: pytest.fail("measured again"))
    assert levers.chosen(model, "cpu", torch.bfloat16, n_threads=1) == chosen
    # Where the readings say so, the choice follows them.
    data = json.loads((tmp_path / speed.SPEED_FILE).read_text())
    for key, reading in data[speed.machine_name()].items():
        reading["flop_s"] = 1.2 if cpu_kernels.DROPOUT_16 in key else 0.9
    (tmp_path / speed.SPEED_FILE).write_text(json.dumps(data))
    assert levers.chosen(model, "cpu", torch.bfloat16, n_threads=1) == (cpu_kernels.DROPOUT_16,)
    said = levers.said((cpu_kernels.DROPOUT_16,))
    assert "16-bit dropout draws (each measured at least 1% faster on this CPU)" in said
    assert os.environ["BERT_EXPLORER_CACHE"] == str(tmp_path)


def test_a_lever_in_doubt_after_seven_pairs_is_timed_over_more(monkeypatch, tmp_path):
    """Seven pairs decide where they are clear; where their median is within SURE of GAIN, more pairs
    are timed and the median of all decides."""
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path))
    calls = []

    def step_of(ratio):  # a step that the lever makes ``ratio`` times faster
        def fake(config, pretraining, bf16, on, predicted=levers.MASKED):
            def once():
                calls.append(bool(on))
                return 1.0 / ratio if on else 1.0
            return once
        return fake

    for i, (ratio, pairs) in enumerate(((1.2, levers.PAIRS), (0.8, levers.PAIRS),
                                        (1.02, levers.PAIRS + levers.MORE_PAIRS))):
        calls.clear()
        monkeypatch.setattr(levers, "_training_step", step_of(ratio))
        config = BertConfig(**{**CONFIG, "intermediate_size": 64 + 8 * i})  # each its own kept reading
        assert levers.gain(cpu_kernels.DROPOUT_16, config, True, 1, True) == pytest.approx(ratio)
        assert calls.count(True) == pairs + 1  # and one warm-up step


def test_the_timed_layer_weighs_against_the_head_as_the_jobs_layers_do(monkeypatch):
    """One layer stands for L: its masked-LM head labels 0.15 / L of the positions, so a lever acting in
    every layer is not read at a fraction of its gain."""
    labelled, layers_timed = [], []
    original = BertForPreTraining.forward

    def forward(self, input_ids, labels=None, **kw):
        labelled.append((labels != -100).float().mean().item())
        layers_timed.append(self.config.num_layers)
        return original(self, input_ids, labels=labels, **kw)
    monkeypatch.setattr(BertForPreTraining, "forward", forward)
    for layers, predicted in ((1, 0.15), (4, 0.15), (4, 1.0)):
        config = BertConfig(**{**CONFIG, "num_layers": layers, "max_position_embeddings": 128})
        levers._training_step(config, True, False, (), predicted=predicted)()
    assert layers_timed == [1, 1, 1]
    one, four, left_to_right = labelled  # L = 1: 15 %; L = 4: 3.75 %; each with one forced position in 128
    assert 0.12 < one < 0.2 and 0.03 < four < 0.07
    assert 0.2 < left_to_right < 0.3  # a left-to-right model predicts every position: 1 / 4


def test_a_left_to_right_pre_training_chooses_its_levers_on_a_head_that_predicts_every_position(
        tmp_path, tiny_vocab, monkeypatch):
    """The levers are timed on the job's own share of predicted positions: a masked LM's 15 %, a left-to-right
    model's every one (its loss weighs about seven times more against the layers), each kept on its own."""
    from bert_explorer.train.pretrain import run_pretraining
    from bert_explorer.train.pretrain_config import PretrainConfig
    from test_pretrain import TINY

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(levers.ENV, "measured")
    asked = []

    def gain(lever, config, pretraining, n_threads, bf16, predicted=levers.MASKED):
        asked.append((lever, predicted))
        return 2.0 if lever == cpu_kernels.FUSED_LOSS else 0.5
    monkeypatch.setattr(levers, "gain", gain)
    for objective, share in (("ltr", 1.0), ("mlm+nsp", 0.15)):
        asked.clear()
        run_pretraining(PretrainConfig(**{**TINY, "vocab": tiny_vocab}, objective=objective, max_steps=1,
                                       precision="fp32"), tmp_path / objective, progress=False)
        assert asked and {p for _, p in asked} == {share}, objective
        assert "CPU levers: fused loss gradient (each measured" in (tmp_path / objective / "log.txt").read_text()
    config = BertConfig(**CONFIG)
    assert levers._key(cpu_kernels.FUSED_LOSS, config, True, 1, True, 1.0) != \
        levers._key(cpu_kernels.FUSED_LOSS, config, True, 1, True)


def test_a_pre_training_on_the_cpu_trains_with_the_levers_and_its_log_names_them(tmp_path, tiny_vocab, monkeypatch):
    from bert_explorer.runs.run import Run
    from bert_explorer.train.pretrain import run_pretraining
    from bert_explorer.train.pretrain_config import PretrainConfig
    from test_pretrain import TINY

    monkeypatch.setenv(levers.ENV, "all")
    run_pretraining(PretrainConfig(**{**TINY, "vocab": tiny_vocab}, max_steps=3, precision="fp32"), tmp_path,
                    progress=False)
    log = (tmp_path / "log.txt").read_text()
    # in fp32 there is no bf16 activation to keep: the others
    heap_kept = ", memory kept between steps" if heap.available() else ""
    assert f"CPU levers: fused loss gradient, 16-bit dropout draws{heap_kept} (as BERT_EXPLORER_CPU_LEVERS says)" in log
    losses = [m["loss"] for m in Run(tmp_path).metrics() if m["split"] == "train"]
    assert len(losses) == 3 and all(0 < loss < 20 for loss in losses)
