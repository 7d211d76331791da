"""The class guesses before BERT answers: one question at a time, every student's guess, the reveal.

The teacher poses a cloze with one [MASK] (Devlin et al. 2019, Section 3.1, Task #1) or a sentence pair
("is B the next sentence?", Task #2); each student guesses once (and may change it until the reveal); on
Reveal the class's guesses stand beside the model's answer. A :class:`Board` holds the one question of a
server, its guesses keyed by browser (a student can only guess for their own; a reload or a second tab is
the same student: ``app/guess_view.student_id``), bounded in size,
in memory for the question's life only: posing the next question clears them, and no name is kept.
"""
from __future__ import annotations

import re
import threading
import time
import unicodedata
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_CHARS = 40        # one guess: a word, not a sentence
MAX_GUESSES = 500     # sessions on one question: a class, with room; more are refused in one sentence
SHOWN = 10            # guesses drawn one bar each; the rest together under OTHERS
OTHERS = "all others"  # (two words: never a guess, so a class that guessed "other" keeps its own bar)
YES, NO = "yes", "no"
WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")  # letters and digits, with an inner apostrophe or hyphen


class GuessRefused(ValueError):
    """A guess or a question that cannot be taken: one sentence for the page."""


QUESTION_OVER = "That question is over; the teacher has asked another."
ANSWER_OUT = "The answer is out: guesses are closed for this question."


def one_word(text: str, tokenizer) -> str:
    """A student's cloze guess as the model would read it: one word, at most MAX_CHARS characters, that
    WordPiece can spell without [UNK] (lowercased when the model is uncased)."""
    # punctuation around a word is not the word ("Paris!" was counted apart from "paris" at the reveal)
    # NFKC: a ligature ("ﬁre") or a full-width letter is the word it draws, not a guess counted apart from it
    word = unicodedata.normalize("NFKC", str(text)).strip().strip(".,;:!?\"'“”‘’()")
    if tokenizer.lowercase:  # an uncased model reads "París" as "paris" (it drops accents too): one guess
        word = "".join(c for c in unicodedata.normalize("NFD", word.lower()) if unicodedata.category(c) != "Mn")
    if not word:
        raise GuessRefused("Type one word first.")
    if word.upper() in ("[MASK]", "[CLS]", "[SEP]", "[PAD]", "[UNK]") or word.startswith("##"):
        raise GuessRefused("Type the word you think the [MASK] hides, not a token of BERT's own.")
    if len(word) > MAX_CHARS:
        raise GuessRefused(f"A guess is one word of at most {MAX_CHARS} characters.")
    if len(word.split()) > 1:
        raise GuessRefused("Type one word only: the [MASK] hides one word.")
    if not WORD.fullmatch(word):  # ("<b>x</b>" was taken, and drawn bold on the class's chart)
        raise GuessRefused("A guess is one word of letters or digits (an apostrophe or a hyphen inside it is fine).")
    if tokenizer.unk_id in tokenizer.encode(word).input_ids:
        raise GuessRefused(f"“{word}” has characters this model cannot read; try another word.")
    return word


@dataclass
class Question:
    """The question on the board: what was asked, of which model, and the guesses so far."""

    kind: str                      # "cloze" or "pair"
    text: str                      # the cloze (one [MASK]) or sentence A
    text_b: str | None             # sentence B of a pair
    model: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    posed: float = field(default_factory=time.time)
    guesses: dict = field(default_factory=dict)   # student (browser) id -> guess
    answer: dict | None = None     # the model's answer, once revealed
    taken_off: dict = field(default_factory=dict)  # student id -> the guess the teacher took off the board


