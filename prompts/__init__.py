"""The daemon's prompts: one versioned ``<id>.md`` file each, its response schema in
``<id>_schema.py``, all rendered by ``prompts.render``.

Replies are checked item by item (``ReplyModel.salvage``): a reply is a list of items (memories,
relations, verdicts, traits) or one item (a summary). Each item is first *mended* where a rule
protects nothing (a number just out of range is clamped, a NUL character is removed from text,
a choice in other case is spelt as the schema does, a field that does not apply to the chosen
action is cleared; each mend is noted), then validated on its own; an item that still breaks
the schema or a rule that does protect something is dropped with its reason, and the valid
ones are kept.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from store.errors import SecretaryError

# A string field must hold at least one non-space character. Expressed as a pattern because
# OpenAI's strict structured outputs accept "pattern" but not "minLength".
NON_BLANK = r"\S"
_SHOWN_CHARS = 80  # of a dropped item, in the record
_QUOTED_ERRORS = 3  # per dropped item

R = TypeVar("R", bound="ReplyModel")


class PromptError(SecretaryError):
    """A prompt file is missing or malformed, or was rendered with the wrong variables."""


@dataclass(frozen=True, kw_only=True)
class Dropped:
    """An item of a reply that was left out, and why."""

    index: int | None  # its place in the reply's list; None for a reply that is one item
    item: str  # the item, shortened, for the record
    reason: str


@dataclass(frozen=True, kw_only=True)
class Salvage(Generic[R]):
    """A reply rebuilt from its valid items (None: nothing usable), with what was dropped."""

    reply: R | None
    dropped: tuple[Dropped, ...] = ()
    mended: tuple[str, ...] = ()

    def problems(self) -> str:
        """Why the reply was not usable, for the repair request."""
        return "\n".join(
            f"{'item ' + str(d.index) if d.index is not None else '(reply)'}: {d.reason}"
            for d in self.dropped[:10]
        )


class ReplyModel(BaseModel):
    """Base of every response schema: frozen, and its JSON schema fit for strict mode.

    Strict structured outputs need ``additionalProperties: false`` and every property required,
    so fields have no defaults (optional ones are ``X | None``). Extra keys from a server that
    does not constrain decoding are ignored rather than failing the reply.
    """

    model_config = ConfigDict(
        frozen=True, extra="ignore", json_schema_extra={"additionalProperties": False}
    )
    # The list field whose items are checked one by one; None: the reply is one item.
    items_field: ClassVar[str | None] = None

    @classmethod
    def mend(cls, raw: dict[str, Any]) -> list[str]:
        """Repair, in place, what a rule protecting nothing would refuse; return notes."""
        return []

    def referenced_ids(self) -> set[int]:
        """Every id (of a memory, a trait, a log line) the reply names, to compare with the
        ids its prompt showed; none by default."""
        return set()

    @classmethod
    def salvage(cls: type[R], text: str) -> Salvage[R]:
        """Parse a reply's JSON text item by item (see the module docstring)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if not text.strip():
                return _unusable("the reply holds no text")
            if exc.pos == len(text) - len(text.lstrip()):  # words, not JSON: say which
                return _unusable(f"not JSON: the reply says {_short(text.strip())}")
            return _unusable(f"not valid JSON: {exc.msg} at line {exc.lineno}")
        if cls.items_field is None:
            return _one_item(cls, data)
        if not isinstance(data, dict) or not isinstance(data.get(cls.items_field), list):
            return _unusable(f'expected an object with a list "{cls.items_field}"')
        item_model = _item_model(cls, cls.items_field)
        kept: list[dict[str, Any]] = []
        dropped: list[Dropped] = []
        mended: list[str] = []
        for index, raw in enumerate(data[cls.items_field]):
            problem, notes = _check(item_model, raw)
            if problem is None:
                kept.append(raw)
                mended.extend(f"item {index}: {note}" for note in notes)
            else:
                dropped.append(Dropped(index=index, item=_short(raw), reason=problem))
        if dropped and not kept:
            return Salvage(reply=None, dropped=tuple(dropped), mended=tuple(mended))
        reply = cls.model_validate({**data, cls.items_field: kept})
        return Salvage(reply=reply, dropped=tuple(dropped), mended=tuple(mended))


def clamp(raw: dict[str, Any], name: str, low: float, high: float, notes: list[str]) -> None:
    """Clamp a numeric field into [low, high] in place, noting it; leave other types alone.

    Bounds that are whole numbers make it a whole number: a fraction (importance 7.5) is
    rounded, noted too."""
    value = raw.get(name)
    whole = isinstance(low, int) and isinstance(high, int)
    if whole and isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        raw[name] = round(value)
        notes.append(f"{name} {value} rounded to {raw[name]}")
        value = raw[name]
    if isinstance(value, int | float) and not isinstance(value, bool):
        fixed = min(max(value, low), high)
        if fixed != value:
            raw[name] = type(value)(fixed) if isinstance(value, int) else fixed
            notes.append(f"{name} {value} clamped to {raw[name]}")


# What a model may write beside a memory's content (which the writer caps at the store's
# ingest.max_content_chars): a tag as long as ingest lets a person give one, a relation's
# description a sentence or two. Longer protects nothing: a tag is dropped, a description cut.
MAX_TAG_CHARS = 64
MAX_DESCRIPTION_CHARS = 300


