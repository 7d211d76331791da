"""The teacher and the students: two roles of one server.

In classroom mode (the app served beyond this machine, or ``BERT_EXPLORER_CLASSROOM=1`` to rehearse a
lesson on 127.0.0.1) students read what is prepared and ask bounded questions; only the teacher starts,
stops or prepares work. The teacher is whoever opened the **teacher's link**: the app's address with
``?teacher=<token>``, printed when ``python -m bert_explorer.app.serve`` starts (as Jupyter prints its
token) and, under a plain ``streamlit run`` served beyond the machine, in the server's log at the first
visit. The token is made anew each time the server starts (``BERT_EXPLORER_TEACHER_TOKEN`` fixes it).

The token leaves the address bar at once, since a projector shows the URL. The teacher's browser keeps a
cookie instead (a hash of the token, for this browser session only): a reload or a second tab of that
browser opens as the teacher's too, and a student's browser, which never had the link, has no cookie.

Who may do what lives here too: :func:`writes_allowed` (start, stop or prepare work, upload, delete) and
the buttons that do it (:func:`work_button`), drawn only where it is true.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import sys
import threading

import streamlit as st
from streamlit import config as st_config

from ..runs import neighbour_jobs
from ..runs.report import duration_text, left_text

TOKEN_ENV = "BERT_EXPLORER_TEACHER_TOKEN"
CLASSROOM_ENV = "BERT_EXPLORER_CLASSROOM"  # =1: classroom mode on 127.0.0.1 too (rehearsal, tests)
QUERY = "teacher"
COOKIE = "bert_explorer_teacher"
SESSION_KEY = "be_teacher"
REFUSED = ("That teacher's link is not this server's: the teacher finds this server's link where the server was "
           f"started (a new one each time it starts, unless {TOKEN_ENV} fixes it).")

_lock = threading.Lock()
_announced: list[str] = []


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def rehearsing() -> bool:
    """Classroom mode asked for on this machine (``BERT_EXPLORER_CLASSROOM=1``)."""
    return _truthy(os.environ.get(CLASSROOM_ENV))


def token() -> str:
    """This server's teacher token: the one set in the environment, else one made at the first call and
    kept in the environment, so the launcher that prints it and the pages that check it agree."""
    with _lock:
        if not os.environ.get(TOKEN_ENV):
            os.environ[TOKEN_ENV] = secrets.token_urlsafe(18)
        return os.environ[TOKEN_ENV]


def cookie_value() -> str:
    """What the teacher's browser keeps: derived from the token, so the cookie is not the link itself."""
    return hmac.new(token().encode(), b"bert-explorer teacher", hashlib.sha256).hexdigest()


def link(address: str) -> str:
    """The teacher's link on the app's ``address`` (e.g. ``http://10.0.0.5:8501``)."""
    return f"{address.rstrip('/')}/?{QUERY}={token()}"


def is_teacher() -> bool:
    """Did this session open the teacher's link (now, or before in this browser)?"""
    try:
        return bool(st.session_state.get(SESSION_KEY))
    except Exception:  # outside a page run (a CLI, a bare import): no session, no teacher
        return False


def adopt() -> None:
    """At the top of every page: take the teacher's role from the link or from the browser's cookie.

    The link's token is removed from the address bar in the same run; a wrong token is one sentence at the
    top of the page it opened, said once (in the page itself: a phone's narrow screen hides the sidebar; the
    token changes each time the server starts)."""
    given = st.query_params.get(QUERY)
    refused = False
    if given is not None:
        del st.query_params[QUERY]  # off the address bar (and out of the browser's history entry) at once
        if hmac.compare_digest(str(given).encode(), token().encode()):
            st.session_state[SESSION_KEY] = True
            # a session cookie of this site, read back by the server on every new session of this browser
            st.html(f"<script>document.cookie = '{COOKIE}={cookie_value()}; path=/; SameSite=Strict';</script>",
                    unsafe_allow_javascript=True)
        else:
            refused = True
    # the browser's cookie, also beside a wrong link: the teacher who opened last lesson's link was a student
    if not st.session_state.get(SESSION_KEY):
        kept = browser_cookie()
        if kept and hmac.compare_digest(str(kept).encode(), cookie_value().encode()):
            st.session_state[SESSION_KEY] = True
    if refused and not st.session_state.get(SESSION_KEY):
        st.warning(REFUSED)


def browser_cookie() -> str | None:
    """The teacher's cookie as this session's browser sent it when it connected (None without one)."""
    try:
        return st.context.cookies.get(COOKIE)
    except Exception:  # a harness without a browser's request: no cookies
        return None


