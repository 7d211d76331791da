"""Our BERT against transformers' on the same weights: the strongest check we have that the
architecture (embeddings, post-LN layers, erf GELU, masks, pooler, heads) is the paper's."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

from bert_explorer import checkpoint  # noqa: E402
from bert_explorer.model import BertConfig, BertForPreTraining  # noqa: E402

SENTENCES = ["The cat sat on the mat.", "A much longer sentence, about the river bank, that needs padding!"]
PAIRS = [("He went to the store.", "He bought a gallon of milk."), ("Penguins are flightless.", "Yes.")]


@pytest.fixture(scope="module")
def both(minilm_dir):
    ours = checkpoint.load(minilm_dir)
    hf = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    return ours, hf


@pytest.mark.parametrize("examples", [SENTENCES, PAIRS], ids=["single", "pairs"])
def test_minilm_hidden_states_and_attentions_match_transformers(both, examples):
    ours, hf = both
    batch = ours.tokenizer.batch(examples)
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding"
    with torch.no_grad():
        a = ours.model(**batch, output_hidden_states=True, output_attentions=True)
        b = hf(**batch, output_hidden_states=True, output_attentions=True)
    assert len(a.hidden_states) == len(b.hidden_states) == 7
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert (x - y).abs().max() < 1e-5
    assert len(a.attentions) == 6
    for x, y in zip(a.attentions, b.attentions):
        assert x.shape == y.shape == (2, 12, batch["input_ids"].shape[1], batch["input_ids"].shape[1])
        assert (x - y).abs().max() < 1e-5
    assert (a.pooler_output - b.pooler_output).abs().max() < 1e-5


def test_fast_path_equals_explicit_path(both):
    ours, _ = both
    batch = ours.tokenizer.batch(PAIRS)
    with torch.no_grad():
        fast = ours.model(**batch).last_hidden_state
        slow = ours.model(**batch, output_attentions=True).last_hidden_state
    # Different float32 kernels (fused SDPA vs matmul+softmax) round differently: values of
    # magnitude ~5 agree to ~1e-5 relative.
    assert (fast - slow).abs().max() < 1e-4


def _tiny_hf_config(**kw):
    return transformers.BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=256, **kw)


def test_pretraining_heads_match_transformers_on_random_weights(tmp_path):
    hf = transformers.BertForPreTraining(_tiny_hf_config()).eval()
    hf.save_pretrained(tmp_path)
    ours = checkpoint.read_state_dict(tmp_path)
    model = BertForPreTraining(BertConfig.load(tmp_path))
    model.load_state_dict(checkpoint._normalise_keys(ours, model), strict=False)
    model.eval()
    ids = torch.randint(5, 200, (3, 17))
    tt = torch.cat([torch.zeros(3, 9, dtype=torch.long), torch.ones(3, 8, dtype=torch.long)], 1)
    am = torch.ones(3, 17, dtype=torch.long)
    am[1, 12:] = 0
    with torch.no_grad():
        a = model(ids, tt, am)
        b = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
    assert (a.mlm_logits - b.prediction_logits).abs().max() < 1e-5
    assert (a.nsp_logits - b.seq_relationship_logits).abs().max() < 1e-5


def test_mlm_at_masked_positions_equals_full_logits_there():
    model = BertForPreTraining(BertConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2,
                                          intermediate_size=64)).eval()
    ids = torch.randint(5, 100, (2, 10))
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 7] = 11, 42
    with torch.no_grad():
        full = model(ids).mlm_logits
        sparse = model(ids, labels=labels)
    assert sparse.mlm_logits.shape == (2, 100)
    assert torch.allclose(sparse.mlm_logits[0], full[0, 3], atol=1e-6)
    assert torch.allclose(sparse.mlm_logits[1], full[1, 7], atol=1e-6)
    expected = torch.nn.functional.cross_entropy(full[[0, 1], [3, 7]], torch.tensor([11, 42]))
    assert torch.allclose(sparse.mlm_loss, expected, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mlm_cross_entropy_equals_pytorchs_loss_and_gradient(dtype):
    from bert_explorer.model.heads import CE_ROWS, mlm_cross_entropy

    torch.manual_seed(0)
    n = 2 * CE_ROWS + 5  # chunks of CE_ROWS rows and a short last one
    logits = (torch.randn(n, 1000) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 1000, (n,))
    ours = mlm_cross_entropy(logits, labels)
    (ours * 3).backward()  # an upstream gradient other than 1
    got = logits.grad.clone()
    logits.grad = None
    expected = torch.nn.functional.cross_entropy(logits.float(), labels)  # PyTorch's, on an fp32 copy
    (expected * 3).backward()
    assert ours.dtype == torch.float32 and ours.item() == pytest.approx(expected.item(), rel=1e-6)
    assert got.dtype == dtype
    assert torch.allclose(got.float(), logits.grad.float(), atol=1e-7 if dtype == torch.float32 else 1e-5)


def test_cpu_dropout_drops_p_scales_the_rest_and_follows_the_seed():
    from bert_explorer.model.bert import dropout
    x = torch.ones(400, 1000, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.1, training=True)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.003  # 400k draws: the standard error is 0.0005
    assert torch.allclose(y[y != 0], torch.tensor(1 / 0.9))  # inverted dropout: E[y] = x
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # the gradient flows through the kept elements only
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.1, training=True), y)  # the same seed, the same mask
    assert not torch.equal(dropout(x, 0.1, training=True), y)
    assert dropout(x, 0.1, training=False) is x
    # rows and columns are independent: no lane of the 64-bit draws is biased
    assert (y == 0).float().mean(0).std() < 0.03 and abs((y[:, 1::2] == 0).float().mean() - 0.1) < 0.004
