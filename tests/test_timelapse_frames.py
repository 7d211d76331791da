"""Time-lapse frames (train/timelapse_frames.py): a pre-training run records, at chosen steps,
a few sentences' attention and masked-LM probabilities; the Pre-train page draws the time-lapse
from them, for a run and for a model that ships its frames (explorer-mini)."""
import json
import shutil

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint
from bert_explorer.analysis.attention.timelapse import timelapse, timelapse_from_frames
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.runs.run import Run
from bert_explorer.train.timelapse_frames import FILE, SENTENCES, copy_frames, frame_steps, read_frames
from shared import needs_model

TINY_SENTENCES = ["the oven is very [MASK] today .", "everyone said the [MASK] was fresh ."]


def tiny_config(vocab, **kw) -> PretrainConfig:
    return PretrainConfig(**{**dict(corpus="tiny", size="tiny", vocab=vocab, batch_size=8, max_seq_length=48, lr=1e-3,
                                    warmup_steps=2, max_steps=12, log_every=1, eval_every=1000, save_every=6,
                                    eval_batches=2, seed=3, device="cpu", precision="fp32", timelapse_frames=5,
                                    timelapse_sentences=TINY_SENTENCES), **kw})


# tiny_vocab (conftest.py): one WordPiece vocabulary that every run here reads


@pytest.fixture(scope="module")
def recorded(tiny_vocab, tmp_path_factory):
    """A 12-step run of a 2-layer model that records 5 frames and saves checkpoints at 6 and 12."""
    d = tmp_path_factory.mktemp("frames") / "run"
    run_pretraining(tiny_config(tiny_vocab), d, progress=False)
    return d


def test_frame_steps_start_at_the_random_initialisation_and_end_at_the_last_step():
    steps = frame_steps(11, 2000)
    assert steps[0] == 0 and steps[-1] == 2000 and len(steps) == 11 and steps == sorted(set(steps))
    gaps = np.diff(steps[1:])
    assert (gaps[1:] >= gaps[:-1]).all()  # log-spaced: denser early, where the model changes fastest
    assert frame_steps(0, 100) == [] and frame_steps(1, 50) == [50] and frame_steps(5, 12) == [0, 1, 2, 5, 12]


def test_a_run_records_its_frames_and_ships_them_in_its_final_checkpoint(recorded):
    doc = read_frames(recorded)
    assert [f["step"] for f in doc["frames"]] == [0, 1, 2, 5, 12]
    assert doc["heads"] == [[0, 0], [0, 1], [1, 0], [1, 1]]  # every head of a 2 x 2 model
    assert [s["text"] for s in doc["sentences"]] == TINY_SENTENCES
    assert doc["source"]["run"] == "run" and doc["source"]["config"]["max_steps"] == 12
    evals = {m["step"]: m for m in Run(recorded).metrics() if m["split"] == "eval"}
    for f in doc["frames"]:
        assert f["sequences_seen"] == 8 * f["step"]
        if f["step"]:  # each frame step was also a held-out evaluation, and the frame carries it
            assert f["eval"]["mlm_accuracy"] == evals[f["step"]]["mlm_accuracy"]
    tokens = [f["tokens_seen"] for f in doc["frames"]]
    assert tokens[0] == 0 and all(b > a for a, b in zip(tokens, tokens[1:]))
    assert json.loads((recorded / "checkpoints" / "step-12" / FILE).read_text()) == doc
    assert (recorded / FILE).stat().st_size < 60_000


def test_a_frame_equals_what_the_checkpoint_of_that_step_computes(recorded):
    """The frame at step 12 and the step-12 checkpoint read by the checkpoint time-lapse agree:
    attention to the file's rounding (0.0005), the top words and their probabilities to 3 digits."""
    for sentence, text in enumerate(TINY_SENTENCES):
        for layer, head in ((0, 1), (1, 0)):
            framed = timelapse_from_frames(recorded, sentence, layer, head, top_k=5)
            direct = timelapse(recorded, text, layer, head, top_k=5, steps=[12])
            assert framed.tokens == direct.tokens
            np.testing.assert_allclose(framed.attention_stack()[-1], direct.attention_stack()[-1], atol=5.1e-4)
            got = framed.frames[-1].predictions[0]["predictions"]
            want = direct.frames[-1].predictions[0]["predictions"]
            assert [p["token"] for p in got] == [p["token"] for p in want]
            np.testing.assert_allclose([p["probability"] for p in got], [p["probability"] for p in want], rtol=5e-3)