def announce(address: str) -> None:
    """Print the teacher's link to the server's log once (a plain ``streamlit run`` served beyond this
    machine: ``python -m bert_explorer.app.serve`` prints it at start)."""
    with _lock:
        if _announced:
            return
        _announced.append(address)
    print(f"BERT Explorer: the teacher's link is {link(address)} (keep it to yourself: it lets its holder start, "
          "stop and prepare work)", file=sys.stderr, flush=True)


# ----- who may do what: private, classroom (teacher or student) ---------------------------------
WRITES_ENV = "BERT_EXPLORER_ALLOW_WRITES"  # =1: the writing pages stay on beyond loopback
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def server_address() -> str:
    """The address the Streamlit server listens on ("" = every interface, Streamlit's own
    default; .streamlit/config.toml makes it 127.0.0.1)."""
    # (read without st.get_option's lock: every page run asks, and under a class of 30 sessions the
    # lock was a queue; the option is still read live, so a test that sets it is seen)
    return str(st_config.get_config_options()["server.address"].value or "")


def is_private(address: str | None = None) -> bool:
    """Only this machine can reach a server listening on a loopback address (and no lesson is being
    rehearsed on it: ``BERT_EXPLORER_CLASSROOM=1`` serves classroom mode on 127.0.0.1 too)."""
    if address is None and rehearsing():
        return False
    address = server_address() if address is None else address
    return address in LOOPBACK or address.startswith("127.")


def writes_allowed() -> bool:
    """May this session start, stop or prepare work, take uploads or delete runs? Always on this machine
    only; in classroom mode the teacher's session (``roles``: the teacher's link), or everyone when the
    person who started the server said so with BERT_EXPLORER_ALLOW_WRITES=1."""
    return (is_private() or _truthy(os.environ.get(WRITES_ENV))
            or is_teacher())


def mode_sentence() -> str:
    where = server_address() or "every network interface"
    if rehearsing():
        where += f" ({CLASSROOM_ENV}=1: classroom mode rehearsed)"
    if is_private():
        return f"Private mode: the app listens on {where} (this machine only); every page is on."
    if _truthy(os.environ.get(WRITES_ENV)):
        return (f"Shared mode with writing on: the app listens on {where} and {WRITES_ENV}=1 lets anyone who can "
                "reach it train, upload and delete runs.")
    if is_teacher():
        return (f"Classroom mode, the teacher's view: the app listens on {where}; you may train, prepare, start "
                "and stop work, and your students explore what you prepare.")
    return (f"Classroom mode: the app listens on {where}, so training, uploads and deleting runs are off; "
            "exploring works. The teacher starts and prepares work with the teacher's link (printed where the server "
            "was started).")


# Every button that starts, stops or prepares work (a process, or a computation longer than
# STUDENT_CPU_S), by key: drawn only where writes_allowed(). A test presses the app's buttons as a student
# and finds any that starts or stops work without being one of these.
WORK_BUTTONS: set[str] = set()
STUDENT_CPU_S = 10.0  # the longest computation a student's click may start (seconds of one CPU core)


def work_button(label: str, key: str, container=None, **kwargs) -> bool:
    """A button that starts, stops or prepares work: drawn (and pressed) only in a session that may write,
    i.e. never a student's in classroom mode; for a student it is not drawn and returns False."""
    WORK_BUTTONS.add(key)
    if not writes_allowed():
        return False
    return (container or st).button(label, key=key, **kwargs)


