"""Permuting copies: a tensor over one index order copied into a contiguous tensor over
another, as cheaply as torch's ops allow on the CPU.

torch copies a permuted view element by element in the destination's order, in loops
over the destination's innermost run, the trailing indices that are also contiguous,
in the same order, in the source.  The cost per element is the loop's more than the
memory's where that run is short: a 6-index CCSD(T) result whose runs are 8 float32
(32 bytes) copies at several times a plain copy's cost per element (1 thread; measured
in bench/measured/pairwise.md).  :func:`permuted_copy` therefore:

- copies a permutation that swaps two blocks of indices (``(b, i, j) -> (i, j, b)``)
  as a 2-D transpose (torch's, in cache-sized blocks through a buffer) where the tiles
  below are not taken and :func:`transposes` says so: only where torch's loop over the
  permutation reads lines that fall in few cache sets, its source rows a multiple of a
  large power of two bytes apart, and the blocks are long.  Elsewhere that loop is
  faster than the transpose, most where the destination's innermost block is short (32
  rows, as the suite's ``ibnd,jbnd->ijbn``), and up to 1 MiB where the rows are not a
  power of two bytes apart (``python bench/rotations.py``, measured in
  bench/measured/rotation-copies-2026-12-02.md);
- copies a tensor of at least :data:`MIN_BYTES` whose run is 16, 32 or 48 bytes, as
  wider elements (the run's bytes reinterpreted as one to :data:`WIDE_MOST`
  ``complex128``, each of at least four of the tensor's elements): the copy moves the
  same bits in fewer, wider elements.
  ``python bench/permute_copy.py`` (1 thread, measured in bench/measured/pairwise.md):
  the CCSD(T) results' runs of 8 float32 (two complex128) and runs of 16 bytes (4
  float32, 8 float16, 16 bool: one complex128) copy faster so; runs of 4 or more
  complex128 gain nothing, hence :data:`WIDE_MOST`.  Runs of 8 bytes as one ``int64``
  were not robust (faster or slower by dtype, shape and load), nor three ``int64`` (24
  bytes), nor pairs as ``complex128`` (float64, complex64: a gain in one measurement
  only): none is taken.  Below :data:`MIN_BYTES` the extra views cost more than they
  save.  Where each run is one ``complex128`` and the other indices swap
  two blocks where :func:`transposes` says so for 16-byte elements (pykeen's NTN result
  ``(c, b, d) -> (b, c, d)``), the wide copy is a 2-D transpose of them
  (``bench/broadcast.py``, bench/measured/broadcast-2026-12-02.md; ``bench/rotations.py``);
- copies a transposing permutation (the source's unit-stride index moved) of at least
  :data:`MIN_BYTES` in tiles where torch's copy would not keep what it reads in cache
  (:func:`tile_plan`): torch loops in the destination's order, and every destination
  index inside the source's unit-stride one is looped over once per value of it; where
  those loops read more lines or pages than the caches and the TLB hold (the source's
  innermost index moved outermost, as in ``akbc,jk->cjba``'s result), each source line
  is fetched again for each of its elements, many times a plain copy's time.  Cutting
  those loops' farthest indices into tiles, all copied by one ``torch._foreach_copy_``
  of views (no Python loop per tile), brings it near torch's floor, an element-wise
  strided copy, which costs about twice a plain copy even from L1 (``python
  bench/permute_copy.py --perms``, bench/measured/permute-copy-2026-12-02.md);
- copies everything else with ``permute(...).contiguous()``.

A copy of at least 256 KiB runs, once it is ready, as C++ code TorchInductor compiled for
it in the background, where that was timed faster than the above
(:mod:`einc.runtime.torch_executor.compiled_copy`).

Two partial permutes through a temporary were measured too and lost to the tiles (two
passes cost at least two copies); transposes of blocks small enough for the caches keep
torch's own copy.  What pays beyond that, for products larger than the last-level
cache, is making the product itself a chunk at a time, each chunk copied while in
cache: :mod:`einc.runtime.torch_executor.chunked`.

Reinterpreting the bits is exact for every dtype (a copy does no arithmetic on them),
but ``Tensor.view(dtype)`` and ``_foreach_copy_`` into a fresh tensor are not
differentiable: the wide and tiled copies are taken only for a
plain CPU tensor with contiguous strides that nothing tracks (:func:`untracked`: no
gradient to be taken, forward AD, ``torch.func`` or tracing) and that has no lazy
conjugate or negative bit; anything else takes the plain copy.
"""

from __future__ import annotations

import math

import torch
import torch.autograd.forward_ad as _forward_ad

from ...planner.strides import contiguous
from . import compiled_copy, reuse
from .compiled_copy import admits, ready, recorded_copy, settled

