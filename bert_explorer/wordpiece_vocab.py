"""Learning a WordPiece vocabulary, deterministically.

Why not the ``tokenizers`` trainer?
    Hugging Face's WordPiece trainer (``BertWordPieceTokenizer.train_from_iterator``) learns its
    vocabulary with BPE merges. When two pairs of pieces are equally frequent -- which happens all
    the time, because most pairs are rare -- it picks the pair whose pieces have the smaller
    internal ids. Those ids are handed out while walking a Rust ``HashMap`` of words, and Rust
    seeds every ``HashMap`` with a fresh random key in every process. So the tie-break, and with
    it the vocabulary, changes from one run to the next: the same corpus and the same seed gave
    five different vocabularies, and so different token sequences and different numbers of
    pre-training instances. A seed cannot fix this; the randomness is not ours to seed.

What this module does instead
    The same algorithm, written so that nothing depends on the order of a hash table:

    1. Normalise and split the text exactly as BERT does (the ``tokenizers`` library's
       ``BertNormalizer`` and ``BertPreTokenizer``; those steps are pure functions of the text)
       and count how often each word occurs.
    2. The alphabet: the ``limit_alphabet`` most frequent characters (counting every occurrence;
       equally frequent characters are taken in code-point order).
    3. Split each word into characters; every character after the first carries the ``##``
       prefix ("cats" -> c ##a ##t ##s), because a WordPiece marks the pieces that continue a word.
    4. Repeatedly take the most frequent adjacent pair of pieces, weighted by word frequency,
       and merge it everywhere ("##a" + "##t" -> "##at", "c" + "##at" -> "cat"); every new piece
       joins the vocabulary. Stop at ``vocab_size`` pieces, or when the best pair is seen fewer
       than ``min_frequency`` times.

The tie rule
    Equally frequent pairs are taken in lexicographic order of their two strings, compared code
    point by code point: ``("##a", "##b")`` before ``("##a", "##c")`` before ``("b", "##a")``.
    The rule itself is arbitrary -- any fixed rule would do -- but it has to depend only on the
    pieces themselves, never on where they happen to sit in memory or in a hash table. String
    order is such a rule: it is the same on every machine, in every process and in every Python
    version, and it needs no extra bookkeeping. With it, the vocabulary is a function of the text
    and the settings alone.

Efficiency
    A merge changes only the words that contain the merged pair, so we keep (a) the count of every
    pair, (b) an index from each pair to the words that contain it, and (c) a heap of
    ``(-count, left, right)`` entries. Each merge rewrites only the indexed words, adjusts the
    counts of the pairs around them and pushes fresh heap entries for the pairs whose count
    changed; an entry whose count no longer matches is stale and skipped when it surfaces.
"""
from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

Pair = tuple[str, str]
PART_CHARS = 100_000
# What BERT's normaliser and pre-tokeniser both read as a space between words: Unicode's white space less the
# control characters, which the normaliser drops instead ("a\x0bb" is one word; Python's isspace says two)
WORD_SPACES = (" \t\n\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
               "\u2028\u2029\u202f\u205f\u3000")


def word_parts(text: str, size: int = PART_CHARS):
    """``text`` in pieces of at most about ``size`` characters, each cut after a space between words
    (:data:`WORD_SPACES`): WordPiece reads a text word by word, so its pieces give the same words and ids as the
    whole, and what a long text costs while it is read is bounded (a 23 MB line without a full stop held 1.9 GB while
    its words were counted). A stretch of ``size`` characters with no such space, far past the 100 characters of the
    longest word WordPiece reads ([UNK] beyond them), is cut where it ends: its [UNK]s are counted by the piece."""
    start = 0
    while len(text) - start > size:
        end = start + size
        space = max(text.rfind(c, start, end) for c in WORD_SPACES)
        end = space + 1 if space > start else end
        yield text[start:end]
        start = end
    yield text[start:]


def count_words(texts: Iterable[str], lowercase: bool = True) -> Counter[str]:
    """How often each word occurs, after BERT's normalisation and pre-tokenisation.

    The normaliser is the one ``BertWordPieceTokenizer`` builds: clean the text, put spaces around
    CJK characters, lower-case and strip accents when ``lowercase`` (accents are kept otherwise).
    The pre-tokeniser splits on whitespace and on every punctuation character."""
    normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                lowercase=lowercase)
    pre_tokenizer = BertPreTokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        for part in word_parts(text):
            counts.update(w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(part)))
    return counts


