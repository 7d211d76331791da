"""Home's "Prepare for class" panel, for whoever may start work (the teacher in classroom mode): the
lesson's models, the long builds to run, one total estimate, Start and Stop, the progress, and a table
of what is prepared for which model. It runs ``bert-explorer prepare-class`` in the background
(``analysis/lesson.py``), so it goes on when the page is closed."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from .. import checkpoint
from ..analysis import lesson
from ..analysis.probes.pretraining_tasks import stored_evaluation
from ..train.estimate import background_threads
from ..train.speed import said
from .roles import is_private, running_beside, work_button, writes_allowed
from .state import load


@st.fragment(run_every=2.0)
def _progress() -> None:
    now = lesson.preparation()
    if not now["running"]:
        st.rerun()
    builds = ", ".join(now.get("builds") or []) or "the pages' first visits only"  # (it said "()" with no build)
    st.caption(f"Preparing {', '.join(now.get('models') or [])} ({builds}): it goes on "
               "if you close this page; a student's page that waits for something not prepared yet says what the server "
               "prepares meanwhile, with its time left.")
    st.code(now["log"], language=None)
    if work_button("Stop preparing", key="prep_stop", help="The build at work stops; what is done stays, and "
                                                           "preparing again goes on from there."):
        lesson.stop_preparing()


def lesson_models() -> list[str]:
    """What a lesson may use without a download: the shipped models and the BERTs downloaded from the Hub
    (a run's checkpoint is offered when it is the sidebar's model)."""
    from .. import hub, hub_names

    names = [n for n, (locate, _) in checkpoint.SHORT_NAMES.items() if locate() is not None]
    return [checkpoint.DEFAULT_MODEL, *(n for n in names if n != checkpoint.DEFAULT_MODEL),
            *map(hub_names.model_name, hub.cached_berts())]


def _label(name: str) -> str:
    from .. import hub

    entry = hub.CATALOGUE.get(name)
    return f"{entry.title} (downloaded)" if entry else name


def _loaded(name: str):
    return load(name, "BertForPreTraining")[0]


VISITS_FRESH_S = 30.0  # how long the panel trusts what it found of a model's first visits


def _visits_left(name: str, loaded) -> list:
    """``lesson.first_visits_left``, found again at most every ``VISITS_FRESH_S`` (the panel redraws at
    each click, and finding it reads every kept result) and after each preparation."""
    import time

    seen = st.session_state.setdefault("prep_visits", {})
    key = (name, lesson.preparation().get("started"))
    if key not in seen or time.time() - seen[key][0] > VISITS_FRESH_S:
        seen[key] = (time.time(), lesson.first_visits_left(loaded))
    return seen[key][1]


def _visits_mark(left: list) -> str:
    total = lesson.first_visits_total()
    return "✓" if not left else f"{total - len(left)} of {total}"


def panel(current: str | None) -> None:
    """The panel, drawn only for whoever may start work; ``current`` is the sidebar's model."""
    if not writes_allowed():
        return
    current = current or checkpoint.DEFAULT_MODEL
    # open for the teacher of a class (the panel is why the teacher opens Home before the lesson)
    with st.expander("Prepare for class", icon=":material/school:", expanded=not is_private()):
        st.caption("Before the lesson, compute what the pages compute on their first visit, and the long builds a "
                   "page offers, for each model of the lesson: in class, those pages then open at once for every "
                   "student (a build not chosen stays \"not prepared\" on its page). From a terminal: "
                   "`bert-explorer prepare-class --model NAME … --builds …`.")
        now = lesson.preparation()
        if now["running"]:
            _progress()
        else:
            # a build started elsewhere (a terminal's prepare-class, a page's own build) is said here, with its time
            # left: the panel showed it as not started and offered it again with a time that was not true
            running_beside()
            lines = [line for line in (now.get("log") or "").splitlines() if line.strip()]
            if lines:
                # how the last one ended, in its own last line ("prepared in 1 min 10 s (estimated ...)", or
                # where it stopped): the panel went back to its choices with no word of it
                (st.success if lines[-1].startswith("prepared in") else st.info)(
                    f"The last preparation ({', '.join(now.get('models') or [])}): {lines[-1]}")
                with st.popover("The last preparation's log"):
                    st.code(now["log"], language=None)
            options = list(dict.fromkeys([current, *lesson_models()]))
            models = st.multiselect("Models of the lesson", options, default=[current], key="prep_models",
                                    format_func=_label)
            # the quality measure by default, unless the sidebar's model has it already: measured here, or its own
            # evaluation shipped with it (which the Masked word probe shows every student without a build)
            here = _loaded(current)
            first = ["quality"] if here is None or not (stored_evaluation(here) or all(b.done() for b in lesson.builds(
                current, here, {"quality"}, estimate=False))) else []
            which = st.multiselect("Long builds", list(lesson.BUILDS), default=first, key="prep_builds",
                                   format_func=lambda k: f"{k}: {lesson.BUILDS[k]}")
            loaded = {m: _loaded(m) for m in models}
            # (what the preparation runs: "Select all" ticks the quality measurement of a model that came with its
            # own evaluation too, which it does not measure again)
            todo = [b for m, lm in loaded.items() if lm is not None
                    for b in lesson.builds(m, lm, set(which), shipped_too=False) if not b.done()]
            own = [m for m, lm in loaded.items()
                   if lm is not None and "quality" in which and lesson.ships("quality", lm)]
            if own:
                st.caption(f"quality is not measured for {', '.join(map(_label, own))}: "
                           + ("it came" if len(own) == 1 else "each came") + " with its own evaluation (the table's "
                           "*its own*), which the Masked word probe shows every student.")
            told = said(sum(b.seconds for b in todo), background_threads()) if todo else None
            left = sum(len(_visits_left(m, lm)) for m, lm in loaded.items() if lm is not None)
            # (the time said carries brackets of its own, "(the machine is idle now)": none around it)
            visits = (f"First the first-visit work of the {left} page(s) not kept yet: "
                      f"{said(lesson.first_visits_seconds(left), background_threads())}" if left else
                      "The pages' first-visit work is kept already for "
                      + ("this model" if len(models) == 1 else "these models"))
            st.markdown(f"{visits}; then **{len(todo)}** build(s) to run, **{told}** for the builds (each page's own "
                        "estimate), at low priority." if todo else
                        f"{visits}; no build to run (none asked for, or all done).")
            # the click reruns the page, whose estimate may have moved with the load: quote the one shown
            shown_before, st.session_state["prep_told"] = st.session_state.get("prep_told"), told
            if models and work_button("Prepare", key="prep_start", type="primary"):
                if why := lesson.start_preparing(models, which, shown_before or told):
                    st.info(why)
                else:
                    st.rerun()
        shown = {m: _loaded(m) for m in dict.fromkeys([current, *(now.get("models") or [])])}
        rows = [{"model": m, "first visits": _visits_mark(_visits_left(m, lm)),
                 **{key: "✓" if all(b.done() for b in bs) else "its own" if key == "quality" and
                                stored_evaluation(lm) else "—"
                                for key, bs in lesson.by_key(lesson.builds(m, lm, set(lesson.BUILDS),
                                                                           estimate=False)).items()}}
                for m, lm in shown.items() if lm is not None]
        if rows:  # (none when the sidebar's model cannot be read: its sentence is there; a KeyError was here)
            st.caption("What is prepared (✓) for which model (first visits: how many of the pages' first-visit work "
                       "is kept; its own: the evaluation it came with, which every student sees without a build):")
            st.dataframe(pd.DataFrame(rows).set_index("model"), width="stretch")
