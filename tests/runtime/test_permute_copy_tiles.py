"""runtime/torch_executor/permute_copy.py, the tiled copy: bit for bit
``x.permute(...).contiguous()`` for every permutation of 3- to 6-index tensors, every
dtype, sizes 0 and 1, strided sources and through autograd; :func:`tile_plan` cuts what
its docstring says (the farthest dimensions first, whole lines of the result, a bounded
number of tiles); einc's results through it match torch.einsum."""

import functools
import itertools
import math

import pytest
import torch

import einc
from einc.runtime.torch_executor import permute_copy as pc
from einc.runtime.torch_executor.permute_copy import permuted_copy, tile_plan
from tests.runtime.test_permute_copy import _random as _random_within

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.complex128,
          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
_random = functools.partial(_random_within, bound=100)


def _same_bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype and a.is_contiguous()
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b.contiguous())
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(width), b.contiguous().view(width))


@pytest.fixture
def tiles_always(monkeypatch):
    """Every transposing copy cut as finely as the plan allows (the thresholds are tested
    on their own), and no wide copy in the way."""
    monkeypatch.setattr(pc, "MIN_BYTES", 0)
    monkeypatch.setattr(pc, "TILE_BYTES", 0)
    monkeypatch.setattr(pc, "TILE_LINES", 1)
    monkeypatch.setattr(pc, "TILE_PAGES", 1)
    monkeypatch.setattr(pc, "TILE_LEAST", 1)
    monkeypatch.setattr(pc, "TILE_ROW", 1)
    monkeypatch.setattr(pc, "wide_plan", lambda *args: False)


def _all_permutations(x, names):
    """Every permutation of ``x`` (over ``names``) through permuted_copy, checked bit for
    bit; returns how many took the tiles."""
    sizes = dict(zip(names, x.shape))
    tiled = 0
    for dst in itertools.permutations(names):
        if list(dst) == list(names):
            continue
        fn = permuted_copy(list(names), list(dst), sizes)
        got = fn(x)
        want = x.permute([names.index(i) for i in dst]).contiguous()
        assert _same_bits(got, want), (names, dst, x.shape, x.stride(), x.dtype)
        tiled += bool(getattr(fn, "plans", None)) and any(p and p[0] == "tiles" for p, _ in fn.plans.values())
    return tiled


@pytest.mark.parametrize("shape", [(5, 6, 7), (4, 3, 5, 6), (2, 3, 4, 3, 5), (2, 3, 2, 3, 2, 4)])
def test_every_permutation_of_three_to_six_indices_is_exact(shape, tiles_always):
    names = "abcdef"[:len(shape)]
    tiled = _all_permutations(_random(shape, torch.float32), names)
    assert tiled >= math.factorial(len(shape)) // 3          # the tiles were taken, not only the plain copy


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_is_exact(dtype, tiles_always):
    assert _all_permutations(_random((4, 6, 5, 3), dtype), "abcd")


def test_nan_payloads_and_negative_zero_survive(tiles_always):
    raw = torch.randint(-2**31, 2**31 - 1, (6, 5, 4), dtype=torch.int64).to(torch.int32)
    raw[0, 0, :] = torch.tensor([0x7F800001, 0x7FC00123, -0x80000000, 1], dtype=torch.int32)
    assert _all_permutations(raw.view(torch.float32), "abc")


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (3, 0, 4, 5), (3, 4, 5, 0), (1, 1, 1, 1), (1, 6, 5, 4),
                                   (6, 1, 5, 4), (6, 5, 1, 4), (6, 5, 4, 1)])
def test_sizes_zero_and_one(shape, tiles_always):
    _all_permutations(_random(shape, torch.float32), "abcd")


def test_strided_offset_expanded_conjugate_and_negative_sources_are_exact(tiles_always):
    big = _random((7, 12, 5, 10), torch.float32)
    z = _random((6, 5, 4), torch.complex64)
    sources = [big[1, ::2, :, 2:6], big[0, :6, :, :8:2], _random((6, 1, 4), torch.float32).expand(6, 5, 4),
               _random((4, 5, 6), torch.float32).permute(2, 1, 0), _random((1, 6 * 5 * 4 + 3), torch.float32)[0, 3:]
               .view(6, 5, 4), z.conj(), torch._neg_view(z)]
    for x in sources:
        for dst in itertools.permutations("abc"):
            perm = ["abc".index(i) for i in dst]
            got = permuted_copy(list("abc"), list(dst), dict(a=6, b=5, c=4))(x)
            want = x.permute(perm).resolve_conj().resolve_neg().contiguous()
            assert torch.equal(got.resolve_conj().resolve_neg(), want), (dst, x.stride())


