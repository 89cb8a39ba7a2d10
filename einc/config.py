"""Environment switches, read in one place.

``EINC_CACHE_SIZE``  how many plans the in-memory cache keeps (default 4096).
``EINC_CACHE_DIR``   where generated kernel modules are written (default
                     ``$XDG_CACHE_HOME/einc`` or ``~/.cache/einc``).
``EINC_BACKEND``     ``auto`` (default): generated Triton kernels for CUDA tensors, the
                     torch executor otherwise; ``torch``: always the torch executor;
                     ``triton``: generated kernels for CPU tensors too, run by Triton's
                     interpreter (einc sets ``TRITON_INTERPRET=1`` for that).
"""

from __future__ import annotations

import os
from pathlib import Path

BACKENDS = ("auto", "torch", "triton")


def cache_size() -> int:
    return int(os.environ.get("EINC_CACHE_SIZE", "4096"))


def cache_dir() -> Path:
    root = os.environ.get("EINC_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "einc"


def backend() -> str:
    value = os.environ.get("EINC_BACKEND", "auto").strip().lower() or "auto"
    if value not in BACKENDS:
        raise ValueError(f"EINC_BACKEND={value!r}: expected one of {', '.join(BACKENDS)}")
    return value
