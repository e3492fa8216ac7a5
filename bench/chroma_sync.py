"""How often Chroma saves a collection's graph (``sync_threshold``), and what a write costs.

Chroma keeps every write in a write-ahead log, one SQLite table for all collections, until the
collection's HNSW graph is saved (every ``sync_threshold`` changes; Chroma's default 1,000); the
log is purged only up to the collection saved longest ago, and each write reads it from where
its collection was last saved. The secretary keeps one collection per namespace, most of them a
few hundred memories: with the default none of them is ever saved. This measures, on a Chroma
server (`chroma run`) of its own, for each threshold:

  many   N collections of 300 random vectors (written 300 at a time, as a rebuild does), then
         upserts of 20 into 40 of them (as a night's extraction does), queries of 20 vectors
         (as the linker's), and after a restart a first count of 40 others (a cold collection;
         N/2 instead of 40 when N < 80);
  big    one collection of 100,000 vectors, then upserts of 20, upserts of 1, queries of 1.

Reported: the server's CPU time per request (from /proc) and wall times, and the log's length.
The threshold the index uses is ``store.vector.chroma.HNSW_SYNC``.

    python bench/chroma_sync.py                      # 1000 (Chroma's default), 100 and 20
    python bench/chroma_sync.py --sync 1000,20 --collections 1000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import chromadb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from bench.benchkit import RESULTS, git, package_version, say, write_results

PORT = 18480
DIM = 384


class Server:
    """A `chroma run` on ``path``; ``cpu()`` is its CPU seconds so far."""

    def __init__(self, path: Path) -> None:
        chroma = Path(sys.executable).parent / "chroma"
        self.proc = subprocess.Popen(
            [str(chroma), "run", "--path", str(path), "--port", str(PORT)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:  # the client checks the server when it is made
                self.client = chromadb.HttpClient(host="127.0.0.1", port=PORT)
                return
            except ValueError:  # not up yet
                time.sleep(0.1)
        raise SystemExit("the Chroma server did not start")

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@contextmanager
def server(path: Path) -> Iterator[Server]:
    running = Server(path)
    try:
        yield running
    finally:
        running.stop()


def log_length(path: Path) -> int:
    with closing(sqlite3.connect(f"file:{path / 'chroma.sqlite3'}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM embeddings_queue").fetchone()[0])


def timed(running: Server, count: int, call: Callable[[int], Any]) -> dict[str, float]:
    """Run ``call(i)`` for i < count; the server's CPU ms per call and wall p50/p95 ms."""
    cpu, walls = running.cpu(), []
    for i in range(count):
        started = time.perf_counter()
        call(i)
        walls.append((time.perf_counter() - started) * 1000)
    walls.sort()
    return {
        "server_cpu_ms": round((running.cpu() - cpu) / count * 1000, 1),
        "wall_p50_ms": round(walls[len(walls) // 2], 1),
        "wall_p95_ms": round(walls[min(len(walls) - 1, int(len(walls) * 0.95))], 1),
    }


def vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.standard_normal((count, DIM)).astype(np.float32)


def configuration(sync: int) -> dict[str, Any]:
    return {"hnsw": {"space": "cosine", "sync_threshold": sync, "batch_size": min(100, sync)}}


def many(sync: int, collections: int, root: Path) -> dict[str, Any]:
    path = root / f"many-{sync}"
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    with server(path) as running:
        client, started, cpu = running.client, time.perf_counter(), running.cpu()
        for n in range(collections):
            made = client.create_collection(f"ns-{n:05d}", configuration=configuration(sync))
            made.add(ids=[f"{n}-{i}" for i in range(300)], embeddings=vectors(rng, 300))
        out["fill"] = {
            "seconds": round(time.perf_counter() - started, 1),
            "server_cpu_s": round(running.cpu() - cpu, 1),
        }
        out["log_after_fill"] = log_length(path)
        sample = min(40, collections // 2)
        some = [client.get_collection(f"ns-{n:05d}") for n in range(sample)]
        out["upsert_20"] = timed(
            running,
            sample,
            lambda i: some[i].upsert(
                ids=[f"new-{i}-{k}" for k in range(20)], embeddings=vectors(rng, 20)
            ),
        )
        out["query_20"] = timed(
            running,
            sample,
            lambda i: some[i].query(
                query_embeddings=vectors(rng, 20), n_results=11, include=["distances"]
            ),
        )
        out["log_after_upserts"] = log_length(path)
    with server(path) as running:
        cold = [running.client.get_collection(f"ns-{n:05d}") for n in range(sample, 2 * sample)]
        out["first_count_after_restart"] = timed(running, sample, lambda i: cold[i].count())
    return out


def big(sync: int, size: int, root: Path) -> dict[str, Any]:
    path = root / f"big-{sync}"
    rng = np.random.default_rng(1)
    out: dict[str, Any] = {}
    with server(path) as running:
        made = running.client.create_collection("big", configuration=configuration(sync))
        started, cpu = time.perf_counter(), running.cpu()
        for start in range(0, size, 1000):
            made.add(ids=[str(start + i) for i in range(1000)], embeddings=vectors(rng, 1000))
        out["fill"] = {
            "seconds": round(time.perf_counter() - started, 1),
            "server_cpu_s": round(running.cpu() - cpu, 1),
        }
        out["upsert_20"] = timed(
            running,
            30,
            lambda i: made.upsert(
                ids=[f"u{i}-{k}" for k in range(20)], embeddings=vectors(rng, 20)
            ),
        )
        out["upsert_1"] = timed(
            running, 30, lambda i: made.upsert(ids=[f"one{i}"], embeddings=vectors(rng, 1))
        )
        out["query_1"] = timed(
            running,
            100,
            lambda i: made.query(
                query_embeddings=vectors(rng, 1), n_results=50, include=["distances"]
            ),
        )
    return out


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Chroma's sync_threshold: what a write costs with many small collections, and one big",
        "",
        f"Measured {results['measured']}, commit {results['commit']}, "
        f"chromadb {results['chromadb']}, "
        f"`{results['command']}`. Server CPU per request (from /proc) and wall times; "
        "the index uses `store.vector.chroma.HNSW_SYNC`.",
        "",
        f"## {results['collections']:,} collections of 300 vectors",
        "",
        "| sync_threshold | fill s (server CPU s) | log rows after fill / after the upserts "
        "| upsert 20: CPU ms (p50 ms) | query 20: CPU ms (p50 ms) "
        "| first count after a restart: CPU ms (p50 ms) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for sync, row in results["many"].items():
        lines.append(
            f"| {sync} | {row['fill']['seconds']} ({row['fill']['server_cpu_s']}) | "
            f"{row['log_after_fill']:,} / {row['log_after_upserts']:,} | "
            f"{row['upsert_20']['server_cpu_ms']} ({row['upsert_20']['wall_p50_ms']}) | "
            f"{row['query_20']['server_cpu_ms']} ({row['query_20']['wall_p50_ms']}) | "
            f"{row['first_count_after_restart']['server_cpu_ms']} "
            f"({row['first_count_after_restart']['wall_p50_ms']}) |"
        )
    lines += [
        "",
        f"## One collection of {results['big_size']:,} vectors",
        "",
        "| sync_threshold | fill s (server CPU s) | upsert 20: CPU ms (p50 / p95 ms) "
        "| upsert 1: CPU ms (p50 / p95 ms) | query 1: CPU ms (p50 / p95 ms) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for sync, row in results["big"].items():
        cells = [
            f"{row[key]['server_cpu_ms']} ({row[key]['wall_p50_ms']} / {row[key]['wall_p95_ms']})"
            for key in ("upsert_20", "upsert_1", "query_1")
        ]
        lines.append(
            f"| {sync} | {row['fill']['seconds']} ({row['fill']['server_cpu_s']}) | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sync", default="1000,100,20", help="thresholds to compare (default %(default)s)"
    )
    parser.add_argument(
        "--collections", type=int, default=1000, help="small collections (default %(default)s)"
    )
    parser.add_argument(
        "--big", type=int, default=100_000, help="vectors in the big one (default %(default)s)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "chroma_sync.json")
    args = parser.parse_args()
    thresholds = [int(value) for value in args.sync.split(",")]
    results: dict[str, Any] = {
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "chromadb": package_version("chromadb"),
        "command": " ".join(["python", "bench/chroma_sync.py", *sys.argv[1:]]),
        "collections": args.collections,
        "big_size": args.big,
        "many": {},
        "big": {},
    }
    root = Path(tempfile.mkdtemp(prefix="chroma-sync-"))
    try:
        for sync in thresholds:
            say(f"sync_threshold {sync}: {args.collections} collections")
            results["many"][str(sync)] = many(sync, args.collections, root)
            say(f"sync_threshold {sync}: one of {args.big:,}")
            results["big"][str(sync)] = big(sync, args.big, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    write_results(args.out, results, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
