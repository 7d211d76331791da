"""A class at once: N browser tabs open the masked-word page of one app at the same moment.

Starts `streamlit run run_app.py --server.address 0.0.0.0` (classroom mode) on a free port,
lets one tab load the page first (the teacher's: the model is then in the server's cache),
then opens N tabs together in one Chromium and times, per tab, from the request to the moment
the page has finished running and shows the probe's answer. The browser runs on the same
machine as the server, so on a small CPU its drawing competes with the model calls: the
figures are what a class would see at worst.

`--clients N` measures the server alone: N sessions speak Streamlit's own websocket protocol
(what a browser tab sends: "run the page"), with no browser drawing anything, and each is timed
until the server says the page's script finished. This is what 30 students on 30 laptops load
the server with. In the same run it first measures the floor: the same N sessions on an empty
page (a title and nothing else, written to a temporary folder and served by the same Streamlit on
the same CPU), i.e. what Streamlit itself costs per session run, and says the page's ratio to it.

    python bench/classroom_load.py --tabs 30
    python bench/classroom_load.py --clients 30 [--repeats 3]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-renderer-backgrounding",
        "--disable-background-timer-throttling", "--disable-backgrounding-occluded-windows"]
DONE = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]') && document.querySelector('.js-plotly-plot')"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _one_tab(context, url: str) -> tuple[float, bool]:
    page = await context.new_page()
    t0 = time.perf_counter()
    await page.goto(url, timeout=600_000)
    await page.locator("h1", has_text="Masked word probe").first.wait_for(timeout=600_000)  # the page, not the menu
    await page.wait_for_function(DONE, timeout=600_000, polling=250)
    took = time.perf_counter() - t0
    classroom = await page.get_by_text("Classroom mode").count() > 0
    return took, classroom


async def _one_session(port: int, page_name: str) -> tuple[float, bool, bool]:
    """One Streamlit session without a browser: open the websocket, ask for the page, wait for
    the script to finish. Returns (seconds, finished without an exception, classroom mode shown)."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    t0 = time.perf_counter()
    async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                  max_size=None, open_timeout=600) as ws:
        back = BackMsg()
        back.rerun_script.query_string = ""
        back.rerun_script.page_name = page_name
        await ws.send(back.SerializeToString())
        exception, classroom = False, False
        while True:
            msg = ForwardMsg()
            msg.ParseFromString(await asyncio.wait_for(ws.recv(), timeout=600))
            kind = msg.WhichOneof("type")
            if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                element = msg.delta.new_element
                what = element.WhichOneof("type")
                exception |= what == "exception"
                classroom |= what == "alert" and "Classroom mode" in element.alert.body
            elif kind == "script_finished":
                return time.perf_counter() - t0, not exception, classroom


EMPTY_PAGE = """import streamlit as st

st.set_page_config(page_title="Empty", layout="wide")
st.title("An empty page")
"""
# An empty page *of this app*: what every page of it draws before its own content (the multipage
# app's pages, the sidebar menu, a title), with no model, no picker and no content.
EMPTY_APP_PAGE = """import streamlit as st

from bert_explorer.app.widgets import intro

st.set_page_config(page_title="Empty", layout="wide")
intro("An empty page", "")
"""


def _app_copy(folder: Path) -> Path:
    """This app's home script and pages in ``folder``, plus pages/99_Empty.py (EMPTY_APP_PAGE);
    the pages import bert_explorer from the repository (the server runs there)."""
    shutil.copy(ROOT / "run_app.py", folder / "run_app.py")
    shutil.copytree(ROOT / "pages", folder / "pages", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "pages" / "99_Empty.py").write_text(EMPTY_APP_PAGE)
    return folder / "run_app.py"


def _start_server(address: str, port: int, runs: str, script: Path = ROOT / "run_app.py") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script),
                             "--server.address", address, "--server.port", str(port),
                             "--server.headless", "true", "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, env={**os.environ, "BERT_EXPLORER_RUNS": runs},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _wait_for_port(port: int) -> None:
    for _ in range(240):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            await asyncio.sleep(0.5)


async def _class(clients: int, address: str, script: Path, page_name: str, repeats: int):
    """One server: a first session (cold), then ``repeats`` times ``clients`` sessions at once.
    Returns (cold seconds, [wall seconds of each class], every session's result)."""
    port, runs = _free_port(), tempfile.mkdtemp(prefix="class-runs-")
    server = _start_server(address, port, runs, script)
    walls, results = [], []
    try:
        await _wait_for_port(port)
        cold = await _one_session(port, page_name)
        for _ in range(repeats):
            t0 = time.perf_counter()
            results += await asyncio.gather(*(_one_session(port, page_name) for _ in range(clients)))
            walls.append(time.perf_counter() - t0)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(runs, ignore_errors=True)
    return cold[0], walls, results


