"""A vector index rebuild SIGKILLed halfway (a real kill, in a child process; see
tests/helpers/crash_child.py): searches keep an index and say it is being rebuilt, nothing is
lost from sight in the outbox, and the next `index sync` or the API's start completes the
rebuild, after which `index verify` is clean."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from secretary.config import Settings
from store.api.app import create_app
from store.requests import search_request
from store.service import Store
from store.vector.index import NEXT, OLD, collection_name
from tests.helpers.crash_child import KillPoint, Task
from tests.secretary.test_crash_safety import NOW, NS, Lab, opened
from tests.secretary.test_crash_safety import lab as lab  # the module's fixture, shared here

MEMORIES = 9  # five batches of two (Lab.settings: index batch_size=2)
RECOVERY_SECONDS = 30.0


@pytest.fixture(scope="module")
def indexed(lab: Lab) -> Settings:
    settings = lab.settings("rebuild")
    with opened(settings) as store:
        items = [{"content": f"On day {n} Maya walked along the coast"} for n in range(MEMORIES)]
        store.add_memories(NS, items, now=NOW)
        store.indexer.sync()
    return settings


def rebuild(settings: Settings) -> Task:
    return Task(settings=settings, action="rebuild", namespace=NS, now=NOW)


def degraded(store: Store) -> tuple[str, ...]:
    request = search_request(namespace=NS, query="walked the coast", reinforce=False)
    return store.search(request, now=NOW).degraded


def collections(store: Store) -> set[str]:
    return {collection.name for collection in store.index._client.list_collections()}


def recover(settings: Settings, how: str) -> None:
    """What comes next after the kill: `secretary index sync`'s call, or an API starting."""
    with opened(settings) as store:
        if how == "sync":
            store.indexer.sync()
            return
        with TestClient(create_app(store, start_workers=True)):
            deadline = time.monotonic() + RECOVERY_SECONDS
            while store.indexer.pending_rebuilds():  # the index worker's first syncs
                assert time.monotonic() < deadline, "the API did not finish the rebuild"
                time.sleep(0.05)  # a background thread's work: real time has to pass


@pytest.mark.parametrize(
    ("kill_at", "hit", "recovery"),
    [
        ("rebuild-copied", 2, "sync"),  # two of five batches in the new collection
        ("rebuild-copied", 2, "api"),
        ("rebuild-copied", 5, "sync"),  # all copied, not yet in place
        ("mid-promote", 1, "sync"),  # the old collection renamed aside, the new one not in place
        ("mid-promote", 1, "api"),
    ],
)
def test_rebuild_killed_halfway_is_completed_by_the_next_sync_or_start(
    lab: Lab, indexed: Settings, kill_at: KillPoint, hit: int, recovery: str
) -> None:
    crashed = lab.copy(indexed, "rebuild-crashed")

    lab.run(replace(rebuild(crashed), kill_at=kill_at, hit=hit))

    with opened(crashed) as store:
        mark = store.indexer.pending_rebuilds()[NS]
        assert store.db.work.outbox_size() == 0  # the outbox knows nothing of it...
        assert degraded(store)[0].startswith("vector index rebuild pending")  # ...the row does
        if kill_at == "rebuild-copied":
            assert (mark.phase, mark.copied) == ("copying", min(2 * hit, MEMORIES))
            assert store.indexer.verify(NS).clean  # the old index answers, whole
        else:
            assert mark.phase == "promoting"
            assert collection_name(NS, OLD) in collections(store)

    recover(crashed, recovery)

    with opened(crashed) as store:
        assert store.indexer.pending_rebuilds() == {}
        drift = store.indexer.verify(NS)
        assert drift.clean, drift
        assert len(store.index.versions(NS)) == MEMORIES
        assert degraded(store) == ()
        assert not {collection_name(NS, NEXT), collection_name(NS, OLD)} & collections(store)


def test_rebuild_killed_before_its_first_batch_is_completed_by_the_next_sync(
    lab: Lab, indexed: Settings
) -> None:
    crashed = lab.copy(indexed, "rebuild-crashed")

    lab.run(replace(rebuild(crashed), kill_at="mid-upsert", hit=1))  # half of the first batch

    with opened(crashed) as store:
        assert store.indexer.pending_rebuilds()[NS].copied == 0
        assert store.indexer.verify(NS).clean
    recover(crashed, "sync")
    with opened(crashed) as store:
        assert store.indexer.pending_rebuilds() == {}
        assert store.indexer.verify(NS).clean
