"""Micro-benchmark of store.vector.index on Chroma: ~100k random 384-dim vectors.

Prints bulk upsert throughput, query latency (p50/p95/p99) for a few n, recall@10
against exact search, versions() and small delete/re-upsert timings.

    python bench/chroma_micro.py                       # embedded, temp dir
    python bench/chroma_micro.py --url http://127.0.0.1:8000
    python bench/chroma_micro.py --count 20000 --queries 100
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from store.vector.index import IndexItem, VectorIndex

FloatMatrix = npt.NDArray[np.float32]


class RandomEmbedder:
    """Random unit vectors, remembered per text so exact search can be computed.

    ``clusters`` > 0 draws them around that many centres, closer to real sentence
    embeddings; 0 gives uniform vectors, HNSW's worst case (every vector is almost
    equally far from every other, so recall collapses).
    """

    def __init__(self, dim: int, clusters: int, seed: int = 0) -> None:
        self._dim = dim
        self._rng = np.random.default_rng(seed)
        self._centres = self._rng.standard_normal((clusters, dim)).astype(np.float32)
        self.vectors: dict[str, FloatMatrix] = {}

    @property
    def model_id(self) -> str:
        return f"bench:random:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        out = self._rng.standard_normal((len(texts), self._dim)).astype(np.float32)
        if len(self._centres):
            picks = self._rng.integers(0, len(self._centres), len(texts))
            out = self._centres[picks] + 0.6 * out
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        for text, row in zip(texts, out, strict=True):
            self.vectors[text] = row
        return out


def _percentiles(samples: list[float]) -> str:
    ms = np.array(samples) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return f"p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  p99 {p99:7.2f} ms  max {ms.max():7.2f} ms"


def _fill(index: VectorIndex, namespace: str, count: int) -> None:
    items = [IndexItem(memory_id=i, version=1, text=f"memory {i}") for i in range(count)]
    started = time.perf_counter()
    chunk = 20_000  # upsert() batches itself; chunks only make progress visible
    for start in range(0, count, chunk):
        index.upsert(namespace, items[start : start + chunk])
    elapsed = time.perf_counter() - started
    print(f"upsert {count} vectors: {elapsed:.1f} s ({count / elapsed:,.0f} vectors/s)")


def _bench_queries(
    index: VectorIndex, namespace: str, embedder: RandomEmbedder, queries: int
) -> None:
    vectors = embedder.embed([f"query {i}" for i in range(queries)])
    started = time.perf_counter()
    index.query(namespace, vectors[0], 10)
    print(f"first query (cold): {(time.perf_counter() - started) * 1000:.1f} ms")
    for n in (10, 50, 200):
        samples = []
        for vector in vectors:
            started = time.perf_counter()
            index.query(namespace, vector, n)
            samples.append(time.perf_counter() - started)
        print(f"query n={n:<4} {_percentiles(samples)}")


def _bench_recall(index: VectorIndex, namespace: str, embedder: RandomEmbedder) -> None:
    stored = {
        text: vector for text, vector in embedder.vectors.items() if text.startswith("memory")
    }
    ids = np.array([int(text.split()[1]) for text in stored])
    matrix = np.stack(list(stored.values()))
    found = 0
    trials = 50
    for query in embedder.embed([f"recall probe {i}" for i in range(trials)]):
        exact = set(ids[np.argsort(-(matrix @ query))[:10]].tolist())
        found += len(exact & {hit.memory_id for hit in index.query(namespace, query, 10)})
    print(f"recall@10 vs exact search: {found / (trials * 10):.3f}")


def _bench_maintenance(index: VectorIndex, namespace: str) -> None:
    started = time.perf_counter()
    versions = index.versions(namespace)
    print(f"versions(): {len(versions)} memories in {time.perf_counter() - started:.2f} s")
    samples = []
    for i in range(20):
        item = IndexItem(memory_id=i, version=2, text=f"memory {i}. Now with two sentences!")
        started = time.perf_counter()
        index.upsert(namespace, [item])
        samples.append(time.perf_counter() - started)
    print(f"re-upsert 1 memory (lookup + upsert): {_percentiles(samples)}")
    started = time.perf_counter()
    index.delete(namespace, list(range(1000, 1100)))
    print(f"delete 100 memories: {(time.perf_counter() - started) * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Chroma server URL (default: embedded in a temp dir)")
    parser.add_argument("--path", type=Path, help="embedded database directory")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout, seconds")
    parser.add_argument("--clusters", type=int, default=500, help="0: uniform random vectors")
    args = parser.parse_args()

    embedder = RandomEmbedder(args.dim, args.clusters)
    with tempfile.TemporaryDirectory(prefix="chroma-bench-") as tmp:
        path = args.path or Path(tmp)
        index = VectorIndex.open(embedder=embedder, url=args.url, path=path, timeout=args.timeout)
        namespace = f"bench {time.time_ns()}"
        print(f"target: {args.url or path}  count={args.count} dim={args.dim}", end="")
        print(f" clusters={args.clusters}")
        try:
            _fill(index, namespace, args.count)
            _bench_queries(index, namespace, embedder, args.queries)
            _bench_recall(index, namespace, embedder)
            _bench_maintenance(index, namespace)
        finally:
            index.drop(namespace)
            index.close()


if __name__ == "__main__":
    main()
