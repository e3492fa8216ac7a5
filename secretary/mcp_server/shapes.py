"""What the MCP tools take and answer beyond the client's values: a conversation's turn, a
search's compact answer, what add_conversation stored, and every answer as compact JSON."""

import json
from typing import Any, NotRequired

import pydantic_core
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic reads a TypedDict from here on Python 3.11

from secretary.client.models import Recalled


class Turn(BaseModel):
    """One turn of a conversation, as POST /v1/logs takes a line (the session given once)."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(min_length=1, description="Who spoke: user, assistant, or another word.")
    content: str = Field(min_length=1, description="What was said, verbatim.")
    timestamp: str = Field(
        min_length=1, description="When it was said, ISO-8601 (e.g. 2026-03-01T18:30:00Z)."
    )
    idempotency_key: str | None = Field(
        default=None,
        description="Your own id of the turn; left out, the turn is known by session, role, "
        "time and text.",
    )


class Found(TypedDict):
    """A search's answer: a line a hit (``#id type date score text``), or with ``detail`` each
    hit as an object with its score's breakdown; ``degraded`` only when the search had less
    than both indexes."""

    hits: list[str] | list[Recalled]
    degraded: NotRequired[list[str]]


class HandedOver(TypedDict):
    """What add_conversation stored: every turn's log line id, the new ones, and the dream
    request if one was asked for."""

    ids: list[int]
    created: list[int]
    dream_request: NotRequired[int]
    dream_note: NotRequired[str]  # why the dream will not extract (no model configured)


def compact(value: Any) -> CallToolResult:
    """Return a tool's answer as compact JSON text and the same data as structured content (a
    list inside ``{"result": ...}``, as the SDK wraps it)."""
    data = pydantic_core.to_jsonable_python(value)
    structured = data if isinstance(data, dict) else {"result": data}
    text = json.dumps(structured, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )
