"""What the jobs put into their prompts, and how they split their work into calls (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from secretary.jobs.base import chunks, pack
from secretary.jobs.extractor import lines_for_prompt
from secretary.jobs.linker import typed_groups
from secretary.jobs.prompt_data import listed_once, oldest_first, prompt_day, prompt_time
from store.views import LogView, MemoryView

T = datetime(2026, 3, 1, 9, 30, 15, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def view(memory_id: int, at: datetime = T, *, type_: str = "event") -> MemoryView:
    return MemoryView(
        id=memory_id,
        namespace="maya",
        external_id=None,
        content=f"memory {memory_id}",
        content_hash=str(memory_id),
        type=type_,
        tags=(),
        importance=5,
        base_importance=5.0,
        access_count=0,
        last_accessed=None,
        event_time=at,
        created_at=T + timedelta(days=400),
        updated_at=T,
        session_id=None,
        prev_id=None,
        next_id=None,
        status="active",
        replaced_by_id=None,
        pinned=False,
        source="test",
        metadata={},
        version=1,
    )


def test_prompt_time_is_utc_to_the_minute() -> None:
    paris = datetime(2026, 3, 1, 10, 30, 59, tzinfo=UTC).astimezone(ZoneInfo("Europe/Paris"))

    assert prompt_time(paris) == "2026-03-01 10:30"
    assert prompt_day(paris) == "2026-03-01"


def test_chunks_fewest_calls_of_nearly_equal_length_in_order() -> None:
    items = list(range(50))

    split = chunks(items, 45)

    assert [len(c) for c in split] == [25, 25]
    assert [i for c in split for i in c] == items
    assert [len(c) for c in chunks(list(range(7)), 3)] == [3, 2, 2]
    assert [len(c) for c in chunks(list(range(45)), 45)] == [45]
    assert chunks([], 45) == []


def test_pack_counts_new_items_and_keeps_groups_whole() -> None:
    groups = [("a", [1, 2]), ("b", [3]), ("c", [4, 5, 6]), ("d", [7, 8, 9, 10, 11])]

    calls = pack(groups, 4, lambda g: g[1])

    assert [[name for name, _ in call] for call in calls] == [["a", "b"], ["c"], ["d"]]


def test_oldest_first_lists_by_time_and_leaves_out_repeated_times() -> None:
    memories = [view(3, T + MINUTE), view(1, T), view(2, T + timedelta(seconds=20))]

    shown = oldest_first(memories)

    assert shown == [
        {"id": 1, "type": "event", "time": "2026-03-01 09:30", "content": "memory 1"},
        {"id": 2, "type": "event", "content": "memory 2"},  # the same minute as the one before
        {"id": 3, "type": "event", "time": "2026-03-01 09:31", "content": "memory 3"},
    ]


def test_oldest_first_by_day_without_type_has_no_unused_fields() -> None:
    memories = [view(1, T), view(2, T + timedelta(hours=3)), view(3, T + timedelta(days=1))]

    shown = oldest_first(memories, with_type=False, days=True)

    assert shown == [
        {"id": 1, "day": "2026-03-01", "content": "memory 1"},
        {"id": 2, "content": "memory 2"},
        {"id": 3, "day": "2026-03-02", "content": "memory 3"},
    ]
    # Neither when it was recorded nor its importance: no prompt judges by them.
    assert not {"recorded", "importance"} & {key for item in oldest_first(memories) for key in item}


def test_listed_once_keeps_the_first_appearance() -> None:
    a, b, c = view(1), view(2), view(3)

    assert [m.id for m in listed_once([(b, a), (a, c), (c, b)])] == [2, 1, 3]


def test_lines_for_prompt_leaves_out_a_time_the_line_before_had() -> None:
    def line(log_id: int, at: datetime) -> LogView:
        return LogView(
            id=log_id, session_id="s", role="user", content=f"line {log_id}", timestamp=at
        )

    shown = lines_for_prompt([line(7, T), line(8, T + timedelta(seconds=30)), line(9, T + MINUTE)])

    assert shown == [
        {"id": 7, "time": "2026-03-01 09:30", "role": "user", "text": "line 7"},
        {"id": 8, "role": "user", "text": "line 8"},
        {"id": 9, "time": "2026-03-01 09:31", "role": "user", "text": "line 9"},
    ]


def test_typed_groups_fold_a_group_into_one_that_holds_all_its_members() -> None:
    seeds = [view(1), view(2), view(3)]
    views = {m.id: m for m in [*seeds, view(10), view(11)]}
    edges = [(1, 2, 0.9), (1, 10, 0.8), (2, 10, 0.8), (3, 11, 0.7)]

    groups = typed_groups(seeds, edges, views, size=6)

    # Seed 2's group (2, 1, 10) is inside seed 1's (1, 2, 10): asked once, settling both.
    assert [(g.seeds, [m.id for m in g.members]) for g in groups] == [
        ((1, 2), [1, 2, 10]),
        ((3,), [3, 11]),
    ]
