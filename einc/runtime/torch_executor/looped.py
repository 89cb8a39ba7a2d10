"""Looped layouts of the torch executor: one matrix product per value of the result's first
index, each written with ``out=`` into its slab of a fresh result (runtime/torch_executor/
ttgt.py's ``candidates`` says where the model takes them: a slab in the product's own
order, starting at a multiple of ``ttgt.SLAB_ALIGN`` bytes).

Where autograd, a transform or tracing records the step (``out=`` is not differentiable),
the same products run, each into a tensor of its own, stacked into the result: a call
gives the same bits whether or not an operand requires grad, on any BLAS (one product
over all the slabs is a GEMM of other sizes, which a BLAS may block, split or dispatch
differently; a product into a slab differs from one into a fresh tensor only in where
its output starts, which ``ttgt.SLAB_ALIGN`` keeps alike)."""

from __future__ import annotations

import itertools
import math

import torch

from .permute_copy import plain


def looped(lay, ta, tb, out, sizes, prep_a, prep_b, read):
    """A looped layout (runtime/torch_executor/ttgt.py's ``candidates``): one product per value
    of the result's first index, written with ``out=`` into its slab of a fresh result
    (laid out as the product writes it), or, where the step is recorded, the same products
    stacked (the module's docstring).  ``read(term, groups, flip)``: an operand over
    ``term`` as the stack of matrices ``groups``, or None where it reads as it is (the torch
    executor's views)."""
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
        record = not (plain(a) and plain(b))
        if lay.swap:
            a, b = b, a
        a, b = pa(a) if pa else a, pb(b) if pb else b
        # the same products either way (``unbind`` and ``stack`` are differentiable, ``out=`` is not)
        lefts = a.unbind(da) if da is not None else itertools.repeat(a, sizes[first])
        rights = b.unbind(db) if db is not None else itertools.repeat(b, sizes[first])
        pairs = ((fa(x), fb(y)) for x, y in zip(lefts, rights))
        if record:
            return torch.stack([mm(x, y) for x, y in pairs]).view(shape)
        res = torch.empty((sizes[first], *slab), dtype=a.dtype, device=a.device)
        for slot, (x, y) in zip(res, pairs):
            mm(x, y, out=slot)
        return res.view(shape)
    return run


__all__ = ["looped"]
