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


def _tiny_model():
    return BertForPreTraining(BertConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2,
                                         intermediate_size=64)).eval()


def test_mlm_at_masked_positions_equals_full_logits_there():
    model = _tiny_model()
    ids = torch.randint(5, 100, (2, 10))
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 7] = 11, 42
    with torch.no_grad():
        full = model(ids).mlm_logits
        sparse = model(ids, labels=labels)
    assert sparse.masked_logits.shape == (2, 100)
    assert torch.allclose(sparse.masked_logits[0], full[0, 3], atol=1e-6)
    assert torch.allclose(sparse.masked_logits[1], full[1, 7], atol=1e-6)
    expected = torch.nn.functional.cross_entropy(full[[0, 1], [3, 7]], torch.tensor([11, 42]))
    assert torch.allclose(sparse.mlm_loss, expected, atol=1e-6)


def test_mlm_logits_cover_every_position_and_masked_logits_the_labelled_ones():
    """One name, one shape: mlm_logits is [B, T, V] whenever it is there; with labels the head runs
    at the N labelled positions only (masked_logits, [N, V]) and the [B, T, V] logits are not made."""
    model = _tiny_model()
    ids = torch.randint(5, 100, (3, 10))
    labels = torch.full_like(ids, -100)
    labels[0, 1], labels[0, 4], labels[2, 9] = 7, 8, 9
    with torch.no_grad():
        plain, labelled = model(ids), model(ids, labels=labels)
    assert plain.mlm_logits.shape == (3, 10, 100) and plain.masked_logits is None
    assert labelled.masked_logits.shape == (3, 100) and labelled.mlm_logits is None


def test_fused_and_explicit_attention_use_the_same_stated_scale():
    """Both paths divide by the module's own scale, so a scale other than 1/√d (as a study of
    temperature would set) changes them alike: the fused path is given it, not its own default."""
    from bert_explorer.model.bert import BertSelfAttention, extended_attention_mask

    torch.manual_seed(0)
    attention = BertSelfAttention(BertConfig(hidden_size=32, num_heads=2)).eval()
    for linear in (attention.query, attention.key):  # scores of order 1, where the scale shows
        torch.nn.init.normal_(linear.weight, std=0.3)
    h = torch.randn(2, 12, 32)
    keep = torch.ones(2, 12, dtype=torch.long)
    keep[1, 8:] = 0
    mask = extended_attention_mask(keep, False, 12, h.dtype, h.device)
    with torch.no_grad():
        default, _ = attention(h, mask)
        attention.scale = 0.9  # 1/√16 = 0.25 by default
        fused, _ = attention(h, mask)
        explicit, probs = attention(h, mask, output_attentions=True)
    assert probs is not None and (fused - default).abs().max() > 0.1  # the scale matters here
    assert (fused - explicit).abs().max() < 1e-5