def drop_long_tags(raw: dict[str, Any], notes: list[str]) -> None:
    """Drop the tags longer than MAX_TAG_CHARS from the item's ``tags`` in place, noting it."""
    tags = raw.get("tags")
    if not isinstance(tags, list):
        return
    long = [tag for tag in tags if isinstance(tag, str) and len(tag.strip()) > MAX_TAG_CHARS]
    if long:
        raw["tags"] = [tag for tag in tags if tag not in long]
        notes.append(f"{len(long)} tag(s) longer than {MAX_TAG_CHARS} characters dropped")


def cut(raw: dict[str, Any], name: str, most: int, notes: list[str]) -> None:
    """Cut a text field to ``most`` characters (at a space when there is one) in place, noting
    it; leave other types alone."""
    value = raw.get(name)
    if not isinstance(value, str) or len(value.strip()) <= most:
        return
    text = value.strip()[:most]
    raw[name] = (text.rsplit(" ", 1)[0] if " " in text[most // 2 :] else text).rstrip()
    notes.append(f"{name} of {len(value.strip())} characters cut to {len(raw[name])}")


def _one_item(cls: type[R], data: Any) -> Salvage[R]:
    problem, notes = _check(cls, data)
    if problem is not None:
        dropped = Dropped(index=None, item=_short(data), reason=problem)
        return Salvage(reply=None, dropped=(dropped,), mended=tuple(notes))
    return Salvage(reply=cls.model_validate(data), mended=tuple(notes))


def _check(model: type[ReplyModel], raw: Any) -> tuple[str | None, list[str]]:
    """Mend, then validate one item in place; return why it is invalid (or None) and notes."""
    if not isinstance(raw, dict):
        return "expected a JSON object", []
    notes = _without_nul(raw) + _choices_spelt(model, raw)
    notes += model.mend(raw)
    blank = [name for name in _non_blank_fields(model) if _blank(raw.get(name))]
    if blank:
        return "; ".join(f"{name}: must not be blank" for name in blank), notes
    try:
        model.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        reason = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'item'}: {error['msg']}"
            for error in errors[:_QUOTED_ERRORS]
        )
        return reason, notes
    return None, notes


def _non_blank_fields(model: type[ReplyModel]) -> list[str]:
    """The text fields that must hold a character that is not blank (``NON_BLANK``)."""
    return [
        name
        for name, info in model.model_fields.items()
        if any(getattr(meta, "pattern", None) == NON_BLANK for meta in info.metadata)
    ]


def _blank(value: Any) -> bool:
    # The jobs strip what they keep: text the pattern's \S lets through (control characters
    # such as \x1c, which str.strip() removes) would leave a memory with no content.
    return isinstance(value, str) and not value.strip()


def _without_nul(raw: dict[str, Any]) -> list[str]:
    """Remove NUL characters from the item's text, in place; return notes.

    A NUL means nothing in text, and no store may keep one (PostgreSQL text cannot hold it,
    and an export holding one is refused), so it is dropped rather than the item.
    """
    notes: list[str] = []

    def clean(value: Any, where: str) -> Any:
        if isinstance(value, str) and "\x00" in value:
            notes.append(f"{where}: NUL characters removed")
            return value.replace("\x00", "")
        if isinstance(value, list):
            return [clean(v, f"{where}.{n}") for n, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: clean(v, f"{where}.{k}") for k, v in value.items()}
        return value

    for name, value in raw.items():
        raw[name] = clean(value, name)
    return notes


def _choices_spelt(model: type[ReplyModel], raw: dict[str, Any]) -> list[str]:
    """Spell a choice as the schema does, in place, when the reply wrote it in other case or
    with spaces ("Event" for "event"); return notes. A server that does not constrain decoding
    lets a model do so, and the choice it meant is plain."""
    notes: list[str] = []
    for name, info in model.model_fields.items():
        value = raw.get(name)
        choices = _choices(info.annotation)
        if not isinstance(value, str) or not choices or value in choices:
            continue
        spelt = [c for c in choices if c.lower() == value.strip().lower()]
        if len(spelt) == 1:
            raw[name] = spelt[0]
            notes.append(f"{name} {value!r} read as {spelt[0]!r}")
    return notes


def _choices(annotation: Any) -> tuple[str, ...]:
    """The strings a ``Literal[...]`` field (or an optional one) allows; () for other fields."""
    if get_origin(annotation) is Literal:
        return tuple(a for a in get_args(annotation) if isinstance(a, str))
    return tuple(c for arg in get_args(annotation) for c in _choices(arg))


def _item_model(cls: type[ReplyModel], field: str) -> type[ReplyModel]:
    (item,) = get_args(cls.model_fields[field].annotation)
    if not (isinstance(item, type) and issubclass(item, ReplyModel)):
        raise TypeError(f"{cls.__name__}.{field} must be a list of ReplyModel items")
    return item


def _unusable(reason: str) -> Salvage[Any]:
    return Salvage(reply=None, dropped=(Dropped(index=None, item="", reason=reason),))


def _short(raw: Any) -> str:
    text = json.dumps(raw, ensure_ascii=False, default=str)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
