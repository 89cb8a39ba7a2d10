"""The host side of every generated kernel: one :class:`Launcher` that generated modules import.

A generated module (``einc dump``, ``kernels/``, the kernel cache) holds its
``@triton.jit`` kernel, a ``layout`` function that reads one launch's sizes, stride
arguments and group extents from the operands, one line building its :class:`Launcher`,
and a short ``launch()``.  Everything else a launch takes lives here, once:

- **Configs and autotuning.**  Per kind and dtype (:func:`config_table`), pruned per shape
  (:meth:`Launcher.prune`: extent, shared memory); on a GPU compiled side by side before
  the autotuner times them (:mod:`.autotune`: its timer, one run for a slow config, and
  its results kept in Triton's cache folder across processes where this Triton can).
  ``screen()`` (:meth:`Launcher.screen`) launches the first of them untuned, for measure
  mode's first round.
- **Layouts.**  ``launch()`` costs little after the first call with a given *layout* (the
  operands' shapes, strides, dtypes, device and 16-byte alignment, and whether there is a
  scale): the first launch of a layout (:meth:`Launcher.first`) reads the sizes, refuses
  views a 32-bit kernel cannot address, decides the K split (split-K for K-dominant matrix
  products or too few tiles, split reductions for few outputs), builds the arguments, the
  constexprs and the grid, and keeps them as a :class:`Layout`; a later launch of that
  layout looks it up, allocates the output and launches.
- **Split-K.**  A split runs the kernel into a workspace of partial sums, and the one
  shared ``finish`` kernel adds them in a fixed order, scales and casts: the same bits on
  every run.
- **Compiled launches.**  On a GPU the first launch goes through ``triton.autotune`` and
  ``JITFunction.run``, which compile and specialize (pointer alignment, ``== 1`` and
  multiple-of-16 integers: a new class is a new layout, so it is seen here first); then
  :func:`compiled_launcher` keeps the compiled kernel's launcher, the config the autotuner
  chose and the grid, and later launches call that launcher directly, as
  ``JITFunction.run`` would (the way FlagGems' ``LibEntry`` skips Triton's per-call Python).
  Whatever does not look as expected turns those direct launches off for the kernel, for
  good, and its launches go through the autotuner, as Triton's own do.  Under Triton's
  interpreter the interpreter launches every time; the layout cache is the same.
- **The TMA variant.**  A 16-bit matrix product's module may hold a second kernel
  reading its operands through tensor descriptors, on a persistent grid (:mod:`.tma`);
  the first launch of a layout takes it where it applies (Hopper, no K split, operands
  a descriptor can read), and the layout then launches it as it would the module's.
- **Precision.**  fp32 matrix products read torch's TF32 policy once
  (:func:`fp32_precision`), at the first launch; :meth:`Launcher.forget` (or
  ``einc.cache_clear()``, which drops the modules) has it read again.

Written for triton 3.6 to 3.9 (the compiled-launch path reads their internals).
"""

from __future__ import annotations

import inspect
import os
import threading

import torch
import triton
import triton.language as tl

from . import tma as _tma
from .autotune import autotuner as _autotuner
from .autotune import before_timing as _before_timing
from .autotune import precompile as _precompile

MATMUL, REDUCE, FUSED = "matmul", "reduce", "fused"

