"""Heads on top of the encoder: the two pre-training tasks and the fine-tuning tasks.

Pre-training (paper, Section 3.1): the masked-LM head predicts the original token at the
masked positions; the next-sentence head reads the pooled [CLS] vector and says IsNext or
NotNext. Fine-tuning (Section 3.2 and Figure 4) adds one small layer per task: a classifier
on [CLS] (single sentences and pairs), a classifier on every token (NER), start/end vectors
for span QA, and one score per choice for multiple choice (SWAG).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .bert import BertModel, EncoderOutput, init_weights
from .config import BertConfig

IGNORE = -100  # label value for positions that carry no loss (as in PyTorch's cross_entropy)


@dataclass
class HeadOutput:
    encoder: EncoderOutput
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None         # task heads: [B, labels], [B, T, labels], [B, C]
    mlm_logits: torch.Tensor | None = None     # [B, T, V]: every position (pre-training heads, no labels)
    masked_logits: torch.Tensor | None = None  # [N, V]: only the N positions that carry an MLM label
    nsp_logits: torch.Tensor | None = None     # [B, 2]: index 0 = IsNext, 1 = NotNext
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None   # [B, T]
    end_logits: torch.Tensor | None = None     # [B, T]

    @property
    def hidden_states(self):
        return self.encoder.hidden_states

    @property
    def attentions(self):
        return self.encoder.attentions


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, h):
        return self.LayerNorm(F.gelu(self.dense(h)))


class BertLMPredictionHead(nn.Module):
    """dense + GELU + LayerNorm, then the output projection *tied* to the input word
    embeddings (the same V x H matrix reads tokens in and writes them out) plus a bias. A checkpoint
    whose config unties them (``tie_word_embeddings: false``) has a decoder matrix of its own."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.decoder.weight = word_embeddings.weight  # tied: one Parameter, two names
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, h):
        # The bias goes into the matrix product (one addmm, as transformers computes it) rather
        # than a second pass over the [N, V] logits.
        return F.linear(self.transform(h), self.decoder.weight, self.bias)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.predictions = BertLMPredictionHead(config, word_embeddings)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def _name_labels(config: BertConfig, n: int) -> None:
    """transformers sizes a head from len(id2label): keep it consistent with the head we build."""
    if len(config.id2label) != n:
        config.id2label = {i: f"LABEL_{i}" for i in range(n)}


def _init_new(module: nn.Module, config: BertConfig) -> None:
    module.apply(lambda m: init_weights(m, config.initializer_range))


