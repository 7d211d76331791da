"""Time-lapse of pre-training: one sentence, seen by every saved checkpoint of a run.

A pre-training run saves ``checkpoints/step-N/`` along the way (paper, Appendix A.2: BERT
trains for 1M steps; we save a handful of snapshots). Feeding the *same* sentence to each
snapshot shows what pre-training builds, in order:

* the **attention** of one chosen head (layer ``l``, head ``a``): at step 0 every head
  spreads its attention almost evenly; patterns such as "look at the previous token" or
  "park on [SEP]" (Clark et al. 2019) appear as the masked-LM loss falls;
* the **masked-LM top-k** at each ``[MASK]``: first the most frequent tokens of the corpus
  ("the", ".", ","), then words of the right kind, then the right word;
* the probability that each checkpoint gives to the words the *last* checkpoint likes best,
  so one can watch the final answer rise out of the noise.

A run that recorded *frames* (``train/timelapse_frames.py``: the attention of a few heads and
the MLM probabilities for a few fixed sentences at chosen steps), and a model folder that ships
them, give the same picture without any checkpoint: :func:`timelapse_from_frames`.

Nothing here draws: the page turns these numbers into a heatmap animation and a table.
``layer`` and ``head`` are 0-based indices, as everywhere in the code; what a user reads
counts from 1, as in the paper and on every page (index 0 is "layer 1"; see
``heads.layer_name`` / ``TimeLapse.title``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ... import checkpoint, limits
from ...checkpoint import Loaded
from ...runs.run import Run
from ...train.timelapse_frames import SENTENCES, frames_file, read_frames
from ..probes.pretraining_tasks import MLM_HEAD, mlm_top_k, top_k_at
from .heads import attention_maps, head_name, layer_name

DEFAULT_SENTENCE = SENTENCES[0]  # the first of the sentences that recorded frames hold


@dataclass
class Frame:
    """What one checkpoint makes of the sentence."""

    step: int
    path: str
    tokens: list[str]
    attention: np.ndarray             # [T, T]: row i = how query token i spreads its attention
    predictions: list[dict]           # mlm_top_k: one entry per [MASK], best first
    first_mask_probs: np.ndarray | None = None  # [V] softmax at the first [MASK] (None without one)
    eval: dict = field(default_factory=dict)    # held-out metrics logged at this step, if any
    sequences_seen: int | None = None           # recorded frames only: training sequences up to this step
    tokens_seen: int | None = None              # ... and real (non-padding) tokens


@dataclass
class TimeLapse:
    run: str
    text: str
    layer: int
    head: int
    frames: list[Frame]
    vocab: list[str] = field(default_factory=list)  # id -> token, for first_mask_probs
    source: dict = field(default_factory=dict)      # recorded frames: the run that recorded them

    @property
    def title(self) -> str:
        """The chosen head as a user reads it, counted from 1: "Layer 1, head 1" for indices (0, 0)."""
        return f"{layer_name(self.layer).capitalize()}, {head_name(self.head)}"

    @property
    def steps(self) -> list[int]:
        return [f.step for f in self.frames]

    @property
    def tokens(self) -> list[str]:
        return self.frames[-1].tokens if self.frames else []

    def attention_stack(self) -> np.ndarray:
        """[S, T, T]: the chosen head's attention at each of the S checkpoints."""
        return np.stack([f.attention for f in self.frames])

    def top_k_rows(self) -> list[dict]:
        """One row per checkpoint and [MASK]: step, mask position and the top-k words."""
        rows = []
        for f in self.frames:
            for m in f.predictions:
                rows.append({"step": f.step, "position": m["position"],
                             **{f"#{i + 1}": f"{p['token']} ({p['probability']:.2f})"
                                for i, p in enumerate(m["predictions"])}})
        return rows

    def emergence(self, k: int = 3) -> dict[str, list[float]]:
        """P(word) at the first [MASK], checkpoint by checkpoint, for the last checkpoint's
        top-``k`` words: {word: [p at step 1, p at step 2, ...]} (nan where a recorded frame
        holds no value for that word)."""
        last = self.frames[-1] if self.frames else None
        if last is None or last.first_mask_probs is None:
            return {}
        ids = np.argsort(-last.first_mask_probs)[:k]
        return {self.vocab[i] if i < len(self.vocab) else str(i):
                [float(f.first_mask_probs[i]) if f.first_mask_probs is not None else float("nan")
                 for f in self.frames] for i in ids}


