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


# ----- private and classroom mode ---------------------------------------------------------------
from streamlit import config as st_config  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_explorer.runs.run import Run  # noqa: E402

WRITE_BUTTONS = {"10_Pre-train.py": "pt_start", "11_Fine-tune.py": "ft_start", "13_Runs.py": "runs_delete",
                 "14_Ablation_studio.py": "abl_start", "15_Features.py": "sae_train"}


@pytest.fixture
def served_on(tmp_path, monkeypatch):
    """Pretend the server listens on an address (what `--server.address` sets)."""
    root = tmp_path / "runs"
    Run(root / "a-run").create({"size": "tiny"}, "pretrain").write_status(state="finished")
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(root))
    monkeypatch.delenv("BERT_EXPLORER_ALLOW_WRITES", raising=False)
    before = st_config.get_option("server.address")

    def serve(address):
        st_config.set_option("server.address", address)
    yield serve
    st_config.set_option("server.address", before)


def _open(page):
    at = AppTest.from_file(str(ROOT / ("pages/" + page if page != "run_app.py" else page)), default_timeout=120)
    at.session_state["be_model_choice"] = "explorer-mini"
    return at.run()


def _keys(at):
    return {b.key for b in at.button}


def _texts(at):
    return " ".join(str(e.value) for kind in ("info", "caption", "error", "markdown") for e in getattr(at, kind)) + \
        " ".join(str(e.value) for kind in ("info", "caption") for e in getattr(at.sidebar, kind))


@pytest.mark.parametrize("page", list(WRITE_BUTTONS))
def test_beyond_loopback_the_writing_pages_are_off(served_on, page):
    served_on("0.0.0.0")
    at = _open(page)
    assert not at.exception
    assert WRITE_BUTTONS[page] not in _keys(at)
    assert "classroom mode" in _texts(at) and "the teacher's link (printed where the server was started)" in _texts(at)


def test_classroom_mode_hides_uploads_and_host_folders_and_keeps_exploring(served_on):
    served_on("0.0.0.0")
    at = _open("4_Masked_word_probe.py")
    assert not at.exception and "Classroom mode" in _texts(at)
    options = at.sidebar.selectbox(key="be_model_choice").options
    assert not any("upload" in o or "local directory" in o for o in options)
    assert at.dataframe or at.markdown  # the probe itself still answers


@pytest.mark.parametrize("page", list(WRITE_BUTTONS))
def test_the_writing_pages_are_on_when_private_or_turned_on(served_on, page, monkeypatch):
    served_on("127.0.0.1")
    at = _open(page)
    assert not at.exception and WRITE_BUTTONS[page] in _keys(at)
    served_on("0.0.0.0")
    monkeypatch.setenv("BERT_EXPLORER_ALLOW_WRITES", "1")
    at = _open(page)
    assert not at.exception and WRITE_BUTTONS[page] in _keys(at)
    assert "writing on" in _texts(at)
