"""The sparse-autoencoder feature explorer: the SAE finds planted directions, the layer replacement
gives the clean and the mean-ablated loss exactly, steering moves the probe the way it should, and
the page draws checked charts from a trained entry (tiny models, tiny corpus: seconds)."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import shared
from bert_explorer import checkpoint
from bert_explorer.analysis.features import build as fb, splice
from bert_explorer.analysis.features.sae import SaeConfig, TopKSAE, best_cosines, train_sae
from bert_explorer.checkpoint import encoder_of
from bert_explorer.data.corpora import tiny_corpus
from bert_explorer.data.pretraining import MaskingConfig, collate, create_instances
from bert_explorer.model.heads import IGNORE
from bert_explorer.model.bert import extended_attention_mask

pytestmark = pytest.mark.usefixtures("one_thread")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _words() -> list[str]:
    seen = dict.fromkeys(w for doc in tiny_corpus() for s in doc for w in re.findall(r"\w+|[^\w\s]", s.lower()))
    return SPECIALS + list(seen)


@pytest.fixture(scope="module")
def tiny():
    return shared.tiny_loaded(_words(), hidden=32, layers=2, positions=64)


@pytest.fixture(scope="module")
def instances(tiny):
    return create_instances(tiny_corpus(12), tiny.tokenizer, 48, 0.0, "mlm", MaskingConfig(), seed=1)[:24]


# ----- the SAE itself -------------------------------------------------------------------------------
def test_sae_recovers_planted_sparse_directions():
    """Data made of 48 known unit directions in 32 dimensions, about 3 active per vector: each
    planted direction must be matched by a feature's decoder column at cosine >= 0.9."""
    g = torch.Generator().manual_seed(0)
    H, D, N = 32, 48, 30000
    dirs = F.normalize(torch.randn(D, H, generator=g), dim=-1)
    active = (torch.rand(N, D, generator=g) < 3 / D).float() * (0.5 + torch.rand(N, D, generator=g))
    x = active @ dirs + 0.01 * torch.randn(N, H, generator=g) + 2.0  # an offset the SAE's centring removes
    sae, history = train_sae(x, SaeConfig(width_factor=4, k=4, epochs=5, batch_size=256, lr=3e-3,
                                          dead_tokens=5000, aux_k=32))
    cos = best_cosines(sae, dirs)
    assert cos.min() >= 0.9, sorted(cos.tolist())[:5]
    assert history["fve"][-1] > 0.85
    vals, idx = sae.encode_sparse(x[:100])
    assert idx.shape == (100, 4) and (vals >= 0).all()  # TopK: exactly k chosen, none negative


# ----- the loss with layer l replaced ----------------------------------------------------------------
def _ablated_loss(loaded, instances, layer: int, mean: torch.Tensor) -> float:
    """The masked-LM loss with layer ``layer``'s output at every ordinary token set to ``mean``,
    computed by hand, layer by layer (not through the hook being tested)."""
    tok, enc = loaded.tokenizer, encoder_of(loaded.model)
    special = torch.tensor([tok.pad_id, tok.cls_id, tok.sep_id])
    total, n = 0.0, 0
    with torch.no_grad():
        for a in range(0, len(instances), 8):
            b = collate(instances[a:a + 8], tok.pad_id, "mlm")
            h = enc.embeddings(b["input_ids"], b["token_type_ids"])
            mask = extended_attention_mask(b["attention_mask"], False, h.shape[1], h.dtype, h.device)
            for i, lay in enumerate(enc.encoder.layer):
                h, _ = lay(h, mask)
                if i + 1 == layer:
                    ordinary = b["attention_mask"].bool() & ~torch.isin(b["input_ids"], special)
                    h = torch.where(ordinary[..., None], mean.expand_as(h), h)
            logits = loaded.model.cls.predictions(h)
            chosen = b["labels"] != IGNORE
            total += float(F.cross_entropy(logits[chosen], b["labels"][chosen], reduction="sum"))
            n += int(chosen.sum())
    return total / n


