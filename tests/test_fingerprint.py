"""One fingerprint of a model's weights for every cache: each file load() reads, whatever the model ships."""
from __future__ import annotations

import os
import time

from bert_explorer import disk_cache
from bert_explorer.fingerprint import fingerprint


class _Loaded:  # what the disk cache reads of a loaded model: its folder
    def __init__(self, path):
        self.path = path


def _rewrite(path, data: bytes) -> None:
    time.sleep(0.01)
    path.write_bytes(data)
    os.utime(path, ns=(time.time_ns(), time.time_ns()))


def test_weights_shipped_as_pytorch_model_bin_alone_are_fingerprinted(tmp_path):
    """Google's miniatures ship only pytorch_model.bin: new weights there are new results in every cache."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"a" * 10)
    before = (fingerprint(tmp_path), disk_cache.entry_key("probe", _Loaded(tmp_path)))
    _rewrite(tmp_path / "pytorch_model.bin", b"b" * 11)
    after = (fingerprint(tmp_path), disk_cache.entry_key("probe", _Loaded(tmp_path)))
    assert before[0] != after[0] and before[1] != after[1]


def test_a_hub_snapshot_s_links_are_followed_to_their_blobs(tmp_path):
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (blobs / "one").write_bytes(b"x" * 5)
    (blobs / "two").write_bytes(b"y" * 7)
    (snapshot / "model.safetensors").symlink_to(blobs / "one")
    first = fingerprint(snapshot)
    (snapshot / "model.safetensors").unlink()
    (snapshot / "model.safetensors").symlink_to(blobs / "two")  # a new download of the same file
    files = {name: rest for name, *rest in fingerprint(snapshot)[0][1]}
    assert fingerprint(snapshot) != first and files["model.safetensors"] == [7, (blobs / "two").stat().st_mtime_ns]


def test_a_run_folder_stands_for_its_model_and_its_feature_head(tmp_path):
    head = tmp_path / "run" / "feature_head"
    head.mkdir(parents=True)
    (tmp_path / "run" / "config.json").write_text('{"kind": "finetune"}')  # a run's settings, not a model's
    (head / "head.safetensors").write_bytes(b"h")
    first = fingerprint(tmp_path / "run")
    assert first[0][0].endswith("feature_head")
    _rewrite(head / "head.safetensors", b"hh")
    assert fingerprint(tmp_path / "run") != first
    model = tmp_path / "run" / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"m")
    assert [folder.rsplit("/", 1)[-1] for folder, _ in fingerprint(tmp_path / "run")] == ["model", "feature_head"]
    before = fingerprint(tmp_path / "run")
    _rewrite(model / "model.safetensors", b"mm")  # the fine-tuned model written again
    assert fingerprint(tmp_path / "run") != before


def test_a_model_s_config_and_vocabulary_are_part_of_what_it_computes(tmp_path):
    """The same weights made causal in config.json, or read with another vocabulary, compute otherwise: the caches
    kept serving what the model computed before the edit."""
    (tmp_path / "config.json").write_text('{"causal": false}')
    (tmp_path / "model.safetensors").write_bytes(b"w" * 10)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    seen = [(fingerprint(tmp_path), disk_cache.entry_key("head-map", _Loaded(tmp_path)))]
    _rewrite(tmp_path / "config.json", b'{"causal": true}')
    seen.append((fingerprint(tmp_path), disk_cache.entry_key("head-map", _Loaded(tmp_path))))
    _rewrite(tmp_path / "vocab.txt", b"[PAD]\n[UNK]\nthe\n")
    seen.append((fingerprint(tmp_path), disk_cache.entry_key("head-map", _Loaded(tmp_path))))
    assert len({str(f) for f, _ in seen}) == len({k for _, k in seen}) == 3
