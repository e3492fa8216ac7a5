"""store.vector.lru: a bounded map that evicts the entry used least recently."""

from __future__ import annotations

import pytest

from store.vector.lru import Lru


def test_setting_past_capacity_evicts_the_least_recently_used() -> None:
    cache: Lru[str, int] = Lru(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # "a" used: "b" is now the oldest

    cache["c"] = 3

    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)


def test_pop_and_clear_forget_entries() -> None:
    cache: Lru[str, int] = Lru(3)
    cache["a"], cache["b"] = 1, 2

    assert cache.pop("a") == 1
    assert cache.pop("a") is None
    cache.clear()
    assert len(cache) == 0


def test_a_capacity_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Lru(0)
