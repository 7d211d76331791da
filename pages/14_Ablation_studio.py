import time

import pandas as pd
import streamlit as st
import torch

from bert_explorer.app import exports
from bert_explorer.app import data_view as dv
from bert_explorer.app import runs_view as rv
from bert_explorer.app.state import show_mode, shown_path, without_host_paths
from bert_explorer.app.roles import work_button, writes_allowed, writes_off
from bert_explorer.app.keep import number_binding, settings_key
from bert_explorer.app.widgets import intro, sentence_of
from bert_explorer.data.tasks import BUILTIN_TASKS
from bert_explorer.data.uploads.reader import FORMATS
from bert_explorer.data.uploads.names import NAME_CHARS, slug
from bert_explorer.experiments import grid, miniatures, paper, results
from bert_explorer.experiments.runner import read_plan, read_results
from bert_explorer.runs.finder import is_ablation
from bert_explorer.runs.run import runs_root
from bert_explorer.runs.run import ACTIVE_STATES, Run, new_run_refusal
from bert_explorer.train.estimate import LONG_RUN_ASK_S, background_threads
from bert_explorer.train.speed import said
from bert_explorer.runs.report import duration_text, left_text, log_tail
from bert_explorer.safe_text import markdown_text as md

intro("Ablation studio", """
Re-run the paper's ablations in miniature (Devlin et al. 2019, Section 5 and Appendix C, Tables 5-8):
pre-training objective (MLM + NSP, MLM only, left-to-right, LTR + BiLSTM), model size, fine-tuning vs
frozen features, and the masking ratios. Each cell of the grid pre-trains a small BERT (cells with the same
pre-training share it) and fine-tunes it on a task; you see our scores beside the paper's and whether the
paper's four *directions* hold at our scale. The recipe **miniatures** (or *Build my own* with Google's
pre-trained miniatures) pre-trains nothing: it downloads Turc et al.'s (2019) small BERTs, pre-trained by
Google as BERT was, and fine-tunes each with several seeds: Table 6's model size with real pre-training;
**table7** does the same for Table 7, frozen features against fine-tuning on named entities in tweets.
""")

ACTIVE = ACTIVE_STATES
# A grid takes minutes to build: its choices hold when the user visits another page and comes back, and are kept
# in the page's address too, so that a reload (or the address kept as a bookmark) brings the grid back; Streamlit
# checks each value read from the address against the widget's options and bounds, and ignores what fails
# (a whole number that is no finite number, which it cannot, is number_binding's to drop).
KEPT = dict(persist_state="session", bind="query-params")
show_mode()
root = runs_root()

# ----- results measured with the shipped recipes (no re-run needed) ------------------------------------
for recipe_name, (how, report) in results.shipped_reports().items():
    with st.expander(f"Results of the shipped recipe {recipe_name}, measured by the team"):
        if how:
            st.caption(how)
        st.markdown(report)
        if "| later work |" not in report:  # measured before the directions had that column
            for key, later in paper.LATER_WORK.items():
                st.caption(f"Later work on \"{paper.DIRECTIONS[key][0]}\" (not in this report, written before "
                           f"the studio showed it): {later}")

