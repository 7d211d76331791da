"""A fine-tuning run followed from its folder while it trains here: a progress bar from its status.json and its
log's lines (each evaluation's dev scores, early stopping, the learning rate kept) on stderr.

The training itself writes only into the run's folder (the app reads the same files), so without this a
`bert-explorer finetune` said its estimate and then nothing until its result, minutes later. A thread reads the
two files once a second; the main thread trains undisturbed. The lines written before the run's first own line
("device", or "resuming" for a resume; the data's notes and warnings) are skipped: the command said them before
the run started; so is the stop's sentence a signal ends it with, which the command prints itself.
"""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm

from ..runs.run import Run

POLL_S = 1.0
# (train.finetune._run: the first lines the command has not said itself; a resume's were skipped, and it said
# nothing of the step it went on from)
FIRST_OWN_LINES = ("device ", "resuming at step ")


class Follower:
    """What a run has written since ``start``: its new log lines and its step."""

    def __init__(self, run_dir: str | Path, bar: bool, stream=None):
        self.run, self.stream = Run(run_dir), stream or sys.stderr
        log = self.run.path / "log.txt"
        self.offset = log.stat().st_size if log.is_file() else 0  # a resumed run's earlier lines are not said again
        self.partial, self.own = "", False
        self.said_by_the_command = None  # a last line the command prints itself (a signal's stop): not said twice
        self.want_bar, self.bar = bar, None  # (drawn once the run knows its steps: not while it reads its data)

    def poll(self) -> None:
        """Say the log's new whole lines and move the bar to the step the run has reached."""
        try:
            with (self.run.path / "log.txt").open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:  # (not written yet)
            data = b""
        self.offset += len(data)
        *lines, self.partial = (self.partial + data.decode("utf-8", "replace")).split("\n")
        for line in lines:
            message = line.split(" ", 1)[-1]  # (after its time)
            self.own = self.own or message.startswith(FIRST_OWN_LINES)
            if self.own and line.strip() and message != self.said_by_the_command:
                if self.bar is not None:  # (above the bar; tqdm.write's own default is stdout, the result's)
                    tqdm.write(line, file=self.stream)
                else:
                    print(line, file=self.stream, flush=True)
        if self.want_bar:
            status = self.run.status()
            total, step = status.get("max_steps"), status.get("step")
            if not isinstance(total, int):
                return
            if self.bar is None:
                self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=self.stream)
            if total != self.bar.total:
                self.bar.reset(total=total)  # (a learning-rate grid: each rate's run has its own steps)
            if isinstance(step, int) and step != self.bar.n:
                if step < self.bar.n:  # the next learning rate of a grid starts again at step 0
                    self.bar.reset(total=total)
                self.bar.update(step - self.bar.n)
                loss = (status.get("last") or {}).get("loss")
                if isinstance(loss, (int, float)):
                    self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def following(run_dir: str | Path, bar: bool = True):
    """While inside, the run in ``run_dir`` is followed on stderr (``Follower``); on the way out, what it wrote
    last is said too."""
    follower = Follower(run_dir, bar)
    done = threading.Event()

    def watch():
        while not done.wait(POLL_S):
            follower.poll()

    thread = threading.Thread(target=watch, name="follow-run", daemon=True)
    thread.start()
    try:
        yield follower
    except BaseException as e:
        follower.said_by_the_command = str(e)  # (the stop's sentence: the command prints it, once)
        raise
    finally:
        done.set()
        thread.join()
        follower.poll()
        follower.close()
