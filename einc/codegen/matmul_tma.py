"""The TMA variant of the ``matmul`` template: persistent tiles read through tensor descriptors.

Written beside a 16-bit ``matmul`` kernel whose groups are batch, rows, columns and K only
(:func:`eligible`), as ``<name>_tma``: the same arguments, each operand read through a
device-side tensor descriptor (``tl.make_tensor_descriptor``) over its flat groups --
``[BATCH, M, K]`` for A, or ``[BATCH, K, M]`` where A's unit stride is along M, and so
for B and C, the batch a leading axis of block 1 -- and a persistent grid: each program
walks tiles ``program_id, program_id + num_programs, ...`` (Triton's persistent matmul
tutorial).  A group that is no single stride in a tensor (``Kernel.split``, from the
strides the kernel was lowered for) is read GETT-style, along that tensor's own strides:
one descriptor axis per index, of block 1 but the last, whose size the blocks divide (the
launcher keeps such configs), so a tile never straddles it.  On Hopper the descriptor
loads are ``cp.async.bulk.tensor`` copies, the out-of-range part of a tile is zero-filled
by the copy (remainders need no masks) and the result goes back through a descriptor too
where C's strides allow it (``TMA_C == 1``), else through a masked store.  Which axis of
each operand has unit stride, and whether a descriptor can read it at all, is the
launcher's to check per layout (the module's ``layout`` computes it, :func:`axes`;
:mod:`einc.runtime.triton_executor.tma`).
"""

from __future__ import annotations

from .common import dot, offset, output_strides, signature, size, size_params, split, stride, stride_params
from .ir import MATMUL, Kernel, index_name

SIXTEEN_BIT = ("float16", "bfloat16")
MAX_AXES = 5                                            # a tensor descriptor's dimensions at most
ROLES = {"a": ("batch", "m", "k"), "b": ("batch", "k", "n"), "c": ("batch", "m", "n")}   # batch, outer, inner
EXTENT = {"batch": "BATCH", "m": "M", "n": "N", "k": "K"}
OFFSET = {"m": "off_m", "n": "off_n", "k": "k0"}        # where a tile (a K step) starts along the group
BLOCK = {"m": "BLOCK_M", "n": "BLOCK_N", "k": "BLOCK_K"}


def _split_in(k: Kernel, name: str) -> set:
    return {g for op, g in k.split if op == name}


def _coord(i: int) -> str:
    """The variable holding index ``i``'s coordinate of the current tile (a scalar)."""
    return f"t_{index_name(i)}"


def _lead(k: Kernel, op) -> list[tuple[str, str, str]]:
    """``(extent, stride, coordinate)`` of each descriptor axis of block 1 of ``op``: its
    batch (one axis, or one per index where the batch is no single stride in it) and every
    index but the last of a tile group that is no single stride in it."""
    split_here = _split_in(k, op.name)
    batch = k.group("batch")
    lead = []
    if batch:
        lead += [(size(i), stride(op, i), _coord(i)) for i in batch] if "batch" in split_here else \
            [("BATCH", stride(op, batch[-1]), "pid_batch")]
    for g in ROLES[op.name][1:]:
        if g in split_here:
            lead += [(size(i), stride(op, i), _coord(i)) for i in k.group(g)[:-1]]
    return lead


def _tile_axis(k: Kernel, op, g: str) -> tuple[str, str, str, str]:
    """``(extent, stride, coordinate, block)`` of ``op``'s tile axis along group ``g``: the
    group's last index where the group is no single stride in ``op`` (a tile never straddles
    it: the launcher keeps blocks that divide its size), else the whole group."""
    last = k.group(g)[-1]
    if g in _split_in(k, op.name):
        return size(last), stride(op, last), f"{OFFSET[g]} % {size(last)}", BLOCK[g]
    return EXTENT[g], stride(op, last), OFFSET[g], BLOCK[g]


def axes_of(k: Kernel, op) -> int:
    return len(_lead(k, op)) + 2


def eligible(k: Kernel) -> bool:
    """Whether ``k`` gets a TMA variant: a 16-bit matrix product of plain groups (no tile
    axis T, no 2-D block, nothing summed in one operand only) with rows, columns and K,
    each operand read through at most five descriptor axes."""
    if k.kind != MATMUL or k.dtype not in SIXTEEN_BIT or len(k.inputs) != 2:
        return False
    if any(k.group(g) for g in ("t", "nt", "ka", "kb")) or not all(k.group(g) for g in ("m", "n", "k")):
        return False
    ops = (*k.inputs, k.output)
    if not all(i in op.dims for op in ops for g in ROLES[op.name] for i in k.group(g)):
        return False
    return all(axes_of(k, op) <= MAX_AXES for op in k.inputs)


