"""einc.contract and opt_einsum's keywords: out= (written in place, checked, torch's
autograd rule, nothing written and inputs untouched on an error), backend=, dtype /
order / casting / use_blas, and the PathInfo attributes."""

from __future__ import annotations

import pytest
import torch

import einc
from einc.errors import ArgumentError, DtypeError, EincError, OperandTypeError, OutError
from oracle import reference


def _ops(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype) for s in shapes]


EQ = "ij,jk,kl->il"
SHAPES = [(3, 4), (4, 5), (5, 2)]


@pytest.mark.parametrize("door", ["einsum", "contract"])
def test_out_is_written_in_place_and_returned(door):
    ops = _ops(*SHAPES)
    out = torch.full((3, 2), 7.0, dtype=torch.float64)
    result = getattr(einc, door)(EQ, *ops, out=out)
    assert result is out
    torch.testing.assert_close(out, reference(EQ, *ops))


def test_out_may_be_a_strided_view_and_may_alias_an_operand():
    a, b = _ops((4, 4), (4, 4))
    expected = reference("ij,jk->ik", a, b)
    base = torch.zeros(4, 8, dtype=torch.float64)
    view = base[:, ::2]                                    # not contiguous
    einc.einsum("ij,jk->ik", a, b, out=view)
    torch.testing.assert_close(view, expected)
    assert base[:, 1::2].abs().sum() == 0                  # the gaps are untouched
    einc.einsum("ij,jk->ik", a, b, out=a)                  # the result is computed before it is written
    torch.testing.assert_close(a, expected)


def test_out_on_expressions_with_and_without_constants():
    ops = _ops(*SHAPES)
    expected = reference(EQ, *ops)
    out = torch.empty(3, 2, dtype=torch.float64)
    assert einc.contract_expression(EQ, *SHAPES)(*ops, out=out) is out
    torch.testing.assert_close(out, expected)
    out.zero_()
    const = einc.contract_expression(EQ, ops[0], SHAPES[1], ops[2], constants=[0, 2])
    assert const(ops[1], out=out) is out
    torch.testing.assert_close(out, expected)


def _untouched_after(call, ops, out):
    """Run ``call`` (expected to raise), then check that nothing was written."""
    before = [o.clone() for o in ops]
    out_before = out.clone() if isinstance(out, torch.Tensor) else None
    with pytest.raises(EincError) as info:
        call()
    for o, b in zip(ops, before):
        assert torch.equal(o.detach(), b.detach())
    if out_before is not None:
        assert torch.equal(out.detach(), out_before.detach())
    return info.value


@pytest.mark.parametrize("door", ["einsum", "contract"])
def test_out_of_the_wrong_shape_raises_and_writes_nothing(door):
    ops = _ops(*SHAPES)
    out = torch.full((2, 3), 5.0, dtype=torch.float64)
    err = _untouched_after(lambda: getattr(einc, door)(EQ, *ops, out=out), ops, out)
    assert isinstance(err, OutError) and isinstance(err, RuntimeError)
    assert "(2, 3)" in str(err) and "(3, 2)" in str(err)


def test_out_of_the_wrong_dtype_raises_as_torch_does():
    ops = _ops(*SHAPES)
    out = torch.full((3, 2), 5.0, dtype=torch.float32)
    err = _untouched_after(lambda: einc.einsum(EQ, *ops, out=out), ops, out)
    assert "Expected out tensor to have dtype torch.float64, but got torch.float32" in str(err)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):   # torch's own wording
        torch.mm(ops[0], ops[1], out=torch.empty(3, 5, dtype=torch.float32))


def test_out_that_is_not_a_tensor():
    ops = _ops(*SHAPES)
    err = _untouched_after(lambda: einc.contract(EQ, *ops, out=[0.0] * 6), ops, None)
    assert isinstance(err, OperandTypeError) and isinstance(err, TypeError) and "out=" in str(err)


def test_out_with_operands_that_require_grad_follows_torch():
    ops = _ops(*SHAPES)
    ops[1].requires_grad_(True)
    out = torch.zeros(3, 2, dtype=torch.float64)
    err = _untouched_after(lambda: einc.einsum(EQ, *ops, out=out), ops, out)
    assert "don't support automatic differentiation" in str(err)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):   # torch's rule
        torch.mm(ops[0], ops[1], out=torch.empty(3, 5, dtype=torch.float64))
    leaf_out = torch.zeros(3, 2, dtype=torch.float64, requires_grad=True)
    plain = [o.detach() for o in ops]
    _untouched_after(lambda: einc.einsum(EQ, *plain, out=leaf_out), plain, leaf_out)
    with torch.no_grad():                                  # allowed without grad mode, as in torch
        assert einc.einsum(EQ, *ops, out=out) is out
    assert not out.requires_grad
    torch.testing.assert_close(out, reference(EQ, *plain))


