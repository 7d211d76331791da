"""The Attention page with a long input, timed in a real browser (Chromium via Playwright).

Starts the app on a free port, opens the Attention page, raises *Max tokens* to 512, types two
paragraphs of a BBC article of about 128 and then 512 WordPieces, and times until Chromium has
drawn the page (Streamlit's "running" indicator gone, bertviz's SVG and plotly's heatmap on
screen, two animation frames later): once for the new input (the model runs), then warm, when
the user picks another head for the heatmap.

    python bench/attention_long_browser.py [--repeats 3]

The server's side alone is `python bench/page_interactions.py --long`. The browser runs on the
same 2-core machine as the server, so the figures include their competition for the CPU.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from classroom_load import ARGS, ROOT, _free_port  # noqa: E402
from page_interactions import long_text  # noqa: E402

DRAWN = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') === 'running') return false;
  const plot = document.querySelector('.js-plotly-plot .main-svg');
  const frame = document.querySelector('iframe');
  const svg = frame && frame.contentDocument && frame.contentDocument.querySelector('#vis svg text');
  return Boolean(plot && svg);
}"""


def _settled(page, timeout_s: float = 300) -> float:
    """Seconds until the page has run and drawn (measured from the caller's action)."""
    start = time.perf_counter()
    try:  # the app says it is running as soon as the server takes the new input
        page.locator('[data-testid="stApp"][data-test-script-state="running"]').wait_for(timeout=2_000)
    except Exception:
        pass  # a run so short that it was over before we looked
    page.wait_for_function(DRAWN, timeout=timeout_s * 1000, polling=50)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "run_app.py"),
                               "--server.address", "127.0.0.1", "--server.port", str(port),
                               "--server.headless", "true", "--browser.gatherUsageStats", "false"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for _ in range(60):
                try:
                    page.goto(f"http://127.0.0.1:{port}/Attention", timeout=10_000)
                    break
                except Exception:
                    time.sleep(1)
            _settled(page)
            slider = page.get_by_role("slider").first
            slider.focus()
            slider.press("End")  # Max tokens: 512
            _settled(page)
            print(f"{'tokens':<10}{'new input s':>12}{'warm median s':>15}{'warm max s':>12}")
            for tokens in (128, 512):
                a, b = long_text(tokens)
                page.get_by_label("Sentence B (optional)").fill(b)
                box = page.get_by_label("Sentence A")
                box.fill(a)
                t = time.perf_counter()
                box.press("Control+Enter")
                first = _settled(page) + (time.perf_counter() - t) * 0
                warm = []
                for i in range(args.repeats):
                    page.get_by_role("tab", name="Heatmap").click()
                    page.locator('[data-testid="stSelectbox"]').filter(has_text="Head").first.click()
                    page.get_by_role("option", name=str(2 + i % 3), exact=True).click()
                    warm.append(_settled(page))
                print(f"{tokens:<10}{first:>12.2f}{statistics.median(warm):>15.2f}{max(warm):>12.2f}")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
