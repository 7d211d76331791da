"""Start the app without asking the internet who this machine is.

``python -m bert_explorer.app.serve [streamlit options]`` is ``streamlit run run_app.py [options]``
with one difference. Served beyond this machine and headless (classroom mode on a server),
Streamlit asks an outside service (checkip.amazonaws.com) for the machine's external address,
for the "External URL" line of its start-up message and as a last resort when it checks a
browser's origin. A private-by-default app makes no outside request, so here the answer is
given beforehand as "none": no request is made, the message shows the local and network URLs,
and students' browsers are still accepted by the machine's network address.

It also prints the **teacher's link** (``roles``): the app's address with ``?teacher=<token>``, as
Jupyter prints its token. A session opened with it is the teacher's: in classroom mode only it starts,
stops and prepares work. ``BERT_EXPLORER_CLASSROOM=1`` serves classroom mode on 127.0.0.1 too, to
rehearse a lesson on a laptop.
"""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from streamlit import net_util
from streamlit.web import cli

from . import roles

APP = Path(__file__).resolve().parents[2] / "run_app.py"  # the checkout's home page


def main(argv: list[str] | None = None) -> None:
    # get_external_ip() returns a cached answer when there is one: "" means "no external
    # address", which neither the start-up message nor the origin check uses.
    net_util._external_ip = ""
    args = list(sys.argv[1:] if argv is None else argv)
    roles.announce(_address(args))
    cli.main(["run", str(APP), *args], prog_name="streamlit")


def _option(args: list[str], name: str, default: str) -> str:
    """A ``--server.x VALUE`` or ``--server.x=VALUE`` option among the command's arguments."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def _address(args: list[str]) -> str:
    """The address students and the teacher type: the listening address, or this machine's name when
    the app listens on every interface (found without asking the network)."""
    host = _option(args, "--server.address", "127.0.0.1")
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"http://{host}:{_option(args, '--server.port', '8501')}"


if __name__ == "__main__":
    main()
