"""A single matrix product whose ``mm`` backward would make a gradient with a transposed
left operand against a short side (runtime/torch_executor/backward.py) runs, where a
gradient is taken, as recorded.Recorded: the same ``mm`` forward, the products ``bmm``'s
backward makes (``G @ R^H``, ``L^H @ G``).  The decision, the node autograd records, and
results, gradients (first and second order), tangents and transforms equal torch's."""

import pytest
import torch
from autograd_graph import grad_fns, leaves

import einc
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan
from einc.runtime import torch_executor as tx
from einc.runtime.torch_executor import backward, recorded
from einc.runtime.torch_executor.backward import as_bmm

D = torch.float64
NTN = "bcda,bca->bcd"
NTN_SIZES = dict(b=256, c=500, d=4, a=16)
# ``ij,kj->ik`` with a short summed side: ``kj`` reads as the transposed matrix (j, k); small,
# so its tests run as recorded as decided (the ``small`` fixture)
SHORT = ("ij,kj->ik", [(30, 8), (40, 8)])
# SHORT's equation at sizes whose finite differences are few: gradcheck perturbs each
# element of the operands (and gradgradcheck of the output's gradient too)
GRADCHECKED = [(6, 3), (5, 3)]
pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
              pytest.mark.usefixtures("per_shape_plans")]


@pytest.fixture
def small(monkeypatch):
    """SHORT's step run as recorded.Recorded where a gradient is taken: its matrices stay in
    cache, where reading one along its rows costs nothing more (ttgt.ROWS_BYTES) and
    ``as_bmm`` keeps ``mm``; :func:`test_decision` checks where it takes ``bmm``."""
    monkeypatch.setattr(recorded, "as_bmm", lambda *args: True)


def test_decision():
    """NTN's layout, ``(c, a) @ (a, (b, d))``: ``mm``'s backward makes ``((b, d), c) x (c, a)``
    with ``(b, d)`` along the rows of its left operand and ``a`` = 16; ``bmm``'s reads ``(a, c) x
    (c, (b, d))``.  Not where the summed side is long, where no operand is read transposed,
    or where a side is 1."""
    assert as_bmm("ca", "bda", ("c",), ("b", "d"), ("a",), "", NTN_SIZES)
    assert as_bmm("ca", "bda", ("c",), ("b", "d"), ("a",), "r", NTN_SIZES)      # copied flipped: the same
    long = dict(i=1000, j=1000, k=1000)
    assert not as_bmm("ij", "kj", ("i",), ("k",), ("j",), "", long)
    assert not as_bmm("ij", "jk", ("i",), ("k",), ("j",), "", dict(i=1000, j=16, k=1000))
    assert not as_bmm("ij", "kj", ("i",), ("k",), ("j",), "", dict(i=1, j=16, k=1000))
    assert not as_bmm("ij", "kj", ("i",), ("k",), ("j",), "", dict(i=0, j=16, k=1000))
    assert not as_bmm("ij", "kj", ("i",), ("k",), ("j",), "", dict(i=30, j=8, k=40))  # bmm's views cost more
    assert as_bmm("ij", "kj", ("i",), ("k",), ("j",), "", dict(i=1000, j=8, k=1000))


def test_ntn_backward_runs_as_recorded_where_a_gradient_is_taken():
    """Before, autograd recorded ``mm``, whose backward made the operand ``(b, d, a)``'s
    gradient as ``((b, d), c) x (c, a)`` with the left operand transposed; the step runs as
    recorded.Recorded, whose forward is the untracked one: the same bits."""
    a, b = leaves([(256, 1, 4, 16), (1, 500, 16)], seed=1, dtype=torch.float32)
    out = einc.einsum(NTN, a, b)
    names = grad_fns(out)
    assert "RecordedBackward" in names and "MmBackward0" not in names
    g = torch.randn(out.shape)
    got = torch.autograd.grad(out, (a, b), g)
    want = torch.autograd.grad(torch.einsum(NTN, a.double(), b.double()), (a, b), g.double())
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        plain = einc.einsum(NTN, a, b)
    assert torch.equal(plain, out.detach())


def test_rescal_trains_as_mm_where_bmm_saves_less_than_recorded_costs(monkeypatch):
    """pykeen's RESCAL ``acb,acb->ac`` on ``(256, 1, 16)`` and ``(1, 500, 16)`` runs ``(a, b) @ (b, c)``,
    ``(b, c)`` a transposed view and ``b`` = 16: the model prices ``mm``'s backward a little above
    ``bmm``'s products, by less than what training as recorded.Recorded adds to ``mm``'s own
    autograd (backward.RECORDED).  Autograd records the ``mm`` the untracked call runs: its
    node, the same bits, torch's gradients."""
    sizes = dict(a=256, b=16, c=500)
    assert not as_bmm("ab", "cb", ("a",), ("c",), ("b",), "", sizes)
    with monkeypatch.context() as m:        # the products alone: bmm's, priced lower
        m.setattr(backward, "RECORDED", 0)
        assert as_bmm("ab", "cb", ("a",), ("c",), ("b",), "", sizes)
    eq = "acb,acb->ac"
    a, b = leaves([(256, 1, 16), (1, 500, 16)], seed=8, dtype=torch.float32)
    out = einc.einsum(eq, a, b)
    names = grad_fns(out)
    assert "MmBackward0" in names and "RecordedBackward" not in names
    with torch.no_grad():
        assert torch.equal(einc.einsum(eq, a, b), out.detach())
    g = torch.randn(out.shape)
    want = torch.autograd.grad(torch.einsum(eq, a.double(), b.double()), (a, b), g.double())
    for x, y in zip(torch.autograd.grad(out, (a, b), g), want):
        torch.testing.assert_close(x, y.float(), atol=1e-4, rtol=1e-4)


def _short_leaves(shapes, transposed):
    a, b = leaves(shapes, seed=2)
    if transposed:      # operands as transposed views: results and gradients stay torch's
        a = a.detach().t().contiguous().t().requires_grad_()
        b = b.detach().t().contiguous().t().requires_grad_()
    return a, b


@pytest.mark.parametrize("transposed", [False, True])
def test_short_side_results_gradients_and_second_order(transposed, small):
    eq, shapes = SHORT
    a, b = _short_leaves(shapes, transposed)
    out = einc.einsum(eq, a, b)
    assert "RecordedBackward" in grad_fns(out)
    assert out.is_contiguous()
    torch.testing.assert_close(out, torch.einsum(eq, a, b))
    g = torch.randn(out.shape, dtype=D)
    for x, y in zip(torch.autograd.grad(out, (a, b), g), torch.autograd.grad(torch.einsum(eq, a, b), (a, b), g)):
        torch.testing.assert_close(x, y)
    a, b = _short_leaves(GRADCHECKED, transposed)
    assert "RecordedBackward" in grad_fns(einc.einsum(eq, a, b))     # the same step, as recorded
    f = lambda *x: einc.einsum(eq, *x)  # noqa: E731
    assert torch.autograd.gradcheck(f, (a, b))
    assert torch.autograd.gradgradcheck(f, (a, b))


def test_complex_gradients(small):
    eq, shapes = SHORT
    a, b = leaves(shapes, seed=3, dtype=torch.complex128)
    out = einc.einsum(eq, a, b)
    assert "RecordedBackward" in grad_fns(out)
    g = torch.randn(out.shape, dtype=torch.complex128)
    for x, y in zip(torch.autograd.grad(out, (a, b), g), torch.autograd.grad(torch.einsum(eq, a, b), (a, b), g)):
        torch.testing.assert_close(x, y)


def test_size_zero_and_one_take_mm(small):
    for shapes in ([(0, 8), (40, 8)], [(1, 8), (40, 8)], [(30, 8), (1, 8)]):
        a, b = leaves(shapes, seed=4)
        out = einc.einsum(SHORT[0], a, b)
        torch.testing.assert_close(out, torch.einsum(SHORT[0], a, b))
        g = torch.randn(out.shape, dtype=D)
        got = torch.autograd.grad(out, (a, b), g, allow_unused=True)
        want = torch.autograd.grad(torch.einsum(SHORT[0], a, b), (a, b), g, allow_unused=True)
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y)


def test_forward_mode_and_transforms(small):
    import torch.autograd.forward_ad as fwAD
    eq, shapes = SHORT
    a, b = (t.detach() for t in leaves(shapes, seed=5))
    ta = torch.randn(a.shape, dtype=D)
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(einc.einsum(eq, fwAD.make_dual(a, ta), b)).tangent
    torch.testing.assert_close(tangent, torch.einsum(eq, ta, b))
    ga = torch.func.grad(lambda x: einc.einsum(eq, x, b).pow(2).sum())(a)
    want = torch.func.grad(lambda x: torch.einsum(eq, x, b).pow(2).sum())(a)
    torch.testing.assert_close(ga, want)
    batched = torch.func.vmap(lambda x: einc.einsum(eq, x, b))(torch.stack([a, 2 * a]))
    torch.testing.assert_close(batched[1], 2 * torch.einsum(eq, a, b))


