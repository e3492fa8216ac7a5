"""Who is calling (API keys), and which namespace a request may act on."""

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from store.api.errors import ApiError
from store.settings import DEFAULT_NAMESPACE, ApiKey


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
    return principal_of(found)


def principal_of(key: ApiKey) -> Principal:
    """The caller a configured key stands for (an admin key: every namespace). A key without
    a ``name`` is named by `fingerprint`: records say which key acted, and nothing of it."""
    return Principal(
        name=key.name or fingerprint(key.key), namespaces=None if key.admin else key.namespaces
    )


def fingerprint(key: str) -> str:
    """Return "key-" and the first 8 hex digits of the key's SHA-256: the same key always,
    two keys apart (but for a 1 in 4 billion chance), and no character of the key itself."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


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
        names = ", ".join(principal.namespaces)
        raise ApiError(
            422,
            "namespace is required",
            [("query.namespace", f"this API key has several namespaces ({names}): name one")],
        )
    if not principal.allows(requested):
        raise ApiError(
            403,
            f"this API key may not use namespace {requested!r}",
            [("query.namespace", "not one of this key's namespaces")],
        )
    return requested