if not writes_off("Starting an ablation"):  # classroom mode: read the reports, start none
    # ----- 1. choose a grid ---------------------------------------------------------------------------
    st.subheader("1. Choose a grid")
    how = st.radio("Grid", ["A shipped recipe", "Build my own"], key="abl_mode",
                   **KEPT, horizontal=True)
    recipe, error, upload, counted = None, None, None, {}
    if how == "A shipped recipe":
        names = grid.list_recipes()
        name = st.selectbox("Recipe", names, index=names.index("cpu-small") if "cpu-small" in names else 0,
                            key="abl_recipe", **KEPT)
        recipe = grid.load_recipe(name)
        st.caption(recipe["description"])
    else:
        c1, c2 = st.columns(2)
        task_opts = [f"builtin:{n}" for n, t in BUILTIN_TASKS.items() if t.available] + \
            ["pairs:bbc", "tiny:classification", "tiny:pair-classification", "upload"]
        task = c1.selectbox("Task", task_opts, key="abl_task", **KEPT,
                            help="pairs:bbc = are two BBC sentences from the same article? (a sentence-pair task built "
                                 "from real text: MNLI/QNLI do not ship offline)")
        if task == "upload":
            # (name, bytes), kept for the session like Fine-tune's upload; the formats the reader reads, none more
            # or fewer (data/uploads/reader.py: the label named six of its eight)
            upload = dv.uploaded_file(
                f"Task file ({', '.join(list(FORMATS)[:-1])} or {list(FORMATS)[-1]})", key="abl_upload", container=c1,
                help="  \n".join(f"**{name}**: {what}." for name, what in FORMATS.items())
                + "  \nStart saves it into the ablation's folder; it is read as a table or as text, never unpickled.")
            if upload is None:
                error = "Upload a task file."
            else:  # check it now, not hours later when the first cell reads it
                outcome, checked = dv.read_upload(*upload)
                if outcome == "error":
                    error = checked
                else:  # its size, for the estimate (an upload was taken for 1,000 examples of 64 WordPieces),
                    # and its type, which its cells read it as and the directions wait for while they are queued
                    counted = {**grid.counted(checked), "task": checked.task.name}
        from_hub = c1.radio("Models", ["pre-trained here", "Google's miniatures"], key="abl_models",
                            **KEPT, horizontal=True,
                            help="pre-trained here: each size is pre-trained from zero on the corpus below; Google's "
                                 "miniatures: Turc et al.'s pre-trained BERTs, downloaded from the Hugging Face Hub "
                                 "(once) and only fine-tuned here, with several seeds") == "Google's miniatures"
        add_pairs = not from_hub and c1.checkbox("Add the BBC sentence-pair task (for the NSP direction)",
                                                 value=task != "pairs:bbc", key="abl_add_pairs",
                                                 **KEPT)
        if from_hub:
            seeds = c1.number_input("Seeds", 1, grid.MAX_SEEDS, 3, key="abl_seeds", persist_state="session",
                                    bind=number_binding("abl_seeds"),
                                    help="each size is fine-tuned once per seed; the results show mean ± spread")
            sizes = c2.multiselect("Sizes (Table 6; Turc et al.'s miniatures)", grid.hub_sizes(),
                                   default=["tiny", "mini", "small", "medium"], key="abl_hub_sizes",
                                   **KEPT)
            objectives, maskings = ["mlm+nsp"], ["80/10/10"]  # as Google pre-trained them
            transfers = c2.multiselect("Transfer (Table 7)", grid.TRANSFERS, default=["fine-tune"],
                                       key="abl_hub_transfers", **KEPT)
        else:
            corpus = c1.selectbox("Pre-training corpus", ["bbc", "wiki", "lee", "bbc+wiki+lee", "tiny"],
                                  key="abl_corpus", **KEPT)
            steps = c1.number_input("Pre-training steps", 10, 100_000, 500, step=100, key="abl_steps",
                                    persist_state="session", bind=number_binding("abl_steps"))
            sizes = c2.multiselect("Sizes (Table 6)", list(grid.PRESETS), default=["tiny", "mini"], key="abl_sizes",
                                   **KEPT)
            objectives = c2.multiselect("Objectives (Table 5)", grid.OBJECTIVES, default=list(grid.OBJECTIVES),
                                        format_func=grid.OBJECTIVE_LABELS.get, key="abl_objectives",
                                        **KEPT)
            transfers = c2.multiselect("Transfer (Table 7)", grid.TRANSFERS, default=["fine-tune", "embeddings",
                                                                                      "concat-last-4"],
                                       key="abl_transfers", **KEPT)
            maskings = c2.multiselect("Masking MASK/SAME/RND % (Table 8)", grid.MASKINGS, default=["80/10/10"],
                                      key="abl_maskings", **KEPT)
        mode = c2.radio("Cells", ["one-at-a-time", "product"], key="abl_grid", **KEPT, horizontal=True,
                        help="one-at-a-time: vary one axis around the baseline, as the paper does; product: every "
                             "combination")
        # an upload is saved into the ablation directory by Start; until then its name stands in
        limits = ({k: v for k, v in next(iter(grid.load_recipe("miniatures")["tasks"].values())).items()
                   if k not in ("train", "paper_column", "task_type")} if from_hub else {"max_train_examples": 1000})
        # the task is named by its data set (an upload by its file), as the results then call it
        task_key = grid.task_name(upload[0] if upload else task, taken={"pairs"} if add_pairs else ())
        tasks = {task_key: {"train": upload[0] if upload else task, **limits, **counted}}
        if add_pairs:
            tasks["pairs"] = {"train": "pairs:bbc", "n_train": 1600, "n_dev": 600}
        if not error:
            try:
                recipe = (grid.custom_recipe(tasks, sizes, objectives, transfers, maskings, grid_mode=mode,
                                             base="miniatures", seeds=list(range(int(seeds)))) if from_hub else
                          grid.custom_recipe(tasks, sizes, objectives, transfers, maskings, corpus=corpus,
                                             max_steps=steps, grid_mode=mode))
            except ValueError as e:
                error = str(e)
        if recipe and not error:  # a list left empty is not "none": the grid takes the baseline's value there
            taken = [f"{label} takes the baseline's {recipe['baseline'][axis]}" for label, chosen, axis in
                     (("Sizes", sizes, "size"), ("Objectives", objectives, "objective"),
                      ("Transfer", transfers, "transfer"), ("Masking", maskings, "masking")) if not chosen]
            if taken:
                st.caption(f"Left empty: {'; '.join(taken)}.")
        # the default save name says what was built: the task and the axes that vary
        task_part = (upload[0].rsplit(".", 1)[0] if upload else task.removeprefix("builtin:")).replace(":", "-")
        custom_name = f"custom-{task_part}-{'-'.join(recipe['axes']) if recipe and recipe['axes'] else 'baseline'}"

    if error:
        st.info(error)
    elif recipe:
        plan = grid.expand(recipe)
        est_cpu, est_gpu = grid.estimate(plan, "cpu"), grid.estimate(plan, "gpu")
        fetch = [d for d in grid.downloads(plan) if not d["here"]]
        m = st.columns(4)
        m[0].metric("Cells", len(plan["cells"]))
        if miniatures.is_miniatures(plan):
            m[1].metric("Models to download", len(fetch), help="Google's pre-trained miniatures not yet in this "
                        "machine's Hugging Face cache; every cell of a size fine-tunes the same copy")
        else:
            m[1].metric("Pre-trainings", len(plan["pretrainings"]),
                        help="cells with the same pre-training share one model")
        # (in the words of every other time: a small grid's GPU time read "~0 min")
        # the idle machine's time in large print, the load's stretch in the caption below (a headline of "~8 h
        # 10 min" at a passing load of 4 read as the recipe's time, which is 49 min)
        m[2].metric("Time on this CPU", f"~{duration_text(est_cpu['total_s'])}",
                    help="On an idle machine, at its speed measured here; what else runs now may stretch it (below).")
        m[3].metric("Time on one GPU", f"~{duration_text(est_gpu['total_s'])}")
        # the idle figure too, in words: the recipes' descriptions and the docs give that one
        st.caption(f"On this CPU: {said(est_cpu['total_s'], background_threads())}. "
                   "Rough estimates from FLOPs and measured speeds; expect them to be off by up to a factor of two."
                   + (" The downloads' time is not in them: it depends on your connection." if fetch else ""))
        if grid.downloads(plan):
            st.markdown(grid.downloads_text(plan))
        with st.expander("The cells"):
            labels = {k: grid.pretraining_label(v) for k, v in plan["pretrainings"].items()}
            st.dataframe(pd.DataFrame([{"cell": c["id"], "task": c["task"], "axes": ", ".join(c["axes"]),
                                        "pre-training": labels[c["pretrain_key"]]} for c in plan["cells"]]),
                         hide_index=True, width="stretch")
        # the date and time are what tell two starts of one grid apart: a long name gives way before them (cut
        # at the folder's limit, "...-transfer-20261" was refused as taken at the grid's second start)
        stamp, room = time.strftime('%Y%m%d-%H%M%S'), NAME_CHARS - len("-20261130-120000")
        what = slug(f"ablation-{recipe['name'] if how == 'A shipped recipe' else custom_name}", 10 * NAME_CHARS)
        if len(what) > room:
            what = what[:room + 1].rsplit("-", 1)[0] if "-" in what[:room + 1] else what[:room]  # at a word's end
        suggested = f"{what}-{stamp}"
        # A keyed text input keeps its first value on every rerun, so the default name is written into
        # its state while the user has not typed one: it follows the recipe or the grid being built.
        # A name the user typed is theirs: kept apart, it comes back with them after a visit elsewhere (the box's
        # own state goes when the page is left, and the suggestion was written over it)
        if "abl_name" not in st.session_state and st.session_state.get("abl_name_typed"):
            st.session_state["abl_name"] = st.session_state["abl_name_typed"]
        if st.session_state.get("abl_name") in (None, "", st.session_state.get("abl_name_suggested")):
            st.session_state["abl_name"] = suggested
        st.session_state["abl_name_suggested"] = suggested
        out_name = st.text_input("Save as (a folder in the runs directory)", key="abl_name")
        st.session_state["abl_name_typed"] = out_name if out_name not in ("", suggested) else None
        if slug(out_name) != out_name.strip():  # (cut or changed, it is said before the start, not after)
            st.caption(f"Saved as **{slug(out_name)}**: a folder's name keeps letters, digits, '-', '_' and '.', up "
                       f"to {NAME_CHARS} characters.")
        refusal = grid.offline_refusal(plan)
        if refusal:
            st.warning(refusal)
        size_mb = sum(d["bytes"] for d in fetch) / 1e6
        start_label = (f"Download {len(fetch)} model{'s' if len(fetch) > 1 else ''} (about {size_mb:,.0f} MB) and "
                       "start in the background" if fetch else "Start in the background")
        # a long grid is asked for twice, as a long pre-training or fine-tuning is (paper-mini's ten hours, or a
        # grid of days, started in one click); the tick is for this grid alone
        on_gpu = torch.cuda.is_available()
        seconds = (est_gpu if on_gpu else est_cpu)["total_s"]
        # (the CPU's load stretches a CPU grid's time, not a GPU grid's)
        how_long = f"about {duration_text(seconds)} on the GPU" if on_gpu else said(seconds, background_threads())
        confirmed = seconds <= LONG_RUN_ASK_S or st.checkbox(
            f"Yes, run these {len(plan['cells'])} cells for {how_long}. For a quicker "
            "grid, choose fewer cells, sizes or steps.", key=f"abl_confirm_long_{settings_key(recipe)}")
        if not refusal and work_button(start_label, key="abl_start", type="primary", disabled=not confirmed):
            folder = slug(out_name)  # a plain folder name: never outside the runs directory
            target = root / folder
            refusal = new_run_refusal(target, stored_first=False) or (  # checked before an upload is stored there
                f"{target} already holds a run; choose another name." if Run(target).is_run() else None)
            if refusal:
                st.error(without_host_paths(refusal))
            else:
                path = None
                if upload is not None:
                    path = rv.store_upload(target / "data", *upload)
                    recipe["tasks"][task_key]["train"] = str(path.resolve()) if path else None
                if (upload is None or path is not None) and rv.launch("ablate", recipe, target, remember=("abl_selected", folder), upload=path):
                    st.success(f"Started {folder}.")

