from pathlib import Path

import pandas as pd
import streamlit as st

from bert_explorer.app import exports
from bert_explorer.app import run_figures
from bert_explorer.app import runs_view as rv
from bert_explorer.app.state import delete_upload, show_mode, shown_path, uploaded_checkpoints, without_host_paths
from bert_explorer.app.roles import mode_sentence, work_button, writes_allowed, writes_off
from bert_explorer.app.widgets import intro
from bert_explorer.runs import finder, report
from bert_explorer.runs.run import runs_root
from bert_explorer.runs.background import delete, delete_refusal
from bert_explorer.runs.run import Run

overlay = "lay the curves of several over each other (how the paper compares its ablations)"
intro("Runs", lambda: f"""
Every pre-training run (Appendix A.2), fine-tuning run (Section 4) and ablation cell (Section 5) is a
folder under `{shown_path(runs_root())}`: its settings, status, log, the metrics of every logged step and its
checkpoints. Here you see them all, open one{f", {overlay}, and delete the ones you no longer need" if
writes_allowed() else f" and {overlay}"}. Runs keep going in the
background; on one GPU they take turns (a queued run starts by itself when the GPU is free). An
ablation's own pre-trainings and cells are listed under it: choose it in **Show**.
""")

show_mode()
root = runs_root()
if "runs_msg" in st.session_state:
    kind, text = st.session_state.pop("runs_msg")
    (st.success if kind == "ok" else st.error)(text)

def _uploads_section() -> None:
    """Uploaded checkpoints, deleted one at a time after a confirmation (writing must be allowed)."""
    uploads = uploaded_checkpoints(every=True)
    if not uploads or not writes_allowed():
        return
    gen = st.session_state.get("runs_gen", 0)
    st.subheader("Delete an uploaded checkpoint")
    by_upload = {Path(u).name: u for u in uploads}
    gone = st.selectbox("Uploaded checkpoint", list(by_upload), key=f"runs_upload_sel_{gen}")
    sure = st.checkbox(f"Yes, delete the uploaded checkpoint {gone}", key=f"runs_upload_confirm_{gen}_{gone}")
    if work_button("Delete the upload", key="runs_upload_delete", disabled=not sure):
        try:
            delete_upload(by_upload[gone])
            st.session_state["runs_msg"] = ("ok", f"Deleted the uploaded checkpoint {gone}.")
            st.session_state["runs_gen"] = gen + 1
        except (OSError, ValueError) as e:
            st.session_state["runs_msg"] = ("error", str(e))
        st.rerun()


everything = finder.find_runs(root)
if not everything:
    st.info(f"No runs under {shown_path(root)} yet: " + (
        "start one on the Pre-train or Fine-tune page, or with the CLI (`bert-explorer pretrain --output runs/NAME "
        "...`)." if writes_allowed() else "your teacher can start one."))
    _uploads_section()
    st.stop()
# Every picker's key carries a generation that a delete moves on: after a delete, all of them
# are new widgets built from the runs that are left, never a stale choice.
gen = st.session_state.setdefault("runs_gen", 0)
groups = finder.run_groups(everything, root)
group = st.selectbox("Show", list(groups), key=f"runs_group_{gen}",
                     persist_state="session", format_func=lambda g: report.group_title(g, groups, own=writes_allowed()),
                     help="The pre-trainings and cells of an ablation are runs of their own, kept inside it; "
                          "they are listed by ablation so that the other runs stay readable.")
runs = groups[group]
by_name = {finder.rel_name(r.path, root): r for r in runs}
names = list(by_name)
labels = {finder.rel_name(r.path, root): finder.run_label(r, root) for r in runs}

st.subheader("All runs" if not group else f"Inside ablation {group}")


# While a run is active the table redraws itself every few seconds, as the one-run panel below does (it said
# "starting" beside a panel at step 12); with none active it is drawn once.
@st.fragment(run_every=5.0 if any(r.is_active() for r in runs) else None)
def _all_runs() -> None:
    st.dataframe(rv.runs_table(root, runs, inside=group), hide_index=True, width="stretch")


_all_runs()
if st.button("Refresh", key="runs_refresh"):
    st.rerun()

# ----- one run ------------------------------------------------------------------------------------------
st.subheader("One run")
run = rv.pick_run("Run", runs, f"runs_sel_{gen}_{group}", root)
status = rv.run_panel(run, finder.run_kind(run), "runs_one")
# Stop for a run of its own; a run inside an ablation (a cell, one of its pre-trainings) is its ablation's to stop:
# a cell stopped alone would give the ablation's table a half-trained score as a finished cell's
inside = finder.ablation_of(run.path, root)
if run.is_active() and inside is not None:
    st.caption(f"This run is part of the ablation {finder.rel_name(inside, root)}: stop the ablation (choose it "
               "above, or on the Ablation studio page), not one of its runs.")
elif run.is_active() and work_button("Stop", key="runs_stop", help="As the run's own page stops it: a pre-training "
                                     "or fine-tuning stops at its next step with a checkpoint to resume from, an "
                                     "ablation after its current cell, a queued run leaves the queue."):
    queued = status.get("state") == "queued"
    run.request_stop()  # (the same Stop as the run's own page)
    st.info("Stop requested: the run leaves the queue." if queued else
            "Stop requested: the run stops at its next step (a pre-training or fine-tuning saves a checkpoint).")
c1, c2 = st.columns(2)
with c1.expander("Log (last 200 lines)"):
    st.code(without_host_paths(report.run_log_tail(run)), language=None)
