"""Micro-benchmark of store.lexical.index: build time, search latency and memory at 100k memories.

Run: python bench/lexical_micro.py [--docs 100000] [--words 20] [--session-size 20]
Documents are synthetic: a date prefix plus words drawn from a Zipf(1.1) distribution over a
50k-word vocabulary, so query terms have realistic posting-list lengths, in sessions of
--session-size memories. search_context is a search with the default lexical_context (each
memory also read with the one before it). Prints results only.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from store.lexical.cache import LexicalCache, Versions
from store.lexical.index import LexDoc, LexicalIndex
from store.lexical.view import LexicalView
from store.settings import RetrievalSettings

VOCAB = 50_000
CONTEXT = RetrievalSettings().lexical_context


def _rss_mib() -> float:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _words(rng: random.Random, n: int) -> list[str]:
    weights = [1 / (rank**1.1) for rank in range(1, VOCAB + 1)]
    return [f"w{i}" for i in rng.choices(range(VOCAB), weights=weights, k=n)]


def _docs(n: int, words: int, session_size: int, start_id: int = 1) -> list[LexDoc]:
    rng = random.Random(start_id)
    pool = _words(rng, n * words)
    docs = []
    for i in range(n):
        date = f"2023-{1 + i % 12:02d}-{1 + i % 28:02d}"
        text = " ".join(pool[i * words : (i + 1) * words])
        session = f"s{(start_id + i) // session_size}"
        docs.append(LexDoc(memory_id=start_id + i, text=f"{date} {text}", session_key=session))
    return docs


def _queries(n: int) -> list[str]:
    rng = random.Random(42)
    return [" ".join(_words(rng, rng.randint(3, 8))) for _ in range(n)]


def _latency_ms(fn: Callable[[str, int], object], queries: list[str]) -> tuple[float, float]:
    times = []
    for query in queries:
        start = time.perf_counter()
        fn(query, 100)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)]


def _report_latency(label: str, view: LexicalView, queries: list[str]) -> None:
    def with_context(query: str, k: int) -> object:
        return view.search(query, k, context=CONTEXT)

    searches = {"search": view.search, "search_context": with_context}
    for name, fn in (*searches.items(), ("search_sessions", view.search_sessions)):
        med, p95 = _latency_ms(fn, queries)
        print(f"  {label:<28} {name:<16} k=100  median {med:6.2f} ms   p95 {p95:6.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--session-size", type=int, default=20)
    parser.add_argument("--max-tail", type=int, default=2000)
    args = parser.parse_args()

    docs = _docs(args.docs, args.words, args.session_size)
    queries = _queries(300)
    gc.collect()
    rss_before = _rss_mib()
    start = time.perf_counter()
    index = LexicalIndex.build(docs)
    build_s = time.perf_counter() - start
    gc.collect()
    print(f"docs={args.docs} words/doc={args.words} sessions={args.docs // args.session_size}")
    print(f"build (tokenise + memory and session indexes): {build_s:.2f} s")
    print(f"index memory (RSS growth after build): {_rss_mib() - rss_before:.0f} MiB")
    _report_latency("base only", LexicalView(index), queries)
    del index
    gc.collect()

    cache = LexicalCache(max_tail=args.max_tail)
    source = _Source(docs)

    def timed_get() -> float:
        start = time.perf_counter()
        cache.get("ns", source)
        return (time.perf_counter() - start) * 1000

    cache.get("ns", source)
    print(f"cache hit (same revision): {timed_get():.3f} ms")
    for tail in (1, 2, args.max_tail // 2, args.max_tail):
        missing = tail - (len(source.docs) - args.docs)
        source.extend(_docs(missing, args.words, args.session_size, len(source.docs) + 1))
        refresh_ms = timed_get()
        start = time.perf_counter()
        cache.get("ns", source).search(queries[0], 100, context=CONTEXT)
        chain_ms = (time.perf_counter() - start) * 1000
        print(
            f"refresh with tail of {tail:>5} docs: {refresh_ms:7.1f} ms;"
            f" its first context search (chains the view): {chain_ms:6.1f} ms"
        )
    _report_latency(f"base + tail of {args.max_tail}", cache.get("ns", source), queries)
    source.extend(_docs(1, args.words, args.session_size, len(source.docs) + 1))
    print(f"tail overflow -> merge into a new base: {timed_get() / 1000:.2f} s")
    cache.invalidate("ns")
    gc.collect()
    _report_traced(docs)


class _Source:
    """An append-only namespace as the cache reads it (ids 1..n in order)."""

    def __init__(self, docs: list[LexDoc]) -> None:
        self.docs = list(docs)
        self.revision = 1

    def extend(self, docs: list[LexDoc]) -> None:
        self.docs.extend(docs)
        self.revision += 1

    def revisions(self, namespace: str) -> tuple[int, int]:
        return self.revision, 0

    def all_docs(self, namespace: str) -> list[LexDoc]:
        return list(self.docs)

    def docs_after(self, namespace: str, after_id: int) -> list[LexDoc]:
        return self.docs[max(after_id, 0) :]

    def docs_of(self, namespace: str, ids: Sequence[int]) -> list[LexDoc]:
        return [self.docs[i - 1] for i in ids]

    def versions(self, namespace: str) -> Versions:
        ids = np.arange(1, len(self.docs) + 1, dtype=np.int64)
        return Versions(active_ids=ids, active_versions=np.zeros_like(ids), stored_ids=ids)


def _report_traced(docs: list[LexDoc]) -> None:
    """Python + numpy heap the index keeps, and the peak while building (tracemalloc)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = LexicalIndex.build(docs)
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"index heap kept: {(kept - before) / 2**20:.0f} MiB, build peak: {peak / 2**20:.0f} MiB")
    del index


if __name__ == "__main__":
    main()
