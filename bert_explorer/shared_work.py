"""Work a class shares: each result computed once for every session, heavy work one request at a time.

A server that teaches a class answers thirty browser sessions with one process. Two things keep one
student from taking it from the others:

* :class:`Results` keeps what the model computed, under the weights and the inputs that made it, for
  every session: the class asking the page's example at the same moment shares one computation (the
  second asker waits for the first instead of computing again). It lives in this process and in no
  framework's cache, so no message a browser can send empties it; it is bounded in bytes and drops the
  least recently used result first.
* :class:`Queue` lets heavy work (Integrated Gradients, the layer probes) run ``AT_ONCE_ENV`` requests at
  a time (default one) in the order they came; the others wait, and each waiting request is told its
  place so that its page can show it.

Nothing here imports Streamlit: the app's pages reach it through ``app/state.py``.
"""
from __future__ import annotations

import contextvars
import itertools
import os
import pickle
import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager
from typing import Any, Callable

AT_ONCE_ENV = "BERT_EXPLORER_HEAVY_AT_ONCE"   # heavy requests run at once on this server (default 1)
RESULTS_ENV = "BERT_EXPLORER_RESULTS_MB"       # memory kept for computed results (default 500 MB)
RESULTS_MB = 500.0
WAIT_REPORT_S = 0.5                            # how often a waiting request hears its place again


def _setting(env: str, default: float) -> float:
    """A positive, finite number from ``env``, else ``default`` (NaN and infinity are no setting)."""
    try:
        value = float(os.environ.get(env) or default)
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default


class Queue:
    """First come, first served, ``at_once`` at a time. ``with queue.turn(waiting): ...`` runs the
    block when the request's turn has come; until then ``waiting(ahead)`` is called every
    ``WAIT_REPORT_S`` seconds with the number of requests before it (running ones included)."""

    def __init__(self, at_once: int | None = None):
        self._fixed = at_once
        self._cond = threading.Condition()
        self._waiting: deque[int] = deque()
        self._running = 0
        self._tickets = itertools.count()

    @property
    def at_once(self) -> int:
        return self._fixed or max(1, int(_setting(AT_ONCE_ENV, 1)))  # (0.5 made it 0: heavy work waited for ever)

    def ahead(self, ticket: int) -> int:
        with self._cond:
            return self._ahead(ticket)

    def _ahead(self, ticket: int) -> int:
        return self._running + list(self._waiting).index(ticket)

    @contextmanager
    def turn(self, waiting: Callable[[int], None] | None = None):
        with self._cond:
            ticket = next(self._tickets)
            self._waiting.append(ticket)
            try:
                while not (self._waiting[0] == ticket and self._running < self.at_once):
                    ahead = self._ahead(ticket)
                    if waiting is not None:
                        self._cond.release()  # the report may draw on a page: never under the lock
                        try:
                            waiting(ahead)
                        finally:
                            self._cond.acquire()
                    self._cond.wait(WAIT_REPORT_S)
            except BaseException:  # a session that stops waiting gives its place up
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.popleft()
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def busy(self) -> tuple[int, int]:
        """(running, waiting) now."""
        with self._cond:
            return self._running, len(self._waiting)


HEAVY = Queue()  # the server's one queue for heavy work


