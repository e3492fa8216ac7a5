"""What a job run is given: the store, its namespace and time, its settings and its LLM calls.

``LlmCalls`` is the LLM as one run sees it: it counts calls, tokens, cost and the prompts sent
(what the run's record says), and stops the run at its call cap or budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from prompts import ReplyModel
from prompts.render import RenderedPrompt, prompt_record
from secretary.jobs.settings import GuardrailSettings, JobsSettings
from secretary.llm.budget import Budget
from secretary.llm.client import Check, LlmClient
from secretary.llm.errors import BudgetExhausted, LlmError, LlmInvalidReply
from secretary.llm.usage import LlmUsage

if TYPE_CHECKING:  # the store is handed in; jobs never open one
    from store.database import Database
    from store.service import Store

T = TypeVar("T", bound=ReplyModel)
B = TypeVar("B")
R = TypeVar("R")


class RunLimitReached(Exception):
    """The run made its allowed number of LLM calls; the rest waits for the next run."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"max_llm_calls_per_run ({limit}) reached")


class LlmCalls:
    """The LLM as one run sees it: counts calls, tokens, cost and prompts; stops at the limits."""

    def __init__(
        self,
        client: LlmClient | None,
        *,
        budget: Budget | None,
        max_calls: int,
        before_call: Callable[[], object] = lambda: None,
    ) -> None:
        self._client = client
        self._budget = budget
        self._max_calls = max_calls
        self._before_call = before_call  # e.g. renewing the run's lease
        self.calls = 0
        self.usage: LlmUsage | None = None
        # Items the replies held that were dropped as invalid, and deviations that were mended.
        self.dropped: list[dict[str, Any]] = []
        self.mended: list[str] = []
        self._prompts: dict[tuple[Any, ...], dict[str, Any]] = {}

    @property
    def available(self) -> bool:
        return self._client is not None and self._client.configured

    @property
    def model(self) -> str | None:
        return self._client.model if self._client is not None and self.calls else None

    @property
    def prompts(self) -> list[dict[str, Any]]:
        return list(self._prompts.values())

    def ask(self, prompt: RenderedPrompt, schema: type[T], check: Check[T] | None = None) -> T:
        """Send one prompt; return its validated reply (``check``: see ``LlmClient.complete``).
        Raise RunLimitReached at the call cap."""
        if self._client is None:
            raise RuntimeError("LlmCalls.ask without a client; check .available first")
        if self.calls >= self._max_calls:
            raise RunLimitReached(self._max_calls)
        self._before_call()
        try:
            reply = self._client.complete(prompt, schema, budget=self._budget, check=check)
        except BudgetExhausted:
            raise  # refused before anything was sent: not a call
        except LlmError as exc:
            self._sent(prompt)
            if isinstance(exc, LlmInvalidReply) and exc.usage is not None:
                self._add(exc.usage)
            raise
        self._sent(prompt)
        self._add(reply.usage)
        for record in reply.prompt_records():
            self._note(record)
        self.dropped.extend(
            {
                "item": f"{prompt.id} reply item {d.index}" if d.index is not None else prompt.id,
                "reason": f"invalid: {d.reason}",
                "value": d.item,
            }
            for d in reply.dropped
        )
        self.mended.extend(f"{prompt.id}: {note}" for note in reply.mended)
        return reply.value

    def record_info(self) -> dict[str, Any]:
        """What a record stores about the run's LLM use (``RecordInfo``'s fields)."""
        usage = self.usage
        return {
            "model": self.model,
            "prompts": self.prompts,
            "tokens_in": usage.prompt_tokens if usage else 0,
            "tokens_out": usage.completion_tokens if usage else 0,
            "cost": usage.cost if usage else None,
        }

    def _sent(self, prompt: RenderedPrompt) -> None:
        self.calls += 1
        self._note(prompt_record(prompt, self.model or ""))

    def _add(self, usage: LlmUsage) -> None:
        self.usage = usage if self.usage is None else self.usage + usage

    def _note(self, record: dict[str, Any]) -> None:
        self._prompts.setdefault(tuple(sorted(record.items())), record)


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """Everything a job run gets: the store, namespace, the run's time, settings and LLM."""

    store: Store
    namespace: str
    now: datetime
    llm: LlmCalls
    # The job's state as saved by its last run (watermarks), and how its runs went.
    state: Mapping[str, Any]
    jobs: JobsSettings
    guardrails: GuardrailSettings
    health: Mapping[str, Any] = field(default_factory=dict)
    # Send the quarantined items again instead of what is new (`dream --retry-quarantined`).
    retry_quarantined: bool = False

    @property
    def db(self) -> Database:
        return self.store.db

    def watermark(self, key: str = "watermark") -> int:
        return int(self.state.get(key, 0))

    @property
    def quarantined(self) -> list[int]:
        """Items whose calls failed too often; the LLM part leaves them out until retried."""
        return [int(i) for i in self.health.get("quarantined", ())]
