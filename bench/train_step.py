"""How fast is one pre-training step? Our BertForPreTraining against transformers' on the same config.

    python bench/train_step.py [--size mini] [--batch 32] [--seq 128] [--steps 5] [--warmup 2]
                               [--device cpu|cuda] [--threads N] [--precision both|fp32|bf16] [--compile] [--levers]
                               [--cpu-kernels] [--profile]    (--cpu-kernels --levers: each CPU lever too)

One step = forward + backward + AdamW update with the MLM + NSP loss (paper, Section 3.1); both
models are updated by the project's optimiser (``train.optim.make_optimizer``, fused AdamW). Both
models get the same weights, the same batches and the same labels: the original ids at a random
15% of the positions and -100 elsewhere, plus a random IsNext/NotNext label. Our head runs the
V-way output layer only at the labelled positions; transformers' computes it for every token
(that is how it works, and part of what is measured). The same number of untimed warm-up steps
runs for each model first, and the timed steps alternate A B B A ..., so drift in the machine's
speed (other processes, clocks, heat) falls on both equally.

Precision: ``both`` (the default) times fp32 and then bf16 autocast, each for both models, and
prints the bf16/fp32 ratio, where bf16 is native: on CUDA, or on a CPU with AVX512-BF16/AMX
(``train.device.cpu_bf16_is_fast``, the same check that ``--precision auto`` training uses). A
CPU without them emulates bf16 hundreds of times slower; ``both`` then says so and skips it
(ask ``--precision bf16`` to time it anyway).

Model FLOPs per token (the same for both, the work the loss actually needs):
    6·N + 12·L·H·T  +  6·V·H·p
N = parameters that take part in matrix products for every token (embedding tables excluded),
12·L·H·T = the attention score and weighted-sum products (forward+backward), and 6·V·H·p = the
tied output layer at the fraction p of tokens that carry an MLM label. Achieved TFLOP/s =
tokens/s × that number: work transformers spends on unlabelled positions does not count.

The matmul rate: an n x n matrix product (``--matmul-size``; 2048 on a CPU, 8192 on a GPU, whose
2048² product is too small to fill it) in each timed precision, measured in the same run
(before and after the steps; the median of both is the reference), so that "% of matmul" compares
the step with what this CPU multiplies at that moment. The machine's load average and CPU flags
are printed with it. On a shared machine the load moves both during a run: the fastest step
against the fastest matmul is printed too, the pair least disturbed by other processes.

Ours gets the MLM-labelled positions and whether the batch has padding from the host, as pre-training
gives them (``train/trainer.py``: no host sync in a step); transformers' model finds both on the device.
``--compile`` also times both models under ``torch.compile`` (ours: what the ``--compile``
training setting of pretrain and finetune does), so that the comparison with transformers holds with the same levers (SDPA attention,
fused AdamW, compilation); compile times are printed apart and not counted in the step times. A
model that fails to compile is reported in one line and left out. ``--levers`` also times ours with one lever off at
a time (the explicit attention path, which asking for the attention weights takes, instead of SDPA;
AdamW not fused; the labelled positions and the padding read on the device) and prints what each lever gave, compilation included with ``--compile``. On a GPU the datasheet's dense
bf16 rate is printed beside the measured matmul rate, where the card is one we know.

``--cpu-kernels`` also times ours with ``model.cpu_kernels`` applied ("ours+kernels"), and with the
kernels and the CPU levers that ``train.levers`` measures faster on this CPU ("ours+levers": how
pre-training runs here); "ours" is the reference model as the paper reads. The kernels stay only
while this shows them faster. With ``--levers`` too, each CPU lever is also timed alone on top of the
kernels ("kernels+<lever>"), and what each gave is printed. ``--profile`` profiles both, and times the
step's own matrix products alone, each at its shape (``step_matrix_products``): their share of the step, and
their rate against the reference n² product's (2048² on a CPU), which is the most a step of these shapes can reach.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import statistics
import time

import torch

from bert_explorer.model import IGNORE, PRESETS, BertForPreTraining, cpu_kernels, preset
from bert_explorer.train import heap, levers
from bert_explorer.train.device import cpu_bf16_is_fast
from bert_explorer.train.estimate import model_flops_per_token
from bert_explorer.train.optim import make_optimizer


# Dense (no sparsity) bf16 tensor-core peak from NVIDIA's datasheets, TFLOP/s: SXM parts.
DATASHEET_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}


def datasheet_bf16(name: str) -> float | None:
    for key, value in DATASHEET_BF16_TFLOPS.items():
        if key in name and "PCIe" not in name and "NVL" not in name:
            return value
    return None


def matmul_tflops(dtype: torch.dtype, device, n: int = 2048, repeats: int = 10) -> tuple[float, float]:
    """The median and the best rate of an n x n x n matrix product in ``dtype`` (TFLOP/s)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return 2 * n**3 / statistics.median(times) / 1e12, 2 * n**3 / min(times) / 1e12


