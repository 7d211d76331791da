import pandas as pd
import streamlit as st

from bert_explorer.app import runs_view as rv
from bert_explorer.app.widgets import intro
from bert_explorer.train.runs import Run, delete

st.set_page_config(page_title="Runs · BERT Explorer", layout="wide")
intro("Runs", """
Every pre-training run (Appendix A.2), fine-tuning run (Section 4) and ablation cell (Section 5) is a
folder under `./runs`: its settings, status, log, the metrics of every logged step and its
checkpoints. Here you see them all, open one, lay the curves of several over each other (how the
paper compares its ablations), and delete the ones you no longer need. Runs keep going in the
background; on one GPU they take turns (a queued run starts by itself when the GPU is free).
""")

root = rv.runs_root()
if "runs_msg" in st.session_state:
    kind, text = st.session_state.pop("runs_msg")
    (st.success if kind == "ok" else st.error)(text)

runs = rv.find_runs(root)
if not runs:
    st.info(f"No runs under {root} yet: start one on the Pre-train or Fine-tune page, or with the CLI "
            f"(`bert-explorer pretrain --output runs/NAME ...`).")
    st.stop()
by_name = {rv.rel_name(r, root): r for r in runs}
names = list(by_name)

st.subheader("All runs")
st.dataframe(rv.runs_table(root), hide_index=True, width="stretch")
if st.button("Refresh", key="runs_refresh"):
    st.rerun()

# ----- one run ------------------------------------------------------------------------------------------
st.subheader("One run")
run = rv.pick_run("Run", runs, "runs_sel", root)
status = rv.run_panel(run, rv.run_kind(run), "runs_one")
c1, c2 = st.columns(2)
with c1.expander("Log (last 200 lines)"):
    st.code(rv.log_tail(run), language=None)
with c2.expander("Settings and status"):
    st.json({"config": run.config(), "status": status}, expanded=False)

# ----- compare ------------------------------------------------------------------------------------------
st.subheader("Compare runs")
gone = [n for n in st.session_state.get("runs_compare", []) if n not in by_name]
if gone:  # forget runs deleted since
    st.session_state["runs_compare"] = [n for n in st.session_state["runs_compare"] if n in by_name]
picked = st.multiselect("Runs", names, default=names[: min(2, len(names))], key="runs_compare")
rows = {n: by_name[n].metrics() for n in picked}
keys = rv.numeric_keys([r for rs in rows.values() for r in rs])
if picked and keys:
    key = st.selectbox("Metric", keys, key="runs_compare_metric", format_func=lambda k: rv.LABELS.get(k, k))
    fig = rv.compare_figure(rows, key)
    if fig is not None:
        st.plotly_chart(fig, key="runs_compare_fig")
    finals = {n: rv.key_metrics(by_name[n].status()) for n in picked}
    st.dataframe(pd.DataFrame(finals).T.rename(columns=lambda k: rv.LABELS.get(k, k)), width="stretch")
elif picked:
    st.info("These runs have not logged any metrics yet.")

# ----- delete -------------------------------------------------------------------------------------------
st.subheader("Delete a run")
victim = rv.rel_name(rv.pick_run("Run to delete", runs, "runs_delete_sel", root), root)
n_ckpt = len(by_name[victim].checkpoints())
sure = st.checkbox(f"Yes, delete {victim} with its log, metrics and {n_ckpt} checkpoint(s)", key="runs_delete_confirm")


def _delete(name: str, path: str) -> None:
    try:
        delete(Run(path))
        st.session_state["runs_msg"] = ("ok", f"Deleted {name}.")
    except (RuntimeError, ValueError) as e:
        st.session_state["runs_msg"] = ("error", str(e))
    st.session_state["runs_delete_confirm"] = False


st.button("Delete", key="runs_delete", disabled=not sure, on_click=_delete, args=(victim, str(by_name[victim].path)),
          help="A running or queued run is refused: stop it first.")
st.caption(f"Checkpoint folders are large; deleting a run frees their space. Runs are plain folders (here: "
           f"`{root}`), so you can also copy or archive them.")
