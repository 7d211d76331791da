"""What the training pages show of data: a file picked in the browser, a data set read from it
(cached), a built-in data set, a table of examples, and a fine-tuned QA model's answers."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from ..data.tasks import load_builtin
from ..full_disk import size_text
from ..data.tiny_tasks import make_tiny
from ..data.uploads.core import DataError
from ..data.uploads.names import safe_filename
from ..data.uploads.reader import read_task_file
from ..runs.run import Run
from ..tasks.base import TaskType
from ..train.finetune import FinetuneConfig, read_data
from .runs_view import predictor
from .guard import forget_upload, keep_upload, kept_upload, uploader
from .keep import SHADOW
from .state import by_inputs


def uploaded_file(label: str, key: str, types: list[str] | None = None, help: str | None = None, container=None
                  ) -> tuple[str, bytes] | None:
    """(name, bytes) of the uploaded file, or None. Tests (AppTest cannot drive a file
    uploader) put ``(name, bytes)`` into ``st.session_state[key + "_bytes"]`` instead.

    Streamlit empties an uploader when its page is left: a file uploaded on Fine-tune was gone after a
    look at Runs. The last file of each uploader is kept for the session (``guard.keep_upload``) and read
    again when the page comes back with an empty uploader, until another is uploaded or the user
    forgets it; a file the user takes out of the uploader (its ×) is forgotten too. ``container``: where
    to draw (the page by default)."""
    returning = key not in st.session_state  # the uploader's state is gone: the page was left and is back
    where = container or st
    f = uploader(where, label, type=types, key=key, help=help)
    using_key = f"{SHADOW}upload_{key}_in_use"
    if f is not None:
        keep_upload(key, (f.name, f.getvalue()))
        st.session_state[using_key] = False
        return f.name, f.getvalue()
    injected = st.session_state.get(f"{key}_bytes")
    if injected:
        name, data = injected
        return str(name), bytes(data)
    kept = kept_upload(key)
    if kept is not None and (returning or st.session_state.get(using_key)):
        st.session_state[using_key] = True
        # (one below the other: beside the message, in the Pre-train page's narrow column, the button read "Forg…")
        where.info(f"{kept[0]} ({size_text(len(kept[1]))}), uploaded earlier in this session, is read again; upload "
                   "another file to replace it.", icon=":material/attach_file:")
        if where.button("Forget it", key=f"{key}_forget"):
            forget_upload(key)
            st.session_state[using_key] = False
            st.rerun()
        return kept
    forget_upload(key)  # taken out of the uploader by the user
    st.session_state[using_key] = False
    return None


@by_inputs(max_entries=8, show_spinner="Reading the file…")
def read_upload(name: str, data: bytes, task: TaskType | None = None, text_column: str | None = None,
                text_pair_column: str | None = None, label_column: str | None = None):
    """("ok", TaskData) or ("error", one sentence). The bytes go to a temporary file with the
    upload's name (the extension helps detection); ``task`` None detects it. Nothing is ever
    unpickled."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / safe_filename(name)
        p.write_bytes(data)
        try:
            td = read_task_file(p, task, text_column, text_pair_column, label_column)
        except DataError as e:
            return "error", str(e)
    td.source = name
    return "ok", td


def hub_split(spec: str):
    """("ok", TaskData) or ("error", one sentence) of a Hub data set's split (``hf:owner/name[/config]
    [:split]``), as a run reads it: downloaded once into the Hugging Face cache, then from there."""
    from ..full_disk import DiskFull
    from ..train.finetune import read_spec

    try:
        return "ok", read_spec(FinetuneConfig(train=spec), spec)
    except (ValueError, DiskFull) as e:
        return "error", str(e)


@by_inputs(max_entries=4, show_spinner="Loading the data set…")
def builtin_data(name: str):
    """A built-in data set (``tiny:<task>`` = generated) for the preview."""
    return make_tiny(name[5:]) if name.startswith("tiny:") else load_builtin(name)


def _short(text, n: int = 160) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def examples_frame(data, n: int = 20) -> pd.DataFrame:
    """The first ``n`` examples as a flat table, whatever the task."""
    return pd.DataFrame([data.task.preview(ex, _short) for ex in data.examples[:n]])


@by_inputs(max_entries=8, show_spinner="Answering some dev questions…")
def qa_examples(run_path: str, n: int = 8) -> list[dict]:
    """The first ``n`` dev questions of a QA run (the same split as in training), with the
    gold answers and the model's."""
    run = Run(run_path)
    _, dev = read_data(FinetuneConfig.from_dict(run.config(), strict=False))
    examples = dev.examples[:n]
    preds = predictor(run).predict(examples)
    return [{"question": ex["question"], "context": _short(ex["context"], 200),
             "gold": " | ".join(a["text"] for a in ex.get("answers", [])) or "(no answer)",
             "predicted": p["answer"] or "(no answer)"} for ex, p in zip(examples, preds)]


