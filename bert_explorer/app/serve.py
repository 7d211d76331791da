"""Start the app without asking the internet who this machine is.

``python -m bert_explorer.app.serve [streamlit options]`` is ``streamlit run run_app.py [options]``
with one difference. Served beyond this machine and headless (classroom mode on a server),
Streamlit asks an outside service (checkip.amazonaws.com) for the machine's external address,
for the "External URL" line of its start-up message and as a last resort when it checks a
browser's origin. A private-by-default app makes no outside request, so here the answer is
given beforehand as "none": no request is made, the message shows the local and network URLs,
and students' browsers are still accepted by the machine's network address.
"""
from __future__ import annotations

import sys
from pathlib import Path

from streamlit import net_util
from streamlit.web import cli

APP = Path(__file__).resolve().parents[2] / "run_app.py"  # the checkout's home page


def main(argv: list[str] | None = None) -> None:
    # get_external_ip() returns a cached answer when there is one: "" means "no external
    # address", which neither the start-up message nor the origin check uses.
    net_util._external_ip = ""
    args = list(sys.argv[1:] if argv is None else argv)
    cli.main(["run", str(APP), *args], prog_name="streamlit")


if __name__ == "__main__":
    main()
