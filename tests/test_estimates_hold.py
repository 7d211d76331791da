"""Estimates that hold: the corpus-wide jobs (the nearest-neighbour index, layer probing) and fine-tuning are
estimated before they start from the work the job itself will do (the same tokens, the same batches, the
same layers), by the one estimate module; the Fine-tune page and ``bert-explorer finetune`` say the estimate.
How close an estimate comes to the time taken is measured by bench/estimates.py, not here: tiny models on a
shared CPU time nothing reliably."""
import json
import re

import pytest

from bert_explorer import checkpoint
from bert_explorer.analysis.layers import probing
from bert_explorer.analysis.neighbours import index as nbb
from bert_explorer.data.corpora import tiny_corpus
from bert_explorer.train import estimate, probing_time, speed
import shared


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir):
    return shared.tiny_uncased(tmp_path_factory.mktemp("tiny") / "model", minilm_dir, layers=3)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


pytestmark = pytest.mark.usefixtures("one_thread")
# A time said before a job starts (``speed.said``): now, and on an idle machine when the load takes its share
SAID = (r"about [0-9hmins .]+ (\(the machine is idle now\)|\(the other work now leaves it the cores it uses\)"
        r"|on an idle machine, up to [0-9hmins .]+ at the load now)")


@pytest.fixture(autouse=True)
def _steady_cpu(monkeypatch):
    """This machine's speeds, as if measured and kept (``train/speed.py``): estimates compared within a test
    must not move with what the other processes on a shared machine do meanwhile."""
    monkeypatch.setattr(speed, "matmul_flop_s", lambda bf16=False: 150e9 if bf16 else 60e9)
    monkeypatch.setattr(speed, "layer_flop_s", lambda work, hidden, threads, bf16=False, intermediate=None:
                        (2 if work == "train" else 1) * (2.5 if bf16 else 1) * min(hidden, 768) / 768 * 50e9
                        * (1 + 0.8 * (threads - 1)))


def test_the_cpu_rate_is_the_layer_timed_here_for_the_jobs_width_threads_and_precision():
    one, basis = estimate.cpu_flop_s("forward", 768, 1)
    assert one == 50e9 and "50 GFLOP/s on 1 CPU thread of an idle machine" in basis and "width 768" in basis
    assert estimate.cpu_flop_s("forward", 768, 2)[0] == pytest.approx(90e9)
    assert estimate.cpu_flop_s("forward", 384, 1)[0] < one
    assert estimate.cpu_flop_s("train", 768, 1, bf16=True)[0] == pytest.approx(250e9)
    assert estimate.cpu_flop_s("probe", 768, 4)[0] == pytest.approx(estimate.PROBE_SHARE * 60e9)


# A corpus with what makes counting hard: a sentence longer than one window (cut at word starts), a
# duplicate (indexed once), an empty line, and documents of several sentences.
LONG = " ".join(["internationalisation of the extraordinarily complicated arrangements"] * 30)
CORPUS = [[LONG, "a short one .", "", "a short one ."]] + tiny_corpus(6, seed=5)


def _layer_calls(loaded):
    """Forward calls of each encoder layer, counted by hooks: [calls of layer 1, layer 2, ...]."""
    calls = [0] * loaded.config.num_layers
    hooks = [layer.register_forward_hook(lambda *a, i=i: calls.__setitem__(i, calls[i] + 1))
             for i, layer in enumerate(checkpoint.encoder_of(loaded.model).encoder.layer)]
    return calls, hooks


# ----- the nearest-neighbour index ------------------------------------------------------------------------
def test_the_index_estimate_counts_the_tokens_the_build_reports(tiny, cache):
    est = nbb.estimate_build_seconds(tiny, CORPUS, 2)
    nbb._last_units.clear()  # the build cuts the corpus again, as a build in its own process does
    said = []
    paths = nbb.build_index(tiny, CORPUS, 2, lambda f, m: said.append(m))
    meta = json.loads((paths[2] / "meta.json").read_text())
    assert meta["rows"] == est["tokens"] and meta["sentences"] == est["sentences"]
    assert any(f"of {est['tokens']:,} tokens" in m for m in said)  # the build's own progress counts the same
    assert est["disk_bytes"] == nbb.disk_bytes(meta["rows"], 32)