def default_sentence(run_dir: str | Path) -> str:
    """The sentence a run's time-lapse opens on: :data:`DEFAULT_SENTENCE` (news), or, for a run whose
    vocabulary was learnt on an uploaded text, a sentence of that text's held-out part with a word near its
    middle masked (in a small vocabulary of its own the news sentence comes out as characters and [UNK])."""
    config = Path(run_dir) / "config.json"
    return _default_sentence(str(run_dir), config.stat().st_mtime if config.is_file() else 0.0)


@functools.lru_cache(maxsize=32)  # (the page asks on every rerun; an upload is read once)
def _default_sentence(run_dir: str, _config_stamp: float) -> str:
    from ...train.pretrain_config import PretrainConfig
    from ...train.pretraining_data import cloze_sentences, learns_its_words_from_an_upload, split_corpus

    try:
        cfg = PretrainConfig.from_dict({k: v for k, v in Run(run_dir).config().items() if k != "kind"})
        if not learns_its_words_from_an_upload(cfg):
            return DEFAULT_SENTENCE
        return (cloze_sentences(split_corpus(cfg)[1], 1) or [DEFAULT_SENTENCE])[0]
    except (OSError, ValueError, TypeError, KeyError):  # the upload gone or unreadable: the run page says why
        return DEFAULT_SENTENCE


def shipped_frames() -> dict[str, Path]:
    """The shipped models whose folder holds recorded time-lapse frames: {short name: frames file}."""
    found = {}
    for name, (locate, _) in checkpoint.SHORT_NAMES.items():
        folder = locate()
        if folder is not None and frames_file(folder):
            found[name] = frames_file(folder)
    return found


def checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """The run's saved checkpoints as (step, directory), oldest first."""
    return Run(run_dir).checkpoints()


