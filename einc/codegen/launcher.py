"""The host side of a generated module: a short description of how to launch its kernel.

Every generated module (matmul, reduce and fused) ends the same way: a ``layout``
function reading one launch's output shape, stride arguments and sizes from the operands,
one line building its :class:`einc.runtime.triton_executor.launch.Launcher` (which holds the autotuner, the
configs, the layout cache, the K split and its ``finish`` pass, the compiled-launch fast
path and the precision policy, once for every module), and ``launch()``: look the layout
up, allocate the output, run.  Text only: codegen never imports the runtime.
"""

from __future__ import annotations

from . import matmul_tma
from .common import size, stride, stride_params
from .common import wrap as _wrap
from .ir import FUSED, MATMUL, index_name


def size_sources(k) -> dict[int, str]:
    """For each index, the expression reading its size from an operand's shape."""
    where: dict[int, str] = {}
    for op in k.inputs:
        for d, i in enumerate(op.dims):
            where.setdefault(i, f"{op.name}.shape[{d}]")
    return where


def stride_source(k, param: str) -> str:
    """The expression reading the stride argument ``param`` from the operands (a repeated
    index: the sum of its strides) or, for the output ``c``, the contiguous stride of a
    new tensor of the output's sizes."""
    for op in k.inputs:
        for i in dict.fromkeys(op.dims):
            if stride(op, i) == param:
                dims = [d for d, j in enumerate(op.dims) if j == i]
                return " + ".join(f"{op.name}.stride({d})" for d in dims)
    for d, i in enumerate(k.output.dims):
        if stride(k.output, i) == param:
            return " * ".join(size(j) for j in k.output.dims[d + 1:]) or "1"
    raise AssertionError(param)


def table(k) -> str:
    """The name of the autotuner's config table (:func:`einc.runtime.triton_executor.launch.config_table`)."""
    if k.kind == FUSED:
        return "fused"
    if k.kind == MATMUL:
        return "matmul-t" if k.group("t") else "matmul-nt" if k.group("nt") else "matmul"
    return ("reduce-k" if k.fast_k else "reduce-o") if k.group("k") else "elementwise"


def merged_k(k) -> str | None:
    """The ``MERGED_K`` expression where K has several indices (else None): whether they walk
    memory as one index in every operand."""
    kk = k.group("k")
    if k.kind == FUSED or len(kk) < 2:
        return None
    ksizes = "(" + ", ".join(size(i) for i in kk) + ")"
    return " and ".join(f"merged({ksizes}, (" + ", ".join(stride_source(k, stride(op, i)) if i in op.dims else "0"
                                                           for i in kk) + "))" for op in k.inputs)


def imports(k) -> str:
    """The module's import of the shared launcher."""
    return "from einc.runtime.triton_executor.launch import Launcher" + (", merged" if merged_k(k) else "") + \
        (", dropped" if getattr(k, "drop", ()) else "") + (", tma_axis" if matmul_tma.eligible(k) else "")


def source(k, name: str, extents: dict[str, str], strides: list[str]) -> str:
    """The host side: ``layout``, the launcher, ``launch`` and ``screen``.  ``extents``: group extent ->
    its expression of sizes; ``strides``: the kernel's stride parameters, in order."""
    inputs = [op.name for op in k.inputs]
    dropping = dict(getattr(k, "drop", ()))     # a new layout is set up on views without them
    operands = "(" + ", ".join(f"dropped({t}, {dropping[t]!r})" if t in dropping else t for t in inputs) + \
        ("," if len(inputs) == 1 else "") + ")"
    params = list(getattr(k, "params", inputs))
    L = [f"def layout({', '.join(inputs)}):",
         f"    \"\"\"One launch for operands laid out as {', '.join(inputs)} are: the output's shape, the stride",
         "    arguments (between the pointers and scale) and the sizes and group extents.\"\"\""]
    where = size_sources(k)
    for i in dict.fromkeys(j for _, g in k.groups for j in g):
        L.append(f"    {size(i)} = {where[i]}")
    out_sizes = [size(i) for i in k.output.dims]
    L += ["    strides = ("] + _wrap([stride_source(k, p) + "," for p in strides], "        ") + ["    )"]
    tma = matmul_tma.eligible(k)
    if tma:
        L += matmul_tma.axes(k, lambda p: stride_source(k, p))
    sizes = [f"{size(i)}={size(i)}," for _, g in k.groups for i in g] + [f"{g}={e}," for g, e in extents.items()]
    merged = merged_k(k)
    if merged:
        sizes.append(f"MERGED_K={merged},")
    if tma:
        sizes.append("TMA=tma,")
    L += ["    sizes = dict("] + _wrap(sizes, "        ") + ["    )"]
    L += ["    return (" + ", ".join(out_sizes) + ("," if len(out_sizes) == 1 else "") + "), strides, sizes", "", ""]
    L += [f"launcher = Launcher({name}, layout, kind=\"{k.kind}\", dtype=\"{k.dtype}\", configs=\"{table(k)}\", "
          f"offsets={64 if k.int64 else 32}" + (f", tma={name}_tma)" if tma else ")"),
          "_layouts, forget = launcher.layouts, launcher.forget", "", ""]
    key = [f"{t}.shape, {t}.stride(), {t}.dtype, {t}.data_ptr() % 16," for t in inputs]
    key[-1] += f" {inputs[0]}.get_device(), scale != 1.0)"
    first = presums(k)
    L += [f"def launch({', '.join(params)}, scale=1.0):",
          f"    \"\"\"{describe(k)}, into a new contiguous tensor.\"\"\""] + first + [
          f"    key = ({key[0]}"] + [f"           {item}" for item in key[1:]] + [
        "    known = _layouts.get(key)",
        "    if known is None:",
        f"        return launcher.first(key, {operands}, scale)",
        f"    c = {inputs[0]}.new_empty(known.shape)  # {inputs[0]}'s dtype and device",
        f"    known.run(({', '.join(inputs)}, c), scale)",
        "    return c",
        "",
        "",
        f"def screen({', '.join(params)}, scale=1.0):",
        "    \"\"\"launch() with one config, untuned (measure mode's first round); keeps nothing.\"\"\""] + first + [
        f"    return launcher.screen({operands}, scale)",
        ""]
    return "\n".join(L)


def presums(k) -> list[str]:
    """The lines of ``launch`` summing an operand's indices summed in it only, once, where
    the kernel would sum them again for many outputs (``Kernel.presum``): a torch sum
    (a 16-bit operand's accumulated in float32 and rounded to its dtype, as torch.einsum's
    own sums are)."""
    return [f"    {name} = {name}.sum({axes!r})  # summed in {name.upper()} only: once, before the kernel"
            for name, axes in getattr(k, "presum", ())]


def describe(k) -> str:
    """``kind: terms -> output`` in canonical indices (``launch``'s docstring)."""
    terms = ", ".join("".join(index_name(i) for i in op.dims) for op in k.inputs)
    return f"{k.kind}: {terms} -> {''.join(index_name(i) for i in k.output.dims)}"


__all__ = ["source", "describe", "imports", "stride_params"]
