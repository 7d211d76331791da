"""Table 6 with real pre-trained weights: the ``miniatures`` recipe fine-tunes Turc et al.'s miniatures,
downloaded by name, with several seeds, and shows them beside Turc et al.'s GLUE scores and Table 6.

The Hub is tests/hub_standin.py serving tiny random checkpoints in the miniatures' real layout
(pytorch_model.bin only, a config without model_type, vocab.txt, TF and Flax files beside them) under the
real repository names; a shrunk recipe (a tiny task, two sizes, two seeds) runs end to end through the CLI.
"""
import contextlib
import io
import json
import re
import shutil
import statistics

import pytest
import torch
from streamlit.testing.v1 import AppTest

import figcheck
import hub_standin
from bert_explorer import checkpoint, cli
from bert_explorer.cli import ablation as cli_ablation
from bert_explorer.experiments import grid, miniatures, results, runner
from bert_explorer.model import ARCHITECTURES

TINY, MINI = "google/bert_uncased_L-2_H-128_A-2", "google/bert_uncased_L-4_H-256_A-4"
SERVED_SHAPES = {TINY: dict(hidden=32, layers=2, heads=2, intermediate=64),  # not the names' shapes: the weights
                 MINI: dict(hidden=48, layers=3, heads=2, intermediate=96)}  # read are the served ones
PAGE = "../pages/14_Ablation_studio.py"


def shrunk_recipe() -> dict:
    """The shipped recipe, shrunk to seconds: a generated task, Tiny and Mini, two seeds."""
    r = grid.load_recipe("miniatures")
    r.update(name="miniatures-test", seeds=[0, 1], axes={"size": ["tiny", "mini"]}, keep_cell_models=True,
             tasks={"sentiment": {"train": "tiny:classification", "max_train_examples": 32, "paper_column": "SST-2"}})
    r["finetune"].update(epochs=1, batch_size=16, max_seq_length=32, device="cpu")
    return grid.validate(r)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    hub_standin.write_miniature_layout(root / TINY, seed=5, **SERVED_SHAPES[TINY])
    hub_standin.write_miniature_layout(root / MINI, seed=6, with_heads=False, legacy_format=True,
                                       **SERVED_SHAPES[MINI])
    return root


@pytest.fixture(scope="module")
def ran(served, tmp_path_factory):
    """The shrunk recipe run through the CLI against the stand-in: (ablation folder, HF cache, stderr,
    the files the stand-in served)."""
    base = tmp_path_factory.mktemp("minis")
    recipe_file = base / "recipe.json"
    recipe_file.write_text(json.dumps(shrunk_recipe()))
    out, cache, err = base / "runs" / "ablation-minis", base / "hf-cache", io.StringIO()
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp, hub_standin.HubStandin(served) as hub:
        hub.point_client_here(mp, cache_dir=cache)
        mp.setenv("OMP_NUM_THREADS", "1")  # tiny models on a shared 2-core machine: one thread is quicker
        torch.set_num_threads(1)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(["ablate", "--recipe", str(recipe_file), "--output", str(out), "--no-progress"])
        fetched = {repo: hub.fetched(repo) for repo in (TINY, MINI)}
    torch.set_num_threads(before)
    assert code == 0, err.getvalue()
    return out, cache, err.getvalue(), fetched


# ----- the recipe, its estimate and its downloads ------------------------------------------------------
# The speeds of the 2-core AMD EPYC the recipe was measured on (train/speed.py's readings there, one thread,
# GFLOP/s): the planner is checked against that machine's measurement with that machine's speeds.
EPYC_LAYER_GFLOP_S = {("train", True): {128: 85.7, 256: 116.3, 512: 155.4},
                      ("forward", True): {128: 101.1, 256: 138.2, 512: 155.2},
                      ("train", False): {128: 58.9, 256: 71.2, 512: 79.9},
                      ("forward", False): {128: 75.8, 256: 84.2, 512: 87.9}}


