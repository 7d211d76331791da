"""Starting the app's server in a test: a free port, and waiting until the server listens."""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextlib.contextmanager
def chromium():
    """Debian's Chromium driven by Playwright (the tests that use it are marked slow)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 60) -> bool:
    """True once something accepts connections on 127.0.0.1:``port``; False after ``timeout`` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.3)
    return False


# ----- a client that speaks Streamlit's websocket protocol, as a browser tab (or a hostile script) does ---
class Session:
    """One Streamlit session over the websocket, without a browser: ``run(page)`` asks for a page and
    returns what it drew until its script finished; ``send`` sends any BackMsg."""

    def __init__(self, port: int):
        from websockets.sync.client import connect

        self.port = port
        self.ws = connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"], max_size=None,
                          open_timeout=120)
        self.session_id = None

    def send(self, **fields) -> None:
        from streamlit.proto.BackMsg_pb2 import BackMsg

        back = BackMsg()
        for name, value in fields.items():
            if isinstance(value, dict):
                for k, v in value.items():
                    field = getattr(getattr(back, name), k)
                    field.extend(v) if isinstance(v, list) else setattr(getattr(back, name), k, v)
            else:
                setattr(back, name, value)
        self.ws.send(back.SerializeToString())

    def receive(self, until: str, timeout: float = 300):
        """Every ForwardMsg up to and including the first of type ``until``."""
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        out = []
        while True:
            msg = ForwardMsg()
            msg.ParseFromString(self.ws.recv(timeout=timeout))
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                self.session_id = msg.new_session.initialize.session_id
            out.append(msg)
            if kind == until:
                return out

    def run(self, page_name: str = "") -> list:
        self.send(rerun_script={"query_string": "", "page_name": page_name})
        return self.receive("script_finished")

    def close(self) -> None:
        self.ws.close()


def elements(messages, kind: str) -> list:
    """The elements of type ``kind`` ("exception", "alert", ...) the messages drew."""
    return [m.delta.new_element for m in messages if m.WhichOneof("type") == "delta"
            and m.delta.WhichOneof("type") == "new_element" and m.delta.new_element.WhichOneof("type") == kind]


def put_file(port: int, session_id: str, file_id: str, data: bytes) -> int:
    """PUT ``data`` as a file to the session's upload address, with the XSRF cookie a page gives: the
    HTTP status."""
    import urllib.request
    from http.cookies import SimpleCookie

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health") as r:  # (it sets the XSRF cookie)
        cookie = SimpleCookie(r.headers.get("Set-Cookie", ""))
    token = cookie["_streamlit_xsrf"].value
    boundary = "----be-test"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/_stcore/upload_file/{session_id}/{file_id}", data=body,
                                 method="PUT", headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                                        "X-Xsrftoken": token, "Cookie": f"_streamlit_xsrf={token}"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@contextlib.contextmanager
def app_served(command: list[str], env: dict, log: Path | None = None):
    """The app served on 127.0.0.1 by ``python -m <command...>`` (streamlit run or the app's serve) on a free
    port, headless, its output in ``log`` (or dropped); yields the address, and stops the server after."""
    port = free_port()
    root = Path(__file__).resolve().parent.parent
    with (log.open("w") if log else open(os.devnull, "w")) as out:
        proc = subprocess.Popen([sys.executable, "-m", *command, "--server.port", str(port), "--server.headless", "true",
                                 "--browser.gatherUsageStats", "false"], cwd=root, env={**os.environ, **env},
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
