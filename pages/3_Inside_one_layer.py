import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from bert_explorer import limits
from bert_explorer.app.result_bundle import ResultBundle
from bert_explorer.analysis.attention.layer_steps import (STEPS, describe_row, difference_from_model, layer_steps,
                                                         token_figures)
from bert_explorer.app import exports
from bert_explorer.app.keep import (SENTENCE_A, SENTENCE_A_DEFAULT, SENTENCE_B, SENTENCE_B_DEFAULT, fit_kept,
                                   forget_outside, kept_widget, past_the_model)
from bert_explorer.app.state import by_weights, load, picked_model
from bert_explorer.app.widgets import intro
from bert_explorer.runs.finder import causal_checkpoints
from bert_explorer.runs.run import runs_root

intro("Inside one layer", """
One encoder layer of BERT, one step at a time, with the **real numbers of the loaded model** for your
sentence: the input representation (Devlin et al. 2019, Section 3, "Input/Output Representations"), the multi-head self-attention of
the Transformer (Vaswani et al. 2017, Section 3.2: queries, keys, values, scores, mask, softmax, weighted
sum), and the feed-forward block, each followed by a residual sum and LayerNorm. Pick a layer, a head and a
token; every panel shows the equation, the tensor's shape and the values (layers and heads count from 1).
""")

ARCH = "BertForPreTraining"
name, loaded = picked_model(ARCH)


# Cached by the model's weights and the inputs, for every session (app.state.by_weights).
@by_weights(max_entries=64)
def _steps(model: str, text: str, text_b: str | None, layer: int, head: int, pad_to: int):
    return layer_steps(load(model, ARCH)[0], text, text_b, layer, head, 128, pad_to)


@by_weights(max_entries=64)
def _gap(model: str, text: str, text_b: str | None, layer: int, head: int, pad_to: int) -> float:
    return difference_from_model(load(model, ARCH)[0], text, text_b, layer, head, 128, pad_to)

L, A, H = loaded.config.num_layers, loaded.config.num_heads, loaded.config.hidden_size

c1, c2 = st.columns(2)
text = kept_widget(c1.text_input, "Sentence A", SENTENCE_A, SENTENCE_A_DEFAULT, max_chars=limits.CHARS)
text_b = kept_widget(c2.text_input, "Sentence B (optional)", SENTENCE_B, SENTENCE_B_DEFAULT,
              max_chars=limits.CHARS).strip() or None
if not text.strip():
    st.info("Type a sentence A to look inside a layer.")
    st.stop()
c1, c2, c3, c4 = st.columns(4)
was = fit_kept("ins_layer", L - 1), fit_kept("ins_head", A - 1)
layer = c1.selectbox("Layer", range(L), key="ins_layer", persist_state="session", format_func=lambda i: f"{i + 1}")
head = c2.selectbox("Head", range(A), key="ins_head", persist_state="session", format_func=lambda i: f"{i + 1}")
past_the_model(was, L, A)
forget_outside("ins_pad", 0, loaded.config.max_position_embeddings)
pad_to = c4.number_input("Pad to (tokens)", 0, loaded.config.max_position_embeddings, 0, 4, key="ins_pad",
                         persist_state="session",
                         help="Add [PAD] tokens as a batch does for its shorter inputs, to see the padding mask. "
                              "0 = no padding.")
steps = _steps(name, text, text_b, layer, head, int(pad_to))
tokens, T, d = steps.tokens, len(steps.tokens), steps.head_size
# the options name their WordPieces: numbered alone, a new sentence kept the box showing the old sentence's word
# at the same number while the captions explained the new one
token_labels = [f"{i}: {t}" for i, t in enumerate(tokens)]
token = token_labels.index(c3.selectbox("Token", token_labels, key="ins_token", persist_state="session",
                                        index=min(2, T - 1)))
# the tokens read, not padding: keys no query is kept from (the [PAD]s a padding adds were counted as cut, and
# [PAD]s typed in the text were not, where 200 of them were cut to 128 without a word)
if int((steps.mask[-1] == 0).sum()) >= 128:
    st.caption(f"The input was cut to 128 WordPieces{' (the longer sentence first)' if text_b else ''}: this page "
               "follows at most 128 through a layer, each step's matrices drawn whole, though the model reads up to "
               f"{loaded.config.max_position_embeddings:,}. Shorten it to choose what is shown.")
figures = token_figures(steps, token)  # what the captions below say about the chosen token

bundle = ResultBundle("Inside one layer", name, {"text": text, "text_b": text_b, "layer": layer + 1,
                                                 "head": head + 1, "token": token, "pad_to": int(pad_to)})
