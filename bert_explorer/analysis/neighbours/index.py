"""Building the nearest-neighbour index (see ``search.py`` for the design and the measurements):
the corpus cut into sentences, every token's vector at the chosen layers, written in shards so that
a stopped build resumes, and assembled into one cache entry by a single rename."""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ... import atomic, disk_cache, full_disk
from ...checkpoint import Loaded, encoder_of
from ...data.corpora import BUILTIN_CORPORA, bbc_articles, load_corpus
from ...model.bert import extended_attention_mask
from ...runs import neighbour_jobs
from ...runs.report import duration_text
from ...train import estimate
from ..first_visit import first_visit

FORMAT = 1              # bump when the stored layout changes: old entries are then never read
MAX_PIECES = 128        # WordPieces per encoded sentence, [CLS] and [SEP] included
SHARD_SENTENCES = 2048  # a stopped build loses at most one shard (~50 k tokens)
TOKEN_BUDGET = 4096     # padded tokens per forward batch

Progress = Callable[[float, str], None]


class IndexMissing(LookupError):
    """The index for this (model, corpus, layer) has not been built."""


# ----- the corpus: documents -> the sentences that are indexed --------------------------------
@dataclass
class Units:
    """The sentences (or windows of long sentences) that are indexed, in corpus order."""
    texts: list[str]
    sources: list[str]     # where each comes from: the BBC topic, or "document N"
    pieces: list[int]      # WordPieces of each, [CLS]/[SEP] not counted

    @property
    def tokens(self) -> int:
        return int(sum(self.pieces))


def corpus_documents(corpus) -> list[tuple[str, list[str]]]:
    """``(source, sentences)`` per document. ``corpus`` is a built-in name ("bbc", "wiki", …),
    a text file or folder (``data.corpora.load_corpus``), a list of documents (lists of
    sentences) or a list of sentences."""
    if isinstance(corpus, (str, Path)):
        if str(corpus) == "bbc":
            return [(topic, doc) for topic, doc in bbc_articles()]
        return [(f"document {i + 1}", doc) for i, doc in enumerate(load_corpus(corpus))]
    corpus = list(corpus)
    if all(isinstance(s, str) for s in corpus):
        return [("", corpus)]
    return [(f"document {i + 1}", list(doc)) for i, doc in enumerate(corpus)]


def corpus_settings(corpus) -> dict:
    """What identifies a corpus in the cache key: a built-in by name, anything else by content."""
    if isinstance(corpus, (str, Path)) and str(corpus) in BUILTIN_CORPORA:
        return {"corpus": str(corpus)}
    h = hashlib.sha256()
    if isinstance(corpus, (str, Path)):
        files = sorted(Path(corpus).rglob("*.txt")) if Path(corpus).is_dir() else [Path(corpus)]
        for f in files:
            h.update(f.read_bytes())
    else:
        for source, doc in corpus_documents(corpus):
            h.update(json.dumps([source, doc]).encode())
    return {"corpus": "text", "sha256": h.hexdigest()[:16]}


def corpus_label(corpus) -> str:
    return str(corpus) if isinstance(corpus, (str, Path)) else f"{len(corpus_documents(corpus))} documents"


_last_units: list = []  # (key, tokenizer, units) of the last corpus cut: the estimate's count, then the build's


def corpus_units(tokenizer, corpus, max_pieces: int = MAX_PIECES) -> Units:
    """Sentences to index: long ones cut into windows of at most ``max_pieces`` - 2 WordPieces at
    word starts, exact duplicates dropped (first one kept). The one count of a corpus's tokens: the
    estimate before a build and the build itself both read it here (the last one is kept, so the
    two cost one tokenisation: BBC News takes about 3 s)."""
    key = (id(tokenizer), json.dumps(corpus_settings(corpus)), max_pieces)
    if _last_units and _last_units[0][0] == key:
        return _last_units[0][2]
    units = _cut(tokenizer, corpus, max_pieces)
    _last_units[:] = [(key, tokenizer, units)]  # the tokenizer is held, so its id names it while kept
    return units


@dataclass
class Counts:
    """The WordPieces of each unit of a corpus (as :func:`corpus_units` cuts it), without the texts:
    what an estimate needs."""
    pieces: list[int]

    @property
    def tokens(self) -> int:
        return int(sum(self.pieces))


COUNTS_VERSION = 2  # bump when corpus_units cuts differently (2: kept as disk_cache.kept_json writes it)


