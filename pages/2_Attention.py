import pandas as pd
import plotly.express as px
import streamlit as st

from bert_explorer.analysis.attention import (attention_maps, attention_rollout, describe_behaviours,
                                              head_ablation, head_stats)
from bert_explorer.analysis.bertviz_offline import OfflineAssetsMissing, render
from bert_explorer.app.state import load, model_picker
from bert_explorer.app.widgets import intro

st.set_page_config(page_title="Attention · BERT Explorer", layout="wide")
intro("Attention heads", """
Every encoder layer of BERT runs **A self-attention heads** side by side (Devlin et al. 2019,
Section 3, after Vaswani et al. 2017): each token spreads one unit of attention over all tokens,
left *and* right, and takes in a weighted mix of their vectors. Below you see those weights for
your sentence — drawn by bertviz (lines, darker = more attention), as heatmaps, summarised per
head, followed through the layers (rollout), and what happens when one head is switched off.
""")

STATS = {"to_cls": "attention to [CLS]", "to_sep": "attention to [SEP]", "to_self": "attention to itself",
         "to_prev": "attention to the previous token", "to_next": "attention to the next token",
         "to_punct": "attention to punctuation", "entropy": "entropy (nats; high = spread out)"}

name = model_picker()
loaded, error = load(name, "BertForPreTraining") if name else (None, "Choose a model in the sidebar.")
if error:
    st.info(error)
    st.stop()


@st.cache_data(show_spinner=False, max_entries=32)
def _attention(model: str, text: str, text_b: str | None, max_tokens: int):
    return attention_maps(load(model, "BertForPreTraining")[0], text, text_b, max_tokens)


@st.cache_data(show_spinner=False, max_entries=32)
def _ablation(model: str, text: str, text_b: str | None, layer: int, head: int, max_tokens: int):
    return head_ablation(load(model, "BertForPreTraining")[0], text, text_b, layer, head, max_tokens=max_tokens)


@st.cache_data(show_spinner="Drawing with bertviz…", max_entries=16)
def _bertviz(model: str, text: str, text_b: str | None, max_tokens: int, view: str):
    return render(_attention(model, text, text_b, max_tokens), view)


c1, c2 = st.columns(2)
text = c1.text_area("Sentence A", "the cat sat on the mat because it was warm .", key="att_a", height=70)
text_b = c2.text_area("Sentence B (optional)", "then it fell asleep in the sun .", key="att_b", height=70)
text_b = text_b.strip() or None
max_tokens = st.sidebar.slider("Max tokens drawn", 16, 256, 64, 16, key="att_max_tokens",
                               help="Attention data grows with the square of the length; longer inputs are cut.")
if not text.strip():
    st.info("Type a sentence A to see its attention.")
    st.stop()

result = _attention(name, text, text_b, max_tokens)
L, A = result.num_layers, result.num_heads
if result.truncated:
    st.info(f"The input was cut to {max_tokens} WordPieces (longest sentence first) to keep the drawing fast; "
            "raise *Max tokens drawn* in the sidebar to see more.")

tabs = st.tabs(["Head view", "Model view", "Heatmap", "Head behaviours", "Rollout", "Switch a head off"])


def bertviz_tab(view_name: str, caption: str) -> None:
    st.caption(caption)
    try:
        view = _bertviz(name, text, text_b, max_tokens, view_name)
    except OfflineAssetsMissing as e:
        st.warning(f"bertviz cannot draw offline: {e}")
        return
    if view.layers != list(range(L)):
        st.caption(f"Showing layers {', '.join(map(str, view.layers))} of 0–{L - 1} to keep the page light.")
    # The head view is a column of tokens; the model view a row of small pictures per layer.
    height = 170 + 23 * len(result.tokens) if view_name == "head" else 110 + 165 * len(view.layers)
    st.iframe(view.html, height=height)


with tabs[0]:
    bertviz_tab("head", "Pick a layer; click a coloured square to show or hide a head, hover a token to see only "
                "its lines. For a pair, *Attention* filters A→A, B→B, A→B and B→A.")
with tabs[1]:
    bertviz_tab("model", "All heads of all layers at once: one small picture per (layer, head). Look for heads "
                "that all point to [SEP] or [CLS], and for diagonal heads that look one token back or ahead.")

