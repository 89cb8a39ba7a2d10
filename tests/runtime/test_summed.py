"""A multiply and sum that autograd would not record as it runs (runtime/torch_executor/summed.py:
one made in blocks, one of float16 / bfloat16 operands multiplied in float32) runs as
``Summed`` where a gradient is taken: the untracked call's bits, the operands saved as they
are, gradients (first and second order, real and complex) as torch's; under transforms and
tracing it does not run as ``Summed`` (their blocks: tests/runtime/test_chunked.py)."""

import pytest
import torch

import einc
from einc.runtime.torch_executor import chunked, summed

HALF = [torch.float16, torch.bfloat16]
# a dot step (the executor's and a size class's), and few outputs of long sums that no block
# divides (4099 is prime: runtime/torch_executor/blocked.py), one operand broadcast (16-bit
# floats: one matrix product forward, trained as the multiply and sum)
CASES = [("bij,bji->b", [(3, 4, 5), (3, 5, 4)]), ("ij,ij->", [(30, 20), (30, 20)]),
         ("abc,abcd->d", [(2, 3, 4099), (2, 3, 4099, 4)])]


@pytest.fixture
def count(applied):
    """How many steps ran as Summed since the fixture began (``count()``)."""
    return applied(summed.Summed)


def _operands(shapes, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    wide = torch.complex128 if dtype.is_complex else torch.float64
    return [torch.randn(s, generator=g, dtype=wide).to(dtype) for s in shapes]


def _check_gradients(eq, ops, out, dtype, seed=1):
    """``out``'s gradients (``einc.einsum(eq, *ops)``) against torch.einsum's in float64."""
    w = _operands([out.shape], dtype, seed)[0]
    got = torch.autograd.grad(out, ops, w)
    leaves = [o.detach().to(torch.complex128 if dtype.is_complex else torch.float64).requires_grad_() for o in ops]
    want = torch.autograd.grad(torch.einsum(eq, *leaves), leaves, w.to(leaves[0].dtype))
    tol = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}.get(dtype, 1e-10)
    for g_, e in zip(got, want):
        assert g_.dtype == dtype and g_.shape == e.shape
        torch.testing.assert_close(g_.to(e.dtype), e, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_half_precision_multiply_and_sum_gives_the_untracked_bits_and_saves_16_bits(case, dtype, new_shapes, count):
    eq, shapes = case
    ops = _operands(shapes, dtype)
    with torch.no_grad():
        plain = einc.einsum(eq, *ops)
    assert count() == 0
    ops = [o.requires_grad_() for o in ops]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = einc.einsum(eq, *ops)
    assert count() == 1 and torch.equal(out.detach(), plain)
    assert saved and all(t.dtype == dtype for t in saved), [t.dtype for t in saved]
    _check_gradients(eq, ops, out, dtype)


@pytest.mark.parametrize("case,dtype", [
    pytest.param(case, dtype, id=f"{dtype}-{case[0]}")
    for case in CASES for dtype in [torch.float32, torch.float64, torch.complex128, *HALF]
    if case is not CASES[2] or dtype not in HALF])     # (16 bits there: a matrix product forward, no blocks)
def test_a_multiply_and_sum_in_blocks_runs_them_where_a_gradient_is_taken(case, dtype, chunks_always, count,
                                                                           per_shape_plans, monkeypatch):
    # (planned per shape: a size class's multiply and sum is never cut)
    eq, shapes = case
    ops = _operands(shapes, dtype)
    cut = []
    run = chunked.untracked
    monkeypatch.setattr(chunked, "untracked", lambda x: cut.append(run(x)) or cut[-1])
    with torch.no_grad():
        plain = einc.einsum(eq, *ops)
    ops = [o.requires_grad_() for o in ops]
    out = einc.einsum(eq, *ops)
    assert cut and all(cut)                                 # the blocks ran, both times
    assert count() == 1 and torch.equal(out.detach(), plain)
    _check_gradients(eq, ops, out, dtype)


def test_a_multiply_and_sum_that_autograd_records_as_it_runs_is_not_wrapped(new_shapes, count):
    """Whole and float32 or wider: autograd records its ops, as the untracked call runs them."""
    for eq, shapes in CASES:
        ops = [o.requires_grad_() for o in _operands(shapes, torch.float32)]
        with torch.no_grad():
            plain = einc.einsum(eq, *ops)
        out = einc.einsum(eq, *ops)
        assert torch.equal(out.detach(), plain)
        _check_gradients(eq, ops, out, torch.float32)
    assert count() == 0


@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: c[0])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_first_and_second_order_gradients_are_checked(case, dtype, chunks_always, count, per_shape_plans):
    eq, shapes = case
    ops = [o.requires_grad_() for o in _operands([[min(s, 4) for s in shape] for shape in shapes], dtype)]
    assert torch.autograd.gradcheck(lambda *xs: einc.einsum(eq, *xs), ops)
    assert torch.autograd.gradgradcheck(lambda *xs: einc.einsum(eq, *xs), ops)
    assert count() > 0


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_second_order_gradients_in_half_precision_are_close_to_float64s(dtype, new_shapes, count):
    eq, shapes = CASES[0]
    ops = [o.requires_grad_() for o in _operands(shapes, dtype)]
    ga, _ = torch.autograd.grad(einc.einsum(eq, *ops).sum(), ops, create_graph=True)
    gga, ggb = torch.autograd.grad((ga.float() ** 2).sum(), ops, allow_unused=True, materialize_grads=True)
    doubles = [o.detach().double().requires_grad_() for o in ops]
    wa, _ = torch.autograd.grad(torch.einsum(eq, *doubles).sum(), doubles, create_graph=True)
    wanted = torch.autograd.grad((wa ** 2).sum(), doubles, allow_unused=True, materialize_grads=True)
    assert count() == 1
    for got, want in zip((gga, ggb), wanted):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
