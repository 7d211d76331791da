"""Integrated Gradients on the input embeddings (bert_explorer.analysis.attributions) and its page (Attributions)."""
import json
import re
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint
from bert_explorer.analysis.attributions import integrated_gradients as ig
from bert_explorer.analysis.attributions.integrated_gradients import (BASELINES, EXAMPLE_MASKED, EXAMPLE_PAIR, Attributions,
                                                 baseline_inputs, baseline_note, classifier_runs, explain_classifier,
                                                 explain_masked_word, explain_next_sentence)
from bert_explorer.analysis.attributions.reliability import reliability, step_schedule
from bert_explorer.checkpoint import DEFAULT_MODEL
from bert_explorer.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer
from shared import needs_model, save_tiny_bert

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "6_Attributions.py")
MLM_TEXT = EXAMPLE_MASKED  # the page's example
A, B = EXAMPLE_PAIR


def assert_complete(r, max_relative=0.05):
    """Σ over tokens and the three parts = f(x) - f(x'), up to captum's reported delta."""
    assert r.difference != 0
    assert abs(r.attribution_sum - r.difference) <= abs(r.delta) + 1e-4 * max(1.0, abs(r.difference))
    assert r.relative_delta < max_relative
    assert len(r.tokens) == len(r.token) == len(r.segment) == len(r.position)


def assert_no_grad(model):
    assert all(p.grad is None for p in model.parameters())


@pytest.fixture(scope="module")
def mini():
    return checkpoint.load("explorer-mini", "BertForPreTraining")


WORDS = ["the", "shares", "fell", "rose", "sharply", "after", "bank", "results", "good", "bad", "news",
         "market", "a", "is", "was", ".", ",", "'", "s"]


def make_classifier(directory: Path, labels=("business", "sport", "tech")) -> Path:
    """A small random BertForSequenceClassification saved as a checkpoint directory."""
    run = None
    if Path(directory).name == "model" and not (Path(directory).parent / "status.json").exists():
        from bert_explorer.runs.run import Run  # a fine-tuning run's folder, as run_finetuning makes it first

        run = Run(Path(directory).parent).create({}, "finetune")
    saved = save_tiny_bert(directory, SPECIAL_TOKENS + WORDS, architecture="BertForSequenceClassification",
                           initializer_range=0.2, id2label=dict(enumerate(labels)))
    if run is not None:
        run.write_status(state="finished")
    return saved


# ----- the method ----------------------------------------------------------------------------

@needs_model("explorer-mini")
def test_masked_word_attributions_are_complete(mini):
    r = explain_masked_word(mini, MLM_TEXT, n_steps=50)
    assert_complete(r)
    assert r.details["word"] == r.details["top"][0]["token"]  # default: the top-1 prediction
    assert r.f_input == pytest.approx(torch.tensor(r.details["probability"]).log().item(), abs=1e-4)
    assert_no_grad(mini.model)


@needs_model("explorer-mini")
def test_next_sentence_attributions_are_complete_and_segment_b_matters(mini):
    r = explain_next_sentence(mini, A, B, n_steps=50, baseline="parts")
    assert_complete(r)
    sep = r.tokens.index("[SEP]")
    assert all(s == 0.0 for s in r.segment[:sep + 1])   # segment A = its baseline: exactly 0
    assert any(s != 0.0 for s in r.segment[sep + 1:])   # segment B moved from A to B
    assert 0 < r.details["p_is_next"] < 1
    words = explain_next_sentence(mini, A, B, n_steps=50)  # default: segment B is segment B in the baseline too
    assert_complete(words)
    assert words.baseline == "words" and all(v == 0.0 for v in words.segment + words.position)
    assert_no_grad(mini.model)


def test_classifier_attributions_are_complete(tmp_path):
    loaded = checkpoint.load(make_classifier(tmp_path / "clf"))
    r = explain_classifier(loaded, "the shares fell sharply after the bank results .", n_steps=50)
    assert_complete(r)
    assert r.details["label"] == r.details["predicted"]
    other = next(n for n in ("business", "sport", "tech") if n != r.details["label"])
    r2 = explain_classifier(loaded, "the shares fell sharply after the bank results .", label=other, n_steps=50)
    assert_complete(r2)
    assert r2.total != r.total
    assert_no_grad(loaded.model)


