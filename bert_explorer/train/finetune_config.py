"""The settings of a fine-tuning run (Section 4, Section 5.3's feature-based transfer): what ``bert-explorer
finetune``, the Fine-tune page, an ablation's cells and a run's config.json hold, each bounded before anything
runs, and the limits of what one run keeps in memory."""
from __future__ import annotations

from dataclasses import dataclass

from ..data.uploads.reader import FORMATS
from ..setting import setting
from .configs import MAX_GRAD_ACCUM, SAME_DRAWS, seed_refusal, settings_of
from .device import PRECISIONS, device_refusal, precision_from

FEATURE_MODES = ("embeddings", "last", "second-to-last", "sum-last-4", "concat-last-4", "sum-all")
MODES = ("fine-tune", "feature-based")

# What one run keeps in memory: every training example is tokenised once and kept (up to 128 ids,
# a mask and segment ids each, as Python lists: about 5 kB an example), so 200,000 examples hold about
# 1 GB; a 199 MB CSV of 1.67 M rows once grew a worker to 14 GB. Larger sets are sampled (said in the
# log and on the page); max_train_examples chooses fewer. The dev set is scored after every epoch and
# after a Stop, so it is kept small enough to score in seconds to tens of seconds on a CPU.
MAX_TRAIN_EXAMPLES = 200_000
MAX_POS_WEIGHT = 100.0  # a label's positives weigh at most this many negatives (pos_weight)
MAX_PATIENCE = 1000     # evaluations early stopping may wait
DEV_EXAMPLES = 2_000         # the dev set's size when max_dev_examples is not set
MAX_DEV_EXAMPLES = 20_000    # the most max_dev_examples may ask for
# a share of train held out as dev, where no dev set is given: past a half, dev outweighs what is trained on
DEV_FRACTION_RANGE = (0.01, 0.5)


# The app's default model. Measured with bench/transfer.py (bbc-topics, 400 training examples, 3
# epochs of batch 32, seq 64, one seed; dev accuracy): minilm-mlm-nsp 67.8 % (82.9 % before its GPU
# pre-training stage), minilm 74.4 %, explorer-mini 27.5 %; with batch 16 (75 steps) it reaches 87.7 %.
FINETUNE_DEFAULT_MODEL = "minilm-mlm-nsp"


