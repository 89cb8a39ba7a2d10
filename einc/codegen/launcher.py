"""The host side of a generated module: configs, autotuning and ``launch()``.

Configs are per dtype and pruned per shape (``_prune``: extent, shared memory); the
autotuner keeps its results in Triton's cache folder across processes where this
Triton can (``cache_results``).  The first launch of a layout also decides the K split
(``_split``): split-K for K-dominant matrix products or too few tiles, split reductions
for few outputs; a split runs the kernel into a workspace of partial sums and
``<name>_finish`` adds them in a fixed order.

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
interpreter launches every time; the layout cache is the same.  Fused modules
(:mod:`.fused`) write the same host side with the helpers below (``tuner_lines`` to
``forget_lines``), so every generated module launches the same way.  fp32 matrix products
read torch's TF32 policy once (``_fp32_precision``), at the first launch; the module's
``forget()`` (or ``einc.cache_clear()``, which drops the modules) reads it again.
"""

from __future__ import annotations

from .ir import MATMUL, Kernel, index_name
from . import matmul, reduce
from .common import layout_class_source, size, size_params, stride, stride_params, tuning_key, wrap as _wrap

# Hopper-grade configurations, per dtype: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages).
# 16-bit data: BLOCK_K 64 (128-byte rows, the widest swizzle), 128x256 tiles first, as
# Triton's tutorial and inductor's H100 lists; fp32 (TF32 or FMA): BLOCK_K 32 (128-byte
# rows); fp64: tiles whose stages fit shared memory.  ``_prune`` drops, per shape, tiles
# far larger than the problem and configs over the shared-memory budget.  Every config
# compiles for sm_90a without spilling registers on the suite's kernels with each triton
# of the version matrix, 3.6 to 3.9 (``bench/ptx_report.py``): that removed fp32's 128x256
# and 64x128 tiles (the FMA dot, torch's default fp32 precision, spilled up to 4 KB
# there), gave fp32's 64x64 tile 8 warps, 16-bit's 32x64 tile BLOCK_K 32 and its 16x16
# tile 2 stages, and fp64 BLOCK_K 16 (fp64 tiles with BLOCK_K 32 spilled 8-144 bytes
# with triton 3.6 and 3.7).
_MATMUL_CONFIGS = {
    16: [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4),
         (64, 256, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4),
         (32, 64, 32, 4, 4), (16, 64, 64, 4, 3), (16, 32, 128, 4, 3), (16, 16, 64, 2, 2)],
    32: [(128, 128, 32, 8, 4), (128, 64, 32, 4, 4), (64, 64, 32, 8, 4), (32, 64, 32, 4, 4),
         (16, 64, 32, 4, 3), (16, 32, 64, 4, 3), (16, 16, 32, 2, 3)],
    64: [(64, 64, 16, 4, 2), (32, 64, 16, 4, 3), (16, 32, 16, 4, 3), (16, 16, 16, 2, 2)],
}
# A batch index inside the tile (3-D dot, which Triton runs on mma.sync, not wgmma):
# (BLOCK_T, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); the tiles that compile
# without spills for both of the suite's such kernels with triton 3.6 to 3.9 (deeper or
# larger ones spilled 8 bytes to 29 KB with one triton or another).
_TILE_T_CONFIGS = [(2, 64, 32, 32, 4, 3), (8, 16, 32, 32, 4, 2), (1, 64, 64, 32, 4, 3)]
# Reductions, by which tile axis has unit stride: (BLOCK_O, BLOCK_K, num_warps)
_REDUCE_K_FAST = [(1, 2048, 8), (2, 1024, 4), (4, 512, 4), (8, 256, 4), (16, 128, 4), (64, 32, 4)]
_REDUCE_O_FAST = [(512, 4, 4), (256, 8, 4), (128, 16, 4), (64, 32, 4), (32, 64, 4), (8, 256, 4)]
_ELEMENTWISE_CONFIGS = [(256, 1, 4), (1024, 1, 4), (4096, 1, 8)]   # reduce kernels with no K
SHARED_MEMORY = 200 * 1024          # the budget for pipelined operand tiles (H100: 227 KiB per block)
K_GRANULE = {MATMUL: 256, "reduce": 2048}     # a split-K slice is a multiple of every BLOCK_K


