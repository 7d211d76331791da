"""BertConfig: the handful of numbers that define a BERT (Devlin et al. 2019, Section 3).

The paper writes L for the number of layers, H for the hidden size and A for the number of
self-attention heads; the feed-forward size is 4H. We keep those names (``num_layers``,
``hidden_size``, ``num_heads``) and translate to and from Hugging Face's ``config.json`` keys
so that a checkpoint moves between this project and ``transformers`` unchanged.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


# The sizes a config may ask for (inclusive): far above BERT-Large, far below what would exhaust a machine
# before the weights file is even compared with them (checkpoint.inspect does that next).
SIZE_BOUNDS = {"num_layers": (1, 48), "hidden_size": (1, 4096), "num_heads": (1, 4096),
               "intermediate_size": (1, 16384), "vocab_size": (1, 250_000), "max_position_embeddings": (1, 8192),
               "type_vocab_size": (1, 16)}
MAX_LABELS = 1000
_HF_KEY = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads", "dropout": "hidden_dropout_prob",
           "attention_dropout": "attention_probs_dropout_prob"}


@dataclass
class BertConfig:
    vocab_size: int = 30522          # the released uncased WordPiece vocab (paper: "30,000")
    hidden_size: int = 768           # H
    num_layers: int = 12             # L
    num_heads: int = 12              # A; each head works in H/A dimensions
    intermediate_size: int = 3072    # feed-forward inner size, 4H in the paper
    max_position_embeddings: int = 512  # learned positions: sequences longer than this are impossible
    type_vocab_size: int = 2         # segment A / segment B
    dropout: float = 0.1             # on embeddings, attention output and FFN output (Appendix A.2)
    attention_dropout: float = 0.1   # on the attention probabilities
    layer_norm_eps: float = 1e-12    # as in the released checkpoints, not PyTorch's 1e-5
    initializer_range: float = 0.02  # std of the normal init (the original code truncates it at 2 std)
    pad_token_id: int = 0
    causal: bool = False             # True = left-to-right model (the "LTR" ablation, Table 5)
    tie_word_embeddings: bool = True  # the MLM decoder is the word embeddings' matrix, as in the released BERTs
    # Task heads read these; they travel in config.json exactly as transformers writes them.
    id2label: dict[int, str] = field(default_factory=dict)
    problem_type: str | None = None  # "regression" for STS-B-like tasks
    architectures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # A config is read before anything is allocated: every size is a whole number within what a
        # BERT of this project can be (BERT-Large: L=24, H=1024; these bounds leave room above it), so a
        # config.json asking for a million layers is one sentence, not a server out of memory.
        for name, (low, high) in SIZE_BOUNDS.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
                raise ValueError(f"{_HF_KEY.get(name, name)} must be a whole number from {low:,} to {high:,}, "
                                 f"not {v!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        # the numbers that are not sizes: a string or a negative epsilon was a traceback far away, or NaN
        # probabilities on every page (layer_norm_eps -1)
        for name, inside, said in (("dropout", lambda v: 0 <= v < 1, "from 0 to below 1"),
                                   ("attention_dropout", lambda v: 0 <= v < 1, "from 0 to below 1"),
                                   ("layer_norm_eps", lambda v: 0 < v < 1, "above 0 and below 1"),
                                   ("initializer_range", lambda v: 0 < v <= 1, "above 0, up to 1")):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not inside(v):
                raise ValueError(f"{_HF_KEY.get(name, name)} must be a number {said}, not {v!r}")
        for name in ("causal", "tie_word_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, not {getattr(self, name)!r}")
        if self.pad_token_id is None:  # (a config.json may say null: transformers then pads with 0 too)
            self.pad_token_id = 0
        if not isinstance(self.pad_token_id, int) or isinstance(self.pad_token_id, bool) \
                or not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id must be a token id from 0 to {self.vocab_size - 1:,} (below vocab_size), "
                             f"not {self.pad_token_id!r}")
        try:
            self.id2label = {int(k): str(v) for k, v in (self.id2label or {}).items()}
        except (TypeError, ValueError, AttributeError):
            raise ValueError("id2label must map label numbers to names") from None
        if len(self.id2label) > MAX_LABELS:
            raise ValueError(f"id2label names {len(self.id2label):,} labels, more than {MAX_LABELS:,}")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    # ----- Hugging Face config.json -------------------------------------------------------
    _HF_NAMES = {
        "num_layers": "num_hidden_layers",
        "num_heads": "num_attention_heads",
        "dropout": "hidden_dropout_prob",
        "attention_dropout": "attention_probs_dropout_prob",
    }

    def to_hf_dict(self) -> dict:
        d = asdict(self)
        out = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
        for k, v in d.items():
            out[self._HF_NAMES.get(k, k)] = v
        # transformers reads no "causal": its BERT attends left to right where is_decoder says so (without
        # cross-attention, which add_cross_attention would add); an LTR model exported bidirectional computed otherwise
        out["is_decoder"] = self.causal
        if self.tie_word_embeddings:  # (transformers' default: config.json says it only when untied)
            out.pop("tie_word_embeddings")
        if not self.id2label:
            for k in ("id2label", "problem_type"):
                out.pop(k)
        else:
            out["id2label"] = {str(k): v for k, v in self.id2label.items()}
            out["label2id"] = {v: k for k, v in self.id2label.items()}
        if not self.architectures:
            out.pop("architectures")
        return out

    @classmethod
    def from_hf_dict(cls, d: dict) -> "BertConfig":
        if d.get("model_type", "bert") != "bert":
            raise ValueError(f"model_type is {d.get('model_type')!r}; only BERT checkpoints are supported")
        act = d.get("hidden_act", "gelu")
        if act not in ("gelu", "gelu_python"):
            raise ValueError(f"hidden_act {act!r} is not supported (BERT uses the exact erf GELU)")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute (learned) position embeddings are supported")
        if d.get("add_cross_attention"):
            raise ValueError("add_cross_attention is set: the decoder of an encoder-decoder model is not a BERT this "
                             "project reads (its cross-attention weights would go unused)")
        back = {v: k for k, v in cls._HF_NAMES.items()}
        names = {f.name for f in fields(cls)}
        kwargs = {}
        for k, v in d.items():
            k = back.get(k, k)
            if k in names:
                kwargs[k] = v
        if "causal" not in d and d.get("is_decoder") is True:  # transformers' left-to-right BERT (BertLMHeadModel)
            kwargs["causal"] = True
        return cls(**kwargs)

    def save(self, directory: str | Path) -> None:
        path = Path(directory) / "config.json"
        path.write_text(json.dumps(self.to_hf_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> "BertConfig":
        path = Path(directory)
        path = path / "config.json" if path.is_dir() else path
        return cls.from_hf_dict(json.loads(path.read_text()))


def _preset(num_layers: int, hidden_size: int, num_heads: int | None = None) -> BertConfig:
    return BertConfig(
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads or hidden_size // 64,  # Turc et al.: A = H/64
        intermediate_size=4 * hidden_size,
    )


# The 24 miniatures of Turc et al. 2019 (L x H, A = H/64, FFN = 4H), named L-H, plus the
# paper's two sizes. The four miniatures that got their own names are aliased.
PRESETS: dict[str, BertConfig] = {
    f"L{L}-H{H}": _preset(L, H) for L in (2, 4, 6, 8, 10, 12) for H in (128, 256, 512, 768)
}
PRESETS.update(
    {
        "tiny": PRESETS["L2-H128"],
        "mini": PRESETS["L4-H256"],
        "small": PRESETS["L4-H512"],
        "medium": PRESETS["L8-H512"],
        "base": _preset(12, 768, 12),
        "large": _preset(24, 1024, 16),
    }
)


def preset(name: str, **overrides) -> BertConfig:
    """A fresh copy of a size preset, e.g. ``preset("mini", vocab_size=8000)``."""
    if name not in PRESETS:
        raise KeyError(f"unknown size {name!r}; choose one of {', '.join(PRESETS)}")
    d = asdict(PRESETS[name])
    d.update(overrides)
    return BertConfig(**d)
