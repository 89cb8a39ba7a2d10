"""A bounded, thread-safe LRU cache whose misses are built once per key.

A hit is one dictionary lookup (plus an LRU touch).  On a miss the first thread
builds the entry under a per-key lock; threads asking for the same key at the same
moment wait for it instead of building it again.  A child process forked while another
thread was building gets fresh locks (that thread does not exist in the child, and its
key would otherwise wait for ever there).  A thread that asks for a key it is
building itself (the build called back into einc for the same key) gets
:class:`~einc.errors.ReentrantCallError` instead of waiting on its own lock for ever.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple

from ..errors import ReentrantCallError

_caches: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_caches):
        cache._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class LRUCache:
    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict = {}
        self._mine = threading.local()      # .keys: the keys this thread is building
        self.hits = 0
        self.misses = 0
        _caches.add(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._building = {}

    def get(self, key):
        """The entry for ``key`` or None; counts a hit when found."""
        entry = self._data.get(key)
        if entry is not None:
            self.hits += 1          # approximate under threads; it is a statistic
            try:
                self._data.move_to_end(key)
            except KeyError:        # evicted by another thread in between: still a valid entry
                pass
        return entry

    def get_or_build(self, key, build):
        """The entry for ``key``, built with ``build()`` by exactly one thread on a miss."""
        entry = self.get(key)
        if entry is not None:
            return entry
        mine = self._mine.__dict__.setdefault("keys", set())
        if key in mine:
            raise ReentrantCallError(
                "einsum(): einc was called again, by the same thread, while it was planning this very call "
                f"({str(key)[:160]}): the planning path reached einc itself (is torch.einsum = einc.einsum "
                "called from inside a hook einc runs?)")
        with self._lock:
            lock = self._building.setdefault(key, threading.Lock())
        mine.add(key)
        try:
            with lock:
                entry = self._data.get(key)
                if entry is not None:
                    self.hits += 1
                    return entry
                entry = build()
                with self._lock:
                    self.misses += 1
                    self._data[key] = entry
                    while len(self._data) > self.maxsize:
                        self._data.popitem(last=False)
                return entry
        finally:
            mine.discard(key)
            with self._lock:
                if self._building.get(key) is lock and not lock.locked():
                    del self._building[key]

    def put(self, key, entry) -> None:
        """Keep ``entry`` for ``key``, built already (an entry shared by many keys), counted
        as a miss; evicts the least recently used past the bound."""
        with self._lock:
            self.misses += 1
            self._data[key] = entry
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def peek(self, key):
        """The entry for ``key`` or None, counting nothing and touching nothing."""
        return self._data.get(key)

    def resize(self, maxsize: int) -> None:
        """Bound the cache to ``maxsize`` entries, evicting the least recently used now."""
        with self._lock:
            self.maxsize = maxsize
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, self.maxsize, len(self._data))

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0
