"""The key that signs the console's anonymous sessions, kept in the data directory.

Every process serving the data directory shares it, as they share the logins' table
(``console_sessions``); the console (``store.api.console.app``) reads it at start.

Drawn on first use and written to ``console.key`` (mode 0600: only the store's owner reads it),
so a restarted server, and every process serving the same data directory, accepts the cookies
and form tokens it issued before. The file is made under a temporary name and linked into place,
so two processes starting together both end up with the one that won.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from loguru import logger

from store.errors import SecretaryError

KEY_FILE = "console.key"
KEY_BYTES = 32


class BadConsoleKey(SecretaryError):
    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} does not hold a console key ({KEY_BYTES * 2} hex digits): delete it and a"
            " new one is made (browsers then log in again)"
        )


def console_key(data_dir: Path) -> bytes:
    """Given the data directory, return the console's key: read, or made on first use.

    Raise BadConsoleKey if the file holds something else. A directory that cannot be written
    gives a key for this process only (logged): sessions then end with it.
    """
    path = data_dir / KEY_FILE
    if not path.exists():
        try:
            _make(path)
        except OSError as exc:
            logger.warning(
                "cannot keep the console's key in {}: {}; sessions end on restart", path, exc
            )
            return secrets.token_bytes(KEY_BYTES)
    return _read(path)


def _make(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_bytes(KEY_BYTES).hex() + "\n")
            file.flush()
            os.fsync(file.fileno())
        # Fails if another process linked its key first: theirs stands.
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)


def _read(path: Path) -> bytes:
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise BadConsoleKey(path) from None
    if len(key) != KEY_BYTES:
        raise BadConsoleKey(path)
    return key