# Hopper-grade configurations, per dtype's bits: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages).
# 16-bit data: BLOCK_K 64 (128-byte rows, the widest swizzle), 128x256 tiles first, as
# Triton's tutorial and inductor's H100 lists; fp32 (TF32 or FMA): BLOCK_K 32 (128-byte
# rows); fp64: tiles whose stages fit shared memory.  :meth:`Launcher.prune` drops, per
# shape, tiles far larger than the problem and configs over the shared-memory budget.
# Every config compiles for sm_90a without spilling registers on the suite's kernels with
# each triton of the version matrix, 3.6 to 3.9 (``bench/ptx_report.py``): that removed
# fp32's 128x256 and 64x128 tiles (the FMA dot, torch's default fp32 precision, spilled up
# to 4 KB there), gave fp32's 64x64 tile 8 warps, 16-bit's 32x64 tile BLOCK_K 32 and its
# 16x16 tile 2 stages, and fp64 BLOCK_K 16 (fp64 tiles with BLOCK_K 32 spilled 8-144 bytes
# with triton 3.6 and 3.7).  Not so for the pairwise family's fp32 kernels (tensors of four
# to six permuted indices): 1 to 3 of their 115 configs spill 8-24 bytes with each triton,
# a different config with each (bench/measured/ptx.md), small spills the autotuner still
# times (autotune.spilling).
_MATMUL = {
    16: [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4),
         (64, 256, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4),
         (32, 64, 32, 4, 4), (16, 64, 64, 4, 3), (16, 32, 128, 4, 3), (16, 16, 64, 2, 2)],
    32: [(128, 128, 32, 8, 4), (128, 64, 32, 4, 4), (64, 64, 32, 8, 4), (32, 64, 32, 4, 4),
         (16, 64, 32, 4, 3), (16, 32, 64, 4, 3), (16, 16, 32, 2, 3)],
    64: [(64, 64, 16, 4, 2), (32, 64, 16, 4, 3), (16, 32, 16, 4, 3), (16, 16, 16, 2, 2)],
}
# An index inside the tile's T axis (a batch index, or a row or column index that is an
# operand's only way to unit stride: a 3-D dot, which Triton runs on mma.sync, not wgmma):
# (BLOCK_T, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), per dtype's bits; the tiles
# that compile without spills for the suite's such kernels with triton 3.6 to 3.9 (16-bit:
# deeper or larger ones spilled 8 bytes to 29 KB with one triton or another; fp32, the FMA
# dot: 2x64x32 spilled 536-844 bytes on the pairwise family's 4- and 5-index kernels;
# fp64, checked on float64 copies of those kernels: 8x16x16 and 1x32x16 on 4 warps
# spilled 16-180 bytes with triton 3.6, 3.7 or 3.8).
_TILE_T = {16: [(2, 64, 32, 32, 4, 3), (8, 16, 32, 32, 4, 2), (1, 64, 64, 32, 4, 3)],
           32: [(2, 32, 32, 32, 4, 3), (4, 16, 32, 32, 4, 3), (8, 16, 32, 32, 4, 2), (1, 64, 32, 32, 4, 3)],
           64: [(2, 32, 32, 16, 4, 2), (4, 16, 16, 16, 4, 2), (2, 16, 32, 16, 4, 2), (1, 32, 32, 16, 8, 2)]}
# N loaded as a 2-D block (group ``nt``, ending in B's unit-stride index, by group ``n``,
# ending in the result's: write-bound steps; a 2-D dot of BLOCK_NT * BLOCK_N columns):
# (BLOCK_M, BLOCK_NT, BLOCK_N, BLOCK_K, num_warps, num_stages).  BLOCK_N spans the
# result's runs (16 for the suite's CCSD(T) terms, up to 64), BLOCK_NT the blocks of B's
# unit-stride index beside them.  Compiled for sm_90a with triton 3.6 to 3.9 on the
# suite's CCSD(T) terms (fp32) and on float64, float16 and bfloat16 copies: no config
# spills (fp64's 64-row tile on 4 warps spilled 96 bytes with 3.6 and 3.7: 8 warps),
# 16-byte loads, wgmma for 16-bit tiles of 64 rows or more; 16-bit K steps of 32 too,
# for K = 32.  Except fp32's second and third: the fastest on an H100 with triton 3.6
# (bench/gpu_variants.py, pw_ccsdt_dega_gfbc: bench/measured/h100-2026-11-26/README.md),
# though they spill with 3.6 and 3.9 (ptx_report), so they follow a config that does not,
# the one a kernel's first-round run takes (Launcher.first_config); the autotuner times
# them where they spill as little as with 3.6 and skips them where they spill as much as
# with 3.9 (autotune.SPILL_WORDS).  16-bit and fp64 not yet run on a GPU.
_TILE_NT = {16: [(128, 8, 16, 64, 8, 3), (64, 8, 16, 64, 4, 3), (128, 8, 16, 32, 8, 3), (64, 8, 16, 32, 4, 3),
                 (64, 4, 32, 32, 4, 3), (32, 4, 16, 32, 4, 3)],
            32: [(128, 8, 16, 32, 8, 3), (64, 16, 16, 32, 4, 2), (256, 8, 16, 32, 8, 2), (64, 8, 16, 32, 4, 3),
                 (64, 4, 32, 32, 4, 3), (128, 2, 64, 32, 8, 3), (32, 4, 16, 32, 4, 3)],
            64: [(64, 4, 16, 16, 8, 2), (32, 4, 16, 16, 4, 3), (32, 2, 32, 16, 4, 3), (16, 4, 16, 16, 4, 2)]}
