"""Products with a side of 1 (matrix-vector shaped) in the copy-cost model
(runtime/torch_executor/ttgt.py): priced at about a tenth of the large rate, not by the
short-side law carried down to a hundredth, and, where a gradient is taken, with the
outer products their backward makes; and the calls that meet them, size-1 dimensions
broadcast in every orientation (either operand, kept and summed, stride-0 expanded
inputs), exact against float64 torch.einsum, with their gradients."""

from __future__ import annotations

import math

import pytest
import torch

import einc
from einc.runtime import torch_executor as tx
from einc.runtime.torch_executor import training_layout, ttgt


def _size(idx, sizes):
    return math.prod(sizes[i] for i in idx)


def test_a_side_of_one_costs_about_ten_times_the_large_rate():
    """MKL's matrix-vector product (1 thread, float32) runs at a tenth of the large rate
    or better (1 x 1024 by 1024 x 1024: ~7x; 1024 x 1024 by 1024 x 1: ~13x), not the
    hundredth ``1 + (SHORT_SIDE / 1) ** 2`` gives, and no side runs slower than that;
    sides of 4 and more keep that law."""
    flops = 2 * 1024 * 1024
    for side in (1, 2, 3):
        got = ttgt._product_ns(1, side, 1024, 1024, 1.0)
        assert got == pytest.approx(side * flops * ttgt.GEMM * ttgt.MATVEC + ttgt.PER_MATRIX)
    for side in (4, 8, 64):
        got = ttgt._product_ns(1, side, 1024, 1024, 1.0)
        assert got == pytest.approx(side * flops * ttgt.GEMM * (1 + (ttgt.SHORT_SIDE / side) ** 2) + ttgt.PER_MATRIX)


def test_training_weighs_the_outer_products_of_a_batch_of_matrix_vector_products():
    """``cdeab,cda->cdeb`` ((256, 1, 4, 16, 32) by (256, 1, 16)): the forward reads ``cda``
    broadcast over ``e``, 1,024 products of 1 x 16 by 16 x 32, nothing of ``cdeab`` copied;
    their backward would make 1,024 outer products (depth 1, ~600 ns each), so the training
    layout copies ``cdeab`` and runs 256 of 1 x 16 by 16 x 128."""
    sizes = dict(c=256, d=1, e=4, a=16, b=32)
    lay = ttgt.choose(list("cdeab"), list("cda"), list("cdeb"), sizes, tx._COPY_WORTH_SPARING)
    assert lay.broadcast == ("e",) and _size(lay.batch, sizes) == 1024
    assert min(_size(lay.m, sizes), _size(lay.n, sizes)) == 1
    training = training_layout.for_training(lay, list("cdeab"), list("cda"), list("cdeb"), sizes,
                                            tx._COPY_WORTH_SPARING)
    assert training.broadcast == () and _size(training.batch, sizes) == 256
    assert training_layout._outer_ns(lay, sizes) == 1024 * ttgt.OUTER
    assert training_layout._outer_ns(training, sizes) == 256 * ttgt.OUTER


def test_a_batch_of_matrices_torch_loops_over_is_priced_so():
    """torch's CPU ``bmm`` runs matrices of fewer than 400 multiply-adds in a loop of its
    own, not BLAS: 1,024 products of 1 x 16 by 16 x 24 took 5.6x those of 1 x 16 by 16 x 25
    (bench/measured/real-modules-2026-12-06.md); a single ``mm`` is BLAS's at any size."""
    below, above = ttgt._product_ns(1024, 1, 24, 16, 1.0), ttgt._product_ns(1024, 1, 25, 16, 1.0)
    assert below > 2 * above
    assert ttgt._product_ns(1, 1, 24, 16, 1.0) < ttgt._product_ns(1, 1, 25, 16, 1.0)


def test_pykeen_ntn_copies_rather_than_loop_over_tiny_matrices():
    """pykeen's NTN ``cdeab,cda->cdeb`` ((256, 1, 4, 16, 16) by (256, 1, 16)): ``cda``
    broadcast over ``e`` would make 1,024 products of 1 x 16 by 16 x 16, which torch's
    ``bmm`` runs in its own loop (~3x the 256 products of 1 x 16 by 16 x 64 and the copy of
    ``cdeab`` into them, measured); so the forward copies ``cdeab``, as training does."""
    sizes = dict(c=256, d=1, e=4, a=16, b=16)
    lay = tx.direct.choose(list("cdeab"), list("cda"), list("cdeb"), sizes, tx._COPY_WORTH_SPARING)
    assert (lay.swap, lay.batch, lay.m, lay.n, lay.k, lay.copies, lay.broadcast) == \
        (True, ("c", "d"), (), ("e", "b"), ("a",), "r", ())
    assert training_layout.for_training(lay, list("cdeab"), list("cda"), list("cdeb"), sizes,
                                        tx._COPY_WORTH_SPARING) is lay


