"""What the client raises: one base carrying the API's status, message and problem list.

The API answers every refusal as ``{"error": {"status", "message", "problems": [{"where",
"what"}]}}``; ``error_from`` turns such an answer into the matching exception, and a server that
cannot be reached becomes ``ConnectionFailed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong with a request: where (``query.k``, ``body.items.0.content``) and what."""

    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class SecretaryError(Exception):
    """The API refused a request, or could not be reached. ``status`` is None without an answer."""

    def __init__(
        self, status: int | None, message: str, problems: tuple[Problem, ...] = ()
    ) -> None:
        self.status = status
        self.message = message
        self.problems = problems
        said = "; ".join(str(problem) for problem in problems)
        prefix = f"{status} " if status is not None else ""
        super().__init__(f"{prefix}{message}" + (f" ({said})" if said else ""))


class Invalid(SecretaryError):
    """400 or 422: the request is malformed; ``problems`` names each bad part."""


class AuthError(SecretaryError):
    """401 or 403: the API key is missing or unknown, or may not use the namespace."""


class Unauthorized(AuthError):
    """401: no key, or an unknown one."""


class Forbidden(AuthError):
    """403: the key may not use the namespace named."""


class NotFound(SecretaryError):
    """404: no such memory, record or request (another key's look exactly the same)."""


class Conflict(SecretaryError):
    """409: an id with other content, a memory changed since it was read, or an undo refused."""


class StaleVersion(Conflict):
    """409 on an If-Match: the memory is no longer at the version sent (``problems`` say which)."""


class TooLarge(SecretaryError):
    """413: the request body passes the server's ``api.max_body_bytes``."""


class Unavailable(SecretaryError):
    """503: the database or the vector index is unavailable for now; try again later."""


class ServerError(SecretaryError):
    """Another 5xx: a bug on the server."""


class ConnectionFailed(SecretaryError):
    """No answer: the server could not be reached, or did not answer in time."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(None, f"cannot reach the secretary API at {url}: {reason}")
        self.url = url


_BY_STATUS: Mapping[int, type[SecretaryError]] = {
    400: Invalid,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    415: Invalid,
    422: Invalid,
    503: Unavailable,
}


def _problems(error: Mapping[str, Any]) -> tuple[Problem, ...]:
    listed = error.get("problems")
    if not isinstance(listed, list):
        return ()
    return tuple(
        Problem(where=str(item.get("where", "")), what=str(item.get("what", "")))
        for item in listed
        if isinstance(item, Mapping)
    )


def error_from(status: int, content: bytes) -> SecretaryError:
    """Given a refused request's status and body, return the exception to raise."""
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        message, problems = str(error.get("message") or "request refused"), _problems(error)
    else:
        text = content.decode("utf-8", "replace").strip()[:300]
        message, problems = text or "request refused", ()
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else SecretaryError)
    if kind is Conflict and any(p.where == "header.if-match" for p in problems):
        kind = StaleVersion
    return kind(status, message, problems)
