"""The task registry and each task type's behaviour: every task type is one registry entry (an
object), its behaviour comes with its kind of answer, a new task type needs nothing else, and the
dev metrics are computed from what the model answered."""
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from sklearn import metrics as skm

from bert_explorer.checkpoint import resolve
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.model import IGNORE
from bert_explorer.tasks import registry as R
from bert_explorer.tasks.base import TaskType
from bert_explorer.tasks.choice import ChoiceTask
from bert_explorer.tasks.multilabel import MultiLabelTask
from bert_explorer.tasks.sequence import LabelTask, ValueTask
from bert_explorer.tasks.spans import SpanTask
from bert_explorer.tasks.tagging import TagTask
from bert_explorer.tokenizer import WordPieceTokenizer
from bert_explorer.train.finetune import label_names_of

TOK = WordPieceTokenizer.from_dir(resolve("minilm"))


def _one_hot(i: int, n: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(i), n).float() * 9


def _outputs(task: TaskType, feats, label_names, right: bool = True):
    """Per-feature outputs shaped as the task's head gives them, with the gold answer on top
    (``right``), or with a wrong answer on top: another class or choice, "O" for every word, a
    span that misses the answer, the negated value."""
    outs = []
    for f in feats:
        if isinstance(task, SpanTask):
            T = len(f["input_ids"])
            s, e = torch.zeros(T), torch.zeros(T)
            if right:
                s[f["start_positions"]], e[f["end_positions"]] = 9.0, 9.0
            else:  # the first token of the context: a filler word, never the answer in the tiny data
                first = f["sequence_ids"].index(1)
                assert first != f["start_positions"]
                s[first], e[first] = 9.0, 9.0
            outs.append((s, e))
        elif isinstance(task, TagTask):
            o = torch.zeros(len(f["input_ids"]), len(label_names))
            for t, y in enumerate(f["labels"]):
                o[t, 0 if (y == IGNORE or not right) else y] = 9.0  # label 0 is "O"
            outs.append(o)
        elif isinstance(task, ValueTask):
            outs.append(torch.tensor([f["labels"] if right else -f["labels"]]))
        elif isinstance(task, MultiLabelTask):  # +9 where a label is gold, -9 elsewhere (or the reverse)
            signs = torch.tensor(f["labels"]) * 2 - 1
            outs.append(signs * (9.0 if right else -9.0))
        else:
            n = len(label_names) if isinstance(task, LabelTask) else len(f["input_ids"])
            outs.append(_one_hot(f["labels"] if right else (f["labels"] + 1) % n, n))
    return outs


@pytest.mark.parametrize("name", R.TASKS)
def test_every_task_type_has_its_behaviour_and_a_perfect_head_scores_perfectly(name):
    task = R.task_type(name)
    assert isinstance(task, (LabelTask, ValueTask, TagTask, SpanTask, ChoiceTask, MultiLabelTask))
    assert 1 <= len(task.inputs) <= 2 and task.main_metric == task.metrics[0]
    data = make_tiny(name, n=12, seed=4)
    assert data.task is task  # the data carries the object, not its name
    names = label_names_of(data)
    assert (names is not None) == task.labelled
    feats = task.featurize(data.examples, TOK, names, max_seq_length=64)
    batch = task.collate(feats, TOK.pad_id)
    assert batch["input_ids"].shape[0] == len(feats)
    ev = task.evaluate(data.examples, feats, _outputs(task, feats, names), names)
    assert set(task.metrics) <= set(ev)
    assert ev[task.main_metric] == pytest.approx(100.0 if task.percent else 1.0)


@pytest.mark.parametrize("name", R.TASKS)
def test_the_dev_metrics_come_from_the_models_answers(name):
    """A head that answers wrongly scores at the bottom: an evaluate that read the gold answers
    instead of the model's outputs would score it perfectly."""
    task = R.task_type(name)
    data = make_tiny(name, n=12, seed=4)
    names = label_names_of(data)
    feats = task.featurize(data.examples, TOK, names, max_seq_length=64)
    ev = task.evaluate(data.examples, feats, _outputs(task, feats, names, right=False), names)
    assert ev[task.main_metric] == pytest.approx(-1.0 if isinstance(task, ValueTask) else 0.0)


@pytest.mark.parametrize("name", ["classification", "pair-classification"])
def test_classification_scores_are_scikit_learns_of_the_argmax(name):
    task = R.task_type(name)
    data = make_tiny(name, n=40, seed=6)
    names = label_names_of(data)
    feats = task.featurize(data.examples, TOK, names, max_seq_length=64)
    torch.manual_seed(1)
    outputs = list(torch.randn(len(feats), len(names)))
    ev = task.evaluate(data.examples, feats, outputs, names)
    gold = [ex["label"] for ex in data.examples]
    pred = [names[int(o.argmax())] for o in outputs]
    assert ev["accuracy"] == pytest.approx(skm.accuracy_score(gold, pred))
    assert ev["mcc"] == pytest.approx(skm.matthews_corrcoef(gold, pred))
    assert ev["confusion_matrix"] == skm.confusion_matrix(gold, pred, labels=names).tolist()
    assert 0.2 < ev["accuracy"] < 0.8  # random logits: neither all right nor all wrong


