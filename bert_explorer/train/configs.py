"""Reading a run's settings from a dict (a --config file, a run's config.json, a recipe).

A new run refuses a setting it does not know, with the closest known name, instead of
silently dropping it ("lerning_rate" would otherwise train at the default rate). A run written
by another version of the project still resumes and loads: its unknown keys are ignored with a
warning.
"""
from __future__ import annotations

import difflib
import warnings
from dataclasses import fields

# Keys that runs and configs carry beside the settings: the run's kind, the LTR head an
# ablation cell used, and `amp`, the precision switch of earlier versions (read by precision_from).
NOT_SETTINGS = {"kind", "ltr_head", "amp", "world_size"}  # records kept beside the settings


def settings_of(cls, d: dict, strict: bool = True) -> dict:
    """The entries of ``d`` that are fields of the dataclass ``cls`` (``precision`` left to the
    caller). Unknown keys raise ValueError when ``strict``, else are dropped with a warning."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names - NOT_SETTINGS)
    if unknown:
        described = []
        for k in unknown:
            close = difflib.get_close_matches(k, names, n=1)
            described.append(repr(k) + (f" (did you mean {close[0]!r}?)" if close else ""))
        what = f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(described)}"
        if strict:
            raise ValueError(f"{what}; fix or remove {'them' if len(unknown) > 1 else 'it'}")
        warnings.warn(f"{what} ignored (written by another version of BERT Explorer)", stacklevel=3)
    return {k: v for k, v in d.items() if k in names and k != "precision"}


# Shared bounds of both kinds of run. A step adds up at most this many batches: 32 x 1024 is beyond any recipe of
# the paper's (a --grad-accum of 100,000 was taken by pretrain, two days on a CPU, while finetune refused it).
MAX_GRAD_ACCUM = 1024
# What a seed does not fix on its own, said in its help (a CPU speed-up draws dropout masks its own way).
SAME_DRAWS = (" On the CPU a run may draw its dropout masks in a faster way this CPU measured (its log names the "
              "speed-ups chosen): BERT_EXPLORER_CPU_LEVERS=none draws alike on every run of a seed.")
MAX_SEED = 2**32 - 1  # what every random generator a run seeds takes (a larger one failed, "Overflow when unpacking")


def seed_refusal(seed) -> str | None:
    """One sentence where ``seed`` is no seed a run can use, else None."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        return f"seed must be a whole number from 0 to {MAX_SEED:,}, not {seed!r}"
    return None