def test_transforms_and_tracing_do_not_run_summed(dtype, chunks_always, count, per_shape_plans):
    from torch.func import grad
    eq, shapes = CASES[0]
    a, b = _operands(shapes, dtype)
    got = grad(lambda x: einc.einsum(eq, x, b).float().sum())(a)
    want = b.double().transpose(1, 2)                       # d/da of the sum of a_bij b_bji
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2)
    traced = torch.jit.trace(lambda x, y: einc.einsum(eq, x, y), (a, b), check_trace=False)
    torch.testing.assert_close(traced(a, b).double(), torch.einsum(eq, a.double(), b.double()), rtol=1e-2, atol=1e-2)
    assert count() == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128, torch.bfloat16], ids=str)
@pytest.mark.parametrize("sizes", [(0, 4, 5), (3, 0, 5), (1, 1, 1), (3, 1, 5), (3, 4, 0)], ids=str)
@pytest.mark.parametrize("eq", ["bij,bji->b", "bij,bijk->k"])
def test_sizes_zero_and_one(eq, sizes, dtype, chunks_always, per_shape_plans):
    """A dot step, and one output of a sum (``k`` of size 1: a multiply and sum however short)."""
    b_, i, j = sizes
    shapes = [(b_, i, j), (b_, j, i)] if eq == "bij,bji->b" else [(b_, i, j), (b_, i, j, 1)]
    ops = _operands(shapes, dtype)
    with torch.no_grad():
        plain = einc.einsum(eq, *ops)
    ops = [o.requires_grad_() for o in ops]
    out = einc.einsum(eq, *ops)
    assert torch.equal(out.detach(), plain)
    _check_gradients(eq, ops, out, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_a_broadcast_operand_with_a_size_one_dimension(dtype, chunks_always, count, per_shape_plans):
    eq, shapes = "abc,abcd->d", [(16, 1, 4099), (16, 1, 4099, 4)]       # 4 outputs of 65,584 terms, no block
    ops = _operands(shapes, dtype)
    with torch.no_grad():
        plain = einc.einsum(eq, *ops)
    ops = [o.requires_grad_() for o in ops]
    out = einc.einsum(eq, *ops)
    assert count() == 1 and torch.equal(out.detach(), plain)
    _check_gradients(eq, ops, out, dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_16_bit_gradient_product_is_the_float32_product_rounded_once(dtype):
    """Where nothing is summed, the backward multiplies in 16 bits, or in float32 where the
    last dimension broadcasts the other operand: the same bits either way (the float32
    product of two 16-bit floats is exact), overflow included."""
    g = torch.Generator().manual_seed(0)
    for gs, os_ in [((1, 1), (30, 20)), ((3, 1), (3, 40)), ((1, 1, 8), (6, 5, 1))]:
        grad = (torch.randn(gs, generator=g) * 300).to(dtype)
        other = (torch.randn(os_, generator=g) * 300).to(dtype)
        x = torch.empty(torch.broadcast_shapes(gs, os_), dtype=dtype)
        want = (grad.float() * other.float()).to(dtype)
        assert torch.equal(summed._part(grad, other, x.shape, x.dtype), want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128, *HALF], ids=str)
@pytest.mark.parametrize("rank", [4, 60], ids=lambda r: f"rank{r}")
def test_a_broadcast_operand_s_gradient_sums_the_products(dtype, rank):
    """Past torch's 52 letters the sum is a multiply and sum; within them torch's einsum op."""
    shape = (1,) * (rank - 4) + (3, 4, 5, 6)
    x = torch.empty(shape[:-3] + (1, 5, 1), dtype=dtype)              # broadcast along two dims
    grad = _operands([shape[:-1] + (1,)], dtype, seed=1)[0]            # summed along the last
    other = _operands([shape], dtype, seed=2)[0]
    got = summed._part(grad, other, x.shape, x.dtype)
    want = (grad.to(torch.complex128) * other.to(torch.complex128).conj()).sum_to_size(x.shape)
    assert got.dtype == dtype and got.shape == x.shape
    tol = 2e-2 if dtype in HALF else 1e-12
    torch.testing.assert_close(got.to(torch.complex128), want, rtol=tol, atol=tol)
