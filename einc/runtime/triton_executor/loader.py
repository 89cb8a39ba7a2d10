"""Run generated modules from the source einc generated, never from what is on disk.

Each module is written to (or verified in) the kernel cache folder by
``runtime/triton_executor/diskcache.py``, because Triton, tracebacks and ``einc cache list`` read
kernels' source by file name.  The module itself is compiled from the source text
held in memory (``compile(source, path, "exec")``) and executed into a fresh module
object, so neither a changed ``.py`` nor any bytecode (``__pycache__``) is ever run:
importlib is not involved, and nothing is written to ``__pycache__``.  The source is
also registered with ``linecache`` under the file's path, pinned (no modification
time, so ``linecache.checkcache`` keeps it), so that ``inspect.getsource`` (Triton's
``@jit`` and its interpreter) sees exactly that source even if the file is later
changed or evicted.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
import types

from ...errors import KernelLoadError, warn
from . import compat, diskcache

_modules: dict = {}
_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)   # a fork while another thread holds it
_warned: set = set()


class _SourceLoader:
    """``module.__loader__``: hands ``linecache``/``inspect`` the in-memory source."""

    def __init__(self, source: str):
        self._source = source

    def get_source(self, name):
        return self._source


def _pin_source(path: str, source: str) -> None:
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    linecache.cache[path] = (len(source), None, lines, path)


def _file_for(name: str, source: str):
    """The path of the verified file for ``name`` (rewritten where it differs).

    Where the folder cannot be written, warns once and returns the path the file would
    have: the module still runs from memory, and its source is still readable.
    """
    try:
        return diskcache.store(name, source)
    except OSError as e:
        try:
            directory = diskcache.kernel_dir(create=False)
        except OSError:
            directory = None
        key = str(directory)
        if key not in _warned:
            _warned.add(key)
            warn(f"einc: cannot write kernel modules to {directory} ({e}); running them from "
                 "memory (set EINC_CACHE_DIR to a folder you can write)")
        return (directory / f"{name}.py") if directory is not None else f"<einc kernel {name}>"


def loaded() -> int:
    """How many generated modules this process has loaded."""
    return len(_modules)


def forget() -> None:
    """Forget the loaded modules and the warnings given, as in a new process
    (``einc.cache_clear``): the next use of a kernel verifies and loads its file again."""
    with _lock:
        _modules.clear()
        _warned.clear()
    diskcache.forget()


def load(name: str, source: str):
    """The module for kernel ``name``, run from ``source`` on first use."""
    module = _modules.get(name)
    if module is not None:
        return module
    with _lock:
        module = _modules.get(name)
        if module is None:
            path = str(_file_for(name, source))
            module = types.ModuleType(f"einc_kernels.{name}")
            module.__file__ = path
            module.__loader__ = _SourceLoader(source)
            _pin_source(path, source)
            sys.modules[module.__name__] = module       # as importlib does, for the module's own lookups
            try:
                code = compile(source, path, "exec", dont_inherit=True)
                exec(code, module.__dict__)
            except Exception as e:
                sys.modules.pop(module.__name__, None)
                numbered = "\n".join(f"{n + 1:4d}  {line}" for n, line in enumerate(source.splitlines()))
                raise KernelLoadError(f"generated kernel {name} failed to load from {path}: "
                                      f"{type(e).__name__}: {e}\n{numbered}") from e
            if getattr(module.__dict__.get("launcher"), "interpret", False):    # under Triton's CPU interpreter
                compat.triton_interpreter()
            _modules[name] = module
    return module
