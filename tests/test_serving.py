"""The plain `streamlit run run_app.py`, with no flags, serves this machine only."""
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port``, read from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:  # 0A = LISTEN
                found.add(addr)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's socket table")
def test_plain_streamlit_run_listens_on_loopback_only():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "run_app.py", "--server.port", str(port),
                             "--server.headless", "true"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, addresses = time.time() + 60, set()
        while time.time() < deadline and not addresses:
            time.sleep(0.5)
            addresses = _listening_addresses(port)
        assert addresses == {"0100007F"}, addresses  # 127.0.0.1 only; 0.0.0.0 would be "00000000"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
