"""Looped layouts (runtime/torch_executor/looped.py): one product per value of the result's
first index gives the same bits whether or not autograd records the call -- the same
products run either way, each output starting at a multiple of ``ttgt.SLAB_ALIGN``
bytes, as a fresh tensor does -- and its gradients, second derivatives and forward-mode
derivatives are torch.einsum's."""

import math

import pytest
import torch
from autograd_graph import grad_fns
from torch.utils._python_dispatch import TorchDispatchMode

import einc
import einc.runtime.torch_executor as tx
from einc.runtime.torch_executor import backward, training_layout, ttgt

EQ = "bhij,bhjk->bhik"
# (b, h, i, j, k) of A (b, 1, i, j) and B (1, h, j, k), size-1 dimensions one each way: the
# case of the module's docstring, at odd sizes and at sizes where BLAS blocks differently
SHAPES = {
    torch.float32: [(2, 3, 129, 16, 130), (3, 12, 64, 31, 64), (8, 12, 33, 16, 130), (2, 3, 257, 257, 64),
                    (8, 3, 257, 31, 130), (3, 12, 129, 257, 130)],
    torch.float64: [(2, 3, 64, 31, 130), (2, 12, 257, 16, 9), (3, 12, 33, 31, 130), (8, 3, 129, 257, 64),
                    (3, 3, 257, 257, 130), (8, 12, 64, 16, 64)],
    torch.bfloat16: [(2, 12, 64, 31, 130), (3, 3, 257, 16, 130), (2, 12, 129, 257, 64), (8, 12, 257, 31, 130),
                     (3, 12, 129, 16, 64)],
}
TOLERANCE = {torch.float32: {"atol": 1e-4, "rtol": 1e-4}, torch.float64: {},
             torch.bfloat16: {"atol": 0.1, "rtol": 0.02}}
CASES = [(dtype, shape) for dtype, shapes in SHAPES.items() for shape in shapes]


pytestmark = pytest.mark.usefixtures("cleared_caches")


@pytest.fixture
def loops(monkeypatch):
    """How many looped steps were built (the torch executor's ``looped`` wrapped)."""
    built = []

    def counted(*args, **kwargs):
        built.append(args[0])
        return made(*args, **kwargs)
    made = tx.looped
    monkeypatch.setattr(tx, "looped", counted)
    return built


def _operands(dtype, shape, seed=0):
    b, h, i, j, k = shape
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in ((b, 1, i, j), (1, h, j, k))]


class _Products(TorchDispatchMode):
    """The matrix products run below autograd: op name less its overload, shapes, strides."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm):
            self.seen.append((str(func._overloadpacket), [(tuple(a.shape), a.stride()) for a in args[:2]]))
        return func(*args, **(kwargs or {}))


def _aligned(dtype, shape):
    """Whether each slab ``(h, i, k)`` of ``EQ``'s result starts at a multiple of ``SLAB_ALIGN`` bytes."""
    _, h, i, _, k = shape
    return h * i * k * dtype.itemsize % ttgt.SLAB_ALIGN == 0


@pytest.mark.parametrize(("dtype", "shape"), CASES, ids=str)
def test_a_looped_step_gives_the_same_bits_with_and_without_autograd(dtype, shape, loops):
    """Where a slab would start off ``SLAB_ALIGN`` bytes no loop runs (the step is then
    one product, whose training layout ``training_layout.for_training`` may choose otherwise)."""
    ops = _operands(dtype, shape)
    plain = einc.einsum(EQ, *ops)
    recorded = einc.einsum(EQ, *[o.clone().requires_grad_() for o in ops])
    assert recorded.requires_grad and recorded.shape == plain.shape
    if _aligned(dtype, shape):
        assert len(loops) == 1 and loops[0].outer == (0,), "the sweep's aligned shapes take the looped layout"
        assert torch.equal(recorded.detach(), plain)
        assert torch.equal(einc.einsum(EQ, ops[0].clone().requires_grad_(), ops[1]).detach(), plain)
    else:
        assert loops == []
        torch.testing.assert_close(recorded.detach(), plain, **TOLERANCE[dtype])
    want = torch.einsum(EQ, *[o.double() for o in ops])
    torch.testing.assert_close(plain.double(), want, **TOLERANCE[dtype])


