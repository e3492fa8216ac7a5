"""The one place that reads the wall clock; everything else receives `now`."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


def ensure_utc(value: datetime) -> datetime:
    """Given a datetime, return it in UTC; a naive value is taken to be UTC already.

    Raise ValueError if the instant is outside the range datetime can hold in UTC.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value.isoformat()} is out of range in UTC") from None


def parse_timestamp(text: str) -> datetime:
    """Parse an ISO-8601 timestamp (a trailing Z is accepted) into aware UTC.

    Raise ValueError if the text is not ISO-8601.
    """
    cleaned = text.strip()
    if cleaned.endswith(("Z", "z")):
        cleaned = cleaned[:-1] + "+00:00"
    return ensure_utc(datetime.fromisoformat(cleaned))