def size_sources(k) -> dict[int, str]:
    """For each index, the expression reading its size from an operand's shape."""
    where: dict[int, str] = {}
    for op in k.inputs:
        for d, i in enumerate(op.dims):
            where.setdefault(i, f"{op.name}.shape[{d}]")
    return where


def stride_source(k, param: str) -> str:
    """The expression reading the stride argument ``param`` from the operands (a repeated
    index: the sum of its strides) or from the output ``c``."""
    for op in k.inputs:
        for i in dict.fromkeys(op.dims):
            if stride(op, i) == param:
                dims = [d for d, j in enumerate(op.dims) if j == i]
                return " + ".join(f"{op.name}.stride({d})" for d in dims)
    for d, i in enumerate(k.output.dims):
        if stride(k.output, i) == param:
            return f"c.stride({d})"
    raise AssertionError(param)


def _configs(k: Kernel) -> list[str]:
    if k.kind == MATMUL:
        bits = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}[k.dtype]
        if k.group("t"):
            return [f"    triton.Config({{\"BLOCK_T\": {bt}, \"BLOCK_M\": {bm}, \"BLOCK_N\": {bn}, "
                    f"\"BLOCK_K\": {bk}}}, num_warps={w}, num_stages={s})," for bt, bm, bn, bk, w, s in _TILE_T_CONFIGS]
        return [f"    triton.Config({{\"BLOCK_M\": {bm}, \"BLOCK_N\": {bn}, \"BLOCK_K\": {bk}}}, "
                f"num_warps={w}, num_stages={s})," for bm, bn, bk, w, s in _MATMUL_CONFIGS[bits]]
    table = (_REDUCE_K_FAST if k.fast_k else _REDUCE_O_FAST) if k.group("k") else _ELEMENTWISE_CONFIGS
    return [f"    triton.Config({{\"BLOCK_O\": {bo}, \"BLOCK_K\": {bk}}}, num_warps={w}),"
            for bo, bk, w in table]


