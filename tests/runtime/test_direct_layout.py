"""Steps too small for the layout choice to repay itself (runtime/torch_executor/direct.py): they
run in their direct layout, unweighed, and exactly; the bound the rule rests on holds over the
model's candidates; larger steps are weighed as before."""

import functools
import math
import random

import pytest
import torch

import einc
from einc.runtime import torch_executor as tx
from einc.runtime.torch_executor import direct, training_layout, ttgt


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")       # every call planned per shape: the steps of step_functions
    einc.cache_clear()
    ttgt.cache_clear()


def _oracle(eq, ops, grad=False):
    wide = [x.detach().to(torch.complex128 if x.dtype.is_complex else torch.float64).requires_grad_(grad)
            for x in ops]
    return torch.einsum(eq, *wide), wide


def test_a_small_step_is_not_weighed(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a step this small is not weighed")
    monkeypatch.setattr(ttgt, "choose", refuse)
    a, b, c = torch.rand(2, 3, dtype=torch.float64), torch.rand(3, 4, dtype=torch.float64), torch.rand(4, 2)
    got = einc.einsum("ab,bc,cd->ad", a, b, c.double())
    want, _ = _oracle("ab,bc,cd->ad", [a, b, c.double()])
    torch.testing.assert_close(got, want, rtol=1e-15, atol=0)


def test_a_small_step_is_not_weighed_for_training_either(monkeypatch):
    monkeypatch.setattr(training_layout, "for_training",
                        lambda *a, **k: pytest.fail("a step this small is not weighed"))
    a, b, c = (torch.rand(s, dtype=torch.float64, requires_grad=True) for s in ((2, 3), (3, 4), (4, 2)))
    got = einc.einsum("ab,bc,cd->ad", a, b, c)
    want, wide = _oracle("ab,bc,cd->ad", [a, b, c], grad=True)
    torch.testing.assert_close(got, want, rtol=1e-15, atol=0)
    for g, w in zip(torch.autograd.grad(got.sum(), (a, b, c)), torch.autograd.grad(want.sum(), wide)):
        torch.testing.assert_close(g, w, rtol=1e-15, atol=1e-15)
    lay = direct.layout("ab", "bc", "ac", {"a": 2, "b": 3, "c": 4}, 8)
    assert isinstance(lay, direct.Direct)
    assert direct.for_training(lay, "ab", "bc", "ac", {"a": 2, "b": 3, "c": 4}, 0, 8) is lay


def test_a_larger_step_is_weighed(monkeypatch):
    seen, real = [], ttgt.choose
    monkeypatch.setattr(ttgt, "choose", lambda *a, **k: seen.append(a) or real(*a, **k))
    a, b = torch.rand(64, 96), torch.rand(96, 80)
    torch.testing.assert_close(einc.einsum("ab,bc->ca", a, b), (a @ b).T)
    assert seen


def _random_steps(rng, count):
    """Steps ``ta, tb -> out`` of tensors under ``ttgt.SMALL`` elements, sizes 0-9 (size-1 ones among them)."""
    steps = []
    while len(steps) < count:
        names = rng.sample("abcdefgh", rng.randint(2, 7))
        ta = rng.sample(names, rng.randint(1, len(names)))
        tb = rng.sample(names, rng.randint(1, len(names)))
        both = set(ta) | set(tb)
        out = [i for i in rng.sample(names, len(names))
               if i in both and (i not in ta or i not in tb or rng.random() < 0.5)]
        if not set(ta) & set(tb) - set(out):
            continue            # a product, not a contraction
        sizes = {i: rng.choice([0, 1, 1, 2, 3, 4, 5, 9]) for i in names}
        if max(math.prod(sizes[i] for i in t) for t in (ta, tb, out)) < ttgt.SMALL:
            steps.append((ta, tb, out, sizes))
    return steps


@pytest.mark.parametrize("itemsize", [2, 4, 8, 16])
def test_the_bound_holds_over_the_candidates(itemsize):
    """The direct layout is the first candidate (copies aside, which it does not flip); the
    bound exceeds that candidate's cost, and what it costs over the cheapest."""
    for ta, tb, out, sizes in _random_steps(random.Random(itemsize), 300):
        saved, most = direct.most_saved(ta, tb, out, sizes, itemsize)
        found = ttgt.candidates(ta, tb, out, sizes, tx._COPY_WORTH_SPARING, itemsize)
        first, least = found[0].cost, min(lay.cost for lay in found)
        assert most >= first * (1 - 1e-12)
        assert saved >= (first - least) * (1 - 1e-12)
        lay = direct.layout(ta, tb, out, sizes, itemsize)
        assert (lay is not None) == (saved * direct.REPAY < direct.CHOICE_NS)
        if lay is not None:
            assert (lay.swap, lay.batch, lay.m, lay.n, lay.k, lay.copies) == (
                found[0].swap, found[0].batch, found[0].m, found[0].n, found[0].k, found[0].copies)


def test_a_large_step_has_no_direct_layout():
    sizes = {"a": 64, "b": 64, "c": 2}
    assert direct.most_saved("ab", "bc", "ac", sizes) is None
    assert direct.layout("ab", "bc", "ac", sizes) is None


EDGES = [("ab,bc->ac", (3, 4), (4, 5)), ("ab,bc->ca", (3, 4), (4, 5)), ("abc,cd->dba", (2, 3, 4), (4, 5)),
         ("ab,bc->ac", (0, 4), (4, 5)), ("ab,bc->ac", (3, 0), (0, 5)), ("ab,bc->ac", (1, 4), (4, 1)),
         ("abc,acd->abd", (2, 1, 3), (2, 3, 4)), ("abc,bcd->ad", (2, 3, 4), (3, 4, 1)),
         ("bac,cad->dba", (2, 3, 4), (4, 3, 2)), ("iij,jk->ik", (3, 3, 2), (2, 4)),
         ("abc,abd->cd", (2, 3, 4), (2, 3, 5)),
         ("ij,jk,kl,lm->im", (2, 3), (3, 4), (4, 2), (2, 3))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.bfloat16])
