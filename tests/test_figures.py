"""Every chart of every exploration page, read as drawn (tests/figcheck.py), and the captions
that state a number held against the bar they name. (Next sentence probe and Nearest neighbours
draw tables and metrics, no chart.)"""
import re

import numpy as np
import plotly.express as px
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import figcheck
from shared import needs_model


# ----- the checker itself -----------------------------------------------------------------------------
def _spec(fig):
    return figcheck.figure(fig.to_json())


def test_the_checker_catches_series_stacked_into_one_unnamed_trace():
    """What px.bar(color="") draws: one trace, two values at each token, their sum as one bar."""
    df = pd.DataFrame({"token": ["[CLS]", "cat", "[CLS]", "cat"], "weight": np.array([0.9, 0.1, 0.6, 0.4]),
                       "": ["bidirectional", "bidirectional", "left-to-right", "left-to-right"]})
    found = figcheck.problems(_spec(px.bar(df, x="token", y="weight", color="", barmode="group")))
    assert any("trace '' draws 2 categories twice" in p for p in found)


def test_the_checker_reads_base64_arrays_and_bounds_weights():
    fig = px.imshow(np.array([[0.2, 1.4], [0.5, 0.5]]), labels=dict(color="weight"))
    assert '"bdata"' in fig.to_json()  # plotly sends numpy arrays as base64
    found = figcheck.problems(_spec(fig))
    assert len(found) == 1 and "outside [0, 1]" in found[0] and "1.4" in found[0]
    fine = px.imshow(np.array([[0.2, 0.8], [0.5, 0.5]]), labels=dict(color="weight"))
    assert figcheck.problems(_spec(fine)) == []
    scores = px.imshow(np.array([[-3.0, 4.0]]), labels=dict(color="score"))  # not a weight: unbounded
    assert figcheck.problems(_spec(scores)) == []


def test_the_checker_wants_compared_series_named_and_stacks_declared():
    import plotly.graph_objects as go

    two = go.Figure([go.Bar(x=["a", "b"], y=[0.2, 0.3]), go.Bar(x=["a", "b"], y=[0.4, 0.5])])
    assert any("have no name" in p for p in figcheck.problems(_spec(two)))
    named = go.Figure([go.Bar(x=["a", "b"], y=[0.2, 0.3], name="s"), go.Bar(x=["a", "b"], y=[0.4, 0.5], name="t")])
    assert figcheck.problems(_spec(named)) == []
    named.update_layout(barmode="stack", yaxis_title="probability")
    assert figcheck.problems(_spec(named)) == []  # named parts of one whole, under 1
    named.data[1].y = (0.9, 0.5)
    assert any("stacked bars reach 1.10" in p for p in figcheck.problems(_spec(named)))
    assert figcheck.bar(_spec(named), "t", "b") == pytest.approx(0.5)


def test_the_checker_finds_names_that_plotly_would_draw_on_a_number_line():
    import plotly.graph_objects as go

    labels = go.Figure(go.Bar(x=["0", "1"], y=[1.0, 0.0], name="accuracy"))
    assert figcheck.names_read_as_numbers(_spec(labels))  # ticked -0.5, 0, 0.5, 1, 1.5
    assert figcheck.names_read_as_numbers(_spec(go.Figure(go.Bar(x=["0", "1", "other"], y=[1, 2, 3]))))
    labels.update_xaxes(type="category")
    assert figcheck.names_read_as_numbers(_spec(labels)) == []
    assert figcheck.names_read_as_numbers(_spec(go.Figure(go.Bar(x=["neg", "pos", "mixed", "1"], y=[1, 2, 3, 4])))) == []
    assert figcheck.names_read_as_numbers(_spec(go.Figure(go.Bar(x=[0, 1], y=[1, 2])))) == []  # numbers, as numbers
    matrix = px.imshow([[4, 0], [0, 4]], x=["0", "1"], y=["0", "1"])
    assert len(figcheck.names_read_as_numbers(_spec(matrix))) == 2


# ----- the pages ---------------------------------------------------------------------------------------
def _app(page: str, model: str | None = None, **state) -> AppTest:
    at = AppTest.from_file(f"../{page}", default_timeout=300)
    if model:
        at.session_state["be_model_choice"] = model
    for k, v in state.items():
        at.session_state[k] = v
    return at.run()


COUNTS: dict[str, int] = {}
BOUNDED: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print(f"\nfigure checker: {sum(COUNTS.values())} charts on {len(COUNTS)} page views, {sum(BOUNDED.values())} "
          f"of them with values bounded by what they are (weights, probabilities, CKA, cosines): {COUNTS}")


def _checked(at, view: str, **kwargs) -> list:
    assert not at.exception, at.exception
    figs = figcheck.figures(at)
    for f in figs:
        figcheck.check(f, **kwargs.get(f.title, {}))
    COUNTS[view] = len(figs)
    BOUNDED[view] = sum(any(figcheck.BOUNDED.search(f.value_title(t)) or figcheck.COSINE.search(f.value_title(t))
                            for t in f.traces) for f in figs)
    return figs