def test_at_step_0_every_head_spreads_its_attention_almost_evenly(recorded):
    """N(0, 0.02) weights make every query-key product almost 0, so a fresh model's softmax is
    almost uniform: each row's largest weight is under twice the even share 1/T."""
    doc = read_frames(recorded)
    first = doc["frames"][0]
    for s, fs in zip(doc["sentences"], first["sentences"]):
        T = len(s["tokens"])
        att = np.asarray(fs["attention"]) / 1000  # [heads, T, T]
        assert np.allclose(att.sum(-1), 1, atol=T * 5e-4)
        assert att.max() < 2 / T
    last = np.asarray(doc["frames"][-1]["sentences"][0]["attention"]) / 1000
    assert last.max() > att.max()  # training made some attention sharper


def test_every_word_is_followed_back_to_step_0(recorded):
    tl = timelapse_from_frames(recorded, 0, 0, 0)
    rise = tl.emergence(3)
    assert len(rise) == 3 and all(len(v) == 5 and not np.isnan(v).any() for v in rise.values())
    first_word = max(rise, key=lambda w: rise[w][-1])
    assert tl.top_k_rows()[-1]["#1"].startswith(first_word + " ")


def test_a_resumed_run_keeps_its_earlier_frames_and_records_the_same_later_ones(tiny_vocab, recorded, tmp_path):
    def crash(step, _):
        if step == 7:
            raise KeyboardInterrupt("simulated kill after step 7")

    with pytest.raises(KeyboardInterrupt):
        run_pretraining(tiny_config(tiny_vocab), tmp_path / "r", progress=False, on_step=crash)
    assert [f["step"] for f in read_frames(tmp_path / "r")["frames"]] == [0, 1, 2, 5]
    run_pretraining(tiny_config(tiny_vocab), tmp_path / "r", resume=True, progress=False)  # from the step-6 checkpoint
    straight, resumed = read_frames(recorded), read_frames(tmp_path / "r")
    assert [f["step"] for f in resumed["frames"]] == [0, 1, 2, 5, 12]
    for a, b in zip(straight["frames"], resumed["frames"]):
        assert a["sentences"][0]["attention"] == b["sentences"][0]["attention"], a["step"]
        assert a["tokens_seen"] == b["tokens_seen"]


