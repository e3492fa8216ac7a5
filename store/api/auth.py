"""Who is calling (API keys), and which namespace a request may act on."""

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from secretary.config import ApiKey
from store.api.errors import ApiError

DEFAULT_NAMESPACE = "default"  # the namespace of an open API (no keys configured)


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who is calling: a configured key, or anyone when the API is open (``namespaces=None``)."""

    name: str
    namespaces: tuple[str, ...] | None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


OPEN = Principal(name="open", namespaces=None)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """Return the key from ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, if any."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key", "").strip() or None


def authenticate(keys: Sequence[ApiKey], presented: str | None) -> Principal:
    """Given the configured keys and the presented one, return the caller. Raise 401 if unknown."""
    if not keys:
        return OPEN
    if presented is None:
        raise _unauthorized("missing API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
    found: ApiKey | None = None
    for candidate in keys:  # compare with every key, in constant time, to leak nothing by timing
        if hmac.compare_digest(candidate.key.encode(), presented.encode()):
            found = candidate
    if found is None:
        raise _unauthorized("invalid API key")
    return Principal(name=found.name or found.key[:2] + "***", namespaces=found.namespaces)


def _unauthorized(message: str) -> ApiError:
    return ApiError(
        401, message, [("header.authorization", message)], headers={"WWW-Authenticate": "Bearer"}
    )


def choose_namespace(principal: Principal, requested: str | None) -> str:
    """Return the namespace a request acts on. Raise 422 if it is ambiguous, 403 if forbidden."""
    if requested is None:
        if principal.namespaces is None:
            return DEFAULT_NAMESPACE
        if len(principal.namespaces) == 1:
            return principal.namespaces[0]
        raise ApiError(
            422,
            "namespace is required",
            [("query.namespace", "this API key has several namespaces: name one")],
        )
    if not principal.allows(requested):
        raise ApiError(
            403,
            f"this API key may not use namespace {requested!r}",
            [("query.namespace", "not one of this key's namespaces")],
        )
    return requested
