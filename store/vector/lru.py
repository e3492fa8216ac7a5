"""A small least-recently-used map, safe across threads.

What a long-running process keeps per namespace must not grow with the namespaces it has
served: a daemon dreaming 10,000 namespaces held a Chroma collection handle (about 14 KB) for
each of them. Evicting one costs a lookup the next time it is used.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``capacity`` entries; setting one more evicts the least recently used."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("Lru: capacity must be at least 1")
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return self._items.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
