"""The CPU kernels sit outside the reference model and change its speed, not its results.

``model/bert.py`` and ``model/heads.py`` read as the paper does; ``model/cpu_kernels.py`` is swapped
in at load where training runs on the CPU. In eval mode a model with the kernels computes the
numbers the plain one does; in training its dropout draws another random stream, so there the
check is that the same fraction is dropped, with the same scale, and the losses agree in
distribution.
"""
import inspect
import statistics

import pytest
import torch
from torch import nn

from bert_explorer.model import BertConfig, BertForPreTraining, BertForSequenceClassification, bert, cpu_kernels, heads
from bert_explorer.model.bert import BertSelfAttention

CONFIG = dict(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)


def _pair():
    torch.manual_seed(0)
    plain = BertForPreTraining(BertConfig(**CONFIG))
    fast = BertForPreTraining(BertConfig(**CONFIG))
    fast.load_state_dict(plain.state_dict())
    return plain, cpu_kernels.apply(fast, "cpu")


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (4, 16), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 11:] = 0
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(4, 16, generator=g) < 0.3
    labels[chosen] = ids[chosen]
    return dict(input_ids=ids, attention_mask=mask, labels=labels,
                next_sentence_label=torch.randint(0, 2, (4,), generator=g))


@pytest.mark.parametrize("architecture", [BertForPreTraining, BertForSequenceClassification])
def test_the_reference_model_has_no_cpu_kernel_in_it(architecture):
    model = architecture(BertConfig(**CONFIG))
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert dropouts and all(type(m) is nn.Dropout for m in dropouts)
    assert all(type(m) is BertSelfAttention for m in model.modules() if isinstance(m, BertSelfAttention))
    assert "masked_lm_loss" not in vars(model)  # the class's own cross-entropy
    for module in (bert, heads):  # no branch on the device or the compiler: one path for the paper's maths
        source = inspect.getsource(module)
        assert "device.type" not in source and "is_compiling" not in source, module.__name__


def test_applying_the_kernels_keeps_the_parameters_and_the_architecture_name():
    plain, fast = _pair()
    before = {name: p for name, p in fast.named_parameters()}
    assert cpu_kernels.apply(fast, torch.device("cpu")) is fast  # a second time changes nothing
    assert {name: p for name, p in fast.named_parameters()} == before
    assert list(fast.state_dict()) == list(plain.state_dict())
    assert type(fast) is BertForPreTraining  # checkpoints record the class name as the architecture
    assert all(type(m) is cpu_kernels.CPUDropout for m in fast.modules() if isinstance(m, nn.Dropout))
    off_cpu = BertForPreTraining(BertConfig(**CONFIG))
    cpu_kernels.apply(off_cpu, "cuda")  # a GPU keeps PyTorch's fused kernels: nothing is swapped
    assert all(type(m) is nn.Dropout for m in off_cpu.modules() if isinstance(m, nn.Dropout))


def test_in_eval_mode_the_kernels_give_the_plain_models_numbers():
    plain, fast = _pair()
    plain.eval(), fast.eval()
    batch = _batch()
    with torch.no_grad():
        a, b = plain(**batch), fast(**batch)
        assert torch.equal(plain(batch["input_ids"]).mlm_logits, fast(batch["input_ids"]).mlm_logits)
        c = fast(**batch, output_attentions=True)
    assert torch.equal(a.masked_logits, b.masked_logits) and torch.equal(a.nsp_logits, b.nsp_logits)
    assert b.loss.item() == pytest.approx(a.loss.item(), rel=1e-6)  # the chunked sum rounds in its own order
    assert len(c.attentions) == 2 and b.attentions is None


def test_in_training_the_kernels_give_losses_of_the_same_distribution():
    """The same weights and batch, 40 dropout draws each: the mean losses agree within the noise
    that dropout itself makes (the kernels draw their masks from another random stream)."""
    plain, fast = _pair()
    plain.train(), fast.train()
    batch = _batch()
    with torch.no_grad():
        losses = {name: [model(**batch).loss.item() for _ in range(40)] for name, model in
                  (("plain", plain), ("fast", fast))}
    a, b = losses["plain"], losses["fast"]
    spread = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    assert statistics.stdev(b) > 0  # dropout is on
    assert abs(statistics.mean(a) - statistics.mean(b)) < 4 * spread, (statistics.mean(a), statistics.mean(b), spread)
    assert 0.5 < statistics.stdev(b) / statistics.stdev(a) < 2


def test_in_training_attention_takes_the_explicit_path_and_returns_only_what_was_asked():
    _, fast = _pair()
    fast.train()
    attention = fast.bert.encoder.layer[0].attention.self
    h = torch.randn(2, 8, 32)
    torch.manual_seed(5)
    context, probs = attention(h)
    assert probs is None
    torch.manual_seed(5)
    context_again, probs = attention(h, output_attentions=True)
    assert torch.equal(context, context_again) and probs.shape == (2, 2, 8, 8)  # the same path, the same draws


