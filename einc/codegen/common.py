"""Naming and text helpers shared by the kernel templates: one place owns every name."""

from __future__ import annotations

from .ir import Kernel, Operand, index_name

# What a module's first line says regenerates it: the golden kernels' command (as rendered),
# and, for the modules einc writes into its kernel cache, the cache's (see cache_source).
SUITE_ORIGIN = "(regenerate: einc dump --suite)"
CACHE_ORIGIN = "(regenerate: einc cache clear; the next call that runs it writes it again)"


def idx(i: int) -> str:
    """The variable holding index ``i`` inside a kernel: ``i_a``."""
    return f"i_{index_name(i)}"


def size(i: int) -> str:
    return f"size_{index_name(i)}"


def stride(op: Operand | str, i: int) -> str:
    name = op if isinstance(op, str) else op.name
    return f"stride_{name}_{index_name(i)}"


def size_params(kernel: Kernel) -> list[str]:
    return [size(i) for _, group in kernel.groups for i in group]


def stride_params(kernel: Kernel) -> list[str]:
    """The inputs' strides (the output is contiguous: its strides are products of sizes)."""
    group_indices = [i for _, group in kernel.groups for i in group]
    return [stride(op, i) for op in kernel.inputs for i in group_indices if i in op.dims]


def output_strides(kernel: Kernel, pad: str) -> list[str]:
    """Lines defining the contiguous output's strides from the (compile-time) sizes."""
    dims = kernel.output.dims
    return [f"{pad}{stride(kernel.output, i)} = "
            + (" * ".join(size(j) for j in dims[d + 1:]) or "1") for d, i in enumerate(dims)]


def product(indices) -> str:
    """The extent of a group, from its indices' sizes."""
    return " * ".join(size(i) for i in indices) if indices else "1"


def split(flat: str, indices, pad: str) -> list[str]:
    """Lines that split the flat offsets ``flat`` into ``indices`` (last one fastest).

    The sizes are compile-time constants, so Triton turns ``%`` and ``//`` into shifts
    and multiplications and knows the exact contiguity of the result.
    """
    indices = list(indices)
    if not indices:
        return []
    if len(indices) == 1:
        return [f"{pad}{idx(indices[0])} = {flat}"]
    rest = f"rest_{flat}"       # one name per split: a loop must not re-type another split's variable
    lines = [f"{pad}{rest} = {flat}"]
    for i in reversed(indices[1:]):
        lines += [f"{pad}{idx(i)} = {rest} % {size(i)}", f"{pad}{rest} = {rest} // {size(i)}"]
    lines.append(f"{pad}{idx(indices[0])} = {rest}")
    return lines


def offset(op: Operand | str, indices, dims, flat: str) -> str:
    """``i_x * stride_a_x + ...`` over the ``indices`` that ``dims`` holds (``flat * 0`` if none)."""
    terms = [f"{idx(i)} * {stride(op, i)}" for i in indices if i in dims]
    return " + ".join(terms) if terms else f"{flat} * 0"


def dot(kernel: Kernel, pad: str) -> list[str]:
    """The lines adding the product of the ``a`` and ``b`` tiles into ``acc``, indented by
    ``pad``: at torch's fp32 precision (``PRECISION``), in fp64 for fp64, and for bfloat16
    upcast first under the interpreter (``UPCAST``), which has no bfloat16 product."""
    L = []
    if kernel.dtype == "bfloat16":
        L += [f"{pad}if UPCAST:  # Triton's CPU interpreter has no bfloat16 matrix product",
              f"{pad}    a = a.to(tl.float32)",
              f"{pad}    b = b.to(tl.float32)"]
    if kernel.dtype == "float32":
        L.append(f"{pad}acc = tl.dot(a, b, acc, input_precision=PRECISION)")
    elif kernel.dtype == "float64":
        L.append(f"{pad}acc = tl.dot(a, b, acc, out_dtype=tl.float64)")
    else:
        L.append(f"{pad}acc = tl.dot(a, b, acc)")
    return L


