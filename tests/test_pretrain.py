"""Pre-training runs: resume continues the loss curve exactly, DDP keeps ranks in sync,
a checkpoint can be probed (and read by transformers), background runs stop cleanly."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from bert_explorer.train.pretrain import run_pretraining

from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.runs.background import start_background
from bert_explorer.runs.run import Run

TINY = dict(corpus="tiny", size="tiny", vocab="train", vocab_size=300, batch_size=4, max_seq_length=48, log_every=1,
            eval_every=1000, eval_batches=2, seed=3, device="cpu")


def _train_losses(run_dir):
    rows = [m for m in Run(run_dir).metrics() if m["split"] == "train"]
    return {m["step"]: m["loss"] for m in rows}  # later lines (after a resume) win


# tiny_vocab (conftest.py): one WordPiece vocabulary that every run here reads


def test_resume_after_a_crash_gives_the_same_next_losses(tmp_path, tiny_vocab):
    # Both runs read one vocabulary (learnt once: quicker than learning one per run).
    cfg = PretrainConfig(**{**TINY, "vocab": tiny_vocab}, max_steps=6, save_every=3)
    run_pretraining(cfg, tmp_path / "straight", progress=False)

    def crash(step, _):
        if step == 4:
            raise KeyboardInterrupt("simulated kill after step 4")

    with pytest.raises(KeyboardInterrupt):
        run_pretraining(cfg, tmp_path / "crashed", progress=False, on_step=crash)
    assert Run(tmp_path / "crashed").latest_checkpoint().name == "step-3"
    run_pretraining(cfg, tmp_path / "crashed", resume=True, progress=False)

    a, b = _train_losses(tmp_path / "straight"), _train_losses(tmp_path / "crashed")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in (4, 5, 6):
        assert b[step] == pytest.approx(a[step], abs=1e-6), step
    # the loss actually moves: the test would notice a resume that repeated a step
    assert len({round(a[s], 6) for s in a}) > 3
    # each line says how full its sequences were: the real tokens over batch x max_seq_length slots (an estimate of
    # a later run on the same corpus reads its speed with it)
    fills = [m["fill"] for m in Run(tmp_path / "straight").metrics() if m["split"] == "train"]
    assert len(fills) == 6 and all(0 < f < 1 for f in fills)
    # metrics.jsonl holds each step once: step 4's first line (trained again after the kill) is set aside
    steps = [m["step"] for m in Run(tmp_path / "crashed").metrics() if m["split"] == "train"]
    assert steps == sorted(set(steps)) == [1, 2, 3, 4, 5, 6]
    aside = (tmp_path / "crashed" / "set_aside" / "metrics-after-step-3.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in aside if json.loads(line)["split"] == "train"] == [4]


def test_a_stop_its_process_never_read_does_not_stop_the_resume(tmp_path, tiny_vocab):
    """Stop pressed, then the process killed before its next step: the STOP file outlived it, and a resume from the
    command line trained nothing and ended "stopped" with exit 0."""
    cfg = PretrainConfig(**{**TINY, "vocab": tiny_vocab}, max_steps=6, save_every=3)
    run = Run(tmp_path / "run")

    def stopped_then_killed(step, _):
        if step == 4:
            run.request_stop()
            raise KeyboardInterrupt("simulated kill after the Stop, before the step that reads it")

    with pytest.raises(KeyboardInterrupt):
        run_pretraining(cfg, run.path, progress=False, on_step=stopped_then_killed)
    assert (run.path / "STOP").exists()
    result = run_pretraining(cfg, run.path, resume=True, progress=False)
    assert result["state"] == "finished" and result["step"] == 6
    assert not (run.path / "STOP").exists()
    assert "removed a STOP file left by an earlier process" in (run.path / "log.txt").read_text()


def test_refuses_to_overwrite_a_run_without_resume(tmp_path):
    cfg = PretrainConfig(**TINY, max_steps=1)
    run_pretraining(cfg, tmp_path / "r", progress=False)
    with pytest.raises(ValueError, match="--resume"):
        run_pretraining(cfg, tmp_path / "r", progress=False)


def test_pretrain_checkpoint_probe_round_trip(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = PretrainConfig(**TINY, max_steps=8)
    result = run_pretraining(cfg, tmp_path / "run", progress=False)
    assert 0 <= result["mlm_accuracy"] <= 1 and "nsp_accuracy" in result
    ckpt = tmp_path / "run" / "checkpoints" / "step-8"
    text = "the river flows past the [MASK] bank ."
    r = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "probe", "mlm", "--model", str(ckpt),
                        "--text", text, "--top-k", "5", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    preds = json.loads(r.stdout)[0]["predictions"]
    probs = [p["probability"] for p in preds]
    assert probs == sorted(probs, reverse=True) and sum(probs) <= 1.0 + 1e-6

    # The same numbers from transformers reading our checkpoint.
    tok = transformers.AutoTokenizer.from_pretrained(str(ckpt))
    hf = transformers.BertForPreTraining.from_pretrained(str(ckpt)).eval()
    enc = tok(text, return_tensors="pt")
    pos = enc["input_ids"][0].tolist().index(tok.mask_token_id)
    with torch.no_grad():
        p = hf(**enc).prediction_logits[0, pos].softmax(-1)
    top = p.topk(5)
    assert [x["id"] for x in preds] == top.indices.tolist()
    assert probs == pytest.approx(top.values.tolist(), abs=1e-5)

    r = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "probe", "nsp", "--model", str(ckpt),
                        "--a", "the river is wide .", "--b", "boats sail on it .", "--json"],
                       capture_output=True, text=True)
    out = json.loads(r.stdout)
    enc = tok("the river is wide .", "boats sail on it .", return_tensors="pt")
    with torch.no_grad():  # transformers' NSP head on the same checkpoint: label 0 = IsNext
        p_next = hf(**enc).seq_relationship_logits[0].softmax(-1)[0].item()
    assert out["is_next"] == pytest.approx(p_next, abs=1e-5)


def test_probe_on_minilm_explains_the_missing_head():
    r = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "probe", "mlm", "--model", "minilm",
                        "--text", "a [MASK] b"], capture_output=True, text=True)
    assert r.returncode == 2 and "no trained masked-LM head" in r.stderr and "Traceback" not in r.stderr
    assert "'minilm-mlm-nsp'" in r.stderr  # names the model to use instead


def test_two_process_ddp_run_keeps_ranks_in_sync(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**TINY, "max_steps": 4}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                        "--standalone", "-m", "bert_explorer.cli", "pretrain", "--config", str(cfg),
                        "--output", str(tmp_path / "ddp"), "--no-progress"],
                       capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    status = Run(tmp_path / "ddp").status()
    assert status["world_size"] == 2 and status["state"] == "finished" and status["ddp_backend"] == "gloo"
    sums = status["rank_checksums"]
    assert len(sums) == 2 and status["ranks_in_sync"] and sums[0] == pytest.approx(sums[1], rel=1e-9)
    # one result printed and one levers line logged, not one a rank
    assert r.stdout.count('"step": 4') == 1, r.stdout
    assert (tmp_path / "ddp" / "log.txt").read_text().count("CPU levers") <= 1
    # resumed by one process, it would read sequences trained already and step with half the batch: refused
    (_, last), = Run(tmp_path / "ddp").checkpoints()[-1:]
    assert json.loads((last / "training_args.json").read_text())["world_size"] == 2
    r = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "pretrain", "--output", str(tmp_path / "ddp"),
                        "--resume", "--max-steps", "6", "--no-progress"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "was trained by 2 process(es) and this resume runs 1" in r.stderr, r.stderr[-2000:]
    assert f"`torchrun --nproc_per_node 2 -m bert_explorer.cli pretrain --output {tmp_path / 'ddp'} --resume`" in r.stderr
    assert Run(tmp_path / "ddp").status()["state"] == "finished"


def test_background_run_can_be_stopped_and_resumed(tmp_path):
    from bert_explorer.runs.run import duration

    config = {**TINY, "max_steps": 100000, "save_every": 100000}
    run = start_background("pretrain", config, tmp_path / "bg")
    import time
    deadline = time.time() + 120
    while time.time() < deadline and run.status().get("step", 0) < 2:
        time.sleep(0.3)
    assert run.status()["state"] == "running"
    run.request_stop()
    status = run.wait(timeout=120)
    assert status["state"] == "stopped"
    stopped_at, first_start, first_part = status["step"], status["started"], duration(status)
    ckpt = run.latest_checkpoint()
    assert ckpt is not None and ckpt.name == f"step-{stopped_at}"

    # Resume it for a few more steps: the loss curve goes on from where it stopped.
    cfg = json.loads((run.path / "config.json").read_text())
    cfg["max_steps"] = stopped_at + 2
    (run.path / "config.json").write_text(json.dumps(cfg))
    start_background("pretrain", cfg, run.path, resume=True)
    assert run.wait(timeout=120)["state"] == "finished"
    steps = [m["step"] for m in run.metrics() if m["split"] == "train"]
    assert steps[-2:] == [stopped_at + 1, stopped_at + 2]
    # one run in two parts: its first start, both parts' time, and a Stop is no crash ("taking over from pid
    # …, which ended without releasing the run" was logged after every Stop)
    status = run.status()
    assert status["started"] == first_start and duration(status) > first_part
    # the earlier part counts to its Stop, not to the resume (the starter's writes between are no part's)
    assert status["earlier_seconds"] == pytest.approx(first_part, abs=0.01)
    assert "taking over" not in (run.path / "log.txt").read_text()


def test_a_corpus_too_small_for_held_out_nsp_pairs_still_trains(tmp_path):
    from bert_explorer.data.corpora import tiny_corpus

    n_docs = len(tiny_corpus())
    # a fraction that leaves exactly one held-out document: NotNext pairs need two
    cfg = PretrainConfig(**{**TINY, "held_out_fraction": 1.0 / n_docs}, max_steps=2)
    result = run_pretraining(cfg, tmp_path / "small", progress=False)
    assert result["step"] == 2 and "nsp_accuracy" not in result
    assert "too few for NSP pairs" in (tmp_path / "small" / "log.txt").read_text()
    # and its estimate, said before, counts no held-out evaluation (it said "1 held-out evaluation", then logged
    # that there was none); the same split with an objective of single segments evaluates on that document
    from bert_explorer.train.pretraining_data import held_out_text
    from bert_explorer.train.pretrain import estimate

    est = estimate(cfg, tmp_path / "runs")
    assert est["held_out_evaluations"] == 0 and est["eval_seconds"] == 0
    assert held_out_text(est["held_out_evaluations"], est["held_out_reason"]) == \
        "no held-out evaluation (fewer than two documents held out, and next-sentence pairs need two)"
    none_out = estimate(dataclasses.replace(cfg, held_out_fraction=0.0, objective="mlm"), tmp_path / "runs")
    assert held_out_text(none_out["held_out_evaluations"], none_out["held_out_reason"]) == \
        "no held-out evaluation (it holds no document out: held_out_fraction is 0)"
    no_nsp = estimate(dataclasses.replace(cfg, objective="mlm"), tmp_path / "runs")
    assert no_nsp["held_out_evaluations"] == 1 and no_nsp["eval_seconds"] > 0


@pytest.mark.skipif(os.name != "posix", reason="Ctrl-C and SIGTERM as a terminal and kill send them")
@pytest.mark.parametrize("signum", ["SIGINT", pytest.param("SIGTERM", marks=pytest.mark.slow)])  # (one default run: 7 s)
def test_ctrl_c_and_sigterm_stop_a_pretraining_at_its_step_with_a_checkpoint_to_resume_from(signum, tmp_path,
                                                                                         tiny_vocab):
    """Ctrl-C is the same clean stop as SIGTERM (and the app's Stop): the run ends at its step with a
    checkpoint and "stopped", the log and stderr say how to go on, the exit code is the signal's, and
    --resume goes on from there."""
    import signal

    from shared import signalled

    out = tmp_path / "run"
    flags = ["--corpus", "tiny", "--size", "tiny", "--vocab", tiny_vocab, "--batch-size", "4",
             "--max-seq-length", "48", "--log-every", "1", "--eval-every", "100000", "--save-every", "100000",
             "--eval-batches", "1", "--device", "cpu", "--no-progress", "--output", str(out)]
    done = signalled(["pretrain", *flags, "--max-steps", "100000"], str(out / "status.json"), 2,
                     getattr(signal, signum))
    assert done.returncode == 128 + getattr(signal, signum), done.stderr[-2000:]
    run = Run(out)
    status = run.status()
    step = status["step"]
    assert status["state"] == "stopped" and step >= 2 and "error" not in status
    assert run.latest_checkpoint().name == f"step-{step}"
    said = {"SIGINT": "interrupted (Ctrl-C)", "SIGTERM": "stopped by SIGTERM"}[signum]
    sentence = f"{said} at step {step:,} of 100,000; continue with `bert-explorer pretrain --output {out} --resume`"
    assert done.stderr.splitlines()[-1] == f"bert-explorer: {sentence}"
    assert (out / "log.txt").read_text().splitlines()[-1].endswith(sentence)
    # saved at once, without a held-out evaluation (a container's stop gives seconds): the resume measures
    assert f"no held-out evaluation at step {step}: the run was signalled" in (out / "log.txt").read_text()
    assert not [m for m in run.metrics() if m["split"] == "eval"]

    again = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "pretrain", "--output", str(out), "--resume",
                            "--max-steps", str(step + 1), "--no-progress"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert run.status()["state"] == "finished" and run.latest_checkpoint().name == f"step-{step + 1}"


@pytest.mark.skipif(os.name != "posix", reason="Ctrl-C as a terminal sends it")
def test_ctrl_c_while_a_pretraining_reads_its_corpus_ends_it_at_once_and_resume_starts_it(tmp_path):
    """Tokenising a large corpus takes minutes before step 1; a Ctrl-C then does not wait for it (nor saves
    a checkpoint of random weights): the run is "stopped" at once with nothing trained, and --resume
    starts it from step 0 with its settings."""
    import signal
    import time

    from shared import signalled

    corpus = tmp_path / "corpus.txt"  # (about 2 s to learn a vocabulary and tokenise, idle)
    words = "the cat sat on a mat while the dog ran in the park and birds sang over the hill".split()
    corpus.write_text("\n\n".join("\n".join(" ".join(words[(d + s + i) % len(words)] for i in range(14)) + f" {d} {s} ."
                                            for s in range(8)) for d in range(4000)) + "\n")
    out = tmp_path / "run"
    flags = ["--corpus", str(corpus), "--size", "tiny", "--vocab-size", "500", "--batch-size", "4",
             "--max-seq-length", "32", "--eval-batches", "1", "--device", "cpu", "--no-progress", "--output", str(out)]
    sent = time.time()
    done = signalled(["pretrain", *flags, "--max-steps", "3"], str(out / "status.json"), 0, signal.SIGINT)
    assert done.returncode == 130, done.stderr[-2000:]
    run = Run(out)
    assert run.status()["state"] == "stopped" and "error" not in run.status() and not run.checkpoints()
    assert not run.metrics()  # no step trained, no evaluation of random weights
    sentence = (f"interrupted (Ctrl-C) before its first step, nothing trained to save; start it from step 0 with its "
                f"settings with `bert-explorer pretrain --output {out} --resume`")
    assert done.stderr.splitlines()[-1] == f"bert-explorer: {sentence}", done.stderr[-2000:]
    assert time.time() - sent < 60

    again = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "pretrain", "--output", str(out), "--resume",
                            "--no-progress"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert run.status()["state"] == "finished" and run.latest_checkpoint().name == "step-3"


def test_the_pretrain_command_says_its_estimate_first_and_a_plateau_at_the_end(tmp_path, tiny_vocab, capsys):
    """Fine-tuning, ablations and builds said their time before they started, pre-training did not; and a model
    that never left the word-frequency plateau was said so only in its log (the terminal: "plateau": true)."""
    from bert_explorer import cli

    out = tmp_path / "run"
    assert cli.main(["pretrain", "--corpus", "tiny", "--size", "tiny", "--vocab", tiny_vocab, "--max-steps", "3",
                     "--lr", "1e-4", "--batch-size", "4", "--max-seq-length", "48", "--eval-batches", "1",
                     "--device", "cpu", "--no-progress", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0].startswith("estimate: about ") and "(3 steps of 4 x 48 tokens, 1 held-out evaluation; " in err[0]
    assert json.loads(captured.out)["plateau"] is True
    assert err[-1].startswith("warning: this model did not leave the word-frequency plateau")
    assert "A higher learning rate may get it going: at 0.0001" in err[-1]


def test_a_crash_leaves_the_run_failed_and_the_sigterm_handler_as_it_was(tmp_path):
    import signal

    before = signal.getsignal(signal.SIGTERM)

    def crash(step, _):
        if step == 2:
            raise RuntimeError("simulated crash at step 2")
    with pytest.raises(RuntimeError):
        run_pretraining(PretrainConfig(**TINY, max_steps=5), tmp_path / "crash", progress=False, on_step=crash)
    status = Run(tmp_path / "crash").status()
    assert status["state"] == "failed" and "simulated crash at step 2" in status["error"]
    assert signal.getsignal(signal.SIGTERM) is before  # the process's handler is back


def test_a_finished_run_is_not_touched_by_a_second_start_without_resume(tmp_path):
    out = tmp_path / "done"
    run_pretraining(PretrainConfig(**TINY, max_steps=2), out, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    with pytest.raises(ValueError, match="already holds checkpoints"):
        run_pretraining(PretrainConfig(**{**TINY, "seed": 9}, max_steps=2), out, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")} == before


def test_the_loss_falls_on_a_learnable_corpus(tmp_path):
    """The tiny corpus is 40 templated documents: a model that learns at all predicts its masked
    words and its next sentences better after 80 steps than at the start (chance: ln V for MLM,
    ln 2 for NSP). A bug in the masking, the labels or the update would leave it flat."""
    import math

    cfg = PretrainConfig(**{**TINY, "batch_size": 16, "lr": 1e-3, "warmup_steps": 5}, max_steps=80)
    run_pretraining(cfg, tmp_path / "learn", progress=False)
    losses = [m["loss"] for m in Run(tmp_path / "learn").metrics() if m["split"] == "train"]
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert first > math.log(300) * 0.9  # starts near chance: ln(300) + ln(2) ≈ 6.4
    assert last < first - 1.0, (first, last)  # measured: 6.02 -> 4.59; a flat loss moves by ~0.1


def test_held_out_accuracy_is_the_models_own(tmp_path):
    """The run's held-out MLM and NSP figures are those of the model it trained: the same
    evaluation of a freshly initialised model of the same shape, on the same held-out sequences,
    is near chance and far below; an evaluation that ignored the model would give both alike."""
    from bert_explorer import checkpoint
    from bert_explorer.model import BertForPreTraining
    from bert_explorer.tokenizer import WordPieceTokenizer
    from bert_explorer.train.device import pick_device
    from bert_explorer.train.pretrain import evaluate
    from bert_explorer.train.pretraining_data import held_out_instances, split_corpus

    cfg = PretrainConfig(**{**TINY, "batch_size": 16, "lr": 1e-3, "warmup_steps": 5, "held_out_fraction": 0.2},
                         max_steps=80)
    result = run_pretraining(cfg, tmp_path / "learn", progress=False)
    tok = WordPieceTokenizer.from_dir(tmp_path / "learn" / "tokenizer")
    held = held_out_instances(cfg, split_corpus(cfg)[1], tok)
    trained = checkpoint.load(Run(tmp_path / "learn").checkpoints()[-1][1], "BertForPreTraining").model
    torch.manual_seed(0)
    fresh = BertForPreTraining(trained.config)
    dev = pick_device("cpu", "fp32")
    mine, chance = evaluate(trained, held, cfg, tok, dev), evaluate(fresh, held, cfg, tok, dev)
    assert mine["mlm_accuracy"] == pytest.approx(result["mlm_accuracy"], abs=1e-6)  # what the run reported
    assert mine["eval_tokens"] == chance["eval_tokens"] > 50
    # the sample's size in sentence pairs too (the page warns when it is small): every held-out pair judged
    pairs = sum(len(batch) for batch in [held[i:i + cfg.batch_size] for i in range(0, len(held), cfg.batch_size)]
                [:cfg.eval_batches])
    assert mine["eval_pairs"] == pairs > 0
    assert chance["mlm_accuracy"] < 0.05 and mine["mlm_accuracy"] > chance["mlm_accuracy"] + 0.1, (mine, chance)
    assert mine["mlm_perplexity"] < chance["mlm_perplexity"] / 2


def test_the_learning_rate_warms_up_then_decays_to_zero_step_by_step(tmp_path):
    """Read from the optimiser at every step (the rate each update trained at: it was logged after the
    scheduler's step, the next update's, so the last step read 0): linear warm-up to the peak over
    warmup_steps, then linear decay to 0 at max_steps (paper, Appendix A.2), not a constant rate."""
    cfg = PretrainConfig(**{**TINY, "lr": 1e-3, "warmup_steps": 4}, max_steps=10)
    run_pretraining(cfg, tmp_path / "lr", progress=False)
    lrs = [m["lr"] for m in Run(tmp_path / "lr").metrics() if m["split"] == "train"]
    # update s (1-based) trains at s / 4 of the peak while warming up, then at (10 - (s - 1)) / (10 - 4)
    wanted = [1e-3 * (s / 4 if s <= 4 else (11 - s) / 6) for s in range(1, 11)]
    assert lrs == pytest.approx(wanted, abs=1e-12)


def test_the_compile_setting_trains_the_compiled_model_and_saves_the_plain_one(tmp_path, monkeypatch):
    """compile=True runs every step through torch.compile (here its "eager" backend: traced by
    dynamo, no code generated) and trains as the plain run does (dropout draws its masks in another
    order under dynamo, so the losses agree to about 0.05, not exactly); the checkpoint holds the
    model's own parameter names, loadable as ever."""
    from bert_explorer import checkpoint

    compiled = []
    real = torch.compile

    def compile_eagerly(module, **kw):
        compiled.append(module)
        return real(module, backend="eager")

    monkeypatch.setattr(torch, "compile", compile_eagerly)
    kw = dict(TINY, max_steps=4, save_every=100)
    run_pretraining(PretrainConfig(**kw), tmp_path / "plain", progress=False)
    run_pretraining(PretrainConfig(**kw, compile=True), tmp_path / "compiled", progress=False)
    assert len(compiled) == 1
    assert _train_losses(tmp_path / "compiled") == pytest.approx(_train_losses(tmp_path / "plain"), abs=0.05)
    saved = checkpoint.load(Run(tmp_path / "compiled").checkpoints()[-1][1], "BertForPreTraining")
    assert not saved.report.missing and not saved.report.unexpected
    assert not any("_orig_mod" in k for k in saved.model.state_dict())


# ----- resuming keeps the run's own settings ------------------------------------------------------

def test_resume_refuses_every_setting_that_decides_the_data_or_the_schedule(tmp_path):
    from bert_explorer.train.resume import FREE_ON_RESUME, ResumeRefused, check_resume

    saved = PretrainConfig(**TINY, max_docs=20, max_steps=10)
    fixed = {"corpus": "bbc", "max_docs": None, "held_out_fraction": 0.2, "eval_corpora": "tiny", "seed": 4,
             "vocab": "minilm", "vocab_size": 8000, "lowercase": False, "size": "mini", "objective": "mlm",
             "batch_size": 32, "grad_accum": 2, "max_seq_length": 128, "short_seq_prob": 0.5,
             "mlm_probability": 0.2,
             "max_predictions_per_seq": 5, "whole_word": True, "dynamic_masking": False, "dupe_factor": 3,
             "lr": 5e-4, "weight_decay": 0.0, "warmup_steps": 7, "clip_grad_norm": 5.0, "eval_batches": 9,
             "init": "minilm", "freeze_word_embeddings": True, "mlm_only_corpus": "tiny",
             # the time-lapse so far was recorded for these sentences and heads at these steps
             "timelapse_frames": 5, "timelapse_sentences": ["the [MASK] sat ."], "timelapse_heads": [[0, 1]]}
    from dataclasses import replace
    # every setting (by its flat name, the masking ones too) is either named here as fixed or may change:
    # a new setting must be placed
    # the masking ratios add up to 1, so one never changes alone: each is changed with a partner
    ratios = {"mask_ratio": {"mask_ratio": 0.7, "keep_ratio": 0.2}, "random_ratio": {"random_ratio": 0.2, "mask_ratio": 0.7},
              "keep_ratio": {"keep_ratio": 0.2, "random_ratio": 0.0}}
    assert set(fixed) | set(ratios) | set(FREE_ON_RESUME) | {"max_steps"} == set(saved.to_dict())
    for name, change in [*((n, {n: v}) for n, v in fixed.items()), *ratios.items()]:
        own = saved.updated(init="minilm") if name == "freeze_word_embeddings" else saved  # freezing needs init
        with pytest.raises(ResumeRefused) as e:
            check_resume(tmp_path, own, own.updated(**change), 5)
        assert set(e.value.changed) == set(change) and str(e.value).startswith(f"{tmp_path} resumes with the settings")
    # those that change neither data nor schedule are taken, each said once
    asked = replace(saved, log_every=3, eval_every=4, save_every=5, device="cuda", precision="fp32")
    cfg, notes = check_resume(tmp_path, saved, asked, 5)
    assert (cfg.log_every, cfg.eval_every, cfg.save_every, cfg.device, cfg.precision) == (3, 4, 5, "cuda", "fp32")
    assert len(notes) == 5 and "log_every 1 -> 3" in notes[0]
    # the same value as the run's is no change at all
    assert check_resume(tmp_path, saved, replace(saved), 5) == (saved, [])
    with pytest.raises(ValueError, match="already at step 5, so max_steps 5 leaves nothing to train"):
        check_resume(tmp_path, saved, replace(saved, max_steps=5), 5)


def test_more_steps_on_resume_replan_the_decay_from_the_resumed_step(tmp_path, tiny_vocab):
    """A finished 4-step run resumed to 8: from the first resumed update on, the rate falls linearly
    to 0 at step 8 (not 0, the old plan's rate at step 4, which would train nothing), and the log
    says so. The warm-up keeps its length (10 % of the first plan, not of the new one)."""
    from dataclasses import replace

    from bert_explorer.train.resume import check_resume, resume_settings

    first = PretrainConfig(**TINY, max_steps=100)  # warm-up 10 steps; 10 % of 300 would be 30
    cfg, _ = check_resume(tmp_path, first, replace(first, max_steps=300), 50)
    assert cfg.warmup_steps == 10

    d = tmp_path / "r"
    run_pretraining(PretrainConfig(**{**TINY, "vocab": tiny_vocab}, max_steps=4, save_every=1000), d, progress=False)
    cfg, notes = resume_settings(d, {"max_steps": 8})
    assert cfg.warmup_steps == 1 and cfg.max_steps == 8 and "re-planned from step 4" in notes[0]
    before = checkpoint_weights(d / "checkpoints" / "step-4")
    run_pretraining(cfg, d, resume=True, progress=False,
                    on_step=lambda step, _: Run(d).request_stop() if step == 5 else None)
    # the first resumed update trained: at the old plan's rate (0) the weights would not have moved
    assert not torch.equal(before, checkpoint_weights(d / "checkpoints" / "step-5"))
    run_pretraining(cfg, d, resume=True, progress=False)
    lrs = {m["step"]: m["lr"] for m in Run(d).metrics() if m["split"] == "train"}
    for step in range(5, 9):  # the rate update `step` trained at, under the re-planned decay
        assert lrs[step] == pytest.approx(1e-4 * (9 - step) / (8 - 1), abs=1e-12), step
    log = (d / "log.txt").read_text()
    assert "the learning-rate schedule is re-planned from step 4: the warm-up stays 1 step and the rate now " \
           "falls linearly to 0 at step 8 instead of 4" in log
    assert "learning rate at step 4: 0 under the old plan, 5.71e-05 under the new one" in log
    assert json.loads((d / "config.json").read_text())["warmup_steps"] == 1


def checkpoint_weights(path):
    from bert_explorer import checkpoint

    return checkpoint.load(path, "BertForPreTraining").model.bert.encoder.layer[0].attention.self.query.weight.detach()


# ----- a full disk ---------------------------------------------------------------------------------

def test_a_full_disk_at_a_checkpoint_is_one_sentence_and_resume_goes_on_once_there_is_room(tmp_path, capsys,
                                                                                            monkeypatch):
    import errno
    import re

    from bert_explorer import checkpoint
    from bert_explorer.cli import main

    out = tmp_path / "run"
    real_save_file = checkpoint.save_file

    def fills_up_at_step_4(tensors, filename, metadata=None):
        if "step-4" in filename:
            with open(filename, "wb") as f:
                f.write(b"half a file")  # some bytes reach the disk, then it is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint, "save_file", fills_up_at_step_4)
    argv = ["pretrain", "--output", str(out), "--corpus", "tiny", "--size", "tiny", "--vocab-size", "300",
            "--batch-size", "4", "--max-seq-length", "48", "--max-steps", "4", "--save-every", "2",
            "--eval-batches", "2", "--device", "cpu", "--precision", "fp32", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("estimate: about ")  # (said before it starts)
    err = err.split("\n", 1)[1]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert re.fullmatch(
        rf"bert-explorer: error: no space left in {re.escape(str(out))} to save the checkpoint of step 4 "
        r"\([\d.,]+ [kMG]?B free, about [\d.]+ MB needed\); the last good checkpoint is "
        rf"{re.escape(str(out / 'checkpoints' / 'step-2'))}, and `bert-explorer pretrain --output "
        rf"{re.escape(str(out))} --resume` \(or Resume on the Pre-train page\) continues from it once space is freed",
        err.strip()), err
    status = Run(out).status()
    assert status["state"] == "failed" and status["error"] == err.strip().removeprefix("bert-explorer: error: ")
    # the last good checkpoint is whole, and nothing half-written lies beside it
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-2"]
    assert Run(out).latest_checkpoint().name == "step-2"

    monkeypatch.undo()  # space is freed
    assert main(["pretrain", "--output", str(out), "--resume", "--no-progress"]) == 0
    assert Run(out).status()["state"] == "finished" and Run(out).status()["step"] == 4
    assert [m["step"] for m in Run(out).metrics() if m["split"] == "train"][-1] == 4


# ----- the masking settings: one MaskingConfig inside the run's settings -------------------------------

def test_masking_settings_live_in_one_masking_config_and_files_stay_flat(tmp_path):
    """cfg.masking is the MaskingConfig the masker reads; training_args.json and --config files keep
    the flat names that runs have always saved, so a run written before reads back the same."""
    from bert_explorer.data.pretraining import MaskingConfig

    cfg = PretrainConfig.from_dict({**TINY, "mask_ratio": 0.6, "random_ratio": 0.3, "keep_ratio": 0.1,
                                    "whole_word": True})
    assert cfg.masking == MaskingConfig(mask_ratio=0.6, random_ratio=0.3, keep_ratio=0.1, whole_word=True)
    flat = cfg.to_dict()
    assert "masking" not in flat and (flat["mask_ratio"], flat["whole_word"], flat["mlm_probability"]) == (0.6, True, 0.15)
    assert PretrainConfig.from_dict(flat) == cfg
    # the nested form is read too, and a wrong ratio is one sentence before anything runs
    assert PretrainConfig.from_dict({**TINY, "masking": {"mask_ratio": 0.6, "random_ratio": 0.3}}).masking.keep_ratio == 0.1
    with pytest.raises(ValueError, match="ratios must be >= 0 and sum to 1"):
        PretrainConfig.from_dict({**TINY, "mask_ratio": 0.7})
    with pytest.raises(ValueError, match="unknown setting 'mask_ration'"):
        PretrainConfig.from_dict({**TINY, "mask_ration": 0.7})
    with pytest.raises(ValueError, match="max_predictions_per_seq must be a whole number"):
        PretrainConfig.from_dict({**TINY, "max_predictions_per_seq": 2.5})


def test_an_old_runs_flat_training_args_resume_with_its_masking(tmp_path, tiny_vocab):
    """A run saved with flat masking keys (every run so far) resumes with its own ratios, and a
    resume that asks for other ratios is refused by name."""
    import json

    from bert_explorer.train.resume import ResumeRefused, resume_settings

    d = tmp_path / "r"
    cfg = PretrainConfig.from_dict({**TINY, "vocab": tiny_vocab, "max_steps": 2, "save_every": 2,
                                    "mask_ratio": 0.5, "random_ratio": 0.25, "keep_ratio": 0.25})
    run_pretraining(cfg, d, progress=False)
    saved = json.loads((d / "checkpoints" / "step-2" / "training_args.json").read_text())
    assert (saved["mask_ratio"], saved["random_ratio"]) == (0.5, 0.25) and "masking" not in saved
    again, _ = resume_settings(d, {"max_steps": 4})
    assert again.masking.mask_ratio == 0.5 and again.max_steps == 4
    with pytest.raises(ResumeRefused) as e:
        resume_settings(d, {"max_steps": 4, "mask_ratio": 0.8, "random_ratio": 0.1, "keep_ratio": 0.1})
    assert set(e.value.changed) == {"mask_ratio", "random_ratio", "keep_ratio"}
    with pytest.raises(ResumeRefused) as e:  # one ratio alone: refused as a change, not as a sum the user never set
        resume_settings(d, {"mask_ratio": 0.8})
    assert set(e.value.changed) == {"mask_ratio"}


def test_pretraining_in_memory_trains_the_same_model_with_no_folder(tmp_path, tiny_vocab, monkeypatch):
    """pretrain() needs no run folder: it writes nothing, reports through a MemoryReporter, stops
    when that asks, and with the same settings and seed gives run_pretraining's losses and weights."""
    import json

    from bert_explorer.checkpoint import load
    from bert_explorer.train.pretrain import pretrain
    from bert_explorer.train.report import MemoryReporter

    cfg = PretrainConfig(**{**TINY, "vocab": tiny_vocab, "eval_every": 3}, max_steps=6, save_every=1000)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    memory = MemoryReporter()
    done = pretrain(cfg, memory)
    assert list(work.iterdir()) == []  # nothing written
    assert done.result["state"] == "finished" and done.result["step"] == 6 and memory.status["state"] == "finished"
    run_pretraining(cfg, tmp_path / "run", progress=False)
    on_disk = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [(m["step"], m["loss"]) for m in memory.metrics if m["split"] == "train"]
    assert len(losses) == 6 and losses == [(m["step"], m["loss"]) for m in on_disk if m["split"] == "train"]
    saved = load(tmp_path / "run" / "checkpoints" / "step-6", "BertForPreTraining").model.state_dict()
    for name, w in done.model.state_dict().items():
        assert torch.allclose(w.float(), saved[name].float(), atol=1e-6), name
    assert done.tokenizer.vocab_size == load(tmp_path / "run" / "checkpoints" / "step-6").tokenizer.vocab_size
    # a stop asked for by the reporter ends the run at that step, as a user's Stop does
    stopped = pretrain(cfg, MemoryReporter(stop_at=2))
    assert (stopped.result["state"], stopped.result["step"]) == ("stopped", 2)
    with pytest.raises(ValueError, match="time-lapse is written into a run folder"):
        pretrain(cfg.updated(timelapse_frames=3))


def test_tensorboard_reads_the_scalars_the_run_logged(tmp_path, tiny_vocab):
    """Every run writes TensorBoard event files from the same records as metrics.jsonl; tensorboard's own
    reader finds each split's metrics at their steps."""
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    cfg = PretrainConfig(**{**TINY, "vocab": tiny_vocab, "eval_every": 2}, max_steps=4, save_every=4)
    run_pretraining(cfg, tmp_path / "run", progress=False)
    acc = event_accumulator.EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "eval/mlm_accuracy"} <= tags, tags
    logged = [m for m in Run(tmp_path / "run").metrics() if m["split"] == "train"]
    read = acc.Scalars("train/loss")
    assert [e.step for e in read] == [m["step"] for m in logged]
    assert [e.value for e in read] == pytest.approx([m["loss"] for m in logged], rel=1e-6)


def test_accumulated_micro_batches_give_the_step_of_one_big_batch(tmp_path, monkeypatch):
    """Each micro-batch's masked-LM loss is a mean over its own masked tokens, and was counted 1/2 of the step
    whatever their number: a step of 4 x 2 sequences had another gradient than one of 8 (Google's loss averages
    over every target of the batch). Weighed by its targets (and its NSP labels), a micro-batch now gives the
    big batch's gradient: the same eight sequences and masks, no dropout, fp32."""
    from bert_explorer.train import pretrain

    real_preset, real_clip = pretrain.preset, torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(pretrain, "preset", lambda *a, **k: real_preset(*a, **{**k, "dropout": 0.0,
                                                                               "attention_dropout": 0.0}))
    grads = []

    def clip(parameters, *args, **kwargs):  # the step's gradient, where the trainer clips it (after unscaling)
        parameters = list(parameters)
        grads[-1].append(torch.cat([p.grad.flatten() for p in parameters]))
        return real_clip(parameters, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    for batch, accum in ((8, 1), (4, 2)):  # step 0 reads sequences 0-7 either way (first = micro x batch)
        grads.append([])
        cfg = PretrainConfig(**{**TINY, "batch_size": batch, "grad_accum": accum, "warmup_steps": 0,
                                "dynamic_masking": False, "max_steps": 1, "precision": "fp32",
                                "short_seq_prob": 0.5})
        run_pretraining(cfg, tmp_path / f"b{batch}", progress=False)
    (big,), (accumulated,) = grads
    assert big.abs().max() > 1e-3  # a gradient worth comparing
    torch.testing.assert_close(accumulated, big, rtol=1e-4, atol=1e-6)


def test_a_batch_with_no_masked_target_adds_nothing_rather_than_nan():
    """Whole-word masking may choose no target in a short batch of many-piece words: the masked-LM loss was the
    mean of nothing (NaN), which spoiled the whole step's update. It is 0 now, with its graph, and the NSP loss
    still counts; with the CPU kernels too (their own loss)."""
    from bert_explorer.model import BertConfig, BertForPreTraining
    from bert_explorer.model import cpu_kernels

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=50, hidden_size=32, num_layers=1, num_heads=2,
                                          intermediate_size=64, max_position_embeddings=16))
    ids = torch.randint(5, 50, (2, 8))
    for m in (model, cpu_kernels.apply(model, "cpu", cpu_kernels.LEVERS)):
        out = m(input_ids=ids, labels=torch.full((2, 8), -100), mlm_positions=torch.zeros(0, dtype=torch.long),
                next_sentence_label=torch.tensor([0, 1]))
        assert out.mlm_loss.item() == 0.0 and torch.isfinite(out.loss) and out.loss.item() == out.nsp_loss.item() > 0
        out.loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
        m.zero_grad()


