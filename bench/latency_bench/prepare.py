"""Preparing a size's store, cached and resumable: ingest, the lexical check, indexing.

A state file per size records what was done and how long it took; ingestion continues after
the last committed batch and indexing after the last applied outbox entry.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from datetime import UTC, datetime
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import corpus
from benchkit import say, schema_current, settings_for

from latency_bench.common import (
    BATCH,
    BREAKDOWN_QUERIES,
    NAMESPACE,
    NOW,
    WORK,
    load_average,
    percentiles,
    request,
    timed,
)
from latency_bench.pool import POOL_SEED, PoolEmbedder, vector_pool
from store.service import Store

STATE_VERSION = 1  # bump when the preparation changes what a cached store holds


class Prepared:
    """A size's store directory and its state file (what was done, how long it took)."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.dir = WORK / f"n{size}"
        self.data_dir = self.dir / "data"
        self.state_path = self.dir / "state.json"
        self.state: dict[str, Any] = {}
        self.fingerprint = _fingerprint(size, seed)

    def load(self, *, fresh: bool) -> None:
        if self.state_path.exists():
            self.state = json.loads(self.state_path.read_text())
        stale = self.state and self.state.get("fingerprint") != self.fingerprint
        if fresh or stale or not _schema_matches(self.data_dir):
            say(f"n={self.size}: discarding the cached store at {self.dir}")
            shutil.rmtree(self.dir, ignore_errors=True)
            self.state = {}
        self.state.setdefault("fingerprint", self.fingerprint)
        self.state.setdefault("size", self.size)

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.state_path)


def _schema_matches(data_dir: Path) -> bool:
    """Upgrade a cached database, then tell whether it is at the newest migration."""
    path = data_dir / "secretary.db"
    return not path.exists() or schema_current(path, upgrade_first=True)


def _fingerprint(size: int, seed: int) -> str:
    head = json.dumps(list(islice(corpus.memories(size, seed=seed), 50)), sort_keys=True)
    return hashlib.sha256(f"v{STATE_VERSION}:{size}:{seed}:{head}".encode()).hexdigest()[:16]


def count_memories(store: Store) -> int:
    return store.db.memories.count(NAMESPACE, active_only=False)


def ingest(prep: Prepared, store: Store) -> None:
    """Add the corpus through Store.add_memories in committed batches, resuming after the last."""
    have = count_memories(store)
    record = prep.state.setdefault("ingest", {"memories": 0, "seconds": 0.0, "batch": BATCH})
    if have >= prep.size:
        return
    say(f"n={prep.size}: ingesting {prep.size - have} memories (have {have})")
    items = islice(corpus.memories(prep.size, seed=prep.seed), have, None)
    last_log = time.monotonic()
    while batch := list(islice(items, BATCH)):
        started = time.perf_counter()
        store.add_memories(NAMESPACE, batch, now=NOW, source="bench")
        record["seconds"] += time.perf_counter() - started
        record["memories"] += len(batch)
        have += len(batch)
        if time.monotonic() - last_log > 15 or have >= prep.size:
            last_log = time.monotonic()
            rate = record["memories"] / record["seconds"]
            say(f"  ingested {have}/{prep.size} ({rate:.0f} memories/s)")
            prep.save()
    record["load_average"] = load_average()
    prep.save()


def lexical_before_sync(prep: Prepared, store: Store) -> None:
    """Search a just-ingested memory before any embedding exists: lexical must find it."""
    if "lexical_before_sync" in prep.state or prep.state.get("index", {}).get("memories"):
        return
    position = prep.size - BATCH // 2  # a memory of the last batch
    item = next(islice(corpus.memories(prep.size, seed=prep.seed), position, None))
    memory = store.db.memories.by_external_id(NAMESPACE, item["external_id"])
    memory_id = memory.id if memory is not None else None
    pending = store.db.work.outbox_size()
    started = time.perf_counter()
    result = store.searcher.search(request(item["content"]), now=NOW)
    elapsed = time.perf_counter() - started
    ids = [hit.memory.id for hit in result.hits]
    prep.state["lexical_before_sync"] = {
        "memory_id": memory_id,
        "query": item["content"],
        "outbox_pending": pending,
        "found": memory_id in ids,
        "rank": ids.index(memory_id) + 1 if memory_id in ids else None,
        "seconds_incl_lexical_build": round(elapsed, 2),
        # Until the outbox is applied, searches run on BM25 + SQL alone (plus the query embedding
        # and an empty vector lookup): their latency, on the same questions as the main runs.
        "searches_without_vectors": percentiles(
            [
                timed(partial(store.searcher.search, request(q), now=NOW))
                for q in corpus.queries(BREAKDOWN_QUERIES)
            ]
        ),
    }
    prep.save()
    say(f"n={prep.size}: lexical-before-sync check: {prep.state['lexical_before_sync']}")


def index(prep: Prepared, store: Store, *, mode: str) -> None:
    """Apply the outbox to Chroma with store.indexer, in checkpointed chunks."""
    record = prep.state.setdefault("index", {"mode": mode, "memories": 0, "seconds": 0.0})
    if record["mode"] != mode:
        raise SystemExit(f"n={prep.size} was indexed in mode {record['mode']}; use --fresh")
    pending = store.db.work.outbox_size()
    if pending == 0:
        return
    say(f"n={prep.size}: indexing {pending} memories ({mode} vectors)")
    while True:
        started = time.perf_counter()
        applied = store.indexer.sync(limit=5000)
        if not applied:
            break
        record["seconds"] += time.perf_counter() - started
        record["memories"] += applied
        rate = record["memories"] / record["seconds"]
        say(f"  indexed {record['memories']}/{prep.size} ({rate:.1f} memories/s)")
        prep.save()
    record["batch_size"] = store.settings.index.batch_size
    record["load_average"] = load_average()
    prep.save()


def prepare(prep: Prepared, args: argparse.Namespace) -> None:
    mode = "real" if prep.size <= args.real_max else "pool"
    prep.state.setdefault("created_at", datetime.now(UTC).isoformat(timespec="seconds"))
    store = Store.open(settings_for(prep.data_dir), create=True)
    try:
        ingest(prep, store)
        lexical_before_sync(prep, store)
        if args.sql_only:
            return
        if mode == "real":
            index(prep, store, mode=mode)
            return
        pool = vector_pool(args.pool, store.embedder)
        model_id = store.embedder.model_id
    finally:
        store.close()
    # A bigger outbox batch only makes the synthetic fill faster; it changes no vector.
    filler = Store.open(
        settings_for(prep.data_dir, batch_size=2000), embedder=PoolEmbedder(pool, model_id)
    )
    try:
        index(prep, filler, mode=mode)
        prep.state["index"]["pool"] = {"texts": args.pool, "seed": POOL_SEED}
        prep.save()
    finally:
        filler.close()
