"""The ``reduce`` template: fused multiply-and-sum over K for each output element.

Covers ``bij,bij->b`` (sum of products), ``ij->j`` (sum), ``i,j->ij`` (outer product,
K empty), ``ii->i`` (a diagonal: a stride sum) and permuted copies.  A program owns
``BLOCK_O`` consecutive outputs and keeps a 2-D ``(BLOCK_O, BLOCK_K)`` accumulator,
reduced across threads once, after the loop.  Which tile axis is the fast one follows
the unit stride: the lowering puts the unit-stride summed index last in K, the output's
order fixes O's, and the launcher's configs are long along whichever axis has it.
``SPLIT_K`` programs along the grid's second axis share the K range of one block of
outputs (``K_SPLIT`` each) and write partial sums that the shared ``finish`` kernel
(:mod:`einc.runtime.triton_executor.launch`) adds in a fixed order.
"""

from __future__ import annotations

from .common import offset, product, signature, size_params, split, stride, stride_params
from .ir import Kernel, Operand


def kernel_source(k: Kernel, name: str) -> str:
    ops = k.inputs
    o, kk = k.group("o"), k.group("k")
    lonely = {op.name: k.group(f"k{op.name}") for op in ops}
    extents_ = list(extents(k))
    wide = ".to(tl.int64)" if k.int64 else ""
    ptrs = [f"{op.name}_ptr" for op in ops] + ["c_ptr"]
    L = signature(name, [("pointers (c_ptr: the output, or the partial sums where SPLIT_K > 1)", ptrs),
                         ("strides", stride_params(k)), ("epilogue", ["scale"])],
                  [("index sizes (compile-time: one compiled kernel per shape)", size_params(k)),
                   ("extents", extents_),
                   ("meta-parameters", ["BLOCK_O", "BLOCK_K", "SPLIT_K", "K_SPLIT"]
                    + (["MERGED_K"] if len(kk) > 1 else []) + ["HAS_SCALE", "LAYOUT"])])
    L += [
        "    EVEN_O = O % BLOCK_O == 0",
        "    EVEN_K = K % BLOCK_K == 0",
        "",
        "    # Tile mapping: each program computes BLOCK_O consecutive elements of the output (offsets",
        "    # wrapped into range: no load needs a mask for them); the grid's second axis is the",
        "    # slice of K (a split reduction).",
        "    pid = tl.program_id(0)",
        f"    pid_k = tl.program_id(1){wide}",
        f"    ro = (pid * BLOCK_O + tl.arange(0, BLOCK_O)){wide}",
        "    offs_o = ro if EVEN_O else ro % O",
        "    c_ptr += pid_k * O  # this slice's partial sums (pid_k = 0 without a split)",
    ]
    L += split("offs_o", o, "    ")
    L += [f"    {op.name}_out = {offset(op, o, op.dims, 'offs_o')}" for op in ops]
    if kk:
        single = len(kk) == 1
        L += [
            "",
            "    # Reduction over this program's slice of K: load, multiply, add into a 2-D accumulator;",
            "    # one sum across the tile after the loop.",
            f"    acc = tl.zeros((BLOCK_O, BLOCK_K), dtype=tl.{k.acc})",
            "    k_lo = pid_k * K_SPLIT",
            "    k_hi = K if SPLIT_K == 1 else min(K - k_lo, K_SPLIT)",
            f"    offs_k = k_lo + tl.arange(0, BLOCK_K){wide}",
        ]
        body = []
        for op in ops:
            body += _load(k, op.name, lonely[op.name], f"{op.name}_ptrs", "(BLOCK_O, BLOCK_K)",
                          "offs_k[None, :] < K - k0", "    ")
        body.append(f"    acc += {' * '.join(op.name for op in ops)}")
        if single:
            L += _advancing_loop(ops, {op.name: stride(op, kk[0]) if kk[0] in op.dims else None for op in ops},
                                 body, "    ")
        else:
            L += ["    if MERGED_K:  # the K indices merge into one stride in every operand (the launcher checked)"]
            L += _advancing_loop(ops, {op.name: stride(op, kk[-1]) if kk[-1] in op.dims else None for op in ops},
                                 body, "        ")
            L += ["    else:"]
            L += ["        for k0 in range(0, k_hi, BLOCK_K):", "            offs_kk = offs_k + k0"]
            L += split("offs_kk", kk, "            ")
            L += [f"            {op.name}_ptrs = {op.name}_ptr + {op.name}_out[:, None] + "
                  f"({offset(op, kk, op.dims, 'offs_kk')})[None, :]" for op in ops]
            L += ["        " + line for line in body]
        L.append("    acc = tl.sum(acc, axis=1)")
    else:
        L += ["", "    # No reduction: load, multiply elementwise."]
        for op in ops:
            L += _load(k, op.name, lonely[op.name], f"{op.name}_ptr + {op.name}_out", "(BLOCK_O,)", None, "    ")
        L.append(f"    acc = {' * '.join(op.name for op in ops)}")
        if k.plus_zero:
            L.append("    acc = acc + 0.0  # a sum over size-1 indices, as torch's: from +0.0 (-0.0 gives +0.0)")
    L += [
        "",
        "    # Epilogue: scale (in the second pass where K is split), cast, store contiguously",
        "    # (output offset = flat index).",
        "    if HAS_SCALE and SPLIT_K == 1:",
        "        acc = acc * scale",
        "    if EVEN_O:",
        "        tl.store(c_ptr + ro, acc.to(c_ptr.dtype.element_ty))",
        "    else:",
        "        tl.store(c_ptr + ro, acc.to(c_ptr.dtype.element_ty), mask=ro < O)",
        "",
        "",
    ]
    return "\n".join(L)


