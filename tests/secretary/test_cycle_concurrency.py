"""`secretary dream` with ``[jobs] concurrency`` on SQLite gives the store a sequential cycle
gives: the same memories, relations and runs per namespace, through litellm against one
scripted model over HTTP; and its runs did overlap (the model answers slowly)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from secretary.config import Settings, load_settings
from secretary.cycle import run_cycle
from store.service import Store
from tests.helpers.openai_server import CHAT_COMPLETIONS, ReceivedRequest, ScriptedOpenAIServer
from tests.helpers.scripted_model import ScriptedModel

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NAMESPACES = ["ana", "ben", "cleo", "dev", "eli", "fay"]


class CountingModel:
    """The scripted model, slowed down, counting the calls in flight at once."""

    def __init__(self) -> None:
        self._model = ScriptedModel()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def __call__(self, request: ReceivedRequest) -> object:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.15)  # in here, so that the calls in flight are counted over it
            return self._model(request)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.fixture
def model() -> Iterator[tuple[ScriptedOpenAIServer, CountingModel]]:
    counting = CountingModel()
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, counting)  # type: ignore[arg-type]
        yield server, counting


def settings(data_dir: Path, server: ScriptedOpenAIServer, concurrency: int) -> Settings:
    return load_settings(
        None,
        {
            "SECRETARY_LLM_MODEL": "openai/test-model",
            "SECRETARY_LLM_API_BASE": server.api_base,
            "SECRETARY_LLM_API_KEY": "x",
            "SECRETARY_JOBS_CONCURRENCY": str(concurrency),
        },
        data_dir=data_dir,
    )


def seed(data_dir: Path) -> None:
    store = Store.open(load_settings(None, {}, data_dir=data_dir), create=True)
    try:
        for n, namespace in enumerate(NAMESPACES):
            lines = [
                f"I always take the train to work in {namespace}'s town.",
                f"I went hiking with Tom on day {n}.",
                f"I went hiking with Tom again on day {n}, in the rain.",
            ]
            store.add_logs(
                namespace,
                [
                    {
                        "session_id": "s1",
                        "role": "user",
                        "content": text,
                        "timestamp": (T0 - timedelta(hours=5 - i)).isoformat(),
                    }
                    for i, text in enumerate(lines)
                ],
                now=T0,
            )
            store.add_memories(
                namespace,
                [
                    {"content": "The user lives in Paris.", "type": "fact"},
                    {"content": "The user lives in Lyon now.", "type": "fact"},
                ],
                now=T0 - timedelta(days=1),
            )
    finally:
        store.close()


def dream(data_dir: Path, server: ScriptedOpenAIServer, concurrency: int) -> list[Any]:
    store = Store.open(settings(data_dir, server, concurrency))
    try:
        outcomes = run_cycle(store, store_settings(store, server, concurrency), now=T0)
        return [(o.namespace, o.job, o.status) for o in outcomes]
    finally:
        store.close()


def store_settings(store: Store, server: ScriptedOpenAIServer, concurrency: int) -> Settings:
    return settings(store.settings.data_dir, server, concurrency)


def contents(data_dir: Path) -> dict[str, Counter[Any]]:
    """Each namespace's memories and relations, ids and times aside."""
    store = Store.open(load_settings(None, {}, data_dir=data_dir))
    try:
        found: dict[str, Counter[Any]] = {}
        for namespace in NAMESPACES:
            rows = [json.loads(line) for line in store.db.memories.export(namespace)]
            texts = {row["id"]: row["content"] for row in rows if row["kind"] == "memory"}
            found[namespace] = Counter(
                (row["content"], row["type"], row["status"])
                if row["kind"] == "memory"
                else (texts[row["source_id"]], row["type"], texts[row["target_id"]])
                for row in rows
            )
        return found
    finally:
        store.close()


def test_a_concurrent_cycle_leaves_the_store_a_sequential_one_does(
    tmp_path: Path, model: tuple[ScriptedOpenAIServer, CountingModel]
) -> None:
    server, counting = model
    sequential, concurrent = tmp_path / "sequential", tmp_path / "concurrent"
    seed(sequential)
    shutil.copytree(sequential, concurrent)

    alone = dream(sequential, server, concurrency=1)
    assert counting.most_in_flight == 1
    together = dream(concurrent, server, concurrency=4)

    assert counting.most_in_flight > 1  # the runs overlapped their calls
    assert counting.most_in_flight <= 4
    assert together == alone  # the same runs and outcomes, namespace by namespace
    expected = contents(sequential)
    assert sum(len(found) for found in expected.values()) > len(NAMESPACES) * 5  # work was done
    assert contents(concurrent) == expected