def test_identity_gives_the_clean_loss_and_the_mean_the_ablated_one(tiny, instances):
    clean = splice.masked_lm_loss(tiny, instances)
    skip = torch.tensor([tiny.tokenizer.pad_id, tiny.tokenizer.cls_id, tiny.tokenizer.sep_id])
    for layer in (1, 2):
        assert splice.masked_lm_loss(tiny, instances, layer=layer, replace=lambda h: h, skip=skip) == clean
        mean = torch.randn(32)
        replaced = splice.masked_lm_loss(tiny, instances, layer=layer, replace=splice.mean_replacement(mean), skip=skip)
        assert replaced == pytest.approx(_ablated_loss(tiny, instances, layer, mean), rel=1e-5)
        assert replaced != pytest.approx(clean, rel=1e-3)
    assert splice.loss_recovered(2.0, 2.0, 5.0) == 1.0 and splice.loss_recovered(2.0, 5.0, 5.0) == 0.0


# ----- steering -------------------------------------------------------------------------------------
def test_a_replaced_layer_never_reaches_the_shared_model_that_other_sessions_run(tiny):
    """The hook that steers went on the model every session shares: a student's masked-word probe run meanwhile got
    the steered hidden states (and a cache could keep them for the class)."""
    batch = tiny.tokenizer.tensors([tiny.tokenizer.encode("the [MASK] was cold .")])
    with torch.no_grad():
        clean = tiny.model(**batch).mlm_logits
        with splice.replaced(tiny, tiny.config.num_layers, lambda h: h + 5.0) as model:
            steered = model(**batch).mlm_logits
            meanwhile = tiny.model(**batch).mlm_logits  # another session's forward, inside the block
    assert not torch.allclose(steered, clean)
    assert torch.equal(meanwhile, clean)
    assert all(a is b for a, b in zip(model.parameters(), tiny.model.parameters()))  # no weight copied


def test_steering_a_planted_feature_moves_the_probe(tiny):
    """Feature 0 of an SAE is planted along the direction that raises "river"'s logit at the [MASK]
    (the gradient of log p(river) in the last layer's output): adding it must raise p(river),
    subtracting it lower it, and the steering table must say so."""
    text = "the [MASK] was cold ."
    tok = tiny.tokenizer
    river = tok.encode("river").input_ids[1]
    enc = tok.encode(text)
    pos = enc.input_ids.index(tok.mask_id)
    L = tiny.config.num_layers
    captured = {}

    def grab(h):
        h = h.detach().requires_grad_(True)
        captured["h"] = h
        return h
    with torch.enable_grad(), splice.replaced(tiny, L, grab) as model:
        logits = model(**tok.tensors([enc])).mlm_logits[0, pos]
        logits.log_softmax(-1)[river].backward()
    direction = F.normalize(captured["h"].grad[0, pos], dim=0)
    sae = TopKSAE(32, 64, 4)
    with torch.no_grad():
        sae.W_dec[:, 0] = direction
    before = float(splice.probe(tiny, text)[river])
    up = float(splice.probe(tiny, text, L, splice.steer(sae, 0, pos, "add", 2.0))[river])
    down = float(splice.probe(tiny, text, L, splice.steer(sae, 0, pos, "add", -2.0))[river])
    assert up > before > down
    other = 1 if pos != 1 else 2  # steering another token than the [MASK] at the last layer changes nothing
    assert float(splice.probe(tiny, text, L, splice.steer(sae, 0, other, "add", 2.0))[river]) == pytest.approx(before)
    rows = {r["word"]: r for r in splice.steering_table(tiny, sae, L, text, 0, pos, "add", 2.0, top_k=5)}
    if "river" in rows:
        assert rows["river"]["change"] > 0
    # clamping to the current activation changes nothing; clamping higher raises it like adding
    with torch.no_grad():
        now = float(sae.encode(captured["h"][:, pos].detach())[0, 0])
    same = float(splice.probe(tiny, text, L, splice.steer(sae, 0, pos, "clamp", now))[river])
    assert same == pytest.approx(before, rel=1e-4)
    assert float(splice.probe(tiny, text, L, splice.steer(sae, 0, pos, "clamp", now + 2.0))[river]) > before


# ----- a whole build, the browser and the page ------------------------------------------------------
SMALL = SaeConfig(width_factor=2, k=4, epochs=2, batch_size=64, lr=3e-3, dead_tokens=2000, aux_k=8)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = shared.save_tiny_bert(tmp_path_factory.mktemp("m") / "tiny", _words(), hidden=32, layers=2, positions=64)
    loaded = checkpoint.load(str(folder), "BertForPreTraining")
    corpus = [s for doc in tiny_corpus(30) for s in doc]
    settings = fb.FeatureSettings(layer=1, corpus=corpus, tokens=1500, sae=SMALL)
    inst = create_instances(tiny_corpus(6, seed=3), loaded.tokenizer, 48, 0.0, "mlm", MaskingConfig(), seed=1)[:16]
    said = []
    path = fb.build(loaded, settings, lambda f, m: said.append(f), instances=inst)
    return folder, loaded, path, said


def test_build_keeps_quality_contexts_and_histograms(built):
    folder, loaded, path, said = built
    assert said[-1] == 1.0 and said == sorted(said)  # the progress bar only goes forward
    feats = fb.Features(path)
    m = feats.meta
    assert m["n_features"] == 64 and m["k"] == 4 and m["tokens"] >= 1500
    assert 0 < m["fve"] <= 1 and m["mean_l0"] <= 4 and 0 <= m["dead_fraction"] <= 1
    assert m["loss_mean"] > m["loss_clean"]
    f = int((feats.table["density"] > 0).nonzero()[0][0])
    top = feats.top_contexts(f)
    acts = [c["activation"] for c in top]
    assert 0 < len(top) <= fb.TOP_CONTEXTS and acts == sorted(acts, reverse=True)
    assert acts[0] == pytest.approx(feats.summary(f)["max_activation"], rel=1e-3)
    # the histogram counts every token the feature fires on
    fired = int(((feats.indices == f) & (feats.values > 0)).sum())
    assert sum(feats.summary(f)["histogram"]) == fired == round(feats.table["density"][f] * len(feats.values))
    hits = feats.search(loaded.tokenizer, top[0]["was"])
    assert hits and all(h["mean activation"] > 0 for h in hits)
    rows = feats.sentence(loaded, "the river was cold .")
    assert [r["token"] for r in rows][:2] == ["[CLS]", "the"] and all(len(r["features"]) <= 4 for r in rows)
    # the SAE never saw [CLS] or [SEP]: nothing is read of them (a reading of them was listed as any word's)
    assert [(r["token"], r["features"]) for r in rows if r.get("left_out")] == [("[CLS]", []), ("[SEP]", [])]
    assert any(r["features"] for r in rows if not r.get("left_out"))
    assert fb.trained(loaded)[0]["path"] == str(path)
    assert fb.build(loaded, fb.FeatureSettings(layer=1, corpus=[s for doc in tiny_corpus(30) for s in doc],
                                               tokens=1500, sae=SMALL)) == path  # kept: not built again


@pytest.mark.parametrize("phase", ["activations", "training", "reading every token's features",
                                   "each feature's top contexts"])
