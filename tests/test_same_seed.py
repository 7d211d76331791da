"""Same seed, same numbers.

A WordPiece vocabulary learnt by ``tokenizers`` differs from one process to the next (ties
between equally frequent merges are broken in hash order; 179 of 6,000 ids were seen to differ),
so a recipe that learnt its vocabulary gave other numbers each time it ran. Every shipped recipe
now reads the standard uncased vocabulary, as Turc et al.'s miniature BERTs do: training the same
pre-training twice, in two processes, gives the same vocabulary and the same losses.
"""
import json
import os
import subprocess
import sys

import pytest

from bert_explorer import checkpoint
from bert_explorer.experiments import grid

REPO = checkpoint.ASSETS.parent

_PRETRAIN_ONCE = """
import hashlib, json, sys
from pathlib import Path
from bert_explorer.experiments import grid, runner
plan = grid.expand(grid.load_recipe(sys.argv[1]))
key, cfg = next(iter(plan["pretrainings"].items()))  # the baseline's pre-training
cfg = {**cfg, "max_docs": 40, "max_steps": 3, "batch_size": 4, "max_seq_length": 32, "log_every": 1,
       "eval_batches": 2, "warmup_steps": 1, "device": "cpu", "precision": "fp32"}
model = runner.ensure_pretrained(Path(sys.argv[2]), key, cfg)
metrics = [json.loads(x) for x in (model.parents[1] / "metrics.jsonl").read_text().splitlines()]
print(json.dumps({"vocab": hashlib.sha1((model / "vocab.txt").read_bytes()).hexdigest(),
                  "losses": [m["loss"] for m in metrics if m.get("split") == "train"],
                  "eval": [m["mlm_perplexity"] for m in metrics if m.get("split") == "eval"]}))
"""


@pytest.mark.parametrize("recipe", grid.list_recipes())
def test_every_recipe_reads_a_fixed_vocabulary(recipe):
    loaded = grid.load_recipe(recipe)
    if loaded.get("pretrained") == "hub":  # it pre-trains nothing: each downloaded model brings its own vocab.txt
        assert all(set(cfg) == {"hub", "size"} for cfg in grid.expand(loaded)["pretrainings"].values()), recipe
        return
    vocab = loaded["pretrain"].get("vocab", "train")
    assert vocab not in ("train", "shared"), f"{recipe} learns its vocabulary: not the same from run to run"
    assert grid.vocab_size_of({"vocab": vocab}) == 30522


@pytest.mark.parametrize("recipe", ["smoke"])
def test_a_recipe_trained_twice_in_two_processes_gives_the_same_numbers(recipe, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    runs = []
    for i in range(2):
        proc = subprocess.run([sys.executable, "-c", _PRETRAIN_ONCE, recipe, str(tmp_path / f"abl{i}")], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert len(runs[0]["losses"]) == 3
    assert runs[0] == runs[1]
