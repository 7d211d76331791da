import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bert_explorer.analysis.attributions import (DEFAULT_STEPS, MAX_STEPS, RELIABLE_FRACTION, baseline_note,
                                                 classifier_runs, explain_classifier, explain_masked_word,
                                                 explain_next_sentence)
from bert_explorer.analysis.probes import MLM_HEAD, NSP_HEAD
from bert_explorer.analysis.export import ResultBundle
from bert_explorer.app import exports
from bert_explorer.app.state import load, model_picker, runs_root, shown_path
from bert_explorer.app.widgets import intro, needs_head

st.set_page_config(page_title="Attributions · BERT Explorer", layout="wide")
intro("Attributions", """
Which input tokens pushed the model towards its answer? **Integrated Gradients** (Sundararajan
et al. 2017) walks from a *baseline* input that carries no information (ordinary words replaced by
`[PAD]`, everything in segment A at position 0) to your input and adds up the gradients on the
way. The attributions add up exactly to how much the score changed, and each token's share splits
into its token, segment and position embedding (Devlin et al. 2019, Figure 2).
""")

name = model_picker()
MLM, NSP, CLF = "masked word", "next sentence", "fine-tuned classifier"
target = st.radio("Explain", [MLM, NSP, CLF], key="attr_target", horizontal=True,
                  help="Masked LM and NSP: the pre-training heads (Section 3.1). Classifier: a model "
                       "fine-tuned with `bert-explorer finetune` (Section 4).")
steps = st.slider("Integration steps (to start with)", 10, 300, DEFAULT_STEPS, step=10, key="attr_steps",
                  help="Points on the path from the baseline to the input; more steps, smaller convergence delta. "
                       f"While the delta is above {RELIABLE_FRACTION:.0%} of f(x) − f(baseline) the page doubles "
                       f"them, up to {MAX_STEPS}.")
max_steps = max(MAX_STEPS, steps)


def pretrained(head: str, what: str):
    loaded, error = load(name, "BertForPreTraining") if name else (None, "Choose a model in the sidebar.")
    if error:
        st.info(error)
        st.stop()
    if not needs_head(loaded, head, what):
        st.stop()
    return loaded


result = None
model_used = name
try:
    if target == MLM:
        loaded = pretrained(MLM_HEAD, "predict masked words")
        c1, c2 = st.columns([3, 1])
        text = c1.text_input("Sentence (the first [MASK] is explained)",
                             "the government said the [MASK] would rise next year .", key="attr_mlm_text")
        word = c2.text_input("Word to explain", key="attr_mlm_word", placeholder="top prediction",
                             help="One WordPiece; empty = the model's most probable word.")
        result = explain_masked_word(loaded, text, word or None, n_steps=steps, max_steps=max_steps)
        d = result.details
        st.caption(f"Explaining **{d['word']}** (P = {d['probability']:.1%}) at position {d['mask_position']}. "
                   "Top predictions: " + ", ".join(f"{t['token']} ({t['probability']:.1%})" for t in d["top"]))
    elif target == NSP:
        loaded = pretrained(NSP_HEAD, "judge whether B follows A")
        a = st.text_input("Sentence A", "the match was played in heavy rain on saturday .", key="attr_nsp_a")
        b = st.text_input("Sentence B", "both teams struggled to keep the ball on the ground .", key="attr_nsp_b")
        result = explain_next_sentence(loaded, a, b, n_steps=steps, max_steps=max_steps)
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
        run = by_dir[st.selectbox("Fine-tuning run", list(by_dir), key="attr_run", format_func=lambda d: (
            f"{by_dir[d]['name']} ({by_dir[d]['task'] or 'classifier'}: {', '.join(by_dir[d]['labels'])})"))]
        st.caption("The classifier uses its own fine-tuned model, not the one picked in the sidebar.")
        model_used = run["model_dir"]
        clf, error = load(run["model_dir"], "BertForSequenceClassification")
        if error:
            st.info(error)
            st.stop()
        text = st.text_input("Text", "Shares fell sharply after the bank's results.", key="attr_clf_text")
        text_b = st.text_input("Second text (pair tasks)", key="attr_clf_text_b") \
            if run["task"] == "pair-classification" else None
        label = st.selectbox("Class to explain", ["the predicted class", *run["labels"]], key="attr_clf_label")
        result = explain_classifier(clf, text, text_b, None if label == "the predicted class" else label,
                                    n_steps=steps, max_steps=max_steps)
        if "probabilities" in result.details:
            st.caption(f"Predicted **{result.details['predicted']}**; " + ", ".join(
                f"{k} {v:.1%}" for k, v in result.details["probabilities"].items()))
except ValueError as e:
    st.info(str(e))
    st.stop()

st.subheader(f"f = {result.score}")
bundle = ResultBundle("Attributions", model_used, {"score": result.score, "tokens": result.labels})
bundle.add_data("attributions", result.rows())
m = st.columns(5)
m[0].metric("f(x)", f"{result.f_input:.3f}", help="the score on your input")
m[1].metric("f(baseline)", f"{result.f_baseline:.3f}", help="the score on the baseline input")
m[2].metric("f(x) − f(baseline)", f"{result.difference:.3f}", help="what the attributions add up to")
m[3].metric("convergence delta", f"{result.delta:.2e}", help="Σ attributions − (f(x) − f(baseline))")
m[4].metric("steps used", f"{result.n_steps}", help="tried: " + ", ".join(
    f"{n} steps → delta {d:.2e}" for n, d in result.steps_tried))
verdict = result.reliability
if verdict.reliable:
    st.caption(verdict.reason)
else:
    st.warning(verdict.reason)
note = baseline_note(result)
if note:
    st.info(note)
st.caption("Completeness: the attributions of all tokens and all three embedding parts add up to "
           "f(x) − f(baseline); the convergence delta is how far the numerical integral misses. The rule here: "
           f"reliable when |delta| ≤ {RELIABLE_FRACTION:.0%} of |f(x) − f(baseline)|; the steps are doubled "
           f"(up to {max_steps}) until it holds.")

rows = ["total", "token", "segment", "position"]
heat = go.Figure(go.Heatmap(
    z=[result.total, result.token, result.segment, result.position], x=result.labels, y=rows,
    colorscale="RdBu", zmid=0, texttemplate="%{z:.2f}", colorbar=dict(title="attribution"),
    hovertemplate="%{x}<br>%{y}: %{z:.4f}<extra></extra>"))
heat.update_layout(title="Attribution per token (red pushes f down, blue pushes it up)",
                   height=300, margin=dict(l=10, r=10, t=40, b=10), yaxis=dict(autorange="reversed"))
exports.figure(heat, "attr_heatmap", bundle=bundle)

parts = pd.DataFrame({"token": result.labels, "token embedding": result.token,
                      "segment embedding": result.segment, "position embedding": result.position})
bars = px.bar(parts.melt(id_vars="token", var_name="part", value_name="attribution"), x="token",
              y="attribution", color="part", barmode="relative",
              title="Each token's attribution split into its three embedding parts")
bars.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10), xaxis_title=None)
exports.figure(bars, "attr_parts", bundle=bundle)

with st.expander("The numbers, and the baseline each token was compared with"):
    exports.table(pd.DataFrame(result.rows()), "attr_rows", "attributions", bundle, hide_index=True)

st.divider()
exports.bundle_button(bundle, "attr_bundle")