def source(k: Kernel, name: str) -> str:
    """The module's host side: configs, ``launch()`` and what it keeps between launches."""
    inputs = [op.name for op in k.inputs]
    where = size_sources(k)
    strides = stride_params(k)
    is_mm = k.kind == MATMUL
    fp32_dot = is_mm and k.dtype == "float32"
    itemsize = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}[k.dtype]
    ext = matmul.extents(k) if is_mm else reduce.extents(k)
    merged = len(k.group("k")) > 1
    L = ["_INTERPRET = os.environ.get(\"TRITON_INTERPRET\") == \"1\"", "", "_CONFIGS = ["]
    L += _configs(k)
    L += ["]", ""]
    if is_mm:
        L += [
            "",
            "def _prune(configs, named_args, **kwargs):",
            "    \"\"\"The configs worth timing for this shape: no tile much larger than the problem, none",
            "    over the shared-memory budget; the smallest tile where nothing else is left.\"\"\"",
            "    M, N, K = kwargs[\"M\"], kwargs[\"N\"], min(kwargs[\"K\"], kwargs[\"K_SPLIT\"])",
            "    T = kwargs[\"T\"]",
            "    fit = lambda x, block: block <= max(16, triton.next_power_of_2(max(x, 1)))  # noqa: E731",
            "    kept = [c for c in configs if fit(M, c.kwargs[\"BLOCK_M\"]) and fit(N, c.kwargs[\"BLOCK_N\"])",
            "            and fit(K, c.kwargs[\"BLOCK_K\"])",
            "            and c.kwargs.get(\"BLOCK_T\", 1) <= triton.next_power_of_2(T)",
            f"            and c.num_stages * c.kwargs.get(\"BLOCK_T\", 1) * {itemsize}"
            f" * c.kwargs[\"BLOCK_K\"] * (c.kwargs[\"BLOCK_M\"] + c.kwargs[\"BLOCK_N\"]) <= {SHARED_MEMORY}]",
            "    return kept or [min(configs, key=lambda c: c.kwargs.get(\"BLOCK_T\", 1) * c.kwargs[\"BLOCK_M\"] * "
            "c.kwargs[\"BLOCK_N\"])]",
            "",
            "",
        ]
    else:
        L += [
            "",
            "def _prune(configs, named_args, **kwargs):",
            "    \"\"\"The configs worth timing for this shape: no block much longer than the outputs or the",
            "    K slice; the smallest where nothing else is left.\"\"\"",
            "    O, K = kwargs[\"O\"], min(kwargs[\"K\"], kwargs[\"K_SPLIT\"])",
            "    kept = [c for c in configs if c.kwargs[\"BLOCK_O\"] <= triton.next_power_of_2(max(O, 1))",
            "            and c.kwargs[\"BLOCK_K\"] <= max(1, triton.next_power_of_2(max(K, 1)))]",
            "    return kept or [min(configs, key=lambda c: c.kwargs[\"BLOCK_O\"] * c.kwargs[\"BLOCK_K\"])]",
            "",
            "",
        ]
    L += tuning_key(size_params(k) + ["SPLIT_K"] + (["MERGED_K"] if merged else []) +
                    (["PRECISION"] if fp32_dot else []) + ["LAYOUT"])
    L += tuner_lines(name, prune=True) + state_lines(fp32_dot) + ["", ""] + block_lines()
    L += [
        "def _processors(device):",
        "    \"\"\"How many programs run at once: the GPU's multiprocessors (4 under the interpreter).\"\"\"",
        "    if device.type != \"cuda\":",
        "        return 4",
        "    return torch.cuda.get_device_properties(device).multi_processor_count",
        "",
        "",
        "def _split(programs, K, dominant, processors, outputs):",
        "    \"\"\"``(SPLIT_K, K_SPLIT)``: how many programs share one output block's K range, and the",
        "    slice each sums (a multiple of the granule, so of every BLOCK_K).  Split where K",
        "    dominates or the programs would not fill the processors, and the partial sums",
        "    (``outputs`` per slice) stay under 2^31 elements; a second pass adds them in a",
        "    fixed order, so a split result has the same bits on every run.\"\"\"",
        f"    granule = {K_GRANULE[MATMUL if is_mm else 'reduce']}",
        "    if K < 2 * granule or not (dominant or programs < processors):",
        "        return 1, max(K, 1)",
        "    splits = min(64, K // granule, max(2, (2 * processors) // max(programs, 1)), 2**31 // max(outputs, 1))",
        "    if splits < 2:",
        "        return 1, max(K, 1)",
        "    chunk = triton.cdiv(triton.cdiv(K, splits), granule) * granule",
        "    return triton.cdiv(K, chunk), chunk",
        "",
        "",
    ]
    L += layout_class_source()
    if merged:
        L += [
            "def _merged(sizes, strides):",
            "    \"\"\"Whether indices of these sizes and strides (slowest first) walk memory as one index.\"\"\"",
            "    return all(s == n * t for s, n, t in zip(strides, sizes[1:], strides[1:]))",
            "",
            "",
        ]
    L += launch_lines(k, k.params, describe(k))
    L += first_launch_head(k, fp32_dot, where)
    names = list(ext)
    L.append(f"    {', '.join(names)} = {', '.join(ext[g] for g in names)}")
    L.append("    processors = _processors(c.device)")
    if is_mm:
        L += ["    tiles = BATCH * T * triton.cdiv(M, 128) * triton.cdiv(N, 128)",
              "    SPLIT_K, K_SPLIT = _split(tiles, K, K >= 32 * max(M, N), processors, c.numel())",
              "    grid = lambda meta: (triton.cdiv(M, meta[\"BLOCK_M\"]) * triton.cdiv(N, meta[\"BLOCK_N\"]) * BATCH"
              " * triton.cdiv(T, meta.get(\"BLOCK_T\", 1)), SPLIT_K)"]
    else:
        L += ["    SPLIT_K, K_SPLIT = _split(triton.cdiv(O, 64), K, False, processors, O)",
              "    grid = lambda meta: (triton.cdiv(O, meta[\"BLOCK_O\"]), SPLIT_K)"]
    L += ["    args = (  # the kernel's arguments between the pointers and scale"]
    L += _wrap([stride_source(k, p) + "," for p in strides], "        ")
    L += ["    )"]
    meta = [f"{size(i)}={size(i)}," for _, g in k.groups for i in g]
    meta += [f"{g}={g}," for g in names]
    meta += ["SPLIT_K=SPLIT_K, K_SPLIT=K_SPLIT,", "HAS_SCALE=scale != 1.0,",
             f"LAYOUT=_layout_class(({', '.join(inputs)},), args),"]
    if merged:
        kk = k.group("k")
        ksizes = "(" + ", ".join(size(i) for i in kk) + ")"
        tests = [f"_merged({ksizes}, (" + ", ".join(stride_source(k, stride(op, i)) if i in op.dims else "0"
                                                   for i in kk) + "))" for op in k.inputs]
        L += ["    MERGED_K = " + tests[0]] + [f"    MERGED_K = MERGED_K and {t}" for t in tests[1:]]
        meta.append("MERGED_K=MERGED_K,")
    if is_mm:
        meta.append("GROUP_M=8,")
        meta += dot_meta(k.dtype)
        blocks = "BLOCK_M=_block(M, 16, 64), BLOCK_N=_block(N, 16, 64), BLOCK_K=_block(K, 16, 64)" + \
            (", BLOCK_T=_block(T, 1, 4)" if k.group("t") else "")
    else:
        blocks = "BLOCK_O=_block(O, 1, 256), BLOCK_K=_block(K, 1, 64)"
    L += first_launch_tail(k, meta, blocks, "SPLIT_K", fp32_dot)
    L += layout_class_lines(k, name, split=True) + compiled_lines(k) + precision_lines(fp32_dot)
    L += forget_lines(fp32_dot)
    return "\n".join(L)