for field in ("x", "q", "k", "v", "scores", "mask", "probs", "other_probs", "context", "all_heads", "attention_out",
              "attention_sum", "attended", "ff_hidden", "ff_gelu", "ff_out", "output_sum", "output"):
    bundle.add_array(field, getattr(steps, field))
bundle.add_data("tokens", tokens)


def labels(n: int) -> list[str]:
    return [f"{i}: {t}" for i, t in enumerate(tokens[:n])]


def heat(a: np.ndarray, title: str, key: str, x_title: str, x=None, scale="RdBu_r", zmid=0.0, height=None,
         zrange=None, z_title="value"):
    """A heatmap with one row per token (the chosen one marked); ``z_title`` names the colours."""
    fixed = dict(zmin=zrange[0], zmax=zrange[1], showscale=False) if zrange else dict(zmid=zmid)
    fig = go.Figure(go.Heatmap(z=a, x=x, y=labels(a.shape[0]), colorscale=scale, **fixed,
                               colorbar=dict(title=dict(text=z_title)),
                               hovertemplate="%{y} · %{x}: %{z:.3f}<extra></extra>"))
    fig.add_hline(y=token, line_color="black", line_width=1, opacity=0.5)
    fig.update_layout(title=title, height=height or 180 + 14 * a.shape[0], yaxis=dict(autorange="reversed"),
                      xaxis_title=x_title, yaxis_title="query token" if x_title == "key token" else "token",
                      margin=dict(t=40, b=40))
    exports.figure(fig, key, title, bundle)


def strips(rows: dict[str, np.ndarray], title: str, key: str):
    """Vectors of the chosen token, one strip each (all of the same length).

    Each strip has its own symmetric colour range, stated in its label: the LayerNorm output spans
    about ±2.5 while a position embedding may span ±0.1, and on one shared scale the small rows
    would all look white."""
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.04)
    for i, (k, v) in enumerate(rows.items(), start=1):
        top = float(np.abs(v).max()) or 1.0
        fig.add_trace(go.Heatmap(z=v[None, :], y=[f"{k} (±{top:.2g})"], name=k, colorscale="RdBu_r", zmin=-top,
                                 zmax=top, showscale=False,
                                 hovertemplate=f"{k}, unit %{{x}}: %{{z:.3f}}<extra></extra>"), row=i, col=1)
    fig.update_xaxes(title_text="hidden unit", row=len(rows), col=1)
    fig.update_yaxes(automargin=True)  # the labels carry the ranges: room for them, whatever their length
    fig.update_layout(title=title, height=110 + 40 * len(rows), margin=dict(t=40, b=40))
    exports.figure(fig, key, title, bundle)
    st.caption("Each strip has its own colour scale, from dark blue at minus its range (in brackets) through "
               "white at 0 to dark red at plus it: compare the patterns within a strip, the brackets across strips.")


def bars(series: dict[str, np.ndarray], title: str, key: str, y_title: str):
    """One named trace per series, side by side (never stacked: the rows are compared, not added)."""
    fig = go.Figure([go.Bar(x=labels(T), y=v, name=k, hovertemplate=f"{k}<br>%{{x}}: %{{y:.3f}}<extra></extra>")
                     for k, v in series.items()])
    fig.update_layout(barmode="group", title=title, height=360, margin=dict(t=40, b=40), xaxis_title="key token",
                      yaxis_title=y_title, showlegend=len(series) > 1, legend=dict(orientation="h", y=-0.35))
    exports.figure(fig, key, title, bundle)


def header(i: int, equation: str, shape: str, source: str):
    st.subheader(f"Step {i + 1} of {len(STEPS)}: {STEPS[i]}")
    st.latex(equation)
    st.caption(f"Shape: {shape} · {source}")


tok = tokens[token]


def step_input():
    if steps.embedding_parts is not None:
        header(0, r"X = \mathrm{LayerNorm}(E_{token} + E_{segment} + E_{position})", f"[{T}, {H}]",
               "BERT, Section 3 (Input/Output Representations) and Figure 2")
        p = steps.embedding_parts
        strips({k: p[k][token] for k in ("token", "segment", "position", "sum")} | {"X (after LayerNorm)":
               steps.x[token]}, f"The input representation of {tok!r}, unit by unit", "ins_emb")
        norms = figures.part_lengths
        st.caption(f"For {tok!r} the three summands have lengths token {norms['token']:.2f}, segment "
                   f"{norms['segment']:.2f}, position {norms['position']:.2f}; LayerNorm then gives every token "
                   f"mean 0 and variance 1 before its learned scale and shift.")
    else:
        header(0, rf"X = h^{{({layer})}} \quad\text{{(the output of layer {layer})}}", f"[{T}, {H}]",
               "Transformer encoder stack (Vaswani et al. 2017, Section 3.1)")
        st.caption(f"Layer {layer + 1} reads what layer {layer} wrote: one {H}-unit vector per token.")
    heat(steps.x, f"X: the input of layer {layer + 1}", "ins_x", "hidden unit")