with tabs[2]:
    h1, h2 = st.columns(2)
    layer = h1.selectbox("Layer", range(L), key="att_hm_layer")
    head = h2.selectbox("Head", range(A), key="att_hm_head")
    fig = px.imshow(result.attentions[layer, head], x=list(range(len(result.tokens))),
                    y=list(range(len(result.tokens))), color_continuous_scale="Blues", zmin=0, zmax=1,
                    labels=dict(x="attended token (key)", y="attending token (query)", color="weight"),
                    aspect="auto", title=f"Layer {layer}, head {head}: each row sums to 1")
    ticks = dict(tickmode="array", tickvals=list(range(len(result.tokens))), ticktext=result.tokens)
    fig.update_layout(xaxis=ticks, yaxis=ticks, height=260 + 16 * len(result.tokens))
    st.plotly_chart(fig, key="att_heatmap")

with tabs[3]:
    stats = head_stats(result)
    st.caption("Each cell is one head: how much of its attention (averaged over the query tokens) follows a "
               "pattern. In BERT-Base, Clark et al. (2019) found heads that look almost only at the previous or "
               "next token, heads that park on [SEP], and broad heads in the first layers. "
               + describe_behaviours(stats))
    stat = st.selectbox("Pattern", list(STATS), format_func=STATS.get, key="att_stat")
    grid = stats.pivot(index="layer", columns="head", values=stat)
    fig = px.imshow(grid.values, x=[f"head {h}" for h in grid.columns], y=[f"layer {layer}" for layer in grid.index],
                    color_continuous_scale="Viridis", text_auto=".2f", aspect="auto",
                    zmin=0, zmax=None if stat == "entropy" else 1, labels=dict(color=stat))
    fig.update_layout(height=140 + 48 * L)
    st.plotly_chart(fig, key="att_stats_grid")
    behaviours = stats.pivot(index="layer", columns="head", values="behaviour")
    behaviours.columns = [f"head {h}" for h in behaviours.columns]
    st.dataframe(behaviours, key="att_behaviours")

with tabs[4]:
    st.caption("Attention rollout (Abnar & Zuidema 2020): the heads of a layer are averaged, the residual "
               "connection counts as attention to oneself, and the layers are multiplied — row *i* says how much "
               "of each *input* token has flowed into position *i* by that layer.")
    rollout = attention_rollout(result)
    r_layer = st.slider("After layer", 0, L - 1, L - 1, key="att_rollout_layer")
    fig = px.imshow(rollout[r_layer], color_continuous_scale="Oranges", zmin=0, aspect="auto",
                    labels=dict(x="input token", y="position", color="share"))
    ticks = dict(tickmode="array", tickvals=list(range(len(result.tokens))), ticktext=result.tokens)
    fig.update_layout(xaxis=ticks, yaxis=ticks, height=260 + 16 * len(result.tokens))
    st.plotly_chart(fig, key="att_rollout")
    cls_share = pd.DataFrame({"token": [f"{i}: {t}" for i, t in enumerate(result.tokens)],
                              "share": rollout[r_layer][0]})
    fig = px.bar(cls_share, x="token", y="share", title="What the [CLS] vector is made of (row 0)")
    st.plotly_chart(fig, key="att_rollout_cls")

with tabs[5]:
    st.caption("The head mask multiplies one head's output by 0. In BERT-Base, Michel et al. (2019) found that "
               "many heads can go with little change and a few matter a lot; try it on this model. With a "
               "masked-LM model, put a [MASK] in sentence A to see whether the predicted word changes.")
    m1, m2 = st.columns(2)
    a_layer = m1.selectbox("Layer", range(L), key="att_abl_layer")
    a_head = m2.selectbox("Head", range(A), key="att_abl_head")
    abl = _ablation(name, text, text_b, a_layer, a_head, max_tokens)
    st.metric("[CLS] vector, cosine with the intact model", f"{abl['cls_cosine']:.4f}",
              help="1 = unchanged. The [CLS] vector feeds NSP and sentence classifiers.")
    df = pd.DataFrame({"token": [f"{i}: {t}" for i, t in enumerate(abl["tokens"])],
                       "relative change": abl["relative_delta"]})
    fig = px.bar(df, x="token", y="relative change",
                 title=f"‖h′ − h‖ / ‖h‖ of the last layer, layer {a_layer} head {a_head} switched off")
    st.plotly_chart(fig, key="att_ablation")
    if abl["mlm"]:
        st.dataframe(pd.DataFrame(abl["mlm"]), hide_index=True, key="att_ablation_mlm")
