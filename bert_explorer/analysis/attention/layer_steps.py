"""One encoder layer of BERT, step by step, with the loaded model's own numbers.

Each BERT layer (Devlin et al. 2019, Section 3; the Transformer encoder of Vaswani et al. 2017,
Section 3.2-3.3) computes, for the input X [T, H]:

    1. X itself: for layer 1 the input representation LayerNorm(E_token + E_segment + E_position)
       (BERT, Section 3, Input/Output Representations, and Figure 2); for a later layer the previous layer's output;
    2. Q = X W_Q + b_Q, K = X W_K + b_K, V = X W_V + b_V, cut into A heads of d = H / A columns;
    3. scores S = Q_h K_hᵀ / √d, one row per query token;
    4. the mask M: a very negative number at padding keys and, in a left-to-right model, at the
       keys to the right of each query (BERT's Figure 3: OpenAI GPT's mask);
    5. P = softmax(S + M), the attention rows that bertviz draws;
    6. Z_h = P V_h, the weighted sum of the values;
    7. Concat(Z_1 … Z_A) W_O + b_O, + X (residual), LayerNorm;
    8. the feed-forward block: GELU(Y W_1 + b_1) W_2 + b_2, + Y (residual), LayerNorm.

``layer_steps`` computes every step with explicit matrix products from the model's weights
(not by calling its modules), so the page shows the arithmetic itself; ``tests/test_layer_steps.py``
checks that the composed steps equal the model's own layer output.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ...checkpoint import Loaded, encoder_of

STEPS = ("Input representation", "Queries, keys and values", "Scores", "Mask", "Softmax",
         "Weighted sum of the values", "Heads → W_O → residual → LayerNorm",
         "Feed-forward → residual → LayerNorm")


@dataclass
class LayerSteps:
    """All intermediate tensors of one layer for one input (numpy, float32; T = tokens incl. padding)."""
    tokens: list[str]
    segment_ids: list[int]
    keep: np.ndarray              # [T] 1 = real token, 0 = padding
    layer: int                    # 0-based: layer 1 of the paper is 0
    head: int                     # 0-based
    causal: bool                  # the model's own mask is left-to-right
    x: np.ndarray                 # [T, H] the layer's input
    embedding_parts: dict[str, np.ndarray] | None  # layer 1 only: token, segment, position, sum [T, H]
    q: np.ndarray                 # [T, d] the chosen head's queries
    k: np.ndarray                 # [T, d]
    v: np.ndarray                 # [T, d]
    scores: np.ndarray            # [T, T] q·k/√d, before the mask
    mask: np.ndarray              # [T, T] additive mask the model uses (0 or a very negative number)
    other_mask: np.ndarray        # [T, T] the other mask on the same input (causal <-> bidirectional)
    probs: np.ndarray             # [T, T] softmax(scores + mask): the attention the model uses
    other_probs: np.ndarray       # [T, T] the same scores under the other mask
    context: np.ndarray           # [T, d] probs @ v for the chosen head
    all_heads: np.ndarray         # [T, H] the A heads' contexts side by side
    attention_out: np.ndarray     # [T, H] all_heads W_O + b_O
    attention_sum: np.ndarray     # [T, H] + x (residual)
    attended: np.ndarray          # [T, H] LayerNorm of it
    ff_hidden: np.ndarray         # [T, 4H] attended W_1 + b_1
    ff_gelu: np.ndarray           # [T, 4H] GELU of it
    ff_out: np.ndarray            # [T, H] W_2 + b_2
    output_sum: np.ndarray        # [T, H] + attended (residual)
    output: np.ndarray            # [T, H] LayerNorm of it: the layer's output
    head_size: int = 0

    @property
    def num_real(self) -> int:
        return int(self.keep.sum())

    @property
    def blocked(self) -> np.ndarray:
        """[T, T] 1 where this model's mask keeps query i from key j, else 0."""
        return (self.mask != 0).astype(float)

    @property
    def other_blocked(self) -> np.ndarray:
        """[T, T] the same for the other mask."""
        return (self.other_mask != 0).astype(float)


def _mask(keep: torch.Tensor, causal: bool) -> torch.Tensor:
    """Additive [T, T] mask from a [T] keep vector, as the model builds it."""
    T = keep.shape[0]
    allowed = keep.bool()[None, :].expand(T, T)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    return torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)


