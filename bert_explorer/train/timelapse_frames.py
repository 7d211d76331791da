"""Time-lapse frames: what a pre-training run records of a few sentences while it trains.

A *frame* is one moment of a run: at step N (0 = the random initialisation), for each of a few
fixed sentences, the attention maps of a few chosen heads and the masked-LM probabilities at
each ``[MASK]``, plus the held-out MLM and NSP figures measured at that step. Frames are tiny
next to checkpoints (explorer-mini's checkpoint is 22 MB; eleven frames of it, all 16 heads, 0.31 MB), so
a model folder can ship its own time-lapse and a long GPU run can record many moments without
keeping a checkpoint for each.

The file, ``timelapse.json`` (in a run folder, and copied into the run's final checkpoint)::

    {"format": "bert-explorer-timelapse/1",
     "source": {"run": <run folder>, "device", "precision", "world_size", "config": {...}, "note"?},
     "model": {"num_layers": L, "num_heads": A, "vocab_size": V},
     "top_k": k,
     "heads": [[layer, head], ...],                 # 0-based, the heads whose attention is kept
     "sentences": [{"text", "tokens": [T WordPieces], "masks": [positions of [MASK]]}, ...],
     "frames": [{"step", "sequences_seen", "tokens_seen",
                 "eval": {"mlm_accuracy", "mlm_perplexity", "nsp_accuracy", ...} or {},
                 "sentences": [{"attention": [per head in "heads": T x T, in thousandths],
                                "masks": [{"position", "probabilities": {token: p, ...}}]}]}]}

``attention[h][i][j]`` is round(1000 x the weight that query token i puts on token j) in head
``heads[h]``: rows sum to 1000 give or take the rounding. ``probabilities`` holds P(token) at that
``[MASK]`` for every token that was among the top ``k`` of any frame recorded by the same process
(three significant digits), so a word's probability can be followed from step 0 to the end; its
``k`` largest entries are that frame's top ``k``. Frames recorded before a resume keep what they
had: a word that entered the top ``k`` only later has no value there.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .. import atomic
from ..tokenizer import WordPieceTokenizer

FORMAT = "bert-explorer-timelapse/1"
FILE = "timelapse.json"

# One [MASK] each, chosen to show different things being learnt: a frequent news frame (the
# page's default sentence), a fact, a sports report and a business report.
SENTENCES = (
    "the government said the [MASK] would rise next year .",
    "the capital of france is [MASK] .",
    "he scored two [MASK] in the second half .",
    "the company reported a rise in [MASK] .",
)
TOP_K = 10
MAX_HEADS = 16


def frame_steps(n: int, max_steps: int) -> list[int]:
    """Up to ``n`` steps at which to record a frame (fewer when a short run rounds two to the same
    step): step 0 (the random initialisation), the last step, and log-spaced steps between, from
    1 % of the run on, because a model changes fastest early on."""
    if n <= 0 or max_steps <= 0:
        return []
    if n == 1:
        return [max_steps]
    first = max(1.0, max_steps / 100)
    between = np.geomspace(first, max_steps, n - 1) if n > 2 else np.array([max_steps])
    return sorted({0, max_steps, *(int(round(s)) for s in between)})


def default_heads(num_layers: int, num_heads: int) -> list[list[int]]:
    """Every head when the model has at most 16 (explorer-mini: 4 x 4), else the first head of
    each layer: attention maps are the bulk of a frame, so a large model keeps a few."""
    if num_layers * num_heads <= MAX_HEADS:
        return [[layer, head] for layer in range(num_layers) for head in range(num_heads)]
    return [[layer, 0] for layer in range(num_layers)]


def _significant(p: float, digits: int = 3) -> float:
    return float(f"{p:.{digits}g}")


class FrameRecorder:
    """Records frames of a model into ``path`` (rewritten atomically after every frame).

    Keeps the full MLM distribution of each frame it computed in memory, so that a word which
    enters the top k late still gets its probability at every earlier frame of this process."""

    def __init__(self, path: str | Path, tokenizer: WordPieceTokenizer, sentences=SENTENCES,
                 heads: list[list[int]] | None = None, top_k: int = TOP_K, source: dict | None = None,
                 keep_until: int | None = None):
        self.path, self.tok, self.top_k = Path(path), tokenizer, top_k
        self.sentences = list(sentences)
        self.heads = heads
        self.source = source or {}
        self.doc: dict | None = None
        self._full: dict[int, list[list[np.ndarray]]] = {}  # step -> sentence -> mask -> [V]
        if keep_until is not None and self.path.exists():  # a resumed run: keep its earlier frames
            doc = read_frames(self.path)
            doc["frames"] = [f for f in doc["frames"] if f["step"] <= keep_until]
            if doc["sentences"] and [s["text"] for s in doc["sentences"]] == self.sentences:
                self.doc = doc

    @property
    def steps(self) -> list[int]:
        return [f["step"] for f in self.doc["frames"]] if self.doc else []

    def _start(self, model) -> None:
        c = model.config
        heads = self.heads if self.heads is not None else default_heads(c.num_layers, c.num_heads)
        for layer, head in heads:
            if not (0 <= layer < c.num_layers and 0 <= head < c.num_heads):
                raise ValueError(f"time-lapse head (layer {layer}, head {head}) does not exist: this model has "
                                 f"layer indices 0 to {c.num_layers - 1} and head indices 0 to {c.num_heads - 1}")
        sentences = []
        for text in self.sentences:
            enc = self.tok.encode(text, max_length=c.max_position_embeddings)
            sentences.append({"text": text, "tokens": list(enc.tokens),
                              "masks": [i for i, t in enumerate(enc.input_ids) if t == self.tok.mask_id]})
        self.doc = {"format": FORMAT, "source": self.source,
                    "model": {"num_layers": c.num_layers, "num_heads": c.num_heads, "vocab_size": c.vocab_size},
                    "top_k": self.top_k, "heads": [list(h) for h in heads], "sentences": sentences, "frames": []}

    @torch.no_grad()
    def record(self, model, step: int, sequences_seen: int | None = None, tokens_seen: int | None = None,
               evaluation: dict | None = None) -> dict:
        """Compute the frame of ``model`` (a BertForPreTraining, not DDP-wrapped) at ``step``, in
        float32 and eval mode (dropout off), add it and rewrite the file. Returns the frame."""
        if self.doc is None:
            self._start(model)
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        frame = {"step": int(step), "sequences_seen": sequences_seen, "tokens_seen": tokens_seen,
                 "eval": {k: v for k, v in (evaluation or {}).items() if k not in ("step", "split", "time")},
                 "sentences": []}
        full = []
        for s in self.doc["sentences"]:
            enc = self.tok.encode(s["text"], max_length=model.config.max_position_embeddings)
            batch = self.tok.tensors([enc], device=device)
            out = model(**batch, output_attentions=True)
            att = torch.stack([a[0] for a in out.attentions]).float()            # [L, A, T, T]
            chosen = torch.stack([att[layer, head] for layer, head in self.doc["heads"]])  # [heads, T, T]
            probs = out.mlm_logits[0, s["masks"]].float().softmax(-1).cpu().numpy()  # [M, V]
            frame["sentences"].append({"attention": (chosen * 1000).round().int().cpu().tolist(),
                                       "masks": [{"position": p} for p in s["masks"]]})
            full.append(list(probs))
        model.train(was_training)
        self.doc["frames"] = [f for f in self.doc["frames"] if f["step"] != step] + [frame]
        self.doc["frames"].sort(key=lambda f: f["step"])
        self._full[int(step)] = full
        self._fill_probabilities()
        self.write()
        return frame

    def _fill_probabilities(self) -> None:
        """Give every frame computed here P(word) for each word in any frame's top k."""
        for si, s in enumerate(self.doc["sentences"]):
            for mi in range(len(s["masks"])):
                words = set()
                for f in self.doc["frames"]:
                    m = f["sentences"][si]["masks"][mi]
                    if f["step"] in self._full:
                        top = np.argsort(-self._full[f["step"]][si][mi])[:self.top_k]
                        words |= {self.tok.id_to_token(int(i)) for i in top}
                    else:  # a frame read back from the file: its own top k is what it kept
                        words |= set(sorted(m.get("probabilities", {}), key=m["probabilities"].get)[-self.top_k:])
                ids = {w: self.tok.token_to_id(w) for w in words}
                for f in self.doc["frames"]:
                    if f["step"] in self._full:
                        p = self._full[f["step"]][si][mi]
                        f["sentences"][si]["masks"][mi]["probabilities"] = {
                            w: _significant(float(p[i])) for w, i in sorted(ids.items(), key=lambda x: -p[x[1]])
                            if i is not None}

    def write(self) -> None:
        atomic.write_text(self.path, dumps(self.doc))


def dumps(doc: dict) -> str:
    """The file's text: compact JSON (no spaces), which keeps the attention maps small."""
    return json.dumps(doc, separators=(",", ":")) + "\n"


def frames_file(folder: str | Path) -> Path | None:
    """The frames file of a run or model folder, or None when it has none."""
    p = Path(folder) / FILE
    return p if p.is_file() else None


def read_frames(path: str | Path) -> dict:
    """Read and check a frames file (or the one in a folder). Raises ValueError, in one sentence,
    when it is not one or its parts do not fit together."""
    p = Path(path)
    if p.is_dir():
        p = p / FILE
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p} is not a readable time-lapse frames file ({e}); delete it or record the frames again")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{p} is not a time-lapse frames file of format {FORMAT}; record the frames again")
    try:
        n_heads = len(doc["heads"])
        for f in doc["frames"]:
            if len(f["sentences"]) != len(doc["sentences"]):
                raise ValueError(f"step {f['step']} has {len(f['sentences'])} sentences, not {len(doc['sentences'])}")
            for s, fs in zip(doc["sentences"], f["sentences"]):
                T = len(s["tokens"])
                att = fs["attention"]
                if len(att) != n_heads or any(len(a) != T or any(len(r) != T for r in a) for a in att):
                    raise ValueError(f"step {f['step']}: the attention of {s['text']!r} is not {n_heads} maps of "
                                     f"{T} x {T}")
                if [m["position"] for m in fs["masks"]] != s["masks"]:
                    raise ValueError(f"step {f['step']}: the [MASK] positions of {s['text']!r} do not match")
    except (KeyError, TypeError) as e:
        raise ValueError(f"{p} is missing part of a time-lapse frames file ({e}); record the frames again")
    except ValueError as e:
        raise ValueError(f"{p} is damaged: {e}; record the frames again") from None
    return doc


def copy_frames(src: str | Path, model_dir: str | Path, note: str) -> Path:
    """Copy a run's frames into a model folder, with ``note`` saying where they come from (e.g.
    when the frames were recorded by another run than the one that made the model's weights)."""
    doc = read_frames(src)
    doc["source"] = {**doc.get("source", {}), "note": note}
    out = Path(model_dir) / FILE
    out.write_text(dumps(doc))
    return out

