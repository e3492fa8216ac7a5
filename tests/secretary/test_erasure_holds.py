"""Erasure that holds, end to end: a name put in conversation lines, tags, metadata and what the
model wrote from them (extracted memories, a summary, a trait) is found nowhere on disk after one
forget, and ten dream cycles after it bring none of it back.

Every job runs against the scripted model on the real store (SQLite, embedded Chroma, the saved
lexical index); the check reads every byte of every file under the data directory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from secretary.config import Settings
from secretary.cycle import run_cycle
from store.db import make_engine, upgrade
from store.exports.backup import export_store
from store.requests import SearchFilters
from store.service import Store
from store.write.forget import ForgetSelection, LogFilter
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.openai_server import (
    CHAT_COMPLETIONS,
    ReceivedRequest,
    ScriptedOpenAIServer,
    ScriptedReply,
    chat_completion_body,
)
from tests.helpers.scripted_model import ANSWERS, data_blocks, schema_name
from tests.secretary.jobs.conftest import llm_settings
from tests.secretary.test_daemon import DaemonProcess, free_port

NS = "maya"
MARKER = "Quorvantil"
# How the name can sit in a file: as written, lowercased (the lexical index's terms, JSON keys
# compared without case), and as UTF-16 (nothing here writes it, but a copy would hide there).
NEEDLES = (MARKER.encode(), MARKER.lower().encode(), MARKER.encode("utf-16-le"))
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MINUTE, HOUR, DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)


def model(request: ReceivedRequest) -> ScriptedReply:
    """The scripted model, whose trait quotes the first memory it was shown (as a real model's
    might: "the user keeps seeing Dr. ...")."""
    name, blocks = schema_name(request), data_blocks(request)
    answer: dict[str, Any] = ANSWERS[name](blocks)
    if name == "SoulMapperReply" and blocks.get("memories"):
        shown = blocks["memories"][0].get("content", "")
        answer["traits"][0]["trait"] = f"The user often comes back to this: {shown}"[:300]
    return ScriptedReply(body=chat_completion_body(json.dumps(answer)))


@pytest.fixture
def night(tmp_path: Path) -> Iterator[tuple[Store, Settings]]:
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, model)
        settings = Settings(data_dir=tmp_path / "data", llm=llm_settings(server))
        store = Store.open(settings, create=True, embedder=FakeEmbedder())
        try:
            yield store, settings
        finally:
            store.close()


def _lines(session: str, at: datetime, texts: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "session_id": session,
            "role": "user" if n % 2 == 0 else "assistant",
            "content": text,
            "timestamp": (at + n * MINUTE).isoformat(),
            "idempotency_key": f"{session}-{n}",
        }
        for n, text in enumerate(texts)
    ]


def _fill(store: Store) -> None:
    store.add_logs(
        NS,
        _lines(
            "clinic",
            T0,
            [
                f"I saw Dr. {MARKER} about my knee this morning.",
                "How did it go?",
                f"Dr. {MARKER} said to rest the knee for two weeks.",
                "Rest sounds wise.",
                f"The knee hurts less since Dr. {MARKER} taped it.",
            ],
        )
        + _lines("garden", T0 + 5 * HOUR, ["I planted tomatoes today.", "Nice!"]),
        now=T0 + 6 * HOUR,
    )
    store.add_memories(
        NS,
        [
            {
                "content": "Booked a physiotherapy session for the knee.",
                "type": "event",
                "tags": ["health", MARKER],
                "metadata": {"doctor": f"Dr. {MARKER}"},
                "timestamp": (T0 + HOUR).isoformat(),
            },
            {"content": "Likes green tea in the morning.", "type": "preference"},
        ],
        now=T0 + 6 * HOUR,
    )


def _dream(store: Store, settings: Settings, now: datetime) -> None:
    run_cycle(store, settings, now=now, namespaces=[NS], sleep=lambda _s: None)
    store.indexer.sync()


def _files_holding(root: Path) -> dict[str, int]:
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        count = sum(data.count(needle) for needle in NEEDLES)
        if count:
            found[str(path.relative_to(root))] = count
    return found


def _in_sql(store: Store) -> list[str]:
    return [line[:120] for line in export_store(store.engine) if MARKER.lower() in line.lower()]


def test_a_forgotten_name_is_nowhere_on_disk_and_ten_dreams_bring_nothing_back(
    night: tuple[Store, Settings],
) -> None:
    store, settings = night
    _fill(store)
    _dream(store, settings, T0 + 7 * HOUR)
    _dream(store, settings, T0 + DAY)  # the episode's window has passed: a summary
    holding = [m for m in store.db.memories.many(NS, range(1, 200)) if MARKER in m.content]
    # The test's premise: what the model wrote from the lines carries the name too.
    assert {(m.type, m.source) for m in holding} == {
        ("event", "extractor"),
        ("interaction_summary", "consolidator"),
        ("preference", "soul_mapper"),
    }
    data_dir = settings.data_dir
    assert _files_holding(data_dir)  # before: in the database, the indexes, the records

    selection = ForgetSelection(
        log_filter=LogFilter(match=(MARKER,)), filters=SearchFilters(tags=(MARKER,))
    )
    result = store.forget(NS, selection, now=T0 + DAY + HOUR, by="test")

    assert result.plan.logs  # the clinic's lines
    assert getattr(result, "index_pending", False) is False
    assert _in_sql(store) == []
    assert _files_holding(data_dir) == {}

    for night_number in range(10):
        at = T0 + (2 + night_number) * DAY
        store.add_logs(NS, _lines(f"day-{night_number}", at, ["Walked the dog.", "Good!"]), now=at)
        _dream(store, settings, at + 4 * HOUR)
        assert _in_sql(store) == [], f"night {night_number + 1}"
    assert _files_holding(data_dir) == {}
    assert store.db.memories.count(NS) > 2  # the dreams went on with what is left


def _wait_for_dream(client: httpx.Client, request_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        shown = client.get(f"/v1/dream/{request_id}").json()
        if shown["status"] in ("done", "failed"):
            return dict(shown)
        time.sleep(0.3)
    raise AssertionError(f"dream request {request_id} not finished in 120 s")


def _dream_via_api(client: httpx.Client) -> dict[str, Any]:
    queued = client.post(f"/v1/dream?namespace={NS}")
    assert queued.status_code == 202, queued.text
    return _wait_for_dream(client, queued.json()["id"])


@pytest.mark.slow
def test_a_forget_through_the_daemon_leaves_no_byte_and_dreams_bring_nothing_back(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    upgrade_only = make_engine(f"sqlite:///{data_dir / 'secretary.db'}")
    upgrade(upgrade_only)
    upgrade_only.dispose()
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, model)
        llm = {
            "SECRETARY_LLM_MODEL": "openai/test-model",
            "SECRETARY_LLM_API_BASE": server.api_base,
            "SECRETARY_LLM_API_KEY": "x",
        }
        daemon = DaemonProcess(data_dir, free_port(), tmp_path / "daemon.log", None, llm)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=60) as client:
                _until_ready(client, daemon)
                past = datetime.now(UTC) - 2 * DAY  # the consolidator's window has passed
                logs = _lines("clinic", past, [f"I saw Dr. {MARKER} about my knee.", "And?"])
                logs += _lines("clinic2", past + 20 * MINUTE, [f"Dr. {MARKER} taped it."])
                assert client.post(f"/v1/logs?namespace={NS}", json=logs).status_code == 201
                tagged = {"content": "Booked physio.", "tags": [MARKER], "metadata": {"dr": MARKER}}
                assert client.post(f"/v1/memories?namespace={NS}", json=tagged).status_code == 201
                assert _dream_via_api(client)["status"] == "done"
                assert _files_holding(data_dir)  # the premise: it is there

                forgot = client.post(
                    f"/v1/forget?namespace={NS}",
                    json={"log_filter": {"match": [MARKER]}, "filter": {"tags": [MARKER]}},
                )

                assert forgot.status_code == 200, forgot.text
                assert forgot.json()["index_pending"] is False
                assert forgot.json()["log_ids"]
                assert _files_holding(data_dir) == {}
                for _ in range(3):
                    client.post(
                        f"/v1/logs?namespace={NS}",
                        json=_lines(f"walk-{time.monotonic_ns()}", past, ["Walked the dog."]),
                    )
                    assert _dream_via_api(client)["status"] == "done"
                assert _files_holding(data_dir) == {}
        finally:
            daemon.close()


def _until_ready(client: httpx.Client, daemon: DaemonProcess) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if daemon.process.poll() is not None:
            raise AssertionError(f"the daemon exited:\n{daemon.output()}")
        time.sleep(0.3)
    raise AssertionError(f"the daemon was not ready in 60 s:\n{daemon.output()}")
