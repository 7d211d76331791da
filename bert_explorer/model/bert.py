"""The BERT encoder (Devlin et al. 2019, Section 3 and Figure 2).

Input representation = token embedding + segment embedding + position embedding, then
LayerNorm and dropout. L identical Transformer encoder layers follow (Vaswani et al. 2017,
"post-LN": LayerNorm after each residual sum). The pooler is a dense+tanh over the first
token, [CLS], whose output feeds sentence-level heads such as next-sentence prediction.

Module and parameter names match Hugging Face's ``modeling_bert.py`` on purpose, so that a
``state_dict`` moves between the two implementations without a mapping table.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor                  # [B, T, H]
    pooler_output: torch.Tensor | None = None        # [B, H], tanh(W·h_[CLS] + b)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L+1 of [B, T, H]: embeddings, layer 1..L
    attentions: tuple[torch.Tensor, ...] | None = None     # L of [B, A, T, T], rows sum to 1


class BertEmbeddings(nn.Module):
    """E = LayerNorm(E_token + E_segment + E_position), then dropout (paper, Figure 2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, H)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, H)
        self.LayerNorm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def parts(self, input_ids, token_type_ids=None, position_ids=None, inputs_embeds=None):
        """The three summands of the input representation, each [B, T, H]."""
        B, T = input_ids.shape if input_ids is not None else inputs_embeds.shape[:2]
        device = self.position_embeddings.weight.device
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence of {T} tokens is longer than max_position_embeddings "
                f"({self.position_embeddings.num_embeddings})"
            )
        if position_ids is None:
            position_ids = torch.arange(T, device=device).unsqueeze(0)  # [1, T]
        if token_type_ids is None:
            token_type_ids = torch.zeros(B, T, dtype=torch.long, device=device)
        token = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        return token, self.token_type_embeddings(token_type_ids), self.position_embeddings(position_ids)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, inputs_embeds=None):
        token, segment, position = self.parts(input_ids, token_type_ids, position_ids, inputs_embeds)
        return self.dropout(self.LayerNorm(token + segment + position))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention: softmax(QKᵀ/√d + mask) V, A heads in parallel."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_size = config.head_size
        H = config.hidden_size
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H)
        self.value = nn.Linear(H, H)
        # On the probabilities, as the original BERT code does: it drops whole tokens to attend to.
        self.dropout = nn.Dropout(config.attention_dropout)
        self.scale = self.head_size**-0.5  # 1/√d keeps the logits O(1) as d grows

    def _split_heads(self, x):  # [B, T, H] -> [B, A, T, d]
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_size).transpose(1, 2)

    def forward(self, hidden_states, mask=None, head_mask=None, output_attentions=False):
        # mask: additive [B, 1, 1|T, T] (0 = attend, very negative = don't) or None.
        q = self._split_heads(self.query(hidden_states))
        k = self._split_heads(self.key(hidden_states))
        v = self._split_heads(self.value(hidden_states))
        probs = None
        if output_attentions:
            # Explicit path: the same arithmetic as the fused one, but we keep the probabilities.
            scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # [B, A, T, T]
            if mask is not None:
                scores = scores + mask
            probs = scores.softmax(dim=-1)
            context = torch.matmul(self.dropout(probs), v)  # [B, A, T, d]
        else:
            # Fused path: PyTorch's kernel (flash / memory-efficient where available), given the
            # same stated scale rather than relying on its default of 1/√d.
            p_drop = self.dropout.p if self.training else 0.0
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop, scale=self.scale)
        if head_mask is not None:
            # Multiplying a head's probabilities by m is the same as multiplying its context
            # by m, which lets the fused kernel stay on. [A] -> [1, A, 1, 1]
            context = context * head_mask.view(1, -1, 1, 1).to(context.dtype)
        B, A, T, d = context.shape
        return context.transpose(1, 2).reshape(B, T, A * d), probs


class BertSelfOutput(nn.Module):
    """Project the heads back to H, dropout, add the residual, LayerNorm (post-LN)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden_states, residual):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states, mask=None, head_mask=None, output_attentions=False):
        context, probs = self.self(hidden_states, mask, head_mask, output_attentions)
        return self.output(context, hidden_states), probs


class BertIntermediate(nn.Module):
    """The first half of the position-wise feed-forward network: H -> 4H, exact (erf) GELU."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, hidden_states):
        return F.gelu(self.dense(hidden_states))


class BertOutput(nn.Module):
    """The second half: 4H -> H, dropout, residual, LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden_states, residual):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + residual)


class BertLayer(nn.Module):
    """One Transformer encoder block: self-attention then feed-forward, each post-LN."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states, mask=None, head_mask=None, output_attentions=False):
        attended, probs = self.attention(hidden_states, mask, head_mask, output_attentions)
        return self.output(self.intermediate(attended), attended), probs


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))


class BertPooler(nn.Module):
    """tanh(W·h_[CLS] + b): the sentence-level summary used by NSP and classifiers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states):
        return torch.tanh(self.dense(hidden_states[:, 0]))


def init_weights(module: nn.Module, std: float) -> None:
    """The original initialisation: N(0, 0.02) weights, zero biases, LayerNorm = identity."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def extended_attention_mask(attention_mask, causal: bool, T: int, dtype, device, has_padding: bool | None = None):
    """[B, T] keep-mask (1 = real token, 0 = padding) -> additive [B, 1, T|1, T] or None.

    Padding keys get the most negative finite number, so their softmax weight is exactly 0.
    With ``causal`` each position also cannot see the positions to its right (LTR model).
    ``has_padding``: whether the mask masks anything, where the caller knows it without reading the
    device (the host that padded the batch); None looks, which on a GPU makes the host wait for it.
    """
    keep = None
    if has_padding is None and attention_mask is not None:
        has_padding = not bool(attention_mask.all())
    if attention_mask is not None and has_padding:
        keep = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, T]
    if causal:
        tri = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None, None]  # [1, 1, T, T]
        keep = tri if keep is None else keep & tri
    if keep is None:
        return None  # nothing to mask: lets SDPA pick its fastest kernel
    mask = torch.zeros(keep.shape, dtype=dtype, device=device)
    return mask.masked_fill(~keep, torch.finfo(dtype).min)


class BertModel(nn.Module):
    """Embeddings -> L encoder layers -> (optional) pooler."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(lambda m: init_weights(m, config.initializer_range))

    def forward(
        self,
        input_ids=None,
        token_type_ids=None,
        attention_mask=None,
        position_ids=None,
        inputs_embeds=None,
        head_mask=None,             # [L, A] or [A]: 1 keeps a head, 0 silences it
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        has_padding: bool | None = None,  # known on the host: see extended_attention_mask
    ) -> EncoderOutput:
        h = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)  # [B, T, H]
        T = h.shape[1]
        mask = extended_attention_mask(attention_mask, self.config.causal, T, h.dtype, h.device, has_padding)
        if head_mask is not None and head_mask.dim() == 1:
            head_mask = head_mask.expand(self.config.num_layers, -1)
        hidden_states = [h] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i, layer in enumerate(self.encoder.layer):
            h, probs = layer(h, mask, None if head_mask is None else head_mask[i], output_attentions)
            if output_hidden_states:
                hidden_states.append(h)
            if output_attentions:
                attentions.append(probs)
        return EncoderOutput(
            last_hidden_state=h,
            pooler_output=self.pooler(h) if self.pooler is not None else None,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )
