"""The layout a step runs in where a gradient will be taken: the forward's
(:func:`einc.runtime.torch_executor.ttgt.choose`'s), or another that the copy-cost model
says trains for less (:func:`for_training`).
"""

from __future__ import annotations

import dataclasses

from . import backward, ttgt
from .ttgt import _size


def for_training(lay, ta, tb, out, sizes, worth_sparing, itemsize=4, free_out=False, final=False) -> ttgt.Layout:
    """The layout to run where a gradient will be taken, given ``lay``, the forward's
    (chosen with ``loops`` as ``not free_out``, the one-product layout where that loops;
    ``final``: the call's result, copied into ``out``).

    An operand broadcast over batch indices it lacks gets, in the backward, one partial
    gradient per value of those indices, summed afterwards: as many of its own size,
    written by the products and read back by the sum (``BTD,NDH->BTNH``: ``BTD`` over
    the 8 values of ``N``, 8 times its size).  The forward's model does not see that;
    here each such element costs :data:`~einc.runtime.torch_executor.ttgt.GRAD_PARTIAL` ns,
    and the cheapest layout that broadcasts neither operand is weighed against the
    forward's with them, each with its backward's outer products (:func:`_outer_ns`:
    ``ceab,ca->ceb`` read as products of 1 x ``a`` by ``a`` x ``b``, ``ca`` broadcast over
    ``e``, makes one per value of ``c`` and ``e``; with ``ceab`` copied, one per value of ``c``).

    Both are weighed without :data:`~einc.runtime.torch_executor.ttgt.K_UNIT`: the
    backward's products ``G @ R^T`` and ``L^T @ G`` read each operand the other way
    round, so a layout whose forward reads its right operand along K reads none so in its
    backward, while those the rate moves the forward to do (``xyk,kz->yzx``, training step:
    bench/measured/permute-copy-2026-12-02.md).  Each is weighed with its backward
    (:func:`_backward_ns`): those two products, and the copy that makes the result's
    gradient, arriving in ``out``'s order, the product's matrices.

    A layout other than the forward's trains as ``recorded.Recorded`` (the torch
    executor's ``_trained``), which adds :data:`~einc.runtime.torch_executor.backward.RECORDED`
    to its training; the forward's adds it too where its own backward takes ``Recorded``
    (:func:`~einc.runtime.torch_executor.backward.trains_recorded`).  The other layout is
    taken where it costs less with that."""
    recorded = backward.trains_recorded(lay, ta, tb, out, sizes, itemsize, final and not free_out)
    base, reads = lay, ttgt._size(set(out) | (set(ta) & set(tb)), sizes) >= ttgt.K_UNIT_FROM
    if reads:       # else K_UNIT moved nothing
        base = ttgt.choose(ta, tb, out, sizes, worth_sparing, itemsize, loops=not free_out, free_out=free_out,
                           reads=False)
        if base.outer:
            base = ttgt.choose(ta, tb, out, sizes, worth_sparing, itemsize, loops=False, reads=False)
    ns = _training_ns(base, ta, tb, out, sizes, itemsize, True)
    if base.broadcast:
        plain = ttgt.choose(ta, tb, out, sizes, worth_sparing, itemsize, broadcast=False, loops=False,
                            free_out=free_out, reads=False)
        plain_ns = _training_ns(plain, ta, tb, out, sizes, itemsize, True)
        base, ns = (plain, plain_ns) if plain_ns < ns else (base, ns)
    same = lambda f: (f.swap, f.batch, f.m, f.n, f.k, f.copies, f.flip)  # noqa: E731
    if same(base) == same(lay):
        return lay
    kept = _unread(lay, ta, tb, out, sizes, itemsize, free_out) if reads else lay
    kept_ns = _training_ns(kept, ta, tb, out, sizes, itemsize, recorded) + backward.RECORDED * recorded
    return base if ns + backward.RECORDED < kept_ns else lay


def for_looped(lay, ta, tb, out, sizes, worth_sparing, itemsize=4, final=False) -> ttgt.Layout:
    """The layout to train in, given ``lay``, a looped one (one product per value of the
    result's first index: looped.py): ``lay`` itself, its products recorded one by one and
    stacked, or, where it costs less so, the layout :func:`for_training` takes for the step's
    one-product layout, trained as ``recorded.Recorded`` behind the looped products (the same
    bits forward).  The products recorded one by one each make a backward of their own
    (:data:`~einc.runtime.torch_executor.ttgt.LOOP` each, as forward), and an operand
    without the loop's index gets one partial gradient per value of it (``bhij,bhjk->bhik``
    with ``bhjk`` of one ``b``: 8 partial gradients of ``hjk``, besides those of ``bij``
    broadcast over ``h`` inside each product), where one product makes fewer or none.  Both
    run the looped products forward: weighed are their training's costs beyond them, where
    ``Recorded``'s backward makes the one product's operand matrices again (the layout's
    cost less its product's)."""
    one = ttgt.choose(ta, tb, out, sizes, worth_sparing, itemsize, loops=False)
    other = for_training(one, ta, tb, out, sizes, worth_sparing, itemsize, final=final)
    product = ttgt._product_ns(*(_size(g, sizes) for g in other.groups), itemsize / 4)
    ns = _training_ns(other, ta, tb, out, sizes, itemsize, True) - product + backward.RECORDED
    return other if ns < _looped_ns(lay, ta, tb, out, sizes, itemsize) else lay


def _looped_ns(lay, ta, tb, out, sizes, itemsize):
    """The modelled ns the looped layout ``lay`` adds where autograd records its products:
    per value of the loop's index a product's backward, partial gradients and outer products
    (:func:`_training_ns` of the product, that index left out) and a loop's more, one partial
    gradient per value of an operand without that index, and the products stacked."""
    (first,), scale = lay.outer, itemsize / 4
    count, (ia, ib, io) = sizes[first], ([i for i in term if i != first] for term in (ta, tb, out))
    each = _training_ns(dataclasses.replace(lay, outer=(), cost=0.0), ia, ib, io, sizes, itemsize, False)
    repeated = count * sum(_size(term, sizes) for term in (ta, tb) if first not in term)
    return (count * (each + ttgt.LOOP) + repeated * ttgt.GRAD_PARTIAL * scale
            + _size(out, sizes) * ttgt.COPY_KEEP * scale)


def _training_ns(lay, ta, tb, out, sizes, itemsize, recorded):
    """``lay``'s modelled cost where a gradient is taken, but for ``Recorded``: its own, its
    backward (:func:`_backward_ns`), its broadcast operands' partial gradients, its backward's
    outer products (:func:`for_training`)."""
    lacking = [[i for i in lay.broadcast if i not in term] for term in (ta, tb)]
    partial = sum(_size(term, sizes) * _size(lack, sizes) for term, lack in zip((ta, tb), lacking) if lack)
    return (lay.cost + _backward_ns(lay, out, sizes, itemsize, recorded)
            + partial * ttgt.GRAD_PARTIAL * itemsize / 4 + _outer_ns(lay, sizes))


def _backward_ns(lay, out, sizes, itemsize, recorded):
    """The modelled ns of ``lay``'s backward, priced as its forward is: its products
    ``G @ R^T`` (rows M, cols K, depth N) and ``L^T @ G`` (rows K, cols N, depth M), without
    the rates of an operand's reading (which of them reads along its rows depends on the
    strides torch's backward makes each gradient in: backward.py), and the copy that makes the
    result's gradient ``G``, in ``out``'s order, the product's matrices: where ``recorded``
    (``Recorded``'s backward) a copy into the product's order wherever the two differ, else
    where ``G`` does not read as those matrices through views with a unit-stride axis
    (``ttgt.operand``: one copy, the reshape's, or the torch executor's one-copy backward of a
    permuted result, relayout.py)."""
    scale = itemsize / 4
    b, m, n, k = (_size(g, sizes) for g in lay.groups)
    products = ttgt._product_ns(b, m, k, n, scale) + ttgt._product_ns(b, k, n, m, scale)
    if recorded:
        grad = ttgt.copy_ns(out, (*lay.batch, *lay.m, *lay.n), sizes) if list(out) != [*lay.batch, *lay.m, *lay.n] \
            else 0.0
    else:
        plain, _, elems, _ = ttgt.operand(out, (lay.batch, lay.m, lay.n), sizes)
        grad = plain if elems else 0.0
    return products + grad * scale


def _unread(lay, ta, tb, out, sizes, itemsize, free_out):
    """``lay`` (one product) costed without :data:`~einc.runtime.torch_executor.ttgt.K_UNIT`, as
    :func:`for_training` weighs the others (``free_out``: less its result's copy, as the forward's
    choice costed it), each operand copied flipped where that costs less so."""
    ns, copies = ttgt.cost(ta, tb, out, sizes, lay.swap, lay.batch, lay.m, lay.n, lay.k, itemsize, reads=False)[:2]
    unread = dataclasses.replace(lay, cost=ns, copies=copies)
    return ttgt.without_result_copy(unread, out, sizes, itemsize) if free_out else unread


def _outer_ns(lay, sizes):
    """The modelled ns of the outer products the backward of ``lay``'s product makes: where
    its matrices have a side of 1 (and the other side and the depth are longer), the
    gradient of the operand that is a matrix is one product of depth 1 per matrix
    (:data:`~einc.runtime.torch_executor.ttgt.OUTER`)."""
    rows, cols, depth = (_size(g, sizes) for g in (lay.m, lay.n, lay.k))
    thin = min(rows, cols) == 1 and max(rows, cols) > 1 and depth > 1
    return _size(lay.batch, sizes) * ttgt.OUTER if thin and lay.batch else 0.0


__all__ = ["for_looped", "for_training"]
