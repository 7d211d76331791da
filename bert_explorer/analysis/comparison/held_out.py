"""Sentences to compare two models on, which neither the default model's pre-training nor a
bbc-topics fine-tuning has read: the default model's pre-training split rebuilt from its recipe.
"""
from __future__ import annotations

import json
import random

from ... import disk_cache, shipped
from ...data.corpora import load_corpus, split_documents

PRETRAIN_CONFIG = shipped.assets() / "pretrain-minilm-mlm-nsp.json"
FINETUNE_WORDS = 100  # the bbc-topics task reads the headline and the first 100 words of an article


def held_out_sentences(n: int = 64, seed: int = 0, min_words: int = 8, max_words: int = 30) -> tuple[list[str], str]:
    """``n`` BBC News sentences that neither the default model's pre-training nor a bbc-topics
    fine-tuning has read, and one sentence saying where they come from.

    The pre-training of ``minilm-mlm-nsp`` held out 5 % of its documents (a pure function of the
    corpus and the seed: ``assets/pretrain-minilm-mlm-nsp.json``); of its held-out BBC articles
    we take sentences that start after the first 100 words, which the bbc-topics task never reads.
    Kept on disk (the corpora take seconds to read)."""
    path = disk_cache.entry("compare-sentences", None, n=n, seed=seed, min_words=min_words, max_words=max_words,
                            version=3)
    with disk_cache.reading(path) as there:  # (in use while read, and marked used)
        if there and (path / "sentences.json").is_file():
            data = json.loads((path / "sentences.json").read_text())
            return data["sentences"], data["source"]
    candidates, source = _bbc_candidates()
    pool = [s for s in candidates if min_words <= len(s.split()) <= max_words and s.rstrip()[-1] in ".!?\"'”"]
    random.Random(seed).shuffle(pool)
    sentences = pool[:n]
    with disk_cache.writing(path, optional="the held-out sentences") as tmp:
        (tmp / "sentences.json").write_text(json.dumps({"sentences": sentences, "source": source}))
    return sentences, source


def _bbc_candidates() -> tuple[list[str], str]:
    def past_first_words(doc) -> list[str]:
        out, words = [], 0
        for s in doc:
            if words >= FINETUNE_WORDS:
                out.append(s)
            words += len(s.split())
        return out

    def first_words(doc) -> list[str]:
        out, words = [], 0
        for s in doc:
            if words < FINETUNE_WORDS:
                out.append(s)
            words += len(s.split())
        return out

    def unread(sentences: list[str], read: list) -> list[str]:
        """Those of ``sentences`` that no document of ``read`` holds word for word: BBC News has near-copies of
        articles, and 6 of the 64 "held-out" sentences were in the pre-training split."""
        seen = {s.strip() for d in read for s in d}
        return [s for s in sentences if s.strip() not in seen]

    try:
        cfg = json.loads(PRETRAIN_CONFIG.read_text())
        parts = [(name, load_corpus(name)) for name in cfg["corpus"].split("+")]
        docs = [d for _, part in parts for d in part]
        trained, held = split_documents(docs, cfg["held_out_fraction"], seed=cfg["seed"])
        bbc = {id(d) for d in parts[0][1]} if parts[0][0] == "bbc" else set()
        held_bbc = [d for d in held if id(d) in bbc]
        if held_bbc:  # (and none that a fine-tuning reads in another article's first words)
            read = trained + [first_words(d) for d in parts[0][1]]
            return (unread([s for d in held_bbc for s in past_first_words(d)], read),
                    f"{len(held_bbc)} BBC News articles held out from minilm-mlm-nsp's pre-training, sentences after "
                    f"their first {FINETUNE_WORDS} words (which the bbc-topics task reads)")
    except (OSError, ValueError, KeyError):
        pass  # a corpus of the pre-training is not installed: fall back to BBC alone
    docs = load_corpus("bbc")
    return ([s for d in docs for s in past_first_words(d)],
            f"BBC News sentences after the first {FINETUNE_WORDS} words of each article (which the bbc-topics task "
            "reads); the default model's held-out split could not be rebuilt, so some were seen in pre-training")