@needs_model("explorer-mini", "minilm-mlm-nsp")
@pytest.mark.parametrize("page,state", [
    ("pages/1_Tokens_and_embeddings.py", {}), ("pages/4_Masked_word_probe.py", {}),
    # Attention sends a tab's charts only while it is open: each tab with charts, in turn
    ("pages/2_Attention.py", {"att_view": "Heatmap"}), ("pages/2_Attention.py", {"att_view": "Head behaviours"}),
    ("pages/2_Attention.py", {"att_view": "Rollout and flow"}), ("pages/2_Attention.py", {"att_view": "Switch a head off"})],
    ids=lambda v: v if isinstance(v, str) else v.get("att_view", ""))
def test_every_chart_of_the_page_is_true_as_drawn(page, state):
    at = _app(page, **state)
    view = f"{page} {state.get('att_view', '')}".strip()
    figs = _checked(at, view)
    assert figs, f"{view} drew no chart"


@needs_model("explorer-mini", "minilm-mlm-nsp")
def test_every_chart_of_inside_one_layer_all_steps_with_padding_and_a_pair():
    at = _app("pages/3_Inside_one_layer.py", ins_all=True, ins_pad=32)
    figs = _checked(at, "pages/3_Inside_one_layer.py (all steps)")
    assert len(at.subheader) == 8 and len(figs) >= 15
    # step 3's caption names the key its token scores highest against: that bar is the highest
    caption = next(c.value for c in at.caption if "scores highest against" in c.value)
    word, j, value = re.search(r"against '(.+?)' \(position (\d+), (-?[0-9.]+)\)", caption).groups()
    scores = next(f for f in figs if f.title.startswith("Scores of"))
    assert figcheck.bar(scores, "score", f"{j}: {word}") == pytest.approx(float(value), abs=0.005)
    real = [y for x, y in zip(scores.traces[0].x, scores.traces[0].y) if "[PAD]" not in x]
    assert float(value) == pytest.approx(max(real), abs=0.005)


@needs_model("explorer-mini", "minilm-mlm-nsp")
def test_inside_one_layer_mask_step_draws_each_mask_as_its_own_bar_and_the_caption_reads_them():
    """Step 4 teaches Figure 3: the token's attention under this model's mask and under the other
    one, side by side. Stacked into one trace, [CLS] reached 1.5 and the caption contradicted it."""
    at = _app("pages/3_Inside_one_layer.py", ins_pad=32, ins_step=4)
    fig = next(f for f in figcheck.figures(at) if f.title.startswith("Attention of"))
    figcheck.check(fig)
    names = [t.name for t in fig.traces]
    assert names == ["bidirectional (this model)", "left-to-right mask, same scores"]
    for t in fig.traces:  # each is one softmax row: it sums to 1 over the keys
        assert np.asarray(t.y, dtype=float).sum() == pytest.approx(1.0, abs=1e-4)
    token = at.selectbox(key="ins_token").value
    label = at.selectbox(key="ins_token").options[token] if isinstance(token, int) else token
    caption = next(c.value for c in at.caption if "attention to itself goes from" in c.value)
    own, other = (float(x) / 100 for x in re.search(r"goes from (\d+)% to (\d+)%", caption).groups())
    assert figcheck.bar(fig, names[0], label) == pytest.approx(own, abs=0.005)
    assert figcheck.bar(fig, names[1], label) == pytest.approx(other, abs=0.005)


@needs_model("explorer-mini", "minilm-mlm-nsp")
@pytest.mark.parametrize("baseline", ["words", "parts"])
@pytest.mark.parametrize("target", ["masked word", "next sentence"])
def test_every_chart_of_attributions_is_true_as_drawn(target, baseline):
    at = _app("pages/6_Attributions.py", attr_baseline=baseline)
    radio = at.radio(key="attr_target")
    radio.set_value(next(o for o in radio.options if o.startswith(target))).run()
    figs = _checked(at, f"pages/6_Attributions.py ({target}, {baseline} baseline)")
    assert figs


@needs_model("explorer-mini", "minilm-mlm-nsp")
def test_every_chart_of_two_models_is_true_as_drawn():
    at = _app("pages/7_Two_models.py")
    assert _checked(at, "pages/7_Two_models.py")


@needs_model("explorer-mini", "minilm-mlm-nsp")
def test_every_chart_of_what_each_layer_knows_is_true_as_drawn(tmp_path, monkeypatch):
    # its own cache: the probing page's own test expects to find the probes not yet run
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    at = _app("pages/8_What_each_layer_knows.py", "explorer-mini", probe_n_sent=60, probe_n_art=40)
    if "probe_run" in {b.key for b in at.button}:
        at.button(key="probe_run").click().run()
    assert len(_checked(at, "pages/8_What_each_layer_knows.py")) == 2


