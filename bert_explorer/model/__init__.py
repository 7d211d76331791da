"""Our own PyTorch BERT: config, encoder and heads (Devlin et al. 2019)."""
from .bert import BertModel, EncoderOutput
from .config import PRESETS, BertConfig, preset
from .heads import (
    ARCHITECTURES,
    IGNORE,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    HeadOutput,
)

__all__ = [
    "ARCHITECTURES", "IGNORE", "PRESETS", "BertConfig", "BertForMultipleChoice", "BertForPreTraining",
    "BertForQuestionAnswering", "BertForSequenceClassification", "BertForTokenClassification",
    "BertModel", "EncoderOutput", "HeadOutput", "preset",
]