@needs_model("explorer-mini")
@pytest.mark.parametrize("baseline", list(BASELINES))
def test_tokens_equal_to_their_baseline_get_exactly_zero(mini, baseline):
    r = explain_masked_word(mini, MLM_TEXT, baseline=baseline)
    for i, (t, b) in enumerate(zip(r.tokens, r.baseline_tokens)):
        if t in ("[CLS]", "[SEP]", "[MASK]"):
            assert b == t and r.token[i] == 0.0
        else:
            assert b == "[PAD]"
    assert all(s == 0.0 for s in r.segment)  # one sentence: all segment A, as in the baseline
    assert r.position[0] == 0.0              # [CLS] sits at position 0, the baseline position
    assert sum(abs(x) for x in r.token) > 0
    if baseline == "words":                  # every position as in the input: no position part at all
        assert all(p == 0.0 for p in r.position) and r.total == r.token
    else:
        assert any(p != 0.0 for p in r.position[1:])


def test_the_default_baseline_keeps_positions_and_segments():
    tok = WordPieceTokenizer({t: i for i, t in enumerate(SPECIAL_TOKENS + WORDS)})
    enc = tok.encode("the shares [MASK] sharply .", "bad news .")
    inputs = {"input_ids": torch.tensor([enc.input_ids]), "token_type_ids": torch.tensor([enc.token_type_ids]),
              "position_ids": torch.arange(len(enc.input_ids)).unsqueeze(0)}
    assert inputs["token_type_ids"].any()  # a pair: segment B is there to keep
    words, parts = baseline_inputs(tok, inputs), baseline_inputs(tok, inputs, "parts")
    assert torch.equal(words["input_ids"], parts["input_ids"])
    assert tok.convert_ids_to_tokens(words["input_ids"][0].tolist()) == [
        "[CLS]", "[PAD]", "[PAD]", "[MASK]", "[PAD]", "[PAD]", "[SEP]", "[PAD]", "[PAD]", "[PAD]", "[SEP]"]
    assert torch.equal(words["token_type_ids"], inputs["token_type_ids"])
    assert torch.equal(words["position_ids"], inputs["position_ids"])
    assert not parts["token_type_ids"].any() and not parts["position_ids"].any()
    with pytest.raises(ValueError, match="unknown baseline 'zeros'; choose words or parts"):
        baseline_inputs(tok, inputs, "zeros")


@needs_model(DEFAULT_MODEL)
def test_the_default_example_credits_the_context_words():
    """on the page's example and the default model, the special tokens, the [MASK] and the
    segment and position parts together get under 10 % of |f(x) - f(x')| (the "parts" baseline gave the
    position of the [MASK] 8.75 of 10.59), and completeness holds within the reliability rule."""
    r = explain_masked_word(checkpoint.load(DEFAULT_MODEL, "BertForPreTraining"), MLM_TEXT)
    assert r.baseline == "words" and r.reliability.reliable
    assert abs(r.attribution_sum - r.difference) <= 0.05 * abs(r.difference)
    structural = sum(abs(r.total[i]) for i, t in enumerate(r.tokens) if t in ("[CLS]", "[SEP]", "[MASK]"))
    structural += sum(abs(v) for v in r.segment + r.position)
    assert structural < 0.10 * abs(r.difference)
    top = r.ranked_words()[:3]
    assert all(share > 0.10 for _, _, share in top)  # the context words now carry the difference
    assert sum(share for _, _, share in r.ranked_words()) == pytest.approx(1.0, abs=0.05)


def _riemann(model, score, inputs, baselines, steps=2000):
    """Integrated Gradients by the definition, without captum: the midpoint Riemann sum of the gradient of
    ``score`` along the straight line from the baseline's three embedding vectors to the input's, times
    (x - x'); per token and part, summed over H. ``score(model)`` runs the model and returns [B] numbers."""
    emb = model.bert.embeddings
    lookups = (emb.word_embeddings, emb.token_type_embeddings, emb.position_embeddings)
    keys = ("input_ids", "token_type_ids", "position_ids")
    with torch.no_grad():
        x = [layer(inputs[k]) for layer, k in zip(lookups, keys)]       # 3 x [1, T, H]
        x0 = [layer(baselines[k]) for layer, k in zip(lookups, keys)]
    total = [torch.zeros_like(v) for v in x]
    for alphas in ((torch.arange(steps) + 0.5) / steps).split(250):
        a = alphas.view(-1, 1, 1)
        path = [(b + a * (v - b)).requires_grad_(True) for v, b in zip(x, x0)]  # 3 x [n, T, H]
        emb.parts = lambda *args, **kw: path                            # the model's input, moved along the path
        try:
            grads = torch.autograd.grad(score(model, len(alphas)).sum(), path)
        finally:
            del emb.parts
        total = [t + g.sum(0, keepdim=True) for t, g in zip(total, grads)]
    return [((v - b) * t / steps)[0].sum(-1) for v, b, t in zip(x, x0, total)]  # 3 x [T]