def test_a_resumed_run_trains_with_the_cpu_levers_it_trained_with(tmp_path, tiny_vocab, monkeypatch):
    """The levers are chosen by what a timing measured faster here, and kept a week: a choice that flipped
    between a run and its resume (a measurement expired, other threads) changed the dropout draws and the
    arithmetic, so the resumed steps were another run's (steps 4-6: 6.44 against 6.45). The run's status keeps
    its levers now, and its resume takes them again: its losses are the uninterrupted run's."""
    from bert_explorer.train import levers

    monkeypatch.delenv(levers.ENV, raising=False)
    measured = {"gain": 2.0}  # every lever measured faster, until the resume, when none is
    monkeypatch.setattr(levers, "gain", lambda *a, **k: measured["gain"])
    cfg = PretrainConfig(**{**TINY, "vocab": tiny_vocab}, max_steps=6, save_every=3)
    run_pretraining(cfg, tmp_path / "straight", progress=False)
    chosen = Run(tmp_path / "straight").status()["cpu_levers"]
    assert chosen  # (the test would prove nothing with no lever at all)

    def crash(step, _):
        if step == 4:
            raise KeyboardInterrupt("simulated kill after step 4")

    with pytest.raises(KeyboardInterrupt):
        run_pretraining(cfg, tmp_path / "crashed", progress=False, on_step=crash)
    measured["gain"] = 1.0
    run_pretraining(cfg, tmp_path / "crashed", resume=True, progress=False)
    a, b = _train_losses(tmp_path / "straight"), _train_losses(tmp_path / "crashed")
    for step in (4, 5, 6):
        assert b[step] == pytest.approx(a[step], abs=1e-6), step
    assert Run(tmp_path / "crashed").status()["cpu_levers"] == chosen
    assert "(as the run trained before it was resumed)" in (tmp_path / "crashed" / "log.txt").read_text()