def test_the_index_estimate_runs_the_layers_the_build_runs(tiny, cache, monkeypatch):
    """A layer-0 index looks up the embeddings and runs no encoder layer: it is estimated cheaper than the
    last layer's exactly because the build runs fewer layers; if the build ran every layer for any index
    (``layers_run``, which both read), the two estimates would be equal."""
    L = tiny.config.num_layers
    calls, hooks = _layer_calls(tiny)
    try:
        ran = {}
        for layer in (0, 1, L):
            before = list(calls)
            nbb.build_index(tiny, CORPUS, layer)
            ran[layer] = [a - b for a, b in zip(calls, before)]
        est = {layer: nbb.estimate_build_seconds(tiny, CORPUS, layer) for layer in (0, 1, L)}
        assert ran[0] == [0] * L and est[0]["forward_seconds"] == 0 == est[0]["flops"]
        assert ran[1][0] > 0 and ran[1][1:] == [0] * (L - 1)
        assert all(n == ran[L][0] > 0 for n in ran[L])
        assert 0 < est[1]["flops"] < est[L]["flops"] == pytest.approx(L * est[1]["flops"])
        assert est[0]["seconds"] < est[1]["seconds"] < est[L]["seconds"]
        # the batches estimated are the batches the build runs: one forward call of layer 1 each
        assert len(nbb.build_shapes(nbb.corpus_units(tiny.tokenizer, CORPUS))) == ran[1][0]

        monkeypatch.setattr(nbb, "layers_run", lambda layers: L)  # a build that runs the whole model
        for layer in (0, L):
            nbb.shutil.rmtree(nbb.index_path(tiny, CORPUS, layer))
        before = list(calls)
        nbb.build_index(tiny, CORPUS, 0)
        assert [a - b for a, b in zip(calls, before)] == ran[L]
        assert nbb.estimate_build_seconds(tiny, CORPUS, 0)["flops"] == est[L]["flops"]
    finally:
        for h in hooks:
            h.remove()


def test_the_index_flops_are_those_of_the_batches_through_those_layers():
    shapes = [(10, 12), (4, 30)]
    one = estimate.forward_flops(1, 64, 12, 256)
    assert one == pytest.approx(2 * (4 * 64 * 64 + 2 * 64 * 256 + 9 * 64 + 256) + 4 * 64 * 12)
    assert estimate.batches_flops(shapes, 1, 64, 256) == pytest.approx(10 * 12 * one + 4 * 30 * estimate.forward_flops(
        1, 64, 30, 256))
    assert estimate.forward_flops(0, 64, 12) == 0 and estimate.batches_flops(shapes, 3, 64) == pytest.approx(
        3 * estimate.batches_flops(shapes, 1, 64))
    # the default feed-forward width is 4·H: the planner's count (encoder_parameters) is unchanged
    assert estimate.encoder_parameters(2, 64) == estimate.encoder_parameters(2, 64, 256) == 2 * (12 * 64 * 64 + 13 * 64)


def test_a_background_build_adds_its_start_and_a_thread_more_goes_faster(tiny, cache):
    here = nbb.estimate_build_seconds(tiny, CORPUS, 3, threads=1)
    background = nbb.estimate_build_seconds(tiny, CORPUS, 3, threads=1, process_start=True)
    two = nbb.estimate_build_seconds(tiny, CORPUS, 3, threads=2)
    assert background["seconds"] == pytest.approx(here["seconds"] + background["start_seconds"])
    assert background["start_seconds"] >= estimate.PROCESS_START_S
    assert two["forward_seconds"] < here["forward_seconds"] and two["tokens"] == here["tokens"]


def test_the_neighbours_command_says_its_estimate_before_building(tiny, cache, tmp_path, capsys):
    from bert_explorer.cli.neighbours import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(doc) for doc in CORPUS))
    assert main(["build", "--model", str(tiny.path), "--layer", "0,2", "--corpus", str(corpus), "--no-progress"]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("estimate for layers 0, 2: about "))
    assert err.index(line) < err.index("layer 2: ")  # said before the build reports
    est = nbb.estimate_build_seconds(tiny, str(corpus), [0, 2])
    assert f"{est['tokens']:,} tokens" in line
    meta = json.loads((nbb.index_path(tiny, str(corpus), 2) / "meta.json").read_text())
    assert meta["rows"] == est["tokens"]
    # built already: nothing to estimate, nothing said
    assert main(["build", "--model", str(tiny.path), "--layer", "2", "--corpus", str(corpus), "--no-progress"]) == 0
    assert "estimate" not in capsys.readouterr().err