def _advancing_loop(ops, steps, body, pad) -> list[str]:
    """The K loop over one stride per operand (None: broadcast along K): pointers built
    once, advanced each iteration."""
    L = [f"{pad}{op.name}_ptrs = {op.name}_ptr + {op.name}_out[:, None] + "
         f"(offs_k * {steps[op.name] or 0})[None, :]" for op in ops]
    L += [f"{pad}for k0 in range(0, k_hi, BLOCK_K):"] + [pad + line for line in body]
    return L + [f"{pad}    {n}_ptrs += BLOCK_K * {st}" for n, st in steps.items() if st]


def _load(k: Kernel, name: str, lonely, ptrs: str, shape: str, mask, pad: str) -> list[str]:
    """Lines loading operand ``name``'s tile as the accumulator's dtype; indices summed in
    this operand only (``lonely``) are summed here, before the product."""
    masked = f", mask={mask}, other=0.0" if mask else ""
    even = ["if EVEN_K:", f"    {{x}} tl.load({ptrs}{{shift}}).to(tl.{k.acc})", "else:",
            f"    {{x}} tl.load({ptrs}{{shift}}{masked}).to(tl.{k.acc})"] if mask else \
        [f"{{x}} tl.load({ptrs}{{shift}}).to(tl.{k.acc})"]
    if not lonely:
        return [pad + line.format(x=f"{name} =", shift="") for line in even]
    L = [f"{pad}# indices summed in {name.upper()} only: summed here, before the product",
         f"{pad}{name} = tl.zeros({shape}, dtype=tl.{k.acc})",
         f"{pad}for l in range(K{name.upper()}):"]
    L += split("l", lonely, pad + "    ")
    shift = " + " + offset(Operand(name, lonely), lonely, lonely, "l")
    return L + [pad + "    " + line.format(x=f"{name} +=", shift=shift) for line in even]


def extents(k: Kernel) -> dict[str, str]:
    """Group extent -> the expression of sizes it is (for the launcher)."""
    out = {"O": product(k.group("o")), "K": product(k.group("k"))}
    out.update({g.upper(): product(ix) for g, ix in k.groups if g in ("ka", "kb")})
    return out
