"""Training an SAE on one layer of the loaded model, and everything the feature browser reads, as
disk-cache entries keyed by the weights' fingerprint, the layer and the settings.

Two entries, so that a second SAE of the same layer (another k, another width) reuses the first's
activations:

| entry | what | size (minilm-mlm-nsp, 1 M tokens) |
|---|---|---|
| ``sae-acts-<key>`` | ``acts.npy`` the hidden vectors after layer l, fp16 [N, H]; the tokens, sentences, masks | 0.8 GB |
| ``features-<key>`` | the SAE (``sae.safetensors``), its quality (``meta.json``), each token's k active features (``codes.npz``), per-feature statistics (``features.npz``), the tokens and sentences again | 0.15 GB |

The browser needs only the second: the activations may be evicted (the cache's quota) and the
features stay readable.

**Which text.** By default the first million WordPieces of ``vital``, the Wikipedia lead sections of
about 10,000 Vital Articles: every field of knowledge, so features of many topics can show, and none
of the documents the masked-LM loss is measured on (held-out BBC News and State of the Union
documents, ``probes/quality.py``). [CLS] and [SEP] are not kept, and 15 % of the WordPieces are
replaced by [MASK] before the model reads them, as in pre-training (Devlin et al. 2019, Section 3.1):
the loss is read at [MASK]s and steering happens there, so the SAE must know what they look like.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ... import atomic, disk_cache
from ...checkpoint import Loaded, encoder_of
from ...fingerprint import fingerprint
from ...runs import neighbour_jobs
from ...runs.report import duration_text
from ...train.device import cpu_bf16_is_fast
from ..first_visit import first_visit
from ..neighbours.index import (_batches, _tensors, check_layer, corpus_counts, corpus_label, corpus_settings,
                                corpus_units, hidden_upto)
from . import sae as saes
from . import splice

FORMAT = 1
DEFAULT_CORPUS = "vital"
DEFAULT_TOKENS = 1_000_000
# What a user may set (the page's boxes and the CLI's flags): k and the width as the page offers them; the
# tokens from enough for a feature's statistics to twice the default (1 M of minilm's are 0.8 GB of fp16
# activations, held in memory while the SAE trains); passes over them within a run of minutes on a CPU.
K_RANGE, WIDTH_RANGE, TOKENS_RANGE, EPOCHS_RANGE = (4, 128), (2, 32), (10_000, 2_000_000), (1, 10)
MAX_AMOUNT = 200.0  # steering: what is added to a feature's activation, or its clamped value, either way
MASK_FRACTION = 0.15
MAX_PIECES = 128
TOP_CONTEXTS = 20       # per feature, as the issue asks and Neuronpedia shows
HIST_BINS = 24
WORDS = 10              # words pushed up and down per feature
EVAL_SEQUENCES = 192    # held-out sequences for the three losses (each run three times)
KIND, ACTS_KIND = "features", "sae-acts"
BUILDER = ("bert_explorer.cli.features", "build")

Progress = Callable[[float, str], None]


@first_visit("Features of a layer", "the time of an SAE step, behind the training estimate")
def _estimate_at_first_visit(loaded: Loaded) -> dict:
    from ...train.estimate import background_threads
    # the page's estimate: its builds run in the background, with the background's threads
    return estimate_seconds(loaded, FeatureSettings(layer=default_layer(loaded)), threads=background_threads())


def build_argv(model: str, settings: FeatureSettings) -> list[str]:
    """The arguments of the background builder (``python -m`` :data:`BUILDER`) for these settings."""
    return ["--model", model, "--layer", str(settings.layer), "--k", str(settings.sae.k), "--width",
            str(settings.sae.width_factor), "--tokens", str(settings.tokens), "--epochs", str(settings.sae.epochs),
            "--corpus", str(settings.corpus)]


def default_layer(loaded: Loaded) -> int:
    """The middle layer: (L + 1) // 2, layer 3 of 6 for MiniLM."""
    return (encoder_of(loaded.model).config.num_layers + 1) // 2


# ----- the activations ----------------------------------------------------------------------------
MLM_HEAD = "masked-LM head"  # (checkpoint's report names the heads a model lacks or never trained so)