@pytest.mark.parametrize("how", ["plain", "permuted", "broadcast", "any"])
def test_every_small_step_direct_is_exact(monkeypatch, dtype, how):
    monkeypatch.setattr(direct, "CHOICE_NS", math.inf)       # every step under ttgt.SMALL elements direct
    monkeypatch.setattr(ttgt, "choose", lambda *a, **k: pytest.fail("a step weighed"))
    gen = torch.Generator().manual_seed(0)
    tol = {torch.float32: 1e-5, torch.float64: 1e-13, torch.complex64: 1e-5, torch.bfloat16: 3e-2}[dtype]
    for eq, *shapes in EDGES:
        ops = []
        for shape in shapes:
            x = torch.rand(shape, generator=gen, dtype=torch.float64).to(dtype)
            if how == "permuted" and x.dim() >= 2:
                x = x.transpose(0, -1).contiguous().transpose(0, -1)
            elif how == "broadcast" and x.dim() >= 1 and shape[0] > 1:
                x = x[:1].expand(shape)
            ops.append(x.requires_grad_(dtype != torch.bfloat16 or how != "broadcast"))
        got = einc.einsum(eq, *ops, layout="any" if how == "any" else "contiguous")
        want, wide = _oracle(eq, ops, grad=True)
        scale = max(want.abs().max().item(), 1.0) if want.numel() else 1.0
        torch.testing.assert_close(got.detach().to(want.dtype), want.detach(), rtol=0, atol=tol * scale)
        if ops[0].requires_grad and got.numel():
            grads = torch.autograd.grad(got, ops, torch.ones_like(got))
            theirs = torch.autograd.grad(want, wide, torch.ones_like(want))
            for g, w in zip(grads, theirs):
                top = w.abs().max().item() if w.numel() else 1.0
                torch.testing.assert_close(g.to(w.dtype), w, rtol=0, atol=tol * max(top, 1.0))


def test_direct_steps_under_torch_compile(monkeypatch):
    """A network of twelve small tensors under ``torch.compile`` (the custom op runs the
    executor): its steps go direct, and the answer and gradients are the oracle's."""
    from opt_einsum.testing import rand_equation
    eq, shapes = rand_equation(12, 3, n_out=2, d_min=1, d_max=3, seed=7)
    made, real = [], direct.layout
    monkeypatch.setattr(direct, "layout", lambda *a: (lambda lay: made.append(lay) or lay)(real(*a)))
    ops = [torch.rand(s, dtype=torch.float64, generator=torch.Generator().manual_seed(k), requires_grad=True)
           for k, s in enumerate(shapes)]
    got = torch.compile(lambda *xs: einc.einsum(eq, *xs), backend="eager")(*ops)
    assert any(lay is not None for lay in made)
    import opt_einsum
    wide = [x.detach().clone().requires_grad_() for x in ops]
    want = opt_einsum.contract(eq, *wide, backend="torch")
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    for g, w in zip(torch.autograd.grad(got.sum(), ops), torch.autograd.grad(want.sum(), wide)):
        torch.testing.assert_close(g, w, rtol=1e-13, atol=1e-13)


def test_steps_alike_but_for_their_names_share_one_direct_layout(monkeypatch):
    """A chain of 2x2 matrices contracted left to right: its 29 steps are four steps once
    renamed (the first, the last, the intermediates' two orders), and their direct layouts
    are worked out four times (the bound counted), each step's own indices given back; the
    answer is exact."""
    calls, real = [], direct._bound
    monkeypatch.setattr(direct, "_bound", lambda *a, **k: calls.append(a) or real(*a, **k))
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGH"
    eq = ",".join(letters[k:k + 2] for k in range(30)) + f"->a{letters[30]}"
    gen = torch.Generator().manual_seed(3)
    ops = [torch.rand(2, 2, dtype=torch.float64, generator=gen) for _ in range(30)]
    got = einc.einsum(eq, *ops, optimize=[(0, 1)] + [(0, n) for n in range(28, 0, -1)])
    want = functools.reduce(torch.matmul, ops)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=0)
    assert len(calls) == 4
    lay = direct.layout("pq", "qr", "pr", {"p": 2, "q": 2, "r": 2}, 8)
    assert (lay.m, lay.n, lay.k) == (("p",), ("r",), ("q",)) and len(calls) == 4


def test_the_kept_direct_layouts_follow_the_rule_and_ttgts_cache_clear():
    sizes = {"a": 2, "b": 3, "c": 4}
    kept = direct.layout("ab", "bc", "ac", sizes, 8)
    assert kept is not None and direct._direct.cache_info().currsize == 1
    with pytest.MonkeyPatch.context() as m:
        m.setattr(direct, "CHOICE_NS", 0.0)       # no step cheap enough to go unweighed: none kept answers
        assert direct.layout("ab", "bc", "ac", sizes, 8) is None
    ttgt.cache_clear()
    assert direct._direct.cache_info().currsize == 0
    assert direct.layout("ab", "bc", "ac", sizes, 8) == kept
