"""einc.shared_intermediates: identical intermediate results (same step equation on the
same tensor objects) are computed once per context; contexts nest, are per thread, and
leave nothing behind on exit."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch
from oracle import reference

import einc
from einc import sharing


def _ops(*shapes, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64, **kw) for s in shapes]


@pytest.mark.parametrize("eq, shapes", [
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("ab,bc,cd->", [(2, 3), (3, 4), (4, 2)]),
    ("...ab,bc,cd->...d", [(2, 1, 3), (3, 4), (4, 5)]),
    ("ii,ij,jk->k", [(3, 3), (3, 4), (4, 2)]),
    ("ab,ab,ab->ab", [(2, 3), (1, 3), (2, 1)]),
    ("abc->ca", [(2, 3, 4)]),
])
def test_results_match_the_oracle(eq, shapes):
    ops = _ops(*shapes)
    with einc.shared_intermediates():
        first = einc.contract(eq, *ops)
        second = einc.einsum(eq, *ops)
    torch.testing.assert_close(first, reference(eq, *ops))
    assert second is first              # every step was found in the cache


def test_common_subnetworks_are_computed_once():
    x, y, z = _ops((2, 3), (3, 4), (4, 5))
    with einc.shared_intermediates() as cache:
        marginals = {out: einc.contract(f"ab,bc,cd->{out}", x, y, z) for out in "abcd"}
        steps = sharing.count_cached_ops(cache)["einsum"]
        assert steps < 4 * 2            # without sharing: two steps per call
        assert all(einc.contract(f"ab,bc,cd->{out}", x, y, z) is value for out, value in marginals.items())
        assert sharing.count_cached_ops(cache)["einsum"] == steps
        pair = einc.contract("ab,bc->ac", x, y)
        assert einc.contract("bc,ab->ac", y, x) is pair       # operands in the other order
        assert einc.contract("ij,jk->ik", x, y) is pair       # other letters
        assert einc.contract("ab,bc->ca", x, y) is not pair   # another equation
        assert sharing.count_cached_ops(cache)["tensor"] >= 3     # operands kept alive by the cache
    for out, value in marginals.items():
        torch.testing.assert_close(value, reference(f"ab,bc,cd->{out}", x, y, z))


def test_expressions_share_too():
    x, y, z = _ops((2, 3), (3, 4), (4, 5))
    expr = einc.contract_expression("ab,bc,cd->ad", x.shape, y.shape, z.shape)
    with einc.shared_intermediates() as cache:
        first = expr(x, y, z)
        assert expr(x, y, z) is first
        assert einc.contract("ab,bc,cd->ad", x, y, z) is first
        assert len(cache) > 0
    torch.testing.assert_close(first, reference("ab,bc,cd->ad", x, y, z))


def test_gradients_through_shared_intermediates():
    x, y, z = _ops((2, 3), (3, 4), (4, 5), requires_grad=True)
    with einc.shared_intermediates():
        loss = einc.contract("ab,bc,cd->a", x, y, z).sum() + einc.contract("ab,bc,cd->d", x, y, z).pow(2).sum()
    loss.backward()
    xr, yr, zr = (t.detach().clone().requires_grad_(True) for t in (x, y, z))
    ref = torch.einsum("ab,bc,cd->a", xr, yr, zr).sum() + torch.einsum("ab,bc,cd->d", xr, yr, zr).pow(2).sum()
    ref.backward()
    for t, r in ((x, xr), (y, yr), (z, zr)):
        torch.testing.assert_close(t.grad, r.grad)


def test_out_inside_a_context():
    x, y, z = _ops((2, 3), (3, 4), (4, 5))
    out = torch.empty(2, 5, dtype=torch.float64)
    with einc.shared_intermediates():
        shared = einc.contract("ab,bc,cd->ad", x, y, z)
        assert einc.contract("ab,bc,cd->ad", x, y, z, out=out) is out
    assert out is not shared and torch.equal(out, shared)


def test_contexts_nest_and_resume():
    x, y, z = _ops((2, 3), (3, 4), (4, 5))
    with einc.shared_intermediates() as outer:
        first = einc.contract("ab,bc,cd->ad", x, y, z)
        with einc.shared_intermediates() as inner:
            assert sharing.current_cache() is inner
            nested = einc.contract("ab,bc,cd->ad", x, y, z)
        assert nested is not first and torch.equal(nested, first)
        assert sharing.current_cache() is outer
        assert einc.contract("ab,bc,cd->ad", x, y, z) is first
    with einc.shared_intermediates(outer):
        assert einc.contract("ab,bc,cd->ad", x, y, z) is first
    assert not sharing.currently_sharing()


def test_nothing_is_kept_after_exit():
    x, y, z = _ops((2, 3), (3, 4), (4, 5))
    with einc.shared_intermediates():
        result = einc.contract("ab,bc,cd->ad", x, y, z)
        probe = weakref.ref(result)
    assert sharing.STACKS == {}
    del result
    gc.collect()
    assert probe() is None              # the cache, and its intermediates, are gone
    again = einc.contract("ab,bc,cd->ad", x, y, z)
    assert einc.contract("ab,bc,cd->ad", x, y, z) is not again      # no sharing outside a context
    with pytest.raises(ZeroDivisionError), einc.shared_intermediates():
        _ = 1 / 0
    assert sharing.STACKS == {}


def test_sharing_is_per_thread():
    x, y, z = _ops((2, 3), (3, 4), (4, 5))
    seen = {}

    def other():
        seen["sharing"] = sharing.currently_sharing()
        a = einc.contract("ab,bc,cd->ad", x, y, z)
        seen["same"] = einc.contract("ab,bc,cd->ad", x, y, z) is a

    with einc.shared_intermediates():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert sharing.currently_sharing()
    assert seen == {"sharing": False, "same": False}


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int16, torch.int64])
@pytest.mark.parametrize("eq", ["ab,bc,cd->a", "ab,bc,cd->ad", "ab,bc->ac"])
def test_integer_operands_give_what_einsum_gives(eq, dtype):
    """Step by step, an int64 intermediate meets an int32 operand (einc contracts integers
    in int64): the steps widen it, and the result has the dtype and value einsum's has."""
    g = torch.Generator().manual_seed(3)
    ops = [torch.randint(0, 3, s, generator=g).to(dtype) for s in [(3, 4), (4, 5), (5, 2)][:eq.count(",") + 1]]
    want = einc.einsum(eq, *ops)
    with einc.shared_intermediates():
        got = einc.einsum(eq, *ops)
        again = einc.einsum(eq, *ops)
    assert got.dtype == again.dtype == want.dtype
    assert torch.equal(got, want) and torch.equal(again, want)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