@pytest.mark.parametrize("baseline", list(BASELINES))
def test_attributions_match_a_riemann_sum_of_the_definition(tmp_path, baseline):
    loaded = checkpoint.load(make_classifier(tmp_path / "clf"))
    text, text_b = "the shares fell sharply after the bank results .", "bad news for the market ."
    r = explain_classifier(loaded, text, text_b, n_steps=200, max_steps=200, baseline=baseline)
    k = ["business", "sport", "tech"].index(r.details["label"])
    tok, model = loaded.tokenizer, loaded.model.eval()
    enc = tok.encode(text, text_b)
    inputs = {"input_ids": torch.tensor([enc.input_ids]), "token_type_ids": torch.tensor([enc.token_type_ids]),
              "position_ids": torch.arange(len(enc.input_ids)).unsqueeze(0)}
    baselines = baseline_inputs(tok, inputs, baseline)

    def score(m, n):  # log P(class k); the ids only set the shapes, the embeddings come from the path
        ids = {key: v.expand(n, -1) for key, v in inputs.items()}
        return m(**ids).logits.float().log_softmax(-1)[:, k]

    expected = _riemann(model, score, inputs, baselines)
    for part, ours, theirs in zip(("token", "segment", "position"), (r.token, r.segment, r.position), expected):
        assert ours == pytest.approx(theirs.tolist(), abs=1e-5), part  # they agree to ~1e-8; values ~0.01-0.2
    with torch.no_grad():
        f_x = score(model, 1).item()
        model.bert.embeddings.parts = lambda *a, **kw: [lk(baselines[key]) for lk, key in zip(
            (model.bert.embeddings.word_embeddings, model.bert.embeddings.token_type_embeddings,
             model.bert.embeddings.position_embeddings), ("input_ids", "token_type_ids", "position_ids"))]
        f_x0 = score(model, 1).item()
        del model.bert.embeddings.parts
    assert r.f_input == pytest.approx(f_x, abs=1e-5) and r.f_baseline == pytest.approx(f_x0, abs=1e-5)
    assert sum(sum(t) for t in expected).item() == pytest.approx(f_x - f_x0, rel=1e-3)  # completeness, by hand
    if baseline == "words":
        assert not any(r.segment + r.position)
    else:
        assert any(r.segment) and any(r.position)


@needs_model("explorer-mini")
def test_the_target_word_changes_the_attributions(mini):
    first = explain_masked_word(mini, MLM_TEXT)
    second_word = first.details["top"][1]["token"]
    second = explain_masked_word(mini, MLM_TEXT, second_word)
    assert second.details["word"] == second_word
    assert second.f_input < first.f_input and second.total != first.total
    with pytest.raises(ValueError, match="word pieces"):
        explain_masked_word(mini, MLM_TEXT, "antidisestablishmentarianism")
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        explain_masked_word(mini, "no mask here .")
    # the probes' sentences: a lowercase [mask] is ordinary text, and a [MASK] past the positions is not read
    with pytest.raises(ValueError, match="“\\[mask\\]” is read as ordinary text"):
        explain_masked_word(mini, "the cat sat on the [mask] .")
    with pytest.raises(ValueError, match="lies past the first 512 WordPieces"):
        explain_masked_word(mini, "one " * 600 + "[MASK] .")
    # a piece written as the vocabulary writes it (the top predictions show "##s"), not split into #, #, s
    assert explain_masked_word(mini, MLM_TEXT, "##s", n_steps=8, max_steps=8).details["word"] == "##s"


def test_dropout_is_off_and_the_model_is_left_as_it_was(tmp_path):
    loaded = checkpoint.load(make_classifier(tmp_path / "clf"))
    loaded.model.train()  # a caller's model in training mode: dropout must still not apply
    runs = [explain_classifier(loaded, "good news for the market .", n_steps=20) for _ in range(2)]
    assert runs[0].total == runs[1].total and runs[0].f_input == runs[1].f_input
    assert loaded.model.training and all(m.training for m in loaded.model.modules())
    assert_no_grad(loaded.model)
    assert not any(m._forward_hooks for m in loaded.model.modules())  # captum's hooks went elsewhere