def test_a_damaged_frames_file_is_refused_in_one_sentence(recorded, tmp_path):
    doc = read_frames(recorded)
    bad = tmp_path / FILE
    bad.write_text(json.dumps({**doc, "format": "something-else"}))
    with pytest.raises(ValueError, match="is not a time-lapse frames file.*record the frames again"):
        read_frames(bad)
    cut = json.loads(json.dumps(doc))
    cut["frames"][2]["sentences"][1]["attention"][0].pop()
    bad.write_text(json.dumps(cut))
    with pytest.raises(ValueError, match=r"is damaged: step 2: the attention of .* is not 4 maps"):
        read_frames(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable time-lapse frames file"):
        read_frames(bad)
    with pytest.raises(ValueError, match="not among the recorded heads"):
        timelapse_from_frames(recorded, 0, layer=3, head=0)


def test_a_bad_setting_is_refused_before_anything_runs(tiny_vocab, tmp_path):
    with pytest.raises(ValueError, match="timelapse_frames must be 0"):
        tiny_config(tiny_vocab, timelapse_frames=-1)
    with pytest.raises(ValueError, match="time-lapse head \\(layer 5, head 0\\) does not exist"):
        run_pretraining(tiny_config(tiny_vocab, timelapse_heads=[[5, 0]]), tmp_path / "r", progress=False)


# ----- the page ----------------------------------------------------------------------------------------------
def _heatmap(at):
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        if "attention at each" in ((spec.get("layout") or {}).get("title") or {}).get("text", ""):
            return spec
    return None


def _array(z) -> np.ndarray:
    """A plotly array as the browser gets it: a list, or a typed array {dtype, bdata (base64), shape}."""
    if isinstance(z, dict):
        import base64

        shape = [int(n) for n in str(z.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(shape).astype(float)
    return np.asarray(z, dtype=float)


def _shipped(monkeypatch, folder):
    """Make ``folder`` the explorer-mini that the app finds (and no other shipped model)."""
    monkeypatch.setitem(checkpoint.SHORT_NAMES, "explorer-mini", (lambda: folder, "test model"))
    for name in list(checkpoint.SHORT_NAMES):
        if name != "explorer-mini":
            monkeypatch.setitem(checkpoint.SHORT_NAMES, name, (lambda: None, "absent"))


def test_the_page_draws_a_shipped_models_frames_before_any_run(recorded, runs_root, monkeypatch, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(recorded / "checkpoints" / "step-12", model)
    copy_frames(recorded, model, "These frames come from a test run.")
    _shipped(monkeypatch, model)
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    assert not at.exception
    assert any("No pre-training runs" in i.value for i in at.info)  # no run, yet the time-lapse is there
    at.selectbox(key="pt_tl_sentence_explorer-mini").set_value(1).run()
    at.selectbox(key="pt_tlf_layer_explorer-mini").set_value(1).run()
    at.selectbox(key="pt_tlf_head_explorer-mini").set_value(0).run()
    assert not at.exception
    spec = _heatmap(at)
    assert spec["layout"]["title"]["text"].startswith("Layer 2, head 1: attention at each recorded step")
    assert [s["label"] for s in spec["layout"]["sliders"][0]["steps"]] == ["step 0", "step 1", "step 2", "step 5",
                                                                          "step 12"]
    doc = read_frames(model)
    h = doc["heads"].index([1, 0])
    for frame, recorded_frame in zip(spec["frames"], doc["frames"]):  # the figure shows the file's numbers
        np.testing.assert_allclose(_array(frame["data"][0]["z"]),
                                   np.asarray(recorded_frame["sentences"][1]["attention"][h]) / 1000, atol=1e-6)
    assert spec["layout"]["xaxis"]["ticktext"] == doc["sentences"][1]["tokens"]
    caption = " ".join(c.value for c in at.caption)
    assert "Recorded by run **run** on cpu (fp32)" in caption and "These frames come from a test run." in caption
    table = next(d.value for d in at.dataframe if "sequences seen" in d.value.columns)
    assert table["step"].tolist() == [0, 1, 2, 5, 12] and table["sequences seen"].tolist() == [0, 8, 16, 40, 96]
    rise = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    rise = next(s for s in rise if "P(word) at the first [MASK]" in s["layout"]["title"]["text"])
    last = doc["frames"][-1]["sentences"][1]["masks"][0]["probabilities"]
    assert [t["name"] for t in rise["data"]] == sorted(last, key=last.get, reverse=True)[:3]  # the last step's top 3
    assert rise["layout"]["yaxis"]["tickformat"] == ".3~%"  # a probability in percent, not plotly's SI "200µ"
    for trace in rise["data"]:  # followed back to step 0, as recorded
        want = [f["sentences"][1]["masks"][0]["probabilities"][trace["name"]] for f in doc["frames"]]
        np.testing.assert_allclose(_array(trace["y"]), want)


def test_a_run_with_frames_offers_them_and_still_reads_its_checkpoints(recorded, runs_root, monkeypatch):
    _shipped(monkeypatch, None)  # no shipped model: the run is the only source
    shutil.copytree(recorded, runs_root / "framed")
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    assert not at.exception and "pt_tl_source" not in [r.key for r in at.radio]
    box = at.selectbox(key="pt_tl_sentence_run")
    assert box.options[:2] == [f"{t}  (recorded frames)" for t in TINY_SENTENCES]
    assert len(_heatmap(at)["frames"]) == 5                  # the recorded frames, step 0 included
    box.set_value(-1).run()                                  # your own sentence: the checkpoints
    assert not at.exception
    spec = _heatmap(at)
    assert "attention at each checkpoint" in spec["layout"]["title"]["text"]
    assert [s["label"] for s in spec["layout"]["sliders"][0]["steps"]] == ["step 6", "step 12"]


@needs_model("explorer-mini")
def test_the_shipped_explorer_mini_has_real_frames_that_say_where_they_come_from(runs_root):
    folder = checkpoint.resolve("explorer-mini")
    doc = read_frames(folder)
    assert len(doc["frames"]) >= 10 and doc["frames"][0]["step"] == 0
    assert [s["text"] for s in doc["sentences"]] == list(SENTENCES)
    assert doc["heads"] == [[a, b] for a in range(4) for b in range(4)]
    assert (folder / FILE).stat().st_size < 1_000_000
    assert "not the run that made these weights" in doc["source"]["note"]
    # the frames' tokens are what explorer-mini's own vocabulary makes of the sentences
    tok = checkpoint.load(folder).tokenizer
    assert doc["sentences"][0]["tokens"] == tok.encode(SENTENCES[0]).tokens
    acc = [f["eval"]["mlm_accuracy"] for f in doc["frames"]]
    assert acc[-1] > acc[0] + 0.03  # the recorded run learnt
    # a fresh install, no run yet: the page shows them, and says where they come from
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    assert not at.exception
    spec = _heatmap(at)
    assert [s["label"] for s in spec["layout"]["sliders"][0]["steps"]] == [f"step {f['step']}" for f in doc["frames"]]
    assert any("not the run that made these weights" in c.value for c in at.caption)


def test_a_run_on_an_uploaded_text_opens_its_time_lapse_on_a_sentence_of_its_own(tmp_path):
    """On a model whose vocabulary was learnt from a small upload, the news sentence the time-lapse opened on
    came out as characters and [UNK]. Such a run opens on a held-out sentence of its own text instead."""
    from bert_explorer.analysis.attention.timelapse import DEFAULT_SENTENCE, default_sentence
    from bert_explorer.tokenizer import WordPieceTokenizer
    from bert_explorer.train.pretraining_data import split_corpus

    words = ("river boat harbour fisher net morning tide village market bread gull sail rope dock storm shell "
             "reef wave anchor mast").split()
    text = "\n\n\n".join("\n".join(f"the {words[d]} by the {words[(d * 3 + s) % 20]} was quiet in "
                                   f"the {words[(d + 2 * s + 1) % 20]} ." for s in range(4)) for d in range(20))
    corpus = tmp_path / "run" / "corpus.txt"  # where the Pre-train page keeps an upload
    corpus.parent.mkdir()
    corpus.write_text(text)
    cfg = PretrainConfig(corpus=str(corpus), size="tiny", vocab_size=300, held_out_fraction=0.1, seed=0)
    Run(tmp_path / "run").create(cfg.to_dict(), "pretrain")
    said = default_sentence(tmp_path / "run")
    train, held = split_corpus(cfg)
    assert said.count("[MASK]") == 1
    masked = said.split().index("[MASK]")
    assert any(s.split()[:masked] + s.split()[masked + 1:] == said.split()[:masked] + said.split()[masked + 1:]
               for doc in held for s in doc)  # a held-out sentence, one word hidden
    tok = WordPieceTokenizer.train((s for doc in train for s in doc), 300)

    def unread(sentence):  # pieces the model cannot read as words: [UNK] and single characters
        pieces = tok.encode(sentence).input_ids[1:-1]
        return sum(tok.id_to_token(i) == "[UNK]" or len(tok.id_to_token(i).lstrip("#")) == 1 for i in pieces)
    assert unread(said) < unread(DEFAULT_SENTENCE)
    Run(tmp_path / "news").create({**cfg.to_dict(), "corpus": "bbc"}, "pretrain")
    assert default_sentence(tmp_path / "news") == DEFAULT_SENTENCE  # a built-in corpus keeps the shared one

    # and the frames such a run records read its own held-out sentences, the first the one it opens on
    run_pretraining(PretrainConfig.from_dict({**cfg.to_dict(), "max_steps": 2, "batch_size": 4, "max_seq_length": 32,
                                      "timelapse_frames": 2, "device": "cpu", "precision": "fp32"}),
                    tmp_path / "recorded", progress=False)
    recorded = [s["text"] for s in read_frames(tmp_path / "recorded")["sentences"]]
    assert recorded[0] == said and len(recorded) == len(SENTENCES) and not set(recorded) & set(SENTENCES)
    assert sum(map(unread, recorded)) < sum(map(unread, SENTENCES))


def test_a_time_lapse_reads_evenly_spaced_checkpoints_within_its_bounds(tmp_path, monkeypatch):
    """A run that saved every 100 steps had the page load and run every checkpoint on a visit (a student's
    too): at most limits.TIMELAPSE_CHECKPOINTS of them, and as many as fit limits.TIMELAPSE_BYTES."""
    from bert_explorer import limits
    from bert_explorer.analysis.attention.timelapse import checkpoints_to_read

    found = []
    for step in range(100, 4100, 100):  # 40 checkpoints
        d = tmp_path / f"step-{step}"
        d.mkdir()
        with open(d / "model.safetensors", "wb") as f:
            f.truncate(11_000_000)  # explorer-mini's size (a sparse file)
        found.append((step, d))
    read = checkpoints_to_read(found)
    assert len(read) == limits.TIMELAPSE_CHECKPOINTS == 12
    assert read[0] == found[0] and read[-1] == found[-1]
    gaps = {b[0] - a[0] for a, b in zip(read, read[1:])}
    assert max(gaps) - min(gaps) <= 100  # evenly spaced, give or take one save
    assert checkpoints_to_read(found[:5]) == found[:5]
    with open(found[-1][1] / "model.safetensors", "wb") as f:
        f.truncate(440_000_000)  # BERT-Base's weights: three fit in 1.5 GB
    assert [s for s, _ in checkpoints_to_read(found)] == [100, 2100, 4000]


def test_a_checkpoint_s_frame_in_one_pass_is_what_the_probes_compute(recorded):
    """A frame was three passes of the model (attention, the top-k, the first [MASK]'s distribution); a
    sentence within max_tokens now takes one. Each part equals what the page's own probes compute."""
    from bert_explorer.analysis.attention.heads import attention_maps
    from bert_explorer.analysis.attention.timelapse import frame
    from bert_explorer.analysis.probes.pretraining_tasks import MLM_HEAD, mlm_top_k

    loaded = checkpoint.load(recorded / "checkpoints" / "step-12", "BertForPreTraining", need_heads=(MLM_HEAD,))
    text = "the oven is very [MASK] today , said the [MASK] ."
    f = frame(loaded, text, layer=1, head=1, top_k=4)
    att = attention_maps(loaded, text)
    assert f.tokens == att.tokens and np.allclose(f.attention, att.attentions[1, 1], atol=1e-6)
    want = mlm_top_k(loaded, text, 4)
    assert [m["position"] for m in f.predictions] == [m["position"] for m in want]
    assert [[p["token"] for p in m["predictions"]] for m in f.predictions] == \
        [[p["token"] for p in m["predictions"]] for m in want]
    assert np.allclose([p["probability"] for m in f.predictions for p in m["predictions"]],
                       [p["probability"] for m in want for p in m["predictions"]], atol=1e-5)
    assert f.first_mask_probs.argmax() == loaded.tokenizer.token_to_id(want[0]["predictions"][0]["token"])
    assert f.first_mask_probs.sum() == pytest.approx(1.0, abs=1e-4)


def test_a_layer_chosen_on_a_deeper_run_is_moved_to_this_one_s_last_with_a_word(recorded, runs_root, monkeypatch):
    """Layer 2, head 2 chosen on one run, then a 1-layer run watched: the time-lapse showed layer 1, head 1 with no
    word of it."""
    _shipped(monkeypatch, None)
    shutil.copytree(recorded, runs_root / "framed")
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120)
    at.session_state["pt_tl_layer"], at.session_state["pt_tl_head"] = 5, 3  # (as chosen on a 6-layer run)
    at.run()
    at.selectbox(key="pt_tl_sentence_run").set_value(-1).run()
    assert not at.exception
    assert (at.selectbox(key="pt_tl_layer").value, at.selectbox(key="pt_tl_head").value) == (1, 1)
    assert "This model has 2 layers of 2 heads: the layer 6 and head 4 chosen before, on a larger model, became " \
           "its last." in [c.value for c in at.caption]
