"""Stage 5, codegen: a :class:`~einc.codegen.ir.Kernel` -> the source of a Triton module.

Pure Python: this package *writes* ``import triton`` but never runs it, so ``einc
dump`` works where no GPU stack is installed.  A module holds a header (equation,
step, dtypes, accumulator, offsets), one ``@triton.jit`` kernel written in the style of
Triton's matrix-multiplication tutorial (a 16-bit matrix product of plain groups also
its TMA variant, :mod:`.matmul_tma`, which the launcher takes on Hopper), and a short description of how to launch it
(:mod:`.launcher`: a ``layout`` function, the line building its shared
:class:`einc.runtime.triton_executor.launch.Launcher`, and ``launch()``).  The same kernel always gives
byte-identical source: no timestamps, paths or set/dict-order dependence.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import NamedTuple

from . import fused, launcher, matmul, matmul_tma, reduce
from .common import cache_source, header, stride_params
from .ir import FUSED, MATMUL, REDUCE, Kernel, index_name

# The kernel's name while its source is hashed (einc.codegen.lower names every kernel by that hash).
NAME_PLACEHOLDER = "einc_kernel_name_placeholder"


def render(kernel: Kernel) -> str:
    """The complete module source for ``kernel`` (named ``kernel.name``, or the placeholder;
    a :class:`~einc.codegen.ir.FusedKernel` renders through :mod:`.fused`)."""
    name = kernel.name or NAME_PLACEHOLDER
    if kernel.kind == FUSED:
        return fused.render(kernel, name)
    stage = matmul if kernel.kind == MATMUL else reduce
    variant = [matmul_tma.kernel_source(kernel, name)] if matmul_tma.eligible(kernel) else []
    return "\n".join([header(kernel, name, launcher.imports(kernel)), stage.kernel_source(kernel, name), *variant,
                      launcher.source(kernel, name, stage.extents(kernel), stride_params(kernel))])


class Module(NamedTuple):
    """A named kernel and the module source it renders to (rendered once, by :func:`named`)."""
    kernel: Kernel
    source: str

    @property
    def name(self) -> str:
        return self.kernel.name


def named(kernel: Kernel) -> Module:
    """``kernel`` (unnamed IR: a :class:`Kernel` or :class:`~einc.codegen.ir.FusedKernel`)
    named by a hash of exactly the module source it renders to -- one rule for every kind
    of kernel -- together with that source: the kernel is rendered once, with the
    placeholder, which the name then replaces."""
    source = render(dataclasses.replace(kernel, name=""))
    assert NAME_PLACEHOLDER in source
    digest = hashlib.sha256(source.encode()).hexdigest()[:8]
    short = "_".join("".join(index_name(i) for i in op.dims) for op in kernel.inputs + (kernel.output,))
    prefix = {MATMUL: "mm", REDUCE: "red", FUSED: "fused"}[kernel.kind]
    name = f"einc_{prefix}_{short}_{digest}"
    return Module(dataclasses.replace(kernel, name=name), source.replace(NAME_PLACEHOLDER, name))


__all__ = ["render", "named", "Module", "cache_source", "NAME_PLACEHOLDER"]
