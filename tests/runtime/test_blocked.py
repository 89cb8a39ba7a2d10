"""Few outputs of long sums (runtime/torch_executor/blocked.py): a batch of matrix products
over blocks of the sum, the partial sums added by ``sum``: as accurate as torch's cascade
sum, the same bits with and without autograd and under transforms, per shape and in a
size class; 16-bit floats one matrix product."""

import math
import os
from types import SimpleNamespace

import fuzz
import pytest
import torch
from hypothesis import assume, event, given, note
from hypothesis import strategies as st

import einc
from einc.runtime.torch_executor import blocked, summed

from .test_chunked import _differential


def test_blocks_sum_about_a_thousand_terms_outer_indices_whole_first():
    # 64 x 64 x 64 summed: the outer index whole leaves 4096, the next cut in 4: 1024 a block
    assert blocked.sum_blocks([0, 1, 2, 3], {0, 1, 2}, (64, 64, 64, 8)) == ((0,), (1, 4))
    # einops' 40 x 41 x 42: the outer index whole, 1722 a block (41 is prime; whole it would leave 42)
    assert blocked.sum_blocks([0, 1, 2, 3], {0, 1, 2}, (40, 41, 42, 4)) == ((0,), None)
    # one index of 2**20: cut into 1024 blocks of 1024
    assert blocked.sum_blocks([0, 1], {0}, (1 << 20, 2)) == ((), (0, 1024))
    # the outermost index in the operand's memory order is taken whole, not the first label
    assert blocked.sum_blocks([1, 0, 2], {0, 1}, (512, 1024, 16)) == ((), (1, 512))
    assert blocked.sum_blocks([0, 1, 2], {0, 1}, (512, 1024, 16)) == ((0,), None)
    # no block of 256 to 2048 terms: a prime size; a size class takes whole indices only
    assert blocked.sum_blocks([0, 1], {0}, (4099, 2)) is None
    assert blocked.sum_blocks([0, 1], {0}, (1 << 20, 2), split=False) is None
    assert blocked.sum_blocks([0, 1, 2, 3], {0, 1, 2}, (48, 48, 48, 4), split=False) is None
    assert blocked.sum_blocks([0, 1, 2, 3], {0, 1, 2}, (48, 48, 48, 4), split=False, longest=4096) == ((0,), None)
    for sizes in [(64, 64, 64, 8), (40, 41, 42, 4), (1 << 20, 2), (3000, 700, 5), (7, 4096, 1)]:
        whole, part = blocked.sum_blocks(range(len(sizes)), set(range(len(sizes) - 1)), sizes)
        blocks = (part[1] if part else 1) * int(torch.tensor([sizes[i] for i in whole]).prod())
        terms = int(torch.tensor(sizes[:-1]).prod()) // blocks
        assert blocked.SHORTEST <= terms <= blocked.LONGEST


def _operands(case, dtype, seed=0):
    """The operands of ``case`` (positive: errors relative to the exact sum), one transposed
    or broadcast where the case says so."""
    eq, shapes, how = case
    g = torch.Generator().manual_seed(seed)
    wide = torch.complex128 if dtype.is_complex else torch.float64
    ops = [torch.rand(s, generator=g, dtype=wide).to(dtype) for s in shapes]
    if how == "permuted":       # the second operand stored in the reverse order
        ops[1] = ops[1].permute(*reversed(range(ops[1].dim()))).contiguous().permute(*reversed(range(ops[1].dim())))
    elif how == "broadcast":    # the first operand's middle dimension expanded (stride 0)
        ops[0] = ops[0][:, :1].expand(shapes[0])
    return ops


CASES = [
    ("abc,abcd->d", [(40, 41, 42), (40, 41, 42, 4)], "contiguous"),      # einops' case: a size class's
    ("abc,abcd->d", [(33, 50, 60), (33, 50, 60, 4)], "contiguous"),      # another shape of that class
    ("abc,abcd->d", [(64, 64, 64), (64, 64, 64, 8)], "permuted"),
    ("abc,abcd->d", [(64, 64, 64), (64, 64, 64, 3)], "broadcast"),
    ("k,kn->n", [(1 << 17,), (1 << 17, 2)], "contiguous"),               # one index, cut
    ("nk,k->n", [(5, 1 << 16), (1 << 16,)], "contiguous"),               # the innermost index cut
    ("bk,bkn->bn", [(3, 8192), (3, 8192, 4)], "contiguous"),             # kept batch
]


