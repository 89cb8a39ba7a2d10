"""runtime/torch_executor/permute_copy.py: a permuting copy equals ``x.permute(...).contiguous()`` bit for
bit, for every permutation, dtype, size (0 and 1, and on both sides of the wide copy's
thresholds), strided, expanded and offset sources, and through autograd; the wide copy is
taken exactly where the module says; einc's results through it match torch.einsum."""

import itertools
import math

import pytest
import torch

import einc
from einc.runtime.torch_executor import permute_copy as pc
from einc.runtime.torch_executor.permute_copy import MIN_BYTES, permuted_copy, wide_plan

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.int64,
          torch.int32, torch.int8, torch.bool]


def _random(shape, dtype, seed=0, bound=1000):
    """A tensor of every dtype, seeded: integers from [-bound, bound), uint8's from [0, bound)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0 if dtype == torch.uint8 else -bound, bound, shape, generator=g).to(dtype)


def _bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype and a.is_contiguous()
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(width), b.contiguous().view(width))


def _check(x, src, dst, sizes):
    """``permuted_copy`` on ``x`` (over ``src``) against the plain copy; returns the result
    (the identity is never asked for: the executor copies only what it permutes)."""
    if list(src) == list(dst):
        return None
    perm = [src.index(i) for i in dst]
    got = permuted_copy(src, dst, sizes)(x)
    want = x.permute(perm).contiguous()
    assert _bits_equal(got, want), (src, dst, x.shape, x.stride(), x.dtype)
    return got


@pytest.fixture
def wide_always(monkeypatch):
    """Every copy large enough for the wide path (the thresholds are tested on their own)."""
    monkeypatch.setattr(pc, "MIN_BYTES", 0)


# ------------------------------------------------------------------------------ exactness

@pytest.mark.parametrize("dtype", DTYPES)
def test_every_permutation_of_four_indices_is_exact(dtype, wide_always):
    sizes = dict(a=3, b=2, c=5, d=4)        # runs of 4, 5, 20, ... elements
    src = list("abcd")
    x = _random([sizes[i] for i in src], dtype)
    for dst in itertools.permutations(src):
        _check(x, src, list(dst), sizes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool, torch.complex64])
def test_every_permutation_with_short_runs_is_exact(dtype, wide_always):
    """Trailing sizes 1, 2, 4 and 8 give runs of 1 to 64 bytes (every wide case)."""
    for last in (1, 2, 4, 8, 16):
        sizes = dict(a=3, b=4, c=2, d=last)
        src = list("abcd")
        x = _random([sizes[i] for i in src], dtype, seed=last)
        for dst in itertools.permutations(src):
            _check(x, src, list(dst), sizes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_six_index_permutations_are_exact(dtype, wide_always):
    sizes = dict(a=2, b=3, c=2, d=2, e=3, f=4)
    src = list("adebcf")                     # the CCSD(T) result's layout before its copy
    x = _random([sizes[i] for i in src], dtype)
    for dst in itertools.permutations(src):
        _check(x, src, list(dst), sizes)


def test_nan_payloads_and_negative_zero_survive_the_wide_copy(wide_always):
    """The wide copy reinterprets the bits as int64 / complex128: a copy of them must not
    touch any (signalling NaNs with payloads, -0.0, subnormals)."""
    raw = torch.randint(-2**31, 2**31 - 1, (6, 5, 4), dtype=torch.int64).to(torch.int32)
    raw[0, 0, :] = torch.tensor([0x7F800001, 0x7FC00123, -0x80000000, 1], dtype=torch.int32)   # sNaN, qNaN, -0.0, tiny
    x = raw.view(torch.float32)
    for dst in itertools.permutations("abc"):
        _check(x, list("abc"), list(dst), dict(a=6, b=5, c=4))
    y = torch.randint(-2**15, 2**15 - 1, (6, 5, 8), dtype=torch.int32).to(torch.int16).view(torch.float16)
    for dst in itertools.permutations("abc"):
        _check(y, list("abc"), list(dst), dict(a=6, b=5, c=8))


@pytest.mark.parametrize("shape", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (1, 1, 1), (1, 3, 4), (3, 1, 4), (3, 4, 1)])
def test_sizes_zero_and_one(shape, wide_always):
    sizes = dict(zip("abc", shape))
    x = _random(shape, torch.float32)
    for dst in itertools.permutations("abc"):
        _check(x, list("abc"), list(dst), sizes)


def test_strided_offset_and_expanded_sources(wide_always):
    sizes = dict(a=6, b=5, c=4)
    big = _random((7, 12, 5, 10), torch.float32)
    sources = [
        big[1, ::2, :, 2:6],                          # strided, offset by 2 floats (16-byte aligned)
        big[1, ::2, :, 1:5],                          # offset by an odd number of floats: no wide view
        big[0, :6, :, :8:2],                          # unit stride nowhere
        _random((6, 1, 4), torch.float32).expand(6, 5, 4),     # stride 0
        _random((1, 5, 4), torch.float32).expand(6, 5, 4),
        _random((4, 5, 6), torch.float32).permute(2, 1, 0),    # transposed
        _random((6, 5, 8), torch.float32)[..., 1::2],
    ]
    for x in sources:
        assert x.shape == (6, 5, 4)
        for dst in itertools.permutations("abc"):
            _check(x, list("abc"), list(dst), sizes)


def test_conjugate_and_negative_views_keep_their_values(wide_always):
    """A lazy conjugate or negative bit is not lost to the bits' reinterpretation."""
    x = _random((6, 5, 2), torch.complex64)
    for view, value in ((x.conj(), x.resolve_conj().conj().resolve_conj()), (torch._neg_view(x), -x)):
        assert view.is_conj() or view.is_neg()
        for dst in itertools.permutations("abc"):
            perm = ["abc".index(i) for i in dst]
            got = permuted_copy(list("abc"), list(dst), dict(a=6, b=5, c=2))(view)
            assert torch.equal(got.resolve_conj().resolve_neg(), value.permute(perm)), dst


