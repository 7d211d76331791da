"""WordPiece tokenisation (paper, Section 3: "WordPiece embeddings with a 30,000 token vocabulary").

Text is cleaned, optionally lower-cased and accent-stripped, split on whitespace and
punctuation, and each word is broken greedily into the longest vocabulary pieces, the
continuation pieces written with a ``##`` prefix ("playing" -> "play", "##ing"). A sequence
is ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for A and 1 for B.

The work is done by Hugging Face ``tokenizers`` (Rust), so ids are identical to
``transformers``' BERT tokenizer on the same vocab.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import BertWordPieceTokenizer

# The Rust tokenizer keeps its truncation as state: set, then encode. The app's sessions share one tokenizer per
# model (threads of one server), so a setting and the encode it is for are taken together, under one lock for
# every tokenizer (a lock of each would not pickle with it).
_TRUNCATION = threading.RLock()

from .full_disk import size_text

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# The most a tokenizer's file may hold before it is read: far more than any real one (a 250,000-piece vocab.txt is
# about 5 MB, multilingual BERT's tokenizer.json 2 MB), far less than an upload may unpack to.
MAX_FILE_BYTES = 32_000_000
MAX_SETTINGS_BYTES = 1_000_000  # tokenizer_config.json: a few settings


@dataclass
class Encoded:
    """One encoded example; lists have one entry per token."""

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]     # character span in its own sentence ((0, 0) for specials)
    word_ids: list[int | None]         # index of the word a piece came from (None for specials)
    sequence_ids: list[int | None]     # 0 = sentence A, 1 = sentence B, None = special / pad


class WordPieceTokenizer:
    def __init__(self, vocab: str | Path | dict[str, int], lowercase: bool = True):
        self.lowercase = lowercase
        # The vocab file's own lines, kept so that save() writes them back unchanged: ids are
        # line numbers, and a file with a repeated line must not shift the ids that follow.
        self._lines = None if isinstance(vocab, dict) else _vocab_lines(_bounded(Path(vocab), MAX_FILE_BYTES))
        known = set(vocab) if isinstance(vocab, dict) else set(self._lines)
        for t in SPECIAL_TOKENS:  # tokenizers itself would raise a TypeError naming no file
            if t not in known:
                raise ValueError(f"the vocabulary has no {t} token")
        self._tok = BertWordPieceTokenizer(
            vocab if isinstance(vocab, dict) else str(vocab), lowercase=lowercase
        )
        self._fingerprint: str | None = None
        for t in SPECIAL_TOKENS:
            if self._tok.token_to_id(t) is None:
                raise ValueError(f"the vocabulary has no {t} token")
        # A repeated line takes the id of its last line (as transformers' BertTokenizer gives it): ids then reach
        # past the count of distinct pieces, and a model sized by that count would index past its embeddings.
        self._size = max(self._tok.get_vocab().values()) + 1

    # ----- construction -------------------------------------------------------------------
    @classmethod
    def from_dir(cls, directory: str | Path) -> "WordPieceTokenizer":
        """Load from a checkpoint directory: vocab.txt (or, where a folder saved by transformers 5 has
        only tokenizer.json, the WordPiece vocabulary inside it) plus the lower-casing setting, read
        from tokenizer_config.json (``do_lower_case``) or tokenizer.json's normaliser."""
        d = Path(directory)
        if (d / "vocab.txt").is_file():
            return cls(d / "vocab.txt", lowercase=_lowercase_setting(d))
        if (d / "tokenizer.json").is_file():  # transformers 5 saves a fast tokenizer's file alone
            return cls(_wordpiece_vocab_of(d / "tokenizer.json"), lowercase=_lowercase_setting(d))
        raise FileNotFoundError(f"{d} has no vocab.txt (nor a tokenizer.json)")

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, lowercase: bool = True,
              min_frequency: int = 2) -> "WordPieceTokenizer":
        """Learn a new WordPiece vocabulary of ``vocab_size`` pieces from raw text.

        The same text and settings always give the same vocabulary, in every process. The
        ``tokenizers`` library's trainer does not promise that: it breaks ties between equally
        frequent merges by internal ids handed out in the order of a Rust hash table, which is
        seeded at random in every process, so two runs on one corpus learnt different
        vocabularies. The learning is therefore done here, in :mod:`bert_explorer.wordpiece_vocab`
        (the same BPE-style merges, ties taken in string order); tokenising with the result is
        still done by ``tokenizers``' WordPiece model.

        The special tokens come first (ids 0-4, in ``SPECIAL_TOKENS`` order), then the alphabet
        (at most 1,000 characters), their ``##`` continuation forms and the learnt pieces;
        ``min_frequency`` is the fewest times a pair must be seen to be merged. The vocabulary
        has exactly ``vocab_size`` entries unless the text runs out of such pairs first."""
        return cls(_learn_vocab_dict(texts, vocab_size, lowercase, min_frequency), lowercase=lowercase)

    def save(self, directory: str | Path, model_max_length: int = 512) -> None:
        """Write vocab.txt (ids = line numbers), tokenizer.json and tokenizer_config.json.
        ``model_max_length`` is the longest input the model beside it can read (its learned positions):
        transformers cuts to it, so a larger figure would send a long text past the last position."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        lines = self._lines or [t for t, _ in sorted(self._tok.get_vocab().items(), key=lambda kv: kv[1])]
        (d / "vocab.txt").write_text("".join(t + "\n" for t in lines), encoding="utf-8")
        self._tok.save(str(d / "tokenizer.json"), pretty=False)  # compact: a third smaller, the same JSON
        (d / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "BertTokenizer", "do_lower_case": self.lowercase,
            "model_max_length": int(model_max_length),
            **{k: v for k, v in zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"),
                                   SPECIAL_TOKENS)},
        }, indent=2) + "\n")

    # ----- vocabulary ---------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A SHA-1 of the vocabulary (in id order) and the lower-casing setting: two tokenizers
        with the same fingerprint turn every text into the same ids."""
        if self._fingerprint is None:
            lines = self._lines or [t for t, _ in sorted(self._tok.get_vocab().items(), key=lambda kv: kv[1])]
            self._fingerprint = hashlib.sha1(("\n".join(lines) + f"\nlowercase={self.lowercase}").encode()).hexdigest()
        return self._fingerprint

    @property
    def vocab_size(self) -> int:
        """One more than the largest id: the rows a model's word embeddings need (a vocab.txt's lines)."""
        return self._size

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> str:
        token = self._tok.id_to_token(int(i))
        if token is None and self._lines and 0 <= int(i) < len(self._lines):
            return self._lines[int(i)]  # a repeated line's first id, which reads its token as the file does
        return "" if token is None and 0 <= int(i) < self._size else token  # (an id no piece has: a gap)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_token(i) for i in ids]

    pad_id = property(lambda self: self._tok.token_to_id("[PAD]"))
    unk_id = property(lambda self: self._tok.token_to_id("[UNK]"))
    cls_id = property(lambda self: self._tok.token_to_id("[CLS]"))
    sep_id = property(lambda self: self._tok.token_to_id("[SEP]"))
    mask_id = property(lambda self: self._tok.token_to_id("[MASK]"))

    def special_ids(self) -> set[int]:
        return {self._tok.token_to_id(t) for t in SPECIAL_TOKENS}

    def tokenize(self, text: str) -> list[str]:
        """WordPiece pieces of a text, without [CLS]/[SEP]."""
        with _TRUNCATION:  # (none: after an encode cut at max_length, the pieces of a long text were cut too)
            self._tok.no_truncation()
            return self._tok.encode(text, add_special_tokens=False).tokens

    # ----- encoding -----------------------------------------------------------------------
    def encode(self, text: str, pair: str | None = None, max_length: int | None = None,
               pad_to: int | None = None) -> Encoded:
        """[CLS] text [SEP] (pair [SEP]); longest-first truncation to ``max_length`` tokens:
        the longer sentence loses its last piece until the pair fits (as transformers does;
        on an odd split the extra piece goes to the longer sentence, B on a tie)."""
        return self.encode_batch([text if pair is None else (text, pair)], max_length, pad_to)[0]

    def encode_batch(self, examples: Sequence[str | tuple[str, str]], max_length: int | None = None,
                     pad_to: int | None = None) -> list[Encoded]:
        with _TRUNCATION:
            self._truncate(max_length)
            encs = self._tok.encode_batch([e if isinstance(e, str) else tuple(e) for e in examples])
        return [self._pad(self._from_encoding(e), max(pad_to or 0, len(e.ids))) for e in encs]

    def ids_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """WordPiece ids of each text, without [CLS]/[SEP] and without truncation: the fast path for
        pre-training data, which needs only the ids (no tokens, offsets or word ids to build)."""
        with _TRUNCATION:
            self._tok.no_truncation()
            return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_words(self, sentences: Sequence[Sequence[str]], max_length: int | None = None) -> list[Encoded]:
        """Encode already-split words (NER): ``word_ids`` maps each piece back to its word, so a
        label can go on the first piece of every word (paper, Section 5.3)."""
        with _TRUNCATION:
            self._truncate(max_length)
            encs = self._tok.encode_batch([list(s) for s in sentences], is_pretokenized=True)
        return [self._from_encoding(e) for e in encs]

    def _truncate(self, max_length: int | None) -> None:
        if max_length is not None:
            self._tok.enable_truncation(max_length, strategy="longest_first")
        else:
            self._tok.no_truncation()

    def encode_windows(self, question: str, context: str, max_length: int, stride: int) -> list[Encoded]:
        """[CLS] question [SEP] context-window [SEP] for every window of a long context; windows
        overlap by ``stride`` tokens so each answer is seen whole in at least one (the
        "document stride" of the original SQuAD code)."""
        with _TRUNCATION:
            self._tok.enable_truncation(max_length, stride=stride, strategy="only_second")
            try:
                first = self._tok.encode(question, context)
            finally:
                self._tok.no_truncation()
        return [self._from_encoding(e) for e in [first, *first.overflowing]]

    def _from_encoding(self, e) -> Encoded:
        return Encoded(e.ids, e.type_ids, [1] * len(e.ids), e.tokens, [tuple(o) for o in e.offsets],
                       list(e.word_ids), list(e.sequence_ids))

    def batch(self, examples: Sequence[str | tuple[str, str]], max_length: int = 512,
              device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """Encode and pad to the longest example: model-ready tensors [B, T]."""
        return self.tensors(self.encode_batch(examples, max_length), device)

    def tensors(self, encs: Sequence[Encoded], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """Pad already-encoded examples to the longest one and stack them: [B, T] tensors."""
        T = max(len(e.input_ids) for e in encs)
        encs = [self._pad(e, T) for e in encs]
        return {
            k: torch.tensor([getattr(e, k) for e in encs], dtype=torch.long, device=device)
            for k in ("input_ids", "token_type_ids", "attention_mask")
        }

    def _pad(self, e: Encoded, T: int) -> Encoded:
        pad = T - len(e.input_ids)
        if pad == 0:
            return e
        return Encoded(e.input_ids + [self.pad_id] * pad, e.token_type_ids + [0] * pad,
                       e.attention_mask + [0] * pad, e.tokens + ["[PAD]"] * pad,
                       e.offsets + [(0, 0)] * pad, e.word_ids + [None] * pad,
                       e.sequence_ids + [None] * pad)


def _learn_vocab_dict(texts: Iterable[str], vocab_size: int, lowercase: bool,
                      min_frequency: int) -> dict[str, int]:
    """Token -> id for :meth:`WordPieceTokenizer.train`: the deterministic learner's list, numbered."""
    from .wordpiece_vocab import learn_wordpiece_vocab

    pieces = learn_wordpiece_vocab(texts, vocab_size, lowercase=lowercase, min_frequency=min_frequency,
                                   special_tokens=SPECIAL_TOKENS, limit_alphabet=1000, prefix="##")
    return {t: i for i, t in enumerate(pieces)}


def _wordpiece_vocab_of(path: Path) -> dict[str, int]:
    """Token -> id of the WordPiece model in a ``tokenizers`` JSON file; one sentence when it is not
    BERT's kind of tokenizer."""
    try:
        model = json.loads(_bounded(path, MAX_FILE_BYTES))["model"]
        kind, vocab = model.get("type"), model.get("vocab")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ValueError(f"{path} is not a readable tokenizer file ({e})") from None
    if kind != "WordPiece" or not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"{path} holds a {kind or 'unknown'} tokenizer, not BERT's WordPiece vocabulary with ids "
                         "0, 1, 2, ...; give a folder with BERT's vocab.txt")
    return vocab


def _bounded(path: Path, limit: int) -> str:
    """A tokenizer file's UTF-8 text, its size checked before it is read (ValueError: one sentence)."""
    if path.stat().st_size > limit:
        raise ValueError(f"{path.name} is over {size_text(limit)}, far more than a BERT tokenizer's file holds")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text") from None
    if text.startswith("\ufeff"):  # (its first line, [PAD] in a vocab.txt, would not be found: a wrong sentence)
        raise ValueError(f"{path.name} begins with a byte-order mark (as some editors save UTF-8): save it as UTF-8 "
                         "without one")
    return text


def _vocab_lines(text: str) -> list[str]:
    """A vocab.txt's tokens, one a line, as the tokenizers library reads them: lines end at "\\n" only (Python's
    splitlines also ends one at U+2028 or U+0085, which would shift every later id) and lose trailing blanks."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.rstrip() for line in lines]


def _settings(path: Path, limit: int) -> dict:
    """The JSON object of settings in ``path`` (ValueError: one sentence when it is not one)."""
    try:
        value = json.loads(_bounded(path, limit))
    except RecursionError:
        raise ValueError(f"{path.name} nests too deeply to be a tokenizer's settings") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path.name} is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path.name} is not a JSON object of settings")
    return value


def _lowercase_setting(d: Path) -> bool:
    cfg = d / "tokenizer_config.json"
    if cfg.is_file():
        value = _settings(cfg, MAX_SETTINGS_BYTES).get("do_lower_case")
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"  # (bool("false") is True: a cased model read lower-cased)
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{cfg.name}'s do_lower_case must be true or false, not {str(value)[:40]!r}")
        if value is not None:
            return value
    tj = d / "tokenizer.json"
    if tj.is_file():
        norm = _settings(tj, MAX_FILE_BYTES).get("normalizer") or {}
        if isinstance(norm, dict) and "lowercase" in norm:
            return bool(norm["lowercase"])
    # The original BERT convention: a vocab with no upper-case letters is an uncased one.
    # Special tokens such as [CLS] do not count.
    lines = _vocab_lines(_bounded(d / "vocab.txt", MAX_FILE_BYTES))
    # (capitals of any script: a cased vocab of É and Ω but no A-Z was read as uncased, its capitals [UNK]; a
    # capital with no small letter, as the uncased vocab's ℝ, tells nothing)
    return not any(c != c.lower() for t in lines if not (t.startswith("[") and t.endswith("]")) for c in t)
