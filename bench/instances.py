"""How fast are pre-training instances made? create_instances on BBC News with the MiniLM vocab.

    python bench/instances.py [--docs 500] [--max-seq-length 128] [--objective mlm+nsp]

Prints instances/s and tokens/s (tokens = all ids of the instances, specials included), the
share of the time spent in WordPiece tokenisation, and the data statistics.
"""
from __future__ import annotations

import argparse
import time

from bert_explorer.checkpoint import resolve
from bert_explorer.data.corpora import load_corpus
from bert_explorer.data.pretraining import (MaskingConfig, _tokenize_documents, create_instances,
                                            statistics)
from bert_explorer.tokenizer import WordPieceTokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="bbc")
    ap.add_argument("--docs", type=int, default=None, help="first N documents (default: all)")
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--objective", default="mlm+nsp", choices=["mlm+nsp", "mlm", "ltr"])
    ap.add_argument("--whole-word", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    t0 = time.perf_counter()
    docs = load_corpus(args.corpus, max_documents=args.docs)
    t_load = time.perf_counter() - t0
    tok = WordPieceTokenizer.from_dir(resolve("minilm"))
    words = sum(len(s.split()) for d in docs for s in d)
    print(f"{args.corpus}: {len(docs)} documents, {words:,} words, loaded in {t_load:.2f} s; "
          f"vocab {tok.vocab_size}")

    best_tok = min(_timed(lambda: _tokenize_documents(docs, tok)) for _ in range(args.repeats))
    masking = MaskingConfig(whole_word=args.whole_word)
    times, instances = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        instances = create_instances(docs, tok, max_seq_length=args.max_seq_length,
                                     objective=args.objective, masking=masking, seed=0)
        times.append(time.perf_counter() - t0)
    best = min(times)
    n_tokens = sum(len(x.input_ids) for x in instances)
    print(f"create_instances ({args.objective}, T={args.max_seq_length}): {len(instances):,} "
          f"instances, {n_tokens:,} tokens in {best:.2f} s (best of {args.repeats})")
    print(f"  {len(instances) / best:,.0f} instances/s, {n_tokens / best:,.0f} tokens/s; "
          f"tokenisation {best_tok:.2f} s ({100 * best_tok / best:.0f}% of the time)")
    for k, v in statistics(instances, mask_id=tok.mask_id).items():
        print(f"  {k}: {v:.4f}" if isinstance(v, float) else f"  {k}: {v}")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
