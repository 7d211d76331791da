"""How long Chromium takes to load and draw bertviz's head view of a 128-token sentence pair.

    python bench/bertviz_draw.py [MODEL ...]        # default: minilm-mlm-nsp
    HF_HOME=/tmp/bench-hub python bench/bertviz_draw.py bert-base-uncased   # random BERT-Base (bench/hub_shapes.py)

The document the Attention page sends (``bertviz_offline.render``, the same input as
``browser_interactions.py``'s 128-token sentence) is set into a blank page three times; each time is
from setting it to the drawing's text and two animation frames, with the number of lines drawn.
This is the browser's share of a new sentence on Attention without the app around it: the page's
own timing is ``browser_interactions.py --only attention128``. The lines drawn depend on the weights
(only lines light enough to see are left out), so a model with random weights draws none with all
heads shown, and a trained one its heavy lines.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_interactions import long_text  # noqa: E402

from bert_explorer import checkpoint  # noqa: E402
from bert_explorer.analysis.attention.bertviz_offline import render  # noqa: E402
from bert_explorer.analysis.attention.heads import attention_maps, window  # noqa: E402


def main(models: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    a, b = long_text(124)
    b += " it was day 9 ."
    docs = {name: render(window(attention_maps(checkpoint.load(name, "BertForPreTraining"), a, b, 128), 0, 128),
                         "head").html for name in models}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        for name, html in docs.items():
            for _ in range(3):
                page.set_content("<p>blank</p>")
                t = time.perf_counter()
                page.set_content(html)
                page.wait_for_selector("#vis svg text")
                page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                lines = page.eval_on_selector_all("#vis line", "ls => ls.length")
                print(f"{name}: {time.perf_counter() - t:.2f} s, {lines:,} lines drawn, {len(html) / 1e6:.1f} MB")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1:] or ["minilm-mlm-nsp"])
