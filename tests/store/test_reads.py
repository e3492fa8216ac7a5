"""The search path's reads on SQLite and PostgreSQL: rows by id, filters, edges, revision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store.database import Database
from store.kinds import MemoryStatus
from store.operations import CreateRelation, SetStatus
from store.reads.search import _VERSIONS
from store.schemas import MemoryIn

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def _add(db: Database, namespace: str, *items: MemoryIn) -> list[int]:
    return list(db.writer.add_memories(namespace, list(items), now=NOW, source="test").ids)


def _archive(db: Database, namespace: str, memory_id: int) -> None:
    operation = SetStatus(memory_id=memory_id, status=MemoryStatus.ARCHIVED)
    db.writer.apply(namespace, "test", [operation], now=NOW)


def _relate(db: Database, source: int, target: int, type_: str, strength: float) -> None:
    operation = CreateRelation(source=source, target=target, type=type_, strength=strength)
    db.writer.apply("a", "test", [operation], now=NOW)


def _memory(content: str, **fields: object) -> MemoryIn:
    return MemoryIn.model_validate({"content": content, **fields})


def test_search_rows_only_active_of_namespace(db: Database) -> None:
    mine = _add(db, "a", _memory("one", tags=["x"], metadata={"k": "v"}), _memory("two"))
    theirs = _add(db, "b", _memory("three"))
    _archive(db, "a", mine[1])
    rows = db.search.search_rows("a", [*mine, *theirs, 999_999])
    assert list(rows) == [mine[0]]
    assert (rows[mine[0]].tags, rows[mine[0]].metadata) == (["x"], {"k": "v"})


def test_many_reads_every_field_as_get_does(db: Database) -> None:
    """``many`` reads with Core, ``get`` with the ORM: the views must be the same, field for
    field (JSON tags and metadata, UTC times, booleans), and another namespace's are left out."""
    mine = _add(
        db,
        "a",
        _memory(
            "one",
            tags=["x", "y"],
            metadata={"k": "v", "n": 3, "nested": {"ok": True}},
            session_id="s1",
            timestamp=NOW - DAY,
            pinned=True,
            importance=8,
        ),
        _memory("two", session_id="s1"),
    )
    theirs = _add(db, "b", _memory("three"))
    _archive(db, "a", mine[1])
    views = db.memories.many("a", [*mine, *theirs, 999_999])
    assert views == [db.memories.get("a", mid) for mid in mine]
    first = views[0]
    assert (first.tags, first.metadata, first.pinned) == (
        ("x", "y"),
        {"k": "v", "n": 3, "nested": {"ok": True}},
        True,
    )
    assert first.event_time == NOW - DAY
    assert first.event_time.tzinfo is not None
    assert list(db.memories.active("a", mine)) == [mine[0]]


def test_filtered_rows_type_time_and_plain_metadata_narrowed_in_sql(db: Database) -> None:
    ids = _add(
        db,
        "a",
        _memory("net", type="fact", timestamp=NOW - DAY, metadata={"area": "NETWORK"}),
        _memory(
            "net config", type="fact", timestamp=NOW - DAY, metadata={"area": "NETWORK_CONFIG"}
        ),
        _memory("old net", type="fact", timestamp=NOW - 9 * DAY, metadata={"area": "NETWORK"}),
        _memory("event", type="event", timestamp=NOW - DAY, metadata={"area": "NETWORK"}),
    )
    _add(db, "b", _memory("other namespace", type="fact", metadata={"area": "NETWORK"}))
    rows = db.search.filtered_rows(
        "a", types=("fact",), since=NOW - 2 * DAY, metadata=(("area", "NETWORK"),), limit=10
    )
    assert rows is not None
    assert [row.id for row in rows] == [ids[0]]


def test_filtered_rows_json_literal_values_left_to_the_caller(db: Database) -> None:
    # "3" may be the JSON text of the number 3: SQL cannot compare it portably, so it stays in.
    ids = _add(db, "a", _memory("n", metadata={"retries": 3}), _memory("s", metadata={"x": 1}))
    rows = db.search.filtered_rows("a", metadata=(("retries", "3"),), limit=10)
    assert rows is not None
    assert sorted(row.id for row in rows) == ids