def machine_state() -> str:
    """The load average and the CPU's vector flags, as the issue's benches print them."""
    load = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"
    flags = set()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    shown = sorted(f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma"))
    kind = ("AMX (amx_bf16: bf16 tiles)" if "amx_bf16" in flags else "AVX512-BF16, no AMX" if "avx512_bf16" in flags
            else "no native bf16" if flags else "?")
    return f"load average (1, 5, 15 min) {load};  CPU kind: {kind};  CPU flags: {' '.join(shown) or '?'}"


# Where a step's time goes: each operator's own time (torch.profiler's self CPU time), in the groups the
# levers act on. Matched on the operator's name, in this order (the first group that matches).
PROFILE_GROUPS = (
    ("matrix products", ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "scaled_dot_product", "mkldnn",
                         "onednn", "_flash_attention", "addbmm")),
    # the CPU kernels' dropout: its random bits, the mask built in their bits, the product with it (addcmul; an
    # unfused AdamW's per-tensor addcmul_ would count here too, ours is fused)
    ("dropout and masks", ("dropout", "bernoulli", "masked", "where", "random_", "bitwise", "aten::addcmul")),
    ("optimizer", ("adam", "foreach", "lerp", "addcdiv", "addcmul")),
    ("casts and copies", ("_to_copy", "aten::to", "copy_", "clone", "contiguous")),
    ("layer norm", ("layer_norm",)),
    ("GELU", ("gelu",)),
    ("softmax and loss", ("softmax", "cross_entropy", "nll_loss", "log_softmax")),
    ("embeddings and gathers", ("embedding", "index", "gather", "take")),
)


def _self_device_us(e) -> float:
    return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) or 0


