"""The TMA variant of the ``matmul`` template: persistent tiles read through tensor descriptors.

Written beside a 16-bit ``matmul`` kernel whose groups are batch, rows, columns and K only
(:func:`eligible`), as ``<name>_tma``: the same arguments, each operand read through a
device-side tensor descriptor (``tl.make_tensor_descriptor``) over its flat groups --
``[BATCH, M, K]`` for A, or ``[BATCH, K, M]`` where A's unit stride is along M, and so
for B and C, the batch a leading axis of block 1 -- and a persistent grid: each program
walks tiles ``program_id, program_id + num_programs, ...`` (Triton's persistent matmul
tutorial).  On Hopper the descriptor loads are ``cp.async.bulk.tensor`` copies, the
out-of-range part of a tile is zero-filled by the copy (remainders need no masks) and the
result goes back through a descriptor too where C's strides allow it (``TMA_C == 1``),
else through a masked store.  Which axis of each operand has unit stride, and whether a
descriptor can read it at all, is the launcher's to check per layout (the module's
``layout`` computes it, :func:`axes`; :mod:`einc.runtime.triton_executor.tma`).
"""

from __future__ import annotations

from .common import dot, output_strides, signature, size, size_params, stride, stride_params
from .ir import MATMUL, Kernel

SIXTEEN_BIT = ("float16", "bfloat16")


def eligible(k: Kernel) -> bool:
    """Whether ``k`` gets a TMA variant: a 16-bit matrix product of plain groups (no tile
    axis T, no 2-D block, nothing summed in one operand only) with rows, columns and K."""
    if k.kind != MATMUL or k.dtype not in SIXTEEN_BIT or len(k.inputs) != 2:
        return False
    if any(k.group(g) for g in ("t", "nt", "kt", "ka", "kb")) or not all(k.group(g) for g in ("m", "n", "k")):
        return False
    a, b = k.inputs
    c = k.output
    need = ((a, ("batch", "m", "k")), (b, ("batch", "k", "n")), (c, ("batch", "m", "n")))
    return all(i in op.dims for op, groups in need for g in groups for i in k.group(g))


def _tuple(items) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def axes(k: Kernel, stride_of) -> list[str]:
    """The lines (in the module's ``layout``) setting ``tma`` to A's, B's and C's descriptor
    axes (:func:`einc.runtime.triton_executor.tma.axis`); ``stride_of(param)`` reads a
    stride argument (or C's contiguous stride) from the operands."""
    a, b = k.inputs
    c = k.output
    L = ["    # the descriptors' axes of A, B and C, for the TMA variant (einc.runtime.triton_executor.tma.axis)",
         "    tma = ("]
    for op, groups in ((a, ("batch", "m", "k")), (b, ("batch", "k", "n")), (c, ("batch", "m", "n"))):
        parts = [_tuple([_tuple([size(i) for i in k.group(g)]), _tuple([stride_of(stride(op, i)) for i in k.group(g)])])
                 for g in groups]
        L.append(f"        tma_axis({_tuple(parts)}, 2),")
    return L + ["    )"]


def _descriptor(op: str, shape, strides, block, batch: str) -> str:
    lead, one = ("BATCH, ", f"{batch}, ") if batch else ("", "")
    return (f"tl.make_tensor_descriptor({op}_ptr, shape=[{lead}{shape}], strides=[{one}{strides}, 1],\n"
            f"{' ' * 43}block_shape=[{'1, ' if batch else ''}{block}])")


def _load(op: str, at: str, shape: str, transposed: bool, batch: bool) -> str:
    tile = f"{op}_desc.load([{'pid_batch, ' if batch else ''}{at}])"
    if batch:
        tile = f"tl.reshape({tile}, ({shape}))"
    return f"{tile}.T" if transposed else tile


def _widened(expr: str, wide: str) -> str:
    return f"({expr}){wide}" if wide else expr


