"""The ``reduce`` template: fused multiply-and-sum over K for each output element.

Covers ``bij,bij->b`` (sum of products), ``ij->j`` (sum), ``i,j->ij`` (outer product,
K empty), ``ii->i`` (a diagonal: a stride sum) and permuted copies.
"""

from __future__ import annotations

from ..ir import Kernel
from .common import offset, signature, size_params, split, stride_params


def kernel_source(k: Kernel) -> str:
    ops = k.inputs
    o, kk = k.group("o"), k.group("k")
    wide = ".to(tl.int64)" if k.int64 else ""
    ptrs = [f"{op.name}_ptr" for op in ops] + ["c_ptr"]
    params = [("pointers", ptrs), ("index sizes", size_params(k)), ("extents", ["O", "K"]),
              ("strides", stride_params(k, with_output=False)), ("epilogue", ["scale"])]
    L = signature(k.name, params, ["BLOCK_O", "BLOCK_K", "HAS_SCALE"])
    L += [
        "    # Tile mapping: each program computes BLOCK_O consecutive elements of the output.",
        "    pid = tl.program_id(0)",
        f"    offs_o = (pid * BLOCK_O + tl.arange(0, BLOCK_O)){wide}",
        "    mask_o = offs_o < O",
    ]
    L += split("offs_o", o, "    ")
    L += [f"    {op.name}_out = {offset(op, o, op.dims, 'offs_o')}" for op in ops]
    if kk:
        product = " * ".join(op.name for op in ops)
        L += [
            "",
            "    # Reduction over K in chunks of BLOCK_K: load, multiply, sum along the chunk.",
            f"    acc = tl.zeros((BLOCK_O,), dtype=tl.{k.acc})",
            "    for k0 in range(0, K, BLOCK_K):",
            f"        offs_k = (k0 + tl.arange(0, BLOCK_K)){wide}",
        ]
        L += split("offs_k", kk, "        ")
        L += [f"        {op.name}_red = {offset(op, kk, op.dims, 'offs_k')}" for op in ops]
        L.append("        mask = mask_o[:, None] & (offs_k[None, :] < K)")
        for op in ops:
            L.append(f"        {op.name} = tl.load({op.name}_ptr + {op.name}_out[:, None] + {op.name}_red[None, :], "
                     f"mask=mask, other=0.0).to(tl.{k.acc})")
        L.append(f"        acc += tl.sum({product}, axis=1)")
    else:
        L += ["", "    # No reduction: load, multiply elementwise."]
        for op in ops:
            L.append(f"    {op.name} = tl.load({op.name}_ptr + {op.name}_out, mask=mask_o, other=0.0)"
                     f".to(tl.{k.acc})")
        L.append(f"    acc = {' * '.join(op.name for op in ops)}")
    L += [
        "",
        "    # Epilogue: scale, cast, store contiguously (output offset = flat index).",
        "    if HAS_SCALE:",
        "        acc = acc * scale",
        "    tl.store(c_ptr + offs_o, acc.to(c_ptr.dtype.element_ty), mask=mask_o)",
        "",
        "",
    ]
    return "\n".join(L)
