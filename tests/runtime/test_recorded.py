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

import einc
from einc.runtime.torch_executor import recorded

D = torch.float64
SUITE = json.loads((Path(__file__).resolve().parents[2] / "bench" / "suite.json").read_text())["workloads"]
# steps that run as Recorded at these shapes (counted by test_the_cases_run_as_recorded)
BROADCAST = ("BTD,NDH->BTNH", [(1, 128, 512), (8, 512, 64)])        # ttgt.for_training names another layout
PERMUTED = ("xyk,kz->yzx", [(48, 40, 60), (60, 16)])
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