def step_qkv():
    header(1, rf"Q = XW_Q + b_Q,\; K = XW_K + b_K,\; V = XW_V + b_V \quad (\text{{head {head + 1}: columns }}"
              rf"{head * d + 1}\ldots{(head + 1) * d})", f"[{T}, {d}] each for one head (d = H / A: {H} hidden units / {A} heads)",
           "Vaswani et al. 2017, Section 3.2.2 (multi-head attention)")
    cols = st.columns(3)
    for col, (label, m) in zip(cols, (("Q", steps.q), ("K", steps.k), ("V", steps.v))):
        with col:
            heat(m, f"{label} of head {head + 1}", f"ins_{label.lower()}", "unit of the head")
    shortest, longest = figures.key_lengths
    st.caption(f"The query of {tok!r} has length {figures.query_length:.2f}; the keys range from "
               f"{shortest:.2f} to {longest:.2f}.")


def step_scores():
    header(2, rf"S_{{ij}} = \frac{{q_i \cdot k_j}}{{\sqrt{{d}}}} = \frac{{q_i \cdot k_j}}{{\sqrt{{{d}}}}}",
           f"[{T}, {T}]", "Vaswani et al. 2017, Section 3.2.1 (scaled dot-product attention)")
    row = steps.scores[token]
    bars({"score": row}, f"Scores of {tok!r} against every token", "ins_scores_row", "score")
    heat(steps.scores, "All scores (rows: queries, columns: keys)", "ins_scores", "key token", x=labels(T),
         scale="Viridis", zmid=None, z_title="score")
    j = figures.top_key
    st.caption(f"{tok!r} scores highest against {tokens[j]!r} (position {j}, {figures.top_score:.2f}); dividing by "
               f"√{d} = {figures.scale:.2f} keeps the scores small enough for a soft softmax.")


def step_mask():
    header(3, r"M_{ij} = \begin{cases}0 & j \text{ visible to } i\\ -\infty & \text{padding, or } j > i "
              r"\text{ in a left-to-right model}\end{cases}", f"[{T}, {T}]",
           "BERT, Section 3 and Figure 3 (BERT's bidirectional vs OpenAI GPT's left-to-right attention)")
    own, other = ("left-to-right", "bidirectional") if steps.causal else ("bidirectional", "left-to-right")
    m1, m2 = st.columns(2)
    with m1:
        heat(steps.blocked, f"This model's mask ({own}): black = blocked", "ins_mask", "key token", x=labels(T),
             scale="Greys", zrange=(0, 1), z_title="blocked")
    with m2:
        heat(steps.other_blocked, f"The {other} mask on the same input", "ins_mask_other", "key token", x=labels(T),
             scale="Greys", zrange=(0, 1), z_title="blocked")
    series = {f"{own} (this model)": steps.probs[token], f"{other} mask, same scores": steps.other_probs[token]}
    ltr = causal_checkpoints(runs_root())
    if ltr and not steps.causal:
        pick = st.selectbox("Compare with a left-to-right checkpoint", [None] + [c.path for c in ltr],
                            key="ins_ltr", persist_state="session", format_func=lambda p: "none" if p is None else
                            next(c.label for c in ltr if c.path == p))
        if pick:
            other_model, err = load(pick, "BertForPreTraining")
            if err:
                st.warning(err)
            elif other_model.config.num_layers <= layer or other_model.config.num_heads <= head:  # (each alone)
                st.info(f"That checkpoint has {other_model.config.num_layers} layer(s) of "
                        f"{other_model.config.num_heads} head(s), no layer {layer + 1}, head {head + 1}; pick a "
                        "smaller layer or head above.")
            else:
                theirs = _steps(pick, text, text_b, layer, head, int(pad_to))
                if theirs.tokens == tokens:
                    series["a real left-to-right model"] = theirs.probs[token]
                else:
                    st.info("That checkpoint splits the input into other WordPieces (another vocabulary), so its "
                            "row cannot be drawn on the same tokens.")
    elif not steps.causal:
        st.caption("No left-to-right checkpoint found under the runs folder: the ablation studio's LTR "
                   "pre-training writes one; it would be drawn here beside this model.")
    bars(series, f"Attention of {tok!r} under each mask", "ins_mask_rows", "weight")
    st.caption(f"Under this model's mask {tok!r} sees {figures.visible} of {T} positions; under the {other} mask its "
               f"attention to itself goes from {steps.probs[token, token]:.0%} to "
               f"{steps.other_probs[token, token]:.0%}. A left-to-right model's first token, [CLS], sees only "
               "itself, which is why this project's LTR ablation (Table 5's LTR & No NSP) reads the last token "
               "instead.")