def test_cpu_dropout_drops_p_scales_the_rest_and_follows_the_seed():
    x = torch.ones(400, 1000, requires_grad=True)
    torch.manual_seed(3)
    y = cpu_kernels.dropout(x, 0.1, training=True)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.003  # 400k draws: the standard error is 0.0005
    assert torch.allclose(y[y != 0], torch.tensor(1 / 0.9))  # inverted dropout: E[y] = x
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # the gradient flows through the kept elements only
    torch.manual_seed(3)
    assert torch.equal(cpu_kernels.dropout(x, 0.1, training=True), y)  # the same seed, the same mask
    assert not torch.equal(cpu_kernels.dropout(x, 0.1, training=True), y)
    assert cpu_kernels.dropout(x, 0.1, training=False) is x
    # rows and columns are independent: no lane of the 64-bit draws is biased
    assert (y == 0).float().mean(0).std() < 0.03 and abs((y[:, 1::2] == 0).float().mean() - 0.1) < 0.004


@pytest.mark.parametrize("bits", [32, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_the_mask_built_in_integer_arithmetic_drops_exactly_the_draws_under_the_threshold(bits, dtype):
    """The mask is built from the draws' bits (a shift, a subtraction, the sign bit, the bits of 1.0), not by
    comparing: it must drop exactly the elements a comparison of the same draws with the threshold drops, in
    every dtype and lane width, and the gradient must be the select's."""
    p, n = 0.1, 40_000
    x = torch.randn(200, 200).to(dtype).requires_grad_()
    torch.manual_seed(5)
    y = cpu_kernels.dropout(x, p, training=True, bits=bits)
    torch.manual_seed(5)  # the same draws, compared as the definition says
    lanes = torch.empty(n // (64 // bits), dtype=torch.int64).random_(-2**63, None)
    q = cpu_kernels.drawn_probability(p, bits)
    drawn = lanes.view(torch.int32 if bits == 32 else torch.int16)
    keep = (drawn >= -2**(bits - 1) + round(q * 2**bits)).view(200, 200)
    expected = torch.where(keep, x.detach() * (1.0 / (1.0 - q)), 0.0)
    assert torch.equal(y.detach(), expected)
    assert abs(1 - keep.float().mean().item() - p) < 0.006  # 40k draws: the standard error is 0.0015
    g = torch.randn(200, 200).to(dtype)
    y.backward(g)
    assert torch.equal(x.grad, torch.where(keep, g * (1.0 / (1.0 - q)), 0.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("loss", [cpu_kernels.masked_lm_loss, cpu_kernels.fused_masked_lm_loss])
def test_chunked_cross_entropy_equals_pytorchs_loss_and_gradient(dtype, loss):
    """The kernel's loss, and the ``fused loss gradient`` lever's, against PyTorch's."""
    torch.manual_seed(0)
    n = 2 * cpu_kernels.CE_ROWS + 5  # chunks of CE_ROWS rows and a short last one
    logits = (torch.randn(n, 1000) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 1000, (n,))
    ours = loss(logits, labels)
    (ours * 3).backward()  # an upstream gradient other than 1
    got = logits.grad.clone()
    logits.grad = None
    expected = torch.nn.functional.cross_entropy(logits.float(), labels)  # PyTorch's, on an fp32 copy
    (expected * 3).backward()
    assert ours.dtype == torch.float32 and ours.item() == pytest.approx(expected.item(), rel=1e-6)
    assert got.dtype == dtype
    if dtype == torch.float32 or loss is cpu_kernels.masked_lm_loss:
        assert torch.allclose(got.float(), logits.grad.float(), atol=1e-7 if dtype == torch.float32 else 1e-5)
    else:  # the fused gradient is rounded to bf16 where it is made, and again when the upstream 3 scales it
        assert torch.allclose(got.float(), logits.grad.float(), atol=1e-7, rtol=2 ** -7)


@pytest.mark.parametrize("bf16_lever", [False, True])
@pytest.mark.parametrize("autocast", [False, True])
def test_training_attention_scales_the_query_not_the_scores_and_computes_the_same_numbers(autocast, bf16_lever):
    """Training's explicit path multiplies the query projection by 1/√d instead of the [B, A, T, T] scores.
    Here 1/√d = 1/4 (d = 16), a power of two: every number is the reference path's, with the same draws."""
    from torch.utils._python_dispatch import TorchDispatchMode

    _, fast = _pair()
    fast.train()
    attention = fast.bert.encoder.layer[0].attention.self
    attention.bf16_probabilities = bf16_lever
    h = torch.randn(2, 8, 32)
    mask = torch.zeros(2, 1, 1, 8)
    mask[1, ..., 6:] = torch.finfo(torch.float32).min

    scaled_scores = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.startswith("mul") and getattr(args[0], "shape", None) == (2, 2, 8, 8) \
                    and any(isinstance(a, float) and a == attention.scale for a in args[1:]):
                scaled_scores.append(func)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        torch.manual_seed(5)
        with Watch():
            got, probs = attention(h, mask)
        torch.manual_seed(5)
        q, k, v = (attention._split_heads(linear(h)) for linear in (attention.query, attention.key, attention.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) * attention.scale
        if bf16_lever and autocast:  # the lever: bf16 probabilities
            with torch.autocast("cpu", enabled=False):
                context = torch.matmul(attention.dropout((scores + mask.to(scores.dtype)).softmax(-1)),
                                       v.to(scores.dtype))
        else:
            context = torch.matmul(attention.dropout((scores + mask).softmax(-1)), v)
    assert probs is None and not scaled_scores
    assert got.dtype == context.dtype and torch.equal(got, context.transpose(1, 2).reshape(2, 8, 32))
