"""The folder of generated kernel modules: private, verified, bounded.

einc writes each generated module to ``<cache folder>/kernels/<name>.py`` so that
Triton, tracebacks and ``einc cache list`` can show it; the loader never imports that
file: it runs the source einc generated, held in memory (``runtime/triton_executor/loader.py``).
This module keeps the files honest and the folder safe:

- **Verified.**  :func:`store` compares the file's bytes with the generated source;
  a missing, unreadable, damaged (e.g. not UTF-8) or different file is rewritten
  atomically (a temporary file in the same folder, then ``os.replace``), so readers
  in other processes see the old file or the new one, never a partial one.
- **Private.**  The cache folder and its ``kernels`` folder are created with mode
  0700.  An existing folder is used only if it belongs to you.  A folder that others
  can write is a place where they could plant modules: einc's own folders (the
  ``kernels`` folder, the default ``einc`` cache folder, the fallback) are tightened
  to 0700 with one warning; a folder you named with ``EINC_CACHE_DIR`` is left as it
  is and refused with one warning.  A refused folder is replaced by the fallback
  ``<tempdir>/einc-<uid>`` (itself checked the same way), else by a fresh private
  temporary folder for this process.
- **Bounded.**  Loading a module touches its file (``os.utime``); after each write
  the least recently used modules are deleted while their total size exceeds
  ``EINC_CACHE_MAX_MB`` (the module just written is always kept).  Deleting is safe
  while other processes read the folder: a reader already holds the source in
  memory, and a module found missing is simply written again.

Standard library only (``einc cache`` uses it without torch).
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from ... import config
from ...errors import warn

STALE_TMP_SECONDS = 3600        # a temporary file this old is left from a killed writer
_warned: set = set()
_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)   # a fork while another thread holds it
_private_tmp: Path | None = None


class Usage(NamedTuple):
    directory: Path
    modules: int
    bytes: int
    bound: int


def forget() -> None:
    """Forget the warnings given and the private fallback folder chosen, as in a new process."""
    global _private_tmp
    with _lock:
        _warned.clear()
        _private_tmp = None


def _uid() -> int | None:
    """The effective user id (None where the platform has none, e.g. Windows)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def is_yours(st: os.stat_result) -> bool:
    """Whether the file or folder ``st`` describes belongs to this process's user."""
    uid = _uid()
    return uid is None or st.st_uid == uid


