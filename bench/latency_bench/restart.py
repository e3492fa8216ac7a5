"""Restarts (`--restart`): how long `secretary serve` takes to be warm again, and its RSS.

- **Build**: the lexical index built from SQL alone (into a directory of its own), which every
  restart cost before the index was saved beside the store; in-process.
- **Open**: a new Store maps the saved index (in-process).
- **Restart**: `secretary serve` started on the prepared store, whose lexical index is saved:
  time to /healthz warm (the model, the saved lexical index and the HNSW graph loaded), RSS.
- **Restart after writes**: on a copy of the store, while no server runs, new memories are
  ingested, memories edited and one forgotten (by this process, as `secretary forget` does:
  it merges the saved index without it); their vectors are written as in the preparation, so
  the server does not embed at start. Then the server starts on the copy and catches up.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import corpus
import httpx
from benchkit import say, settings_for

from latency_bench.common import BATCH, NAMESPACE, NOW, WARMUP, dir_mib, load_average, timed
from latency_bench.pool import PoolEmbedder, vector_pool
from latency_bench.prepare import Prepared
from latency_bench.served import _rss, _wait_ready, server
from store.lexical.source import SqlLexicalSource
from store.service import Store
from store.write.forget import ForgetSelection

NEW_MEMORIES = 1000
EDITED = 10


def measure_restart(
    prep: Prepared, queries: Sequence[str], args: argparse.Namespace
) -> dict[str, Any]:
    out: dict[str, Any] = {"load_average_before": load_average()}
    out["build_from_sql_s"] = _build_seconds(prep)
    out["open_saved_s"] = _open_seconds(prep.data_dir)
    out["saved_index_mib"] = dir_mib(prep.data_dir / "lexical")
    out["restart"] = _serve(prep.data_dir, prep.dir / "serve-restart.log", queries)
    copy = prep.dir / "restart-copy"
    try:
        out["writes_while_down"] = _write_while_down(prep, copy, args)
        out["restart_after_writes"] = _serve(copy, prep.dir / "serve-restart-writes.log", queries)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    out["load_average_after"] = load_average()
    return out


def _build_seconds(prep: Prepared) -> float:
    """Build the lexical index from SQL into a scratch directory (as every start did before)."""
    scratch = prep.dir / "lexical-build"
    shutil.rmtree(scratch, ignore_errors=True)
    settings = settings_for(prep.data_dir)
    settings = settings.model_copy(
        update={"lexical": settings.lexical.model_copy(update={"path": str(scratch)})}
    )
    store = Store.open(settings)
    try:
        seconds = timed(lambda: store.searcher.lexical_view(NAMESPACE))
        assert store.lexical.builds == 1
    finally:
        store.close()
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"n={prep.size}: lexical index built from SQL in {seconds:.1f} s")
    return round(seconds, 2)


def _open_seconds(data_dir: Path) -> float:
    """Map the saved index (saving it first if this store has none yet)."""
    first = Store.open(settings_for(data_dir))
    try:
        first.searcher.lexical_view(NAMESPACE)
    finally:
        first.close()
    store = Store.open(settings_for(data_dir))
    try:
        seconds = timed(lambda: store.searcher.lexical_view(NAMESPACE))
        assert store.lexical.builds == 0, "the saved lexical index was not used"
    finally:
        store.close()
    return round(seconds, 3)


def _serve(data_dir: Path, log_path: Path, queries: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with (
        server(data_dir, log_path) as (url, pid),
        httpx.Client(base_url=url, timeout=60.0) as client,
    ):
        started = time.monotonic()
        _wait_ready(client, timeout=120)
        out["listening_s"] = round(time.monotonic() - started, 1)
        _wait_ready(client, timeout=1800, warm=True)
        out["warm_s"] = round(time.monotonic() - started, 1)
        rss: dict[str, Any] = {"after_warm": _rss(pid)}

        def get(query: str) -> None:
            params = {"q": query, "namespace": NAMESPACE, "k": "10", "reinforce": "false"}
            client.get("/v1/search", params=params).raise_for_status()

        out["first_request_ms"] = round(timed(lambda: get(queries[0])) * 1000, 1)
        for query in queries[: WARMUP * 5]:
            get(query)
        rss["after_searches"] = _rss(pid)
        out["rss_mib"] = rss
    say(f"restart of {data_dir}: {out}")
    return out


def _write_while_down(prep: Prepared, copy: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Copy the store, then write to the copy as a CLI would while no server runs."""
    shutil.rmtree(copy, ignore_errors=True)
    out: dict[str, Any] = {"copy_s": round(timed(lambda: shutil.copytree(prep.data_dir, copy)), 1)}
    store = Store.open(settings_for(copy))
    try:
        # Forgotten first: the forgetting process merges the saved index without the memory;
        # what follows is left for the restarted server to catch up with.
        forgotten = (prep.size // 2,)
        out["forget_s"] = round(
            timed(
                lambda: store.forget(NAMESPACE, ForgetSelection(ids=forgotten), now=NOW, by="bench")
            ),
            2,
        )
        new = islice(corpus.memories(prep.size + NEW_MEMORIES, seed=prep.seed), prep.size, None)
        items = [{**item, "external_id": f"restart-{item['external_id']}"} for item in new]
        started = time.perf_counter()
        for start in range(0, len(items), BATCH):
            store.add_memories(NAMESPACE, items[start : start + BATCH], now=NOW, source="bench")
        out["ingest_s"] = round(time.perf_counter() - started, 2)
        for memory_id in range(1, prep.size, prep.size // EDITED):  # spread over the store
            store.edit(NAMESPACE, memory_id, {"content": f"edited while down {memory_id}"}, now=NOW)
        out["counters"] = SqlLexicalSource(store.db.search).revisions(NAMESPACE)
        pool = vector_pool(args.pool, store.embedder)
        model_id = store.embedder.model_id
    finally:
        store.close()
    filler = Store.open(settings_for(copy, batch_size=2000), embedder=PoolEmbedder(pool, model_id))
    try:
        out["vectors_s"] = round(timed(filler.indexer.sync), 1)
    finally:
        filler.close()
    out.update(new=NEW_MEMORIES, edited=EDITED, forgotten=1)
    say(f"n={prep.size}: written while down: {out}")
    return out
