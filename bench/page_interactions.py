"""How long does a page take to answer a change? Streamlit's AppTest runs each exploration page
headless (no browser, no network): a first run (imports, model load) and then warm reruns that
change one input, as a user typing a new sentence would.

    python bench/page_interactions.py [--repeats 3]
    python bench/page_interactions.py --long     # the Attention page at 128 and 512 tokens

There is no transformers anchor for a page (there is no such app to compare with); the goal
set for the pages is a warm interaction under 1 s on this CPU.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parent.parent / "pages"
# page file -> (widget kind, key, inputs to cycle through)
CHANGES = {
    "1_Tokens_and_embeddings.py": ("text_input", "be_sentence_a", ["the river bank flooded .", "she paid the bank ."]),
    "2_Attention.py": ("text_area", "be_sentence_a", ["the dog chased the ball .", "a storm hit the coast ."]),
    "4_Masked_word_probe.py": ("text_input", "mlm_text", ["the [MASK] sat on the mat .", "he drank a [MASK] ."]),
    "5_Next_sentence_probe.py": ("text_area", "nsp_b", ["it rained all day .", "prices rose again ."]),
    "6_Attributions.py": ("text_input", "attr_mlm_text", ["the [MASK] sat on the mat .", "he drank a [MASK] ."]),
}


def long_text(tokens: int) -> tuple[str, str]:
    """Two paragraphs of a BBC article (sentence A and B) of about ``tokens`` WordPieces in all."""
    from bert_explorer.checkpoint import load
    from bert_explorer.data.corpora import bbc_articles

    tok = load("minilm-mlm-nsp").tokenizer
    for _, doc in bbc_articles():
        a, b, n = [], [], 3
        for sentence in doc[1:]:
            (a if len(a) < len(doc) // 2 else b).append(sentence)
            n += len(tok.encode(sentence).input_ids) - 2
            if n >= tokens:
                return " ".join(a), " ".join(b)
    raise SystemExit("no article is long enough")


def long_inputs(repeats: int) -> None:
    """The Attention page with 128 and 512 tokens: the first run with a new input (the model and
    bertviz compute), then warm reruns that change the heatmap's head (what a user clicks)."""
    print(f"{'Attention page, tokens':<28}{'new input s':>12}{'warm median s':>15}{'warm max s':>12}")
    at = AppTest.from_file(str(PAGES / "2_Attention.py"), default_timeout=300).run()
    at.slider(key="att_max_tokens").set_value(512).run()
    for tokens in (128, 512):
        a, b = long_text(tokens)
        t = time.perf_counter()
        at.text_area(key="be_sentence_a").set_value(a)
        at.text_area(key="be_sentence_b").set_value(b).run()
        first = time.perf_counter() - t
        if at.exception:
            print(f"raised: {at.exception[0].value}")
            return
        warm = []
        for i in range(repeats):
            t = time.perf_counter()
            at.selectbox(key="att_hm_head").set_value((i + 1) % 4).run()
            warm.append(time.perf_counter() - t)
        n = len(at.selectbox(key="att_hm_layer").options) and tokens
        print(f"{n:<28}{first:>12.2f}{statistics.median(warm):>15.2f}{max(warm):>12.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--long", action="store_true", help="the Attention page at 128 and 512 tokens")
    args = p.parse_args()
    if args.long:
        return long_inputs(args.repeats)
    print(f"{'page':<28}{'first run s':>12}{'warm median s':>15}{'warm max s':>12}")
    for page, (kind, key, inputs) in CHANGES.items():
        if not (PAGES / page).exists():
            continue
        t = time.perf_counter()
        at = AppTest.from_file(str(PAGES / page), default_timeout=300).run()
        first = time.perf_counter() - t
        if at.exception:
            print(f"{page:<28} raised: {at.exception[0].value}")
            continue
        warm = []
        for i in range(args.repeats):
            widget = getattr(at, kind)(key=key)
            t = time.perf_counter()
            widget.set_value(inputs[i % len(inputs)] + " " * i).run()
            warm.append(time.perf_counter() - t)
        print(f"{page:<28}{first:>12.2f}{statistics.median(warm):>15.2f}{max(warm):>12.2f}")


if __name__ == "__main__":
    main()