def waited(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 1 else "a moment"


def wait_sentence(ahead: int, since: float) -> str:
    """What a waiting page says (``app.state.heavy_turn``): its place and how long it has waited."""
    return (f"Waiting for the server: {ahead} heavy request{'s' if ahead != 1 else ''} ahead of yours (it runs "
            f"{HEAVY.at_once} at a time so that one user cannot slow the class down); waited "
            f"{waited(time.monotonic() - since)}.")


def rough_bytes(value, _seen: set | None = None, _depth: int = 0) -> int:
    """The bytes of the arrays and tensors ``value`` holds (through dicts, lists, tuples and objects' attributes, a
    model's weights among them): what a shared result costs the server's memory, weighed without pickling it
    (a page's attention maps, 75 MB each, were kept eight at a time and counted as nothing). A memory-mapped
    array is the disk's, not counted; a list of numbers counts 8 bytes a number; anything else counts nothing."""
    seen = set() if _seen is None else _seen
    if id(value) in seen or _depth > 64:
        return 0
    seen.add(id(value))
    kind = type(value).__module__.split(".")[0]
    if kind == "numpy":
        return 0 if type(value).__name__ == "memmap" else int(getattr(value, "nbytes", 0))
    if kind == "torch" and hasattr(value, "element_size") and hasattr(value, "numel"):
        return int(value.element_size() * value.numel())
    if isinstance(value, dict):
        return sum(rough_bytes(v, seen, _depth + 1) for v in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        first = next(iter(value), None)
        if isinstance(first, (int, float)) or first is None:  # numbers: 8 bytes each, not walked one by one (a
            return 8 * len(value)                               # 512 x 512 map of floats took 0.15 s)
        return sum(rough_bytes(v, seen, _depth + 1) for v in value)
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return len(value) if isinstance(value, (str, bytes)) else 0
    return rough_bytes(getattr(value, "__dict__", None) or {}, seen, _depth + 1)


class Results:
    """Computed results kept for every session: one computation per key, at most ``budget`` bytes.

    A result is stored pickled (each caller gets its own copy, as if computed for it: a page that
    changes what it got changes nobody else's) and counts its pickled size; a result larger than the
    whole budget is handed back and not kept. ``shared=True`` keeps one object for all instead, for
    things nobody changes in place (a built figure, a loaded model): they count what ``size(value)``
    says, else the arrays and tensors they hold (:func:`rough_bytes`: pickling a figure to weigh it would
    cost more than keeping it), and one larger than the budget is kept alone. ``budget`` says the bytes to keep at most (asked at each store)."""

    def __init__(self, budget: Callable[[], float]):
        self._budget = budget
        self._lock = threading.Lock()
        self._items: OrderedDict[Any, tuple[bool, Any, int]] = OrderedDict()  # key -> (pickled, value, bytes)
        self._computing: dict[Any, threading.Lock] = {}
        self._bytes = 0

    @property
    def budget(self) -> float:
        return self._budget()

    def _get(self, key):
        with self._lock:
            if key not in self._items:
                return False, None
            self._items.move_to_end(key)
            pickled, value, _ = self._items[key]
        return True, pickle.loads(value) if pickled else value

    def holds(self, key) -> bool:
        """Is a result kept under ``key`` now (computed by anyone, not evicted)?"""
        with self._lock:
            return key in self._items

    def get_or_compute(self, key, compute: Callable[[], Any], *, shared: bool = False,
                       max_entries: int | None = None, group: Any = None, size: Callable[[Any], int] | None = None):
        """The result kept under ``key``, else ``compute()`` once (other callers of the same key wait
        for it) and kept. ``max_entries`` bounds the entries of one ``group`` (a page's function)."""
        found, value = self._get(key)
        if found:
            return value
        with self._lock:
            one = self._computing.setdefault(key, threading.Lock())
        with one:
            found, value = self._get(key)
            if found:
                return value
            try:
                value = computed(group, compute)
                if shared:
                    self._put(key, (False, value, size(value) if size else rough_bytes(value)), max_entries, group)
                    return value
                blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                if len(blob) <= self.budget:
                    self._put(key, (True, blob, len(blob)), max_entries, group)
            finally:
                with self._lock:
                    self._computing.pop(key, None)
        return pickle.loads(blob)

    def _put(self, key, item, max_entries, group) -> None:
        with self._lock:
            self._drop(key)
            self._items[key] = item
            self._bytes += item[2]
            if max_entries is not None:
                mine = [k for k in self._items if isinstance(k, tuple) and k and k[0] == group]
                for k in mine[:max(0, len(mine) - max_entries)]:
                    self._drop(k)
            while len(self._items) > 1 and self._bytes > self.budget:
                self._drop(next(iter(self._items)))  # the least recently used

    def _drop(self, key) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self._bytes -= item[2]

    def size(self) -> int:
        """Bytes kept now."""
        with self._lock:
            return self._bytes

    def held(self) -> list[tuple[Any, int]]:
        """(key, bytes) of what is kept, least recently used first."""
        with self._lock:
            return [(k, size) for k, (_, _, size) in self._items.items()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        """Forget everything (tests; no browser message reaches this)."""
        with self._lock:
            self._items.clear()
            self._bytes = 0


RESULTS = Results(lambda: _setting(RESULTS_ENV, RESULTS_MB) * 1e6)  # the server's store of computed results

# Who is told of each result computed rather than read back (a test or a bench of first visits): called
# with the result's group and its own seconds (a result computed inside another one is told apart, and
# its time is not counted twice). Both stores report: :class:`Results` and the disk cache.
WATCHERS: list[Callable[[Any, float], None]] = []
_inside = threading.local()


class NotKept(Exception):
    """What :func:`computed` raises inside :func:`only_kept`: this result is not kept, it would be computed."""


_only_kept = contextvars.ContextVar("only_kept", default=False)


@contextmanager
def only_kept():
    """Inside the block nothing is computed: a result that is not kept raises :class:`NotKept` instead.
    What a page would compute on its first visit is found by running that visit's work here."""
    token = _only_kept.set(True)
    try:
        yield
    finally:
        _only_kept.reset(token)


def asking_only_kept() -> bool:
    """Is this inside :func:`only_kept` (a kept result that would be refreshed counts as kept there)?"""
    return _only_kept.get()


def computed(group: Any, compute: Callable[[], Any]):
    """``compute()``, timed for :data:`WATCHERS` when there are any; inside :func:`only_kept`, NotKept."""
    if _only_kept.get():
        raise NotKept(str(group))
    if not WATCHERS:
        return compute()
    outer = getattr(_inside, "nested", None)
    _inside.nested = [0.0]
    start = time.perf_counter()
    try:
        value = compute()
    finally:
        took = time.perf_counter() - start
        nested, _inside.nested = _inside.nested[0], outer
        if outer is not None:
            outer[0] += took
    for watcher in list(WATCHERS):
        watcher(group, took - nested)
    return value