@dataclass
class FinetuneConfig:
    model: str = setting(FINETUNE_DEFAULT_MODEL, "The pre-trained model to start from: a short name, a checkpoint "
                                                 "folder, a model of the paper (bert-base-uncased; `bert-explorer "
                                                 "models` lists them) or hf:<hub id>, downloaded once.")
    train: str = setting("builtin:bbc-topics", f"The training data: a file ({', '.join(FORMATS)}), builtin:NAME, "
                                               "tiny:TASK (a small generated set), or a Hugging Face data set, "
                                               "hf:OWNER/NAME[/CONFIG][:SPLIT] (e.g. hf:nyu-mll/glue/sst2:train; "
                                               "downloaded once, then read offline).")
    dev: str | None = setting(None, "The dev data, in the same forms as train; by default a stratified dev-fraction "
                                    "of train.")
    task: str | None = setting(None, "The task type (classification, pair-classification, regression, ner, qa, "
                                     "multiple-choice, multi-label); by default detected from the data.")
    text_column: str | None = setting(None, "The column that holds the text; by default detected from the names.")
    text_pair_column: str | None = setting(None, "The column that holds the second text of a pair; by default "
                                                 "detected.")
    label_column: str | None = setting(None, "The column that holds the labels; by default detected.")
    mode: str = setting("fine-tune", "fine-tune trains the whole model with a new output layer (Section 3.2); "
                                     "feature-based keeps BERT frozen and trains a BiLSTM on its features (Table 7).")
    features: str = setting("concat-last-4", "In the feature-based mode, which layers feed the BiLSTM: embeddings, "
                                             "last, second-to-last, sum-last-4, concat-last-4 or sum-all (Table 7).")
    max_seq_length: int = setting(128, "The longest input in tokens; longer texts are cut (a QA context is read in "
                                       "windows).")
    doc_stride: int = setting(64, "For QA, how many tokens each window moves along a context longer than "
                                  "max-seq-length.")
    batch_size: int = setting(32, "Examples per batch (the paper tries 16 and 32); a step reads batch-size x "
                                  "grad-accum examples.")
    grad_accum: int = setting(1, "Add up the gradients of this many batches before each optimiser step, for a "
                                 "larger batch than fits in memory (transformers: gradient_accumulation_steps).")
    lr: float = setting(5e-5, "The peak learning rate of Adam (the paper tries 5e-5, 3e-5 and 2e-5).")
    lr_grid: list[float] = setting(help="Several learning rates to try, e.g. 5e-5,3e-5,2e-5: a run each, and the "
                                        "best on dev is kept.", factory=list)
    epochs: float = setting(3, "How many passes over the training data (a fraction is allowed).")
    warmup_fraction: float = setting(0.1, "The fraction of steps with a linear learning-rate warm-up.")
    weight_decay: float = setting(0.01, "Adam's decoupled weight decay.")
    dev_fraction: float = setting(0.1, "Without dev data, the fraction of train kept out as the dev set.")
    max_train_examples: int | None = setting(None, "Use at most this many training examples, sampled at random.",
                                             zero_is="all of them")
    max_dev_examples: int | None = setting(None, "Evaluate on at most this many dev examples, sampled at random.")
    head_lr: float = setting(1e-3, "In the feature-based mode, the learning rate of the new BiLSTM head, which "
                                   "learns from scratch.")
    seed: int = setting(0, "The random seed of the split, the sampling, the batches and the new weights."
                        + SAME_DRAWS)
    device: str = setting("auto", "Where to train: cpu, cuda, cuda:N, or auto (a GPU if there is one).")
    precision: str = setting("auto", "The arithmetic of training: fp32, bf16, fp16, or auto (bf16 where the device "
                                     "is fast at it).")
    pos_weight: str = setting("none", "Multi-label only: how much a label's positive examples weigh in its loss: none, "
                                      "balanced (each label's negatives over its positives in the training set, at "
                                      "most 100: rare labels are learnt too), or a number for every label.")
    eval_every: int | None = setting(None, "Evaluate on the dev set every this many steps and at the end; by default "
                                           "after each epoch (transformers: eval_strategy steps, eval_steps).",
                                     zero_is="after each epoch")
    early_stopping_patience: int | None = setting(None, "Stop after this many evaluations in a row whose main dev "
                                                        "metric did not beat the best so far; by default never "
                                                        "(transformers: EarlyStoppingCallback).", zero_is="never")
    early_stopping_threshold: float = setting(0.0, "How much the main dev metric must beat the best so far to count "
                                                   "as better for early stopping.")
    keep_best: bool = setting(False, "Keep the model of the evaluation with the best main dev metric (the first of "
                                     "equals) instead of the last; the log says which step (transformers: "
                                     "load_best_model_at_end).")
    save_checkpoints: bool = setting(False, "Save a checkpoint to resume from at every evaluation, so that a run "
                                            "killed mid-way can resume (a Stop always saves one); the newest is kept.")
    compile: bool = setting(False, "torch.compile the model for training (the first steps compile it: worth it on a GPU for "
                                  "long runs; the saved model is the plain one).")

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.features not in FEATURE_MODES:
            raise ValueError(f"features must be one of {', '.join(FEATURE_MODES)}, not {self.features!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if why := device_refusal(self.device) or seed_refusal(self.seed):
            raise ValueError(why)
        low, high = DEV_FRACTION_RANGE
        if not isinstance(self.dev_fraction, (int, float)) or not low <= self.dev_fraction <= high:
            raise ValueError(f"dev_fraction must be from {low:g} to {high:g} (the share of train held out as dev "
                             f"where no dev set is given), not {self.dev_fraction!r}")
        for name, cap in (("max_train_examples", MAX_TRAIN_EXAMPLES), ("max_dev_examples", MAX_DEV_EXAMPLES)):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= cap):
                raise ValueError(f"{name} must be a whole number from 1 to {cap:,} (what one run keeps in memory "
                                 f"and scores in time), not {v!r}")
        for name, low, high in (("batch_size", 1, None), ("max_seq_length", 8, None), ("doc_stride", 1, None),
                                ("grad_accum", 1, MAX_GRAD_ACCUM), ("eval_every", 1, None),
                                ("early_stopping_patience", 1, MAX_PATIENCE)):
            v = getattr(self, name)
            if v is None and name in ("eval_every", "early_stopping_patience"):
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < low or (high is not None and v > high):
                raise ValueError(f"{name} must be a whole number of at least {low}"
                                 + (f" and at most {high:,}" if high else "") + f", not {v!r}")
        if not isinstance(self.early_stopping_threshold, (int, float)) or isinstance(self.early_stopping_threshold, bool) \
                or not 0 <= self.early_stopping_threshold < 1e6:
            raise ValueError(f"early_stopping_threshold must be a number of at least 0, not "
                             f"{self.early_stopping_threshold!r}")
        # (a zero learning rate trained nothing without a word, a negative one failed in PyTorch after the data was read)
        for name, value in [("lr", self.lr), ("head_lr", self.head_lr), *(("lr_grid", v) for v in self.lr_grid or [])]:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
                raise ValueError(f"{name} must be a learning rate above 0 and at most 1 (the paper's are 2e-5 to 5e-5), "
                                 f"not {value!r}")
        for name in ("warmup_fraction", "weight_decay"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1:
                raise ValueError(f"{name} must be a fraction from 0 to 1, not {v!r}")
        if not isinstance(self.epochs, (int, float)) or not 0 < self.epochs <= 100:
            raise ValueError(f"epochs must be a number above 0 and at most 100, not {self.epochs!r}")
        if str(self.pos_weight) not in ("none", "balanced"):
            try:
                weight = float(self.pos_weight)
            except ValueError:
                weight = -1.0
            if not 0 < weight <= MAX_POS_WEIGHT:
                raise ValueError(f"pos_weight must be none, balanced or a number above 0 and at most {MAX_POS_WEIGHT:g}, "
                                 f"not {self.pos_weight!r}")
        if self.mode == "feature-based" and self.lr_grid:  # else the grid would be silently ignored
            raise ValueError("lr_grid (trying several learning rates) applies to fine-tuning only: the feature-based "
                             "mode keeps BERT frozen and trains its BiLSTM head at head_lr, so leave lr_grid out or "
                             "choose mode fine-tune")

    @classmethod
    def from_dict(cls, d: dict, strict: bool = True) -> "FinetuneConfig":
        """Settings from a dict; ``strict=False`` for a run written earlier (unknown keys warned about)."""
        return cls(**settings_of(cls, d, strict), precision=precision_from(d))
