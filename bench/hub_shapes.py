"""BERT-Base and BERT-Large with random weights, as if downloaded from the Hub: for speed measurements.

    python bench/hub_shapes.py /tmp/bench-hub base large
    HF_HOME=/tmp/bench-hub HF_HUB_OFFLINE=1 streamlit run run_app.py   # "BERT-Base, uncased (downloaded)"

Speed does not depend on the values of the weights, so a benchmark of the paper's models needs only
their shapes: BERT-Base 12 × 768 × 12 (110 M parameters), BERT-Large 24 × 1024 × 16 (335 M), the
standard uncased vocabulary, both pre-training heads. Each is written into a Hugging Face cache
(``HF_HOME/hub/models--google-bert--bert-base-uncased/snapshots/…``) under the real repository's
name, so the app lists it as downloaded and opens it offline, exactly as it opens a real download.
Made here, never committed (0.44 GB and 1.34 GB).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = {"base": "google-bert/bert-base-uncased", "large": "google-bert/bert-large-uncased"}
SNAPSHOT = "0" * 40  # a commit name of the right form; nothing reads it but the cache's layout


def make(hf_home: Path, which: str) -> Path:
    """The snapshot folder of ``which`` ("base" or "large") in ``hf_home``'s cache, made if missing."""
    import torch

    from bert_explorer import checkpoint
    from bert_explorer.model import BertForPreTraining, preset
    from bert_explorer.tokenizer import WordPieceTokenizer

    repo = SHAPES[which]
    folder = Path(hf_home) / "hub" / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / SNAPSHOT
    if not (snapshot / "model.safetensors").is_file():
        tok = WordPieceTokenizer.from_dir(checkpoint.resolve("minilm"))  # the standard 30,522-piece vocabulary
        torch.manual_seed(0)
        checkpoint.save(BertForPreTraining(preset(which, vocab_size=tok.vocab_size)), tok, snapshot)
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(SNAPSHOT)
    return snapshot


if __name__ == "__main__":
    import argparse

    # (it took its arguments bare: `--help` became a folder and got 0.44 GB of weights)
    ap = argparse.ArgumentParser(description="Write BERT-Base and BERT-Large with random weights into a Hugging Face "
                                             "cache, as if downloaded, for speed measurements.")
    ap.add_argument("hf_home", type=Path, help="the cache's HF_HOME (a folder; about 0.44 GB for base, 1.34 for large)")
    ap.add_argument("shapes", nargs="*", choices=list(SHAPES), default=["base"], help="which (default: base)")
    args = ap.parse_args()
    for name in args.shapes:
        print(f"{SHAPES[name]}: {make(args.hf_home, name)}")
