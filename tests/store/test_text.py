"""Tests of store.text: content hashing."""

from __future__ import annotations

import hashlib

from store.text import content_hash


def test_content_hash_whitespace_variants_hash_equal() -> None:
    assert content_hash("  likes   green\n\ttea ") == content_hash("likes green tea")


def test_content_hash_case_differs_hash_differs() -> None:
    assert content_hash("Likes green tea") != content_hash("likes green tea")


def test_content_hash_value_is_sha256_of_normalised_text() -> None:
    expected = hashlib.sha256(b"likes green tea").hexdigest()
    assert content_hash(" likes  green tea\n") == expected
