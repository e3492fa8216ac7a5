"""What the benchmark counts in a store, through its public reads only.

Every memory is created, and every status changed, by an operation of a maintenance record
(ingestion included), so "what a cycle made or retired" is read from the records written
since a given record id, and the memories and relations they name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from store.database import Database
from store.kinds import MemoryStatus
from store.views import OperationView, RecordView

PAGE = 5000  # memories or log lines per read while scanning a namespace


def newest_record_id(db: Database) -> int:
    """The id of the newest maintenance record; 0 if there is none."""
    newest = db.records.find(limit=1)
    return newest[0].id if newest else 0


def records_since(db: Database, after_id: int) -> list[RecordView]:
    """Every record with an id above ``after_id`` (any namespace), oldest first."""
    limit = 64
    while True:
        found = db.records.find(limit=limit)  # newest first
        if len(found) < limit or found[-1].id <= after_id:
            return sorted((r for r in found if r.id > after_id), key=lambda r: r.id)
        limit *= 4


def operations_since(db: Database, after_id: int) -> list[OperationView]:
    """The operations of every record with an id above ``after_id``, in order."""
    return [op for record in records_since(db, after_id) for op in db.records.get(record.id)[1]]


def tokens_by_job(records: Iterable[RecordView]) -> dict[str, tuple[int, int]]:
    """Job -> (tokens in, tokens out) summed over ``records``."""
    totals: dict[str, tuple[int, int]] = {}
    for record in records:
        t_in, t_out = totals.get(record.job, (0, 0))
        totals[record.job] = (t_in + record.tokens_in, t_out + record.tokens_out)
    return totals


def created_ids(operations: Iterable[OperationView]) -> list[int]:
    """The memories the operations created."""
    return sorted(
        {op.target_id for op in operations if op.target_kind == "memory" and op.before is None}
    )


def by_source(db: Database, namespace: str, ids: Iterable[int]) -> dict[str, int]:
    """How many of the memories ``ids`` (those that still exist) each source made."""
    counts = Counter(str(m.source) for m in db.memories.many(namespace, ids))
    return dict(sorted(counts.items()))


def newest_memory_id(db: Database, namespace: str) -> int:
    """The id of the newest active memory; 0 if there is none."""
    return max(db.memories.index_state(namespace), default=0)


def newest_log_id(db: Database, namespace: str) -> int:
    """The id of the newest conversation log line; 0 if there is none."""
    newest = 0
    while lines := db.work.logs_after(namespace, newest, limit=PAGE):
        newest = lines[-1].id
    return newest


def active_by_type(db: Database, namespace: str) -> dict[str, int]:
    """How many active memories of each type the namespace holds."""
    counts: Counter[str] = Counter()
    after = 0
    while page := db.memories.after(namespace, after, limit=PAGE):
        counts.update(m.type for m in page)
        after = page[-1].id
    return dict(sorted(counts.items()))


def base_reach(db: Database, namespace: str, watermark: int, since_record: int) -> dict[str, Any]:
    """How much of the base (ids up to ``watermark``) the records after ``since_record``
    touched: relations made to new memories (and of those, to base ones), base memories
    retired."""
    operations = operations_since(db, since_record)
    new = [i for i in created_ids(operations) if i > watermark]
    edges = {(e.source_id, e.target_id, e.type): e for e in db.search.edges(namespace, new)}
    made = Counter(kind for _, _, kind in edges)
    to_base = Counter(kind for s, t, kind in edges if min(s, t) <= watermark)
    changed = {
        op.target_id
        for op in operations
        if op.target_kind == "memory" and op.target_id <= watermark
    }
    retired = [
        m for m in db.memories.many(namespace, changed) if m.status != MemoryStatus.ACTIVE.value
    ]
    return {
        "relations_made": dict(sorted(made.items())),
        "relations_to_base": dict(sorted(to_base.items())),
        "base_memories_retired": len(retired),
    }
