import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bert_explorer.analysis.attributions.integrated_gradients import (
    BASELINES, DEFAULT_BASELINE, EXAMPLE_CLASSIFIER, EXAMPLE_MASKED, EXAMPLE_PAIR, baseline_note, classifier_runs,
    explain_classifier, explain_masked_word, explain_next_sentence)
from bert_explorer.analysis.probes.pretraining_tasks import MLM_HEAD, NSP_HEAD, copied_word
from bert_explorer.analysis.attributions.reliability import DEFAULT_STEPS, MAX_STEPS, RELIABLE_FRACTION, step_schedule
from bert_explorer.analysis.attributions.kept import integration_run, kept
from bert_explorer.analysis.attributions.integrated_gradients import affordable
from bert_explorer import limits
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.keep import kept_widget, remembered
from bert_explorer.app.state import by_weights, load, model_picker, shown_path
from bert_explorer.app.widgets import intro, needs_head, sentence_of
from bert_explorer.runs.run import runs_root

intro("Attributions", """
Which words of your input pushed the model towards its answer? **Integrated Gradients** (Sundararajan
et al. 2017, Section 3) walks from a *baseline*, your input with every word replaced by `[PAD]`, to your
input, adds up the gradients on the way and gives each word a bar: its share of how much the score f
changed, all bars adding up to that change. f is a pre-training task's score (Devlin et al. 2019,
Section 3.1) or a fine-tuned classifier's (Section 4); the baseline *token, segment and position* splits
each bar into the three embeddings BERT adds up at its input (Figure 2).
""")

name = model_picker()
MLM, NSP, CLF = "masked word", "next sentence", "fine-tuned classifier"
PRE, CLASSIFIER = "BertForPreTraining", "BertForSequenceClassification"  # the models that answer
target = st.radio("Explain", [MLM, NSP, CLF], key="attr_target", persist_state="session", horizontal=True,
                  help="Masked LM and NSP: the pre-training heads (Section 3.1). Classifier: a model "
                       "fine-tuned with `bert-explorer finetune` (Section 4).")
steps = st.slider("Integration steps (to start with)", 10, 300, DEFAULT_STEPS, step=10, key="attr_steps",
                  persist_state="session",
                  help="Points on the path from the baseline to the input; more steps, smaller convergence delta. "
                       f"While the delta is above {RELIABLE_FRACTION:.0%} of f(x) − f(baseline) the page doubles "
                       f"them, up to {MAX_STEPS}.")
max_steps = max(MAX_STEPS, steps)
baseline = st.radio("Baseline", list(BASELINES), index=list(BASELINES).index(DEFAULT_BASELINE), key="attr_baseline",
                    persist_state="session",
                    horizontal=True, format_func=lambda b: BASELINES[b].label,
                    help=" ".join(f"**{b.label}**: {b.measures}" for b in BASELINES.values()))
st.caption(BASELINES[baseline].measures)


def from_probe(probe_key: str, key: str, what: str, usable, pair: tuple[str, str] | None = None):
    """A button that fills this page's input with the one the probe page last studied: the
    probe gave an answer, this page says why."""
    keys = [(probe_key, key)] + ([pair] if pair else [])
    values = [(remembered(p), k) for p, k in keys]
    if all(v and usable(v) for v, _ in values) and any(st.session_state.get(k) != v for v, k in values):
        shown = " / ".join(f"“{v}”" for v, _ in values)
        st.button(f"Explain {what}: {shown}", key=f"{key}_from_probe",
                  on_click=lambda: st.session_state.update({k: v for v, k in values}))


def pretrained(head: str, what: str):
    loaded, error = load(name, PRE) if name else (None, "Choose a model in the sidebar.")
    if error:
        st.info(error)
        st.stop()
    if not needs_head(loaded, head, what):
        st.stop()
    return loaded


def page_integration(model, text: str, text_b: str | None = None) -> dict:
    """The integration settings of the steps this input runs (the slider's, cut to the server's limit): the
    cache's key, so slider values above the limit share one result; the captions below say what was set."""
    return integration_run(model, text, text_b, steps, baseline)


