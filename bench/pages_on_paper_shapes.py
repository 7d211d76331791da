"""Every page on checkpoints of the paper's shapes: BERT-Base (L=12, H=768, A=12; uncased and cased)
and an L=2 miniature (H=128, A=2), with random weights made here (never committed, never downloaded).

Each page is opened headless (Streamlit's AppTest) with the model chosen in the sidebar, as a visitor
opens it: its default interaction must complete with no exception and no error. The corpus-wide work
(layer probing, the neighbour index) shows its estimate for this model, then runs on a small sample.

    python bench/pages_on_paper_shapes.py [--out DIR] [--pages 2_Attention.py,...] [--models base-uncased,...]

Prints a markdown table: page × model, pass/fail and seconds. The pages run in one process, as in one
server: the first page of a model pays for loading it (BERT-Base: about 440 MB read and built), the later
ones find it loaded (the app keeps models in memory up to BERT_EXPLORER_MODEL_MEMORY_GB).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "pages").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))


def make_models(out: Path) -> dict[str, Path]:
    """Random BertForPreTraining weights in the three shapes, saved as transformers-style folders."""
    import torch

    from bert_explorer import checkpoint
    from bert_explorer.data.corpora import load_corpus
    from bert_explorer.model import BertForPreTraining, preset
    from bert_explorer.tokenizer import WordPieceTokenizer

    uncased = WordPieceTokenizer.from_dir(checkpoint.resolve("minilm"))  # the standard 30,522-piece vocabulary
    made = {}
    for name, size, tok in (("base-uncased", "base", uncased), ("L2-H128", "L2-H128", uncased),
                            ("base-cased", "base", None)):
        folder = out / name
        if not (folder / "model.safetensors").is_file():
            if tok is None:  # no cased vocabulary ships offline: learn one of BERT-Base-cased's size, cased
                texts = (s for doc in load_corpus("bbc") + load_corpus("wiki") for s in doc)
                tok = WordPieceTokenizer.train(texts, vocab_size=28996, lowercase=False)
            torch.manual_seed(0)
            model = BertForPreTraining(preset(size, vocab_size=tok.vocab_size))
            checkpoint.save(model, tok, folder)
        made[name] = folder
    return made


def run_page(page: Path, model: Path, runs_root: Path) -> tuple[bool, float, str]:
    """(passed, seconds, what went wrong) of one page's first visit and its default interaction."""
    from streamlit.testing.v1 import AppTest

    os.environ["BERT_EXPLORER_RUNS"] = str(runs_root)
    t = time.perf_counter()
    at = AppTest.from_file(str(page), default_timeout=1200)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(model)
    at.run()
    if page.name.startswith("7_"):  # model B: the model itself (every difference 0), the comparison computed in full
        at.selectbox(key="two_model_b").set_value(str(model)).run()
    if page.name.startswith("8_"):  # the probes on a small sample: 100 NER sentences, 20 articles
        at.number_input(key="probe_n_sent").set_value(100)
        at.number_input(key="probe_n_art").set_value(20).run()
        estimate = [i.value for i in at.info if "Measured here for this model" in i.value]
        for button in [b for b in at.button if b.key == "probe_run"]:
            button.click().run()
        if not estimate:
            return False, time.perf_counter() - t, "no estimate shown"
    if page.name.startswith("9_"):
        shown = any("Building it runs the model" in m.value for m in at.markdown)
        if not shown and not at.exception:
            return False, time.perf_counter() - t, "no estimate of the index build"
        # the build itself, on the small sample the bench offers instead of all of BBC (see main)
        for button in [b for b in at.button if b.key == "nn_build"]:
            button.click().run()
        deadline = time.time() + 900
        while any("Building the index" in h.value for h in at.subheader) and time.time() < deadline:
            time.sleep(3)
            at.run()
        if any(h.value.startswith(("No index", "Building")) for h in at.subheader):
            return False, time.perf_counter() - t, "the index was not built"
    seconds = time.perf_counter() - t
    shown = [m.value for m in at.sidebar.markdown if "**L** = " in m.value]
    layers = int(__import__("json").loads((model / "config.json").read_text())["num_hidden_layers"])
    if shown and f"**L** = {layers} layers" not in shown[0]:
        return False, seconds, f"the sidebar shows another model: {shown[0][:60]}"
    if at.exception:
        return False, seconds, str(at.exception[0].value).splitlines()[0][:120]
    errors = [e.value for e in at.error]
    if errors:
        return False, seconds, errors[0][:120]
    return True, seconds, ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "bert-paper-shapes"))
    ap.add_argument("--pages", default="", help="comma-separated page files (default: all)")
    ap.add_argument("--models", default="base-uncased,base-cased,L2-H128")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    # a cache of its own: every estimate is shown and every computation made, as on a first visit
    os.environ["BERT_EXPLORER_CACHE"] = tempfile.mkdtemp(prefix="bench-cache-")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    models = make_models(out)
    # The Nearest neighbours page builds its index over all of BBC (an hour for BERT-Base on 2 cores): the
    # bench offers it a sample of 300 BBC sentences instead, as the tests offer theirs.
    from bert_explorer.analysis.neighbours import search
    from bert_explorer.data.corpora import load_corpus

    sample = out / "bbc-sample.txt"
    docs = load_corpus("bbc")[:40]
    sample.write_text("\n\n".join("\n".join(doc[:8]) for doc in docs) + "\n")
    search.PAGE_CORPORA = {"bbc (a sample of 40 articles)": str(sample)}
    print(f"models made in {out} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    wanted = [m for m in args.models.split(",") if m]
    pages = [p for p in PAGES if not args.pages or p.name in args.pages.split(",")]
    print("| page | " + " | ".join(wanted) + " |")
    print("|---|" + "---|" * len(wanted))
    for page in pages:
        cells = []
        for m in wanted:
            ok, seconds, why = run_page(page, models[m], Path(tempfile.mkdtemp(prefix="runs-")))
            cells.append(f"pass, {seconds:.1f} s" if ok else f"**fail** ({why}), {seconds:.1f} s")
        print(f"| {page.stem} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