# ---- the host side every generated module shares (matmul, reduce and fused): text helpers

def tuner_lines(name: str, prune: bool) -> list[str]:
    """``_tuned``: the autotuner over ``_CONFIGS`` keyed by ``_KEY`` (``_prune`` where
    ``prune``), its results kept across processes where this Triton can."""
    pruning = ", prune_configs_by={\"early_config_prune\": _prune}" if prune else ""
    return [
        "# Tuning results persist across processes (Triton's cache folder) where this Triton can.",
        "_PERSIST = {\"cache_results\": True} if \"cache_results\" in inspect.signature(triton.autotune).parameters \\",
        "    else {}",
        f"_tuned = triton.autotune(configs=_CONFIGS, key=_KEY{pruning},",
        f"                         **_PERSIST)({name})",
        "",
    ]


def state_lines(fp32_dot: bool) -> list[str]:
    """What a module keeps between launches: its layouts, and torch's fp32 precision."""
    lines = [
        "# A layout is what a launch depends on besides the data: the operands' shapes, strides,",
        "# dtypes, device and 16-byte alignment, and whether there is a scale.  Its first launch",
        "# checks it and sets it up (_first_launch); later launches of it skip straight to the kernel.",
        "_layouts = {}",
        "_compiled_launches = not _INTERPRET  # off for good once one fails (see _compiled_launcher)",
    ]
    if fp32_dot:
        lines.append("_precision = None  # torch's fp32 matmul precision, read at the first launch")
    return lines