# Heavy: cached by the model's weights and the inputs for every session, and run one request at a time
# on the server (app.state.by_weights), the others shown their place in the queue.
# Also kept on disk (analysis/attributions/kept.py): a new server process reads its example back.
@by_weights(heavy=True, max_entries=64)
def _masked_word(model: str, text: str, word: str | None, **integration):
    loaded = load(model, PRE)[0]
    return kept("masked-word", loaded, lambda: explain_masked_word(loaded, text, word, **integration),
                text=text, word=word, **integration)


@by_weights(heavy=True, max_entries=64)
def _next_sentence(model: str, a: str, b: str, **integration):
    loaded = load(model, PRE)[0]
    return kept("next-sentence", loaded, lambda: explain_next_sentence(loaded, a, b, **integration),
                a=a, b=b, **integration)


@by_weights(heavy=True, max_entries=64)
def _classifier(model: str, text: str, text_b: str | None, label: str | None, **integration):
    loaded = load(model, CLASSIFIER)[0]
    return kept("classifier", loaded, lambda: explain_classifier(loaded, text, text_b, label, **integration),
                text=text, text_b=text_b, label=label, **integration)


result = None
model_used = name
try:
    if target == MLM:
        loaded = pretrained(MLM_HEAD, "predict masked words")
        from_probe("mlm_text", "attr_mlm_text", "the Masked-word probe's sentence",
                   lambda v: "[MASK]" in str(v).upper())
        c1, c2 = st.columns([3, 1])
        # kept: what the user typed holds when they leave the page and come back (app/keep.py)
        text = kept_widget(c1.text_input, "Sentence (the first [MASK] is explained)", "attr_mlm_text", EXAMPLE_MASKED,
                           max_chars=limits.CHARS)
        word = kept_widget(c2.text_input, "Word to explain", "attr_mlm_word", "", placeholder="top prediction",
                           max_chars=100, help="One WordPiece; empty = the model's most probable word.")
        result = _masked_word(name, text, word or None, **page_integration(loaded, text))
        d = result.details
        copied = copied_word(text, [{"token": d["word"]}])
        st.caption(f"Explaining **{d['word']}** (P = {d['probability']:.1%}) at position {d['mask_position']}. "
                   "Top predictions: " + ", ".join(f"{t['token']} ({t['probability']:.1%})" for t in d["top"]) + "."
                   + (f" **{copied}** is a word of the sentence itself: an under-trained masked LM often copies a word "
                      "it can see instead of predicting the hidden one, so the bars may show where it copied from "
                      "rather than what the context says." if copied else ""))
    elif target == NSP:
        loaded = pretrained(NSP_HEAD, "judge whether B follows A")
        from_probe("nsp_a", "attr_nsp_a", "the Next-sentence probe's pair", bool, pair=("nsp_b", "attr_nsp_b"))
        a = kept_widget(st.text_input, "Sentence A", "attr_nsp_a", EXAMPLE_PAIR[0], max_chars=limits.CHARS)
        b = kept_widget(st.text_input, "Sentence B", "attr_nsp_b", EXAMPLE_PAIR[1], max_chars=limits.CHARS)
        result = _next_sentence(name, a, b, **page_integration(loaded, a, b))
        st.caption(f"P(IsNext) = {result.details['p_is_next']:.1%} for the pair, "
                   f"{result.details['p_is_next_baseline']:.1%} for the baseline.")
    else:
        root = runs_root()
        runs = classifier_runs(root)
        if not runs:
            st.info(f"No fine-tuned sequence classifier found under `{shown_path(root)}` (a run directory with "
                    "`model/config.json` of a BertForSequenceClassification). Make one, for example:")
            st.code("bert-explorer finetune --model minilm-mlm-nsp --train builtin:bbc-topics --output "
                    f"{shown_path(root / 'bbc')}", language="bash")
            st.stop()
        by_dir = {r["model_dir"]: r for r in runs}
        run = by_dir[st.selectbox("Fine-tuning run", list(by_dir), key="attr_run",
                                  persist_state="session", format_func=lambda d: (
            f"{by_dir[d]['name']} ({by_dir[d]['task'] or 'classifier'}: {', '.join(by_dir[d]['labels'])})"))]
        st.caption("The classifier uses its own fine-tuned model, not the one picked in the sidebar.")
        model_used = run["model_dir"]
        clf, error = load(run["model_dir"], CLASSIFIER)
        if error:
            st.info(error)
            st.stop()
        text = kept_widget(st.text_input, "Text", "attr_clf_text", EXAMPLE_CLASSIFIER, max_chars=limits.CHARS)
        # here, not at the top: the registry loads scikit-learn and scipy (1.5 s), which only this mode needs
        from bert_explorer.tasks.registry import TASK_TYPES

        kind = TASK_TYPES.get(run["task"])  # the run's training_args.json names its task type
        # the task says what a person types: a second text where it reads a pair
        text_b = kept_widget(st.text_input, kind.inputs[1].label, "attr_clf_text_b", "", max_chars=limits.CHARS) \
            if kind is not None and len(kind.inputs) > 1 else None
        label = st.selectbox("Class to explain", ["the predicted class", *run["labels"]], key="attr_clf_label",
                             persist_state="session")
        result = _classifier(run["model_dir"], text, text_b, None if label == "the predicted class" else label,
                             **page_integration(clf, text, text_b))
        if "probabilities" in result.details:
            st.caption(f"Predicted **{result.details['predicted']}**; " + ", ".join(
                f"{k} {v:.1%}" for k, v in result.details["probabilities"].items()))