def test_narrow_integers_with_an_int64_result_are_exact_step_by_step_and_folded(dtype):
    """Where the result is int64 (``d`` summed alone), einc contracts narrow integers in
    int64: shared step by step and with constants folded once too (int8 100s in
    ``ab,bc,c,d->a``: shared 0 and folded 64000, where the sum is 40000000).  A shared step
    computed so is not taken by a call that runs it in the narrow dtype."""
    value = 100 if dtype != torch.int32 else 50000
    a, c, v, d = (torch.full(s, value).to(dtype) for s in [(3, 4), (4, 5), (5,), (2,)])
    eq = "ab,bc,c,d->a"
    want = torch.einsum(eq, *[t.to(torch.int64) for t in (a, c, v, d)])
    assert torch.equal(einc.einsum(eq, a, c, v, d), want)
    with einc.shared_intermediates():
        got, again = einc.einsum(eq, a, c, v, d), einc.einsum(eq, a, c, v, d)
        narrow = einc.einsum("ab,bc,c->a", a, c, v)        # int8 result: steps in int8, as torch's
    assert got.dtype == again.dtype == torch.int64
    assert torch.equal(got, want) and torch.equal(again, want)
    assert narrow.dtype == torch.einsum("ab,bc,c->a", a, c, v).dtype
    assert torch.equal(narrow, einc.einsum("ab,bc,c->a", a, c, v))
    expr = einc.contract_expression(eq, a.shape, c, v, d.shape, constants=[1, 2])
    assert torch.equal(expr(a, d), want) and expr(a, d).dtype == torch.int64


def test_an_expression_with_narrow_integer_constants_shares_its_steps_and_meets_other_dtypes_as_einsum():
    """Its int8 operands are made int64 once per context (a new int64 copy per call would key
    every step anew: the cache would grow by a step and a tensor per call); operands of another
    dtype meet the constants as einsum's call meets them: an int64 operand in int64 (einsum
    contracts a call of several dtypes in its result's, exactly: torch's wraps to 7680000), a
    uint8 one refused (torch's path multiplies uint8 by int64)."""
    i8 = lambda *s: torch.full(s, 100, dtype=torch.int8)       # noqa: E731
    c, v, d = i8(4, 4), i8(4), i8(3)
    expr = einc.contract_expression("ab,bc,c,d->a", (5, 4), c, v, d, constants=[1, 2, 3])
    x = i8(5, 4)
    exact = torch.einsum("ab,bc,c,d->a", *[t.long() for t in (x, c, v, d)])
    with einc.shared_intermediates() as cache:
        counts = []
        for _ in range(3):
            assert torch.equal(expr(x), exact)
            counts.append(dict(sharing.count_cached_ops(cache)))
    assert counts[0] == counts[1] == counts[2]
    wide = x.long()
    assert torch.equal(expr(wide), exact) and torch.equal(einc.einsum("ab,bc,c,d->a", wide, c, v, d), exact)
    with pytest.raises(einc.errors.DtypeError):
        expr(x.to(torch.uint8))


