"""The one fine-tuning loop (train/engine.py): what fine-tuning, feature-based transfer and the
LTR heads rely on it for."""
import json

import pytest
import torch

from bert_explorer.train.engine import epoch_batches, fit, marks_failure, total_steps
from bert_explorer.runs.run import Run


def _toy(tmp_path):
    """A learnable problem: y = sign of x·w for a fixed w, and a linear model that can learn it."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5, 1.5]) > 0).long()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    run = Run(tmp_path / "run").create({}, "finetune")
    seen = []

    def loss_of(idx):
        assert model.training  # fit puts the model back in training mode after each evaluation
        seen.append(list(idx))
        return torch.nn.functional.cross_entropy(model(x[idx]), y[idx])

    def evaluate():
        model.eval()
        with torch.no_grad():
            return {"accuracy": (model(x).argmax(-1) == y).float().mean().item()}
    return run, model, loss_of, evaluate, seen


def test_fit_learns_evaluates_each_epoch_and_logs(tmp_path):
    run, model, loss_of, evaluate, seen = _toy(tmp_path)
    fitted = fit(run, n_train=64, batch_size=8, epochs=3, seed=5, loss_of=loss_of, evaluate=evaluate, model=model,
                 optimizer=torch.optim.SGD(model.parameters(), lr=0.5), lr_setting=0.5)
    assert fitted.step == total_steps(64, 8, 3) == 24 and not fitted.stopped
    assert len(fitted.history) == 3 and fitted.dev["accuracy"] >= 0.9  # it learned the rule
    rows = run.metrics()
    train = [r for r in rows if r["split"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 25))  # 24 steps: every step (min(10, 24 // 20) = 1)
    assert train[-1]["loss"] < train[0]["loss"]
    assert [r["epoch"] for r in rows if r["split"] == "dev"] == [1, 2, 3]
    # each epoch visits every example once, in the order of its own seed
    import random
    order = list(range(64))
    random.Random(5 * 1000 + 1).shuffle(order)
    assert sum(seen[8:16], []) == order


def test_fit_stops_cleanly_when_asked(tmp_path):
    run, model, loss_of, evaluate, seen = _toy(tmp_path)
    run.request_stop()
    fitted = fit(run, n_train=64, batch_size=8, epochs=3, seed=0, loss_of=loss_of, evaluate=evaluate, model=model,
                 optimizer=torch.optim.SGD(model.parameters(), lr=0.5))
    assert fitted.stopped and fitted.step == 0 and len(fitted.history) == 1  # evaluated as it is
    assert "stop requested at step 0 of 24" in (run.path / "log.txt").read_text()


def test_after_a_stop_mid_epoch_and_a_resume_each_evaluation_is_labelled_with_its_epoch(tmp_path):
    """A Stop at step 12 (epoch 2 of 8 steps half done) is measured as epoch 1.5; resumed, the evaluations at
    the ends of epochs 2 and 3 are labelled 2 and 3 (counting the evaluations said 3 and 4)."""
    run, model, loss_of, evaluate, seen = _toy(tmp_path)
    kept = {}

    def on_evaluated(step, job):
        kept[step] = json.loads(json.dumps(job.state()))

    def stop_four_steps_into_epoch_2(idx):
        loss = loss_of(idx)
        if len(seen) == 12:
            run.request_stop()  # taken between two steps
        return loss
    settings = dict(n_train=64, batch_size=8, epochs=3, seed=0, evaluate=evaluate, model=model,
                    optimizer=torch.optim.SGD(model.parameters(), lr=0.5))
    first = fit(run, **settings, loss_of=stop_four_steps_into_epoch_2, on_evaluated=on_evaluated)
    assert first.stopped and first.step == 12
    fit(run, **settings, loss_of=loss_of, on_evaluated=on_evaluated, resume={"job": kept[12]})
    dev = [(r["step"], r["epoch"]) for r in run.metrics() if r["split"] == "dev"]
    assert dev == [(8, 1), (12, 1.5), (16, 2), (24, 3)]
    assert "epoch 3: accuracy=" in (run.path / "log.txt").read_text()


def test_fit_trains_with_no_run_folder_through_a_reporter_in_memory(tmp_path):
    """The loop knows a reporter, not a folder: in memory it learns the same rule, its metrics are
    the run folder's lines, a Stop at step 10 ends it there with one evaluation, and nothing is
    written to disk."""
    from bert_explorer.train.report import MemoryReporter

    run, model, loss_of, evaluate, _ = _toy(tmp_path)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    kw = dict(n_train=64, batch_size=8, epochs=3, seed=5, loss_of=loss_of, evaluate=evaluate, model=model)
    on_disk = fit(run, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), **kw)
    model.load_state_dict(start)
    memory = MemoryReporter()
    fitted = fit(memory, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), **kw)
    assert fitted.dev == on_disk.dev and fitted.dev["accuracy"] >= 0.9
    def plain(rows):
        return [{k: v for k, v in r.items() if k != "time"} for r in rows]
    assert plain(memory.metrics) == plain(run.metrics())
    assert memory.status["step"] == 24 and memory.lines[-1].startswith("epoch 3:")

    model.load_state_dict(start)
    stopping = MemoryReporter(stop_at=10)
    fitted = fit(stopping, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), **kw)
    assert fitted.stopped and fitted.step == 10 and stopping.step_reached == 10
    assert "stop requested at step 10 of 24" in stopping.lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # the folder of the first fit only



def test_a_training_that_diverges_fails_in_one_sentence_instead_of_saving_weights_that_are_not_numbers(tmp_path):
    """An lr of 1e9 trained every weight into NaN, and the run ended "finished"."""
    from bert_explorer.train.trainer import Diverged

    run, model, loss_of, evaluate, seen = _toy(tmp_path)
    with pytest.raises(Diverged, match=r"the training loss became nan at step 1 \(learning rate 1e\+30\): the training "
                                       r"diverged .* start again with a lower learning rate"):
        with marks_failure(run):
            fit(run, n_train=64, batch_size=8, epochs=3, seed=0, loss_of=lambda idx: loss_of(idx) * float("nan"),
                evaluate=evaluate, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1e30))
    assert run.status()["state"] == "failed" and "diverged" in run.status()["error"]


def test_under_a_loss_scaler_a_skipped_step_is_no_divergence_but_weights_that_are_not_numbers_are(tmp_path):
    """fp16's scaler skips a step whose gradients overflowed; weights turned to NaN still ended "finished"."""
    from bert_explorer.train.trainer import Diverged

    run, model, loss_of, evaluate, seen = _toy(tmp_path)
    calls = []

    def lost(idx):  # the weights are lost after the first step
        calls.append(1)
        if len(calls) > 1:
            model.weight.data.fill_(float("nan"))
        return loss_of(idx)
    with pytest.raises(Diverged, match="at step 2"):
        fit(run, n_train=64, batch_size=8, epochs=2, seed=0, loss_of=lost, evaluate=evaluate, model=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1), scaler=torch.amp.GradScaler("cpu"))
    run2, model2, loss_of2, evaluate2, _ = _toy(tmp_path / "skipped")
    calls2 = []

    def overflowed(idx):  # one step's loss overflows, the weights stay numbers: the scaler skips it
        calls2.append(1)
        return loss_of2(idx) * (float("inf") if len(calls2) == 2 else 1.0)
    fitted = fit(run2, n_train=64, batch_size=8, epochs=1, seed=0, loss_of=overflowed, evaluate=evaluate2,
                 model=model2, optimizer=torch.optim.SGD(model2.parameters(), lr=0.1),
                 scaler=torch.amp.GradScaler("cpu"))
    assert fitted.step == 8 and all(bool(torch.isfinite(p).all()) for p in model2.parameters())

