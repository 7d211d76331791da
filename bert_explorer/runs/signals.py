"""A run's process told to stop by a signal: Ctrl-C (SIGINT) or SIGTERM (``kill``, a scheduler, the
launcher's hard stop) is taken as the app's Stop is. The training ends at its next step, saves a
checkpoint to resume from and says "stopped"; then the process ends with one sentence on what happened
and how to go on (:class:`StoppedBySignal`), with the exit code a shell gives a process the signal ended
(130 for Ctrl-C, 143 for SIGTERM), so a script still sees that it did not finish.

The first signal is said on stderr at once. One that comes before the process has trained a step (while
the run reads and tokenises its data, or builds its model: minutes on a large corpus) ends it at once,
"stopped": nothing is trained yet that a save would keep, and a container's stop may not wait for the data
to be read. A second signal (Ctrl-C or SIGTERM) ends the process at once, for a person who will not wait for the
save, or a container's stop that follows its SIGTERM with a kill: the run is then "failed" at the step it
reached, and resumes from its last checkpoint. A signal the process was started to ignore
(``cmd &`` in a script ignores SIGINT) stays ignored.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

from .run import Run

SAID = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped by SIGTERM"}


class StoppedBySignal(KeyboardInterrupt):
    """The run stopped cleanly because its process was signalled; the message says where, and how to
    go on. A KeyboardInterrupt, so that whatever handles Ctrl-C (the CLI's exit code, an ablation's
    stop) handles it, and no "a cell failed" handler swallows it. ``before_a_step``: raised by the signal
    itself before the process trained a step; the run is "stopped" (:func:`stopping_on_signals` says so),
    not "failed"."""

    def __init__(self, signum: int, sentence: str, before_a_step: bool = False):
        super().__init__(sentence)
        self.signum, self.before_a_step = signum, before_a_step

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


def said(signum: int) -> str:
    """"interrupted (Ctrl-C)", "stopped by SIGTERM": what the signal did, as a sentence begins."""
    return SAID.get(signum, f"stopped by {signal.Signals(signum).name}")


NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


@contextmanager
def stopping_on_signals(run: Run, resumable: bool = True, main: bool = True):
    """While inside, SIGINT and SIGTERM ask ``run`` to stop (``Run.signalled``, which
    ``Run.stop_requested`` reads) instead of ending the process mid-step, and say so on stderr at once;
    before the process has trained a step (``Run.step_reached``), the first signal ends it at once, the
    run "stopped"; a second signal of either kind ends the process at once. The handlers that were there
    are put back on the way out. Off the main thread (the app's), where Python cannot set handlers,
    nothing changes. ``resumable``: whether a run of these settings can be resumed (what the sentences
    propose); ``main``: whether this process writes the run's status (one rank of several does)."""
    if threading.current_thread() is not threading.main_thread():
        yield run
        return
    def handler(signum, frame):
        # (a rank that is not the first takes no stop: only the first's counts, Pretraining.stop_requested)
        first = run.signalled if main else getattr(run, "rank_signalled", None)
        if first is not None:  # a second signal: no more waiting (a container's stop, a person who will not wait)
            again = "a second time" if signum == first else f"after {NAMES.get(first, said(first))}"
            saved = run.status().get("state") in ("stopped", "finished")  # (it said "before" of a saved stop)
            raise KeyboardInterrupt(f"{NAMES.get(signum, said(signum))} {again}, "
                                    f"{'after' if saved else 'before'} the stop was saved: ended at once; "
                                    f"{what_to_do(run, resumable)}")
        if not main and run.step_reached is not None:  # it promised a stop that never came, trained on to the end,
            run.rank_signalled = signum  # then said "stopped by SIGTERM after its last step" and exited 143
            os.write(2, f"\nbert-explorer: {said(signum)}: this process is not the run's first (rank 0), which alone "
                        "stops the run: it stops at its next step if that one was signalled too (Ctrl-C in "
                        "torchrun's terminal signals every process), else signal that one, or torchrun; "
                        f"{NAMES.get(signum, 'the signal')} again ends this process at once\n".encode())
            return
        run.signalled = signum
        if run.step_reached is None:  # reading data or building the model: no step of this process to save
            raise StoppedBySignal(signum, f"{said(signum)} before its first step, nothing trained to save; "
                                          f"{what_to_do(run, resumable, before_a_step=True)}", before_a_step=True)
        # (os.write, not print: a handler runs between two bytecodes, perhaps inside a print of tqdm's)
        os.write(2, f"\nbert-explorer: {said(signum)}: the run stops at its next step and saves a checkpoint to "
                    f"resume from; {NAMES.get(signum, 'the signal')} again ends it at once\n".encode())

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)
    try:
        yield run
    except StoppedBySignal as e:
        if e.before_a_step and main:  # stopped, not failed: what it had is as it was
            run.write_status(state="stopped", finished=time.time())
            run.log(str(e))
        raise
    finally:
        for signum, before in previous.items():
            # (None: a handler set outside Python, which cannot be put back; the default is the nearest)
            signal.signal(signum, before if before is not None else signal.SIG_DFL)


def processes_of(run: Run) -> int:
    """How many processes trained the run (torchrun's; 1 where it does not say)."""
    world = run.status().get("world_size")
    return world if isinstance(world, int) and world > 1 else 1


def command_of(run: Run) -> str:
    """The command that goes on with a run: a run of several processes goes on with as many
    (train.pretrain.world_size_refusal)."""
    world = processes_of(run)
    return f"torchrun --nproc_per_node {world} -m bert_explorer.cli" if world > 1 else "bert-explorer"


def what_to_do(run: Run, resumable: bool = True, before_a_step: bool = False) -> str:
    """How a run cut short goes on: from its last checkpoint with --resume (a pre-training with none
    resumes from step 0 with its settings), or, with none (or a run of a kind that does not resume,
    ``resumable=False``), from the start."""
    kind = run.config().get("kind", "pretrain")
    command = command_of(run)
    if resumable and run.resumable_checkpoints():
        return f"continue with `{command} {kind} --output {run.path} --resume`"
    if resumable and before_a_step and kind == "pretrain":
        return f"start it from step 0 with its settings with `{command} pretrain --output {run.path} --resume`"
    if before_a_step:  # nothing logged: its folder takes the same command again (it said "a new --output")
        return "start it again with the same command"
    return "it kept no checkpoint to resume from, so start it again with a new --output"
