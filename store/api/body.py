"""Request bodies before any route sees them: from a known caller (401 first, as the routes
would), at most ``api.max_body_bytes`` (413), declared as JSON (415), UTF-8 (400) and JSON
without NaN or infinities (400), in the API's one error shape.

A pure ASGI middleware: it reads the body once (refusing it as soon as it passes the limit,
before reading the rest), checks it, and hands the same bytes to the app.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from store.api.auth import authenticate, presented_key
from store.api.errors import ApiError, error_response
from store.settings import ApiKey


def _is_json(media: str) -> bool:
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class BodyGuard:
    """Refuse request bodies that are too large, not JSON by content type, or not valid JSON."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, keys: Sequence[ApiKey] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:  # a caller without a valid key learns only that, whatever its body
            authenticate(self.keys, presented_key(headers))
        except ApiError as exc:
            await error_response(exc.status, exc.message, exc.problems, exc.headers)(
                scope, receive, send
            )
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, *self._too_large(int(declared)))
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = bool(message.get("more_body", False))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, *self._too_large(size))
                return
        body = b"".join(chunks)
        problem = check_json_body(body, headers.get("content-type", ""))
        if problem is not None:
            await self._refuse(scope, receive, send, *problem)
            return
        await self.app(scope, _replay(body, receive), send)

    def _too_large(self, size: int) -> tuple[int, str, str]:
        return (
            413,
            "the request body is too large",
            f"{size} bytes, more than the limit of {self.max_bytes} (api.max_body_bytes)",
        )

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, status: int, message: str, what: str
    ) -> None:
        await error_response(status, message, [("body", what)])(scope, receive, send)


def check_json_body(body: bytes, content_type: str) -> tuple[int, str, str] | None:
    """Given a body and its Content-Type, return (status, message, problem), or None if fine.

    An empty body needs no type (the route decides whether it needs one).
    """
    if not body:
        return None
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    if not _is_json(media):
        shown = media or "none"
        return 415, "the body must be JSON", f"Content-Type {shown}: send application/json"
    charset = params.lower().replace(" ", "").partition("charset=")[2].strip('"')
    if charset not in ("", "utf-8", "utf8"):
        return 415, "the body must be UTF-8 JSON", f"charset {charset}: send UTF-8"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body.count(b"\n", 0, exc.start) + 1
        column = exc.start - (body.rfind(b"\n", 0, exc.start) + 1) + 1
        what = f"line {line} column {column}: byte 0x{body[exc.start]:02x} is not UTF-8"
        return 400, "the body is not valid UTF-8", what
    try:
        json.loads(text.removeprefix("\ufeff"), parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        return 400, "the body is not valid JSON", f"{exc.msg} at {where}"
    except (ValueError, RecursionError) as exc:
        return 400, "the body is not valid JSON", str(exc) or "nested too deeply"
    return None


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; accepting them would store values no response can carry.
    raise ValueError(f"{name} is not valid JSON: numbers must be finite")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses to inf: as unrepresentable as Infinity itself
        raise ValueError(f"the number {text} is out of range: numbers must be finite")
    return value


def _replay(body: bytes, receive: Receive) -> Receive:
    """Return a receive that gives the app the body already read, then waits as usual."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
