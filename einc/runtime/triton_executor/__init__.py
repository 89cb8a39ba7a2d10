"""The Triton executor: each plan step runs one generated kernel.

Lowering and rendering are pure (``einc.codegen.lower.modules`` names and renders each
kernel once); this module loads the rendered modules and chains their ``launch``
functions.  Kernels read every operand through its strides, so nothing is permuted,
reshaped or copied first, and each writes a fresh contiguous result.

The code generator (:mod:`einc.codegen`) is imported by the functions here that lower,
render or check kernels, when a call first wants them: a process whose calls all run on the
torch executor (CPU tensors, the default backend) never imports it
(``tests/test_layering.py``).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from ... import config
from ...planner import fuse
from .loader import load


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def supports(dtypes) -> bool:
    """Whether generated kernels handle operands of these (torch) dtypes."""
    from ...codegen.lower import supported
    return supported(dtype_name(d) for d in dtypes)


def installed() -> bool:
    """Whether triton is installed (without importing it)."""
    return importlib.util.find_spec("triton") is not None


def interpreter_possible() -> bool:
    """Whether :func:`use_interpreter` would say yes (without setting anything)."""
    wanted = config.triton_interpret()
    return wanted if wanted is not None else "triton" not in sys.modules


def claim_interpreter() -> None:
    """Set ``TRITON_INTERPRET=1`` now where ``EINC_BACKEND=triton`` will run kernels on
    CPU tensors (no CUDA device) and nothing set it: called before einc's front door
    imports torch._dynamo, which imports triton -- after that it is too late to switch
    (triton's own ``@jit`` helpers are compiled functions then, which an interpreted
    kernel cannot call).  A bad ``EINC_BACKEND`` is reported where it is read."""
    try:
        wanted = config.backend() == "triton" and config.triton_interpret() is None
    except Exception:   # noqa: BLE001 - the setting's own error comes when a key is planned
        return
    if wanted and "triton" not in sys.modules:
        import torch
        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"


def use_interpreter() -> bool:
    """Whether generated kernels run under Triton's CPU interpreter (for CPU tensors).

    An explicit ``TRITON_INTERPRET`` decides, read as Triton reads it (``0`` or ``no``
    mean no); where it is unset einc sets it, unless triton was already imported
    without it, too late to switch.  A true value is spelled ``1`` afterwards, the one
    the generated launchers test.
    """
    wanted = config.triton_interpret()
    if wanted is None and "triton" in sys.modules:
        return False
    if wanted is None or wanted:
        os.environ["TRITON_INTERPRET"] = "1"
        return True
    return False


def program(plan, dtype):
    """The plan as generated kernels run it: steps fused where that saves memory traffic
    (:mod:`einc.planner.fuse`); ``plan`` itself where nothing fuses."""
    return fuse.fuse_plan(plan, dtype_name(dtype))


def kernels(plan, dtype, shapes, strides=None, unit_tiles=True):
    """The plan's kernels (:class:`einc.codegen.Module`: the named IR and its source) for
    operands of ``dtype`` and ``shapes`` (fused steps included),
    laid out for the operands' ``strides`` (contiguous where not given: any strides still run
    right); ``unit_tiles=False``: the ``plain`` lowering (:func:`einc.codegen.lower.lower_step`)."""
    from ...codegen.lower import modules
    return modules(plan, dtype_name(dtype), shapes, strides, unit_tiles)


def launch_of(module):
    """A kernel's ``launch`` function (its :class:`einc.codegen.Module` written into the kernel
    cache, its first line saying how the cache regenerates it, and loaded)."""
    from ...codegen import cache_source
    return load(module.name, cache_source(module.source)).launch


def screen_of(launch):
    """The ``screen`` function beside a ``launch`` function (the same generated module's:
    one config, untuned; measure mode's first round, :func:`einc.runtime.select.measure`);
    None for a function that is not a generated module's."""
    return getattr(launch, "__globals__", {}).get("screen")


def plain_kernels(plan, dtype, shapes, strides=None, default=None) -> dict:
    """``{step: kernel}`` of the ``plain`` kernels that differ from the default ones
    (``default``, where the caller lowered them already): the steps where a stranded
    unit-stride index was moved into the tile's T axis or a 2-D N block (elsewhere the
    two lowerings are the same kernel).  Not loaded: measure mode loads one
    (:func:`launch_of`) only to time it or to run it."""
    default = default or kernels(plan, dtype, shapes, strides)
    plain = kernels(plan, dtype, shapes, strides, unit_tiles=False)
    return {s: p for s, (k, p) in enumerate(zip(default, plain)) if p.name != k.name}