def _ops(fn):
    """The names of the aten ops ``fn()`` runs."""
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = set()

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))
    with Log():
        fn()
    return seen


@pytest.fixture
def cut(monkeypatch):
    """The blocks the steps planned since the fixture began took (``sum_blocks``'s answers)."""
    seen = []
    sum_blocks = blocked.sum_blocks
    monkeypatch.setattr(blocked, "sum_blocks", lambda *a, **k: seen.append(sum_blocks(*a, **k)) or seen[-1])
    return seen


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[2]}-{c[1][0]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex128], ids=str)
def test_few_long_sums_run_over_blocks_as_accurate_as_a_cascade_sum(case, dtype, new_shapes, cut):
    eq = case[0]
    ops = _operands(case, dtype)
    out = einc.einsum(eq, *ops)
    blocks = bool(cut) and cut[0] is not None
    # a batch of matrix products, not the elementwise product (multiply and sum, unblocked)
    assert ("mul" not in _ops(lambda: einc.einsum(eq, *ops))) == blocks
    ins, kept = eq.split("->")
    summed_ = sorted(set(ins) - set(kept) - {","})
    # a size class cuts whole indices only: one summed index (k) is summed by multiply and sum
    assert cut and all((c is not None) == (new_shapes == "plan" or len(summed_) > 1) for c in cut)
    wide = [o.to(torch.complex128 if dtype.is_complex else torch.float64) for o in ops]
    # the exact sums, near enough: float64 products added by torch's cascade sum
    exact = torch.einsum(f"{ins}->{kept}{''.join(summed_)}", *wide).flatten(len(kept)).sum(-1)
    err = lambda x: float(((x.to(exact.dtype) - exact).abs() / exact.abs()).max())   # noqa: E731
    # a matrix product's one running sum over the whole of K errs 10 to 100 times more
    # (torch.einsum's here: 2e-6 to 2e-5 in float32); blocks of about 1000 terms, a few ulps
    eps = torch.finfo(dtype if not dtype.is_complex else torch.float64).eps
    assert err(out) <= 8 * eps


