"""Checkpoints that lie: every size of config.json checked (and against the weights file's own header)
before anything is built; a vocabulary that does not fit, weights that are not numbers, a pickle: one
sentence each. An upload that does not load is not kept, and uploads can be replaced and deleted."""
import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from bert_explorer import checkpoint
from bert_explorer.checkpoint import CheckpointError
from shared import save_tiny_bert

from bert_explorer.tokenizer import SPECIAL_TOKENS

WORDS = SPECIAL_TOKENS + "the cat sat on mat a dog ran".split()


@pytest.fixture
def ckpt(tmp_path):
    return save_tiny_bert(tmp_path / "ok", WORDS)


@pytest.fixture
def nothing_is_built(monkeypatch):
    """Building a model (or a tokenizer) fails the test: a lying checkpoint must be refused before."""
    def built(*args, **kwargs):
        raise AssertionError("a model was built from a checkpoint that should have been refused")

    monkeypatch.setattr(checkpoint, "ARCHITECTURES", {k: built for k in checkpoint.ARCHITECTURES})
    monkeypatch.setattr(checkpoint, "WordPieceTokenizer", type("T", (), {"from_dir": built}))


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("changes, message", [
    ({"num_hidden_layers": 10**6}, "num_hidden_layers must be a whole number from 1 to 48, not 1000000"),
    ({"vocab_size": 10**7}, "vocab_size must be a whole number from 1 to 250,000, not 10000000"),
    ({"hidden_size": 10**9}, "hidden_size must be a whole number from 1 to 4,096, not 1000000000"),
    ({"num_attention_heads": 0}, "num_attention_heads must be a whole number from 1 to 4,096, not 0"),
    ({"num_hidden_layers": -2}, "num_hidden_layers must be a whole number from 1 to 48, not -2"),
    ({"hidden_size": 31.5}, "hidden_size must be a whole number from 1 to 4,096, not 31.5"),
    ({"num_hidden_layers": 4}, "the weights hold 2 layers but config.json says num_hidden_layers 4"),
    ({"vocab_size": 64}, "config.json declares embeddings.word_embeddings.weight of shape (64, 32) but the weights "
                         "file holds"),
    ({"max_position_embeddings": 4096}, "embeddings.position_embeddings.weight of shape (4096, 32)"),
    # the numbers that are not sizes: tracebacks (an assertion, a TypeError) or NaN on every page
    ({"pad_token_id": 10**9}, "pad_token_id must be a token id from 0 to 12 (below vocab_size), not 1000000000"),
    ({"hidden_dropout_prob": 5}, "hidden_dropout_prob must be a number from 0 to below 1, not 5"),
    ({"attention_probs_dropout_prob": "lots"}, "attention_probs_dropout_prob must be a number from 0 to below 1"),
    ({"initializer_range": "x"}, "initializer_range must be a number above 0, up to 1, not 'x'"),
    ({"layer_norm_eps": -1}, "layer_norm_eps must be a number above 0 and below 1, not -1"),
])
def test_a_config_that_lies_is_refused_before_anything_is_built(ckpt, nothing_is_built, changes, message):
    _edit_config(ckpt, **changes)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(ckpt, "BertForPreTraining")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_config_nested_beyond_reading_is_one_sentence(ckpt, nothing_is_built):
    (ckpt / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(CheckpointError, match="is not a usable BERT config: it nests too deeply"):
        checkpoint.load(ckpt)


def test_a_vocabulary_longer_than_the_embeddings_is_refused_before_it_is_read(ckpt, nothing_is_built):
    with (ckpt / "vocab.txt").open("a") as f:
        f.write("".join(f"w{i}\n" for i in range(100_000)))  # the report's 10 M lines, at a small scale
    with pytest.raises(CheckpointError, match="has more lines than the .* words the model's embeddings hold"):
        checkpoint.load(ckpt)


def test_a_vocabulary_without_sep_is_one_sentence(ckpt):
    lines = (ckpt / "vocab.txt").read_text().splitlines()
    (ckpt / "vocab.txt").write_text("\n".join("[XYZ]" if t == "[SEP]" else t for t in lines) + "\n")
    with pytest.raises(CheckpointError, match=r"cannot build the tokenizer \(the vocabulary has no \[SEP\] token\)"):
        checkpoint.load(ckpt)


def test_weights_that_are_not_numbers_are_refused(ckpt):
    from safetensors.torch import load_file, save_file

    sd = load_file(str(ckpt / "model.safetensors"))
    sd = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in sd.items()}
    save_file(sd, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match="hold values that are not numbers \\(NaN or infinity\\)"):
        checkpoint.load(ckpt)