MIN_BYTES = 1 << 18     # smaller copies: the plain one
TRANSPOSE_MIN = 32      # a block swap as a 2-D transpose: the source's trailing block at least this long,
TRANSPOSE_ROWS = 64     # ... its leading block at least this long, plus
TRANSPOSE_ROW_BYTE = 8  # ... this many elements per byte of an element,
TRANSPOSE_PER_SET = 64  # ... and this many times the rows' period in the cache's sets,
ALIAS_SPAN = 4096       # ... lines this many bytes apart sharing a set
WIDE_MOST = 3           # wide (complex128) elements per run, at most
TILE_BYTES = 1 << 21    # tiled copies: from this size
TILE_LINES = 1 << 12    # a tile's copy: source lines read per value of the source's unit-stride index,
TILE_PAGES = 64         # ... on at most this many pages,
TILE_LEAST = 1 << 15    # ... and at least this many elements per tile,
TILE_ROW = 256          # ... and at least this many bytes of the destination's innermost index
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_legacy_batched = torch._C._functorch.is_legacy_batchedtensor     # torch.autograd's is_grads_batched


def _rotation(src, dst):
    """``k`` where ``dst`` is ``src`` rotated (``dst[k:] + dst[:k] == src``), else None."""
    return next((k for k in range(1, len(dst)) if dst[k:] + dst[:k] == src), None)


def permuted_copy(src, dst, sizes):
    """``fn(x)``: ``x``, a tensor over the index order ``src``, as a contiguous tensor over
    ``dst`` (the same indices in another order; ``sizes`` maps each to its size): a copy,
    unless the permuted view of ``x`` is contiguous already (size-1 indices moved).
    Differentiable as ``x.permute(...).contiguous()`` is (see the module's docstring
    for when the wide and the tiled copies are taken)."""
    src, dst = list(src), list(dst)
    perm = tuple(src.index(i) for i in dst)
    shape = tuple(sizes[i] for i in src)
    if 0 in shape:
        return lambda x: x.permute(perm).contiguous()
    block = None
    cut = _rotation(src, dst)
    if cut is not None:
        block = (math.prod(sizes[i] for i in src[:len(dst) - cut]), math.prod(sizes[i] for i in src[len(dst) - cut:]))
    return _Copy(perm, shape, block)


class _Copy:
    """``x.permute(perm).contiguous()`` for an ``x`` of ``shape``, as wide elements or in
    tiles where that is cheaper (decided once per element size, for the contiguous
    strides: the product of a step, or an operand as it comes), else as a 2-D transpose
    of the blocks ``block`` (rows, cols: the permutation swaps two blocks) where
    :func:`transposes` says so, else the plain copy."""

    __slots__ = ("perm", "contiguous", "source", "shape", "strides", "block", "plans", "compiles", "copy")

    def __init__(self, perm, shape, block=None):
        strides = contiguous(shape)
        self.perm, self.contiguous, self.block = perm, strides, block
        self.source = tuple(shape)
        self.shape = tuple(shape[p] for p in perm)
        self.strides = tuple(strides[p] for p in perm)
        self.plans = {}
        # a large copy may be written into the memory of an intermediate the call has deleted
        self.copy = reuse.contiguous if math.prod(shape) >= reuse.MIN_ELEMENTS else torch.Tensor.contiguous
        live = [d for d in perm if shape[d] != 1]
        # a compiled copy may run: elements are moved (else the permuted view is contiguous),
        # and enough of them for the widest admitted dtype (a small copy is spared the checks)
        self.compiles = live != sorted(live) and math.prod(shape) * 8 >= compiled_copy.MIN_BYTES

    def plan(self, itemsize):
        """``("wide", merged shape, dtype, ratio, wide block)``, ``("tiles", ways)`` or False
        (for a plain contiguous tensor that nothing tracks), and ``block`` where the copy,
        for any other tensor or where that is False, is a 2-D transpose, else None."""
        block = self.block if self.block and transposes(*self.block, itemsize) else None
        if math.prod(self.shape) * itemsize < MIN_BYTES:
            return False, block
        wide = wide_plan(self.shape, self.strides, 0, itemsize)
        if wide:
            return ("wide", *wide, self._wide_block(len(wide[0]) - 1, wide[2], itemsize)), block
        ways = tile_plan(self.shape, self.strides, itemsize)
        return ways and ("tiles", ways), block

    def _wide_block(self, k, ratio, itemsize):
        """``(rows, cols)`` where the wide copy, its runs one ``complex128`` each, swaps two
        blocks of the source's other indices (``(c, b, d) -> (b, c, d)``, ``d`` the run): a 2-D
        transpose, which torch copies in cache-sized blocks, where the same copy as a
        permutation of three or more dimensions reads the source with a long stride per
        element (pykeen's NTN result, ``(500, 256, 4)`` float32); else None."""
        source = [d for d in range(len(self.contiguous)) if d not in self.perm[k:]]
        shape = {d: self.shape[self.perm.index(d)] for d in source}
        live = [d for d in source if shape[d] != 1]
        cut = _rotation(live, [d for d in self.perm[:k] if shape[d] != 1])
        if cut is None or math.prod(self.shape[k:]) * itemsize != 16:
            return None
        split = len(live) - cut
        rows, cols = math.prod(shape[d] for d in live[:split]), math.prod(shape[d] for d in live[split:])
        return (rows, cols) if transposes(rows, cols, 16) else None

    def __call__(self, x):
        if (self.compiles and not settled(self.perm, self.source, x) and x.shape == self.source
                and x.stride() == self.contiguous and x.device.type == "cpu" and unwatched(x) and admits(x)):
            fn = ready(self.perm, self.source, x, self.own)
            if fn is not None:
                return recorded_copy(fn, x, self.perm) if x.requires_grad and torch.is_grad_enabled() else fn(x)
        return self.own(x)

    def own(self, x):
        """einc's own copy (the compiled one, where it is ready, runs in its place:
        :mod:`einc.runtime.torch_executor.compiled_copy`)."""
        plans = self.plans.get(x.element_size())
        if plans is None:
            plans = self.plans[x.element_size()] = self.plan(x.element_size())
        plan, block = plans
        if plan and untracked(x) and x.stride() == self.contiguous and not x.is_conj() and not x.is_neg():
            y = x.permute(self.perm)
            if plan[0] == "tiles":
                out = reuse.spare(self.shape, x.dtype, x.device)
                out = torch.empty(self.shape, dtype=x.dtype, device=x.device) if out is None else out
                torch._foreach_copy_(_tiles(out, plan[1]), _tiles(y, plan[1]))
                return out
            _, merged, dtype, ratio, wide = plan
            if x.storage_offset() % ratio == 0 and wide:
                return self.copy(x.view(wide[0], -1).view(dtype).t()).view(x.dtype).view(self.shape)
            if x.storage_offset() % ratio == 0:
                return self.copy(y.reshape(merged).view(dtype)).view(x.dtype).view(self.shape)
        if block:
            return self.copy(x.reshape(block).t()).view(self.shape)
        return self.copy(x.permute(self.perm))


