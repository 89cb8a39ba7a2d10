"""Paths found by a long search, remembered on disk so that the next process pays nothing.

An entry is a JSON file ``<cache folder>/paths/<key>.json`` (never pickle: loading one
runs no code), ``key`` the SHA-256 of the network's structure and sizes, the memory
limit, and :data:`VERSION`, which names the search and its budget figures (a change to
either misses every old entry).  Only searches that ran :data:`STORE_SECONDS` or longer
are stored: a greedy path costs less to find again than to read.

The kernel cache's safety rules, for a folder of data rather than code: the ``paths``
folder is made owner-only (0700) and used only while it is yours, a folder and not a
link, and no one else can write it; the cache folder above it likewise (where it is
refused, nothing is read or written, once warned).  An entry is read only from a
regular file (no link followed), and used only where it parses, names the same key and
version, and holds a path that contracts this network's operands to one; anything else
is ignored (and overwritten by the next search).  Bounded: beyond :data:`MAX_ENTRIES`
files the least recently used go (a hit touches its file).  Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import threading
from pathlib import Path

from .. import config
from ..errors import warn

VERSION = "einc-paths-1"        # with the search's figures appended by the caller (search.version())
STORE_SECONDS = 0.005           # a shorter search is not stored
MAX_ENTRIES = 2000              # files kept; the least recently used go first
MAX_BYTES = 1 << 20             # a larger file is no entry of einc's

_warned: set = set()
_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)   # a fork while another thread holds it


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
        _warn_once(("config", str(e)), f"einc: no path cache ({e})")
        return None
    paths = root / "paths"
    if not create and not os.path.lexists(paths):
        return None                 # nothing remembered yet
    for path in (root, paths):
        why = _problem(path, create)
        if why is not None:
            _warn_once(("refused", str(path)), f"einc: not using {path} for remembered contraction paths: {why}")
            return None
    return paths


def _problem(path: Path, create: bool) -> str | None:
    try:
        if create and not os.path.lexists(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(path, 0o700)
                os.chmod(path, 0o700)       # mkdir's mode is subject to the umask
            except FileExistsError:
                pass
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    except OSError as e:
        return f"it cannot be made ({e})"
    if stat.S_ISLNK(st.st_mode) and path.name == "paths":
        return "it is a symbolic link"
    if stat.S_ISLNK(st.st_mode):
        st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if hasattr(os, "geteuid"):
        if st.st_uid != os.geteuid():
            return f"it belongs to user id {st.st_uid}, not to you"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"others can write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _warn_once(k, message: str) -> None:
    with _lock:
        if k in _warned:
            return
        _warned.add(k)
    warn(message)


def load(name: str, version: str, num_operands: int):
    """``(path, record)`` of entry ``name``, or None where it is missing or not valid."""
    where = folder(create=False)
    if where is None:
        return None
    file = where / f"{name}.json"
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(file, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != name or record.get("version") != version:
        return None
    path = valid_path(record.get("path"), num_operands)
    if path is None:
        return None
    try:
        os.utime(file)              # recently used: kept longest
    except OSError:
        pass
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
    keep the folder within :data:`MAX_ENTRIES`."""
    where = folder(create=True)
    if where is None:
        return
    body = json.dumps(dict(record, key=name, version=version, path=[list(c) for c in path])).encode()
    try:
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-", suffix=".json")    # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(tmp, where / f"{name}.json")
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        _warn_once(("write", str(where)), f"einc: could not remember a contraction path in {where} ({e})")
        return
    _bound(where, keep=name)


def _bound(where: Path, keep: str) -> None:
    try:
        entries = [e for e in os.scandir(where) if e.name.endswith(".json") and not e.name.startswith(".")]
    except OSError:
        return
    if len(entries) <= MAX_ENTRIES:
        return
    def mtime(e):
        try:
            return e.stat(follow_symlinks=False).st_mtime
        except OSError:
            return 0.0
    entries.sort(key=mtime)
    for e in entries[:len(entries) - MAX_ENTRIES]:
        if e.name != f"{keep}.json":
            try:
                os.unlink(e.path)
            except OSError:
                pass


def clear() -> int:
    """Delete every remembered path; how many files went."""
    where = folder(create=False)
    if where is None:
        return 0
    gone = 0
    for e in os.scandir(where):
        if e.name.endswith(".json"):
            try:
                os.unlink(e.path)
                gone += 1
            except OSError:
                pass
    return gone


__all__ = ["key", "load", "store", "clear", "folder", "valid_path", "VERSION", "STORE_SECONDS", "MAX_ENTRIES"]
