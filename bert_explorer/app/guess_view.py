"""The class's guesses on a page: the server's one board (``analysis/probes/guesses.py``), the teacher's
question and Reveal, a student's one guess, and the reveal drawn as two charts (the class beside the model)."""
from __future__ import annotations

import re
import secrets
from collections import Counter

import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ..analysis.probes import guesses as gs
from ..analysis.probes.pretraining_tasks import mlm_top_k, nsp_probability
from ..safe_text import markdown_text
from . import exports
from .state import load

BOARD = gs.Board()  # one per server process: every session reads the same question
ARCH = "BertForPreTraining"
TOP_K = 10
POLL_S = 2.0  # how often a student's page looks for the question and the reveal (Streamlit has no push)
TEACHER_SHOWN = 30  # words of the guesses so far listed on the teacher's page
# a guess is filed under its browser's cookie (student_id): the teacher's counts are of browsers, not of people
ONE_A_BROWSER = ("One guess a browser: a browser that lost its cookie (closed and reopened, a private window, cookies "
                 "cleared) counts as another student.")


STUDENT_COOKIE = "bert_explorer_student"
STUDENT_KEY = "be_student_id"
STUDENT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")  # what a browser's cookie may hold to be taken as an id


def student_id() -> str:
    """This browser's id, under which its guess is filed: kept in a cookie of this site, so that a reload or a
    second tab of one browser is one student (filed by session, a student who reloaded and guessed again was
    counted twice, and no longer saw their guess). Made at this browser's first visit (:func:`keep_student`);
    a cookie that is not such an id is not taken."""
    if mine := st.session_state.get(STUDENT_KEY):
        return mine
    kept = browser_cookie()
    if isinstance(kept, str) and STUDENT_ID.fullmatch(kept):
        st.session_state[STUDENT_KEY] = kept
        return kept
    ctx = get_script_run_ctx()
    if ctx is None:
        return "no-session"
    st.session_state[STUDENT_KEY] = secrets.token_urlsafe(18)
    st.session_state[STUDENT_KEY + "_new"] = True
    return st.session_state[STUDENT_KEY]


def browser_cookie() -> str | None:
    """The student cookie as this session's browser sent it when it connected (None without one)."""
    try:
        return st.context.cookies.get(STUDENT_COOKIE)
    except Exception:  # a harness without a browser's request
        return None


def keep_student() -> None:
    """At the top of the page: this browser's id (``student_id``), and where it is new, the cookie that keeps it
    for the browser's next sessions (its tabs, a reload), until the browser closes."""
    student_id()
    if st.session_state.pop(STUDENT_KEY + "_new", False):
        st.html(f"<script>document.cookie = '{STUDENT_COOKIE}={st.session_state[STUDENT_KEY]}; path=/; "
                "SameSite=Strict';</script>", unsafe_allow_javascript=True)


def model_answer(q: gs.Question, loaded) -> dict:
    """The model's answer to question ``q``: computed once, when the teacher poses it (Board.pose holds it back
    until the reveal). Raises ValueError where the model cannot answer it."""
    if q.kind == "cloze":
        return {"top": mlm_top_k(loaded, q.text, TOP_K)[0]["predictions"]}
    return {"is_next": nsp_probability(loaded, [(q.text, q.text_b)])[0]["is_next"]}


def question_text(q: gs.Question) -> str:
    """The question as Markdown, its sentences shown as the characters the model reads (a teacher's "**" or a
    Markdown image was drawn bold, or fetched from another site by every student's browser)."""
    if q.kind == "cloze":
        return f"Which word is hidden behind [MASK]?  \n> {markdown_text(q.text)}"
    return (f"Is B the sentence that came after A?  \n> **A:** {markdown_text(q.text)}  \n"
            f"> **B:** {markdown_text(q.text_b)}")


def _students(n: int) -> str:
    return f"{n} student{'s' if n != 1 else ''}"


def _percent(p: float) -> str:
    return ">99.9%" if p > 0.999 else "<0.1%" if p < 0.001 else f"{p:.1%}"


