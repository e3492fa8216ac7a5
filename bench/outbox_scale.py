"""What a job's run pays to find its namespace's pending vector-index entries, at scale.

Before a linker, auditor or consolidator run reads neighbours through the vector index, it
brings its own namespace's vectors up to date: it asks whether that namespace has outbox entries
and, if so, reads them oldest first (``Indexer.sync(namespace=...)``). The outbox holds every
namespace's pending entries: after a bulk `secretary ingest --no-index`, or while a Chroma
server was down, it can hold millions. This measures, on PostgreSQL and on SQLite, with N
pending entries over K namespaces, the store's own reads (``store.reads.work.WorkReads``):

  outbox_size                  every namespace's entries counted (what a run asked before 0011)
  outbox_waiting, none         a namespace with no entry: is anything pending?
  outbox_waiting, some         one whose entries are the newest (ingested last)
  outbox(200, ns), newest      the first 200 of the namespace ingested last
  outbox(200, ns), spread      the first 200 of a namespace whose entries run through all

each with the index ``ix_outbox_namespace`` (migration 0011) and without it (dropped, as
before). Median and p95 of repeated calls, in milliseconds.

    python bench/outbox_scale.py                 # 1,000,000 entries over 1,000 namespaces
    python bench/outbox_scale.py --entries 100000
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.benchkit import RESULTS, git, say, scratch_postgres, write_results
from store.db import make_engine, upgrade
from store.reads.work import WorkReads

DATABASE = "bench_outbox_scale"
INDEX = "ix_outbox_namespace"
REPEATS = 30


def _fill(engine: Engine, entries: int, namespaces: int) -> None:
    """Pending entries: the first half spread over every namespace but the last (round robin),
    then the last namespace's own entries, then the rest spread again."""
    own = max(1, entries // namespaces)
    spread = entries - own
    half = spread // 2
    rows = (
        [(f"ns-{i % (namespaces - 1):05d}", i) for i in range(half)]
        + [(f"ns-{namespaces - 1:05d}", half + i) for i in range(own)]
        + [(f"ns-{i % (namespaces - 1):05d}", own + i) for i in range(half, spread)]
    )
    now = datetime.now(UTC)
    with engine.begin() as connection:
        for start in range(0, len(rows), 20_000):
            connection.execute(
                text(
                    "INSERT INTO index_outbox (namespace, memory_id, action, created_at) "
                    "VALUES (:namespace, :memory_id, 'upsert', :now)"
                ),
                [
                    {"namespace": ns, "memory_id": memory_id, "now": now}
                    for ns, memory_id in rows[start : start + 20_000]
                ],
            )
    with engine.connect() as connection:
        connection.execute(text("ANALYZE index_outbox"))
        connection.commit()


def _timed(call: Callable[[], object]) -> dict[str, float]:
    call()  # warm: plans cached, pages in memory
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 3),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 3),
    }


def _reads(engine: Engine, namespaces: int) -> dict[str, dict[str, float]]:
    work = WorkReads(engine)
    newest = f"ns-{namespaces - 1:05d}"
    return {
        "outbox_size": _timed(work.outbox_size),
        "outbox_waiting, none": _timed(lambda: work.outbox_waiting("nobody")),
        "outbox_waiting, some": _timed(lambda: work.outbox_waiting(newest)),
        "outbox(200, ns), newest": _timed(lambda: work.outbox(limit=200, namespace=newest)),
        "outbox(200, ns), spread": _timed(lambda: work.outbox(limit=200, namespace="ns-00000")),
    }


def measure(url: str, entries: int, namespaces: int) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        upgrade(engine)
        say(f"{engine.dialect.name}: {entries:,} entries over {namespaces:,} namespaces")
        _fill(engine, entries, namespaces)
        with_index = _reads(engine, namespaces)
        with engine.begin() as connection:
            connection.execute(text(f"DROP INDEX {INDEX}"))
        with engine.connect() as connection:
            connection.execute(text("ANALYZE index_outbox"))
            connection.commit()
        without = _reads(engine, namespaces)
        return {"with the index": with_index, "without it (before 0011)": without}
    finally:
        engine.dispose()


def render(results: dict[str, Any]) -> str:
    lines = [
        "# A run's pending vector-index entries at scale (`bench/outbox_scale.py`)",
        "",
        f"{results['measured']}, commit {results['commit']}, {results['machine']}; "
        f"`{results['command']}`. {results['entries']:,} pending entries over "
        f"{results['namespaces']:,} namespaces; milliseconds, p50 / p95 of {REPEATS} calls.",
        "",
        "Before migration 0011 a job's run counted the whole outbox (`outbox_size`) before its "
        "namespace's sync, and the sync counted it again and read the namespace's entries "
        "without an index; now it asks `outbox_waiting(namespace)` and reads them through "
        "`ix_outbox_namespace`.",
        "",
    ]
    for backend, variants in results["backends"].items():
        names = list(next(iter(variants.values())))
        lines += [f"## {backend}", "", "| read | " + " | ".join(variants) + " |"]
        lines.append("|---|" + "---:|" * len(variants))
        for name in names:
            cells = [
                f"{variant[name]['p50_ms']:.2f} / {variant[name]['p95_ms']:.2f}"
                for variant in variants.values()
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--namespaces", type=int, default=1_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "outbox_scale.json")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "machine": f"{platform.platform()}, Python {platform.python_version()}",
        "command": " ".join(["python", "bench/outbox_scale.py", *sys.argv[1:]]),
        "entries": args.entries,
        "namespaces": args.namespaces,
        "backends": {},
    }
    with scratch_postgres(DATABASE) as url:
        results["backends"]["PostgreSQL"] = measure(url, args.entries, args.namespaces)
    with tempfile.TemporaryDirectory(prefix="outbox-scale-") as folder:
        url = f"sqlite:///{Path(folder) / 'store.db'}"
        results["backends"]["SQLite"] = measure(url, args.entries, args.namespaces)
    write_results(args.out, results, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
