"""Validated input: what the API and `secretary ingest` accept, one schema for both."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from store.clock import ensure_utc
from store.errors import ValidationFailed
from store.requests import lone_surrogate

TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"


# Text as the schema promises it: no NUL (PostgreSQL text cannot hold one) and, where text is
# required, a character that is not blank (values are stripped before their length is checked).
# The blanks are spelt out: each regex engine (pydantic's, the client's) has its own \s, and
# these are exactly what str.strip() removes.
_BLANK = r"\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
TEXT = r"^[^\x00]*$"
NOT_BLANK = rf"^[^\x00]*[^\x00{_BLANK}][^\x00]*$"
_PATTERN_WORDS = {
    TEXT: "must not contain a NUL character",
    NOT_BLANK: "must not be blank or contain a NUL character",
    TYPE_PATTERN: "must be a lowercase name: a letter, then letters, digits or _, 32 at most",
}


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Size limits on input, from the `[ingest]` settings."""

    max_content_chars: int = 8000
    max_batch: int = 1000
    max_tags: int = 32
    max_tag_chars: int = 64
    max_metadata_bytes: int = 16384


def _timestamp_text(value: Any) -> Any:
    # An ISO-8601 string only: pydantic would also read 0, 1.7e9 or "1700000000" as seconds
    # since 1970, which the schema does not allow and a client rarely means.
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or _NUMBER.fullmatch(value):
        raise ValueError(_ISO_TIME)
    return value


_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _finite(value: Any, where: str = "metadata") -> Any:
    """Return ``value``; raise ValueError naming the place of a NaN or an infinity in it."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} holds {value}: numbers must be finite")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _finite(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _finite(item, f"{where}.{index}")
    return value


def _clean_tags(value: tuple[str, ...]) -> tuple[str, ...]:
    cleaned = tuple(dict.fromkeys(tag.strip() for tag in value))
    if any(not tag for tag in cleaned):
        raise ValueError("tags must be non-empty strings")
    return cleaned


def _json_integer(value: Any) -> Any:
    # JSON's integers, 7.0 included; not "7" or true, which pydantic would also take.
    if isinstance(value, bool | str):
        raise ValueError("should be a whole number")
    return value


def surrogate_problem(value: Any) -> str | None:
    """Given a raw value (a string, or an object or array with strings at any depth, keys
    included), return where and what its first lone surrogate is, or None.

    The place is relative to the value: "value at a.0", "key 'x\\ud800' at a", or nothing for
    the string itself.
    """
    for path, text, is_key in _strings(value, ()):
        problem = lone_surrogate(text)
        if problem is None:
            continue
        at = ".".join(path)
        if is_key:
            return f"key {_shown(text)}{f' at {at}' if at else ''} {problem}"
        return f"value at {at} {problem}" if at else problem
    return None


def _strings(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str, bool]]:
    """Yield (path, string, is a key) for every string in a JSON-like value, each key before
    its value (so that a path never holds a key that is not text)."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield path, key, True
            yield from _strings(item, (*path, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, str(index)))


def _shown(name: str) -> str:
    """A name as a problem can show it: quoted, shortened, its surrogates escaped."""
    return "'" + name.encode("utf-8", "backslashreplace").decode()[:64] + "'"