def test_weights_whose_header_calls_them_integers_are_refused(ckpt):
    """A header that relabelled the float32 word embeddings as I32 (the same bytes) loaded: the integers were cast
    into the weights and the masked-word probe answered "has 1.000"."""
    from safetensors.torch import load_file, save_file

    sd = load_file(str(ckpt / "model.safetensors"))
    key = next(k for k in sd if k.endswith("word_embeddings.weight"))
    sd[key] = sd[key].view(torch.int32) if sd[key].dtype == torch.float32 else sd[key].to(torch.int16)
    save_file(sd, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"word_embeddings.weight are stored as int(32|16), not as floating-point"):
        checkpoint.load(ckpt)


def test_a_pickle_is_refused_without_advice_to_unpickle_it(ckpt, tmp_path):
    import pickle

    (ckpt / "model.safetensors").unlink()

    class Evil:
        def __reduce__(self):
            return (print, ("this must never run",))

    (ckpt / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Evil()}))
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(ckpt)
    assert "holds more than plain tensors (a pickle that could run code), so it was not loaded" in str(e.value)
    assert "weights_only" not in str(e.value) and "\n" not in str(e.value)


# ----- uploads ----------------------------------------------------------------------------------------------
def _zip(folder) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in folder.iterdir():
            z.write(f, f"model/{f.name}")
    return buf.getvalue()


def test_an_upload_that_does_not_load_is_not_kept_nor_listed_and_a_corrected_one_replaces_it(ckpt, tmp_path,
                                                                                              runs_root):
    from bert_explorer.app import state

    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    _edit_config(broken, num_hidden_layers=10**6)
    target = runs_root / "uploaded-models" / "mine"
    with pytest.raises(CheckpointError, match="mine.zip cannot be used, so it was not kept: .*num_hidden_layers"):
        checkpoint.accept_upload(_zip(broken), target, "mine.zip")
    assert not target.exists() and state.uploaded_checkpoints() == []
    # a folder unpacked by an earlier version, broken: offered to nobody, but still deletable
    shutil.copytree(broken, target)
    assert state.uploaded_checkpoints() == [] and state.uploaded_checkpoints(every=True) == [str(target)]
    # the corrected checkpoint uploaded under the same name takes its place
    checkpoint.accept_upload(_zip(ckpt), target, "mine.zip")
    assert json.loads((target / "config.json").read_text())["num_hidden_layers"] == 2
    assert state.uploaded_checkpoints() == [str(target)]
    assert checkpoint.load(target).config.num_layers == 2
    state.delete_upload(target)
    assert not target.exists()
    with pytest.raises(ValueError, match="is not an uploaded checkpoint"):
        state.delete_upload(ckpt)  # only a folder in the uploads folder


def test_the_runs_page_deletes_an_upload_after_its_confirmation(ckpt, runs_root):
    from streamlit.testing.v1 import AppTest

    target = runs_root / "uploaded-models" / "mine"
    checkpoint.accept_upload(_zip(ckpt), target, "mine.zip")
    at = AppTest.from_file("../pages/13_Runs.py", default_timeout=120).run()
    assert not at.exception
    assert at.button(key="runs_upload_delete").disabled
    at.checkbox(key="runs_upload_confirm_0_mine").check().run()
    at.button(key="runs_upload_delete").click().run()
    assert not at.exception and not target.exists()
    assert any("Deleted the uploaded checkpoint mine." in s.value for s in at.success)


