"""The ``matmul`` template: a strided generalized contraction around one ``tl.dot``.

Sizes and group extents are compile-time constants; ``EVEN_*`` (computed from them and
the block sizes, also constants) drop the masks that aligned shapes do not need.  Rows
and columns are wrapped (``% M``) so that loads need no row mask.  Where K is one index
the operand pointers are built once and advanced by ``BLOCK_K`` strides; where it holds
several, the (constant-divisor) split runs once per iteration.  ``SPLIT_K`` programs
along the grid's second axis share the K range of one tile (``K_SPLIT`` each) and write
partial sums that the shared ``finish`` kernel (:mod:`einc.runtime.triton_executor.launch`) adds in a fixed order.
"""

from __future__ import annotations

from .common import (
    dot,
    grouped_tiles,
    offset,
    output_strides,
    product,
    signature,
    size_params,
    split,
    stride,
    stride_params,
)
from .ir import Kernel


def _axes(has_t: bool):
    """Index suffixes that place a vector along the T, row and column axes of a tile."""
    if has_t:
        return "[:, None, None]", "[None, :, None]", "[None, None, :]"
    return "", "[:, None]", "[None, :]"


def _b_tile(k: Kernel):
    """B's tile: ``(its base offsets, the suffix placing K's offsets, its shape, the line
    flattening it for the product or None)``.  With ``nt``, B's tile is (BLOCK_K, BLOCK_NT,
    BLOCK_N), read along B's unit-stride index (``nt``'s last), then flattened to
    (BLOCK_K, BLOCK_NT * BLOCK_N) for the product."""
    tx, rx, cx = _axes(bool(k.group("t")))
    if k.group("nt"):
        return ("b_nt[None, :, None] + b_cols[None, None, :]", "[:, None, None]", "(BLOCK_K, BLOCK_NT, BLOCK_N)",
                "b = tl.reshape(b, (BLOCK_K, BLOCK_NT * BLOCK_N))")
    base = f"b_cols{cx}" + (f" + b_t{tx}" if k.group("t") else "")
    return base, rx, "(BLOCK_T, BLOCK_K, BLOCK_N)" if k.group("t") else "(BLOCK_K, BLOCK_N)", None


