"""The task registry and each target's behaviour: every task type is one registry entry, its
behaviour is found through its target, and a new task type needs nothing else."""
import pytest
import torch

from bert_explorer.checkpoint import resolve
from bert_explorer.data import task_types as TT
from bert_explorer.data.tasks import make_tiny
from bert_explorer.model import IGNORE
from bert_explorer.tokenizer import WordPieceTokenizer
from bert_explorer.train.evaluation import evaluate, task_loss
from bert_explorer.train.featurize import collate, featurize
from bert_explorer.train.finetune import label_names_of
from bert_explorer.train.task_ops import OPS, task_ops

TOK = WordPieceTokenizer.from_dir(resolve("minilm"))


def _fake_outputs(task, feats, label_names):
    """Per-feature outputs shaped as the task's head gives them, with the gold answer on top."""
    outs = []
    for f in feats:
        target = TT.task_type(task).target
        if target == "span":
            T = len(f["input_ids"])
            s, e = torch.zeros(T), torch.zeros(T)
            s[f["start_positions"]], e[f["end_positions"]] = 9.0, 9.0
            outs.append((s, e))
        elif target == "tags":
            o = torch.zeros(len(f["input_ids"]), len(label_names))
            for t, y in enumerate(f["labels"]):
                o[t, 0 if y == IGNORE else y] = 9.0
            outs.append(o)
        elif target == "value":
            outs.append(torch.tensor([f["labels"]]))
        else:
            n = len(label_names) if target == "class" else len(f["input_ids"])
            outs.append(torch.nn.functional.one_hot(torch.tensor(f["labels"]), n).float() * 9)
    return outs


@pytest.mark.parametrize("task", TT.TASKS)
def test_every_task_type_has_its_behaviour_and_a_perfect_head_scores_perfectly(task):
    tt = TT.task_type(task)
    assert tt.target in TT.TARGETS and tt.target in OPS and task_ops(task) is OPS[tt.target]
    assert 1 <= len(tt.inputs) <= 2 and tt.main_metric == tt.metrics[0]
    data = make_tiny(task, n=12, seed=4)
    names = label_names_of(data)
    assert (names is not None) == tt.labelled
    feats = featurize(task, data.examples, TOK, names, max_seq_length=64)
    batch = collate(feats, TOK.pad_id, task)
    assert batch["input_ids"].shape[0] == len(feats)
    ev = evaluate(task, data.examples, feats, _fake_outputs(task, feats, names), names)
    assert set(tt.metrics) <= set(ev)
    assert ev[tt.main_metric] == pytest.approx(100.0 if tt.percent else 1.0)


def test_the_size_of_the_output_layer_and_the_problem_type_come_from_the_target():
    names = ["a", "b", "c"]
    assert TT.task_type("classification").num_outputs(names) == 3
    assert TT.task_type("ner").num_outputs(names) == 3 and TT.task_type("ner").per_token
    assert TT.task_type("regression").num_outputs(names) == 1
    assert TT.task_type("regression").problem_type == "regression"
    assert TT.task_type("pair-classification").problem_type is None
    assert TT.task_type("qa").num_outputs(None) is None and TT.task_type("multiple-choice").num_outputs(None) is None


def test_plain_logit_losses_are_the_papers():
    torch.manual_seed(0)
    logits = torch.randn(4, 1)
    y = torch.randn(4)
    assert task_loss("regression", logits, y) == pytest.approx(float(((logits[:, 0] - y) ** 2).mean()))
    tags = torch.randn(2, 5, 3)
    labels = torch.tensor([[IGNORE, 1, 2, IGNORE, 0], [IGNORE, 0, IGNORE, IGNORE, IGNORE]])
    keep = labels != IGNORE
    expected = torch.nn.functional.cross_entropy(tags[keep], labels[keep])
    assert task_loss("ner", tags, labels) == pytest.approx(float(expected))  # sub-word positions ignored
    cls = torch.randn(4, 2)
    assert task_loss("classification", cls, torch.tensor([0, 1, 1, 0])) == pytest.approx(
        float(torch.nn.functional.cross_entropy(cls, torch.tensor([0, 1, 1, 0]))))


def test_label_counts_previews_and_typed_examples():
    ner, mc = make_tiny("ner", n=6, seed=1), make_tiny("multiple-choice", n=6, seed=1)
    counts = TT.task_type("ner").label_counts(ner.examples)
    assert sum(counts.values()) == sum(len(ex["tags"]) for ex in ner.examples)
    assert TT.task_type("multiple-choice").label_counts(mc.examples) == {
        str(k): sum(ex["label"] == k for ex in mc.examples) for k in {ex["label"] for ex in mc.examples}}
    assert TT.task_type("regression").label_counts(make_tiny("regression", 6).examples) == {}
    row = TT.task_type("qa").preview({"question": "q?", "context": "x" * 50, "answers": []}, lambda t: t[:5])
    assert row == {"question": "q?", "context": "xxxxx", "answer": "(no answer)"}
    assert TT.task_type("ner").example_from_text("Anna went home") == {"tokens": ["Anna", "went", "home"]}
    assert TT.task_type("pair-classification").example_from_text("a", "b") == {"text": "a", "text_pair": "b"}
    with pytest.raises(ValueError, match="question and a context"):
        TT.task_type("qa").example_from_text("who?")
    with pytest.raises(ValueError, match="two choices"):
        TT.task_type("multiple-choice").example_from_text("ctx", ["only one"])


def test_a_new_task_type_is_one_registry_entry(monkeypatch):
    """A task type whose head predicts a known target needs nothing but its entry: the data
    helpers, featurisation, loss, metrics and predictions follow from it."""
    from dataclasses import replace

    new = replace(TT.task_type("classification"), name="topic", metrics=("accuracy",))
    monkeypatch.setitem(TT.TASK_TYPES, "topic", new)
    examples = [{"text": "the film was good", "label": "film"}, {"text": "the car was red", "label": "car"}]
    names = ["car", "film"]
    feats = featurize("topic", examples, TOK, names, max_seq_length=32)
    assert [f["labels"] for f in feats] == [1, 0]
    outputs = [torch.tensor([0.0, 3.0]), torch.tensor([3.0, 0.0])]
    assert evaluate("topic", examples, feats, outputs, names)["accuracy"] == 1.0
    assert task_ops("topic").predict(examples, feats, outputs, names)[0]["label"] == "film"
    assert new.label_counts(examples) == {"film": 1, "car": 1}
