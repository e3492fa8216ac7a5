"""The base store of a size, cached: the synthetic corpus, user traits, vectors, watermarks.

Built once under --work (or copied from bench/latency.py's prepared store of the same corpus),
then every job's watermark is set to the newest memory: the base counts as maintained.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from datetime import timedelta
from itertools import islice
from pathlib import Path
from typing import Any

import corpus
from benchkit import WORK as BENCH_WORK
from benchkit import say, schema_current, settings_for
from latency_bench.pool import POOL_SEED, PoolEmbedder, vector_pool

from maintenance_bench.facts import active_by_type, newest_log_id, newest_memory_id
from store.db import MIGRATIONS
from store.service import Store

NAMESPACE = "bench"
BASE_NOW = corpus.START + timedelta(days=corpus.SPAN_DAYS + 1)  # the base store's write time
BATCH = 1000
BASE_VERSION = 1  # bump when the way a base store is built changes
WORK = BENCH_WORK / "maintenance"
LATENCY_WORK = BENCH_WORK / "latency"


def base_fingerprint(size: int, args: argparse.Namespace) -> str:
    digest = hashlib.sha256(
        f"v{BASE_VERSION}:{size}:{args.seed}:{args.traits}:{args.real_max}:{args.pool}".encode()
    )
    for migration in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(migration.read_bytes())
    return digest.hexdigest()[:16]


def base_store(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Prepare (or reuse) the base store of ``size`` memories; return what was done."""
    base = args.work / f"base-n{size}"
    state_path = base / "state.json"
    fingerprint = base_fingerprint(size, args)
    if state_path.exists() and not args.fresh:
        state = json.loads(state_path.read_text())
        if state.get("fingerprint") == fingerprint and state.get("complete"):
            return dict(state)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    state: dict[str, Any] = {"fingerprint": fingerprint, "size": size, "seed": args.seed}
    mode = "real" if size <= args.real_max else "pool"
    state["vectors"] = mode
    started = time.perf_counter()
    copied = copy_latency_store(size, args.seed, mode, base / "data")
    if copied is not None:
        state["source"] = copied
    else:
        state["source"] = {"built": True, **build_base(size, args, base / "data", mode)}
    state |= finish_base(base / "data", args)
    state["seconds"] = round(time.perf_counter() - started, 1)
    state["complete"] = True
    state_path.write_text(json.dumps(state, indent=2))
    return state


def copy_latency_store(size: int, seed: int, mode: str, target: Path) -> dict[str, Any] | None:
    """Copy bench/latency.py's prepared store of the same corpus, if there is a complete one."""
    source = LATENCY_WORK / f"n{size}"
    try:
        state = json.loads((source / "state.json").read_text())
    except (OSError, ValueError):
        return None
    index = state.get("index", {})
    complete = (
        state.get("ingest", {}).get("memories") == size
        and index.get("memories") == size
        and index.get("mode") == mode
    )
    if not complete or not schema_current(source / "data" / "secretary.db"):
        return None
    say(f"n={size}: copying bench/latency.py's prepared store {source}")
    shutil.copytree(source / "data", target)
    store = Store.open(settings_for(target), create=True)
    try:
        db = store.db
        same = (
            db.work.outbox_size() == 0 and db.memories.count(NAMESPACE, active_only=False) == size
        )
        expected = list(islice(corpus.memories(size, seed=seed), 20))
        found = {
            item["external_id"]: memory.content
            for item in expected
            if (memory := db.memories.by_external_id(NAMESPACE, item["external_id"])) is not None
        }
        same = same and all(found.get(i["external_id"]) == i["content"] for i in expected)
    finally:
        store.close()
    if not same:
        say(f"n={size}: the latency store is another corpus or incomplete; building instead")
        shutil.rmtree(target)
        return None
    return {
        "copied_from": f"bench/.work/latency/n{size}",
        "ingest_seconds": round(state["ingest"].get("seconds", 0.0), 1),
        "index_seconds": round(index.get("seconds", 0.0), 1),
        "pool": index.get("pool"),
    }


