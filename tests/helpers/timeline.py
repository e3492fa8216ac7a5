"""Reading a namespace's timeline the way spreading walks it, checking its links on the way."""

from __future__ import annotations

from sqlalchemy import select

from store.database import Database
from store.db import session_factory
from store.models import Memory


def timeline(db: Database, namespace: str) -> list[int]:
    """Walk the timeline from its head through next_id and check prev_id on the way back.

    Only active memories are on the timeline: a retired one left it.
    """
    with session_factory(db.engine)() as session:
        query = select(Memory).where(Memory.namespace == namespace, Memory.status == "active")
        rows = {m.id: m for m in session.scalars(query)}
    heads = [m for m in rows.values() if m.prev_id is None]
    assert len(heads) <= 1, "a timeline has exactly one head"
    order: list[int] = []
    current = heads[0] if heads else None
    while current is not None:
        order.append(current.id)
        nxt = rows.get(current.next_id) if current.next_id is not None else None
        if nxt is not None:
            assert nxt.prev_id == current.id
        current = nxt
    assert len(order) == len(rows), "every memory is on the timeline"
    return order
