"""A run's process told to stop by a signal: Ctrl-C (SIGINT) or SIGTERM (``kill``, a scheduler, the
launcher's hard stop) is taken as the app's Stop is. The training ends at its next step, saves what a
Stop saves (a checkpoint to resume from) and says "stopped"; then the process ends with one sentence on
what happened and how to go on (:class:`StoppedBySignal`), with the exit code a shell gives a process
the signal ended (130 for Ctrl-C, 143 for SIGTERM), so a script still sees that it did not finish.

The first signal is said on stderr at once: the next step may be minutes away while the run reads its
data. A second signal (Ctrl-C or SIGTERM) ends the process at once, for a person who will not wait for the
save, or a container's stop that follows its SIGTERM with a kill: the run is then "failed" at the step it
reached, and resumes from its last checkpoint. A signal the process was started to ignore
(``cmd &`` in a script ignores SIGINT) stays ignored.
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

from .run import Run

SAID = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped by SIGTERM"}


class StoppedBySignal(KeyboardInterrupt):
    """The run stopped cleanly because its process was signalled; the message says where, and how to
    go on. A KeyboardInterrupt, so that whatever handles Ctrl-C (the CLI's exit code, an ablation's
    stop) handles it, and no "a cell failed" handler swallows it."""

    def __init__(self, signum: int, sentence: str):
        super().__init__(sentence)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


def said(signum: int) -> str:
    """"interrupted (Ctrl-C)", "stopped by SIGTERM": what the signal did, as a sentence begins."""
    return SAID.get(signum, f"stopped by {signal.Signals(signum).name}")


NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


@contextmanager
def stopping_on_signals(run: Run, resumable: bool = True):
    """While inside, SIGINT and SIGTERM ask ``run`` to stop (``Run.signalled``, which
    ``Run.stop_requested`` reads) instead of ending the process mid-step, and say so on stderr at once (the
    next step may come only after the data is read); a second signal of either kind ends the process at
    once. The handlers that were there are put back on the way out. Off the main thread (the app's), where
    Python cannot set handlers, nothing changes. ``resumable``: whether a run of these settings can be
    resumed (what the sentences propose)."""
    if threading.current_thread() is not threading.main_thread():
        yield run
        return

    def handler(signum, frame):
        first = run.signalled
        if first is not None:  # a second signal: no more waiting (a container's stop, a person who will not wait)
            again = "a second time" if signum == first else f"after {NAMES.get(first, said(first))}"
            raise KeyboardInterrupt(f"{NAMES.get(signum, said(signum))} {again}, before the stop was saved: "
                                    f"ended at once; {what_to_do(run, resumable)}")
        run.signalled = signum
        # (os.write, not print: a handler runs between two bytecodes, perhaps inside a print of tqdm's)
        os.write(2, f"\nbert-explorer: {said(signum)}: the run stops at its next step and saves what a Stop "
                    f"saves; {NAMES.get(signum, 'the signal')} again ends it at once\n".encode())

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)
    try:
        yield run
    finally:
        for signum, before in previous.items():
            # (None: a handler set outside Python, which cannot be put back; the default is the nearest)
            signal.signal(signum, before if before is not None else signal.SIG_DFL)


def what_to_do(run: Run, resumable: bool = True) -> str:
    """How a run cut short goes on: from its last checkpoint with --resume, or, with none (or a run of a
    kind that does not resume, ``resumable=False``), from the start."""
    if resumable and run.resumable_checkpoints():
        return f"continue with `bert-explorer {run.config().get('kind', 'pretrain')} --output {run.path} --resume`"
    return "it kept no checkpoint to resume from, so start it again with a new --output"