def reads_words(loaded: Loaded) -> bool:
    """Has the model a trained masked-LM head? A feature's words, the masked-LM loss with the SAE spliced in and
    steering read it; an encoder without one (MiniLM as released) still has features, their contexts and a
    sentence's features. (Its untrained head, drawn at random, once gave words and a "loss recovered".)"""
    return MLM_HEAD not in loaded.report.missing


def acts_path(loaded: Loaded, corpus, layer: int, tokens: int) -> Path:
    return disk_cache.entry(ACTS_KIND, loaded, **corpus_settings(corpus), layer=int(layer), tokens=int(tokens),
                            mask=MASK_FRACTION, format=FORMAT, max_pieces=MAX_PIECES)


@torch.no_grad()
def collect(loaded: Loaded, corpus, layer: int, tokens: int, progress: Progress | None = None,
            should_stop: Callable[[], bool] | None = None) -> dict:
    """The hidden vectors after ``layer`` of the corpus's first ``tokens`` WordPieces (fp16), with
    each one's token id, sentence, character span and whether it was read as [MASK]."""
    check_layer(loaded, layer)
    tok = loaded.tokenizer
    units = corpus_units(tok, corpus, MAX_PIECES)
    n_units, have = 0, 0
    while n_units < len(units.texts) and have < tokens:
        have += units.pieces[n_units]
        n_units += 1
    texts = units.texts[:n_units]
    encs = tok.encode_batch(texts, max_length=MAX_PIECES)
    H = encoder_of(loaded.model).config.hidden_size
    N = sum(len(e.input_ids) - 2 for e in encs)
    acts = np.zeros((N, H), np.float16)
    row_of = np.zeros(len(encs) + 1, np.int64)
    row_of[1:] = np.cumsum([len(e.input_ids) - 2 for e in encs])
    masked = np.zeros(N, bool)
    gen = torch.Generator().manual_seed(0)
    device = next(loaded.model.parameters()).device
    was = loaded.model.training
    loaded.model.eval()
    # bf16 where the CPU multiplies it fast (about twice the tokens a second): the vectors are kept in
    # fp16 anyway, and the SAE's error is a hundred times the rounding's
    fast = device.type == "cpu" and cpu_bf16_is_fast()
    done, t0 = 0, time.time()
    try:
        for batch in _batches([len(e.input_ids) for e in encs]):
            if should_stop is not None and should_stop():
                raise saes.TrainingStopped("stopped")
            t = _tensors([encs[b] for b in batch], tok.pad_id, device)
            ids = t["input_ids"]
            ordinary = t["attention_mask"].bool() & (ids != tok.cls_id) & (ids != tok.sep_id)
            to_mask = ordinary & (torch.rand(ids.shape, generator=gen) < MASK_FRACTION).to(device)
            t["input_ids"] = ids.masked_fill(to_mask, tok.mask_id)
            with torch.autocast("cpu", torch.bfloat16, enabled=fast):
                h = hidden_upto(loaded, t, [layer])[layer]                  # [B, T, H]
            for j, b in enumerate(batch):
                m = len(encs[b].input_ids)
                acts[row_of[b]:row_of[b + 1]] = h[j, 1:m - 1].float().cpu().numpy()
                masked[row_of[b]:row_of[b + 1]] = to_mask[j, 1:m - 1].cpu().numpy()
            done += sum(len(encs[b].input_ids) - 2 for b in batch)
            if progress:
                rate = done / max(time.time() - t0, 1e-6)
                progress(done / N, f"layer {layer} of {corpus_label(corpus)}: {done:,} of {N:,} tokens "
                                   f"({rate:,.0f} tokens/s, this stage about {duration_text((N - done) / rate)} "
                                   "left)")
    finally:
        loaded.model.train(was)
    return {"acts": acts, "masked": masked,
            "token_ids": np.array([t for e in encs for t in e.input_ids[1:-1]], np.int32),
            "unit": np.repeat(np.arange(len(encs), dtype=np.int32), np.diff(row_of)),
            "starts": np.array([o[0] for e in encs for o in e.offsets[1:-1]], np.int32),
            "ends": np.array([o[1] for e in encs for o in e.offsets[1:-1]], np.int32),
            "texts": texts, "sources": units.sources[:n_units]}


