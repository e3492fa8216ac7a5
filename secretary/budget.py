"""Token budgets for LLM calls: per job run, and per namespace per UTC day.

A ``Budget`` is made for one run with the run's ``now``; the client asks it before every call
whether the call's worst case (estimated prompt plus the reply cap) still fits, and records the
tokens actually used afterwards. Per-day usage lives in a ``UsageLedger`` so it outlasts the run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import date, datetime
from typing import TYPE_CHECKING, Protocol

from secretary.clock import ensure_utc, utc_now
from secretary.config import LlmSettings
from secretary.errors import BudgetExhausted

if TYPE_CHECKING:
    from store.repository import Repository


class UsageLedger(Protocol):
    """Tokens used per namespace and UTC day, kept across runs (the store backs it with SQL)."""

    def used_today(self, namespace: str, day: date) -> int: ...

    def add(self, namespace: str, day: date, tokens: int) -> None: ...


class InMemoryUsageLedger:
    """A ``UsageLedger`` in a dict, for tests and one-off runs."""

    def __init__(self) -> None:
        self._used: defaultdict[tuple[str, date], int] = defaultdict(int)

    def used_today(self, namespace: str, day: date) -> int:
        return self._used[(namespace, day)]

    def add(self, namespace: str, day: date, tokens: int) -> None:
        self._used[(namespace, day)] += tokens


class StoreUsageLedger:
    """A ``UsageLedger`` kept in the store's database, so it outlasts runs and restarts."""

    def __init__(self, repository: Repository, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._repository = repository
        self._clock = clock

    def used_today(self, namespace: str, day: date) -> int:
        return self._repository.llm_tokens_used(namespace, day)

    def add(self, namespace: str, day: date, tokens: int) -> None:
        self._repository.add_llm_tokens(namespace, day, tokens, now=self._clock())


class Budget:
    """The token allowance of one run in one namespace; a limit of 0 means unlimited."""

    def __init__(
        self,
        *,
        namespace: str,
        now: datetime,
        max_tokens_per_run: int = 0,
        max_tokens_per_day: int = 0,
        ledger: UsageLedger | None = None,
    ) -> None:
        if max_tokens_per_day and ledger is None:
            raise ValueError("a per-day token budget needs a UsageLedger")
        self.namespace = namespace
        # The run belongs to the UTC day it started on, even if it runs past midnight.
        self.day = ensure_utc(now).date()
        self.max_tokens_per_run = max_tokens_per_run
        self.max_tokens_per_day = max_tokens_per_day
        self._ledger = ledger
        self._run_used = 0

    @classmethod
    def for_run(
        cls, settings: LlmSettings, *, namespace: str, now: datetime, ledger: UsageLedger
    ) -> Budget:
        """The budget the configuration gives a run started at ``now``."""
        return cls(
            namespace=namespace,
            now=now,
            max_tokens_per_run=settings.max_tokens_per_run,
            max_tokens_per_day=settings.max_tokens_per_day,
            ledger=ledger,
        )

    @property
    def run_used(self) -> int:
        return self._run_used

    def day_used(self) -> int:
        return self._ledger.used_today(self.namespace, self.day) if self._ledger else 0

    def ensure_affordable(self, tokens: int) -> None:
        """Raise BudgetExhausted if a call needing up to ``tokens`` would pass a limit."""
        self._check("run", self.max_tokens_per_run, self._run_used, tokens)
        if self.max_tokens_per_day:
            self._check("day", self.max_tokens_per_day, self.day_used(), tokens)

    def record(self, tokens: int) -> None:
        """Count tokens a call actually used, whether or not its reply was usable."""
        self._run_used += tokens
        if self._ledger is not None:
            self._ledger.add(self.namespace, self.day, tokens)

    def _check(self, scope: str, limit: int, used: int, needed: int) -> None:
        if limit and used + needed > limit:
            raise BudgetExhausted(
                scope=scope, namespace=self.namespace, limit=limit, used=used, needed=needed
            )
