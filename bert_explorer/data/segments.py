"""The segments of pre-training sequences, cut from tokenised documents (Section 3.1, Appendix A.1).

A "sentence" of the paper is a span of contiguous text, not a linguistic sentence: whole sentences
are packed until a sequence is full. :func:`pairs_from_document` gives the A, B pairs of next-sentence
prediction (half of them with a random B); :func:`segments_from_document` gives single segments
(the objectives without NSP). The objectives (``objectives.py``) choose between them.
"""
from __future__ import annotations

import random
from collections import deque


def _target_length(max_num_tokens: int, short_seq_prob: float, rng: random.Random) -> int:
    return rng.randint(2, max_num_tokens) if rng.random() < short_seq_prob else max_num_tokens


def pairs_from_document(docs: list[list[list[int]]], d: int, max_num_tokens: int,
                         short_seq_prob: float, rng: random.Random):
    """(A, B, is_random_next) triples from document ``d``.

    Sentences are gathered into a chunk until it reaches the target length; the chunk is cut
    at a random sentence boundary into A and the rest. Half the time B is that rest (IsNext);
    half the time B is a run of sentences starting at a random sentence of a random *other*
    document (NotNext), and the sentences of the chunk not used are put back, so no text is
    wasted. Two changes to the original keep the classes 50/50: a chunk is never closed with a
    single sentence while the document has more (a one-sentence chunk cannot give IsNext, and
    the original makes it NotNext), and a lone leftover last sentence is dropped, not put back.
    One-sentence documents give no pairs, but still serve as random B.
    """
    doc = docs[d]
    if len(doc) < 2:
        return []
    out = []
    chunk: list[list[int]] = []
    length, i = 0, 0
    target = _target_length(max_num_tokens, short_seq_prob, rng)
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        # Full, unless it would leave the document's last sentence alone for the next chunk.
        full = length >= target and len(chunk) >= 2 and i != len(doc) - 2
        if i == len(doc) - 1 or full:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for seg in chunk[:a_end] for t in seg]
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                other = rng.randrange(len(docs) - 1)
                other += other >= d                       # uniform over the other documents
                rdoc = docs[other]
                b: list[int] = []
                for seg in rdoc[rng.randrange(len(rdoc)):]:
                    b.extend(seg)
                    if len(b) >= target - len(a):
                        break
                unused = len(chunk) - a_end
                if unused + (len(doc) - 1 - i) >= 2:      # can still make a pair: put back
                    i -= unused
            else:
                is_random_next = False
                b = [t for seg in chunk[a_end:] for t in seg]
            out.append((*truncate_pair(a, b, max_num_tokens), is_random_next))
            chunk, length = [], 0
            target = _target_length(max_num_tokens, short_seq_prob, rng)
        i += 1
    return out


def truncate_pair(a: list[int], b: list[int], max_num_tokens: int) -> tuple[list[int], list[int]]:
    """Longest-first: shorten the longer of A and B one token at a time. We cut A at its front
    and B at its back, so the A|B junction, the very thing NSP judges, stays intact (the
    original cuts front or back at random)."""
    start, end = 0, len(b)
    while (len(a) - start) + end > max_num_tokens:
        if len(a) - start > end:
            start += 1
        else:
            end -= 1
    return a[start:], b[:end]


def segments_from_document(doc: list[list[int]], max_num_tokens: int, short_seq_prob: float,
                            rng: random.Random) -> list[list[int]]:
    """Single segments of whole consecutive sentences (RoBERTa's "DOC-SENTENCES"): a sentence
    that does not fit starts the next segment; one longer than the target is cut, and its rest
    starts the next segment, so no text is lost."""
    queue = deque(doc)
    out: list[list[int]] = []
    chunk: list[int] = []
    target = _target_length(max_num_tokens, short_seq_prob, rng)
    while queue:
        seg = queue.popleft()
        if chunk and len(chunk) + len(seg) > target:
            out.append(chunk)
            chunk, target = [], _target_length(max_num_tokens, short_seq_prob, rng)
        if not chunk and len(seg) > target:
            queue.appendleft(seg[target:])
            seg = seg[:target]
        chunk.extend(seg)
    return out + [chunk] if chunk else out
