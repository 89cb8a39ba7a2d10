"""Contraction steps on cuBLAS through torch, with no copy.

A ``contract`` step is one strided-batched matrix product on its operands *as they
are* when, under their actual strides, each of its index groups -- batch (in both
operands and the result), rows (first operand and result), columns (second operand
and result), summed (both operands) -- merges into one stride per operand, each
operand has a unit-stride matrix axis, and the contiguous result reads as
``(batch, rows, columns)``, or as ``(batch, columns, rows)``, which is the product with
the operands swapped (Cᵀ = Bᵀ·Aᵀ).  Then the step is ``torch.bmm`` / ``torch.mm`` on
the operands (``as_strided`` views of them where their shape or strides differ from the
product's): cuBLAS takes the transposes and the batch stride natively, nothing is
copied, and the contiguous product it returns, viewed as the step's output, is the
result.  Anything else (a
diagonal, an index summed in one operand only, a result order that is no matrix, a
group that does not merge) is not a GEMM step; :func:`classify` says why, in words
``explain`` shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...planner.plan import CONTRACT, Step
from . import ttgt

MAX_PATTERNS = 64      # stride patterns a step function keeps worked out (as the kernel launcher's layouts)


@dataclass(frozen=True)
class Gemm:
    """How to read a step as ``C[b, m, n] = A[b, m, k] · B[b, k, n]`` on given strides:
    for each operand (already swapped if the result is column-major) the sizes and
    strides of its ``(batch, rows, cols)`` view; ``batched`` false means ``torch.mm``."""

    swap: bool
    a_view: tuple[tuple[int, ...], tuple[int, ...]]
    b_view: tuple[tuple[int, ...], tuple[int, ...]]
    batched: bool


def _merge(indices, term, strides, sizes):
    """One (size, stride) for ``indices`` of an operand laid out as ``term``; None where
    they do not merge (each index's stride must be the next one's times its size)."""
    size = math.prod(sizes[i] for i in indices)
    live = [i for i in indices if sizes[i] != 1]
    if not live:
        return size, None              # any stride will do
    st = [strides[term.index(i)] for i in live]
    for j in range(len(live) - 1):
        if st[j] != st[j + 1] * sizes[live[j + 1]]:
            return None
    return size, st[-1]


def _matrix(rows, cols, sr, sc):
    """Strides ``(sr, sc)`` of a ``rows × cols`` matrix cuBLAS reads without a copy (size-1
    axes get the stride that makes them so), or None."""
    if sc is None or cols == 1:
        sc = 1 if sr != 1 or rows == 1 else max(rows, 1)
    if sr is None or rows == 1:
        sr = max(cols, 1) if sc == 1 else 1
    if (sc == 1 and sr >= max(1, cols)) or (sr == 1 and sc >= max(1, rows)):
        return sr, sc
    return None


def result_order(step: Step, sizes) -> tuple[list, list, list, bool | None]:
    """``(batch, rows, cols, swap)`` of a two-operand step's result (size-1 indices left
    out; :func:`einc.runtime.torch_executor.ttgt.groups`): ``swap`` False where the result
    is laid out (batch, rows, columns), True where (batch, columns, rows), None where in
    neither order, which no matrix product writes."""
    out = [i for i in step.output if sizes[i] != 1]
    batch, m, n = ttgt.groups(*step.inputs, out)
    swap = False if out == batch + m + n else True if out == batch + n + m else None
    return batch, m, n, swap


def classify(step: Step, sizes, a_strides, b_strides):
    """``(Gemm, None)`` where ``step`` runs as one matrix product on operands with these
    strides, else ``(None, why not)``."""
    if step.kind != CONTRACT:
        return None, f"a {step.kind} step, not a matrix product"
    ta, tb = step.inputs
    for k, t in enumerate((ta, tb)):
        if len(set(t)) != len(t):
            return None, f"operand {k} of the step takes a diagonal"
    summed = set(step.summed)
    if not summed <= set(ta) & set(tb):
        return None, "an index is summed within one operand only"
    batch, m, n, swap = result_order(step, sizes)
    if swap is None:
        return None, "the result's index order is not batch, rows, columns"
    k = sorted((i for i in ta if i in summed and sizes[i] != 1), key=lambda i: -a_strides[ta.index(i)])
    groups = {"a": (ta, a_strides), "b": (tb, b_strides)}
    merged = {}
    for name, (term, strides) in groups.items():
        for group, idx in (("batch", batch), ("rows" if name == "a" else "cols", m if name == "a" else n),
                           ("k", k)):
            got = _merge(idx, term, strides, sizes)
            if got is None:
                which = "first" if name == "a" else "second"
                return None, f"the {which} operand's {group} indices do not merge into one stride (a copy)"
            merged[name, group] = got
    (bt, sab), (rows, sar), (kk, sak) = merged["a", "batch"], merged["a", "rows"], merged["a", "k"]
    (_, sbb), (cols, sbc), (_, sbk) = merged["b", "batch"], merged["b", "cols"], merged["b", "k"]
    a = _matrix(rows, kk, sar, sak)
    b = _matrix(kk, cols, sbk, sbc)
    if a is None or b is None:
        which = "first" if a is None else "second"
        return None, f"the {which} operand has no unit-stride matrix axis (a copy)"
    a_view = ((bt, rows, kk), (sab or 0, *a))
    b_view = ((bt, kk, cols), (sbb or 0, *b))
    if swap:        # C is (batch, cols, rows): compute Cᵀ = Bᵀ · Aᵀ
        a_view, b_view = (((bt, cols, kk), (b_view[1][0], b_view[1][2], b_view[1][1])),
                          ((bt, kk, rows), (a_view[1][0], a_view[1][2], a_view[1][1])))
    return Gemm(swap, a_view, b_view, bool(batch)), None


def step_function(step: Step, sizes, a_strides, b_strides, fallback):
    """The step as a matrix product on views of its operands, for operands with the
    planned strides; operands with other strides are classified again (once per stride
    pattern) and run through ``fallback`` (the torch executor's step) where they are no
    GEMM.  None where the planned strides are no GEMM."""
    plan_gemm, _ = classify(step, sizes, a_strides, b_strides)
    if plan_gemm is None:
        return None
    out_shape = tuple(sizes[i] for i in step.output)
    shapes = [tuple(sizes[i] for i in term) for term in step.inputs]

    def calls(strides):
        """How to run the step on operands with these strides: ``(swap, product, view of
        the left operand, view of the right)``, a view ``(size, stride)`` or None where it
        is the operand itself; None where they are no GEMM."""
        gemm = classify(step, sizes, *strides)[0]
        if gemm is None:
            return None
        views = (gemm.a_view, gemm.b_view) if gemm.batched else \
            ((v[0][1:], v[1][1:]) for v in (gemm.a_view, gemm.b_view))
        own = (shapes[::-1], strides[::-1]) if gemm.swap else (shapes, strides)
        views = [None if (tuple(size), tuple(stride)) == (shape, tuple(st)) else (size, stride)
                 for (size, stride), shape, st in zip(views, *own)]
        return gemm.swap, torch.bmm if gemm.batched else torch.mm, *views

    known = {(tuple(a_strides), tuple(b_strides)): calls((tuple(a_strides), tuple(b_strides)))}

    def run(a, b):
        key = (a.stride(), b.stride())
        how = known.get(key, False)
        if how is False:
            if len(known) >= MAX_PATTERNS:     # a caller cycling through strides starts again
                known.clear()
            how = known[key] = calls(key)
        if how is None:
            return fallback(a, b)
        swap, product, va, vb = how
        if swap:
            a, b = b, a
        # bmm / mm allocate a contiguous (batch, rows, cols) -- the contiguous result's layout
        # (cols and rows where swapped) -- so their product is the result, viewed as its shape:
        # no empty result written through out= (tiny steps are host-bound on CUDA)
        return product(a if va is None else a.as_strided(*va, a.storage_offset()),
                       b if vb is None else b.as_strided(*vb, b.storage_offset())).view(out_shape)
    return run


__all__ = ["Gemm", "classify", "result_order", "step_function"]
