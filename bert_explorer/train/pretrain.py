"""Pre-training: masked LM + next-sentence prediction (Devlin et al. 2019, Section 3.1, A.2).

``_pretrain`` reads top to bottom: build the data (``_pretraining_data``), build the model
(``_new_model``), restore it on a resume (``_trainer``), then the loop, one update
(``_train_step``) and whatever is due at that step (a log line, an evaluation, a time-lapse frame,
a checkpoint), and the end (``_finish``). One *step* is one optimiser update over
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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open
from tqdm import tqdm

from .. import checkpoint, full_disk
from ..data.corpora import load_corpus, split_documents, tiny_corpus
from ..data.pretraining import Masker, MaskingConfig, collate, create_instances, mlm_only_instances
from ..model import IGNORE, PRESETS, BertConfig, BertForPreTraining, cpu_kernels, preset
from ..tokenizer import WordPieceTokenizer
from .device import PRECISIONS, Device, pick_device, precision_from, threads_text
from .optim import apply_update, linear_warmup_decay, load_optimizer_state, make_optimizer
from ..setting import setting
from .configs import settings_of
from .engine import marks_failure
from .loop import train_loop
from .report import MemoryReporter, Reporter
from .estimate import model_flops_per_token
from ..runs.lock import writes_run
from ..runs.run import Run
from .timelapse_frames import FILE as FRAMES_FILE, SENTENCES, FrameRecorder, dumps as dumps_frames, frame_steps

OBJECTIVES = ("mlm+nsp", "mlm", "ltr")
KEEP_STATES = 2  # checkpoints that keep their training state (optimiser, schedule, RNG), the newest


@dataclass
class PretrainConfig:
    corpus: str = setting("bbc", "The text to pre-train on: a built-in corpus (bbc, sotu, vital, wiki, lee, tiny), "
                                 "a text file, or several joined by + such as bbc+wiki.")
    max_docs: int | None = setting(None, "Use only the first N documents of the corpus, for quick experiments.")
    held_out_fraction: float = setting(0.05, "The fraction of documents kept out of training to measure held-out "
                                             "MLM and NSP accuracy.")
    eval_corpora: str | None = setting(None, "Evaluate only on the held-out documents of these parts of the corpus, "
                                             "e.g. bbc+sotu.")
    mlm_only_corpus: str | None = setting(None, "More text trained with the masked-LM objective only, never in NSP "
                                                "pairs nor held out (e.g. wordnet).")
    init: str | None = setting(None, "Warm start: begin from this checkpoint's weights and vocabulary instead of "
                                     "random weights.")
    freeze_word_embeddings: bool = setting(False, "Keep the word embeddings (tied to the MLM decoder) fixed while "
                                                  "the rest of the model trains; needs init.")
    size: str = setting("mini", "The model's size preset: tiny, mini, small, medium, L4-H256, base and so on "
                                "(ignored with init, which keeps the checkpoint's size).")
    objective: str = setting("mlm+nsp", "What the model learns: mlm+nsp (BERT), mlm (the paper's No NSP) or ltr "
                                        "(a left-to-right language model, no NSP).")
    vocab: str = setting("train", "The WordPiece vocabulary: train learns one on the corpus, or name a model or a "
                                  "folder with a vocab.txt to reuse its vocabulary.")
    vocab_size: int = setting(8000, "How many WordPiece tokens a vocabulary learnt on the corpus holds.")
    lowercase: bool = setting(True, "Lowercase the text before tokenising it (an uncased model).")
    max_seq_length: int = setting(128, "The length in tokens of each training sequence (the paper uses 128 for its "
                                       "first 90% of steps).")
    short_seq_prob: float = setting(0.1, "The probability that a sequence is made shorter than max-seq-length, so "
                                         "the model also sees short inputs.")
    masking: MaskingConfig = setting(help="How the masked-LM targets are chosen (Section 3.1; Table 8 varies the "
                                          "ratios): its settings are given and saved beside the others.",
                                     factory=MaskingConfig)
    dynamic_masking: bool = setting(True, "Choose new masks every time a sequence is seen; without it the masks "
                                          "are fixed, dupe-factor copies of each sequence made once.")
    dupe_factor: int = setting(1, "With static masks, how many differently masked copies of each sequence are "
                                  "made.")
    batch_size: int = setting(32, "Sequences per batch on each device; one step reads batch-size x grad-accum x "
                                  "devices sequences.")
    grad_accum: int = setting(1, "Add up the gradients of this many batches before each optimiser step, for a "
                                 "larger batch than fits in memory.")
    lr: float = setting(1e-4, "The peak learning rate of Adam (reached after the warm-up, then decayed linearly).")
    weight_decay: float = setting(0.01, "Adam's decoupled weight decay (0.01 in the paper).")
    warmup_steps: int | None = setting(None, "Steps of linear learning-rate warm-up; by default 10% of max-steps "
                                             "(the paper: 10,000 of 1,000,000).")
    max_steps: int = setting(1000, "How many optimiser steps to train.")
    clip_grad_norm: float = setting(1.0, "Scale the gradients down when their norm exceeds this value.")
    log_every: int = setting(10, "Log the training loss and speed every this many steps.")
    eval_every: int = setting(200, "Measure held-out MLM and NSP accuracy every this many steps.")
    save_every: int = setting(500, "Save a checkpoint every this many steps (the run resumes from the newest).")
    eval_batches: int = setting(50, "How many batches of held-out sequences each evaluation reads.")
    seed: int = setting(0, "The random seed of the data split, the masks, the batches and the initial weights.")
    device: str = setting("auto", "Where to train: cpu, cuda, cuda:N, or auto (a GPU if there is one).")
    precision: str = setting("auto", "The arithmetic of training: fp32, bf16, fp16, or auto (bf16 where the device "
                                     "is fast at it).")
    compile: bool = setting(False, "torch.compile the model for training (the first steps compile it: worth it on a GPU for "
                                  "long runs; the saved model is the plain one).")
    timelapse_frames: int = setting(0, "Record this many time-lapse frames of the model's predictions and "
                                       "attention (step 0, the end and log-spaced steps between).")
    timelapse_sentences: list[str] | None = setting(None, "The sentences of the time-lapse, with [MASK] where a "
                                                          "word is hidden; by default a shipped set.")
    timelapse_heads: list[list[int]] | None = setting(None, "The [layer, head] pairs (0-based) whose attention the "
                                                            "time-lapse records; by default all of up to 16, else "
                                                            "one a layer.")

    def __post_init__(self):
        self._check_sizes()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {self.objective!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.init and self.vocab not in ("train", self.init):
            raise ValueError("a warm start keeps its checkpoint's vocabulary: leave vocab out when init is given")
        if self.freeze_word_embeddings and not self.init:
            raise ValueError("freeze_word_embeddings needs init: frozen random word vectors would never learn")
        if self.timelapse_frames < 0:
            raise ValueError(f"timelapse_frames must be 0 (none) or more, not {self.timelapse_frames}")
        if self.timelapse_sentences is not None and not all(str(t).strip() for t in self.timelapse_sentences):
            raise ValueError("timelapse_sentences must be a list of non-empty sentences (write [MASK] where a word "
                             "is hidden)")
        if self.precision == "fp16" and self.device == "cpu":
            raise ValueError("fp16 training needs a CUDA GPU; on the CPU use bf16 or fp32")
        if self.eval_corpora:
            parts = self.corpus.split("+")
            unknown = [c for c in self.eval_corpora.split("+") if c not in parts]
            if unknown:
                raise ValueError(f"eval_corpora names {', '.join(unknown)}, which the corpus {self.corpus!r} "
                                 "does not include")

    def _check_sizes(self) -> None:
        """Every number within what training can use, said in one sentence before anything runs
        (a hand-edited training_args.json or --config file included)."""
        for name, low in _AT_LEAST.items():
            v = getattr(self, name)
            if v is None and name in _MAY_BE_NONE:
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or (name in _WHOLE and v != int(v)) \
                    or not v >= low:
                kind = "a whole number" if name in _WHOLE else "a number"
                raise ValueError(f"{name} must be {kind} of at least {low:g}, not {v!r}")
            if name in _WHOLE:
                setattr(self, name, int(v))
        for name in ("held_out_fraction", "short_seq_prob"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 1:
                raise ValueError(f"{name} must be a fraction from 0 up to (not including) 1, not {v!r}")
        for name in ("corpus", "eval_corpora", "mlm_only_corpus"):
            parts = getattr(self, name)
            if parts is not None and (not isinstance(parts, str) or not all(p.strip() for p in parts.split("+"))):
                raise ValueError(f"{name} {parts!r} names no corpus (or an empty part between two +): give a built-in "
                                 "corpus such as bbc, a text file, or several joined by +")
        if self.size not in PRESETS and not self.init:
            raise ValueError(f"unknown size {self.size!r}; choose one of {', '.join(PRESETS)}")
        if not self.init:
            positions_fit(self.max_seq_length, PRESETS[self.size].max_position_embeddings, f"size {self.size}")

    @classmethod
    def from_dict(cls, d: dict, strict: bool = True) -> "PretrainConfig":
        """Settings from a flat dict (a run's training_args.json, a --config file, a recipe: the masking
        settings beside the others), or with a nested ``masking`` dict; ``strict=False`` for a run
        written earlier (unknown keys warned about)."""
        d = dict(d)
        nested = d.pop("masking", None)
        if isinstance(nested, MaskingConfig):
            nested = asdict(nested)
        flat = {k: d.pop(k) for k in MASKING_SETTINGS if k in d}
        masking = MaskingConfig(**{**settings_of(MaskingConfig, nested or {}, strict), **flat})
        return cls(**settings_of(cls, d, strict), masking=masking, precision=precision_from(d))

    def to_dict(self) -> dict:
        """The settings as one flat dict, the form runs have always saved (training_args.json) and
        --config files use: ``from_dict(cfg.to_dict()) == cfg``."""
        out = {}
        for name, value in asdict(self).items():
            out.update(value if name == "masking" else {name: value})
        return out

    def updated(self, **settings) -> "PretrainConfig":
        """This config with some settings given anew, by their flat names (``mask_ratio=0.6``)."""
        return PretrainConfig.from_dict({**self.to_dict(), **settings})


MASKING_SETTINGS = tuple(f.name for f in fields(MaskingConfig))


# The settings that count something, and the least each may be (None: "not set", where allowed; max_steps 0
# saves the model as it starts, before any update).
_AT_LEAST = {"batch_size": 1, "grad_accum": 1, "max_steps": 0, "log_every": 1, "eval_every": 1, "save_every": 1,
             "eval_batches": 1, "dupe_factor": 1, "vocab_size": 16,
             "max_seq_length": 8, "warmup_steps": 0, "max_docs": 1, "lr": 1e-12,
             "weight_decay": 0, "clip_grad_norm": 1e-12}
_WHOLE = {"batch_size", "grad_accum", "max_steps", "log_every", "eval_every", "save_every", "eval_batches",
          "dupe_factor", "vocab_size", "max_seq_length",
          "warmup_steps", "max_docs"}
_MAY_BE_NONE = {"warmup_steps", "max_docs"}


def positions_fit(max_seq_length: int, positions: int, model: str) -> None:
    """A sequence longer than the model's learned positions cannot be read at all (Section 3: position
    embeddings are learned, up to 512 in the paper): refused in one sentence."""
    if max_seq_length > positions:
        raise ValueError(f"max_seq_length {max_seq_length} is longer than the {positions} positions that {model} has "
                         f"learned; choose {positions} or less")


# ----- resuming: what may change ---------------------------------------------------------------
# A resumed run is the same run. Everything that decides its data (corpus, split, vocabulary,
# sequences, masks, batches), its model or its optimisation stays as the run was started; only
# these may be given anew, because they decide when it logs, evaluates and saves, and where the
# arithmetic runs, not what it learns from.
FREE_ON_RESUME = ("log_every", "eval_every", "save_every", "device", "precision", "compile")
# max_steps may change as well: the learning-rate schedule is then re-planned from the resumed
# step (see check_resume), and the log says so.


class ResumeRefused(ValueError):
    """A resume asked to change settings that decide the run's data or schedule. ``changed``
    maps each such setting to (asked, the run's own)."""

    def __init__(self, run_dir, changed: dict[str, tuple]):
        self.run_dir, self.changed = Path(run_dir), changed
        super().__init__(self.sentence())

    def sentence(self, spell=lambda name: name) -> str:
        """The refusal in one sentence; ``spell`` writes a setting's name (the CLI: as its --flag)."""
        def show(v):
            return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
        what = ", ".join(f"{spell(k)} {show(a)} (the run's: {show(s)})" for k, (a, s) in self.changed.items())
        return (f"{self.run_dir} resumes with the settings it was started with, and {what} would change the data or "
                f"the schedule it has already trained on; leave {'them' if len(self.changed) > 1 else 'it'} out to "
                "resume, or start a new run in another folder")


@dataclass
class ResumePoint:
    """Where a resumed run goes on from: ``checkpoint`` (None before the first one, at step 0), and the
    newer checkpoints that cannot be resumed from (``skipped``: their folders, with ``why``), which a
    resume moves to ``set_aside/`` rather than train over them."""
    checkpoint: Path | None
    step: int
    skipped: list[Path]
    why: list[str]

    def said(self) -> str | None:
        """The log's sentence on what a resume from an older checkpoint costs, or None."""
        if not self.skipped:
            return None
        newest = int(self.skipped[-1].name[5:])
        return (f"{'; '.join(self.why)}: {'they are' if len(self.skipped) > 1 else 'it is'} moved to set_aside/ "
                f"and the run resumes from step {self.step}, so steps {self.step + 1}-{newest} are trained again")


# What a training state holds (``_save``): a file without these keys is not one.
STATE_KEYS = ("step", "optimizer", "scheduler", "scaler", "torch_rng")


def _why_not_resumable(ckpt: Path, step: int) -> str | None:
    """Why the checkpoint of ``step`` cannot be resumed from, or None. Cheap: the state is mapped, not
    read (a file cut short has no zip directory at its end), and the weights' header is checked
    against the file's length."""
    state_file = ckpt / "training_state.pt"
    if not state_file.is_file():
        return f"{ckpt.name} keeps no training_state.pt"
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # a file cut short, or not a torch file at all: any of several errors
        return f"{ckpt.name}'s training_state.pt cannot be read ({str(e).splitlines()[0][:80]})"
    if not isinstance(state, dict) or not all(k in state for k in STATE_KEYS) or state["step"] != step:
        return f"{ckpt.name}'s training_state.pt is not the training state of step {step}"
    try:
        with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
            f.keys()
    except Exception as e:
        return f"{ckpt.name}'s model.safetensors cannot be read ({str(e).splitlines()[0][:80]})"
    return None


def resume_point(run_dir) -> ResumePoint:
    """The newest checkpoint of a run that can be resumed from (its training state and weights read
    whole), with the newer ones that cannot. Two checkpoints keep their training state (``_save``), so
    losing the newest state costs one save interval. A run whose checkpoints none can resume from is
    refused (ValueError): training again from step 0 would write over them."""
    run = Run(run_dir)
    found = run.checkpoints()
    if not found:
        return ResumePoint(None, 0, [], [])
    why = []
    for step, ckpt in reversed(found):
        problem = _why_not_resumable(ckpt, step)
        if problem is None:
            newer = sorted((p for p in (run.path / "checkpoints").glob("step-*")
                            if p.name[5:].isdigit() and int(p.name[5:]) > step), key=lambda p: int(p.name[5:]))
            return ResumePoint(ckpt, step, newer, why)
        why.append(problem)
    raise ValueError(f"{run.path} cannot resume: none of its checkpoints keeps a readable training state "
                     f"({'; '.join(why)}), and training again from step 0 would write over them; start a new run that "
                     f"warm-starts from its last weights (init {found[-1][1]}), or delete this one")


def saved_settings(run_dir, point: ResumePoint | None = None) -> tuple[PretrainConfig, int]:
    """(the settings a run's training so far used, the step it resumes from). They are read from
    the checkpoint it resumes from (``training_args.json``, written with the weights; see
    :func:`resume_point`), else, when it stopped before its first checkpoint, from its ``config.json``.
    A file that is not valid JSON, or holds a setting training cannot use, is named in one sentence."""
    run = Run(run_dir)
    point = point or resume_point(run.path)
    args_file = point.checkpoint / "training_args.json" if point.checkpoint else run.path / "config.json"
    if not args_file.is_file():
        raise ValueError(f"{run.path} holds no pre-training run to resume; leave out --resume to start one there")
    try:
        saved = json.loads(args_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{args_file} is not valid JSON ({e}); mend it (or put back the file the run wrote) to "
                         "resume") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{args_file} must hold a JSON object of settings; mend it to resume")
    if saved.get("kind", "pretrain") != "pretrain":
        raise ValueError(f"{run.path} is a {saved['kind']} run, not a pre-training run")
    try:
        return PretrainConfig.from_dict(saved, strict=False), point.step
    except (ValueError, TypeError) as e:
        raise ValueError(f"{args_file} holds settings that training cannot use: {e}; mend the file to resume") from None


def check_resume(run_dir, saved: PretrainConfig, asked: PretrainConfig, step: int) -> tuple[PretrainConfig, list[str]]:
    """The settings a run resumed at ``step`` trains with: ``saved`` (its own), with the settings of
    ``asked`` that may change (FREE_ON_RESUME, max_steps), and a sentence for the log on each change.
    Raises ResumeRefused naming every other setting that differs, and ValueError when max_steps
    does not lie beyond ``step``.

    A new ``max_steps`` re-plans the learning-rate schedule from ``step``: the warm-up keeps its
    length and the linear decay now reaches zero at the new last step, as if the run had been
    planned that long from the start (the rate at ``step`` is that plan's, which the log gives)."""
    # by the settings' flat names, the masking ones included (a changed mask_ratio is named as such)
    mine, theirs = saved.to_dict(), asked.to_dict()
    fixed = [k for k in mine if k not in FREE_ON_RESUME + ("max_steps",)]
    changed = {k: (theirs[k], mine[k]) for k in fixed if theirs[k] != mine[k]}
    # No warm-up given means the run's own; a re-planned run states it as a number (10% of its first plan).
    if "warmup_steps" in changed and asked.warmup_steps in (None, warmup_steps_of(saved)):
        del changed["warmup_steps"]
    if changed:
        raise ResumeRefused(run_dir, changed)
    cfg, notes = saved, []
    for k in FREE_ON_RESUME:
        if getattr(asked, k) != getattr(saved, k):
            notes.append(f"{k} {getattr(saved, k)} -> {getattr(asked, k)} (it changes neither the data nor the schedule)")
            cfg = replace(cfg, **{k: getattr(asked, k)})
    if asked.max_steps != saved.max_steps:
        if asked.max_steps <= step:
            raise ValueError(f"{Path(run_dir)} is already at step {step}, so max_steps {asked.max_steps} leaves "
                             f"nothing to train; ask for more than {step} steps")
        cfg = replace(cfg, max_steps=asked.max_steps)
        if step:  # steps have run: keep their warm-up, whatever the new length would make of "10%"
            warmup = warmup_steps_of(saved)
            cfg = replace(cfg, warmup_steps=warmup)
            notes.append(f"max_steps {saved.max_steps} -> {asked.max_steps}: the learning-rate schedule is re-planned "
                         f"from step {step}: the warm-up stays {warmup} step{'s' if warmup != 1 else ''} and the rate "
                         f"now falls linearly to 0 at step {asked.max_steps} instead of {saved.max_steps}")
    return cfg, notes


def resume_settings(run_dir, changes: dict | None = None) -> tuple[PretrainConfig, list[str]]:
    """What ``bert-explorer pretrain --output RUN --resume`` and the Pre-train page's Resume train
    with: the run's own settings, with ``changes`` (the settings the user gave) applied where a
    resume allows them (:func:`check_resume`)."""
    saved, step = saved_settings(run_dir)
    asked = PretrainConfig.from_dict({**saved.to_dict(), **(changes or {})}, strict=False)
    return check_resume(run_dir, saved, asked, step)


def warmup_steps_of(cfg: PretrainConfig) -> int:
    """The warm-up length: as set, else 10% of max_steps (the paper: 10k of 1M steps)."""
    return cfg.warmup_steps if cfg.warmup_steps is not None else max(1, cfg.max_steps // 10)


def _warm_start(cfg: PretrainConfig, run: Reporter, dev: Device) -> BertForPreTraining:
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
            batch = collate(instances[start:start + bs], tok.pad_id, cfg.objective)
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
        result["nsp_accuracy"] = nsp_correct / nsp_total
    return result


def _save(run: Reporter, model, tok, step: int, optimizer, scheduler, scaler, cfg: PretrainConfig,
          metrics: dict | None = None, tokens_seen: int | None = None,
          frames: FrameRecorder | None = None) -> Path | None:
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
    extra = {"training_args.json": _json(cfg.to_dict())}
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


def _set_lr_to_schedule(optimizer, scheduler, step: int, run: Reporter | None) -> None:
    """Set the learning rate of the next update to the schedule's value at ``step``. The
    optimiser's saved state holds the rate of the plan it was saved under; when max_steps was
    changed on resume (check_resume), the schedule is re-planned and the two differ: the log
    says by how much."""
    planned = [base * factor(step) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    before = [g["lr"] for g in optimizer.param_groups]
    if all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15) for a, b in zip(before, planned)):
        return
    for group, lr in zip(optimizer.param_groups, planned):
        group["lr"] = lr
    scheduler._last_lr = planned  # what get_last_lr() reports until the next step
    if run is not None:
        run.log(f"learning rate at step {step}: {before[0]:.3g} under the old plan, {planned[0]:.3g} under the new one")


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


def held_out_instances(cfg: PretrainConfig, held_docs, tok: WordPieceTokenizer) -> list:
    # Masks fixed by the seed, so every evaluation of every checkpoint sees the same positions.
    held = create_instances(held_docs, tok, cfg.max_seq_length, cfg.short_seq_prob, cfg.objective,
                            cfg.masking, seed=cfg.seed + 1, mask=True)
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


def _documents_by_part(corpus: str) -> list[tuple[str, list]]:
    """A corpus name, a path, or several joined with '+' (e.g. "bbc+wiki+lee"), part by part."""
    return [(part, tiny_corpus() if part == "tiny" else load_corpus(part)) for part in corpus.split("+")]


def _run_tokenizer(cfg, run: Reporter, train_docs, dev: Device, latest: Path | None) -> WordPieceTokenizer:
    """The run's vocabulary, fixed once in run_dir/tokenizer. Learning it is deterministic
    (``wordpiece_vocab``), but a resumed run and every DDP rank read the saved one all the same: it is
    the vocabulary the run's checkpoints were trained with, whatever version of the learner is here.
    Without a folder (in memory, one process) it is learnt and kept in memory."""
    if latest:
        return WordPieceTokenizer.from_dir(latest)
    if run.path is None:
        return build_tokenizer(cfg, train_docs)
    tok_dir = run.path / "tokenizer"
    if dev.is_main and not (tok_dir / "vocab.txt").exists():
        build_tokenizer(cfg, train_docs).save(tok_dir)
    if dev.distributed:
        dist.barrier()  # the other ranks wait for rank 0's vocabulary
    return WordPieceTokenizer.from_dir(tok_dir)


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
    latest = point.checkpoint
    _check_positions(cfg, latest)
    dev = pick_device(cfg.device, cfg.precision)
    if dev.is_main:
        run.create(cfg.to_dict(), "pretrain")
        for gone in run.clear_leftovers():
            run.log(f"removed {gone.relative_to(run.path)}, left by a write that was cut off")
        for note in notes:
            run.log(f"resuming with {note}")
        if point.said():
            for ckpt in point.skipped:
                run.set_aside(ckpt)
            run.log(point.said())
        if resume and (moved := run.set_aside_metrics_after(step)):
            run.log(f"moved {moved} line(s) of metrics.jsonl logged after step {step} (the steps trained again) "
                    f"to set_aside/metrics-after-step-{step}.jsonl")
    # SIGTERM (the Runs page's hard stop, a scheduler) ends the run cleanly at the next step;
    # the process's own handler is put back afterwards.
    stop_signal = {"set": False}
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop_signal.update(set=True)) if in_main_thread else None
    try:
        with marks_failure(run) if dev.is_main else nullcontext(), \
                full_disk.saving(run.path, "go on writing the run", lambda: _after_a_full_disk(run)):
            # a crash leaves "failed", not "running"; a full disk anywhere (metrics, log) is one sentence
            return _pretrain(cfg, run, dev, latest, progress, on_step, stop_signal)[0]
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


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
    _check_positions(cfg, None)
    result, model, tok = _pretrain(cfg, reporter or MemoryReporter(), dev, None, progress, on_step, {"set": False})
    return Pretrained(model, tok, result)