def block_lines() -> list[str]:
    return [
        "def _block(extent, low, high):",
        "    \"\"\"The power of two covering ``extent``, clamped to [low, high].\"\"\"",
        "    return max(low, min(high, triton.next_power_of_2(max(extent, 1))))",
        "",
        "",
    ]


def launch_lines(k, params, doc: str) -> list[str]:
    """``launch()``: look the layout up; its first launch goes to ``_first_launch``."""
    inputs = [op.name for op in k.inputs]
    ptrs = ", ".join(inputs + ["c"])
    key_items = [f"{t}.shape, {t}.stride(), {t}.dtype, {t}.data_ptr() % 16," for t in inputs]
    key_items[-1] += f" {inputs[0]}.get_device(), scale != 1.0)"
    return [
        f"def launch({', '.join(params)}, scale=1.0):",
        f"    \"\"\"{doc}, into a new contiguous tensor.\"\"\"",
        f"    layout = ({key_items[0]}",
    ] + [f"              {item}" for item in key_items[1:]] + [
        "    known = _layouts.get(layout)",
        "    if known is None:",
        f"        return _first_launch(layout, {', '.join(inputs)}, scale)",
        f"    c = {inputs[0]}.new_empty(known.shape)  # {inputs[0]}'s dtype and device",
        f"    known.run({ptrs}, scale)",
        "    return c",
        "",
        "",
    ]


def first_launch_head(k, fp32_dot: bool, where: dict[int, str]) -> list[str]:
    """``_first_launch`` up to the output: the sizes, the output, the 32-bit span check."""
    inputs = [op.name for op in k.inputs]
    lines = [f"def _first_launch(layout, {', '.join(inputs)}, scale):",
             "    \"\"\"Launch a layout not seen before, and keep what launching it takes in ``_layouts``.\"\"\""]
    if fp32_dot:
        lines.append("    global _precision")
    for i in dict.fromkeys(j for _, g in k.groups for j in g):
        lines.append(f"    {size(i)} = {where[i]}")
    out_sizes = [size(i) for i in k.output.dims]
    shape = "(" + ", ".join(out_sizes) + ("," if len(out_sizes) == 1 else "") + ")"
    lines += [f"    c = {inputs[0]}.new_empty({shape})  # {inputs[0]}'s dtype and device, contiguous",
              "    if c.numel() == 0:",
              "        return c"]
    if not k.int64:
        lines += [f"    for t in ({', '.join(inputs)},):",
                  "        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:",
                  "            raise OverflowError(\"a view spans 2^31 elements or more: this kernel has 32-bit offsets\")"]
    return lines


def dot_meta(dtype: str) -> list[str]:
    """The constexprs of a ``tl.dot`` that depend on the interpreter and torch's settings."""
    if dtype == "float32":
        return ["PRECISION=\"ieee\" if _INTERPRET else _precision,  # the interpreter has no TF32"]
    if dtype == "bfloat16":
        return ["UPCAST=_INTERPRET,  # the interpreter has no bfloat16 dot"]
    return []


def first_launch_tail(k, meta: list[str], blocks: str, split: str, fp32_dot: bool) -> list[str]:
    """The rest of ``_first_launch``: the constexprs ``meta``, the interpreter's blocks, the
    layout kept and launched (``split``: the K split's expression)."""
    ptrs = ", ".join([op.name for op in k.inputs] + ["c"])
    lines = []
    if fp32_dot:
        lines += ["    if _precision is None:",
                  "        _precision = _fp32_precision()"]
    return lines + ["    meta = dict("] + _wrap(meta, "        ") + ["    )"] + [
        "    if _INTERPRET:  # CPU tensors under Triton's interpreter: one heuristic config, so one grid",
        f"        meta.update({blocks})",
        "        grid = grid(meta)",
        "    if len(_layouts) >= 64:  # a caller cycling through layouts: start again",
        "        _layouts.clear()",
        f"    known = _Layout(tuple(c.shape), args, meta, grid, {split}, torch.{k.acc})",
        f"    known.run({ptrs}, scale)",
        "    _layouts[layout] = known",
        "    return c",
        "",
        "",
    ]