def test_autograd_records_the_same_products_as_a_plain_call(loops):
    """Under autograd the step runs one product per value of ``b``, each of the shapes and
    strides the plain call writes into its slab of the result with ``out=``."""
    ops = _operands(torch.float32, (8, 12, 64, 16, 64))
    assert _aligned(torch.float32, (8, 12, 64, 16, 64))
    with _Products() as plain:
        einc.einsum(EQ, *ops)
    with _Products() as recorded:
        einc.einsum(EQ, *[o.clone().requires_grad_() for o in ops])
    assert loops and len(plain.seen) == 8
    assert recorded.seen == plain.seen


def _assert_torch_s_derivatives(out, ops, seed):
    """``out`` (einc's ``EQ`` of the float64 leaves ``ops``) has torch.einsum's gradients and
    second derivatives for a random upstream gradient drawn from ``seed``."""
    gout = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    got = torch.autograd.grad(out, ops, gout, create_graph=True)
    want = torch.autograd.grad(torch.einsum(EQ, *ops), ops, gout, create_graph=True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    second = torch.autograd.grad(sum((g * g).sum() for g in got), ops)
    for a, b in zip(second, torch.autograd.grad(sum((g * g).sum() for g in want), ops)):
        torch.testing.assert_close(a, b)


def test_a_looped_step_s_derivatives_are_torch_s(loops):
    """Gradients, second derivatives and forward-mode derivatives through the looped
    products (``unbind`` and ``stack`` record them) agree with torch.einsum's."""
    ops = [o.requires_grad_() for o in _operands(torch.float64, (3, 12, 64, 31, 64), seed=1)]
    _assert_torch_s_derivatives(einc.einsum(EQ, *ops), ops, seed=2)
    assert loops
    tangents = tuple(torch.randn(o.shape, dtype=torch.float64) for o in ops)
    primals = tuple(o.detach() for o in ops)
    _, jvp = torch.func.jvp(lambda a, b: einc.einsum(EQ, a, b), primals, tangents)
    _, want = torch.func.jvp(lambda a, b: torch.einsum(EQ, a, b), primals, tangents)
    torch.testing.assert_close(jvp, want)


@pytest.mark.parametrize("mode", ["real", "fake", "symbolic"])
def test_a_traced_looped_step_gives_the_eager_bits(mode, loops):
    """``make_fx`` (fake tensors record the step: the stacked products) gives the bits of
    the eager call, which writes each product into its slab."""
    from torch.fx.experimental.proxy_tensor import make_fx
    ops = _operands(torch.float32, (8, 12, 64, 16, 64), seed=3)
    eager = einc.einsum(EQ, *ops)
    assert loops
    graph = make_fx(lambda a, b: einc.einsum(EQ, a, b), tracing_mode=mode)(*ops)
    assert torch.equal(graph(*ops), eager)


# No loop over a batch index: ``bhqk,bkhd->bqhd`` (attention's values, B and the result laid
# out (b, s, h, d)) per ``b`` would write each product's ``(h, q, d)`` into a slab ``(q, h, d)``
# through a view, an output laid out and aligned otherwise than the stacked products' (the
# bits of a float64 case here differed on an MKL); one batched product runs instead.
VALUES = "bhqk,bkhd->bqhd"
VALUE_CASES = [(torch.float32, (4, 8, 128, 128, 64)), (torch.float32, (2, 12, 64, 100, 16)),
               (torch.float64, (2, 4, 100, 33, 64)), (torch.float64, (3, 5, 33, 130, 17)),
               (torch.float32, (4, 8, 256, 256, 2)), (torch.float64, (3, 2, 257, 64, 20)),
               (torch.bfloat16, (4, 8, 128, 128, 64)), (torch.complex64, (3, 5, 65, 130, 33)),
               (torch.complex64, (2, 3, 129, 64, 48))]


def _values(dtype, shape, seed=0):
    b, h, q, k, d = shape
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in ((b, h, q, k), (b, k, h, d))]


@pytest.mark.parametrize(("dtype", "shape"), VALUE_CASES, ids=str)
def test_a_batch_index_is_never_looped_over(dtype, shape, loops):
    ops = _values(dtype, shape)
    plain = einc.einsum(VALUES, *ops)
    assert loops == [] and plain.is_contiguous()
    recorded = einc.einsum(VALUES, *[o.clone().requires_grad_() for o in ops])
    assert torch.equal(recorded.detach(), plain)
    want = torch.einsum(VALUES, *[o.to(torch.complex128 if o.is_complex() else torch.float64) for o in ops])
    tolerance = TOLERANCE.get(dtype, {"atol": 1e-4, "rtol": 1e-4})
    torch.testing.assert_close(plain.to(want.dtype), want, **tolerance)