def _check_positions(cfg: PretrainConfig, latest: Path | None) -> None:
    """max_seq_length against the positions of the model the run trains: its checkpoint's, init's, or
    its size preset's (checked with the settings themselves)."""
    if latest or cfg.init:
        source = latest or checkpoint.resolve(cfg.init)
        positions_fit(cfg.max_seq_length, BertConfig.load(source).max_position_embeddings,
                      f"the model in {source}")


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


@dataclass
class _Data:
    """What a run trains and is measured on, built once: the tokenizer, the training and held-out
    sequences, which sequence each sample is, and the masker of dynamic masking."""

    tok: WordPieceTokenizer
    train: list
    held: list
    sampler: _Sampler
    masker: Masker


@dataclass
class _Trainer:
    """The model and what updates it, restored from the run's checkpoint on a resume."""

    model: BertForPreTraining
    ddp_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    scaler: object
    step: int = 0
    tokens_seen: int | None = 0  # None: a checkpoint of an earlier version, which did not count


@dataclass
class _Pace:
    """The counters of the loop between two log lines: tokens/s counts only time spent in training
    steps (not evaluation or checkpoint writing)."""

    train_time: float = 0.0
    tokens_since: int = 0
    last_log: float = field(default_factory=time.time)
    last_eval: dict | None = None