def corpus_counts(tokenizer, corpus, max_pieces: int = MAX_PIECES) -> Counts:
    """:func:`corpus_units`' WordPiece counts, kept in the disk cache by the vocabulary, the corpus
    and the window: an estimate shown on a page's first visit reads them there instead of
    tokenising the corpus again (seconds for BBC News or the Wikipedia leads)."""
    kept = disk_cache.kept_json("corpus-counts", None,
                                lambda: {"pieces": list(corpus_units(tokenizer, corpus, max_pieces).pieces)},
                                what="a corpus's WordPiece counts", vocab=tokenizer.fingerprint(),
                                **corpus_settings(corpus), max_pieces=max_pieces, version=COUNTS_VERSION)
    return Counts(kept["pieces"])


def _cut(tokenizer, corpus, max_pieces: int) -> Units:
    texts, sources = [], []
    for source, doc in corpus_documents(corpus):
        texts.extend(s for s in doc if s.strip())
        sources.extend(source for s in doc if s.strip())
    out, seen = Units([], [], []), set()
    room = max_pieces - 2
    for a in range(0, len(texts), 4096):
        encs = tokenizer.encode_batch(texts[a:a + 4096])
        for text, source, e in zip(texts[a:a + 4096], sources[a:a + 4096], encs):
            pieces, offsets = e.tokens[1:-1], e.offsets[1:-1]
            windows = [(0, len(pieces))]
            if len(pieces) > room:
                windows, i = [], 0
                while i < len(pieces):
                    j = min(i + room, len(pieces))
                    while j < len(pieces) and j > i + 1 and pieces[j].startswith("##"):
                        j -= 1  # never cut inside a word
                    windows.append((i, j))
                    i = j
            for i, j in windows:
                if i == j:
                    continue
                piece_text = text if (i, j) == (0, len(pieces)) else text[offsets[i][0]:offsets[j - 1][1]]
                if piece_text in seen:
                    continue
                seen.add(piece_text)
                out.texts.append(piece_text)
                out.sources.append(source)
                out.pieces.append(j - i)
    return out


# ----- vectors at one layer -------------------------------------------------------------------
def layers_run(layers: Sequence[int]) -> int:
    """How many encoder layers a pass runs for the hidden states at ``layers``: as far as the deepest
    one asked for, none for the embeddings (0). The build and its estimate both count by this."""
    return max(layers)


def hidden_upto(loaded: Loaded, tensors: dict, layers: Sequence[int]) -> dict[int, torch.Tensor]:
    """The hidden states [B, T, H] at each of ``layers`` (0 = embeddings, l = after encoder layer l),
    running the encoder only as far as the deepest one asked for: the embeddings' index costs
    one lookup, the last layer's the whole model. Same arithmetic as
    ``encoder(**tensors, output_hidden_states=True).hidden_states[l]``."""
    enc = encoder_of(loaded.model)
    h = enc.embeddings(tensors["input_ids"], tensors.get("token_type_ids"))  # [B, T, H]
    mask = extended_attention_mask(tensors.get("attention_mask"), enc.config.causal, h.shape[1], h.dtype, h.device)
    out = {0: h} if 0 in layers else {}
    for i, layer in enumerate(enc.encoder.layer[:layers_run(layers)]):
        h, _ = layer(h, mask)
        if i + 1 in layers:
            out[i + 1] = h
    return out


