"""Checking a pre-training corpus that someone uploads, before a run is started on it.

:func:`check_corpus_upload` says in one sentence what is wrong with the bytes (empty, binary, too
few documents for the objective) or returns facts about the text (read from UTF-16 or Latin-1 too);
:func:`held_out_fraction` picks the share of documents kept for evaluation so that both sides
of the split get documents."""
from __future__ import annotations

import hashlib
import tempfile
import unicodedata
from pathlib import Path

from .corpora import SEPARATE_DOCUMENTS, document_key, load_corpus, words_in
from .objectives import BERT, Objective, objective_type
from .uploads.core import DataError
from .uploads.decode import decode_bytes

# what to upload instead, at the end of a refusal's sentence
_TEXT_HINT = "upload plain text (.txt), best saved as UTF-8"


def check_corpus_upload(name: str, data: bytes, objective: Objective | str = BERT) -> tuple[str | None, dict]:
    """(one-sentence error or None, facts about the text) for an uploaded pre-training corpus.

    The text is read as a fine-tuning upload is (``uploads.decode``): UTF-8, UTF-16 or, failing both,
    Latin-1, said in ``facts["notes"]``; ``facts["utf8"]`` holds its bytes in UTF-8, which the run stores and
    reads. It must hold separate documents: next-sentence prediction draws its random sentence B from
    *another* document and needs two held-out documents to evaluate."""
    if not data:
        return f"{name} is empty (0 bytes); upload a UTF-8 text file with your documents.", {}
    try:
        text, notes = decode_bytes(data, name, _TEXT_HINT)
    except DataError as e:
        return str(e), {}
    if not text.strip():
        return f"{name} holds only white space; upload a file with your documents.", {}
    if (controls := _control_characters(text)) > CONTROL_SHARE * len(text):
        # (random or binary bytes without a NUL read as Latin-1: "6 documents, 172 words" of noise)
        return (f"{name} does not look like text: {controls:,} of its {len(text):,} characters are control "
                f"characters, as when another kind of file is read as text; {_TEXT_HINT}.", {})
    docs = _documents(text)
    objective = objective_type(objective)
    need = objective.documents_needed
    facts = {"documents": len(docs), "sentences": sum(len(d) for d in docs),
             "words": sum(words_in(s) for d in docs for s in d), "notes": list(notes),
             "utf8": text.encode("utf-8") if notes else data}
    # the word counts of the sentences a sequence of 16 WordPieces (the least a run may have) cannot hold, in
    # order: how many a run cuts depends on its max_seq_length, chosen after the upload (long_sentence_note)
    facts["long_sentence_words"] = sorted(n for d in docs for s in d if (n := words_in(s)) > words_held(16))
    # each document's words and key: the page splits them as the run will (``corpora.split_indices``) before the file
    # is stored, and says what its held-out part evaluates
    facts["document_words"] = [sum(words_in(s) for s in d) for d in docs]
    facts["document_keys"] = [document_key(d) for d in docs]
    if len(docs) < need:
        why = "next-sentence prediction needs" if objective.next_sentence else "a run needs"
        return (f"{name} holds {len(docs)} document{'s' if len(docs) != 1 else ''}, but {why} at least {need} "
                f"(some to train on, some held out); {SEPARATE_DOCUMENTS}.", facts)
    return None, facts


CONTROL_SHARE = 0.01  # prose holds next to none (tabs and line ends aside); random bytes a quarter
LONG_SENTENCE_WORDS = 400  # a sentence of more words fills more than 512 WordPieces


def words_held(max_seq_length: int) -> int:
    """About the most words of one sentence a sequence of ``max_seq_length`` WordPieces holds (400 of 512)."""
    return int(max_seq_length * LONG_SENTENCE_WORDS / 512)


def long_sentence_note(facts: dict, max_seq_length: int) -> str | None:
    """The sentences of an upload longer than a sequence of ``max_seq_length`` holds, in one sentence (a 1 MB line
    without a full stop trained on its first WordPieces only, with nothing said; at 128 WordPieces, the default,
    a sentence of 150 words is cut too), or None."""
    import bisect

    lengths = facts.get("long_sentence_words") or []
    held = words_held(max_seq_length)
    long = len(lengths) - bisect.bisect_right(lengths, held)
    if not long:
        return None
    return (f"{long:,} of its sentences {'is' if long == 1 else 'are'} longer than about {held:,} words, more than a "
            f"sequence of {max_seq_length:,} WordPieces holds: each is cut to what fits and the rest is not trained "
            "on; end its sentences with a full stop, put one sentence on each line, or raise the sequence length")


def _control_characters(text: str) -> int:
    """The characters of Unicode's control category but tab, line feed and carriage return."""
    return sum(1 for c in text if unicodedata.category(c) == "Cc" and c not in "\t\n\r")


def _documents(text: str):
    """The documents of an upload's text, cut as a run reads the file (``corpora.load_corpus``)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "corpus.txt"
        p.write_text(text, encoding="utf-8")
        return load_corpus(p)


# A vocabulary is learnt for the estimate up to this many words (about 1.5 s here); a larger corpus is taken
# to give the pieces asked for (BBC News's first 40,000 words gave 5,622 of 8,000, its first 400,000 all 8,000).
LEARN_FOR_ESTIMATE_WORDS = 300_000
_learnt: dict[tuple, int | None] = {}


def learnable_vocab_size(data: bytes, vocab_size: int, lowercase: bool = True) -> int | None:
    """How many WordPieces a run learns from this uploaded corpus when it asks for ``vocab_size``: fewer
    when the text runs out of pairs seen twice (a few thousand words give a few hundred pieces, and the
    model's parameters and the estimate shrink with them). None above LEARN_FOR_ESTIMATE_WORDS words, where
    the asked size is taken. Learnt on all the documents, as the run does on all but the held-out ones."""
    from ..tokenizer import SPECIAL_TOKENS
    from ..wordpiece_vocab import learn_wordpiece_vocab

    key = (hashlib.sha256(data).hexdigest(), int(vocab_size), bool(lowercase))
    if key not in _learnt:
        sentences = [s for doc in _documents(data.decode("utf-8-sig")) for s in doc]
        if len(_learnt) >= 64:
            _learnt.clear()
        _learnt[key] = None if sum(words_in(s) for s in sentences) > LEARN_FOR_ESTIMATE_WORDS else len(
            learn_wordpiece_vocab(sentences, int(vocab_size), lowercase=lowercase, special_tokens=SPECIAL_TOKENS))
    return _learnt[key]


def held_out_fraction(n_docs: int, default: float = 0.05) -> float:
    """The share of documents kept for evaluation: the default 5 %, raised to two documents
    (an NSP evaluation needs two) when at least two are left to train on; with fewer than
    four documents one is held out. Always below 1, so training never gets nothing."""
    if n_docs < 2:
        return default
    held = 2 if n_docs >= 4 else 1
    return max(default, held / n_docs) if round(n_docs * default) < held else default