def _pretraining_data(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None) -> _Data:
    train_docs, held_docs = split_corpus(cfg)
    tok = _run_tokenizer(cfg, run, train_docs, dev, latest)
    masking = cfg.masking
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
        held = held_out_instances(cfg, held_docs, tok)
    elif dev.is_main:
        run.log(f"only {len(held_docs)} held-out document: too few for NSP pairs, so no held-out evaluation; "
                "raise held_out_fraction or add documents")
    if not train:
        raise ValueError(f"corpus {cfg.corpus!r} gave no training sequences; it needs more text")
    return _Data(tok, train, held, _Sampler(len(train), cfg.seed), Masker.of(tok, masking))


def _new_model(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, tok) -> BertForPreTraining:
    torch.manual_seed(cfg.seed)
    if latest:  # a resumed run needs only its own checkpoint (weights loaded below), not init's
        model = BertForPreTraining(BertConfig.load(latest))
    elif cfg.init:
        model = _warm_start(cfg, run, dev)
    else:
        model = BertForPreTraining(preset(cfg.size, vocab_size=tok.vocab_size, causal=cfg.objective == "ltr"))
    cpu_kernels.apply(model.to(dev.device), dev.device)
    if cfg.freeze_word_embeddings:
        # One matrix reads words in and (tied) writes them out: freezing it keeps both fixed,
        # so the optimiser never sees it and a checkpoint can ship without it.
        model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    return model