def surrogate_problems(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Given a raw object, return (field, problem) for each field whose value holds a lone
    surrogate, and ("", problem) for a field name that holds one."""
    problems: list[tuple[str, str]] = []
    if not _holds_surrogate(raw):
        return problems
    for name, value in raw.items():
        problem = lone_surrogate(name) if isinstance(name, str) else None
        if problem is not None:
            problems.append(("", f"field name {_shown(name)} {problem}"))
        elif (problem := surrogate_problem(value)) is not None:
            problems.append((str(name), problem))
    return problems


class _Text(BaseModel):
    """Refuses lone surrogates (JSON's "\\ud800") in every field, with a problem naming it:
    pydantic would take them in metadata and a failure to encode them would come later (a 500,
    a bug), and elsewhere say only "unable to parse raw data as a unicode string"."""

    @model_validator(mode="before")
    @classmethod
    def _field_names(cls, raw: Any) -> Any:
        if isinstance(raw, Mapping):
            for name in raw:  # the names here; each field's value in _values
                if _holds_surrogate(name):
                    raise _not_text(f"field name {_shown(name)} {lone_surrogate(name)}")
        return raw

    @field_validator("*", mode="before")
    @classmethod
    def _values(cls, value: Any) -> Any:
        if _holds_surrogate(value):
            raise _not_text(surrogate_problem(value) or "")
        return value


def _holds_surrogate(value: Any) -> bool:
    """Tell whether a raw value holds a lone surrogate anywhere: the quick test every field of
    every item takes (``surrogate_problem`` then says where)."""
    if isinstance(value, str):
        return not value.isascii() and lone_surrogate(value) is not None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if _holds_surrogate(key) or _holds_surrogate(item):
                return True
    elif isinstance(value, list | tuple):
        for item in value:
            if _holds_surrogate(item):
                return True
    return False


def _not_text(problem: str) -> PydanticCustomError:
    # The text goes in as context: a template would read braces in a key as placeholders.
    return PydanticCustomError("lone_surrogate", "{problem}", {"problem": problem})


Timestamp = Annotated[datetime, BeforeValidator(_timestamp_text)]
# The bounds before the validator, so that the OpenAPI document says minimum and maximum.
Importance = Annotated[int, Field(ge=1, le=10), BeforeValidator(_json_integer)]
Key = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=NOT_BLANK)]
Tag = Annotated[str, StringConstraints(min_length=1, pattern=NOT_BLANK)]
# A type a filter names: one a memory could have (a filter for "Events" would match nothing).
TypeName = Annotated[str, StringConstraints(pattern=TYPE_PATTERN)]


class MemoryIn(_Text):
    """One memory as a client sends it; only ``content`` is required."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    content: str = Field(min_length=1, pattern=NOT_BLANK)
    type: str = Field(default="event", pattern=TYPE_PATTERN)
    timestamp: Timestamp | None = None
    tags: tuple[Tag, ...] = ()
    importance: Importance | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    external_id: Key | None = None
    session_id: Key | None = None
    pinned: StrictBool = False

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else ensure_utc(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _clean_tags(value)

    @field_validator("metadata")
    @classmethod
    def _finite_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], _finite(value))


class LogIn(_Text):
    """One conversation log line."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    session_id: Key
    role: str = Field(min_length=1, max_length=32, pattern=NOT_BLANK)
    content: str = Field(min_length=1, pattern=NOT_BLANK)
    timestamp: Timestamp
    idempotency_key: Key | None = None
    pair_id: str | None = Field(default=None, max_length=256, pattern=TEXT)

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
    texts = [value for value in item.model_dump().values() if isinstance(value, str)]
    if isinstance(item, MemoryIn):
        return _size_problems(
            limits, texts=texts, content=item.content, tags=item.tags, metadata=item.metadata
        )
    return _size_problems(limits, texts=texts, content=item.content)


def _size_problems(
    limits: Limits,
    *,
    texts: Sequence[str],
    content: str | None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> list[str]:
    problems = []
    # PostgreSQL text cannot hold NUL; refuse it everywhere so both backends agree.
    if any("\x00" in text for text in (*texts, *(tags or ()))):
        problems.append("a text field contains a NUL character")
    if content is not None and len(content) > limits.max_content_chars:
        problems.append(
            f"content has {len(content)} characters, more than the limit of "
            f"{limits.max_content_chars} (ingest.max_content_chars)"
        )
    if metadata is not None:
        size = len(json.dumps(metadata, ensure_ascii=False).encode())
        if size > limits.max_metadata_bytes:
            problems.append(
                f"metadata takes {size} bytes as JSON, more than the limit of "
                f"{limits.max_metadata_bytes} (ingest.max_metadata_bytes)"
            )
    if tags is not None:
        if len(tags) > limits.max_tags:
            problems.append(f"{len(tags)} tags, more than the limit of {limits.max_tags}")
        long_tags = [tag for tag in tags if len(tag) > limits.max_tag_chars]
        if long_tags:
            problems.append(f"tag longer than {limits.max_tag_chars} characters: {long_tags[0]!r}")
    return problems


def _pydantic_problems(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        out.append(f"{field}: {problem_message(error)}" if field else problem_message(error))
    return out


_ISO_TIME = "should be an ISO 8601 time such as 2026-03-02T09:15:00Z"
# pydantic's common error types in plain words (its own say "Input should be a valid tuple").
_PLAIN_WORDS = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "string_type": "should be a string",
    "int_type": "should be a whole number",
    "int_parsing": "should be a whole number",
    "int_from_float": "should be a whole number",
    "bool_type": "should be true or false",
    "bool_parsing": "should be true or false",
    "dict_type": "should be a JSON object",
    "list_type": "should be a list",
    "tuple_type": "should be a list",
    "datetime_type": _ISO_TIME,
    "datetime_parsing": _ISO_TIME,
    "datetime_from_date_parsing": _ISO_TIME,
}


def problem_message(error: Any) -> str:
    """One pydantic error in words: its common types said plainly, the schema's own patterns
    said as what they ask, not as the regular expression."""
    kind, ctx, loc = error["type"], error.get("ctx") or {}, tuple(error.get("loc", ()))
    if kind in {"list_type", "tuple_type"} and loc[-1:] == ("tags",):
        return "should be a list of strings"
    if kind in _PLAIN_WORDS:
        why = ctx.get("error") if kind.startswith("datetime") else None
        return f"{_PLAIN_WORDS[kind]} ({why})" if why else _PLAIN_WORDS[kind]
    if kind == "string_pattern_mismatch":
        said = _PATTERN_WORDS.get(str(ctx.get("pattern")))
        if said is not None:
            return said
    return str(error["msg"]).removeprefix("Value error, ")


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


class MemoryPatch(_Text):
    """What an edit may change (PATCH /v1/memories/{id}, `secretary memory edit`); a field left
    out stays as it is. ``event_time`` moves the memory in the timeline."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        str_strip_whitespace=True,
        json_schema_extra={"minProperties": 1},
    )

    content: str | None = Field(default=None, min_length=1, pattern=NOT_BLANK)
    type: str | None = Field(default=None, pattern=TYPE_PATTERN)
    tags: tuple[Tag, ...] | None = None
    importance: Importance | None = None
    metadata: dict[str, Any] | None = None
    event_time: Timestamp | None = None
    pinned: StrictBool | None = None

    @field_validator("event_time")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else ensure_utc(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else _clean_tags(value)

    @field_validator("metadata")
    @classmethod
    def _finite_metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else cast(dict[str, Any], _finite(value))

    def changes(self) -> dict[str, Any]:
        """The fields the caller gave (null counts as not given: no field may be emptied)."""
        return self.model_dump(exclude_none=True)


def parse_patch(raw: Any, limits: Limits) -> dict[str, Any]:
    """Validate an edit; return the changes. Raise ValidationFailed naming each bad field."""
    if not isinstance(raw, Mapping):
        raise ValidationFailed([("body", "expected a JSON object")])
    try:
        patch = MemoryPatch.model_validate(raw)
    except ValidationError as exc:
        raise ValidationFailed(
            [
                (".".join(("body", *map(str, error["loc"]))), problem_message(error))
                for error in exc.errors()
            ]
        ) from None
    changes = patch.changes()
    if not changes:
        raise ValidationFailed([("body", "names no field to change")])
    texts = [value for value in changes.values() if isinstance(value, str)]
    problems = _size_problems(
        limits,
        texts=texts,
        content=patch.content,
        tags=patch.tags,
        metadata=patch.metadata,
    )
    if problems:
        raise ValidationFailed([("body", problem) for problem in problems])
    if "tags" in changes:
        changes["tags"] = list(changes["tags"])
    return changes
