"""A step that trains in other ops than it runs (runtime/torch_executor/recorded.py: a training
layout, stacked copies, ``bmm``'s backward for a thin ``mm``, the whole product of a chunked one)
runs as ``Recorded``: its forward is the untracked step, its backward the training ops'.  The
same bits with and without autograd over the suite's workloads; gradients, second-order
gradients and complex gradients as torch's; transforms and tracing record the untracked ops
as they are (chunks: tests/runtime/test_chunked.py)."""

import json
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import einc
from einc.runtime.torch_executor import recorded

D = torch.float64
SUITE = json.loads((Path(__file__).resolve().parents[2] / "bench" / "suite.json").read_text())["workloads"]
# steps that run as Recorded at these shapes (counted by test_the_cases_run_as_recorded)
BROADCAST = ("BTD,NDH->BTNH", [(1, 128, 512), (8, 512, 64)])        # training_layout.for_training names another layout
# a training layout that saves more than a Recorded step costs (backward.RECORDED), so that the
# step trains in it (at smaller sizes it trains as the forward runs)
PERMUTED = ("xyk,kz->yzx", [(16, 64, 64), (64, 32)])     # training_layout.for_training names another layout
UNSTRIDED = ("ikc,jkc->ijc", [(40, 30, 8), (36, 30, 8)])           # (c, i, k) matrices: no unit stride
CASES = [BROADCAST, PERMUTED, UNSTRIDED]


pytestmark = pytest.mark.usefixtures("per_shape_plans")


@pytest.fixture
def count(applied):
    """How many steps ran as Recorded since the fixture began (``count()``)."""
    return applied(recorded.Recorded)


