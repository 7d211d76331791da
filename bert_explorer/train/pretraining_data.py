"""What a pre-training run trains and is measured on (Appendix A.1-A.2): its corpus split into
training and held-out documents, its vocabulary, the training and held-out sequences of its
objective, and which sequence each sample of the run is.

Everything here is a pure function of the settings and the seed: a resumed run, and every rank of
a run on several GPUs, builds the same sequences in the same order.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from .. import atomic, checkpoint, disk_cache
from ..data.corpora import (NSP_REMEDY, SEPARATE_DOCUMENTS, check_corpus, load_corpus, split_documents, tiny_corpus,
                            words_in)
from ..data.pretraining import Masker, create_instances, mlm_only_instances, unigram_entropy
from ..tokenizer import WordPieceTokenizer
from .device import Device
from .pretrain_config import PretrainConfig
from .report import Reporter


class Sampler:
    """Which training instance is sample number s? Epoch e = s // N walks a permutation seeded
    with (seed, e). A pure function of s: resuming needs only the step number."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self._perms = n, seed, {}

    def __call__(self, s: int) -> int:
        epoch, i = divmod(s, self.n)
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._perms = {epoch: torch.randperm(self.n, generator=g).tolist()}
        return self._perms[epoch][i]


def build_tokenizer(cfg: PretrainConfig, train_docs) -> WordPieceTokenizer:
    if cfg.init:  # a warm start reads text exactly as its checkpoint was trained to
        return WordPieceTokenizer.from_dir(checkpoint.resolve(cfg.init))
    if cfg.vocab == "train":
        return WordPieceTokenizer.train((s for doc in train_docs for s in doc), cfg.vocab_size, cfg.lowercase)
    if (Path(cfg.vocab) / "vocab.txt").is_file():  # a bare tokenizer directory
        return WordPieceTokenizer.from_dir(cfg.vocab)
    return WordPieceTokenizer.from_dir(checkpoint.resolve(cfg.vocab))


def evaluates_held_out(cfg: PretrainConfig, held_documents: int) -> bool:
    """Does a run of ``cfg`` whose split holds ``held_documents`` documents out evaluate on them? An objective
    with next-sentence pairs needs two (a NotNext pair draws its sentence B from another document)."""
    return held_documents >= 2 or (held_documents >= 1 and not cfg.objective_type.next_sentence)


def held_out_plan(cfg: PretrainConfig, held_words: int) -> tuple[int, str]:
    """(the held-out evaluations a run of ``cfg`` makes, where its held-out documents hold ``held_words`` words it
    evaluates on; why it makes none, where it makes none), for its estimate (``pretrain.estimate``)."""
    from .estimate import evaluations_of

    if held_words:
        return evaluations_of(cfg.max_steps, cfg.eval_every), ""
    return 0, ("it holds no document out: held_out_fraction is 0" if not cfg.held_out_fraction else
               "fewer than two documents held out, and next-sentence pairs need two" if cfg.objective_type.next_sentence
               else "no document held out")


def held_out_text(evaluations: int, why: str = "") -> str:
    """"10 held-out evaluations", or that a run makes none and ``why`` (:func:`held_out_plan`)."""
    if not evaluations:
        return "no held-out evaluation" + (f" ({why})" if why else "")
    return f"{evaluations:,} held-out evaluation{'s' if evaluations != 1 else ''}"


def corpus_words(cfg: PretrainConfig) -> tuple[int, int]:
    """(the words a run of ``cfg`` reads, the words of its held-out documents it evaluates on: 0 where it
    makes no held-out evaluation), split as the run splits them."""
    train_docs, held_docs = split_corpus(cfg)
    count = lambda docs: sum(words_in(sentence) for doc in docs for sentence in doc)  # noqa: E731
    return count(train_docs) + count(held_docs), count(held_docs) if evaluates_held_out(cfg, len(held_docs)) else 0


def learnt_vocab_size(cfg: PretrainConfig) -> int | None:
    """The WordPieces a run of ``cfg`` learns, where its corpus is small enough to learn them for an estimate
    (``LEARN_FOR_ESTIMATE_WORDS`` words: the tiny corpus's 2,100 words give 337 of 8,000, and the page described
    a model of 1.5 M parameters that had 0.54 M); None: the size asked (a larger corpus gives it; a warm start
    or a shared vocabulary brings its own)."""
    from ..data.corpus_upload import LEARN_FOR_ESTIMATE_WORDS

    if cfg.init or cfg.vocab != "train":
        return None
    train_docs, _ = split_corpus(cfg)
    if sum(words_in(s) for doc in train_docs for s in doc) > LEARN_FOR_ESTIMATE_WORDS:
        return None
    return min(cfg.vocab_size, build_tokenizer(cfg, train_docs).vocab_size)