# Reductions, by which tile axis has unit stride: (BLOCK_O, BLOCK_K, num_warps)
_REDUCE_K_FAST = [(1, 2048, 8), (2, 1024, 4), (4, 512, 4), (8, 256, 4), (16, 128, 4), (64, 32, 4)]
_REDUCE_O_FAST = [(512, 4, 4), (256, 8, 4), (128, 16, 4), (64, 32, 4), (32, 64, 4), (8, 256, 4)]
_ELEMENTWISE = [(256, 1, 4), (1024, 1, 4), (4096, 1, 8)]   # reduce kernels with no K
# Fused matrix products (no split-K): 16-bit, and fp32/fp64 with smaller K steps (the FMA
# dot, torch's default fp32 precision, spilled up to 43 KB with the 16-bit list's tiles).
_FUSED = {16: [(128, 128, 64, 8, 3), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
               (64, 64, 32, 4, 4), (32, 64, 32, 4, 4), (16, 64, 64, 4, 3)],
          32: [(64, 64, 16, 4, 4), (32, 64, 32, 4, 4), (16, 64, 32, 4, 3)]}
_FUSED[64] = _FUSED[32]

SHARED_MEMORY = 200 * 1024          # the budget for pipelined operand tiles (H100: 227 KiB per block)
BLOCK_SHARED = 227 * 1024           # all of a block's: with the TMA variant's staging tile for C
# the TMA variant's sizes a block must divide (a tile never straddles an index read through its own axis)
_TMA_QUANTA = (("TMA_QM", "BLOCK_M"), ("TMA_QN", "BLOCK_N"), ("TMA_QK", "BLOCK_K"))
K_GRANULE = {MATMUL: 256, REDUCE: 2048}     # a split-K slice is a multiple of every BLOCK_K
BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
MAX_LAYOUTS = 64                    # a caller cycling through more layouts starts again


tma_axis = _tma.axis       # the generated modules' ``layout`` reads their descriptors' axes with it