def _layer_norm(x: torch.Tensor, ln) -> torch.Tensor:
    """(x − mean) / √(var + ε) · γ + β over the hidden units, written out."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def encode(loaded: Loaded, text: str, text_b: str | None = None, max_tokens: int = 512,
           pad_to: int = 0) -> tuple[list[str], list[int], list[int], list[int]]:
    """Token strings, ids, segment ids and the keep mask, padded with [PAD] up to ``pad_to``
    (as a shorter input is padded in a batch with a longer one)."""
    tok = loaded.tokenizer
    enc = tok.encode(text, text_b, max_length=min(max_tokens, loaded.config.max_position_embeddings))
    tokens, ids, segments = list(enc.tokens), list(enc.input_ids), list(enc.token_type_ids)
    keep = [1] * len(ids)
    extra = max(0, min(pad_to, loaded.config.max_position_embeddings) - len(ids))
    tokens += ["[PAD]"] * extra
    ids += [loaded.config.pad_token_id] * extra
    segments += [0] * extra
    keep += [0] * extra
    return tokens, ids, segments, keep


@torch.no_grad()
def layer_steps(loaded: Loaded, text: str, text_b: str | None = None, layer: int = 0, head: int = 0,
                max_tokens: int = 128, pad_to: int = 0) -> LayerSteps:
    """Every step of encoder layer ``layer`` (0-based) for ``head`` (0-based) on one input."""
    encoder = encoder_of(loaded.model)
    cfg = encoder.config
    if not 0 <= layer < cfg.num_layers:
        raise ValueError(f"layer {layer + 1} does not exist: this model has layers 1–{cfg.num_layers}")
    if not 0 <= head < cfg.num_heads:
        raise ValueError(f"head {head + 1} does not exist: this model has heads 1–{cfg.num_heads}")
    tokens, ids, segments, keep = encode(loaded, text, text_b, max_tokens, pad_to)
    device = next(encoder.parameters()).device
    ids_t = torch.tensor([ids], device=device)
    seg_t = torch.tensor([segments], device=device)
    keep_t = torch.tensor(keep, dtype=torch.long)

    parts = None
    if layer == 0:
        token, segment, position = (p[0].float().cpu() for p in encoder.embeddings.parts(ids_t, seg_t))
        summed = token + segment + position
        x = _layer_norm(summed, _CpuLN(encoder.embeddings.LayerNorm))
        parts = {"token": _np(token), "segment": _np(segment), "position": _np(position), "sum": _np(summed)}
    else:
        out = encoder(input_ids=ids_t, token_type_ids=seg_t,
                      attention_mask=torch.tensor([keep], device=device), output_hidden_states=True)
        x = out.hidden_states[layer][0].float().cpu()  # the output of the layer before

    blk = encoder.encoder.layer[layer]
    W = {name: (m.weight.detach().float().cpu(), m.bias.detach().float().cpu()) for name, m in (
        ("q", blk.attention.self.query), ("k", blk.attention.self.key), ("v", blk.attention.self.value),
        ("o", blk.attention.output.dense), ("ff1", blk.intermediate.dense), ("ff2", blk.output.dense))}
    A, d = cfg.num_heads, cfg.hidden_size // cfg.num_heads
    T = len(ids)

    def project(name, inp):
        w, b = W[name]
        return inp @ w.T + b

    Q, K, V = (project(n, x).view(T, A, d).transpose(0, 1) for n in ("q", "k", "v"))  # [A, T, d]
    scores = Q @ K.transpose(-1, -2) / math.sqrt(d)                                 # [A, T, T]
    mask = _mask(keep_t, cfg.causal)
    other = _mask(keep_t, not cfg.causal)
    probs = (scores + mask).softmax(-1)                                              # [A, T, T]
    context = probs @ V                                                              # [A, T, d]
    all_heads = context.transpose(0, 1).reshape(T, A * d)                            # [T, H]
    attention_out = project("o", all_heads)
    attention_sum = attention_out + x
    attended = _layer_norm(attention_sum, _CpuLN(blk.attention.output.LayerNorm))
    ff_hidden = project("ff1", attended)
    ff_gelu = F.gelu(ff_hidden)  # exact (erf) GELU, as BERT
    ff_out = project("ff2", ff_gelu)
    output_sum = ff_out + attended
    output = _layer_norm(output_sum, _CpuLN(blk.output.LayerNorm))
    return LayerSteps(
        tokens=tokens, segment_ids=segments, keep=np.array(keep), layer=layer, head=head, causal=bool(cfg.causal),
        x=_np(x), embedding_parts=parts, q=_np(Q[head]), k=_np(K[head]), v=_np(V[head]),
        scores=_np(scores[head]), mask=_np(mask), other_mask=_np(other), probs=_np(probs[head]),
        other_probs=_np((scores[head] + other).softmax(-1)), context=_np(context[head]),
        all_heads=_np(all_heads), attention_out=_np(attention_out), attention_sum=_np(attention_sum),
        attended=_np(attended), ff_hidden=_np(ff_hidden), ff_gelu=_np(ff_gelu), ff_out=_np(ff_out),
        output_sum=_np(output_sum), output=_np(output), head_size=d)


class _CpuLN:
    """A LayerNorm's γ, β and ε as float32 on the CPU, where the steps are computed."""
    def __init__(self, ln):
        self.weight = ln.weight.detach().float().cpu()
        self.bias = ln.bias.detach().float().cpu()
        self.eps = ln.eps


