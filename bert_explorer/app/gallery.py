"""The paper's BERTs in the app: the gallery (BERT-Base and -Large, cased and uncased, multilingual Base,
and Turc et al.'s 24 miniatures as the L x H grid of their paper), and a download in the background
with its progress bar (``runs/download_jobs.py``) while the app goes on working.

A download writes to the host, so in classroom mode there is none: the models already downloaded are
offered to every student, and the sidebar says how the teacher adds one (`bert-explorer download`).
"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from .. import hub, hub_names
from ..full_disk import size_text
from ..runs import download_jobs
from ..runs.report import duration_text
from .keep import kept_widget
from .roles import work_button

ANOTHER_ID = "another hub id…"
MAX_ID = 200  # the Hub's ids are at most 96 characters (an owner and a name)
WAITING = "be_hub_waiting"  # why no model is chosen yet: the page says it instead of "choose a model"
MINIATURE_LAYERS, MINIATURE_HIDDEN = (2, 4, 6, 8, 10, 12), (128, 256, 512, 768)


def _where(m: hub_names.HubModel) -> str:
    return "on this machine" if hub.local_copy(m.repo_id) else f"download about {size_text(m.download_bytes)}"


def label(repo_id: str) -> str:
    """How a model of the gallery reads in a list: its name and size. (Whether it is here is said
    beside the list, not in it: a label that changed when a download ended would make a new widget of
    the list, and the choice would be lost.)"""
    m = hub.CATALOGUE.get(repo_id)
    return repo_id if m is None else f"{m.title} · {m.parameters / 1e6:,.1f} M parameters"


def big_models() -> pd.DataFrame:
    """BERT-Base and -Large (uncased, cased) and multilingual Base: one row each."""
    rows = [{"model": m.title, "hub id": m.repo_id, "L": m.layers, "H": m.hidden, "A": m.heads,
             "parameters": f"{m.parameters / 1e6:,.1f} M", "download": f"about {size_text(m.download_bytes)}",
             "licence": hub.LICENCE, "here": "yes" if hub.local_copy(m.repo_id) else "no"}
            for m in hub.CATALOGUE.values() if not m.repo_id.startswith("google/bert_uncased_L-")]
    return pd.DataFrame(rows).set_index("model")


def miniature_grid() -> pd.DataFrame:
    """Turc et al.'s 24 miniatures laid out as their paper's grid: a row per L (layers), a column per H
    (hidden units, with A = H/64 heads); each cell says its parameters and whether it is here."""
    cells = {}
    for L in MINIATURE_LAYERS:
        for H in MINIATURE_HIDDEN:
            m = hub.CATALOGUE[f"google/bert_uncased_L-{L}_H-{H}_A-{H // 64}"]
            cells.setdefault(f"L={L}", {})[f"H={H} (A={H // 64})"] = (
                ("BERT-Base's size · " if (L, H) == (12, 768) else "")
                + f"{m.parameters / 1e6:,.1f} M · " + ("here" if hub.local_copy(m.repo_id) else size_text(m.download_bytes)))
    return pd.DataFrame.from_dict(cells, orient="index")


def choose(writes: bool) -> str | None:
    """The sidebar's gallery: pick a model of the paper (or type any hub id); one on this machine is
    returned, one that is not gets its facts and, where writing is allowed, a Download button and the
    progress of its download (None is returned until it is here)."""
    options = list(hub.CATALOGUE) + [ANOTHER_ID]
    # kept: the model of the paper picked here holds on every page, as the sidebar's own choice does
    picked = kept_widget(st.sidebar.selectbox, "Model of the paper (Hugging Face Hub)", "be_hub_choice", options[0],
                  valid=options.__contains__, options=options,
                  format_func=lambda o: label(o) if o != ANOTHER_ID else o,
                                  help="Devlin et al.'s BERT-Base and -Large and Turc et al.'s 24 smaller BERTs "
                                       "(Apache-2.0). Downloaded once into the Hugging Face cache, they open "
                                       "offline after.")
    if picked == ANOTHER_ID:
        picked = kept_widget(st.sidebar.text_input, "Hub id", "be_hub_id", "", max_chars=MAX_ID,
                      placeholder="e.g. google-bert/bert-base-cased")
        if not picked.strip():
            return None
        try:
            picked = hub.canonical(picked)
        except hub.HubError as e:
            st.sidebar.error(str(e))
            return None
    m = hub.CATALOGUE.get(picked)
    if m is not None:
        st.sidebar.caption(f"{m.title}: L = {m.layers}, H = {m.hidden}, A = {m.heads}, {m.parameters / 1e6:,.1f} M "
                           f"parameters, {_where(m)}, licence {hub.LICENCE}.")
    return offer(picked, writes)


def offer(picked: str, writes: bool) -> str | None:
    """The hub model ``picked`` (its canonical id): the name that opens it where it is on this machine, else
    None, with why in ``WAITING`` and, where writing is allowed, its download in the background (a Download
    button, then its progress and Cancel)."""
    m = hub.CATALOGUE.get(picked)
    if hub.local_copy(picked) is not None:
        return hub_names.model_name(picked)  # (a typed id that is not the paper's opens as hf:<id>)
    title = m.title if m is not None else picked
    if download_jobs.state(picked)["state"] == "downloading":
        st.session_state[WAITING] = (f"{title} is being downloaded (its progress is in the sidebar): this page opens it "
                                     "once it is here, and every other page works meanwhile.")
    else:
        st.session_state[WAITING] = (f"{title} is not on this machine yet: " + (
            "download it in the sidebar (the app keeps working meanwhile), or choose another model there."
            if writes else "the teacher adds it with `bert-explorer download`; choose another model in the sidebar."))
    if not writes:
        st.sidebar.info(f"{picked} is not on this machine. The teacher adds it where the server runs: "
                        f"`bert-explorer download {picked}`.")
        return None
    with st.sidebar:
        download_panel(picked)
    return None


def download_panel(repo_id: str) -> None:
    """A model's download: the button, then its progress (bytes, time left) with a Cancel button,
    redrawn every second while it runs; when it is whole the page reruns and the model loads."""
    now = download_jobs.state(repo_id)
    if now["state"] == "downloading":
        _progress(repo_id)
        return
    if now["state"] in ("failed", "cancelled", "stopped") and now.get("error"):
        (st.warning if now["state"] == "cancelled" else st.error)(now["error"])
    size = hub.CATALOGUE[repo_id].download_bytes if repo_id in hub.CATALOGUE else None
    what = f"Download (about {size_text(size)})" if size else "Download"
    if work_button(what, key=f"be_download_{repo_id}", type="primary",
                 help="In the background: the app stays usable; a dropped connection goes on from where it "
                      "stopped."):
        download_jobs.start(repo_id)
        st.rerun()


@st.fragment(run_every=1.0)
def _progress(repo_id: str) -> None:
    now = download_jobs.state(repo_id)
    if now["state"] != "downloading":
        st.rerun()  # done, cancelled or failed: the whole page draws it
    done, total = now.get("done") or 0, now.get("total") or 0
    if now.get("cancelling"):  # (until the downloader took it, the bar and its Cancel stayed as if nothing was asked)
        st.progress(min(1.0, done / total) if total else 0.0, text=f"Cancelling the download of {repo_id}…")
        return
    text = f"Downloading {repo_id}: {size_text(done)} of {size_text(total)}" if total else f"Starting {repo_id}…"
    if now.get("file") == hub.WAITING:  # ("0 bytes of 193 kB" for as long as the other one ran)
        text = f"Waiting for another download of {repo_id} to end (a command's, or another server's): its files " \
               "are fetched once, and this one goes on then…"
    if now.get("eta_s") is not None and total and now.get("file") != hub.WAITING:
        text += f" · about {duration_text(now['eta_s'])} left"
    st.progress(min(1.0, done / total) if total else 0.0, text=text)
    if work_button("Cancel", key=f"be_download_cancel_{repo_id}",
                 help="Stops within a second while the files arrive (within a minute when the server has "
                      "stalled); what was fetched is kept, and Download goes on from it."):
        download_jobs.cancel(repo_id)