def wrap(items, pad, width=100):
    """Join ``items`` with spaces into lines no longer than ``width``."""
    lines, line = [], pad
    for item in items:
        if len(line) + len(item) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = pad
        line += item + " "
    if line.strip():
        lines.append(line.rstrip())
    return lines


def signature(name: str, groups, constexprs) -> list[str]:
    """``@triton.jit`` and the ``def`` line, parameters grouped under comments.

    ``groups`` holds ``(comment, runtime parameter names)`` pairs, ``constexprs`` the
    same for compile-time parameters (every runtime one comes first).
    """
    lines = ["@triton.jit", f"def {name}("]
    for comment, params in groups:
        lines += [f"    # {comment}"] + wrap([p + "," for p in params], "    ")
    for comment, params in constexprs:
        if params:
            lines += [f"    # {comment}"] + wrap([p + ": tl.constexpr," for p in params], "    ")
    return lines + ["):"]


def grouped_tiles(wide: str, columns: str = "tl.cdiv(N, BLOCK_N)") -> list[str]:
    """The kernel lines that map ``pid`` (after the batch entry is taken out of it) to a
    tile ``(pid_m, pid_n)``, in groups of ``GROUP_M`` rows of tiles (L2 reuse); ``wide``
    is the 64-bit cast appended where offsets need it (``""`` otherwise); ``columns``, the
    number of tiles along N."""
    return [
        "    num_pid_m = tl.cdiv(M, BLOCK_M)",
        f"    num_pid_n = {columns}",
        "    tiles = num_pid_m * num_pid_n",
        f"    pid_batch = (pid // tiles){wide}",
        "    pid = pid % tiles",
        "    num_pid_in_group = GROUP_M * num_pid_n",
        "    group_id = pid // num_pid_in_group",
        "    first_pid_m = group_id * GROUP_M",
        "    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
        "    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)",
        "    pid_n = (pid % num_pid_in_group) // group_size_m",
    ]


def cache_source(source: str) -> str:
    """``source`` as einc's kernel cache writes it: its first line names the command that
    regenerates a cache module, not the golden kernels' (the name, a hash of the source with
    the golden line, is unchanged: the line is the same for every module)."""
    return source.replace(SUITE_ORIGIN, CACHE_ORIGIN, 1)


def summary(source_head: str) -> str:
    """``"<terms>-><result>  (kind)"`` (canonical indices) from the first lines of a module
    :func:`header` wrote (for ``einc cache list``); empty for anything else."""
    head = (source_head.splitlines() + [""] * 4)[:4]
    line = next((h.split(":", 1)[1].strip() for h in head if h.startswith("# computes")), "")
    if not line:
        return ""
    computes, _, kind = line.partition("  (")
    return computes.replace(", ", ",").replace(" -> ", "->") + "  (" + kind.split(";", 1)[0].rstrip(")") + ")"


def header(kernel: Kernel, name: str, imports: str) -> str:
    """The module's first lines: what it computes, in canonical indices, and nothing about
    any one plan or shape (those are in ``plan.txt`` and ``explain``), so that one module
    serves every shape and plan with this structure."""
    groups = "; ".join(f"{g}: {''.join(index_name(i) for i in ix)}" for g, ix in kernel.groups if ix)
    terms = ", ".join("".join(index_name(i) for i in op.dims) for op in kernel.inputs)
    args = ", ".join(kernel.params)
    return "\n".join([
        f"# {name}: generated by einc, do not edit {SUITE_ORIGIN}",
        "#",
        f"# computes     : {terms} -> {''.join(index_name(i) for i in kernel.output.dims)}"
        f"  ({kernel.kind}; {groups})",
        f"# launch({args}): operands in the equation's order" + ("" if list(kernel.params) == sorted(kernel.params)
                                                                else "; A and B swapped so C's unit stride is along N"),
        f"# dtypes       : {kernel.dtype} operands and output, {kernel.acc} accumulator",
        "# sizes        : compile-time constants (Triton compiles one kernel per shape from this module)",
        f"# stride class : any strides (0 = broadcast, a repeated index = diagonal); "
        f"{'64' if kernel.int64 else '32'}-bit offsets",
        "",
        "import triton",
        "import triton.language as tl",
        "",
        imports,
        "",
        "",
    ])