def _operands(shapes, dtype=D, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_the_cases_run_as_recorded(case, count):
    """Each case's step runs as Recorded where autograd records it, and not where it does not."""
    eq, shapes = case
    ops = _operands(shapes)
    einc.einsum(eq, *ops)
    assert count() == 0
    einc.einsum(eq, *[o.requires_grad_() for o in ops])
    assert count() == 1
    with torch.no_grad():
        einc.einsum(eq, *ops)
    assert count() == 1


@pytest.mark.parametrize("dtype", [torch.float32, D], ids=str)
@pytest.mark.parametrize("workload", SUITE, ids=lambda w: w["id"])
def test_the_suite_gives_the_same_bits_recorded_or_not(workload, dtype, monkeypatch):
    """Every workload at its CPU shapes, in the default planning: the same bits with and
    without autograd (nine differed in float64 on one host before:
    bench/measured/recorded-bits-2026-12-03.md)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    einc.cache_clear()
    eq, shapes = workload["equation"], workload["variants"]["cpu"]["shapes"]
    ops = _operands(shapes, dtype)
    plain = einc.einsum(eq, *ops)
    tracked = einc.einsum(eq, *[o.clone().requires_grad_() for o in ops])
    assert tracked.requires_grad and torch.equal(tracked.detach(), plain)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("dtype", [D, torch.complex128], ids=str)
def test_gradients_are_torchs(case, dtype, count):
    """First-order gradients (torch's convention for complex operands) and a second-order
    one (a gradient's gradient, through the Function's backward recorded in turn) as
    torch.einsum's, with a weight that makes every element count."""
    eq, shapes = case
    ops = _operands(shapes, dtype)
    ours, theirs = [o.clone().requires_grad_() for o in ops], [o.clone().requires_grad_() for o in ops]
    out, want = einc.einsum(eq, *ours), torch.einsum(eq, *theirs)
    assert count() == 1
    weight = _operands([tuple(want.shape)], dtype, seed=1)[0]
    g = torch.autograd.grad((out * weight).sum().real, ours, create_graph=True)
    h = torch.autograd.grad((want * weight).sum().real, theirs, create_graph=True)
    for x, y in zip(g, h):
        assert x.dtype == dtype and x.shape == y.shape and torch.allclose(x, y, rtol=1e-10, atol=1e-10)
    probe = _operands([tuple(ops[0].shape)], dtype, seed=2)[0]
    second = torch.autograd.grad((g[0] * probe).sum().real, ours[1])[0]
    expected = torch.autograd.grad((h[0] * probe).sum().real, theirs[1])[0]
    assert torch.allclose(second, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_transforms_and_tracing_record_the_ops_as_they_are(case, count):
    """Under ``torch.func.grad`` and ``torch.jit.trace`` no Recorded runs (they record torch's
    ops themselves): the same values and gradients as the eager call."""
    eq, shapes = case
    ops = _operands(shapes)
    eager = [o.clone().requires_grad_() for o in ops]
    out = einc.einsum(eq, *eager)
    want = torch.autograd.grad(out.sum(), eager)
    seen = count()
    got = torch.func.grad(lambda a, b: einc.einsum(eq, a, b).sum(), argnums=(0, 1))(*ops)
    for x, y in zip(got, want):
        assert torch.allclose(x, y, rtol=1e-12, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(lambda a, b: einc.einsum(eq, a, b), ops, check_trace=False)
    assert torch.equal(traced(*ops), out.detach())
    assert count() == seen


class _Allocations(TorchDispatchMode):
    """The storages the ops under it make on a device (not the meta one): each one's op and
    bytes, by its address."""

    def __init__(self):
        super().__init__()
        self.made = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        had = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
               if isinstance(t, torch.Tensor) and not t.is_meta}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and not t.is_meta and t.untyped_storage().data_ptr() not in had:
                self.made[t.untyped_storage().data_ptr()] = (func, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("case", [BROADCAST, PERMUTED], ids=lambda c: c[0])
def test_a_backward_makes_nothing_of_the_operand_it_did_not_save(case, which, count):
    """Where one operand's gradient is taken, the step saves only the other; its backward makes
    no empty memory standing in for the one not saved (one of that operand's layout, copied
    into the product's matrix where the training layout permutes it), and no more than the
    gradient, a copy of the result's gradient and of the saved operand's matrices."""
    eq, shapes = case
    ops = _operands(shapes)
    ops[which].requires_grad_()
    out = einc.einsum(eq, *ops)
    assert count() == 1
    weight = _operands([tuple(out.shape)], seed=1)[0]
    with _Allocations() as seen:
        (grad,) = torch.autograd.grad(out, ops[which], weight)
    empty = [f for f, _ in seen.made.values() if f in (torch.ops.aten.empty_strided.default,
                                                        torch.ops.aten.empty.memory_format)]
    assert not empty
    nbytes = sum(n for _, n in seen.made.values())
    assert nbytes <= sum(x.untyped_storage().nbytes() for x in (grad, out, ops[1 - which]))
    want = torch.autograd.grad(torch.einsum(eq, *ops), ops[which], weight)[0]
    assert torch.allclose(grad, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("case", [BROADCAST, PERMUTED], ids=lambda c: c[0])
def test_an_unsaved_operands_backward_is_the_engines(case, which, monkeypatch, count):
    """The backward of the ops that make the matrices of an operand not saved, pulled through
    their nodes one by one (recorded._pulled), gives the bits the engine gives on a stand-in of
    empty memory (what runs where an op has no formula there): gradients and second-order
    gradients, with a weight that makes every element count."""
    eq, shapes = case

    def grads():
        ops = _operands(shapes)
        ops[which].requires_grad_()
        out = einc.einsum(eq, *ops)
        weight = _operands([tuple(out.shape)], seed=1)[0].requires_grad_()
        (g,) = torch.autograd.grad((out * weight).sum(), ops[which], create_graph=True)
        probe = _operands([tuple(g.shape)], seed=2)[0]
        (h,) = torch.autograd.grad((g * probe).sum(), weight)
        return g.detach(), h
    pulled = grads()
    assert count() == 1
    monkeypatch.setattr(recorded, "_BACKWARD", {})
    einc.cache_clear()
    engine = grads()
    for x, y in zip(pulled, engine):
        assert x.dtype == y.dtype and x.stride() == y.stride() and torch.equal(x, y)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_a_saved_operands_backward_is_pulled_with_the_engines_bits(case, monkeypatch, count):
    """Where both operands take a gradient, the backward of the ops that make each one's
    matrices is pulled through their nodes (recorded._pulled), not run by a nested call of the
    engine, with the engine's bits and strides: gradients and second-order gradients."""
    eq, shapes = case
    engine = recorded._run_backward
    nested = []

    def counted(*args, **kwargs):
        nested.append(1)
        return engine(*args, **kwargs)
    monkeypatch.setattr(recorded, "_run_backward", counted)

    def grads():
        ops = [o.requires_grad_() for o in _operands(shapes)]
        out = einc.einsum(eq, *ops)
        weight = _operands([tuple(out.shape)], seed=1)[0].requires_grad_()
        first = torch.autograd.grad(out, ops, weight, retain_graph=True)
        g = torch.autograd.grad((out * weight).sum(), ops, create_graph=True)
        probes = [_operands([tuple(x.shape)], seed=2 + i)[0] for i, x in enumerate(g)]
        second = torch.autograd.grad(sum((x * p).sum() for x, p in zip(g, probes)), weight)
        return [*first, *(x.detach() for x in g), *second]
    pulled = grads()
    assert count() == 1 and not nested
    monkeypatch.setattr(recorded, "_BACKWARD", {})
    einc.cache_clear()
    want = grads()
    assert nested
    for x, y in zip(pulled, want):
        assert x.dtype == y.dtype and x.stride() == y.stride() and torch.equal(x, y)


@pytest.mark.parametrize("which", [None, 0, 1], ids=["both", "first", "second"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_later_backwards_apply_the_steps_read_once(case, which, monkeypatch, count):
    """A step's backward reads the nodes of its operand matrices' ops once per operand layout
    (recorded._steps); later calls apply those steps to the gradients of matrices made
    untracked: the same bits and strides as the first call's."""
    eq, shapes = case
    read, steps = [], recorded._steps
    monkeypatch.setattr(recorded, "_steps", lambda y, x: read.append(1) or steps(y, x))

    def grads():
        ops = [o.requires_grad_(which in (None, i)) for i, o in enumerate(_operands(shapes))]
        out = einc.einsum(eq, *ops)
        weight = _operands([tuple(out.shape)], seed=1)[0]
        return torch.autograd.grad(out, [o for o in ops if o.requires_grad], weight)
    first = grads()
    seen = len(read)
    again = grads()
    assert seen and len(read) == seen and count() == 2
    for x, y in zip(first, again):
        assert x.stride() == y.stride() and torch.equal(x, y)


@pytest.mark.parametrize("case", [BROADCAST, PERMUTED], ids=lambda c: c[0])
def test_a_formula_reading_a_field_another_torch_names_otherwise_falls_back(case, monkeypatch, count):
    # a node's saved fields are torch's generated names: where one is missing, the engine's
    # backward on empty memory runs instead, with the same bits
    eq, shapes = case

    def grad():
        ops = _operands(shapes)
        ops[1].requires_grad_()
        out = einc.einsum(eq, *ops)
        return torch.autograd.grad(out, ops[1], _operands([tuple(out.shape)], seed=1)[0])[0]
    want = grad()
    assert count() == 1
    missing = dict.fromkeys(recorded._BACKWARD, lambda node: node._saved_not_in_this_torch)
    monkeypatch.setattr(recorded, "_BACKWARD", missing)
    einc.cache_clear()
    got = grad()
    assert got.stride() == want.stride() and torch.equal(got, want)


# chains of the ops an operand's matrices are made of: (shape, strides, ops)
CHAINS = {
    "permute": ((2, 3, 4), (12, 4, 1), lambda x: x.permute(2, 0, 1)),
    "view": ((2, 3, 4), (12, 4, 1), lambda x: x.view(6, 4)),
    "reshape_alias": ((4, 6), (6, 1), lambda x: x.permute(1, 0).reshape(2, 3, 4)),
    "reshape_copied": ((2, 3, 4), (12, 4, 1), lambda x: x.permute(2, 0, 1).reshape(4, 6)),
    "copy_transposed": ((6, 4), (4, 1), lambda x: x.t().contiguous().view(2, 2, 6).transpose(-1, -2)),
    "expand": ((1, 3, 4), (12, 4, 1), lambda x: x.expand(5, 3, 4)),
    "broadcast_batch": ((3, 4), (4, 1), lambda x: x.reshape(3, 4, 1).expand(3, 4, 5).permute(2, 0, 1).reshape(5, 12)),
    "squeeze": ((3, 1, 4), (4, 4, 1), lambda x: x.squeeze(-2).permute(1, 0)),
    "squeeze_dims": ((3, 1, 4, 1), (4, 4, 1, 1), lambda x: x.squeeze((1, 3))),
    "squeeze_all": ((3, 1, 4, 1), (4, 4, 1, 1), lambda x: x.squeeze()),
    "sum": ((3, 5, 4, 2), (40, 8, 2, 1), lambda x: x.sum((1, -1)).t()),
    "sum_kept": ((3, 5, 4), (20, 4, 1), lambda x: x.sum((1,), keepdim=True)),
    "diagonal": ((3, 4, 4), (16, 4, 1), lambda x: x.diagonal(1, -1, -2).permute(1, 0)),
    "column_major": ((4, 6), (1, 4), lambda x: x.t().reshape(24)),
    "none": ((4, 6), (6, 1), lambda x: x),
}


@pytest.mark.parametrize("create", [False, True])
@pytest.mark.parametrize("chain", CHAINS, ids=str)
def test_each_ops_backward_pulled_through_is_the_engines(chain, create):
    """recorded._pulled, on ops made on the meta device and on those of a real tensor (where
    torch may record other nodes: a reshape that splits a permuted axis), gives the gradient the
    engine gives on the real tensor's: the same bits and strides, and with ``create`` (a
    double backward) the same gradient of it."""
    shape, stride, ops = CHAINS[chain]
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
    real = torch.randn(extent, dtype=D).as_strided(shape, stride).requires_grad_()
    again = real.detach().requires_grad_()
    meta = torch.empty_strided(shape, stride, dtype=D, device="meta").requires_grad_()
    y, on_real, on_meta = ops(real), ops(again), ops(meta)
    gy = _operands([tuple(y.shape)])[0].requires_grad_(create)
    want = torch.autograd.grad(y, real, gy, create_graph=create)[0]
    for made, leaf in ((on_meta, meta), (on_real, again)):
        with torch.set_grad_enabled(create):
            got = recorded._pulled(made, leaf, gy)
        assert got is not None and got.stride() == want.stride() and torch.equal(got, want)
        if create:
            probe = _operands([shape], seed=1)[0]
            assert torch.equal(torch.autograd.grad((got * probe).sum(), gy)[0],
                               torch.autograd.grad((want * probe).sum(), gy)[0])
