"""A settings field with the sentence that says what it does, for every settings dataclass
(pre-training's and fine-tuning's in ``train/``, the masking of ``data/pretraining``): the
command line's --help shows that sentence (see ``cli/common.py``)."""
from __future__ import annotations

from dataclasses import MISSING, field


def setting(default=MISSING, help: str = "", *, factory=None):
    """A field whose ``help`` sentence is written once beside it. ``factory`` makes a fresh default
    for each config (a list), as ``dataclasses.field(default_factory=...)``."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})
