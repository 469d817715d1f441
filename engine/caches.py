"""The one cache abstraction: thread-safe LRUs bounded by size, all cleared by ``clear_caches``.

A cache counts each value by ``sizeof`` (bytes for automata, grammars and masks; 1 for small
derived tables, so their bound is a number of entries) and drops the least recently used values
past ``max_size``. Caches of tables read from a tokenizer are marked ``per_vocabulary``. Every
cache registers itself by name, so tests and benchmarks clear them all the same way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

_REGISTRY: dict[str, "Cache"] = {}


class Cache:
    """An LRU from keys to values, bounded by the sum of ``sizeof(value)``."""

    def __init__(self, name: str, max_size: int, sizeof: Callable[[Any], int] = lambda value: 1, *,
                 per_vocabulary: bool = False) -> None:
        if name in _REGISTRY:
            raise ValueError(f"a cache named {name!r} exists already")
        self.name = name
        self.per_vocabulary = per_vocabulary  # tables of a tokenizer, not of any request
        self.max_size = max_size
        self.sizeof = sizeof
        self.size = 0
        self.hits = self.misses = 0
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        _REGISTRY[name] = self

    def get(self, key: Hashable) -> Any:
        """The value under ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: Any) -> Any:
        """Store ``value`` unless ``key`` holds one already; returns the value kept."""
        size = self.sizeof(value)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                return found[0]
            self._store(key, value, size)
            return value

    def replace(self, key: Hashable, value: Any) -> Any:
        """Store ``value`` under ``key`` in place of what it holds (the same thing in another
        form); returns ``value``."""
        size = self.sizeof(value)
        with self._lock:
            found = self._items.pop(key, None)
            if found is not None:
                self.size -= found[1]
            self._store(key, value, size)
            return value

    def _store(self, key: Hashable, value: Any, size: int) -> None:
        """Add ``value`` (the lock held) and drop the least recently used values past the bound."""
        self._items[key] = (value, size)
        self.size += size
        while self.size > self.max_size and len(self._items) > 1:
            _, (_, old) = self._items.popitem(last=False)
            self.size -= old

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The cached value, or ``build()`` stored (a racing thread's value wins if it came first)."""
        found = self.get(key)
        return found if found is not None else self.put(key, build())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def keys(self) -> list:
        with self._lock:
            return list(self._items)

    def reset_lock(self) -> None:
        """A fresh lock, for a forked child whose parent may have held this one at the fork."""
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.size = 0


def clear_caches(*, vocabularies: bool = True) -> None:
    """Empty the engine's in-memory caches (the disk cache is left as it is). With
    ``vocabularies=False`` the tables read from tokenizers stay, so the next compile is cold for
    the request but not for the tokenizer (what the benchmarks time)."""
    for cache in _REGISTRY.values():
        if vocabularies or not cache.per_vocabulary:
            cache.clear()
