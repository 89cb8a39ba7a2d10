"""The safety rules of einc's folders on disk, shared by the kernel cache
(``runtime/triton_executor/diskcache.py``) and the remembered paths
(``planner/pathcache.py``), so that both keep them alike:

- **Private.**  A folder einc makes is owner-only (0700, whatever the umask).  A folder is
  used only while it belongs to you and no one else can write it (:func:`problem`);
  where it is einc's by name, einc may tighten it to 0700 itself, once warned.
- **Only what einc wrote.**  A file is read only where it is a regular file, never
  through a symbolic link (:func:`read`); the caller checks the bytes.
- **Atomic.**  A file is written to a private temporary file in its folder, then moved
  over the old one with ``os.replace`` (:func:`write`): readers see the old file or the
  new one, never a partial one.
- **Bounded.**  A use touches the file (:func:`touch`); :func:`evict` deletes the least
  recently used entries beyond a bound, never the one just written, tolerating files
  another process deletes first; temporary files left by a killed writer go after
  :data:`STALE_TMP_SECONDS` (:func:`scan`).

Warnings are given once per process (:func:`warn_once`).  Standard library only (the
planner and ``einc cache`` use it without torch).
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from pathlib import Path

from .errors import warn

STALE_TMP_SECONDS = 3600        # a temporary file this old is left from a killed writer
_warned: set = set()
_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)   # a fork while another thread holds it


# ----------------------------------------------------------------------- warnings

def warn_once(key, message: str) -> None:
    """Warn ``message`` unless a warning of ``key`` was given already in this process."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warn(message)


def forget() -> None:
    """Forget the warnings given, as in a new process."""
    with _lock:
        _warned.clear()


# ----------------------------------------------------------------------- folders

def uid() -> int | None:
    """The effective user id (None where the platform has none, e.g. Windows)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def is_yours(st: os.stat_result) -> bool:
    """Whether the file or folder ``st`` describes belongs to this process's user."""
    me = uid()
    return me is None or st.st_uid == me


def mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def writable_by_others(st: os.stat_result) -> bool:
    return uid() is not None and bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def make(path: Path, create: bool) -> None:
    """Create ``path`` (mode 0700, whatever the umask) if it is missing and ``create``."""
    if not create or os.path.lexists(path):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:         # another process made it first: checked like any folder
        return
    os.chmod(path, 0o700)           # mkdir's mode is subject to the umask


def problem(path: Path, *, create: bool, links: bool = True, own: str = "") -> str | None:
    """Why ``path`` must not be used as a folder of einc's, or None where it may (made
    first where it is missing and ``create``; a missing one is no problem).

    ``links``: whether a symbolic link to a folder is acceptable.  ``own``: where the
    folder is einc's by name, what it is ("the kernel cache folder"): one that others
    can write is then made private, with one warning, instead of refused.  Raises the
    OSError of a folder that cannot be made, but for a file standing on its path.
    """
    try:
        make(path, create)
        st = os.stat(path) if links else os.lstat(path)
    except FileNotFoundError:
        return None                 # not there yet (``create`` False): nothing to refuse
    except (NotADirectoryError, FileExistsError):   # (mkdir's error where a file stands on the path)
        return "a part of its path is a file, not a folder"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if not is_yours(st):
        others = " and others can write it" if writable_by_others(st) else ""
        return f"it belongs to user id {st.st_uid}, not to you (user id {uid()}){others} (mode {mode(st)})"
    if not writable_by_others(st):
        return None
    if not own:
        return (f"others can write it (mode {mode(st)}), so they could plant files there; "
                f"make it private (chmod 700 {path}) or choose another EINC_CACHE_DIR")
    try:
        os.chmod(path, 0o700)
        tightened = os.stat(path)
    except OSError as e:
        return f"others can write it (mode {mode(st)}) and einc could not make it private ({e})"
    if writable_by_others(tightened):
        return f"others can write it (mode {mode(st)}) and einc could not make it private"
    warn_once(("tightened", str(path)), f"einc: {own} {path} was writable by others "
                                        f"(mode {mode(st)}); einc made it private (mode 0700)")
    return None


# ----------------------------------------------------------------------- files

def read(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of the regular file ``path``, or None (missing, unreadable, a link, a FIFO...,
    or more than ``limit`` bytes)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
            return None
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if limit is not None and size > limit:
                return None
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def is_tmp(name: str) -> bool:
    """Whether ``name`` is one of :func:`write`'s temporary files."""
    return name.startswith(".") and name.endswith(".tmp")


def write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (a temporary file ``.<stem>.*.tmp`` in its
    folder, mode 0600, then ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def touch(path: Path) -> None:
    """Mark ``path`` as just used (its modification time orders eviction)."""
    try:
        os.utime(path)
    except OSError:                 # evicted by another process meanwhile: nothing to mark
        pass


# ----------------------------------------------------------------------- bound

def scan(directory: Path, is_entry, now: float | None = None):
    """``[(mtime_ns, name, size)]`` of the regular files in ``directory`` whose names
    ``is_entry`` accepts; with ``now``, removes temporary files older than
    :data:`STALE_TMP_SECONDS`."""
    entries = []
    try:
        listing = list(os.scandir(directory))
    except OSError:
        return entries
    for entry in listing:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:             # removed meanwhile
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if is_entry(entry.name):
            entries.append((st.st_mtime_ns, entry.name, st.st_size))
        elif now is not None and is_tmp(entry.name) and now - st.st_mtime > STALE_TMP_SECONDS:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    return entries


def evict(directory: Path, entries, bound: int, keep: str | None = None, weigh=lambda size: size) -> list[str]:
    """Delete the least recently used of ``entries`` (:func:`scan`'s) while their total
    weight (``weigh(size)``: bytes by default) exceeds ``bound``.

    ``keep`` (a file name) is never deleted.  Safe with other processes doing the
    same: a file someone else deleted first counts as gone.  Returns the names deleted.
    """
    total = sum(weigh(size) for _, _, size in entries)
    removed = []
    for _, name, size in sorted(entries):
        if total <= bound:
            break
        if name == keep:
            continue
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        total -= weigh(size)
        removed.append(name)
    return removed


__all__ = ["STALE_TMP_SECONDS", "evict", "forget", "is_tmp", "is_yours", "make", "mode", "problem", "read", "scan",
           "touch", "uid", "warn_once", "writable_by_others", "write"]