# ----- 2. ablation runs -----------------------------------------------------------------------------
st.subheader("2. Ablation runs")
found = sorted((p for p in root.iterdir() if p.is_dir() and is_ablation(p)), key=lambda p: p.stat().st_mtime,
               reverse=True) if root.is_dir() else []
if not found:
    st.info(f"No ablation runs in {shown_path(root)}/ yet.")
    st.stop()
names = [p.name for p in found]
if st.session_state.get("abl_selected") not in names:
    st.session_state["abl_selected"] = names[0]
chosen = root / st.selectbox("Ablation", names, key="abl_selected", persist_state="session")
run = Run(chosen)
status = run.status()
active = status.get("state") in ACTIVE
try:
    page_plan = read_plan(chosen)  # what the sections below the panel are drawn from, until the page is redrawn
except ValueError as e:  # (a plan.json cut or edited: the page was a traceback)
    st.error(sentence_of(without_host_paths(str(e))))
    st.stop()


def _number(value, form: str) -> str:
    return "—" if value is None else form.format(value)


@st.fragment(run_every=3 if active else None)
def progress_panel():
    s = run.status()
    if active and s.get("state") not in ACTIVE:
        st.rerun()  # the ablation ended: redraw the whole page, results included
    try:
        plan = read_plan(chosen)
    except ValueError:
        plan = None  # (said above the panel once the page is redrawn)
    if plan is not None and page_plan is None:
        st.rerun()  # the plan was written since the page was drawn: redraw it, its results sections included
    res = read_results(chosen)
    total = s.get("cells_total") or (len(plan["cells"]) if plan else 0)
    done = sum(r["status"] == "finished" for r in res.values())
    failed = sum(r["status"] == "failed" for r in res.values())
    st.write(f"**{s.get('state', 'unknown')}** · {done} of {total} cells finished, {failed} failed")
    if total:
        left = left_text(s.get("started"), (done + failed) / total) if s.get("state") in ACTIVE else ""
        st.progress(min(1.0, (done + failed) / total), text=f"{done + failed} of {total} cells{left}")
    if s.get("state") in ACTIVE:
        sub = chosen / ("pretrain" if s.get("phase") == "pre-training" else "cells") / \
            str(s.get("pretraining") if s.get("phase") == "pre-training" else s.get("current"))
        sst = Run(sub).status() if sub.exists() else {}
        what = s.get("pretraining_label") if s.get("phase") in ("pre-training", "downloading") else s.get("current")
        if s.get("phase") == "downloading":
            where = ""
        elif sst.get("max_steps"):
            where = f" — step {int(sst.get('step') or 0):,} of {int(sst['max_steps']):,}"
        else:  # before its first step (its corpus read, this CPU's speed-ups timed): what its log says it is doing,
            # where "step 0 of ?" stood for half a minute
            last = (log_tail(sub / "log.txt", 1) or "").strip() if sub.exists() else ""
            # (shown as written: a log's "_" or "*" made emphasis of it, and "$" mathematics)
            where = " — getting ready" + (f" ({md(last[:120])}{'…' if len(last) > 120 else ''})" if last else "")
        st.caption(f"now {s.get('phase') or 'starting'}: {what or '…'}{where}")
        if writes_allowed() and work_button("Stop after the current step", key="abl_stop"):
            run.request_stop()
    elif s.get("state") in ("stopped", "crashed", "failed") and plan and writes_allowed():
        if work_button("Resume", key="abl_resume"):
            if rv.launch("ablate", plan["recipe"], chosen, resume=True):
                st.rerun()
    if plan:
        # a cell with no score (yet) says "—", and one without an error nothing, never "None"
        # a cell without a record of an ablation that is not running waits for nothing: not run yet
        rows = [{"cell": c["id"], "state": res.get(c["id"], {}).get("status") or
                 (("running" if c["id"] == s.get("current") else "pending") if s.get("state") in ACTIVE
                  else results.NOT_RUN),
                 "score": _number(res.get(c["id"], {}).get("score"), "{:.1f}"),
                 "seconds": _number(res.get(c["id"], {}).get("seconds"), "{:.1f}"),
                 "error": res.get(c["id"], {}).get("error") or ""} for c in plan["cells"]]
        with st.expander("Cells", expanded=active):
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    else:  # said inside the panel, which the browser redraws every few seconds, so that it goes when the plan comes
        st.info("The ablation is starting; its plan appears in a moment.")


