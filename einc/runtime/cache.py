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
that never fills (most) makes no item for each key it keeps.  An entry many keys share (a
size class's) comes in on probation (:meth:`LRUCache.admit`): its key is kept in a plain
dict outside the order (in the room the cache leaves, at least a quarter of the bound,
emptied at once when full), and moves into the cache on its
second use (:meth:`LRUCache.promote`, a hit), so that a stream of keys each seen once (a
new shape every call) costs a dict store each, not the order's upkeep and an eviction; a
key seen twice is kept as any other.  On a miss the first thread
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
        self._quarter = max(maxsize // 4, 1)     # probation's least bound (admit)
        self._data: dict = {}               # key -> [entry, stamp, number]: the hit count at its last use, the
        #                                     miss count at its insertion
        self._order: list = []              # heap of (stamp, number, key), one per key once made (the module's doc)
        self._probation: dict = {}          # key -> a shared entry, seen once (admit)
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
        """The entry for ``key`` or None; counts a hit when found (on probation too: promoted)."""
        slot = self._data.get(key)
        if slot is None:
            return self.promote(key) if self._probation else None
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

    def admit(self, key, entry) -> None:
        """Keep ``entry``, built already and shared by many keys, for ``key`` on probation,
        counted as a miss: outside the order, until :meth:`promote` moves it in.  Probation
        holds what room the cache leaves, and at least a quarter of the bound (one key), and
        is emptied at once where it would hold more; where the keys on probation and in the
        cache together would pass the bound, the cache's least recently used key goes."""
        probation, held, bound = self._probation, len(self._probation), self.maxsize
        if held >= self._quarter and held >= bound - len(self._data):
            probation.clear()
            held = 0
        if len(self._data) + held >= bound:
            with self._lock:
                self._evict(bound - held - 1)
        probation[key] = entry
        self.misses += 1

    def promote(self, key):
        """The entry on probation for ``key``, moved into the cache and counted as a hit (the
        key's second use); None where none is."""
        entry = self._probation.pop(key, None)
        if entry is not None:
            with self._lock:
                self.hits += 1
                self.misses -= 1            # (_insert counts one: the key's miss was counted at admit)
                self._insert(key, entry)
        return entry

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

    def _evict(self, bound=None) -> None:
        """Drop the least recently used keys past the bound (``bound``, else the cache's)
        (under the lock), the heap made from the slots where it is not yet (each key's item
        at its last use)."""
        data, order = self._data, self._order
        bound = self.maxsize if bound is None else max(0, bound)
        if not order and len(data) > bound:
            order[:] = [(slot[1], slot[2], key) for key, slot in data.items()]
            heapq.heapify(order)
        while len(data) > bound:
            stamp, number, key = order[0]
            used = data[key][1]
            if used == stamp:
                heapq.heappop(order)
                del data[key]
            else:                           # used since it was pushed: back in at its last use
                heapq.heapreplace(order, (used, number, key))

    def peek(self, key):
        """The entry for ``key`` or None (on probation too), counting nothing and touching nothing."""
        slot = self._data.get(key)
        return self._probation.get(key) if slot is None else slot[0]

    def resize(self, maxsize: int) -> None:
        """Bound the cache to ``maxsize`` entries, evicting the least recently used now."""
        with self._lock:
            self.maxsize = maxsize
            self._quarter = max(maxsize // 4, 1)
            self._probation.clear()
            self._evict()

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, self.maxsize, len(self._data) + len(self._probation))

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._order.clear()
            self._probation.clear()
            self.hits = self.misses = 0
