"""A bounded, thread-safe LRU cache whose misses are built once per key.

A hit is one dictionary lookup and a stamp: each key's slot (``[entry, stamp, number]``)
records the hit count at its last use, so a hit touches the slot it found rather than
hashing the key again to move it in an order.  The least recently used key is found when
one must go (past the bound, which a full cache meets once per miss): a heap of ``(stamp,
number, key)``, one item per key, whose stamp may lag the slot's; the smallest item whose
stamp is still its slot's is the least recently used, and a lagging one is pushed back
with its slot's stamp.  Keys stamped alike (inserted between two hits) go in the order
they were inserted (``number``, the miss count at insertion, kept in the slot).  The heap
is made from the slots the first time the bound is passed, and kept from then on: a cache
that never fills (most) makes no item for each key it keeps.  On a miss the first thread
builds the entry under a per-key lock; threads asking for the same key at the same
moment wait for it instead of building it again.  A child process forked while another
thread was building gets fresh locks (that thread does not exist in the child, and its
key would otherwise wait for ever there).  A thread that asks for a key it is
building itself (the build called back into einc for the same key) gets
:class:`~einc.errors.ReentrantCallError` instead of waiting on its own lock for ever.
"""

from __future__ import annotations

import heapq
import os
import threading
import weakref
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
        self._data: dict = {}               # key -> [entry, stamp, number]: the hit count at its last use, the
        #                                     miss count at its insertion
        self._order: list = []              # heap of (stamp, number, key), one per key once made (the module's doc)
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
        slot = self._data.get(key)
        if slot is None:
            return None
        self.hits = slot[1] = self.hits + 1     # approximate under threads; it is a statistic
        return slot[0]

    def get_or_build(self, key, build):
        """The entry for ``key``, built with ``build()`` by exactly one thread on a miss."""
        slot = self._data.get(key)
        if slot is not None:
            self.hits = slot[1] = self.hits + 1
            return slot[0]
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
                slot = self._data.get(key)
                if slot is not None:        # another thread built it meanwhile (counted, not a use)
                    self.hits += 1
                    return slot[0]
                entry = build()
                with self._lock:
                    self._insert(key, entry)
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
            self._insert(key, entry)

    def _insert(self, key, entry) -> None:
        """Keep ``entry`` for ``key`` as a miss (under the lock): a new key is the most recently
        used; a kept one takes the entry where it stands."""
        self.misses += 1
        slot = self._data.get(key)
        if slot is not None:
            slot[0] = entry
            return
        self._data[key] = [entry, self.hits, self.misses]
        if self._order:
            heapq.heappush(self._order, (self.hits, self.misses, key))
        if len(self._data) > self.maxsize:
            self._evict()

    def _evict(self) -> None:
        """Drop the least recently used keys past the bound (under the lock), the heap made
        from the slots where it is not yet (each key's item at its last use)."""
        data, order = self._data, self._order
        if not order and len(data) > self.maxsize:
            order[:] = [(slot[1], slot[2], key) for key, slot in data.items()]
            heapq.heapify(order)
        while len(data) > self.maxsize:
            stamp, number, key = order[0]
            used = data[key][1]
            if used == stamp:
                heapq.heappop(order)
                del data[key]
            else:                           # used since it was pushed: back in at its last use
                heapq.heapreplace(order, (used, number, key))

    def peek(self, key):
        """The entry for ``key`` or None, counting nothing and touching nothing."""
        slot = self._data.get(key)
        return None if slot is None else slot[0]

    def resize(self, maxsize: int) -> None:
        """Bound the cache to ``maxsize`` entries, evicting the least recently used now."""
        with self._lock:
            self.maxsize = maxsize
            self._evict()

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, self.maxsize, len(self._data))

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._order.clear()
            self.hits = self.misses = 0