def test_gradients_flow_through_the_copy(wide_always):
    x = _random((6, 5, 4), torch.float64).requires_grad_()
    fn = permuted_copy(list("abc"), list("bac"), dict(a=6, b=5, c=4))
    y = fn(x)
    assert y.requires_grad
    g = torch.randn_like(y)
    y.backward(g)
    assert torch.equal(x.grad, g.permute(1, 0, 2))
    assert torch.autograd.gradcheck(fn, (x.detach().clone().requires_grad_(),))


def test_forward_ad_and_torch_func_see_the_plain_copy(wide_always):
    import torch.autograd.forward_ad as fwAD
    fn = permuted_copy(list("abc"), list("bac"), dict(a=6, b=5, c=4))
    x, t = _random((6, 5, 4), torch.float32), _random((6, 5, 4), torch.float32, seed=1)
    with fwAD.dual_level():
        out = fn(fwAD.make_dual(x, t))
        tangent = fwAD.unpack_dual(out).tangent
    assert tangent is not None and torch.equal(tangent, t.permute(1, 0, 2))
    _, jvp = torch.func.jvp(fn, (x,), (t,))
    assert torch.equal(jvp, t.permute(1, 0, 2))
    batched = torch.func.vmap(fn)(torch.stack([x, t]))
    assert torch.equal(batched, torch.stack([x, t]).permute(0, 2, 1, 3))


# ------------------------------------------------------------------------------ where the wide copy is taken

