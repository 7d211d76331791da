"""Turning task examples into model inputs and batches (paper, Section 4, Figure 4).

The recipe of each task type lives with the rest of its behaviour in :mod:`.task_ops` (single
sentence, pair and regression: ``[CLS] A [SEP] (B [SEP])``; NER: the first WordPiece of each word
carries its tag; span QA: overlapping windows over long contexts; multiple choice: one sequence
per choice), together with the decoding that reads the outputs back (the best QA span, a tag per
word). These two functions are the entry points every training mode and the predict API call,
with the task's registry name.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..tokenizer import WordPieceTokenizer
from .task_ops import task_ops


def featurize(task: str, examples: Sequence[dict], tok: WordPieceTokenizer, label_names: list[str] | None,
              max_seq_length: int = 128, doc_stride: int = 64, max_query_length: int = 64) -> list[dict]:
    """One dict per model input (QA: per window) with ``example_index`` pointing back."""
    return task_ops(task).featurize(examples, tok, label_names, max_seq_length, doc_stride, max_query_length)


def collate(features: Sequence[dict], pad_id: int, task: str) -> dict[str, torch.Tensor]:
    """Pad to the longest input in the batch and stack: [B, T] (multiple choice: [B, C, T])."""
    return task_ops(task).collate(features, pad_id)
