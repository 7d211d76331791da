"""A settings field with the sentence that says what it does, for every settings dataclass
(pre-training's and fine-tuning's in ``train/``, the masking of ``data/pretraining``): the
command line's --help shows that sentence (see ``cli/common.py``)."""
from __future__ import annotations

from dataclasses import MISSING, field


def setting(default=MISSING, help: str = "", *, factory=None, zero_is: str | None = None):
    """A field whose ``help`` sentence is written once beside it. ``factory`` makes a fresh default
    for each config (a list), as ``dataclasses.field(default_factory=...)``. ``zero_is``: a whole number that
    may be None ("not set") is typed as 0 on the pages' boxes ("0 = all"), and means what it says there on
    the command line too (the page's "0 = all" was refused there)."""
    metadata = {"help": help, **({"zero_is": zero_is} if zero_is else {})}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)