def transposes(rows, cols, itemsize) -> bool:
    """Whether a block swap, ``rows`` x ``cols`` elements of ``itemsize`` bytes (rows: the
    source's leading block, the destination's innermost), copies faster as a 2-D transpose
    (torch's, in cache-sized blocks through a buffer) than as the permutation (torch's loop
    over ``rows`` elements of the source, ``cols`` apart, per destination row).  That loop
    keeps the lines it reads in cache for the next rows unless they share a few cache
    sets: lines :data:`ALIAS_SPAN` bytes apart share a set, so the source's rows return to
    a set every ``ALIAS_SPAN / gcd(row stride, ALIAS_SPAN)`` rows, one where the stride is
    a multiple of it.  The transpose pays where ``rows`` is at least
    :data:`TRANSPOSE_PER_SET` times that period and long enough for its buffered blocks to
    cost less than the loop's misses, :data:`TRANSPOSE_ROWS` plus :data:`TRANSPOSE_ROW_BYTE`
    per byte of an element (wider elements need more rows), ``cols`` at least
    :data:`TRANSPOSE_MIN` and the copy :data:`MIN_BYTES` or more; everywhere else the
    permutation's loop is the faster."""
    period = ALIAS_SPAN // math.gcd(cols * itemsize, ALIAS_SPAN)
    return (rows * cols * itemsize >= MIN_BYTES and cols >= TRANSPOSE_MIN
            and rows >= max(TRANSPOSE_ROWS + TRANSPOSE_ROW_BYTE * itemsize, TRANSPOSE_PER_SET * period))


def plain(x) -> bool:
    """Whether ``x`` is a plain tensor that nothing records: no autograd (a gradient to be
    taken), and :func:`unwatched`.  Ops that are not differentiable (``view(dtype)``,
    ``out=``) may run on it."""
    return not (x.requires_grad and torch.is_grad_enabled()) and unwatched(x)


def unwatched(x) -> bool:
    """Whether nothing but autograd may record ``x``: no forward AD, ``torch.func``, legacy
    batching (``is_grads_batched``, vectorized jacobians), tracing (``torch.jit.trace``) or
    tensor subclass (fake tensors under ``torch.compile``)."""
    return (type(x) is torch.Tensor and _forward_ad._current_level < 0 and not _wrapped(x)
            and not _legacy_batched(x) and torch._C._get_tracing_state() is None)


