"""Fixtures for the jobs: a small store in tmp_path and the scripted LLM server over HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from secretary.config import Settings
from secretary.jobs.settings import GuardrailSettings, JobsSettings
from secretary.llm.settings import LlmSettings
from secretary.outcomes import RunOutcome
from secretary.runner import run_job
from store.kinds import MemoryStatus
from store.operations import CreateRelation, SetStatus
from store.service import Store
from store.settings import DatabaseSettings
from store.views import MemoryView, RecordView
from tests.conftest import truncate
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer, chat_reply

NS = "maya"
_BLOCK = re.compile(r"<(\w+)>\n(.*?)\n</\1>", re.DOTALL)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def llm_settings(server: ScriptedOpenAIServer, **overrides: Any) -> LlmSettings:
    values: dict[str, Any] = {
        "model": "openai/test-model",
        "api_base": server.api_base,
        "api_key": "x",
        "timeout_seconds": 2.0,
        "max_reply_tokens": 200,
        "max_attempts": 3,
        "retry_max_seconds": 5.0,
        # Tiny backoff keeps retry tests fast; the policy is the same.
        "backoff_initial_seconds": 0.01,
        "backoff_max_seconds": 0.05,
    }
    return LlmSettings(**(values | overrides))


@dataclass
class World:
    """A store in tmp_path, its settings and the scripted server; ``run`` runs one job."""

    store: Store
    settings: Settings
    server: ScriptedOpenAIServer

    def configure(
        self,
        *,
        llm: bool = True,
        jobs: Mapping[str, Any] | None = None,
        guardrails: Mapping[str, Any] | None = None,
        **llm_overrides: Any,
    ) -> None:
        self.settings = self.settings.model_copy(
            update={
                "llm": llm_settings(self.server, **llm_overrides) if llm else LlmSettings(),
                "jobs": JobsSettings(**(self.settings.jobs.model_dump() | dict(jobs or {}))),
                "guardrails": GuardrailSettings(
                    **(self.settings.guardrails.model_dump() | dict(guardrails or {}))
                ),
            }
        )

    def run(
        self,
        job: str,
        *,
        now: datetime = NOW,
        dry_run: bool = False,
        retry_quarantined: bool = False,
    ) -> RunOutcome:
        return run_job(
            self.store,
            self.settings,
            job,
            NS,
            now=now,
            dry_run=dry_run,
            retry_quarantined=retry_quarantined,
        )

    def health(self, job: str) -> dict[str, Any]:
        return self.store.db.work.job_health(job, NS)

    def reply(self, *documents: Mapping[str, Any] | str, prompt_tokens: int = 10) -> None:
        """Queue chat replies: JSON documents (or raw text) in order."""
        for document in documents:
            text = document if isinstance(document, str) else json.dumps(document)
            self.server.enqueue(CHAT_COMPLETIONS, chat_reply(text, prompt_tokens=prompt_tokens))

    @property
    def llm_requests(self) -> list[Any]:
        return [request.body for request in self.server.requests_on(CHAT_COMPLETIONS)]

    def sent(self, request: int = -1) -> dict[str, Any]:
        """The JSON data blocks of a request's user message, by tag (``<memories>`` ...)."""
        user = self.llm_requests[request]["messages"][-1]["content"]
        return {tag: json.loads(text) for tag, text in _BLOCK.findall(user)}

    def memories(self, **values: Any) -> list[int]:
        """Add one memory per call (a content string or a dict); return the ids."""
        return list(self.add([values]))

    def add(self, items: Sequence[Mapping[str, Any]], *, now: datetime = NOW) -> tuple[int, ...]:
        rows = [{**item, "timestamp": _iso(item.get("timestamp", NOW - DAY))} for item in items]
        return self.store.add_memories(NS, rows, now=now).ids

    def logs(self, lines: Sequence[tuple[str, str, datetime]], session: str = "s1") -> list[int]:
        rows = [
            {
                "session_id": session,
                "role": role,
                "content": content,
                "timestamp": at.isoformat(),
                "idempotency_key": f"{session}-{index}-{content[:20]}",
            }
            for index, (role, content, at) in enumerate(lines)
        ]
        return list(self.store.add_logs(NS, rows, now=NOW).ids)

    def memory(self, memory_id: int) -> MemoryView:
        found = self.store.db.memories.get(NS, memory_id)
        assert found is not None
        return found

    def active(self) -> list[MemoryView]:
        rows = self.store.db.memories.many(NS, range(1, 10_000))
        return sorted((m for m in rows if m.status == "active"), key=lambda m: m.id)

    def records(self) -> list[RecordView]:
        return sorted(self.store.db.records.find(namespaces=[NS], limit=100), key=lambda r: r.id)

    def edges(self, memory_id: int) -> set[tuple[int, int, str]]:
        return {
            (e.source_id, e.target_id, e.type) for e in self.store.db.search.edges(NS, [memory_id])
        }

    def relate(self, source: int, target: int, type_: str, strength: float) -> None:
        """Add a relation through the one writer, as a job's plan would."""
        op = CreateRelation(source=source, target=target, type=type_, strength=strength)
        self.store.db.writer.apply(NS, "test", [op], now=NOW)

    def set_status(self, memory_id: int, status: MemoryStatus) -> None:
        """Change a memory's status through the one writer, as a job's plan would."""
        op = SetStatus(memory_id=memory_id, status=status)
        self.store.db.writer.apply(NS, "test", [op], now=NOW)


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(
    request: pytest.FixtureRequest, tmp_path: Path, server: ScriptedOpenAIServer
) -> Iterator[World]:
    """A store on SQLite in tmp_path, or on the test PostgreSQL database (emptied first)."""
    database = DatabaseSettings()
    if request.param == "postgres":
        engine: Engine = request.getfixturevalue("postgres_engine")
        truncate(engine)
        database = DatabaseSettings(url=engine.url.render_as_string(hide_password=False))
    settings = Settings(data_dir=tmp_path, database=database, llm=llm_settings(server))
    store = Store.open(settings, create=True, embedder=FakeEmbedder())
    try:
        yield World(store=store, settings=settings, server=server)
    finally:
        store.close()
