"""Pre-training: masked LM + next-sentence prediction (Devlin et al. 2019, Section 3.1, A.2).

``_pretrain`` reads top to bottom: build the data (``pretraining_data.py``), build the model
(``_new_model``), the trainer that updates it, restored on a resume (``_trainer``), then train
(``trainer.Trainer.train``: the step on one page) with the :class:`Pretraining` job, which says
what a step reads and what is due after it (a log line, an evaluation, a time-lapse frame, a
checkpoint), and the end (``Pretraining.finish``). One *step* is one optimiser update over
``batch_size × grad_accum × world_size`` sequences. Everything that decides which data a step
sees (document order, masks) is a pure function of the seed and the step number, and the
random state that dropout uses is saved with each checkpoint, so a resumed run continues the
loss curve exactly where it stopped (``resume.py``: from which checkpoint, with which settings).
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from .. import checkpoint, full_disk
from ..data.corpora import user_text_digest
from ..data.pretraining import collate, on_plateau, plateau_sentence, unigram_entropy
from ..model import IGNORE, BertConfig, BertForPreTraining, preset
from ..tokenizer import WordPieceTokenizer
from . import levers
from .device import Device, check_ranks_in_sync, pick_device, threads_text
from .optim import linear_warmup_decay, load_optimizer_state, make_optimizer
from .engine import marks_failure, time_left
from .pretrain_config import PretrainConfig, check_new_run, positions_fit, predicted_fraction, warmup_steps_of
from .pretraining_data import (PretrainingData, check_corpora, check_documents, cloze_sentences,
                               corpus_words, held_out_plan, learns_its_words_from_an_upload,
                               learnt_vocab_size, pretraining_data)
from .report import MemoryReporter, Reporter
from .resume import (WORLD_SIZE_KEY, ResumePoint, check_resume, data_changed, resume_point, saved_settings,
                     set_lr_to_schedule, text_changed, world_size_refusal)
from .estimate import checkpoints_of, model_flops_per_token, pretrain_estimate, sequences_of
from .memory import check_batch_fits
from .speed import OtherWork
from .trainer import Due, Trainer
from ..runs.lock import writes_run
from ..runs.run import Run
from ..runs.signals import StoppedBySignal, said, stopping_on_signals, what_to_do
from .timelapse_frames import FILE as FRAMES_FILE, SENTENCES, FrameRecorder, dumps as dumps_frames, frame_steps

KEEP_STATES = 2  # checkpoints that keep their training state (optimiser, schedule, RNG), the newest


def _warm_start(cfg: PretrainConfig, run: Reporter, dev: Device) -> BertForPreTraining:
    """Continue pre-training from ``cfg.init``: its encoder weights exactly, its vocabulary,
    and fresh heads for whatever it lacks (an encoder-only checkpoint has no MLM or NSP head)."""
    loaded = checkpoint.load(cfg.init, "BertForPreTraining")
    model = loaded.model
    causal = cfg.objective_type.left_to_right
    if model.config.causal != causal and dev.is_main:
        # A bidirectional encoder made left-to-right no longer sees the right-hand context its
        # layers were trained to use (early steps mostly re-learn a left-to-right reading); the
        # other way round, the layers see for the first time what lies to their right.
        run.log(f"warm start of a {'left-to-right' if causal else 'bidirectional'} model from a "
                f"{'left-to-right' if model.config.causal else 'bidirectional'} checkpoint: the attention mask "
                "changes, so the first steps re-learn how to read")
    model.config.causal = causal
    if dev.is_main:
        where = f" ({loaded.path})" if str(loaded.path) != str(cfg.init) else ""  # (a path was said twice)
        run.log(f"warm start from {cfg.init}{where}: {loaded.report.summary()}")
    if dev.device.type == "mps" and cfg.precision in ("bf16", "fp16") and dev.is_main:
        run.log(f"precision {cfg.precision} asked for, but MPS trains in fp32")
    return model


def evaluate(model, instances, cfg: PretrainConfig, tok: WordPieceTokenizer, dev: Device,
             on_batch=None) -> dict:
    """Held-out MLM accuracy and perplexity (exp of the mean cross-entropy over predicted
    tokens) and NSP accuracy, over the first ``cfg.eval_batches`` batches. Masks of held-out
    instances are fixed, so numbers compare. ``on_batch(sequences_done, sequences)`` is called
    after each batch (a background measurement reports its progress with it). The model is left
    in the mode it came in (training goes on with dropout; a probe after it needs none)."""
    was_training = model.training
    model.eval()
    correct = total = nsp_correct = nsp_total = 0
    ce_sum = 0.0
    bs = cfg.batch_size
    end = min(len(instances), cfg.eval_batches * bs)
    with torch.no_grad(), dev.autocast():
        for start in range(0, end, bs):
            batch = collate(instances[start:start + bs], tok.pad_id, cfg.objective_type)
            batch = {k: v.to(dev.device) for k, v in batch.items()}
            out = model(**batch)
            labels = batch["labels"][batch["labels"] != -100]
            logits = out.masked_logits.float()
            ce_sum += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(-1) == labels).sum().item()
            total += labels.numel()
            if "next_sentence_label" in batch:
                nsp_label = batch["next_sentence_label"]
                labelled = nsp_label != IGNORE  # MLM-only sequences carry no NSP label
                nsp_correct += (out.nsp_logits.argmax(-1) == nsp_label)[labelled].sum().item()
                nsp_total += labelled.sum().item()
            if on_batch is not None:
                on_batch(min(start + bs, end), end)
    model.train(was_training)
    result = {"mlm_accuracy": correct / max(total, 1), "mlm_perplexity": math.exp(ce_sum / max(total, 1)),
              "eval_tokens": total}
    if nsp_total:
        result["nsp_accuracy"], result["eval_pairs"] = nsp_correct / nsp_total, nsp_total
    return result


def _save(run: Reporter, model, tok, step: int, optimizer, scheduler, scaler, cfg: PretrainConfig,
          metrics: dict | None = None, tokens_seen: int | None = None,
          frames: FrameRecorder | None = None, world_size: int = 1) -> Path | None:
    def write_state(d: Path):
        # Through a Python file: on a full disk torch's own writer says only "unexpected pos";
        # this way the OSError(ENOSPC) travels with it (full_disk.is_disk_full reads either).
        with open(d / "training_state.pt", "wb") as f:
            torch.save({
                "step": step, "tokens_seen": tokens_seen,
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict(), "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            }, f)

    if run.path is None:  # in memory: the caller keeps the model
        return None
    # the processes that trained it beside its settings: where each step reads depends on their number
    extra = {"training_args.json": _json({**cfg.to_dict(), WORLD_SIZE_KEY: world_size})}
    if metrics:
        extra["eval_metrics.json"] = _json(metrics)
    if frames is not None and frames.doc is not None:  # the model folder carries its own time-lapse
        extra[FRAMES_FILE] = dumps_frames(frames.doc)
    with full_disk.saving(run.path, f"save the checkpoint of step {step}", lambda: _after_a_full_disk(run),
                          checkpoint_bytes(model)):
        path = checkpoint.save(model, tok, run.path / "checkpoints" / f"step-{step}", extra, write_state)
    # The newest two checkpoints keep the (large) optimiser state, so a lost or damaged newest state
    # costs one save interval, never the run (resume_point); older ones stay loadable models.
    for older in run.resumable_checkpoints()[:-KEEP_STATES]:
        (older / "training_state.pt").unlink(missing_ok=True)
    return path


def _after_a_full_disk(run: Run) -> str:
    """What a full disk leaves a run with, and how to go on once there is room."""
    resume = f"`bert-explorer pretrain --output {run.path} --resume` (or Resume on the Pre-train page)"
    last = run.latest_checkpoint()
    if last is None:
        return f"no checkpoint has been saved yet, so {resume} starts it again from step 0 once space is freed"
    return f"the last good checkpoint is {last}, and {resume} continues from it once space is freed"


def _json(d: dict) -> str:
    return json.dumps(d, indent=2, default=str) + "\n"


@writes_run("run_dir", "bert-explorer pretrain")
def run_pretraining(cfg: PretrainConfig, run_dir: str | Path, resume: bool = False,
                    progress: bool = True, on_step=None) -> dict:
    """Pre-train into ``run_dir``; ``on_step(step, losses)`` is called after every update.

    With ``resume`` the run goes on from its newest checkpoint with the settings that checkpoint
    was trained with: ``cfg`` may differ from them only where :func:`check_resume` allows (cadence
    of logs, evaluations and checkpoints, device, precision, and max_steps with a re-planned
    schedule); any other difference is refused (ResumeRefused) before anything is written."""
    run = Run(run_dir)
    if not resume and run.checkpoints():  # checked before anything is written
        raise ValueError(f"{run.path} already holds checkpoints; pass --resume to continue it or choose a new --output")
    point, notes = ResumePoint(None, 0, [], []), []
    if resume:
        point = resume_point(run.path)
        saved, step = saved_settings(run.path, point)
        cfg, notes = check_resume(run.path, saved, cfg, step)
        if step >= cfg.max_steps and run.status().get("state") == "finished":  # as a finished fine-tuning is
            raise ValueError(f"{run.path} is a finished pre-training run at step {step:,} of {cfg.max_steps:,}: there is "
                             f"nothing left to train; raise its steps (--max-steps) to train it further")
        if refusal := text_changed(run.path, cfg):
            raise ValueError(refusal)
    latest = point.checkpoint
    check_start(cfg, latest)
    dev = pick_device(cfg.device, cfg.precision)
    if latest is not None and (why := world_size_refusal(run.path, latest, dev.world_size)):
        raise ValueError(why)
    if dev.is_main:
        run.create(cfg.to_dict(), "pretrain")
    # Ctrl-C and SIGTERM stop the run at its next step, with a checkpoint, or at once before its first (runs/signals.py)
    # from the moment its status names this process (one while the corpus was hashed left it "crashed")
    with stopping_on_signals(run, main=dev.is_main):
        if dev.is_main:
            if not resume and (digest := user_text_digest(cfg.corpus)):
                run.write_status(corpus_sha256=digest)
            for gone in run.clear_leftovers():
                run.log(f"removed {gone.relative_to(run.path)}, left by a write that was cut off")
            for note in notes:
                run.log(f"resuming with {note}")
            if point.said():
                for ckpt in point.skipped:
                    run.set_aside(ckpt)
                run.log(point.said())
            if resume and (moved := run.set_aside_metrics_after(step)):
                run.log(f"moved {moved} line(s) of metrics.jsonl logged after step {step} (the steps trained "
                        f"again) to set_aside/metrics-after-step-{step}.jsonl")
        with marks_failure(run) if dev.is_main else nullcontext(), \
                full_disk.saving(run.path, "go on writing the run", lambda: _after_a_full_disk(run)):
            # a crash leaves "failed", not "running"; a full disk anywhere (metrics, log) is one sentence
            result = _pretrain(cfg, run, dev, latest, progress, on_step)[0]
    if run.signalled is not None:
        # saved: the process ends as the signal asked, saying how the run goes on (a signal during the final
        # evaluation or save found nothing left to stop: the run finished, and whatever ran it stops too)
        sentence = (f"{said(run.signalled)} at step {result['step']:,} of {cfg.max_steps:,}; {what_to_do(run)}"
                    if result["state"] == "stopped" else
                    f"{said(run.signalled)} after its last step: the run finished, its model saved")
        if dev.is_main:
            run.log(sentence)
        raise StoppedBySignal(run.signalled, sentence)
    return result


@dataclass
class Pretrained:
    """What an in-memory pre-training gives: the model, its vocabulary, and how the run ended
    (``{"step", "state", **the last held-out evaluation}``)."""

    model: BertForPreTraining
    tokenizer: WordPieceTokenizer
    result: dict


def pretrain(cfg: PretrainConfig, reporter: Reporter | None = None, progress: bool = False,
             on_step=None) -> Pretrained:
    """Pre-train in memory, with no run folder: nothing is read or written on disk but the corpus
    (no checkpoint, vocabulary file or time-lapse), for a notebook or a test. The log, metric lines
    and status go to ``reporter`` (a fresh :class:`MemoryReporter` by default), which may also ask
    for a stop. The same settings and seed train the same model as :func:`run_pretraining`."""
    if cfg.timelapse_frames:
        raise ValueError("the time-lapse is written into a run folder: use run_pretraining, or timelapse_frames=0")
    dev = pick_device(cfg.device, cfg.precision)
    if dev.distributed:
        raise ValueError("in-memory pre-training runs in one process; under torchrun use run_pretraining")
    check_fits(cfg)
    result, model, tok = _pretrain(cfg, reporter or MemoryReporter(), dev, None, progress, on_step)
    return Pretrained(model, tok, result)


def estimate(cfg: PretrainConfig, root: Path, threads: int | None = None, words: tuple[int, int] | None = None,
             vocab_size: int | None = None) -> dict:
    """How long a run of ``cfg`` will take here (``train.estimate.pretrain_estimate``), said before it starts
    (``bert-explorer pretrain``, the Pre-train page), with the run's own counts: the words of its corpus to
    tokenise and of its held-out documents to evaluate, its evaluations (and time-lapse frames, each one too),
    checkpoints, objective and precision; ``held_out_evaluations`` counts the evaluations alone (0 where the run
    holds out too little to evaluate, ``held_out_reason`` saying why). ``threads``: what it trains with
    (default: a background run's).
    ``words``: :func:`corpus_words`, where counted already (an upload not stored yet); ``vocab_size``: the
    vocabulary the run will have where it learns fewer pieces than asked (a small upload)."""
    words, held_words = words if words is not None else corpus_words(cfg)
    held_out, why = held_out_plan(cfg, held_words)
    est = pretrain_estimate(cfg.init or cfg.size, cfg.max_steps, cfg.batch_size * cfg.grad_accum, cfg.max_seq_length,
                            vocab_size or learnt_vocab_size(cfg) or cfg.vocab_size, root,
                            evaluations=held_out + cfg.timelapse_frames,
                            held_out_sequences=sequences_of(held_words, cfg.max_seq_length),
                            eval_batches=cfg.eval_batches, corpus=cfg.corpus, corpus_words=words,
                            checkpoints=checkpoints_of(cfg.max_steps, cfg.save_every),
                            predicted_fraction=predicted_fraction(cfg), precision=cfg.precision, threads=threads)
    return {**est, "held_out_evaluations": held_out, "held_out_reason": why}


def check_start(cfg: PretrainConfig, latest: Path | None = None) -> None:
    """What refuses a run's start, checked before its folder is made, so that a refused start leaves
    nothing: a corpus that is not there, a warm start's model that is not, positions that do not fit,
    and a batch the memory free cannot hold; a new run's settings past any recipe."""
    if latest is None:
        check_new_run(cfg)
    check_corpora(cfg)
    check_documents(cfg)
    check_fits(cfg, latest)


def _model_config(cfg: PretrainConfig, latest: Path | None) -> tuple[BertConfig | None, str]:
    """The config of the model the run trains, and how to name it: its newest checkpoint's, else its warm
    start's (None while that is a Hub model not downloaded: the run downloads it), else its size preset's."""
    if latest is not None:
        return checkpoint.inspect(latest), f"the model in {latest}"
    if cfg.init:
        return checkpoint.config_of(cfg.init), f"the model {cfg.init}"
    return preset(cfg.size, vocab_size=cfg.vocab_size), f"size {cfg.size}"


def check_fits(cfg: PretrainConfig, latest: Path | None = None) -> None:
    """The model against the settings, before the data is read or anything allocated (the Pre-train page's
    check, whose uploaded corpus is checked apart): its learned positions against max_seq_length (a size
    preset's are checked with the settings themselves), and the batch against the memory where it trains
    (``memory.check_batch_fits``; a learnt vocabulary counted at the size asked, a small corpus learns fewer)."""
    config, named = _model_config(cfg, latest)
    if config is None:
        return
    if latest is not None or cfg.init:
        positions_fit(cfg.max_seq_length, config.max_position_embeddings, named)
    check_batch_fits(config, cfg.batch_size, cfg.max_seq_length, cfg.precision, cfg.device, named,
                     predicted=predicted_fraction(cfg))


def _check_room(run: Reporter, model, cfg: PretrainConfig, step: int) -> None:
    """Before training: is there room for the next checkpoint? Measured on the newest checkpoint that
    holds a training state (weights, vocabulary and Adam's moments as written), else counted from the
    model; a quarter more is asked for, since a file system's blocks and metadata take more than the
    bytes. A disk too full is one sentence now, not after the steps before that save are trained."""
    if run.path is None:  # in memory: nothing is saved
        return
    newest = run.latest_checkpoint()
    if newest is not None:
        size = sum(f.stat().st_size for f in newest.rglob("*") if f.is_file())
        basis = f"the {full_disk.size_text(size)} of {newest.name}"
    else:
        size = checkpoint_bytes(model)
        basis = f"{full_disk.size_text(size)} of weights and optimiser state"
    needed = size * 1.25
    free = full_disk.free_bytes(run.path)
    if free < needed:
        at = min(cfg.max_steps, (step // cfg.save_every + 1) * cfg.save_every)
        raise full_disk.DiskFull(full_disk.sentence(
            run.path, f"save the checkpoint of step {at}", lambda: _after_a_full_disk(run), needed,
            basis=f"{basis} and a quarter more"))


def checkpoint_bytes(model) -> int:
    """What a checkpoint of ``model`` writes: its weights in float32 and Adam's two moments of each
    trained weight (the training state)."""
    return sum(p.numel() * 4 * (3 if p.requires_grad else 1) for p in model.parameters())


def _new_model(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, tok) -> BertForPreTraining:
    torch.manual_seed(cfg.seed)
    if latest:  # a resumed run needs only its own checkpoint (weights loaded below), not init's
        model = BertForPreTraining(BertConfig.load(latest))
    elif cfg.init:
        model = _warm_start(cfg, run, dev)
    else:
        model = BertForPreTraining(preset(cfg.size, vocab_size=tok.vocab_size, causal=cfg.objective_type.left_to_right))
    levers.apply(model.to(dev.device), dev.device, dev.dtype, run.log if dev.is_main else lambda _: None,
                 run if dev.is_main else None, resumed=latest is not None,  # (one line in the log, not one a rank)
                 predicted=predicted_fraction(cfg))
    if cfg.freeze_word_embeddings:
        # One matrix reads words in and (tied) writes them out: freezing it keeps both fixed,
        # so the optimiser never sees it and a checkpoint can ship without it.
        model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    return model


def _trainer(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, model) -> tuple[Trainer, int | None]:
    """The trainer (optimiser, schedule, loss scaler, the device's autocast) and the tokens seen so
    far; on a resume, the weights and all of those as the checkpoint left them, random states
    included; DDP around the model on several devices."""
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    t = Trainer(model, optimizer, linear_warmup_decay(optimizer, warmup_steps_of(cfg), cfg.max_steps),
                dev.grad_scaler(), dev.autocast, cfg.clip_grad_norm, distributed=dev.distributed,
                synchronize=torch.cuda.synchronize if dev.device.type == "cuda" else lambda: None)
    tokens_seen = 0
    if latest:
        model.load_state_dict(checkpoint.load(latest, "BertForPreTraining").model.state_dict())
        state = torch.load(latest / "training_state.pt", map_location="cpu", weights_only=True)
        load_optimizer_state(optimizer, state["optimizer"])
        t.scheduler.load_state_dict(state["scheduler"])
        if state["scaler"] or not t.scaler.is_enabled():  # a run saved in fp32/bf16 and resumed in fp16 starts a scaler
            t.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        t.step = state["step"]
        set_lr_to_schedule(optimizer, t.scheduler, t.step, run if dev.is_main else None)
        tokens_seen = state.get("tokens_seen")  # None: a checkpoint of an earlier version, which did not count
    if dev.distributed:
        t.forward = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.device.index] if dev.device.type == "cuda" else None,
            # Without NSP the pooler and NSP head get no gradient; DDP must be told.
            find_unused_parameters=not cfg.objective_type.trains_pooler)
    if cfg.compile:  # the step runs the compiled module; checkpoints save the plain one (t.model)
        t.forward = torch.compile(t.forward)
    model.train()
    return t, tokens_seen


def _announce(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, data: PretrainingData,
              t: Trainer, began: float) -> None:
    # (started: when this part began to read its data, as the estimate counts the loading in: "took" is then
    # comparable with the time said before the run; ready: its data read and model built, the loading an
    # estimate measures; threads: the CPU threads whose speed its steps measure)
    run.write_status(state="running", pid=os.getpid(), step=t.step, max_steps=cfg.max_steps,
                     device=dev.name, precision=dev.precision, world_size=dev.world_size,
                     ddp_backend=dev.backend, started=began, ready=time.time(), threads=torch.get_num_threads(),
                     parameters=sum(p.numel() for p in t.model.parameters()),
                     train_sequences=len(data.train), held_out_sequences=len(data.held))
    run.log(f"{'resuming at' if latest else 'starting'} step {t.step}: {len(data.train)} training sequences, "
            f"{len(data.held)} held out, {dev.name} x{dev.world_size}, precision {dev.precision} "
            f"(asked: {cfg.precision}), {threads_text()}")


def host_batch(data: PretrainingData, cfg: PretrainConfig, first: int) -> dict:
    """The ``cfg.batch_size`` sequences from the sampler's number ``first`` on, built on the host (CPU
    tensors): with dynamic masking, masks drawn from a generator seeded by where the batch starts; and
    the labelled positions and whether the batch is padded, found here where the batch was made: read on
    a GPU, either would make the host wait for it (trainer.py: no host sync in a step)."""
    items = [data.train[data.sampler(first + j)] for j in range(cfg.batch_size)]
    rng = random.Random(f"{cfg.seed}-{first}")  # the masks of these sequences, this time
    batch = collate(items, data.tok.pad_id, cfg.objective_type, data.masker.drawing(rng) if cfg.dynamic_masking else None)
    batch["mlm_positions"] = (batch["labels"] != IGNORE).flatten().nonzero().squeeze(1)
    batch["has_padding"] = not bool(batch["attention_mask"].all())
    return batch


class Pretraining:
    """The job of pre-training (``trainer.Job``): which sequences a step reads and their masks, the
    objective's loss, and the log lines, held-out evaluations, time-lapse frames and checkpoints at
    their steps; then the run's end (:meth:`finish`)."""

    def __init__(self, cfg: PretrainConfig, run: Reporter, dev: Device, data: PretrainingData, t: Trainer,
                 tokens_seen: int | None, latest: Path | None, progress: bool, on_step):
        self.cfg, self.reporter, self.dev, self.data, self.t = cfg, run, dev, data, t
        self.objective, self.on_step = cfg.objective_type, on_step
        self.tokens_seen, self.tokens_since, self.last_log, self.last_eval = tokens_seen, 0, time.time(), None
        self.slots_since = 0  # the sequences' max_seq_length slots since the last log, filled or not
        self.last_train_mlm_loss = None  # (beside the held-out loss: a model that learnt its text by heart)
        self.other_work = OtherWork() if dev.device.type == "cpu" else None  # (its speed is read by later estimates)
        self.part_start = (t.step, time.time())  # this process's first step and its time: the rate of the ETA
        self.flops_per_token = model_flops_per_token(t.model, cfg.max_seq_length,  # (its MFU: an LTR model
                                                     predicted_fraction(cfg))["total"]  # predicts every token)
        self.items: list[dict[str, int]] = []  # what each micro-batch of the step's losses average over
        self.frames, self.to_record = self._frame_recorder(latest)
        self.bar = tqdm(total=cfg.max_steps, initial=t.step, unit="step", dynamic_ncols=True) \
            if progress and dev.is_main else None

    def _frame_recorder(self, latest: Path | None):
        """The time-lapse's recorder and the steps it records at (none asked: None and no step)."""
        cfg, run, dev, t = self.cfg, self.reporter, self.dev, self.t
        if not (cfg.timelapse_frames and dev.is_main):
            return None, set()
        # (a vocabulary learnt on an upload reads the news sentences as characters: its own text instead)
        own = cloze_sentences(self.data.held_docs, len(SENTENCES)) if learns_its_words_from_an_upload(cfg) else []
        frames = FrameRecorder(run.path / FRAMES_FILE, self.data.tok, cfg.timelapse_sentences or own or SENTENCES,
                               cfg.timelapse_heads, source={"run": run.path.name, "device": dev.name,
                                                            "precision": dev.precision, "world_size": dev.world_size,
                                                            "config": cfg.to_dict()},
                               keep_until=t.step if latest else None)
        if t.step == 0:  # the random initialisation, before any update
            frames.record(t.model, 0, 0, 0, self._measure() if self.data.held else None)
        return frames, {s for s in frame_steps(cfg.timelapse_frames, cfg.max_steps) if s > t.step}

    def stop_requested(self, step: int) -> bool:
        stopped = self.dev.is_main and self.reporter.stop_requested()  # (a STOP file, or Ctrl-C / SIGTERM)
        if self.dev.distributed:  # every rank must agree to stop at the same step
            flag = torch.tensor([stopped], dtype=torch.int, device=self.dev.device)
            dist.broadcast(flag, 0)
            stopped = bool(flag.item())
        return stopped

    def batches(self, step: int) -> list[dict]:
        """The ``grad_accum`` micro-batches of ``step`` (what each one's losses average over: :meth:`shares`)."""
        self.items = []
        return [self._batch(step, micro) for micro in range(self.cfg.grad_accum)]

    def shares(self, batches: list[dict]) -> list[dict[str, float]]:
        """Each micro-batch's share of the step's masked-LM loss (its masked tokens over the step's) and of its
        NSP loss (its labelled sequences over the step's): the step's loss is then one big batch's, as in the
        original code, whose loss averages over every target of the batch. The counts are the host's, made with
        the micro-batches by :meth:`batches` (on a GPU, counting them from ``batches`` would wait for it).
        (Across several GPUs each rank's gradient still counts alike.)"""
        totals = {name: sum(items[name] for items in self.items) for name in ("mlm_loss", "nsp_loss")}
        return [{name: items[name] / totals[name] if totals[name] else 0.0 for name in totals
                 if name in self.objective.losses} for items in self.items]

    def _batch(self, step: int, micro: int) -> dict:
        """Micro-batch ``micro`` of ``step`` (:func:`host_batch`), counted and moved to the device."""
        cfg, dev = self.cfg, self.dev
        first = ((step * cfg.grad_accum + micro) * dev.world_size + dev.rank) * cfg.batch_size
        batch = host_batch(self.data, cfg, first)
        nsp = batch.get("next_sentence_label")
        self.items.append({"mlm_loss": len(batch["mlm_positions"]),
                           "nsp_loss": 0 if nsp is None else int((nsp != IGNORE).sum())})
        n_tokens = int(batch["attention_mask"].sum()) * dev.world_size  # about: ranks' batches differ a little
        batch = {k: v.to(dev.device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
        self.tokens_since += n_tokens
        self.slots_since += len(batch["input_ids"]) * cfg.max_seq_length * dev.world_size
        self.tokens_seen = None if self.tokens_seen is None else self.tokens_seen + n_tokens
        return batch

    def loss(self, forward, batch: dict):
        """The objective's loss (the heads compute it from the labels ``collate`` added), and its parts."""
        out = forward(**batch)
        return out.loss, {k: getattr(out, k) for k in self.objective.losses if getattr(out, k) is not None}

    def due(self, step: int) -> Due:
        cfg, main, end = self.cfg, self.dev.is_main, step == self.cfg.max_steps
        return Due(log=main and (step % cfg.log_every == 0 or end),
                   evaluate=main and bool(self.data.held) and (step % cfg.eval_every == 0 or end or step in self.to_record),
                   frame=step in self.to_record,
                   save=main and step % cfg.save_every == 0 and step < cfg.max_steps)

    def log(self, step: int, losses: dict, grad_norm: float, seconds: float, lr: float) -> None:
        """A metrics line; tokens/s counts only the time spent in steps (not evaluating or saving)."""
        cfg, dev, run = self.cfg, self.dev, self.reporter
        tps = self.tokens_since / max(seconds, 1e-9)
        peak = dev.peak_flops()
        last = {"step": step, "split": "train", **{k: round(v, 5) for k, v in losses.items() if v},
                "lr": lr, "grad_norm": round(grad_norm, 4),
                "tokens_per_s": round(tps, 1), "time": time.time(),
                # how full its sequences are (estimate.measured_throughput reads a speed on the same corpus with it)
                **({"fill": round(self.tokens_since / self.slots_since, 3)} if self.slots_since else {}),
                **({"other_cores": o} if self.other_work and (o := self.other_work.sample()) is not None else {})}
        if peak:
            last["mfu"] = round(tps * self.flops_per_token / (peak * dev.world_size), 4)
        run.log_metrics(last)
        run.write_status(step=step, last=last, eta_s=round(time_left(self.part_start[1], step - self.part_start[0],
                                                                       cfg.max_steps - step)))
        self.tokens_since, self.slots_since, self.last_log = 0, 0, time.time()
        self.last_train_mlm_loss = losses.get("mlm_loss", self.last_train_mlm_loss)

    def _measure(self) -> dict:
        return evaluate(self.t.model, self.data.held, self.cfg, self.data.tok, self.dev)

    def evaluate(self, step: int) -> tuple[dict, bool]:
        ev = self.last_eval = {"step": step, "split": "eval", **self._measure(), "time": time.time()}
        self.reporter.log_metrics(ev)
        self.reporter.write_status(eval=ev)
        self.reporter.log(f"step {step}: " + ", ".join(f"{k}={v:.4g}" for k, v in ev.items()
                                                        if k not in ("step", "split", "time")))
        return ev, False

    def frame(self, step: int, measured: dict | None) -> None:
        self.frames.record(self.t.model, step, self._sequences_seen(step), self.tokens_seen, measured)

    def save(self, step: int, measured: dict | None = None, final: dict | None = None) -> None:
        t = self.t
        _save(self.reporter, t.model, self.data.tok, step, t.optimizer, t.scheduler, t.scaler, self.cfg, final,
              self.tokens_seen, self.frames if final is not None else None, self.dev.world_size)

    def after(self, step: int, losses) -> None:
        if self.bar:
            self.bar.update(1)
            if losses.read:  # a logged step's: reading them at every step would wait for the GPU
                self.bar.set_postfix(loss=f"{losses['loss']:.3f}")
        if self.on_step is not None:
            self.on_step(step, losses)

    def finish(self, state: str) -> dict:
        """The run's last evaluation (the latest, where it measured these weights), frame and checkpoint,
        and its final status."""
        run, step, final = self.reporter, self.t.step, {}
        if self.last_eval is not None and self.last_eval["step"] == step:  # the weights it measured: no second pass
            final = {k: v for k, v in self.last_eval.items() if k not in ("step", "split", "time")}
        elif self.data.held and getattr(run, "signalled", None) is not None:
            # Ctrl-C or SIGTERM: the checkpoint first and at once (a container's stop gives seconds, a person
            # waits); the held-out figures of these weights are the resumed run's next evaluation
            run.log(f"no held-out evaluation at step {step}: the run was signalled, so it saves at once")
        elif self.data.held:  # a stop between evaluations (or before the first): measured now, and drawn in the curve too
            final = self._measure()
            run.log_metrics({"step": step, "split": "eval", **final, "time": time.time()})
        if final.get("mlm_perplexity"):  # did it learn more than word counts?
            entropy = unigram_entropy((x.original_ids() for x in self.data.train), self.data.tok.special_ids())
            loss = math.log(final["mlm_perplexity"])
            trained = self.last_train_mlm_loss
            final = {**final, "unigram_entropy": round(entropy, 4), "plateau": on_plateau(loss, entropy),
                     **({"train_mlm_loss": round(trained, 4)} if trained is not None else {})}
            if final["plateau"]:
                run.log(f"warning: this model {plateau_sentence(loss, entropy, trained)}")
        if self.frames is not None and step not in self.frames.steps:  # a stop before the end: its last moment too
            self.frame(step, final)
        self.save(step, final=final)
        run.clear_stop()
        run.write_status(state=state, step=step, eval_final=final, finished=time.time())
        run.log(f"{state} at step {step}")
        return final

    def _sequences_seen(self, step: int) -> int:
        return step * self.cfg.batch_size * self.cfg.grad_accum * self.dev.world_size


def _pretrain(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, progress: bool,
              on_step) -> tuple[dict, BertForPreTraining, WordPieceTokenizer]:
    """Build the data, build the model and its trainer (restored on a resume), train, finish."""
    began = time.time()
    data = pretraining_data(cfg, run, dev, latest)
    if latest is not None and (changed := data_changed(run, data)):
        raise ValueError(changed)
    t, tokens_seen = _trainer(cfg, run, dev, latest, _new_model(cfg, run, dev, latest, data.tok))
    _check_room(run, t.model, cfg, t.step)
    if dev.is_main:
        _announce(cfg, run, dev, latest, data, t, began)
    job = Pretraining(cfg, run, dev, data, t, tokens_seen, latest, progress, on_step)
    state = "stopped" if t.train(job, cfg.max_steps) else "finished"
    if job.bar:
        job.bar.close()
    if dev.distributed:
        check_ranks_in_sync(run, dev, t.model)
    final = job.finish(state) if dev.is_main else {}
    if dev.distributed:
        dist.barrier()
    return {"step": t.step, "state": state, **final}, t.model, data.tok
