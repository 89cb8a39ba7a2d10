"""Stage 5, codegen: a :class:`~einc.codegen.ir.Kernel` -> the source of a Triton module.

Pure Python: this package *writes* ``import triton`` but never runs it, so ``einc
dump`` works where no GPU stack is installed.  A module holds a header (equation,
step, shapes, dtypes, accumulator, offsets), one ``@triton.jit`` kernel written in the
style of Triton's matrix-multiplication tutorial, and a small host ``launch()`` that
allocates the contiguous output and computes the grid.  The same kernel always gives
byte-identical source: no timestamps, paths or set/dict-order dependence.
"""

from __future__ import annotations

from .ir import FUSED, MATMUL, Kernel
from . import fused, launcher, matmul, reduce
from .common import cache_source, finish_source, header

# The kernel's name while its source is hashed (einc.codegen.lower names every kernel by that hash).
NAME_PLACEHOLDER = "einc_kernel_name_placeholder"


def render(kernel: Kernel) -> str:
    """The complete module source for ``kernel`` (named ``kernel.name``, or the placeholder;
    a :class:`~einc.planner.fuse.FusedKernel` renders through :mod:`.fused`)."""
    name = kernel.name or NAME_PLACEHOLDER
    if kernel.kind == FUSED:
        return fused.render(kernel, name)
    body = matmul.kernel_source(kernel, name) if kernel.kind == MATMUL else reduce.kernel_source(kernel, name)
    return "\n".join([header(kernel, name), body, finish_source(name), launcher.source(kernel, name)])


__all__ = ["render", "cache_source", "NAME_PLACEHOLDER"]