def test_an_upload_under_a_name_already_taken_keeps_the_other_and_takes_the_next_free_name(ckpt, tmp_path):
    """Two people upload different models as mine.zip on a writes-on server: both are kept."""
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    _edit_config(other, hidden_dropout_prob=0.2)  # another model: other bytes (the first stays as it was)
    uploads = tmp_path / "uploaded-models"
    first = checkpoint.upload_folder(uploads, "mine", _zip(ckpt))
    assert first == uploads / "mine"
    checkpoint.accept_upload(_zip(ckpt), first, "mine.zip")
    assert checkpoint.upload_folder(uploads, "mine", _zip(ckpt)) == first  # the same file again: the same upload
    second = checkpoint.upload_folder(uploads, "mine", _zip(other))
    assert second == uploads / "mine-2"
    checkpoint.accept_upload(_zip(other), second, "mine.zip")
    assert json.loads((first / "config.json").read_text()) == json.loads((ckpt / "config.json").read_text())
    assert json.loads((second / "config.json").read_text())["hidden_dropout_prob"] == 0.2
    assert checkpoint.upload_folder(uploads, "mine", _zip(other)) == second



def test_two_uploads_of_one_name_at_once_each_keep_their_own(ckpt, tmp_path, monkeypatch):
    """Both pick the free folder before either lands (the load check takes seconds): the second to land takes the
    next name, and the first's model stays as it was."""
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    _edit_config(other, hidden_dropout_prob=0.2)
    uploads = tmp_path / "uploaded-models"
    picked = checkpoint.upload_folder(uploads, "mine", _zip(other))  # the second person's pick, before the first lands
    assert checkpoint.keep_upload(_zip(ckpt), uploads, "mine", "mine.zip") == picked
    real = checkpoint.upload_folder
    picks = iter([picked])
    monkeypatch.setattr(checkpoint, "upload_folder", lambda *a: next(picks, None) or real(*a))
    second = checkpoint.keep_upload(_zip(other), uploads, "mine", "mine.zip")
    assert second == uploads / "mine-2"
    assert json.loads((picked / "config.json").read_text()) == json.loads((ckpt / "config.json").read_text())
    assert json.loads((second / "config.json").read_text())["hidden_dropout_prob"] == 0.2


def test_a_zip_with_a_password_is_said_in_one_sentence(ckpt, tmp_path, monkeypatch):
    data = _zip(ckpt)

    def encrypted(self, *a, **k):
        raise RuntimeError("File <ZipInfo filename='config.json'> is encrypted, password required for extraction")
    monkeypatch.setattr(zipfile.ZipFile, "open", encrypted)
    with pytest.raises(CheckpointError, match=r"cannot be read here \(.*encrypted.*\); zip the checkpoint folder "
                                              r"again with no password"):
        checkpoint.unpack_zip(data, tmp_path / "mine")
    assert not (tmp_path / "mine").exists()

