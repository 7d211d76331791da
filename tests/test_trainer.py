"""The one trainer and the objectives as objects: pre-training and fine-tuning take their steps in
one function a newcomer reads on one page; fine-tuning's schedule is the one it says, step by step;
no module outside the objectives compares an objective's name, and a new objective is a subclass
and its entry."""
import inspect
import json
import os
import random
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from bert_explorer.data import objectives as O
from bert_explorer.data.pretraining import collate, create_instances
from bert_explorer.data.segments import pairs_from_document
from bert_explorer.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def test_the_step_is_one_function_on_one_page_and_no_training_module_is_a_wall():
    lines = inspect.getsource(Trainer.train).splitlines()
    assert len(lines) <= 60, len(lines)
    # the step's parts, in their order, in that one function
    order = ["job.batches(", "self.autocast()", "job.loss(", ".backward()", "unscale_", "clip_grad_norm_",
             "self.scaler.step(", "self.scheduler.step()", "job.log(", "job.evaluate(", "job.frame(", "job.save("]
    at = [next(i for i, line in enumerate(lines) if part in line) for part in order]
    assert at == sorted(at), dict(zip(order, at))
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "bert_explorer" / "train").glob("*.py")}
    assert max(sizes.values()) <= 600, sizes
    assert not (ROOT / "bert_explorer" / "train" / "loop.py").exists()


