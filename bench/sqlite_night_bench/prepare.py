"""The store a night runs on: SQLite with the embedded Chroma (the project's default: a data
directory, no [database] url, no [index] chroma_url), prepared once and copied per night.

Built as bench/fleet_bench/prepare.py builds its PostgreSQL template, through the store's public
API, a namespace at a time: its memories (``fleet_bench.content.items``), every job's watermark
past them (``effect_bench.stores.mark_maintained``: they count as maintained), then the night's
conversation log lines (``fleet_bench.content.log_lines``), new to the extractor. Vectors are
bench/latency.py's pool vectors (``latency_bench.pool``) written by the store's own indexer.

The PostgreSQL store of the comparison night is built the same way into a database of its own
(``sqlite_night_*``, dropped after the night), with an embedded Chroma in its data directory,
so that the two nights differ in the SQL database only.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchkit import WORK as BENCH_WORK
from benchkit import say
from effect_bench.stores import mark_maintained
from fleet_bench.content import Sizes, items, log_lines, namespace
from fleet_bench.prepare import BASE_NOW, POOL_TEXTS, StateFile, fingerprint
from latency_bench.pool import POOL_SEED, PoolEmbedder, vector_pool

from secretary.config import Settings, load_settings
from store.service import Store

WORK = BENCH_WORK / "sqlite_night"
PG = "postgresql+psycopg://postgres@127.0.0.1:5432"
PREP_VERSION = 1  # bump when what a prepared store holds changes


def sqlite_settings(data_dir: Path) -> Settings:
    """The defaults for ``data_dir``: SQLite and the embedded Chroma in it (the shell's
    SECRETARY_* variables do not apply)."""
    return load_settings(None, {}, data_dir=data_dir)


def postgres_settings(data_dir: Path, database: str) -> Settings:
    """A store on PostgreSQL database ``database`` with the embedded Chroma in ``data_dir``."""
    return load_settings(None, {"SECRETARY_DATABASE_URL": f"{PG}/{database}"}, data_dir=data_dir)


@dataclass(frozen=True, kw_only=True)
class Prepared(StateFile):
    """A prepared SQLite store: its directory (``data/`` inside) and its state file."""

    sizes: Sizes
    pool: int

    @property
    def data(self) -> Path:
        return self.dir / "data"


def prepared_for(sizes: Sizes, pool: int = POOL_TEXTS, work: Path = WORK) -> Prepared:
    return Prepared(
        sizes=sizes, pool=pool, dir=work / f"{sizes.label}-{fingerprint(sizes, pool, PREP_VERSION)}"
    )


def night_lines_from() -> datetime:
    """When the night's conversation lines were said: six hours before today's midnight."""
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(hours=6)


def prepare(prepared: Prepared, *, fresh: bool = False) -> dict[str, Any]:
    """Build the SQLite store unless a complete one is cached; return its state."""
    state = prepared.state()
    if state.get("complete") and not fresh and prepared.data.exists():
        return state
    say(f"{prepared.sizes.label}: preparing the SQLite store in {prepared.dir}")
    shutil.rmtree(prepared.dir, ignore_errors=True)
    prepared.dir.mkdir(parents=True)
    state = build(sqlite_settings(prepared.data), prepared.sizes, prepared.pool)
    state["complete"] = True
    prepared.save(state)
    return state


def build(settings: Settings, sizes: Sizes, pool: int) -> dict[str, Any]:
    """Fill the (new) store of ``settings``: memories, watermarks and lines, then vectors."""
    night = night_lines_from()
    state: dict[str, Any] = {
        "sizes": asdict(sizes),
        "database": settings.database_url.rpartition("@")[2],
        "night_lines_from": night.isoformat(),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    started = time.perf_counter()
    memories = lines = 0
    store = Store.open(settings, create=True)
    try:
        for number in range(sizes.namespaces):
            made, texts = items(sizes, number)
            ns = namespace(number)
            store.add_memories(ns, made, now=BASE_NOW, source="bench")
            mark_maintained(store, ns, BASE_NOW)
            store.add_logs(ns, log_lines(number, texts, night=night), now=night)
            memories, lines = memories + len(made), lines + len(texts)
            if (number + 1) % 10 == 0 or number + 1 == sizes.namespaces:
                say(f"  {number + 1}/{sizes.namespaces} namespaces ingested")
    finally:
        store.close()
    state["ingest"] = {
        "memories": memories,
        "lines": lines,
        "seconds": round(time.perf_counter() - started, 1),
    }
    state["vectors"] = fill_vectors(settings, pool)
    return state


def fill_vectors(settings: Settings, pool_size: int) -> dict[str, Any]:
    """Apply the outbox into the embedded Chroma with pool vectors."""
    started = time.perf_counter()
    store = Store.open(settings)
    try:
        pool = vector_pool(pool_size, store.embedder)
        model_id = store.embedder.model_id
    finally:
        store.close()
    batch = settings.index.model_copy(update={"batch_size": 2000})
    filler = Store.open(
        settings.model_copy(update={"index": batch}), embedder=PoolEmbedder(pool, model_id)
    )
    applied = 0
    try:
        while done := filler.indexer.sync(limit=5000):
            applied += done
            say(f"  {applied} pool vectors written")
    finally:
        filler.close()
    return {
        "memories": applied,
        "pool": {"texts": pool_size, "seed": POOL_SEED},
        "seconds": round(time.perf_counter() - started, 1),
    }


def copy(prepared: Prepared, run_dir: Path) -> tuple[Path, float]:
    """A night's own copy of the prepared data directory (a file copy); (its path, seconds)."""
    started = time.perf_counter()
    data = run_dir / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(prepared.data, data)
    return data, round(time.perf_counter() - started, 1)
