"""Generated modules live in real files: Triton reads a kernel's source with ``inspect``.

Each module is written atomically (a temporary file, then ``os.replace``) into the
cache directory and imported by path with ``importlib``, never with ``exec``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path

from .. import config
from ..errors import EincError

_modules: dict = {}
_lock = threading.Lock()


class KernelLoadError(EincError, RuntimeError):
    """A generated module failed to import; the message holds its numbered source."""


def kernel_dir() -> Path:
    return config.cache_dir() / "kernels"


def write(name: str, source: str, directory: Path | None = None) -> Path:
    """Write ``source`` to ``directory/name.py`` atomically (unchanged files are left alone)."""
    directory = Path(directory or kernel_dir())
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    try:
        if path.read_text() == source:
            return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load(name: str, source: str):
    """The module for kernel ``name``, written and imported on first use."""
    module = _modules.get(name)
    if module is not None:
        return module
    with _lock:
        module = _modules.get(name)
        if module is None:
            path = write(name, source)
            spec = importlib.util.spec_from_file_location(f"einc_kernels.{name}", path)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                numbered = "\n".join(f"{n + 1:4d}  {line}" for n, line in enumerate(source.splitlines()))
                raise KernelLoadError(f"generated kernel {name} failed to load from {path}: "
                                      f"{type(e).__name__}: {e}\n{numbered}") from e
            sys.modules[spec.name] = module
            _modules[name] = module
    return module