def test_no_grad_runs_the_same_mm(small):
    """Without a gradient the step runs ``mm`` and records nothing; with one, the same
    ``mm`` inside recorded.Recorded: the same bits."""
    a, b = leaves(SHORT[1], seed=6)
    with torch.no_grad():
        plain = einc.einsum(SHORT[0], a, b)
    assert plain.grad_fn is None
    out = einc.einsum(SHORT[0], a, b)
    assert "RecordedBackward" in grad_fns(out) and torch.equal(out.detach(), plain)


def test_decided_on_the_first_gradient(monkeypatch, small):
    """Building a step prices no backward: ``as_bmm`` runs once, on the first call that
    takes a gradient, whose step then runs as recorded.Recorded (a first call with none
    builds nothing more)."""
    asked = []
    real = recorded.as_bmm
    monkeypatch.setattr(recorded, "as_bmm", lambda *args: asked.append(args) or real(*args))
    a, b = leaves(SHORT[1], seed=7)
    (fn,), _ = tx.step_functions(build_plan(build(parse(SHORT[0]), SHORT[1][0:2])), [D, D])
    with torch.no_grad():
        fn(a, b)
    assert not asked
    names = grad_fns(fn(a, b))
    assert len(asked) == 1 and "RecordedBackward" in names and "MmBackward0" not in names
    fn(a, b)
    assert len(asked) == 1


def test_column_major_reads_the_reading_not_its_copies_prices(monkeypatch):
    """Whether an operand reads column-major is read from its reading (views or a copy, and
    the unit stride), as ``ttgt.operand`` gives it, without pricing the copies: the first
    gradient of a plan decides it per step, in the step."""
    import random

    from einc.runtime.torch_executor import ttgt

    rng = random.Random(5)
    cases = []
    for _ in range(600):
        idx = list(range(rng.randint(1, 5)))
        sizes = {i: rng.choice([0, 1, 1, 2, 3, 7]) for i in idx}
        rng.shuffle(idx)
        cut = rng.randint(0, len(idx))
        term = rng.sample(idx, len(idx))
        for flipped in (False, True):
            copied, along_rows = ttgt.operand(term, ((), idx[:cut], idx[cut:]), sizes)[2:]
            cases.append((term, idx[:cut], idx[cut:], flipped, sizes, flipped if copied else along_rows))
    assert {want for *_, want in cases} == {False, True}

    def priced(*args):
        raise AssertionError("priced a copy")
    monkeypatch.setattr(ttgt, "_planned_copy_ns", priced)
    for term, rows, cols, flipped, sizes, want in cases:
        assert backward._column_major(term, rows, cols, flipped, sizes) == want


def test_trains_recorded_as_the_executor_decides():
    """``backward.trains_recorded`` says a layout trains as ``Recorded`` where the torch
    executor's ``recorded.training_parts`` makes it so, which the training layout's choice
    prices (``RECORDED``): an operand whose matrices have no unit-stride axis (``ikc`` read as
    ``(c, i, k)``: copied once into a stack), a call's last product copied into its result
    in chunks (16 MiB or more; not a step inside the call, nor one whose product is in the
    result's order), and ``as_bmm``'s thin product; not a plain batched product."""
    from einc.runtime.torch_executor.ttgt import Layout
    sizes = dict(i=4, k=3, c=2, j=5)
    lay = Layout(False, ("c",), ("i",), ("j",), ("k",), "", "", 0.0)
    assert backward.trains_recorded(lay, "ikc", "jkc", "ijc", sizes)
    assert not backward.trains_recorded(lay, "cik", "ckj", "cij", sizes)
    big = dict(i=2048, j=2, k=2048)
    lay = Layout(False, (), ("i",), ("k",), ("j",), "c", "", 0.0)
    assert backward.trains_recorded(lay, "ij", "jk", "ki", big, 4, final=True)
    assert not backward.trains_recorded(lay, "ij", "jk", "ki", big, 4)
    assert not backward.trains_recorded(lay, "ij", "jk", "ik", big, 4, final=True)
    assert not backward.trains_recorded(lay, "ij", "jk", "ki", dict(i=256, j=2, k=256), 4, final=True)
    sizes = dict(NTN_SIZES)
    lay = Layout(True, (), ("c",), ("b", "d"), ("a",), "l", "", 0.0)
    assert backward.trains_recorded(lay, "bcda", "ca", "bcd", sizes) == as_bmm(
        "ca", "bcda", ("c",), ("b", "d"), ("a",), "", sizes)
