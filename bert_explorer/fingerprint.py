"""Which weights are these? One answer for every cache that keeps what a model computed.

A result computed from a model is only valid for those weights: a run re-created under the same
folder, a checkpoint written again, a Hub snapshot updated must each be computed anew. The
fingerprint of a model is the size and time of writing of every file ``checkpoint.load`` reads, and
the folder's resolved path:

* ``model.safetensors``, or ``pytorch_model.bin`` (what Google's miniatures ship alone);
* ``base.json``, the tensors a delta checkpoint borrows from an installed model;
* ``head.safetensors``, a feature-based run's head;
* ``config.json`` (a model made causal, another ``layer_norm_eps``, other label names compute
  otherwise on the same weights) and the tokenizer's files (another vocabulary reads the same text
  as other ids).

A fine-tuning run's folder stands for its ``model/`` and ``feature_head/``. A Hub snapshot's files
are links into its blob store: they are followed, so a new download is a new fingerprint. It is a
list of lists (JSON as it is: a run stores it beside its predictions and compares it later).
Nothing here imports torch: the run system and the disk cache use it too.
"""
from __future__ import annotations

from pathlib import Path

# (the tokenizer's files are checkpoint.TOKENIZER_FILES, named here again: nothing here imports the package)
MODEL_FILES = ("model.safetensors", "pytorch_model.bin", "base.json", "head.safetensors", "config.json",
               "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def weights_folders(path: str | Path) -> list[Path]:
    """The folders ``checkpoint.load`` reads weights from for ``path``: a checkpoint folder itself; a
    fine-tuning run's folder, its fine-tuned model and its feature-based head."""
    p = Path(path)
    # (a run's folder has a config.json too, the run's settings: its model/ and feature_head/ say it is a run)
    return [d for d in (p / "model", p / "feature_head") if _is_dir(d)] or [p]


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # (a name longer than the system allows is no folder, not a traceback)
        return False


def fingerprint(path: str | Path) -> list:
    """``[resolved folder, [[file, size, mtime_ns], ...]]`` for each folder of :func:`weights_folders`
    (files that are not there are left out: a missing file is part of what the weights are)."""
    out = []
    for folder in weights_folders(path):
        files = []
        for name in MODEL_FILES:
            try:
                s = (folder / name).stat()
            except OSError:
                continue
            files.append([name, s.st_size, s.st_mtime_ns])
        try:
            where = str(folder.resolve())
        except OSError:
            where = str(folder)
        out.append([where, files])
    return out


def same_files(stored, now: list) -> bool:
    """Do two fingerprints name the same weight files (size and time of writing), wherever the folder
    is? For what a run keeps inside itself (its dev predictions): a runs folder moved or copied with
    its files' times (``cp -a``, ``rsync -a``) keeps them valid, a file written again does not."""
    try:
        return [files for _, files in stored] == [files for _, files in now]
    except (TypeError, ValueError):  # an older or damaged record
        return False


def frozen(value):
    """A fingerprint (lists) as nested tuples, to key a dict with."""
    return tuple(frozen(v) for v in value) if isinstance(value, list) else value