TOKEN_FIELDS = ("masked", "token_ids", "unit", "starts", "ends")


def _write_tokens(folder: Path, data: dict) -> None:
    np.savez(folder / "tokens.npz", **{k: data[k] for k in TOKEN_FIELDS})
    (folder / "sentences.json").write_text(json.dumps({"text": data["texts"], "source": data["sources"]}))


def _read_tokens(folder: Path) -> dict:
    with np.load(folder / "tokens.npz") as z:
        out = {k: z[k] for k in TOKEN_FIELDS}
    s = json.loads((folder / "sentences.json").read_text())
    return {**out, "texts": s["text"], "sources": s["source"]}


def activations(loaded: Loaded, corpus, layer: int, tokens: int, progress: Progress | None = None,
                should_stop=None) -> dict:
    """:func:`collect`, kept in the cache (read back memory-mapped when it is there)."""
    path = acts_path(loaded, corpus, layer, tokens)
    if not (path / "acts.npy").is_file():
        data = collect(loaded, corpus, layer, tokens, progress, should_stop)
        with disk_cache.writing(path, optional="the layer's activations") as tmp:
            np.save(tmp / "acts.npy", data["acts"])
            _write_tokens(tmp, data)
        return data
    disk_cache.mark_used(path)
    return {**_read_tokens(path), "acts": np.load(path / "acts.npy")}


# ----- the features entry ---------------------------------------------------------------------------
@dataclass
class FeatureSettings:
    layer: int
    corpus: str = DEFAULT_CORPUS
    tokens: int = DEFAULT_TOKENS
    sae: saes.SaeConfig = field(default_factory=saes.SaeConfig)

    def key(self, loaded: Loaded) -> dict:
        return {**corpus_settings(self.corpus), "layer": int(self.layer), "tokens": int(self.tokens),
                "sae": self.sae.to_dict(), "format": FORMAT, "mask": MASK_FRACTION}


def entry_path(loaded: Loaded, settings: FeatureSettings) -> Path:
    return disk_cache.entry(KIND, loaded, **settings.key(loaded))


def is_complete(path: Path) -> bool:
    return (Path(path) / "meta.json").is_file()


def state(loaded: Loaded, settings: FeatureSettings) -> dict:
    """ready / building / stopped / failed / missing (``neighbour_jobs.build_state``), and the path."""
    path = entry_path(loaded, settings)
    return {**neighbour_jobs.build_state(path, is_complete(path)), "path": str(path)}


def stop_file(path: Path) -> Path:
    return neighbour_jobs.work_dir(path) / "stop"


def request_stop(path: Path) -> None:
    """Ask the builder of ``path`` to stop at its next step (the page's Cancel); it says "cancelled"."""
    atomic.write_text(stop_file(path), "stop")


def trained(loaded: Loaded) -> list[dict]:
    """Every complete features entry of this model's weights in the cache: its meta, newest first.
    Classroom mode offers these to everyone (training is off there)."""
    weights = json.loads(json.dumps(fingerprint(loaded.path), default=str))
    out = []
    for d in disk_cache.cache_root().glob(f"{KIND}-*"):
        try:
            meta = json.loads((d / "meta.json").read_text())
        except (OSError, ValueError):
            continue
        if meta.get("weights") == weights:
            out.append({**meta, "path": str(d)})
    return sorted(out, key=lambda m: m.get("built", ""), reverse=True)


def eval_instances(loaded: Loaded, n: int = EVAL_SEQUENCES) -> list:
    """Held-out pre-training sequences with fixed masks: those ``probes/quality.py`` measures on."""
    from ...train.pretraining_data import held_out_instances, split_corpus
    from ..probes.quality import held_out_settings
    cfg, _ = held_out_settings(loaded)
    _, held = split_corpus(cfg)
    return held_out_instances(cfg, held, loaded.tokenizer)[:n]


