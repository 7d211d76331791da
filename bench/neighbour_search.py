"""How to search a million contextual token vectors: exact matmul against faiss, measured.

The Nearest-neighbours page searches an index of about 1 M WordPiece vectors (BBC News, H=384,
fp16 on disk, unit length so cosine = dot product) for the k nearest to one query token. This
compares, on this machine:

* exact search over the fp16 matrix, memory-mapped: PyTorch's fp16 matrix-vector product with
  the near-ties of the k-th score re-scored in fp32 (what ``analysis/neighbours/search.py`` does);
  the same product alone; and a chunk at a time widened to fp32 (PyTorch, numpy);
* exact search over an fp32 copy held in memory (numpy), the price of skipping the widening;
* faiss (if installed): ``IndexFlatIP`` (exact, fp32 in memory), ``IndexScalarQuantizer`` fp16
  (exact on the fp16 values, SIMD-decoded), ``IVF`` (approximate: k-means cells, searching
  ``nprobe`` of them) and ``HNSW`` (approximate graph), with their recall@10 against exact.

For each: build time (what must happen after the vectors are on disk), memory it adds to the
process (anonymous RSS; a memory-mapped file is shared page cache instead), median latency of
one query, and recall@10. Queries are rows of the index (a user's token is like a corpus
token), so the row itself is always among the exact answers.

    python bench/neighbour_search.py                       # the BBC layer-6 index if built, else synthetic
    python bench/neighbour_search.py --index ~/.cache/bert-explorer/neighbours-XXXX --threads 1
    python bench/neighbour_search.py --synthetic 1000000   # clustered random data, 384 dims

faiss is not a dependency of the project: install it for this benchmark with
``pip install faiss-cpu`` (or ``pip install --target DIR faiss-cpu`` and ``--faiss-path DIR``).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def rss_anon_mb() -> float:
    """Anonymous resident memory of this process (heap, not file-backed pages), MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def default_index() -> Path | None:
    """The BBC index of minilm-mlm-nsp at layer 6, if it has been built."""
    try:
        from bert_explorer import checkpoint
        from bert_explorer.analysis.neighbours import index as nbb

        path = nbb.index_path(checkpoint.load("minilm-mlm-nsp", "BertModel"), "bbc", 6)
        return path if nbb.is_complete(path) else None
    except Exception:  # noqa: BLE001 — a benchmark falls back to synthetic data
        return None