def profile_step(step, batches, precision: str, name: str, steps: int = 2, cuda: bool = False) -> None:
    """torch.profiler over ``steps`` steps of ``name``: the share of each group, then the ten heaviest
    operators. On a GPU by the kernels' own time on the device, with the host's time beside it: a
    step whose host time exceeds its device time is launch- or sync-bound, which CUDA graphs and
    fewer host syncs address, not faster kernels."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    wall = time.perf_counter()
    with profile(activities=activities) as prof:
        for batch in batches[:steps]:
            float(step(batch))
    wall = time.perf_counter() - wall
    own = _self_device_us if cuda else (lambda e: e.self_cpu_time_total)
    events = [e for e in prof.key_averages() if own(e) > 0]
    total = sum(own(e) for e in events)
    groups: dict[str, float] = {}
    for e in events:
        key = e.key.lower()
        group = next((g for g, words in PROFILE_GROUPS if any(w in key for w in words)), "other elementwise")
        groups[group] = groups.get(group, 0.0) + own(e)
    what = "self device (GPU) time" if cuda else "self CPU time"
    print(f"[{precision}] where {name}'s step goes (torch.profiler, {what}, {steps} steps):")
    if cuda:
        host = sum(e.self_cpu_time_total for e in prof.key_averages())
        print(f"[{precision}]   a step: {wall / steps * 1e3:.1f} ms wall under the profiler, GPU kernels "
              f"{total / steps / 1e3:.1f} ms, host operators {host / steps / 1e3:.1f} ms"
              f" ({'host-bound' if host > total else 'GPU-bound'})")
    for group, t in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"[{precision}]   {group:<24} {t / total:6.1%}   {t / steps / 1e3:8.1f} ms a step")
    for e in sorted(events, key=lambda e: -own(e))[:10]:
        print(f"[{precision}]     {e.key[:44]:<44} {own(e) / total:6.1%}  x{e.count // steps}")


def step_matrix_products(config, batch: int, seq: int, labelled: float, dtype, device, repeats: int = 7):
    """Seconds a step's own matrix products take alone, each timed in isolation (the median of ``repeats``)
    at its shape and layout, forward and backward: the encoder's linear layers and attention products, the
    MLM head on the labelled positions. Their sum is the floor of a step made of nothing else, and its rate
    against the reference n² product's is the most that a step of these shapes can reach."""
    N, H, I, V = batch * seq, config.hidden_size, config.intermediate_size, config.vocab_size
    M, BA, d = max(1, round(labelled * N)), batch * config.num_heads, config.head_size

    def r(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    def linear(rows, k, n):  # forward x Wᵀ, dX = g W, dW = gᵀ x, as autograd computes them
        x, w, g = r(rows, k), r(n, k), r(rows, n)
        return [(lambda: x @ w.t(), 2 * rows * k * n), (lambda: g @ w, 2 * rows * k * n),
                (lambda: g.t() @ x, 2 * rows * k * n)]

    q, k_, p = r(BA, seq, d), r(BA, seq, d), r(BA, seq, seq)
    attention = [(lambda: torch.bmm(q, k_.transpose(1, 2)), 2 * BA * seq * seq * d),  # scores, dP
                 (lambda: torch.bmm(p, k_), 2 * BA * seq * seq * d),                  # context, dQ
                 (lambda: torch.bmm(p.transpose(1, 2), q), 2 * BA * seq * seq * d)]   # dV, dK
    products = [(f, fl, config.num_layers * 4) for f, fl in linear(N, H, H)]
    products += [(f, fl, config.num_layers) for f, fl in linear(N, H, I) + linear(N, I, H)]
    products += [(f, fl, config.num_layers * n) for (f, fl), n in zip(attention, (2, 2, 2))]
    products += [(f, fl, 1) for f, fl in linear(M, H, H) + linear(M, H, V)]
    seconds = flops = 0.0
    for f, fl, count in products:
        for _ in range(2):
            f()
        times = []
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            f()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        seconds += count * statistics.median(times)
        flops += count * fl
    return seconds, flops


def make_batches(n: int, batch: int, seq: int, vocab: int, mask_prob: float, device, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (batch, seq), generator=g)
        ids[:, 0] = 2  # [CLS]
        tt = torch.zeros(batch, seq, dtype=torch.long)
        tt[:, seq // 2:] = 1
        chosen = torch.rand(batch, seq, generator=g) < mask_prob
        chosen[:, 0] = False
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
        ids = torch.where(chosen, torch.full_like(ids, 4), ids)  # [MASK]
        nsp = torch.randint(0, 2, (batch,), generator=g)
        out.append({**{k: v.to(device) for k, v in {
            "input_ids": ids, "token_type_ids": tt, "attention_mask": torch.ones_like(ids),
            "labels": labels, "next_sentence_label": nsp,
            # found on the host, as pre-training does (train/trainer.py: no host sync in a step)
            "mlm_positions": chosen.flatten().nonzero().squeeze(1)}.items()}, "has_padding": False})
    return out


# What only our model takes: the labelled positions and whether there is padding, known on the host
HOST_ONLY = ("mlm_positions", "has_padding")


def plain(batch: dict) -> dict:
    """The batch as transformers' model (and ours, the way that reads them on the device) takes it."""
    return {k: v for k, v in batch.items() if k not in HOST_ONLY}


def hf_twin(ours: BertForPreTraining):
    """transformers' BertForPreTraining with our config (SDPA attention) and our weights."""
    import transformers

    c = ours.config
    hf_config = transformers.BertConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads, intermediate_size=c.intermediate_size,
        max_position_embeddings=c.max_position_embeddings, type_vocab_size=c.type_vocab_size,
        hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.attention_dropout,
        layer_norm_eps=c.layer_norm_eps, pad_token_id=c.pad_token_id, attn_implementation="sdpa")
    hf = transformers.BertForPreTraining(hf_config)
    head = hf.cls.predictions
    tied = {  # transformers ties these to the parameters named on the right, as we do
        "cls.predictions.decoder.bias": head.decoder.bias.data_ptr() == head.bias.data_ptr(),
        "cls.predictions.decoder.weight": (head.decoder.weight.data_ptr()
                                           == hf.bert.embeddings.word_embeddings.weight.data_ptr()),
    }
    result = hf.load_state_dict(ours.state_dict(), strict=False)
    missing = [k for k in result.missing_keys
               if not k.endswith(("position_ids", "token_type_ids")) and not tied.get(k)]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"weights did not transfer: missing {missing}, unexpected {result.unexpected_keys}")
    return hf, transformers.__version__


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="mini", choices=list(PRESETS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per model")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--mask-prob", type=float, default=0.15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", default="both", choices=["both", "fp32", "bf16"])
    ap.add_argument("--compile", action="store_true", help="also time both models under torch.compile")
    ap.add_argument("--cpu-kernels", action="store_true", help="also time ours with model.cpu_kernels applied (CPU)")
    ap.add_argument("--levers", action="store_true", help="also time ours with one lever off at a time: the explicit "
                                                          "attention path instead of SDPA, AdamW not fused; with "
                                                          "--cpu-kernels, each CPU lever alone on the kernels")
    ap.add_argument("--profile", action="store_true", help="also print where ours's step goes (ours+kernels with "
                                                           "--cpu-kernels): torch.profiler's self time by group")
    ap.add_argument("--matmul-size", type=int, default=None, help="the reference matmul's n (default: 2048 on a "
                                                                   "CPU, 8192 on a GPU)")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is available")
    if args.cpu_kernels and args.device != "cpu":
        raise SystemExit("--cpu-kernels: they apply on the CPU only")
    device = torch.device(args.device)
    torch.manual_seed(args.seed)

    config = preset(args.size)
    ours = BertForPreTraining(config)
    hf, hf_version = hf_twin(ours)
    ours.to(device)
    hf.to(device)

    batches = make_batches(args.warmup + args.steps, args.batch, args.seq, config.vocab_size,
                           args.mask_prob, device, args.seed)
    labelled = sum(int((b["labels"] != IGNORE).sum()) for b in batches) / (len(batches) * args.batch * args.seq)

    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    native_bf16 = device.type == "cuda" or cpu_bf16_is_fast()
    skipped = args.precision == "both" and not native_bf16
    if skipped:
        precisions = ["fp32"]

    f = model_flops_per_token(ours, args.seq, labelled)
    tokens = args.batch * args.seq
    threads = torch.get_num_threads()
    print(f"bench/train_step.py  size={args.size} (L={config.num_layers}, H={config.hidden_size}, "
          f"A={config.num_heads}, FFN={config.intermediate_size}, V={config.vocab_size})  "
          f"batch={args.batch} x seq={args.seq}  steps={args.steps} (+{args.warmup} warm-up each)")
    dev = (torch.cuda.get_device_name(device) if device.type == "cuda"
           else f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), "
                f"{threads} thread{'s' if threads != 1 else ''}")
    print(f"device: {dev};  torch {torch.__version__}, transformers {hf_version} (attn_implementation=sdpa)")
    print(f"model FLOPs/token: 6N = {f['6N'] / 1e6:.1f}M (N = {f['N'] / 1e6:.2f}M non-embedding params) "
          f"+ 12LHT = {f['12LHT'] / 1e6:.1f}M + 6VH·p = {f['6VHp'] / 1e6:.1f}M  "
          f"= {f['total'] / 1e6:.1f} MFLOP/token;  MLM-labelled tokens: {labelled:.1%}")
    if skipped:
        print("bf16: skipped, this CPU's bf16 matrix products are not faster than fp32 (no AVX512-BF16/AMX, or "
              "timed slower), and --precision auto trains in fp32 here")
    print(machine_state())
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    n = args.matmul_size or (8192 if device.type == "cuda" else 2048)
    matmul = {p: [matmul_tflops(dtypes[p], device, n)] for p in precisions}
    ours_rate = {}
    for precision in precisions:
        ours_rate[precision] = time_precision(precision, ours, hf, batches, args, device, f, tokens)
    for p in precisions:
        matmul[p].append(matmul_tflops(dtypes[p], device, n))
        rate = statistics.median(m for m, _ in matmul[p])
        best = max(b for _, b in matmul[p])
        for name, (tps, tps_best) in ours_rate[p].items():
            print(f"[{p}] {name:>13}: median step {tps * f['total'] / 1e12:.3f} TFLOP/s = {tps * f['total'] / 1e12 / rate:5.1%} "
                  f"of the {n}² {p} matmul's median rate {rate:.3f} TFLOP/s (before {matmul[p][0][0]:.3f}, "
                  f"after {matmul[p][1][0]:.3f});  fastest step {tps_best * f['total'] / 1e12:.3f} = "
                  f"{tps_best * f['total'] / 1e12 / best:5.1%} of the fastest matmul, {best:.3f}")
    peak = datasheet_bf16(dev) if device.type == "cuda" else None
    if peak and "bf16" in ours_rate:
        for name, (tps, _) in ours_rate["bf16"].items():
            print(f"[bf16] {name:>13}: {tps * f['total'] / 1e12 / peak:5.1%} of the datasheet's dense bf16 rate "
                  f"{peak:.0f} TFLOP/s")
    if args.profile:  # the floor: the step's own matrix products alone, against the reference n² product
        for p in precisions:
            seconds, flops = step_matrix_products(config, args.batch, args.seq, labelled, dtypes[p], device)
            rate = statistics.median(m for m, _ in matmul[p])
            for name, (tps, _) in ours_rate[p].items():
                if name in ("ours+kernels", "ours+levers") or (name == "ours" and "ours+kernels" not in ours_rate[p]):
                    step = args.batch * args.seq / tps
                    print(f"[{p}] {name:>13}: its matrix products alone take {seconds * 1e3:.1f} ms of its {step * 1e3:.1f} ms "
                          f"step ({seconds / step:.0%}); alone they run {flops / seconds / 1e12:.3f} TFLOP/s = "
                          f"{flops / seconds / 1e12 / rate:.0%} of the {n}² product's median: the most a step of "
                          "these shapes can reach")
    if len(ours_rate) == 2:
        print(f"ours bf16 / ours fp32: {ours_rate['bf16']['ours'][0] / ours_rate['fp32']['ours'][0]:.2f}x")
    print(machine_state())


