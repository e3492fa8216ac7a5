"""Render the versioned prompt files into chat messages: the one place prompt text is assembled.

A prompt file ``prompts/<id>.md`` holds front matter, then a ``## system`` and a ``## user``
section (``## system`` is optional)::

    ---
    id: extractor
    version: 1
    schema: ExtractorReply
    ---
    ## system
    ...
    ## user
    Today is ${today}.
    <log>
    ${lines}
    </log>

Placeholders are ``string.Template`` ones (``$$`` is a literal dollar). Structured values (lists,
dicts, pydantic models) are inserted as JSON; memory content must only ever enter a prompt that
way, inside a delimited block that the system message declares to be data. ``schema`` names the
response model in ``prompts/<id>_schema.py``. Bump ``version`` whenever the text changes.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from importlib import resources
from string import Template
from typing import Any, Literal

from pydantic import BaseModel

from prompts import PromptError, ReplyModel

Role = Literal["system", "user"]

_ID = re.compile(r"[a-z][a-z0-9_]*")
_SECTION = re.compile(r"^## (system|user)[ \t]*$", re.MULTILINE)
_FRONT_MATTER = "---\n"


@dataclass(frozen=True, kw_only=True)
class Message:
    role: Role
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, kw_only=True)
class RenderedPrompt:
    """A prompt ready to send, with what a run records about it."""

    id: str
    version: int
    sha256: str  # of the prompt file, so a record pins the exact text that was used
    messages: tuple[Message, ...]


@dataclass(frozen=True, kw_only=True)
class PromptTemplate:
    id: str
    version: int
    sha256: str
    schema: str | None
    sections: tuple[tuple[Role, Template], ...]
    variables: frozenset[str]


def render(prompt_id: str, **variables: object) -> RenderedPrompt:
    """Fill the prompt's placeholders. Raise PromptError if a variable is missing or unexpected."""
    template = load(prompt_id)
    _check_variables(template, set(variables))
    values = {name: _encode(name, value) for name, value in variables.items()}
    messages = tuple(
        Message(role=role, content=section.substitute(values))
        for role, section in template.sections
    )
    return RenderedPrompt(
        id=template.id, version=template.version, sha256=template.sha256, messages=messages
    )


def prompt_record(rendered: RenderedPrompt, model: str) -> dict[str, Any]:
    """What a run's record stores about one prompt it sent."""
    return {
        "id": rendered.id,
        "version": rendered.version,
        "sha256": rendered.sha256,
        "model": model,
    }


def as_data(value: object) -> str:
    """Given JSON-able data, return it as JSON that cannot close the block it is placed in.

    ``</`` becomes ``<\\/``, a JSON escape of the same text, so no closing tag such as
    ``</memories>`` can appear inside the data, whatever the memories say.
    """
    try:
        if isinstance(value, list | tuple) and value:
            # One item a line: readable for the model without indentation's token cost.
            text = "[\n" + ",\n".join(_json(item) for item in value) + "\n]"
        else:
            text = _json(value)
    except TypeError as exc:
        raise PromptError(f"prompt data is not JSON-able: {exc}") from None
    return _neutralise(text)


def _json(value: object) -> str:
    # No spaces after separators: the model reads it as well, and it costs fewer tokens.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def prompt_ids() -> tuple[str, ...]:
    """Every prompt file's id, sorted."""
    names = (entry.name for entry in resources.files("prompts").iterdir())
    return tuple(sorted(name[:-3] for name in names if name.endswith(".md")))


def schema_for(prompt_id: str) -> type[ReplyModel]:
    """The response model named by the prompt's front matter. Raise PromptError if it has none."""
    template = load(prompt_id)
    if template.schema is None:
        raise PromptError(f"prompt {prompt_id!r} declares no response schema")
    module = importlib.import_module(f"prompts.{prompt_id}_schema")
    model = getattr(module, template.schema, None)
    if not (isinstance(model, type) and issubclass(model, ReplyModel)):
        raise PromptError(
            f"prompt {prompt_id!r}: prompts/{prompt_id}_schema.py has no ReplyModel"
            f" named {template.schema!r}"
        )
    return model


