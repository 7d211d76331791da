"""Use a fine-tuned model: load a run (or its model directory) and predict on new input; and its
answers to the dev set, example by example, kept in the run (``dev_predictions.json``)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from safetensors.torch import load_file

from .. import atomic, checkpoint
from ..fingerprint import fingerprint
from ..tasks.registry import task_for_model, task_type
from .feature_based import FeatureHead, extract, head_outputs

# The dev set answered example by example, kept in the run folder (written atomically): the model's
# answers, its probability of the gold answer and of its own, and each input's length in WordPieces.
PREDICTIONS_FILE = "dev_predictions.json"
PREDICTIONS_VERSION = 1


def _run_file(f: Path) -> dict:
    """A JSON file a fine-tuning run wrote, read; one sentence where it is not (it was a traceback)."""
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"{f} is not the JSON its run wrote ({getattr(e, 'msg', type(e).__name__)}): it was "
                         "changed or cut since; fine-tune again, or put the run's own file back") from None
    if not isinstance(data, dict):
        raise ValueError(f"{f} is not the JSON object its run wrote: fine-tune again, or put the run's own file back")
    return data


def training_args(model_dir: str | Path) -> dict:
    """The settings the run that fine-tuned this model wrote beside it (its task, its columns); {} for a model
    from elsewhere."""
    f = Path(model_dir) / "training_args.json"
    return _run_file(f) if f.exists() else {}


class Predictor:
    """A fine-tuned model and its task type, read from a run: ``predict`` answers new examples in
    the task's own terms (a label, a score, tags, an answer span, a choice)."""

    def __init__(self, path: str | Path, device="cpu"):
        p = self.path = Path(path)
        self.device = device
        self.feature_head = None
        if (p / "feature_head" / "head.json").exists():
            meta = json.loads((p / "feature_head" / "head.json").read_text())
            self.loaded = checkpoint.load(meta["base_model"], "BertModel")
            self.task = task_type(meta["task"])  # the run names its task: resolved here, once
            self.task_named = True
            head = FeatureHead(len(meta["layers"]), meta["hidden"], meta["features"],
                               self.task.num_outputs(meta["label_names"]), self.task.per_token)
            head.load_state_dict(load_file(str(p / "feature_head" / "head.safetensors")))
            self.feature_head, self.meta = head.eval().to(device), meta
            self.label_names, self.max_len = meta["label_names"], meta["max_seq_length"]
            self.columns = (None, None)
            self.doc_stride, self.tau = 64, None
            return
        model_dir = p / "model" if (p / "model" / "config.json").exists() else p
        self.loaded = checkpoint.load(model_dir)
        self.loaded.model.to(device)
        args = training_args(model_dir)
        arch = type(self.loaded.model).__name__
        self.task = task_for_model(args.get("task"), arch, getattr(self.loaded.model, "is_regression", False))
        # (a model from elsewhere names none: its task is the first with its architecture, a guess)
        self.task_named = bool(args.get("task"))
        if self.task is None:
            raise checkpoint.CheckpointError(f"{model_dir} is not a fine-tuned model (its architecture is {arch})")
        id2label = self.loaded.config.id2label
        self.label_names = [id2label[i] for i in sorted(id2label)] if id2label else None
        # the columns its training file named (a table or JSON lines given to predict is read by them)
        self.columns = (args.get("text_column"), args.get("text_pair_column"))
        self.max_len = args.get("max_seq_length", 128)
        self.doc_stride = args.get("doc_stride", 64)
        self.tau = args.get("null_threshold")  # SQuAD 2.0: answer only when best span > s_null + τ
        metrics_file = model_dir.parent / "metrics.json"
        if self.tau is None and metrics_file.exists():
            self.tau = (_run_file(metrics_file).get("dev") or {}).get("null_threshold")

    def _outputs(self, feats):
        if self.feature_head is None:
            return self.task.model_outputs(self.loaded.model, feats, self.loaded.tokenizer.pad_id, self.device)
        xs = extract(self.loaded, feats, self.meta["layers"], self.task, self.device)
        return head_outputs(self.feature_head, xs)

    def predict(self, examples: list[dict]) -> list[dict]:
        feats = self.task.featurize(examples, self.loaded.tokenizer, self.label_names, self.max_len, self.doc_stride)
        return self.task.predict(examples, feats, self._outputs(feats), self.label_names, self.tau)

    def weights_stamp(self) -> list:
        """What identifies the weights that answered (``fingerprint.fingerprint`` of the folder given)."""
        return fingerprint(self.path)

    def dev_predictions(self, examples: list[dict], when: str) -> dict:
        """The model's answers to labelled ``examples`` (the dev set), example by example, as one
        JSON-ready record: the examples themselves (the upload's other columns included), the
        answers of :meth:`predict` (the same call, so the same answers), the probability of the
        gold answer and of the model's own where the head gives one, and each input's length in
        WordPieces before truncation. ``when`` says when they were computed."""
        task, tok = self.task, self.loaded.tokenizer
        feats = task.featurize(examples, tok, self.label_names, self.max_len, self.doc_stride)
        outputs = self._outputs(feats)
        answers = task.predict(examples, feats, outputs, self.label_names, self.tau)
        first = {}  # an example's first window speaks for it (only QA has several, and gives no probability)
        for f, o in zip(feats, outputs):
            first.setdefault(f["example_index"], (f, o))
        probabilities = [task.probabilities(ex, *first[i], self.label_names) for i, ex in enumerate(examples)]
        pieces = [len(tok.encode(*task.texts(ex)).input_ids) for ex in examples]
        return {"version": PREDICTIONS_VERSION, "task": task.name, "label_names": self.label_names,
                "max_seq_length": self.max_len, "null_threshold": self.tau, "weights": self.weights_stamp(),
                "computed": when, "time": time.time(), "examples": examples, "answers": answers,
                "probabilities": [None if p is None else {"gold": p[0], "predicted": p[1]} for p in probabilities],
                "pieces": pieces}


def store_dev_predictions(run_dir: str | Path, record: dict) -> Path:
    """Keep a :meth:`Predictor.dev_predictions` record in the run folder, replaced atomically: a
    reader finds the old file or the new one, never half of one."""
    path = Path(run_dir) / PREDICTIONS_FILE
    atomic.write_json(path, record, indent=2, default=str)
    return path
