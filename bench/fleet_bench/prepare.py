"""A size's store, prepared once and copied per night: a PostgreSQL template database plus the
data directory of the Chroma server that holds its vectors.

Built through the store's public API (``Store.add_memories``, ``Store.add_logs``, the writer's
job state), a namespace at a time: its memories, every job's watermark past them (the namespace
counts as maintained, as bench/effect_bench/stores.py marks its stores), then the night's log
lines, new to the extractor. Vectors are bench/latency.py's pool vectors (each text a mix of two
real embeddings of a pool of generated texts, ``latency_bench.pool``), written by the store's
own indexer into the Chroma server: the real model would take hours at these sizes on two cores.
The vectors of what the night makes come from the real model, in the daemons.

A night's copy is ``CREATE DATABASE ... TEMPLATE`` and a copy of the Chroma directory. A state
file records what was done and how long it took; an interrupted build resumes at the namespace
it stopped in.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import corpus
from benchkit import WORK as BENCH_WORK
from benchkit import say
from effect_bench.stores import mark_maintained
from latency_bench.pool import POOL_SEED, PoolEmbedder, vector_pool
from sqlalchemy import create_engine, text

from fleet_bench import procs
from fleet_bench.content import Sizes, items, log_lines, namespace
from secretary.config import Settings, load_settings
from store.db import MIGRATIONS
from store.service import Store

WORK = BENCH_WORK / "fleet"
PG = "postgresql+psycopg://postgres@127.0.0.1:5432"
TEMPLATE_CHROMA_PORT = 18510
POOL_TEXTS = 20_000  # bench/latency.py's pool (cached there): real embeddings of generated texts
QUICK_POOL_TEXTS = 2_000  # --quick: a pool embedded in seconds
BASE_NOW = corpus.START + timedelta(days=corpus.SPAN_DAYS + 1)  # when the memories were written
PREP_VERSION = 1  # bump when what a prepared store holds changes


def admin(statement: str) -> None:
    """Run one statement on the server's ``postgres`` database, outside a transaction."""
    engine = create_engine(f"{PG}/postgres", isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(statement))
    finally:
        engine.dispose()


def database_exists(name: str) -> bool:
    engine = create_engine(f"{PG}/postgres")
    try:
        with engine.connect() as connection:
            found = connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
            ).first()
            return found is not None
    finally:
        engine.dispose()


def database_bytes(name: str) -> int:
    engine = create_engine(f"{PG}/postgres")
    try:
        with engine.connect() as connection:
            size = connection.execute(text("SELECT pg_database_size(:n)"), {"n": name}).scalar()
            return int(size or 0)
    finally:
        engine.dispose()


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def store_settings(data_dir: Path, database: str, chroma_url: str, **index: Any) -> Settings:
    """The settings of a store on ``database`` and the Chroma server at ``chroma_url``; the
    shell's SECRETARY_* variables do not apply."""
    environ = {
        "SECRETARY_DATABASE_URL": f"{PG}/{database}",
        "SECRETARY_INDEX_CHROMA_URL": chroma_url,
    }
    settings = load_settings(None, environ, data_dir=data_dir)
    if index:
        settings = settings.model_copy(update={"index": settings.index.model_copy(update=index)})
    return settings


def fingerprint(sizes: Sizes, pool: int, version: int = PREP_VERSION) -> str:
    """What names a prepared store: its sizes, its pool, its builder's version, the schema."""
    digest = hashlib.sha256(f"v{version}:{json.dumps(asdict(sizes))}:{pool}".encode())
    for migration in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(migration.read_bytes())
    return digest.hexdigest()[:10]


@dataclass(frozen=True, kw_only=True)
class StateFile:
    """A prepared store's directory and the state file in it (what was done, how long)."""

    dir: Path

    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_path.read_text()))
        except (OSError, ValueError):
            return {}

    def save(self, state: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_path)


@dataclass(frozen=True, kw_only=True)
class Template(StateFile):
    """A prepared size: its database, its Chroma directory and its state file."""

    sizes: Sizes
    database: str
    pool: int

    @property
    def chroma(self) -> Path:
        return self.dir / "chroma"


def template_for(sizes: Sizes, work: Path = WORK, pool: int = POOL_TEXTS) -> Template:
    mark = fingerprint(sizes, pool)
    return Template(
        sizes=sizes,
        pool=pool,
        dir=work / f"{sizes.label}-{mark}",
        database=f"fleet_tpl_{sizes.label.replace('-', '_')}_{mark}",
    )


def prepare(template: Template, *, fresh: bool = False, workers: int = 2) -> dict[str, Any]:
    """Build (or finish, or reuse) the template; return its state (timings, sizes)."""
    state = template.state()
    if state.get("complete") and not fresh and database_exists(template.database):
        return state
    if fresh or not state or not database_exists(template.database):
        say(f"{template.sizes.label}: preparing from scratch ({template.database})")
        admin(f'DROP DATABASE IF EXISTS "{template.database}"')
        admin(f'CREATE DATABASE "{template.database}"')
        shutil.rmtree(template.dir, ignore_errors=True)
        night = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        state = {
            "sizes": asdict(template.sizes),
            "database": template.database,
            "night_lines_from": (night - timedelta(hours=6)).isoformat(),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "ingest": {"namespaces": 0, "seconds": 0.0, "memories": 0, "lines": 0},
            "vectors": {"memories": 0, "seconds": 0.0},
        }
        template.save(state)
    chroma = procs.chroma_server(
        template.chroma, TEMPLATE_CHROMA_PORT, template.dir / "chroma-server.log"
    )
    try:
        ingest(template, state, chroma.url, workers)
        settings = store_settings(template.dir / "data", template.database, chroma.url)
        fill_vectors(template, state, settings)
    finally:
        chroma.stop()  # the server writes out what it holds before the directory is copied
    state["database_bytes"] = database_bytes(template.database)
    state["chroma_bytes"] = directory_bytes(template.chroma)
    state["complete"] = True
    template.save(state)
    return state