def _tuple(items) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def axes(k: Kernel, stride_of) -> list[str]:
    """The lines (in the module's ``layout``) setting ``tma`` to A's, B's and C's descriptor
    axes (:func:`einc.runtime.triton_executor.tma.axis`; C's 0 where it has no descriptor),
    the sizes the rows', columns' and K's blocks must divide (0: none) -- the last index of
    a group that A or B reads through one axis per index -- and those C's descriptor needs
    (rows, columns), or it is not used; ``stride_of(param)`` reads a stride argument (or
    C's contiguous stride) from the operands."""
    L = ["    # the TMA variant's descriptor axes of A, B and C and the sizes its blocks must divide",
         "    # (einc.runtime.triton_executor.tma.axis)",
         "    tma = ("]
    for op in (*k.inputs, k.output):
        if op is k.output and axes_of(k, op) > MAX_AXES:
            L.append("        0,")
            continue
        parts = [_tuple([_tuple([size(i) for i in k.group(g)]), _tuple([stride_of(stride(op, i)) for i in k.group(g)])])
                 for g in ROLES[op.name]]
        split_here = _split_in(k, op.name)
        flags = _tuple(["True" if g in split_here else "False" for g in ROLES[op.name]])
        L.append(f"        tma_axis({_tuple(parts)}, 2, {flags}),")
    quanta = [[size(k.group(g)[-1]) if any(x == g for op, x in k.split if op in names) else "0" for g in groups]
              for names, groups in ((("a", "b"), ("m", "n", "k")), (("c",), ("m", "n")))]
    return L + [f"        {_tuple(q)}," for q in quanta] + ["    )"]


def _descriptor(k: Kernel, op, unit_inner: bool, pad: str) -> str:
    """``tl.make_tensor_descriptor(...)`` for ``op``: its axes of block 1, then its tile's two,
    the one of unit stride last (the inner group's where ``unit_inner``)."""
    lead = _lead(k, op)
    outer, inner = (_tile_axis(k, op, g) for g in ROLES[op.name][1:])
    last = [outer, inner] if unit_inner else [inner, outer]
    shape = [x[0] for x in lead] + [x[0] for x in last]
    strides = [x[1] for x in lead] + [last[0][1], "1"]
    block = ["1"] * len(lead) + [x[3] for x in last]
    return (f"tl.make_tensor_descriptor({op.name}_ptr, shape=[{', '.join(shape)}], strides=[{', '.join(strides)}],"
            f"\n{pad}{' ' * 35}block_shape=[{', '.join(block)}])")


def _coordinates(k: Kernel, op, unit_inner: bool) -> tuple[str, str]:
    """``op``'s descriptor coordinates of the current tile, and the tile's 2-D shape as loaded."""
    lead = _lead(k, op)
    outer, inner = (_tile_axis(k, op, g) for g in ROLES[op.name][1:])
    last = [outer, inner] if unit_inner else [inner, outer]
    return ", ".join([x[2] for x in lead] + [x[2] for x in last]), f"{last[0][3]}, {last[1][3]}"


def _load(k: Kernel, op, unit_inner: bool) -> str:
    at, shape = _coordinates(k, op, unit_inner)
    tile = f"{op.name}_desc.load([{at}])"
    if _lead(k, op):
        tile = f"tl.reshape({tile}, ({shape}))"
    return tile if unit_inner else f"{tile}.T"


def _coordinate_lines(k: Kernel, groups, pad: str) -> list[str]:
    """Lines setting the tile's coordinate of each index of ``groups`` that some tensor reads
    through an axis of its own (a batch's from ``pid_batch``, a tile group's leading indices
    from where the tile starts divided by its last index's size)."""
    L = []
    for g in groups:
        if not any(x == g for _, x in k.split):
            continue
        ix = k.group(g)
        flat, ix = ("pid_batch", ix) if g == "batch" else (f"{OFFSET[g]} // {size(ix[-1])}", ix[:-1])
        rest = f"rest_{g}"
        L.append(f"{pad}{rest} = {flat}")
        for i in reversed(ix[1:]):
            L += [f"{pad}{_coord(i)} = {rest} % {size(i)}", f"{pad}{rest} = {rest} // {size(i)}"]
        L.append(f"{pad}{_coord(ix[0])} = {rest}")
    return L


def _widened(expr: str, wide: str) -> str:
    return f"({expr}){wide}" if wide else expr


def _pointer_store(k: Kernel, pad: str) -> list[str]:
    """The masked store of ``out`` through C's strides, index by index (C without a descriptor)."""
    c = k.output
    wide = ".to(tl.int64)" if k.int64 else ""
    L = [f"{pad}rm = {_widened('off_m + tl.arange(0, BLOCK_M)', wide)}",
         f"{pad}rn = {_widened('off_n + tl.arange(0, BLOCK_N)', wide)}",
         f"{pad}offs_m = rm % M", f"{pad}offs_n = rn % N"]
    L += split("offs_m", k.group("m"), pad) + split("offs_n", k.group("n"), pad)
    rows, cols = offset(c, k.group("m"), c.dims, "offs_m"), offset(c, k.group("n"), c.dims, "offs_n")
    where = f"({rows})[:, None] + ({cols})[None, :]"
    if k.group("batch"):
        L += split("pid_batch", k.group("batch"), pad)
        where = f"{offset(c, k.group('batch'), c.dims, 'pid_batch')} + {where}"
    return L + [f"{pad}c_ptrs = c_ptr + {where}",
                f"{pad}tl.store(c_ptrs, out, mask=(rm[:, None] < M) & (rn[None, :] < N))"]


def kernel_source(k: Kernel, name: str) -> str:
    a, b = k.inputs
    c = k.output
    wide = ".to(tl.int64)" if k.int64 else ""
    c_desc = axes_of(k, c) <= MAX_AXES
    meta = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "HAS_SCALE", "LAYOUT"] + \
        (["UPCAST"] if k.dtype == "bfloat16" else []) + ["TMA_A", "TMA_B", "TMA_C", "TMA_QM", "TMA_QN", "TMA_QK"]
    L = signature(f"{name}_tma", [("pointers", ["a_ptr", "b_ptr", "c_ptr"]), ("strides", stride_params(k)),
                                  ("epilogue", ["scale"])],
                  [("index sizes (compile-time: one compiled kernel per shape)", size_params(k)),
                   ("group extents", ["BATCH", "T", "M", "N", "K", "KA", "KB"]),
                   ("meta-parameters", meta)])
    L += output_strides(k, "    ")
    L += [
        "",
        "    # Descriptors: a group that walks a tensor's memory as one index is one axis, else each",
        "    # of its indices is (of block 1 but the last).  TMA_A, TMA_B, TMA_C: which tile axis has",
        "    # unit stride (1 the last, 2 the one before; TMA_C 0: C has no descriptor).  The launcher",
        "    # checked the strides and bases against a descriptor's rules (16-byte aligned) and kept",
        "    # blocks that divide TMA_QM, TMA_QN, TMA_QK (the last index of a group read index by index).",
        "    if TMA_A == 1:",
        f"        a_desc = {_descriptor(k, a, True, '        ')}",
        "    else:",
        f"        a_desc = {_descriptor(k, a, False, '        ')}",
        "    if TMA_B == 1:",
        f"        b_desc = {_descriptor(k, b, True, '        ')}",
        "    else:",
        f"        b_desc = {_descriptor(k, b, False, '        ')}",
    ] + (["    if TMA_C == 1:", f"        c_desc = {_descriptor(k, c, True, '        ')}"] if c_desc else []) + [
        "",
        "    # Persistent tiles: each program walks the tiles program_id, program_id + num_programs,",
        "    # ...; within a batch entry in groups of GROUP_M rows of tiles (L2 reuse).",
        "    num_pid_m = tl.cdiv(M, BLOCK_M)",
        "    num_pid_n = tl.cdiv(N, BLOCK_N)",
        "    tiles = num_pid_m * num_pid_n",
        "    num_pid_in_group = GROUP_M * num_pid_n",
        "    for tile in tl.range(tl.program_id(0), BATCH * tiles, tl.num_programs(0)):",
    ]
    if k.group("batch"):
        L.append(f"        pid_batch = {_widened('tile // tiles', wide)}")
    L += [
        "        pid = tile % tiles",
        "        group_id = pid // num_pid_in_group",
        "        first_pid_m = group_id * GROUP_M",
        "        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
        "        off_m = (first_pid_m + ((pid % num_pid_in_group) % group_size_m)) * BLOCK_M",
        "        off_n = ((pid % num_pid_in_group) // group_size_m) * BLOCK_N",
    ] + _coordinate_lines(k, ("batch", "m", "n"), "        ") + [
        "",
        "        # K steps: the copies zero-fill what lies past M, N or K, so no tile needs a mask.",
        f"        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.{k.acc})",
        "        for k0 in range(0, K, BLOCK_K):",
    ] + _coordinate_lines(k, ("k",), "            ") + [
        "            if TMA_A == 1:",
        f"                a = {_load(k, a, True)}",
        "            else:",
        f"                a = {_load(k, a, False)}",
        "            if TMA_B == 1:",
        f"                b = {_load(k, b, True)}",
        "            else:",
        f"                b = {_load(k, b, False)}",
    ] + dot(k, "            ") + [
        "",
        "        # Epilogue: scale, cast, store (through C's descriptor, or masked where it has none).",
        "        if HAS_SCALE:",
        "            acc = acc * scale",
        "        out = acc.to(c_ptr.dtype.element_ty)",
    ]
    if c_desc:
        at, _ = _coordinates(k, c, True)
        lead = len(_lead(k, c))
        value = f"tl.reshape(out, ({'1, ' * lead}BLOCK_M, BLOCK_N))" if lead else "out"
        L += ["        if TMA_C == 1:", f"            c_desc.store([{at}], {value})", "        else:"]
        L += _pointer_store(k, "            ")
    else:
        L += _pointer_store(k, "        ")
    return "\n".join(L + ["", ""])


__all__ = ["eligible", "axes", "kernel_source", "axes_of"]