def _trainer(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, model) -> _Trainer:
    """The optimiser, schedule and loss scaler; on a resume, the weights and all of those as the
    checkpoint left them, random states included; DDP around the model on several devices."""
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    t = _Trainer(model, model, optimizer, linear_warmup_decay(optimizer, warmup_steps_of(cfg), cfg.max_steps),
                 dev.grad_scaler())
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
        _set_lr_to_schedule(optimizer, t.scheduler, t.step, run if dev.is_main else None)
        t.tokens_seen = state.get("tokens_seen")
    if dev.distributed:
        t.ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.device.index] if dev.device.type == "cuda" else None,
            # Without NSP the pooler and NSP head get no gradient; DDP must be told.
            find_unused_parameters=cfg.objective != "mlm+nsp")
    if cfg.compile:  # the step runs the compiled module; checkpoints save the plain one (t.model)
        t.ddp_model = torch.compile(t.ddp_model)
    model.train()
    return t


def _announce(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, data: _Data, t: _Trainer) -> None:
    run.write_status(state="running", pid=os.getpid(), step=t.step, max_steps=cfg.max_steps,
                     device=dev.name, precision=dev.precision, world_size=dev.world_size,
                     ddp_backend=dev.backend, started=time.time(),
                     parameters=sum(p.numel() for p in t.model.parameters()),
                     train_sequences=len(data.train), held_out_sequences=len(data.held))
    run.log(f"{'resuming at' if latest else 'starting'} step {t.step}: {len(data.train)} training sequences, "
            f"{len(data.held)} held out, {dev.name} x{dev.world_size}, precision {dev.precision} "
            f"(asked: {cfg.precision}), {threads_text()}")


