"""How much one request may ask of the server, from what it costs with the model that answers.

A class of thirty shares one server. One student's 2,000-line input must not take the CPU or the
memory from the other twenty-nine, so every size a user can type (characters, lines, words,
WordPieces, [MASK]s, integration steps, sentences compared, pairs scored) is checked **before any
work starts**, against a limit chosen so that the worst input under it costs at most about
``SECONDS`` of server CPU and ``MEMORY`` bytes with the loaded model. Limits scale with the model:
BERT-Base (12 layers, H = 768) reads fewer WordPieces in ten seconds than MiniLM (6 layers, H = 384).
Above a limit the page says so in one sentence (:class:`TooLarge`) and nothing is computed.

The cost model counts a forward pass as 2·N + 4·L·H·T floating-point operations per WordPiece
(N: the encoder's weights, each used once per token for a multiply and an add; 4·L·H·T: the attention
scores and their weighted sum over T positions); the training count of ``train/estimate.py`` is this
times three. ``CPU_FLOP_S`` is the rate assumed for the thread that serves a request: one core of the
2-core development machine measured 50-93 GFLOP/s on BertModel forward passes (L2-H128 to L12-H768,
T = 16-512, torch 2.13); the figure is about half that, for slower servers and the Python around each
call. Integrated Gradients costs about ``IG_PASS`` forward passes per token and step (measured on
minilm-mlm-nsp: 1,000 token-steps a second against 3,900 forward tokens; the backward pass reaches the
embeddings only).

Nothing here loads a model: the limits follow from its config alone, so the README's table and the
CLI's ``bert-explorer limits`` are the same numbers the pages enforce.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

SECONDS = 10.0          # the most one request may cost the server, in seconds of one core
MEMORY = 300e6          # the most memory one request may hold beyond the loaded model, in bytes
CPU_FLOP_S = 40e9       # stated: about half of one core measured here (module docstring)
IG_PASS = 3.0           # Integrated Gradients: forward passes per token and step (forward + backward, with room)
TYPICAL_TOKENS = 128    # WordPieces per sentence of a list: what the pages cut a sentence to

# Limits that do not depend on the model: what the page draws costs more than what the model computes.
CHARS = 2_000           # characters in one typed sentence (about 400 WordPieces; the tokenizer takes microseconds)
LIST_CHARS = 20_000     # characters in a box of lines or words
WORDS = 300             # words on the map of token embeddings: label placement is quadratic (300: ~1 s, 1,000: 6 s)
MASKS = 20              # [MASK]s in one sentence: one bar chart each (~60 ms a chart)
MAP_SENTENCES = 40      # sentences on the map of one word in context: one legend entry each
COMPARED = 12           # sentences compared pair by pair: 12 give 66 pairs, one line each on the chart
PAIRS = 50              # rows of sentence pairs scored at once
MIN_IG_STEPS = 10       # fewer integration steps than this explain nothing
# The time-lapse loads and runs each checkpoint it reads: at most this many, and at most this many bytes of
# weights together (a BERT-Base checkpoint is 440 MB: three of them), evenly spaced over the run.
TIMELAPSE_CHECKPOINTS = 12
TIMELAPSE_BYTES = 1.5e9


class TooLarge(ValueError):
    """An input above a limit: its message is the one sentence the page shows."""


@dataclass(frozen=True)
class Limits:
    """The limits for one model (:func:`for_config`). Each field is a count the pages check."""
    chars: int              # characters in one typed sentence
    list_chars: int         # characters in a box of lines or words
    tokens: int             # WordPieces of one input (the model's positions)
    forward_tokens: int     # WordPieces through the model in one request
    attention_tokens: int   # WordPieces whose attention maps (every layer and head) fit in MEMORY
    words: int              # words on the map of token embeddings
    map_sentences: int      # sentences on the map of one word in context
    compared: int           # sentences compared pair by pair
    pairs: int              # sentence pairs scored at once
    masks: int              # [MASK]s in one sentence
    token_steps: int        # WordPieces × integration steps in one attribution
    attribution_tokens: int  # WordPieces of an input that can be explained at all (MIN_IG_STEPS steps)

    def steps_for(self, tokens: int) -> int:
        """The most integration steps, all attempts added, for an input of ``tokens`` WordPieces."""
        return self.token_steps // max(1, tokens)

    def rows(self) -> list[tuple[str, int]]:
        return [(WHAT[k], v) for k, v in asdict(self).items()]


# What each field means, in the words of the README's table and the pages' sentences.
WHAT = {
    "chars": "characters in one typed sentence",
    "list_chars": "characters in a box of lines or words",
    "tokens": "WordPieces of one input",
    "forward_tokens": "WordPieces through the model in one request",
    "attention_tokens": "WordPieces whose attention maps are drawn",
    "words": "words on the map of token embeddings (Tokens and embeddings § 4)",
    "map_sentences": "sentences on the map of one word in context (§ 4)",
    "compared": "sentences compared pair by pair (§ 5)",
    "pairs": "sentence pairs scored at once (Next sentence probe)",
    "masks": "[MASK]s in one sentence (Masked word probe)",
    "token_steps": "WordPieces × integration steps in one attribution",
    "attribution_tokens": "WordPieces of an input to explain (Attributions)",
}


def forward_flops(num_layers: int, hidden_size: int, intermediate_size: int, seq_len: int) -> float:
    """FLOPs of one WordPiece's forward pass through the encoder, at ``seq_len`` positions."""
    h, i = hidden_size, intermediate_size
    weights = num_layers * (4 * h * h + 2 * h * i) + h * h  # attention's four projections, the feed-forward, pooler
    return 2.0 * weights + 4.0 * num_layers * h * seq_len


