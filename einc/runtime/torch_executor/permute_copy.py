"""Permuting copies: a tensor over one index order copied into a contiguous tensor over
another, as cheaply as torch's ops allow on the CPU.

torch copies a permuted view element by element in the destination's order, in loops
over the destination's innermost run, the trailing indices that are also contiguous,
in the same order, in the source.  The cost per element is the loop's more than the
memory's where that run is short: a 6-index CCSD(T) result whose runs are 8 float32
(32 bytes) copies at ~0.3-1 ns per element against ~0.1-0.2 ns for a plain copy (1
thread, the development machine).  :func:`permuted_copy` therefore:

- copies a permutation that swaps two blocks of indices (``(b, i, j) -> (i, j, b)``)
  as a 2-D transpose, which torch copies faster than the same copy expressed as a
  3-D permutation (~1.6x for the suite's ``ibnd,jbnd->ijbn``; 0.35-0.9x the time where
  both blocks hold 32 elements or more), but slower where a block is short (8 or 16
  elements: 1.1-2.5x the time; 24: either way), hence :data:`TRANSPOSE_MIN`;
- copies a tensor of at least :data:`MIN_BYTES` whose run is 16, 32 or 48 bytes, as
  wider elements (the run's bytes reinterpreted as one to :data:`WIDE_MOST`
  ``complex128``, each of at least four of the tensor's elements): the copy moves the
  same bits in fewer, wider elements.
  ``python bench/permute_copy.py`` (1 thread, bench/measured/pairwise.md): the
  CCSD(T) results' runs of 8 float32 (two complex128) in ~0.79-0.97x torch's time;
  runs of 16 bytes (4 float32, 8 float16, 16 bool: one complex128) in ~0.4-0.8x; runs
  of 4 or more complex128 gained nothing (~1.0x), hence :data:`WIDE_MOST`.  Runs of 8
  bytes as one ``int64`` were not robust (8 bool ~0.4x, but 4 float16 0.9-1.3x and 2
  float32 0.45-1.1x by shape and load), nor three ``int64`` (24 bytes, ~1.1x), nor
  pairs as ``complex128`` (float64, complex64: 0.55x in one measurement only): none is
  taken.  Below ~64K float32 the extra views (~4 us) cost more than they save, hence
  :data:`MIN_BYTES`.
- copies everything else with ``permute(...).contiguous()``.

Blocked copies (the destination's outer or inner indices in chunks that stay in
cache, one ``copy_`` per chunk) and two partial permutes through a temporary were
measured too and lost or tied on the pairwise family's copies (bench/measured/pairwise.md's
section); transposing copies (the source's unit-stride index moved) keep torch's own
strided copy.  What does pay, for products larger than the last-level cache, is making
the product itself a chunk at a time, each chunk copied while in cache:
:mod:`einc.runtime.torch_executor.chunked`.

Reinterpreting the bits is exact for every dtype (a copy does no arithmetic on them),
but ``Tensor.view(dtype)`` is not differentiable: the wide copy is taken only for a
plain CPU tensor with contiguous strides that nothing tracks (:func:`untracked`: no
gradient to be taken, forward AD, ``torch.func`` or tracing) and that has no lazy
conjugate or negative bit; anything else takes the plain copy.
"""

from __future__ import annotations

import math

import torch
import torch.autograd.forward_ad as _forward_ad

from ...planner.strides import contiguous

MIN_BYTES = 1 << 18     # smaller copies: the plain one
TRANSPOSE_MIN = 32      # a block swap as a 2-D transpose: both blocks at least this many elements
WIDE_MOST = 3           # wide (complex128) elements per run, at most
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _rotation(src, dst):
    """``k`` where ``dst`` is ``src`` rotated (``dst[k:] + dst[:k] == src``), else None."""
    return next((k for k in range(1, len(dst)) if dst[k:] + dst[:k] == src), None)


def permuted_copy(src, dst, sizes):
    """``fn(x)``: ``x``, a tensor over the index order ``src``, as a contiguous tensor over
    ``dst`` (the same indices in another order; ``sizes`` maps each to its size): a copy,
    unless the permuted view of ``x`` is contiguous already (size-1 indices moved).
    Differentiable as ``x.permute(...).contiguous()`` is (see the module's docstring
    for when the wide copy is taken)."""
    src, dst = list(src), list(dst)
    perm = tuple(src.index(i) for i in dst)
    cut = _rotation(src, dst)
    if cut is not None:
        rows = math.prod(sizes[i] for i in src[:len(dst) - cut])
        cols = math.prod(sizes[i] for i in src[len(dst) - cut:])
        if min(rows, cols) >= TRANSPOSE_MIN:
            shape = tuple(sizes[i] for i in dst)
            return lambda x: x.reshape(rows, cols).t().contiguous().view(shape)
    shape = tuple(sizes[i] for i in src)
    if 0 in shape:
        return lambda x: x.permute(perm).contiguous()
    return _Copy(perm, shape)


class _Copy:
    """``x.permute(perm).contiguous()``, as wide elements where that is cheaper: decided
    once per element size for an ``x`` of ``shape`` with the contiguous strides (the
    product of a step, or an operand as it comes); any other layout takes the plain
    copy."""

    __slots__ = ("perm", "contiguous", "shape", "strides", "plans")

    def __init__(self, perm, shape):
        strides = contiguous(shape)
        self.perm, self.contiguous = perm, strides
        self.shape = tuple(shape[p] for p in perm)
        self.strides = tuple(strides[p] for p in perm)
        self.plans = {}

    def __call__(self, x):
        y = x.permute(self.perm)
        plan = self.plans.get(x.element_size())
        if plan is None:
            isz = x.element_size()
            plan = math.prod(self.shape) * isz >= MIN_BYTES and wide_plan(self.shape, self.strides, 0, isz)
            self.plans[isz] = plan
        if (plan is False or not untracked(x) or x.stride() != self.contiguous or x.storage_offset() % plan[2]
                or x.is_conj() or x.is_neg()):
            return y.contiguous()
        merged, dtype, _ = plan
        return y.reshape(merged).view(dtype).contiguous().view(x.dtype).view(y.shape)


def plain(x) -> bool:
    """Whether ``x`` is a plain tensor that nothing records: no autograd (a gradient to be
    taken, forward AD, ``torch.func``), no tracing (``torch.jit.trace``), no tensor
    subclass (fake tensors under ``torch.compile``).  Ops that are not differentiable
    (``view(dtype)``, ``out=``) may run on it."""
    return (type(x) is torch.Tensor and not (x.requires_grad and torch.is_grad_enabled())
            and _forward_ad._current_level < 0 and not _wrapped(x) and torch._C._get_tracing_state() is None)


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


__all__ = ["MIN_BYTES", "TRANSPOSE_MIN", "WIDE_MOST", "permuted_copy", "plain", "untracked", "wide_plan"]
