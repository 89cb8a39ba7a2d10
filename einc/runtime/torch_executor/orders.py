"""The order in which a contraction step reads an operand: its dimensions as they lie in
memory, outermost first (:func:`read_order`).  Part of the plan cache's key
(runtime/engine.py), so asked on every call of an operand that is not contiguous."""

from __future__ import annotations

import functools

import torch

from ...planner.strides import by_stride
from . import ttgt

_strided = torch.strided


def memory_orders(operands):
    """Per operand, :func:`read_order`; None where every operand is read as it is."""
    orders = [read_order(o) for o in operands]
    return tuple(orders) if any(orders) else None


def read_order(x):
    """The order of ``x``'s dimensions in memory, outermost first, which a contraction step
    reads it in; None where that is the order they have (where its size-1 dimensions stand
    aside: they hold nothing, and the copy-cost model moves none), where ``x`` is
    contiguous, or where it is smaller than ``ttgt.SMALL``, whose copies the model does not
    weigh (a permute there is only overhead, a per-call cost larger than the copy it spares).
    Stride-0 (expanded) and size-1 dimensions count as outermost.  Part of the plan cache's
    key (runtime/engine.py): an entry is made for one such order, whatever the strides.  A
    tensor that is not strided (sparse, never contiguous) gives its layout, no strided
    tensor's order."""
    if x.layout is not _strided:
        return x.layout
    if x.is_contiguous() or x.numel() < ttgt.SMALL:
        return None
    try:
        return _memory_order(x.shape, x.stride())
    except TypeError:       # symbolic sizes do not hash (the engine sends such a call to the custom op)
        return None


@functools.lru_cache(maxsize=4096)      # a function of its arguments alone, asked on every call's key
def _memory_order(shape, strides):
    order = by_stride(range(len(shape)), {d: st for d, (n, st) in enumerate(zip(shape, strides)) if n > 1})
    live = [d for d in order if shape[d] != 1]
    return None if live == sorted(live) else order


__all__ = ["memory_orders", "read_order"]