@pytest.mark.parametrize("case", CASES[:1] + CASES[4:], ids=lambda c: c[0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128], ids=str)
def test_blocks_give_the_untracked_bits_where_a_gradient_is_taken(case, dtype, new_shapes, cut, applied):
    """The blocks forward, the multiply and sum's backward (``summed.Summed``)."""
    count = applied(summed.Summed)
    eq = case[0]
    ops = _operands(case, dtype)
    with torch.no_grad():
        plain = einc.einsum(eq, *ops)
    ops = [o.requires_grad_() for o in ops]
    out = einc.einsum(eq, *ops)
    # (a size class's one summed index: multiply and sum, which autograd records as it runs)
    assert cut[0] is not None or (new_shapes == "class" and eq != "abc,abcd->d")
    assert torch.equal(out.detach(), plain) and count() == (cut[0] is not None)
    w = torch.rand(out.shape, dtype=dtype)
    got = torch.autograd.grad(out, ops, w)
    wide = torch.complex128 if dtype.is_complex else torch.float64
    leaves = [o.detach().to(wide).requires_grad_() for o in ops]
    want = torch.autograd.grad(torch.einsum(eq, *leaves), leaves, w.to(wide))
    for g_, e in zip(got, want):
        assert g_.dtype == dtype
        torch.testing.assert_close(g_.to(wide), e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("way", ["vjp", "jvp", "make_fx fake", "functionalize"])
def test_blocks_give_the_plain_bits_under_transforms_and_tracing(way, new_shapes):
    from torch.func import functionalize, jvp, vjp
    from torch.fx.experimental.proxy_tensor import make_fx
    eq = "abc,abcd->d"
    a, b = _operands((eq, [(40, 41, 42), (40, 41, 42, 4)], "contiguous"), torch.float32)
    plain = einc.einsum(eq, a, b)
    f = lambda x, y: einc.einsum(eq, x, y)      # noqa: E731
    if way == "vjp":
        out = vjp(f, a, b)[0]
    elif way == "jvp":
        out = jvp(f, (a, b), (torch.ones_like(a), torch.zeros_like(b)))[0]
    elif way == "functionalize":
        out = functionalize(f)(a, b)
    else:
        graph = make_fx(f, tracing_mode="fake")(a, b)
        out = graph(a, b)
    assert torch.equal(out, plain)


@pytest.mark.parametrize("case", CASES[:1] + CASES[4:], ids=lambda c: c[0])
@pytest.mark.parametrize("dtype", summed.HALF, ids=str)
def test_16_bit_few_long_sums_are_one_matrix_product_trained_as_a_sum(case, dtype, new_shapes, cut, applied):
    """Forward one matrix product, rounded once; where a gradient is taken, the same product
    inside ``summed.Summed``, whose backward multiplies in float32."""
    count = applied(summed.Summed)
    eq = case[0]
    ops = _operands(case, dtype)
    out = einc.einsum(eq, *ops)
    assert not cut and count() == 0
    ran = _ops(lambda: einc.einsum(eq, *ops))
    assert ran & {"mm", "bmm"} and "mul" not in ran
    exact = torch.einsum(eq, *[o.double() for o in ops])
    # the float32 running sum errs far below a 16-bit rounding: at most one unit of the last place
    assert bool(((out.double() - exact).abs() <= torch.finfo(dtype).eps * exact.abs()).all())
    ops = [o.requires_grad_() for o in ops]
    tracked = einc.einsum(eq, *ops)
    assert torch.equal(tracked.detach(), out) and count() == 1
    w = torch.rand(out.shape, dtype=torch.float64)
    got = torch.autograd.grad(tracked, ops, w.to(dtype))
    leaves = [o.detach().double().requires_grad_() for o in ops]
    want = torch.autograd.grad(torch.einsum(eq, *leaves), leaves, w)
    for g_, e in zip(got, want):
        assert g_.dtype == dtype
        torch.testing.assert_close(g_.double(), e, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("way", ["sublists", "out=", "layout any", "patched torch.einsum", "jit.trace",
                                 "make_fx symbolic", "torch.compile"])
def test_few_long_sums_give_the_eager_bits_however_reached(way, dtype, new_shapes, monkeypatch):
    eq = "abc,abcd->d"
    a, b = _operands((eq, [(40, 41, 42), (40, 41, 42, 4)], "permuted"), dtype)
    eager = einc.einsum(eq, a, b)
    f = lambda x, y: einc.einsum(eq, x, y)      # noqa: E731
    if way == "sublists":
        out = einc.einsum(a, [0, 1, 2], b, [0, 1, 2, 3], [3])
    elif way == "out=":
        out = torch.empty(4, dtype=dtype)
        einc.einsum(eq, a, b, out=out)
    elif way == "layout any":
        out = einc.einsum(eq, a, b, layout="any")
    elif way == "patched torch.einsum":
        monkeypatch.setattr(torch, "einsum", einc.einsum)
        out = torch.einsum(eq, a, b)
    elif way == "jit.trace":
        out = torch.jit.trace(f, (a, b))(a, b)
    elif way == "make_fx symbolic":
        from torch.fx.experimental.proxy_tensor import make_fx
        out = make_fx(f, tracing_mode="symbolic")(a, b)(a, b)
    else:
        torch._dynamo.reset()
        out = torch.compile(f, fullgraph=True, backend="eager")(a, b)
        torch._dynamo.reset()
    assert torch.equal(out, eager)


@st.composite
def few_long_sums(draw):
    """``(equation, shapes, summed extent)``: batch indices both operands hold (kept), each
    operand's own kept indices (16 outputs at most), shared summed indices of 4096 to 2**17
    terms (a prime size among them at times), a summed index the first holds alone; every
    term and the output in a drawn order."""
    names = iter("abcdefghijkl")
    sizes = {}

    def index(choices):
        c = next(names)
        sizes[c] = draw(st.sampled_from(choices))
        return c
    batch = [index((1, 2, 3)) for _ in range(draw(st.integers(0, 2)))]
    own_a = [index((1, 2, 3, 4)) for _ in range(draw(st.integers(0, 2)))]
    own_b = [index((1, 2, 3, 4)) for _ in range(draw(st.integers(0, 1)))]
    shared = [index((2, 3, 7, 16, 17, 31, 64, 96, 128, 512, 4099)) for _ in range(draw(st.integers(1, 3)))]
    alone = [index((1, 2, 3)) for _ in range(draw(st.integers(0, 1)))]
    terms = math.prod(sizes[c] for c in shared)
    outputs = math.prod(sizes[c] for c in own_a + own_b)
    assume(4096 <= terms <= 1 << 17 and outputs <= 16)
    assume(terms * max(outputs, 1) * math.prod(sizes[c] for c in batch + alone) <= 1 << 19)
    a = draw(st.permutations(batch + own_a + shared + alone))
    b = draw(st.permutations(batch + own_b + shared))
    out = draw(st.permutations(batch + own_a + own_b))
    extent = terms * math.prod(sizes[c] for c in alone)
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}", [[sizes[c] for c in a], [sizes[c] for c in b]], extent


@fuzz.profile(quick=40, share=0.01)
@given(case=few_long_sums(), dtype=st.sampled_from(fuzz.ALL_DTYPES), layouts=st.lists(
    st.sampled_from(fuzz.LAYOUTS), min_size=2, max_size=2), new_shapes=st.sampled_from(["plan", "class"]),
    seed=st.integers(0, 99))
def test_few_long_sums_match_torch_einsum(case, dtype, layouts, new_shapes, seed):
    """Drawn few outputs of long sums in every dtype and layout, per shape and in a size
    class: torch.einsum's answer on float64 copies, inputs untouched, the same bits under
    ``torch.func.vjp`` (tests/runtime/test_chunked.py's differential check)."""
    eq, shapes, extent = case
    values = fuzz.values(SimpleNamespace(shapes=shapes, dtype=dtype), seed)
    ops = [fuzz.lay_out(t, lay) for t, lay in zip(values, layouts)]
    note(f"{eq} {shapes} {dtype} {layouts} {new_shapes}")
    before, sum_blocks, cuts = os.environ.get("EINC_NEW_SHAPES"), blocked.sum_blocks, []
    os.environ["EINC_NEW_SHAPES"] = new_shapes
    blocked.sum_blocks = lambda *a, **k: cuts.append(sum_blocks(*a, **k)) or cuts[-1]
    einc.cache_clear()
    try:
        if _differential(eq, ops, extent):
            event("blocks" if any(cuts) else "no blocks")
    finally:
        blocked.sum_blocks = sum_blocks
        os.environ.pop("EINC_NEW_SHAPES") if before is None else os.environ.__setitem__("EINC_NEW_SHAPES", before)
        einc.cache_clear()


@pytest.mark.parametrize("eq,shapes", [
    ("k,kn->n", [(1,), (65536, 2)]), ("abc,abcd->d", [(40, 1, 42), (40, 41, 42, 4)]),
    ("abc,abcd->d", [(40, 41, 42), (1, 41, 42, 4)]), ("abc,abcd->d", [(1, 1, 1), (40, 41, 42, 4)]),
    ("bk,bkn->bn", [(1, 8192), (3, 8192, 4)]), ("bk,bkn->bn", [(3, 1), (3, 8192, 4)])])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_few_long_sums_with_size_one_operand_dimensions_broadcast(eq, shapes, dtype, new_shapes):
    """A summed or batch index of size 1 in one operand, broadcast against the other's."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.rand(s, generator=g).to(dtype) for s in shapes)
    out = einc.einsum(eq, a, b)
    want = torch.einsum(eq, a.double(), b.double())
    assert out.dtype == dtype and out.shape == want.shape
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=0)