async def sessions_async(clients: int, address: str, repeats: int = 1) -> None:
    print(f"server on {address}, {os.cpu_count()} CPU cores, {clients} sessions at once over Streamlit's websocket "
          f"protocol (no browser), {repeats} time(s) each; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="empty-page-") as folder:
        empty = Path(folder, "empty_page.py")
        empty.write_text(EMPTY_PAGE)
        _, floor_walls, floor = await _class(clients, address, empty, "", repeats)
    floor_wall = statistics.median(floor_walls)
    times = sorted(t for t, _, _ in floor)
    print(f"floor, an empty page (a title only): median {statistics.median(times):.2f} s, slowest {times[-1]:.2f} s; "
          f"all answered within {floor_wall:.2f} s (median of {repeats})")
    with tempfile.TemporaryDirectory(prefix="app-copy-") as folder:
        app = _app_copy(Path(folder))
        _, app_walls, app_floor = await _class(clients, address, app, "Empty", repeats)
        app_wall = statistics.median(app_walls)
        times = sorted(t for t, _, _ in app_floor)
        print(f"an empty page of this app (its {len(list(app.parent.glob('pages/*.py')))} pages, the sidebar menu, a "
              f"title): median {statistics.median(times):.2f} s, slowest {times[-1]:.2f} s; all answered within "
              f"{app_wall:.2f} s (median of {repeats}) = {app_wall / floor_wall:.2f}× the floor")
        cold, walls, results = await _class(clients, address, app, "Masked_word_probe", repeats)
    wall = statistics.median(walls)
    times = sorted(t for t, _, _ in results)
    print(f"masked-word page, model minilm-mlm-nsp; first session (cold: loads the model): {cold:.1f} s")
    print(f"{clients} at once: median {statistics.median(times):.1f} s, p90 {statistics.quantiles(times, n=10)[-1]:.1f} s, "
          f"slowest {times[-1]:.1f} s, fastest {times[0]:.1f} s; all answered within {wall:.2f} s (median of {repeats}: "
          f"{', '.join(f'{w:.2f}' for w in walls)}) = {wall / floor_wall:.2f}× the floor, "
          f"{wall / app_wall:.2f}× an empty page of this app")
    print(f"all finished without an exception: {all(ok for _, ok, _ in results)}; "
          f"classroom mode said: {all(c for _, _, c in results)}; "
          f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


async def main_async(tabs: int, address: str) -> None:
    from playwright.async_api import async_playwright

    port, runs = _free_port(), tempfile.mkdtemp(prefix="class-runs-")
    server = _start_server(address, port, runs)
    url = f"http://127.0.0.1:{port}/Masked_word_probe"
    try:
        await _wait_for_port(port)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
            first = await browser.new_context(viewport={"width": 1200, "height": 900})
            cold, classroom = await _one_tab(first, url)
            await first.close()
            contexts = [await browser.new_context(viewport={"width": 1200, "height": 900}) for _ in range(tabs)]
            t0 = time.perf_counter()
            results = await asyncio.gather(*(_one_tab(c, url) for c in contexts))
            wall = time.perf_counter() - t0
            await browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(runs, ignore_errors=True)
    times = sorted(t for t, _ in results)
    q = statistics.quantiles(times, n=10)
    print(f"server on {address} ({'classroom mode shown' if classroom else 'private mode'}), "
          f"{os.cpu_count()} CPU cores, masked-word page, model minilm-mlm-nsp")
    print(f"first tab (cold: loads the model): {cold:.1f} s")
    print(f"{tabs} tabs at once: median {statistics.median(times):.1f} s, p90 {q[-1]:.1f} s, "
          f"slowest {times[-1]:.1f} s, fastest {times[0]:.1f} s; all {tabs} answered within {wall:.1f} s")
    print(f"every tab in classroom mode: {all(c for _, c in results)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tabs", type=int, default=30, help="Chromium tabs at once")
    ap.add_argument("--clients", type=int, default=0, help="browserless sessions at once instead of tabs")
    ap.add_argument("--address", default="0.0.0.0", help="where the server listens (0.0.0.0 = classroom mode)")
    ap.add_argument("--repeats", type=int, default=1, help="classes of --clients sessions, one after another")
    args = ap.parse_args()
    if args.clients:
        asyncio.run(sessions_async(args.clients, args.address, args.repeats))
        return
    if not shutil.which("chromium"):
        sys.exit("needs Debian's chromium (apt-get install -y chromium)")
    asyncio.run(main_async(args.tabs, args.address))


if __name__ == "__main__":
    main()
