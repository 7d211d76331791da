"""``bert-explorer``: the headless front end. Every page of the app has a command here.

Mistakes a user can make (a wrong path, a malformed file, a model without the needed head)
end with one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import sys

from ..checkpoint import CheckpointError
from .common import UserError
from .parser import build_parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..train.run_lock import RunBusy

    try:
        return args.func(args)
    except (UserError, CheckpointError, RunBusy) as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bert-explorer: interrupted", file=sys.stderr)
        return 130
