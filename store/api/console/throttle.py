"""Failed logins per client address: after LIMIT in WINDOW, the login form answers 429.

Pure over the times it is given; one per console app, in memory (a restart forgets it, which
costs an attacker a restart per LIMIT guesses). Keys are long random strings, so this only keeps
a guesser from trying fast and a log from filling with failures.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from datetime import datetime, timedelta

LIMIT = 5
WINDOW = timedelta(minutes=1)
MAX_CLIENTS = 10_000  # addresses remembered at most; the oldest are forgotten first


class LoginThrottle:
    """Count failed logins per client; say how long a client must wait."""

    def __init__(self, *, limit: int = LIMIT, window: timedelta = WINDOW) -> None:
        self.limit = limit
        self.window = window
        self._failures: dict[str, deque[datetime]] = {}
        self._lock = threading.Lock()

    def retry_after(self, client: str, now: datetime) -> int | None:
        """Return the seconds ``client`` must wait before trying again, or None if it may."""
        with self._lock:
            if client not in self._failures:
                return None
            failures = self._recent(client, now)
            if len(failures) < self.limit:
                return None
            return max(1, math.ceil((failures[0] + self.window - now).total_seconds()))

    def failed(self, client: str, now: datetime) -> None:
        with self._lock:
            self._recent(client, now).append(now)
            while len(self._failures) > MAX_CLIENTS:
                del self._failures[next(iter(self._failures))]

    def _recent(self, client: str, now: datetime) -> deque[datetime]:
        failures = self._failures.setdefault(client, deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures
