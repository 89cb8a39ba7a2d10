"""The torch executor under ``layout="any"``: the copy-cost model counts no copy of the
last step's result into the equation's order, the step keeps the order its product
writes, and every layout the model may choose is exact, dense and fresh."""

import pytest
import torch

from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.runtime import torch_executor as tx
from einc.runtime.program import unroll
from einc.runtime.torch_executor import training_layout, ttgt
from tests.runtime.test_ttgt import CASES, _layouts_of

dense = torch.ops.aten.is_non_overlapping_and_dense.default


@pytest.fixture(autouse=True)
def _weigh_every_layout(monkeypatch):
    """The small test shapes weigh every layout, as large steps do (ttgt.SMALL)."""
    monkeypatch.setattr(ttgt, "SMALL", 0)


def _choose(eq, sizes, free_out):
    ins, out = eq.split("->")
    ta, tb = ins.split(",")
    # as the torch executor asks: a free result's step runs one product (no looped layout)
    return ttgt.choose(list(ta), list(tb), list(out), sizes, tx._COPY_WORTH_SPARING, loops=not free_out,
                       free_out=free_out)


def test_a_free_result_is_not_copied_and_costs_less():
    """``akbc,jk->cjba`` (the result reverses the operand's order): the contiguous result
    is copied from the product; a free one is the product, at the cost of its matrix
    product and operand copies only."""
    sizes = dict(a=48, b=40, c=48, j=24, k=48)
    fixed, free = _choose("akbc,jk->cjba", sizes, False), _choose("akbc,jk->cjba", sizes, True)
    assert "c" in fixed.copies and "c" not in free.copies
    assert free.cost < fixed.cost


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
def test_no_candidate_of_a_free_result_counts_its_copy(eq, shapes):
    ins, out = eq.split("->")
    ta, tb = ins.split(",")
    sizes = {c: n for t, s in zip((ta, tb), shapes) for c, n in zip(t, s)}
    for lay in ttgt.candidates(list(ta), list(tb), list(out), sizes, tx._COPY_WORTH_SPARING):
        kept = ttgt.without_result_copy(lay, list(out), sizes)
        assert "c" not in kept.copies
        if "c" in lay.copies:
            copy = ttgt.copy_ns([*lay.batch, *lay.m, *lay.n], list(out), sizes)
            assert kept.cost == pytest.approx(lay.cost - copy, abs=1e-3) and copy > 0
        else:
            assert kept.cost == pytest.approx(lay.cost, abs=1e-3)


def test_layouts_equal_but_for_the_result_copy_stay_equal():
    """``bhqk,bkhd->bqhd`` (attention's values): the plain product and the swapped one
    (``B`` copied as its matrices' transposes) cost the same once neither copies the
    result; the first of them is kept, not the one the subtraction's rounding makes
    cheaper by 1e-10 ns (the swapped product is the slower when timed)."""
    lay = _choose("bhqk,bkhd->bqhd", dict(b=4, h=8, q=128, k=128, d=64), True)
    assert not lay.swap and lay.flip == "" and lay.copies == "r"


def _every_layout(plan, dtype=torch.float64):
    """The step functions of ``plan`` (one contraction) under ``layout="any"``, once per
    candidate layout of its step."""
    found, real, training = [], ttgt.pick, training_layout.for_training
    ttgt.pick = lambda layouts: found.extend(layouts) or real(layouts)
    try:
        tx.step_functions(plan, [dtype] * plan.num_operands, layout="any")
    finally:
        ttgt.pick = real
    seen = list(found)
    for lay in seen:
        ttgt.pick = lambda layouts, lay=lay: next(f for f in layouts if (f.swap, f.batch, f.m, f.n, f.k) == (
            lay.swap, lay.batch, lay.m, lay.n, lay.k))
        training_layout.for_training = lambda forward, *args, **kw: forward
        try:
            yield lay, tx.step_functions(plan, [dtype] * plan.num_operands, layout="any")[0]
        finally:
            ttgt.pick, training_layout.for_training = real, training


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind", ["plain", "transposed", "sliced", "expanded"])
def test_every_layout_is_exact_dense_and_fresh(eq, shapes, kind):
    plan = build_plan(build(parse(eq), shapes))
    g = torch.Generator().manual_seed(3)
    ops = [_layouts_of(torch.randn(s, dtype=torch.float64, generator=g), kind) for s in shapes]
    expected = torch.einsum(eq, *ops)
    ran = 0
    for lay, fns in _every_layout(plan):
        out = unroll(plan, fns)(list(ops))
        assert dense(out) and out.shape == expected.shape, lay
        assert all(out.untyped_storage().data_ptr() != o.untyped_storage().data_ptr() for o in ops)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12, msg=lambda m: f"{lay}: {m}")
        ran += 1
    assert ran > 1


def test_the_result_is_the_products_output_permuted():
    """No copy after the product: the result's storage is the product's, as large as the
    result (no larger buffer behind a view)."""
    eq, shapes = "akbc,jk->cjba", [(6, 5, 4, 7), (3, 5)]
    plan = build_plan(build(parse(eq), shapes))
    (fn,), _ = tx.step_functions(plan, [torch.float32] * 2, layout="any")
    a, b = (torch.randn(s) for s in shapes)
    out = fn(a, b)
    assert not out.is_contiguous() and dense(out)
    assert out.untyped_storage().nbytes() == out.numel() * out.element_size()
    torch.testing.assert_close(out, torch.einsum(eq, a, b))