def test_classifier_runs_lists_only_sequence_classifiers_ablation_cells_included(tmp_path):
    from bert_explorer.runs.run import Run

    root = tmp_path / "runs"
    Run(root / "other").create({}, "finetune")
    Run(root / "abl").create({}, "ablate")
    make_classifier(root / "topics" / "model")
    make_classifier(root / "abl" / "cells" / "sst__tiny" / "model")  # the old walker missed these
    (root / "other" / "model").mkdir(parents=True)
    (root / "other" / "model" / "config.json").write_text('{"architectures": ["BertForPreTraining"]}')
    runs = classifier_runs(root)
    assert [r["name"] for r in runs] == ["abl/cells/sst__tiny", "topics"]
    assert runs[1]["labels"] == ["business", "sport", "tech"]
    assert classifier_runs(tmp_path / "nowhere") == []


# ----- the page ------------------------------------------------------------------------------

def _chart(at):
    """The page's one chart (its plotly spec as a dict), after checking the rules every chart keeps (
    item 3): every series is named, no series has two values at one x, and a colour means one thing."""
    (chart,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    meaning = {}
    for trace in chart["data"]:
        assert trace.get("name"), f"a {trace['type']} series without a name"
        assert len(set(trace["x"])) == len(trace["x"]), f"{trace['name']}: two values at one x"
        colour = trace["marker"]["color"]
        assert isinstance(colour, str), f"{trace['name']}: one colour per series"
        assert meaning.setdefault(colour, trace["name"]) == trace["name"], f"{colour} means two things"
    return chart


def _series(at):
    return {t["name"]: t["y"] for t in _chart(at)["data"]}


@needs_model(DEFAULT_MODEL)
def test_page_explains_a_masked_word_and_reacts_to_the_sentence():
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception
    assert at.title[0].value == "Attributions"
    assert any("Sundararajan" in m.value for m in at.markdown)
    first = _series(at)
    assert list(first) == ["word (its token embedding)"]  # the default baseline: words only, nothing else to show
    assert len(at.metric) == 5  # f(x), f(baseline), their difference, the delta, the steps used
    at.text_input(key="attr_mlm_text").set_value("she opened the [MASK] and a cold wind blew in .").run()
    assert not at.exception
    assert _series(at) != first


@needs_model(DEFAULT_MODEL)
def test_the_pages_zip_says_what_was_asked(monkeypatch):
    """input.json held the score and the tokens only: not whether a masked word or a pair was explained, against
    which baseline, or with how many steps."""
    import io
    import zipfile

    from bert_explorer.app import exports

    bundles = []
    monkeypatch.setattr(exports, "bundle_button", lambda bundle, key, container=None: bundles.append(bundle))
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="attr_target").set_value("next sentence").run()
    assert not at.exception
    with zipfile.ZipFile(io.BytesIO(exports.shown_bundle(bundles[-1]).zip_bytes())) as z:
        inputs = json.loads(z.read("input.json"))["inputs"]
    assert inputs["explain"] == "next sentence" and inputs["baseline"] == at.radio(key="attr_baseline").value
    assert inputs["integration steps to start with"] == at.slider(key="attr_steps").value
    assert inputs["steps tried"] and inputs["score"].startswith("log-odds of IsNext")


@needs_model(DEFAULT_MODEL)
def test_page_says_why_a_sentence_has_no_mask_to_explain():
    """A lowercase [mask] left the page blank: no chart and no sentence (the sentence was kept back for a
    [MASK] past what the box reads, and "[mask]".upper() looked like one)."""
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.text_input(key="attr_mlm_text").set_value("the cat sat on the [mask] .").run()
    assert not at.exception and not at.get("plotly_chart")
    assert any("is read as ordinary text" in i.value for i in at.info), [i.value for i in at.info]


@needs_model(DEFAULT_MODEL)
def test_page_default_names_the_baseline_and_captions_this_models_words():
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception
    assert at.radio(key="attr_baseline").value == "words"
    assert BASELINES["words"].measures in [c.value for c in at.caption]
    r = explain_masked_word(checkpoint.load(DEFAULT_MODEL, "BertForPreTraining"), MLM_TEXT)
    assert _series(at)["word (its token embedding)"] == pytest.approx(r.total, abs=1e-4)
    (caption,) = [c.value for c in at.caption if "pushed f up most" in c.value]
    listed = ", ".join(f"{label} {v:+.2f} ({share:.0%})" for label, v, share in r.ranked_words()[:3])
    assert f"f(x) − f(baseline) = {r.difference:.2f}" in caption and listed in caption
    assert "[CLS], [MASK], [SEP] are the same in the baseline and get exactly 0" in caption