def _frame_recorder(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, data: _Data, t: _Trainer):
    """The time-lapse's recorder and the steps it records at (none asked: None and no step)."""
    if not (cfg.timelapse_frames and dev.is_main):
        return None, set()
    frames = FrameRecorder(run.path / FRAMES_FILE, data.tok, cfg.timelapse_sentences or SENTENCES, cfg.timelapse_heads,
                           source={"run": run.path.name, "device": dev.name, "precision": dev.precision,
                                   "world_size": dev.world_size, "config": cfg.to_dict()},
                           keep_until=t.step if latest else None)
    if t.step == 0:  # the random initialisation, before any update
        frames.record(t.model, 0, 0, 0, evaluate(t.model, data.held, cfg, data.tok, dev) if data.held else None)
    return frames, {s for s in frame_steps(cfg.timelapse_frames, cfg.max_steps) if s > t.step}


def _stop_agreed(run: Reporter, dev: Device, stop_signal: dict) -> bool:
    stopped = dev.is_main and (run.stop_requested() or stop_signal["set"])
    if dev.distributed:  # every rank must agree to stop at the same step
        flag = torch.tensor([stopped], dtype=torch.int, device=dev.device)
        dist.broadcast(flag, 0)
        stopped = bool(flag.item())
    return stopped