# ----- layer probing ------------------------------------------------------------------------------------------
def test_the_probing_estimate_counts_the_rows_and_batches_the_probes_use(tiny, cache):
    for task, n in (("ner", 40), ("topic", 20)):
        settings = probing.ProbeSettings(max_examples=n, max_iter=5)
        est = probing.estimate_seconds(tiny, task, settings)
        shapes = []
        hook = checkpoint.encoder_of(tiny.model).encoder.layer[0].register_forward_hook(
            lambda m, args, out: shapes.append(tuple(args[0].shape[:2])))
        try:
            r = probing.probe_layers(tiny, task, settings)
        finally:
            hook.remove()
        assert est["rows"] == r["n_train"] + r["n_test"] and est["probes"] == 2 * (tiny.config.num_layers + 1)
        data = probing.load_task(task, settings.resolved(task))
        encs = (probing.encode_texts(tiny, data.inputs, 64) if task == "topic"
                else probing.encode_words(tiny, data.inputs, 128))
        assert sorted(probing.batch_shapes(encs)) == sorted(shapes)  # the batches the vectors were computed in
        assert est["features_seconds"] > 0 and est["probes_seconds"] > 0
        again = probing.estimate_seconds(tiny, task, settings)  # the vectors are in the cache now
        assert again["features_seconds"] == 0 and again["probes_seconds"] == pytest.approx(est["probes_seconds"])


def test_the_probing_estimate_counts_every_scoring_and_every_thread_the_run_uses(tiny, cache, monkeypatch):
    """A student's 240 sentences and 60 articles were estimated at 10 s and cost 14.9 s of CPU: the estimate left
    out the scorings of the held-out predictions (the margin's bootstrap among them) and counted the layer vectors'
    time once, where each of the forward passes' threads spends it."""
    calls = []
    score, entity_f1 = probing.score, probing._entity_f1
    monkeypatch.setattr(probing, "score", lambda *a, **k: calls.append("score") or score(*a, **k))
    monkeypatch.setattr(probing, "_entity_f1", lambda *a, **k: calls.append("entity") or entity_f1(*a, **k))
    for task, n in (("ner", 30), ("topic", 20)):
        calls.clear()
        settings = probing.ProbeSettings(max_examples=n, max_iter=3)
        est = probing.estimate_seconds(tiny, task, settings, threads=2)
        probing.probe_layers(tiny, task, settings)
        assert est["scorings"] == len(calls) > 2 * (tiny.config.num_layers + 1)  # every scoring the run made
        assert est["scoring_seconds"] >= len(calls) * probing_time.PROBE_SCORE_S
        assert est["seconds"] == pytest.approx(est["features_seconds"] + est["probes_seconds"] + est["scoring_seconds"])
        assert est["cpu_seconds"] == pytest.approx(2 * est["features_seconds"] + est["probes_seconds"]
                                                   + est["scoring_seconds"])


def test_probes_cost_more_with_more_rows_labels_layers_and_iterations():
    base = dict(num_layers=2, hidden_size=64, shapes=[(8, 20)], n_train=1000, n_test=200, n_labels=5, max_iter=50,
                threads=1)
    p = probing_time.probing_estimate(**base)["probes_seconds"]
    for change in ({"n_train": 2000}, {"n_labels": 20}, {"num_layers": 4}, {"max_iter": 100}):
        assert probing_time.probing_estimate(**{**base, **change})["probes_seconds"] > p
    assert probing_time.probing_estimate(**base, features_cached=True)["features_seconds"] == 0


# ----- fine-tuning -----------------------------------------------------------------------------------------
def test_the_fine_tuning_estimate_counts_the_runs_own_examples_and_steps(base_model):
    from bert_explorer.data.tiny_tasks import make_tiny
    from bert_explorer.train.engine import total_steps
    from bert_explorer.train.finetune import FinetuneConfig, estimate as ft_estimate, read_data

    cfg = FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=100, epochs=2,
                         batch_size=8, max_seq_length=32)
    train, dev = read_data(cfg)
    split = ft_estimate(cfg, train, len(dev.examples), threads=1, process_start=False)
    assert (split["train_examples"], split["dev_examples"]) == (len(train.examples), len(dev.examples))
    assert split["steps"] == total_steps(len(train.examples), 8, 2)
    whole = ft_estimate(cfg, make_tiny("classification", n=100, seed=0), threads=1, process_start=False)
    assert (whole["train_examples"], whole["dev_examples"]) == (len(train.examples), len(dev.examples))
    assert split["tokens_per_example"] <= 32
    parts = split["train_seconds"] + split["eval_seconds"] + split["loading_seconds"]
    assert split["seconds"] == pytest.approx(parts)
    longer = ft_estimate(FinetuneConfig(**{**cfg.__dict__, "epochs": 4}), train, len(dev.examples), threads=1,
                         process_start=False)
    assert longer["train_seconds"] == pytest.approx(2 * split["train_seconds"], rel=0.05)
    started = ft_estimate(cfg, train, len(dev.examples), threads=1, process_start=True)
    assert started["seconds"] == pytest.approx(split["seconds"] + estimate.PROCESS_START_S)