def test_cancel_stops_the_build_in_every_phase(tmp_path, phase):
    """A Cancel is heard in the phase it is pressed in or at the start of the next: the statistics after
    the training (a third of a build) no longer run to their end first."""
    loaded = shared.tiny_loaded(_words(), hidden=32, layers=2, positions=64, seed=2)
    loaded.path = tmp_path  # (the cache keys on a folder; nothing is read from it)
    settings = fb.FeatureSettings(layer=2, corpus=[s for doc in tiny_corpus(30) for s in doc], tokens=1500, sae=SMALL)
    path = fb.entry_path(loaded, settings)

    def cancel_on_training(fraction, message):
        if message.startswith(phase):
            fb.request_stop(path)
    from bert_explorer.analysis.features.sae import TrainingStopped
    with pytest.raises(TrainingStopped):
        fb.build(loaded, settings, cancel_on_training, instances=[])
    assert fb.state(loaded, settings)["state"] == "missing" and not fb.is_complete(path)


def test_the_bar_shares_the_build_as_its_estimate_does(tmp_path, monkeypatch):
    """The time left is read from the bar: with fixed shares (activations 30 %) a build whose activations took
    two thirds of its time said "17 min left" with 4 min 30 s to go. The bar's parts are the estimate's."""
    loaded = shared.tiny_loaded(_words(), hidden=32, layers=2, positions=64, seed=2)
    loaded.path = tmp_path
    settings = fb.FeatureSettings(layer=2, corpus=[s for doc in tiny_corpus(30) for s in doc], tokens=1500, sae=SMALL)
    real = fb.estimate_seconds
    monkeypatch.setattr(fb, "estimate_seconds", lambda lo, st, **kw: {
        **real(lo, st, **kw), "seconds": 100.0, "activation_seconds": 60.0, "train_seconds": 20.0,
        "statistics_seconds": 5.0, "effects_seconds": 10.0})
    assert fb.shares(loaded, settings) == (pytest.approx(0.6), pytest.approx(0.2), pytest.approx(0.05),
                                           pytest.approx(0.1))
    said = []
    fb.build(loaded, settings, lambda f, m: said.append((f, m)), instances=[])
    assert [f for f, m in said if m == "training the SAE…"] == [pytest.approx(0.6)]
    assert [f for f, m in said if m == "reading every token's features…"] == [pytest.approx(0.8)]
    # each feature's tables have their own share (a stage the losses' share had: its time left rose as it ran),
    # and the losses' three passes move the bar
    assert [f for f, m in said if m.startswith("each feature's top contexts")] == [pytest.approx(0.85)]
    assert [f for f, m in said if m.startswith("the masked-LM loss: clean")] == [pytest.approx(0.95)]
    assert len([m for _, m in said if m.startswith("the masked-LM loss: ") and "% of it" in m]) == 3
    assert said[-1][0] == 1.0 and [f for f, _ in said] == sorted(f for f, _ in said)