def held_out_instances(cfg: PretrainConfig, held_docs, tok: WordPieceTokenizer) -> list:
    # Masks fixed by the seed, so every evaluation of every checkpoint sees the same positions.
    held = create_instances(held_docs, tok, cfg.max_seq_length, cfg.short_seq_prob, cfg.objective_type,
                            cfg.masking, seed=cfg.seed + 1, mask=True)
    if cfg.eval_corpora:
        # Several parts are named: shuffle once (fixed by the seed) so that the first
        # eval_batches hold a mix of them, not only the documents of the first part.
        random.Random(cfg.seed + 2).shuffle(held)
    return held


def split_corpus(cfg: PretrainConfig) -> tuple[list, list]:
    """(training documents, held-out documents) of a run's corpus. The split is a pure function
    of (corpus, max_docs, held_out_fraction, seed). With ``eval_corpora`` the held-out list keeps
    only the documents of those parts (the others are still never trained on)."""
    parts = _documents_by_part(cfg.corpus)
    docs = [d for _, part_docs in parts for d in part_docs]
    if cfg.max_docs:
        docs = docs[: cfg.max_docs]
    train_docs, held_docs = split_documents(docs, cfg.held_out_fraction, seed=cfg.seed)
    if cfg.eval_corpora:
        part_of = {id(d): name for name, part_docs in parts for d in part_docs}  # the split keeps the objects
        wanted = set(cfg.eval_corpora.split("+"))
        held_docs = [d for d in held_docs if part_of[id(d)] in wanted]
    return train_docs, held_docs


def learns_its_words_from_an_upload(cfg: PretrainConfig) -> bool:
    """Is the run's vocabulary learnt on a text the user gave (not a built-in corpus, a shared vocabulary
    or a warm start's)? In a small vocabulary of its own, the shipped news sentences of the time-lapse
    come out as characters and [UNK]: such a run reads sentences of its own text (:func:`cloze_sentences`)."""
    return not cfg.init and cfg.vocab == "train" and str(cfg.corpus or "").endswith(".txt")


def cloze_sentences(held_docs: list, n: int) -> list[str]:
    """Up to ``n`` held-out sentences of 6 to 24 words, each with a word of letters near its middle
    masked: what a time-lapse of a run on an uploaded text reads."""
    chosen = []
    for sentence in (s for doc in held_docs for s in doc):
        words = sentence.split()
        if not 6 <= len(words) <= 24:
            continue
        middle = len(words) // 2
        for k in sorted(range(1, len(words) - 1), key=lambda k: abs(k - middle)):
            if words[k].isalpha() and len(words[k]) >= 3:
                chosen.append(" ".join(words[:k] + ["[MASK]"] + words[k + 1:]))
                break
        if len(chosen) == n:
            break
    return chosen


def corpus_entropy(cfg: PretrainConfig) -> float:
    """The unigram entropy (nats per WordPiece, ``data.pretraining.unigram_entropy``) of a run's training
    documents in its vocabulary: what its held-out loss is judged against (the word-frequency plateau),
    for a run that ended before the rule recorded it. Kept in the disk cache: tokenising a corpus of
    1.7 M WordPieces takes a quarter of a minute."""
    def compute() -> float:
        train_docs, _ = split_corpus(cfg)
        tok = build_tokenizer(cfg, train_docs)
        return unigram_entropy(tok.ids_batch([s for doc in train_docs for s in doc if s.strip()]), tok.special_ids())
    return float(disk_cache.kept_json("corpus-entropy", None, compute, what="the corpus's unigram entropy",
                                      corpus=cfg.corpus, max_docs=cfg.max_docs, held=cfg.held_out_fraction,
                                      seed=cfg.seed, vocab=cfg.vocab, vocab_size=cfg.vocab_size,
                                      lowercase=cfg.lowercase, init=cfg.init, version=1))


def check_documents(cfg: PretrainConfig, train_docs: list | None = None) -> None:
    """Refuse a corpus that leaves next-sentence prediction fewer than two documents to train on, before a
    folder is made or a vocabulary learnt (a one-line 5 MB corpus grew the process to 1 GB, then was refused,
    leaving a failed run behind). ``train_docs``: the run's, where it has split them already."""
    if not cfg.objective_type.next_sentence:
        return
    left = len([d for d in (split_corpus(cfg)[0] if train_docs is None else train_docs) if d])
    if left < 2:
        raise ValueError(f"next-sentence prediction needs at least two non-empty documents to train on, and corpus "
                         f"{cfg.corpus!r} leaves {left} once its held-out ones are set aside; {NSP_REMEDY}")