def test_fine_tuning_follows_its_schedule_step_by_step(tmp_path):
    """The rate of every update of a fine-tuning (the log gives the rate each step trained at): a linear
    warm-up over the first int(warmup_fraction x steps) updates, the first one already at lr/W, then a
    linear decay that reaches 0 after the last (paper, A.3's recipe; ``optim.linear_warmup_decay``)."""
    from bert_explorer.train.finetune import FinetuneConfig, run_finetuning

    cfg = FinetuneConfig(model="minilm-mlm-nsp", train="tiny:classification", epochs=3, batch_size=8, lr=4e-5,
                         warmup_fraction=0.2, max_seq_length=24, device="cpu", precision="fp32", seed=0)
    run_finetuning(cfg, tmp_path / "ft")
    lines = [json.loads(x) for x in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    after = {r["step"]: r["lr"] for r in lines if r["split"] == "train"}
    total = max(after)
    warmup = int(0.2 * total)
    assert total >= 10 and warmup >= 2 and sorted(after) == list(range(1, total + 1))  # every step logged
    for step in range(1, total + 1):  # the rate update ``step`` trained at
        factor = step / warmup if step <= warmup else max(0.0, (total - step + 1) / (total - warmup))
        assert after[step] == pytest.approx(4e-5 * factor, rel=1e-9, abs=1e-15), step
    assert after[total] > 0  # the last update trained (it was logged at 0, the rate after it)


def test_no_module_outside_the_objectives_compares_an_objectives_name():
    names = r"(mlm\+nsp|ltr|ltr\+bilstm)"  # ("mlm" alone also names a probe: caught beside "objective")
    pattern = re.compile(r"objective\w*\W{0,3}\s*(==|!=|\bin\b|\bnot in\b)|[\"']" + names + r"[\"']\s*(==|!=)"
                         r"|(==|!=)\s*[\"']" + names + r"[\"']|startswith\([\"']ltr")
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in [*(ROOT / "bert_explorer").rglob("*.py"), *(ROOT / "pages").glob("*.py")]
             if p.name != "objectives.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line)]
    assert not found, "\n".join(found)


@dataclass(frozen=True)
class SentenceOrder(O.Objective):
    """ALBERT's sentence-order prediction: two consecutive segments of one document, swapped half the
    time; the label says whether they were (the NSP head's two classes)."""

    def segments(self, docs, d, max_num_tokens, short_seq_prob, rng):
        pairs = [(a, b) for a, b, random_b in pairs_from_document(docs, d, max_num_tokens, short_seq_prob, rng)
                 if not random_b]
        return [(b, a, True) if rng.random() < 0.5 else (a, b, False) for a, b in pairs]


def test_a_new_objective_is_a_subclass_and_its_entry(monkeypatch, tiny_vocab):
    """Sentence-order prediction trains end to end with nothing else changed: its instances, its
    batches' labels, the settings that name it and a pre-training."""
    from bert_explorer.data.corpora import tiny_corpus
    from bert_explorer.train.pretrain import pretrain
    from bert_explorer.train.pretrain_config import PretrainConfig

    from bert_explorer.tokenizer import WordPieceTokenizer

    sop = SentenceOrder("sop", "Sentence order (SOP)", "ALBERT, §4.2", next_sentence=True)
    monkeypatch.setitem(O.OBJECTIVES, "sop", sop)
    tok = WordPieceTokenizer.from_dir(tiny_vocab)
    instances = create_instances(tiny_corpus(), tok, 48, 0.0, "sop", seed=0, mask=True)
    swapped = [x for x in instances if x.is_random_next]
    assert instances and 0 < len(swapped) < len(instances)
    batch = collate(instances[:8], tok.pad_id, sop)
    assert batch["next_sentence_label"].tolist() == [int(x.is_random_next) for x in instances[:8]]
    cfg = PretrainConfig(corpus="tiny", size="tiny", objective="sop", vocab=str(tiny_vocab), max_steps=2, batch_size=4,
                         max_seq_length=48, eval_batches=1, device="cpu", precision="fp32")
    assert cfg.objective_type is sop
    result = pretrain(cfg).result
    assert result["step"] == 2 and "nsp_accuracy" in result  # the pair head trained and was measured
    with pytest.raises(ValueError, match="objective must be one of .* not 'sopp' \\(did you mean 'sop'\\?\\)"):
        PretrainConfig(objective="sopp")


def test_each_objective_says_its_labels():
    """The three of the paper, against their definitions (Section 3.1; Table 5)."""
    class Inst:
        input_ids, token_type_ids = [1, 9, 2, 7, 2], [0, 0, 0, 1, 1]
        masked_positions, masked_labels, is_random_next = [1], [5], True

        def original_ids(self):
            return [1, 5, 2, 7, 2]
    x = Inst()
    assert O.BERT.labels(x, 6, None) == ([1, 9, 2, 7, 2], [-100, 5, -100, -100, -100, -100])
    assert O.BERT.batch_labels([x]) == {"next_sentence_label": [1]} and O.NO_NSP.batch_labels([x]) == {}
    assert O.LEFT_TO_RIGHT.labels(x, 6, None) == ([1, 5, 2, 7, 2], [5, 2, 7, 2, -100, -100])  # the next token
    assert [o.special_tokens for o in O.OBJECTIVES.values()] == [3, 2, 2]
    assert [o.trains_pooler for o in O.OBJECTIVES.values()] == [True, False, False]
    assert O.LEFT_TO_RIGHT.masks is False and O.BERT.metrics[-1] == "nsp_accuracy"
    rng = random.Random(0)
    docs = [[[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]]]
    assert all(b is None for _, b, _ in O.NO_NSP.segments(docs, 0, 10, 0.0, rng))


_RANK_SCRIPT = '''
import json, os, sys
import torch, torch.distributed as dist
from bert_explorer.train.trainer import Due, Trainer

rank, rendezvous, out, nan_on_rank_1 = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "nan"
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
model = torch.nn.Linear(1, 1, bias=False)
torch.nn.init.ones_(model.weight)


class Job:
    reporter = type("Reporter", (), {})()
    logged = []
    def stop_requested(self, step): return False
    def batches(self, step): return [None]
    def shares(self, batches): return [{"mlm_loss": 1.0}]
    def loss(self, forward, batch):  # rank 0's loss is 1, rank 1's is 3 (or not a number)
        part = forward.weight.sum() * (float("nan") if nan_on_rank_1 and rank == 1 else 1 + 2 * rank)
        return part, {"mlm_loss": part}
    def due(self, step): return Due(log=rank == 0)  # (as a pre-training's: only rank 0 logs)
    def log(self, step, losses, grad_norm, seconds, lr): self.logged.append(losses)
    def evaluate(self, step): return None, False
    def frame(self, step, measured): pass
    def save(self, step, measured): pass
    def after(self, step, losses): pass


job = Job()
try:
    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.0), distributed=True).train(job, 2)
except ValueError as e:  # (Diverged)
    open(f"{out}.{rank}", "w").write(str(e))
    os._exit(3)
if rank == 0:
    open(out, "w").write(json.dumps(job.logged))
dist.barrier()
os._exit(0)  # (no teardown: gloo may abort a rank whose peer closed its connections first)
'''


def _two_ranks(tmp_path, nan: bool) -> list[int]:
    """Runs the two ranks of ``_RANK_SCRIPT`` (gloo, on this CPU) to their end; returns their exit codes.

    What the tests assert is what each rank wrote before it left: gloo may still abort (SIGABRT) a rank whose peer
    closed its connections a moment earlier, after that work, which says nothing of the trainer."""
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    logs = [open(tmp_path / f"stderr.{rank}", "w") for rank in (0, 1)]
    procs = [subprocess.Popen([sys.executable, str(script), str(rank), str(tmp_path / "rendezvous"),
                               str(tmp_path / "logged.json"), "nan" if nan else "-"], env=env,
                              stderr=logs[rank]) for rank in (0, 1)]
    try:
        codes = [p.wait(timeout=120) for p in procs]  # (a rank left waiting for ever fails here)
    finally:
        for p, log in zip(procs, logs):
            p.kill()
            log.close()
    assert all(code in (0, 3, -signal.SIGABRT) for code in codes), \
        [codes] + [(tmp_path / f"stderr.{rank}").read_text()[-2000:] for rank in (0, 1)]
    return codes


def test_a_ddp_step_logs_the_mean_loss_of_every_rank_not_rank_0_s_alone(tmp_path):
    """Under torchrun the logged loss was rank 0's own micro-batch: the curve of a step of batch x accum x world
    sequences averages them all, as its gradient does."""
    assert 3 not in _two_ranks(tmp_path, nan=False)
    logged = json.loads((tmp_path / "logged.json").read_text())
    assert [x["mlm_loss"] for x in logged] == pytest.approx([2.0, 2.0]) and logged[0]["loss"] == pytest.approx(2.0)


def test_a_ddp_run_whose_loss_stops_being_a_number_ends_on_every_rank(tmp_path):
    """Rank 0 alone refused a loss that was not a number (only it logs), and the other ranks waited for it in the
    next step for ever; every rank refuses it at the same step now."""
    assert 0 not in _two_ranks(tmp_path, nan=True)
    for rank in (0, 1):
        assert "the training loss became nan at step 1" in (tmp_path / f"logged.json.{rank}").read_text()