def test_a_run_of_a_few_steps_is_drawn_on_whole_steps():
    """A fine-tuning of three steps drew its dev curve on ticks 1, 1.5, 2, 2.5, 3: steps are whole."""
    from bert_explorer.app.run_figures import finetune_figures

    rows = [{"split": "train", "step": s, "epoch": 1, "loss": 1 / s} for s in (1, 2, 3)]
    rows += [{"split": "dev", "step": 3, "epoch": 1, "accuracy": 0.5}]
    assert {k: f.layout.xaxis.dtick for k, f in finetune_figures(rows).items()} == {"loss": 1, "dev": 1}
    long = [{"split": "train", "step": s, "epoch": 1, "loss": 1 / s} for s in range(1, 400, 10)]
    assert finetune_figures(long)["loss"].layout.xaxis.dtick is None  # plotly's own ticks, whole at that range


def test_the_dev_curve_says_when_it_was_evaluated():
    """A run evaluated every 10 steps (steps 10, 20, 30, 38) was titled "Dev metrics after each epoch"."""
    from bert_explorer.app.run_figures import finetune_figures

    train = [{"split": "train", "step": s, "epoch": 1, "loss": 1 / s} for s in range(1, 39)]
    every = train + [{"split": "dev", "step": s, "epoch": round(s / 19, 2), "accuracy": 0.5} for s in (10, 20, 30)] \
        + [{"split": "dev", "step": 38, "epoch": 2, "accuracy": 0.6}]
    assert finetune_figures(every)["dev"].layout.title.text == "Dev metrics every 10 steps and at the end"
    epochs = train + [{"split": "dev", "step": s, "epoch": e, "accuracy": 0.5} for s, e in ((19, 1), (38, 2))]
    assert finetune_figures(epochs)["dev"].layout.title.text == "Dev metrics after each epoch"
    # stopped at step 12 (measured there), resumed, then its two epoch ends: not "every 12 steps"
    stopped = train + [{"split": "dev", "step": s, "epoch": e, "accuracy": 0.5} for s, e in ((12, 0.05), (225, 1),
                                                                                             (450, 2))]
    assert finetune_figures(stopped)["dev"].layout.title.text == \
        "Dev metrics after each epoch and where the run was stopped"


def test_a_rate_is_drawn_from_zero():
    """One throughput reading (4,199 tokens/s) was drawn on an axis of 4,198.5 | 4199 | 4,199.5: a rate's axis
    starts at 0, so one reading, or two that differ by 1 %, read as what they are."""
    from bert_explorer.app.run_figures import pretrain_figures

    figs = pretrain_figures([{"split": "train", "step": 10, "loss": 7.0, "tokens_per_s": 4199.0, "mfu": 0.02}])
    assert figs["speed"].layout.yaxis.rangemode == "tozero" and figs["mfu"].layout.yaxis.rangemode == "tozero"
    assert figs["loss"].layout.yaxis.rangemode is None  # a loss is read by its changes, not from 0
    assert figs["speed"].layout.yaxis.title.text == "tokens/s"  # one measure: the axis names it, not "value"


def test_a_pre_training_s_progress_bar_never_trails_its_curves(tmp_path):
    """The header said "step 20 of 30" above a held-out curve already at step 24: the status is written at
    log steps, the metrics at evaluations too."""
    import json as _json

    from streamlit.testing.v1 import AppTest

    run = tmp_path / "pretrain-live"
    run.mkdir()
    (run / "config.json").write_text(_json.dumps({"kind": "pretrain"}))
    (run / "status.json").write_text(_json.dumps({"state": "running", "step": 20, "max_steps": 30}))
    (run / "metrics.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in (
        {"split": "train", "step": 20, "loss": 7.5}, {"split": "eval", "step": 24, "mlm_accuracy": 0.05})))

    def panel(path):
        from bert_explorer.app import runs_view
        from bert_explorer.runs.run import Run

        runs_view._panel(Run(path), Run(path).status(), "pretrain", "t")

    at = AppTest.from_function(panel, args=(str(run),)).run()
    assert not at.exception
    (bar,) = at.get("progress")
    assert "step 24 of 30" in bar.proto.text, bar.proto.text


def test_a_confusion_matrix_of_many_classes_draws_the_most_frequent_ones():
    """500 classes drew a colour bar 15,000 pixels tall and no cell to read."""
    from bert_explorer.app.run_figures import confusion_shown

    n = 40
    matrix = [[(i + 1) if i == j else (1 if j == (i + 1) % n else 0) for j in range(n)] for i in range(n)]
    labels = [f"c{i}" for i in range(n)]
    shown, kept, title, note = confusion_shown(matrix, labels, most=3)
    assert kept == ["c37", "c38", "c39"]  # the most dev examples (row sums 39, 40, 41), in their order
    assert shown == [[38, 1, 0], [0, 39, 1], [0, 0, 40]]  # c39's answer of c0 is not among them: left out
    assert title == "Confusion matrix (dev): the 3 classes with the most dev examples, of 40" and "every class" in note
    assert confusion_shown(matrix[:3], labels[:3], most=3)[1:] == (labels[:3], "Confusion matrix (dev)", None)