def test_the_size_of_the_output_layer_and_the_problem_type_come_from_the_kind_of_answer():
    names = ["a", "b", "c"]
    assert R.CLASSIFICATION.num_outputs(names) == 3
    assert R.NER.num_outputs(names) == 3 and R.NER.per_token
    assert R.REGRESSION.num_outputs(names) == 1
    assert R.REGRESSION.problem_type == "regression"
    assert R.PAIR_CLASSIFICATION.problem_type is None
    assert R.QA.num_outputs(None) is None and R.MULTIPLE_CHOICE.num_outputs(None) is None


def test_plain_logit_losses_are_the_papers():
    torch.manual_seed(0)
    logits = torch.randn(4, 1)
    y = torch.randn(4)
    assert R.REGRESSION.loss(logits, y) == pytest.approx(float(((logits[:, 0] - y) ** 2).mean()))
    tags = torch.randn(2, 5, 3)
    labels = torch.tensor([[IGNORE, 1, 2, IGNORE, 0], [IGNORE, 0, IGNORE, IGNORE, IGNORE]])
    keep = labels != IGNORE
    expected = torch.nn.functional.cross_entropy(tags[keep], labels[keep])
    assert R.NER.loss(tags, labels) == pytest.approx(float(expected))  # sub-word positions ignored
    cls = torch.randn(4, 2)
    assert R.CLASSIFICATION.loss(cls, torch.tensor([0, 1, 1, 0])) == pytest.approx(
        float(torch.nn.functional.cross_entropy(cls, torch.tensor([0, 1, 1, 0]))))


def test_label_counts_previews_and_typed_examples():
    ner, mc = make_tiny("ner", n=6, seed=1), make_tiny("multiple-choice", n=6, seed=1)
    counts = R.NER.label_counts(ner.examples)
    assert sum(counts.values()) == sum(len(ex["tags"]) for ex in ner.examples)
    assert R.MULTIPLE_CHOICE.label_counts(mc.examples) == {
        str(k): sum(ex["label"] == k for ex in mc.examples) for k in {ex["label"] for ex in mc.examples}}
    assert R.REGRESSION.label_counts(make_tiny("regression", 6).examples) == {}
    row = R.QA.preview({"question": "q?", "context": "x" * 50, "answers": []}, lambda t: t[:5])
    assert row == {"question": "q?", "context": "xxxxx", "answer": "(no answer)"}
    assert R.NER.example_from_text("Anna went home") == {"tokens": ["Anna", "went", "home"]}
    assert R.PAIR_CLASSIFICATION.example_from_text("a", "b") == {"text": "a", "text_pair": "b"}
    with pytest.raises(ValueError, match="question and a context"):
        R.QA.example_from_text("who?")
    with pytest.raises(ValueError, match="two choices"):
        R.MULTIPLE_CHOICE.example_from_text("ctx", ["only one"])


def test_a_name_becomes_its_object_once_and_an_unknown_name_says_what_exists():
    assert R.task_type("ner") is R.NER
    with pytest.raises(ValueError, match=r"unknown task 'regresion' \(did you mean 'regression'\?\); choose one of"):
        R.task_type("regresion")


def test_each_answer_reads_in_one_line():
    assert R.CLASSIFICATION.shown({"label": "pos", "probabilities": {"neg": 0.1, "pos": 0.9}}, {}).text == "pos"
    assert R.REGRESSION.shown({"score": 3.14159}, {}).text == "3.142"
    ner = R.NER.shown({"tokens": ["Anna", "lives"], "tags": ["B-PER", "O"],
                       "entities": [{"type": "PER", "text": "Anna", "start": 0, "end": 1}]}, {})
    assert (ner.title, ner.text, ner.table["tag"]) == ("Entities", "Anna (PER)", ["B-PER", "O"])
    assert R.QA.shown({"answer": ""}, {}).text == "(no answer)"
    assert R.MULTIPLE_CHOICE.shown({"choice": 1}, {"choices": ["a", "b"]}).text == "2: b"
    # the value of each answer that the pages and the reports read
    assert [t.answer_key for t in R.TASK_TYPES.values()] == ["label", "label", "score", "entities", "answer", "choice",
                                                                   "labels"]