def test_no_outer_products_are_counted_where_no_side_is_one():
    sizes = dict(b=8, i=16, j=16, k=16)
    lay = ttgt.choose(list("bij"), list("bjk"), list("bik"), sizes, tx._COPY_WORTH_SPARING)
    assert training_layout._outer_ns(lay, sizes) == 0.0


# Each call: (equation, shapes); the size-1 dimensions broadcast against the other operand.
CALLS = [
    ("cdeab,cda->cdeb", [(32, 1, 4, 16, 16), (32, 1, 16)]),     # a size-1 index both hold, kept
    ("cdeab,cda->cdeb", [(32, 1, 4, 16, 16), (1, 1, 16)]),      # the right operand's batch index of 1
    ("cdeab,cda->cdeb", [(1, 1, 4, 16, 16), (32, 1, 16)]),      # the left operand's
    ("bcda,bca->bcd", [(64, 1, 4, 16), (1, 50, 16)]),           # one each way (pykeen's NTN)
    ("bcda,bca->bcd", [(1, 50, 4, 16), (64, 1, 16)]),           # the other way round
    ("bij,bjk->bik", [(16, 32, 1), (16, 8, 24)]),               # a summed index of 1 on the left
    ("bij,bjk->bik", [(16, 32, 8), (16, 1, 24)]),               # on the right
    ("bij,bj->bi", [(64, 32, 16), (1, 16)]),                    # a vector broadcast over the batch
    ("bj,bjk->bk", [(1, 16), (64, 16, 32)]),                    # on the left
    ("bj,bjk->bk", [(64, 16), (64, 16, 32)]),                   # a batch of matrix-vector products
]


def _inputs(eq, shapes, how, seed=0):
    """float32 operands of ``shapes``: ``plain``; ``stride0`` (their size-1 dimensions with
    stride 0); ``expanded`` (each size-1 dimension expanded to the size its label has in
    the other operand, a stride-0 view: nothing broadcasts, the memory is shared)."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(s, generator=g) for s in shapes]
    if how == "stride0":
        return [x.as_strided(x.shape, [0 if n == 1 else st for n, st in zip(x.shape, x.stride())]) for x in xs]
    if how == "expanded":
        terms = eq.split("->")[0].split(",")
        full = {}
        for term, shape in zip(terms, shapes):
            for label, n in zip(term, shape):
                full[label] = max(full.get(label, 1), n)
        return [x.expand(*[full[label] for label in term]) for x, term in zip(xs, terms)]
    return xs


def _oracle(eq, xs):
    return torch.einsum(eq, *[x.detach().double() for x in xs])


@pytest.mark.parametrize("how", ["plain", "stride0", "expanded"])
@pytest.mark.parametrize("eq, shapes", CALLS)
def test_broadcast_calls_are_exact(eq, shapes, how):
    xs = _inputs(eq, shapes, how)
    einc.cache_clear()
    got = einc.einsum(eq, *xs)
    assert got.is_contiguous()
    want = _oracle(eq, xs)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("how", ["plain", "expanded"])
@pytest.mark.parametrize("eq, shapes", CALLS)
def test_broadcast_calls_differentiate(eq, shapes, how):
    """Gradients through the training layout (:func:`training_layout.for_training`), against
    float64 torch.einsum's; an expanded operand's gradient sums over its stride-0 copies."""
    xs = [x.detach().requires_grad_() for x in _inputs(eq, shapes, "plain")]
    used = [x.expand(*e.shape) for x, e in zip(xs, _inputs(eq, shapes, how))]
    einc.cache_clear()
    out = einc.einsum(eq, *used)
    gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(out, xs, gout)
    ref = [x.detach().double().requires_grad_() for x in xs]
    want = torch.autograd.grad(torch.einsum(eq, *[r.expand(*e.shape) for r, e in zip(ref, used)]), ref,
                               gout.double())
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-4)