def _warn(key, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warn(message)


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _writable_by_others(st: os.stat_result) -> bool:
    return _uid() is not None and bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _make(path: Path, create: bool) -> None:
    """Create ``path`` (mode 0700, whatever the umask) if it is missing and ``create``."""
    if not create or os.path.lexists(path):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:         # another process made it first: checked like any folder
        return
    os.chmod(path, 0o700)           # mkdir's mode is subject to the umask


def _problem(path: Path, *, own: bool, create: bool, links: bool = True) -> str | None:
    """Why ``path`` must not hold kernel modules, or None where it may (creating it if asked).

    ``own``: the folder is einc's by name, so einc may tighten its mode itself.
    ``links``: whether a symbolic link to a folder is acceptable.
    """
    try:
        _make(path, create)
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
        others = " and others can write it" if _writable_by_others(st) else ""
        return f"it belongs to user id {st.st_uid}, not to you (user id {_uid()}){others} (mode {_mode(st)})"
    if not _writable_by_others(st):
        return None
    if not own:
        return (f"others can write it (mode {_mode(st)}), so they could plant modules there; "
                f"make it private (chmod 700 {path}) or choose another EINC_CACHE_DIR")
    try:
        os.chmod(path, 0o700)
        tightened = os.stat(path)
    except OSError as e:
        return f"others can write it (mode {_mode(st)}) and einc could not make it private ({e})"
    if _writable_by_others(tightened):
        return f"others can write it (mode {_mode(st)}) and einc could not make it private"
    _warn(("tightened", str(path)), f"einc: the kernel cache folder {path} was writable by others "
                                    f"(mode {_mode(st)}); einc made it private (mode 0700)")
    return None


def _refusal(root: Path, *, own: bool, create: bool, links: bool = True):
    """``(folder, why)`` where ``root`` or its ``kernels`` folder must not be used, else None."""
    why = _problem(root, own=own, create=create, links=links)
    if why is not None:
        return root, why
    kernels = root / "kernels"
    why = _problem(kernels, own=True, create=create, links=False)
    return (kernels, why) if why is not None else None


def _fallback_root(create: bool) -> Path:
    """``<tempdir>/einc-<uid>`` where it is safe, else a fresh private folder for this process."""
    global _private_tmp
    uid = _uid()
    shared = Path(tempfile.gettempdir()) / f"einc-{uid if uid is not None else 'user'}"
    refused = _refusal(shared, own=True, create=create, links=False)
    if refused is None:
        return shared
    with _lock:
        if _private_tmp is None or not _private_tmp.is_dir():
            _private_tmp = Path(tempfile.mkdtemp(prefix=f"einc-{uid}-"))       # 0700, a fresh name
            atexit.register(shutil.rmtree, _private_tmp, True)
        private = _private_tmp
    _make(private / "kernels", create)
    folder, why = refused
    _warn(("refused", str(folder)), f"einc: refusing the kernel cache folder {folder}: {why}. "
                                    f"Using {private} for this process")
    return private


def cache_root(create: bool = True) -> Path:
    """The checked cache folder: the configured one, or the fallback where it is refused."""
    root = config.cache_dir()
    refused = _refusal(root, own=config.cache_dir_is_default(), create=create)
    if refused is None:
        return root
    fallback = _fallback_root(create)
    folder, why = refused
    _warn(("refused", str(folder)), f"einc: refusing the kernel cache folder {folder}: {why}. "
                                    f"Kernel modules go to {fallback / 'kernels'} instead")
    return fallback


def kernel_dir(create: bool = True) -> Path:
    """The folder of kernel modules (``cache_root()/kernels``), created private unless ``create`` is False."""
    return cache_root(create) / "kernels"


# ----------------------------------------------------------------------- files

def read(path: Path) -> bytes | None:
    """The bytes of the regular file ``path``, or None (missing, unreadable, a link, a FIFO...)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (a temporary file in its folder, then ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)     # mode 0600
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


def store(name: str, source: str, directory: Path | None = None) -> Path:
    """Make ``directory/name.py`` hold exactly ``source`` and return its path.

    An identical file is only touched; anything else there (missing, unreadable, not
    UTF-8, different) is rewritten, and the folder is then brought back under the
    bound.  Raises OSError where the file cannot be written.
    """
    bound = config.cache_max_bytes()          # a bad setting fails before anything is written
    directory = Path(directory) if directory is not None else kernel_dir()
    path = directory / f"{name}.py"
    data = source.encode("utf-8")
    if read(path) == data:
        touch(path)
        return path
    write(path, data)
    evict(directory, bound, keep=path.name)
    return path


# ----------------------------------------------------------------------- bound

def is_module(name: str) -> bool:
    return name.startswith("einc_") and name.endswith(".py")


def _is_tmp(name: str) -> bool:
    return name.startswith(".einc_") and name.endswith(".tmp")


def _scan(directory: Path, now: float | None = None):
    """``[(mtime_ns, name, size)]`` of the modules in ``directory``; removes stale temporary files."""
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
        if is_module(entry.name):
            entries.append((st.st_mtime_ns, entry.name, st.st_size))
        elif now is not None and _is_tmp(entry.name) and now - st.st_mtime > STALE_TMP_SECONDS:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    return entries


def evict(directory: Path, bound: int, keep: str | None = None) -> list[str]:
    """Delete the least recently used modules while their total size exceeds ``bound``.

    ``keep`` (a file name) is never deleted.  Safe with other processes doing the
    same: a file someone else deleted first counts as gone.  Returns the names deleted.
    """
    entries = _scan(directory, now=time.time())
    total = sum(size for _, _, size in entries)
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
        total -= size
        removed.append(name)
    return removed


def usage(directory: Path | None = None) -> Usage:
    """How many modules the folder holds, their total size, and the bound (bytes)."""
    directory = Path(directory) if directory is not None else kernel_dir(create=False)
    entries = _scan(directory)
    return Usage(directory, len(entries), sum(size for _, _, size in entries), config.cache_max_bytes())


def modules(directory: Path | None = None) -> list[Path]:
    """The kernel modules in the folder, by name."""
    directory = Path(directory) if directory is not None else kernel_dir(create=False)
    return sorted(directory / name for _, name, _ in _scan(directory))


def clear(directory: Path | None = None) -> tuple[int, int]:
    """Delete the modules einc wrote, temporary files of interrupted writes, and bytecode
    that einc versions before the verified loader left; returns ``(modules, bytes)``
    deleted.  Files another process deletes meanwhile are skipped."""
    directory = Path(directory) if directory is not None else kernel_dir(create=False)
    count = removed = 0
    for _, name, size in _scan(directory):
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            continue
        count += 1
        removed += size
    if directory.is_dir():
        for tmp in directory.glob(".einc_*.tmp"):
            tmp.unlink(missing_ok=True)
        pycache = directory / "__pycache__"
        if pycache.is_dir():
            for pyc in pycache.glob("einc_*.pyc"):
                pyc.unlink(missing_ok=True)
            if not any(pycache.iterdir()):
                pycache.rmdir()
    return count, removed
