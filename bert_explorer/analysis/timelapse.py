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

Nothing here draws: the page turns these numbers into a heatmap animation and a table.
``layer`` and ``head`` are 0-based indices, as everywhere in the code; what a user reads
counts from 1, as in the paper and on every page (index 0 is "layer 1"; see
``attention.layer_name`` / ``TimeLapse.title``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import checkpoint
from ..checkpoint import Loaded
from ..train.runs import Run
from .attention import attention_maps, head_name, layer_name
from .probes import MLM_HEAD, mlm_top_k

DEFAULT_SENTENCE = "the government said the [MASK] would rise next year ."


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


@dataclass
class TimeLapse:
    run: str
    text: str
    layer: int
    head: int
    frames: list[Frame]
    vocab: list[str] = field(default_factory=list)  # id -> token, for first_mask_probs

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
        top-``k`` words: {word: [p at step 1, p at step 2, ...]}."""
        last = self.frames[-1] if self.frames else None
        if last is None or last.first_mask_probs is None:
            return {}
        ids = np.argsort(-last.first_mask_probs)[:k]
        return {self.vocab[i] if i < len(self.vocab) else str(i):
                [float(f.first_mask_probs[i]) if f.first_mask_probs is not None else float("nan")
                 for f in self.frames] for i in ids}


def checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """The run's saved checkpoints as (step, directory), oldest first."""
    return Run(run_dir).checkpoints()


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
    att = attention_maps(loaded, text, max_tokens=max_tokens)
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
