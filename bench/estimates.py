"""Estimates that hold: each corpus-wide job and fine-tuning, estimated before it starts, then run.

    .venv/bin/python bench/estimates.py [--models minilm,base] [--jobs index,probe,finetune]
                                        [--threads 1] [--repeats 1] [--scale 1.0]

For minilm-mlm-nsp (the default offline model) and a BERT-Base-shaped model with random weights
(12 layers x 768 x 12 heads, vocabulary 30,522; written into a temporary folder here, never kept),
each job runs on a reduced but representative size, after its estimate (``train/estimate.py``, through
the functions the page and the command call):

* ``index``: the nearest-neighbour index of a sample of BBC News documents (every k-th one), at layer 0
  (the embeddings: no encoder layer runs) and at the last layer (every layer runs), in this process,
  as the command builds it (no background start). The corpus is cut into sentences again for the build,
  as a build started by the page does in its own process;
* ``probe``: what each layer knows, NER on a sample of WNUT-16 sentences and the BBC topic on a sample of
  articles: every layer's vectors, then 2·(L+1) linear probes;
* ``finetune``: ``run_finetuning`` on bbc-topics, a few dozen steps, one epoch, the dev set scored
  after it and once more at the end, the model saved; no background start.

Each row prints the estimate, the time taken and their ratio (taken / estimated: 1.00 is exact; the
issue asks for 0.70-1.30). Every job writes only into temporary folders (a fresh disk cache each), so
nothing is read from an earlier run. ``--threads`` sets PyTorch's threads (1 = what a background job gets
on a 2-core machine). The load average before and after each job is printed: on a shared machine
another process's work slows a job down, and its ratio with it.

Not part of the test suite: it takes about 5-8 minutes with both models on a 2-core CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from bert_explorer import checkpoint
from bert_explorer.analysis.layers import probing
from bert_explorer.analysis.neighbours import index as nbb
from bert_explorer.data.corpora import bbc_articles
from bert_explorer.model import BertConfig
from bert_explorer.train import estimate, finetune

# Reduced sizes (each job on its own takes about a minute on one thread of this 2-core CPU)
SIZES = {
    "minilm": {"index_every": 12, "ner": 300, "topic": 200, "ft_examples": 384, "ft_batch": 16},
    "base": {"index_every": 60, "ner": 100, "topic": 60, "ft_examples": 192, "ft_batch": 8},
}


def load_text() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def peak_text() -> str:
    """This CPU's speed at multiplying matrices that the last estimate measured (one thread)."""
    return ", ".join(f"{'bf16' if bf16 else 'fp32'} {rate / 1e9:.0f}" for bf16, (_, rate) in sorted(estimate._peak.items())
                     ) + " GFLOP/s"


def make_base(folder: Path) -> str:
    """A BERT-Base-shaped checkpoint with random weights and MiniLM's uncased vocabulary."""
    config = BertConfig(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
                        max_position_embeddings=512)
    torch.manual_seed(0)
    model = checkpoint.new_model("BertForPreTraining", config)
    tokenizer = checkpoint.load("minilm-mlm-nsp", "BertModel").tokenizer
    checkpoint.save(model, tokenizer, folder)
    return str(folder)


class Table:
    def __init__(self):
        self.rows = []

    def add(self, model: str, job: str, size: str, est: float, took: float, load_before: str, note: str = ""):
        row = (model, job, size, est, took, took / est, load_before, load_text(), note)
        self.rows.append(row)
        print(self.line(row), flush=True)

    @staticmethod
    def line(r) -> str:
        return (f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:,.1f} s | {r[4]:,.1f} s | {r[5]:.2f} | {r[6]} → {r[7]} |"
                + (f" {r[8]} |" if r[8] else " |"))

    def print(self):
        print("\n| model | job | size | estimate | taken | taken / estimate | load before → after | notes |")
        print("|---|---|---|---:|---:|---:|---|---|")
        for r in self.rows:
            print(self.line(r))


def fresh_cache():
    """A new, empty disk cache for one job (so nothing of an earlier run is read)."""
    d = tempfile.mkdtemp(prefix="bench-estimates-cache-")
    os.environ["BERT_EXPLORER_CACHE"] = d
    return d


def bench_index(name: str, loaded, size: dict, table: Table, threads: int) -> None:
    docs = [doc for _, doc in bbc_articles()][::size["index_every"]]
    L = loaded.config.num_layers
    for layer in (0, L):
        cache = fresh_cache()
        try:
            est = nbb.estimate_build_seconds(loaded, docs, layer, threads=threads)
            nbb._last_units.clear()  # the build cuts the corpus itself, as in the page's background process
            before = load_text()
            t0 = time.perf_counter()
            paths = nbb.build_index(loaded, docs, layer)
            took = time.perf_counter() - t0
            rows = json.loads((paths[layer] / "meta.json").read_text())["rows"]
            table.add(name, f"index, layer {layer}", f"{len(docs)} documents, {est['tokens']:,} tokens", est["seconds"],
                      took, before, f"tokens: estimate {est['tokens']:,}, build {rows:,}; {peak_text()}")
        finally:
            shutil.rmtree(cache, ignore_errors=True)


def bench_probe(name: str, loaded, size: dict, table: Table, threads: int) -> None:
    for task in ("ner", "topic"):
        cache = fresh_cache()
        try:
            settings = probing.ProbeSettings(max_examples=size[task])
            est = probing.estimate_seconds(loaded, task, settings, threads=threads)
            before = load_text()
            t0 = time.perf_counter()
            r = probing.probe_layers(loaded, task, settings)
            took = time.perf_counter() - t0
            table.add(name, f"probe {task}", f"{est['inputs']:,} inputs, {est['rows']:,} rows", est["seconds"], took,
                      before, f"vectors {est['features_seconds']:.0f} s est. / {r['seconds']['features']:.0f} s; "
                              f"probes {est['probes_seconds']:.0f} s est. / {r['seconds']['probes']:.0f} s; {peak_text()}")
        finally:
            shutil.rmtree(cache, ignore_errors=True)


def bench_finetune(name: str, model: str, size: dict, table: Table, threads: int, precision: str) -> None:
    cfg = finetune.FinetuneConfig(model=model, train="builtin:bbc-topics", max_train_examples=size["ft_examples"],
                                  max_dev_examples=64, epochs=1, batch_size=size["ft_batch"], max_seq_length=128,
                                  device="cpu", precision=precision)
    train, dev = finetune.read_data(cfg)
    est = finetune.estimate(cfg, train, len(dev.examples), threads=threads, process_start=False)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-estimates-run-"))
    try:
        before = load_text()
        t0 = time.perf_counter()
        result = finetune.run_finetuning(cfg, run_dir / "run")
        took = time.perf_counter() - t0
        table.add(name, f"fine-tune ({precision})", f"{est['steps']} steps of {cfg.batch_size} x ~{est['tokens_per_example']:.0f}, "
                                     f"{len(dev.examples)} dev", est["seconds"], took, before,
                  f"training {est['train_seconds']:.0f} s est. / {result['train_seconds']:.0f} s (with its dev "
                  f"scoring: {est['eval_seconds']:.0f} s est.); {peak_text()}")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="minilm,base")
    p.add_argument("--jobs", default="index,probe,finetune")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0, help="multiply every size (smaller = quicker)")
    p.add_argument("--precision", default="auto", help="fine-tuning's precision (auto: bf16 where the CPU is fast at it)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    print(f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {args.threads} thread(s); "
          f"torch {torch.__version__}; load {load_text()}")
    estimate.PEAK_TTL_S = 0.0  # each estimate measures the CPU's speed at its own time (the note says it)
    table = Table()
    keep = Path(tempfile.mkdtemp(prefix="bench-estimates-models-"))
    try:
        models = {"minilm": "minilm-mlm-nsp"}
        if "base" in args.models.split(","):
            models["base"] = make_base(keep / "bert-base-random")
        for _ in range(args.repeats):
            for short in args.models.split(","):
                model = models[short]
                label = "minilm-mlm-nsp" if short == "minilm" else "BERT-Base shape (random)"
                size = {k: (max(1, int(v / args.scale)) if k == "index_every" else max(2, int(v * args.scale))
                            if k != "ft_batch" else v) for k, v in SIZES[short].items()}
                loaded = checkpoint.load(model, "BertForPreTraining")
                jobs = args.jobs.split(",")
                if "index" in jobs:
                    bench_index(label, loaded, size, table, args.threads)
                if "probe" in jobs:
                    bench_probe(label, loaded, size, table, args.threads)
                if "finetune" in jobs:
                    bench_finetune(label, model, size, table, args.threads, args.precision)
                del loaded
    finally:
        shutil.rmtree(keep, ignore_errors=True)
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
