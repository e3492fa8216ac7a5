"""Pure text helpers: content hashing."""

from __future__ import annotations

import hashlib


def content_hash(text: str) -> str:
    """Return the sha256 hex digest of text with whitespace stripped and collapsed."""
    normalised = " ".join(text.split())
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()