def _train_step(cfg: PretrainConfig, dev: Device, data: _Data, t: _Trainer, pace: _Pace) -> tuple[dict, float]:
    """One optimiser update over grad_accum micro-batches: (the losses, averaged; the gradient norm)."""
    losses = {"loss": 0.0, "mlm_loss": 0.0, "nsp_loss": 0.0}
    for micro in range(cfg.grad_accum):
        first = ((t.step * cfg.grad_accum + micro) * dev.world_size + dev.rank) * cfg.batch_size
        items = [data.train[data.sampler(first + j)] for j in range(cfg.batch_size)]
        rng = random.Random(f"{cfg.seed}-{first}")  # the masks of these sequences, this time
        batch = collate(items, data.tok.pad_id, cfg.objective,
                        data.masker.drawing(rng) if cfg.dynamic_masking else None)
        batch = {k: v.to(dev.device, non_blocking=True) for k, v in batch.items()}
        n_tokens = int(batch["attention_mask"].sum()) * dev.world_size  # about: ranks' batches differ a little
        pace.tokens_since += n_tokens
        t.tokens_seen = None if t.tokens_seen is None else t.tokens_seen + n_tokens
        # Under DDP, gradients are averaged across GPUs only on the last micro-batch.
        last_micro = micro == cfg.grad_accum - 1
        with t.ddp_model.no_sync() if dev.distributed and not last_micro else nullcontext():
            with dev.autocast():
                out = t.ddp_model(**batch)
            t.scaler.scale(out.loss / cfg.grad_accum).backward()
        for k in losses:
            v = getattr(out, k)
            if v is not None:
                losses[k] += v.item() / cfg.grad_accum
    return losses, apply_update(t.model, t.optimizer, t.scheduler, t.scaler, cfg.clip_grad_norm)