def build(loaded: Loaded, settings: FeatureSettings, progress: Progress | None = None, *,
          instances: list | None = None) -> Path:
    """Collect, train, measure and keep; the entry's folder. Raises ``neighbour_jobs.BuildBusy`` when
    another process builds the same entry, ``sae.TrainingStopped`` when cancelled. ``instances``:
    the held-out sequences of the loss (default :func:`eval_instances`)."""
    path = entry_path(loaded, settings)
    if is_complete(path):
        return path
    with neighbour_jobs.builder_lock(path):
        if is_complete(path):
            return path
        stop_file(path).unlink(missing_ok=True)
        started = time.time()

        def say(fraction: float, message: str, state: str = "running") -> None:
            neighbour_jobs.write_progress(path, state=state, fraction=fraction, message=message, started=started)
            if progress:
                progress(fraction, message)

        should_stop = stop_file(path).exists
        try:
            _build_locked(loaded, settings, path, say, should_stop, instances, started, shares(loaded, settings))
        except saes.TrainingStopped:
            say(0.0, "cancelled", state="cancelled")
            raise
        except Exception as e:
            neighbour_jobs.write_progress(path, state="failed", error=f"{type(e).__name__}: {e}",
                                          fraction=0.0, message=f"failed: {e}")
            raise
    return path


# How the build's time is shared out on its progress bar where its estimate cannot say (measured for
# minilm-mlm-nsp's default): the activations, the training, the statistics, each feature's tables (the losses
# and the start take the rest).
SHARES = (0.3, 0.55, 0.05, 0.05)


def shares(loaded: Loaded, settings: FeatureSettings) -> tuple[float, float, float, float]:
    """The parts of the bar as the build's estimate shares its time out (the time left is read from the bar: with
    fixed shares a build of twice the width said "17 min left" where 4 min 30 s were): the activations, the
    training, the statistics (a sixth of an epoch) and each feature's tables (its words through the decoder: a
    stage the losses' share had, so its time left rose while it ran); the losses and the start are the rest."""
    try:
        est = estimate_seconds(loaded, settings)
    except (OSError, ValueError, RuntimeError):  # (the estimate's own measurement failed: the shares measured once)
        return SHARES
    total = est["seconds"]
    if not total > 0:
        return SHARES
    return tuple(est[k] / total for k in ("activation_seconds", "train_seconds", "statistics_seconds",
                                          "effects_seconds"))


def _build_locked(loaded, settings, path, say, should_stop, instances, started, parts=SHARES) -> None:
    acts_share, train_share, stats_share, tables_share = parts
    layer = settings.layer
    t0 = time.time()
    data = activations(loaded, settings.corpus, layer, settings.tokens,
                       lambda f, m: say(acts_share * f, f"activations: {m}"), should_stop)
    acts_seconds = time.time() - t0
    say(acts_share, "training the SAE…")
    sae, history = saes.train_sae(data["acts"], settings.sae,
                                  progress=lambda f, m: say(acts_share + train_share * f, f"training: {m}"),
                                  should_stop=should_stop)
    base = acts_share + train_share

    def say_or_stop(fraction, message):  # a Cancel in the statistics waits for one phase at most, not all
        if should_stop is not None and should_stop():
            raise saes.TrainingStopped("stopped")
        say(fraction, message)
    say_or_stop(base, "reading every token's features…")
    N = len(data["acts"])
    stats = saes.statistics(sae, data["acts"])
    acts_mean = torch.from_numpy(np.asarray(data["acts"], np.float32).mean(0)) if N <= 200_000 else _mean(data["acts"])
    say_or_stop(base + stats_share, "each feature's top contexts, histogram and words…")
    per_feature = feature_tables(loaded, sae, stats, data["token_ids"])
    done = base + stats_share + tables_share
    if reads_words(loaded):
        say_or_stop(done, "the masked-LM loss: clean, with the SAE, with the mean…")
        held = instances if instances is not None else eval_instances(loaded)
        quality = measure_loss(loaded, sae, layer, acts_mean, held, lambda f: say_or_stop(
            done + (1 - done) * 0.95 * f, f"the masked-LM loss: {f:.0%} of it…"))
    else:  # no trained head to read the loss with: none is said
        quality = {**dict.fromkeys(("loss_clean", "loss_sae", "loss_mean", "loss_recovered")), "eval_sequences": 0}
    meta = {
        "layer": layer, "corpus": corpus_label(settings.corpus), "tokens": N, "hidden_size": int(sae.W_dec.shape[0]),
        "n_features": sae.n_features, "k": sae.k, "settings": settings.sae.to_dict(),
        "fve": round(stats["fve"], 4), "mean_l0": round(stats["mean_l0"], 2),
        "dead_fraction": round(stats["dead_fraction"], 4), "dense_fraction": round(stats["dense_fraction"], 4),
        **{k: None if v is None else round(v, 4) for k, v in quality.items()}, "mlm_head": reads_words(loaded),
        "activation_seconds": round(acts_seconds, 1), "train_seconds": history["seconds"],
        "seconds": round(time.time() - started, 1), "threads": torch.get_num_threads(),
        "history": history, "model": str(loaded.path), "model_name": loaded.name,
        "weights": json.loads(json.dumps(fingerprint(loaded.path), default=str)),
        "built": time.strftime("%Y-%m-%d %H:%M:%S"), "format": FORMAT}
    with disk_cache.writing(path) as tmp:
        save_file(sae.state(), str(tmp / "sae.safetensors"))
        np.savez(tmp / "codes.npz", values=stats["values"], indices=stats["indices"])
        np.savez(tmp / "features.npz", **per_feature, density=stats["density"],
                 max_activation=stats["max_activation"], mean_activation=stats["mean_activation"],
                 acts_mean=acts_mean.numpy())
        _write_tokens(tmp, data)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    say(1.0, f"done in {duration_text(time.time() - started)}", state="done")