class BertForPreTraining(nn.Module):
    """BERT with both pre-training heads: loss = mean MLM cross-entropy + mean NSP cross-entropy.

    Speed: the V-way softmax of the MLM head is the most expensive part of a small BERT. When
    ``labels`` are given, the head runs only on the ~15% of positions that carry a label
    (the others could not change the loss): ``masked_logits`` [N, V], and no ``mlm_logits``
    [B, T, V]. That is what makes pre-training several times faster than computing logits for
    every token. Without labels (probes, the pages) ``mlm_logits`` covers every position.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config, self.bert.embeddings.word_embeddings)
        _init_new(self.cls.predictions.transform, config)
        _init_new(self.cls.seq_relationship, config)
        if not config.tie_word_embeddings:
            _init_new(self.cls.predictions.decoder, config)

    def forward(
        self,
        input_ids=None,
        token_type_ids=None,
        attention_mask=None,
        labels=None,                # [B, T] original ids at masked positions, IGNORE elsewhere
        next_sentence_label=None,   # [B] 0 = IsNext, 1 = NotNext
        mlm_positions=None,         # [N] the labelled positions' flat indices (row-major), optional
        **encoder_kwargs,
    ) -> HeadOutput:
        enc = self.bert(input_ids, token_type_ids, attention_mask, **encoder_kwargs)
        seq = enc.last_hidden_state                          # [B, T, H]
        nsp_logits = self.cls.seq_relationship(enc.pooler_output)  # [B, 2]
        out = HeadOutput(encoder=enc, nsp_logits=nsp_logits)
        if labels is None:
            out.mlm_logits = self.cls.predictions(seq)            # [B, T, V]
        else:
            if mlm_positions is None:
                chosen = labels != IGNORE                          # [B, T]
                masked, masked_labels = seq[chosen], labels[chosen]
            else:  # the same rows in the same order, found where the labels were made: a boolean mask
                # on the GPU would make the host wait for the encoder to learn how many there are
                masked = seq.flatten(0, 1).index_select(0, mlm_positions)
                masked_labels = labels.flatten().index_select(0, mlm_positions)
            out.masked_logits = self.cls.predictions(masked)       # [N, V]
            # no target at all (whole-word masking may skip every word of a short batch): a loss of 0 with its
            # graph, not the mean of nothing (NaN), which would spoil the step's update (N: a shape known here)
            out.mlm_loss = self.masked_lm_loss(out.masked_logits, masked_labels) if len(masked_labels) \
                else out.masked_logits.float().sum()
            out.loss = out.mlm_loss
        if next_sentence_label is not None:
            # IGNORE marks sequences that carry no NSP label (MLM-only text mixed into the batch): the
            # mean is over the labelled ones, and a batch of none adds 0 rather than 0/0 (no host sync).
            nsp_label = next_sentence_label.view(-1)
            labelled = (nsp_label != IGNORE).sum().clamp(min=1)
            out.nsp_loss = F.cross_entropy(nsp_logits.float(), nsp_label, ignore_index=IGNORE,
                                           reduction="sum") / labelled
            out.loss = out.nsp_loss if out.loss is None else out.loss + out.nsp_loss
        return out

    def masked_lm_loss(self, masked_logits, labels):
        """Mean cross-entropy over the N masked positions: [N, V] logits, [N] original ids. In
        float32 under autocast too, where bf16 would round the log-probabilities."""
        return F.cross_entropy(masked_logits.float(), labels)


class BertForSequenceClassification(nn.Module):
    """[CLS] -> pooler -> dropout -> linear. One output and MSE loss = regression (STS-B);
    ``problem_type="multi_label_classification"``: a sigmoid and binary cross-entropy per label."""

    def __init__(self, config: BertConfig, num_labels: int | None = None):
        super().__init__()
        self.config = config
        self.num_labels = num_labels or max(len(config.id2label), 1)
        _name_labels(config, self.num_labels)
        if self.num_labels == 1:
            config.problem_type = "regression"
        # multi-label: how much each label's positive examples weigh in its loss (a fine-tuning's setting,
        # BCEWithLogitsLoss's pos_weight; None weighs every example alike, as transformers does)
        self.pos_weight: torch.Tensor | None = None
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        _init_new(self.classifier, config)

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1 or self.config.problem_type == "regression"

    def forward(self, input_ids=None, token_type_ids=None, attention_mask=None, labels=None,
                **encoder_kwargs) -> HeadOutput:
        enc = self.bert(input_ids, token_type_ids, attention_mask, **encoder_kwargs)
        logits = self.classifier(self.dropout(enc.pooler_output))  # [B, labels]
        out = HeadOutput(encoder=enc, logits=logits)
        if labels is not None:
            if self.is_regression:
                out.loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            elif self.config.problem_type == "multi_label_classification":  # a sigmoid per label, as transformers
                out.loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), pos_weight=self.pos_weight)
            else:
                out.loss = F.cross_entropy(logits.float(), labels)
        return out


class BertForTokenClassification(nn.Module):
    """A linear layer on every token (NER). No pooler, as in transformers."""

    def __init__(self, config: BertConfig, num_labels: int | None = None):
        super().__init__()
        self.config = config
        self.num_labels = num_labels or len(config.id2label)
        _name_labels(config, self.num_labels)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        _init_new(self.classifier, config)

    def forward(self, input_ids=None, token_type_ids=None, attention_mask=None, labels=None,
                **encoder_kwargs) -> HeadOutput:
        enc = self.bert(input_ids, token_type_ids, attention_mask, **encoder_kwargs)
        logits = self.classifier(self.dropout(enc.last_hidden_state))  # [B, T, labels]
        out = HeadOutput(encoder=enc, logits=logits)
        if labels is not None:  # IGNORE on sub-tokens after the first and on special tokens
            out.loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)
        return out


class BertForQuestionAnswering(nn.Module):
    """Span QA (Section 4.2): a start vector S and an end vector E; P(start = i) is a softmax
    of S·T_i over the tokens. SQuAD 2.0 treats the span [CLS]..[CLS] as "no answer", so the
    null score is start_logits[:, 0] + end_logits[:, 0]."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        _name_labels(config, 2)  # transformers sizes qa_outputs by the number of labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)  # row 0 = S, row 1 = E
        _init_new(self.qa_outputs, config)

    def forward(self, input_ids=None, token_type_ids=None, attention_mask=None,
                start_positions=None, end_positions=None, **encoder_kwargs) -> HeadOutput:
        enc = self.bert(input_ids, token_type_ids, attention_mask, **encoder_kwargs)
        start, end = self.qa_outputs(enc.last_hidden_state).unbind(-1)  # [B, T] each
        out = HeadOutput(encoder=enc, start_logits=start, end_logits=end)
        if start_positions is not None and end_positions is not None:
            out.loss = (F.cross_entropy(start.float(), start_positions)
                        + F.cross_entropy(end.float(), end_positions)) / 2
        return out


class BertForMultipleChoice(nn.Module):
    """SWAG (Section 4.4): each (context, choice) pair is encoded on its own; a vector on the
    pooled [CLS] gives one score per choice and a softmax runs over the choices."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        _init_new(self.classifier, config)

    def forward(self, input_ids=None, token_type_ids=None, attention_mask=None, labels=None,
                **encoder_kwargs) -> HeadOutput:
        B, C, T = input_ids.shape  # [B, choices, T]
        flat = lambda x: None if x is None else x.reshape(B * C, T)  # noqa: E731
        enc = self.bert(flat(input_ids), flat(token_type_ids), flat(attention_mask), **encoder_kwargs)
        logits = self.classifier(self.dropout(enc.pooler_output)).view(B, C)  # [B, C]
        out = HeadOutput(encoder=enc, logits=logits)
        if labels is not None:
            out.loss = F.cross_entropy(logits.float(), labels)
        return out


# transformers' class name (config.json "architectures") -> ours. BertModel has no head.
ARCHITECTURES: dict[str, type[nn.Module]] = {
    "BertModel": BertModel,
    "BertForPreTraining": BertForPreTraining,
    "BertForSequenceClassification": BertForSequenceClassification,
    "BertForTokenClassification": BertForTokenClassification,
    "BertForQuestionAnswering": BertForQuestionAnswering,
    "BertForMultipleChoice": BertForMultipleChoice,
}
