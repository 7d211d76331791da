"""How fast is fine-tuning? Our `bert-explorer finetune` against a plain loop over transformers.

    python bench/finetune_speed.py [--model minilm-mlm-nsp] [--task bbc-topics] [--max-train 400]
                                   [--max-dev 200] [--epochs 2] [--batch 32] [--lr 5e-5]
                                   [--max-seq-length 128] [--repeats 3] [--threads N]

Both sides get the same examples (the built-in task, sampled and split by the same seed), the same
batch size, learning rate, warm-up (10 %, then linear decay), AdamW, epochs and maximum sequence
length, and the same starting weights: the base checkpoint plus the same freshly initialised
classifier. Both evaluate on the dev set after every epoch.

* ours: ``run_finetuning`` itself, the code the app and the CLI run, with its defaults: batches of
  similar lengths padded to their own longest, bf16 autocast where the CPU multiplies bf16
  natively (``--precision auto``), the examples tokenised once.
* transformers: the loop a practitioner writes without ``Trainer``: the tokenizer pads every
  example to ``max_length``, ``BertForSequenceClassification`` in fp32, a shuffled ``DataLoader``,
  ``get_linear_schedule_with_warmup``.

Each side's seconds are the wall-clock time from the examples (already read) to the dev accuracy of
the last epoch: tokenising, loading the model, training and the evaluations. The runs alternate
ours, transformers, transformers, ours, ... and the medians over ``--repeats`` are compared.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import sys
from pathlib import Path

import torch

from bert_explorer import checkpoint
from bert_explorer.train.device import autocast_dtype, cpu_bf16_is_fast, precision_name
from bert_explorer.train.finetune import FinetuneConfig, label_names_of, read_data, run_finetuning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import machine_state  # noqa: E402  (the load and CPU flags, printed as every bench prints them)


def machine_line() -> str:
    return (f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} "
            f"threads; {machine_state()}")


def ours(cfg: FinetuneConfig) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory() as run_dir:
        t = time.perf_counter()
        result = run_finetuning(cfg, run_dir)
        seconds = time.perf_counter() - t
        # the precision the run chose (auto confirms native bf16 with a short timing, which load can sway)
        precision = json.loads((Path(run_dir) / "status.json").read_text()).get("precision", "?")
        return seconds, result["dev"]["accuracy"], precision


def transformers_loop(cfg: FinetuneConfig, train, dev, label_names) -> tuple[float, float]:
    """The plain loop: pad to max_length, fp32, AdamW, linear warm-up and decay, eval each epoch."""
    import transformers

    t = time.perf_counter()
    base = checkpoint.resolve(cfg.model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(base))
    index = {name: i for i, name in enumerate(label_names)}

    def encode(data):
        enc = tokenizer([ex["text"] for ex in data.examples], padding="max_length", truncation=True,
                        max_length=cfg.max_seq_length, return_tensors="pt")
        labels = torch.tensor([index[str(ex["label"])] for ex in data.examples])
        return torch.utils.data.TensorDataset(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], labels)

    train_set, dev_set = encode(train), encode(dev)
    config = transformers.BertConfig.from_pretrained(str(base), num_labels=len(label_names))
    model = transformers.BertForSequenceClassification(config)  # sdpa attention, transformers' default
    loaded = model.load_state_dict(same_start(cfg, len(label_names)), strict=False)
    missing = [k for k in loaded.missing_keys if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or loaded.unexpected_keys:  # the base checkpoint plus our seeded classifier, every weight
        raise RuntimeError(f"weights did not transfer: missing {missing}, unexpected {loaded.unexpected_keys}")
    g = torch.Generator().manual_seed(cfg.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True, generator=g)
    steps = len(loader) * int(cfg.epochs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_fraction * steps), steps)
    accuracy = 0.0
    for _ in range(int(cfg.epochs)):
        model.train()
        for ids, tt, am, y in loader:
            loss = model(input_ids=ids, token_type_ids=tt, attention_mask=am, labels=y).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        model.eval()
        right = 0
        with torch.no_grad():
            for ids, tt, am, y in torch.utils.data.DataLoader(dev_set, batch_size=64):
                right += int((model(input_ids=ids, token_type_ids=tt, attention_mask=am).logits.argmax(-1) == y).sum())
        accuracy = right / len(dev_set)
    return time.perf_counter() - t, accuracy, "fp32"


def same_start(cfg: FinetuneConfig, num_labels: int) -> dict:
    """The weights our run starts from (the base model and its seeded new classifier)."""
    torch.manual_seed(cfg.seed)  # as train.finetune._train_one does before loading
    loaded = checkpoint.load(cfg.model, "BertForSequenceClassification", num_labels=num_labels)
    return loaded.model.state_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm-mlm-nsp")
    ap.add_argument("--task", default="bbc-topics", help="a built-in single-sentence classification task")
    ap.add_argument("--max-train", type=int, default=400)
    ap.add_argument("--max-dev", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = FinetuneConfig(model=args.model, train=f"builtin:{args.task}", max_train_examples=args.max_train,
                         max_dev_examples=args.max_dev, epochs=args.epochs, batch_size=args.batch, lr=args.lr,
                         max_seq_length=args.max_seq_length, seed=args.seed, device="cpu")
    train, dev = read_data(cfg)
    if train.task.name != "classification":
        raise SystemExit(f"--task {args.task} is a {train.task.name} task; this bench times single-sentence "
                         "classification (bbc-topics, tweets)")
    label_names = label_names_of(train)
    precision = precision_name(autocast_dtype(torch.device("cpu"), cfg.precision))
    import transformers

    print(f"bench/finetune_speed.py  {args.task}: {len(train.examples)} train / {len(dev.examples)} dev examples, "
          f"{args.epochs} epochs, batch {args.batch}, lr {args.lr:g}, max length {args.max_seq_length}, "
          f"from {args.model};  torch {torch.__version__}, transformers {transformers.__version__}")
    print(machine_line() + f"; native bf16: {cpu_bf16_is_fast()}")
    print(f"ours: run_finetuning, precision auto (here: {precision}), batches padded to their own longest;  "
          f"transformers: BertForSequenceClassification, fp32, padded to {args.max_seq_length}")
    seconds = {"ours": [], "transformers": []}
    accuracy = {"ours": [], "transformers": []}
    sides = {"ours": lambda: ours(cfg), "transformers": lambda: transformers_loop(cfg, train, dev, label_names)}
    for r in range(args.repeats):
        for name in (("ours", "transformers") if r % 2 == 0 else ("transformers", "ours")):
            s, acc, precision = sides[name]()
            seconds[name].append(s)
            accuracy[name].append(acc)
            print(f"  repeat {r + 1} {name:>12}: {s:7.1f} s, dev accuracy {acc:.3f}, {precision}", flush=True)
    examples = len(train.examples) * args.epochs
    for name in seconds:
        med = statistics.median(seconds[name])
        print(f"{name:>12}: median {med:7.1f} s  ({examples / med:6.1f} training examples/s incl. evaluation)  "
              f"dev accuracy {statistics.median(accuracy[name]):.3f} (runs: "
              f"{', '.join(f'{a:.3f}' for a in accuracy[name])})")
    print(f"ours / transformers speed: {statistics.median(seconds['transformers']) / statistics.median(seconds['ours']):.2f}x")
    print(f"load average at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