def checkpoints_to_read(found: list[tuple[int, Path]]) -> list[tuple[int, Path]]:
    """Of a run's checkpoints (oldest first), those one time-lapse reads: all of them up to
    ``limits.TIMELAPSE_CHECKPOINTS`` and ``limits.TIMELAPSE_BYTES`` of weights, else as many as fit, evenly
    spaced, the first and the last among them. Each is loaded and run once, so a run with many saves (or a
    large model) does not hold the server for minutes."""
    if not found:
        return []
    weights = sum(f.stat().st_size for f in Path(found[-1][1]).glob("*.safetensors")) or 1
    n = max(2, min(limits.TIMELAPSE_CHECKPOINTS, int(limits.TIMELAPSE_BYTES // weights)))
    if len(found) <= n:
        return list(found)
    return [found[i] for i in sorted({round(i * (len(found) - 1) / (n - 1)) for i in range(n)})]


def _first_mask_probs(loaded: Loaded, text: str) -> np.ndarray | None:
    tok = loaded.tokenizer
    enc = tok.encode(text, max_length=loaded.config.max_position_embeddings)
    if tok.mask_id not in enc.input_ids:
        return None
    batch = tok.tensors([enc], device=next(loaded.model.parameters()).device)
    with torch.no_grad():
        logits = loaded.model(**batch).mlm_logits[0, enc.input_ids.index(tok.mask_id)]  # [V]
    return logits.float().softmax(-1).cpu().numpy()


def frame(loaded: Loaded, text: str, layer: int, head: int, top_k: int = 5, max_tokens: int = 64,
          step: int = 0) -> Frame:
    """One checkpoint's view of ``text``: head (layer, head)'s attention (0-based indices) and the MLM top-k."""
    c = loaded.config
    if not 0 <= layer < c.num_layers:
        raise ValueError(f"layer {layer} does not exist: this model has layer indices 0 to {c.num_layers - 1} "
                         f"(layers 1 to {c.num_layers} as the app counts them)")
    if not 0 <= head < c.num_heads:
        raise ValueError(f"head {head} does not exist: this model has head indices 0 to {c.num_heads - 1} "
                         f"(heads 1 to {c.num_heads} as the app counts them)")
    tok = loaded.tokenizer
    enc = tok.encode(text, max_length=min(max_tokens, c.max_position_embeddings))
    if len(tok.encode(text).input_ids) == len(enc.input_ids):
        # (the common case, a sentence within max_tokens: one pass gives the attention and the guesses)
        batch = tok.tensors([enc], device=next(loaded.model.parameters()).device)
        with torch.no_grad():
            out = loaded.model(**batch, output_attentions=True)
        masks = [i for i, t in enumerate(enc.input_ids) if t == tok.mask_id]
        logits = out.mlm_logits[0]  # [T, V]
        return Frame(step=step, path=str(loaded.path), tokens=list(enc.tokens),
                     attention=out.attentions[layer][0, head].float().cpu().numpy(),
                     predictions=top_k_at(logits, masks, tok, top_k) if masks else [],
                     first_mask_probs=logits[masks[0]].float().softmax(-1).cpu().numpy() if masks else None)
    att = attention_maps(loaded, text, max_tokens=max_tokens)  # a longer one: the attention of its first part
    try:
        predictions = mlm_top_k(loaded, text, top_k)
    except ValueError:  # no [MASK] in the sentence: attention only
        predictions = []
    return Frame(step=step, path=str(loaded.path), tokens=att.tokens,
                 attention=att.attentions[layer, head].astype(np.float32),
                 predictions=predictions, first_mask_probs=_first_mask_probs(loaded, text))


def timelapse(run_dir: str | Path, text: str = DEFAULT_SENTENCE, layer: int = 0, head: int = 0,
              top_k: int = 5, steps: list[int] | None = None, max_tokens: int = 64) -> TimeLapse:
    """Load each checkpoint of the run (or only those at ``steps``) and compute its Frame.

    Raises ValueError when the run has no checkpoint yet, or for a layer/head out of range."""
    found = checkpoints(run_dir)
    if steps is not None:
        wanted = set(steps)
        found = [(s, p) for s, p in found if s in wanted]
    if not found:
        raise ValueError(f"{run_dir} has no saved checkpoint yet; the first one is written at the run's "
                         f"first save_every step (and at the end)")
    evals = {m["step"]: {k: v for k, v in m.items() if k not in ("step", "split", "time")}
             for m in Run(run_dir).metrics() if m.get("split") == "eval"}
    frames, loaded = [], None
    for step, path in found:
        loaded = checkpoint.load(path, "BertForPreTraining", need_heads=(MLM_HEAD,))
        f = frame(loaded, text, layer, head, top_k, max_tokens, step=step)
        f.eval = evals.get(step, {})
        frames.append(f)
    vocab = loaded.tokenizer.convert_ids_to_tokens(range(loaded.tokenizer.vocab_size))
    return TimeLapse(str(run_dir), text, layer, head, frames, vocab)


def timelapse_from_frames(path: str | Path, sentence: int = 0, layer: int = 0, head: int = 0,
                          top_k: int = 5) -> TimeLapse:
    """The time-lapse of recorded frames (a ``timelapse.json``, or the folder holding one): the
    ``sentence``-th recorded sentence, head (``layer``, ``head``) (0-based; it must be one of the
    recorded heads), the top-``top_k`` words at each [MASK]. Raises ValueError, in one sentence,
    for a head or sentence the frames do not hold, or a damaged file."""
    doc = read_frames(path)
    if not doc["frames"]:
        raise ValueError(f"{path} holds no frame yet; the run records its first one at step 0")
    if not 0 <= sentence < len(doc["sentences"]):
        raise ValueError(f"sentence {sentence} is not recorded: the frames hold sentences 0 to "
                         f"{len(doc['sentences']) - 1}")
    heads = [tuple(h) for h in doc["heads"]]
    if (layer, head) not in heads:
        raise ValueError(f"{layer_name(layer).capitalize()}, {head_name(head)} is not among the recorded heads: "
                         + ", ".join(f"{layer_name(a)} {head_name(b)}" for a, b in heads))
    h = heads.index((layer, head))
    s = doc["sentences"][sentence]
    top_k = min(top_k, doc["top_k"])
    # Every word any frame gives a probability for, so that emergence() can follow the last
    # frame's favourites back through the earlier ones.
    vocab = sorted({w for f in doc["frames"] for m in f["sentences"][sentence]["masks"][:1] for w in m["probabilities"]})
    index = {w: i for i, w in enumerate(vocab)}
    frames = []
    for f in doc["frames"]:
        fs = f["sentences"][sentence]
        predictions = [{"position": m["position"], "predictions": [
            {"token": w, "id": None, "probability": p}
            for w, p in sorted(m["probabilities"].items(), key=lambda x: -x[1])[:top_k]]} for m in fs["masks"]]
        first = None
        if fs["masks"]:
            first = np.full(len(vocab), np.nan)
            for w, p in fs["masks"][0]["probabilities"].items():
                first[index[w]] = p
        frames.append(Frame(step=f["step"], path=str(path), tokens=list(s["tokens"]),
                            attention=np.asarray(fs["attention"][h], dtype=np.float32) / 1000,
                            predictions=predictions, first_mask_probs=first, eval=dict(f.get("eval") or {}),
                            sequences_seen=f.get("sequences_seen"), tokens_seen=f.get("tokens_seen")))
    return TimeLapse(str(path), s["text"], layer, head, frames, vocab, dict(doc.get("source") or {}))