def test_filtered_rows_odd_key_not_put_in_sql(db: Database) -> None:
    ids = _add(db, "a", _memory("q", metadata={'we"ird key': "v"}))
    rows = db.search.filtered_rows("a", metadata=(('we"ird key', "v"),), limit=10)
    assert rows is not None
    assert [row.id for row in rows] == ids


def test_filtered_rows_more_than_limit_is_none(db: Database) -> None:
    _add(db, "a", *(_memory(f"m{i}", type="fact") for i in range(4)))
    assert db.search.filtered_rows("a", types=("fact",), limit=3) is None
    assert db.search.filtered_rows("a", types=("fact",), limit=4) is not None


def test_edges_and_revision(db: Database) -> None:
    ids = _add(db, "a", _memory("one"), _memory("two"), _memory("three"))
    before = db.search.revision("a")
    _relate(db, ids[0], ids[1], "causal", strength=0.4)
    _relate(db, ids[1], ids[2], "thematic", strength=0.9)
    assert db.search.revision("a") > before
    assert db.search.revision("nobody") == 0
    edges = db.search.edges("a", [ids[1]])
    assert [(e.source_id, e.target_id, e.type) for e in edges] == [
        (ids[1], ids[2], "thematic"),  # strongest first
        (ids[0], ids[1], "causal"),
    ]
    assert db.search.edges("b", [ids[1]]) == []


def _retire(db: Database, namespace: str, memory_id: int, by: int, status: MemoryStatus) -> None:
    operation = SetStatus(memory_id=memory_id, status=status, replaced_by=by)
    db.writer.apply(namespace, "test", [operation], now=NOW)


def test_search_rows_carry_the_sessions_of_the_memories_they_replaced(db: Database) -> None:
    old, fragment, new, plain, other = _add(
        db,
        "a",
        _memory("lives in Oslo", session_id="s1"),
        _memory("moved to Rome", session_id="s2"),
        _memory("lives in Rome now", session_id="s3"),
        _memory("likes tea", session_id="s1"),
        _memory("sessionless"),
    )
    _retire(db, "a", old, new, MemoryStatus.SUPERSEDED)
    _retire(db, "a", fragment, new, MemoryStatus.MERGED)
    _retire(db, "a", other, plain, MemoryStatus.MERGED)  # no session: nothing to score in
    (foreign,) = _add(db, "b", _memory("elsewhere", session_id="s9"))
    rows = db.search.search_rows("a", [new, plain, old, 999_999])
    assert {mid: row.replaced for mid, row in rows.items()} == {
        new: frozenset({"s1", "s2"}),
        plain: frozenset(),
    }
    assert db.search.search_rows("b", [new, foreign])[foreign].replaced == frozenset()


def test_lexical_rows_paged_by_id_active_of_namespace_only(db: Database) -> None:
    ids = _add(db, "a", *(_memory(f"m{i}") for i in range(5)))
    _add(db, "b", _memory("elsewhere"))
    _archive(db, "a", ids[1])
    first = db.search.lexical_rows("a", limit=2)
    second = db.search.lexical_rows("a", after_id=first[-1].memory_id, limit=2)
    third = db.search.lexical_rows("a", after_id=second[-1].memory_id, limit=2)
    assert [[row.memory_id for row in page] for page in (first, second, third)] == [
        [ids[0], ids[2]],
        [ids[3], ids[4]],
        [],
    ]
    assert [row.content for row in db.search.lexical_rows("a", after_id=ids[2])] == ["m3", "m4"]


def test_memory_versions_read_an_index_not_the_rows(sqlite_db: Database) -> None:
    """The lexical index is compared with every memory's id, version and status after writes it
    did not see: at 1M memories, reading them from the rows took 3-15 s of a restart."""
    mine = _add(sqlite_db, "a", _memory("one"), _memory("two"))
    _archive(sqlite_db, "a", mine[1])
    _add(sqlite_db, "b", _memory("three"))

    versions = sorted(sqlite_db.search.memory_versions("a"))
    assert [(memory_id, active) for memory_id, _, active in versions] == [
        (mine[0], 1),
        (mine[1], 0),
    ]
    statement = _VERSIONS.params(namespace="a").compile(
        sqlite_db.engine, compile_kwargs={"literal_binds": True}
    )
    with sqlite_db.engine.connect() as connection:
        plan = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", ()).all()
    assert ["COVERING INDEX ix_memories_versions" in row[-1] for row in plan] == [True]
