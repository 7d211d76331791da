"""A run's process told to stop by a signal: Ctrl-C (SIGINT) or SIGTERM (``kill``, a scheduler, the
launcher's hard stop) is taken as the app's Stop is. The training ends at its next step, saves what a
Stop saves (a checkpoint to resume from) and says "stopped"; then the process ends with one sentence on
what happened and how to go on (:class:`StoppedBySignal`), with the exit code a shell gives a process
the signal ended (130 for Ctrl-C, 143 for SIGTERM), so a script still sees that it did not finish.

A second Ctrl-C aborts at once, for a person who will not wait for the save: the run is then "failed" at
the step it reached, and resumes from its last checkpoint. A signal the process was started to ignore
(``cmd &`` in a script ignores SIGINT) stays ignored.
"""
from __future__ import annotations

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


@contextmanager
def stopping_on_signals(run: Run):
    """While inside, SIGINT and SIGTERM ask ``run`` to stop (``Run.signalled``, which
    ``Run.stop_requested`` reads) instead of ending the process mid-step; the handlers that were there
    are put back on the way out. Off the main thread (the app's), where Python cannot set handlers,
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield run
        return

    def handler(signum, frame):
        if signum == signal.SIGINT and run.signalled is not None:  # a second Ctrl-C: no more waiting
            raise KeyboardInterrupt(f"interrupted again (a second Ctrl-C) before the stop was saved; "
                                    f"{what_to_do(run)}")
        run.signalled = run.signalled or signum

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
    return "it kept no checkpoint to resume from, so start it again"
