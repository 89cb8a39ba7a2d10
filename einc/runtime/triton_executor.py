"""The Triton executor: each plan step runs one generated kernel.

Lowering and rendering are pure (``einc.lower``, ``einc.codegen``); this module loads
the rendered modules and chains their ``launch`` functions.  Kernels read every
operand through its strides, so nothing is permuted, reshaped or copied first, and
each writes a fresh contiguous result.
"""

from __future__ import annotations

import os
import sys

from ..codegen import render
from ..lower import lower_plan
from .loader import load
from .program import unroll


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def available() -> bool:
    """Whether triton can be imported."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_interpreter() -> bool:
    """Run generated kernels with Triton's CPU interpreter (for CPU tensors).

    Triton reads ``TRITON_INTERPRET`` when it is imported; returns False when it was
    imported without it, too late to switch.
    """
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    if "triton" in sys.modules:
        return False
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def kernels(plan, dtype, shapes):
    """The plan's kernels (IR) for operands of ``dtype`` and ``shapes``."""
    return lower_plan(plan, dtype_name(dtype), shapes)


def compile_plan(plan, dtype, shapes):
    """``run(operands)`` launching one generated kernel per step."""
    launches = [load(k.name, render(k)).launch for k in kernels(plan, dtype, shapes)]
    return unroll(plan, launches)
