"""Errors of the store; each builds its own message."""

from __future__ import annotations

from secretary.errors import SecretaryError


class StoreError(SecretaryError):
    """Base class of the store's errors."""


class SchemaError(StoreError):
    def __init__(self, current: str | None, head: str | None) -> None:
        super().__init__(
            f"the database schema is at {current or 'nothing (empty database)'} but this version "
            f"needs {head}: run `secretary db upgrade`"
        )


class ValidationFailed(StoreError):
    """Input was rejected; nothing was written. ``problems`` lists (location, message) pairs."""

    exit_code = 3

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        shown = "; ".join(f"{where}: {what}" for where, what in problems[:20])
        more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        super().__init__(f"rejected, nothing written: {shown}{more}")


class NotFound(StoreError):
    def __init__(self, what: str, ident: object) -> None:
        super().__init__(f"{what} {ident} does not exist")


class ConflictError(StoreError):
    """A row changed since it was read (optimistic concurrency)."""
