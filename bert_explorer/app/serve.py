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

import errno
import os
import re
import socket
import sys
from pathlib import Path

from streamlit import net_util
from streamlit.web import cli

from .. import shipped
from . import roles

APP = shipped.app()  # the home page: the checkout's, or the one the wheel carries


def main(argv: list[str] | None = None) -> None:
    # get_external_ip() returns a cached answer when there is one: "" means "no external
    # address", which neither the start-up message nor the origin check uses.
    net_util._external_ip = ""
    args = list(sys.argv[1:] if argv is None else argv)
    args = [*_settings_of_the_app(args), *args]
    if not {"-h", "--help"} & set(args):  # (a link printed with the options' help served nothing)
        args = _on_a_free_port(args)  # (the link was printed for a port another program held, then Streamlit failed)
        host = _server_setting(args, "address") or ""
        if roles.rehearsing() or not roles.is_private(host):  # (on this machine alone every page is on: no roles)
            roles.announce(_address(args))
    cli.main(["run", str(APP), *args], prog_name="streamlit")


def _server_setting(args: list[str], key: str) -> str | None:
    """A ``server.<key>`` setting as Streamlit will take it: the command line's, else its environment variable's,
    else the app's own config file's (Streamlit reads the one beside the app's script after the user's, so it
    wins over theirs: their address 0.0.0.0 served 127.0.0.1, and a teacher's link was printed for it), else the
    user's own config files'; None where none sets it."""
    if (given := _option(args, f"--server.{key}", None)) is not None:
        return given
    if (env := os.environ.get(_env_name("server", key))) is not None:
        return env
    for config in (_read_config(shipped.streamlit_config()), _users_config()):
        if (value := config.get("server", {}).get(key)) is not None:
            return str(value)
    return None


def _on_a_free_port(args: list[str]) -> list[str]:
    """``args`` with the port the app will have: the one set (on the command line, in STREAMLIT_SERVER_PORT or the
    user's config), when it is free (else one sentence and exit 2), or, where none is set, the first free one from
    8501 as Streamlit would choose it, given to it so that the link printed is its."""
    given = _server_setting(args, "port")
    host = _server_setting(args, "address") or "0.0.0.0"
    if given:
        if not (given.isdigit() and 1 <= int(given) <= 65535):  # (the link was printed first, then a traceback)
            _refuse(f"BERT Explorer: port {given} is no port, so the app was not started; give --server.port a whole "
                    "number from 1 to 65535, e.g. --server.port 8501")
        if not _free(host, int(given)):
            _refuse(f"BERT Explorer: port {given} of {host} is in use by another program, so the app was not "
                    f"started; choose another with --server.port, e.g. --server.port {int(given) + 1}")
        return args
    port = next((p for p in range(8501, 8601) if _free(host, p)), 8501)
    return [*args, "--server.port", str(port)]


def _refuse(sentence: str):
    """One sentence on stderr and exit 2, as every command's mistake of the user's."""
    print(sentence, file=sys.stderr)
    raise SystemExit(2)


def _free(host: str, port: int) -> bool:
    """Can a server listen on ``host``:``port`` now (as Tornado binds: an address in TIME_WAIT is free)?"""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return True  # (a name that does not resolve is Streamlit's to say)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:  # (an address not this machine's is Streamlit's to say)
            return e.errno != errno.EADDRINUSE
    return True


def _settings_of_the_app(args: list[str]) -> list[str]:
    """The app's Streamlit settings (``.streamlit/config.toml``: loopback, no usage statistics, its own menu…)
    as options, when they would not be read otherwise: Streamlit reads that file from the folder it is
    started in, and an installed app is started anywhere. A setting given on the command line or in the
    user's own config files (the home folder's, and the start folder's when it is not the app's own file) is
    theirs and is left alone; every other setting of the app's is given (a start folder holding only a theme
    turned the usage statistics and the file watcher back on); so is one its environment variable sets. (Streamlit
    also reads the app's own file beside its script, after the user's: there the app's settings win over the
    user's files, and only an environment variable or an option wins over them.)"""
    ours = shipped.streamlit_config()
    here = Path(".streamlit/config.toml")
    if here.is_file() and here.resolve() == ours.resolve():
        return []  # started in the checkout: Streamlit reads the app's own file
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    own = _users_config()
    out = []
    for section, options in _read_config(ours).items():
        for key, value in options.items():
            if f"--{section}.{key}" not in given and key not in own.get(section, {}) \
                    and _env_name(section, key) not in os.environ:
                out += [f"--{section}.{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return out


def _env_name(section: str, key: str) -> str:
    """The environment variable Streamlit reads a setting from: server.port is STREAMLIT_SERVER_PORT,
    browser.gatherUsageStats STREAMLIT_BROWSER_GATHER_USAGE_STATS."""
    snake = re.sub(r"([a-z])([A-Z])", r"\1_\2", key)
    return f"STREAMLIT_{section.upper()}_{snake.upper()}"


def _users_config() -> dict:
    """The settings of the user's own Streamlit config files (the home folder's, and the start folder's when it is
    not the app's own file), by section."""
    own: dict = {}
    here = Path(".streamlit/config.toml")
    for theirs in (Path.home() / ".streamlit" / "config.toml", here):
        if theirs == here and here.is_file() and here.resolve() == shipped.streamlit_config().resolve():
            continue
        for section, options in _read_config(theirs).items():
            own.setdefault(section, {}).update(options)
    return own


def _read_config(path: Path) -> dict:
    """A Streamlit config file's settings by section ({} where it is missing or not TOML)."""
    import tomllib

    try:
        return {k: v for k, v in tomllib.loads(path.read_text()).items() if isinstance(v, dict)}
    except (OSError, ValueError):
        return {}


def _option(args: list[str], name: str, default: str | None) -> str | None:
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
    host = _server_setting(args, "address")
    if host in (None, "", "0.0.0.0", "::"):  # (none set: Streamlit listens on every interface)
        host = socket.gethostname()
    return f"http://{host}:{_server_setting(args, 'port') or '8501'}"


if __name__ == "__main__":
    main()
