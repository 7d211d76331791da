"""How good is the model on screen, measured here: the Masked word probe's "measured on this machine".

A model's held-out MLM and NSP accuracy and the check set are measured in the background by
``python -m bert_explorer.cli.quality`` (``analysis/probes/quality.py``) when someone who may start work
asks (for BERT-Base, minutes of CPU; the teacher in classroom mode, or before class with
``bert-explorer evaluate-pretraining``), never on a page visit: one process per model for every
session, its progress on disk, kept by the weights' fingerprint. A student sees what is kept, or one
sentence. Below the probe, the table of every model measured on this machine.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from ..analysis.probes import quality
from ..runs import neighbour_jobs as jobs
from ..train.estimate import background_threads
from ..train.speed import said, seconds_now
from . import exports
from .state import load, shown_path, without_host_paths
from .roles import busy_sentence, not_prepared, progress_line, work_button, writes_allowed

ARCH = "BertForPreTraining"
NOT_COMPARABLE = "not comparable piece for piece"


def sentence(r: dict) -> str:
    """One measurement in words, every number from ``r``."""
    nsp = (f" and tells a real next sentence from a random one for {r['nsp_accuracy']:.1%} of the pairs"
           if r.get("nsp_accuracy") is not None else " (it has no trained next-sentence head)")
    clozes, pairs = r["check_set_clozes"], r["check_set_pairs"]
    pairs_text = f", {pairs[0]} of {pairs[1]} pairs" if pairs[0] is not None else ""
    vocab = ("" if r["standard_vocabulary"] else
             f" Its vocabulary is not the standard uncased one, so its text is cut and masked into other pieces: "
             f"{NOT_COMPARABLE} with models that use it.")
    return (f"**Measured on this machine** ({r['measured_at']}): its first guess is right for "
            f"{r['mlm_accuracy']:.1%} of {r['masked_wordpieces']:,} masked WordPieces (perplexity "
            f"{r['mlm_perplexity']:.1f}){nsp}, on {r['held_out_sequences']:,} sequences of "
            f"{r['held_out_documents']:,} documents {r['held_out_set']}. Check set: {clozes[0]} of {clozes[1]} "
            f"hidden words in its top 5{pairs_text}.{vocab}")


@st.fragment(run_every=2.0)
def _watch(name: str) -> None:
    loaded = load(name, ARCH)[0]
    path = quality.entry_path(loaded)
    s = jobs.build_state(path, quality.stored(path) is not None)
    if s["state"] != "building":
        st.rerun()  # finished (or failed): redraw the page with the result
    st.progress(min(1.0, float(s.get("fraction") or 0.0)),
                text=f"Measuring this model on the held-out documents: {progress_line(s, 'this measurement')}")
    st.caption("It runs as its own process, for every visitor; you may leave the page.")


def measured_here(name: str, loaded, stored_evaluation: dict | None) -> dict | None:
    """Show this model's measurement, its progress, or how to start it; the measurement if there is one.
    Only a button starts it (``work_button``: the teacher's in classroom mode), never a visit."""
    path = quality.entry_path(loaded)
    if (result := quality.stored(path)) is not None:
        st.caption(sentence(result))
        return result
    state = jobs.build_state(path, False)
    if state["state"] == "building":
        _watch(name)
        return None
    if state["state"] == "failed":
        st.error(without_host_paths(f"Measuring this model failed: {state.get('error') or state.get('message')}"))
        with st.expander("Its log"):
            st.code(without_host_paths(jobs.log_tail(path)), language=None)
    if not writes_allowed():  # a student: what is kept, or one sentence
        if stored_evaluation is None:
            not_prepared("Its measurement on held-out text", entry=(loaded, path))
            busy_sentence()
        return None
    # (estimated for whoever may start it: counting the held-out text is no student visit's work)
    seconds = quality.estimate_seconds(loaded.config, quality.held_out_sequences(loaded))
    about = said(seconds, background_threads())
    # (the time said may carry brackets of its own, "(the machine is idle now)": none around it)
    if work_button(f"Measure this model here: {about}", key="mlm_measure"):
        refusal = jobs.start_build(path, ["--model", name], one_at_a_time=False, command=quality.BUILDER,
                                   what="measurement", lesson="the measurement of how well this model guesses",
                                   said_s=seconds_now(seconds, background_threads()))
        if refusal is None:
            st.rerun()
        st.info(refusal)
    st.caption(f"Measuring reads every held-out sequence and the check set, {about}; from a terminal: "
               f"`bert-explorer evaluate-pretraining --model {shown_path(name)}`.")
    return None


def every_model_measured() -> None:
    """The table of every model measured on this machine (by the page or by the CLI)."""
    rows = quality.measured_models()
    if not rows:
        return
    with st.expander(f"Every model measured on this machine ({len(rows)})"):
        st.caption("The same measures for each model: held-out MLM and NSP accuracy (the pre-training tasks of "
                   "Section 3.1) and the hand-written check set. Models with the standard uncased vocabulary are "
                   "measured on exactly the same WordPieces and masks.")
        table = pd.DataFrame([{
            "model": without_host_paths(shown_path(r["model"]) if Path(str(r["model"])).is_absolute() else r["model"]),
            "MLM accuracy": f"{r['mlm_accuracy']:.1%}",
            "MLM perplexity": round(r["mlm_perplexity"], 1),
            "NSP accuracy": f"{r['nsp_accuracy']:.1%}" if r.get("nsp_accuracy") is not None else "—",
            "check-set clozes": "{} / {}".format(*r["check_set_clozes"]),
            "check-set pairs": "{} / {}".format(*r["check_set_pairs"]) if r["check_set_pairs"][0] is not None else "—",
            "sequences": r["held_out_sequences"],
            "held-out documents": r["held_out_set"],
            "vocabulary": "standard uncased" if r["standard_vocabulary"] else NOT_COMPARABLE,
            "measured": r["measured_at"],
        } for r in rows])
        exports.table(table, "measured_models", "models measured on this machine", None, hide_index=True)