progress_panel()

plan = page_plan
if plan is None:
    st.stop()
res = read_results(chosen)
table = results.table(plan, res, running=active)
# cells still to run of an ablation that stopped are not pending: said so, and how to run them
resumable = status.get("state") in ("stopped", "crashed", "failed") and writes_allowed()
dirs = results.directions(res, plan["recipe"]["tasks"], waiting=results.pending(plan, res),
                          stopped=results.halted(status.get("state"), "Resume runs them" if resumable else ""))

st.subheader("3. Results beside the paper")
st.caption("Ours: dev accuracy (F1 for NER, SQuAD) in percent. Paper: the number of the same setting in the "
           "table named, measured on the paper's task (GLUE, SQuAD or CoNLL-2003: none ships here, a Hub data set "
           "such as hf:nyu-mll/glue/sst2 can be one), which the column beside it names, and ours after \"not\" "
           "where ours is another task: then the two are not like for like. Tables 7 and 8 only report CoNLL-2003 "
           "NER and MNLI, so those columns stand in for other tasks.")
if miniatures.is_miniatures(plan):
    st.markdown("**Model size (Table 6) with Google's pre-trained miniatures, beside Turc et al. 2019**")
    minis = miniatures.table(plan, res)
    st.caption(miniatures.caption(plan, res, minis))
    exports.table(miniatures.shown(minis), "abl_minis_table", "miniatures beside Turc et al. 2019",
                  numbers={"parameters (M)": "{:.1f}", "Turc: GLUE score (test)": "{:.1f}"}, hide_index=True)
    exports.figure(miniatures.figure(minis), "abl_fig_miniatures")