def check_corpora(cfg: PretrainConfig) -> None:
    """Refuse (``corpora.check_corpus``) a part of the run's corpus, or of its MLM-only corpus, that is not
    there, before anything is read or written."""
    for corpus in filter(None, (cfg.corpus, cfg.mlm_only_corpus)):
        for part in corpus.split("+"):
            if part == "tiny":
                continue
            try:
                check_corpus(part)
            except FileNotFoundError as e:  # (pre-training also reads the generated corpus, which the list left out)
                said = str(e)
                raise FileNotFoundError(said + ", or tiny (generated: a run in seconds)" if said.startswith("no corpus")
                                        else said) from None


def _documents_by_part(corpus: str) -> list[tuple[str, list]]:
    """A corpus name, a path, or several joined with '+' (e.g. "bbc+wiki+lee"), part by part."""
    return [(part, tiny_corpus() if part == "tiny" else load_corpus(part)) for part in corpus.split("+")]


def run_tokenizer(cfg, run: Reporter, train_docs, dev: Device, latest: Path | None) -> WordPieceTokenizer:
    """The run's vocabulary, fixed once in run_dir/tokenizer. Learning it is deterministic
    (``wordpiece_vocab``), but a resumed run and every DDP rank read the saved one all the same: it is
    the vocabulary the run's checkpoints were trained with, whatever version of the learner is here.
    Without a folder (in memory, one process) it is learnt and kept in memory."""
    if latest:
        return WordPieceTokenizer.from_dir(latest)
    if run.path is None:
        return build_tokenizer(cfg, train_docs)
    tok_dir = run.path / "tokenizer"
    if dev.is_main and not (tok_dir / "vocab.txt").exists():
        learnt = build_tokenizer(cfg, train_docs)
        with atomic.folder(tok_dir) as tmp:  # whole or not at all: a signal may end the process mid-save
            learnt.save(tmp)
    if dev.distributed:
        dist.barrier()  # the other ranks wait for rank 0's vocabulary
    return WordPieceTokenizer.from_dir(tok_dir)


@dataclass
class PretrainingData:
    """What a run trains and is measured on, built once: the tokenizer, the training and held-out
    sequences, which sequence each sample is, and the masker of dynamic masking."""

    tok: WordPieceTokenizer
    train: list
    held: list
    sampler: Sampler
    masker: Masker
    held_docs: list = field(default_factory=list)  # the held-out documents, as text


def pretraining_data(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None) -> PretrainingData:
    train_docs, held_docs = split_corpus(cfg)
    check_documents(cfg, train_docs)  # before a vocabulary is learnt from them
    tok = run_tokenizer(cfg, run, train_docs, dev, latest)
    masking = cfg.masking
    train = create_instances(train_docs, tok, cfg.max_seq_length, cfg.short_seq_prob, cfg.objective_type, masking,
                             dupe_factor=1 if cfg.dynamic_masking else cfg.dupe_factor, seed=cfg.seed,
                             mask=not cfg.dynamic_masking)
    if cfg.mlm_only_corpus:
        # Whole documents of this text join the training instances as single segments without an
        # NSP label; the mix is shuffled once, fixed by the seed, so a batch holds both kinds.
        extra = mlm_only_instances([d for _, docs in _documents_by_part(cfg.mlm_only_corpus) for d in docs], tok,
                                   cfg.max_seq_length, cfg.short_seq_prob, masking, seed=cfg.seed + 3,
                                   mask=not cfg.dynamic_masking)
        train = train + extra
        random.Random(cfg.seed + 4).shuffle(train)
        if dev.is_main:
            run.log(f"{len(extra)} MLM-only training sequences from {cfg.mlm_only_corpus} (no NSP label)")
    held = []
    if evaluates_held_out(cfg, len(held_docs)):
        held = held_out_instances(cfg, held_docs, tok)
    elif held_docs and dev.is_main:
        run.log(f"only {len(held_docs)} held-out document: too few for NSP pairs, so no held-out evaluation; "
                "raise held_out_fraction or add documents")
    if not train:
        raise ValueError(f"corpus {cfg.corpus!r} gave no training sequences once its held-out documents were set "
                         f"aside: give more text (a few thousand words at least); {SEPARATE_DOCUMENTS}")
    return PretrainingData(tok, train, held, Sampler(len(train), cfg.seed), Masker.of(tok, masking), held_docs)
