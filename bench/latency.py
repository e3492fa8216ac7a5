"""Latency and scale benchmark: ingest, indexing, search (in-process and HTTP), RSS, bare Chroma.

For each size it prepares a store under bench/.work/latency/n<SIZE>/ (cached and resumable:
a re-run reuses it, an interrupted preparation continues where it stopped), then measures:

  ingest     Store.add_memories in batches of 1000, each committed (SQLite WAL), memories/s
  lexical    one search right after ingest, before any embedding: the memory must be found
  index      Store.indexer.sync() over the outbox: one vector per memory, memories/s.
             Sizes <= --real-max use the real ONNX embedder. Larger sizes fill Chroma through
             the same indexer and VectorIndex, but each text's vector is a normalised mix of two
             vectors from a pool of real embeddings of --pool generated texts (the model would
             take hours); the query embedding and the whole search path stay real.
  search     Store.searcher.search(k=10, reinforce=False), query embedding included, 200
             natural questions after a warm-up; p50/p95/p99
  bare       (--bare) the same embedder + one collection.query(n_results=10) on the same Chroma
             collection, interleaved with our searches; ratio = ours / bare
  http       (--http) `secretary serve` in a subprocess on 127.0.0.1, httpx keep-alive client,
             sequential requests (concurrency 1); VmRSS/VmHWM of the server from /proc

Results are merged into --out (JSON, one entry per size) and rendered beside it as Markdown.

    python bench/latency.py                                   # 10k and 100k, in-process only
    python bench/latency.py --sizes 10000,100000 --http --bare
    python bench/latency.py --sizes 1000000 --http --bare      # long: see bench/README.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout
sys.path.insert(0, str(ROOT / "bench"))

import corpus  # noqa: E402

from secretary.config import Settings, load_settings  # noqa: E402
from secretary.logs import configure as configure_logging  # noqa: E402
from store.embedder import Embedder  # noqa: E402
from store.search import SearchRequest  # noqa: E402
from store.service import Store  # noqa: E402

NAMESPACE = "bench"
NOW = corpus.START + timedelta(days=corpus.SPAN_DAYS + 1)  # the clock of every write and search
BATCH = 1000  # memories per add_memories call (the default ingest.max_batch)
WARMUP = 20
BREAKDOWN_QUERIES = 50
BARE_N_RESULTS = 10
POOL_SEED = 7
WORK = ROOT / "bench" / ".work" / "latency"
STATE_VERSION = 1  # bump when the preparation changes what a cached store holds
MIB = 1024 * 1024


def say(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


# -- small helpers -----------------------------------------------------------------------------


def percentiles(samples: Sequence[float]) -> dict[str, float | int]:
    """Given durations in seconds, return count and p50/p95/p99/mean/max in milliseconds."""
    ms = np.asarray(samples, dtype=np.float64) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {
        "n": len(ms),
        "p50_ms": round(float(p50), 2),
        "p95_ms": round(float(p95), 2),
        "p99_ms": round(float(p99), 2),
        "mean_ms": round(float(ms.mean()), 2),
        "max_ms": round(float(ms.max()), 2),
    }


def bounded(items: Sequence[Any], budget: float) -> Iterator[Any]:
    """Yield items until they run out or ``budget`` seconds have passed."""
    deadline = time.monotonic() + budget
    for item in items:
        if time.monotonic() > deadline:
            say(f"time budget of {budget:.0f} s reached; stopping this loop early")
            return
        yield item


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def dir_mib(path: Path) -> float:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0
    return round(total / MIB, 1)


def settings_for(data_dir: Path, **index: Any) -> Settings:
    # environ={}: the shell's SECRETARY_* variables must not change what is measured.
    settings = load_settings(None, {}, data_dir=data_dir)
    if index:
        settings = settings.model_copy(update={"index": settings.index.model_copy(update=index)})
    return settings


def count_memories(store: Store) -> int:
    from sqlalchemy import func, select

    from store.models import Memory

    with store.repository.reading() as session:
        query = select(func.count()).select_from(Memory).where(Memory.namespace == NAMESPACE)
        return int(session.scalar(query) or 0)


def memory_id_of(store: Store, external_id: str) -> int | None:
    from sqlalchemy import select

    from store.models import Memory

    with store.repository.reading() as session:
        query = select(Memory.id).where(
            Memory.namespace == NAMESPACE, Memory.external_id == external_id
        )
        return session.scalar(query)


# -- the vector pool for large sizes -------------------------------------------------------------


class PoolEmbedder:
    """Stands in for the model while filling large stores: text -> mix of two pool vectors.

    The vectors are real embeddings of generated texts; a text's hash picks two of them and a
    weight, so equal texts get equal vectors. It reports the real model's id, so the collection
    is the one the real embedder (used for every query) opens.
    """

    def __init__(self, pool: np.ndarray, model_id: str) -> None:
        self._pool = pool
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return int(self._pool.shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n = len(self._pool)
        picks = np.array([_picks(text, n) for text in texts], dtype=np.int64).reshape(-1, 3)
        weight = (0.3 + 0.4 * picks[:, 2] / 1000.0)[:, None].astype(np.float32)
        mixed = weight * self._pool[picks[:, 0]] + (1 - weight) * self._pool[picks[:, 1]]
        norms = np.linalg.norm(mixed, axis=1, keepdims=True)
        out: np.ndarray = (mixed / np.maximum(norms, 1e-12)).astype(np.float32)
        return out


def _picks(text: str, n: int) -> tuple[int, int, int]:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()
    a, b, c = (int.from_bytes(digest[i : i + 4], "little") for i in (0, 4, 8))
    return a % n, b % n, c % 1001


def vector_pool(size: int, embedder: Embedder) -> np.ndarray:
    """Return real embeddings of ``size`` generated texts, cached under the work dir."""
    path = WORK / f"pool-{size}-seed{POOL_SEED}.npy"
    if path.exists():
        pool: np.ndarray = np.load(path)
        if pool.shape == (size, embedder.dim):
            return pool
    texts = corpus.texts(size, seed=POOL_SEED)
    say(f"embedding a pool of {size} texts with the real model (cached afterwards)")
    parts, started = [], time.perf_counter()
    for start in range(0, size, 1000):
        parts.append(embedder.embed(texts[start : start + 1000]))
        done = start + len(parts[-1])
        say(f"  pool {done}/{size} ({done / (time.perf_counter() - started):.0f} texts/s)")
    pool = np.vstack(parts).astype(np.float32)
    WORK.mkdir(parents=True, exist_ok=True)
    np.save(path, pool)
    return pool


# -- preparation (cached, resumable) -----------------------------------------------------------


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
    """Upgrade a cached database, then tell whether it has every table and column of the models.

    The initial migration may still change in place before a release, so a store built by an
    older checkout can be at "head" and still lack a column.
    """
    from sqlalchemy import inspect

    from store.db import make_engine, upgrade
    from store.models import Base

    path = data_dir / "secretary.db"
    if not path.exists():
        return True
    engine = make_engine(f"sqlite:///{path}")
    try:
        upgrade(engine)
        found = inspect(engine)
        tables = set(found.get_table_names())
        for table in Base.metadata.sorted_tables:
            if table.name not in tables:
                return False
            if {c["name"] for c in found.get_columns(table.name)} != set(table.columns.keys()):
                return False
        return True
    finally:
        engine.dispose()


def _fingerprint(size: int, seed: int) -> str:
    head = json.dumps(list(islice(corpus.memories(size, seed=seed), 50)), sort_keys=True)
    return hashlib.sha256(f"v{STATE_VERSION}:{size}:{seed}:{head}".encode()).hexdigest()[:16]


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


def _request(query: str) -> SearchRequest:
    return SearchRequest(namespace=NAMESPACE, query=query, k=10, reinforce=False)


def lexical_before_sync(prep: Prepared, store: Store) -> None:
    """Search a just-ingested memory before any embedding exists: lexical must find it."""
    if "lexical_before_sync" in prep.state or prep.state.get("index", {}).get("memories"):
        return
    position = prep.size - BATCH // 2  # a memory of the last batch
    item = next(islice(corpus.memories(prep.size, seed=prep.seed), position, None))
    memory_id = memory_id_of(store, item["external_id"])
    pending = store.repository.outbox_size()
    request = SearchRequest(namespace=NAMESPACE, query=item["content"], k=10, reinforce=False)
    started = time.perf_counter()
    result = store.searcher.search(request, now=NOW)
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
                _timed(partial(store.searcher.search, _request(q), now=NOW))
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
    pending = store.repository.outbox_size()
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


# -- measurements ------------------------------------------------------------------------------


class BareChroma:
    """The baseline: embed with the same embedder, then one plain collection.query."""

    def __init__(self, chroma_path: Path, embedder: Embedder) -> None:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        from store.vector_index import collection_name

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
from store.embedder import make_embedder
from store.vector_index import collection_name
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


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


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
            request = SearchRequest(namespace=NAMESPACE, query=query, k=10, reinforce=False)
            return lambda: search(request, now=NOW)

        out["cold_first_search_ms"] = round(_timed(ours(queries[0])) * 1000, 1)
        for query in queries[:WARMUP]:
            ours(query)()
        if args.bare:
            bare = BareChroma(store.settings.chroma_path, store.embedder)
            out["vectors"] = bare.count()
            for query in queries[:WARMUP]:
                bare.query(query)
        mine: list[float] = []
        base: list[float] = []
        for number, query in enumerate(bounded(queries, args.budget)):
            if bare is None:
                mine.append(_timed(ours(query)))
            elif number % 2 == 0:  # alternate who goes first, so neither gets the warmer cache
                mine.append(_timed(ours(query)))
                base.append(_timed(partial(bare.query, query)))
            else:
                base.append(_timed(partial(bare.query, query)))
                mine.append(_timed(ours(query)))
        out["search"] = percentiles(mine)
        if base:
            out["bare"] = {**percentiles(base), "n_results": BARE_N_RESULTS}
            out["ratio_p50"] = round(out["search"]["p50_ms"] / out["bare"]["p50_ms"], 2)
            out["ratio_p95"] = round(out["search"]["p95_ms"] / out["bare"]["p95_ms"], 2)
        out["breakdown"] = breakdown(store, queries[:BREAKDOWN_QUERIES], args.budget)
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


def _bm25(view: Any, query: str, k: int) -> None:
    view.search(query, k)
    view.search_sessions(query, 100)


def breakdown(store: Store, queries: Sequence[str], budget: float) -> dict[str, Any]:
    """Time the parts of a search on their own: query embedding, Chroma query, BM25."""
    index = store.index
    view = store.searcher.lexical_view(NAMESPACE)
    n = store.settings.retrieval.dense_candidates
    lexical_k = store.settings.retrieval.lexical_candidates
    embed, chroma, lexical = [], [], []
    for query in bounded(queries, budget):
        embed.append(_timed(partial(index.embed_query, query)))
        vector = index.embed_query(query)
        chroma.append(_timed(partial(index.query, NAMESPACE, vector, n)))
        lexical.append(_timed(partial(_bm25, view, query, lexical_k)))
    return {
        "embed_query": percentiles(embed),
        f"chroma_query_n{n}": percentiles(chroma),
        "bm25_memories_and_sessions": percentiles(lexical),
    }


def profile_searches(store: Store, queries: Sequence[str], prep: Prepared) -> str:
    """cProfile 100 warm searches; write the stats and return the path of the text report."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    requests = [
        SearchRequest(namespace=NAMESPACE, query=q, k=10, reinforce=False) for q in queries[:100]
    ]
    profiler.enable()
    for request in requests:
        store.searcher.search(request, now=NOW)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    path = prep.dir / "search-profile.txt"
    path.write_text(text.getvalue())
    say(f"n={prep.size}: search profile written to {path}")
    return str(path.relative_to(ROOT))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _rss(pid: int) -> dict[str, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = round(int(rest.split()[0]) / 1024, 1)  # kB -> MiB
    return values


@contextmanager
def server(data_dir: Path, log_path: Path) -> Iterator[tuple[str, int]]:
    """Run `secretary serve` on a free local port; always stop it. Yield (base url, pid)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECRETARY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    command = [
        sys.executable, "-c", "from secretary.cli import main; main()",
        "--data-dir", str(data_dir), "serve", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}", process.pid
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                say("the server did not stop within 30 s; killing it")
                process.kill()
                process.wait(timeout=10)


def _wait_ready(client: Any, timeout: float, *, warm: bool = False) -> None:
    """Wait until /healthz answers 200 (and, with ``warm``, reports the warm-up done)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = client.get("/healthz")
            if response.status_code == 200 and (not warm or response.json().get("warm")):
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    state = "warm" if warm else "ready"
    raise SystemExit(f"the API server did not become {state} within {timeout:.0f} s")


def measure_http(
    prep: Prepared, queries: Sequence[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Sequential keep-alive requests to GET /v1/search on a served copy of the store."""
    import httpx

    out: dict[str, Any] = {"concurrency": 1, "load_average_before": load_average()}
    log_path = prep.dir / "serve.log"
    with (
        server(prep.data_dir, log_path) as (url, pid),
        httpx.Client(base_url=url, timeout=60.0) as client,
    ):
        started = time.monotonic()
        _wait_ready(client, timeout=120)
        out["listening_s"] = round(time.monotonic() - started, 1)
        rss: dict[str, Any] = {"after_start": _rss(pid)}
        _wait_ready(client, timeout=1800, warm=True)
        out["warm_s"] = round(time.monotonic() - started, 1)  # start-up warm-up finished

        def get(query: str) -> httpx.Response:
            params = {"q": query, "namespace": NAMESPACE, "k": "10", "reinforce": "false"}
            response = client.get("/v1/search", params=params)
            response.raise_for_status()
            return response

        out["cold_first_request_ms"] = round(_timed(lambda: get(queries[0])) * 1000, 1)
        for query in queries[:WARMUP]:
            get(query)
        rss["after_warmup"] = _rss(pid)
        samples = [_timed(partial(get, query)) for query in bounded(queries, args.budget)]
        rss["after_searches"] = _rss(pid)
        out["search"] = percentiles(samples)
        out["rss_mib"] = rss
    out["load_average_after"] = load_average()
    return out


# -- results -----------------------------------------------------------------------------------


def _git(*command: str) -> str:
    try:
        return subprocess.run(
            ["git", *command], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_info() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    def ver(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    meminfo = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
    # Code only: bench/results changes with every size this run writes.
    dirty = bool(
        _git("status", "--porcelain", "--", "store", "secretary", "bench", ":!bench/results")
    )
    return {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "--short", "HEAD") or "uncommitted",
        "worktree_dirty": dirty,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "memory_gib": round(int(meminfo[1]) / 1024 / 1024, 1),
        },
        "versions": {
            name: ver(name)
            for name in ("chromadb", "onnxruntime", "sqlalchemy", "bm25s", "fastapi", "uvicorn")
        },
    }


def size_result(prep: Prepared, measured: dict[str, Any]) -> dict[str, Any]:
    state = prep.state
    ingest_ = state.get("ingest", {})
    index_ = state.get("index", {})

    def rate(record: dict[str, Any]) -> float | None:
        return round(record["memories"] / record["seconds"], 1) if record.get("seconds") else None

    return {
        **run_info_short(),
        "memories": prep.size,
        "prepared_at": state.get("created_at"),
        "ingest": {**ingest_, "memories_per_s": rate(ingest_)},
        "lexical_before_sync": state.get("lexical_before_sync"),
        "index": {**index_, "memories_per_s": rate(index_)},
        "disk_mib": {
            "sqlite": round(
                sum(f.stat().st_size for f in prep.data_dir.glob("secretary.db*")) / MIB, 1
            ),
            "chroma": dir_mib(prep.data_dir / "chroma"),
        },
        **measured,
    }


def run_info_short() -> dict[str, Any]:
    return {"measured_at": datetime.now(UTC).isoformat(timespec="seconds")}


TARGETS = [
    # (label, path into a size's result, limit, smaller is better)
    ("search p95 in-process, incl. query embedding (ms)",
     ("in_process", "search", "p95_ms"), 30, True),
    ("search p95 over HTTP (ms)", ("http", "search", "p95_ms"), 40, True),
    ("ours / bare Chroma at p95", ("in_process", "ratio_p95"), 3, True),
    ("server RSS after warm-up and searches (MiB)",
     ("http", "rss_mib", "after_searches", "VmRSS"), 500, True),
    ("ingest, memories/s made durable", ("ingest", "memories_per_s"), 500, False),
    ("indexing, every embedding, real model (memories/s)",
     ("index", "memories_per_s"), 50, False),
]  # fmt: skip
TARGET_SIZE = "100000"


def _dig(data: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def render_markdown(results: dict[str, Any]) -> str:
    info, sizes = results["run"], results["sizes"]
    machine = info["machine"]
    dirty = " (with uncommitted changes)" if info.get("worktree_dirty") else ""
    lines = [
        "# Latency and scale",
        "",
        f"Written by `python bench/latency.py` (raw numbers: `latency.json`). Last run"
        f" {info['date_utc']}, commit `{info['git_commit']}`{dirty}, {machine['platform']},"
        f" {machine['cpu_count']} CPUs, {machine['memory_gib']} GiB RAM, Python"
        f" {machine['python']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items())
        + ".",
        "",
        "| memories | vectors | ingest mem/s | index mem/s | in-process p50 / p95 / p99 ms"
        " | HTTP p50 / p95 / p99 ms | bare Chroma p50 / p95 / p99 ms | ours/bare p50 / p95"
        " | server RSS MiB (peak) |",
        "|---:|---:|---:|---:|---|---|---|---|---:|",
        *(_row(sizes[size]) for size in sorted(sizes, key=int)),
        "",
        "## Against the targets",
        "",
        "| target | limit | measured | met |",
        "|---|---:|---:|---|",
        *(_target_row(sizes, *target) for target in TARGETS),
        "",
        "## How it was measured",
        "",
        *(f"- {note}" for note in results.get("notes", [])),
    ]
    for size in sorted(sizes, key=int):
        lines += ["", f"### {int(size):,} memories", "", *_size_notes(sizes[size])]
    return "\n".join(lines) + "\n"


def _target_row(
    sizes: dict[str, Any], label: str, path: Sequence[str], limit: float, smaller: bool
) -> str:
    value, where = _target_value(sizes, path)
    if value is None:
        return f"| {label} | {limit} | not measured | - |"
    met = value <= limit if smaller else value >= limit
    return f"| {label} | {limit} | {value} ({where}) | {'yes' if met else '**no**'} |"


def _target_value(sizes: dict[str, Any], path: Sequence[str]) -> tuple[Any, str]:
    """Take the value at 100k; ingest and indexing fall back to the largest size measured."""
    candidates = [TARGET_SIZE]
    if path[0] in ("ingest", "index"):
        candidates += sorted(sizes, key=int, reverse=True)
    for size in candidates:
        entry = sizes.get(size, {})
        if path[0] == "index" and _dig(entry, ("index", "mode")) != "real":
            continue
        value = _dig(entry, path)
        if value is not None:
            return value, f"n={int(size):,}"
    return None, ""


def _ms3(block: Any) -> str:
    if not isinstance(block, dict):
        return "-"
    return f"{block['p50_ms']} / {block['p95_ms']} / {block['p99_ms']}"


def _row(entry: dict[str, Any]) -> str:
    inproc, http, index_ = entry.get("in_process", {}), entry.get("http", {}), entry["index"]
    rss = _dig(http, ("rss_mib", "after_searches"))
    ratio = f"{inproc['ratio_p50']} / {inproc['ratio_p95']}" if "ratio_p95" in inproc else "-"
    vectors = f"{inproc['vectors']:,}" if "vectors" in inproc else "-"
    indexed = index_.get("memories_per_s") or "-"
    if index_.get("mode") == "pool":
        indexed = "synthetic vectors"
    if entry.get("sql_only"):
        indexed = "not built (SQL + BM25 only)"
    return (
        f"| {entry['memories']:,} | {vectors} | {entry['ingest'].get('memories_per_s') or '-'}"
        f" | {indexed} | {_ms3(inproc.get('search'))} | {_ms3(http.get('search'))}"
        f" | {_ms3(inproc.get('bare'))} | {ratio}"
        f" | {_rss_cell(rss)} |"
    )


def _rss_cell(rss: dict[str, float] | None) -> str:
    return f"{rss['VmRSS']} ({rss['VmHWM']})" if rss else "-"


def _size_notes(entry: dict[str, Any]) -> list[str]:
    ingest_, index_ = entry["ingest"], entry["index"]
    notes = [
        f"- Store prepared {entry['prepared_at']}, measured {entry['measured_at']}"
        + (f" at commit `{entry['commit']}`." if "commit" in entry else "."),
        f"- Ingest: {ingest_.get('memories', 0):,} memories in {ingest_.get('seconds', 0):.0f} s"
        f" = {ingest_.get('memories_per_s')} memories/s (load average at the end:"
        f" {ingest_.get('load_average')}).",
    ]
    busy = [
        name
        for name, record in (("ingest", ingest_), ("index", index_))
        if max((record.get("load_average") or [0.0])[:2]) > (os.cpu_count() or 1)
    ]
    if busy:
        notes.append(
            f"- The {' and '.join(busy)} ran while the machine was busy (load average above the"
            " CPU count): treat those rates as lower bounds."
        )
    if index_.get("mode") == "pool":
        pool = index_.get("pool", {})
        notes.append(
            f"- Index: synthetic vectors. Each text's vector is a normalised mix of two of"
            f" {pool.get('texts'):,} real embeddings of generated texts, written by the real"
            f" indexer and VectorIndex ({index_.get('memories', 0):,} memories in"
            f" {index_.get('seconds', 0):.0f} s, {index_.get('memories_per_s')} memories/s: a fill"
            " rate, not the model's). Query embeddings and the search path are real."
        )
    elif not index_.get("memories"):
        notes.append("- Index: not built (`--sql-only`): SQL and the lexical index only.")
    else:
        notes.append(
            f"- Index: real model, {index_.get('memories', 0):,} memories in"
            f" {index_.get('seconds', 0):.0f} s = {index_.get('memories_per_s')} memories/s"
            f" (load average at the end: {index_.get('load_average')})."
        )
    notes += _search_notes(entry)
    return notes


def _search_notes(entry: dict[str, Any]) -> list[str]:
    notes = []
    check = entry.get("lexical_before_sync")
    if check:
        notes.append(
            f"- Before any embedding ({check['outbox_pending']:,} memories in the outbox), a"
            f" search for memory {check['memory_id']} by its text: found={check['found']}"
            f" (rank {check['rank']}), {check['seconds_incl_lexical_build']} s including the"
            " BM25 build."
        )
        if "searches_without_vectors" in check:
            block = check["searches_without_vectors"]
            notes.append(
                f"- Searches in that state (BM25 + SQL, no vectors yet), {block['n']} questions:"
                f" p50 / p95 / p99 {_ms3(block)} ms."
            )
    inproc, http = entry.get("in_process", {}), entry.get("http", {})
    if "breakdown" in inproc:
        parts = "; ".join(
            f"{name} p50 {v['p50_ms']} ms, p95 {v['p95_ms']} ms"
            for name, v in inproc["breakdown"].items()
        )
        notes.append(f"- Parts of a search timed alone: {parts}.")
    if "cold_first_search_ms" in inproc:
        notes.append(
            f"- First search after opening, in-process (model load, BM25 build, HNSW load):"
            f" {inproc['cold_first_search_ms']} ms."
        )
    if "warm_s" in http:
        notes.append(
            f"- The server listened {http['listening_s']} s after its start and had warmed up"
            f" (model, BM25, collection: /healthz warm) {http['warm_s']} s after it; its first"
            f" request then took {http['cold_first_request_ms']} ms."
        )
    if http:
        notes.append(f"- Server RSS (MiB): {http['rss_mib']}.")
    if "bare_process_rss_mib" in inproc:
        notes.append(
            "- For scale, a process doing only the bare baseline (embedded Chroma with this"
            f" collection + the ONNX model, {WARMUP} queries):"
            f" {inproc['bare_process_rss_mib']} MiB."
        )
    loads = [inproc.get("load_average_before"), http.get("load_average_after")]
    if any(loads):
        notes.append(f"- Load average (1/5/15 min) before and after the measurements: {loads}.")
    if "durations_s" in entry:
        notes.append(f"- Wall time of this run's steps (s): {entry['durations_s']}.")
    return notes


def merge_results(
    path: Path, measured: dict[str, dict[str, Any]], notes: list[str]
) -> dict[str, Any]:
    results: dict[str, Any] = {"sizes": {}}
    if path.exists():
        results = json.loads(path.read_text())
    results["run"] = info = run_info()
    results["notes"] = notes
    # Sizes are measured in different runs: each keeps the commit it was measured at.
    commit = info["git_commit"] + (" with uncommitted changes" if info["worktree_dirty"] else "")
    results.setdefault("sizes", {}).update(
        {size: {**entry, "commit": commit} for size, entry in measured.items()}
    )
    return results


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="10000,100000",
        help="comma-separated store sizes (default 10000,100000: under 30 min from scratch)",
    )  # fmt: skip
    parser.add_argument("--http", action="store_true", help="also measure over HTTP, and RSS")
    parser.add_argument("--bare", action="store_true", help="also time a bare Chroma query")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench/results/latency.json",
        help="results JSON, merged per size (Markdown written beside it)",
    )  # fmt: skip
    parser.add_argument("--queries", type=int, default=200, help="questions per measurement")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument(
        "--real-max", type=int, default=10_000,
        help="largest size indexed with the real model; bigger ones use pool vectors",
    )  # fmt: skip
    parser.add_argument("--pool", type=int, default=20_000, help="texts in the vector pool")
    parser.add_argument(
        "--budget", type=float, default=300.0, help="seconds at most per measurement loop"
    )
    parser.add_argument(
        "--prepare-only", action="store_true", help="build the stores, measure nothing"
    )
    parser.add_argument(
        "--sql-only",
        action="store_true",
        help="ingest and the lexical check only: no vectors, no search measurements",
    )
    parser.add_argument("--fresh", action="store_true", help="discard cached stores first")
    parser.add_argument("--profile", action="store_true", help="cProfile 100 searches per size")
    args = parser.parse_args(argv)
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    return args


def notes(args: argparse.Namespace) -> list[str]:
    return [
        f"Queries: {args.queries} generated questions (bench/corpus.py), after {WARMUP} warm-up"
        " searches; k=10, reinforce=false; percentiles over single sequential searches.",
        f"Bare Chroma: the same ONNX embedder + collection.query(n_results={BARE_N_RESULTS}),"
        " default include, on the same collection (one vector per memory), interleaved"
        " with our searches in the same process. Our search asks Chroma for"
        " retrieval.dense_candidates (200) vectors and also runs BM25, SQL reads and ranking.",
        "HTTP: `secretary serve` (default settings, INFO logging to a file) in a subprocess, one"
        " httpx keep-alive client, sequential requests (concurrency 1); RSS from /proc/PID/status"
        " of the server, which embeds Chroma (HNSW in memory) and the ONNX model.",
        f"Ingest: Store.add_memories, batches of {BATCH}, each one committed (SQLite WAL,"
        " synchronous=NORMAL); the vectors follow through the outbox.",
        f"Indexing: Store.indexer.sync() with the real model for sizes up to {args.real_max:,};"
        " larger sizes hold synthetic vectors (see each size).",
        "The machine was shared with other work during the runs; load averages are recorded.",
    ]


def write_results(args: argparse.Namespace, measured: dict[str, dict[str, Any]]) -> None:
    results = merge_results(args.out, measured, notes(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(render_markdown(results))
    say(f"wrote {args.out} and {args.out.with_suffix('.md')}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("WARNING")
    queries = corpus.queries(args.queries)
    for size in args.sizes:
        prep = Prepared(size, args.seed)
        prep.load(fresh=args.fresh)
        durations: dict[str, float] = {}
        started = time.perf_counter()
        prepare(prep, args)
        durations["preparation"] = round(time.perf_counter() - started)
        if args.prepare_only:
            say(f"n={size}: prepared in {durations['preparation']} s")
            continue
        if args.sql_only:
            write_results(args, {str(size): size_result(prep, {"sql_only": True})})
            continue
        result: dict[str, Any] = {}
        started = time.perf_counter()
        result["in_process"] = measure_in_process(prep, queries, args)
        durations["in_process"] = round(time.perf_counter() - started)
        if args.http:
            started = time.perf_counter()
            result["http"] = measure_http(prep, queries, args)
            durations["http"] = round(time.perf_counter() - started)
        result["durations_s"] = durations
        say(f"n={size}: {json.dumps(result)}")
        write_results(args, {str(size): size_result(prep, result)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
