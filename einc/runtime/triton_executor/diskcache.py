"""The folder of generated kernel modules: private, verified, bounded.

einc writes each generated module to ``<cache folder>/kernels/<name>.py`` so that
Triton, tracebacks and ``einc cache list`` can show it; the loader never imports that
file: it runs the source einc generated, held in memory (``runtime/triton_executor/loader.py``).
This module keeps the files honest and the folder safe, by the rules of
:mod:`einc.cachefiles` (shared with the remembered paths):

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
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from ... import cachefiles, config
from ...cachefiles import problem, read, touch, write

KERNELS = "the kernel cache folder"     # what the folders are, in warnings
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
    cachefiles.forget()
    with _lock:
        _private_tmp = None


def _refusal(root: Path, *, own: bool, create: bool, links: bool = True):
    """``(folder, why)`` where ``root`` or its ``kernels`` folder must not be used, else None."""
    why = problem(root, own=KERNELS if own else "", create=create, links=links)
    if why is not None:
        return root, why
    kernels = root / "kernels"
    why = problem(kernels, own=KERNELS, create=create, links=False)
    return (kernels, why) if why is not None else None


def _fallback_root(create: bool) -> Path:
    """``<tempdir>/einc-<uid>`` where it is safe, else a fresh private folder for this process."""
    global _private_tmp
    uid = cachefiles.uid()
    shared = Path(tempfile.gettempdir()) / f"einc-{uid if uid is not None else 'user'}"
    refused = _refusal(shared, own=True, create=create, links=False)
    if refused is None:
        return shared
    with _lock:
        if _private_tmp is None or not _private_tmp.is_dir():
            _private_tmp = Path(tempfile.mkdtemp(prefix=f"einc-{uid}-"))       # 0700, a fresh name
            atexit.register(shutil.rmtree, _private_tmp, True)
        private = _private_tmp
    cachefiles.make(private / "kernels", create)
    folder, why = refused
    cachefiles.warn_once(("refused", str(folder)), f"einc: refusing the kernel cache folder {folder}: {why}. "
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
    cachefiles.warn_once(("refused", str(folder)), f"einc: refusing the kernel cache folder {folder}: {why}. "
                                                   f"Kernel modules go to {fallback / 'kernels'} instead")
    return fallback


def kernel_dir(create: bool = True) -> Path:
    """The folder of kernel modules (``cache_root()/kernels``), created private unless ``create`` is False."""
    return cache_root(create) / "kernels"


# ----------------------------------------------------------------------- files

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


def _scan(directory: Path, now: float | None = None):
    """``[(mtime_ns, name, size)]`` of the modules in ``directory``; with ``now``, removes stale temporary files."""
    return cachefiles.scan(directory, is_module, now)


def evict(directory: Path, bound: int, keep: str | None = None) -> list[str]:
    """Delete the least recently used modules while their total size exceeds ``bound``
    (``keep``, a file name, never; :func:`einc.cachefiles.evict`).  Returns the names deleted."""
    return cachefiles.evict(directory, _scan(directory, now=time.time()), bound, keep)


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
        if pycache.is_dir() and not pycache.is_symlink():     # (never what a link points at, outside the cache)
            for pyc in pycache.glob("einc_*.pyc"):
                pyc.unlink(missing_ok=True)
            if not any(pycache.iterdir()):
                pycache.rmdir()
    return count, removed