def normalise(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def check_layer(loaded: Loaded, layer: int) -> None:
    L = encoder_of(loaded.model).config.num_layers
    if not 0 <= layer <= L:
        raise ValueError(f"layer {layer} does not exist: this model has the embeddings (0) and layers 1-{L}")


def _tensors(encs, pad_id: int, device) -> dict[str, torch.Tensor]:
    T = max(len(e.input_ids) for e in encs)
    ids = torch.full((len(encs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encs), T), dtype=torch.long)
    for b, e in enumerate(encs):
        ids[b, :len(e.input_ids)] = torch.tensor(e.input_ids)
        mask[b, :len(e.input_ids)] = 1
    return {"input_ids": ids.to(device), "token_type_ids": torch.zeros_like(ids, device=device),
            "attention_mask": mask.to(device)}


def _batches(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of sentences of ``lengths`` WordPieces ([CLS] and [SEP] included) in batches of similar
    length, at most TOKEN_BUDGET padded tokens each: sorted by length, a batch pads only to its own
    longest sentence (BBC sentences average 25 WordPieces; padding them all to 128 would do five times
    the work)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, i = [], 0
    while i < len(order):
        n = 1  # the batch's last sentence is its longest
        while i + n < len(order) and (n + 1) * lengths[order[i + n]] <= TOKEN_BUDGET:
            n += 1
        batches.append(order[i:i + n])
        i += n
    return batches


def shard_ranges(units: Units | Counts) -> list[tuple[int, int]]:
    """The build's shards: SHARD_SENTENCES sentences each, in corpus order."""
    n = len(units.pieces)
    return [(a, min(a + SHARD_SENTENCES, n)) for a in range(0, n, SHARD_SENTENCES)]


def build_shapes(units: Units | Counts) -> list[tuple[int, int]]:
    """(sentences, padded positions) of every forward batch the build runs: each shard's sentences
    batched by :func:`_batches`, as ``_encode_shard`` batches them."""
    shapes = []
    for a, b in shard_ranges(units):
        lengths = [p + 2 for p in units.pieces[a:b]]  # [CLS] and [SEP]
        shapes += [(len(batch), max(lengths[i] for i in batch)) for batch in _batches(lengths)]
    return shapes


def _encode_shard(loaded: Loaded, texts: list[str], first_unit: int, layers: list[int],
                  on_batch: Callable[[int], None]) -> dict[int, dict[str, np.ndarray]]:
    """Rows of one shard for each layer: vectors (fp16, unit length), token ids, unit, char span."""
    tok = loaded.tokenizer
    encs = tok.encode_batch(texts, max_length=MAX_PIECES)
    device = next(loaded.model.parameters()).device
    per_unit: dict[int, dict[int, torch.Tensor]] = {}
    for batch in _batches([len(e.input_ids) for e in encs]):
        with torch.inference_mode():
            hs = hidden_upto(loaded, _tensors([encs[b] for b in batch], tok.pad_id, device), layers)
        for j, b in enumerate(batch):
            m = len(encs[b].input_ids)
            per_unit[b] = {l: normalise(hs[l][j, 1:m - 1].float()).to(torch.float16).cpu() for l in layers}
        on_batch(sum(len(encs[b].input_ids) - 2 for b in batch))
    shard = {}
    for l in layers:
        rows = [per_unit[u][l] for u in range(len(encs))]
        shard[l] = {
            "vectors": torch.cat(rows).numpy() if rows else np.zeros((0, 0), np.float16),
            "token_ids": np.array([t for e in encs for t in e.input_ids[1:-1]], dtype=np.int32),
            "unit": np.array([first_unit + u for u, e in enumerate(encs) for _ in e.input_ids[1:-1]], dtype=np.int32),
            "starts": np.array([o[0] for e in encs for o in e.offsets[1:-1]], dtype=np.int32),
            "ends": np.array([o[1] for e in encs for o in e.offsets[1:-1]], dtype=np.int32),
        }
    return shard


# ----- building --------------------------------------------------------------------------------
def opening_layer(loaded: Loaded) -> int:
    """The layer the Nearest neighbours page opens on, and so the one a class is prepared with: the last,
    whose vectors have mixed in the most of their sentence (the page contrasts it with layer 0)."""
    return loaded.config.num_layers


def index_path(loaded: Loaded, corpus, layer: int) -> Path:
    """Where the index of (model weights, corpus, layer) lives once built."""
    return disk_cache.entry("neighbours", loaded, **corpus_settings(corpus), layer=int(layer), format=FORMAT,
                            max_pieces=MAX_PIECES, shard=SHARD_SENTENCES)


def is_complete(path: Path) -> bool:
    return (Path(path) / "meta.json").is_file()


def index_state(loaded: Loaded, corpus, layer: int) -> dict:
    """ready / building / stopped / failed / missing, with the builder's progress
    (``neighbour_jobs.build_state``)."""
    path = index_path(loaded, corpus, layer)
    return {**neighbour_jobs.build_state(path, is_complete(path)), "path": str(path)}


def build_index(loaded: Loaded, corpus="bbc", layers: int | Sequence[int] = 6, progress: Progress | None = None,
                *, stop_after_shards: int | None = None) -> dict[int, Path]:
    """Build the index of each layer in ``layers`` that is not there yet, in one pass through the
    model, and return {layer: folder}. A second call finds them and returns at once.

    Raises ``neighbour_jobs.BuildBusy`` when another process builds one of them now. Finished
    shards are kept in the work folder, so a build that is killed resumes where it stopped;
    the index itself appears only when complete. ``stop_after_shards`` (tests) ends the
    build early as if it had been killed."""
    layers = sorted({int(layers)} if isinstance(layers, int) else {int(l) for l in layers})
    for l in layers:
        check_layer(loaded, l)
    paths = {l: index_path(loaded, corpus, l) for l in layers}
    todo = [l for l in layers if not is_complete(paths[l])]
    if not todo:
        return paths
    report = progress or (lambda f, m: None)
    with ExitStack() as locks:
        for l in todo:
            locks.enter_context(neighbour_jobs.builder_lock(paths[l]))
        todo = [l for l in todo if not is_complete(paths[l])]  # finished while we waited for the lock
        if not todo:
            return paths
        _build_locked(loaded, corpus, todo, paths, report, stop_after_shards)
    return paths


def _build_locked(loaded, corpus, layers, paths, report, stop_after_shards) -> None:
    started = time.time()

    def say(fraction: float, message: str, state: str = "running") -> None:
        for l in layers:
            neighbour_jobs.write_progress(paths[l], state=state, fraction=fraction, message=message,
                                          started=started, layers=layers)
        report(fraction, message)

    was_training = loaded.model.training
    loaded.model.eval()
    done, total = 0, 1
    H = encoder_of(loaded.model).config.hidden_size
    try:
        say(0.0, f"reading the corpus {corpus_label(corpus)} and cutting it into sentences…")
        units = corpus_units(loaded.tokenizer, corpus)
        if not units.texts:
            raise ValueError("the corpus holds no text to index")
        total = units.tokens
        shards = shard_ranges(units)
        for i, l in enumerate(layers):
            _clean_stale(paths[l])
            # room in the cache's quota for this layer's parts, and for the first layer the index being
            # assembled too: build_disk_bytes in all (a page asked for it already, from an estimate)
            room = disk_bytes(total, H) * (2 if i == 0 else 1)
            if why := disk_cache.make_room(room, neighbour_jobs.work_dir(paths[l])):
                raise disk_cache.NoRoom(why)
        computed, t0 = 0, time.time()
        # A full disk is one sentence: how much is free, the finished parts kept, what the build takes.
        with full_disk.saving(disk_cache.cache_root(), f"write the index of {_layers_text(layers)}",
                              lambda: _after_a_full_disk(paths, layers, len(shards), total, H)):
            for s, (a, b) in enumerate(shards):
                files = {l: neighbour_jobs.work_dir(paths[l]) / "shards" / f"shard-{s:05d}.npz" for l in layers}
                if all(f.exists() for f in files.values()):
                    done += sum(units.pieces[a:b])
                    continue  # finished by an earlier build that was stopped
                if stop_after_shards is not None and s >= stop_after_shards:
                    raise KeyboardInterrupt("stopped on purpose (test)")

                def on_batch(n: int) -> None:
                    nonlocal done, computed
                    done, computed = done + n, computed + n
                    rate = computed / max(time.time() - t0, 1e-6)
                    left = (total - done) / max(rate, 1e-6)
                    say(min(0.98, 0.98 * done / total), f"{_layers_text(layers)}: {done:,} of {total:,} tokens "
                                                        f"({rate:,.0f} tokens/s, this stage about "
                                                        f"{duration_text(left)} left)")

                shard = _encode_shard(loaded, units.texts[a:b], a, layers, on_batch)
                for l in layers:
                    with atomic.replacing(files[l]) as part:  # a part cut short is removed: its room goes back at once
                        np.savez(part, **shard[l])
            say(0.99, "writing the index…")
            for l in layers:
                _assemble(paths[l], units, len(shards), H, {
                    "layer": l, "corpus": corpus_label(corpus), "model": str(loaded.path), "model_name": loaded.name,
                    "hidden_size": H, "format": FORMAT, "build_seconds": round(time.time() - started, 1),
                    "built": time.strftime("%Y-%m-%d %H:%M:%S"), "threads": torch.get_num_threads()})
                shutil.rmtree(neighbour_jobs.work_dir(paths[l]) / "shards", ignore_errors=True)
        say(1.0, f"done in {duration_text(time.time() - started)}", state="done")
    except Exception as e:  # (a KeyboardInterrupt or a kill leaves "running": the page says "stopped")
        error = str(e) if isinstance(e, (full_disk.DiskFull, disk_cache.NoRoom)) else f"{type(e).__name__}: {e}"
        for l in layers:
            neighbour_jobs.write_progress(paths[l], state="failed", error=error,
                                          fraction=min(1.0, done / total), message=f"failed: {e}")
        raise
    finally:
        loaded.model.train(was_training)
        for l in layers:  # what is left of the build (its parts, when it stopped) counts at its size
            disk_cache.release_room(neighbour_jobs.work_dir(paths[l]))


def _layers_text(layers) -> str:
    return f"layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}"


def disk_bytes(tokens: int, hidden_size: int) -> int:
    """The index of one layer on disk: an fp16 vector [H] and four int32 numbers per token."""
    return tokens * (2 * hidden_size + 16)


def build_disk_bytes(tokens: int, hidden_size: int, n_layers: int = 1) -> int:
    """The most a build holds on disk at once: the parts of every layer it builds, and the index of
    one layer being assembled from them (a layer's parts go once its index is complete)."""
    return (n_layers + 1) * disk_bytes(tokens, hidden_size)


def _after_a_full_disk(paths: dict, layers, n_shards: int, tokens: int, H: int) -> str:
    """What a build that found the disk full keeps, and how much the whole build takes."""
    kept = min(len(list((neighbour_jobs.work_dir(paths[l]) / "shards").glob("shard-*.npz"))) for l in layers)
    if kept:
        done = (f"{kept} of its {n_shards} parts {'is' if kept == 1 else 'are'} finished and kept, so building again "
                f"resumes from {'it' if kept == 1 else 'them'} once space is freed")
    else:
        done = "no part of it was finished, so building again starts over once space is freed"
    return (f"{done} (the build takes about {full_disk.size_text(build_disk_bytes(tokens, H, len(layers)))} while it "
            "runs: its parts and the finished index side by side)")


def _clean_stale(path: Path) -> None:
    """Temporary folders of an assembly that was killed (we hold the lock: nobody else writes them)."""
    for tmp in path.parent.glob(f".{path.name}.*"):
        shutil.rmtree(tmp, ignore_errors=True)


def _assemble(path: Path, units: Units, n_shards: int, H: int, meta: dict) -> None:
    shard_dir = neighbour_jobs.work_dir(path) / "shards"
    parts = [np.load(shard_dir / f"shard-{s:05d}.npz") for s in range(n_shards)]
    N = sum(len(p["token_ids"]) for p in parts)
    with disk_cache.writing(path, quota=False) as tmp:  # (its room was made before the build began)
        # Written part by part (the build never holds the whole matrix in memory) with plain
        # writes: a full disk is then an OSError, where pages of a memory map would kill the
        # process with SIGBUS.
        with open(tmp / "vectors.npy", "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float16)),
                                                     "fortran_order": False, "shape": (N, H)})
            for p in parts:
                f.write(np.ascontiguousarray(p["vectors"], dtype=np.float16).data)
        for name in ("token_ids", "unit", "starts", "ends"):
            np.save(tmp / f"{name}.npy", np.concatenate([p[name] for p in parts]))
        (tmp / "sentences.json").write_text(json.dumps({"text": units.texts, "source": units.sources}))
        (tmp / "meta.json").write_text(json.dumps({**meta, "rows": N, "sentences": len(units.texts)}, indent=1))


@first_visit("Nearest neighbours", "the corpus's WordPiece counts, behind the index estimate")
def _estimate_at_first_visit(loaded: Loaded) -> dict:
    # as the page asks it (a background build's threads and start): the speed it reads is kept per thread
    # count, so one measured with this process's threads left the page's own still to measure
    return estimate_build_seconds(loaded, "bbc", opening_layer(loaded), threads=estimate.background_threads(),
                                  process_start=True)


def estimate_build_seconds(loaded: Loaded, corpus="bbc", layer: int | Sequence[int] = 6, *,
                           threads: int | None = None, process_start: bool = False) -> dict:
    """How long building the index of ``layer`` (or of several layers in one pass) would take here
    (``train.estimate.index_build_estimate``):
    the corpus cut into sentences by :func:`corpus_units`, the function the build reads it with (its
    counts kept in the disk cache: :func:`corpus_counts`), so the tokens counted here are the tokens
    the build reports; the forward passes of the build's own
    batches (:func:`build_shapes`) through the layers it runs (:func:`layers_run`), on ``threads``
    threads (default: this process's; a build the page starts runs in the background, with one core
    fewer than the machine has: ``process_start`` adds its start)."""
    layers = sorted({int(layer)} if isinstance(layer, int) else {int(l) for l in layer})
    for l in layers:
        check_layer(loaded, l)
    units = corpus_counts(loaded.tokenizer, corpus)
    config = encoder_of(loaded.model).config
    H = config.hidden_size
    threads = threads or torch.get_num_threads()
    est = estimate.index_build_estimate(layers_run(layers), H, build_shapes(units), units.tokens, threads,
                                        process_start, model_bytes=4 * loaded.num_parameters, n_layers=len(layers),
                                        intermediate_size=config.intermediate_size)
    return {**est, "tokens": units.tokens, "sentences": len(units.pieces), "disk_bytes": disk_bytes(units.tokens, H),
            "build_disk_bytes": build_disk_bytes(units.tokens, H)}
