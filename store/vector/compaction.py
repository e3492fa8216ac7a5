"""Compacting an embedded Chroma after an erasure or a rebuild, so that no byte of what went stays.

What an embedded Chroma (chromadb 1.5, its Rust core) keeps on disk, read from its files:

- ``chroma.sqlite3``: ``embeddings``, ``embedding_metadata`` and ``embedding_metadata_array``
  hold each vector's id and metadata (what ``store.vector.filters`` writes: type, time, tags,
  ``m.<key>`` values); the ``embedding_fulltext_search*`` (FTS5) tables hold documents only,
  which the index never writes. ``embeddings_queue`` is Chroma's write-ahead log: every write
  with its vector and its metadata as JSON, kept until every segment of the collection has
  consumed it (``max_seq_id``). The HNSW segment records that only when it saves itself, every
  ``sync_threshold`` changes (``store.vector.chroma.HNSW_SYNC``, 1: every write; Chroma's
  default is 1,000), and the newest entry always stays (its seq_id numbers the next). Deleted
  rows leave their bytes in freed pages and in the free space of pages in use; the journal
  mode is DELETE (no ``-wal``).
- one directory per HNSW segment: ``data_level0.bin`` (each vector's floats, label and links),
  ``link_lists.bin``, ``header.bin``, ``length.bin``, ``index_metadata.pickle`` (memory id <->
  label). No text is meant to be there, but the slots past the elements hold whatever the
  process's heap held when the index was created (``store.vector.segments``); a deleted vector
  is only marked deleted, and its floats stay until the collection is rebuilt.
- Dropping a collection removes its rows but leaves its segment directory behind.

``compact`` takes out what deletes leave: the log entries a later delete of the same vector
supersedes (the delete stays, so replaying the log gives the same index) and those every segment
consumed (as Chroma's own purge and ``chroma vacuum`` do; that command keeps the rest), then
VACUUMs the file, removes the directories of segments that no longer exist and zeroes the slots
past the elements of those that do. It runs in a child process: Python's ``sqlite3``
and chromadb link two different SQLite libraries, and two in one process release each other's
POSIX locks (https://sqlite.org/howtocorrupt.html, 2.2.1), while across processes SQLite's
locking holds. Measured on 2 shared cores (docs/operations.md): 0.05-0.12 s for 5,000 memories
(a 4 MB file), 0.19 s for 30,000 (13 MB); the VACUUM grows with the file (~15 ms per MB), and
Chroma's readers wait for it meanwhile.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path

from store.errors import StoreError
from store.vector.segments import scrub, segment_dirs

DB_FILE = "chroma.sqlite3"
BUSY_SECONDS = 30.0  # waiting for Chroma's own writers to let go of the file
TIMEOUT_SECONDS = 900.0  # the whole child: a VACUUM rewrites the file
_DELETE = 3  # Chroma's operation code of a delete in embeddings_queue

# Each collection's floor: what all its segments have consumed (none until the HNSW one saved).
_FLOORS = """
SELECT segments.collection, MIN(COALESCE(CAST(max_seq_id.seq_id AS INTEGER), -1))
FROM segments LEFT JOIN max_seq_id ON max_seq_id.segment_id = segments.id
GROUP BY segments.collection
"""
_LAST_DELETES = f"""
CREATE TEMP TABLE last_delete AS
SELECT topic, id, MAX(seq_id) AS seq_id FROM main.embeddings_queue
WHERE operation = {_DELETE} GROUP BY topic, id
"""
_SUPERSEDED = f"""
DELETE FROM main.embeddings_queue WHERE seq_id IN (
    SELECT entry.seq_id FROM main.embeddings_queue AS entry
    JOIN last_delete ON last_delete.topic = entry.topic AND last_delete.id = entry.id
    WHERE entry.operation != {_DELETE} AND entry.seq_id < last_delete.seq_id
)
"""
# Topics are "persistent://<tenant>/<namespace>/<collection id>".
_CONSUMED = "DELETE FROM main.embeddings_queue WHERE topic LIKE '%/' || ? AND seq_id < ?"


class CompactionFailed(StoreError):
    """Compacting the embedded Chroma failed: what it deleted may still be in its files."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"compacting the Chroma database at {path} failed: {why}")


