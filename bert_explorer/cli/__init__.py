"""``bert-explorer``: the headless front end. Every page of the app has a command here.

Mistakes a user can make (a wrong path, a malformed file, a model without the needed head)
end with one line on stderr and exit code 2, never a traceback; a full disk ends with one line
and exit code 1 (where, how much is free, how to go on).
"""
from __future__ import annotations

import sys
import warnings

from ..checkpoint import CheckpointError
from ..full_disk import CacheNotKept, DiskFull
from .common import UserError
from .parser import build_parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _one_line_cache_warnings()
    from ..runs.lock import RunBusy

    try:
        return args.func(args)
    except (UserError, CheckpointError, RunBusy) as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)
        return 2
    except DiskFull as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bert-explorer: interrupted", file=sys.stderr)
        return 130


def _one_line_cache_warnings() -> None:
    """A result that the disk cache could not keep (a full disk) is one line on stderr, like an
    error, not Python's file-and-line warning format; other warnings are left as they are."""
    shown_before = warnings.showwarning
    if getattr(shown_before, "one_line", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CacheNotKept):
            print(f"bert-explorer: warning: {message}", file=sys.stderr)
        else:
            shown_before(message, category, filename, lineno, file, line)

    show.one_line = True
    warnings.showwarning = show