def own_rank(q: gs.Question, mine: str) -> str:
    """Where a student's cloze guess stands among the model's answers ("You guessed paris: the model's second
    answer, 12.4%."): the reveal named only the model's first, and a student whose word was its second read
    nothing of it."""
    top = q.answer["top"] if q.kind == "cloze" and q.answer else []
    at = next((i for i, p in enumerate(top) if p["token"].lower() == mine.lower()), None)
    if at is None:
        return f"You guessed **{mine}**" + (f": not among the model's top {len(top)}." if top else ".")
    nth = ("first", "second", "third", "fourth", "fifth")[at] if at < 5 else f"number {at + 1}"
    return f"You guessed **{mine}**: the model's {nth} answer, {_percent(top[at]['probability'])}."


def reveal(q: gs.Question, key: str) -> None:
    """The class's guesses beside the model's answer: two charts and one sentence, every number counted."""
    said = list(q.guesses.values())
    left, right = st.columns(2)
    if q.kind == "cloze":
        counts = gs.tally(said)
        top = q.answer["top"]
        fig = go.Figure(go.Bar(x=[w for w, _ in counts], y=[n for _, n in counts], name="students",
                               text=[n for _, n in counts], textposition="auto"))
        fig.update_layout(title=f"The class's guesses ({_students(len(said))})", xaxis_title="guess",
                          yaxis_title="students", height=380)
        model = go.Figure(go.Bar(x=[p["token"] for p in top], y=[p["probability"] for p in top], name="model",
                                 text=[f"{p['probability']:.1%}" for p in top], textposition="auto"))
        model.update_layout(title=f"{q.model}'s top {len(top)}", xaxis_title="WordPiece", yaxis_title="probability",
                            height=380, yaxis_tickformat=".0%")  # (bars said "35.5 %" on an axis of 0-0.3)
        sentence = gs.cloze_sentence(said, top) if said else "No student guessed before the reveal."
    else:
        yes = sum(g == gs.YES for g in said)
        fig = go.Figure(go.Bar(x=["yes", "no"], y=[yes, len(said) - yes], name="students",
                               text=[yes, len(said) - yes], textposition="auto"))
        fig.update_layout(title=f"The class: is B the next sentence? ({_students(len(said))})",
                          xaxis_title="answer", yaxis_title="students", height=380)
        p = q.answer["is_next"]
        # the class's words beside the head's, and one decimal never rounded to a certainty ("100.0%" beside the
        # sentence's "above 99.9%")
        model = go.Figure(go.Bar(x=["yes (IsNext)", "no (NotNext)"], y=[p, 1 - p], name="model",
                                 text=[_percent(p), _percent(1 - p)], textposition="auto"))
        model.update_layout(title=f"{q.model}'s answer", xaxis_title="", yaxis_title="probability", height=380,
                            yaxis_range=[0, 1], yaxis_tickformat=".0%")
        sentence = gs.pair_sentence(said, p) if said else "No student answered before the reveal."
    fig.update_yaxes(tickformat="d", rangemode="tozero", dtick=1 if len(said) <= 10 else None)  # whole students
    for chart in (fig, model):  # guesses and WordPieces such as "2" or "1990" are words, not numbers on a line
        chart.update_xaxes(type="category")
    exports.figure(fig, f"{key}_class", container=left)
    exports.figure(model, f"{key}_model", container=right)
    st.markdown(f"**{sentence}**")


SENT = "guess_send_"  # a question's "Send my guess" button, by the question's id
# a pair's box is a yes/no choice, nothing typed
CLOSED = {kind: f"Guesses closed at the reveal: the box keeps {kept}, and only a guess you sent is counted."
          for kind, kept in (("cloze", "what you typed"), ("pair", "your choice"))}