def _mean(acts) -> torch.Tensor:
    total = np.zeros(acts.shape[1], np.float64)
    for a in range(0, len(acts), 65536):
        total += np.asarray(acts[a:a + 65536], np.float64).sum(0)
    return torch.from_numpy((total / max(len(acts), 1)).astype(np.float32))


def measure_loss(loaded: Loaded, sae, layer: int, acts_mean: torch.Tensor, instances, progress=None) -> dict:
    """The masked-LM loss three ways (``splice.py``) on ``instances``, and the share recovered; ``progress(f)``
    after each of the three passes."""
    tok = loaded.tokenizer
    step = progress or (lambda f: None)
    # [CLS], [SEP] (and [PAD]) keep their vectors: the SAE never saw them. [MASK] is replaced: it did.
    special = torch.tensor(sorted(i for i in tok.special_ids() if i is not None and i != tok.mask_id))
    clean = splice.masked_lm_loss(loaded, instances)
    step(1 / 3)
    with_sae = splice.masked_lm_loss(loaded, instances, layer=layer, replace=sae_replacement(sae), skip=special)
    step(2 / 3)
    mean = splice.masked_lm_loss(loaded, instances, layer=layer, replace=splice.mean_replacement(acts_mean),
                                 skip=special)
    step(1.0)
    return {"loss_clean": clean, "loss_sae": with_sae, "loss_mean": mean,
            "loss_recovered": splice.loss_recovered(clean, with_sae, mean), "eval_sequences": len(instances)}


def sae_replacement(sae):
    return splice.sae_replacement(sae)


def feature_tables(loaded: Loaded, sae, stats: dict, token_ids: np.ndarray) -> dict:
    """Per feature: its top activating rows, its histogram, and the words it pushes up and down."""
    vals, idx = stats["values"].astype(np.float32), stats["indices"].astype(np.int64)
    N, k = vals.shape
    F_ = sae.n_features
    flat_f, flat_v = idx.ravel(), vals.ravel()
    on = flat_v > 0
    rows = np.repeat(np.arange(N, dtype=np.int64), k)[on]
    flat_f, flat_v = flat_f[on], flat_v[on]
    order = np.lexsort((-flat_v, flat_f))                      # by feature, largest activation first
    f_sorted = flat_f[order]
    first = np.searchsorted(f_sorted, np.arange(F_))
    counts = np.bincount(flat_f, minlength=F_)
    top_rows = np.full((F_, TOP_CONTEXTS), -1, np.int64)
    top_vals = np.zeros((F_, TOP_CONTEXTS), np.float32)
    for j in range(TOP_CONTEXTS):
        has = counts > j
        pick = order[first[has] + j]
        top_rows[has, j], top_vals[has, j] = rows[pick], flat_v[pick]
    # histogram of each feature's non-zero activations, in HIST_BINS bins from 0 to its largest
    mx = np.maximum(stats["max_activation"], 1e-12)
    b = np.minimum((flat_v / mx[flat_f] * HIST_BINS).astype(np.int64), HIST_BINS - 1)
    hist = np.bincount(flat_f * HIST_BINS + b, minlength=F_ * HIST_BINS).reshape(F_, HIST_BINS)
    up_ids, up_vals, down_ids, down_vals = logit_effects(loaded, sae, torch.from_numpy(mx))
    return {"top_rows": top_rows, "top_values": top_vals, "histogram": hist.astype(np.int32),
            "up_ids": up_ids, "up_values": up_vals, "down_ids": down_ids, "down_values": down_vals}