CHUNK = 50  # namespaces per task of the ingest workers


def ingest(template: Template, state: dict[str, Any], chroma_url: str, workers: int) -> None:
    """Each namespace: memories, watermarks past them, then the night's lines; ``workers``
    processes take chunks of namespaces. Resumable: a chunk done is in the state, and a
    namespace that has its memories is not given them again."""
    sizes, record = template.sizes, state["ingest"]
    chunks = range(0, sizes.namespaces, CHUNK)
    done = set(record.setdefault("chunks_done", []))
    todo = [start for start in chunks if start not in done]
    if not todo:
        return
    task = partial(
        _ingest_chunk,
        sizes=sizes,
        data_dir=template.dir / "data",
        database=template.database,
        chroma_url=chroma_url,
        night=state["night_lines_from"],
    )
    Store.open(
        store_settings(template.dir / "data", template.database, chroma_url), create=True
    ).close()
    started, last_say = time.perf_counter(), time.monotonic()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for start, (memories, lines) in zip(todo, pool.map(task, todo), strict=True):
            record["chunks_done"].append(start)
            record["namespaces"] = min(sizes.namespaces, len(record["chunks_done"]) * CHUNK)
            record["memories"] += memories
            record["lines"] += lines
            record["seconds"] = round(record["seconds"] + time.perf_counter() - started, 1)
            started = time.perf_counter()
            template.save(state)
            if time.monotonic() - last_say > 20 or len(record["chunks_done"]) == len(chunks):
                last_say = time.monotonic()
                rate = record["memories"] / max(record["seconds"], 1e-9)
                say(
                    f"  {sizes.label}: {record['namespaces']}/{sizes.namespaces} namespaces "
                    f"({rate:.0f} memories/s, {workers} worker(s))"
                )
    record["workers"] = workers


_STORE: Store | None = None  # an ingest worker's store, opened once per process


def _ingest_chunk(
    start: int, *, sizes: Sizes, data_dir: Path, database: str, chroma_url: str, night: str
) -> tuple[int, int]:
    """Ingest namespaces ``start`` .. ``start + CHUNK``; return the memories and lines added."""
    global _STORE
    if _STORE is None:
        _STORE = Store.open(store_settings(data_dir, database, chroma_url))
    store, when = _STORE, datetime.fromisoformat(night)
    added = lines = 0
    for number in range(start, min(start + CHUNK, sizes.namespaces)):
        memories, texts = items(sizes, number)
        ns = namespace(number)
        if not store.db.memories.count(ns, active_only=False):  # else: done before a stop
            store.add_memories(ns, memories, now=BASE_NOW, source="bench")
            mark_maintained(store, ns, BASE_NOW)
            added += len(memories)
        store.add_logs(ns, log_lines(number, texts, night=when), now=when)
        lines += len(texts)
    return added, lines


def fill_vectors(template: Template, state: dict[str, Any], settings: Settings) -> None:
    """Apply the outbox into the Chroma server with pool vectors (resumable: the outbox is)."""
    record = state["vectors"]
    store = Store.open(settings, create=True)
    try:
        if not store.db.work.outbox_size():
            return
        pool = vector_pool(template.pool, store.embedder)
        model_id = store.embedder.model_id
    finally:
        store.close()
    filler = Store.open(
        settings.model_copy(
            update={"index": settings.index.model_copy(update={"batch_size": 2000})}
        ),
        embedder=PoolEmbedder(pool, model_id),
    )
    record["pool"] = {"texts": template.pool, "seed": POOL_SEED}
    try:
        last_say = time.monotonic()
        while True:
            started = time.perf_counter()
            applied = filler.indexer.sync(limit=5000)
            if not applied:
                break
            record["seconds"] = round(record["seconds"] + time.perf_counter() - started, 1)
            record["memories"] += applied
            template.save(state)
            if time.monotonic() - last_say > 20:
                last_say = time.monotonic()
                rate = record["memories"] / max(record["seconds"], 1e-9)
                say(f"  {template.sizes.label}: {record['memories']} vectors ({rate:.0f}/s)")
    finally:
        filler.close()


@dataclass(frozen=True, kw_only=True)
class Copy:
    """A night's own store: a database made from the template and a Chroma directory."""

    database: str
    chroma: Path
    seconds: float


def copy(template: Template, name: str, run_dir: Path) -> Copy:
    """Make the night's database from the template and copy the Chroma directory."""
    started = time.perf_counter()
    database = f"fleet_run_{name}"
    admin(f'DROP DATABASE IF EXISTS "{database}"')
    admin(f'CREATE DATABASE "{database}" TEMPLATE "{template.database}"')
    chroma = run_dir / "chroma"
    shutil.rmtree(chroma, ignore_errors=True)
    shutil.copytree(template.chroma, chroma)
    return Copy(database=database, chroma=chroma, seconds=round(time.perf_counter() - started, 1))


def drop(database: str) -> None:
    admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
