"""Paths found by a long search, remembered on disk so that the next process pays nothing.

An entry is a JSON file ``<cache folder>/paths/<key>.json`` (never pickle: loading one
runs no code), ``key`` the SHA-256 of the network's structure and sizes, the memory
limit, and :data:`VERSION`, which names the search and its budget figures (a change to
either misses every old entry).  Only searches that ran :data:`STORE_SECONDS` or longer
are stored: a greedy path costs less to find again than to read.  einc's search of 6-16
operands keeps its long searches' paths here too, named and looked for by
:func:`einc.planner.options.dp_entry` under a version of its own
(:func:`einc.planner.options.dp_version`).  Under a memory limit,
the entry also keeps the slicing einc's slicer chose for the path (``slicings``, read and
checked by :mod:`einc.planner.slicecache`).

The kernel cache's safety rules (:mod:`einc.cachefiles`, shared with it), for a folder
of data rather than code: the ``paths`` folder is made owner-only (0700) and used only
while it is yours, a folder and not a link, and no one else can write it; the cache
folder above it likewise (where it is refused, nothing is read or written, once
warned).  An entry is read only from a regular file (no link followed), and used only
where it parses, names the same key and version, and holds a path that contracts this
network's operands to one; anything else is ignored (and overwritten by the next
search).  Entries are written atomically (a temporary file, then ``os.replace``).
Bounded: beyond :data:`MAX_ENTRIES` files the least recently used go, down to
:data:`EVICT_SHARE` of the bound (a hit touches its file), and temporary files a killed
writer left.  A store within the bound and no temporary file there counts the folder's
names and stats none of its files: a folder at the bound is scanned once in
``(1 - EVICT_SHARE) * MAX_ENTRIES`` stores, not at each.
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from .. import cachefiles, config

VERSION = "einc-paths-4"        # with the search's figures appended by the caller (searchkey.version())
STORE_SECONDS = 0.005           # a shorter search is not stored
MAX_ENTRIES = 2000              # files kept; the least recently used go first
EVICT_SHARE = 0.9               # ... down to this share of it, so that the next stores find the folder within it
MAX_BYTES = 1 << 20             # a larger file is no entry of einc's


def key(inputs, output, sizes, memory_limit, version: str) -> str:
    """The entry's name for a network (``inputs`` in operand order, as sets of int indices)."""
    text = json.dumps([version, [sorted(t) for t in inputs], sorted(output),
                       sorted(sizes.items()), memory_limit], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def folder(create: bool = True) -> Path | None:
    """The checked ``paths`` folder, or None where it must not be used (warned once)."""
    try:
        root = config.cache_dir()
    except Exception as e:          # ConfigError: a bad EINC_CACHE_DIR is reported by the kernel cache
        cachefiles.warn_once(("paths", "config", str(e)), f"einc: no path cache ({e})")
        return None
    paths = root / "paths"
    if not create and not os.path.lexists(paths):
        return None                 # nothing remembered yet
    for path, links in ((root, True), (paths, False)):
        try:
            why = cachefiles.problem(path, create=create, links=links)
        except OSError as e:
            why = f"it cannot be made ({e})"
        if why is not None:
            cachefiles.warn_once(("paths", "refused", str(path)),
                                 f"einc: not using {path} for remembered contraction paths: {why}")
            return None
    return paths


def _is_entry(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".")


def load(name: str, version: str, num_operands: int):
    """``(path, record)`` of entry ``name``, or None where it is missing or not valid."""
    where = folder(create=False)
    if where is None:
        return None
    file = where / f"{name}.json"
    data = cachefiles.read(file, MAX_BYTES)
    if data is None:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):     # (RecursionError: arrays nested past the stack)
        return None
    if not isinstance(record, dict) or record.get("key") != name or record.get("version") != version:
        return None
    path = valid_path(record.get("path"), num_operands)
    if path is None:
        return None
    cachefiles.touch(file)          # recently used: kept longest
    return path, record


def valid_path(path, num_operands: int):
    """``path`` as a tuple of tuples where it is a linear path contracting ``num_operands``
    operands to one (pairs or more of distinct positions in range), else None."""
    if not isinstance(path, list):
        return None
    live = num_operands
    out = []
    for c in path:
        if not isinstance(c, list) or not c or not all(type(i) is int for i in c):
            return None
        if len(set(c)) != len(c) or not all(0 <= i < live for i in c):
            return None
        live -= len(c) - 1
        out.append(tuple(c))
    return tuple(out) if live == 1 else None


def store(name: str, version: str, path, record: dict) -> None:
    """Write entry ``name`` atomically (a private temporary file, then ``os.replace``), then
    keep the folder within :data:`MAX_ENTRIES` (evicting down to :data:`EVICT_SHARE` of it)."""
    where = folder(create=True)
    if where is None:
        return
    body = json.dumps(dict(record, key=name, version=version, path=[list(c) for c in path])).encode()
    try:
        cachefiles.write(where / f"{name}.json", body)
    except OSError as e:
        cachefiles.warn_once(("paths", "write", str(where)),
                             f"einc: could not remember a contraction path in {where} ({e})")
        return
    try:
        names = os.listdir(where)       # names only: a scan stats every file
    except OSError:
        return
    if sum(map(_is_entry, names)) <= MAX_ENTRIES and not any(map(cachefiles.is_tmp, names)):
        return
    entries = cachefiles.scan(where, _is_entry, now=time.time())
    cachefiles.evict(where, entries, int(MAX_ENTRIES * EVICT_SHARE), keep=f"{name}.json", weigh=lambda size: 1)


def clear() -> int:
    """Delete every remembered path (and temporary files of interrupted writes); how many files went."""
    where = folder(create=False)
    if where is None:
        return 0
    gone = 0
    for e in os.scandir(where):
        if e.name.endswith(".json") or cachefiles.is_tmp(e.name):
            try:
                os.unlink(e.path)
                gone += 1
            except OSError:
                pass
    return gone


__all__ = ["key", "load", "store", "clear", "folder", "valid_path", "VERSION", "STORE_SECONDS", "MAX_ENTRIES",
           "EVICT_SHARE"]