def test_a_feature_based_estimate_counts_its_bilstm_head_for_every_epoch(base_model):
    """The feature-based mode reads BERT once and then trains a 2-layer BiLSTM for its epochs: the estimate left
    the head out and said 5 s for a run that took 74 s (explorer-mini, concat-last-4, 300 BBC articles). Each
    epoch now adds the head's FLOPs (Section 5.3's BiLSTM, four layers in for concat-last-4) at its rate."""
    from bert_explorer.model.config import BertConfig
    from bert_explorer.train.finetune import FinetuneConfig, estimate as ft_estimate, read_data

    H = BertConfig.load(checkpoint.resolve(base_model)).hidden_size
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", max_train_examples=100, epochs=1,
                         batch_size=8, max_seq_length=32, mode="feature-based", features="concat-last-4")
    train, dev = read_data(cfg)
    once = ft_estimate(cfg, train, len(dev.examples), threads=1, process_start=False)
    thrice = ft_estimate(FinetuneConfig(**{**cfg.__dict__, "epochs": 3}), train, len(dev.examples), threads=1,
                         process_start=False)
    d_in = 2 * H  # concat-last-4 of a 2-layer model: both layers side by side (feature_based.layers_for)
    lstm = 3 * 2 * (8 * H * (d_in + H) + 8 * H * 3 * H)  # two directions, two layers, training = 3 x forward
    head_rate = estimate.PROBE_SHARE * 60e9  # a probe's share of the (steady) fp32 matrix rate above
    per_epoch = once["train_examples"] * once["tokens_per_example"] * lstm / head_rate
    assert thrice["train_seconds"] - once["train_seconds"] == pytest.approx(2 * per_epoch, rel=1e-6)
    last = ft_estimate(FinetuneConfig(**{**cfg.__dict__, "features": "last"}), train, len(dev.examples), threads=1,
                       process_start=False)
    assert last["train_seconds"] < once["train_seconds"]  # one layer in, not four


def test_the_fine_tune_page_shows_an_estimate_for_every_built_in_set(runs_root, base_model):
    """A generated set (tiny:...) has no preview loaded, yet it is estimated at the size the run makes."""
    at = shared.fine_tune_page_on_builtin(base_model)
    at.selectbox(key="ft_builtin").set_value("tiny:classification").run()
    assert not at.exception
    (said,) = [c.value for c in at.caption if c.value.startswith("Estimated time on")]
    # 64 generated examples, 6 held out as dev: 58 to train on, batch 32, 3 epochs: 2 steps an epoch
    assert re.search(r"\*\*" + SAID + r"\*\*", said) and "6 steps of 32 examples" in said and "6 dev examples scored" in said
    assert not at.button(key="ft_start").disabled


def test_the_fine_tune_estimate_says_sampled_only_when_the_run_samples(runs_root, base_model):
    """An upload of 40 rows said "(36 of the 40 training examples, sampled)": it counted the dev split as
    sampled away. And 9 rows gave "1 steps of 32 examples"."""
    from streamlit.testing.v1 import AppTest

    def said(rows, **widgets):
        csv = "text,label\n" + "".join(f"review number {i} is {'good' if i % 2 else 'bad'},{i % 2}\n"
                                        for i in range(rows))
        at = AppTest.from_file("../pages/11_Fine-tune.py", default_timeout=120)
        at.session_state["be_model_choice"] = base_model
        at.session_state["ft_upload_bytes"] = ("rows.csv", csv.encode())
        at.run()
        for key, value in widgets.items():
            at.number_input(key=key).set_value(value).run()
        assert not at.exception
        return next(c.value for c in at.caption if c.value.startswith("Estimated time on"))

    assert "sampled" not in said(40) and "steps of 32 examples of about" in said(40)
    assert "(20 of the 36 training examples, sampled)" in said(40, ft_max_train=20)
    assert "**: 3 steps of 8 examples of about" in said(9)  # 9 rows: 1 for dev, 8 to train on, 3 epochs


