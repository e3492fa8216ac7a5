"""A job's health in a namespace, as pure functions over its value (``JobState.health``).

After every run the runner saves the new health with the run's record. It holds:

- ``last``: the last outcome (status, when, record, message);
- ``failures``: failed runs in a row, and ``backoff_until``: no run starts before then (the back-off
  doubles with each failure, from ``failure_backoff_minutes`` up to ``failure_backoff_max_minutes``,
  and is at least what a provider's ``Retry-After`` asked for);
- ``failing``: the items of the call that failed last for something of theirs (an invalid reply,
  a request refused for its length or content; not a server down or a timeout) and how many
  runs in a row it failed; after ``quarantine_after`` failures they move to
- ``quarantined``: items the LLM part leaves out until `secretary dream --retry-quarantined`
  sends them again (the watermark moves past them meanwhile).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from secretary.jobs.settings import JobsSettings
from store.clock import parse_timestamp

Health = dict[str, Any]


def backoff_until(health: Mapping[str, Any]) -> datetime | None:
    """Return when the back-off after failed runs ends, if there is one."""
    value = health.get("backoff_until")
    return parse_timestamp(value) if isinstance(value, str) else None


def quarantined(health: Mapping[str, Any]) -> list[int]:
    return [int(i) for i in health.get("quarantined", ())]


def after_run(
    health: Mapping[str, Any],
    *,
    status: str,
    at: datetime,
    record: int | None,
    message: str,
    retried: Iterable[int] = (),
) -> Health:
    """A run that did not fail: the failure count, back-off and failing batch are cleared;
    quarantined items that were sent again and answered leave the quarantine."""
    done = set(retried)
    out: Health = {
        key: value
        for key, value in health.items()
        if key not in ("failures", "backoff_until", "failing")
    }
    out["last"] = _last(status, at, record, message)
    if done:
        left = [i for i in quarantined(health) if i not in done]
        if left:
            out["quarantined"] = left
        else:
            out.pop("quarantined", None)
    return out


def after_failure(
    health: Mapping[str, Any],
    *,
    at: datetime,
    message: str,
    batch: Sequence[int] | None,
    retry_after: float | None,
    settings: JobsSettings,
    interrupted: bool = False,
) -> tuple[Health, list[int]]:
    """A failed run: count it, back off, and quarantine a batch that failed too often.
    ``batch``: the items of the call that failed, if its failure says something of them
    (``LlmError.items_at_fault``); a model server down quarantines nothing.

    Return the new health and the items quarantined now (empty if none). A run someone
    interrupted (Ctrl-C) is no failure of the job: only its last outcome is noted.
    """
    if interrupted:
        return {**health, "last": _last("failed", at, None, message)}, []
    failures = int(health.get("failures", 0)) + 1
    delay = min(
        settings.failure_backoff_minutes * 2 ** min(failures - 1, 30),
        settings.failure_backoff_max_minutes,
    )
    wait = timedelta(minutes=delay)
    if retry_after is not None:
        wait = max(wait, timedelta(seconds=retry_after))
    out: Health = {**health, "failures": failures, "backoff_until": (at + wait).isoformat()}
    out["last"] = _last("failed", at, None, message)
    now_quarantined: list[int] = []
    if batch:
        ids = sorted(set(batch))
        previous = health.get("failing") or {}
        count = int(previous.get("count", 0)) + 1 if previous.get("ids") == ids else 1
        if count >= settings.quarantine_after:
            now_quarantined = ids
            out["quarantined"] = sorted(set(quarantined(health)) | set(ids))
            out.pop("failing", None)
        else:
            out["failing"] = {"ids": ids, "count": count}
    return out, now_quarantined


def _last(status: str, at: datetime, record: int | None, message: str) -> dict[str, Any]:
    return {"status": status, "at": at.isoformat(), "record": record, "message": message}
