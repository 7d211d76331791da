"""The "Inside one layer" steps, composed as the page computes them, equal the model's own layer."""
from pathlib import Path

import numpy as np
import pytest
import torch

from bert_explorer.analysis.attention.heads import attention_maps
from bert_explorer.analysis.attention.layer_steps import encode, layer_steps, model_layer_output, token_figures
from bert_explorer.checkpoint import encoder_of, load

TOL = 1e-5


@pytest.fixture(scope="module")
def loaded():
    return load("minilm-mlm-nsp", "BertForPreTraining")


def _check(loaded, text, text_b, layer, head, pad_to=0):
    steps = layer_steps(loaded, text, text_b, layer, head, pad_to=pad_to)
    _, ids, segments, keep = encode(loaded, text, text_b, 128, pad_to)
    output, attentions = model_layer_output(loaded, (ids, segments, keep), layer)
    assert np.abs(steps.output - output).max() < TOL
    assert np.abs(steps.probs - attentions[head]).max() < TOL
    # the steps compose: each one is computed from the one before
    d = steps.head_size
    assert np.allclose(steps.scores, steps.q @ steps.k.T / np.sqrt(d), atol=TOL)
    assert np.allclose(steps.context, steps.probs @ steps.v, atol=TOL)
    assert np.allclose(steps.all_heads[:, head * d:(head + 1) * d], steps.context, atol=TOL)
    assert np.allclose(steps.attention_sum, steps.attention_out + steps.x, atol=TOL)
    assert np.allclose(steps.output_sum, steps.ff_out + steps.attended, atol=TOL)
    assert np.allclose(steps.probs.sum(-1), 1, atol=TOL)
    return steps


@pytest.mark.parametrize("layer,head", [(0, 0), (2, 5), (5, 11)])
def test_steps_equal_the_model_on_a_sentence(loaded, layer, head):
    steps = _check(loaded, "the cat sat on the mat because it was warm .", None, layer, head)
    if layer == 0:
        parts = steps.embedding_parts
        assert np.allclose(parts["sum"], parts["token"] + parts["segment"] + parts["position"], atol=TOL)
    else:
        assert steps.embedding_parts is None


def test_steps_equal_the_model_on_a_padded_pair(loaded):
    steps = _check(loaded, "the cat sat on the mat .", "then it fell asleep .", 1, 3, pad_to=24)
    real = steps.num_real
    assert real < 24 and len(steps.tokens) == 24 and steps.tokens[-1] == "[PAD]"
    assert (steps.probs[:, real:] == 0).all()                     # no query attends to padding
    assert steps.segment_ids[steps.tokens.index("[SEP]") + 1] == 1  # sentence B has segment 1
    unpadded = layer_steps(loaded, "the cat sat on the mat .", "then it fell asleep .", 1, 3)
    assert np.abs(unpadded.output - steps.output[:real]).max() < TOL  # padding changes nothing real


def test_steps_equal_a_causal_model(loaded):
    causal = load("minilm-mlm-nsp", "BertForPreTraining")
    causal.config.causal = True
    causal.model.bert.config.causal = True
    steps = _check(causal, "the cat sat on the mat .", None, 2, 4, pad_to=12)
    assert steps.causal
    T = steps.num_real
    assert np.allclose(np.triu(steps.probs[:T, :T], 1), 0)       # nobody sees to the right
    assert steps.probs[0, 0] == pytest.approx(1.0)                  # [CLS] sees only itself
    # the other mask (bidirectional) on the same scores spreads attention to the right again
    assert np.triu(steps.other_probs[:T, :T], 1).sum() > 0.1


def test_softmax_row_is_what_bertviz_draws(loaded):
    steps = layer_steps(loaded, "the bank of the river .", None, 3, 7)
    drawn = attention_maps(loaded, "the bank of the river .", None).attentions[3, 7]
    assert np.abs(steps.probs - drawn).max() < TOL
    # the bidirectional model's "other" mask is causal: upper triangle empty
    assert np.allclose(np.triu(steps.other_probs, 1), 0)