def config_table(table: str, dtype: str) -> list:
    """The ``triton.Config`` list named ``table`` (a generated module's ``configs=``) for ``dtype``:
    ``matmul``, ``matmul-t`` (an index in the tile's T axis), ``matmul-nt`` (N loaded as a
    2-D block), ``reduce-k`` / ``reduce-o`` (the
    unit-stride axis is K / O), ``elementwise`` (a reduce kernel with no K), ``fused``."""
    bits = BITS[dtype]
    if table == "matmul":
        return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
                for bm, bn, bk, w, s in _MATMUL[bits]]
    if table == "matmul-t":
        return [triton.Config({"BLOCK_T": bt, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
                for bt, bm, bn, bk, w, s in _TILE_T[bits]]
    if table == "matmul-nt":
        return [triton.Config({"BLOCK_M": bm, "BLOCK_NT": bnt, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w,
                              num_stages=s) for bm, bnt, bn, bk, w, s in _TILE_NT[bits]]
    if table == "fused":
        return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
                for bm, bn, bk, w, s in _FUSED[bits]]
    rows = {"reduce-k": _REDUCE_K_FAST, "reduce-o": _REDUCE_O_FAST, "elementwise": _ELEMENTWISE}.get(table)
    if rows is None:        # a module dumped by another einc (the 2-D K block's ``matmul-kt`` is gone)
        raise ValueError(f"einc: no kernel config table {table!r}: this generated module comes from another "
                         "einc version; regenerate it (einc dump; einc cache clear for the kernel cache)")
    return [triton.Config({"BLOCK_O": bo, "BLOCK_K": bk}, num_warps=w) for bo, bk, w in rows]


def block(extent: int, low: int, high: int) -> int:
    """The power of two covering ``extent``, clamped to [low, high]."""
    return max(low, min(high, triton.next_power_of_2(max(extent, 1))))


def processors(device) -> int:
    """How many programs run at once: the GPU's multiprocessors (4 under the interpreter)."""
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def split(programs: int, K: int, dominant: bool, processors: int, outputs: int, granule: int) -> tuple[int, int]:
    """``(SPLIT_K, K_SPLIT)``: how many programs share one output block's K range, and the
    slice each sums (a multiple of ``granule``, so of every BLOCK_K).  Split where K
    dominates or the programs would not fill the processors, and the partial sums
    (``outputs`` per slice) stay under 2^31 elements; a second pass adds them in a fixed
    order, so a split result has the same bits on every run."""
    if 2 * granule > K or not (dominant or programs < processors):
        return 1, max(K, 1)
    splits = min(64, K // granule, max(2, (2 * processors) // max(programs, 1)), 2**31 // max(outputs, 1))
    if splits < 2:
        return 1, max(K, 1)
    chunk = triton.cdiv(triton.cdiv(K, splits), granule) * granule
    return triton.cdiv(K, chunk), chunk


def dropped(x, axes):
    """``x`` without its dimensions ``axes`` (a view), for setting up a layout of a kernel
    lowered without them (``Kernel.drop``: each of size 1, summed in ``x`` only); that
    layout's launches pass ``x`` itself, the same memory.  Where one is not of size 1 the
    module was lowered for other shapes: an error, never a wrong answer."""
    if any(x.shape[d] != 1 for d in axes):
        raise ValueError(f"einc: this kernel was lowered for dimensions {axes} of size 1, not {tuple(x.shape)}")
    return x.squeeze(axes)


def merged(sizes, strides) -> bool:
    """Whether indices of these sizes and strides (slowest first) walk memory as one index."""
    return all(s == n * t for s, n, t in zip(strides, sizes[1:], strides[1:]))


def layout_class(tensors, strides) -> str:
    """The layout's class as Triton's JIT specializes a kernel on it: each stride 1, a
    multiple of 16 or neither; each operand 16-byte aligned or not.  The autotuner's key
    holds it (``LAYOUT``), so that a config tuned for one layout is not reused for another
    of the same shape; it costs no compilation, as Triton compiles one kernel per class."""
    return "".join("1" if s == 1 else "D" if s % 16 == 0 else "-" for s in strides) + ":" + \
        "".join("-" if t.data_ptr() % 16 else "D" for t in tensors)


def fp32_precision() -> str:
    """``"tf32"`` where torch lets fp32 matrix products use TF32, else ``"ieee"``.

    torch's ``torch.backends.cuda.matmul.fp32_precision`` where it has one, else the older
    ``allow_tf32``; torch raises on reading one after the other was set, so either may
    answer, and ``"ieee"`` where neither does.  Read once per kernel, at its first launch;
    :meth:`Launcher.forget` has it read again."""
    matmul = torch.backends.cuda.matmul
    try:
        return "tf32" if matmul.fp32_precision == "tf32" else "ieee"
    except Exception:
        pass
    try:
        return "tf32" if matmul.allow_tf32 else "ieee"
    except Exception:
        return "ieee"


def _finish(w_ptr, c_ptr, scale, NUMEL: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
            HAS_SCALE: tl.constexpr):
    # Split reductions wrote SPLIT partial results, one after the other; add them in order.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < NUMEL
    acc = tl.load(w_ptr + offs, mask=mask, other=0.0)
    for s in range(1, SPLIT):
        acc += tl.load(w_ptr + s * NUMEL + offs, mask=mask, other=0.0)
    if HAS_SCALE:
        acc = acc * scale
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


# Triton's interpreter patches triton.language while it runs a kernel: one interpreted
# launch at a time in the process (learn mode runs kernels on a background thread too)
_INTERPRETER = threading.RLock()
_FINISH: dict = {}      # interpreted or not -> the jitted ``_finish`` (triton.jit reads TRITON_INTERPRET)


def finish_kernel(interpret: bool):
    """The split-K second pass, jitted once per mode (interpreted for CPU tensors, or not)."""
    kernel = _FINISH.get(interpret)
    if kernel is None:
        kernel = _FINISH[interpret] = triton.jit(_finish)
    return kernel


def _arg_names(kernel) -> list[str]:
    names = getattr(kernel, "arg_names", None)
    return list(names) if names is not None else list(inspect.signature(kernel.fn).parameters)


class Launcher:
    """Launches one generated kernel.  ``layout(*operands)`` (the module's) returns one
    launch's output shape, stride arguments (between the pointers and ``scale``) and
    sizes (the ``size_*`` constants and the group extents, plus ``MERGED_K`` where the
    kernel has it); ``kind`` (``matmul``, ``reduce``, ``fused``) says how the grid and the
    K split follow from them, ``configs`` names the autotuner's table (:func:`config_table`),
    ``offsets`` is 32 or 64 (a 32-bit kernel refuses views that reach 2^31 elements);
    ``tma``, the module's TMA variant of its kernel, where it has one (:mod:`.tma`)."""

    def __init__(self, kernel, layout, *, kind: str, dtype: str, configs: str, offsets: int = 32, tma=None):
        self.kernel, self.layout, self.kind, self.dtype = kernel, layout, kind, dtype
        self.interpret = os.environ.get("TRITON_INTERPRET") == "1"
        self.layouts: dict = {}          # layout key -> Layout (cleared, never rebound: modules hold it)
        self.compiled_launches = not self.interpret     # off for good once one fails
        self.precision = None            # torch's fp32 matmul precision, read at the first launch
        self.int64 = offsets == 64
        self.dot = kind != REDUCE
        self.acc = torch.float64 if dtype == "float64" else torch.float32
        self.granule = K_GRANULE.get(kind)          # None: the kernel never splits K
        names = _arg_names(kernel)
        self.pointers = sum(n.endswith("_ptr") for n in names)
        self.tile_t = "BLOCK_T" in names
        self.tile_nt = "BLOCK_NT" in names         # N loaded as a 2-D block
        self.configs = config_table(configs, dtype)
        key = [n for n in names if n.startswith("size_")] + \
            [n for n in ("SPLIT_K", "MERGED_K", "PRECISION", "LAYOUT") if n in names]
        pruning = {"prune_configs_by": {"early_config_prune": self.prune}} if kind != FUSED else {}
        self.tuned = _autotuner(kernel, configs=self.configs, key=key, **pruning)
        self.tma = None if tma is None else \
            _tma.Variant(tma, key + ["TMA_A", "TMA_B", "TMA_C"], self.prune, _autotuner)
        self.finish = finish_kernel(self.interpret) if self.granule else None
        # Setting up a layout and Triton's autotuner are not thread-safe, and learn mode sets
        # kernels up on a background thread while the caller's thread may launch the same
        # module (another entry's key): both take this lock (a known layout's compiled
        # launch does not)
        self.lock = threading.RLock()

    def prune(self, configs, named_args, **kwargs):
        """The configs worth timing for this shape: no tile (block) much larger than the
        problem (the K slice), none over the shared-memory budget; the smallest where
        nothing else is left."""
        K = min(kwargs["K"], kwargs.get("K_SPLIT", kwargs["K"]))     # (the TMA variant never splits K)
        if self.kind == REDUCE:
            outputs = kwargs["O"]
            kept = [c for c in configs if c.kwargs["BLOCK_O"] <= triton.next_power_of_2(max(outputs, 1))
                    and c.kwargs["BLOCK_K"] <= max(1, triton.next_power_of_2(max(K, 1)))]
            return kept or [min(configs, key=lambda c: c.kwargs["BLOCK_O"] * c.kwargs["BLOCK_K"])]
        M, N, T = kwargs["M"], kwargs["N"], kwargs["T"]
        itemsize = BITS[self.dtype] // 8
        fit = lambda x, block: block <= max(16, triton.next_power_of_2(max(x, 1)))  # noqa: E731
        NT = kwargs.get("NT", 1)
        tiles = lambda c: (c.num_stages * c.kwargs.get("BLOCK_T", 1) * itemsize * c.kwargs["BLOCK_K"]  # noqa: E731
                           * (c.kwargs["BLOCK_M"] + c.kwargs.get("BLOCK_NT", 1) * c.kwargs["BLOCK_N"]))
        store = lambda c: itemsize * c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] if kwargs.get("TMA_C") == 1 else 0  # noqa: E731
        kept = [c for c in configs if fit(M, c.kwargs["BLOCK_M"]) and fit(N, c.kwargs["BLOCK_N"])
                and fit(K, c.kwargs["BLOCK_K"])
                and c.kwargs.get("BLOCK_T", 1) <= triton.next_power_of_2(T)
                and c.kwargs.get("BLOCK_NT", 1) <= triton.next_power_of_2(NT)
                and tiles(c) <= SHARED_MEMORY and tiles(c) + store(c) <= BLOCK_SHARED
                and all(kwargs.get(q, 0) % c.kwargs[b] == 0 for q, b in _TMA_QUANTA)]
        return kept or [min(configs,
                            key=lambda c: c.kwargs.get("BLOCK_T", 1) * c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]

    def split(self, programs, K, dominant, processors, outputs):
        """:func:`split` with this kernel's granule."""
        return split(programs, K, dominant, processors, outputs, self.granule)

    def processors(self, device) -> int:
        return processors(device)

    def tma_device(self, device) -> bool:
        """Whether the TMA variant may run on ``device`` (under the interpreter: where tests say so)."""
        return _tma.ANYWHERE if self.interpret else _tma.supported_device(device)

    def first(self, key, operands, scale):
        """Launch a layout not seen before, and keep what launching it takes under ``key``."""
        with self.lock:
            c, known = self._set_up(operands, scale)
            if known is None:
                return c
            if len(self.layouts) >= MAX_LAYOUTS:
                self.layouts.clear()
            try:
                with _before_timing(lambda: known.precompile((*operands, c), scale)):
                    known.run((*operands, c), scale)
            except Exception as e:
                if known.variant is None:
                    raise
                with _before_timing(lambda: None):      # (its timings too, one launch at a time)
                    known = _tma.fall_back(self, e, operands, scale, c)     # the module's kernel from now on
            self.layouts[key] = known
            return c

    def screen(self, operands, scale=1.0, config=None):
        """Launch once with one config and no tuning: ``config`` (a ``triton.Config`` of this
        kernel's table), by default the first config the autotuner would time for this shape
        (:meth:`prune`); under the interpreter, its one config.  Measure mode's first round
        (:func:`einc.runtime.select.measure`) runs a kernel so before deciding whether it is
        worth tuning (``bench/gpu_variants.py`` times configs so).  Nothing is kept: the next
        launch of this layout is set up and tuned as usual (Triton reuses the config's
        compiled kernel)."""
        with self.lock:
            c, known = self._set_up(operands, scale)
            if known is not None:
                if not self.interpret:
                    known.config = config or self.first_config(known.meta)
                known.run((*operands, c), scale)
            return c

    def first_config(self, meta):
        """The config the autotuner times first for a launch with these constexprs."""
        return self.timed_configs(meta)[0]

    def timed_configs(self, meta) -> list:
        """The configs the autotuner times for a launch with these constexprs."""
        configs = self.tma.configs if "TMA_A" in meta else self.configs
        return configs if self.kind == FUSED else self.prune(configs, None, **meta)

    def _set_up(self, operands, scale):
        """``(output, Layout)`` of a launch on ``operands`` (``(output, None)`` where the
        output is empty: nothing to launch)."""
        shape, args, sizes = self.layout(*operands)
        c = operands[0].new_empty(shape)  # the first operand's dtype and device, contiguous
        if c.numel() == 0:
            return c, None
        if not self.int64:
            for t in operands:
                if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
                    raise OverflowError("a view spans 2^31 elements or more: this kernel has 32-bit offsets")
        if self.dot and self.dtype == "float32" and self.precision is None:
            self.precision = fp32_precision()
        meta, grid, splits = self._meta(sizes, operands, args, c, scale)
        axes, variant = meta.pop("TMA", None), None
        if self.tma is not None and self.tma.applies(meta, axes, splits, operands, self.tma_device(c.device)):
            variant = self.tma
            meta, grid = variant.meta(meta, axes, self.interpret, self.processors(c.device))
        return c, Layout(self, tuple(c.shape), args, meta, grid, splits, variant)

    def _meta(self, sizes, operands, args, c, scale):
        """The constexprs, the grid and the K split of one layout."""
        meta = dict(sizes)
        K = meta["K"]
        if self.kind == REDUCE:
            outputs = meta["O"]
            SPLIT_K, K_SPLIT = self.split(triton.cdiv(outputs, 64), K, False, self.processors(c.device), outputs)
            grid = lambda m: (triton.cdiv(outputs, m["BLOCK_O"]), SPLIT_K)  # noqa: E731
            blocks = dict(BLOCK_O=block(outputs, 1, 256), BLOCK_K=block(K, 1, 64))
        else:
            M, N, BATCH, T = meta["M"], meta["N"], meta["BATCH"], meta.get("T", 1)
            blocks = dict(BLOCK_M=block(M, 16, 64), BLOCK_N=block(N, 16, 64), BLOCK_K=block(K, 16, 64))
            if self.tile_t:
                blocks["BLOCK_T"] = block(T, 1, 4)
            if self.tile_nt:            # the product's N is BLOCK_NT * BLOCK_N >= 16
                blocks["BLOCK_NT"] = block(meta["NT"], 1, 4)
            if self.kind == MATMUL:
                NT = meta.get("NT", 1)      # N as a 2-D block: NT's blocks by the inner N's
                tiles = BATCH * T * triton.cdiv(M, 128) * triton.cdiv(NT * N, 128)
                SPLIT_K, K_SPLIT = self.split(tiles, K, 32 * max(M, NT * N) <= K, self.processors(c.device),
                                              c.numel())
                grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]) * BATCH  # noqa: E731
                                  * triton.cdiv(T, m.get("BLOCK_T", 1)) * triton.cdiv(NT, m.get("BLOCK_NT", 1)),
                                  SPLIT_K)
            else:
                SPLIT_K = K_SPLIT = None
                grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]) * BATCH,)  # noqa: E731
        if SPLIT_K is not None:
            meta.update(SPLIT_K=SPLIT_K, K_SPLIT=K_SPLIT)
        meta.update(HAS_SCALE=scale != 1.0, LAYOUT=layout_class(operands, args))
        if self.dot:
            meta["GROUP_M"] = 8
            if self.dtype == "float32":
                meta["PRECISION"] = "ieee" if self.interpret else self.precision   # the interpreter has no TF32
            elif self.dtype == "bfloat16":
                meta["UPCAST"] = self.interpret          # the interpreter has no bfloat16 dot
        if self.interpret:  # CPU tensors under Triton's interpreter: one heuristic config, so one grid
            meta.update(blocks)
            grid = grid(meta)
        return meta, grid, SPLIT_K or 1

    def no_compiled_launches(self) -> None:
        """Launch through the autotuner and Triton's JIT from now on (nothing is lost but time)."""
        self.compiled_launches = False
        for known in self.layouts.values():
            known.compiled = None

    def forget(self) -> None:
        """Forget the layouts set up so far and torch's fp32 precision: the next launch of
        each sets it up again."""
        self.precision = None
        self.layouts.clear()


