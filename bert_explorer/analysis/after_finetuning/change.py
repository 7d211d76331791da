"""What fine-tuning changed inside the model (paper, Section 4 and Figure 4a, b).

A classifier reads its answer from C, the final hidden vector of [CLS]. Before fine-tuning C was
trained only for the next-sentence objective (or not at all); fine-tuning trains every layer so
that C holds the task's answer. Three views of that, on the run's own dev inputs:

* **Maps** of the dev set's C vectors before (the pre-trained model the run started from) and after
  (the fine-tuned model), by PCA or t-SNE, coloured by the gold answer.
* **Separation**, measured for both: how well a *linear probe* (a softmax classifier, or for values
  a least-squares line, ``analysis.layers.probing.fit_linear``) reads the gold answer from C, scored by
  k-fold cross-validation so every example is scored by a probe that never saw it; for labels also
  the *silhouette score* (Rousseeuw 1987): for each point, how much nearer it is to its own class
  than to the nearest other one, from −1 to 1.
* **Layer-by-layer CKA** between the two models on the same tokens of these inputs (the Two models
  page's measure, ``analysis.comparison.measures.cka_matrix``; Kornblith et al. 2019): 1 where fine-tuning left a
  layer's arrangement of the tokens as it was, lower where it moved the network.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from ... import checkpoint
from ...checkpoint import encoder_of
from ...tasks.base import TaskType
from ..comparison.measures import cka_matrix
from ..comparison.two_models import same_vocabulary
from ..embeddings import project
from ..layers.probing import fit_linear

FOLDS = 5
CKA_TOKENS = 4000  # tokens sampled for CKA: enough for a stable number, small enough for a 2-core CPU


def models_of(run_dir: str | Path) -> tuple[str, Path]:
    """The two checkpoints compared: the pre-trained model the run started from (its ``model``
    setting) and the fine-tuned model it saved. A ValueError says why a run has no such pair."""
    run_dir = Path(run_dir)
    cfg = json.loads((run_dir / "config.json").read_text())
    if cfg.get("mode") == "feature-based":
        raise ValueError("This run is feature-based: BERT stayed frozen and only a BiLSTM on its activations was "
                         "trained, so the encoder before and after is the same model.")
    after = run_dir / "model"
    if not (after / "config.json").is_file():
        raise ValueError(f"{run_dir.name} kept no fine-tuned model, so there is no 'after' to compare.")
    return str(cfg["model"]), after


def _vectors(loaded, feats, task: TaskType, positions: list[tuple[int, int]], batch_size: int = 32):
    """C (the last layer's [CLS] vector) of every input [n, H], and every layer's vectors at
    ``positions`` (example, token): L+1 of [len(positions), H]."""
    encoder = encoder_of(loaded.model).eval()
    device = next(encoder.parameters()).device
    at: dict[int, list[int]] = {}
    for k, (i, t) in enumerate(positions):
        at.setdefault(i, []).append(k)
    cls, layers = [], None
    with torch.no_grad():
        for start in range(0, len(feats), batch_size):
            batch = {k: v.to(device) for k, v in task.collate(feats[start:start + batch_size],
                                                                 loaded.tokenizer.pad_id).items()
                     if k in ("input_ids", "token_type_ids", "attention_mask")}
            hs = torch.stack(encoder(**batch, output_hidden_states=True).hidden_states, 1).float().cpu()  # [B, L+1, T, H]
            if layers is None:
                layers = np.zeros((hs.shape[1], len(positions), hs.shape[-1]), np.float32)
            cls.append(hs[:, -1, 0].numpy())
            for b in range(hs.shape[0]):
                for k in at.get(start + b, []):
                    layers[:, k] = hs[b, :, positions[k][1]].numpy()
    return np.concatenate(cls), list(layers)


def _token_positions(feats, special: set[int], n: int, seed: int) -> list[tuple[int, int]]:
    every = [(i, t) for i, f in enumerate(feats) for t, (tok, m) in enumerate(zip(f["input_ids"], f["attention_mask"]))
             if m and tok not in special]
    if len(every) > n:
        every = sorted(random.Random(seed).sample(every, n))
    return every


def probe_separation(x: np.ndarray, gold: list, labelled: bool, folds: int = FOLDS, seed: int = 0) -> dict:
    """How well a linear probe reads the gold answer from the vectors x [n, H], by k-fold
    cross-validation: accuracy for labels, R² for values; and for labels the silhouette score."""
    n = len(gold)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    fold_of = {i: k % folds for k, i in enumerate(order)}
    if labelled:
        names = sorted({str(g) for g in gold})
        y = np.array([names.index(str(g)) for g in gold])
        right = scored = 0
        for k in range(folds):
            train = [i for i in range(n) if fold_of[i] != k]
            test = [i for i in range(n) if fold_of[i] == k]
            if not test or len(set(y[train])) < 2:
                continue  # (a fold with one class to learn from scores nothing: not counted as wrong)
            predict = fit_linear(x[train], y[train], len(names))
            right += int((predict(x[test]) == y[test]).sum())
            scored += len(test)
        out = {"probe_accuracy": right / scored if scored else 0.0, "silhouette": None}
        if 2 <= len(names) < n:
            from sklearn.metrics import silhouette_score  # here: scikit-learn takes a second to import
            out["silhouette"] = float(silhouette_score(x, y))
        return out
    y = np.asarray(gold, dtype=np.float64)
    pred = np.zeros(n)
    for k in range(folds):  # ridge regression on standardised features, in closed form
        train = np.array([i for i in range(n) if fold_of[i] != k])
        test = np.array([i for i in range(n) if fold_of[i] == k])
        if len(test) == 0 or len(train) < 2:
            continue
        mu, sd = x[train].mean(0), x[train].std(0) + 1e-6
        a = (x[train] - mu) / sd
        w = np.linalg.solve(a.T @ a + 1.0 * np.eye(a.shape[1]), a.T @ (y[train] - y[train].mean()))
        pred[test] = ((x[test] - mu) / sd) @ w + y[train].mean()
    total = float(((y - y.mean()) ** 2).sum())
    return {"probe_r2": 1 - float(((y - pred) ** 2).sum()) / total if total > 0 else 0.0}


def what_changed(run_dir: str | Path, examples: list[dict], task: TaskType, label_names: list[str] | None,
                 max_seq_length: int = 128, seed: int = 0, cka_tokens: int = CKA_TOKENS) -> dict:
    """C before and after fine-tuning for ``examples`` (the run's dev set), the separation of the
    gold answers in both, and the CKA of every layer between the two models, as plain data."""
    if not task.cls_map:
        raise ValueError(f"The [CLS] maps apply to the tasks read from [CLS] one input at a time (classification, "
                         f"pairs, regression), not to {task.name}.")
    base_name, after_dir = models_of(run_dir)
    try:
        before, after = checkpoint.load(base_name), checkpoint.load(after_dir)
    except checkpoint.CheckpointError as e:
        raise ValueError(f"The pre-trained model this run started from ({Path(base_name).name or base_name}) cannot "
                         f"be loaded ({e}), so there is no 'before' to compare.") from None
    if not same_vocabulary(before, after):
        raise ValueError("The fine-tuned model's vocabulary differs from its base model's, so the same input "
                         "would not be the same tokens in both.")
    feats = task.featurize(examples, after.tokenizer, label_names, max_seq_length)
    positions = _token_positions(feats, after.tokenizer.special_ids(), cka_tokens, seed)
    c_before, layers_before = _vectors(before, feats, task, positions)
    c_after, layers_after = _vectors(after, feats, task, positions)
    labelled = task.labelled
    gold = [str(ex["label"]) if labelled else float(ex["label"]) for ex in examples]
    cka = cka_matrix(layers_before, layers_after, diagonal=True)
    return {"before": str(checkpoint.resolve(base_name)), "before_name": base_name, "after": str(after_dir),
            "c_before": c_before, "c_after": c_after, "gold": gold, "labelled": labelled,
            "separation": {"before": probe_separation(c_before, gold, labelled, seed=seed),
                           "after": probe_separation(c_after, gold, labelled, seed=seed)},
            "cka_by_layer": [float(cka[i, i]) for i in range(len(layers_before))], "cka_tokens": len(positions)}


def maps(changed: dict, method: str = "pca", seed: int = 0) -> dict:
    """The two sets of C vectors on a plane (``embeddings.project``): {"before", "after"} of [n, 2],
    each model's own projection (the two are different spaces)."""
    return {k: project(changed[f"c_{k}"], method, seed).coords for k in ("before", "after")}


FEW_FOR_A_PROBE = 100  # dev examples under which a probe's cross-validated accuracy is said to be a few examples'


def describe(changed: dict, head_accuracy: float | None = None) -> str:
    """Sentences with this run's own numbers: the separation before and after, and where CKA fell most.
    ``head_accuracy``: the fine-tuned head's accuracy on the same dev examples, where known."""
    sb, sa = changed["separation"]["before"], changed["separation"]["after"]
    n = len(changed["gold"])
    if changed["labelled"]:
        # beside what always answering the most frequent label scores (31.7 % read as some separation where that
        # alone scores 33.3 %)
        counts = Counter(str(g) for g in changed["gold"]).most_common()
        count = counts[0][1] if counts else 0
        tied = [label for label, c in counts if c == count]  # ("the most frequent label, neg" of 10 neg and 10 pos)
        most = f"label, {tied[0]}," if len(tied) == 1 else f"of the labels that tie ({', '.join(tied[:4])}),"
        said = (f"A linear probe reads the gold label from C for {sb['probe_accuracy']:.1%} of the {n} dev examples "
                f"before fine-tuning and {sa['probe_accuracy']:.1%} after ({FOLDS}-fold cross-validated), where "
                f"always answering the most frequent {most} scores {count / max(1, n):.1%}")
        if sb.get("silhouette") is not None:
            said += f"; the silhouette score goes from {sb['silhouette']:.2f} to {sa['silhouette']:.2f}"
        if n < FEW_FOR_A_PROBE and head_accuracy is not None and sa["probe_accuracy"] < head_accuracy:
            # (50.0 % before and after, beside the fine-tuned head's 80.0 % on the same 20, without a word)
            said += (f". The probe learns from these {n} examples alone, about {round(n * (FOLDS - 1) / FOLDS)} at a "
                     f"time: so few let it read less than the fine-tuned head, which learnt from the whole training "
                     f"set and answers {head_accuracy:.1%} of them")
    else:
        said = (f"A least-squares line reads the gold value from C with R² = {sb['probe_r2']:.2f} before fine-tuning "
                f"and {sa['probe_r2']:.2f} after, on {n} dev examples ({FOLDS}-fold cross-validated)")
    cka = changed["cka_by_layer"]
    low = int(np.argmin(cka))
    # ("moved layer 6 most (CKA 1.00)" beside 1.00 everywhere: where every layer rounds to 1.00, it moved none)
    moved = (f"fine-tuning moved layer {low} most (CKA {cka[low]:.2f})" if round(float(cka[low]), 2) < 1.0 else
             "fine-tuning barely moved any layer (CKA 1.00 at two decimals in every one)")
    said += (f". CKA between the two models, on {changed['cka_tokens']:,} tokens of these inputs, is {cka[0]:.2f} at "
             f"the embeddings and {cka[-1]:.2f} at layer {len(cka) - 1}; {moved}. CKA depends on the inputs it is "
             f"measured on: Two models side by side measures the same pair on held-out news sentences, so its figures "
             f"can differ from these.")
    return said
