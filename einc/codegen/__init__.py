"""Stage 5, codegen: a :class:`~einc.ir.Kernel` -> the source of a Triton module.

Pure Python: this package *writes* ``import triton`` but never runs it, so ``einc
dump`` works where no GPU stack is installed.  A module holds a header (equation,
step, shapes, dtypes, accumulator, offsets), one ``@triton.jit`` kernel written in the
style of Triton's matrix-multiplication tutorial, and a small host ``launch()`` that
allocates the contiguous output and computes the grid.  The same kernel always gives
byte-identical source: no timestamps, paths or set/dict-order dependence.
"""

from __future__ import annotations

from ..ir import MATMUL, Kernel
from . import fused, launcher, matmul, reduce
from .common import header


def render(kernel: Kernel) -> str:
    """The complete module source for ``kernel`` (a :class:`~einc.fuse.FusedKernel` too)."""
    if kernel.kind == "fused":
        return fused.render(kernel)
    body = matmul.kernel_source(kernel) if kernel.kind == MATMUL else reduce.kernel_source(kernel)
    return "\n".join([header(kernel), body, launcher.source(kernel)])


__all__ = ["render"]