def test_the_recipe_downloads_four_miniatures_and_fits_twenty_cpu_minutes(monkeypatch, tmp_path):
    from bert_explorer.train import device, estimate, speed

    monkeypatch.setattr(speed, "layer_flop_s", lambda work, hidden, threads, bf16=False, intermediate=None:
                        EPYC_LAYER_GFLOP_S[(work, bf16)][hidden] * 1e9)
    monkeypatch.setattr(speed, "matmul_flop_s", lambda bf16=False: (210.5 if bf16 else 98.7) * 1e9)
    monkeypatch.setattr(device, "cpu_bf16_is_fast", lambda: True)  # (the EPYC's AVX512-BF16)
    monkeypatch.setattr(estimate, "background_threads", lambda: 1)  # (its background runs' one thread)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    plan = grid.expand(grid.load_recipe("miniatures"))
    assert len(plan["cells"]) == 12 and {c["seed"] for c in plan["cells"]} == {0, 1, 2}
    assert sorted(d["repo"] for d in grid.downloads(plan)) == sorted(
        ["google/bert_uncased_L-2_H-128_A-2", "google/bert_uncased_L-4_H-256_A-4",
         "google/bert_uncased_L-4_H-512_A-8", "google/bert_uncased_L-8_H-512_A-8"])
    assert all(c["finetune"]["seed"] == c["seed"] for c in plan["cells"])  # a seed is the fine-tuning's seed
    cpu = grid.estimate(plan, "cpu")
    assert cpu["pretrain_s"] == 0  # nothing is pre-trained: downloaded
    # the default grid was chosen to stay under 20 minutes on the 2-core CPU; against a measurement, not the
    # planner's constants: the whole recipe took 844 s there (one thread, random weights of the four shapes)
    assert cpu["total_s"] <= 20 * 60 and abs(cpu["total_s"] - 844) <= 0.3 * 844, cpu
    assert "14.1 min for the 12 cells" in grid.load_recipe("miniatures")["description"]
    text = grid.downloads_text(plan)
    assert re.search(r"Downloads 4 models from the Hugging Face Hub when it starts \(about 346 MB in all", text), text
    assert grid.offline_refusal(plan) is None  # online: the download is the user's choice, said before it starts
    with pytest.raises(grid.RecipeError, match="cannot vary objective: Google pre-trained them all with MLM"):
        grid.validate({**grid.load_recipe("miniatures"), "axes": {"objective": ["mlm+nsp", "mlm"]}})
    with pytest.raises(grid.RecipeError, match=r"size 'large' has no pre-trained miniature on the Hub; choose from "
                                               r"tiny, mini, small, medium, base, L2-H256"):
        grid.validate({**grid.load_recipe("miniatures"), "axes": {"size": ["tiny", "large"]}})


