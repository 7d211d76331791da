from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from bert_explorer.analysis.after_finetuning import calibration, change, predictions, slices
from bert_explorer.analysis.attributions.integrated_gradients import classifier_runs
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app import runs_view as rv
from bert_explorer.app.keep import SENTENCE_A, SENTENCE_B, SHADOW
from bert_explorer.app.state import MODEL_SWITCHED, by_weights, shown_path, show_mode, without_host_paths
from bert_explorer.app.roles import not_prepared, work_button, writes_allowed
from bert_explorer.app.widgets import MENU, intro
from bert_explorer.checkpoint import CheckpointError
from bert_explorer.runs import finder
from bert_explorer.runs.run import runs_root
from bert_explorer.runs.report import LABELS, SCORES, score_text
from bert_explorer.safe_text import markdown_text as md
from bert_explorer.tasks.metrics import small_dev_warning
from bert_explorer.tasks.registry import task_type

intro("After fine-tuning", """
A fine-tuned model (Devlin et al. 2019, Section 4 and Figure 4) reports one dev score; here its dev set is
opened up **example by example**: which answers are wrong and how sure the model was, where it fails (the
score by gold answer, input length and your file's other columns), whether its confidence can be trusted
(calibration), and what fine-tuning changed inside: the [CLS] vector C that the classifier reads, before and
after, and how far each layer moved. From any example, one click opens its attributions and its attention.
""")
show_mode()

PALETTE = qualitative.Plotly  # one colour per gold label, the same in both maps

root = runs_root()
every = finder.run_groups(finder.find_runs(root, "finetune"), root)[""]
runs = [r for r in every
        if (r.path / "model" / "config.json").is_file() or (r.path / "feature_head" / "head.json").is_file()]
# the runs not listed, said so: one training now, or killed, was not there without a word
def _unlisted(r) -> str:
    s = r.status()
    return f"{md(r.name)} ({s.get('state', 'not finished')}" + (
        f" at step {s['step']:,})" if isinstance(s.get("step"), int) else ")")


unlisted = [_unlisted(r) for r in every if r not in runs]
if not runs:
    st.info(f"No fine-tuning run with a saved model under {shown_path(root)} yet"
            + (f" ({', '.join(unlisted[:5])} {'has' if len(unlisted) == 1 else 'have'} none yet)" if unlisted else "")
            + ": " + (
        "fine-tune one on the Fine-tune page (or with `bert-explorer finetune`), then come back." if writes_allowed()
        else "your teacher can fine-tune one."))
    st.stop()
# the run chosen on the Fine-tune page since this page last looked is the one opened here (it opened on the newest)
watched = st.session_state.get("ft_watch")
if watched and watched != st.session_state.get("af_seen_ft_watch"):
    st.session_state["af_seen_ft_watch"] = watched
    st.session_state["af_run"] = watched
run = rv.pick_run("Fine-tuning run", runs, "af_run", root)
if unlisted:
    st.caption(f"Not listed, with no saved model yet: {', '.join(unlisted[:5])}"
               + (f" and {len(unlisted) - 5} more" if len(unlisted) > 5 else "") + ".")
status = run.status()
if status.get("state") == "stopped" and isinstance(status.get("max_steps"), int):
    st.caption(f"{md(run.name)} was stopped at step {status.get('step') or 0:,} of {status['max_steps']:,}: its model "
               "is the one it had then, and every number below is that model's.")
if status.get("state") not in ("finished", "stopped"):
    st.info(f"{run.name} is {status.get('state', 'not finished')}: its dev set is answered once it has finished.")
    st.stop()


# Cached the pages' one way (app.state.by_weights): by the run's weights, its model and any
# feature-based head, so a run re-created under the same name is answered anew.
@by_weights(show_spinner="Answering the dev set with the fine-tuned model…", max_entries=8)
def _predictions(path: str, store: bool):
    p = predictions.load_predictions(path, store=store)
    return p.task.name, p.label_names, p.record, p.rows, p.source