def test_a_zip_pickle_is_refused_in_the_same_sentence(ckpt, capsys):
    """torch.save's own format (a zip holding a pickle) of an object that is not plain tensors was refused
    with torch's message cut at 120 characters ("... In PyTorch 2.6, ... fr")."""
    (ckpt / "model.safetensors").unlink()

    class Evil:
        def __reduce__(self):
            return (print, ("this must never run",))

    torch.save({"x": Evil()}, ckpt / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(ckpt)
    assert "holds more than plain tensors (a pickle that could run code), so it was not loaded" in str(e.value)
    assert "weights_only" not in str(e.value) and "PyTorch 2.6" not in str(e.value)
    assert "this must never run" not in capsys.readouterr().out


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin (legacy format)"])
def test_a_config_of_the_largest_sizes_beside_a_weights_file_of_one_tensor_builds_nothing(ckpt, nothing_is_built,
                                                                                          weights):
    """A 1 kB folder (config.json at the largest sizes the bounds allow, and a weights file of one 1-element
    tensor) was taken for a model of 10.7 billion parameters: 43 GB asked of the allocator, a traceback after 16 s,
    and the copy offered in the app's model list. Every matrix the config implies must be in the weights file
    (a legacy .bin, which declares nothing, once read): one sentence, nothing built."""
    from safetensors.torch import save_file

    _edit_config(ckpt, hidden_size=4096, num_hidden_layers=48, num_attention_heads=64, intermediate_size=16384,
                 vocab_size=250_000, max_position_embeddings=8192)
    (ckpt / "model.safetensors").unlink()
    (ckpt / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    if weights == "model.safetensors":
        save_file({"foo": torch.zeros(1)}, str(ckpt / "model.safetensors"))
    else:
        torch.save({"foo": torch.zeros(1)}, ckpt / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(ckpt)
    assert "config.json describes embeddings.position_embeddings.weight and " in str(e.value)
    assert "that the weights file does not hold; the two do not belong together" in str(e.value)


@pytest.mark.parametrize("name, content, said", [
    ("tokenizer_config.json", "[]", "tokenizer_config.json is not a JSON object of settings"),
    ("tokenizer_config.json", "[" * 100_000 + "]" * 100_000, "tokenizer_config.json nests too deeply"),
    ("tokenizer_config.json", '{"do_lower_case": tru', "tokenizer_config.json is not valid JSON"),
    ("vocab.txt", "x" * 2_000_000, "vocab.txt is over 1 MB, far more than a BERT tokenizer's file holds"),
])
def test_a_tokenizer_file_that_is_no_tokenizer_is_said_in_one_sentence(ckpt, monkeypatch, name, content, said):
    """A broken tokenizer file in an upload is one sentence (CheckpointError), never a traceback; a file's size is
    checked before it is read."""
    monkeypatch.setattr("bert_explorer.tokenizer.MAX_FILE_BYTES", 1_000_000)
    (ckpt / name).write_text(content)
    with pytest.raises(CheckpointError, match=re.escape(said)):
        checkpoint.load(ckpt, "BertForPreTraining")


def test_a_folder_whose_config_is_huge_is_not_read_to_tell_a_run_from_a_model(ckpt, monkeypatch):
    """Telling a run's folder from a model's reads config.json only within inspect's 1 MB bound."""
    (ckpt / "config.json").write_text(" " * 1_100_000 + json.dumps({"kind": "pretrain"}))
    read = []
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read.append(self.name) or real(self, *a, **k))
    assert checkpoint.resolve(ckpt) == ckpt
    assert "config.json" not in read
    with pytest.raises(CheckpointError, match="it is over 1 MB"):
        checkpoint.inspect(ckpt)


def test_a_hub_copy_that_cannot_be_used_says_to_choose_another_and_delete_it(tmp_path, monkeypatch):
    """A mirror's config of 48 layers beside weights of 2 was downloaded, kept and offered again and again with no
    way forward; its pickle-only pytorch_model.bin was told to be saved as model.safetensors (a user's file's
    remedy). A Hub copy is as the Hub sent it: choose another model, and delete its folder."""
    from bert_explorer import hub

    monkeypatch.setattr(hub, "cache_root", lambda: tmp_path / "hub")
    folder = tmp_path / "hub" / "models--evil--layers"
    snapshot = save_tiny_bert(folder / "snapshots" / "abc", WORDS)
    _edit_config(snapshot, num_hidden_layers=48)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(snapshot)
    assert str(e.value).endswith(f"the two do not belong together; these are the files the Hub sent: choose another "
                                 f"model, and delete {folder.resolve()} to free its space"), str(e.value)
    own = save_tiny_bert(tmp_path / "mine", WORDS)  # a folder of the user's: no such advice
    _edit_config(own, num_hidden_layers=48)
    with pytest.raises(CheckpointError, match=r"the two do not belong together$"):
        checkpoint.load(own)
    # a vocabulary the Hub sent that cannot be read: the same way forward (it said only what was wrong)
    words = save_tiny_bert(tmp_path / "hub" / "models--evil--vocab" / "snapshots" / "abc", WORDS)
    (words / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(words)
    assert "cannot build the tokenizer" in str(e.value) and str(e.value).endswith(
        f"choose another model, and delete {(tmp_path / 'hub' / 'models--evil--vocab').resolve()} to free its space")