def test_gradients_and_forward_ad_see_the_plain_copy(tiles_always):
    fn = permuted_copy(list("abcd"), list("dcab"), dict(a=3, b=4, c=5, d=6))
    x = _random((3, 4, 5, 6), torch.float64).requires_grad_()
    y = fn(x)
    g = _random(y.shape, torch.float64, seed=1)
    y.backward(g)
    assert torch.equal(x.grad, g.permute(2, 3, 1, 0))
    assert torch.autograd.gradcheck(fn, (x.detach().clone().requires_grad_(),))
    import torch.autograd.forward_ad as fwAD
    t = _random((3, 4, 5, 6), torch.float64, seed=2)
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(fn(fwAD.make_dual(x.detach(), t))).tangent
    assert torch.equal(tangent, t.permute(3, 2, 0, 1))
    assert torch.equal(torch.func.vmap(fn)(torch.stack([x.detach(), t])), torch.stack([x.detach(), t])
                       .permute(0, 4, 3, 1, 2))


# ------------------------------------------------------------------------------ the plan

def test_no_tiles_where_the_loops_fit_or_nothing_is_transposed(monkeypatch):
    monkeypatch.setattr(pc, "TILE_BYTES", 0)
    assert tile_plan((64, 64, 64), (1, 4096, 64), 4) is False           # 4096 lines, 64 pages: fits
    assert tile_plan((64, 64, 64), (64, 4096, 1), 4) is False           # the unit stride stays innermost
    assert tile_plan((64, 64, 64), (2, 8192, 128), 4) is False          # no unit stride at all
    assert tile_plan((64, 64, 128), (1, 8192, 64), 4)                   # 8192 lines on 128 pages: tiles


def test_tensors_that_stay_in_l2_whole_are_not_tiled():
    shape, strides = (64, 64, 128), (1, 8192, 64)                       # 2 MiB of float32: tiles
    assert tile_plan(shape, strides, 4) and pc.TILE_BYTES == 1 << 21
    assert tile_plan(shape, strides, 2) is False                        # 1 MiB of float16: whole


def test_the_farthest_dimension_is_cut_first_and_the_tiles_are_few():
    # akbc,jk->cjba's result: (j, a, b, c) -> (c, j, b, a); j lies farthest apart in the source
    shape, strides = (48, 24, 40, 48), (1, 92160, 48, 1920)
    assert tile_plan(shape, strides, 4) == (1, 24, 1, 1)
    assert math.prod(shape) // math.prod(tile_plan(shape, strides, 4)) >= pc.TILE_LEAST
    # few elements: the tiles are capped at TILE_LEAST elements each
    ways = tile_plan((48, 24, 8, 48), (1, 18432, 48, 384), 4)
    assert ways is False or math.prod((48, 24, 8, 48)) // math.prod(ways) >= pc.TILE_LEAST


def test_the_innermost_dimension_is_cut_into_whole_rows_only():
    # (a, b, c) -> (b, c, a) with c = 4: the result's innermost a is 1024 pages apart
    ways = tile_plan((1024, 4, 1024), (4, 1, 4096), 4)
    assert ways and ways[2] > 1 and 1024 // ways[2] * 4 >= pc.TILE_ROW
    assert ways[0] == 1                                   # outside the unit stride: never cut


# ------------------------------------------------------------------------------ through einc

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_einc_results_through_the_tiles(dtype):
    """The suite's akbc,jk->cjba at full size copies its result in tiles, both calling
    conventions, and with a gradient taken (the plain copy)."""
    sizes = dict(a=48, b=40, c=48, j=24, k=48)
    a = _random([sizes[i] for i in "akbc"], dtype)
    b = _random([sizes[i] for i in "jk"], dtype, seed=1)
    got = einc.einsum("akbc,jk->cjba", a, b)
    ref = torch.einsum("akbc,jk->cjba", a.double(), b.double())
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    assert got.is_contiguous() and got.dtype == dtype
    assert torch.allclose(got.double(), ref, rtol=tol, atol=tol * float(ref.abs().max()))
    assert torch.equal(got, einc.einsum(a, [0, 1, 2, 3], b, [4, 1], [3, 4, 2, 0]))
    if dtype == torch.float64:
        a.requires_grad_()
        out = einc.einsum("akbc,jk->cjba", a, b)
        assert torch.equal(out.detach(), got)
        out.backward(torch.ones_like(out))
        assert torch.allclose(a.grad, torch.einsum("jk,cjba->akbc", b, torch.ones_like(ref)))


def test_the_result_is_on_the_sources_device_whatever_the_default(tiles_always):
    """The tiles' result is allocated beside the source, not on torch's default device."""
    x = _random((4, 6, 5, 3), torch.float32)
    fn = permuted_copy(list("abcd"), list("dcab"), dict(zip("abcd", x.shape)))
    with torch.device("meta"):
        got = fn(x)
    assert fn.plans[4][0][0] == "tiles" and got.device == x.device
    assert _same_bits(got, x.permute(3, 2, 0, 1).contiguous())