@by_weights(show_spinner="Running the dev set through the model before and after fine-tuning…", max_entries=4)
def _changed(path: str, store: bool):
    name, label_names, record, _, _ = _predictions(path, store)
    return change.what_changed(path, record["examples"], task_type(name), label_names,
                               record.get("max_seq_length", 128))


@by_weights(show_spinner="Drawing the maps…", max_entries=8)
def _maps(path: str, store: bool, method: str):
    return change.maps(_changed(path, store), method)


store = writes_allowed()  # classroom mode: computed for the view, never written into the run
try:
    task_name, label_names, record, rows, source = _predictions(str(run.path), store)
except (ValueError, CheckpointError) as e:
    st.info(md(without_host_paths(str(e))))  # a data error may quote the upload
    st.stop()
task = task_type(task_name)
main = task.main_metric
whole = slices.score(task, rows)
st.caption(f"**{run.name}**: {task.in_words or f'a {task.name} task'}, of the kind of the paper's "
           f"{task.paper}; {len(rows):,} dev examples. {source}")
st.caption(task.after_finetuning)
bundle = ResultBundle("After fine-tuning", finder.rel_name(run.path, root), {"run": finder.rel_name(run.path, root), "task": task.name})


def fmt(value) -> str:
    return score_text(main, value, task.percent)


