"""Text for BERT: corpora (documents as lists of sentences) and pre-training instances.

``corpora`` reads text files and the built-in real corpora that ship inside installed
packages (no download); ``pretraining`` turns documents into the masked-LM and
next-sentence instances of the paper (Section 3.1, Appendix A) and batches them.
"""
from .corpora import (BUILTIN_CORPORA, CorpusInfo, Document, load_corpus, split_documents,
                      tiny_corpus)
from .pretraining import Instance, MaskingConfig, collate, create_instances, mask_tokens

__all__ = [
    "BUILTIN_CORPORA", "CorpusInfo", "Document", "load_corpus", "split_documents", "tiny_corpus",
    "Instance", "MaskingConfig", "collate", "create_instances", "mask_tokens",
]