def test_the_cli_states_the_estimate_and_refuses_offline_with_nothing_cached(monkeypatch, tmp_path, capsys):
    from bert_explorer.runs.report import duration_text
    from bert_explorer.train import speed

    monkeypatch.setattr(speed, "busy_cores", lambda: (0.0, 0.0))  # an idle machine: the time said is the idle one
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["ablate", "--recipe", "miniatures", "--estimate"]) == 0
    out = capsys.readouterr().out
    seconds = grid.estimate(grid.expand(grid.load_recipe("miniatures")), "cpu")["total_s"]
    assert f"about {duration_text(seconds)} (the machine is idle now) on this machine's CPU" in out and "12 cells (3 seeds each setting)" in out, out
    assert "about 346 MB in all" in out and "google/bert_uncased_L-8_H-512_A-8 (167 MB)" in out
    # another task than the recipe's, with the recipe's limits: a smaller built-in set is planned shorter
    assert cli.main(["ablate", "--recipe", "miniatures", "--task", "builtin:pang-lee", "--estimate"]) == 0
    other = capsys.readouterr().out
    assert "tasks pang-lee (builtin:pang-lee)" in other and f"about {duration_text(seconds)} (the machine" not in other
    assert cli.main(["ablate", "--recipe", "miniatures", "--task", str(tmp_path / "nope.csv"), "--estimate"]) == 2
    assert "nope.csv: no such file" in capsys.readouterr().err
    # a task file is read and counted: 80 short reviews are planned far shorter than the 1,000 of 64 WordPieces
    # a file was taken for, and one that cannot be read is refused before anything is planned
    small = tmp_path / "reviews.csv"
    small.write_text("text,label\n" + "".join(f"{'a fine film' if i % 2 else 'a dull film'} {i},{i % 2}\n"
                                               for i in range(80)))
    recipe = cli_ablation.with_task(grid.load_recipe("miniatures"), str(small))
    (spec,) = recipe["tasks"].values()
    assert spec["examples"] == 80 and spec["words_per_example"] == 5.0  # "a fine film 1", and its label
    plan = grid.expand(recipe)
    assert grid.estimate(plan)["finetune_s"] < 0.5 * grid.estimate(grid.expand(
        {**recipe, "tasks": {k: {kk: v for kk, v in t.items() if kk not in ("examples", "words_per_example")}
                             for k, t in recipe["tasks"].items()}}))["finetune_s"]
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00rest")
    assert cli.main(["ablate", "--recipe", "miniatures", "--task", str(bad), "--estimate"]) == 2
    err = capsys.readouterr().err
    assert "bad.csv is a binary file (a PNG image)" in err and err.count("\n") == 1, err
    code = cli.main(["ablate", "--recipe", "miniatures", "--output", str(tmp_path / "abl")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert re.fullmatch(r"bert-explorer: error: This recipe starts from google/bert_uncased_L-2_H-128_A-2, .+, which "
                        r"are not on this machine, and this machine is set to work offline \(HF_HUB_OFFLINE\): run "
                        r"`bert-explorer download .+` where there is internet .+\n", err), err
    assert not (tmp_path / "abl").exists()  # refused before anything was written


def test_without_a_network_the_cells_of_a_model_fail_with_one_sentence(monkeypatch, tmp_path):
    """Not set offline, but the Hub cannot be reached: nothing is known before the download starts, so
    that model's cells fail with the Hub's sentence (what to do), and the run ends."""
    with hub_standin.HubStandin(tmp_path) as closed:
        endpoint = closed.endpoint  # a port where nothing listens once it is stopped
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    res = runner.run_ablation(shrunk_recipe(), tmp_path / "abl", say=lambda *_: None)
    assert len(res) == 4 and {r["status"] for r in res.values()} == {"failed"}
    for r in res.values():
        assert re.fullmatch(r"download failed: google/bert_uncased_L-\d_H-\d+_A-\d is not on this machine yet and the "
                            r"Hugging Face Hub \(http://127\.0\.0\.1:\d+\) cannot be reached \(.+\): run "
                            r"`bert-explorer download .+", r["error"]), r["error"]
        assert "\n" not in r["error"]


# ----- the run ----------------------------------------------------------------------------------------------
def _served_weights(served, repo):
    sd = torch.load(served / repo / "pytorch_model.bin", weights_only=True)
    return {k.removeprefix("bert.").replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta",
                                                                                            "LayerNorm.bias"): v
            for k, v in sd.items() if k.startswith("bert.encoder.")}


def test_every_cell_fine_tunes_the_downloaded_weights(ran, served, monkeypatch):
    out, cache, err, fetched = ran
    assert "recipe miniatures-test: 4 cells (2 seeds each setting)" in err and "estimated time: about" in err
    assert "Downloads 2 models from the Hugging Face Hub when it starts" in err
    for repo in (TINY, MINI):  # fetched once, shared by both seeds; only what loading needs
        assert sorted(fetched[repo]) == ["config.json", "pytorch_model.bin", "vocab.txt"], fetched
    res = runner.read_results(out)
    assert len(res) == 4 and all(r["status"] == "finished" for r in res.values()), res
    assert sorted((r["size"], r["seed"]) for r in res.values()) == [("mini", 0), ("mini", 1), ("tiny", 0), ("tiny", 1)]
    assert not (out / "pretrain").exists()  # nothing pre-trained here
    for cell_id, r in res.items():
        repo = TINY if r["size"] == "tiny" else MINI
        config = json.loads((out / "cells" / cell_id / "config.json").read_text())
        assert config["model"] == f"hf:{repo}" and config["seed"] == r["seed"]
        tuned = checkpoint.load(out / "cells" / cell_id / "model")
        assert tuned.config.hidden_size == SERVED_SHAPES[repo]["hidden"]  # the served model, not a preset's shape
        theirs = _served_weights(served, repo)
        mine = {k.removeprefix("bert."): v for k, v in tuned.model.state_dict().items()
                if k.startswith("bert.encoder.")}
        assert mine.keys() == theirs.keys()
        # one epoch at lr 1e-4 moves a weight by about 1e-4 per step: the start was the served model
        moved = max((mine[k] - theirs[k]).abs().max().item() for k in theirs)
        assert 0 < moved < 3e-3, (cell_id, moved)
        torch.manual_seed(99)  # another start of the same shape is far away: random weights differ by their scale
        fresh = {k: v for k, v in ARCHITECTURES["BertModel"](tuned.config).state_dict().items() if k in theirs}
        assert max((mine[k] - fresh[k]).abs().max().item() for k in fresh) > 0.05
    # downloaded once: offline, the same recipe starts from the cache and downloads nothing
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = grid.expand(shrunk_recipe())
    assert grid.offline_refusal(again) is None
    assert grid.downloads_text(again) == ("All 2 models are on this machine already (the Hugging Face cache): "
                                          "nothing is downloaded.")


def test_the_results_sit_beside_turc_et_al_and_say_what_this_run_measured(ran):
    out = ran[0]
    plan, res, _ = results.load(out)
    df = miniatures.table(plan, res)
    assert df["size"].tolist() == ["tiny", "mini"] and df["model"].tolist() == [TINY, MINI]
    for _, row in df.iterrows():
        scores = [r["score"] for r in res.values() if r["size"] == row["size"]]
        assert row["ours"] == pytest.approx(statistics.fmean(scores))
        assert row["spread"] == pytest.approx(statistics.stdev(scores)) and row["seeds"] == 2
    assert df["turc_glue"].tolist() == [64.2, 65.8] and df["turc_value"].tolist() == [83.2, 85.9]
    assert df["turc_column"].tolist() == ["SST-2", "SST-2"]
    assert df["parameters_M"].tolist() == [4.4, 11.3]  # millions, as Turc et al. count them
    fig = figcheck.figure(miniatures.figure(df).to_json())
    figcheck.check(fig)
    names = [t.name for t in fig.traces]
    assert names == ["ours: sentiment, accuracy on dev (mean of 2 seeds)", "Turc et al. 2019: GLUE score (test)",
                     "Turc et al. 2019: SST-2 (test)", "Devlin et al. 2019, Table 6: SST-2 (dev)"]
    ours = fig.traces[0]
    assert ours.y.tolist() == pytest.approx(df["ours"].tolist())
    assert figcheck.decode(ours.raw["error_y"]["array"]).tolist() == pytest.approx(df["spread"].tolist())
    assert fig.traces[3].y.tolist() == [88.4, 91.3, 92.9, 93.3, 93.7]  # Table 6's SST-2, smallest to largest
    text = miniatures.caption(plan, res, df)
    verdict = next(d["verdict"] for d in results.directions(res) if d["key"] == "bigger_beats_smaller")
    tiny, mini = df.iloc[0], df.iloc[1]
    measured = f"tiny {tiny['ours']:.1f} ± {tiny['spread']:.1f} → mini {mini['ours']:.1f} ± {mini['spread']:.1f}"
    assert measured in text and f"Bigger beats smaller (Table 6) in this run: {verdict} (" in text, text
    assert "this run did not measure them" in text
    # the CLI's report carries the same table
    with contextlib.redirect_stdout(io.StringIO()) as report:
        assert cli.main(["ablate", "--report", str(out)]) == 0
    section = report.getvalue().split("## Pre-trained miniatures beside Turc et al. 2019")[1]
    table = results.parse_markdown_tables(section)[0]
    assert table["Turc: GLUE score (test)"].tolist() == ["64.2", "65.8"] and table["model"].tolist() == [TINY, MINI]
    assert not table.isna().any().any()  # a missing value is drawn as a dash, not the grid's grey "None"
    assert table["ours (dev, mean ± std)"].tolist() == [f"{m:.1f} ± {sd:.1f} (2 seeds)"
                                                         for m, sd in zip(df["ours"], df["spread"])]


# ----- the page -----------------------------------------------------------------------------------------------
def test_the_page_shows_the_estimate_the_downloads_and_the_results_beside_turc(ran, runs_root, monkeypatch, tmp_path):
    from bert_explorer.runs.report import duration_text
    from bert_explorer.train import speed

    monkeypatch.setattr(speed, "busy_cores", lambda: (0.0, 0.0))  # an idle machine: the time said is the idle one
    shutil.copytree(ran[0], runs_root / "ablation-minis")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.selectbox(key="abl_recipe").set_value("miniatures").run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    plan = grid.expand(grid.load_recipe("miniatures"))
    assert metrics["Cells"] == "12" and metrics["Models to download"] == "4"
    assert metrics["Time on this CPU"] == f"~{duration_text(grid.estimate(plan, 'cpu')['total_s'])}"
    assert any(m.value == grid.downloads_text(plan) for m in at.markdown)
    assert at.button(key="abl_start").label == "Download 4 models (about 346 MB) and start in the background"
    # the results of the finished run: the table and the chart beside Turc et al.'s
    table = next(d.value for d in at.dataframe if "Turc: GLUE score (test)" in d.value.columns)
    assert table["Turc: GLUE score (test)"].tolist() == ["64.2", "65.8"] and table["model"].tolist() == [TINY, MINI]
    assert not table.isna().any().any()  # a missing value is drawn as a dash, not the grid's grey "None"
    charts = [f for f in figcheck.figures(at) if f.title.startswith("Model size (Table 6) with Google's")]
    assert len(charts) == 1 and {t.name for t in charts[0].traces} >= {
        "Turc et al. 2019: GLUE score (test)", "Devlin et al. 2019, Table 6: SST-2 (dev)"}
    # the log axis labelled in whole millions (its own labels between 10 and 100 read "2, 5")
    ticks = charts[0].layout["xaxis"]
    assert {"10", "20", "50", "100"} <= set(ticks["ticktext"]) and ticks["tickvals"][ticks["ticktext"].index("20")] == 20
    assert any("This run fine-tuned 2 of Google's pre-trained miniatures" in c.value for c in at.caption)
    # build my own from Google's miniatures: seeds multiply the cells
    at.radio(key="abl_mode").set_value("Build my own").run()
    at.radio(key="abl_models").set_value("Google's miniatures").run()
    assert not at.exception and {m.label: m.value for m in at.metric}["Cells"] == "12"
    # offline, with nothing cached: one sentence, and no Start
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.selectbox(key="abl_recipe").set_value("miniatures").run()
    assert not at.exception and not [b for b in at.button if b.key == "abl_start"]
    assert any(w.value.startswith("This recipe starts from google/bert_uncased_L-2_H-128_A-2") for w in at.warning)