def layout_class_lines(k, name: str, split: bool) -> list[str]:
    """``_Layout``: what launching one layout takes, and its ``run``; ``split``: whether the
    kernel may split K (then ``run_split`` and the ``_finish`` pass)."""
    inputs = [op.name for op in k.inputs]
    ptrs = ", ".join(inputs + ["c"])
    lines = [
        "class _Layout:",
        "    \"\"\"What launching one layout takes: the output's shape, the arguments, the constexprs",
        "    and the grid, the K split and the partial sums' dtype; on a GPU, once Triton has",
        "    compiled the kernel (unsplit), its compiled launcher.\"\"\"",
        "",
        "    __slots__ = (\"shape\", \"args\", \"meta\", \"grid\", \"split\", \"acc\", \"compiled\")",
        "",
        "    def __init__(self, shape, args, meta, grid, split, acc):",
        "        self.shape, self.args, self.meta, self.grid = shape, args, meta, grid",
        "        self.split, self.acc = split, acc",
        "        self.compiled = None",
        "",
        f"    def run(self, {ptrs}, scale):",
    ]
    if split:
        lines += ["        if self.split > 1:",
                  f"            self.run_split({ptrs}, scale)",
                  "            return"]
    lines += [
        f"        if self.compiled is not None and self.compiled({ptrs}, scale):",
        "            return",
        "        if _INTERPRET:",
        f"            {name}[self.grid]({ptrs}, *self.args, scale, **self.meta)",
        "            return",
        f"        kernel = _tuned[self.grid]({ptrs}, *self.args, scale, **self.meta)",
        "        if self.compiled is None and _compiled_launches:",
        "            self.compiled = _compiled_launcher(kernel, self)",
    ]
    if split:
        lines += [
            "",
            f"    def run_split(self, {ptrs}, scale):",
            "        \"\"\"Partial sums of the K slices into a workspace, then the fixed-order second pass.\"\"\"",
            "        w = torch.empty((self.split, c.numel()), dtype=self.acc, device=c.device)",
            f"        launcher = {name} if _INTERPRET else _tuned",
            f"        launcher[self.grid]({', '.join(inputs)}, w, *self.args, scale, **self.meta)",
            "        block = 1024",
            f"        {name}_finish[(triton.cdiv(c.numel(), block),)](w, c, scale, NUMEL=c.numel(), SPLIT=self.split,",
            "                                                    BLOCK=block, HAS_SCALE=scale != 1.0)",
        ]
    return lines + ["", ""]


def compiled_lines(k) -> list[str]:
    """``_compiled_launcher`` and ``_no_compiled_launches``: on a GPU, later launches of a
    layout call the kernel Triton compiled for it directly."""
    inputs = [op.name for op in k.inputs]
    ptrs = ", ".join(inputs + ["c"])
    return [
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
        f"        n = {len(inputs) + 1} + len(layout.args) + 1  # pointers, strides, scale",
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


def precision_lines(fp32_dot: bool) -> list[str]:
    """``_fp32_precision`` where the module has an fp32 dot."""
    if not fp32_dot:
        return []
    return [
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


def forget_lines(fp32_dot: bool) -> list[str]:
    lines = ["def forget():",
             "    \"\"\"Forget the layouts set up so far" + (" and torch's fp32 precision" if fp32_dot else "") +
             ": the next launch of each sets it up again.\"\"\""]
    if fp32_dot:
        lines += ["    global _precision", "    _precision = None"]
    return lines + ["    _layouts.clear()", ""]


def describe(k) -> str:
    """``kind: terms -> output`` in canonical indices (``launch``'s docstring)."""
    terms = ", ".join("".join(index_name(i) for i in op.dims) for op in k.inputs)
    return f"{k.kind}: {terms} -> {''.join(index_name(i) for i in k.output.dims)}"
