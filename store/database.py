"""The SQL side of the store in one object: its reads and its one writer over one engine.

``Database`` only wires: each attribute is the object callers use directly (no method here
passes a call through).
"""

from __future__ import annotations

from sqlalchemy import Engine

from store.coordination.console_sessions import ConsoleSessions
from store.coordination.dream_requests import DreamRequests
from store.coordination.firings import Firings
from store.coordination.rebuilds import RebuildTable
from store.coordination.schedules import ScheduleTable
from store.reads.identities import IdentityReads
from store.reads.indexing import IndexingReads
from store.reads.listing import ListingReads
from store.reads.memories import MemoryReads
from store.reads.records import RecordReads
from store.reads.search import SearchReads
from store.reads.work import WorkReads
from store.write.writer import Writer


class Database:
    """Given an engine at the newest schema: ``memories``, ``records``, ``work``, ``search``,
    ``identities``, ``listing`` and ``indexing`` read; ``writer`` writes; ``schedules`` is the
    daemon's schedule table, ``dream_requests`` the queue of requests to dream now, ``firings``
    the night's work the daemons share, ``rebuilds`` the vector index rebuilds not finished yet
    and ``console_sessions`` the web console's logins."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.memories = MemoryReads(engine)
        self.records = RecordReads(engine)
        self.work = WorkReads(engine)
        self.search = SearchReads(engine)
        self.identities = IdentityReads(engine)
        self.listing = ListingReads(engine)
        self.writer = Writer(engine)
        self.schedules = ScheduleTable(engine)
        self.dream_requests = DreamRequests(engine)
        self.firings = Firings(engine)
        self.indexing = IndexingReads(engine)
        self.rebuilds = RebuildTable(engine)
        self.console_sessions = ConsoleSessions(engine)
