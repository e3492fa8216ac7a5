"""In-process measurements: our search, the bare Chroma baseline, a breakdown, a profile."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from benchkit import ROOT, say, settings_for

from latency_bench.common import (
    BARE_N_RESULTS,
    BREAKDOWN_QUERIES,
    NAMESPACE,
    NOW,
    WARMUP,
    bounded,
    load_average,
    percentiles,
    request,
    timed,
)
from latency_bench.prepare import Prepared
from store.service import Store
from store.vector.embedder import Embedder
from store.vector.recent import RecentEmbeddings


def uncached(embedder: Embedder) -> Embedder:
    """The model under the store's memory of recent embeddings (``store.vector.recent``)."""
    return embedder.inner if isinstance(embedder, RecentEmbeddings) else embedder


class BareChroma:
    """The baseline: embed with the same embedder, then one plain collection.query."""

    def __init__(self, chroma_path: Path, embedder: Embedder) -> None:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        from store.vector.index import collection_name

        self._client = chromadb.PersistentClient(
            path=str(chroma_path), settings=ChromaSettings(anonymized_telemetry=False)
        )
        self._collection = self._client.get_collection(collection_name(NAMESPACE))
        self._embedder = embedder

    def query(self, text: str) -> Any:
        vector = self._embedder.embed([text])
        return self._collection.query(query_embeddings=vector, n_results=BARE_N_RESULTS)

    def count(self) -> int:
        return int(self._collection.count())

    def close(self) -> None:
        self._client.close()  # type: ignore[attr-defined]


BARE_PROCESS = """
import json, sys
from pathlib import Path
import chromadb
from chromadb.config import Settings
from store.vector.embedder import make_embedder
from store.vector.index import collection_name
path, namespace, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = chromadb.PersistentClient(path=path, settings=Settings(anonymized_telemetry=False))
collection = client.get_collection(collection_name(namespace))
embedder = make_embedder(cache_dir=Path(sys.argv[4]))  # the low-memory graph, as the store's
for query in queries:
    collection.query(query_embeddings=embedder.embed([query]), n_results=10)
status = dict(
    line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
)
print(json.dumps({k: round(int(status[k].split()[0]) / 1024, 1) for k in ("VmRSS", "VmHWM")}))
"""


def bare_process_rss(
    chroma_path: Path, cache_dir: Path, queries: Sequence[str]
) -> dict[str, float]:
    """RSS of a process doing only the bare baseline (Chroma + the ONNX model), for scale."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(chroma_path), NAMESPACE, json.dumps(queries), str(cache_dir)]
    done = subprocess.run(
        [sys.executable, "-c", BARE_PROCESS, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure_in_process(
    prep: Prepared, queries: Sequence[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Search latency through Store.searcher, optionally interleaved with bare Chroma."""
    store = Store.open(settings_for(prep.data_dir))
    bare: BareChroma | None = None
    out: dict[str, Any] = {"load_average_before": load_average()}
    try:
        search = store.searcher.search

        def ours(query: str) -> Callable[[], Any]:
            wanted = request(query)
            return lambda: search(wanted, now=NOW)

        warmup, measured = queries[:WARMUP], queries[WARMUP:]
        out["cold_first_search_ms"] = round(timed(ours(warmup[0])) * 1000, 1)
        for query in warmup:
            ours(query)()
        if args.bare:
            # The model itself: the store's embedder remembers the texts it embedded, so the
            # second of the pair to embed a question would not.
            bare = BareChroma(store.settings.chroma_path, uncached(store.embedder))
            out["vectors"] = bare.count()
            for query in warmup:
                bare.query(query)
        mine: list[float] = []
        base: list[float] = []
        for number, query in enumerate(bounded(measured, args.budget)):
            if bare is None:
                mine.append(timed(ours(query)))
            elif number % 2 == 0:  # alternate who goes first, so neither gets the warmer cache
                mine.append(timed(ours(query)))
                base.append(timed(partial(bare.query, query)))
            else:
                base.append(timed(partial(bare.query, query)))
                mine.append(timed(ours(query)))
        out["search"] = percentiles(mine)
        if base:
            out["bare"] = {**percentiles(base), "n_results": BARE_N_RESULTS}
            out["ratio_p50"] = round(out["search"]["p50_ms"] / out["bare"]["p50_ms"], 2)
            out["ratio_p95"] = round(out["search"]["p95_ms"] / out["bare"]["p95_ms"], 2)
        out["breakdown"] = breakdown(store, measured[:BREAKDOWN_QUERIES], args.budget)
        if args.bare:
            out["bare_process_rss_mib"] = bare_process_rss(
                store.settings.chroma_path, store.settings.data_dir / "cache", queries[:WARMUP]
            )
        if args.profile:
            out["profile"] = profile_searches(store, queries, prep)
    finally:
        if bare is not None:
            bare.close()
        store.close()
    out["load_average_after"] = load_average()
    return out


def _bm25(view: Any, query: str, k: int, context: float) -> None:
    view.search(query, k, context=context)
    view.search_sessions(query, 100)


def breakdown(store: Store, queries: Sequence[str], budget: float) -> dict[str, Any]:
    """Time the parts of a search on their own: query embedding, Chroma query, BM25 (with
    each memory's context, as the search scores it)."""
    index = store.index
    model = uncached(store.embedder)
    view = store.searcher.lexical_view(NAMESPACE)
    n = store.settings.retrieval.dense_candidates
    lexical_k = store.settings.retrieval.lexical_candidates
    context = store.settings.retrieval.lexical_context
    embed, chroma, lexical, plain = [], [], [], []
    for query in bounded(queries, budget):
        embed.append(timed(partial(model.embed, [query])))  # its searches embedded it
        vector = index.embed_query(query)
        chroma.append(timed(partial(index.query, NAMESPACE, vector, n)))
        lexical.append(timed(partial(_bm25, view, query, lexical_k, context)))
        plain.append(timed(partial(_bm25, view, query, lexical_k, 0.0)))
    return {
        "embed_query": percentiles(embed),
        f"chroma_query_n{n}": percentiles(chroma),
        "bm25_memories_and_sessions": percentiles(lexical),
        "bm25_without_context": percentiles(plain),
    }


def profile_searches(store: Store, queries: Sequence[str], prep: Prepared) -> str:
    """cProfile 100 warm searches; write the stats and return the path of the text report."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    requests = [request(q) for q in queries[:100]]
    profiler.enable()
    for wanted in requests:
        store.searcher.search(wanted, now=NOW)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    path = prep.dir / "search-profile.txt"
    path.write_text(text.getvalue())
    say(f"n={prep.size}: search profile written to {path}")
    return str(path.relative_to(ROOT))
