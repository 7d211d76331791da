import hashlib
import time

import pandas as pd
import plotly.express as px
import streamlit as st

from bert_explorer import disk_cache
from bert_explorer.safe_text import markdown_text as md
from bert_explorer.analysis.layers.probing import (METRICS, PAGE_SETTINGS, PAGE_TASKS, TASKS, ProbeSettings,
                                                   cached_result, estimate_seconds, load_task, probe_layers,
                                                   within_error)
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.guard import uploader
from bert_explorer.app.state import by_weights, heavy_turn, load, picked_model
from bert_explorer.app.roles import STUDENT_CPU_S, busy_sentence, is_teacher, not_prepared, writes_allowed
from bert_explorer.runs.report import duration_text
from bert_explorer.train.speed import said
from bert_explorer.runs.report import left_text
from bert_explorer.app.widgets import intro, sentence_of

intro("What each layer knows", """
The model is frozen, and a **linear probe** (one softmax layer) is trained on the vectors of each
layer in turn (the embeddings, then each encoder layer) to read off one thing: named entities, part of
speech, or the topic of an article. Where the probe does best is where the model keeps that
information within easy reach (Tenney et al. 2019, "BERT Rediscovers the Classical NLP Pipeline").
Each layer also gets a **control task** that gives every word type a random label (Hewitt & Liang
2019): a probe that scores well on it has memorised words, so the gap between the two, the
*selectivity*, is the part that the layer itself knows. It takes further BERT's own Section 5.3 (Devlin et
al. 2019, Table 7), where frozen features of different layers feed a tagger: the second-to-last layer alone beats
the last (95.6 against 94.9 dev F1), and the four last layers together do best (96.1).
""")

ARCH = "BertForPreTraining"  # the sidebar loads models so: one copy in memory; only the encoder is used
name, loaded = picked_model(ARCH)
L = loaded.config.num_layers

# ----- what to probe -----------------------------------------------------------------------------
choices = ["ner", "topic", "pos"]
tasks = st.multiselect("Tasks", choices, default=list(PAGE_TASKS), format_func=lambda t: f"{t}: {TASKS[t]}",
                       key="probe_tasks", persist_state="session")
pos_file = None
if "pos" in tasks:
    st.caption("No installable package ships an English POS-tagged corpus (NLTK's corpora are separate downloads), "
               "so part of speech needs a CoNLL-U file of yours, for example UD English-EWT's "
               "en_ewt-ud-train.conllu; its UPOS column is the label.")
    if not writes_allowed():
        st.info("Uploading a file is off in classroom mode; the other tasks work.")
    else:
        up = uploader(st, "CoNLL-U file", type=["conllu", "txt"], key="probe_pos_upload")
        if up is not None:
            raw = up.getvalue()
            folder = disk_cache.entry("pos-upload", None, sha256=hashlib.sha256(raw).hexdigest())
            if not (folder / "data.conllu").is_file():
                with disk_cache.writing(folder) as tmp:
                    (tmp / "data.conllu").write_bytes(raw)
            pos_file = str(folder / "data.conllu")
            try:  # checked now, not after the other tasks' minutes of probing
                load_task("pos", PAGE_SETTINGS.get("pos", ProbeSettings()), pos_file)
            except ValueError as e:
                st.error(f"{md(str(e).replace('data.conllu', up.name))}.")  # (it names the file: once, not twice)
                pos_file = None
    if pos_file is None:
        tasks = [t for t in tasks if t != "pos"]

with st.expander("Settings"):
    c1, c2, c3 = st.columns(3)
    # (held when the user leaves the page: the results computed with them seemed gone on the way back)
    n_sentences = c1.number_input("Sentences for ner / pos (0 = all)", 0, 100_000, 0, step=100, key="probe_n_sent",
                                  persist_state="session", help="WNUT-16 has 2,394 sentences; fewer run faster.")
    n_articles = c2.number_input("BBC articles for topic", 20, 2_200, PAGE_SETTINGS["topic"].max_examples, step=100,
                                 key="probe_n_art", persist_state="session")
    seed = c3.number_input("Seed (split and control labels)", 0, 1_000_000, 0, key="probe_seed",
                           persist_state="session")