@torch.no_grad()
def logit_effects(loaded: Loaded, sae, amounts: torch.Tensor, chunk: int = 256):
    """The words each feature pushes up and down when read straight through the MLM head: the head's
    logits at (mean vector + amount · the feature's direction) minus at the mean vector. The layers
    above l are skipped, as in the "logit lens" (nostalgebraist 2020); steering runs them."""
    head = getattr(getattr(loaded.model, "cls", None), "predictions", None)
    F_ = sae.n_features
    if head is None or not reads_words(loaded):  # an encoder without a trained MLM head: no words to read
        z = np.zeros((F_, WORDS), np.int32)
        return z, z.astype(np.float32), z, z.astype(np.float32)
    base = sae.mean.float()
    ref = head(base[None])[0].float()                          # [V]
    ups, upv, downs, downv = [], [], [], []
    for a in range(0, F_, chunk):
        d = sae.W_dec[:, a:a + chunk].T.float()                # [c, H]
        delta = head(base + amounts[a:a + chunk, None].float() * d).float() - ref  # [c, V]
        v, i = delta.topk(WORDS, dim=-1)
        ups.append(i), upv.append(v)
        v, i = (-delta).topk(WORDS, dim=-1)
        downs.append(i), downv.append(-v)
    cat = lambda xs, dt: torch.cat(xs).numpy().astype(dt)  # noqa: E731
    return cat(ups, np.int32), cat(upv, np.float32), cat(downs, np.int32), cat(downv, np.float32)