def test_page_shows_a_trained_sae_with_checked_charts(built, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from bert_explorer.app import exports

    kept = []  # the page's zip: its input.json names the feature, the sentence and the steering read
    monkeypatch.setattr(exports, "bundle_button", lambda bundle, key, container=None: kept.append(bundle))
    folder, loaded, path, _ = built
    at = AppTest.from_file("../pages/15_Features.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(folder)
    at.session_state["sae_layer"] = 1
    at.run()
    assert not at.exception, at.exception
    assert any("Gao et al. 2024" in m.value and "Bricken et al. 2023" in m.value and "goes beyond the\nBERT paper"
               in m.value for m in at.markdown)
    labels = {m.label for m in at.metric}
    assert {"Variance explained", "Mean L0", "Dead features", "Loss recovered"} <= labels
    inputs = kept[-1].inputs
    assert {"layer", "k", "features", "feature", "sentence"} <= set(inputs)
    assert inputs["sentence"] == at.text_input(key="sae_text").value
    # the page's settings are not the trained SAE's: it is shown, and the one asked for can be trained (the page
    # said "Train this one with the button" and drew none)
    assert any(i.value.startswith("An SAE of layer 1 with other settings is trained; it is shown below. Train one "
                                  "with these settings below") for i in at.info)
    assert "sae_train" in {b.key for b in at.button}
    assert len(at.dataframe) >= 3  # contexts, the sentence's features, the steering table
    at.text_input(key="sae_word").set_value("river").run()
    assert not at.exception, at.exception
    two = _words()[len(SPECIALS)] + "."  # a word and a full stop (this vocabulary has no "##" pieces)
    pieces = loaded.tokenizer.encode(two).tokens[1:-1]
    at.text_input(key="sae_word").set_value(two).run()  # ("xyzzy" was answered for "x" without a word)
    from bert_explorer.safe_text import markdown_text as md

    assert len(pieces) > 1 and any(c.value.startswith(f"“{md(two)}” is {len(pieces)} WordPieces") and
                                   f"those of its first, **{pieces[0]}**" in c.value for c in at.caption), pieces
    at.selectbox(key="sae_mode").set_value("clamp").run()
    assert not at.exception, at.exception


def test_cli_trains_and_reads(built, capsys):
    from bert_explorer.cli.parser import build_parser

    p = build_parser()
    a = p.parse_args(["features", "top", "--model", "m", "--feature", "3"])
    assert a.action == "top" and a.k == 32 and a.width == 8 and a.layer is None
    a = p.parse_args(["features", "steer", "--model", "m", "--feature", "3", "--text", "a [MASK]", "--amount", "5"])
    assert a.mode == "add" and a.token == "[MASK]"


def test_a_corpus_of_fewer_tokens_than_asked_is_said(tmp_path, monkeypatch, capsys):
    """A three-line corpus trained the SAE on 24 of the 10,000 tokens asked for, said only as "(24 tokens)" at the end
    of the estimate line; the result's 79 % dead features then read as the SAE's."""
    from bert_explorer.cli import main

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fb, "build", lambda *a, **k: None)  # (the training itself: 30 s, not what is tested)
    monkeypatch.setattr(fb, "Features", lambda path: type("Built", (), {"meta": {}})())
    corpus = tmp_path / "three.txt"
    corpus.write_text("the river bank was full of water .\n\nthe bank raised its rates again .\n\nshe sat by it .\n")
    assert main(["features", "train", "--model", "explorer-mini", "--layer", "2", "--tokens", "10000", "--k", "8",
                 "--width", "2", "--corpus", str(corpus)]) == 0
    err = capsys.readouterr().err
    assert re.search(rf"note: {re.escape(str(corpus))} gives \d+ of the 10,000 tokens asked for: the SAE trains on "
                     "those", err), err
    from bert_explorer.cli import features as cli_features  # and started in the background: said there too

    monkeypatch.setattr(cli_features.neighbour_jobs, "start_build", lambda *a, **k: None)
    assert main(["features", "train", "--model", "explorer-mini", "--layer", "2", "--tokens", "10000", "--k", "8",
                 "--width", "2", "--corpus", str(corpus), "--background"]) == 0
    assert "of the 10,000 tokens asked for" in capsys.readouterr().err


def test_an_sae_not_trained_names_the_command_with_the_settings_given(capsys):
    """`features search --tokens 20000` on an SAE not trained said to run `features train` without --tokens: the
    default SAE (minutes), after which the search still found none."""
    from bert_explorer.cli import main

    assert main(["features", "search", "--model", "explorer-mini", "--layer", "2", "--tokens", "20000", "--k", "16",
                 "--word", "water"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("train it first with `bert-explorer features train --model explorer-mini --layer 2 "
                                "--k 16 --tokens 20000`"), err


@pytest.mark.parametrize("flag, value, said", [
    ("--width", "100000", "--width: expected a whole number from 2 to 32, got 100,000"),  # (asked for 26 GB)
    ("--k", "0", "--k: expected a whole number from 4 to 128, got 0"),  # (a traceback)
    ("--tokens", "0", "--tokens: expected a whole number from 10,000 to 2,000,000, got 0"),  # ("fve": 1.0 of nothing)
    ("--epochs", "100000", "--epochs: expected a whole number from 1 to 10, got 100,000"),
])
def test_an_sae_s_sizes_are_bounded_as_the_page_bounds_them_before_any_work(flag, value, said, capsys):
    from bert_explorer.cli import main

    with pytest.raises(SystemExit) as e:
        main(["features", "train", "--model", "explorer-mini", flag, value])
    assert e.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, said", [("--amount", "nan", "--amount: expected a number from -200 to 200"),
                                               ("--top-k", "-3", "--top-k: expected a whole number from 1 to 100")])
def test_steering_s_amount_and_top_k_are_bounded_as_the_page_bounds_them(flag, value, said, capsys):
    """--amount nan answered NaN in every column, --top-k -3 was a traceback."""
    from bert_explorer.cli import main

    argv = ["features", "steer", "--model", "explorer-mini", "--feature", "0", "--text", "a [MASK] .", "--amount", "5"]
    with pytest.raises(SystemExit) as e:
        main([*argv, flag, value])
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_steering_at_a_position_past_the_text_is_one_sentence(monkeypatch, capsys):
    """--token 99 of a 6-WordPiece text was an IndexError."""
    from types import SimpleNamespace

    from bert_explorer.cli import features as cli_features
    from bert_explorer.cli import main

    loaded = checkpoint.load("explorer-mini", "BertForPreTraining")
    monkeypatch.setattr(cli_features, "_open", lambda args: (loaded, SimpleNamespace(check=lambda f: None)))
    assert main(["features", "steer", "--model", "explorer-mini", "--feature", "0", "--text", "the river [MASK] .",
                 "--amount", "5", "--token", "99"]) == 2
    assert "'99' is not a WordPiece of the text nor one of its positions (0 to 5)" in capsys.readouterr().err


def test_classroom_mode_trains_nothing(built, monkeypatch):
    """Beyond loopback the page says training is off and shows no button (a class cannot load a
    local folder, so the page runs on the default model here; ``fb.trained``, which offers the SAEs
    already trained, is tested above)."""
    from streamlit import config as st_config
    from streamlit.testing.v1 import AppTest

    folder, loaded, path, _ = built
    monkeypatch.delenv("BERT_EXPLORER_ALLOW_WRITES", raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")  # a class on a network
    try:
        at = AppTest.from_file("../pages/15_Features.py", default_timeout=120)
        at.session_state["be_model_choice"] = str(folder)
        at.session_state["sae_layer"] = 2  # nothing trained there
        at.run()
        assert not at.exception, at.exception
        assert any(i.value.startswith("The SAE of layer 2 with these settings is not prepared for this model yet; "
                                      "your teacher can prepare it ") for i in at.info)
        assert any("Training is off in classroom mode for students" in c.value for c in at.caption)
        assert "sae_train" not in {b.key for b in at.button}
        # the teacher starts it: the student's open page, which said "not prepared" through the whole build,
        # now redraws itself and follows the training
        monkeypatch.setattr(fb, "state", lambda loaded, settings: {"state": "building", "path": str(path),
                                                                   "fraction": 0.4, "message": "training"})
        shared.rerun_fragments(at)
        assert not at.exception, at.exception
        assert at.get("progress") and not any("is not prepared" in i.value for i in at.info)
    finally:
        st_config.set_option("server.address", before)


def test_estimate_counts_the_tokens_the_build_reads(built):
    folder, loaded, path, _ = built
    corpus = [s for doc in tiny_corpus(30) for s in doc]
    est = fb.estimate_seconds(loaded, fb.FeatureSettings(layer=1, corpus=corpus, tokens=1500, sae=SMALL))
    assert est["tokens"] == fb.Features(path).meta["tokens"]  # the same sentences, cut the same way
    assert est["step_seconds"] > 0 and est["seconds"] > est["activation_seconds"] + est["train_seconds"]
    # the parts the page names add up to the total it says (it named two, 3 min 24 s of 4 min 29 s)
    assert est["activation_seconds"] + est["train_seconds"] + est["after_seconds"] == pytest.approx(est["seconds"])


def test_auxk_gives_the_dead_features_a_gradient_and_nothing_else_does():
    """Gao et al.'s answer to dead features: features that did not fire (planted here: 32 tokens, k = 1,
    128 features, so most stay silent) are asked to explain the live ones' error, which moves their
    decoder columns and so can revive them. With AuxK switched off, a silent feature gets no gradient
    at all: its column stays exactly where it started."""
    from bert_explorer.analysis.features import sae as S

    torch.manual_seed(1)
    acts = torch.randn(32, 16)

    def silent_and_moved(aux_coef):
        cfg = S.SaeConfig(width_factor=8, k=1, epochs=1, batch_size=32, lr=1e-2, aux_k=8, aux_coef=aux_coef,
                          dead_tokens=1)
        torch.manual_seed(cfg.seed)
        start = S.TopKSAE(16, 128, 1)  # the same start train_sae makes from the same seed
        trained, _ = S.train_sae(acts, cfg)
        with torch.no_grad():
            v, i = start.pre_activations(trained.normalised(acts)).topk(1, -1)
            fired = torch.zeros(128, dtype=torch.bool)
            fired[i[v > 0].unique()] = True
            moved = (trained.W_dec - start.W_dec).abs().amax(0) > 1e-6
        return int((~fired).sum()), int((moved & ~fired).sum())

    silent, moved = silent_and_moved(1 / 32)
    assert silent > 64 and moved > silent // 2  # AuxK reached most of the silent features
    assert silent_and_moved(0.0) == (silent, 0)  # without it, none of them moved


@shared.needs_model("explorer-mini")
def test_a_layer_without_an_sae_names_the_layers_that_have_one(monkeypatch):
    """A student on layer 3 (kept from another model) read "not prepared" of a model whose layer 2 SAE was ready:
    the page listed only the SAEs of the layer chosen."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.analysis.features import build as fb

    monkeypatch.setattr(fb, "trained", lambda loaded: [{"layer": 2, "path": "/nowhere", "n_features": 512, "k": 4,
                                                         "tokens": 1000}])
    at = AppTest.from_file("../pages/15_Features.py", default_timeout=120)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.session_state["sae_layer"] = 3
    at.run()
    assert not at.exception
    assert "No SAE of layer 3 is trained for this model; SAEs of layer 2 are: choose that layer above." in \
        [i.value for i in at.info]


def test_the_activation_histogram_is_ticked_at_powers_of_ten_only(built):
    """The log axis was ticked "10, 2, 5, 100, 2, 5, 1000": a student read a "5" as 5 tokens."""
    from streamlit.testing.v1 import AppTest

    import figcheck

    folder, *_ = built
    at = AppTest.from_file("../pages/15_Features.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(folder)
    at.session_state["sae_layer"] = 1
    at.run()
    assert not at.exception
    (hist,) = [f for f in figcheck.figures(at) if "activations when it fires" in f.title]
    axis = hist.layout["yaxis"]
    assert axis["type"] == "log" and axis["dtick"] == 1 and axis["tickformat"] == ",d"


def test_a_model_without_a_trained_mlm_head_has_features_but_no_words_loss_or_steering(tmp_path, monkeypatch, capsys):
    """The page was closed to a model without a trained masked-LM head (MiniLM as released), though an SAE needs
    none; the command line trained one anyway and read its words, its "loss recovered" and its steering through the
    head's random weights. Its features, contexts and a sentence's features are shown; what reads the head is not."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.cli import main

    folder = shared.save_tiny_bert(tmp_path / "encoder", _words(), architecture="BertModel", hidden=32, layers=2,
                                   positions=64)
    loaded = checkpoint.load(str(folder), "BertForPreTraining")
    assert not fb.reads_words(loaded)
    monkeypatch.setattr(fb, "measure_loss", lambda *a, **k: pytest.fail("measured a loss through a random head"))
    settings = fb.FeatureSettings(layer=1, corpus=[s for doc in tiny_corpus(30) for s in doc], tokens=1500, sae=SMALL)
    est = fb.estimate_seconds(loaded, settings, 1)
    assert est["loss_seconds"] == 0 and est["effects_seconds"] == 0  # (not said as part of its time either)
    path = fb.build(loaded, settings)
    meta = fb.Features(path).meta
    assert meta["mlm_head"] is False and meta["loss_recovered"] is None and meta["fve"] > 0
    at = AppTest.from_file("../pages/15_Features.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(folder)
    at.session_state["sae_layer"] = 1
    at.session_state["sae_k"], at.session_state["sae_width"] = SMALL.k, SMALL.width_factor
    at.run()
    assert not at.exception, at.exception
    assert any(i.value.startswith("This model has no trained masked-LM head: its files hold no weights for that "
                                  "head") for i in at.info), [i.value for i in at.info]
    assert next(m.value for m in at.metric if m.label == "Loss recovered") == "—"
    assert not any("Pushes up" in m.value for m in at.markdown)
    assert any("Steering reads the masked-LM head's guesses" in i.value for i in at.info)
    assert any(d.value.columns.tolist()[:2] == ["#", "token"] for d in at.dataframe)  # the sentence's features
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: loaded)
    monkeypatch.setattr(fb, "entry_path", lambda *a, **k: path)
    assert main(["features", "steer", "--model", str(folder), "--layer", "1", "--feature", "3",
                 "--text", "a [MASK] .", "--amount", "5"]) == 2
    assert "has no trained masked-LM head, and steering reads its guesses" in capsys.readouterr().err
    assert main(["features", "top", "--model", str(folder), "--layer", "1", "--feature", "3"]) == 0
    assert "no words: this model has no trained masked-LM head to read them" in capsys.readouterr().out


def test_the_top_contexts_csv_writes_no_formula(built, tmp_path, monkeypatch, capsys):
    """`features top --output x.csv` wrote a context "=HYPERLINK(...)" as a spreadsheet formula, and a token "-" as
    one: every other CSV of the command line quotes such cells."""
    from bert_explorer.cli import main

    folder, loaded, path, _ = built
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: loaded)
    monkeypatch.setattr(fb, "entry_path", lambda *a, **k: path)
    rows = [{"activation": 2.5, "left": '=HYPERLINK("http://e.invalid","c")', "token": "-", "right": "river",
             "was": "-", "source": "x", "row": 1}]
    monkeypatch.setattr(fb.Features, "top_contexts", lambda self, feature, n=20: rows)
    out = tmp_path / "top.CSV"
    assert main(["features", "top", "--model", str(folder), "--layer", "1", "--feature", "3",
                 "--output", str(out)]) == 0
    import csv as csvlib

    (row,) = list(csvlib.DictReader(out.open(encoding="utf-8")))
    assert row["left"] == "'" + rows[0]["left"] and row["token"] == "'-" and row["right"] == "river"


def test_features_search_says_the_piece_it_searches_and_refuses_an_empty_word(built, monkeypatch, capsys):
    """--word zzzqqq returned the features of "z" unsaid, and an empty word printed [] with rc 0."""
    from bert_explorer.cli import main

    folder, loaded, path, _ = built
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: loaded)
    monkeypatch.setattr(fb, "entry_path", lambda *a, **k: path)
    argv = ["features", "search", "--model", str(folder), "--layer", "1", "--word"]
    assert main([*argv, " "]) == 2 and "--word is empty" in capsys.readouterr().err
    two = _words()[len(SPECIALS)] + "."  # a word and a full stop: two pieces
    assert main([*argv, two]) == 0
    assert f"is 2 WordPieces ({_words()[len(SPECIALS)]}, .): the features below are those of its first" in \
        capsys.readouterr().err