def _shown(value) -> str:
    """An answer as the example list says it: a value to four figures ("predicted 0.25388383865356445")."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def marked(piece: str, in_gold: bool, in_predicted: bool) -> str:
    """A piece of a passage (``predictions.answer_pieces``) in Markdown, its characters escaped (the
    upload's text shows as text: no image in it is fetched): the gold answer in bold, the model's
    answer highlighted, spaces kept outside the marks (Markdown bolds no text that starts with one)."""
    core = piece.strip()
    if not core or not (in_gold or in_predicted):
        return md(piece)
    shown = f":blue-background[{md(core)}]" if in_predicted else md(core)
    shown = f"**{shown}**" if in_gold else shown
    return md(piece[:len(piece) - len(piece.lstrip())]) + shown + md(piece[len(piece.rstrip()):])


# ----- 1. the dev set, example by example ------------------------------------------------------
st.subheader("1. The dev set, example by example")
right = [r for r in rows if r.get("correct")]
wrong = [r for r in rows if r.get("correct") is False]
m = st.columns(3)
m[0].metric(f"dev {LABELS.get(main, main)}, saved model", fmt(whole[main]),
            help="Recomputed from the rows below, in float32 by the saved model: the run's result (Fine-tune page, "
                 "metrics.json) scores the same model in float32 too; the evaluations during training (the Runs "
                 "page's dev curve, the log) were in the training's precision, so in bf16 the last may differ a "
                 "little.")
if task.right_or_wrong:
    m[1].metric("right", f"{len(right):,}")
    m[2].metric("wrong", f"{len(wrong):,}")
if warning := small_dev_warning(len(rows), counted=task.right_or_wrong):
    st.warning(warning)
if per := task.per_label(report := task.report_of_rows(rows)):
    # a headline over labels (multi-label's micro-F1) can hide labels the model never learnt: each one's own
    if missed := task.never_predicted(report):
        st.warning(missed[0].upper() + missed[1:] + ".")
    exports.table(pd.DataFrame(per), "af_per_label", "each label", bundle, hide_index=True,
                  column_config={k: st.column_config.NumberColumn(format="percent")
                                 for k in ("F1", "precision", "recall")})
    st.caption(task.headline_note)

c1, c2 = st.columns([2, 1])
# the page opens on what a person came to read: the model's most confident mistakes (the largest errors of a
# value), so that "Why this answer?" below starts on the top one; the choice then holds from run to run
# a value has no wrong answers, only errors: "the wrong answers" and "the most confident mistakes" are both its
# largest errors first, which the radio offered twice
views = list(predictions.VIEWS) if task.right_or_wrong else ["all", "confident mistakes", "unsure right answers"]
# a radio of each kind of answer (one key for both: a regression run opened after a classifier's showed its
# radio with nothing selected, its labels not the kept choice's)
which = c1.radio("Show", views, key="af_view" if task.right_or_wrong else "af_view_values", horizontal=True,
                 index=views.index("confident mistakes"), persist_state="session",
                 format_func=lambda v: predictions.VIEWS[v] if task.right_or_wrong else {
                     "all": "every example", "confident mistakes": "largest errors first",
                     "unsure right answers": "smallest errors first"}[v])
golds = sorted({str(r["gold"]) for r in rows}) if task.gold_choosable else []
# the example and gold boxes are the run's own: a box shared by every run kept the last run's example
run_key = finder.rel_name(run.path, root)
gold = c2.selectbox("Gold answer", [None, *golds], key=f"af_gold_{run_key}", persist_state="session",
                    format_func=lambda g: "any" if g is None else g) if golds else None
shown_rows = predictions.view(rows, which, gold)
table = pd.DataFrame(shown_rows)
columns = {"p_gold": st.column_config.ProgressColumn("P(gold)", min_value=0.0, max_value=1.0, format="%.3f"),
           "p_predicted": st.column_config.ProgressColumn("P(predicted)", min_value=0.0, max_value=1.0,
                                                          format="%.3f"),
           "pieces": st.column_config.NumberColumn("WordPieces")}
if not table.empty:
    table = table.dropna(axis=1, how="all")
    # the numbers first, the (long) texts last, so that P(gold) and P(predicted) are in view
    texts = [c for c in table.columns if c.startswith(("text", "sentence", "passage", "question", "options"))]
    table = table[[c for c in table.columns if c not in texts] + texts]
exports.table(table, "af_table", "dev predictions", bundle, hide_index=True, column_config=columns)
if which == "confident mistakes" and task.right_or_wrong:
    if shown_rows and shown_rows[0].get("p_predicted") is not None:
        top = shown_rows[:3]
        st.caption(f"The most confident mistakes (P: this model's probability of {task.probability_of}): "
                   + "; ".join(f"example {r['example']} ({md(r['gold'])} read as {md(r['predicted'])}, "
                               f"P = {r['p_predicted']:.2f})" for r in top) + ".")
    elif not shown_rows:
        st.caption("No wrong answer" + (f" among the examples whose gold answer is {md(gold)}." if gold else "."))

# ----- why this answer -------------------------------------------------------------------------
st.markdown("**Why this answer?**")
if not shown_rows:
    st.caption("No example in this view.")
else:
    pick = st.selectbox("Example", [r["example"] for r in shown_rows], key=f"af_example_{run_key}",
                        persist_state="session",
                        format_func=lambda i: (f"{i}: gold {_shown(rows[i]['gold'])} · predicted "
                                               f"{_shown(rows[i]['predicted'])}")[:160])
    row, example = rows[pick], record["examples"][pick]
    why = task.why(row, example, record["answers"][pick])
    if "pieces" in why:  # the passage with both answers marked
        st.markdown(f"**Question:** {md(why['question'])}  \n**Passage** (gold in **bold**, the model's answer "
                    f":blue-background[highlighted]): " + "".join(marked(*p) for p in why["pieces"]))
    elif why:
        st.markdown(f"**Gold:** {md(why['gold'])}  \n**Predicted:** {md(why['predicted'])}")
    a, b = task.texts(example)
    model_dir = run.path / "model"
    menu = {label: path for path, label, _ in MENU}
    b1, b2 = st.columns(2)
    clf = next((r for r in classifier_runs(root) if Path(r["model_dir"]).resolve() == model_dir.resolve()), None)
    if task.calibrated and clf is not None:
        if b1.button("Attributions of this example", key="af_to_attr", icon=":material/calculate:",
                     help="Opens Attributions with this example and this run's classifier, explaining its answer."):
            st.session_state.update({"attr_target": "fine-tuned classifier", "attr_run": clf["model_dir"],
                                     "attr_clf_text": a, "attr_clf_text_b": b or "",
                                     "attr_clf_label": "the predicted class"})
            st.switch_page(menu["Attributions"])
    else:
        b1.caption("Attributions explain a fine-tuned *classifier's* class (this run's head answers otherwise"
                   + (", or it is feature-based" if clf is None and task.calibrated else "") + ").")
    if model_dir.is_dir():
        if b2.button("Attention on this example", key="af_to_attention", icon=":material/visibility:",
                     help="Opens Attention with this example as sentences A and B and this run's fine-tuned model "
                          "chosen in the sidebar, for every page until you choose another there."):
            for key, value in (("be_model_choice", str(model_dir)), (SENTENCE_A, a), (SENTENCE_B, b or "")):
                st.session_state[key] = st.session_state[SHADOW + key] = value
            st.session_state[MODEL_SWITCHED] = str(model_dir)  # said once in the sidebar, where the choice is
            st.switch_page(menu["Attention"])
    else:
        b2.caption("A feature-based run keeps no fine-tuned BERT: its attention is the base model's.")

# ----- 2. slices -------------------------------------------------------------------------------
st.subheader("2. Where it fails: the score by slice")
extra = predictions.extra_columns(record)
max_len = record.get("max_seq_length", 128)
table_slices = slices.slices(task, rows, max_len, extra)
long_input = (f"a passage longer than {max_len} was read in overlapping windows of {max_len}, nothing cut"
              if task.reads_in_windows else f"an input longer than {max_len} was cut, so the model never read its end")
st.caption(f"The dev {LABELS.get(main, main)} on parts of the dev set: by gold answer, by input length in "
           f"WordPieces ({long_input})"
           + (f", and by your file's other columns ({md(', '.join(extra))})." if extra else
              "; an uploaded file's other columns (a source, a date) would add their own slices."))
groups = list(dict.fromkeys(s["by"] for s in table_slices))
cols = st.columns(min(3, len(groups)) or 1)
# the charts stand side by side: one scale for all (a chart of 0-0.2 beside one of 0-1 drew its 0.2 bars full)
shown = [v for v in [*(sl[main] for sl in table_slices), whole[main]] if v is not None]
hover = ("%{y:.1f}%" if task.percent else "%{y:.1%}") if main in SCORES else "%{y:.3f}"
y_range = [min(0.0, *shown), max(0.0, *shown) * 1.15 or 1.0] if shown else None
for k, by in enumerate(groups):
    part = [s for s in table_slices if s["by"] == by]
    fig = go.Figure(go.Bar(x=[s["slice"] for s in part], y=[s[main] for s in part], name=LABELS.get(main, main),
                           customdata=[s["count"] for s in part],
                           # each bar says its score: a slice that scored 0 has no bar to see
                           text=[fmt(s[main]) if s[main] is not None else "" for s in part],
                           textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}<br>" + LABELS.get(main, main) + f" {hover}<br>%{{customdata}} "
                                                                                   "examples<extra></extra>"))
    fig.add_hline(y=whole[main], line_dash="dot")  # named in the title: a label on the line can sit on a bar
    for sl in part:  # no bar where a slice's score has no value (one gold value): said where its bar would stand
        if sl[main] is None:
            fig.add_annotation(x=sl["slice"], y=0, text=f"not defined:<br>{sl['not_defined'][main]}", showarrow=False,
                               yanchor="bottom")
    # two lines: three charts side by side cut a one-line title ("... the whole dev set, 0.")
    fig.update_layout(title=f"by {by}<br><sup>dotted: the whole dev set, {fmt(whole[main])}</sup>", height=320,
                      margin=dict(l=10, r=10, t=60, b=10),
                      yaxis_title=LABELS.get(main, main), xaxis_title=None)
    # a slice's name is a name even when it looks like a number (gold labels 0 and 1, a column of years):
    # on plotly's own number line the labels 0 and 1 stood among ticks -0.5, 0.5 and 1.5
    fig.update_xaxes(type="category")
    if y_range is not None:
        fig.update_yaxes(range=y_range)
    if main in SCORES:  # (the axis in the bars' own unit: "80.0%" on a bar beside a tick of 0.8)
        # (one decimal where a tick needs it: on an axis of 0-2 % ".0%" ticked "0%, 1%, 1%, 2%, 2%")
        fig.update_yaxes(**({"ticksuffix": "%"} if task.percent else {"tickformat": ".1~%"}))
    exports.figure(fig, f"af_slices_{k}", f"{LABELS.get(main, main)} by {by}", bundle, container=cols[k % len(cols)])
answered = Counter(r["predicted"] for r in rows if isinstance(r.get("predicted"), str))
if answered and task.name in ("classification", "pair-classification", "multiple-choice"):
    # (a slice by gold label counts the examples of that label alone: "politics 1.000" beside "business 0.000"
    # read as perfect on politics, where the model answered politics for nearly every example)
    top, times = answered.most_common(1)[0]
    st.caption(f"A slice by gold label scores the examples of that label alone: a label the model answers for "
               f"many examples scores high there whatever the input. This model answered {md(top)} for {times:,} of "
               f"the {len(rows):,} dev examples ({times / len(rows):.0%}).")
small = [s for s in table_slices if s["small"]]
# the note says why a score is a dash (no gold entity), as the bar's place does on the chart
frame = pd.DataFrame([{**{k: v for k, v in s.items() if k not in ("not_defined", "small")},
                       "note": "; ".join([*(f"{LABELS.get(m, m)} not defined: {why}"
                                            for m, why in s["not_defined"].items()),
                                          *([s["small"]] if s["small"] else [])]) or None}
                      for s in table_slices])
# (a slice with no note, or no correlation, is a dash: the grid drew "None")
exports.table(frame, "af_slices_table", "score by slice", bundle, hide_index=True,
              numbers={m: ("{:.1f}%" if task.percent else "{:.1%}") if m in SCORES else "{:.3f}"
                       for m in task.metrics
                       if m in frame.columns and pd.api.types.is_numeric_dtype(frame[m].dropna())})
if small:
    s0 = small[0]
    st.caption(f"{len(small)} of {len(table_slices)} slices hold fewer than 100 examples; each says so in the note "
               f"column, for instance: {md(s0['small'])}")
worst = min((s for s in table_slices if not s["small"] and s[main] is not None),
            key=lambda s: s[main] * (-1 if main == "mse" else 1), default=None)
if worst is not None:
    st.caption(f"Of the slices with at least 100 examples, the weakest is {md(worst['by'])} = {md(worst['slice'])}: "
               f"{LABELS.get(main, main)} {fmt(worst[main])} on {worst['count']} examples, against "
               f"{fmt(whole[main])} on the whole dev set.")

# ----- 3. what fine-tuning changed ---------------------------------------------------------------
st.subheader("3. What fine-tuning changed inside")
if not task.cls_map:
    st.caption(task.after_finetuning)
else:
    changed = None
    # Asked for, not computed on every first visit: it loads the model the run started from beside the
    # fine-tuned one and runs the dev set through both, seconds to minutes, and the rest of the page needs
    # none of it. Once someone has asked, every visitor sees it at once.
    asked = _changed.ready(str(run.path), store) or st.session_state.get("af_changed_for") == str(run.path)
    if not asked:
        st.caption(f"Loads the pre-trained model this run started from beside the fine-tuned one, runs the "
                   f"{len(rows):,} dev examples through both, and compares C (the [CLS] vector the classifier "
                   "reads) before and after, with CKA layer by layer.")
        # (seconds to minutes of the server's CPU, more with the dev set: a student's click took 12.5 s of it;
        # in class the teacher asks once and every student then sees it at once)
        if work_button("Compare before and after fine-tuning", key="af_changed", icon=":material/compare_arrows:"):
            st.session_state["af_changed_for"] = str(run.path)
            asked = True
        elif not writes_allowed():
            not_prepared("The comparison before and after fine-tuning", " by pressing Compare on this page")
    if asked:
        try:
            changed = _changed(str(run.path), store)
        except (ValueError, CheckpointError, OSError) as e:
            st.info(md(without_host_paths(str(e))))
    if changed is not None:
        st.caption(f"Before: **{shown_path(changed['before_name'])}**, the pre-trained model this run started from; "
                   f"after: **{shown_path(changed['after'])}**, the model it saved. Each dot is one dev example's "
                   f"C (the last layer's [CLS] vector), coloured by its gold answer.")
        method = st.radio("Map", ["pca", "tsne"], key="af_map", horizontal=True, persist_state="session",
                          format_func={"pca": "PCA (distances honest)", "tsne": "t-SNE (neighbours honest)"}.get)
        coords = _maps(str(run.path), store, method)
        fig = make_subplots(rows=1, cols=2, subplot_titles=("before fine-tuning", "after fine-tuning"))
        gold_values = changed["gold"]
        text = [str(r["text"])[:80] for r in rows]
        for col, key in enumerate(("before", "after"), start=1):
            xy = np.asarray(coords[key])
            if changed["labelled"]:
                for name in sorted(set(gold_values)):
                    idx = [i for i, g in enumerate(gold_values) if g == name]
                    fig.add_trace(go.Scatter(x=xy[idx, 0], y=xy[idx, 1], mode="markers", name=name, legendgroup=name,
                                             showlegend=col == 1, text=[text[i] for i in idx],
                                             marker=dict(color=PALETTE[sorted(set(gold_values)).index(name)
                                                                               % len(PALETTE)]),
                                             hovertemplate="%{text}<extra>" + name + "</extra>"),
                                  row=1, col=col)
            else:
                fig.add_trace(go.Scatter(x=xy[:, 0], y=xy[:, 1], mode="markers", name=f"{key}: gold value",
                                         text=text, marker=dict(color=gold_values, coloraxis="coloraxis"),
                                         hovertemplate="%{text}<br>gold %{marker.color:.2f}<extra></extra>"),
                              row=1, col=col)
        if not changed["labelled"]:
            fig.update_layout(coloraxis=dict(colorbar=dict(title="gold value")))
        fig.update_layout(title=f"C of the {len(gold_values)} dev examples ({'PCA' if method == 'pca' else 't-SNE'})",
                          height=420, margin=dict(l=10, r=10, t=60, b=10))
        axis = "principal component" if method == "pca" else "t-SNE dimension"
        fig.update_xaxes(title_text=f"{axis} 1")
        fig.update_yaxes(title_text=f"{axis} 2")
        exports.figure(fig, "af_maps", "CLS before and after", bundle)

        sep_b, sep_a = changed["separation"]["before"], changed["separation"]["after"]
        measures = [k for k in ("probe_accuracy", "silhouette", "probe_r2") if sep_b.get(k) is not None]
        names = {"probe_accuracy": "linear probe accuracy", "silhouette": "silhouette score",
                 "probe_r2": "linear probe R²"}
        # each bar says its value as the caption below says it: an accuracy in per cent, a silhouette and an R² as
        # they are (one axis holds them all, so its ticks cannot be per cent)
        said = {"probe_accuracy": "{:.1%}", "silhouette": "{:.2f}", "probe_r2": "{:.2f}"}
        sep = go.Figure([go.Bar(x=[names[k] for k in measures], y=[s[k] for k in measures], name=which_model,
                                text=[said[k].format(s[k]) for k in measures], textposition="outside",
                                cliponaxis=False)
                         for s, which_model in ((sep_b, "before fine-tuning"), (sep_a, "after fine-tuning"))])
        sep.update_layout(title="How well C separates the gold answers", barmode="group", height=320,
                          margin=dict(l=10, r=10, t=40, b=10), yaxis_title="score (1 = fully separated)")
        cka = changed["cka_by_layer"]
        cfig = go.Figure(go.Scatter(x=list(range(len(cka))), y=cka, mode="lines+markers", name="CKA"))
        cfig.update_layout(title="Layer by layer: CKA between before and after", height=320,
                           margin=dict(l=10, r=10, t=40, b=10), xaxis_title="layer (0 = embeddings)",
                           yaxis_title="CKA (1 = unchanged)", yaxis_range=[0, 1.02])
        s1, s2 = st.columns(2)
        exports.figure(sep, "af_separation", "separation before and after", bundle, container=s1)
        exports.figure(cfig, "af_cka", "CKA by layer", bundle, container=s2)
        st.caption(change.describe(changed, whole.get("accuracy")))
        # the numbers drawn, in the page's zip too (it held the figures' HTML alone)
        bundle.add_table("CKA by layer", pd.DataFrame({"layer": range(len(cka)), "cka": cka}))
        bundle.add_table("separation before and after", pd.DataFrame(
            [{"measure": names[k], "before fine-tuning": sep_b[k], "after fine-tuning": sep_a[k]} for k in measures]))

# ----- 4. calibration ----------------------------------------------------------------------------
st.subheader("4. Can its confidence be trusted? Calibration")
if not task.calibrated:
    st.caption(task.after_finetuning)
else:
    cal = calibration.calibration(rows)
    bins = [b for b in cal["bins"] if b["count"]]
    centres = [(b["lower"] + b["upper"]) / 2 for b in bins]
    rel = go.Figure()
    rel.add_bar(x=centres, y=[b["accuracy"] for b in bins], width=0.09, name="accuracy in the bin",
                customdata=[b["count"] for b in bins],
                hovertemplate="confidence %{x:.0%}<br>right: %{y:.1%}<br>%{customdata} examples<extra></extra>")
    rel.add_scatter(x=centres, y=[b["confidence"] for b in bins], mode="markers", name="mean confidence in the bin",
                    marker=dict(symbol="diamond", size=10))
    rel.add_scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration", line=dict(dash="dot"))
    rel.update_layout(title=f"Reliability diagram (ECE = {cal['ece']:.3f})", height=380,
                      # in per cent, as the hover, the table beside and the sentence below say them; ticked at each
                      # bin's edge (0 %, 50 %, 100 % for ten bins)
                      margin=dict(l=10, r=10, t=40, b=10),
                      xaxis=dict(title="confidence (probability of the answer given)", range=[0, 1], tickformat=".0%",
                                 dtick=0.1),
                      yaxis=dict(title="share right (bars), mean confidence (diamonds)", range=[0, 1.02],
                                 tickformat=".0%"))
    c1, c2 = st.columns([3, 2])
    exports.figure(rel, "af_reliability", "reliability diagram", bundle, container=c1)
    # an empty bin has no confidence or accuracy: "—", not "None"; every cell of those columns is text
    # an empty bin's cells are dashes; the CSV and the page's zip keep the bins' numbers (the zip had only the figure)
    exports.table(pd.DataFrame(cal["bins"]), "af_calibration_bins", "calibration bins", bundle, container=c2,
                  numbers={"lower": "{:.0%}", "upper": "{:.0%}", "confidence": "{:.1%}", "accuracy": "{:.1%}"},
                  hide_index=True)
    c2.caption("Guo et al. (2017), Section 2: the answers sorted into 10 bins of equal width by the model's "
               "probability of its own answer; ECE is the count-weighted mean gap between each bin's accuracy and "
               "its mean confidence.")
    st.caption(cal["sentence"])

st.divider()
exports.bundle_button(bundle, "af_bundle")