@pytest.mark.parametrize("backend", ["numpy", "jax", "cupy", "tensorflow", "object", "dask"])
def test_another_backend_is_a_clear_error(backend):
    ops = _ops(*SHAPES)
    expr = einc.contract_expression(EQ, *SHAPES)
    out = torch.zeros(3, 2, dtype=torch.float64)
    for call in (lambda: einc.contract(EQ, *ops, backend=backend, out=out),
                 lambda: einc.einsum(EQ, *ops, backend=backend), lambda: expr(*ops, backend=backend, out=out)):
        err = _untouched_after(call, ops, out)
        assert isinstance(err, ArgumentError) and isinstance(err, ValueError)
        assert f"backend={backend!r}" in str(err) and "torch tensors only" in str(err)


@pytest.mark.parametrize("backend", [None, "auto", "torch"])
def test_backends_naming_torch_are_accepted(backend):
    ops = _ops(*SHAPES)
    expected = reference(EQ, *ops)
    torch.testing.assert_close(einc.contract(EQ, *ops, backend=backend), expected)
    torch.testing.assert_close(einc.einsum(EQ, *ops, backend=backend), expected)
    torch.testing.assert_close(einc.contract_expression(EQ, *SHAPES)(*ops, backend=backend), expected)


def test_dtype_casts_the_operands_under_the_casting_rule():
    ops = _ops(*SHAPES, dtype=torch.float32)
    for dtype in (torch.float64, "float64"):
        result = einc.contract(EQ, *ops, dtype=dtype)
        assert result.dtype == torch.float64
        torch.testing.assert_close(result, reference(EQ, *ops))
    wide = _ops(*SHAPES)
    out = torch.zeros(3, 2, dtype=torch.float32)
    err = _untouched_after(lambda: einc.contract(EQ, *wide, dtype=torch.float32, out=out), wide, out)
    assert isinstance(err, DtypeError)
    assert "cannot cast operand 0 from torch.float64 to torch.float32 with casting='safe'" in str(err)
    assert einc.contract(EQ, *wide, dtype=torch.float32, casting="same_kind").dtype == torch.float32
    with pytest.raises(DtypeError, match="casting='same_kind'"):
        einc.contract(EQ, *wide, dtype=torch.int64, casting="same_kind")
    with pytest.raises(DtypeError, match="casting='no'"):
        einc.contract(EQ, *ops, dtype=torch.float64, casting="no")
    with pytest.raises(DtypeError, match="not a dtype torch has"):
        einc.contract(EQ, *ops, dtype="float7")
    interleaved = einc.contract(ops[0], [0, 1], ops[1], [1, 2], [0, 2], dtype=torch.float64)
    assert interleaved.dtype == torch.float64


def test_order_casting_and_use_blas():
    ops = _ops(*SHAPES)
    expected = reference(EQ, *ops)
    for order in ("K", "C"):
        assert einc.contract(EQ, *ops, order=order).is_contiguous()
    for order in ("F", "A"):
        with pytest.raises(ArgumentError, match=f"order='{order}' cannot be honoured"):
            einc.contract(EQ, *ops, order=order)
    with pytest.raises(ArgumentError, match="casting must be one of"):
        einc.contract(EQ, *ops, casting="sometimes")
    for use_blas in (True, False):
        torch.testing.assert_close(einc.contract(EQ, *ops, use_blas=use_blas), expected)


def test_optimize_none_and_true_mean_auto_as_in_opt_einsum():
    shapes = [(30, 2), (2, 30), (30, 30)]
    auto, _ = einc.contract_path("ij,jk,kl->il", *shapes, optimize="auto")
    assert auto != [(0, 1), (0, 1)]
    for optimize in (None, True):
        assert einc.contract_path("ij,jk,kl->il", *shapes, optimize=optimize)[0] == auto
        assert einc.contract_expression("ij,jk,kl->il", *shapes, optimize=optimize).plan.path == tuple(auto)
    assert einc.explain("ij,jk,kl->il", *shapes, optimize=None).path == ((0, 1), (0, 1))   # einsum's meaning


def test_path_info_has_opt_einsum_attributes():
    opt_einsum = pytest.importorskip("opt_einsum")
    shapes = [(2, 3, 4), (4, 5), (5, 6, 2), (3, 7)]
    eq = "...ij,jk,kl...,im->m...l"
    path, info = einc.contract_path(eq, *shapes)
    ref_path, ref = opt_einsum.contract_path(eq, *shapes, shapes=True)
    assert isinstance(info, einc.PathInfo)
    assert path == info.path and isinstance(path, list)
    assert path == ref_path
    for name in ("opt_cost", "naive_cost", "largest_intermediate", "size_list", "scale_list", "shapes"):
        assert getattr(info, name) == getattr(ref, name), name
    # the ellipsis dimension gets an unused letter (which one is opt_einsum's own choice)
    assert sorted(info.size_dict.values()) == sorted(ref.size_dict.values())
    assert {k: v for k, v in info.size_dict.items() if k in "ijklm"} == \
        {k: v for k, v in ref.size_dict.items() if k in "ijklm"}
    assert len(info.indices) == len(ref.indices) == 6
    assert info.naive_cost == ref.naive_cost
    assert info.opt_cost <= ref.opt_cost
    assert len(info.eq.split("->")[0].split(",")) == 4 and info.eq.split("->")[1] == info.output_subscript
    assert info.speedup == pytest.approx(info.naive_cost / info.opt_cost)
    assert "Optimized FLOP count" in str(info)