@cache
def load(prompt_id: str) -> PromptTemplate:
    """Read and parse ``prompts/<id>.md``. Raise PromptError if it is missing or malformed."""
    if not _ID.fullmatch(prompt_id):
        raise PromptError(f"invalid prompt id {prompt_id!r}")
    path = resources.files("prompts") / f"{prompt_id}.md"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PromptError(f"no prompt {prompt_id!r} (prompts/{prompt_id}.md)") from None
    return _parse(prompt_id, raw)


# -- parsing ----------------------------------------------------------------


def _parse(prompt_id: str, raw: bytes) -> PromptTemplate:
    where = f"prompts/{prompt_id}.md"
    fields, body = _split_front_matter(raw.decode("utf-8"), where)
    if fields.get("id") != prompt_id:
        raise PromptError(f"{where}: front matter 'id' must be {prompt_id!r}")
    sections = _sections(body, where)
    variables: set[str] = set()
    for _role, section in sections:
        if not section.is_valid():
            raise PromptError(f"{where}: a '$' is not a placeholder; write '$$' for a dollar")
        variables.update(section.get_identifiers())
    return PromptTemplate(
        id=prompt_id,
        version=_version(fields, where),
        sha256=hashlib.sha256(raw).hexdigest(),
        schema=fields.get("schema") or None,
        sections=sections,
        variables=frozenset(variables),
    )


def _split_front_matter(text: str, where: str) -> tuple[dict[str, str], str]:
    if not text.startswith(_FRONT_MATTER):
        raise PromptError(f"{where}: must start with '---' front matter")
    head, separator, body = text[len(_FRONT_MATTER) :].partition("\n---\n")
    if not separator:
        raise PromptError(f"{where}: front matter is not closed by '---'")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, colon, value = line.partition(":")
        if not colon:
            raise PromptError(f"{where}: front matter line {line!r} is not 'key: value'")
        fields[key.strip()] = value.strip()
    return fields, body


def _version(fields: dict[str, str], where: str) -> int:
    text = fields.get("version", "")
    if not text.isdigit() or int(text) < 1:
        raise PromptError(f"{where}: front matter 'version' must be a positive integer")
    return int(text)


def _sections(body: str, where: str) -> tuple[tuple[Role, Template], ...]:
    # re.split with one group gives [before, role, text, role, text, ...].
    parts = _SECTION.split(body)
    if parts[0].strip():
        raise PromptError(f"{where}: text before the first '## system' or '## user' line")
    roles = parts[1::2]
    if roles not in (["system", "user"], ["user"]):
        raise PromptError(f"{where}: needs '## system' (optional) then '## user', got {roles}")
    texts = [text.strip() for text in parts[2::2]]
    return tuple((_role(role), Template(text)) for role, text in zip(roles, texts, strict=True))


def _role(name: str) -> Role:
    return "system" if name == "system" else "user"


# -- variables --------------------------------------------------------------


def _check_variables(template: PromptTemplate, given: set[str]) -> None:
    missing = sorted(template.variables - given)
    unexpected = sorted(given - template.variables)
    if missing or unexpected:
        raise PromptError(
            f"prompt {template.id!r} v{template.version}: missing variables {missing},"
            f" unexpected variables {unexpected}"
        )


def _encode(name: str, value: object) -> str:
    # bool before int: bool is an int subclass and would render as "True".
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, datetime | date):
        return _iso(value, name)
    if isinstance(value, str):
        return _neutralise(value)
    if isinstance(value, list | tuple | dict | BaseModel):
        return as_data(value)
    raise PromptError(f"prompt variable {name!r} has unsupported type {type(value).__name__}")


def _iso(value: date, name: str) -> str:
    if isinstance(value, datetime) and value.tzinfo is None:
        raise PromptError(f"prompt variable {name!r} is a naive datetime; pass an aware one")
    return value.isoformat()


def _json_default(value: object) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime | date):
        return _iso(value, "(inside data)")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _neutralise(text: str) -> str:
    return text.replace("</", "<\\/")
