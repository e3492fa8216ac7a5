"""Several `secretary run` daemons on one PostgreSQL store share a night, as real processes.

Two daemons (their own data directories and ports, one Chroma server, the scripted model over
HTTP, slowed to overlap its calls) take the units of one dream request over twelve namespaces:
every unit runs once, both daemons run some, no log line reaches the extractor twice. Then one
daemon is SIGKILLed in the middle of a second night: the other takes over its units and its
request once their leases lapse, and the store holds every line's memory exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from secretary.config import load_settings
from store.coordination.dream_requests import DreamRequestView
from store.service import Store
from tests.conftest import truncate
from tests.conftest_chroma import ChromaServer
from tests.helpers.openai_server import CHAT_COMPLETIONS, ReceivedRequest, ScriptedOpenAIServer
from tests.helpers.scripted_model import ScriptedModel, data_blocks, schema_name
from tests.secretary.test_daemon import START, DaemonProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

NAMESPACES = [f"user-{n:02}" for n in range(12)]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = 6  # seconds: the daemons' and their units' leases (a killed one lapses this soon)
NIGHT = 240.0  # seconds: the bound on a night of the test


class SlowModel:
    """The scripted model, answering each call after ``delay`` seconds; it keeps which log
    lines reached the extractor."""

    def __init__(self, delay: float) -> None:
        self._model = ScriptedModel()
        self._delay = delay
        self.extracted: Counter[int] = Counter()

    def __call__(self, request: ReceivedRequest) -> object:
        if schema_name(request) == "ExtractorReply":
            self.extracted.update(line["id"] for line in data_blocks(request)["log"])
        return replace(self._model(request), delay=self._delay)


@pytest.fixture
def model() -> Iterator[tuple[ScriptedOpenAIServer, SlowModel]]:
    slow = SlowModel(0.4)
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, slow)  # type: ignore[arg-type]
        yield server, slow


@pytest.fixture
def store_env(
    postgres_engine: Engine, dedicated_chroma_server: ChromaServer
) -> Iterator[dict[str, str]]:
    truncate(postgres_engine)
    env = {
        "SECRETARY_DATABASE_URL": postgres_engine.url.render_as_string(hide_password=False),
        "SECRETARY_INDEX_CHROMA_URL": dedicated_chroma_server.url,
    }
    yield env
    truncate(postgres_engine)


def open_store(env: dict[str, str], data_dir: Path) -> Store:
    return Store.open(load_settings(None, env, data_dir=data_dir), create=True)


def seed(store: Store, night: int) -> None:
    for namespace in NAMESPACES:
        store.add_logs(
            namespace,
            [
                {
                    "session_id": f"night-{night}",
                    "role": "user",
                    "content": f"{namespace} went to the market on night {night}, trip {n}.",
                    "timestamp": (T0 + timedelta(days=night, minutes=n)).isoformat(),
                }
                for n in range(3)
            ],
            now=T0 + timedelta(days=night),
        )


def start_daemon(
    tmp_path: Path, name: str, env: dict[str, str], server: ScriptedOpenAIServer
) -> DaemonProcess:
    data_dir = tmp_path / name
    data_dir.mkdir()
    return DaemonProcess(
        data_dir,
        free_port(),
        tmp_path / f"{name}.log",
        notify=None,
        extra_env={
            **env,
            "SECRETARY_LLM_MODEL": "openai/test-model",
            "SECRETARY_LLM_API_BASE": server.api_base,
            "SECRETARY_LLM_API_KEY": "x",
            "SECRETARY_JOBS_CONCURRENCY": "3",
            "SECRETARY_SCHEDULE_LEASE_SECONDS": str(LEASE),
            "SECRETARY_SCHEDULE_POLL_SECONDS": "0.5",
        },
    )


def wait_ready(*daemons: DaemonProcess) -> None:
    deadline = time.monotonic() + START
    for daemon in daemons:
        while True:
            assert daemon.process.poll() is None, daemon.output()
            try:
                if httpx.get(f"http://127.0.0.1:{daemon.port}/healthz", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, daemon.output()
            time.sleep(0.5)


def finished(store: Store, request_id: int, daemons: list[DaemonProcess]) -> DreamRequestView:
    deadline = time.monotonic() + NIGHT
    while True:
        request = store.db.dream_requests.get(request_id)
        assert request is not None
        if request.status in ("done", "failed"):
            return request
        logs = "\n".join(d.output()[-3000:] for d in daemons)
        assert time.monotonic() < deadline, f"request {request.status}\n{logs}"
        time.sleep(0.5)


def enqueue(store: Store) -> int:
    return store.db.dream_requests.enqueue(
        namespace=None, jobs=(), retry_quarantined=False, requested_by="test", now=T0
    )


def memories_per_line(store: Store) -> Counter[int]:
    cited: Counter[int] = Counter()
    for namespace in NAMESPACES:
        for line in store.db.memories.export(namespace):
            row = json.loads(line)
            if row["kind"] == "memory":  # the consolidator may have summed events up since
                cited.update(row["metadata"].get("source_log_ids", []))
    return cited


def test_two_daemons_share_a_night_and_one_finishes_what_a_killed_one_held(
    tmp_path: Path, store_env: dict[str, str], model: tuple[ScriptedOpenAIServer, SlowModel]
) -> None:
    server, slow = model
    store = open_store(store_env, tmp_path / "seed")
    daemons: list[DaemonProcess] = []
    try:
        seed(store, 1)
        daemons = [start_daemon(tmp_path, name, store_env, server) for name in ("a", "b")]
        wait_ready(*daemons)

        # Night 1: both daemons take units of one request; each runs exactly once.
        request = finished(store, enqueue(store), daemons)
        assert request.status == "done", request.error
        firing = store.db.firings.get(f"dream:{request.id}")
        assert firing is not None
        units = store.db.firings.units(firing.id)
        assert [unit.state for unit in units] == ["done"] * len(NAMESPACES)
        assert {unit.claims for unit in units} == {1}  # none taken twice
        assert len({unit.holder for unit in units}) == 2  # both daemons worked
        assert len(request.outcomes) == len(NAMESPACES) * 6  # every job, namespace by namespace
        assert set(slow.extracted.values()) == {1}  # no line sent twice
        assert len(slow.extracted) == len(NAMESPACES) * 3
        assert set(memories_per_line(store).values()) == {1}

        # Night 2: daemon "a" is killed while it holds units; "b" finishes them.
        seed(store, 2)
        slow.extracted.clear()
        request_id = enqueue(store)
        killed_at = None
        deadline = time.monotonic() + NIGHT
        while killed_at is None:
            assert time.monotonic() < deadline, daemons[0].output()[-3000:]
            firing = store.db.firings.get(f"dream:{request_id}")
            if firing is not None:
                held = [
                    unit
                    for unit in store.db.firings.units(firing.id)
                    if unit.state == "running" and unit.holder is not None
                ]
                holders = {unit.holder for unit in held}
                if len(holders) == 2:  # both at work: kill "a" in the middle of its units
                    os.kill(daemons[0].process.pid, signal.SIGKILL)
                    daemons[0].process.wait(10)
                    killed_at = time.monotonic()
            time.sleep(0.2)
        request = finished(store, request_id, daemons[1:])
        assert request.status == "done", request.error
        assert request.picked_by is not None
        firing = store.db.firings.get(f"dream:{request_id}")
        assert firing is not None
        units = store.db.firings.units(firing.id)
        assert [unit.state for unit in units] == ["done"] * len(NAMESPACES)
        assert any(unit.claims == 2 for unit in units)  # taken over from the killed daemon
        assert len(request.outcomes) == len(NAMESPACES) * 6
        # Every line of both nights is in exactly one memory: nothing lost, none twice.
        cited = memories_per_line(store)
        assert len(cited) == len(NAMESPACES) * 6
        assert set(cited.values()) == {1}
    finally:
        for daemon in daemons:
            daemon.close()
        store.close()