class Layout:
    """What launching one layout takes: the output's shape, the arguments, the constexprs,
    the grid and the K split; the TMA :class:`~.tma.Variant` where it runs this layout
    (else None: the module's kernel); on a GPU, once Triton has compiled the kernel
    (unsplit), its compiled launcher, or a ``config`` that it runs with instead of the
    autotuner's (:meth:`Launcher.screen`)."""

    __slots__ = ("launcher", "shape", "args", "meta", "grid", "split", "compiled", "config", "variant")

    def __init__(self, launcher: Launcher, shape, args, meta, grid, split, variant=None):
        self.launcher, self.shape, self.args, self.meta, self.grid = launcher, shape, args, meta, grid
        self.split, self.variant = split, variant
        self.compiled = None
        self.config = None

    @property
    def tuned(self):
        """The autotuned kernel this layout launches."""
        return (self.variant or self.launcher).tuned

    def _kernel(self):
        """The kernel to index with the grid, and the config's arguments to add: the
        autotuned kernel, else (the interpreter, or a fixed config) the kernel itself."""
        kernel = (self.variant or self.launcher).kernel
        if self.config is not None:
            return kernel, self.config.all_kwargs()
        return (kernel if self.launcher.interpret else self.tuned), {}

    def precompile(self, pointers, scale) -> None:
        """On a GPU, compile the configs the autotuner times for this layout side by side
        (:mod:`.autotune`), when it starts timing them (``pointers``, ``scale``: the launch's)."""
        launcher = self.launcher
        if launcher.interpret or self.config is not None:
            return
        if self.split > 1:
            pointers = (*pointers[:-1], self.workspace(pointers[-1]))
        kernel = (self.variant or launcher).kernel
        _precompile(kernel, launcher.timed_configs(self.meta), (*pointers, *self.args, scale), self.grid,
                    self.meta, pointers[-1].device)

    def workspace(self, c):
        """The partial sums of a split launch writing ``c``: one row per K slice."""
        return torch.empty((self.split, c.numel()), dtype=self.launcher.acc, device=c.device)

    def run(self, pointers, scale):
        """Launch on ``pointers`` (the operands, then the output)."""
        if self.variant is not None and not self.launcher.interpret:
            _tma.ensure_allocator()        # the descriptors' scratch, on this thread
        if self.compiled is not None and self.split == 1 and self.compiled(pointers, scale):
            return
        launcher = self.launcher
        with _INTERPRETER if launcher.interpret else launcher.lock:
            if self.split > 1:
                self.run_split(pointers, scale)
                return
            if launcher.interpret or self.config is not None:
                kernel, fixed = self._kernel()
                kernel[self.grid](*pointers, *self.args, scale, **self.meta, **fixed)
                return
            kernel = self.tuned[self.grid](*pointers, *self.args, scale, **self.meta)
            if self.compiled is None and launcher.compiled_launches:
                self.compiled = compiled_launcher(launcher, kernel, self)

    def run_split(self, pointers, scale):
        """Partial sums of the K slices into a workspace, then the fixed-order second pass."""
        launcher, c = self.launcher, pointers[-1]
        w = self.workspace(c)
        kernel, fixed = self._kernel()
        kernel[self.grid](*pointers[:-1], w, *self.args, scale, **self.meta, **fixed)
        size = 1024
        launcher.finish[(triton.cdiv(c.numel(), size),)](w, c, scale, NUMEL=c.numel(), SPLIT=self.split,
                                                         BLOCK=size, HAS_SCALE=scale != 1.0)