def step_softmax():
    header(4, r"P_{ij} = \frac{\exp(S_{ij} + M_{ij})}{\sum_k \exp(S_{ik} + M_{ik})}", f"[{T}, {T}], rows sum to 1",
           "Vaswani et al. 2017, Section 3.2.1")
    bars({"weight": steps.probs[token]}, f"Attention row of {tok!r}", "ins_softmax_row", "weight")
    heat(steps.probs, f"Attention of head {head + 1} (what the Attention page's bertviz draws)", "ins_probs",
         "key token", x=labels(T), scale="Blues", zmid=None, z_title="weight")
    st.caption(describe_row(steps, token))


def step_weighted_sum():
    header(5, r"z_i = \sum_j P_{ij}\, v_j", f"[{T}, {d}] for one head", "Vaswani et al. 2017, Section 3.2.1")
    heat(figures.contributions, f"P[{token}, j] · v_j: what each token adds to z of {tok!r}", "ins_parts", "unit of the head")
    strips({"z (the sum)": steps.context[token]}, f"z of {tok!r} in head {head + 1}", "ins_z")
    top = figures.top_contributor
    st.caption(f"The largest contribution comes from {tokens[top]!r} (position {top}): length "
               f"{figures.top_contribution:.2f} of the sum's {figures.context_length:.2f}.")


def step_output():
    header(6, r"Y = \mathrm{LayerNorm}\big(X + \mathrm{Concat}(z^{(1)},\ldots,z^{(A)})\,W_O + b_O\big)",
           f"[{T}, {A}·{d}] → [{T}, {H}]", "Vaswani et al. 2017, Sections 3.2.2 and 3.1 (residual + LayerNorm)")
    strips({"all heads side by side": steps.all_heads[token], "· W_O + b_O": steps.attention_out[token],
            "+ X (residual)": steps.attention_sum[token], "Y = LayerNorm": steps.attended[token]},
           f"{tok!r} through the attention sub-layer's output", "ins_attn_out")
    st.caption(f"For {tok!r} the attention output is {figures.attention_ratio:.2f}× as long as the residual X it is "
               f"added to; after LayerNorm, Y has cosine {figures.attended_cosine:.2f} with X.")


def step_ffn():
    header(7, r"h^{(\ell)} = \mathrm{LayerNorm}\big(Y + \mathrm{GELU}(YW_1 + b_1)\,W_2 + b_2\big)",
           f"[{T}, {H}] → [{T}, {steps.ff_hidden.shape[1]}] → [{T}, {H}]",
           "Vaswani et al. 2017, Section 3.3; BERT uses GELU (Appendix A.2, after OpenAI GPT)")
    strips({"Y W_1 + b_1": steps.ff_hidden[token], "GELU": steps.ff_gelu[token]},
           f"{tok!r} in the {steps.ff_hidden.shape[1]}-unit inner layer", "ins_ff_inner")
    strips({"· W_2 + b_2": steps.ff_out[token], "+ Y (residual)": steps.output_sum[token],
            "LayerNorm: the layer's output": steps.output[token]}, f"{tok!r} back to {H} units", "ins_ff_out")
    st.caption(f"{figures.active_inner:.0%} of the inner units are clearly on (GELU > 0.1) for {tok!r}. The layer's "
               f"output has cosine {figures.output_cosine:.2f} with the layer's input X.")


RENDER = [step_input, step_qkv, step_scores, step_mask, step_softmax, step_weighted_sum, step_output, step_ffn]


def move(delta: int):
    st.session_state["ins_step"] = min(len(STEPS), max(1, st.session_state.get("ins_step", 1) + delta))


st.divider()
b1, b2, b3, b4 = st.columns([1.3, 1.1, 5.6, 1.5])
at = st.session_state.get("ins_step", 1)  # (the buttons come before the slider that holds the step)
b1.button("◀ Previous", key="ins_prev", on_click=move, args=(-1,), disabled=at <= 1)
b2.button("Next ▶", key="ins_next", on_click=move, args=(1,), disabled=at >= len(STEPS))
step = b3.select_slider("Step", options=list(range(1, len(STEPS) + 1)), key="ins_step", persist_state="session",
                        format_func=lambda i: f"{i}. {STEPS[i - 1]}")
show_all = b4.toggle("All steps", key="ins_all",
                     persist_state="session", help="Every step on one page, one under the other.")
for i, render in enumerate(RENDER):
    if show_all or i == step - 1:
        render()
gap = _gap(name, text, text_b, layer, head, int(pad_to))
st.caption(f"Composed from the weights, these steps give layer {layer + 1}'s output. Against the model's own "
           f"forward pass on this input the largest difference is {gap:.1e} (float32 rounding).")
exports.bundle_button(bundle, "ins_bundle")
