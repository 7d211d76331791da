"""Learning a WordPiece vocabulary is deterministic: same text, same settings, same vocabulary --
in this process and in any other.

The bug this guards against: the ``tokenizers`` trainer broke ties between equally frequent merges
by ids assigned in Rust hash-map order, which is randomised per process, so five pre-trainings
with seed 0 on one corpus learnt five different vocabularies (and cut the text into different
numbers of sequences). The generated corpus below is enough to show it: that trainer gave a
different vocabulary in every process we tried.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bert_explorer.data.corpora import tiny_corpus
from bert_explorer.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer
from bert_explorer.wordpiece_vocab import count_words, learn_from_counts

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [s for d in tiny_corpus(200) for s in d]
FULL = 400   # more than this corpus allows: every merge down to a pair count of 2 is learnt

_LEARN = """
import json
from bert_explorer.data.corpora import tiny_corpus
from bert_explorer.tokenizer import WordPieceTokenizer
tok = WordPieceTokenizer.train([s for d in tiny_corpus(200) for s in d], vocab_size={size})
print(json.dumps([tok.id_to_token(i) for i in range(tok.vocab_size)]))
"""


def vocab_list(tok: WordPieceTokenizer) -> list[str]:
    return [tok.id_to_token(i) for i in range(tok.vocab_size)]


def learn_in_new_process(size: int, hash_seed: str) -> list[str]:
    # A different PYTHONHASHSEED in each process: not even Python's own string hashing may matter.
    env = {**os.environ, "PYTHONHASHSEED": hash_seed,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _LEARN.format(size=size)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def learnt():
    return WordPieceTokenizer.train(TEXTS, vocab_size=FULL)


def test_two_processes_learn_the_same_vocabulary(learnt):
    here = vocab_list(learnt)
    first, second = learn_in_new_process(FULL, "1"), learn_in_new_process(FULL, "2")
    assert first == second == here          # same lines, in the same order
    assert len(here) > 300                  # the ties are many: this is a real test


def test_learning_twice_in_one_process_gives_the_same_vocabulary(learnt):
    again = WordPieceTokenizer.train(iter(TEXTS), vocab_size=FULL)   # a one-shot iterator works too
    assert vocab_list(again) == vocab_list(learnt)
    assert again.fingerprint() == learnt.fingerprint()


def test_specials_come_first_then_continuations_and_the_size_is_exact():
    tok = WordPieceTokenizer.train(TEXTS, vocab_size=300)
    vocab = vocab_list(tok)
    assert vocab[:5] == SPECIAL_TOKENS
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert len(vocab) == tok.vocab_size == 300 and len(set(vocab)) == 300
    assert sum(t.startswith("##") and len(t) > 3 for t in vocab) > 20   # learnt continuation pieces
    # a smaller vocabulary is the start of a larger one: the merges come in a fixed order
    assert vocab_list(WordPieceTokenizer.train(TEXTS, vocab_size=FULL))[:300] == vocab


def test_min_frequency_keeps_sequences_seen_once_out():
    texts = ["the quokka sleeps", "the quokka eats", "a blorfing wug"]
    twice = vocab_list(WordPieceTokenizer.train(texts, vocab_size=1000, min_frequency=2))
    assert "quokka" in twice and "the" in twice                        # seen twice: merged
    merged = [t.replace("##", "") for t in twice[5:] if len(t.replace("##", "")) > 1]
    assert merged and all(m in "the" or m in "quokka" for m in merged)  # nothing from words seen once
    once = vocab_list(WordPieceTokenizer.train(texts, vocab_size=1000, min_frequency=1))
    assert "blorfing" in once and "wug" in once                        # allowed once: merged


def test_training_words_tokenise_into_pieces_that_join_back(learnt):
    words = sorted({w for w in count_words(TEXTS[:30]) if w.isalpha()})
    assert len(words) > 20
    for word in words:
        pieces = learnt.tokenize(word)
        assert "[UNK]" not in pieces
        assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:])
        assert pieces[0] + "".join(p[2:] for p in pieces[1:]) == word


def test_ties_go_to_the_pair_that_comes_first_in_string_order():
    # Both pairs are seen 3 times. ("##a", "##b") < ("c", "##d") because "#" < "c".
    vocab = learn_from_counts({"xab": 3, "cd": 3}, 15, 1, SPECIAL_TOKENS)
    assert vocab[-2:] == ["##ab", "cd"]                 # 13 specials and characters, then 2 merges
    # same counts the other way round: the order of the words in the corpus does not matter
    assert learn_from_counts({"cd": 3, "xab": 3}, 15, 1, SPECIAL_TOKENS) == vocab


def brute_force(word_counts: dict[str, int], vocab_size: int, min_frequency: int) -> list[str]:
    """The same learner without any bookkeeping: recount every pair before every merge."""
    vocab = list(SPECIAL_TOKENS)
    words = {w: [w[0]] + ["##" + c for c in w[1:]] for w in word_counts}
    vocab += sorted({c for w in word_counts for c in w})
    vocab += sorted({p for pieces in words.values() for p in pieces[1:]})
    while len(vocab) < vocab_size:
        pairs = Counter()
        for w, pieces in words.items():
            for pair in zip(pieces, pieces[1:]):
                pairs[pair] += word_counts[w]
        if not pairs:
            break
        (a, b), n = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if n < min_frequency:
            break
        new = a + b[2:]
        if new not in vocab:
            vocab.append(new)
        for w, pieces in words.items():
            out, i = [], 0
            while i < len(pieces):
                if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == (a, b):
                    out.append(new)
                    i += 2
                else:
                    out.append(pieces[i])
                    i += 1
            words[w] = out
    return vocab


@pytest.mark.parametrize("min_frequency", [1, 2])
def test_incremental_counts_give_what_recounting_gives(min_frequency):
    counts = count_words(TEXTS[:300] + ["aaaaaa aaa banana bananas"])   # overlapping pairs, too
    fast = learn_from_counts(counts, FULL, min_frequency, SPECIAL_TOKENS)
    assert fast == brute_force(counts, FULL, min_frequency)