@needs_model(DEFAULT_MODEL)
def test_page_splits_into_token_segment_and_position_on_request():
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="attr_baseline").set_value("parts").run()
    assert not at.exception
    assert BASELINES["parts"].measures in [c.value for c in at.caption]
    series = _series(at)
    assert list(series) == ["token embedding", "segment embedding", "position embedding",
                            "total (the three parts added)"]
    assert series["total (the three parts added)"] == pytest.approx(
        [sum(v) for v in zip(series["token embedding"], series["segment embedding"], series["position embedding"])],
        abs=1e-4)
    (caption,) = [c.value for c in at.caption if "largest single part" in c.value]
    largest = re.search(r"the (\w+) embedding of (\d+) (\S+) \((-?[\d.]+)", caption)
    part, position, value = largest.group(1), int(largest.group(2)), float(largest.group(4))
    assert series[f"{part} embedding"][position] == pytest.approx(value, abs=0.006)
    assert abs(value) == pytest.approx(max(abs(v) for name, ys in series.items() if name.endswith("embedding")
                                           for v in ys), abs=0.006)


@needs_model("explorer-mini")
def test_page_switches_to_next_sentence():
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="attr_target").set_value("next sentence").run()
    assert not at.exception
    assert "IsNext" in at.subheader[0].value
    assert _chart(at)


def test_page_explains_a_model_without_the_head():
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state["be_model_choice"] = "minilm"
    at.run()
    assert not at.exception
    assert any("no trained masked-LM head" in w.value for w in at.warning)
    at.radio(key="attr_target").set_value("next sentence").run()
    assert not at.exception
    assert any("no trained next-sentence head" in w.value for w in at.warning)
    assert not at.get("plotly_chart")


def test_page_explains_a_fine_tuned_classifier(runs_root):
    # the page looks for runs where BERT_EXPLORER_RUNS says: the test's own folder, whatever the caller set
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="attr_target").set_value("fine-tuned classifier").run()
    assert not at.exception
    assert any("bert-explorer finetune" in c.value for c in at.code)  # how to make one
    make_classifier(runs_root / "topics" / "model")
    at.run()
    assert not at.exception
    first = _series(at)
    at.text_input(key="attr_clf_text").set_value("good news for the market .").run()
    assert not at.exception and _series(at) != first


# ----- when a result is reliable ---------------------------------------------------------------

def test_the_reliability_rule():
    # the classifier case that was shown as if it meant something: delta 0.0217 > difference 0.012
    bad = reliability(0.0217, 0.012, 50)
    assert not bad.reliable
    assert bad.reason.startswith("This result is unreliable")
    assert "0.0217" in bad.reason and "0.012" in bad.reason and "181%" in bad.reason and "50 integration steps" in bad.reason
    assert reliability(-0.0217, -0.012).reliable is False        # the sign does not matter
    assert reliability(0.0006, 0.012).reliable                    # 5.0 %: on the line, accepted
    assert not reliability(0.00061, 0.012).reliable               # 5.1 %
    assert reliability(-0.09, -1.9).reliable                      # 4.7 %
    assert not reliability(0.09, 1.78).reliable                   # 5.06 %: NSP on minilm-mlm-nsp at 100 steps
    flat = reliability(0.0, 0.0004)                               # nothing to split: unreliable whatever the delta
    assert not flat.reliable and "practically zero" in flat.reason and "0.0004" in flat.reason
    assert not reliability(0.0, 0.0).reliable
    assert not reliability(float("nan"), 1.0).reliable
    assert reliability(0.01, 1.0).reason.startswith("Reliable")


def test_step_schedule_doubles_up_to_the_cap():
    assert step_schedule(50, 400) == [50, 100, 200, 400]
    assert step_schedule(300, 400) == [300, 400]
    assert step_schedule(400, 400) == [400] and step_schedule(500, 400) == [500]
    with pytest.raises(ValueError):
        step_schedule(0)


def test_steps_are_raised_until_the_result_is_reliable(tmp_path):
    loaded = checkpoint.load(make_classifier(tmp_path / "clf"))
    text = "the shares fell sharply after the bank results ."
    one = explain_classifier(loaded, text, n_steps=1, max_steps=1)  # exactly 1 step: far off
    assert not one.reliability.reliable and one.n_steps == 1
    r = explain_classifier(loaded, text, n_steps=1)
    assert [n for n, _ in r.steps_tried][:2] == [1, 2] and r.n_steps == r.steps_tried[-1][0] > 1
    assert r.reliability.reliable and r.relative_delta <= 0.05
    assert not reliability(r.steps_tried[0][1], r.difference).reliable  # it stopped only once the rule held
    assert r.delta == r.steps_tried[-1][1]