def learn_wordpiece_vocab(texts: Iterable[str], vocab_size: int, lowercase: bool = True,
                          min_frequency: int = 2, special_tokens: Sequence[str] = (),
                          limit_alphabet: int = 1000, prefix: str = "##") -> list[str]:
    """A WordPiece vocabulary learnt from raw text, as a list in id order.

    Order: ``special_tokens`` (ids 0, 1, ...), the alphabet's characters in code-point order, the
    ``##``-prefixed forms of the characters seen inside words (code-point order), then the merged
    pieces in the order they were learnt. The list has exactly ``vocab_size`` entries unless the
    corpus runs out of pairs seen at least ``min_frequency`` times (then fewer), or the specials
    and characters alone already number more (then all of them are kept, as the ``tokenizers``
    trainer does: a character left out could never be tokenised)."""
    return learn_from_counts(count_words(texts, lowercase), vocab_size, min_frequency,
                             special_tokens, limit_alphabet, prefix)


def learn_from_counts(word_counts: dict[str, int], vocab_size: int, min_frequency: int = 2,
                      special_tokens: Sequence[str] = (), limit_alphabet: int = 1000,
                      prefix: str = "##") -> list[str]:
    """The merge learning of :func:`learn_wordpiece_vocab`, from ready-made word counts."""
    vocab: list[str] = []
    known: set[str] = set()

    def add(piece: str) -> None:
        if piece not in known:
            known.add(piece)
            vocab.append(piece)

    for t in special_tokens:
        add(t)

    # The alphabet: the most frequent characters, equally frequent ones in code-point order.
    char_counts: Counter[str] = Counter()
    for word, n in word_counts.items():
        for ch in word:
            char_counts[ch] += n
    ranked = sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    alphabet = {ch for ch, _ in ranked[:limit_alphabet]}

    # Words as lists of pieces. A word holding a character outside the alphabet is left out: the
    # WordPiece tokeniser turns such a word into [UNK] whole, so its pieces would be wasted.
    # Words are sorted so that even the word numbering does not depend on hashing.
    words: list[list[str]] = []
    freqs: list[int] = []
    inner: set[str] = set()
    for word in sorted(word_counts):
        if not all(ch in alphabet for ch in word):
            continue
        pieces = [word[0]] + [prefix + ch for ch in word[1:]]
        inner.update(pieces[1:])
        if len(pieces) > 1:
            words.append(pieces)
            freqs.append(word_counts[word])
    for ch in sorted(alphabet):
        add(ch)
    for piece in sorted(inner):
        add(piece)

    # Pair counts, the pair -> words index, and the heap of candidates.
    pair_counts: dict[Pair, int] = defaultdict(int)
    where: dict[Pair, set[int]] = defaultdict(set)
    for i, (pieces, n) in enumerate(zip(words, freqs)):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += n
            where[pair].add(i)
    heap = [(-n, a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)

    cut = len(prefix)
    while len(vocab) < vocab_size and heap:
        neg, a, b = heapq.heappop(heap)
        count = pair_counts.get((a, b), 0)
        if count != -neg:
            continue                      # stale: the pair's count has changed since this push
        if count < max(min_frequency, 1):
            break                         # the best pair left is too rare: no more merges
        # "##" + "##" -> "##"; the right piece always continues a word, so drop its prefix.
        new = a + (b[cut:] if b.startswith(prefix) else b)
        add(new)
        delta: dict[Pair, int] = defaultdict(int)
        for i in where.pop((a, b), ()):
            old = words[i]
            merged = _merge(old, a, b, new)
            if merged is None:
                continue                  # the index is allowed to be stale, too
            n = freqs[i]
            for pair in zip(old, old[1:]):
                delta[pair] -= n
            for pair in zip(merged, merged[1:]):
                delta[pair] += n
                where[pair].add(i)
            words[i] = merged
        for pair, d in delta.items():
            if d:
                c = pair_counts[pair] + d
                if c > 0:
                    pair_counts[pair] = c
                    heapq.heappush(heap, (-c, pair[0], pair[1]))
                else:
                    del pair_counts[pair]
    return vocab


def _merge(pieces: list[str], a: str, b: str, new: str) -> list[str] | None:
    """``pieces`` with every (a, b) replaced by ``new``, left to right without overlaps
    (``##a ##a ##a`` -> ``##aa ##a``); None when the pair does not occur."""
    out: list[str] = []
    i, n, hit = 0, len(pieces), False
    while i < n:
        if i + 1 < n and pieces[i] == a and pieces[i + 1] == b:
            out.append(new)
            i += 2
            hit = True
        else:
            out.append(pieces[i])
            i += 1
    return out if hit else None
