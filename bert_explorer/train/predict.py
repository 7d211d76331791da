"""Use a fine-tuned model: load a run (or its model directory) and predict on new input."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from .. import checkpoint
from ..data.task_types import TASK_TYPES
from ..train.metrics import bio_entities
from .evaluation import word_tags
from . import featurize as F_


class Predictor:
    def __init__(self, path: str | Path):
        p = Path(path)
        self.feature_head = None
        if (p / "feature_head" / "head.json").exists():
            from .feature_based import FeatureHead
            meta = json.loads((p / "feature_head" / "head.json").read_text())
            self.loaded = checkpoint.load(meta["base_model"], "BertModel")
            n_out = 1 if meta["task"] == "regression" else len(meta["label_names"])
            head = FeatureHead(len(meta["layers"]), meta["hidden"], meta["features"], n_out, meta["task"] == "ner")
            head.load_state_dict(load_file(str(p / "feature_head" / "head.safetensors")))
            self.feature_head, self.meta = head.eval(), meta
            self.task, self.label_names, self.max_len = meta["task"], meta["label_names"], meta["max_seq_length"]
            self.doc_stride, self.tau = 64, None
            return
        model_dir = p / "model" if (p / "model" / "config.json").exists() else p
        self.loaded = checkpoint.load(model_dir)
        args_file = model_dir / "training_args.json"
        args = json.loads(args_file.read_text()) if args_file.exists() else {}
        arch = type(self.loaded.model).__name__
        self.task = args.get("task") or {t.architecture: t.name for t in reversed(TASK_TYPES.values())}.get(arch)
        if self.task is None:
            raise checkpoint.CheckpointError(f"{model_dir} is not a fine-tuned model (its architecture is {arch})")
        if self.task in ("classification", "pair-classification") and self.loaded.model.is_regression:
            self.task = "regression"
        id2label = self.loaded.config.id2label
        self.label_names = [id2label[i] for i in sorted(id2label)] if id2label else None
        self.max_len = args.get("max_seq_length", 128)
        self.doc_stride = args.get("doc_stride", 64)
        self.tau = args.get("null_threshold")  # SQuAD 2.0: answer only when best span > s_null + τ
        metrics_file = model_dir.parent / "metrics.json"
        if self.tau is None and metrics_file.exists():
            self.tau = json.loads(metrics_file.read_text()).get("dev", {}).get("null_threshold")

    def _outputs(self, feats):
        if self.feature_head is None:
            from .evaluation import predict_features
            return predict_features(self.loaded.model, feats, self.task, self.loaded.tokenizer.pad_id, "cpu")
        from .feature_based import extract, head_outputs
        xs = extract(self.loaded, feats, self.meta["layers"], self.task, "cpu")
        return head_outputs(self.feature_head, xs)

    def predict(self, examples: list[dict]) -> list[dict]:
        feats = F_.featurize(self.task, examples, self.loaded.tokenizer, self.label_names, self.max_len,
                             self.doc_stride)
        outs = self._outputs(feats)
        if self.task == "qa":
            # key by position so repeated or missing ids cannot merge two questions
            keyed = [{**ex, "id": str(i)} for i, ex in enumerate(examples)]
            preds = F_.qa_predictions(keyed, feats, [o[0] for o in outs], [o[1] for o in outs])
            answer = F_.apply_null_threshold(preds, self.tau) if self.tau is not None else {
                k: v["text"] for k, v in preds.items()}
            return [{"answer": answer[str(i)], "score": preds[str(i)]["score"],
                     "null_score": preds[str(i)]["null_score"]} for i in range(len(examples))]
        results = []
        for ex, f, o in zip(examples, feats, outs):
            if self.task == "regression":
                results.append({"score": float(o.squeeze())})
            elif self.task == "ner":
                tags = word_tags(ex, f, o, self.label_names)
                ents = [{"type": ty, "text": " ".join(ex["tokens"][a:b]), "start": a, "end": b}
                        for ty, a, b in bio_entities(tags)]
                results.append({"tokens": ex["tokens"], "tags": tags, "entities": ents})
            elif self.task == "multiple-choice":
                p = torch.softmax(o, -1)
                results.append({"choice": int(p.argmax()), "probabilities": [round(float(x), 6) for x in p]})
            else:
                p = torch.softmax(o, -1)
                results.append({"label": self.label_names[int(p.argmax())],
                                "probabilities": {n: round(float(x), 6) for n, x in zip(self.label_names, p)}})
        return results