SHARE_OF_DIFFERENCE = {50: 0.8, 100: 0.5, 200: 0.2, 400: 0.3}  # not monotone, as measured on real models


def _inflated_delta(monkeypatch):
    """integrated_gradients whose delta stays far above 5 % of the difference at every step count."""
    real = ig.integrated_gradients
    calls = []

    def fake(model, f, inputs, baselines, n_steps=50):
        parts, f_x, f_x0, _ = real(model, f, inputs, baselines, n_steps)
        calls.append(n_steps)
        return parts, f_x, f_x0, SHARE_OF_DIFFERENCE[n_steps] * (f_x - f_x0)

    monkeypatch.setattr(ig, "integrated_gradients", fake)
    return calls


def test_unreliable_at_the_cap_is_said_with_the_numbers(tmp_path, monkeypatch):
    calls = _inflated_delta(monkeypatch)
    loaded = checkpoint.load(make_classifier(tmp_path / "clf"))
    r = explain_classifier(loaded, "good news for the market .")
    assert calls == [50, 100, 200, 400]                      # up to the cap
    assert r.n_steps == 200 and [n for n, _ in r.steps_tried] == calls  # shown: the smallest delta
    verdict = r.reliability
    assert not verdict.reliable and "20%" in verdict.reason and "200 integration steps" in verdict.reason


def _fake_result(target, f_x, f_x0):
    p = lambda v: 1 / (1 + 2.718281828 ** -v)  # noqa: E731
    return Attributions(target=target, score="s", tokens=["[CLS]"], baseline_tokens=["[CLS]"], token=[0.0],
                        segment=[0.0], position=[0.0], f_input=f_x, f_baseline=f_x0, delta=0.0, n_steps=50,
                        details={"p_is_next": p(f_x), "p_is_next_baseline": p(f_x0)})


def test_the_baseline_note_appears_only_when_the_baseline_scores_higher():
    note = baseline_note(_fake_result("next sentence", 1.212, 3.155))
    assert "IsNext" in note and "decrease" in note and "95.9%" in note and "77.1%" in note
    assert note.count(". ") == 0  # one sentence
    assert baseline_note(_fake_result("next sentence", 3.469, 1.685)) is None
    assert "decrease" in baseline_note(_fake_result("classifier", -2.0, -1.0))


def test_the_baseline_note_says_when_an_empty_pair_is_already_isnext():
    """The default pair: f(x) 11.307, f(baseline) 10.207 (HF gives the same): P(IsNext) 100 % for both, and the
    bars split 1.10 of 11.3 log-odds with no word of it."""
    note = baseline_note(_fake_result("next sentence", 11.307, 10.207))
    assert note.startswith("Here the baseline ([PAD] for every word) is already IsNext: its log-odds are 10.207 of "
                           "the pair's 11.307") and "split only the 1.100 that the words add" in note
    assert note.count(". ") == 0
    assert "already IsNext" in baseline_note(_fake_result("next sentence", 1.0, 1.0))
    assert baseline_note(_fake_result("next sentence", 4.0, 1.0)) is None  # the words add most of it
    assert baseline_note(_fake_result("masked word", 2.0, 1.5)) is None  # (the next-sentence log-odds only)


@needs_model("explorer-mini")
def test_page_explains_what_a_baseline_above_the_pair_means():
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state["be_model_choice"] = "explorer-mini"  # its P(IsNext) is higher for the baseline
    at.run()
    at.radio(key="attr_target").set_value("next sentence").run()
    assert not at.exception
    metrics = {m.label: float(m.value) for m in at.metric}
    assert metrics["f(baseline)"] > metrics["f(x)"]
    assert [i.value for i in at.info if "already looks more like" in i.value]


def test_page_says_where_it_looked_for_classifiers(tmp_path, monkeypatch):
    root = tmp_path / "elsewhere"
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(root))
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="attr_target").set_value("fine-tuned classifier").run()
    assert not at.exception
    (message,) = [i.value for i in at.info if "No fine-tuned sequence classifier" in i.value]
    assert str(root) in message and "./runs" not in message
    assert any(f"--output {root / 'bbc'}" in c.value for c in at.code)


