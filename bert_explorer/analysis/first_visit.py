"""What a page computes on its first visit for a model, declared where that work lives.

``@first_visit(page, what)`` on a function ``work(loaded)`` that computes and keeps its result on disk:
``bert-explorer prepare-class`` (``lesson.py``) runs every one before class, so a page's first visit in
front of the class reads what was kept. This module imports nothing of the package: every analysis
module may use it.
"""
from __future__ import annotations

from collections.abc import Callable

FIRST_VISIT: list[tuple[str, str, Callable]] = []  # (page, what, work(loaded))


def first_visit(page: str, what: str):
    """Declare ``work(loaded)`` as what ``page`` computes on its first visit for a model."""
    def declare(work):
        FIRST_VISIT.append((page, what, work))
        return work
    return declare