def not_prepared(what: str, how: str = "", entry: tuple | None = None, build: tuple | None = None) -> None:
    """A student's one sentence where the teacher's button would be: ``what`` is not there yet; ``how`` the
    teacher prepares it where Home's Prepare for class does not (" by running them on this page ..."), or
    ``entry`` = (the loaded model, the cache entry it would fill): said from whether Prepare for class builds
    that entry (the page's own settings) or only this page does (a student's other settings). ``build`` = (the
    build of Prepare for class that makes it, the model's name), where the page knows it: a preparation running
    it now is said to be on its way."""
    path = None
    if entry is not None:
        build, path = (build_of(*entry), entry[0].name), entry[1]
        how = f" before class with Home's Prepare for class (the build {build[0]})" if build[0] else \
            " on this page with these settings (Home's Prepare for class builds each page's own settings, not these)"
    if build is not None and build[0] and under_way(*build) and (said := queue_sentence(*build, path)):
        # (a build already queued read as an invitation to the teacher to do what was under way)
        st.info(f"{what} is not prepared for this model yet: {said}")
        return
    st.info(f"{what} is not prepared for this model yet; your teacher can prepare it{how}.")


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def queue_sentence(build: str, model: str, path=None) -> str:
    """Where the teacher's running preparation has ``build`` of ``model`` (the one filling the cache entry
    ``path``, where the page names it), from the preparation's own plan: at work now, or its place in the queue,
    the build at work and the time said for those before it (the place alone where a time of one of them is not
    known); "" where the plan has it no longer ahead. A student beside the busy line of the build at work ("about
    1 min left") read it as theirs, 24 minutes away."""
    from ..analysis import lesson

    q = lesson.place_in_queue(build, model, path)
    if q is None:  # (its plan not written yet: the preparation reads its models first)
        return "your teacher's preparation, running now, builds it in its turn; where it is in the queue is said " \
               "once the preparation has read its models."
    if not q:
        return ""
    if q["now_place"] == q["place"]:
        left = f", about {duration_text(q['now_left_s'])} left" if q["now_left_s"] else ""
        return f"your teacher's preparation is building it now (build {q['place']} of {q['of']}{left})."
    now = f"it is at the {ordinal(q['now_place'])}, {q['now']}" if q["now"] else \
        "it prepares each page's first visit before its builds"
    n = q["before"]
    said = f"; the {n} build{'s' if n != 1 else ''} before it {'are' if n != 1 else 'is'} said to take about " \
        f"{duration_text(q['before_s'])}" if q["before_s"] else ""
    return (f"your teacher's preparation builds it in its turn, the {ordinal(q['place'])} of {q['of']} builds "
            f"({now}){said}.")


def under_way(build: str, model: str) -> bool:
    """Is the teacher's preparation running now with ``build`` of ``model`` among its builds?"""
    from ..analysis import lesson

    now = lesson.preparation()
    return bool(now["running"] and build in (now.get("builds") or []) and model in (now.get("models") or []))


def build_of(loaded, path) -> str | None:
    """The build of Home's Prepare for class (named as the panel and ``prepare-class --builds`` name it) that fills
    the cache entry ``path``, or None where only the page itself builds it (other settings than the page's own)."""
    from pathlib import Path

    from ..analysis import lesson

    for b in lesson.builds(loaded.name, loaded, set(lesson.BUILDS), estimate=False):
        if Path(b.path) == Path(path):
            return b.key
    return None


def busy_sentence() -> None:
    """For a student, what the server prepares now, each in one sentence in a lesson's words with its time
    left ("The server is preparing Features of layer 3 for the class: about 4 min left."); nothing when idle."""
    building = neighbour_jobs.preparing()
    for p in building[:3]:
        left = f": about {duration_text(p['seconds_left'])} left" if p["seconds_left"] else ""
        st.caption(f"The server is preparing {p['lesson']} for the class{left}.")
    if not building:  # the teacher's Prepare before its first build (its process starting, the first visits)
        from ..analysis import lesson

        now = lesson.preparation()
        if now["running"]:
            st.caption(f"The server is preparing the class ({', '.join(now.get('builds') or []) or 'the pages'} "
                       f"of {', '.join(now.get('models') or [])}): this page may be among them, so look again in a "
                       "minute.")


def running_beside() -> None:
    """For whoever may start a build: what other build runs on this server now (a second visitor was offered a
    second SAE training with no word of the one running), and that one started beside it shares the CPU."""
    building = neighbour_jobs.preparing()
    if building:
        named = "; ".join(p["lesson"] + (f", about {duration_text(p['seconds_left'])} left"
                                         if p["seconds_left"] else "") for p in building[:3])
        st.caption(f"Running on this server now: {named}. A build started beside it shares the CPU: both take "
                   "longer than their estimates say.")


def progress_line(progress: dict, lesson: str) -> str:
    """A running build's progress bar text: the builder's own line for whoever may start and stop work,
    the lesson's words ("Preparing Features of layer 3 for the class") for a student."""
    left = left_text(progress.get("started"), progress.get("fraction") or 0.0, progress.get("since"),
                     progress.get("said"))
    if writes_allowed():  # (the builder's own "this stage about ... left", for a terminal, beside this line's
        # time left read as two times of one job)
        message = re.sub(r"[,;] this stage about [^);]* left", "", progress.get("message") or "") if left else \
            progress.get("message")
        return (message or "starting…") + left
    return f"Preparing {lesson} for the class{left}"


def writes_off(what: str) -> bool:
    """True (and one sentence on the page) when ``what`` is off because of classroom mode."""
    if writes_allowed():
        return False
    st.info(f"{what} is off in classroom mode for students: the teacher does it with the teacher's link.")
    return True
