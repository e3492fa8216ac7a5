"""Validated input: what the API and `secretary ingest` accept, one schema for both."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from secretary.clock import ensure_utc

TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Size limits on input, from the `[ingest]` settings."""

    max_content_chars: int = 8000
    max_batch: int = 1000
    max_tags: int = 32
    max_tag_chars: int = 64


class MemoryIn(BaseModel):
    """One memory as a client sends it; only ``content`` is required."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    content: str = Field(min_length=1)
    type: str = Field(default="event", pattern=TYPE_PATTERN)
    timestamp: datetime | None = None
    tags: tuple[str, ...] = ()
    importance: int | None = Field(default=None, ge=1, le=10)
    metadata: dict[str, Any] = Field(default_factory=dict)
    external_id: str | None = Field(default=None, min_length=1, max_length=256)
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    pinned: bool = False

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else ensure_utc(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(dict.fromkeys(tag.strip() for tag in value))
        if any(not tag for tag in cleaned):
            raise ValueError("tags must be non-empty strings")
        return cleaned


class LogIn(BaseModel):
    """One conversation log line."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    session_id: str = Field(min_length=1, max_length=256)
    role: str = Field(min_length=1, max_length=32)
    content: str = Field(min_length=1)
    timestamp: datetime
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    pair_id: str | None = Field(default=None, max_length=256)

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return ensure_utc(value)

    def key(self) -> str:
        """Return the idempotency key, derived from the line itself when the client gave none."""
        if self.idempotency_key:
            return self.idempotency_key
        digest = hashlib.sha256(
            "\x1f".join(
                (self.session_id, self.role, self.timestamp.isoformat(), self.content)
            ).encode()
        )
        return "sha256:" + digest.hexdigest()


def _limit_problems(item: MemoryIn | LogIn, limits: Limits) -> list[str]:
    problems = []
    # PostgreSQL text cannot hold NUL; refuse it everywhere so both backends agree.
    texts = [value for value in item.model_dump().values() if isinstance(value, str)]
    texts += list(getattr(item, "tags", ()))
    if any("\x00" in text for text in texts):
        problems.append("a text field contains a NUL character")
    if len(item.content) > limits.max_content_chars:
        problems.append(
            f"content has {len(item.content)} characters, more than the limit of "
            f"{limits.max_content_chars} (ingest.max_content_chars)"
        )
    if isinstance(item, MemoryIn):
        if len(item.tags) > limits.max_tags:
            problems.append(f"{len(item.tags)} tags, more than the limit of {limits.max_tags}")
        long_tags = [tag for tag in item.tags if len(tag) > limits.max_tag_chars]
        if long_tags:
            problems.append(f"tag longer than {limits.max_tag_chars} characters: {long_tags[0]!r}")
    return problems


def _pydantic_problems(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        out.append(f"{field}: {message}" if field else message)
    return out


Item = TypeVar("Item", MemoryIn, LogIn)


def parse_items(
    schema: type[Item],
    raw_items: Sequence[Mapping[str, Any] | Any],
    limits: Limits,
    *,
    labels: Sequence[str] | None = None,
) -> tuple[list[Item], list[tuple[str, str]]]:
    """Validate raw items; return the parsed ones and (label, problem) pairs for the rest.

    ``labels`` names each item in problems (e.g. "line 12"); by default "item N" from 0.
    """
    parsed: list[Item] = []
    problems: list[tuple[str, str]] = []
    if len(raw_items) > limits.max_batch:
        problems.append(
            ("batch", f"{len(raw_items)} items, more than the limit of {limits.max_batch}")
        )
    for index, raw in enumerate(raw_items):
        label = labels[index] if labels is not None else f"item {index}"
        if not isinstance(raw, Mapping):
            problems.append((label, "expected a JSON object"))
            continue
        try:
            item = schema.model_validate(raw)
        except ValidationError as exc:
            problems.extend((label, problem) for problem in _pydantic_problems(exc))
            continue
        item_problems = _limit_problems(item, limits)
        problems.extend((label, problem) for problem in item_problems)
        if not item_problems:
            parsed.append(item)
    return parsed, problems
