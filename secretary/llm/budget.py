"""Token budgets for LLM calls: per job run, and per namespace per UTC day.

A ``Budget`` is made for one run with the run's ``now``; the client asks it before every call
whether the call's worst case (estimated prompt plus the reply cap) still fits, and records the
tokens actually used afterwards. A day's usage is counted by the ``TokenLedger``: what the day's
maintenance records say was spent, plus what the running run spent so far (its record is written
only when it ends).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import date, datetime

from secretary.llm.errors import BudgetExhausted
from secretary.llm.settings import LlmSettings
from store.clock import ensure_utc

# Given a namespace and a UTC day, the tokens the records of that day hold.
Recorded = Callable[[str, date], int]


class TokenLedger:
    """Tokens used per namespace and UTC day: the recorded ones plus this run's calls so far.

    Make one per run (its unrecorded count belongs to that run).
    """

    def __init__(self, recorded: Recorded) -> None:
        self._recorded = recorded
        self._unrecorded: defaultdict[tuple[str, date], int] = defaultdict(int)

    def used_today(self, namespace: str, day: date) -> int:
        return self._recorded(namespace, day) + self._unrecorded[(namespace, day)]

    def add(self, namespace: str, day: date, tokens: int) -> None:
        self._unrecorded[(namespace, day)] += tokens


class Budget:
    """The token allowance of one run in one namespace; a limit of 0 means unlimited."""

    def __init__(
        self,
        *,
        namespace: str,
        now: datetime,
        max_tokens_per_run: int = 0,
        max_tokens_per_day: int = 0,
        ledger: TokenLedger | None = None,
    ) -> None:
        if max_tokens_per_day and ledger is None:
            raise ValueError("a per-day token budget needs a TokenLedger")
        self.namespace = namespace
        # The run belongs to the UTC day it started on, even if it runs past midnight.
        self.day = ensure_utc(now).date()
        self.max_tokens_per_run = max_tokens_per_run
        self.max_tokens_per_day = max_tokens_per_day
        self._ledger = ledger
        self._run_used = 0

    @classmethod
    def for_run(
        cls, settings: LlmSettings, *, namespace: str, now: datetime, ledger: TokenLedger
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