def test_both_masks_are_returned_and_block_what_the_model_does_not_see(loaded):
    """The mask the model uses blocks exactly the keys its own attention gives no weight (padding);
    the other mask, returned beside it, is the left-to-right one: padding and every key to the right."""
    text, text_b, layer, head, pad_to = "the cat sat on the mat .", "then it fell asleep .", 1, 3, 24
    steps = layer_steps(loaded, text, text_b, layer, head, pad_to=pad_to)
    _, ids, segments, keep = encode(loaded, text, text_b, 128, pad_to)
    _, attentions = model_layer_output(loaded, (ids, segments, keep), layer)
    T = len(ids)
    assert np.array_equal(steps.blocked == 1, attentions[head] == 0)   # the model's own zeros
    padding = np.broadcast_to(np.array(keep)[None, :] == 0, (T, T))
    assert np.array_equal(steps.other_blocked == 1, padding | np.triu(np.ones((T, T), bool), 1))
    assert np.array_equal(steps.other_probs == 0, steps.other_blocked == 1)


def test_token_figures_are_the_steps_numbers(loaded):
    """What the page's captions state about one token, checked against the model's own forward pass
    and the definitions (cosine, lengths, the weighted sum)."""
    text, layer, head, token = "the cat sat on the mat because it was warm .", 2, 5, 3
    steps = layer_steps(loaded, text, None, layer, head, pad_to=16)
    f = token_figures(steps, token)
    _, ids, segments, keep = encode(loaded, text, None, 128, 16)
    out = encoder_of(loaded.model)(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([segments]),
                                   attention_mask=torch.tensor([keep]), output_hidden_states=True)
    x, y = (out.hidden_states[i][0, token].detach().numpy() for i in (layer, layer + 1))
    cos = float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))
    assert f.output_cosine == pytest.approx(cos, abs=1e-4)              # cos(X, the layer's output)
    assert f.visible == steps.num_real == sum(keep)                     # a bidirectional token sees every real one
    real = np.array(keep) > 0
    scores = steps.q[token] @ steps.k.T / np.sqrt(steps.head_size)
    assert f.top_key == int(np.flatnonzero(real)[np.argmax(scores[real])]) and real[f.top_key]
    assert f.top_score == pytest.approx(float(scores[f.top_key]), abs=1e-4)
    assert np.allclose(f.contributions.sum(0), steps.context[token], atol=1e-5)  # z is the sum of the parts
    assert f.context_length == pytest.approx(float(np.linalg.norm(steps.context[token])), rel=1e-5)
    assert f.query_length == pytest.approx(float(np.linalg.norm(steps.q[token])), rel=1e-5)
    assert 0 <= f.active_inner <= 1 and f.scale == pytest.approx(np.sqrt(steps.head_size))
    assert f.part_lengths is None                                       # only layer 1 reads the embeddings
    first = token_figures(layer_steps(loaded, text, None, 0, 0), token)
    assert set(first.part_lengths) == {"token", "segment", "position"}


def test_a_causal_token_sees_itself_and_the_tokens_before_it(loaded):
    causal = load("minilm-mlm-nsp", "BertForPreTraining")
    causal.config.causal = True
    causal.model.bert.config.causal = True
    steps = layer_steps(causal, "the cat sat on the mat .", None, 1, 0, pad_to=12)
    assert [token_figures(steps, i).visible for i in range(steps.num_real)] == list(range(1, steps.num_real + 1))
    # its other mask is the bidirectional one: padding only
    assert np.array_equal(steps.other_blocked[0], (steps.keep == 0).astype(float))


def test_bad_layer_or_head_is_one_sentence(loaded):
    with pytest.raises(ValueError, match="layers 1–6"):
        layer_steps(loaded, "a b c", None, 6, 0)
    with pytest.raises(ValueError, match="heads 1–12"):
        layer_steps(loaded, "a b c", None, 0, 12)