@by_weights(max_entries=32)
def _estimate(model: str, task: str, settings: ProbeSettings, pos_file: str | None) -> dict:
    return estimate_seconds(load(model, ARCH)[0], task, settings, pos_file)


def settings_for(task: str) -> ProbeSettings:
    n = int(n_articles) if task == "topic" else (int(n_sentences) or None)
    return ProbeSettings(max_examples=n, seed=int(seed))


if not tasks:
    st.info("Pick at least one task.")
    st.stop()

try:
    results = {t: cached_result(loaded, t, settings_for(t), pos_file) for t in tasks}
except ValueError as e:  # a CoNLL-U file that is not one, a built-in data set that is not installed
    st.error(sentence_of(e))
    st.stop()
missing = [t for t, r in results.items() if r is None]
if missing:
    # The note, the button and the progress bar share one placeholder that is cleared once the probes
    # have run, so the results do not sit under "Not computed yet" until the next visit.
    pending = st.empty()
    with pending.container():
        with st.spinner("Counting the WordPieces of the tasks…"):
            est = {t: _estimate(name, t, settings_for(t), pos_file) for t in missing}
        st.info(f"Not computed yet for this model: {', '.join(missing)}. The vectors of every layer are computed "
                "once, then the probes train; both are kept on disk, so the next visit is fast. Estimated here for "
                "this model: " + "; ".join(
                    f"{t}, {e['inputs']:,} inputs: the layer vectors about {duration_text(e['features_seconds'])}, "
                    f"{e['probes']} probes on {e['rows']:,} {'articles' if t == 'topic' else 'words'} about "
                    f"{duration_text(e['probes_seconds'])}, {e['scorings']} scorings of their held-out predictions "
                    f"about {duration_text(e['scoring_seconds'])} on an idle machine, in all "
                    f"**{said(e['seconds'], e['threads'])}**"
                    for t, e in est.items())
                + f" ({next(iter(est.values()))['basis']}). Fewer sentences or articles (Settings) run faster.")
        seconds = sum(e["seconds"] for e in est.values())
        # (the bound is CPU: the layer vectors keep every thread of this process busy, so their time counts once a
        # thread; the time alone let a student start 15 s of CPU under a gate of 10)
        cpu = sum(e["cpu_seconds"] for e in est.values())
        if writes_allowed() or cpu <= STUDENT_CPU_S:  # a student's click starts seconds of work at most
            if is_teacher() and cpu > STUDENT_CPU_S:  # (it runs in this page, in the heavy queue's one turn)
                st.caption(f"While the probes run here ({said(seconds, next(iter(est.values()))['threads'])}), "
                           "the students' heavy requests (Attributions, a new text on Two models) wait for their "
                           "turn. Run them before class, or prepare the page's own settings in the background with "
                           "Home's Prepare for class (the build probes).")
            run_now = st.button("Run the probes", type="primary", key="probe_run")
        else:
            run_now = False
            own = all(settings_for(t) == PAGE_SETTINGS.get(t) for t in missing)  # (what Prepare for class builds)
            not_prepared(f"Probing {', '.join(missing)} with these settings",
                         " by running the probes once on this page, with these settings, or (with the page's own "
                         "settings) by preparing the class with the build probes",
                         build=("probes", name) if own else None)
            st.caption(f"These settings cost about {duration_text(cpu)} of CPU on an idle machine; fewer sentences "
                       f"or articles (Settings) may bring it under {STUDENT_CPU_S:.0f} s, which you may run yourself.")
            busy_sentence()
        bar = st.progress(0.0, text="starting…") if run_now else None
    if run_now:
        # heavy: one request at a time on this server, the others wait with their place shown; a request
        # that waited for the same probes finds them computed
        with heavy_turn():
            started = time.time()
            for k, t in enumerate(missing):
                def report(f, m, k=k, t=t):
                    done = min(1.0, (k + f) / len(missing))
                    bar.progress(done, text=f"{t}: {m}{left_text(started, done)}")
                results[t] = cached_result(loaded, t, settings_for(t), pos_file) or \
                    probe_layers(loaded, t, settings_for(t), pos_file, report)
        pending.empty()
    else:
        results = {t: r for t, r in results.items() if r is not None}

