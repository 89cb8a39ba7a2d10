"""Looped layouts of the torch executor: one matrix product per value of the result's first
index, each written with ``out=`` into its slab of a fresh result
(runtime/torch_executor/ttgt.py's ``candidates`` says where the model takes them)."""

from __future__ import annotations

import math

import torch

from .permute_copy import plain


def looped(lay, ta, tb, out, sizes, prep_a, prep_b, other, read):
    """A looped layout (runtime/torch_executor/ttgt.py's ``candidates``): one product per value
    of the result's first index, written with ``out=`` into its slab of a fresh result
    (the product laid out as the rest of the result); ``other(a, b)``, a layout with one
    product, where autograd, a transform or tracing records the step (``out=`` is not
    differentiable).  ``read(term, groups, flip)``: an operand over ``term`` as the stack
    of matrices ``groups``, or None where it reads as it is (the torch executor's views)."""
    (first,), (batch, m, n, k) = lay.outer, lay.groups
    xa, xb, pa, pb = (tb, ta, prep_b, prep_a) if lay.swap else (ta, tb, prep_a, prep_b)
    groups_a, groups_b = ([batch, m, k], [batch, k, n]) if batch else ([m, k], [k, n])
    (da, fa), (db, fb) = [(term.index(first) if first in term else None,
                           read([i for i in term if i != first], groups, flip in lay.flip) or (lambda x: x))
                          for term, groups, flip in ((xa, groups_a, "l"), (xb, groups_b, "r"))]
    mm = torch.bmm if batch else torch.mm
    slab = tuple(math.prod(sizes[i] for i in grp) for grp in ([batch, m, n] if batch else [m, n]))
    shape = tuple(sizes[i] for i in out)

    def run(a, b):
        if not (plain(a) and plain(b)):
            return other(a, b)
        if lay.swap:
            a, b = b, a
        a, b = pa(a) if pa else a, pb(b) if pb else b
        res = torch.empty((sizes[first], *slab), dtype=a.dtype, device=a.device)
        for x in range(sizes[first]):
            mm(fa(a if da is None else a.select(da, x)), fb(b if db is None else b.select(db, x)), out=res[x])
        return res.view(shape)
    return run


__all__ = ["looped"]