def test_wide_plan_takes_short_runs_only():
    shape = (16, 16, 8)
    for run, itemsize, want in [
        (2, 4, False),                  # 8 bytes: no int64 (not robust)
        (4, 4, torch.complex128),       # 16 bytes: one complex128
        (6, 4, False),                  # 24 bytes: three int64 lost to the plain copy
        (8, 4, torch.complex128),       # 32 bytes: two complex128
        (12, 4, torch.complex128),      # 48 bytes: three complex128, the most
        (16, 4, False),                 # 64 bytes: four, no gain
        (10, 4, False),                 # 40 bytes: five int64
        (3, 4, False),                  # 12 bytes: no wide element divides it
        (1, 4, False),                  # a transposing copy
        (8, 2, complex),                # float16 runs of 8: one complex128
        (8, 1, False),                  # bool runs of 8: no int64 either
        (16, 1, torch.complex128),      # bool runs of 16: one complex128
        (1, 16, False),                 # complex128 is as wide as it gets
        (2, 8, False),                  # float64 pairs: two per wide element, not taken
        (4, 2, False),                  # float16 runs of 4: 8 bytes
    ]:
        strides = (run, 16 * run, 1)        # (b, a, c) -> (a, b, c): the last index kept
        got = wide_plan(shape[:2] + (run,), strides, 0, itemsize)
        if want is complex:
            want = torch.complex128
        if want is False:
            assert got is False, (run, itemsize)
        else:
            assert got == (shape[:2] + (run,), want, 16 // itemsize), (run, itemsize, got)


def test_wide_plan_merges_the_run_over_several_indices_and_size_one_gaps():
    # dst (a, b, c, d) from src (b, a, c, d) with c=2, d=2 contiguous: a run of 4 floats
    assert wide_plan((5, 6, 2, 2), (4, 20, 2, 1), 0, 4) == ((5, 6, 4), torch.complex128, 4)
    assert wide_plan((5, 6, 1, 4), (4, 20, 99, 1), 0, 4) == ((5, 6, 4), torch.complex128, 4)
    assert wide_plan((6, 4), (4, 1), 0, 4) is False                       # contiguous: nothing to permute
    # an offset or a stride not a multiple of 4 floats: no complex128
    assert wide_plan((5, 6, 4), (4, 20, 1), 2, 4) is False
    assert wide_plan((5, 6, 4), (6, 20, 1), 0, 4) is False
    assert wide_plan((5, 6, 8), (8, 40, 1), 8, 2) == ((5, 6, 8), torch.complex128, 8)
    assert wide_plan((5, 6, 8), (8, 40, 1), 4, 2) is False


def test_the_thresholds_boundaries():
    """Exactly at MIN_BYTES the wide copy is taken, one element under it is not; every
    result is exact either way."""
    taken = []
    orig = pc.wide_plan

    def spy(*args):
        taken.append(args[3])
        return orig(*args)
    pc_wide_plan, pc.wide_plan = pc.wide_plan, spy
    try:
        for elems in (MIN_BYTES // 4, MIN_BYTES // 4 - 4):
            b = elems // (4 * 64)
            sizes = dict(a=64, b=b, c=4)
            x = _random((64, b, 4), torch.float32)
            taken.clear()
            got = permuted_copy(list("abc"), list("bac"), sizes)(x)
            assert torch.equal(got, x.permute(1, 0, 2).contiguous())
            assert bool(taken) == (64 * b * 4 * 4 >= MIN_BYTES), (elems, taken)
    finally:
        pc.wide_plan = pc_wide_plan


def test_a_large_short_run_copy_is_exact_and_wide():
    """At full size (no monkeypatching): the suite's CCSD(T) result layout, float32 and bfloat16."""
    sizes = dict(a=16, b=16, c=16, d=8, e=8, f=8)
    src, dst = list("adebcf"), list("abcdef")
    for dtype in (torch.float32, torch.bfloat16):
        x = _random([sizes[i] for i in src], dtype)
        perm = [src.index(i) for i in dst]
        plan = wide_plan(tuple(x.permute(perm).shape), x.permute(perm).stride(), 0, x.element_size())
        assert plan is not False
        _check(x, src, dst, sizes)


def _ops(fn, x):
    """The aten ops ``fn(x)`` runs, by name."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            names.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))
    names = []
    with Log():
        out = fn(x)
    return out, names


def test_a_block_swap_is_a_two_dimensional_transpose_only_where_its_rows_alias_in_cache():
    """The suite's ``ibnd,jbnd->ijbn`` result, ``(b, n, i, j) -> (i, j, b, n)`` of 32 x 8192
    float32, is copied as the 4-D permutation (torch's loop over 32 source lines per row
    beats the 2-D transpose); 96 or 256 rows a multiple of 4 KiB apart (all in one cache
    set) as a 2-D transpose; the same rows 8000 bytes apart keep the permutation; exact
    every way."""
    cases = [(dict(b=4, n=8, i=64, j=128), torch.float32, False),
             (dict(b=4, n=24, i=8, j=384), torch.float32, True),             # the suite's tucker: 96 x 3072
             (dict(b=4, n=64, i=8, j=128), torch.float32, True),
             (dict(b=4, n=64, i=8, j=250), torch.float32, False),
             (dict(b=4, n=64, i=8, j=64), torch.float64, True)]
    for sizes, dtype, take in cases:
        x = _random(list(sizes.values()), dtype)
        fn = permuted_copy(list("bnij"), list("ijbn"), sizes)
        got, ops = _ops(fn, x)
        assert ("t" in ops or "transpose" in ops) == take and ("permute" in ops) != take, (sizes, dtype, ops)
        assert _bits_equal(got, x.permute(2, 3, 0, 1).contiguous())
    sizes = dict(b=4, n=64, i=8, j=128)                                   # strided, expanded, offset sources
    fn = permuted_copy(list("bnij"), list("ijbn"), sizes)
    strided = _random((4, 64, 8, 256), torch.float32)[..., 1:129]
    expanded = _random((1, 64, 8, 128), torch.float32).expand(4, -1, -1, -1)
    offset = _random((4 * 64 * 8 * 128 + 3,), torch.float32)[3:].view(4, 64, 8, 128)
    for x in (strided, expanded, offset):
        got, ops = _ops(fn, x)
        assert ("t" in ops or "transpose" in ops) and _bits_equal(got, x.permute(2, 3, 0, 1).contiguous())
    grad = _random((4, 64, 8, 128), torch.float64).requires_grad_()      # tracked: the transpose too
    got, ops = _ops(permuted_copy(list("bnij"), list("ijbn"), dict(b=4, n=64, i=8, j=128)), grad)
    assert "t" in ops or "transpose" in ops
    got.backward(torch.ones_like(got))
    assert torch.equal(grad.grad, torch.ones_like(grad))


def test_transposes_thresholds():
    assert pc.transposes(96, 2048, 4) and not pc.transposes(95, 2048, 4)         # rows 8 KiB apart: 96 float32
    assert pc.transposes(128, 1024, 8) and not pc.transposes(127, 1024, 8)       # ... 128 float64
    assert pc.transposes(192, 256, 16) and not pc.transposes(191, 256, 16)      # ... 192 complex128
    assert not pc.transposes(32, 8192, 4)                                        # the suite's txl
    assert pc.transposes(512, 32, 16) and not pc.transposes(512, 31, 16)         # cols at least 32
    assert pc.transposes(512, 384, 4) and not pc.transposes(256, 384, 4)         # 1536 bytes apart: 8 sets
    assert not pc.transposes(2048, 2000, 4)                                      # 8000 bytes apart: 64 sets
    assert not pc.transposes(4096, 248, 4) and pc.transposes(8192, 248, 4)       # 992 bytes apart: period 128
    assert pc.transposes(128, 256, 8) and not pc.transposes(128, 256, 4)         # 128 KiB: under MIN_BYTES


def test_a_wide_block_swap_is_a_two_dimensional_transpose_of_complex128(wide_always):
    """Runs of one complex128 whose other indices swap two blocks (pykeen's NTN result
    ``(c, b, d) -> (b, c, d)``, ``d`` of 4 float32) copy as a 2-D transpose of complex128,
    exact; runs of two complex128, blocks shorter than TRANSPOSE_MIN, and permutations of
    the other indices that are not a block swap keep the 3-D wide copy."""
    sizes = dict(b=256, c=500, d=4)
    fn = permuted_copy(list("cbd"), list("bcd"), sizes)
    assert fn.plan(4)[0][-1] == (500, 256)
    _check(_random((500, 256, 4), torch.float32), list("cbd"), list("bcd"), sizes)
    assert permuted_copy(list("cbd"), list("bcd"), dict(b=250, c=500, d=4)).plan(4)[0][-1] is None   # 4000 B apart
    assert permuted_copy(list("cbd"), list("bcd"), dict(b=256, c=64, d=4)).plan(4)[0][-1] is None    # 64 rows
    sizes = dict(a=4, b=64, c=64, d=4)                      # (a, b, c, d) -> (c, a, b, d): blocks ab and c
    assert permuted_copy(list("abcd"), list("cabd"), sizes).plan(4)[0][-1] == (256, 64)
    assert permuted_copy(list("abcd"), list("cbad"), sizes).plan(4)[0][-1] is None     # no block swap
    _check(_random((4, 64, 64, 4), torch.float32), list("abcd"), list("cabd"), sizes)
    _check(_random((4, 64, 64, 4), torch.float32), list("abcd"), list("cbad"), sizes)
    sizes = dict(c=512, b=31, d=4, e=1)                     # a block of 31, and a size-1 index between
    assert permuted_copy(list("cebd"), list("bced"), sizes).plan(4)[0][-1] is None
    assert permuted_copy(list("cebd"), list("bced"), dict(sizes, b=32)).plan(4)[0][-1] == (512, 32)
    _check(_random((512, 1, 32, 4), torch.float32), list("cebd"), list("bced"), dict(sizes, b=32))
    sizes = dict(b=256, c=500, d=8)                         # runs of two complex128
    assert permuted_copy(list("cbd"), list("bcd"), sizes).plan(4)[0][-1] is None


def test_a_wide_block_swap_from_an_offset_source_takes_the_plain_copy(wide_always):
    sizes = dict(b=64, c=300, d=4)
    flat = _random((64 * 300 * 4 + 1,), torch.float32)
    x = flat[1:].view(300, 64, 4)                           # offset by one float32: no complex128 view
    _check(x, list("cbd"), list("bcd"), sizes)


# ------------------------------------------------------------------------------ through einc

@pytest.mark.parametrize("eq", ["dega,gfbc->abcdef", "degb,gfac->abcdef", "dfgb,geac->abcdef"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_einc_results_through_the_wide_copy(eq, dtype):
    """The CCSD(T) terms at full size copy their result as complex128 elements."""
    sizes = dict(a=16, b=16, c=16, d=8, e=8, f=8, g=16)
    ins, out = eq.split("->")
    ops = [_random([sizes[i] for i in t], dtype, seed=k) for k, t in enumerate(ins.split(","))]
    got = einc.einsum(eq, *ops)
    ref = torch.einsum(eq, *[o.double() for o in ops])
    assert got.is_contiguous() and got.dtype == dtype and got.shape == ref.shape
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert torch.allclose(got.double(), ref, rtol=tol, atol=tol * float(ref.abs().max()))
    num = {c: k for k, c in enumerate("abcdefg")}
    ta, tb = ins.split(",")
    got2 = einc.einsum(ops[0], [num[c] for c in ta], ops[1], [num[c] for c in tb], [num[c] for c in out])
    assert torch.equal(got, got2)


def test_einc_gradient_through_a_large_permuted_result():
    sizes = dict(a=16, b=16, c=16, d=8, e=8, f=8, g=16)
    a = _random([sizes[i] for i in "dega"], torch.float32).requires_grad_()
    b = _random([sizes[i] for i in "gfbc"], torch.float32, seed=1).requires_grad_()
    out = einc.einsum("dega,gfbc->abcdef", a, b)
    g = _random(out.shape, torch.float32, seed=2)
    out.backward(g)
    a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    torch.einsum("dega,gfbc->abcdef", a2, b2).backward(g.double())
    assert torch.allclose(a.grad.double(), a2.grad, rtol=1e-4, atol=1e-3)
    assert torch.allclose(b.grad.double(), b2.grad, rtol=1e-4, atol=1e-3)
    assert math.isclose(float(out.sum()), float(torch.einsum("dega,gfbc->abcdef", a2, b2).sum()), rel_tol=1e-3,
                        abs_tol=1.0)