def test_a_new_task_type_is_one_registry_entry(monkeypatch):
    """A task type whose head predicts a known kind of answer needs nothing but its entry: the
    data helpers, featurisation, loss, metrics and predictions follow from it."""
    new = replace(R.CLASSIFICATION, name="topic", metrics=("accuracy",))
    monkeypatch.setitem(R.TASK_TYPES, "topic", new)
    examples = [{"text": "the film was good", "label": "film"}, {"text": "the car was red", "label": "car"}]
    names = ["car", "film"]
    topic = R.task_type("topic")
    feats = topic.featurize(examples, TOK, names, max_seq_length=32)
    assert [f["labels"] for f in feats] == [1, 0]
    outputs = [torch.tensor([0.0, 3.0]), torch.tensor([3.0, 0.0])]
    assert topic.evaluate(examples, feats, outputs, names)["accuracy"] == 1.0
    assert topic.predict(examples, feats, outputs, names)[0]["label"] == "film"
    assert new.label_counts(examples) == {"film": 1, "car": 1}


def test_nothing_outside_tasks_switches_on_a_task_kind():
    """A kind of answer carries its own behaviour (rows, scores, slices, the dev split, what the
    pages say): no module outside tasks/ compares a task's kind, so that a new kind of answer is
    one file there and its registry entry."""
    import re

    root = Path(__file__).resolve().parents[1]
    kinds = r"(LabelTask|ValueTask|TagTask|SpanTask|ChoiceTask|MultiLabelTask)"
    entries = r"(CLASSIFICATION|PAIR_CLASSIFICATION|REGRESSION|NER|QA|MULTIPLE_CHOICE|MULTI_LABEL)"
    pattern = re.compile(r"\btask\w*\.target\b|\bkind\.target\b|isinstance\([^)]*\b" + kinds + r"\b"
                         # an identity test with a registry entry: ``task == NER``, ``task not in (None, QA)``
                         + r"|(==|!=|\bis|\bin)\s*\(?[\w\s,]*\b" + entries + r"\b(?!\.)|\b" + entries
                         + r"\b\s*(==|!=)")
    found = [f"{p.relative_to(root)}:{i}: {line.strip()}"
             for p in [*sorted((root / "bert_explorer").rglob("*.py")), *sorted((root / "pages").glob("*.py"))]
             if "tasks" not in p.relative_to(root).parts
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(re.sub(r"\"[^\"]*\"|'[^']*'", "''", line))]  # code, not messages
    assert not found, "\n".join(found)


def _reader_of(columns, rows, task=None):
    from bert_explorer.data.uploads.reader import _Reader

    reader = _Reader("t.jsonl", "", task, None, None, None, [])
    reader.fmt = "JSONL"
    return reader.from_records((columns, list(enumerate(rows, 1))), "JSONL")


def test_an_upload_asks_the_task_types_in_order_which_reads_it():
    """A table nobody named is read by the first task type that says it reads it (its columns):
    RACE's layout (a question, an article and a list of options) is multiple choice, not QA."""
    race = [{"question": f"q{i}?", "context": "a long article", "options": ["a", "b", "c", "d"], "answer": "B"}
            for i in range(12)]
    data = _reader_of(["question", "context", "options", "answer"], race)
    assert data.task is R.MULTIPLE_CHOICE and data.examples[0]["label"] == 1
    squad = [{"question": f"q{i}?", "context": "Paris is in France.", "answer": "Paris"} for i in range(12)]
    assert _reader_of(["question", "context", "answer"], squad).task is R.QA
    tokens = [{"tokens": ["Paris", "is"], "labels": ["B-LOC", "O"]} for _ in range(12)]
    assert _reader_of(["tokens", "labels"], tokens).task is R.NER
    sets = [{"text": f"t{i}", "labels": ["a", "b"][: 1 + i % 2]} for i in range(12)]
    assert _reader_of(["text", "labels"], sets).task is R.MULTI_LABEL
    pairs = [{"premise": f"p{i}", "hypothesis": f"h{i}", "label": ["yes", "no"][i % 2]} for i in range(12)]
    assert _reader_of(["premise", "hypothesis", "label"], pairs).task is R.PAIR_CLASSIFICATION
    scores = [{"sentence1": f"p{i}", "sentence2": f"h{i}", "score": i / 3} for i in range(30)]
    assert _reader_of(["sentence1", "sentence2", "score"], scores).task is R.REGRESSION
    one = [{"text": f"t{i}", "label": ["yes", "no"][i % 2]} for i in range(12)]
    assert _reader_of(["text", "label"], one).task is R.CLASSIFICATION
    # a task a person named is read its way: the pair table as classification keeps one text
    named = _reader_of(["premise", "hypothesis", "label"], pairs, task=R.CLASSIFICATION)
    assert named.task is R.CLASSIFICATION and set(named.examples[0]) == {"text", "label", "extra"}