def _log_step(cfg: PretrainConfig, run: Reporter, dev: Device, t: _Trainer, pace: _Pace, losses: dict, grad_norm: float,
              flops_tok: float) -> None:
    tps = pace.tokens_since / max(pace.train_time, 1e-9)
    peak = dev.peak_flops()
    last = {"step": t.step, "split": "train", **{k: round(v, 5) for k, v in losses.items() if v},
            "lr": t.scheduler.get_last_lr()[0], "grad_norm": round(grad_norm, 4),
            "tokens_per_s": round(tps, 1), "time": time.time()}
    if peak:
        last["mfu"] = round(tps * flops_tok / (peak * dev.world_size), 4)
    run.log_metrics(last)
    remaining = (cfg.max_steps - t.step) * (time.time() - pace.last_log) / max(1, cfg.log_every)
    run.write_status(step=t.step, last=last, eta_s=round(remaining))
    pace.train_time, pace.tokens_since, pace.last_log = 0.0, 0, time.time()


def _evaluate_step(cfg: PretrainConfig, run: Reporter, dev: Device, data: _Data, t: _Trainer, pace: _Pace) -> dict:
    ev = pace.last_eval = {"step": t.step, "split": "eval", **evaluate(t.model, data.held, cfg, data.tok, dev),
                           "time": time.time()}
    run.log_metrics(ev)
    run.write_status(eval=ev)
    run.log(f"step {t.step}: " + ", ".join(f"{k}={v:.4g}" for k, v in ev.items() if k not in ("step", "split", "time")))
    return ev