def time_precision(precision, ours, hf, batches, args, device, f, tokens) -> dict:
    """Time both models (and both compiled, with --compile) under one precision; print them and
    return our tokens/s by variant."""
    def autocast():
        if precision == "bf16":
            return torch.autocast(device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # Same weights -> same loss (dropout off for this check only).
    with torch.no_grad(), autocast():
        ours.eval(), hf.eval()
        l_ours = float(ours(**batches[0]).loss)
        l_hf = float(hf(**plain(batches[0])).loss)
    ours.train(), hf.train()

    runners = {}
    models = [("ours", ours, ours), ("transformers", hf, hf)]
    # The heap's lever is the process's, not a model's (train/heap.py): kept for these models' steps, and glibc's own
    # figures (the heap's free memory given back) before every other model's, as a run without the lever has them.
    kept_heap = set()
    if args.cpu_kernels:  # the same weights, its own optimiser
        fast = cpu_kernels.apply(copy.deepcopy(ours), "cpu")
        models.append(("ours+kernels", fast, fast))
        # as training runs here: the kernels and the levers train/levers.py measures faster on this CPU
        chosen = levers.chosen(ours, "cpu", torch.bfloat16 if precision == "bf16" else None, torch.get_num_threads(),
                               predicted=args.mask_prob)
        print(f"[{precision}] {levers.said(chosen)}")
        fast = cpu_kernels.apply(copy.deepcopy(ours), "cpu", levers.kernel_levers(chosen))
        models.append(("ours+levers", fast, fast))
        if heap.LEVER in chosen:
            kept_heap.add("ours+levers")
        if args.levers:  # each lever alone on top of the kernels
            for lever in levers.candidates(True, precision == "bf16"):
                fast = cpu_kernels.apply(copy.deepcopy(ours), "cpu", levers.kernel_levers((lever,)))
                models.append((f"kernels+{lever}", fast, fast))
                if lever == heap.LEVER:
                    kept_heap.add(f"kernels+{lever}")
            if heap.available():  # the anchor with the heap's lever too: what the same setting gives transformers
                twin = copy.deepcopy(hf)
                models.append(("transformers, heap kept", twin, twin))
                kept_heap.add("transformers, heap kept")
    if args.compile:
        for name, original in (("ours compiled", ours), ("transformers compiled", hf)):
            twin = copy.deepcopy(original)  # its own weights and optimiser, as the others
            models.append((name, twin, torch.compile(twin)))
        if args.levers and device.type == "cuda":  # CUDA graphs: the host launches a step's kernels at once
            twin = copy.deepcopy(ours)
            models.append(("ours compiled+graphs", twin, torch.compile(twin, mode="reduce-overhead")))
    # --levers: ours with one lever off, each on its own copy. Asking for the attention weights is what
    # takes our model's explicit path (matmul, softmax, dropout, matmul) instead of SDPA.
    # Ours reading the labelled positions and the padding from the device ("ours device reads") is how
    # it ran before they came from the host: the sync lever.
    explicit, unfused = set(), set()
    device_reads = {"transformers", "transformers compiled", "transformers, heap kept"}
    if args.levers:
        for name, off in (("ours explicit attn", explicit), ("ours AdamW unfused", unfused),
                          ("ours device reads", device_reads)):
            twin = copy.deepcopy(ours)
            models.append((name, twin, twin))
            off.add(name)
    for name, model, forward in models:
        opt = (torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=False) if name in unfused
               else make_optimizer(model, lr=1e-4, weight_decay=0.01))
        extra = {"output_attentions": True} if name in explicit else {}

        def step(batch, model=forward, opt=opt, extra=extra, reads=name in device_reads):
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = model(**(plain(batch) if reads else batch), **extra).loss
            loss.backward()
            opt.step()
            return loss.detach()

        runners[name] = step

    def timed(name, batch):
        if device.type == "cuda":
            torch.cuda.synchronize()
        if name in kept_heap:  # untimed: the heap as a run's previous step leaves it (the models in turns gave it
            heap.keep()          # back in between, as a run without the lever does), so one step of its own first
            float(runners[name](batch))
        else:
            heap.release()  # (untimed: giving the heap back takes a moment)
        t0 = time.perf_counter()
        loss = runners[name](batch)
        float(loss)  # waits for the step on any device
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    compile_s = {}
    for name in [n for n in runners if "compiled" in n]:
        # the first step compiles (and a second may, for the other MLM count): untimed. CUDA graphs are
        # recorded once for each shape, and the number of MLM-labelled positions is a shape: every batch
        # goes through once untimed, as a long run's steps would meet each count again and again.
        t0 = time.perf_counter()
        try:
            for batch in batches[:len(batches) if name.endswith("graphs") else 2]:
                float(runners[name](batch))
        except Exception as e:  # a compiler failure is a result to report, not the end of the bench
            print(f"[{precision}] {name}: torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                  "left out")
            del runners[name]
            continue
        compile_s[name] = time.perf_counter() - t0
    times = {name: [] for name in runners}
    order = list(runners)
    for i, batch in enumerate(batches):
        for name in (order if i % 2 == 0 else order[::-1]):  # A B, B A, A B, ...
            t = timed(name, batch)
            if i >= args.warmup:
                times[name].append(t)

    print(f"[{precision}] same weights: initial loss ours {l_ours:.4f}, transformers {l_hf:.4f}")
    for name, seconds in compile_s.items():
        first = ("steps (compiling, one graph recorded for each MLM count)" if name.endswith("graphs")
                 else "two steps (compiling)")
        print(f"[{precision}] {name}: torch.compile's first {first} {seconds:.1f} s, not counted below")
    rate = {}
    for name, ts in times.items():
        rate[name] = tokens / statistics.median(ts)  # the median step: robust to a busy moment
        print(f"[{precision}] {name:>13}: {rate[name]:10,.0f} tokens/s   step median {statistics.median(ts) * 1e3:8.1f} ms "
              f"(min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f})   "
              f"{rate[name] * f['total'] / 1e12:.3f} TFLOP/s")
    print(f"[{precision}] ours / transformers: {rate['ours'] / rate['transformers']:.2f}x"
          + (f";  ours compiled / transformers compiled: {rate['ours compiled'] / rate['transformers compiled']:.2f}x"
             if "ours compiled" in rate and "transformers compiled" in rate else "")
          + (f";  compiling gave ours {rate['ours compiled'] / rate['ours']:.2f}x" if "ours compiled" in rate else "")
          + (f", transformers {rate['transformers compiled'] / rate['transformers']:.2f}x" if "transformers compiled" in rate else "")
          + (f";  the CPU kernels gave ours {rate['ours+kernels'] / rate['ours']:.2f}x" if "ours+kernels" in rate else "")
          + (f", with the levers chosen here {rate['ours+levers'] / rate['ours']:.2f}x" if "ours+levers" in rate else ""))
    if "ours+levers" in rate:  # the goal's ratio; and against the anchor given the heap's lever too, where timed
        print(f"[{precision}] ours+levers / transformers: {rate['ours+levers'] / rate['transformers']:.2f}x"
              + (f";  / transformers with the heap kept: {rate['ours+levers'] / rate['transformers, heap kept']:.2f}x"
                 if "transformers, heap kept" in rate else ""))
    if args.levers and "ours+kernels" in rate:  # what each CPU lever gave over the kernels alone
        print(f"[{precision}] CPU levers over the kernels alone: " + ", ".join(
            f"{name[len('kernels+'):]} {rate[name] / rate['ours+kernels']:.2f}x" for name in rate
            if name.startswith("kernels+")) + f";  those chosen here {rate['ours+levers'] / rate['ours+kernels']:.2f}x")
    if args.levers:  # what each lever gave: ours with it on, against ours with it off
        print(f"[{precision}] levers: SDPA gave ours {rate['ours'] / rate['ours explicit attn']:.2f}x over the explicit "
              f"attention path, fused AdamW {rate['ours'] / rate['ours AdamW unfused']:.2f}x over the unfused one"
              + (f", torch.compile {rate['ours compiled'] / rate['ours']:.2f}x over eager" if "ours compiled" in rate
                 else "")
              + (f", CUDA graphs {rate['ours compiled+graphs'] / rate['ours compiled']:.2f}x over compiled alone"
                 if "ours compiled+graphs" in rate and "ours compiled" in rate else "")
              + f", positions and padding from the host {rate['ours'] / rate['ours device reads']:.2f}x over reading "
                "them on the device")
    if args.profile:
        targets = [t for t in ("ours+kernels", "ours+levers") if t in runners] or ["ours"]
        if device.type == "cuda":  # what runs there, and the twin it is compared with
            targets = [t for t in ("ours", "ours compiled", "transformers compiled") if t in runners]
        for target in targets:
            heap.keep() if target in kept_heap else heap.release()
            profile_step(runners[target], batches, precision, target, cuda=device.type == "cuda")
    heap.release()
    return {k: (v, tokens / min(times[k])) for k, v in rate.items()}


if __name__ == "__main__":
    main()
