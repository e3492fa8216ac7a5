"""SQLite's single writer during a night (issue 27): what it costs that the namespaces' short
write transactions queue for SQLite's one write lock.

  store    N namespaces (--namespaces, 50), each with 300 memories that count as maintained and
           20 new conversation log lines, on the project's default store: SQLite and the
           embedded Chroma in one data directory (no [database] url, no [index] chroma_url).
           Built once as bench/fleet_bench/prepare.py builds its PostgreSQL template (the same
           contents, pool vectors written by the store's indexer) and cached under
           bench/.work/sqlite_night/; each night gets a file copy of the data directory.
  night    `secretary --config NIGHT.toml dream` (every namespace, every job, then the index
           sync), run in-process through the CLI in a worker process of its own, at [jobs]
           concurrency 1, 4 and 16 (--concurrency); then the same at 16 on PostgreSQL
           (127.0.0.1:5432, user postgres; a database sqlite_night_* built for it and dropped
           after; --postgres 0 leaves it out).
  model    bench/fleet_bench/model.py's scripted server on a free port of 127.0.0.1:18700-18799,
           answering after --latency (1 s), calls overlapping, no rate limit.

Measured per night: wall time, LLM calls, calls per second, calls in flight at peak (counted by
the model server), CPU seconds and peak RSS of the worker, and every write transaction's wait
for SQLite's write lock and time holding it: listeners on SQLAlchemy's Engine class in the
worker only (``BEGIN IMMEDIATE``'s before/after_cursor_execute, the dialect's do_commit /
do_rollback returning; see bench/sqlite_night_bench/meter.py). Also whether every night left
the same store as the first (memories, their contents and relations per namespace). Writes
bench/results/sqlite_night.{json,md}; exit code 1 if a night's store differs or the dream failed.

    python bench/sqlite_night.py --quick          # 3 namespaces, 0.2 s model, results in .work
    python bench/sqlite_night.py                  # what results/sqlite_night.md shows (~8 min)
    python bench/sqlite_night.py --concurrency 8 --postgres 0

On two cores: preparing 50 namespaces takes about 20 s; the night at concurrency 1 about five
minutes, at 4 about 80 s, at 16 about 30 s; the PostgreSQL night builds its store (30 s) first.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from sqlite_night_bench.cli import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
