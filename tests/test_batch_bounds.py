"""A batch size or sequence length anyone can type is checked against the model and the memory free before a
run's folder is made: one sentence, exit 2, nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bert_explorer.cli import main
from bert_explorer.model import preset
from bert_explorer.train import memory


def test_a_pre_training_batch_that_no_memory_holds_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "run"
    # (within the 4,096 sequences a batch may ask at most: BERT-Base's activations for them hold no memory here)
    code = main(["pretrain", "--corpus", "tiny", "--size", "base", "--batch-size", "4096", "--max-steps", "5",
                 "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "a batch of 4,096 sequences of 128 WordPieces on size base would need about" in err
    assert "choose a batch of at most about" in err and "Traceback" not in err
    assert not out.exists()
    code = main(["pretrain", "--corpus", "tiny", "--size", "base", "--batch-size", "4096", "--max-steps", "5",
                 "--output", str(out), "--background"])
    assert code == 2 and not out.exists()  # not in a background process that made the folder first
    code = main(["pretrain", "--corpus", "tiny", "--size", "tiny", "--batch-size", "10000000", "--max-steps", "5",
                 "--output", str(out)])
    assert code == 2 and "--batch-size must be a whole number from 1 to 4,096" in capsys.readouterr().err
    assert not out.exists()


def test_the_bound_is_what_the_memory_free_holds(monkeypatch):
    config = preset("base")
    one = memory.activation_bytes(config, 1, 128, "fp32")
    # 12 layers x 128 tokens x 768 units x (34 bytes + 5 x 12 heads x 128 positions / 768 units) x 2 (fp32),
    # and the masked LM's logits and their gradient, times the peak measured over what a step keeps; on the CPU
    # the dropout masks kept in the activations' dtype: a byte more each per 16 bits (34 + 2, 5 + 1)
    assert one == pytest.approx(1.5 * (12 * 128 * 768 * (36 + 6 * 12 * 128 / 768) * 2 + 128 * 0.15 * 30522 * 8))
    assert memory.activation_bytes(config, 1, 128, "fp32", device="cuda") == pytest.approx(
        1.5 * (12 * 128 * 768 * (34 + 5 * 12 * 128 / 768) * 2 + 128 * 0.15 * 30522 * 8))  # PyTorch's own masks
    assert memory.activation_bytes(config, 1, 128, "bf16") < one
    monkeypatch.setattr(memory, "room_bytes", lambda device: (100 * one, "is free here"))
    memory.check_batch_fits(config, 100, 128, "fp32", "cpu", "base")  # just fits
    with pytest.raises(ValueError, match=r"choose a batch of at most about 100 \("):
        memory.check_batch_fits(config, 101, 128, "fp32", "cpu", "base")
    # where not even one sequence fits, a smaller batch is no answer
    monkeypatch.setattr(memory, "room_bytes", lambda device: (0.5 * one, "is free here"))
    with pytest.raises(ValueError, match=r"even one sequence needs about .*; choose a shorter max-seq-length or a "
                                         r"smaller model$"):
        memory.check_batch_fits(config, 4, 128, "fp32", "cpu", "base")


def test_a_gpu_is_counted_whole_in_16_bit_and_a_missing_one_is_said(monkeypatch):
    """On a GPU "auto" trains in bf16 (it was counted as fp32, twice too much), and the bound is the GPU's whole
    memory: what another run holds now is the GPU queue's to wait for, not a reason to refuse. Asked for cuda
    on a machine without one, the check said nothing but a traceback."""
    config = preset("base")
    monkeypatch.setattr(memory.torch.cuda, "is_available", lambda: True)
    assert memory.activation_bytes(config, 8, 128, "auto", device="cuda") == memory.activation_bytes(
        config, 8, 128, "bf16", device="cuda") < memory.activation_bytes(config, 8, 128, "auto", device="cpu")

    class Properties:
        total_memory = 140e9
    asked = []
    monkeypatch.setattr(memory.torch.cuda, "get_device_properties", lambda i: asked.append(i) or Properties())
    monkeypatch.setenv("LOCAL_RANK", "3")  # torchrun's fourth process trains on the fourth GPU
    assert memory.room_bytes("auto") == (140e9, "the GPU holds") and memory.room_bytes("cuda:1")[0] == 140e9
    assert asked == [3, 1]
    memory.check_batch_fits(config, 256, 128, "auto", "cuda", "base")  # BERT-Base 256 x 128 fits an H200
    monkeypatch.setattr(memory.torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="^device cuda needs a CUDA GPU and this machine has none: choose auto or cpu$"):
        memory.check_batch_fits(config, 8, 128, "auto", "cuda", "base")


def test_fine_tuning_refuses_a_length_past_the_models_positions_and_a_batch_past_the_memory(base_model, tmp_path,
                                                                                            capsys):
    positions = json.loads((Path(base_model) / "config.json").read_text())["max_position_embeddings"]
    out = tmp_path / "ft"
    args = ["finetune", "--model", str(base_model), "--train", "tiny:classification", "--output", str(out)]
    assert main([*args, "--max-seq-length", str(positions + 1)]) == 2
    err = capsys.readouterr().err
    # (named as the flag typed: "max_seq_length" was the setting's name, which the user never wrote)
    assert f"--max-seq-length {positions + 1} is longer than the {positions} positions" in err and err.count("\n") == 1
    assert "estimate:" not in err and not out.exists()  # refused before the estimate and the folder
    assert main([*args, "--batch-size", "1000000000", "--background"]) == 2
    assert "choose a batch of at most about" in capsys.readouterr().err and not out.exists()


def test_the_masked_word_probe_bounds_its_top_k_and_says_a_mask_past_what_the_model_reads(capsys):
    """--top-k 100000 and -3 ended in a traceback; a [MASK] past 512 WordPieces was said to be "read as ordinary
    text ... write [MASK] in capitals", and one of two past them was dropped without a word."""
    probe = ["probe", "mlm", "--model", "minilm-mlm-nsp"]
    for k in ("100000", "-3", "0"):
        assert main([*probe, "--text", "the [MASK] sat .", "--top-k", k]) == 2
        err = capsys.readouterr().err
        assert f"top_k must be a whole number from 1 to 100, not {k}" in err and "Traceback" not in err, err
    long = "word " * 3000
    assert main([*probe, "--text", long + "[MASK] ."]) == 2
    err = capsys.readouterr().err
    assert "every [MASK] of the text lies past the first 512 WordPieces" in err and "capitals" not in err, err
    assert main([*probe, "--text", "the [MASK] sat on the mat . " + long + "[MASK] .", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 1
    assert "note: 1 of the text's 2 [MASK]s lie past the 512 WordPieces the model reads" in err
    # a text cut with its [MASK] read, and a pair cut, are said too (a 120 kB sentence A: "P(IsNext) = 1.000" alone)
    assert main([*probe, "--text", "the [MASK] sat on the mat . " + long]) == 0
    assert "note: the text is 3,009 WordPieces with [CLS] and [SEP], more than the 512 this model reads" in \
        capsys.readouterr().err
    assert main(["probe", "nsp", "--model", "minilm-mlm-nsp", "--a", long, "--b", "the end ."]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("P(IsNext) = ") and "note: This pair is 3,006 WordPieces with [CLS] and [SEP], more than " \
        "the 512 this model reads" in err, err


def test_the_pre_train_page_says_a_batch_that_does_not_fit_before_a_run_starts(runs_root):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    at.selectbox(key="pt_size").set_value("base")
    at.number_input(key="pt_batch").set_value(4096)
    at.number_input(key="pt_seq").set_value(512).run()
    assert not at.exception
    said = [e.value for e in at.error if "choose a batch of at most about" in e.value]
    assert said and said[0].startswith("a batch of 4,096 sequences of 512 WordPieces on size base would need about")
    assert at.button(key="pt_start").disabled


def test_a_pre_training_run_given_as_a_model_or_to_after_finetuning_is_named_for_what_it_is(tmp_path, capsys):
    """finetune --model RUN said the run "has no model.safetensors", after-finetuning RUN that "an ablation cell
    keeps only its score"."""
    run = tmp_path / "pt"
    assert main(["pretrain", "--corpus", "tiny", "--size", "tiny", "--max-steps", "2", "--batch-size", "2",
                 "--max-seq-length", "32", "--vocab-size", "60", "--eval-batches", "1", "--save-every", "2",
                 "--no-progress", "--output", str(run)]) == 0
    capsys.readouterr()
    assert main(["finetune", "--model", str(run), "--train", "tiny:classification", "--output",
                 str(tmp_path / "ft")]) == 2
    err = capsys.readouterr().err
    assert f"{run} is a pre-training run's folder: its models are its checkpoints; give one of them, such as " \
           f"the newest, {run / 'checkpoints' / 'step-2'}" in err and not (tmp_path / "ft").exists()
    assert main(["after-finetuning", str(run)]) == 2
    assert "pt is a pre-training run, not a fine-tuning, so it has no dev set to answer" in capsys.readouterr().err


def test_a_broken_config_is_one_sentence_and_a_feature_based_batch_is_not_counted_as_training(tmp_path, minilm_dir,
                                                                                              capsys):
    """The checks before a start read config.json raw: a config that is a JSON list ended the CLI in a traceback
    (and the Fine-tune page with it). A feature-based run's BERT only reads, without gradients: its batch was
    counted as a fine-tuning's and 1,024 sequences were refused as needing hundreds of GB."""
    from bert_explorer.train.finetune import FinetuneConfig, check_start, positions_of
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("model.safetensors", "vocab.txt"):
        (broken / name).symlink_to(minilm_dir / name)
    (broken / "config.json").write_text("[]")
    out = tmp_path / "ft"
    assert main(["finetune", "--model", str(broken), "--train", "tiny:classification", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not a usable BERT config: it is not a JSON object of settings" in err and err.count("\n") == 1, err
    assert positions_of(str(broken)) is None and not out.exists()
    check_start(FinetuneConfig(model="minilm", mode="feature-based", batch_size=1024, max_seq_length=512))
    with pytest.raises(ValueError, match="choose a batch of at most about"):
        check_start(FinetuneConfig(model="minilm", mode="fine-tune", batch_size=10**6, max_seq_length=512))


def test_a_multiple_choice_batch_is_counted_as_a_sequence_per_choice(tmp_path, monkeypatch):
    """A multiple-choice example is read as one sequence per choice (four in SWAG's form): a batch of 8 is 32
    sequences, which the count of 8 let through to fail in training."""
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
    config = preset("L2-H128")
    one = memory.activation_bytes(config, 1, 32, "fp32", 0.0)
    monkeypatch.setattr(memory, "room_bytes", lambda device: (20 * one, "is free here"))
    monkeypatch.setattr(memory, "activation_bytes", lambda c, b, s, p, pr=0.0, d="cpu": b * one)
    cfg = FinetuneConfig(model="minilm", train="tiny:multiple-choice", batch_size=8, max_seq_length=32,
                         precision="fp32", device="cpu")
    with pytest.raises(ValueError, match=r"^a batch of 8 examples of 4 choices \(a sequence each\) of 32 WordPieces on "
                                         r"minilm would need about .*: choose a batch of at most about 5 \("):
        run_finetuning(cfg, tmp_path / "mc")
    assert not (tmp_path / "mc").exists()
