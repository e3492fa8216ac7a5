"""Forgetting conversation log lines: by session, time, idempotency key or content, every line
with --all --logs; what was extracted from them goes too, and nothing can bring them back."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from store.database import Database
from store.db import make_engine, session_factory, upgrade
from store.errors import NotFound, ValidationFailed
from store.kinds import Outcome, RecordStatus
from store.models import ConversationLog, MaintenanceRecord
from store.operations import CreateMemory, CreateRelation, encode_operation
from store.schemas import LogIn
from store.write import edits
from store.write.forget import ForgetSelection, LogFilter, log_filter
from store.write.record_info import RecordInfo
from store.write.writer import LinesForgotten
from tests.store.write.test_edits import stored_text

NOW = datetime(2026, 5, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SECRET = "Quillon Vantabrisk keeps the spare key under the blue heron statue"


def lines(db: Database, *rows: tuple[str, str], namespace: str = "ns") -> list[int]:
    """Store lines (session, text), a minute apart, keyed "k0", "k1", ...; return their ids."""
    items = [
        LogIn(
            session_id=session,
            role="user",
            content=text,
            timestamp=NOW + index * MINUTE,
            idempotency_key=f"k{index}",
        )
        for index, (session, text) in enumerate(rows)
    ]
    return list(db.writer.add_logs(namespace, items, now=NOW).ids)


def left(db: Database, namespace: str = "ns") -> list[tuple[int, str]]:
    with session_factory(db.engine)() as session:
        query = select(ConversationLog.id, ConversationLog.content).where(
            ConversationLog.namespace == namespace
        )
        return [(i, text) for i, text in session.execute(query.order_by(ConversationLog.id))]


def extract(db: Database, text: str, cited: list[int], job: str = "extractor") -> int:
    """Make a memory of lines, as the extractor does; return its id."""
    op = CreateMemory(
        key="m", content=text, type="fact", event_time=NOW, metadata={"source_log_ids": cited}
    )
    return db.writer.apply("ns", job, [op], now=NOW).created["m"]


def forget_lines(db: Database, **fields: object) -> edits.ForgetResult:
    chosen = ForgetSelection(log_filter=LogFilter(**fields))  # type: ignore[arg-type]
    return edits.forget(db.writer, "ns", chosen, now=NOW, by="test")


CHAT = [
    ("s1", "I moved to Porto last spring"),
    ("s1", "My sister Ines lives there too"),
    ("s2", "Remind me to call Jordan"),
    ("s2", "jordan's birthday is in May"),
    ("s3", "The weather is fine"),
]


@pytest.mark.parametrize(
    ("fields", "chosen"),
    [
        ({"sessions": ("s2",)}, [2, 3]),
        ({"sessions": ("s1", "s3")}, [0, 1, 4]),
        ({"since": NOW + 2 * MINUTE}, [2, 3, 4]),
        ({"until": NOW + 2 * MINUTE}, [0, 1]),
        ({"since": NOW + MINUTE, "until": NOW + 3 * MINUTE}, [1, 2]),
        ({"keys": ("k0", "k4")}, [0, 4]),
        ({"match": ("JORDAN",)}, [2, 3]),  # any case
        ({"match": ("porto", "weather")}, [0, 4]),  # any of them
        ({"sessions": ("s2",), "since": NOW + 3 * MINUTE}, [3]),  # all fields
        ({"sessions": ("s1",), "match": ("Jordan",)}, []),
    ],
)
def test_forget_lines_takes_exactly_the_chosen_ones(
    db: Database, fields: dict[str, object], chosen: list[int]
) -> None:
    ids = lines(db, *CHAT)
    lines(db, *CHAT[:2], namespace="other")
    before = left(db)

    result = forget_lines(db, **fields)

    assert list(result.plan.logs) == [ids[i] for i in chosen]
    assert left(db) == [row for row in before if row[0] not in result.plan.logs]
    assert len(left(db, "other")) == 2


def test_forget_all_with_logs_leaves_no_line_and_the_record_keeps_no_text(db: Database) -> None:
    ids = lines(db, ("s1", SECRET), ("s2", "unrelated"))
    lines(db, ("s1", "another namespace's line"), namespace="other")

    result = edits.forget(
        db.writer, "ns", ForgetSelection(everything=True, logs=True), now=NOW, by="test"
    )

    assert left(db) == []
    assert [text for _, text in left(db, "other")] == ["another namespace's line"]
    record, _ = db.records.get(result.record_id or 0)
    assert record.stats["logs"] == ids
    assert len(record.stats["log_hashes"]) == 2
    assert "Vantabrisk" not in stored_text(db)
    # Without --logs the lines stay, as before.
    more = lines(db, ("s1", "a new line"))
    edits.forget(db.writer, "ns", ForgetSelection(everything=True), now=NOW)
    assert [i for i, _ in left(db)] == more


def test_forget_lines_takes_what_was_extracted_from_them_and_what_derives_from_that(
    db: Database,
) -> None:
    secret, other = lines(db, ("s1", SECRET), ("s2", "I like tea"))
    from_secret = extract(db, "The spare key is under the heron statue", [secret])
    both = extract(db, "Likes tea; hides keys", [secret, other])
    from_other = extract(db, "The user likes tea", [other])
    summary = db.writer.apply(
        "ns",
        "consolidator",
        [
            CreateMemory(
                key="s", content="Keys and tea", type="interaction_summary", event_time=NOW
            ),
            CreateRelation(source="s", target=from_secret, type="derived_from", strength=1.0),
        ],
        now=NOW,
    ).created["s"]

    result = forget_lines(db, sessions=("s1",))

    why = {m.id: m.why for m in result.plan.memories}
    assert why == {
        from_secret: f"extracted from line #{secret}",
        both: f"extracted from line #{secret}",
        summary: f"derived from #{from_secret}",
    }
    assert db.memories.get("ns", from_other) is not None
    assert [i for i, _ in left(db)] == [other]  # the shared line stays: it was not asked for
    assert "heron" not in stored_text(db)


def test_forget_with_logs_takes_the_lines_and_the_other_memories_of_those_lines(
    db: Database,
) -> None:
    first, second = lines(db, ("s1", SECRET), ("s1", "I like tea"))
    asked = extract(db, "Hides the key under the heron", [first])
    sibling = extract(db, "Keeps a spare key", [first, second])

    result = edits.forget(
        db.writer, "ns", ForgetSelection(ids=(asked,), logs=True), now=NOW, by="test"
    )

    assert [(line.id, line.why) for line in result.plan.lines] == [
        (first, f"#{asked} came from it")
    ]
    assert {m.id: m.why for m in result.plan.memories} == {
        asked: "asked",
        sibling: f"extracted from line #{first}",
    }
    assert [i for i, _ in left(db)] == [second]


def test_a_dry_run_lists_lines_and_writes_nothing(db: Database) -> None:
    ids = lines(db, *CHAT)
    extract(db, "Jordan's birthday is in May", [ids[3]])
    before, records = stored_text(db), len(db.records.find(limit=1000))

    dry = edits.forget(
        db.writer,
        "ns",
        ForgetSelection(log_filter=LogFilter(match=("jordan",))),
        now=NOW,
        dry_run=True,
    )

    assert dry.record_id is None
    assert list(dry.plan.logs) == ids[2:4]
    assert [m.why for m in dry.plan.memories] == [f"extracted from line #{ids[3]}"]
    assert "Jordan" not in str(dry.plan.as_json())  # ids and hashes only
    assert stored_text(db) == before
    assert len(db.records.find(limit=1000)) == records


def test_log_selectors_alone_name_something_and_nonsense_is_refused(db: Database) -> None:
    lines(db, *CHAT)
    assert ForgetSelection(log_filter=LogFilter(sessions=("s1",))).empty is False
    assert ForgetSelection(log_filter=LogFilter()).empty is True
    with pytest.raises(ValidationFailed) as empty:
        edits.forget(db.writer, "ns", ForgetSelection(log_filter=LogFilter()), now=NOW)
    assert empty.value.problems == [
        ("selection", "name ids, external ids, a filter, log lines, or all")
    ]
    with pytest.raises(ValidationFailed) as backwards:
        forget_lines(db, since=NOW + MINUTE, until=NOW)
    assert backwards.value.problems == [("log_filter.since", "is after until")]
    with pytest.raises(ValidationFailed):
        forget_lines(db, match=("  ",))
    with pytest.raises(NotFound, match="idempotency key 'nope'"):
        forget_lines(db, keys=("k0", "nope"))
    with pytest.raises(ValidationFailed) as parsed:
        log_filter(since="soon", until="2026-01-01T00:00:00Z", match=("\ud800",))
    assert [where for where, _ in parsed.value.problems] == ["since", "match.0"]
    assert len(left(db)) == len(CHAT)  # nothing written by any of them


def test_a_watermark_inside_the_erased_lines_stays_valid(db: Database) -> None:
    ids = lines(db, *CHAT)
    forget_lines(db, sessions=("s1", "s2"), until=NOW + 3 * MINUTE)  # the first three
    # A reader at any watermark reads exactly what is left past it; ids are never reused.
    for mark in (0, ids[0], ids[1], ids[2]):
        assert [line.id for line in db.work.logs_after("ns", mark, limit=10)] == ids[3:]
    (new,) = lines(db, ("s4", "a new line after the forget"))
    assert new > ids[-1]


def test_forget_refuses_pending_plans_that_cite_erased_lines_and_scrubs_the_jobs(
    db: Database,
) -> None:
    secret, other = lines(db, ("s1", SECRET), ("s2", "I like tea"))
    citing = CreateMemory(
        key="a",
        content="Hides the key",
        type="fact",
        event_time=NOW,
        metadata={"source_log_ids": [secret]},
    )
    kept = CreateMemory(
        key="b",
        content="Likes tea",
        type="fact",
        event_time=NOW,
        metadata={"source_log_ids": [other]},
    )
    plan = {
        "changes": [
            {"label": f"extract [{secret}]", "operations": [encode_operation(citing)]},
            {"label": f"extract [{other}]", "operations": [encode_operation(kept)]},
        ],
        "job_state": {"watermark": other},
        "base_state": {},
        "targets": {},
    }
    pending = db.writer.apply(
        "ns",
        "extractor",
        [],
        now=NOW,
        info=RecordInfo(outcome=Outcome.PLANNED, stats={"plan": plan}),
    ).record_id
    failed = db.writer.apply(
        "ns",
        "extractor",
        [],
        now=NOW,
        info=RecordInfo(outcome=Outcome.FAILED, error=f"the model choked on {SECRET!r}"),
        health={
            "quarantined": [secret, other],
            "failing": {"ids": [secret], "count": 1},
            "last": {"status": "failed", "message": f"could not parse {SECRET}"},
        },
    ).record_id

    forget_lines(db, sessions=("s1",))

    record, _ = db.records.get(pending or 0)
    assert record.status == RecordStatus.REFUSED
    assert record.stats["refused_by"] == "forget"
    assert "forgotten" in record.stats["stale"]
    assert [c["label"] for c in record.stats["plan"]["changes"]] == [f"extract [{other}]"]
    health = db.work.job_health("extractor", "ns")
    assert health["quarantined"] == [other]
    assert "failing" not in health
    assert "Vantabrisk" not in str(health)
    failed_record, _ = db.records.get(failed or 0)
    assert "Vantabrisk" not in str(failed_record.error)
    assert "Vantabrisk" not in stored_text(db)


def test_a_run_that_read_erased_lines_cannot_apply_them(db: Database) -> None:
    secret, other = lines(db, ("s1", SECRET), ("s2", "I like tea"))
    forget_lines(db, sessions=("s1",))
    records = len(db.records.find(limit=1000))

    with pytest.raises(LinesForgotten, match=f"#{secret}"):
        extract(db, "Hides the key under the heron", [secret, other])

    assert len(db.records.find(limit=1000)) == records
    assert db.memories.count("ns", active_only=False) == 0
    extract(db, "Likes tea", [other])  # lines that are there still make memories
    assert db.memories.count("ns") == 1


# -- property: whatever is chosen, the lines not chosen are untouched ----------------------------

_namespaces = itertools.count()
SESSIONS = ("a", "b", "c")
WORDS = ("tea", "Porto", "key", "cat", "TEA")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """One SQLite store for every example; each works in a namespace of its own."""
    place: Path = tmp_path_factory.mktemp("forget-lines")
    engine = make_engine(f"sqlite:///{place / 'store.db'}")
    upgrade(engine)
    yield Database(engine)
    engine.dispose()


chat = st.lists(
    st.tuples(st.sampled_from(SESSIONS), st.integers(0, 20), st.sampled_from(WORDS)),
    min_size=1,
    max_size=12,
)
filters = st.builds(
    LogFilter,
    sessions=st.lists(st.sampled_from(SESSIONS), max_size=2).map(tuple),
    since=st.none() | st.integers(0, 20).map(lambda m: NOW + m * MINUTE),
    until=st.none() | st.integers(0, 20).map(lambda m: NOW + m * MINUTE),
    match=st.lists(st.sampled_from(("tea", "PORTO", "cat")), max_size=2).map(tuple),
).filter(lambda f: not f.empty and not f.problems())


@settings(max_examples=60, deadline=None)
@given(rows=chat, chosen=filters)
def test_forget_lines_property_the_lines_not_chosen_are_untouched(
    shared: Database, rows: list[tuple[str, int, str]], chosen: LogFilter
) -> None:
    namespace = f"p{next(_namespaces)}"
    items = [
        LogIn(
            session_id=session,
            role="user",
            content=f"line {index} about {word}",
            timestamp=NOW + minute * MINUTE,
        )
        for index, (session, minute, word) in enumerate(rows)
    ]
    shared.writer.add_logs(namespace, items, now=NOW)
    before = shared.work.logs_after(namespace, 0, limit=100)

    def meets(line: LogIn) -> bool:
        return (
            (not chosen.sessions or line.session_id in chosen.sessions)
            and (chosen.since is None or line.timestamp >= chosen.since)
            and (chosen.until is None or line.timestamp < chosen.until)
            and chosen.holds(line.content)
        )

    expected = [view for view, item in zip(before, items, strict=True) if not meets(item)]
    edits.forget(shared.writer, namespace, ForgetSelection(log_filter=chosen), now=NOW)
    assert shared.work.logs_after(namespace, 0, limit=100) == expected
    with session_factory(shared.engine)() as session:
        records = session.scalar(
            select(func.count())
            .select_from(MaintenanceRecord)
            .where(MaintenanceRecord.namespace == namespace)
        )
    assert records == 1  # the erasure record, and no other
