"""The one-copy backward of a step's last copy: a copy into another layout whose gradient
is the copy back, one fresh contiguous tensor (see the torch executor's docstring), and
where a step's last copy takes it (:func:`strided_matrices`, :func:`copied_back`).  Below
``permute_copy.MIN_BYTES`` both copies are the plain ones whatever tracks them, and the
copy back is a hook on the product (:func:`relayout`), not an ``autograd.Function``."""

from __future__ import annotations

import inspect
import math

import torch

from ...planner.strides import contiguous
from . import ttgt
from .permute_copy import MIN_BYTES, wide_plan


class _Relayout(torch.autograd.Function):
    """``there(x)``, a copy into another layout, whose backward is the copy ``back`` of the
    gradient into ``x``'s layout (a fresh contiguous tensor, which the backward's matrix
    products read as they are, where the permuted view of the gradient would be copied
    matrix by matrix).  Twice differentiable: the backward is the same Function."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, there, back):
        return there(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.there, ctx.back = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, grad):
        return _Relayout.apply(grad, ctx.back, ctx.there), None, None

    @staticmethod
    def jvp(ctx, tangent, _there, _back):
        return ctx.there(tangent)


# torch binds every apply's arguments to forward's signature where setup_context is
# defined, building the signature anew each time unless the function carries one.
_Relayout.forward.__signature__ = inspect.signature(_Relayout.forward)


def relayout(there, back, nbytes):
    """``there`` as a step's last function, with the one-copy backward where the result
    will need a gradient (torch's autograd records the step's ops): for a product of
    ``nbytes`` under ``permute_copy.MIN_BYTES``, the plain copy ``there`` recorded by
    autograd and a hook on the product that makes its gradient contiguous (the same one
    copy as :class:`_Relayout`'s ``back``, which is the plain one there too, without a
    Function's ``apply`` forward and again backward, which cost more than such a copy);
    from ``MIN_BYTES`` up, :class:`_Relayout`, whose copies, untracked inside it, may run
    in wide elements, in tiles or compiled (``permute_copy``)."""
    if nbytes < MIN_BYTES:
        return contiguous_grad(there)

    def run(x):
        if x.requires_grad:
            return _Relayout.apply(x, there, back)
        return there(x)
    return run


def contiguous_grad(there, back=None):
    """``there`` with a hook on its input, where that will need a gradient, that makes the
    input's gradient one contiguous tensor (``back`` of it, default :func:`_contiguous`): for a
    step's last copy below ``MIN_BYTES`` (:func:`relayout`), and for the permuted view a step
    returns (the call's result in any layout, or an intermediate), whose gradient arrives as a
    permuted view of the view's (``back`` there the torch executor's copy of it, which may run
    in tiles or wide; :func:`copied_view`)."""
    hook = _contiguous if back is None else (lambda grad: None if grad is None else back(grad))

    def hooked(x):
        if x.requires_grad:
            x.register_hook(hook)
        return there(x)
    return hooked


def _contiguous(grad):
    """The product's gradient, a permuted view of the result's, as one contiguous tensor in
    the product's order, which its matrix products' backward reads as it is (None, where a
    double backward has no gradient there: nothing to copy)."""
    return None if grad is None else grad.contiguous()


def strided_matrices(out, groups, sizes) -> bool:
    """Whether a contiguous tensor over ``out`` reads, through a permutation and a
    reshape that are views, as the stack of matrices ``groups`` (batch, rows, cols)
    but with no unit-stride axis (a batch index innermost): the gradient arriving at a
    permuted result then reaches the backward's matrix products as a view that ``bmm``
    copies matrix by matrix, once per product.  (Where the groups do not merge, the
    reshape's backward copies it once anyway; where a matrix axis has unit stride,
    BLAS reads it as it is.)"""
    strides = dict(zip(out, contiguous([sizes[i] for i in out])))
    merged = []
    for grp in groups:
        live = [i for i in grp if sizes[i] != 1]
        if any(strides[a] != strides[b] * sizes[b] for a, b in zip(live, live[1:])):
            return False
        merged.append((math.prod(sizes[i] for i in grp), strides[live[-1]] if live else 1))
    (rows, sr), (cols, sc) = merged[-2:]
    return not (rows == 1 or cols == 1 or sr == 1 or sc == 1)


def copied_view(out, groups, sizes) -> bool:
    """Whether the gradient of a product over ``groups`` (batch, rows, cols) returned as a
    permuted view over ``out`` reaches the backward's matrix products only through a copy
    (``ttgt.operand``'s, which ``training_layout`` prices): where its matrices have no
    unit-stride axis (:func:`strided_matrices`: ``bmm`` copies them matrix by matrix, in each
    product), or where a group does not merge in ``out`` (the reshape's backward copies it,
    with torch's copy, slower than the executor's for some orders: ``abcd,ce->dbea``'s
    product ``(a b, d, e)``)."""
    return ttgt.operand(out, groups, sizes)[2] > 0


def copied_back(natural, out, groups, sizes, itemsize) -> bool:
    """Whether a permuted result of ``permute_copy.MIN_BYTES`` or more, copied in wide
    elements (``permute_copy.wide_plan``), has a group that does not merge in ``out``: its
    gradient reaches the products through the reshape's copy, element by element, which
    the one-copy backward (:class:`_Relayout`) makes wide, and the forward's copy too
    (pykeen's NTN ``bcda,bca->bcd``: runs of 4 float32)."""
    strides, source = (dict(zip(t, contiguous([sizes[i] for i in t]))) for t in (out, natural))
    live = [[i for i in grp if sizes[i] != 1] for grp in groups]
    merged = all(strides[a] == strides[b] * sizes[b] for g in live for a, b in zip(g, g[1:]))
    return math.prod(sizes[i] for i in out) * itemsize >= MIN_BYTES and not merged and bool(
        wide_plan(tuple(sizes[i] for i in out), tuple(source[i] for i in out), 0, itemsize))