def synthetic(n: int, d: int = 384, clusters: int = 2000, seed: int = 0) -> np.ndarray:
    """Unit vectors around ``clusters`` centres (token vectors cluster by word), fp16."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    out = np.empty((n, d), np.float16)
    for a in range(0, n, 100_000):
        b = min(n, a + 100_000)
        x = centres[rng.integers(0, clusters, b - a)] + 0.6 * rng.standard_normal((b - a, d)).astype(np.float32)
        out[a:b] = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)
    return out


def timed(fn, queries, repeat: int) -> tuple[float, list]:
    fn(queries[0])  # warm: pages the matrix in, lets faiss allocate
    times, answers = [], []
    for q in queries[:repeat]:
        t = time.perf_counter()
        answers.append(fn(q))
        times.append(time.perf_counter() - t)
    return float(np.median(times)), answers


def recall(answers, truth, k: int) -> float:
    return float(np.mean([len(set(a[:k]) & set(t[:k])) / k for a, t in zip(answers, truth)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", help="a built index folder (vectors.npy); default: BBC layer 6 of minilm-mlm-nsp")
    p.add_argument("--synthetic", type=int, help="use N clustered random vectors instead")
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads for torch and faiss")
    p.add_argument("--faiss-path", help="a folder holding faiss (pip install --target)")
    p.add_argument("--hnsw-rows", type=int, default=200_000,
                   help="HNSW is built on the first N rows only (its build is slow); 0 = skip, -1 = all")
    p.add_argument("--skip-fp32", action="store_true", help="skip methods that copy the matrix to fp32")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.faiss_path:
        sys.path.insert(0, args.faiss_path)

    if args.synthetic:
        vectors, source = synthetic(args.synthetic), f"synthetic clustered, {args.synthetic:,} rows"
    else:
        path = Path(args.index) if args.index else default_index()
        if path is None:
            vectors, source = synthetic(1_000_000), "synthetic clustered, 1,000,000 rows (no index built)"
        else:
            vectors, source = np.load(path / "vectors.npy", mmap_mode="c"), str(path)
    N, H = vectors.shape
    rng = np.random.default_rng(1)
    rows = rng.choice(N, args.queries, replace=False)
    queries = [np.asarray(vectors[r], dtype=np.float32) for r in rows]
    k = args.k
    print(f"{N:,} vectors × {H} (fp16, {vectors.nbytes / 1e6:,.0f} MB) from {source}; {args.queries} queries, "
          f"k = {k}, {args.threads} thread(s), {os.cpu_count()} cores")

    from bert_explorer.analysis.neighbours.search import exact_search

    results = []  # (method, build s, memory MB, median latency s, recall@k, note)

    def torch_chunks(q):  # the reference: every score in fp32, a chunk of the matrix at a time
        qt, best_s, best_i = torch.from_numpy(q), [], []
        for a in range(0, N, 65536):
            s = torch.from_numpy(np.asarray(vectors[a:a + 65536])).float() @ qt
            top = torch.topk(s, min(k, len(s)))
            best_s.append(top.values)
            best_i.append(top.indices + a)
        s, i = torch.cat(best_s), torch.cat(best_i)
        return i[torch.topk(s, k).indices].numpy()
    lat, truth = timed(torch_chunks, queries, args.queries)
    chunked = ("exact, torch, fp16 mmap → fp32 chunks", 0.0, 0.0, lat, 1.0, "the reference answers")

    base_mem = rss_anon_mb()
    lat, ans = timed(lambda q: exact_search(vectors, q, k)[1], queries, args.queries)
    results.append(("exact, torch fp16 matmul + fp32 re-scoring of near-ties (ours)", 0.0, rss_anon_mb() - base_mem,
                    lat, recall(ans, truth, k), "no build: the file is memory-mapped (shared page cache)"))
    results.append(chunked)

    def numpy_chunks(q):
        best = []
        for a in range(0, N, 65536):
            s = np.asarray(vectors[a:a + 65536], dtype=np.float32) @ q
            i = np.argpartition(-s, min(k, len(s) - 1))[:k]
            best.extend(zip(s[i], i + a))
        return [i for _, i in sorted(best, reverse=True)[:k]]
    lat, ans = timed(numpy_chunks, queries, args.queries)
    results.append(("exact, numpy, fp16 mmap → fp32 chunks", 0.0, 0.0, lat, recall(ans, truth, k), ""))

    vt = torch.from_numpy(np.asarray(vectors))
    lat, ans = timed(lambda q: torch.topk(vt @ torch.from_numpy(q).half(), k).indices.numpy(), queries,
                     max(3, args.queries // 4))
    results.append(("torch fp16 matmul, top-k of the fp16 scores", 0.0, 0.0, lat, recall(ans, truth, k),
                    "scores rounded to fp16: near-ties swap"))

    if not args.skip_fp32:
        gc.collect()
        m0, t = rss_anon_mb(), time.perf_counter()
        v32 = np.asarray(vectors, dtype=np.float32)
        build = time.perf_counter() - t
        lat, ans = timed(lambda q: np.argpartition(-(v32 @ q), k)[:k], queries, args.queries)
        results.append(("exact, numpy, fp32 copy in memory", build, rss_anon_mb() - m0, lat, recall(ans, truth, k), ""))
        del v32
        gc.collect()

    try:
        import faiss
    except ImportError:
        faiss = None
        print("faiss is not installed: the library rows are skipped (pip install faiss-cpu)")
    if faiss is not None:
        faiss.omp_set_num_threads(args.threads)

        def add_all(index):
            for a in range(0, N, 100_000):
                index.add(np.asarray(vectors[a:a + 100_000], dtype=np.float32))

        def run(name, make, note="", n_queries=args.queries, setup=None):
            gc.collect()
            m0, t = rss_anon_mb(), time.perf_counter()
            index = make()
            build = time.perf_counter() - t
            for label, prepare in (setup or [("", None)]):
                if prepare:
                    prepare(index)
                lat, ans = timed(lambda q: index.search(q[None], k)[1][0], queries, n_queries)
                results.append((f"{name}{label}", build, rss_anon_mb() - m0, lat, recall(ans, truth, k), note))
            return None  # drop the index (its memory) before the next one is built

        if not args.skip_fp32:
            def flat():
                index = faiss.IndexFlatIP(H)
                add_all(index)
                return index
            run("faiss IndexFlatIP (exact, fp32)", flat)  # (each index is freed when run returns)

        def sq16():
            index = faiss.IndexScalarQuantizer(H, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
            add_all(index)
            return index
        run("faiss IndexScalarQuantizer fp16 (exact)", sq16)

        nlist = int(4 * np.sqrt(N))

        def ivf():
            quantizer = faiss.IndexFlatIP(H)
            index = faiss.IndexIVFScalarQuantizer(quantizer, H, nlist, faiss.ScalarQuantizer.QT_fp16,
                                                  faiss.METRIC_INNER_PRODUCT)
            train = np.asarray(vectors[rng.choice(N, min(N, 40 * nlist), replace=False)], dtype=np.float32)
            index.train(train)
            add_all(index)
            return index

        def nprobe(n):
            def set_(index):
                index.nprobe = n
            return set_
        run(f"faiss IVF{nlist},SQfp16", ivf, "train on 40 × nlist rows + add",
            setup=[(f", nprobe {n}", nprobe(n)) for n in (8, 32, 128)])

        if args.hnsw_rows:
            n_h = N if args.hnsw_rows < 0 else min(N, args.hnsw_rows)

            def hnsw():
                index = faiss.IndexHNSWFlat(H, 32, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = 40
                for a in range(0, n_h, 50_000):
                    index.add(np.asarray(vectors[a:min(n_h, a + 50_000)], dtype=np.float32))
                return index

            sub = vectors[:n_h]
            sub_truth = [exact_search(sub, q, k)[1] for q in queries]
            gc.collect()
            m0, t = rss_anon_mb(), time.perf_counter()
            index = hnsw()
            build = time.perf_counter() - t
            for ef in (64, 256):
                index.hnsw.efSearch = ef
                lat, ans = timed(lambda q: index.search(q[None], k)[1][0], queries, args.queries)
                note = "" if n_h == N else (f"built on the first {n_h:,} rows only "
                                            f"(build ≈ {build * N / n_h:,.0f} s at {N:,})")
                results.append((f"faiss HNSW32, efSearch {ef}", build, rss_anon_mb() - m0, lat,
                                recall(ans, sub_truth, k), note))
            del index

    print()
    print(f"| method | build s | memory MB | query ms | recall@{k} | note |")
    print("|---|---:|---:|---:|---:|---|")
    for name, build, mem, lat, rec, note in results:
        print(f"| {name} | {build:.1f} | {mem:,.0f} | {lat * 1000:.0f} | {rec:.3f} | {note} |")


if __name__ == "__main__":
    main()