except ValueError as e:
    # (a [MASK] past the characters the box reads: the box's warning says so already, one sentence, not two)
    typed = str(st.session_state.get("attr_mlm_text", ""))
    if not ("has no [MASK] token" in str(e) and "[MASK]" in typed and "[MASK]" not in typed[:limits.CHARS]):
        st.info(sentence_of(e))
    st.stop()

st.subheader(f"f = {result.score}")
# what was asked too: the mode, the baseline and the steps (input.json held the score and the tokens only)
bundle = ResultBundle("Attributions", model_used, {
    "explain": target, "score": result.score, "baseline": result.baseline, "integration steps to start with": steps,
    "steps tried": [n for n, _ in result.steps_tried], "tokens": result.labels})
bundle.add_data("attributions", result.rows())
m = st.columns(5)
m[0].metric("f(x)", f"{result.f_input:.3f}", help="the score on your input")
m[1].metric("f(baseline)", f"{result.f_baseline:.3f}", help="the score on the baseline input")
m[2].metric("f(x) − f(baseline)", f"{result.difference:.3f}", help="what the attributions add up to")
m[3].metric("convergence delta", f"{result.delta:.2e}", help="Σ attributions − (f(x) − f(baseline))")
m[4].metric("steps used", f"{result.n_steps}", help="tried: " + ", ".join(
    f"{n} steps → delta {d:.2e}" for n, d in result.steps_tried))
planned = step_schedule(steps, max_steps)
answering = load(model_used, CLASSIFIER if target == CLF else PRE)[0]
allowed = affordable(planned, len(result.tokens), limits.for_config(answering.config).token_steps)
# said where the budget cut the steps set on the slider, or stopped a doubling the rule asked for (not beside a
# result that was reliable with the steps asked: the budget then changed nothing)
budget = (f"This server spends at most about {limits.SECONDS:.0f} s of its CPU on one attribution: with this model "
          f"and {len(result.tokens)} WordPieces that allows {sum(allowed)} integration steps in all, so it ran "
          f"{' → '.join(str(n) for n, _ in result.steps_tried)} steps")
if allowed != planned and not result.reliability.reliable and len(result.steps_tried) == len(allowed):
    st.caption(f"{budget}, not the {' → '.join(map(str, planned))} asked for (fewer steps leave a larger convergence "
               "delta; a shorter text allows more).")
elif allowed[0] < planned[0]:
    st.caption(f"{budget}, not the {steps} set above; they were enough here (the delta is within the rule below), "
               "and a shorter text allows more.")