class Board:
    """The one question of a server, shared by every session; safe between the server's threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._question: Question | None = None
        self._held: dict | None = None  # the model's answer to it, not shown before the reveal

    def pose(self, kind: str, text: str, text_b: str | None, model: str, mask_token: str = "[MASK]",
             answer_of: Callable[[Question], dict] | None = None) -> Question:
        """A new question (the teacher's): the guesses of the last one are gone. ``answer_of(question)`` is the
        model's answer, computed now and held back until the reveal: a question the model cannot answer (its
        [MASK] past the positions it reads) is refused before the class sees it, and Reveal takes no time."""
        if kind not in ("cloze", "pair"):
            raise GuessRefused("A question is a cloze or a sentence pair.")
        text, text_b = str(text).strip(), (str(text_b).strip() if text_b is not None else None)
        if kind == "cloze" and text.count(mask_token) != 1:
            raise GuessRefused(f"A cloze for the class hides exactly one word: write {mask_token} once.")
        if kind == "pair" and not (text and text_b):
            raise GuessRefused("A pair needs sentence A and sentence B.")
        question = Question(kind, text, text_b if kind == "pair" else None, model)
        held = None
        if answer_of is not None:
            try:
                held = answer_of(question)
            except ValueError as e:  # (the analysis's words for the command line: a sentence on the page)
                said = str(e).strip()
                raise GuessRefused(f"{said[:1].upper()}{said[1:]}{'' if said.endswith(('.', '!', '?')) else '.'}") \
                    from None
        with self._lock:
            self._question, self._held = question, held
        return question

    def guess(self, question_id: str, session: str, guess: str) -> None:
        """A student's guess (already checked: :func:`one_word`, or yes/no), replacing their earlier one."""
        with self._lock:
            q = self._question
            if q is None or q.id != question_id:
                raise GuessRefused(QUESTION_OVER)
            if q.answer is not None:
                raise GuessRefused(ANSWER_OUT)
            if session not in q.guesses and len(q.guesses) >= MAX_GUESSES:
                raise GuessRefused(f"This question has {MAX_GUESSES} guesses already, the most one question takes.")
            q.guesses[session] = guess

    def take_off(self, question_id: str, word: str) -> int:
        """Take every guess of ``word`` off the question (the teacher's: a word not for the class's screen, or one
        sent by a script again and again); how many were taken. The students who sent it may guess again."""
        with self._lock:
            q = self._question
            if q is None or q.id != question_id or q.answer is not None:
                return 0
            gone = [s for s, g in q.guesses.items() if g == word]
            for s in gone:
                q.taken_off[s] = q.guesses.pop(s)
            return len(gone)

    def reveal(self, question_id: str, answer: dict | None = None) -> None:
        """Show the model's answer: ``answer``, or the one held back since the question was posed."""
        with self._lock:
            if self._question is not None and self._question.id == question_id:
                self._question.answer = answer if answer is not None else self._held

    def current(self) -> Question | None:
        """A copy of the question on the board (guesses included), or None."""
        with self._lock:
            q = self._question
            return None if q is None else Question(q.kind, q.text, q.text_b, q.model, q.id, q.posed,
                                                   dict(q.guesses), q.answer, dict(q.taken_off))

    def clear(self) -> None:
        with self._lock:
            self._question, self._held = None, None


def tally(guesses) -> list[tuple[str, int]]:
    """The class's guesses, most frequent first (ties alphabetically), the SHOWN most frequent one by one
    and the rest together as OTHERS."""
    counts = sorted(Counter(guesses).items(), key=lambda kv: (-kv[1], kv[0]))
    shown, rest = counts[:SHOWN], sum(n for _, n in counts[SHOWN:])
    return shown + ([(OTHERS, rest)] if rest else [])


def cloze_sentence(guesses: list[str], model_top: list[dict]) -> str:
    """How the class did against the model, every number counted from ``guesses`` and ``model_top``
    (the model's predictions at the [MASK], most probable first)."""
    n = len(guesses)
    first = model_top[0]["token"]
    same = sum(g == first for g in guesses)
    head = (f"{same} of {n} student{'s' if n != 1 else ''} guessed the model's first answer, “{first}” "
            f"({model_top[0]['probability']:.1%}); it")
    counts = sorted(Counter(guesses).items(), key=lambda wc: (-wc[1], wc[0]))
    if len(counts) > 3 and counts[2][1] == counts[3][1]:
        # a tie across the third place: no three are "the most frequent" (four guesses of one each named three in
        # alphabetical order, leaving out the one the sentence was about)
        cut = counts[2][1]
        above, tied = [w for w, c in counts if c > cut], [w for w, c in counts if c == cut]
        if first in tied:  # the count is said once: "one of 4 guesses tied at 1 each (coffee, juice, soup, tea)"
            where = f"was one of {len(tied)} guesses tied at {cut} each"
            shown = f"after {', '.join(above)}: {_listed(tied)}" if above else _listed(tied)
        else:
            where = ("was among the class's most frequent guesses" if first in above else
                     "was not among the class's most frequent guesses")
            shown = (f"{', '.join(above)}, then {len(tied)} tied at {cut} each" if above else
                     f"{len(tied)} tied at {cut} each: {_listed(tied)}")
        return f"{head} {where} ({shown})."
    top3 = [w for w, _ in counts][:3]
    was = "was" if first in top3 else "was not"
    which = (f"{was} among the class's three most frequent guesses" if len(top3) == 3 else
             f"{was} among the class's guesses" if len(top3) == 2 else f"{was} the class's guess" if top3 else
             "was not among the class's guesses")
    return f"{head} {which}" + (f" ({', '.join(top3)})." if top3 else ".")


def _listed(words: list[str], most: int = SHOWN) -> str:
    return ", ".join(words[:most]) + (f" and {len(words) - most} more" if len(words) > most else "")


def pair_sentence(guesses: list[str], p_is_next: float) -> str:
    yes = sum(g == YES for g in guesses)
    no = len(guesses) - yes
    model = YES if p_is_next > 0.5 else NO
    agree = yes if model == YES else no
    return (f"{yes} student{'s' if yes != 1 else ''} said yes and {no} said no; the model says {model}, "
            f"P(IsNext) {_share(p_is_next)}: {agree} of {len(guesses)} agreed with it.")


def _share(p: float) -> str:
    """"= 80.0%", or "above 99.9%" where one decimal would round it to a certainty ("100.0%")."""
    return "above 99.9%" if p > 0.999 else "below 0.1%" if p < 0.001 else f"= {p:.1%}"