def test_marks_failure_sets_failed_and_raises(tmp_path):
    run = Run(tmp_path / "r").create({}, "finetune")
    with pytest.raises(KeyboardInterrupt):
        with marks_failure(run):
            raise KeyboardInterrupt("interrupted")
    assert run.status()["state"] == "failed" and run.status()["error"] == "interrupted"
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C's own says nothing: the run still says what ended it
        with marks_failure(run):
            raise KeyboardInterrupt
    assert run.status()["error"] == "interrupted (Ctrl-C)"
    assert (run.path / "log.txt").read_text().splitlines()[-1].endswith("failed: interrupted (Ctrl-C)")


def test_bucketed_batches_hold_every_example_once_and_group_similar_lengths():
    lengths = torch.randint(3, 129, (1000,), generator=torch.Generator().manual_seed(1)).tolist()
    for epoch in range(2):
        batches = epoch_batches(1000, 32, seed=7, epoch=epoch, lengths=lengths)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(1000))  # every example exactly once per epoch
        assert len(batches) == 32 == total_steps(1000, 32, 1)  # as many steps as unbucketed batches
        assert all(len(b) <= 32 for b in batches)
        # tokens a batch pads to vs the tokens its examples need: the unbucketed order wastes ~half
        padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
        plain = sum(len(b) * max(lengths[i] for i in b) for b in epoch_batches(1000, 32, 7, epoch))
        assert padded < 1.1 * sum(lengths) < 0.7 * plain
    # reproducible for a seed, different across epochs and seeds, and the batch order is shuffled
    assert epoch_batches(1000, 32, 7, 0, lengths) == epoch_batches(1000, 32, 7, 0, lengths)
    assert epoch_batches(1000, 32, 7, 0, lengths) != epoch_batches(1000, 32, 7, 1, lengths)
    assert epoch_batches(1000, 32, 7, 0, lengths) != epoch_batches(1000, 32, 8, 0, lengths)
    longest = [max(lengths[i] for i in b) for b in epoch_batches(1000, 32, 7, 0, lengths)]
    assert longest != sorted(longest)


def test_unbucketed_batches_are_the_seeded_shuffle_cut_in_order():
    import random
    order = list(range(50))
    random.Random(3 * 1000 + 2).shuffle(order)
    assert epoch_batches(50, 16, seed=3, epoch=2) == [order[0:16], order[16:32], order[32:48], order[48:50]]


def test_a_label_that_adds_a_token_does_not_sort_the_batches_by_label():
    # pairs like "the film is red" / "it is (not) red": a contradiction is one token longer
    labels = [i % 2 for i in range(320)]
    lengths = [12 + label for label in labels]
    for batch in epoch_batches(320, 16, seed=0, epoch=0, lengths=lengths):
        assert 0 < sum(labels[i] for i in batch) < len(batch)  # both labels in every batch


def test_lengths_that_bucketing_cannot_shorten_keep_the_plain_batches():
    # texts cut at the maximum length nearly everywhere (BBC News at 128): the same batches, and so
    # the same training, as without lengths
    lengths = [128] * 190 + [117, 121, 125, 100, 126, 127, 119, 124, 122, 90]
    for epoch in range(3):
        assert epoch_batches(200, 32, 0, epoch, lengths) == epoch_batches(200, 32, 0, epoch)