with c2.expander("Settings and status"):
    st.json(without_host_paths({"config": run.config(), "status": status}), expanded=False)

# ----- compare ------------------------------------------------------------------------------------------
st.subheader("Compare runs")
picked = st.multiselect("Runs", names, default=names[: min(2, len(names))], key=f"runs_compare_{gen}_{group}",
                        persist_state="session",
                        format_func=labels.get)
rows = {labels[n]: by_name[n].metrics() for n in picked}
keys = run_figures.numeric_keys([r for rs in rows.values() for r in rs])
if picked and keys:
    key = st.selectbox("Metric", keys, key="runs_compare_metric",
                       persist_state="session", format_func=lambda k: report.LABELS.get(k, k))
    fig = run_figures.compare_figure(rows, key, kinds={labels[n]: by_name[n].config().get("kind", "") for n in picked})
    if fig is not None:
        exports.figure(fig, "runs_compare_fig")
    quiet = [n for n in picked if not any(isinstance(r.get(key), (int, float)) for r in rows[labels[n]])]
    if quiet:  # (a run left out of the chart without a word looked like one drawn under another)
        kinds = {by_name[n].config().get("kind", "") for n in quiet}
        why = (" (an ablation's own folder logs none: its pre-trainings and cells do, listed under it)"
               if "ablate" in kinds else
               " (a fine-tuning logs its task's scores, a pre-training its own: compare runs of one kind)"
               if len({by_name[n].config().get("kind", "") for n in picked}) > 1 else "")
        st.caption(f"Not drawn: {', '.join(labels[n] for n in quiet)}, which logged no "
                   f"{report.LABELS.get(key, key)}{why}.")
    finals = {labels[n]: report.key_metrics(by_name[n].status()) for n in picked}
    # a run that ended before its final evaluation (killed) showed "—" beside the dev scores its curve drew: its
    # last evaluation's, said so
    early = []
    for n in picked:
        dev = [r for r in rows[labels[n]] if r.get("split") == "dev"]
        if dev and not any(k.startswith("dev ") for k in finals[labels[n]]):
            finals[labels[n]].update(report.key_metrics({"dev": dev[-1]}))
            early.append(f"{labels[n]} (step {dev[-1].get('step', '?'):,})" if isinstance(dev[-1].get("step"), int)
                         else labels[n])
    # a number a run does not have (a pre-training's dev accuracy) is said as such, not as "None"; every cell
    # is text, so the column has one type (a float column holding "—" makes Streamlit convert it again)
    table = pd.DataFrame(finals).T
    st.dataframe(table.apply(lambda col: col.map(lambda v: "—" if pd.isna(v) else report.metric_text(col.name, v)))
                 .rename(columns=lambda k: report.LABELS.get(k, k)), width="stretch")
    if early:
        st.caption(f"Dev scores of the last evaluation before the run ended, not a final one: {', '.join(early)}.")
elif picked and all(by_name[n].config().get("kind") == "ablate" for n in picked):
    # (said as if they had not begun, of finished ablations: an ablation's folder trains nothing itself)
    st.info("An ablation's own folder logs no metrics: its pre-trainings and fine-tuned cells do, listed under it "
            "in the runs table; compare those, or read its results beside the paper on the Ablation studio page.")
elif picked:
    st.info("These runs have not logged any metrics yet.")

# ----- delete -------------------------------------------------------------------------------------------
st.subheader("Delete a run")
if writes_off("Deleting runs"):
    st.stop()
picker = f"runs_delete_sel_{gen}_{group}"
victim = finder.rel_name(rv.pick_run("Run to delete", runs, picker, root).path, root)
# The confirmation belongs to one run (its key names it), and the button deletes exactly the run
# that the confirmation names: both are built from `victim` in this same pass of the page.
confirm = f"runs_delete_confirm_{gen}_{victim}"
refusal = delete_refusal(by_name[victim])  # a folder holding more than the run wrote is not deleted here
if refusal:
    st.warning(without_host_paths(refusal))
else:
    st.checkbox(f"Yes, delete {victim} with {report.what_deleting_removes(by_name[victim])}", key=confirm)


def _delete(name: str, path: str, picker: str, confirm: str) -> None:
    # The button is never greyed out: a click always gets an answer. A click that arrives with
    # another run in the picker (switched just before) or without the tick deletes nothing.
    shown = st.session_state.get(picker, name)
    if shown != name or not st.session_state.get(confirm):
        st.session_state["runs_msg"] = ("error", f"Nothing was deleted: tick “Yes, delete {shown} …” above the "
                                                 f"Delete button first, then press Delete again.")
        return
    try:
        if not writes_allowed():
            raise ValueError(mode_sentence())
        delete(Run(path))
        st.session_state["runs_msg"] = ("ok", f"Deleted {name}.")
        st.session_state["runs_gen"] = st.session_state.get("runs_gen", 0) + 1  # rebuild every picker
    except (RuntimeError, ValueError) as e:
        st.session_state["runs_msg"] = ("error", str(e))
    st.session_state[confirm] = False


if not refusal:
    work_button("Delete", key="runs_delete", on_click=_delete, args=(victim, str(by_name[victim].path), picker, confirm),
              help="Tick the confirmation first. A running or queued run is refused: stop it first.")
st.caption(f"Checkpoint folders are large; deleting a run frees their space. Runs are plain folders (here: "
           f"`{shown_path(root)}`), so you can also copy or archive them.")

_uploads_section()