figs = results.figures(table)
for axis, fig in figs.items():
    if axis == "size" and miniatures.is_miniatures(plan):
        continue  # shown above, beside Turc et al.'s scores for the same models
    sub = table[table["axis"] == axis]
    st.markdown(f"**{results.AXIS_TITLES[axis]}**")
    # The table above its chart, each the page's width: side by side, at a laptop's 1280 px the table's paper
    # columns were off its right edge and the chart dropped three of Table 7's seven labels. The paper's number
    # beside ours, then the state ("its model did not leave the word-frequency plateau": the only word that the
    # gap drawn beside it meant nothing)
    # The paper's row ("No NSP", "LTR & No NSP") beside our setting's key; the state (a plateau, "did not learn")
    # beside the scores it qualifies, in a column of bounded width (its whole text on hover): at 1,400 px its long
    # text pushed the paper's metric and source past the edge ("Devlin e..."), and a miniature's number read as
    # Table 6's where it was Turc et al.'s GLUE test score. The paper's task and metric, in one column of their own:
    # beside a column of the metric alone, "SST-2, not t..." and "Devlin e..." were cut again
    shown_columns = ["setting", "paper_row", "task"] + (["seed"] if sub["seed"].notna().any() else []) + \
        ["metric", "ours", "paper", "paper_task", "state", "paper_source"]  # (paper_task names the paper's metric)
    exports.table(sub[shown_columns], f"abl_table_{axis}", f"{results.AXIS_TITLES[axis]} beside the paper",
                  numbers={"ours": "{:.1f}", "paper": "{:.1f}"}, hide_index=True, width="stretch",
                  column_config={"paper_row": st.column_config.TextColumn("paper's row"),
                                 "paper_task": st.column_config.TextColumn(
                                     "paper's task", width="medium", help="the paper measured its number on this "
                                     "task; \"not\" names ours where it is another task: not like for like"),
                                 "state": st.column_config.TextColumn("state", width="medium"),
                                 "paper_source": st.column_config.TextColumn("paper's source")})
    if axis == "transfer":
        st.caption(results.table7_caption(sub))
    if on_plateau := int(sub["state"].astype(str).str.contains(results.PLATEAU, regex=False).sum()):
        st.warning(f"{on_plateau} of these {int(sub['ours'].notna().sum())} finished cells fine-tuned a model that "
                   "never left the word-frequency plateau: their scores measure what word counts give, not what the "
                   "pre-training taught, so no gap drawn between them means anything (section 4 reads no direction "
                   "from them).")
    exports.figure(fig, f"abl_fig_{axis}")

st.subheader("4. Do the paper's directions hold?")
st.caption("Judged on the scores this grid's models reached: " + results.RULE)
old_cells = results.unjudged(plan, res)
if old_cells:  # judging needs the corpus's entropy, seconds of tokenizing: a page visit does not start that
    st.warning(f"{old_cells} of this grid's cells sit on pre-trainings that ran before the word-frequency plateau "
               f"was recorded, so this page cannot tell whether their models learnt language and reads them as if "
               f"they had. `bert-explorer ablate --report {shown_path(chosen)}` judges them and prints the "
               "directions that follow.")
st.table(pd.DataFrame([{"direction": d["direction"], "held in ours": d["verdict"],
                        "our numbers": d["detail"], "paper": d["paper"], "later work": d["later"]}
                       for d in dirs]).set_index("direction"))

c1, c2 = st.columns(2)
c1.download_button("Download CSV", results.to_csv(table), f"{chosen.name}.csv", "text/csv", key="abl_dl_csv")
c2.download_button("Download Markdown", results.to_markdown(table, dirs, f"Ablation {chosen.name}"),
                   f"{chosen.name}.md", "text/markdown", key="abl_dl_md")
