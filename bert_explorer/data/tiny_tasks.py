"""Tiny generated data sets, one per task type: a fine-tuning run in seconds, for trying the app
and for tests (``tiny:<task>`` wherever a data set is named)."""
from __future__ import annotations

import random

from ..tasks.registry import (CLASSIFICATION, MULTI_LABEL, MULTIPLE_CHOICE, NER, PAIR_CLASSIFICATION, QA,
                              REGRESSION, task_type)
from .uploads.core import DataError, TaskData


_T_NOUNS = "film book song meal game trip show car".split()
_T_FILL = "we saw the one today and it was really quite so".split()
_T_POS, _T_NEG = "good great nice fine".split(), "bad awful poor sad".split()
_T_COLOURS = "red blue green black white pink".split()
_T_PER = "Anna Ben Carla David Eva Frank".split()
_T_SURNAMES = "Smith Jones Brown".split()
_T_LOC = "Paris Berlin Rome Oslo Madrid Vienna".split()


def make_tiny(task: str, n: int = 64, seed: int = 0) -> TaskData:
    """``n`` generated examples of ``task`` that a tiny BERT learns within ~100 steps:

    * classification: positive / negative, decided by one keyword (good, great ... / bad, awful ...);
    * pair-classification: "entailment" / "contradiction" ("the film is red" + "it is (not) red"): the
      negation decides, as in the well-known annotation artefact of NLI data;
    * regression: the number of positive keywords in the sentence (0 to 3);
    * ner: known capitalised first names (and surnames) are PER, known cities LOC;
    * qa: "what colour is the X?" answered by the word after "is" in "the X is Y.";
    * multi-label: "colour", "person" and "city", each present (about half the time) where the sentence
      holds a colour, a known first name or a known city;
    * multiple-choice: the right one of four endings repeats the thing named in the context, and the
      wrong ones name things that contexts never name (so the endings alone give it away, like
      SWAG's artefacts: context-matching alone is not learnt by a tiny BERT in ~100 steps).

    Classification labels alternate with the example index (balanced); deterministic for a seed.
    """
    try:
        kind = task_type(task)  # where ``tiny:<task>`` names it
    except ValueError as e:
        raise DataError(str(e)) from None
    make, label_names = _TINY[kind]
    rng = random.Random(seed)
    examples = [make(rng, i) for i in range(n)]
    return TaskData(kind, examples, list(label_names) if label_names else None, f"tiny:{task}",
                    [f"SYNTHETIC: make_tiny({task!r}, n={n}, seed={seed}), generated for tests"])


def _filler(rng: random.Random, k: int) -> list[str]:
    return [rng.choice(_T_FILL + _T_NOUNS) for _ in range(k)]


def _tiny_classification(rng, i):
    positive = i % 2 == 0
    words = _filler(rng, rng.randint(3, 7))
    words.insert(rng.randint(0, len(words)), rng.choice(_T_POS if positive else _T_NEG))
    return {"text": " ".join(words), "label": "positive" if positive else "negative"}


def _tiny_pair(rng, i):
    noun, colour = rng.choice(_T_NOUNS), rng.choice(_T_COLOURS)
    entails = i % 2 == 0
    subject = rng.choice([f"the {noun}", "it"])
    return {"text": f"the {noun} is {colour}", "text_pair": f"{subject} is {'' if entails else 'not '}{colour}",
            "label": "entailment" if entails else "contradiction"}


def _tiny_regression(rng, i):
    k = i % 4
    words = _filler(rng, rng.randint(3, 6))
    for _ in range(k):
        words.insert(rng.randint(0, len(words)), rng.choice(_T_POS))
    return {"text": " ".join(words), "text_pair": None, "label": float(k)}


def _tiny_ner(rng, i):
    tokens, tags = [], []

    def add(words, tag_list):
        tokens.extend(words)
        tags.extend(tag_list)

    for part in rng.sample(["PER", "LOC", "O", "O"], 4):
        if part == "PER":
            if rng.random() < 0.4:
                add([rng.choice(_T_PER), rng.choice(_T_SURNAMES)], ["B-PER", "I-PER"])
            else:
                add([rng.choice(_T_PER)], ["B-PER"])
        elif part == "LOC":
            add([rng.choice(["in", "to", "from"]), rng.choice(_T_LOC)], ["O", "B-LOC"])
        else:
            w = _filler(rng, rng.randint(1, 3))
            add(w, ["O"] * len(w))
    return {"tokens": tokens, "tags": tags}


def _tiny_qa(rng, i):
    noun, colour = rng.choice(_T_NOUNS), rng.choice(_T_COLOURS)
    fact = f"the {noun} is {colour} ."
    parts = [" ".join(_filler(rng, rng.randint(2, 5))) + " ." for _ in range(2)]
    parts.insert(rng.randint(0, 2), fact)
    context = " ".join(parts)
    start = context.index(fact) + len(f"the {noun} is ")
    return {"id": f"tiny-{i}", "question": f"what colour is the {noun} ?", "context": context,
            "answers": [{"text": colour, "answer_start": start}], "is_impossible": False}


def _tiny_mc(rng, i):
    # contexts name the first four nouns; wrong endings name the other four
    noun, wrong = rng.choice(_T_NOUNS[:4]), rng.sample(_T_NOUNS[4:], 3)
    label = rng.randrange(4)
    name = rng.choice(_T_PER)
    endings = wrong[:label] + [noun] + wrong[label:]
    return {"context": f"{name} likes the {noun} .", "choices": [f"so {name} gets the {x} ." for x in endings],
            "label": label}


def _tiny_multi_label(rng, i):
    # each label is one kind of word the sentence holds: a colour, a person, a city (none: no label)
    words = _filler(rng, rng.randint(3, 6))
    labels = [name for name, pool in (("colour", _T_COLOURS), ("person", _T_PER), ("city", _T_LOC))
              if rng.random() < 0.5 and not words.insert(rng.randint(0, len(words)), rng.choice(pool))]
    return {"text": " ".join(words), "labels": labels}


# each task type's generator and the label names it uses (in the order the model's outputs take)
_TINY = {CLASSIFICATION: (_tiny_classification, ("negative", "positive")),
         PAIR_CLASSIFICATION: (_tiny_pair, ("contradiction", "entailment")),
         REGRESSION: (_tiny_regression, None),
         NER: (_tiny_ner, ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")),
         QA: (_tiny_qa, None),
         MULTIPLE_CHOICE: (_tiny_mc, None),
         MULTI_LABEL: (_tiny_multi_label, ("city", "colour", "person"))}
