"""The share of the CPU a job gets on a busy machine, said before it starts and then taken.

    .venv/bin/python bench/busy_share.py [--cases 1,2,2n] [--settle 65]

A fixed piece of training work (15 forward and backward passes of one encoder layer, H=256, 8 x 128
positions, one thread: what a background job gets on a 2-core machine) runs as the app's background jobs
run (``runs.background.spawn``: a session of its own at nice 10), first on the idle machine, then beside
busy processes the bench starts itself, each in a session of its own as another program's work would be:
``1`` and ``2`` busy processes at normal priority (a class's requests, another user's work), ``2n`` two at
nice 10 (other background jobs, started the same way as the job). After ``--settle`` seconds (the load average's
minute) it prints, for each case, the time said (``speed.seconds_now``, from the CPU time counted at each
priority), what the load average alone would have said (cores / (load + threads)) and the time taken,
with taken / said (1.00 is exact).

Not part of the test suite: about 4 minutes on a 2-core CPU. Run it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bert_explorer.runs import background
from bert_explorer.train import speed

JOB = r'''
import time, torch
torch.set_num_threads(1)
from bert_explorer.model import BertConfig
from bert_explorer.model.bert import BertLayer
layer = BertLayer(BertConfig(vocab_size=8, hidden_size=256, num_layers=1, num_heads=4, intermediate_size=1024))
x = torch.randn(8, 128, 256)
t = time.perf_counter()
for _ in range(15):
    xi = x.clone().requires_grad_(True)
    out, _ = layer(xi)
    out.sum().backward()
print(time.perf_counter() - t)
'''


def job() -> float:
    """The work's seconds, in a background process as the app starts one (its imports not counted)."""
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "log.txt"
        proc = background.spawn([sys.executable, "-c", JOB], log)
        if proc.wait() != 0:
            raise RuntimeError(log.read_text())
        return float(log.read_text().strip().splitlines()[-1])


def hog(niced: bool) -> subprocess.Popen:
    """A busy process in a session of its own: at nice 10 as the app's background jobs are, else as
    another program's."""
    if niced:
        return background.spawn([sys.executable, "-c", "while 1: pass"], os.devnull)
    return subprocess.Popen([sys.executable, "-c", "while 1: pass"], start_new_session=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="1,2,2n", help="busy processes beside the job: N at normal priority, Nn at nice 10")
    ap.add_argument("--settle", type=float, default=65.0, help="seconds the busy processes run before the job")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    idle = min(job() for _ in range(2))
    print(f"{cores} cores; idle: {idle:.2f} s (load {speed.load_now():.2f})")
    print(f"{'beside':<22}{'load':>6}{'busy normal/low':>17}{'said':>8}{'load alone':>12}{'taken':>8}{'taken/said':>12}")
    for case in args.cases.split(","):
        n, niced = int(case.rstrip("n")), case.endswith("n")
        hogs = [hog(niced) for _ in range(n)]
        try:
            time.sleep(args.settle)
            load, (normal, low) = speed.load_now(), speed.busy_cores()
            said = speed.seconds_now(idle, 1)
            by_load = idle / min(1.0, cores / (load + 1))
            taken = job()
        finally:
            for h in hogs:
                h.kill()
        label = f"{n} busy at {'nice 10' if niced else 'nice 0'}"
        print(f"{label:<22}{load:>6.2f}{f'{normal:.2f} / {low:.2f}':>17}{said:>8.2f}{by_load:>12.2f}{taken:>8.2f}"
              f"{taken / said:>12.2f}", flush=True)
        time.sleep(5)


if __name__ == "__main__":
    main()