def test_a_started_runs_log_says_the_time_the_page_said(runs_root, base_model):
    """The page said 6 s and the run's log began "estimate: about 4 s" for the same job: the log left out the
    process's start, which the page counts. Both now count it, and the log says so."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.runs.run import Run

    csv = "text,label\n" + "".join(f"review number {i} is {'good' if i % 2 else 'bad'},{i % 2}\n" for i in range(120))
    at = AppTest.from_file("../pages/11_Fine-tune.py", default_timeout=120)
    # the tiny model: its steps take a fraction of a second, so that a CPU speed timed again in the run's process
    # on this shared machine cannot move the figure said (a model of width 384 trained 1 s at 125 or 203 GFLOP/s)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = base_model
    at.session_state["ft_upload_bytes"] = ("rows.csv", csv.encode())
    at.run()
    at.number_input(key="ft_epochs").set_value(1.0).run()
    assert not at.exception
    page = next(c.value for c in at.caption if c.value.startswith("Estimated time on"))
    at.button(key="ft_start").click().run()
    assert not at.exception
    (run_dir,) = [p for p in runs_root.iterdir() if p.is_dir()]
    status = Run(run_dir).wait(timeout=240)
    log = (run_dir / "log.txt").read_text()
    assert status["state"] == "finished", log[-2000:]
    line = next(x for x in log.splitlines() if "estimate: about " in x)
    idle = re.compile(r"about ([0-9hmins ]+?) (?:\(|on an idle)")
    assert idle.search(line).group(1) == idle.search(page.replace("**", "")).group(1), (page, line)
    assert "and the process's start, the model read and saved" in line  # what it counts, said
    steps = re.search(r"\d+ steps? of \d+ examples?", page).group()
    assert steps in line and "12 dev examples scored after each epoch" in line


def test_the_finetune_command_says_its_estimate_before_it_starts(base_model, tmp_path, capsys):
    from bert_explorer.cli import main

    out = tmp_path / "run"
    assert main(["finetune", "--model", base_model, "--train", "tiny:classification", "--output", str(out),
                 "--epochs", "1", "--batch-size", "16", "--device", "cpu", "--precision", "fp32"]) == 0
    captured = capsys.readouterr()
    (line,) = [x for x in captured.err.splitlines() if x.startswith("estimate: about ")]
    assert "4 steps of 16 examples" in line and "6 dev examples" in line and "GFLOP/s" in line
    assert json.loads(captured.out)["train_examples"] == 58  # the result on stdout, untouched
    # and where the model is, with the command that tries it (the JSON said neither)
    assert f"the fine-tuned model is in {out / 'model'}" in captured.err and f"predict --model {out}" in captured.err


def test_the_finetune_command_estimates_with_the_threads_it_trains_with(base_model, tmp_path, capsys, monkeypatch):
    """In the foreground the run trains with the threads of the cores free (here 2, as OMP_NUM_THREADS says);
    its estimate was made for a background run's one thread, about twice too long on a 2-core machine."""
    import torch

    from bert_explorer.cli import main

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(estimate, "background_threads", lambda: 1)  # (what a background run would get here)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert main(["finetune", "--model", base_model, "--train", "tiny:classification", "--output",
                     str(tmp_path / "run"), "--epochs", "1", "--device", "cpu", "--precision", "fp32"]) == 0
    finally:
        torch.set_num_threads(before)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("estimate: about ")]
    assert "on 2 CPU threads of an idle machine" in line
    assert "2 CPU threads of" in (tmp_path / "run" / "log.txt").read_text()


def test_the_probe_layers_command_says_its_estimate_before_it_runs(tiny, cache, tmp_path, capsys):
    from bert_explorer.cli import main

    args = ["probe-layers", "--model", str(tiny.path), "--task", "topic", "--max-examples", "20", "--max-iter", "5",
            "--output", str(tmp_path / "probe.json"), "--overwrite", "--no-progress"]
    assert main(args) == 0
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("estimate for topic: about ")]
    assert err.index(line) < err.index("topic: Topic") and "8 probes on 20 rows" in line
    assert main(args) == 0  # computed and kept: nothing to estimate
    assert "estimate" not in capsys.readouterr().err
