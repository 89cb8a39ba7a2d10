"""The host side of a generated module: configs, autotuning and ``launch()``.

``launch()`` costs little after the first call with a given *layout* (the operands'
shapes, strides, dtypes, device and 16-byte alignment, and whether there is a scale):
the first launch of a layout (``_first_launch``) reads the sizes, refuses views a 32-bit
kernel cannot address, builds the arguments, the constexprs and the grid, and keeps them
in the module's ``_layouts``; a later launch of that layout looks it up, allocates the
output and launches.  On a GPU the first launch goes through ``triton.autotune`` and
``JITFunction.run``, which compile and specialize (pointer alignment, ``== 1`` and
multiple-of-16 integers: a new class is a new layout, so it is seen here first); then
``_compiled_launcher`` keeps the compiled kernel's launcher, the config the autotuner
chose and the grid, and later launches call that launcher directly, as
``JITFunction.run`` would (the way FlagGems' ``LibEntry`` skips Triton's per-call Python).
Whatever does not look as expected turns those direct launches off for the module, for
good, and the autotuner path runs as before.  Under Triton's interpreter the
interpreter launches every time; the layout cache is the same.  fp32 matrix products
read torch's TF32 policy once (``_fp32_precision``), at the first launch; the module's
``forget()`` (or ``einc.cache_clear()``, which drops the modules) reads it again.
"""

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
    """The module's host side: configs, ``launch()`` and what it keeps between launches."""
    inputs = [op.name for op in k.inputs]
    args = ", ".join(inputs)
    ptrs = ", ".join(inputs + ["c"])
    where = _size_source(k)
    sizes = size_params(k)
    out_sizes = [size(i) for i in k.output.dims]
    strides = stride_params(k, with_output=k.kind == MATMUL)
    fp32_dot = k.kind == MATMUL and k.dtype == "float32"
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
        "# A layout is what a launch depends on besides the data: the operands' shapes, strides,",
        "# dtypes, device and 16-byte alignment, and whether there is a scale.  Its first launch",
        "# checks it and sets it up (_first_launch); later launches of it skip straight to the kernel.",
        "_layouts = {}",
        "_compiled_launches = not _INTERPRET  # off for good once one fails (see _compiled_launcher)",
    ]
    if fp32_dot:
        L.append("_precision = None  # torch's fp32 matmul precision, read at the first launch")
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
    key = [f"{t}.shape, {t}.stride(), {t}.dtype, {t}.data_ptr() % 16," for t in inputs]
    key[-1] += f" {inputs[0]}.get_device(), scale != 1.0)"
    L += [f"    layout = ({key[0]}"] + [f"              {item}" for item in key[1:]]
    L += [
        "    known = _layouts.get(layout)",
        "    if known is None:",
        f"        return _first_launch(layout, {args}, scale)",
        f"    c = {inputs[0]}.new_empty(known.shape)  # {inputs[0]}'s dtype and device",
        f"    known.run({ptrs}, scale)",
        "    return c",
        "",
        "",
        f"def _first_launch(layout, {args}, scale):",
        "    \"\"\"Launch a layout not seen before, and keep what launching it takes in ``_layouts``.\"\"\"",
    ]
    if fp32_dot:
        L.append("    global _precision")
    for i in dict.fromkeys(j for _, g in k.groups for j in g):
        L.append(f"    {size(i)} = {where[i]}")
    shape = "(" + ", ".join(out_sizes) + ("," if len(out_sizes) == 1 else "") + ")"
    L.append(f"    c = {inputs[0]}.new_empty({shape})  # {inputs[0]}'s dtype and device, contiguous")
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
    L += ["    args = (  # the kernel's arguments between the pointers and scale"] + \
        ([f"        {', '.join(sizes)},"] if sizes else []) + [f"        {extents},"]
    L += _wrap([_stride_expr(k, p) + "," for p in strides], "        ")
    L += ["    )"]
    meta = ["HAS_SCALE=scale != 1.0,"]
    if k.kind == MATMUL:
        meta.append("GROUP_M=8,")
        if fp32_dot:
            meta.append("PRECISION=\"ieee\" if _INTERPRET else _precision,  # the interpreter has no TF32")
        if k.dtype == "bfloat16":
            meta.append("UPCAST=_INTERPRET,  # the interpreter has no bfloat16 dot")
        blocks = "BLOCK_M=_block(M, 16, 64), BLOCK_N=_block(N, 16, 64), BLOCK_K=_block(K, 16, 64)"
    else:
        blocks = "BLOCK_O=_block(O, 1, 256), BLOCK_K=_block(K, 1, 64)"
    if fp32_dot:
        L += ["    if _precision is None:",
              "        _precision = _fp32_precision()"]
    L += ["    meta = dict("] + [f"        {m}" for m in meta] + ["    )"]
    L += [
        f"    grid = {grid}",
        "    if _INTERPRET:  # CPU tensors under Triton's interpreter: one heuristic config, so one grid",
        f"        meta.update({blocks})",
        "        grid = grid(meta)",
        "    if len(_layouts) >= 64:  # a caller cycling through layouts: start again",
        "        _layouts.clear()",
        "    known = _Layout(tuple(c.shape), args, meta, grid)",
        f"    known.run({ptrs}, scale)",
        "    _layouts[layout] = known",
        "    return c",
        "",
        "",
        "class _Layout:",
        "    \"\"\"What launching one layout takes: the output's shape, the arguments, the constexprs",
        "    and the grid; on a GPU, once Triton has compiled the kernel, its compiled launcher.\"\"\"",
        "",
        "    __slots__ = (\"shape\", \"args\", \"meta\", \"grid\", \"compiled\")",
        "",
        "    def __init__(self, shape, args, meta, grid):",
        "        self.shape, self.args, self.meta, self.grid = shape, args, meta, grid",
        "        self.compiled = None",
        "",
        f"    def run(self, {ptrs}, scale):",
        f"        if self.compiled is not None and self.compiled({ptrs}, scale):",
        "            return",
        "        if _INTERPRET:",
        f"            {k.name}[self.grid]({ptrs}, *self.args, scale, **self.meta)",
        "            return",
        f"        kernel = _tuned[self.grid]({ptrs}, *self.args, scale, **self.meta)",
        "        if self.compiled is None and _compiled_launches:",
        "            self.compiled = _compiled_launcher(kernel, self)",
        "",
        "",
        "def _compiled_launcher(kernel, layout):",
        "    \"\"\"``run(pointers..., scale)`` launching ``kernel``, which Triton compiled for ``layout``,",
        "    with the config the autotuner chose and a ready grid, as JITFunction.run launches it",
        "    (triton 3.6-3.9) but without re-binding, re-specializing and hashing every argument",
        "    and rebuilding the autotuner's key each time.  ``run`` returns False where Triton's",
        "    own path must launch instead: launch hooks (a profiler), another current device, an",
        "    output not 16-byte aligned.  Anything unexpected turns these launches off for good.\"\"\"",
        "    try:",
        "        config = _tuned.best_config",
        "        meta = {**layout.meta, **config.kwargs}",
        "        params = _tuned.fn.params",
        f"        n = {len(inputs) + 1} + len(layout.args) + 1  # pointers, args, scale",
        "        if [p.is_constexpr for p in params] != [False] * n + [True] * (len(params) - n) \\",
        "                or len(kernel.src.signature) != len(params) \\",
        "                or (kernel.metadata.num_warps, kernel.metadata.num_stages) != (config.num_warps, config.num_stages):",
        "            raise RuntimeError(\"this Triton's kernel does not look as expected\")",
        "        constexprs = tuple(meta[p.name] for p in params[n:])",
        "        g0, g1, g2 = (tuple(layout.grid(meta)) + (1, 1))[:3]",
        "        call = kernel.run  # (first: it loads the kernel where that is still to do)",
        "        function, packed = kernel.function, kernel.packed_metadata",
        "        if function is None:",
        "            raise RuntimeError(\"the compiled kernel is not loaded\")",
        "        driver = triton.runtime.driver.active",
        "        current_device, current_stream = driver.get_current_device, driver.get_current_stream",
        "        device = current_device()",
        "        hooks = triton.knobs.runtime",
        "        args = layout.args",
        "    except Exception:",
        "        _no_compiled_launches()",
        "        return None",
        "",
        f"    def run({ptrs}, scale):",
        "        enter = hooks.launch_enter_hook",
        "        if (enter is not None and getattr(enter, \"calls\", True)) or c.data_ptr() % 16 \\",
        "                or current_device() != device:",
        "            return False",
        "        try:",
        "            call(g0, g1, g2, current_stream(device), function, packed, None, enter, hooks.launch_exit_hook,",
        f"                 {ptrs}, *args, scale, *constexprs)",
        "        except Exception:",
        "            _no_compiled_launches()",
        "            return False",
        "        return True",
        "    return run",
        "",
        "",
        "def _no_compiled_launches():",
        "    \"\"\"Launch through the autotuner and Triton's JIT from now on (nothing is lost but time).\"\"\"",
        "    global _compiled_launches",
        "    _compiled_launches = False",
        "    for known in _layouts.values():",
        "        known.compiled = None",
        "",
        "",
    ]
    if fp32_dot:
        L += [
            "def _fp32_precision():",
            "    \"\"\"``\"tf32\"`` where torch lets fp32 matrix products use TF32, else ``\"ieee\"``.",
            "",
            "    torch's ``torch.backends.cuda.matmul.fp32_precision`` where it has one, else the older",
            "    ``allow_tf32``; torch raises on reading one after the other was set, so either may",
            "    answer, and ``\"ieee\"`` where neither does.  Read once, at the first launch;",
            "    ``forget()`` has it read again.\"\"\"",
            "    matmul = torch.backends.cuda.matmul",
            "    try:",
            "        return \"tf32\" if matmul.fp32_precision == \"tf32\" else \"ieee\"",
            "    except Exception:",
            "        pass",
            "    try:",
            "        return \"tf32\" if matmul.allow_tf32 else \"ieee\"",
            "    except Exception:",
            "        return \"ieee\"",
            "",
            "",
        ]
    L += ["def forget():",
          "    \"\"\"Forget the layouts set up so far" + (" and torch's fp32 precision" if fp32_dot else "") +
          ": the next launch of each sets it up again.\"\"\""]
    if fp32_dot:
        L += ["    global _precision", "    _precision = None"]
    L += ["    _layouts.clear()", ""]
    return "\n".join(L)