def build_base(size: int, args: argparse.Namespace, data_dir: Path, mode: str) -> dict[str, Any]:
    """Ingest the corpus and index it (real model, or pool vectors above --real-max)."""
    store = Store.open(settings_for(data_dir), create=True)
    info: dict[str, Any] = {}
    try:
        started = time.perf_counter()
        items = corpus.memories(size, seed=args.seed)
        done = 0
        while batch := list(islice(items, BATCH)):
            store.add_memories(NAMESPACE, batch, now=BASE_NOW, source="bench")
            done += len(batch)
            if done % 10_000 == 0 or done == size:
                say(f"  n={size}: ingested {done}/{size}")
        info["ingest_seconds"] = round(time.perf_counter() - started, 1)
        if mode == "real":
            info["index_seconds"] = index_outbox(store, size)
            return info
        pool = vector_pool(args.pool, store.embedder)
        model_id = store.embedder.model_id
    finally:
        store.close()
    filler = Store.open(
        settings_for(data_dir, batch_size=2000),
        embedder=PoolEmbedder(pool, model_id),
    )
    try:
        info["index_seconds"] = index_outbox(filler, size)
        info["pool"] = {"texts": args.pool, "seed": POOL_SEED}
    finally:
        filler.close()
    return info


def index_outbox(store: Store, size: int) -> float:
    started = time.perf_counter()
    done = 0
    while applied := store.indexer.sync(limit=5000):
        done += applied
        say(f"  n={size}: indexed {done} ({done / (time.perf_counter() - started):.1f}/s)")
    return round(time.perf_counter() - started, 1)


def trait_items(count_: int) -> list[dict[str, Any]]:
    """``count_`` distinct user traits over the corpus's activities, as the soul mapper makes."""
    verbs = ("enjoys", "makes time for", "often talks about", "is getting better at")
    items = []
    for number in range(count_):
        verb = verbs[number % len(verbs)]
        activity = corpus.ACTIVITIES[number // len(verbs) % len(corpus.ACTIVITIES)]
        items.append(
            {
                "content": f"The user {verb} {activity[1]} ({activity[2]}).",
                "type": "preference",
                "timestamp": (BASE_NOW - timedelta(days=number)).isoformat(),
                "tags": ["trait"],
                "importance": 7,
                "metadata": {"trait": True, "confidence": 0.7, "evidence_ids": []},
                "external_id": f"bench-trait-{number}",
            }
        )
    return items


def finish_base(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Add the traits (real vectors), then mark every memory as seen by every job."""
    store = Store.open(settings_for(data_dir), create=True)
    try:
        store.add_memories(NAMESPACE, trait_items(args.traits), now=BASE_NOW, source="bench")
        store.indexer.sync()
        return {"traits": args.traits, **mark_maintained(store)}
    finally:
        store.close()


def mark_maintained(store: Store) -> dict[str, Any]:
    """Set every job's watermark to the newest memory and log line: nothing counts as new."""
    db = store.db
    # Nothing in a base was ever retired (no job has run on it): the newest active memory is
    # the newest memory.
    newest = newest_memory_id(db, NAMESPACE)
    newest_log = newest_log_id(db, NAMESPACE)
    # The watermark keys each job reads (secretary/jobs/*.py).
    states = {
        "extractor": {"watermark": newest_log},
        "linker": {"watermark": newest, "typed_watermark": newest},
        "auditor": {"watermark": newest, "exact_watermark": newest},
        "soul_mapper": {"watermark": newest},
        "consolidator": {"watermark": newest},
    }
    with db.writer.unit(NAMESPACE, "bench", BASE_NOW) as unit:
        for job, job_state in states.items():
            unit.save_job_state(job, job_state)
    return {
        "memories": db.memories.count(NAMESPACE, active_only=False),
        "by_type": active_by_type(db, NAMESPACE),
        "watermark": newest,
    }
