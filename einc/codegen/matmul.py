"""The ``matmul`` template: a strided generalized contraction around one ``tl.dot``."""

from __future__ import annotations

from ..ir import Kernel
from .common import offset, signature, size_params, split, stride_params


def kernel_source(k: Kernel) -> str:
    a, b = k.inputs
    c = k.output
    batch, m, n, kk = k.group("batch"), k.group("m"), k.group("n"), k.group("k")
    wide = ".to(tl.int64)" if k.int64 else ""
    params = [("pointers", ["a_ptr", "b_ptr", "c_ptr"]), ("index sizes", size_params(k)),
              ("group extents", ["BATCH", "M", "N", "K"]), ("strides", stride_params(k, with_output=True)),
              ("epilogue", ["scale"])]
    meta = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "HAS_SCALE"]
    if k.dtype == "float32":
        meta.append("PRECISION")
    if k.dtype == "bfloat16":
        meta.append("UPCAST")
    L = signature(k.name, params, meta)
    L += [
        "    # Tile mapping: program ids walk the (M, N) tiles of one batch entry, in groups of",
        "    # GROUP_M rows of tiles so that neighbouring programs reuse operand tiles in L2.",
        "    pid = tl.program_id(0)",
        "    num_pid_m = tl.cdiv(M, BLOCK_M)",
        "    num_pid_n = tl.cdiv(N, BLOCK_N)",
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
    if batch:
        L += ["", "    # Batch entry: split pid_batch into the batch indices and move the pointers there."]
        L += split("pid_batch", batch, "    ")
        for op in (a, b, c):
            L.append(f"    {op.name}_ptr += {offset(op, batch, op.dims, 'pid_batch')}")
    L += [
        "",
        "    # Rows (M) and columns (N) of this tile, split into their indices.",
        f"    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){wide}",
    ]
    L += split("offs_m", m, "    ")
    L += [f"    a_rows = {offset(a, m, a.dims, 'offs_m')}", f"    c_rows = {offset(c, m, c.dims, 'offs_m')}",
          f"    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){wide}"]
    L += split("offs_n", n, "    ")
    L += [f"    b_cols = {offset(b, n, b.dims, 'offs_n')}", f"    c_cols = {offset(c, n, c.dims, 'offs_n')}"]
    L += [
        "",
        "    # Reduction over K: each iteration loads a (BLOCK_M, BLOCK_K) tile of A and a",
        "    # (BLOCK_K, BLOCK_N) tile of B straight from their strides; nothing is copied first.",
        f"    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.{k.acc})",
        "    for k0 in range(0, K, BLOCK_K):",
        f"        offs_k = (k0 + tl.arange(0, BLOCK_K)){wide}",
    ]
    L += split("offs_k", kk, "        ")
    L += [
        f"        a_k = {offset(a, kk, a.dims, 'offs_k')}",
        f"        b_k = {offset(b, kk, b.dims, 'offs_k')}",
        "        a = tl.load(a_ptr + a_rows[:, None] + a_k[None, :],",
        "                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)",
        "        b = tl.load(b_ptr + b_k[:, None] + b_cols[None, :],",
        "                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)",
    ]
    if k.dtype == "bfloat16":
        L += ["        if UPCAST:  # Triton's CPU interpreter has no bfloat16 matrix product",
              "            a = a.to(tl.float32)",
              "            b = b.to(tl.float32)"]
    if k.dtype == "float32":
        L.append("        acc = tl.dot(a, b, acc, input_precision=PRECISION)")
    elif k.dtype == "float64":
        L.append("        acc = tl.dot(a, b, acc, out_dtype=tl.float64)")
    else:
        L.append("        acc = tl.dot(a, b, acc)")
    L += [
        "",
        "    # Epilogue: scale, cast to the output dtype, store into the contiguous output.",
        "    if HAS_SCALE:",
        "        acc = acc * scale",
        "    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
        "    tl.store(c_ptr + c_rows[:, None] + c_cols[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)",
        "",
        "",
    ]
    return "\n".join(L)
