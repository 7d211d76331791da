"""Served to a class (0.0.0.0, headless), the app asks no outside host anything: not at start-up,
not when a student's browser connects from another machine's name.

The server runs with a Python audit hook that writes down every name looked up (``socket.getaddrinfo``)
and every TCP connection opened (``socket.connect`` on a stream socket) to a host that is not this
machine. Plain ``streamlit run`` looks up checkip.amazonaws.com; ``python -m bert_explorer.app.serve``
must not look up or connect to anything outside.
"""
import base64
import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ("127.", "0.0.0.0", "localhost", "::1")

HOOK = r'''
import json, socket, sys
LOG = {log!r}
LOCAL = {local!r}

def outside(host):
    host = str(host)
    return bool(host) and host != "::" and not (host.startswith(LOCAL) or host == socket.gethostname())

def hook(event, args):
    if event == "socket.getaddrinfo" and outside(args[0]):
        entry = ["lookup", str(args[0])]
    elif event == "socket.connect" and args[0].type == socket.SOCK_STREAM and isinstance(args[1], tuple) \
            and outside(args[1][0]):
        entry = ["connect", str(args[1][0])]
    else:
        return
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")

sys.addaudithook(hook)
sys.argv = ["streamlit"] + {argv!r}
{start}
'''

PLAIN = "from streamlit.web import cli; cli.main(prog_name='streamlit')"
OURS = "from bert_explorer.app.serve import main; main(sys.argv[2:])"



def _serve_and_visit(tmp_path, start: str) -> list:
    log = tmp_path / "outside.jsonl"
    port = free_port()
    argv = ["run", str(ROOT / "run_app.py"), "--server.address", "0.0.0.0", "--server.port", str(port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    code = HOOK.format(log=str(log), local=LOCAL, argv=argv, start=start)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "BERT_EXPLORER_RUNS": str(tmp_path / "runs")}, text=True)
    try:
        if not wait_for_port(port):
            pytest.fail("the server did not start")
        time.sleep(1.5)  # the start-up message is printed after the port opens
        # a student's browser: the page, then the websocket upgrade from another machine's name,
        # which makes Streamlit check the origin against this machine's addresses
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/")
        assert c.getresponse().status == 200
        c.close()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/_stcore/stream", headers={
            "Origin": "http://teachers-laptop.example:8501", "Connection": "Upgrade", "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode()})
        c.getresponse().read()
        c.close()
        time.sleep(3)  # a lookup takes its 1 s timeout, twice
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_plain_streamlit_asks_an_outside_host_who_we_are(tmp_path):
    """The control: what the launcher exists to prevent does happen without it."""
    seen = _serve_and_visit(tmp_path, PLAIN)
    assert ["lookup", "checkip.amazonaws.com"] in seen


def test_the_app_served_to_a_class_asks_no_outside_host(tmp_path):
    assert _serve_and_visit(tmp_path, OURS) == []


def test_a_start_folders_own_settings_leave_the_apps_others_in_force(tmp_path, monkeypatch):
    """An installed app started in a folder whose .streamlit/config.toml held only a theme gave none of its own
    settings: usage statistics were sent again and the file watcher was back. The user's keys stay theirs."""
    from bert_explorer import shipped
    from bert_explorer.app import serve

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "start" / ".streamlit").mkdir(parents=True)
    (tmp_path / "start" / ".streamlit" / "config.toml").write_text(
        '[theme]\nbase = "dark"\n[server]\nport = 8777\n[browser]\ngatherUsageStats = true\n')
    monkeypatch.chdir(tmp_path / "start")
    given = serve._settings_of_the_app(["--server.address", "0.0.0.0"])
    pairs = dict(zip(given[::2], given[1::2]))
    assert pairs["--server.fileWatcherType"] == "none" and pairs["--runner.postScriptGC"] == "false"
    assert "--browser.gatherUsageStats" not in pairs  # the user's own choice, in their file
    assert "--server.address" not in pairs  # given on the command line
    monkeypatch.chdir(shipped.root())  # in the checkout Streamlit reads the app's own file itself
    assert serve._settings_of_the_app([]) == []