# ----- the results ---------------------------------------------------------------------------------
bundle = ResultBundle("What each layer knows", name, {"tasks": list(results)})
for t, r in results.items():
    st.subheader(f"{t}: {TASKS[t]}")
    rows = []
    for series, values in (("task", r["score"]), ("control task", r["control"]), ("selectivity", r["selectivity"])):
        rows += [{"layer": i, "value": v, "series": series} for i, v in zip(r["layers"], values)]
    fig = px.line(pd.DataFrame(rows), x="layer", y="value", color="series", markers=True,
                  line_dash="series", line_dash_map={"task": "solid", "control task": "dot", "selectivity": "dash"},
                  labels={"value": f"{METRICS[t]} (selectivity: task − control)", "layer": "layer (0 = embeddings)"},
                  title=f"{METRICS[t]} of a linear probe on each layer")
    fig.add_hline(y=r["majority_baseline"], line_color="grey", line_width=1,
                  annotation_text="always the most frequent label", annotation_position="bottom right")
    fig.update_xaxes(dtick=1)
    exports.figure(fig, f"probe_plot_{t}", bundle=bundle)
    st.markdown(r["summary"])
    vectors = r["seconds"]["features"]
    took = ("read from the cache" if r.get("from_cache") else "computed just now") + " (the probes took " + \
        f"{r['seconds']['probes']:.0f} s" + (f", the layer vectors {vectors:.0f} s" if vectors is not None else "") + \
        " on this machine)"
    st.caption(f"{r['source']}: {r['n_train']:,} {r['units']} to train on, {r['n_test']:,} held out to score, "
               f"{r['n_labels']} labels; {took}. " + " ".join(f"Note: {n}." for n in r["notes"]))
    if "entity_f1" in r:
        st.caption("Entity F1 (exact span and type) of the task probe, layer by layer: "
                   + ", ".join(f"{i}: {v:.2f}" for i, v in zip(r["layers"], r["entity_f1"])) + ".")
    # one row a measure, one column a layer; the measures named in a column of their own (the CSV and the
    # zip left the index out: three rows of numbers under "0,1,...,6" and no word of which was which)
    table = pd.DataFrame({f"layer {layer}": [task, control, sel] for layer, task, control, sel in zip(
        r["layers"], r["score"], r["control"], r["selectivity"])}, index=["task", "control", "selectivity"])
    table = table.round(3).rename_axis("probe").reset_index()
    exports.table(table, f"probe_table_{t}", f"probing {t}", bundle, hide_index=True)
    bundle.add_data(t, {k: v for k, v in r.items() if k != "from_cache"})
if len(results) > 1:  # a peak is said only where no other layer comes within the best's sampling error
    def peak(r: dict) -> str:
        best = r["layers"][max(range(len(r["score"])), key=r["score"].__getitem__)]
        margin, close = within_error(r)
        return (f"at layer {best}" if not close else
                f"no single layer (layer {best} best, {len(close)} other{'s' if len(close) > 1 else ''} within its "
                f"±{margin:.2g})")
    st.markdown("**Peaks in this model:** " + ", ".join(f"{t} {peak(r)}" for t, r in results.items())
                + f" (of layers 0–{L}).")

if results:  # (offered before anything was computed, it was a zip of nothing)
    st.divider()
    exports.bundle_button(bundle, "probe_bundle")
