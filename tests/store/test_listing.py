"""Listing on SQLite and PostgreSQL: pages by id with filters, stable while memories are added;
a memory's relations both ways; the namespaces and what they hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store.database import Database
from store.errors import ValidationFailed
from store.kinds import MemoryStatus
from store.listing import ListRequest, decode_cursor, encode_cursor, list_memories, list_request
from store.operations import CreateRelation, SetStatus
from store.schemas import LogIn, MemoryIn

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def add(db: Database, namespace: str, *items: dict[str, object]) -> list[int]:
    parsed = [MemoryIn.model_validate(item) for item in items]
    return list(db.writer.add_memories(namespace, parsed, now=NOW).ids)


def every_page(db: Database, request: ListRequest) -> list[list[int]]:
    pages: list[list[int]] = []
    cursor: str | None = None
    while True:
        listed = list_memories(db, list_request(**_raw(request), cursor=cursor))
        pages.append([m.id for m in listed.page.memories])
        if listed.next_cursor is None:
            return pages
        cursor = listed.next_cursor


def _raw(request: ListRequest) -> dict[str, object]:
    return {"namespace": request.namespace, "limit": request.limit}


def test_list_pages_by_id_and_ends_with_no_cursor(db: Database) -> None:
    ids = add(db, "ns", *({"content": f"m{n}"} for n in range(7)))
    pages = every_page(db, ListRequest(namespace="ns", limit=3))
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]


def test_list_exact_multiple_of_limit_has_no_empty_last_page(db: Database) -> None:
    ids = add(db, "ns", *({"content": f"m{n}"} for n in range(6)))
    assert every_page(db, ListRequest(namespace="ns", limit=3)) == [ids[0:3], ids[3:6]]


def test_list_paging_is_stable_while_memories_are_added(db: Database) -> None:
    first = add(db, "ns", *({"content": f"m{n}", "timestamp": NOW + n * DAY} for n in range(10)))
    seen: list[int] = []
    listed = list_memories(db, list_request(namespace="ns", limit=4))
    seen += [m.id for m in listed.page.memories]
    # New memories arrive between pages, one of them earlier on the timeline than all.
    later = add(db, "ns", {"content": "early", "timestamp": NOW - 9 * DAY}, {"content": "late"})
    while listed.next_cursor is not None:
        listed = list_memories(db, list_request(namespace="ns", limit=4, cursor=listed.next_cursor))
        seen += [m.id for m in listed.page.memories]
    assert seen == first + later


def test_list_filters_type_tag_status_time_and_metadata(db: Database) -> None:
    ids = add(
        db,
        "ns",
        {"content": "a", "type": "fact", "tags": ["x", "y"], "timestamp": NOW},
        {"content": "b", "type": "event", "tags": ["x"], "timestamp": NOW + DAY},
        {"content": "c", "type": "fact", "metadata": {"k": "v", "n": 3}, "timestamp": NOW + DAY},
        {"content": "d", "type": "fact", "tags": ["x", "y"], "timestamp": NOW + 2 * DAY},
    )
    db.writer.apply(
        "ns", "test", [SetStatus(memory_id=ids[3], status=MemoryStatus.ARCHIVED)], now=NOW
    )

    def listed(**params: object) -> list[int]:
        request = list_request(namespace="ns", **params)  # type: ignore[arg-type]
        return [m.id for m in list_memories(db, request).page.memories]

    assert listed() == ids[:3]  # active only by default
    assert listed(types=["fact"]) == [ids[0], ids[2]]
    assert listed(tags=["x", "y"]) == [ids[0]]
    assert listed(tags=["x", "y"], statuses=["active", "archived"]) == [ids[0], ids[3]]
    assert listed(statuses=["archived"]) == [ids[3]]
    assert listed(since=NOW + DAY) == [ids[1], ids[2]]
    assert listed(until=(NOW + DAY).isoformat()) == [ids[0]]
    assert listed(meta=["k=v", "n=3"]) == [ids[2]]
    assert listed(meta=["k=V"]) == []


def test_list_rare_filter_stops_at_scan_bound_with_a_cursor(db: Database) -> None:
    add(db, "ns", *({"content": f"m{n}"} for n in range(30)))
    rare = add(db, "ns", {"content": "tagged", "tags": ["rare"]})
    page = db.listing.page("ns", after=0, limit=5, keep=lambda m: "rare" in m.tags, scan=10)
    assert page.memories == []
    assert page.next_after is not None
    pages = []
    while page.next_after is not None:
        page = db.listing.page(
            "ns", after=page.next_after, limit=5, keep=lambda m: "rare" in m.tags, scan=10
        )
        pages.append([m.id for m in page.memories])
    assert [i for p in pages for i in p] == rare


def test_list_request_bad_parameters_named() -> None:
    with pytest.raises(ValidationFailed) as caught:
        list_request(
            namespace="ns",
            statuses=["gone"],
            since="2026-02-01",
            until="2026-01-01",
            meta=["novalue"],
            cursor="garbage!",
            limit=0,
        )
    assert [where for where, _ in caught.value.problems] == [
        "status",
        "since",
        "meta.0",
        "cursor",
        "limit",
    ]


def test_cursor_round_trips_and_is_opaque() -> None:
    assert decode_cursor(encode_cursor(42)) == 42
    assert "42" not in encode_cursor(42)
    for bad in ("", "e30", encode_cursor(1)[:-3] + "xyz"):
        with pytest.raises(ValueError, match="not a cursor"):
            decode_cursor(bad)


def test_relations_both_ways_with_the_other_end(db: Database) -> None:
    a, b, c = add(db, "ns", {"content": "a"}, {"content": "b", "type": "fact"}, {"content": "c"})
    ops = [
        CreateRelation(source=a, target=b, type="causal", strength=0.8, description="because"),
        CreateRelation(source=c, target=a, type="thematic", strength=0.3),
    ]
    db.writer.apply("ns", "test", ops, now=NOW)
    views = db.listing.relations("ns", a)
    assert [(r.direction, r.other_id, r.other_type, r.type, r.strength) for r in views] == [
        ("out", b, "fact", "causal", 0.8),
        ("in", c, "event", "thematic", 0.3),
    ]
    assert views[0].description == "because"
    assert views[0].other_content == "b"
    assert db.listing.relations("other", a) == []


def test_namespaces_with_counts(db: Database) -> None:
    ids = add(db, "a", {"content": "x"}, {"content": "y"})
    db.writer.apply("a", "test", [SetStatus(memory_id=ids[0], status=MemoryStatus.MERGED)], now=NOW)
    log = LogIn(session_id="s", role="user", content="hi", timestamp=NOW)
    db.writer.add_logs("b", [log], now=NOW)
    every = db.listing.namespaces()
    assert [(v.namespace, v.memories, v.retired, v.logs) for v in every] == [
        ("a", 1, 1, 0),
        ("b", 0, 0, 1),
    ]
    named = db.listing.namespaces(["b", "c"])
    assert [(v.namespace, v.memories, v.logs) for v in named] == [("b", 0, 1), ("c", 0, 0)]