def compiled_launcher(launcher: Launcher, kernel, layout: Layout):
    """``run(pointers, scale)`` launching ``kernel``, which Triton compiled for ``layout``,
    with the config the autotuner chose and a ready grid, as JITFunction.run launches it
    (triton 3.6-3.9) but without re-binding, re-specializing and hashing every argument
    and rebuilding the autotuner's key each time.  ``run`` returns False where Triton's
    own path must launch instead: launch hooks (a profiler), another current device, an
    output not 16-byte aligned.  Anything unexpected turns these launches off for good."""
    try:
        tuned = layout.tuned
        config = tuned.best_config
        meta = {**layout.meta, **config.kwargs}
        params = tuned.fn.params
        n = launcher.pointers + len(layout.args) + 1  # pointers, strides, scale
        if [p.is_constexpr for p in params] != [False] * n + [True] * (len(params) - n) \
                or len(kernel.src.signature) != len(params) \
                or (kernel.metadata.num_warps, kernel.metadata.num_stages) != (config.num_warps, config.num_stages):
            raise RuntimeError("this Triton's kernel does not look as expected")
        constexprs = tuple(meta[p.name] for p in params[n:])
        g0, g1, g2 = (tuple(layout.grid(meta)) + (1, 1))[:3]
        call = kernel.run  # (first: it loads the kernel where that is still to do)
        function, packed = kernel.function, kernel.packed_metadata
        if function is None:
            raise RuntimeError("the compiled kernel is not loaded")
        driver = triton.runtime.driver.active
        current_device, current_stream = driver.get_current_device, driver.get_current_stream
        device = current_device()
        hooks = triton.knobs.runtime
        args = layout.args
    except Exception:
        launcher.no_compiled_launches()
        return None

    def run(pointers, scale):
        enter = hooks.launch_enter_hook
        if (enter is not None and getattr(enter, "calls", True)) or pointers[-1].data_ptr() % 16 \
                or current_device() != device:
            return False
        try:
            call(g0, g1, g2, current_stream(device), function, packed, None, enter, hooks.launch_exit_hook,
                 *pointers, *args, scale, *constexprs)
        except Exception:
            launcher.no_compiled_launches()
            return False
        return True
    return run


__all__ = ["Launcher", "Layout", "compiled_launcher", "config_table", "split", "merged", "dropped", "block",
           "processors", "layout_class", "fp32_precision", "finish_kernel", "SHARED_MEMORY", "K_GRANULE"]