def test_a_new_task_type_reads_its_own_tables(monkeypatch):
    """A new type that reads a table by its columns is its registry entry (and its place in the
    order); the readers need no change."""
    class Reviews(LabelTask):
        table_columns = (("review",), ("stars",))

        def reads(self, table):
            return super().reads(table)

    reviews = Reviews(name="reviews", paper="-", fields=("text", "label"), metrics=("accuracy",),
                      inputs=R.CLASSIFICATION.inputs)
    monkeypatch.setattr(R, "TABLE_ORDER", (reviews, *R.TABLE_ORDER))
    rows = [{"review": f"r{i}", "stars": str(1 + i % 5)} for i in range(20)]
    data = _reader_of(["review", "stars"], rows)
    assert data.task is reviews and data.examples[0] == {"text": "r0", "label": "1"}


def test_a_file_format_of_one_task_read_for_another_says_which_task_to_ask_for(tmp_path):
    from bert_explorer.data.uploads.core import DataError
    from bert_explorer.data.uploads.reader import read_task_file

    conll = tmp_path / "ner.conll"
    conll.write_text("".join("Paris B-LOC\nis O\n\n" for _ in range(12)))
    assert read_task_file(conll).task is R.NER
    with pytest.raises(DataError, match=r"which is ner data, but task='classification' was asked for; use task='ner'"):
        read_task_file(conll, R.CLASSIFICATION)
    fasttext = tmp_path / "sentiment.txt"
    fasttext.write_text("".join(f"__label__{['pos', 'neg'][i % 2]} text {i}\n" for i in range(12)))
    assert read_task_file(fasttext).task is R.CLASSIFICATION
    with pytest.raises(DataError, match=r"which is classification data, but task='regression'"):
        read_task_file(fasttext, "regression")


def test_the_command_line_prints_each_answer_as_its_task_says_it(monkeypatch, tmp_path, capsys):
    """`bert-explorer predict` asks the task how an answer reads (it used to sniff for a list of labels)."""
    from bert_explorer.cli import main, training

    class Stub:
        def __init__(self, model):
            self.task = R.TASK_TYPES["multi-label"]

        def predict(self, examples):
            assert [e["text"] for e in examples] == ["one", "two"]
            return [{"labels": ["a", "b"], "probabilities": {"a": 0.9, "b": 0.8}}, {"labels": [], "probabilities": {}}]

    monkeypatch.setattr(training, "Predictor", Stub)
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    assert main(["predict", "--model", "x", "--input", str(tmp_path / "in.txt")]) == 0
    assert capsys.readouterr().out == "a; b\n(none)\n"


def test_a_note_says_how_many_texts_are_longer_than_a_run_reads(tmp_path, monkeypatch, capsys):
    """120 articles of about 2,000 words were fine-tuned at 128 WordPieces with no word that the model read about
    4 % of each: the CLI (and the Fine-tune page) say it before the run."""
    from bert_explorer import checkpoint
    from bert_explorer.cli import main, training
    from bert_explorer.tasks.base import cut_note

    tok = checkpoint.tokenizer_of("minilm-mlm-nsp")
    long_text = " ".join(["the market rallied after the bank cut its rates"] * 40)  # about 360 WordPieces
    examples = [{"text": long_text, "label": "a"}] * 3 + [{"text": "short one", "label": "b"}] * 7
    note = cut_note(examples, tok, 128)
    assert note.startswith("3 of the 10 examples (30%) are longer than the 128 WordPieces a run reads, so it sees "
                           "only their start (on average 3") and "raise max_seq_length" in note
    assert cut_note(examples[3:], tok, 128) is None
    assert cut_note([{"tokens": ["a"], "tags": ["O"]}], tok, 8) is None
    # an NER sentence longer than a run reads: the words past it are answered O, and the dev score counts them
    ner = [{"tokens": ["the"] * 140 + ["Paris"], "tags": ["O"] * 140 + ["B-LOC"]}] + [{"tokens": ["a"], "tags": ["O"]}]
    note = cut_note(ner, tok, 128)
    assert note.startswith("1 of the 2 examples (50%) are longer than the 128") and "answered O" in note, note

    f = tmp_path / "long.csv"
    f.write_text("text,label\n" + "".join(f"{long_text} {i},{'ab'[i % 2]}\n" for i in range(40)))

    def stop(*a, **k):
        raise training.UserError("stopped by the test")
    monkeypatch.setattr(training, "run_finetuning", stop)
    assert main(["finetune", "--model", "minilm-mlm-nsp", "--train", str(f), "--output", str(tmp_path / "run")]) == 2
    assert "note: 36 of the 36 examples (100%) are longer than the 128 WordPieces a run reads" in capsys.readouterr().err
