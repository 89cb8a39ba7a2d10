"""The host side of a generated module: configs, autotuning and ``launch()``."""

from __future__ import annotations

from ..ir import MATMUL, Kernel
from .common import size, size_params, stride, stride_params, wrap as _wrap

_MATMUL_CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    (128, 128, 32, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
    (64, 64, 32, 4, 4), (32, 64, 32, 4, 4), (16, 64, 64, 4, 3),
]
_REDUCE_CONFIGS = [  # (BLOCK_O, BLOCK_K, num_warps)
    (256, 8, 4), (64, 32, 4), (16, 128, 4), (4, 512, 4), (1, 2048, 8),
]
_ELEMENTWISE_CONFIGS = [(256, 1, 4), (1024, 1, 4), (4096, 1, 8)]   # reduce kernels with no K


def _size_source(k: Kernel) -> dict[int, str]:
    """For each index, the expression reading its size from an operand's shape."""
    where: dict[int, str] = {}
    for op in k.inputs:
        for d, i in enumerate(op.dims):
            where.setdefault(i, f"{op.name}.shape[{d}]")
    return where


def _stride_expr(k: Kernel, param: str) -> str:
    for op in list(k.inputs) + [k.output]:
        for i in dict.fromkeys(op.dims):
            if stride(op, i) == param:
                dims = [d for d, j in enumerate(op.dims) if j == i]
                return " + ".join(f"{op.name}.stride({d})" for d in dims)
    raise AssertionError(param)


def _product(indices) -> str:
    return " * ".join(size(i) for i in indices) if indices else "1"


def source(k: Kernel) -> str:
    args = ", ".join(op.name for op in k.inputs)
    where = _size_source(k)
    sizes = size_params(k)
    out_sizes = [size(i) for i in k.output.dims]
    call_sizes = ", ".join(sizes)
    strides = stride_params(k, with_output=k.kind == MATMUL)
    L = ["_INTERPRET = os.environ.get(\"TRITON_INTERPRET\") == \"1\"", ""]
    if k.kind == MATMUL:
        L.append("_CONFIGS = [")
        L += [f"    triton.Config({{\"BLOCK_M\": {bm}, \"BLOCK_N\": {bn}, \"BLOCK_K\": {bk}}}, "
              f"num_warps={w}, num_stages={s})," for bm, bn, bk, w, s in _MATMUL_CONFIGS]
        L += ["]", f"_tuned = triton.autotune(configs=_CONFIGS, key=[\"BATCH\", \"M\", \"N\", \"K\"])({k.name})"]
    else:
        L.append("_CONFIGS = [")
        L += [f"    triton.Config({{\"BLOCK_O\": {bo}, \"BLOCK_K\": {bk}}}, num_warps={w}),"
              for bo, bk, w in (_REDUCE_CONFIGS if k.group("k") else _ELEMENTWISE_CONFIGS)]
        L += ["]", f"_tuned = triton.autotune(configs=_CONFIGS, key=[\"O\", \"K\"])({k.name})"]
    L += [
        "",
        "",
        "def _block(extent, low, high):",
        "    \"\"\"The power of two covering ``extent``, clamped to [low, high].\"\"\"",
        "    return max(low, min(high, triton.next_power_of_2(max(extent, 1))))",
        "",
        "",
        f"def launch({args}, scale=1.0):",
        f"    \"\"\"{k.step.split(': ', 1)[-1]}, into a new contiguous tensor.\"\"\"",
    ]
    for i in dict.fromkeys(j for _, g in k.groups for j in g):
        L.append(f"    {size(i)} = {where[i]}")
    shape = "(" + ", ".join(out_sizes) + ("," if len(out_sizes) == 1 else "") + ")"
    L.append(f"    c = torch.empty({shape}, dtype={k.inputs[0].name}.dtype, device={k.inputs[0].name}.device)")
    L.append("    if c.numel() == 0:")
    L.append("        return c")
    if not k.int64:
        L += [f"    for t in ({args},):",
              "        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:",
              "            raise OverflowError(\"a view spans 2^31 elements or more: this kernel has 32-bit offsets\")"]
    if k.kind == MATMUL:
        ext = {g: _product(k.group(g)) for g in ("batch", "m", "n", "k")}
        L += [f"    BATCH, M, N, K = {ext['batch']}, {ext['m']}, {ext['n']}, {ext['k']}"]
        grid = "lambda meta: (triton.cdiv(M, meta[\"BLOCK_M\"]) * triton.cdiv(N, meta[\"BLOCK_N\"]) * BATCH,)"
        extents = "BATCH, M, N, K"
    else:
        L += [f"    O, K = {_product(k.group('o'))}, {_product(k.group('k'))}"]
        grid = "lambda meta: (triton.cdiv(O, meta[\"BLOCK_O\"]),)"
        extents = "O, K"
    L.append(f"    grid = {grid}")
    ptr_args = ", ".join([op.name for op in k.inputs] + ["c"])
    L += ["    args = (", f"        {ptr_args},"] + ([f"        {call_sizes},"] if sizes else []) + \
        [f"        {extents},"]
    L += _wrap([_stride_expr(k, p) + "," for p in strides], "        ")
    L += ["        scale,", "    )"]
    meta = ["HAS_SCALE=scale != 1.0"]
    if k.kind == MATMUL:
        meta.append("GROUP_M=8")
        if k.dtype == "float32":
            meta.append("PRECISION=\"tf32\" if torch.backends.cuda.matmul.allow_tf32 and not _INTERPRET else \"ieee\"")
        if k.dtype == "bfloat16":
            meta.append("UPCAST=_INTERPRET")
        blocks = "BLOCK_M=_block(M, 16, 64), BLOCK_N=_block(N, 16, 64), BLOCK_K=_block(K, 16, 64)"
    else:
        blocks = "BLOCK_O=_block(O, 1, 256), BLOCK_K=_block(K, 1, 64)"
    L += ["    meta = dict("] + [f"        {m}," for m in meta] + ["    )"]
    L += [
        "    if _INTERPRET:  # CPU tensors under Triton's interpreter: one heuristic config",
        f"        meta.update({blocks})",
        f"        {k.name}[grid](*args, **meta)",
        "    else:",
        "        _tuned[grid](*args, **meta)",
        "    return c",
        "",
    ]
    return "\n".join(L)