def kernel_source(k: Kernel, name: str) -> str:
    a, b = k.inputs
    c = k.output
    batch, m, n, kk = k.group("batch"), k.group("m"), k.group("n"), k.group("k")
    wide = ".to(tl.int64)" if k.int64 else ""
    meta = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "HAS_SCALE", "LAYOUT"] + \
        (["UPCAST"] if k.dtype == "bfloat16" else []) + ["TMA_A", "TMA_B", "TMA_C"]
    L = signature(f"{name}_tma", [("pointers", ["a_ptr", "b_ptr", "c_ptr"]), ("strides", stride_params(k)),
                                  ("epilogue", ["scale"])],
                  [("index sizes (compile-time: one compiled kernel per shape)", size_params(k)),
                   ("group extents", ["BATCH", "T", "M", "N", "K", "KA", "KB"]),
                   ("meta-parameters", meta)])
    L += output_strides(k, "    ")
    sb = {op.name: stride(op, batch[-1]) if batch else "" for op in (a, b, c)}
    L += [
        "",
        "    # Descriptors over the flat groups.  TMA_A, TMA_B, TMA_C: which tile axis has unit stride",
        "    # (1 the last, 2 the one before; TMA_C 0: C has no descriptor).  The launcher checked",
        "    # that each group walks memory as one index in each tensor and that the other strides",
        "    # and the bases are 16-byte aligned (a descriptor's rules).",
        "    if TMA_A == 1:",
        f"        a_desc = {_descriptor('a', 'M, K', stride(a, m[-1]), 'BLOCK_M, BLOCK_K', sb['a'])}",
        "    else:",
        f"        a_desc = {_descriptor('a', 'K, M', stride(a, kk[-1]), 'BLOCK_K, BLOCK_M', sb['a'])}",
        "    if TMA_B == 1:",
        f"        b_desc = {_descriptor('b', 'K, N', stride(b, kk[-1]), 'BLOCK_K, BLOCK_N', sb['b'])}",
        "    else:",
        f"        b_desc = {_descriptor('b', 'N, K', stride(b, n[-1]), 'BLOCK_N, BLOCK_K', sb['b'])}",
        "    if TMA_C == 1:",
        f"        c_desc = {_descriptor('c', 'M, N', stride(c, m[-1]), 'BLOCK_M, BLOCK_N', sb['c'])}",
        "",
        "    # Persistent tiles: each program walks the tiles program_id, program_id + num_programs,",
        "    # ...; within a batch entry in groups of GROUP_M rows of tiles (L2 reuse).",
        "    num_pid_m = tl.cdiv(M, BLOCK_M)",
        "    num_pid_n = tl.cdiv(N, BLOCK_N)",
        "    tiles = num_pid_m * num_pid_n",
        "    num_pid_in_group = GROUP_M * num_pid_n",
        "    for tile in tl.range(tl.program_id(0), BATCH * tiles, tl.num_programs(0)):",
    ]
    if batch:
        L.append(f"        pid_batch = {_widened('tile // tiles', wide)}")
    L += [
        "        pid = tile % tiles",
        "        group_id = pid // num_pid_in_group",
        "        first_pid_m = group_id * GROUP_M",
        "        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
        "        off_m = (first_pid_m + ((pid % num_pid_in_group) % group_size_m)) * BLOCK_M",
        "        off_n = ((pid % num_pid_in_group) // group_size_m) * BLOCK_N",
        "",
        "        # K steps: the copies zero-fill what lies past M, N or K, so no tile needs a mask.",
        f"        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.{k.acc})",
        "        for k0 in range(0, K, BLOCK_K):",
        "            if TMA_A == 1:",
        f"                a = {_load('a', 'off_m, k0', 'BLOCK_M, BLOCK_K', False, bool(batch))}",
        "            else:",
        f"                a = {_load('a', 'k0, off_m', 'BLOCK_K, BLOCK_M', True, bool(batch))}",
        "            if TMA_B == 1:",
        f"                b = {_load('b', 'k0, off_n', 'BLOCK_K, BLOCK_N', False, bool(batch))}",
        "            else:",
        f"                b = {_load('b', 'off_n, k0', 'BLOCK_N, BLOCK_K', True, bool(batch))}",
    ] + dot(k, "            ") + [
        "",
        "        # Epilogue: scale, cast, store (through C's descriptor, or masked where it has none).",
        "        if HAS_SCALE:",
        "            acc = acc * scale",
        "        out = acc.to(c_ptr.dtype.element_ty)",
        "        if TMA_C == 1:",
        "            c_desc.store([" + ("pid_batch, " if batch else "") + "off_m, off_n], "
        + ("tl.reshape(out, (1, BLOCK_M, BLOCK_N)))" if batch else "out)"),
        "        else:",
        f"            rm = {_widened('off_m + tl.arange(0, BLOCK_M)', wide)}",
        f"            rn = {_widened('off_n + tl.arange(0, BLOCK_N)', wide)}",
        "            c_ptrs = c_ptr + " + (f"pid_batch * {sb['c']} + " if batch else "")
        + f"rm[:, None] * {stride(c, m[-1])} + rn[None, :] * {stride(c, n[-1])}",
        "            tl.store(c_ptrs, out, mask=(rm[:, None] < M) & (rn[None, :] < N))",
        "",
        "",
    ]
    return "\n".join(L)


__all__ = ["eligible", "axes", "kernel_source"]