def test_inside_one_layer_page_walks_through_the_steps():
    import re
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    page = Path(__file__).resolve().parent.parent / "pages" / "3_Inside_one_layer.py"
    at = AppTest.from_file(str(page), default_timeout=120).run()
    assert not at.exception
    assert [s.value for s in at.subheader] == ["Step 1 of 8: Input representation"]
    gap = next(c.value for c in at.caption if "largest difference" in c.value)
    assert float(re.search(r"difference is ([0-9.e+-]+)", gap).group(1)) < 1e-5
    at.button(key="ins_next").click().run()
    at.button(key="ins_next").click().run()
    assert at.subheader[0].value == "Step 3 of 8: Scores"
    at.button(key="ins_prev").click().run()
    assert at.subheader[0].value == "Step 2 of 8: Queries, keys and values"
    # padding: the mask step says how many positions the token sees, padding excluded
    at.number_input(key="ins_pad").set_value(28).run()
    at.select_slider(key="ins_step").set_value(4).run()
    sees = next(c.value for c in at.caption if "sees" in c.value)
    assert len(at.selectbox(key="ins_token").options) == 28  # 13 + 9 WordPieces (the pair) + 6 [PAD]
    assert "sees 22 of 28 positions" in sees                   # padding keys are masked
    import figcheck
    masks = [f for f in figcheck.figures(at) if "mask" in f.title and "Attention of" not in f.title]
    assert len(masks) == 2 and all(f.axis_title("x") == "key token" and f.axis_title("y") == "query token" for f in masks)
    at.toggle(key="ins_all").set_value(True).run()
    assert len(at.subheader) == 8 and not at.exception
    # padded to 128 (or more), the 22 WordPieces were said to be "cut to 128": the [PAD]s were counted
    at.number_input(key="ins_pad").set_value(128).run()
    assert len(at.selectbox(key="ins_token").options) == 128
    assert not [c.value for c in at.caption if "was cut to" in c.value]
    # and 200 [PAD]s typed in the text are words read, cut to 128 as any are (they were not counted: no word)
    at.number_input(key="ins_pad").set_value(0).run()
    at.text_input(key="be_sentence_a").set_value("[PAD] " * 200).run()
    assert [c.value for c in at.caption if c.value.startswith("The input was cut to 128 WordPieces")]


def test_input_strips_each_use_their_own_colour_range():
    """Step 1 draws the token, segment, position, sum and LayerNorm rows of one token. The LayerNorm
    row spans about ±2.5 and the embeddings a tenth of that: on one shared scale they look white.
    Each row must fill its own colour range (its largest |value| is the end of its scale)."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from figcheck import figures

    page = Path(__file__).resolve().parent.parent / "pages" / "3_Inside_one_layer.py"
    at = AppTest.from_file(str(page), default_timeout=120).run()
    assert not at.exception
    fig = next(f for f in figures(at) if f.title.startswith("The input representation"))
    rows = 0
    for t in fig.traces:
        z = np.atleast_2d(np.asarray(t.z, dtype=float))
        zmin, zmax = t.raw.get("zmin"), t.raw.get("zmax")
        top = max(abs(zmin), abs(zmax)) if zmin is not None else np.abs(z).max()  # plotly's own range otherwise
        for label, row in zip(np.atleast_1d(t.y).tolist(), z):
            rows += 1
            assert np.abs(row).max() > 0.9 * top, f"row {label!r} spans ±{np.abs(row).max():.2f} on a ±{top:.2f} scale"
            assert f"±{np.abs(row).max():.2g}" in str(label)  # the range is stated
    assert rows == 5


def test_a_left_to_right_checkpoint_with_fewer_heads_is_said_so_not_a_traceback(runs_root, minilm_dir):
    """The check compared (layers, heads) as one tuple: a checkpoint of 2 layers and 2 heads passed it for
    layer 1, head 12 (2 > 1 decides), and the page stopped on "head 12 does not exist"."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer import checkpoint
    from bert_explorer.model.config import BertConfig
    from bert_explorer.tokenizer import WordPieceTokenizer

    tok = WordPieceTokenizer.from_dir(minilm_dir)
    small = checkpoint.new_model("BertForPreTraining", BertConfig(vocab_size=tok.vocab_size, hidden_size=8,
                                                                  num_layers=2, num_heads=2, intermediate_size=16,
                                                                  causal=True))
    checkpoint.save(small, tok, runs_root / "ltr" / "checkpoints" / "step-3")
    page = Path(__file__).resolve().parent.parent / "pages" / "3_Inside_one_layer.py"
    at = AppTest.from_file(str(page), default_timeout=120).run()
    at.selectbox(key="ins_head").set_value(11).run()
    at.select_slider(key="ins_step").set_value(4).run()
    at.selectbox(key="ins_ltr").set_value(str(runs_root / "ltr" / "checkpoints" / "step-3")).run()
    assert not at.exception
    said = [i.value for i in at.info if "That checkpoint" in i.value]
    assert said == ["That checkpoint has 2 layer(s) of 2 head(s), no layer 1, head 12; pick a smaller layer or head "
                    "above."]
