"""``bert-explorer``: the headless front end. Every page of the app has a command here.

Mistakes a user can make (a wrong path, a malformed file, a model without the needed head)
end with one line on stderr and exit code 2, never a traceback; a full disk ends with one line
and exit code 1 (where, how much is free, how to go on). See ``common.run_command``.
"""
from __future__ import annotations

from .common import run_command


def main(argv: list[str] | None = None) -> int:
    # Imported here, not above: `python -m bert_explorer.cli.neighbours` (a background index build)
    # imports this package first, and runpy warns when the module it is about to run is loaded already.
    from .parser import build_parser

    code = run_command(build_parser().parse_args(argv))
    leave_process_group(code)
    return code


def leave_process_group(code: int) -> None:
    """A process torchrun started ends here, without the process group's teardown: its work is done and written
    (every rank met at the run's last barrier), and gloo aborts (SIGABRT) a rank whose peer closed its connections
    a moment before its own teardown, so a finished run was reported failed (exit 1) about once in six."""
    import logging
    import os
    import sys

    if "TORCHELASTIC_RUN_ID" not in os.environ:  # (before torch: a command that never imported it stays quick)
        return
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
