"""Checkpoints: round trips with transformers, safety of the loader, atomic saving, and the
encoder's masking knobs (head_mask, causal, padding) checked against explicit arithmetic.

Expected values come from transformers (its loading report and its outputs on the same
weights) or from computing the thing by hand — never from our own earlier output.
"""
import json
import math
import os
import shutil

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

from bert_explorer import checkpoint  # noqa: E402
from bert_explorer.checkpoint import CheckpointError, MissingHeadError  # noqa: E402
from bert_explorer.model import ARCHITECTURES, BertConfig, BertForPreTraining, BertModel  # noqa: E402
from bert_explorer.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer  # noqa: E402

V, H, L, A, FFN = 100, 32, 2, 4, 64
SEQ_LABELS = {0: "negative", 1: "neutral", 2: "positive"}
TOK_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
ID2LABEL = {"BertForSequenceClassification": SEQ_LABELS, "BertForTokenClassification": TOK_LABELS}
HEAD_ARCHS = ["BertModel", "BertForSequenceClassification", "BertForTokenClassification",
              "BertForQuestionAnswering", "BertForMultipleChoice"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    (d / "vocab.txt").write_text("".join(t + "\n" for t in SPECIAL_TOKENS + [f"w{i}" for i in range(V - 5)]))
    tok = WordPieceTokenizer.from_dir(d)
    assert tok.vocab_size == V
    return tok


def our_config(arch="BertModel", **kw):
    return BertConfig(vocab_size=V, hidden_size=H, num_layers=L, num_heads=A, intermediate_size=FFN,
                      id2label=ID2LABEL.get(arch, {}), **kw)


def hf_config(arch="BertModel"):
    kw = {"id2label": ID2LABEL[arch]} if arch in ID2LABEL else {}
    return transformers.BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A,
                                   intermediate_size=FFN, attn_implementation="eager", **kw)


