"""The settings of a pre-training run (Section 3.1, Appendix A.2): what ``bert-explorer pretrain``,
the Pre-train page, a recipe and a run's ``training_args.json`` hold, each bounded before anything
runs, and the warm-up they imply."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from ..data.objectives import Objective, objective_type, predicted_share
from ..data.pretraining import MaskingConfig, memorised, plateau_sentence
from ..model import PRESETS
from ..setting import setting
from .configs import MAX_GRAD_ACCUM, SAME_DRAWS, seed_refusal, settings_of
from .device import PRECISIONS, device_refusal, precision_from


@dataclass
class PretrainConfig:
    corpus: str = setting("bbc", "The text to pre-train on: a built-in corpus (bbc, sotu, vital, wiki, lee, wordnet, "
                                 "tiny), a text file, or several joined by + such as bbc+wiki.")
    max_docs: int | None = setting(None, "Use only the first N documents of the corpus, for quick experiments.",
                                   zero_is="all of them")
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
                                             "(the original scripts' example: 10,000 of 100,000; the paper: "
                                             "10,000 of 1,000,000, 1%).")
    max_steps: int = setting(1000, "How many optimiser steps to train.")
    clip_grad_norm: float = setting(1.0, "Scale the gradients down when their norm exceeds this value.")
    log_every: int = setting(10, "Log the training loss and speed every this many steps.")
    eval_every: int = setting(200, "Measure held-out MLM and NSP accuracy every this many steps.")
    save_every: int = setting(500, "Save a checkpoint every this many steps (the run resumes from the newest).")
    eval_batches: int = setting(50, "How many batches of held-out sequences each evaluation reads.")
    seed: int = setting(0, "The random seed of the data split, the masks, the batches and the initial weights."
                        + SAME_DRAWS)
    device: str = setting("auto", "Where to train: cpu, cuda, cuda:N, or auto (a GPU if there is one).")
    precision: str = setting("auto", "The arithmetic of training: fp32, bf16, fp16, or auto (bf16 where the device "
                                     "is fast at it).")
    compile: bool = setting(False, "torch.compile the model for training (the first steps compile it: worth it on a GPU for "
                                  "long runs; the saved model is the plain one).")
    timelapse_frames: int = setting(0, "Record this many time-lapse frames of the model's predictions and "
                                       "attention (step 0, the end and log-spaced steps between).")
    timelapse_sentences: list[str] | None = setting(None, "The sentences of the time-lapse, with [MASK] where a "
                                                          "word is hidden; by default a shipped set of news "
                                                          "(sentences of its own held-out text for a run that "
                                                          "learns its vocabulary on an uploaded one).")
    timelapse_heads: list[list[int]] | None = setting(None, "The [layer, head] pairs (0-based) whose attention the "
                                                            "time-lapse records; by default all of up to 16, else "
                                                            "one a layer.")

    def __post_init__(self):
        self._check_sizes()
        objective_type(self.objective)  # an unknown name: one sentence that lists the known ones
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if why := device_refusal(self.device) or seed_refusal(self.seed):
            raise ValueError(why)
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
            # (a whole number of infinity or NaN, from a --config file, was int()'s OverflowError or ValueError)
            if not isinstance(v, (int, float)) or isinstance(v, bool) \
                    or (name in _WHOLE and (not math.isfinite(v) or v != int(v))) or not v >= low:
                kind = "a whole number" if name in _WHOLE else "a number"
                raise ValueError(f"{name} must be {kind} of at least {low:g}, not {v!r}")
            if name in _WHOLE:
                setattr(self, name, int(v))
        if self.grad_accum > MAX_GRAD_ACCUM:
            raise ValueError(f"grad_accum must be a whole number of at most {MAX_GRAD_ACCUM:,} (a step of "
                             f"{MAX_GRAD_ACCUM:,} batches is beyond any recipe), not {self.grad_accum:,}")
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

    @property
    def objective_type(self) -> Objective:
        """The objective the setting names, as an object (``data/objectives.py``)."""
        return objective_type(self.objective)

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
# ... and the most: past these a run is no recipe but a typo (10 million steps is the Pre-train page's bound too; an
# Adam step moves a weight by about its learning rate, and BERTs are pre-trained at 1e-4 (the paper) to a few 1e-3
# (small models, large batches): past 1e-2 a run diverges, the page's box stops there too; more static-masking
# copies than Google's 10 ten times over hold the corpus that many times in memory).
MAX_LR = 1e-2
_AT_MOST = {"max_steps": 10_000_000, "lr": MAX_LR, "dupe_factor": 100,
            "weight_decay": 1.0,  # (as fine-tuning's: 1e30 diverged, and was told to lower its learning rate)
            "vocab_size": 250_000,  # (the model's own bound, said beside the least: "at least 16" and "from 1 to")
            "batch_size": 4096}  # (the Pre-train page's box: a recipe's 1,000,000 sequences a batch was no bound)
MAX_FRAMES = 200  # time-lapse frames: each a forward pass and an evaluation (the Pre-train page's bound)
_WHOLE = {"batch_size", "grad_accum", "max_steps", "log_every", "eval_every", "save_every", "eval_batches",
          "dupe_factor", "vocab_size", "max_seq_length",
          "warmup_steps", "max_docs"}
_MAY_BE_NONE = {"warmup_steps", "max_docs"}


def check_new_run(cfg: PretrainConfig) -> None:
    """The most a new run may ask (``_AT_MOST``, ``MAX_FRAMES``), one sentence each: checked where a run starts, not
    where a run's saved settings are read (a run the CLI started with 300 frames before there was a bound still
    resumes, and its held-out text is still rebuilt)."""
    for name, high in _AT_MOST.items():
        v = getattr(cfg, name)
        if not v <= high:  # (NaN, infinity and the like are past it too)
            kind = "a whole number" if name in _WHOLE else "a number"
            raise ValueError(f"{name} must be {kind} from {_AT_LEAST[name]:g} to {high:,}, not {v!r}")
    if cfg.timelapse_frames > MAX_FRAMES:
        raise ValueError(f"timelapse_frames must be from 0 (none) to {MAX_FRAMES}, not {cfg.timelapse_frames}")


def positions_fit(max_seq_length: int, positions: int, model: str) -> None:
    """A sequence longer than the model's learned positions cannot be read at all (Section 3: position
    embeddings are learned, up to 512 in the paper): refused in one sentence."""
    if max_seq_length > positions:
        raise ValueError(f"max_seq_length {max_seq_length} is longer than the {positions} positions that {model} has "
                         f"learned; choose {positions} or less")


# A small BERT trained for a few thousand steps leaves the word-frequency plateau at 5e-4 and above: the shipped
# explorer-mini learnt at 5e-4 and the recipes use 1e-3; the paper's 1e-4 (BERT-Base, 1 M steps) kept an
# L2-H128 model of 1,500 steps of 16 sequences there, where 5e-4 left it (9.6 % held-out, against 5.7 %).
SMALL_MODEL_LR = 5e-4
PAPER_LR = 1e-4  # Appendix A.2: BERT-Base and -Large, 1,000,000 steps of 256 sequences
FAR_ABOVE = 3.0  # a held-out loss this many times the unigram entropy: no plateau, a training that diverged


def plateau_advice(lr, memorised: bool = False) -> str:
    """What may take a pre-training that stayed on the word-frequency plateau off it, by its learning rate; for one
    that learnt its training text by heart (``data.pretraining.memorised``), more text, not more steps."""
    if memorised:
        return ("More steps would make it worse: give it more text (a corpus of millions of words, or a built-in one "
                "joined with yours by +), fewer steps, or a smaller model.")
    if isinstance(lr, (int, float)) and lr < SMALL_MODEL_LR:
        whose = ", the paper's rate for BERT-Base over a million steps," if lr == PAPER_LR else ""
        return (f"A higher learning rate may get it going: at {lr:g}{whose} a small model of a few thousand steps "
                f"learns slowly; this project's small models learnt at {SMALL_MODEL_LR:g} to 1e-3. More steps help "
                "too.")
    return "More steps or a longer warm-up may get it going."


def rate_for_width(hidden_size: int | None) -> float:
    """The learning rate a run takes where none was given, as the Pre-train page sets it: ``SMALL_MODEL_LR`` for a
    model narrower than BERT-Base (at the paper's 1e-4 one of a few thousand steps stayed on the word-frequency
    plateau), the paper's 1e-4 for BERT-Base and wider, and for a width not known here (a warm start from a Hub
    model not downloaded yet)."""
    return SMALL_MODEL_LR if hidden_size is not None and hidden_size < 768 else PAPER_LR


def plateau_warning(final: dict, lr) -> str | None:
    """What follows "this model" in a warning of a finished pre-training's result (``final``: its last evaluation,
    with ``plateau``, ``unigram_entropy`` and the training MLM loss), and what may take it off; None when it left
    the plateau or was not measured."""
    if not (final.get("plateau") and final.get("mlm_perplexity") and final.get("unigram_entropy")):
        return None
    held, entropy, trained = math.log(final["mlm_perplexity"]), final["unigram_entropy"], final.get("train_mlm_loss")
    if held > FAR_ABOVE * entropy and isinstance(lr, (int, float)):  # (a loss 28 times it was told "more steps")
        return (f"{plateau_sentence(held, entropy, trained)}. Its loss is {held / entropy:.0f} times that, as when "
                f"a training diverges: the learning rate, {lr:g}, is likely too high for it; start again with a lower "
                "one")
    return f"{plateau_sentence(held, entropy, trained)}. {plateau_advice(lr, memorised(trained, held, entropy))}"


def predicted_fraction(cfg: PretrainConfig) -> float:
    """The share of a sequence's tokens the MLM decoder predicts (its cost): the masked ones of a masked LM,
    every one of a left-to-right model."""
    return predicted_share(cfg.objective, cfg.masking.mlm_probability)


def warmup_steps_of(cfg: PretrainConfig) -> int:
    """The warm-up length: as set, else 10% of max_steps (the original scripts' example, 10k of 100k steps;
    the paper warmed up 10k of 1M, 1%)."""
    return cfg.warmup_steps if cfg.warmup_steps is not None else max(1, cfg.max_steps // 10)
