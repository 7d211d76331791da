"""The heap kept between training steps (``train/heap.py``): fewer pages handed over by the kernel while a job
trains, glibc's own figures and the process's memory back after it, the same numbers either way, and the
Trainer keeping it only where the model's levers name it.

The page faults and the resident memory are the kernel's own counts (``getrusage``, ``/proc/self/statm``)."""
import os
import resource

import pytest
import torch

from bert_explorer.model import BertConfig, BertForPreTraining
from bert_explorer.train import heap, levers
from bert_explorer.train.optim import make_optimizer
from bert_explorer.train.trainer import Due, Trainer

from test_cpu_kernels import CONFIG, _batch

pytestmark = pytest.mark.skipif(not heap.available(), reason="the heap's settings are glibc's (Linux)")

BIG = 48 << 20  # bytes: over glibc's largest threshold of its own (32 MiB), as explorer-mini's [N, V] logits are


# steps before the heap serves them from what it kept: PyTorch's aligned allocations (posix_memalign) take a few
# fresh blocks first (glibc 2.36: two to seven)
WARM = 10


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _steps_faults(n: int = 5) -> int:
    """Page faults of ``n`` "steps" that each allocate, fill and free a BIG block (a step's logits)."""
    before = _faults()
    for _ in range(n):
        torch.empty(BIG, dtype=torch.uint8).fill_(1)
    return _faults() - before


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_the_kept_heap_hands_a_step_its_memory_without_the_kernels_fresh_pages():
    # (compared with each other, not with a count of 4 KiB pages: where transparent huge pages are "always", the
    # kernel hands such a block over in 2 MiB pages, a few dozen faults)
    heap.release()
    # glibc's own: a block over its threshold comes fresh from the kernel and goes back when freed (a free chunk
    # of the heap, its pages given back by the trim, may serve a step or two of five)
    fresh = _steps_faults()
    assert fresh > 0
    with heap.kept():
        _steps_faults(WARM)  # the first steps grow the heap
        reused = _steps_faults()  # the next ones reuse it
    assert 4 * reused < fresh
    assert 4 * reused < _steps_faults()  # given back after the block: fresh pages again


def test_the_memory_the_heap_kept_goes_back_to_the_kernel_when_training_ends():
    with heap.kept():
        blocks = [torch.ones(BIG // 4, dtype=torch.float32) for _ in range(4)]  # 192 MiB live
        del blocks
        kept = _resident()
    assert kept - _resident() > 3 * BIG  # freed inside the block, kept there; given back after it


def test_kept_blocks_nest_and_the_outermost_gives_back():
    with heap.kept():
        with heap.kept():
            pass
        heap.release()  # inside a block: its owner gives the heap back, not this call
        assert heap.keeping()
        _steps_faults(WARM)
        reused = _steps_faults()  # the inner block's end gave nothing back
    with heap.kept(False):
        assert 4 * reused < _steps_faults()
    assert not heap.keeping() and heap._depth == 0


def _train(kept: bool, wrapped: bool = False) -> tuple[list[float], list[bool]]:
    """Three steps of a tiny pre-training, the heap's lever named or not (on the model, or on a model inside the
    one trained: ``wrapped``); the losses and, for each step, whether the heap was kept while it ran."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**CONFIG))
    model.train()
    model.cpu_levers = (heap.LEVER,) if kept else ()
    optimizer = make_optimizer(model, 1e-3, 0.01)
    trainer = Trainer(torch.nn.ModuleDict({"inner": model}) if wrapped else model, optimizer, None)
    batch = _batch()
    losses, kept_while = [], []

    class Job:
        reporter = type("R", (), {"step_reached": 0})()

        def stop_requested(self, step):
            return False

        def batches(self, step):
            return [batch]

        def loss(self, forward, b):
            kept_while.append(heap._depth > 0)
            out = model(**b)  # (the model itself, also where the trainer holds a module around it)
            return out.loss, {"mlm": out.loss}

        def shares(self, batches):
            return [{"mlm": 1.0}]

        def due(self, step):
            return Due()

        def after(self, step, l):
            losses.append(l["loss"])
    trainer.train(Job(), 3)
    return losses, kept_while


def test_the_trainer_keeps_the_heap_only_where_the_levers_name_it_and_learns_the_same():
    with_heap, kept = _train(True)
    without, not_kept = _train(False)
    assert kept == [True] * 3 and not_kept == [False] * 3
    assert with_heap == without  # to the bit: only where the memory comes from changed
    assert heap._depth == 0


def test_the_heap_is_kept_where_a_module_inside_the_trained_model_names_it():
    """A left-to-right head's classifier wraps the encoder that ``levers.apply`` was given: the Trainer read the
    wrapper's levers (none) and trained without the heap it had chosen, timed and logged."""
    _, kept = _train(True, wrapped=True)
    assert kept == [True] * 3


def test_levers_apply_hands_the_heap_to_the_trainer_and_the_rest_to_the_model(monkeypatch):
    monkeypatch.setenv(levers.ENV, heap.LEVER)
    model = levers.apply(BertForPreTraining(BertConfig(**CONFIG)), "cpu", torch.bfloat16, lambda _: None)
    assert model.cpu_levers == (heap.LEVER,)
    assert type(model.bert.encoder.layer[0].attention.self.dropout).bits == 32  # no kernel lever with it
    assert heap.LEVER in levers.LEVERS and heap.LEVER not in levers.kernel_levers(levers.LEVERS)


def test_the_lever_is_timed_with_the_heap_kept_for_its_steps_and_given_back_for_the_others(monkeypatch):
    """Timed in turns with steps that give the heap back, a step with the lever would meet a trimmed heap, which
    no run with the lever does (its steps follow its own): one untimed step of its own comes first then."""
    config = BertConfig(**{**CONFIG, "max_position_embeddings": 32})
    seen = []
    keep, release, forward = heap.keep, heap.release, BertForPreTraining.forward
    monkeypatch.setattr(heap, "keep", lambda: seen.append("keep") or keep())
    monkeypatch.setattr(heap, "release", lambda: seen.append("release") or release())
    monkeypatch.setattr(BertForPreTraining, "forward", lambda *a, **k: seen.append("step") or forward(*a, **k))
    heap.release()
    seen.clear()
    try:
        with_heap, without = (levers._training_step(config, True, False, (heap.LEVER,)),
                              levers._training_step(config, True, False, ()))
        with_heap(), with_heap(), without(), with_heap()
    finally:
        release()  # (the later tests count pages with glibc's figures)
    assert seen == ["keep", "step", "step",  # kept, an untimed step, the timed one
                    "step",  # the heap still kept: the timed step alone
                    "release", "step",  # given back for the step without the lever
                    "keep", "step", "step"]