def test_a_step_with_a_batch_index_first_gives_the_eager_bits_traced_and_recorded():
    """Under ``make_fx`` the eager call's bits; under autograd torch.einsum's derivatives."""
    from torch.fx.experimental.proxy_tensor import make_fx
    ops = _values(torch.float32, (4, 8, 128, 128, 64), seed=4)
    eager = einc.einsum(VALUES, *ops)
    for mode in ("real", "fake"):
        assert torch.equal(make_fx(lambda a, b: einc.einsum(VALUES, a, b), tracing_mode=mode)(*ops)(*ops), eager)
    wide = [o.double().requires_grad_() for o in _values(torch.float64, (3, 5, 33, 130, 17), seed=5)]
    gout = torch.randn(torch.einsum(VALUES, *wide).shape, dtype=torch.float64)
    got = torch.autograd.grad(einc.einsum(VALUES, *wide), wide, gout)
    for a, b in zip(got, torch.autograd.grad(torch.einsum(VALUES, *wide), wide, gout)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("sizes", "itemsize", "expected"), [
    (dict(b=8, h=12, i=64, j=32, k=64), 4, "b"),        # slabs of 192 KiB
    (dict(b=8, h=12, i=64, j=32, k=64), 8, "b"),
    (dict(b=8, h=3, i=33, j=32, k=65), 4, None),        # 3 * 33 * 65 * 4 bytes: 12 past a multiple of 64
    (dict(b=8, h=3, i=33, j=32, k=65), 8, None),        # 24 past
    (dict(b=8, h=3, i=32, j=32, k=65), 2, "b"),         # 3 * 32 * 65 * 2 bytes = 195 * 64
    (dict(b=8, h=3, i=32, j=32, k=65), 1, None),
])
def test_a_loop_s_slabs_start_at_multiples_of_slab_align_bytes(sizes, itemsize, expected):
    got = ttgt._looped_over(tuple("bij"), tuple("hjk"), tuple("bhik"), sizes, None, itemsize)
    assert got == expected


def test_a_looped_step_builds_no_single_product(loops, monkeypatch):
    """A looped step runs its own products, recorded or not: building it makes no step of
    one product (the layout that would run it is not chosen), nor does a gradient where the
    products recorded one by one train for less (``training_layout.for_looped``)."""
    made, real = [], tx._matmul
    monkeypatch.setattr(tx, "_matmul", lambda *a: made.append(a) or real(*a))
    monkeypatch.setattr(backward, "RECORDED", math.inf)
    a, b = _operands(torch.float64, SHAPES[torch.float64][0])
    out = einc.einsum(EQ, a, b)
    assert loops and not made
    torch.testing.assert_close(out, torch.einsum(EQ, a, b), rtol=1e-12, atol=1e-12)
    a, b = (x.requires_grad_() for x in (a, b))
    out = einc.einsum(EQ, a, b)
    assert not made
    for x, y in zip(torch.autograd.grad(out.sum(), (a, b)), torch.autograd.grad(torch.einsum(EQ, a, b).sum(), (a, b))):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_a_looped_step_trains_as_one_product_where_that_costs_less(loops, monkeypatch):
    """Recorded one by one, the looped products of ``EQ`` at the suite's ``bcast_cross_batch``
    sizes each make a backward and partial gradients of both operands (``A`` over ``h`` inside
    each product, ``B`` once per value of ``b``); ``training_layout.for_looped`` weighs that
    against the step's one-product layout, which the first call that takes a gradient then
    trains as ``recorded.Recorded`` behind the same looped products: the plain call's bits,
    torch.einsum's first and second derivatives.  Weighed once, on that call."""
    weighed, real = [], training_layout.for_looped
    monkeypatch.setattr(training_layout, "for_looped", lambda lay, *a, **k: weighed.append((lay, real(lay, *a, **k)))
                        or weighed[-1][1])
    for dtype in (torch.float32, torch.float64):
        einc.cache_clear()
        weighed.clear()
        loops.clear()
        ops = _operands(dtype, (8, 12, 64, 32, 64), seed=6)
        plain = einc.einsum(EQ, *ops)
        assert len(loops) == 1 and weighed == []
        leaves = [o.clone().requires_grad_() for o in ops]
        out = einc.einsum(EQ, *leaves)
        assert len(weighed) == 1 and weighed[0][0].outer == (0,) and not weighed[0][1].outer
        assert "RecordedBackward" in grad_fns(out) and "StackBackward0" not in grad_fns(out)
        assert torch.equal(out.detach(), plain)
        einc.einsum(EQ, *leaves)
        assert len(weighed) == 1
    wide = [o.requires_grad_() for o in _operands(torch.float64, (8, 12, 64, 32, 64), seed=7)]
    out = einc.einsum(EQ, *wide)
    assert "RecordedBackward" in grad_fns(out)
    _assert_torch_s_derivatives(out, wide, seed=8)