def _sent_too_late(q) -> str | None:
    """One sentence where this run was started by a guess that the board no longer takes: sent as the teacher
    revealed the answer (the form is gone from this run, and the guess vanished without a word) or posed another
    question; None otherwise."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(SENT)]:
        if not st.session_state.get(key):
            continue
        question = key[len(SENT):]
        if question == q.id and q.answer is None:
            continue  # (the form below reads it and sends it)
        typed = st.session_state.get(f"guess_word_{question}") or st.session_state.get(f"guess_pair_{question}")
        return (f"Not sent{f' ({markdown_text(typed)})' if typed else ''}: "
                f"{gs.ANSWER_OUT if question == q.id else gs.QUESTION_OVER}")
    return None


@st.fragment(run_every=POLL_S)
def student_box() -> None:
    """A student's side: the question, one box, the guess kept until the reveal; then the reveal."""
    q = BOARD.current()
    if q is None:
        st.info(f"Waiting for your teacher's question… (this box looks for it every {POLL_S:.0f} s)")
        return
    late = f"guess_late_{q.id}"  # kept, as a refusal is, until the next guess: this box runs again every few seconds
    if said := _sent_too_late(q):
        st.session_state[late] = said
    st.markdown(question_text(q))
    mine = q.guesses.get(student_id())
    sending = q.answer is None and st.session_state.get(f"{SENT}{q.id}")  # (a guess of this question, read below)
    if st.session_state.get(late) and not sending:
        st.warning(st.session_state[late] + (f" Your guess stays **{markdown_text(mine)}**." if mine and
                                             q.answer is not None else ""))
    closed = q.answer is not None
    # the box stays at the reveal, closed: what a student typed and had not sent is still theirs to read (the form
    # went with the reveal, and the word with it)
    with st.form(f"guess_form_{q.id}", clear_on_submit=False):
        if q.kind == "cloze":  # (no max_chars: a longer paste would vanish in the browser without a word;
            # guesses.one_word says what is wrong with it)
            typed = st.text_input("Your guess: one word", key=f"guess_word_{q.id}", disabled=closed)
        else:
            typed = st.radio("Your answer", [gs.YES, gs.NO], horizontal=True, index=None, key=f"guess_pair_{q.id}",
                             disabled=closed)
        sent = st.form_submit_button("Send my guess", key=f"{SENT}{q.id}", disabled=closed)
    if closed:
        st.caption(CLOSED[q.kind])
        if mine:
            st.caption(own_rank(q, mine) if q.kind == "cloze" else f"You answered **{mine}**.")
        reveal(q, f"guess_{q.id}_s")
        return
    # A refusal is kept until the next guess: this box runs again every few seconds, and a warning shown only
    # on the run that sent the guess would vanish before a student read it (the guess seemingly sent).
    refused = f"guess_refused_{q.id}"
    if sent:
        try:
            value = gs.one_word(typed or "", load(q.model, ARCH)[0].tokenizer) if q.kind == "cloze" else typed
            if q.kind == "pair" and value not in (gs.YES, gs.NO):
                raise gs.GuessRefused("Choose yes or no.")
            BOARD.guess(q.id, student_id(), value)
            mine = value
            st.session_state.pop(refused, None)
            st.session_state.pop(late, None)
        except gs.GuessRefused as e:
            st.session_state[refused] = f"Not sent: {e}" + (f" Your guess is still **{mine}**." if mine else "")
    if st.session_state.get(refused):
        st.warning(st.session_state[refused])
    elif not mine and (off := q.taken_off.get(student_id())):  # (the caption of the guess went without a word)
        st.info(f"Your teacher took **{markdown_text(off)}** off the board; you may send another guess.")
    if mine:
        st.caption(f"Your guess: **{mine}**. You can change it until your teacher reveals the answer; no name is "
                   "kept.")


@st.fragment(run_every=2.0)
def teacher_count() -> None:
    """The teacher's view of the guesses before the reveal: how many, the words themselves (on the teacher's
    screen first, not the projector's at the reveal), and a word taken off the board."""
    q = BOARD.current()
    if q is None or q.answer is not None:
        return
    st.metric("Guesses so far", len(q.guesses))
    st.caption(ONE_A_BROWSER)
    if q.kind != "cloze" or not q.guesses:
        return
    counts = sorted(Counter(q.guesses.values()).items(), key=lambda wc: (-wc[1], wc[0]))
    st.caption("Only you see these before the reveal: " + ", ".join(
        f"{markdown_text(w)} ({n})" for w, n in counts[:TEACHER_SHOWN])
        + (f", and {len(counts) - TEACHER_SHOWN} more words" if len(counts) > TEACHER_SHOWN else ""))
    c1, c2 = st.columns([3, 1])
    word = c1.selectbox("A guess not for the class's screen", [w for w, _ in counts], index=None,
                        key=f"guess_off_{q.id}", placeholder="choose a word to take off the board")
    if word is not None and c2.button("Take it off", key=f"guess_off_go_{q.id}",
                                      help="Every guess of this word leaves the board; who sent it may guess again."):
        BOARD.take_off(q.id, word)
        st.rerun()
