"""A class guesses at once: N students in Chromium send a guess, the teacher reveals, and each student's
page is timed from the Reveal click until it shows the class beside the model.

Starts ``python -m bert_explorer.app.serve`` in classroom mode on 127.0.0.1 (``BERT_EXPLORER_CLASSROOM=1``,
a known teacher's token), opens the teacher's link in one browser context and N student pages in others
(each its own session, as N laptops would be), poses a cloze, lets every student type a word and send it,
counts the guesses the teacher's page shows, presses Reveal and waits for every student's page. The browser
runs on the same machine as the server: on a small CPU its drawing competes with the server, so the figures
are what a class would see at worst. ``--shot FILE`` keeps the teacher's page after the reveal.

    python bench/class_guesses.py --students 30 [--shot reveal.png]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-renderer-backgrounding",
        "--disable-background-timer-throttling", "--disable-backgrounding-occluded-windows"]
WORDS = ["paris"] * 9 + ["london"] * 6 + ["berlin"] * 4 + ["france", "rome", "madrid", "lyon", "city", "it", "there",
                                                             "europe", "home", "water", "money", "school"]
TOKEN = "bench-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    ap.add_argument("--shot", help="keep the teacher's page after the reveal as this PNG (64 colours)")
    args = ap.parse_args()
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
            if args.shot:
                from PIL import Image

                teacher.get_by_text("On the board").scroll_into_view_if_needed()
                time.sleep(1.0)
                teacher.screenshot(path=args.shot)
                Image.open(args.shot).convert("RGB").quantize(colors=64).save(args.shot, optimize=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.students} students (Chromium, one machine, load {load:.1f}): pages open {opened:.1f} s; question on "
          f"every page {shown:.1f} s after Pose; {args.students} guesses sent in {sent:.1f} s; the reveal on every "
          f"student's page after the click: median {statistics.median(waits):.1f} s, slowest {max(waits):.1f} s")


if __name__ == "__main__":
    main()
