"""The store's id: made by migration 0012, carried by every Chroma collection of the store
(``store.vector.identity``), so that a second store pointed at the same Chroma server is refused
there instead of writing over the first one's vectors."""

from __future__ import annotations

import uuid

from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite

from store.clock import utc_now
from store.db import session_factory, transaction
from store.models import StoreIdentity

_ROW = "store"


def store_id(engine: Engine) -> str:
    """Return the store's id, making one if its row is missing (a table emptied by hand: its
    older collections then belong to the lost id, and are refused naming both)."""
    found = select(StoreIdentity.store_id).where(StoreIdentity.name == _ROW)
    with session_factory(engine)() as session:
        known = session.scalar(found)
    if known is not None:
        return known
    values = {"name": _ROW, "store_id": uuid.uuid4().hex, "created_at": utc_now()}
    with transaction(session_factory(engine, write=True)) as session:
        # Two processes may both find none: ON CONFLICT keeps the first one's.
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        session.execute(dialect.insert(StoreIdentity).values(values).on_conflict_do_nothing())
        made: str = session.execute(found).scalar_one()
    return made
