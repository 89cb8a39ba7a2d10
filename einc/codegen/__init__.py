"""Stage 5, codegen: a :class:`~einc.codegen.ir.Kernel` -> the source of a Triton module.

Pure Python: this package *writes* ``import triton`` but never runs it, so ``einc
dump`` works where no GPU stack is installed.  A module holds a header (equation,
step, dtypes, accumulator, offsets), one ``@triton.jit`` kernel written in the style of
Triton's matrix-multiplication tutorial, and a short description of how to launch it
(:mod:`.launcher`: a ``layout`` function, the line building its shared
:class:`einc.runtime.launch.Launcher`, and ``launch()``).  The same kernel always gives
byte-identical source: no timestamps, paths or set/dict-order dependence.
"""

from __future__ import annotations

from .ir import FUSED, MATMUL, Kernel
from . import fused, launcher, matmul, reduce
from .common import cache_source, header, stride_params

# The kernel's name while its source is hashed (einc.codegen.lower names every kernel by that hash).
NAME_PLACEHOLDER = "einc_kernel_name_placeholder"


def render(kernel: Kernel) -> str:
    """The complete module source for ``kernel`` (named ``kernel.name``, or the placeholder;
    a :class:`~einc.codegen.ir.FusedKernel` renders through :mod:`.fused`)."""
    name = kernel.name or NAME_PLACEHOLDER
    if kernel.kind == FUSED:
        return fused.render(kernel, name)
    stage = matmul if kernel.kind == MATMUL else reduce
    return "\n".join([header(kernel, name, launcher.imports(kernel)), stage.kernel_source(kernel, name),
                      launcher.source(kernel, name, stage.extents(kernel), stride_params(kernel))])


__all__ = ["render", "cache_source", "NAME_PLACEHOLDER"]