verdict = result.reliability
if verdict.reliable:
    st.caption(verdict.reason)
else:
    st.warning(verdict.reason)
note = baseline_note(result)
if note:
    st.info(note)
st.caption("Completeness: the attributions add up to f(x) − f(baseline); the convergence delta is how far the "
           "numerical integral misses. The rule here: "
           f"reliable when |delta| ≤ {RELIABLE_FRACTION:.0%} of |f(x) − f(baseline)|; the steps are doubled "
           f"(up to {max_steps}) until it holds.")

# One colour per embedding part, the same in both baselines; bars up push f up, bars down push it down.
PART_COLOURS = {"token": "#1b9e77", "segment": "#d95f02", "position": "#7570b3"}
TOTAL_COLOUR = "#222222"
shown = ["token"] if result.baseline == "words" else ["token", "segment", "position"]
values = {"token": result.token, "segment": result.segment, "position": result.position}
size = abs(result.difference) or float("nan")  # shares are of |f(x) − f(baseline)|
chart = go.Figure()
# With the words baseline only the words change (position and segment are kept), so the one series is
# each word's attribution: named as such, not as a part among parts that are not drawn.
series_names = {"token": "word (its token embedding)"} if len(shown) == 1 else \
    {part: f"{part} embedding" for part in shown}
for part in shown:
    chart.add_bar(x=result.labels, y=values[part], name=series_names[part], marker_color=PART_COLOURS[part],
                  customdata=[v / size for v in values[part]],
                  hovertemplate=f"%{{x}}<br>{series_names[part]}: %{{y:.4f}} "
                                "(%{customdata:.1%} of |f(x) − f(baseline)|)<extra></extra>")
if len(shown) > 1:
    chart.add_scatter(x=result.labels, y=result.total, name="total (the three parts added)", mode="markers",
                      marker=dict(color=TOTAL_COLOUR, symbol="diamond", size=10),
                      hovertemplate="%{x}<br>total: %{y:.4f}<extra></extra>")
chart.update_layout(
    title=f"Each word's attribution to {result.score}" if len(shown) == 1 else
    f"Each token's attribution to {result.score}, split into its three embedding parts",
    barmode="relative", showlegend=True, height=400, margin=dict(l=10, r=10, t=40, b=10),
    xaxis=dict(title=None, categoryorder="array", categoryarray=result.labels),
    yaxis_title="attribution (up: raises f, down: lowers f)")
exports.figure(chart, "attr_chart", bundle=bundle)


def listed(words) -> str:
    return ", ".join(f"{label} {value:+.2f} ({share:.0%})" for label, value, share in words)


ups, downs = result.pushes()
said = (f"The words that pushed f up most: {listed(ups)}" if ups else "No word pushed f up") + \
       (f"; down most: {listed(downs)}." if downs else "; none pushed it down.")
if result.baseline == "words":
    unchanged = sorted({t for t, b in zip(result.tokens, result.baseline_tokens) if t == b})
    st.caption(f"f(x) − f(baseline) = {result.difference:.2f}; in brackets, each word's share of its size. {said} "
               f"{', '.join(unchanged)} are the same in the baseline and get exactly 0.")
else:
    sums = result.part_sums
    i, part, biggest = result.largest_part()
    st.caption(f"Of f(x) − f(baseline) = {result.difference:.2f}, the token embeddings carry {sums['token']:.2f}, "
               f"the segment embeddings {sums['segment']:.2f} and the position embeddings {sums['position']:.2f}; the "
               f"largest single part is the {part} embedding of {result.labels[i]} ({biggest:.2f}"
               + (f", {biggest / abs(result.difference):.0%})." if result.difference else ").")
               + f" By total: {said[0].lower()}{said[1:]}")

with st.expander("The numbers, and the baseline each token was compared with"):
    exports.table(pd.DataFrame(result.rows()), "attr_rows", "attributions", bundle, hide_index=True)

st.divider()
exports.bundle_button(bundle, "attr_bundle")
