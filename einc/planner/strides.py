"""Strides as the lowering and the executors read them: a tensor's row-major strides, each
index's stride in a tensor, the unit-stride index, and indices ordered slowest first.

Pure Python, shared by the Triton lowering (:mod:`einc.codegen.lower`) and the torch
executor, which lays out its copies and matrix products by the same rules.
"""

from __future__ import annotations

import math


def contiguous(shape) -> tuple[int, ...]:
    """Row-major strides of ``shape``."""
    strides, acc = [], 1
    for n in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def index_strides(dims, shape, strides, sizes) -> dict[int, int]:
    """Index -> its stride in a tensor (a repeated index: the sum; a size-1 index: 0)."""
    out: dict[int, int] = {}
    for i, n, st in zip(dims, shape, strides):
        out[i] = out.get(i, 0) + (abs(st) if n > 1 else 0)
    return {i: (s if sizes[i] > 1 else 0) for i, s in out.items()}


def unit_index(st: dict[int, int]):
    """The index with unit stride in a tensor (None if none)."""
    return next((i for i, s in reversed(list(st.items())) if s == 1), None)


def by_stride(indices, st) -> tuple[int, ...]:
    """``indices`` slowest first by the strides ``st`` (stable; absent = broadcast, slowest)."""
    return tuple(sorted(indices, key=lambda i: -st.get(i, 0) if st.get(i, 0) else -math.inf))


__all__ = ["contiguous", "index_strides", "unit_index", "by_stride"]
