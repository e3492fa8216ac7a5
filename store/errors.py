"""Errors: the base every error of the product derives from, and the store's own.

Each error builds its own message. The front ends turn any ``SecretaryError`` into a clean
message and its ``exit_code`` (CLI) or an error response (API); anything else is a bug.
"""

from __future__ import annotations


class SecretaryError(Exception):
    """Base class: an error the CLI turns into a clean message and a non-zero exit code."""

    exit_code = 1


class StoreError(SecretaryError):
    """Base class of the store's errors."""


class SchemaError(StoreError):
    def __init__(self, current: str | None, head: str | None) -> None:
        super().__init__(
            f"the database schema is at {current or 'nothing (empty database)'} but this version "
            f"needs {head}: run `secretary db upgrade`"
        )


class StoreMissing(SchemaError):
    """The data directory or database holds no store: not initialised, or a mistyped path."""

    def __init__(self, where: str) -> None:
        StoreError.__init__(
            self,
            f"no store at {where}: create one with `secretary init`, or check --data-dir "
            "(SECRETARY_DATA_DIR) or database.url (SECRETARY_DATABASE_URL)",
        )


class DatabaseUnavailable(StoreError):
    """The database cannot be reached or opened; the message says why and what to do."""


class UnsupportedDatabase(StoreError):
    """The database URL names a database this product does not speak."""

    exit_code = 2

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(
            f"database URL {url!r} {reason}: use sqlite:///PATH or "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE "
            "(database.url, SECRETARY_DATABASE_URL)"
        )


class UnknownNamespace(StoreError):
    """A command named a namespace that holds nothing."""

    def __init__(self, namespace: str, known: list[str]) -> None:
        listed = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "") if known else "none"
        super().__init__(
            f"namespace {namespace!r} holds nothing (namespaces in this store: {listed}): "
            "check --namespace (SECRETARY_NAMESPACE)"
        )


class ValidationFailed(StoreError):
    """Input was rejected; nothing was written. ``problems`` lists (location, message) pairs."""

    exit_code = 3

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        grouped = _grouped(problems)
        shown = "; ".join(grouped[:20])
        more = f" (and {len(grouped) - 20} more)" if len(grouped) > 20 else ""
        super().__init__(f"rejected, nothing written: {shown}{more}")


def _grouped(problems: list[tuple[str, str]]) -> list[str]:
    """One ``where: what`` per distinct ``what``, in order of first appearance, its places
    together (a file of another namespace's lines: one message, not one per line)."""
    places: dict[str, list[str]] = {}
    for where, what in problems:
        places.setdefault(what, []).append(where)
    return [f"{_places(wheres)}: {what}" for what, wheres in places.items()]


def _places(wheres: list[str]) -> str:
    """``line 1``, ``lines 1-3, 7`` (file lines as ranges), or the places listed."""
    numbers = [int(w[5:]) for w in wheres if w.startswith("line ") and w[5:].isdigit()]
    if len(set(wheres)) == 1 or len(numbers) != len(wheres):
        wheres = list(dict.fromkeys(wheres))
        listed = ", ".join(wheres[:10])
        return listed + (f" (and {len(wheres) - 10} more)" if len(wheres) > 10 else "")
    ranges: list[list[int]] = []
    for number in sorted(set(numbers)):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    spans = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges]
    more = f" (and {len(spans) - 10} more)" if len(spans) > 10 else ""
    return f"lines {', '.join(spans[:10])}{more}"


class NotFound(StoreError):
    def __init__(self, what: str, ident: object) -> None:
        super().__init__(f"{what} {ident} does not exist")


class IdConflict(StoreError):
    """Items name stored ids (external id, idempotency key, row id) with other content, or each
    other's id with other content; nothing was written. ``problems`` as in ValidationFailed."""

    exit_code = 4

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        shown = "; ".join(f"{where}: {what}" for where, what in problems[:20])
        more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        super().__init__(f"conflict, nothing written: {shown}{more}")


class IndexBusy(StoreError):
    """Another process kept writing the vector index; a rebuild asked for stays asked for."""

    exit_code = 75  # EX_TEMPFAIL: worth trying later

    def __init__(self, namespaces: list[str]) -> None:
        names = ", ".join(repr(namespace) for namespace in namespaces)
        super().__init__(
            f"another process keeps writing the vector index (a daemon or `secretary serve`?): "
            f"the rebuild of {names} is recorded, and that process or the next "
            "`secretary index sync` completes it"
        )