def test_page_shows_steps_and_warns_when_unreliable(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(root))
    make_classifier(root / "topics" / "model")
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="attr_target").set_value("fine-tuned classifier").run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["steps used"] == "50"  # the tiny classifier is reliable at once
    assert not at.warning and any(c.value.startswith("Reliable:") for c in at.caption)
    _inflated_delta(monkeypatch)
    at.text_input(key="attr_clf_text").set_value("good news for the market .").run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["steps used"] == "200"  # the best of 50, 100, 200, 400
    (warning,) = [w.value for w in at.warning]
    assert warning.startswith("This result is unreliable") and "20%" in warning and "200" in warning


def test_shares_are_of_the_size_of_the_difference_and_keep_the_attributions_sign():
    r = Attributions(target="next sentence", score="s", tokens=["[CLS]", "rain", "sun", "[SEP]"],
                     baseline_tokens=["[CLS]", "[PAD]", "[PAD]", "[SEP]"], token=[0.0, -1.5, 0.5, 0.0],
                     segment=[0.0] * 4, position=[0.0] * 4, f_input=1.0, f_baseline=2.0, delta=0.0, n_steps=50)
    assert r.shares == [0.0, -1.5, 0.5, 0.0]            # f fell by 1: rain pulled it down, sun pushed it up
    assert r.ranked_words() == [("2 sun", 0.5, 0.5), ("1 rain", -1.5, -1.5)]  # only the replaced tokens
    assert [row["share"] for row in r.rows()] == r.shares and "segment part" not in r.rows()[0]


def test_attributions_are_kept_on_disk_by_the_weights_and_the_question(mini, tmp_path, monkeypatch):
    """A new server process reads back what an earlier one integrated (the page's example on a
    first visit): the same answer, without computing; another question, or the same question to
    other weights, is computed."""
    from bert_explorer.analysis.attributions.kept import kept

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    calls = []

    def compute(word=None):
        calls.append(word)
        return explain_masked_word(mini, MLM_TEXT, word, n_steps=20, max_steps=20)

    first = kept("masked-word", mini, compute, text=MLM_TEXT, word=None, n_steps=20)
    again = kept("masked-word", mini, lambda: pytest.fail("computed again"), text=MLM_TEXT, word=None, n_steps=20)
    assert again == first and calls == [None]
    top = first.details["top"][1]["token"]
    other = kept("masked-word", mini, lambda: compute(top), text=MLM_TEXT, word=top, n_steps=20)
    assert other.details["word"] == top and calls == [None, top]
    # other weights (a copy of the model written again) are another entry
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(mini.path, copy)
    (copy / "model.safetensors").write_bytes((copy / "model.safetensors").read_bytes())
    moved = checkpoint.load(copy, "BertForPreTraining")
    kept("masked-word", moved, lambda: compute(None), text=MLM_TEXT, word=None, n_steps=20)
    assert calls == [None, top, None]


def test_a_word_with_no_share_is_not_said_to_push_f_either_way():
    """The caption listed "5 the −0.00 (−0%)" among the words that pushed the score down most: a word whose
    share of f(x) − f(baseline) rounds to 0 % pushed it neither way."""
    tokens = ["[CLS]", "bank", "shares", "the", "rise", "[SEP]"]
    r = Attributions(target="classifier", score="P(business)", tokens=tokens,
                     baseline_tokens=["[CLS]", "[PAD]", "[PAD]", "[PAD]", "[PAD]", "[SEP]"],
                     token=[0.0, 0.32, 0.22, -0.0005, -0.30, 0.0], segment=[0.0] * 6, position=[0.0] * 6,
                     f_input=0.70, f_baseline=0.462, delta=0.0, n_steps=50)
    ups, downs = r.pushes()
    assert [w[0] for w in ups] == ["1 bank", "2 shares"] and [w[0] for w in downs] == ["4 rise"]
    assert [w[0] for w in r.ranked_words()] == ["1 bank", "2 shares", "3 the", "4 rise"]  # (all four, ranked)


# ----- the command line ----------------------------------------------------------------------