def untracked(x) -> bool:
    """Whether ``x`` is a :func:`plain` CPU tensor (the copies here and the chunks of
    :mod:`einc.runtime.torch_executor.chunked` are measured on the CPU)."""
    return x.device.type == "cpu" and plain(x)


def wide_plan(shape, strides, offset, itemsize):
    """How a tensor of ``shape``/``strides`` (in elements of ``itemsize`` bytes, from
    ``offset``) is copied as wide elements: ``(shape with the run merged, wide dtype,
    elements per wide element)``, or False where the plain copy is cheaper or the bits
    cannot be reinterpreted."""
    run, expect, k = 1, 1, len(shape)
    while k and (shape[k - 1] == 1 or strides[k - 1] == expect):
        if shape[k - 1] != 1:
            run *= shape[k - 1]
            expect *= shape[k - 1]
        k -= 1
    if k == 0:
        return False                    # contiguous: no permutation
    nbytes = run * itemsize
    ratio = 16 // itemsize
    if ratio < 4 or nbytes % 16 or nbytes > WIDE_MOST * 16:
        return False
    if offset % ratio or any(s % ratio for s in strides[:k]):
        return False
    return tuple(shape[:k]) + (run,), torch.complex128, ratio


def tile_plan(shape, strides, itemsize):
    """How a transposing copy of the view ``shape``/``strides`` (the destination's order,
    the source's strides, in elements of ``itemsize`` bytes) is cut into tiles: the number
    of ways each dimension is cut (one tile per combination), or False for one copy.

    torch copies in the destination's order, and loops over every destination dimension
    inside the source's unit-stride one once per value of it: the source lines and pages
    those loops read are read again for the next value and must stay in cache and in the
    TLB meanwhile (tensors under :data:`TILE_BYTES` stay in L2 whole: they are not cut).
    Those dimensions are cut, the one farthest apart in the source first, until the loops
    read at most :data:`TILE_LINES` lines on at most :data:`TILE_PAGES` 4 KiB pages, or the
    tiles would hold fewer than :data:`TILE_LEAST` elements each (each costs a copy's
    set-up).  The destination's innermost dimension is cut into runs of :data:`TILE_ROW`
    bytes at least (shorter runs would write parts of lines)."""
    unit = [d for d in range(len(shape)) if strides[d] == 1 and shape[d] != 1]
    inner = [d for d in range(unit[0] + 1, len(shape)) if shape[d] != 1] if unit else []
    if not inner or math.prod(shape) * itemsize < TILE_BYTES:
        return False                    # not a transpose, or small enough to stay in L2 whole
    per_page, per_line = max(4096 // itemsize, 1), max(64 // itemsize, 1)
    extent = {d: shape[d] for d in inner}

    def fits():
        near = math.prod(extent[d] * strides[d] for d in inner if strides[d] < per_line)
        lines = math.prod(extent[d] for d in inner if strides[d] >= per_line) * max(near // per_line, 1)
        pages = math.prod(extent[d] for d in inner if strides[d] >= per_page)
        return lines <= TILE_LINES and pages <= TILE_PAGES
    most = max(math.prod(shape) // TILE_LEAST, 1)
    tiles = 1
    for d in sorted(inner, key=lambda d: -strides[d]):
        size = extent[d]
        least = TILE_ROW // itemsize if d == inner[-1] else 1
        for ways in range(2, size + 1):
            if fits() or tiles * ways > most or size // ways < least:
                break
            if size % ways == 0:
                extent[d] = size // ways
        tiles *= size // extent[d]
    ways = tuple(shape[d] // extent.get(d, shape[d]) for d in range(len(shape)))
    return ways if tiles > 1 else False


def _tiles(t, ways):
    """The tiles of ``t`` (see :func:`tile_plan`), as a list of views."""
    outer = []
    for d in reversed(range(len(ways))):
        if ways[d] > 1:
            t = t.unflatten(d, (ways[d], t.shape[d] // ways[d]))
    pos = 0
    for d in range(len(ways)):
        if ways[d] > 1:
            outer.append(pos)
            pos += 1
        pos += 1
    tiles = [t.permute(outer + [d for d in range(t.dim()) if d not in outer])]
    for _ in outer:                     # (unbound one at a time: flattening them would copy)
        tiles = [tile for whole in tiles for tile in whole.unbind(0)]
    return tiles


__all__ = ["ALIAS_SPAN", "MIN_BYTES", "TILE_BYTES", "TILE_LEAST", "TILE_LINES", "TILE_PAGES", "TILE_ROW",
           "TRANSPOSE_MIN", "TRANSPOSE_PER_SET", "TRANSPOSE_ROW_BYTE", "TRANSPOSE_ROWS", "WIDE_MOST",
           "permuted_copy", "plain", "tile_plan", "transposes", "untracked", "wide_plan"]