def model_layer_output(loaded: Loaded, steps_input: tuple, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """The model's own output of ``layer`` and its attention [A, T, T] for the encoded input
    ``(ids, segments, keep)``: what the composed steps must equal."""
    ids, segments, keep = steps_input
    encoder = encoder_of(loaded.model)
    device = next(encoder.parameters()).device
    with torch.no_grad():
        out = encoder(input_ids=torch.tensor([ids], device=device), token_type_ids=torch.tensor([segments], device=device),
                      attention_mask=torch.tensor([keep], device=device), output_hidden_states=True,
                      output_attentions=True)
    return _np(out.hidden_states[layer + 1][0]), _np(out.attentions[layer][0])


def difference_from_model(loaded: Loaded, text: str, text_b: str | None = None, layer: int = 0, head: int = 0,
                          max_tokens: int = 128, pad_to: int = 0) -> float:
    """The largest absolute difference between the composed steps and the model's own output of
    ``layer`` (and its attention), over every token and unit."""
    steps = layer_steps(loaded, text, text_b, layer, head, max_tokens, pad_to)
    _, ids, segments, keep = encode(loaded, text, text_b, max_tokens, pad_to)
    output, attentions = model_layer_output(loaded, (ids, segments, keep), layer)
    return float(max(np.abs(steps.output - output).max(), np.abs(steps.probs - attentions[head]).max()))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


@dataclass
class TokenFigures:
    """What the steps say about one query token: the numbers the page's captions state."""
    part_lengths: dict[str, float] | None  # layer 1 only: ‖E_token‖, ‖E_segment‖, ‖E_position‖
    query_length: float                    # ‖q‖ of the token in the chosen head
    key_lengths: tuple[float, float]       # the shortest and the longest ‖k‖ (padding included)
    top_key: int                           # the real token it scores highest against
    top_score: float                       # that score
    scale: float                           # √d, what the scores are divided by
    visible: int                           # positions this model's mask lets it see
    contributions: np.ndarray              # [T, d] P[token, j] · v_j: what each token adds to z
    top_contributor: int                   # the token whose contribution is longest
    top_contribution: float                # its length
    context_length: float                  # ‖z‖, the length of the sum
    attention_ratio: float                 # ‖attention output‖ / ‖X‖: the update against the residual
    attended_cosine: float                 # cos(X, Y): after the attention sub-layer
    active_inner: float                    # the share of inner units with GELU > 0.1
    output_cosine: float                   # cos(X, the layer's output)


def token_figures(steps: LayerSteps, token: int) -> TokenFigures:
    """The numbers of ``steps`` for query ``token`` (0-based position), each from the tensors."""
    parts = steps.embedding_parts
    row = steps.scores[token]
    top_key = int(np.argmax(np.where(steps.keep > 0, row, -np.inf)))
    contributions = steps.probs[token][:, None] * steps.v
    lengths = np.linalg.norm(contributions, axis=1)
    key_lengths = np.linalg.norm(steps.k, axis=1)
    x = steps.x[token]
    return TokenFigures(
        part_lengths=None if parts is None else {k: float(np.linalg.norm(parts[k][token]))
                                                 for k in ("token", "segment", "position")},
        query_length=float(np.linalg.norm(steps.q[token])),
        key_lengths=(float(key_lengths.min()), float(key_lengths.max())),
        top_key=top_key, top_score=float(row[top_key]), scale=math.sqrt(steps.head_size),
        visible=int((steps.mask[token] == 0).sum()),
        contributions=contributions, top_contributor=int(np.argmax(lengths)),
        top_contribution=float(lengths.max()), context_length=float(np.linalg.norm(steps.context[token])),
        attention_ratio=float(np.linalg.norm(steps.attention_out[token]) / np.linalg.norm(x)),
        attended_cosine=_cosine(x, steps.attended[token]),
        active_inner=float((steps.ff_gelu[token] > 0.1).mean()),
        output_cosine=_cosine(x, steps.output[token]))


def describe_row(steps: LayerSteps, query: int, top: int = 3) -> str:
    """One sentence on where ``query`` puts its attention in this head (computed)."""
    row = steps.probs[query]
    order = np.argsort(-row)[:top]
    parts = [f"{steps.tokens[j]!r} (position {j}, {row[j]:.0%})" for j in order if row[j] > 0]
    return (f"Token {steps.tokens[query]!r} (position {query}) puts most of its attention on "
            + ", ".join(parts) + ".")