def scramble(model):
    """Move every parameter (biases, LayerNorm included) away from its init, so a weight that is
    dropped, swapped or left at its default shows up in the outputs."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def inputs(arch="BertModel", B=3, T=11, C=2):
    g = torch.Generator().manual_seed(1)
    shape = (B, C, T) if arch == "BertForMultipleChoice" else (B, T)
    ids = torch.randint(5, V, shape, generator=g)
    ids[..., 0] = 2  # [CLS]
    tt = torch.zeros(shape, dtype=torch.long)
    tt[..., 6:] = 1
    am = torch.ones(shape, dtype=torch.long)
    am[1, ..., 8:] = 0  # padding in one example
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": am}


def outputs_of(model, arch, batch):
    """The task outputs of either implementation, by transformers' names."""
    with torch.no_grad():
        out = model(**batch)
    if arch == "BertModel":
        return {"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output}
    if arch == "BertForQuestionAnswering":
        return {"start_logits": out.start_logits, "end_logits": out.end_logits}
    if arch == "BertForPreTraining":
        mlm = out.prediction_logits if hasattr(out, "prediction_logits") else out.mlm_logits
        nsp = out.seq_relationship_logits if hasattr(out, "seq_relationship_logits") else out.nsp_logits
        return {"mlm": mlm, "nsp": nsp}
    return {"logits": out.logits}


def assert_same_outputs(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape, k
        assert (a[k] - b[k]).abs().max() <= atol, (k, (a[k] - b[k]).abs().max())


def assert_clean_hf_load(info):
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        assert not info.get(k), (k, info.get(k))


# ----- (a) our pre-training model -> transformers --------------------------------------------

def test_our_pretraining_checkpoint_loads_in_transformers_with_same_logits(tokenizer, tmp_path):
    ours = scramble(BertForPreTraining(our_config()))
    out = checkpoint.save(ours, tokenizer, tmp_path / "ckpt")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    hf, info = transformers.BertForPreTraining.from_pretrained(str(out), output_loading_info=True,
                                                               attn_implementation="eager")
    assert_clean_hf_load(info)
    hf.eval()
    # the output projection is still tied to the input embeddings after loading
    assert hf.cls.predictions.decoder.weight.data_ptr() == hf.bert.embeddings.word_embeddings.weight.data_ptr()
    batch = inputs()
    a, b = outputs_of(ours, "BertForPreTraining", batch), outputs_of(hf, "BertForPreTraining", batch)
    assert a["mlm"].shape == (3, 11, V)
    assert_same_outputs(a, b)
    # ... and comes back into our implementation unchanged
    again = checkpoint.load(out)
    assert type(again.model) is BertForPreTraining and not again.report.missing and not again.report.unexpected
    assert_same_outputs(outputs_of(again.model, "BertForPreTraining", batch), a, atol=1e-6)


def test_a_left_to_right_model_computes_the_same_in_transformers(tokenizer, tmp_path):
    """The LTR ablation's model exported: transformers reads no "causal" and ran it bidirectionally (MLM logits
    off by 9e-3 on random weights); is_decoder is transformers' left-to-right BERT, and it reads back causal."""
    ours = scramble(BertForPreTraining(our_config(causal=True)))
    out = checkpoint.save(ours, tokenizer, tmp_path / "ckpt")
    hf, info = transformers.BertForPreTraining.from_pretrained(str(out), output_loading_info=True,
                                                               attn_implementation="eager")
    assert_clean_hf_load(info)
    batch = {**inputs(), "attention_mask": torch.ones(3, 11, dtype=torch.long)}
    assert_same_outputs(outputs_of(ours, "BertForPreTraining", batch),
                        outputs_of(hf.eval(), "BertForPreTraining", batch))
    hf.save_pretrained(tmp_path / "back")
    tokenizer.save(tmp_path / "back")
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    del written["causal"]  # (transformers keeps a key it does not know: its own left-to-right BERT says is_decoder)
    (tmp_path / "back" / "config.json").write_text(json.dumps(written))
    assert checkpoint.load(tmp_path / "back").config.causal


def test_a_transformers_checkpoint_with_its_own_decoder_matrix_keeps_it(tokenizer, tmp_path):
    """tie_word_embeddings false: the MLM decoder is a matrix of its own, which the loader dropped for the word
    embeddings without a word (masked-word logits off by 16)."""
    cfg = hf_config()
    cfg.tie_word_embeddings = False
    hf = scramble(transformers.BertForPreTraining(cfg))
    assert hf.cls.predictions.decoder.weight.data_ptr() != hf.bert.embeddings.word_embeddings.weight.data_ptr()
    hf.save_pretrained(tmp_path / "untied")
    tokenizer.save(tmp_path / "untied")
    loaded = checkpoint.load(tmp_path / "untied")
    assert loaded.report.missing == {} and loaded.report.unexpected == []
    batch = inputs()
    assert_same_outputs(outputs_of(loaded.model, "BertForPreTraining", batch),
                        outputs_of(hf, "BertForPreTraining", batch))
    out = checkpoint.save(loaded.model, tokenizer, tmp_path / "again")  # and saved, it stays untied
    again, info = transformers.BertForPreTraining.from_pretrained(str(out), output_loading_info=True,
                                                                  attn_implementation="eager")
    assert_clean_hf_load(info)
    assert_same_outputs(outputs_of(again.eval(), "BertForPreTraining", batch),
                        outputs_of(hf, "BertForPreTraining", batch))


def test_an_encoder_decoders_bert_is_refused_in_one_sentence(tokenizer, tmp_path):
    cfg = hf_config()
    cfg.is_decoder, cfg.add_cross_attention = True, True
    transformers.BertLMHeadModel(cfg).save_pretrained(tmp_path)
    tokenizer.save(tmp_path)
    with pytest.raises(CheckpointError, match="add_cross_attention is set: the decoder of an encoder-decoder model"):
        checkpoint.load(tmp_path)


# ----- (b) every task head, both directions --------------------------------------------------

@pytest.mark.parametrize("arch", HEAD_ARCHS + ["BertForPreTraining"])
def test_transformers_checkpoint_loads_in_ours(tokenizer, tmp_path, arch):
    hf = scramble(getattr(transformers, arch)(hf_config(arch)))
    hf.save_pretrained(tmp_path)
    tokenizer.save(tmp_path)
    loaded = checkpoint.load(tmp_path)  # architecture read from config.json
    assert type(loaded.model) is ARCHITECTURES[arch]
    assert loaded.report.missing == {}
    assert loaded.report.unexpected == []
    if arch in ID2LABEL:
        assert loaded.config.id2label == ID2LABEL[arch]
        assert loaded.model.num_labels == len(ID2LABEL[arch])
    batch = inputs(arch)
    assert_same_outputs(outputs_of(loaded.model, arch, batch), outputs_of(hf, arch, batch))


def test_legacy_key_spellings_load(tokenizer, tmp_path):
    """Checkpoints converted from the original TensorFlow code say LayerNorm.gamma/beta and
    cls.predictions.decoder.bias, and may carry the decoder matrix and position_ids buffers."""
    from safetensors.torch import load_file, save_file

    hf = scramble(transformers.BertForPreTraining(hf_config()))
    hf.save_pretrained(tmp_path)
    tokenizer.save(tmp_path)
    sd = load_file(str(tmp_path / "model.safetensors"))
    legacy = {}
    for k, v in sd.items():
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy["cls.predictions.decoder.bias" if k == "cls.predictions.bias" else k] = v
    legacy["cls.predictions.decoder.weight"] = sd["bert.embeddings.word_embeddings.weight"].clone()
    legacy["bert.embeddings.position_ids"] = torch.arange(512)[None]
    assert "cls.predictions.bias" not in legacy and any(k.endswith("gamma") for k in legacy)
    save_file(legacy, str(tmp_path / "model.safetensors"))
    loaded = checkpoint.load(tmp_path)
    assert loaded.report.missing == {} and loaded.report.unexpected == []
    batch = inputs()
    assert_same_outputs(outputs_of(loaded.model, "BertForPreTraining", batch),
                        outputs_of(hf, "BertForPreTraining", batch))


@pytest.mark.parametrize("arch", HEAD_ARCHS)
def test_our_checkpoint_loads_in_transformers(tokenizer, tmp_path, arch):
    ours = scramble(checkpoint.new_model(arch, our_config(arch)))
    out = checkpoint.save(ours, tokenizer, tmp_path / arch)
    hf, info = getattr(transformers, arch).from_pretrained(str(out), output_loading_info=True,
                                                           attn_implementation="eager")
    assert_clean_hf_load(info)
    hf.eval()
    if arch in ID2LABEL:
        assert hf.config.id2label == ID2LABEL[arch]
    batch = inputs(arch)
    assert_same_outputs(outputs_of(ours, arch, batch), outputs_of(hf, arch, batch))


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("arch", ["BertForSequenceClassification", "BertForTokenClassification"])
def test_num_labels_without_id2label_survives_a_round_trip(tokenizer, tmp_path, arch):
    ours = scramble(checkpoint.new_model(arch, our_config(), num_labels=5))
    out = checkpoint.save(ours, tokenizer, tmp_path / arch)
    assert checkpoint.load(out).model.num_labels == 5
    hf, info = getattr(transformers, arch).from_pretrained(str(out), output_loading_info=True)
    assert_clean_hf_load(info)


# ----- (c) a checkpoint without the pre-training heads ---------------------------------------

def test_minilm_has_no_pretraining_heads_and_says_so(minilm_dir):
    loaded = checkpoint.load("minilm", "BertForPreTraining")
    assert set(loaded.report.missing) == {"masked-LM head", "next-sentence head"}
    assert "cls.seq_relationship.weight" in loaded.report.missing["next-sentence head"]
    assert "cls.predictions.transform.dense.weight" in loaded.report.missing["masked-LM head"]
    assert "masked-LM head" in loaded.report.summary() and "next-sentence head" in loaded.report.summary()
    # as an encoder it is complete (the pooler is in the checkpoint)
    assert checkpoint.load("minilm").report.missing == {}
    for head in ("masked-LM head", "next-sentence head"):
        with pytest.raises(MissingHeadError, match=head):
            checkpoint.load("minilm", "BertForPreTraining", need_heads=(head,))


# ----- (d) pytorch_model.bin: tensors only --------------------------------------------------

def test_pytorch_model_bin_with_plain_state_dict_loads(tokenizer, tmp_path):
    hf = scramble(transformers.BertModel(hf_config()))
    hf.config.save_pretrained(tmp_path)
    tokenizer.save(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    assert not (tmp_path / "model.safetensors").exists()
    loaded = checkpoint.load(tmp_path)
    assert loaded.report.missing == {}
    batch = inputs()
    assert_same_outputs(outputs_of(loaded.model, "BertModel", batch), outputs_of(hf, "BertModel", batch))


class _RunsCodeWhenUnpickled:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('code ran')",))


def test_pytorch_model_bin_with_a_pickled_object_is_refused(tokenizer, tmp_path):
    hf = transformers.BertModel(hf_config())
    hf.config.save_pretrained(tmp_path)
    tokenizer.save(tmp_path)
    marker = tmp_path / "pwned.txt"
    sd = dict(hf.state_dict())
    sd["extra"] = _RunsCodeWhenUnpickled(marker)
    torch.save(sd, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pytorch_model.bin"):
        checkpoint.load(tmp_path)
    assert not marker.exists()
    # The payload is real: an unsafe load does run it (so the check above can fail).
    torch.load(tmp_path / "pytorch_model.bin", weights_only=False)
    assert marker.read_text() == "code ran"


# ----- (e) broken checkpoints and bad names --------------------------------------------------

@pytest.fixture
def saved(tokenizer, tmp_path):
    return checkpoint.save(scramble(BertModel(our_config())), tokenizer, tmp_path / "ckpt")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_safetensors_is_a_checkpoint_error(saved, damage):
    st = saved / "model.safetensors"
    data = st.read_bytes()
    st.write_bytes(b"this is not a safetensors file" * 10 if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        checkpoint.load(saved)


def test_missing_config_json(saved):
    (saved / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        checkpoint.load(saved)


def test_malformed_config_json(saved):
    (saved / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        checkpoint.load(saved)


def test_no_weights_file(saved):
    (saved / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors"):
        checkpoint.load(saved)


def test_unknown_name_lists_the_short_names(tmp_path):
    with pytest.raises(CheckpointError, match="no model called 'no-such-model'") as e:
        checkpoint.load("no-such-model")
    assert "minilm" in str(e.value)
    with pytest.raises(CheckpointError, match="no model called"):
        checkpoint.load(tmp_path / "does" / "not" / "exist")


def test_short_name_that_is_not_installed(monkeypatch):
    monkeypatch.setitem(checkpoint.SHORT_NAMES, "ghost", (lambda: None, "a model nobody installed"))
    with pytest.raises(CheckpointError, match="not installed"):
        checkpoint.load("ghost")


def test_unknown_architecture(saved):
    with pytest.raises(CheckpointError, match="unknown architecture 'BertForCooking'"):
        checkpoint.load(saved, "BertForCooking")


def test_incomplete_encoder_and_wrong_shapes(saved):
    from safetensors.torch import load_file, save_file

    sd = load_file(str(saved / "model.safetensors"))
    sd.pop("encoder.layer.1.output.dense.weight")
    save_file(sd, str(saved / "model.safetensors"))
    with pytest.raises(CheckpointError, match="encoder.layer.1.output.dense.weight"):
        checkpoint.load(saved)
    sd["encoder.layer.1.output.dense.weight"] = torch.zeros(3, 3)
    save_file(sd, str(saved / "model.safetensors"))
    with pytest.raises(CheckpointError, match="shape"):
        checkpoint.load(saved)


# ----- (f) atomic save --------------------------------------------------------------------------

def _snapshot(d):
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_failed_save_leaves_the_existing_checkpoint_intact(saved, tokenizer, monkeypatch):
    before = _snapshot(saved)
    reference = outputs_of(checkpoint.load(saved).model, "BertModel", inputs())

    def broken_save_file(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half a file")  # some bytes reach the disk, then the disk fills up
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint, "save_file", broken_save_file)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(scramble(BertModel(our_config())), tokenizer, saved)
    monkeypatch.undo()
    assert _snapshot(saved) == before
    assert sorted(os.listdir(saved.parent)) == [saved.name]  # no temporary or backup directories
    assert_same_outputs(outputs_of(checkpoint.load(saved).model, "BertModel", inputs()), reference, atol=0)


def test_failed_first_save_creates_nothing(tokenizer, tmp_path, monkeypatch):
    def broken_save_file(tensors, filename, metadata=None):
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint, "save_file", broken_save_file)
    with pytest.raises(OSError):
        checkpoint.save(BertModel(our_config()), tokenizer, tmp_path / "new")
    assert os.listdir(tmp_path) == []


def test_successful_overwrite_replaces_everything_and_leaves_no_debris(saved, tokenizer):
    (saved / "stale.txt").write_text("from an older save")
    new = scramble(BertModel(our_config()))
    checkpoint.save(new, tokenizer, saved)
    assert sorted(os.listdir(saved.parent)) == [saved.name]
    assert not (saved / "stale.txt").exists()
    assert_same_outputs(outputs_of(checkpoint.load(saved).model, "BertModel", inputs()),
                        outputs_of(new, "BertModel", inputs()), atol=0)


# ----- (g) head_mask, causal attention, padding ----------------------------------------------

def _additive_mask(attention_mask, causal, T):
    keep = attention_mask.bool()[:, None, None, :].expand(-1, 1, T, T)
    if causal:
        keep = keep & torch.ones(T, T, dtype=torch.bool).tril()
    return torch.zeros(keep.shape).masked_fill(~keep, -1e9)


def _explicit_layer(layer, h, add_mask, silenced=()):
    """One post-LN encoder layer written out by hand; heads in ``silenced`` contribute nothing."""
    B, T, _ = h.shape
    sa = layer.attention.self
    split = lambda x: x.view(B, T, A, H // A).transpose(1, 2)  # noqa: E731
    q, k, v = split(sa.query(h)), split(sa.key(h)), split(sa.value(h))
    probs = (q @ k.transpose(-1, -2) / math.sqrt(H // A) + add_mask).softmax(-1)
    context = probs @ v  # [B, A, T, d]
    for head in silenced:
        context[:, head] = 0
    context = context.transpose(1, 2).reshape(B, T, H)
    a = layer.attention.output.LayerNorm(layer.attention.output.dense(context) + h)
    return layer.output.LayerNorm(layer.output.dense(F.gelu(layer.intermediate.dense(a))) + a)


def _explicit_encoder(model, batch, silenced=None, causal=False):
    silenced = silenced or {}
    T = batch["input_ids"].shape[1]
    h = model.embeddings(batch["input_ids"], batch["token_type_ids"])
    add_mask = _additive_mask(batch["attention_mask"], causal, T)
    for i, layer in enumerate(model.encoder.layer):
        h = _explicit_layer(layer, h, add_mask, silenced.get(i, ()))
    return h


def test_head_mask_silences_exactly_one_head():
    model = scramble(BertModel(BertConfig(vocab_size=V, hidden_size=H, num_layers=3, num_heads=A,
                                          intermediate_size=FFN)))
    batch = inputs()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        plain = model(**batch, output_hidden_states=True)
        assert (_explicit_encoder(model, batch) - plain.last_hidden_state)[real].abs().max() < 1e-5
        for layer, head in [(0, 0), (1, 2), (2, 3)]:
            hm = torch.ones(3, A)
            hm[layer, head] = 0
            for attentions in (False, True):  # the fused and the explicit attention path
                masked = model(**batch, head_mask=hm, output_hidden_states=True, output_attentions=attentions)
                expected = _explicit_encoder(model, batch, {layer: (head,)})
                assert (masked.last_hidden_state - expected)[real].abs().max() < 1e-5
                assert (masked.last_hidden_state - plain.last_hidden_state).abs().max() > 1e-3
                for i in range(layer + 1):  # layers below the silenced head are untouched
                    assert torch.allclose(masked.hidden_states[i], plain.hidden_states[i], atol=1e-6)
        # all ones = no mask; a 1-D mask [A] applies to every layer
        assert torch.allclose(model(**batch, head_mask=torch.ones(3, A)).last_hidden_state,
                              plain.last_hidden_state, atol=1e-6)
        one_d = model(**batch, head_mask=torch.tensor([1.0, 0.0, 1.0, 1.0])).last_hidden_state
        expected = _explicit_encoder(model, batch, {0: (1,), 1: (1,), 2: (1,)})
        assert (one_d - expected)[real].abs().max() < 1e-5


@pytest.mark.parametrize("causal", [True, False])
def test_causal_model_cannot_see_the_future(causal):
    model = scramble(BertModel(our_config(causal=causal)))
    batch = inputs()
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    T = batch["input_ids"].shape[1]
    with torch.no_grad():
        base = model(**batch).last_hidden_state
        for t in (0, 4, T - 2):
            changed = dict(batch, input_ids=batch["input_ids"].clone())
            changed["input_ids"][:, t + 1:] = (changed["input_ids"][:, t + 1:] + 7 - 5) % (V - 5) + 5
            out = model(**changed).last_hidden_state
            past_moved = (out[:, : t + 1] - base[:, : t + 1]).abs().max()
            if causal:
                assert past_moved < 1e-5
            else:  # the bidirectional model does look ahead: the check above can fail
                assert past_moved > 1e-3
            assert (out[:, t + 1:] - base[:, t + 1:]).abs().max() > 1e-3
        if causal:
            explicit = _explicit_encoder(model, batch, causal=True)
            assert (explicit - base).abs().max() < 1e-5
            probs = model(**batch, output_attentions=True).attentions
            future = torch.ones(T, T, dtype=torch.bool).triu(1)
            for p in probs:
                assert (p[..., future] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_attention_rows_sum_to_one_and_padding_gets_none(causal):
    model = scramble(BertModel(our_config(causal=causal)))
    batch = inputs()
    am = batch["attention_mask"]
    assert (am == 0).any()
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
        assert len(out.attentions) == L
        for p in out.attentions:
            assert p.shape == (3, A, 11, 11)
            assert torch.allclose(p.sum(-1), torch.ones(3, A, 11), atol=1e-5)
            assert (p >= 0).all()
            pad_cols = (am == 0)[:, None, None, :].expand_as(p)
            assert (p[pad_cols] == 0).all()
        # padding changes nothing for the real tokens: example 1 alone, without its padding
        n = int(am[1].sum())
        alone = model(input_ids=batch["input_ids"][1:2, :n], token_type_ids=batch["token_type_ids"][1:2, :n])
        assert (alone.last_hidden_state[0] - out.last_hidden_state[1, :n]).abs().max() < 1e-5
        fast = model(**batch).last_hidden_state
        real = am.bool()
        assert (fast - out.last_hidden_state)[real].abs().max() < 1e-5


# ----- a checkpoint uploaded as a .zip ----------------------------------------------------------

def _zip(entries: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buf.getvalue()


def _files_of(d):
    return {p.name: p.read_bytes() for p in d.iterdir()}


def test_a_zipped_checkpoint_unpacks_and_loads_with_the_same_weights(saved, tmp_path):
    files = _files_of(saved)
    data = _zip({f"my-bert/{n}": b for n, b in files.items()} | {"my-bert/notes/readme.txt": b"x"})
    out = checkpoint.unpack_zip(data, tmp_path / "up" / "my-bert")
    assert sorted(p.name for p in out.iterdir()) == sorted(n for n in files if n in checkpoint.UPLOAD_FILES)
    a, b = checkpoint.load(saved).model.state_dict(), checkpoint.load(out).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_names_inside_a_zip_cannot_write_outside_the_target(saved, tmp_path):
    files = _files_of(saved)
    data = _zip({f"../../{n}": b for n, b in files.items()} | {"/etc/evil.json": b"{}"})
    out = checkpoint.unpack_zip(data, tmp_path / "up" / "x")
    assert (out / "config.json").exists()
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert all(w.startswith(("up/x/", "ckpt/")) for w in written), written  # ckpt/: the fixture's own


@pytest.mark.parametrize("entries, message", [
    (None, "not a .zip archive"),
    ({"a/vocab.txt": b"x"}, "no config.json"),
    ({"a/config.json": b"{}", "a/vocab.txt": b"x", "a/pytorch_model.bin": b"pickle"}, "only safetensors"),
    ({"a/config.json": b"{}", "a/model.safetensors": b"x"}, "no vocab.txt"),
])
def test_a_bad_zip_is_one_clear_error_and_leaves_nothing(tmp_path, entries, message):
    data = b"this is not a zip" if entries is None else _zip(entries)
    with pytest.raises(checkpoint.CheckpointError, match=message):
        checkpoint.unpack_zip(data, tmp_path / "up" / "x")
    assert not (tmp_path / "up" / "x").exists() and not list((tmp_path / "up").glob(".x.tmp-*"))


def test_a_zip_too_large_when_unpacked_is_refused(saved, tmp_path):
    data = _zip({n: b for n, b in _files_of(saved).items()})
    with pytest.raises(checkpoint.CheckpointError, match="more than"):
        checkpoint.unpack_zip(data, tmp_path / "x", max_bytes=1000)


def test_every_copy_of_a_checkpoint_keeps_what_its_folder_says_about_the_model(saved, tmp_path):
    """An upload, an export (the CLI's) and a delta keep the training settings, the held-out scores
    (the Masked word probe's "how good") and the time-lapse: a copy is described as its original."""
    from bert_explorer.cli import main

    src = tmp_path / "src"
    shutil.copytree(saved, src)
    about = {"training_args.json": '{"max_steps": 7}\n', "eval_metrics.json": '{"mlm_accuracy": 0.31}\n',
             "timelapse.json": '{"frames": []}\n', "model_card.md": "# a card\n"}
    for name, text in about.items():
        (src / name).write_text(text)
    uploaded = checkpoint.unpack_zip(_zip({f"m/{p.name}": p.read_bytes() for p in src.iterdir()}), tmp_path / "up")
    assert main(["export", "--model", str(src), "--output", str(tmp_path / "exported")]) == 0
    for copy in (uploaded, tmp_path / "exported"):
        assert checkpoint.about_files(copy) == {k: v.encode() for k, v in about.items()}, copy


def test_every_file_of_a_checkpoint_has_one_mode(tokenizer, tmp_path):
    """safetensors writes its file 0600: the weights were unreadable to whoever could read the rest."""
    model = checkpoint.new_model("BertForPreTraining", BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32,
                                                                  num_layers=1, num_heads=2, intermediate_size=64))
    folder = checkpoint.save(model, tokenizer, tmp_path / "ck")
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert len(set(modes.values())) == 1, modes
    probe = tmp_path / "plain"
    probe.write_text("")
    assert modes["model.safetensors"] == probe.stat().st_mode & 0o777


def test_transformers_cuts_a_long_text_to_the_positions_the_model_has(tokenizer, tmp_path):
    """A model with 64 learned positions: transformers' tokenizer, read from the checkpoint, cuts a
    long text to 64 tokens, so the model it loads beside it can read what it is given."""
    ours = scramble(checkpoint.new_model("BertForSequenceClassification",
                                         our_config("BertForSequenceClassification", max_position_embeddings=64)))
    out = checkpoint.save(ours, tokenizer, tmp_path / "short")
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert hf_tok.model_max_length == 64
    ids = hf_tok(" ".join(f"w{i % 90}" for i in range(300)), truncation=True, return_tensors="pt")["input_ids"]
    assert ids.shape[1] == 64
    hf = transformers.BertForSequenceClassification.from_pretrained(str(out)).eval()
    with torch.no_grad():
        assert torch.isfinite(hf(input_ids=ids).logits).all()


def test_a_name_longer_than_the_system_allows_is_one_sentence():
    """A 4,096-character folder typed in the sidebar showed OSError's traceback (File name too long) on every page."""
    for name in ("x" * 4096, "q" * 300, "/tmp/" + "d" * 300 + "/model"):
        with pytest.raises(CheckpointError, match="cannot be a model's folder here"):
            checkpoint.load(name)


def test_a_page_with_a_name_too_long_for_the_system_says_so_in_one_sentence():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = "x" * 4096
    at.run()
    assert not at.exception
    assert any("cannot be a model's folder here" in e.value for e in [*at.error, *at.sidebar.error, *at.warning,
                                                                         *at.sidebar.warning, *at.info])


def test_home_with_a_model_that_cannot_be_read_keeps_to_the_sidebar_s_sentence(tmp_path):
    """Home showed a KeyError from its Prepare panel under the sidebar's correct sentence whenever the model
    chosen could not be loaded (no model, no row to show)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../run_app.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(tmp_path)  # an empty folder: no model
    at.run()
    assert not at.exception
    assert any("config.json" in e.value or "no model" in e.value for e in at.sidebar.error)


def test_a_page_says_why_its_model_cannot_be_read_once(tmp_path):
    """The sidebar and the page both showed the same refusal (a config.json with layer_norm_eps 10), one under
    the other's heading: the page says it, the sidebar does not repeat it."""
    from streamlit.testing.v1 import AppTest

    folder = tmp_path / "bad-eps"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 30, "hidden_size": 8,
                                                    "num_hidden_layers": 1, "num_attention_heads": 2,
                                                    "intermediate_size": 16, "layer_norm_eps": 10}))
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(folder)
    at.run()
    assert not at.exception
    said = [e.value for e in [*at.error, *at.sidebar.error, *at.warning, *at.sidebar.warning, *at.info,
                              *at.sidebar.info] if "layer_norm_eps" in e.value]
    assert len(said) == 1 and "above 0 and below 1, not 10" in said[0], said


@pytest.mark.parametrize("objective, untrained", [("mlm", True), ("ltr", True), ("mlm+nsp", False)])
def test_a_head_its_pre_training_never_trained_counts_as_none(tmp_path, minilm_dir, objective, untrained):
    """A run of the paper's No NSP (or LTR) objective saves the next-sentence head it was built with, never trained:
    the sidebar listed it, and the Next sentence probe said "P(IsNext) 51.9 %: this model agrees" of random weights."""
    from streamlit.testing.v1 import AppTest

    tok = WordPieceTokenizer.from_dir(minilm_dir)
    model = checkpoint.new_model("BertForPreTraining", BertConfig(vocab_size=tok.vocab_size, hidden_size=8,
                                                                  num_layers=1, num_heads=2, intermediate_size=16))
    folder = checkpoint.save(model, tok, tmp_path / "step-3",
                             extra_files={"training_args.json": json.dumps({"objective": objective})})
    report = checkpoint.load(folder, "BertForPreTraining").report
    assert ("next-sentence head" in report.missing) is untrained and "masked-LM head" not in report.missing
    if untrained:
        assert "in the checkpoint but never trained: next-sentence head (pre-trained with the " in report.summary()
        # a warm start began from a model whose head was trained, and kept it: not a random one
        warm = checkpoint.save(model, tok, tmp_path / "warm", extra_files={"training_args.json": json.dumps(
            {"objective": objective, "init": "minilm-mlm-nsp"})})
        assert "next-sentence head" not in checkpoint.load(warm, "BertForPreTraining").report.missing
    at = AppTest.from_file("../pages/5_Next_sentence_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(folder)
    at.run()
    assert not at.exception
    warned = [w.value for w in at.warning if "no trained next-sentence head" in w.value]
    answered = any("IsNext" in m.label for m in at.metric)  # the head's answer, drawn as the model's
    assert bool(warned) is untrained and answered is not untrained
    if untrained:
        assert "it was pre-trained with the " in warned[0] and "never trained" in warned[0]
    assert ("next-sentence head" in " ".join(m.value for m in at.sidebar.markdown)) is not untrained