def test_a_looped_step_keeps_its_products_recorded_where_they_train_for_less(loops, monkeypatch):
    """Where ``Recorded`` would cost more than the looped products' own backward, autograd
    records those products, stacked (looped.py), as before any weighing."""
    monkeypatch.setattr(backward, "RECORDED", math.inf)
    ops = [o.requires_grad_() for o in _operands(torch.float64, (8, 12, 64, 32, 64), seed=9)]
    out = einc.einsum(EQ, *ops)
    assert loops and "StackBackward0" in grad_fns(out) and "RecordedBackward" not in grad_fns(out)
    gout = torch.randn(out.shape, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(out, ops, gout), torch.autograd.grad(torch.einsum(EQ, *ops), ops, gout)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("dtype", "shape"), [c for c in CASES if c[0] != torch.bfloat16 and _aligned(*c)], ids=str)
@pytest.mark.parametrize("one_product", [True, False])
def test_a_looped_step_trains_either_way_with_torch_s_gradients(dtype, shape, one_product, loops, monkeypatch):
    """Made to train as its one product (partial gradients priced dear, ``Recorded`` at
    nothing: the products recorded one by one always make B's per value of ``b``) or as its
    own products (``Recorded`` priced infinite): the plain call's bits forward either way,
    and torch.einsum's gradients on float64 copies."""
    monkeypatch.setattr(backward, "RECORDED", 0.0 if one_product else math.inf)
    monkeypatch.setattr(ttgt, "GRAD_PARTIAL", 1e9 if one_product else ttgt.GRAD_PARTIAL)
    ops = _operands(dtype, shape, seed=10)
    plain = einc.einsum(EQ, *ops)
    leaves = [o.clone().requires_grad_() for o in ops]
    out = einc.einsum(EQ, *leaves)
    assert len(loops) == 1 and torch.equal(out.detach(), plain)
    assert ("RecordedBackward" in grad_fns(out)) == one_product
    gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    got = torch.autograd.grad(out, leaves, gout.to(dtype))
    wide = [o.double().requires_grad_() for o in ops]
    want = torch.autograd.grad(torch.einsum(EQ, *wide), wide, gout)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, **TOLERANCE[dtype])


@pytest.mark.parametrize(("equation", "shapes"), [
    ("bhijx,bhjk->bhik", [(8, 1, 64, 32, 3), (1, 12, 32, 64)]),        # A's lone index summed first
    ("bhiij,bhjk->bhik", [(8, 1, 64, 64, 32), (1, 12, 32, 64)]),       # A's diagonal taken first
    ("bhij,bhjk,k->bhik", [(8, 1, 64, 32), (1, 12, 32, 64), (64,)]),   # one step of a longer plan
    ("...ij,...jk->...ik", [(8, 1, 64, 32), (1, 12, 32, 64)]),
], ids=["lone-sum", "diagonal", "three-operands", "ellipsis"])
def test_a_looped_step_behind_other_ops_trains_as_one_product(equation, shapes, loops):
    """The looped step of a call whose operands are reduced first (a lone index summed, a
    diagonal taken) or whose plan has another step trains as its one product behind the same
    ops forward: the plain call's bits, torch.einsum's gradients."""
    g = torch.Generator().manual_seed(12)
    ops = [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
    plain = einc.einsum(equation, *[o.detach() for o in ops])
    out = einc.einsum(equation, *ops)
    assert loops and "RecordedBackward" in grad_fns(out) and torch.equal(out.detach(), plain)
    ref = torch.einsum(equation, *ops)
    gout = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(out, ops, gout), torch.autograd.grad(ref, ops, gout)):
        torch.testing.assert_close(a, b)