def _check_ranks_in_sync(run: Reporter, dev: Device, model) -> None:
    """Every rank holds its own copy of the weights; DDP keeps them identical by averaging
    gradients. Check it: gather a checksum of each rank's parameters."""
    checksum = torch.tensor([sum(p.double().sum().item() for p in model.parameters())], device=dev.device)
    sums = [torch.zeros_like(checksum) for _ in range(dev.world_size)]
    dist.all_gather(sums, checksum)
    if dev.is_main:
        sums = [float(x.item()) for x in sums]
        run.write_status(rank_checksums=sums, ranks_in_sync=max(sums) - min(sums) <= 1e-6 * abs(sums[0]))


def _finish(cfg: PretrainConfig, run: Reporter, dev: Device, data: _Data, t: _Trainer, pace: _Pace, frames,
            state: str) -> dict:
    """The run's last evaluation (the latest, where it measured these weights), frame and checkpoint,
    and its final status."""
    final, step = {}, t.step
    if pace.last_eval is not None and pace.last_eval["step"] == step:  # the weights it measured: no second pass
        final = {k: v for k, v in pace.last_eval.items() if k not in ("step", "split", "time")}
    elif data.held:  # a stop between evaluations (or before the first): measured now, and drawn in the curve too
        final = evaluate(t.model, data.held, cfg, data.tok, dev)
        run.log_metrics({"step": step, "split": "eval", **final, "time": time.time()})
    if frames is not None and step not in frames.steps:  # a stop before the end: its last moment too
        frames.record(t.model, step, _sequences_seen(cfg, dev, step), t.tokens_seen, final)
    _save(run, t.model, data.tok, step, t.optimizer, t.scheduler, t.scaler, cfg, final, t.tokens_seen, frames)
    run.clear_stop()
    run.write_status(state=state, step=step, eval_final=final, finished=time.time())
    run.log(f"{state} at step {step}")
    return final


def _sequences_seen(cfg: PretrainConfig, dev: Device, step: int) -> int:
    return step * cfg.batch_size * cfg.grad_accum * dev.world_size


def _pretrain(cfg: PretrainConfig, run: Reporter, dev: Device, latest: Path | None, progress: bool, on_step,
              stop_signal: dict) -> tuple[dict, BertForPreTraining, WordPieceTokenizer]:
    """Build the data, build the model, restore it on a resume, then the loop (``loop.train_loop``):
    one update, then whatever is due at that step (a log line, an evaluation, a time-lapse frame,
    a checkpoint)."""
    data = _pretraining_data(cfg, run, dev, latest)
    t = _trainer(cfg, run, dev, latest, _new_model(cfg, run, dev, latest, data.tok))
    _check_room(run, t.model, cfg, t.step)
    flops_tok = model_flops_per_token(t.model, cfg.max_seq_length, cfg.masking.mlm_probability)["total"]
    if dev.is_main:
        _announce(cfg, run, dev, latest, data, t)
    frames, to_record = _frame_recorder(cfg, run, dev, latest, data, t)
    bar = tqdm(total=cfg.max_steps, initial=t.step, unit="step", dynamic_ncols=True) if progress and dev.is_main \
        else None
    pace = _Pace()

    def update(step: int) -> tuple[dict, float]:
        t_step = time.time()
        losses, grad_norm = _train_step(cfg, dev, data, t, pace)
        t.step = step + 1
        if dev.device.type == "cuda":
            torch.cuda.synchronize()
        pace.train_time += time.time() - t_step
        if bar:
            bar.update(1)
            bar.set_postfix(loss=f"{losses['loss']:.3f}")
        return losses, grad_norm

    def after(step: int, result: tuple[dict, float]) -> None:
        losses, grad_norm = result
        if dev.is_main and (step % cfg.log_every == 0 or step == cfg.max_steps):
            _log_step(cfg, run, dev, t, pace, losses, grad_norm, flops_tok)
        ev = None
        if dev.is_main and data.held and (step % cfg.eval_every == 0 or step == cfg.max_steps or step in to_record):
            ev = _evaluate_step(cfg, run, dev, data, t, pace)
        if step in to_record:
            frames.record(t.model, step, _sequences_seen(cfg, dev, step), t.tokens_seen, ev)
        if dev.is_main and step % cfg.save_every == 0 and step < cfg.max_steps:
            _save(run, t.model, data.tok, step, t.optimizer, t.scheduler, t.scaler, cfg, tokens_seen=t.tokens_seen)
        if on_step is not None:
            on_step(step, losses)

    t.step, stopped = train_loop(run, t.step, cfg.max_steps, update,
                                 stop=lambda step: _stop_agreed(run, dev, stop_signal), after=after)
    state = "stopped" if stopped else "finished"
    if bar:
        bar.close()
    if dev.distributed:
        _check_ranks_in_sync(run, dev, t.model)
    final = _finish(cfg, run, dev, data, t, pace, frames, state) if dev.is_main else {}
    if dev.distributed:
        dist.barrier()
    return {"step": t.step, "state": state, **final}, t.model, data.tok