def backward_bytes(config, seq_len: int) -> float:
    """Bytes one WordPiece holds for a backward pass through the encoder at ``seq_len`` positions, in
    float32: each layer keeps its attention scores and weights (A · T each), about a dozen H-sized and
    two intermediate-sized vectors. An upper bound: measured here about half of it for MiniLM."""
    L, H, A, I = config.num_layers, config.hidden_size, config.num_heads, config.intermediate_size
    return 4.0 * L * (2 * A * seq_len + 12 * H + 2 * I)


def for_config(config) -> Limits:
    """The limits for a model with this config (a BertConfig: ``num_layers``, ``hidden_size``,
    ``intermediate_size``, ``num_heads``, ``max_position_embeddings``)."""
    L, H, A = config.num_layers, config.hidden_size, config.num_heads
    positions = min(512, config.max_position_embeddings)
    budget = SECONDS * CPU_FLOP_S
    forward_tokens = int(budget // forward_flops(L, H, config.intermediate_size, TYPICAL_TOKENS))
    # Every layer's attention kept, [A, T, T] floats each (the Attention page draws them all).
    attention_tokens = min(positions, int(math.sqrt(MEMORY / (4.0 * L * A))))
    sentences = max(2, forward_tokens // TYPICAL_TOKENS)
    ig = budget / (IG_PASS * forward_flops(L, H, config.intermediate_size, TYPICAL_TOKENS))
    token_steps = int(ig)
    return Limits(
        chars=CHARS, list_chars=LIST_CHARS, tokens=positions, forward_tokens=forward_tokens,
        attention_tokens=attention_tokens, words=WORDS, map_sentences=min(MAP_SENTENCES, sentences),
        compared=min(COMPARED, sentences), pairs=max(1, min(PAIRS, forward_tokens // (2 * TYPICAL_TOKENS))),
        masks=MASKS, token_steps=token_steps,
        attribution_tokens=min(positions, token_steps // MIN_IG_STEPS))


def check(count: int, limit: int, what: str, advice: str = "") -> None:
    """Raise :class:`TooLarge` with one sentence when ``count`` (of ``what``) is above ``limit``."""
    if count > limit:
        raise TooLarge(f"{count:,} {what}: more than this server takes at once with this model (at most {limit:,}, "
                       f"about {SECONDS:.0f} s of its CPU){'; ' + advice if advice else ''}.")