def test_a_resume_that_changes_only_the_held_out_measurement_is_said_so():
    """--eval-batches on a resume was refused as changing "the data or the schedule": it changes the held-out
    measurement its curves have drawn."""
    from bert_explorer.train.resume import ResumeRefused

    said = str(ResumeRefused("runs/a", {"eval_batches": (5, 2)}))
    assert "eval_batches 5 (the run's: 2) would change the held-out measurement its curves have drawn so far" in said
    assert "the data or the schedule" in str(ResumeRefused("runs/a", {"eval_batches": (5, 2), "lr": (1, 2)}))


def test_a_run_given_no_rate_takes_the_pages_below_bert_bases_width_and_the_papers_from_it():
    from bert_explorer.train.pretrain_config import PAPER_LR, SMALL_MODEL_LR, plateau_advice, rate_for_width
    assert (rate_for_width(128), rate_for_width(512), rate_for_width(768), rate_for_width(None)) == \
        (SMALL_MODEL_LR, SMALL_MODEL_LR, PAPER_LR, PAPER_LR)
    # the advice calls a rate the paper's only where it is (0.0003 was "the paper's rate for BERT-Base")
    assert "the paper's rate" in plateau_advice(1e-4) and "the paper's rate" not in plateau_advice(3e-4)
    assert plateau_advice(3e-4).startswith("A higher learning rate may get it going: at 0.0003 a small model")


def test_a_bound_of_a_new_run_does_not_refuse_to_read_an_older_runs_settings():
    """A run the CLI started with 300 time-lapse frames, before there was a bound, could no longer resume."""
    from bert_explorer.train.pretrain_config import PretrainConfig, check_new_run

    old = PretrainConfig.from_dict({"size": "tiny", "timelapse_frames": 300}, strict=False)
    assert old.timelapse_frames == 300
    with pytest.raises(ValueError, match="timelapse_frames must be from 0 \\(none\\) to 200, not 300"):
        check_new_run(old)