def test_a_memory_limit_inside_a_context_is_kept():
    """A bounded call keeps no whole intermediates: it runs sliced, as outside a context."""
    a, b = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    with einc.shared_intermediates() as cache:
        torch.testing.assert_close(einc.einsum("ij,jk->ik", a, b, memory_limit=5), a @ b)
        assert not sharing.count_cached_ops(cache)["einsum"]


def test_a_result_cached_under_any_layout_is_returned_contiguous_to_a_default_call():
    # the context's cache keys a step on its equation and operands, not on the layout asked
    x, y, z = (torch.randn(*s, dtype=torch.float64) for s in ((20, 30), (30, 40), (40, 50)))
    with einc.shared_intermediates() as cache:
        loose = einc.contract("ab,bc,cd->da", x, y, z, layout="any")
        strict = einc.contract("ab,bc,cd->da", x, y, z)
        assert sharing.count_cached_ops(cache)["einsum"] == 2       # (the second call computed nothing)
    assert not loose.is_contiguous()      # (the case: the path's last step writes it transposed)
    assert strict.is_contiguous()
    torch.testing.assert_close(strict, torch.einsum("ab,bc,cd->da", x, y, z))


def test_a_context_entered_inside_a_compiled_function_has_no_effect():
    # (it raised dynamo's Unsupported under fullgraph: threading.get_ident is not traceable)
    a, b, c = (torch.randn(s, dtype=torch.float64) for s in [(2, 3), (3, 4), (4, 5)])

    def f(a, b, c):
        with einc.shared_intermediates() as cache:
            return einc.contract("ab,bc,cd->ad", a, b, c) * 2 - einc.contract("ab,bc,cd->ad", a, b, c), cache
    torch._dynamo.reset()
    got, cache = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b, c)
    torch.testing.assert_close(got, a @ b @ c)
    assert cache == {} and not einc.sharing.currently_sharing()
    torch._dynamo.reset()


def test_a_call_inside_runs_its_steps_each_laid_out_for_itself(monkeypatch):
    """Inside the context each step is its own einsum, laid out for itself, where the whole
    call's plan lays its steps out together (docs/migrating.md): ``ij,jk,kl->li`` at these
    sizes agrees with the call outside to rounding, not to the bit, and gives its own bits
    in every context."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    einc.cache_clear()
    ops = _ops((3, 17), (17, 9), (9, 2))
    outside = einc.einsum("ij,jk,kl->li", *ops)
    inside = []
    for _ in range(2):
        with einc.shared_intermediates():
            inside.append(einc.einsum("ij,jk,kl->li", *ops))
    torch.testing.assert_close(inside[0], outside, rtol=1e-13, atol=1e-13)
    assert not torch.equal(inside[0], outside) and torch.equal(inside[0], inside[1])
    einc.cache_clear()


def test_operands_of_several_dtypes_give_what_einsum_gives():
    """einsum contracts a call of several dtypes in its result's dtype: step by step too,
    where a step of its own operands' dtypes would be refused (bool by bfloat16, with an
    int64 result of size 0) or round in a narrower one (float16 by float16 beside float64)."""
    mixed = {"ij,jk,kl->il": [torch.ones(0, 1, dtype=torch.int64), torch.ones(1, 3, dtype=torch.bool),
                              torch.ones(3, 1, dtype=torch.bfloat16)],
             ",,->": [torch.tensor(0.1, dtype=torch.float16), torch.tensor(0.3, dtype=torch.float16),
                      torch.tensor(1 / 3, dtype=torch.float64)]}
    for eq, ops in mixed.items():
        want = einc.einsum(eq, *ops)
        with einc.shared_intermediates():
            got = einc.einsum(eq, *ops)
        assert got.dtype == want.dtype == torch.einsum(eq, *ops).dtype
        assert torch.equal(got, want)


def test_a_call_with_an_empty_operand_gives_what_einsum_gives():
    """torch.einsum's dtype for an empty complex128 by bool ``abc,cd,d->ab`` is bool, which a
    step of its own has no product for: such a call runs whole, as outside the context."""
    ops = [torch.ones(0, 4, 5, dtype=torch.complex128), torch.ones(5, 5, dtype=torch.bool),
           torch.ones(5, dtype=torch.complex128)]
    want = einc.einsum("abc,cd,d->ab", *ops)
    with einc.shared_intermediates():
        got = einc.einsum("abc,cd,d->ab", *ops)
    assert got.dtype == want.dtype == torch.einsum("abc,cd,d->ab", *ops).dtype
    assert got.shape == want.shape == (0, 4)