# ----- reading an entry: the browser ---------------------------------------------------------------
class Features:
    """A complete features entry, opened: what the page and the CLI show."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.meta = json.loads((self.path / "meta.json").read_text())
        self.sae = saes.TopKSAE.from_state(load_file(str(self.path / "sae.safetensors")), self.meta["k"])
        with np.load(self.path / "features.npz") as z:
            self.table = {k: z[k] for k in z.files}
        with np.load(self.path / "codes.npz") as z:
            self.values, self.indices = z["values"], z["indices"]
        self.tokens = _read_tokens(self.path)
        self.layer = int(self.meta["layer"])
        disk_cache.mark_used(self.path)

    @property
    def n_features(self) -> int:
        return int(self.meta["n_features"])

    def check(self, feature: int) -> int:
        if not 0 <= int(feature) < self.n_features:
            raise ValueError(f"feature {feature} does not exist: this SAE has features 0-{self.n_features - 1}")
        return int(feature)

    def context(self, row: int, width: int = 60) -> dict:
        """The sentence around token ``row``: left text, the token, right text (clipped to ``width``)."""
        t = self.tokens
        u = int(t["unit"][row])
        text, s, e = t["texts"][u], int(t["starts"][row]), int(t["ends"][row])
        left, right = text[max(0, s - width):s], text[e:e + width]
        token = "[MASK]" if t["masked"][row] else text[s:e]
        return {"left": ("…" if s > width else "") + left, "token": token, "right": right +
                ("…" if e + width < len(text) else ""), "was": text[s:e], "source": t["sources"][u], "row": int(row)}

    def top_contexts(self, feature: int, n: int = TOP_CONTEXTS) -> list[dict]:
        f = self.check(feature)
        out = []
        for r, v in zip(self.table["top_rows"][f][:n], self.table["top_values"][f][:n]):
            if r >= 0:
                out.append({"activation": float(v), **self.context(int(r))})
        return out

    def summary(self, feature: int) -> dict:
        f = self.check(feature)
        t = self.table
        return {"feature": f, "density": float(t["density"][f]), "max_activation": float(t["max_activation"][f]),
                "mean_activation": float(t["mean_activation"][f]), "histogram": t["histogram"][f].tolist(),
                "bin_width": float(t["max_activation"][f]) / HIST_BINS}

    def words(self, feature: int, tokenizer) -> dict:
        f = self.check(feature)
        t = self.table
        name = tokenizer.id_to_token
        return {"up": [(name(int(i)), float(v)) for i, v in zip(t["up_ids"][f], t["up_values"][f])],
                "down": [(name(int(i)), float(v)) for i, v in zip(t["down_ids"][f], t["down_values"][f])]}

    def search(self, tokenizer, word: str, n: int = 20) -> list[dict]:
        """Features that fire most on ``word`` (its first WordPiece) across the corpus: by their
        mean activation over its occurrences, with how often they fire there and elsewhere."""
        ids = tokenizer.encode(word.strip()).input_ids[1:-1]
        if not ids:
            return []
        wid = ids[0]
        rows = np.flatnonzero(self.tokens["token_ids"] == wid)
        if not len(rows):
            return []
        v, i = self.values[rows].astype(np.float32).ravel(), self.indices[rows].astype(np.int64).ravel()
        total = np.bincount(i, weights=v, minlength=self.n_features)
        fired = np.bincount(i[v > 0], minlength=self.n_features)
        best = np.argsort(-total)[:n]
        return [{"feature": int(f), "word": tokenizer.id_to_token(wid), "mean activation": float(total[f] / len(rows)),
                 "fires on the word": float(fired[f] / len(rows)), "density": float(self.table["density"][f]),
                 "occurrences": int(len(rows))} for f in best if total[f] > 0]

    @torch.no_grad()
    def sentence(self, loaded: Loaded, text: str, per_token: int = 5) -> list[dict]:
        """Each WordPiece of ``text`` with the features that fire on it, strongest first. [CLS] and [SEP]
        get none: the SAE was trained without them (their vectors are unlike every word's), so what it
        would say of them is not a reading."""
        tok = loaded.tokenizer
        enc = tok.encode(text, max_length=MAX_PIECES)
        t = tok.tensors([enc], device=next(loaded.model.parameters()).device)
        h = hidden_upto(loaded, t, [self.layer])[self.layer][0].float().cpu()  # [T, H]
        vals, idx = self.sae.encode_sparse(h)
        out = []
        for p, piece in enumerate(tok.id_to_token(i) for i in enc.input_ids):
            if piece in ("[CLS]", "[SEP]"):
                out.append({"position": p, "token": piece, "features": [], "left_out": True})
                continue
            order = torch.argsort(vals[p], descending=True)[:per_token]
            out.append({"position": p, "token": piece,
                        "features": [(int(idx[p, o]), float(vals[p, o])) for o in order if vals[p, o] > 0]})
        return out

    def quality(self) -> dict:
        m = self.meta
        return {k: m.get(k) for k in ("fve", "mean_l0", "dead_fraction", "dense_fraction", "loss_clean", "loss_sae",
                                      "loss_mean", "loss_recovered", "eval_sequences")}


def estimate_seconds(loaded: Loaded, settings: FeatureSettings, threads: int | None = None) -> dict:
    """About how long a build takes here: the activations' forward passes (``train.estimate``'s
    index estimate: the same batches through the first l layers) and the SAE's steps, timed the
    first time (three steps of the real sizes, kept by :func:`_step_seconds`), plus the statistics, the
    three losses and a background build's start: an idle machine's time (``train/speed.py``)."""
    from ...train import estimate
    check_layer(loaded, settings.layer)
    units = corpus_counts(loaded.tokenizer, settings.corpus, MAX_PIECES)
    n, have = 0, 0
    while n < len(units.pieces) and have < settings.tokens:
        have += units.pieces[n]
        n += 1
    lengths = [p + 2 for p in units.pieces[:n]]
    shapes = [(len(b), max(lengths[i] for i in b)) for b in _batches(lengths)]
    config = encoder_of(loaded.model).config
    threads = threads or torch.get_num_threads()
    acts = estimate.index_build_estimate(settings.layer, config.hidden_size, shapes, have, threads,
                                         intermediate_size=config.intermediate_size)
    # The activations are computed in bf16 where the CPU does that fast (collect): the forward passes at
    # this CPU's measured bf16 rate rather than its fp32 one
    forward_rate = estimate.cpu_flop_s("forward", config.hidden_size, threads, False, config.intermediate_size)[0]
    if loaded_on_cpu(loaded) and cpu_bf16_is_fast():
        bf16_rate = estimate.cpu_flop_s("forward", config.hidden_size, threads, True, config.intermediate_size)[0]
        acts_seconds = acts["seconds"] - acts["forward_seconds"] * (1 - forward_rate / bf16_rate)
    else:
        acts_seconds = acts["seconds"]
    step = _step_seconds(config.hidden_size, settings.sae, threads)
    steps = max(1, have // settings.sae.batch_size) * settings.sae.epochs
    train = step * steps
    # After training: the statistics (about a sixth of an epoch), then the masked-LM loss three ways on
    # EVAL_SEQUENCES held-out sequences, every position through the whole model and its decoder (2·V·H a
    # position), at this CPU's fp32 forward rate; and the held-out documents cut into sequences first.
    T = 128
    per_token = estimate.forward_flops(config.num_layers, config.hidden_size, T, config.intermediate_size) \
        + 2.0 * config.vocab_size * config.hidden_size
    from ..probes.quality import HELD_OUT_PREPARE_S
    words = reads_words(loaded)  # (a model without a trained MLM head measures neither)
    losses = 3 * EVAL_SEQUENCES * T * per_token / forward_rate + HELD_OUT_PREPARE_S if words else 0.0
    start = estimate.PROCESS_START_S + 4 * estimate.pretraining_parameters(config)[0] / estimate.MODEL_LOAD_BYTES_PER_S
    # each feature's logit effects: the decoder's F directions through the MLM decoder (2·F·H·V)
    effects = 2.0 * settings.sae.width_factor * config.hidden_size ** 2 * config.vocab_size / forward_rate \
        if words else 0.0
    statistics = 0.15 * train / settings.sae.epochs
    after = statistics + losses + effects + start
    return {"tokens": have, "activation_seconds": acts_seconds, "train_seconds": train, "step_seconds": step,
            "statistics_seconds": statistics, "effects_seconds": effects,
            "loss_seconds": losses, "after_seconds": after, "seconds": acts_seconds + train + after,
            "disk_bytes": have * (2 * config.hidden_size + 17), "basis": acts["basis"]}


def loaded_on_cpu(loaded: Loaded) -> bool:
    return next(loaded.model.parameters()).device.type == "cpu"


def _step_seconds(H: int, cfg: saes.SaeConfig, threads: int) -> float:
    """:func:`_time_steps` with the build's ``threads``, measured once on this machine for these sizes
    and kept in the disk cache (a page's first visit then shows its estimate without training)."""
    import os
    import platform

    from ...train import speed

    def timed() -> dict:
        with speed.threads(threads):
            return {"seconds": _time_steps(H, cfg)}

    kept = disk_cache.kept_json("sae-step-time", None, timed,
                                what="an SAE step's measured time", hidden=H, sae=cfg.to_dict(),
                                threads=threads, torch=torch.__version__,
                                cpu=platform.processor() or platform.machine(), cores=os.cpu_count(),
                                version=2)  # 2: kept as disk_cache.kept_json writes it
    return kept["seconds"]


def _time_steps(H: int, cfg: saes.SaeConfig, steps: int = 3) -> float:
    """Seconds of one training step of this size, measured: a run of 1 step and one of 1 + ``steps``
    (after a warm-up call), so the set-up they share cancels out."""
    x = torch.randn(cfg.batch_size * (steps + 1), H)
    small = saes.SaeConfig(**{**cfg.to_dict(), "epochs": 1})
    saes.train_sae(x[:cfg.batch_size], small)  # warm-up: the first call checks the CPU's bf16 speed
    t = time.time()
    saes.train_sae(x[:cfg.batch_size], small)
    one = time.time() - t
    t = time.time()
    saes.train_sae(x, small)
    return max((time.time() - t - one) / steps, 1e-4)
