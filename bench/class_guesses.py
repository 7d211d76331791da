"""A class guesses at once: N students in Chromium send a guess, the teacher reveals, and each student's
page is timed from the Reveal click until it shows the class beside the model.

Starts ``python -m bert_explorer.app.serve`` in classroom mode on 127.0.0.1 (``BERT_EXPLORER_CLASSROOM=1``,
a known teacher's token), opens the teacher's link in one browser context and N student pages in others
(each its own session, as N laptops would be), poses a cloze, lets every student type a word and send it,
counts the guesses the teacher's page shows, presses Reveal and waits for every student's page. The browser
runs on the same machine as the server: on a small CPU its drawing competes with the server, so the figures
are what a class would see at worst. ``--shot FILE`` keeps the teacher's page after the reveal.

``--browserless`` times the server alone: the students speak Streamlit's websocket protocol, each asking
for its box every 2 s at its own phase as a browser's timer does, and sending its word through the form.

    python bench/class_guesses.py --students 30 [--shot reveal.webp]
    python bench/class_guesses.py --students 30 --browserless
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

from classroom_load import ARGS, ROOT, _free_port  # (benches share the class's helpers)

WORDS = ["paris"] * 9 + ["london"] * 6 + ["berlin"] * 4 + ["france", "rome", "madrid", "lyon", "city", "it", "there",
                                                             "europe", "home", "water", "money", "school"]
TOKEN = "bench-token"


def _wait(port: int, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("the app did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--shot", help="keep the teacher's page after the reveal as this file (64 colours, lossless WebP)")
    ap.add_argument("--browserless", action="store_true", help="students speak Streamlit's websocket protocol "
                                                              "(each polls its box every 2 s as a browser does)")
    args = ap.parse_args()
    if args.browserless:
        import asyncio

        asyncio.run(browserless(args.students))
        return
    from playwright.sync_api import sync_playwright

    port = _free_port()
    env = {**os.environ, "BERT_EXPLORER_CLASSROOM": "1", "BERT_EXPLORER_TEACHER_TOKEN": TOKEN}
    server = subprocess.Popen([sys.executable, "-m", "bert_explorer.app.serve", "--server.port", str(port),
                               "--server.headless", "true", "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/Guess_with_the_class"
    try:
        _wait(port)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
            teacher = browser.new_context(viewport={"width": 1300, "height": 1000}).new_page()
            teacher.goto(f"{url}?teacher={TOKEN}")
            teacher.get_by_role("button", name="Pose to the class").wait_for(timeout=180_000)
            t0 = time.perf_counter()
            students = []
            for _ in range(args.students):
                page = browser.new_context(viewport={"width": 900, "height": 700}).new_page()
                page.goto(url)
                students.append(page)
            for page in students:
                page.get_by_text("Waiting for your teacher's question").wait_for(timeout=180_000)
            opened = time.perf_counter() - t0
            teacher.get_by_role("button", name="Pose to the class").click()
            t1 = time.perf_counter()
            for page in students:
                page.get_by_label("Your guess: one word").wait_for(timeout=60_000)
            shown = time.perf_counter() - t1
            t2 = time.perf_counter()
            for i, page in enumerate(students):
                page.get_by_label("Your guess: one word").fill(WORDS[i % len(WORDS)])
                page.get_by_role("button", name="Send my guess").click()
            for page in students:
                page.get_by_text("You can change it until").wait_for(timeout=60_000)
            sent = time.perf_counter() - t2
            teacher.get_by_text(f"{args.students}", exact=True).wait_for(timeout=60_000)
            teacher.get_by_role("button", name="Reveal").click()
            click = time.perf_counter()
            waits = []
            for page in students:
                page.get_by_text("guessed the model's first answer").first.wait_for(timeout=60_000)
                waits.append(time.perf_counter() - click)
            teacher.get_by_text("guessed the model's first answer").first.wait_for(timeout=60_000)
            if args.shot:  # (64 colours, lossless WebP: docs/screenshots.py's keep_small)
                import runpy
                from pathlib import Path

                teacher.get_by_text("On the board").scroll_into_view_if_needed()
                time.sleep(1.0)
                shot = Path(args.shot).with_suffix(".png")
                teacher.screenshot(path=str(shot))
                runpy.run_path(str(ROOT / "docs" / "screenshots.py"))["keep_small"](shot, Path(args.shot))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.students} students (Chromium, one machine, load {load:.1f}): pages open {opened:.1f} s; question on "
          f"every page {shown:.1f} s after Pose; {args.students} guesses sent in {sent:.1f} s; the reveal on every "
          f"student's page after the click: median {statistics.median(waits):.1f} s, slowest {max(waits):.1f} s")



# ----- --clients: students without a browser (the server alone) --------------------------------------------
async def _ws_run(ws, page: str, query: str = "", widgets=(), fragment: str = "") -> tuple[list, set, dict]:
    """One run of ``page`` (or of one fragment of it) as a browser asks for it: (the elements drawn, the
    fragments the server asked to rerun on a timer, {element id: element})."""
    import asyncio as aio

    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    back = BackMsg()
    back.rerun_script.query_string, back.rerun_script.page_name = query, page
    if fragment:
        back.rerun_script.fragment_id, back.rerun_script.is_auto_rerun = fragment, True
    for w in widgets:
        back.rerun_script.widget_states.widgets.append(w)
    await ws.send(back.SerializeToString())
    drawn, timers = [], set()
    while True:
        msg = ForwardMsg()
        msg.ParseFromString(await aio.wait_for(ws.recv(), timeout=300))
        kind = msg.WhichOneof("type")
        if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            drawn.append(msg.delta.new_element)
        elif kind == "auto_rerun":
            timers.add(msg.auto_rerun.fragment_id)
        elif kind == "script_finished":
            return drawn, timers, {getattr(e, e.WhichOneof("type")).id: e for e in drawn
                                   if hasattr(getattr(e, e.WhichOneof("type")), "id")}


def _said(drawn, text: str) -> bool:
    return any(text in str(e) for e in drawn)


def _widget(ids: dict, suffix: str, **value):
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    found = [i for i in ids if i.endswith(suffix) or suffix in i]
    if not found:
        raise LookupError(f"no widget {suffix}")
    w = WidgetState()
    w.id = found[0]
    for k, v in value.items():
        setattr(w, k, v)
    return w


async def browserless(students: int) -> None:
    import asyncio as aio
    import random

    import websockets

    port = _free_port()
    env = {**os.environ, "BERT_EXPLORER_CLASSROOM": "1", "BERT_EXPLORER_TEACHER_TOKEN": TOKEN}
    server = subprocess.Popen([sys.executable, "-m", "bert_explorer.app.serve", "--server.port", str(port),
                               "--server.headless", "true", "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    page, url = "Guess_with_the_class", f"ws://127.0.0.1:{port}/_stcore/stream"
    try:
        _wait(port)
        connect = lambda: websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=600)  # noqa: E731
        teacher = await connect()
        drawn, _, ids = await _ws_run(teacher, page, f"teacher={TOKEN}")
        socks = [await connect() for _ in range(students)]
        firsts = await aio.gather(*(_ws_run(s, page) for s in socks))
        frag = next(iter(firsts[0][1]))
        await _ws_run(teacher, page, widgets=[_widget(ids, "guess_pose", trigger_value=True)])
        revealed, click = {}, [None]

        async def student(i, ws):
            await aio.sleep(random.uniform(0, 2))  # each browser's timer has its own phase
            sent = False
            while i not in revealed:
                t = time.perf_counter()
                drawn, _, ids = await _ws_run(ws, page, fragment=frag, widgets=[])
                if click[0] is not None and _said(drawn, "guessed the model"):
                    revealed[i] = time.perf_counter() - click[0]
                    return
                if not sent and any("guess_word_" in k for k in ids):
                    word = WORDS[i % len(WORDS)]
                    await _ws_run(ws, page, fragment=frag, widgets=[
                        _widget(ids, "guess_word_", string_value=word),
                        next(_widget({k: v}, k, trigger_value=True) for k, v in ids.items()
                             if v.WhichOneof("type") == "button" and "Send my guess" in v.button.label)])
                    sent = True
                await aio.sleep(max(0.0, 2.0 - (time.perf_counter() - t)))

        tasks = [aio.create_task(student(i, ws)) for i, ws in enumerate(socks)]
        while True:  # the teacher's page counts the guesses; Reveal once every student's is in
            drawn, _, ids = await _ws_run(teacher, page)
            if _said(drawn, f'body: "{students}"'):
                break
            await aio.sleep(1.0)
        click[0] = time.perf_counter()
        drawn, _, _ = await _ws_run(teacher, page, widgets=[_widget(ids, "guess_reveal", trigger_value=True)])
        drawn, _, _ = await _ws_run(teacher, page)
        sentence = next((e.markdown.body for e in drawn if e.WhichOneof("type") == "markdown"
                         and "guessed the model" in e.markdown.body), "(no reveal on the teacher's page)")
        await aio.wait_for(aio.gather(*tasks), 600)
        for ws in (teacher, *socks):
            await ws.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    waits = sorted(revealed.values())
    print(f"{students} students without a browser (the server alone, 2 s polls as a browser's, load "
          f"{os.getloadavg()[0]:.1f}): the reveal on every student's page after the click: median "
          f"{statistics.median(waits):.1f} s, slowest {waits[-1]:.1f} s; the teacher's page said: {sentence}")


if __name__ == "__main__":
    main()