@needs_model(DEFAULT_MODEL)
def test_attribute_explains_a_masked_word_and_a_pair_from_the_command_line(capsys):
    """The Attributions page had no command (the CLI's help said every page has one)."""
    from bert_explorer.cli import main

    assert main(["attribute", "--model", DEFAULT_MODEL, "--text", MLM_TEXT, "--word", "rate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"] == "masked word" and out["score"].startswith("log P('rate') at [MASK]")
    total = sum(t["attribution"] for t in out["tokens"])
    assert total == pytest.approx(out["f_input"] - out["f_baseline"] + out["delta"], abs=1e-3)
    library = explain_masked_word(checkpoint.load(DEFAULT_MODEL, "BertForPreTraining"), MLM_TEXT, "rate")
    assert out["f_input"] == pytest.approx(library.f_input, abs=1e-5)
    assert out["reliable"] == library.reliability.reliable
    assert main(["attribute", "--model", DEFAULT_MODEL, "--text", A, "--text-b", B]) == 0  # no [MASK]: the pair
    said = capsys.readouterr().out
    assert said.startswith("f = log-odds of IsNext") and "raised f most: " in said
    # a text past the model's positions, and steps the budget cut, are said (the command said neither)
    assert main(["attribute", "--model", DEFAULT_MODEL, "--text", MLM_TEXT + " word" * 600]) == 0
    err = capsys.readouterr().err
    assert "note: the input is 512 WordPieces" not in err and re.search(
        r"note: the input is [\d,]+ WordPieces with \[CLS\] and \[SEP\], more than the 512 this model reads", err)
    assert re.search(r"note: \d+ integration steps of the 50 asked: one attribution spends at most about", err), err
    assert main(["attribute", "--model", DEFAULT_MODEL, "--text", A + " word" * 600, "--text-b", B]) == 0
    assert "the longer sentence lost its last pieces until the pair fit (longest first)" in capsys.readouterr().err
    # the page's notes: a baseline scored above the pair, a word copied from the sentence
    assert main(["attribute", "--model", DEFAULT_MODEL, "--text", "the cat sat .", "--text-b", "it slept ."]) == 0
    out, err = capsys.readouterr()
    difference = float(re.search(r"difference (-?[\d.]+)", out).group(1))
    assert ("note: Here the baseline scores above your pair" in err) == (difference < 0), (out, err)
    assert main(["attribute", "--model", DEFAULT_MODEL, "--text", "the capital of france is [MASK] ."]) == 0
    out, err = capsys.readouterr()
    word = re.search(r"log P\('([^']+)'\)", out).group(1)
    assert ("is a word of the sentence itself" in err) == (word in "the capital of france is".split()), (out, err)
    for args, sentence in ((["--text", "no mask here"], "--text has no [MASK] and there is no --text-b"),
                           (["--text", MLM_TEXT, "--target", "classifier"], "is not a fine-tuned sequence classifier"),
                           (["--text", MLM_TEXT, "--label", "sport"], "--label applies to --target classifier"),
                           (["--text", A, "--text-b", B, "--word", "rain"], "--word applies to --target masked-word"),
                           (["--text", " "], "--text and --text-b must hold some text")):
        assert main(["attribute", "--model", DEFAULT_MODEL, *args]) == 2
        assert sentence in capsys.readouterr().err


def test_attribute_explains_a_fine_tuned_classifiers_class(tmp_path, capsys):
    from bert_explorer.cli import main

    make_classifier(tmp_path / "run" / "model")
    assert main(["attribute", "--model", str(tmp_path / "run"), "--text", "the shares fell sharply .",
                 "--label", "sport", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"] == "classifier" and out["score"] == "log P('sport')"
    library = explain_classifier(checkpoint.load(tmp_path / "run" / "model", "BertForSequenceClassification"),
                                 "the shares fell sharply .", label="sport")
    assert [t["attribution"] for t in out["tokens"]] == [t["attribution"] for t in library.rows()]
    # a sentence B for a run fine-tuned on one text at a time: the page offers no box for it, and the model never saw
    # one (it was explained silently as a pair); a model from elsewhere names no task and may read pairs
    (tmp_path / "run" / "model" / "training_args.json").write_text(json.dumps({"task": "classification"}))
    argv = ["attribute", "--model", str(tmp_path / "run"), "--text", "the shares fell .", "--text-b", "they rose ."]
    assert main(argv) == 2
    assert "fine-tuned on a single-sentence classification task, which reads one text at a time: give --text " \
        "alone, without --text-b" in capsys.readouterr().err
    (tmp_path / "run" / "model" / "training_args.json").write_text(json.dumps({"task": "pair-classification"}))
    assert main(argv + ["--json"]) == 0 and json.loads(capsys.readouterr().out)["target"] == "classifier"
    # a token tagger's run: said as such (it was told to write a [MASK] into a run that has no masked-LM head)
    save_tiny_bert(tmp_path / "ner" / "model", SPECIAL_TOKENS + WORDS, architecture="BertForTokenClassification",
                   id2label={0: "O", 1: "B-PER"})
    assert main(["attribute", "--model", str(tmp_path / "ner"), "--text", "the bank fell ."]) == 2
    assert "is a fine-tuned BertForTokenClassification model: attribute explains a masked word, a pair's next " \
        "sentence, or a sequence classifier's class" in capsys.readouterr().err