@dataclass(frozen=True, kw_only=True)
class Compacted:
    """What one compaction removed, and how long it took."""

    superseded: int = 0  # log entries a later delete made void
    consumed: int = 0  # log entries every segment had applied
    segments_removed: int = 0  # directories of dropped collections
    bytes_scrubbed: int = 0  # of HNSW files past their elements (store.vector.segments)
    bytes_before: int = 0  # of chroma.sqlite3
    bytes_after: int = 0
    seconds: float = 0.0


def compact(path: Path, *, timeout: float = TIMEOUT_SECONDS) -> Compacted:
    """Compact the embedded Chroma at ``path`` in a child process (see the module's docstring);
    return what it removed. Raise CompactionFailed if the child fails or outlasts ``timeout``."""
    if not (path / DB_FILE).is_file():
        return Compacted()  # nothing written yet
    command = (sys.executable, "-m", "store.vector.compaction", str(path))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise CompactionFailed(path, f"not done after {timeout:.0f} s") from None
    except OSError as exc:  # the interpreter could not be started
        raise CompactionFailed(path, str(exc)) from exc
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise CompactionFailed(path, lines[-1] if lines else f"exit code {done.returncode}")
    try:
        return Compacted(**json.loads(done.stdout))
    except (ValueError, TypeError) as exc:
        raise CompactionFailed(path, f"unexpected answer {done.stdout[:200]!r}") from exc


def compact_here(path: Path) -> Compacted:
    """Compact the embedded Chroma at ``path`` in this process: what the child runs. Only safe
    in a process that has no Chroma client open on it."""
    started = time.perf_counter()
    db_file = path / DB_FILE
    before = db_file.stat().st_size
    dirs = segment_dirs(path)  # listed before the rows are read: a new segment's row is first
    with closing(sqlite3.connect(db_file, timeout=BUSY_SECONDS, isolation_level=None)) as db:
        superseded, consumed = _purge_log(db)
        live = {row[0] for row in db.execute("SELECT id FROM segments")}
        db.execute("VACUUM")  # rewrites every page: nothing of a deleted row is left
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # if Chroma ever logs ahead (a no-op now)
    removed = [found for found in dirs if found.name not in live]
    for found in removed:
        shutil.rmtree(found, ignore_errors=True)
    scrubbed = sum(scrub(found) for found in dirs if found.name in live)
    return Compacted(
        superseded=superseded,
        consumed=consumed,
        segments_removed=len(removed),
        bytes_scrubbed=scrubbed,
        bytes_before=before,
        bytes_after=db_file.stat().st_size,
        seconds=round(time.perf_counter() - started, 3),
    )


def _purge_log(db: sqlite3.Connection) -> tuple[int, int]:
    """Delete the log entries nothing will read again, in one transaction; return how many
    were superseded and how many consumed."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(_LAST_DELETES)
        superseded = db.execute(_SUPERSEDED).rowcount
        db.execute("DROP TABLE last_delete")
        consumed = 0
        for collection, floor in db.execute(_FLOORS).fetchall():
            if floor >= 0:  # Chroma's rule: the entry at the floor stays
                consumed += db.execute(_CONSUMED, (collection, floor)).rowcount
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return superseded, consumed


def main(argv: list[str]) -> int:
    """``python -m store.vector.compaction PATH``: compact, print what was removed as JSON."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m store.vector.compaction CHROMA_PATH\n")
        return 2
    try:
        compacted = compact_here(Path(argv[0]))
    except (sqlite3.Error, OSError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(asdict(compacted)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