def kernel_source(k: Kernel, name: str) -> str:
    a, b = k.inputs
    c = k.output
    batch, t, m, n, kk = k.group("batch"), k.group("t"), k.group("m"), k.group("n"), k.group("k")
    nt = k.group("nt")
    wide = ".to(tl.int64)" if k.int64 else ""
    tx, rx, cx = _axes(bool(t))
    meta = ["BLOCK_M", "BLOCK_N", "BLOCK_K"] + (["BLOCK_T"] if t else []) + (["BLOCK_NT"] if nt else []) + \
        ["GROUP_M", "SPLIT_K", "K_SPLIT"] + (["MERGED_K"] if len(kk) > 1 else []) + ["HAS_SCALE", "LAYOUT"]
    if k.dtype == "float32":
        meta.append("PRECISION")
    if k.dtype == "bfloat16":
        meta.append("UPCAST")
    L = signature(name, [("pointers (c_ptr: the output, or the partial sums where SPLIT_K > 1)",
                          ["a_ptr", "b_ptr", "c_ptr"]),
                         ("strides", stride_params(k)), ("epilogue", ["scale"])],
                  [("index sizes (compile-time: one compiled kernel per shape)", size_params(k)),
                   ("group extents", ["BATCH", "T", "M"] + (["NT"] if nt else []) + ["N", "K", "KA", "KB"]),
                   ("meta-parameters", meta)])
    L += output_strides(k, "    ")
    L += [
        "    EVEN_M = M % BLOCK_M == 0",
        "    EVEN_N = N % BLOCK_N == 0",
        "    EVEN_K = K % BLOCK_K == 0",
    ]
    if t:
        L.append("    EVEN_T = T % BLOCK_T == 0")
    if nt:
        L.append("    EVEN_NT = NT % BLOCK_NT == 0")
    L += [
        "",
        "    # Tile mapping: program ids walk the (M, N) tiles of one batch entry, in groups of",
        "    # GROUP_M rows of tiles so that neighbouring programs reuse operand tiles in L2;",
        "    # the grid's second axis is the slice of K (split-K).",
        "    pid = tl.program_id(0)",
        f"    pid_k = tl.program_id(1){wide}",
    ] + grouped_tiles(wide, "tl.cdiv(NT, BLOCK_NT) * tl.cdiv(N, BLOCK_N)" if nt else "tl.cdiv(N, BLOCK_N)")
    if nt:
        L += ["    pid_nt = pid_n // tl.cdiv(N, BLOCK_N)  # N's tiles: NT's blocks by the inner N's",
              "    pid_n = pid_n % tl.cdiv(N, BLOCK_N)"]
    if t:
        L += ["    pid_t = pid_batch % tl.cdiv(T, BLOCK_T)",
              "    pid_batch = pid_batch // tl.cdiv(T, BLOCK_T)"]
    if batch:
        L += ["", "    # Batch entry: split pid_batch into the batch indices and move the pointers there."]
        L += split("pid_batch", batch, "    ")
        for op in (a, b, c):
            L.append(f"    {op.name}_ptr += {offset(op, batch, op.dims, 'pid_batch')}")
    L += [f"    c_ptr += pid_k * (BATCH * T * M * {'NT * ' if nt else ''}N)  "
          "# this slice's partial sums (pid_k = 0 without split-K)"]
    if t and all(i in a.dims and i in b.dims for i in t):
        L += ["", "    # Rows (M), columns (N) and the tile's third axis (T, here a batch index): offsets",
              "    # wrapped into range (no load needs a row mask), split into their indices."]
    elif t:
        L += ["", "    # Rows (M), columns (N) and the tile's third axis (T, here a row or column index moved",
              "    # there for a unit-stride load, the other operand broadcast along it): offsets wrapped",
              "    # into range (no load needs a row mask), split into their indices."]
    elif nt:
        L += ["", "    # Rows (M) and columns, a 2-D block (NT, N) led by B's unit-stride index and by the",
              "    # result's: offsets wrapped into range (no load needs a row mask), split into their indices."]
    else:
        L += ["", "    # Rows (M) and columns (N): offsets wrapped into range (no load needs a row mask),",
              "    # split into their indices."]
    if t:
        L += [f"    rt = (pid_t * BLOCK_T + tl.arange(0, BLOCK_T)){wide}",
              "    offs_t = rt if EVEN_T else rt % T"]
        L += split("offs_t", t, "    ")
        for op in (a, b, c):
            L.append(f"    {op.name}_t = {offset(op, t, op.dims, 'offs_t')}")
    L += [f"    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){wide}",
          "    offs_m = rm if EVEN_M else rm % M"]
    L += split("offs_m", m, "    ")
    L += [f"    a_rows = {offset(a, m, a.dims, 'offs_m')}", f"    c_rows = {offset(c, m, c.dims, 'offs_m')}",
          f"    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){wide}",
          "    offs_n = rn if EVEN_N else rn % N"]
    L += split("offs_n", n, "    ")
    L += [f"    b_cols = {offset(b, n, b.dims, 'offs_n')}", f"    c_cols = {offset(c, n, c.dims, 'offs_n')}"]
    if nt:
        L += [f"    rnt = (pid_nt * BLOCK_NT + tl.arange(0, BLOCK_NT)){wide}",
              "    offs_nt = rnt if EVEN_NT else rnt % NT"]
        L += split("offs_nt", nt, "    ")
        L += [f"    b_nt = {offset(b, nt, b.dims, 'offs_nt')}", f"    c_nt = {offset(c, nt, c.dims, 'offs_nt')}"]
    a_base = f"a_rows{rx}" + (f" + a_t{tx}" if t else "")
    b_base, _, b_shape, _ = _b_tile(k)
    shape = "(BLOCK_T, BLOCK_M, BLOCK_N)" if t else "(BLOCK_M, BLOCK_NT * BLOCK_N)" if nt else "(BLOCK_M, BLOCK_N)"
    a_shape = "(BLOCK_T, BLOCK_M, BLOCK_K)" if t else "(BLOCK_M, BLOCK_K)"
    L += [
        "",
        "    # Reduction over this program's slice of K: each iteration loads an A tile and a B tile",
        "    # straight from their strides (nothing is copied first) and adds their product.",
        f"    acc = tl.zeros({shape}, dtype=tl.{k.acc})",
        "    k_lo = pid_k * K_SPLIT",
        "    k_hi = K if SPLIT_K == 1 else min(K - k_lo, K_SPLIT)",
        f"    offs_k = k_lo + tl.arange(0, BLOCK_K){wide}",
    ]
    body = _tile_product(k, a_shape, b_shape)
    steps = {op.name: [stride(op, i) for i in kk] for op in (a, b)}
    if len(kk) == 1:
        L += _advancing_loop(k, a_base, b_base, {n: s[0] for n, s in steps.items()}, body, "    ")
    elif not kk:
        L += _splitting_loop(k, a_base, b_base, body, "    ")
    else:
        L += ["    if MERGED_K:  # the K indices merge into one stride in A and in B (the launcher checked)"]
        L += _advancing_loop(k, a_base, b_base, {n: s[-1] for n, s in steps.items()}, body, "        ")
        L += ["    else:"]
        L += _splitting_loop(k, a_base, b_base, body, "        ")
    if nt:
        c_ptrs = "c_ptr + c_rows[:, None, None] + c_nt[None, :, None] + c_cols[None, None, :]"
        mask = "(rm[:, None, None] < M) & (rnt[None, :, None] < NT) & (rn[None, None, :] < N)"
        even = "EVEN_M and EVEN_NT and EVEN_N"
    else:
        c_ptrs = f"c_ptr + c_rows{rx} + c_cols{cx}" + (f" + c_t{tx}" if t else "")
        mask = f"(rm{rx} < M) & (rn{cx} < N)" + (f" & (rt{tx} < T)" if t else "")
        even = "EVEN_M and EVEN_N" + (" and EVEN_T" if t else "")
    L += [
        "",
        "    # Epilogue: scale (in the second pass where K is split), cast to the output dtype,",
        "    # store into the contiguous output (or this slice's partial sums).",
        "    if HAS_SCALE and SPLIT_K == 1:",
        "        acc = acc * scale",
    ] + (["    acc = tl.reshape(acc, (BLOCK_M, BLOCK_NT, BLOCK_N))  # the tile's columns as (NT, N) again"]
         if nt else []) + [
        f"    c_ptrs = {c_ptrs}",
        f"    if {even}:",
        "        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))",
        "    else:",
        f"        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask={mask})",
        "",
        "",
    ]
    return "\n".join(L)


def _advancing_loop(k: Kernel, a_base, b_base, steps, body, pad) -> list[str]:
    """The K loop over one stride per operand: pointers built once, advanced each iteration."""
    _, _, a_kx = _axes(bool(k.group("t")))              # K runs along A's columns and B's rows
    b_kx = _b_tile(k)[1]
    return [f"{pad}a_ptrs = a_ptr + {a_base} + (offs_k * {steps['a']}){a_kx}",
            f"{pad}b_ptrs = b_ptr + {b_base} + (offs_k * {steps['b']}){b_kx}",
            f"{pad}for k0 in range(0, k_hi, BLOCK_K):"] + [pad + line for line in body] + \
        [f"{pad}    {n}_ptrs += BLOCK_K * {st}" for n, st in steps.items()]


def _splitting_loop(k: Kernel, a_base, b_base, body, pad) -> list[str]:
    """The K loop over several indices: each iteration splits its K offsets (constant divisors)."""
    a, b = k.inputs
    kk = k.group("k")
    _, _, a_kx = _axes(bool(k.group("t")))
    b_kx = _b_tile(k)[1]
    return [f"{pad}for k0 in range(0, k_hi, BLOCK_K):", f"{pad}    offs_kk = offs_k + k0"] + \
        split("offs_kk", kk, pad + "    ") + \
        [f"{pad}    a_ptrs = a_ptr + {a_base} + ({offset(a, kk, a.dims, 'offs_kk')}){a_kx}",
         f"{pad}    b_ptrs = b_ptr + {b_base} + ({offset(b, kk, b.dims, 'offs_kk')}){b_kx}"] + \
        [pad + line for line in body]


def _tile_product(k: Kernel, a_shape, b_shape) -> list[str]:
    """The loop body (indented by 4): load the A and B tiles, summing indices summed in one
    operand only as they load, and add their product into the accumulator."""
    a, b = k.inputs
    ka, kb = k.group("ka"), k.group("kb")
    _, _, cx = _axes(bool(k.group("t")))
    _, b_kx, _, flatten = _b_tile(k)
    L = []
    for op, kx, lonely, extent, tile in ((a, cx, ka, "KA", a_shape), (b, b_kx, kb, "KB", b_shape)):
        mask = f"(offs_k{kx} < K - k0)"
        if lonely:
            L += [f"    # indices summed in {op.name.upper()} only: summed here, before the product",
                  f"    {op.name} = tl.zeros({tile}, dtype=tl.{k.acc})",
                  f"    for l in range({extent}):"]
            L += split("l", lonely, "        ")
            shift = offset(op, lonely, op.dims, "l")
            L += ["        if EVEN_K:",
                  f"            {op.name} += tl.load({op.name}_ptrs + {shift}).to(tl.{k.acc})",
                  "        else:",
                  f"            {op.name} += tl.load({op.name}_ptrs + {shift}, mask={mask}, other=0.0)"
                  f".to(tl.{k.acc})",
                  f"    {op.name} = {op.name}.to({op.name}_ptr.dtype.element_ty)"]
        else:
            L += ["    if EVEN_K:",
                  f"        {op.name} = tl.load({op.name}_ptrs)",
                  "    else:",
                  f"        {op.name} = tl.load({op.name}_ptrs, mask={mask}, other=0.0)"]
    if flatten:
        L.append(f"    {flatten}  # (K, NT, N) as (K, NT * N): N's order, the result's")
    return L + dot(k, "    ")


def extents(k: Kernel) -> dict[str, str]:
    """Group extent -> the expression of sizes it is (for the launcher)."""
    return {g.upper() if g != "batch" else "BATCH": product(k.group(g))
            for g in ("batch", "t", "m") + (("nt",) if k.group("nt") else ()) + ("n", "k", "ka", "kb")}
