"""Layouts on the torch executor under autograd: a permuted result's gradient comes back
in the matrix products' layout in one copy (``_Relayout``), and a step with an operand
whose stack of matrices has no unit-stride axis runs as recorded.Recorded, whose backward
copies it once rather than matrix by matrix; the results (the untracked call's bits),
gradients (first and second order) and forward-mode tangents stay torch's."""

import pytest
import torch
from autograd_graph import grad_fns, leaves
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc.runtime import torch_executor as tx
from einc.runtime.torch_executor import training_layout, ttgt

D = torch.float64
# torch's forward-AD module scripts a helper on first import; not einc's warning.
# These small calls test the per-shape executor's layouts: planned per shape, not by their
# size class (runtime/sizeclass.py).
pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
              pytest.mark.usefixtures("per_shape_plans")]

# (equation, shapes): a batch index innermost in the result (txl, af2), a result whose
# rows do not merge (gemma's GQA logits), a permuted result the matrix products read as
# it is, and operands with the batch index innermost.
CASES = [
    ("ibnd,jbnd->ijbn", [(3, 2, 2, 4), (5, 2, 2, 4)]),
    ("ikc,jkc->ijc", [(4, 3, 2), (5, 3, 2)]),
    ("BTKGH,BSKH->BTKGS", [(1, 3, 2, 2, 4), (1, 5, 2, 4)]),
    ("bij,bjk->ibk", [(2, 3, 4), (2, 4, 5)]),
    ("kcj,ikc->cij", [(3, 2, 5), (4, 3, 2)]),
]
IDS = [e for e, _ in CASES]


@pytest.mark.parametrize("equation,shapes", CASES, ids=IDS)
def test_output_and_gradients_match_torch(equation, shapes):
    ops = leaves(shapes, seed=1)
    out = einc.einsum(equation, *ops)
    ref = torch.einsum(equation, *ops)
    assert out.is_contiguous() and all(out.data_ptr() != o.data_ptr() for o in ops)
    torch.testing.assert_close(out, ref)
    g = torch.randn(ref.shape, dtype=D)
    for x, y in zip(torch.autograd.grad(out, ops, g), torch.autograd.grad(ref, ops, g)):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("equation,shapes", CASES, ids=IDS)
def test_gradcheck_and_gradgradcheck(equation, shapes):
    ops = leaves(shapes, seed=2)
    f = lambda *x: einc.einsum(equation, *x)  # noqa: E731
    assert torch.autograd.gradcheck(f, ops)
    assert torch.autograd.gradgradcheck(f, ops)


def test_relayout_only_where_the_gradient_is_strided_matrices():
    """``ijbn`` (batch innermost) takes the one-copy backward (a Function from
    ``permute_copy.MIN_BYTES`` up, below it a hook: test_small_relayout_is_a_hook); ``ijc``
    too, inside recorded.Recorded (its operands' matrices have no unit stride), whose backward
    copies the result's gradient into the product's order once; ``BTKGS`` (rows that do not
    merge: the reshape's backward copies once anyway) and ``ibk`` (row-major matrices, read as
    they are) keep torch's own."""
    assert "_RelayoutBackward" in grad_fns(einc.einsum(CASES[0][0], *leaves([(64, 4, 4, 8), (64, 4, 4, 8)])))
    assert "RecordedBackward" in grad_fns(einc.einsum(CASES[1][0], *leaves(CASES[1][1])))
    for equation, shapes in CASES[2:4]:
        assert "_RelayoutBackward" not in grad_fns(einc.einsum(equation, *leaves(shapes))), equation
    with torch.no_grad():                     # no gradient: the plain copy, no Function
        assert einc.einsum(*CASES[0][:1], *leaves(CASES[0][1])).grad_fn is None


def test_relayout_where_a_large_results_gradient_would_be_copied_by_torch(monkeypatch):
    """pykeen's NTN ``bcda,bca->bcd`` with 8 values of d (A (256, 1, 8, 16), B (1, 500, 16)):
    the product runs (c, bd) and its rows do not merge in the result, so the gradient
    reaches it through a copy either way; from ``permute_copy.MIN_BYTES`` up, where that
    copy runs in wide elements (runs of 8 float32: 32 bytes), the one-copy backward makes
    it (and the forward's copy).  float64 runs (64 bytes, no wide copy) and small results
    keep torch's own; the gradients are torch.einsum's either way.  (With 4 values of d the
    product runs as torch's does, ((b, d), c), and its result is transposed instead.)  The
    forward's layout broadcasts ``bca``, and ``(c, (b, d))`` is the one it trains as, inside
    recorded.Recorded: here that layout is the one chosen, and its ``mm``'s backward priced
    below ``bmm``'s (backward.as_bmm), so that autograd records its ops."""
    from einc.runtime.torch_executor import recorded
    from einc.runtime.torch_executor.permute_copy import MIN_BYTES
    monkeypatch.setattr(recorded, "as_bmm", lambda *args: False)
    monkeypatch.setattr(ttgt, "pick", lambda found: min(found, key=lambda lay: (bool(lay.broadcast), lay.cost)))
    eq, big, small = "bcda,bca->bcd", [(256, 1, 8, 16), (1, 500, 16)], [(8, 1, 8, 16), (1, 5, 16)]
    assert 8 * 5 * 8 * 4 < MIN_BYTES <= 256 * 500 * 8 * 4
    for shapes, dtype, relayout in [(big, torch.float32, True), (big, D, False), (small, torch.float32, False)]:
        g = torch.Generator().manual_seed(4)
        ops = [torch.randn(s, dtype=dtype, generator=g).requires_grad_() for s in shapes]
        out = einc.einsum(eq, *ops)
        assert ("_RelayoutBackward" in grad_fns(out)) == relayout, (shapes, dtype)
        gout = torch.randn(out.shape, dtype=dtype, generator=g)
        for x, y in zip(torch.autograd.grad(out, ops, gout), torch.autograd.grad(torch.einsum(eq, *ops), ops, gout)):
            torch.testing.assert_close(x, y)


class _Ops(TorchDispatchMode):
    """The aten ops run under it, with their tensor arguments' strides."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((func.overloadpacket.__name__, [a.stride() for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("equation,shapes", [
    ("...mk,mlk->...lm", [((4, 32, 64), (4096, 64, 1)), ((32, 32, 64), (2048, 64, 1))]),
    ("...ml,mkl->...km", [((4, 32, 32), (2048, 32, 1)), ((32, 64, 32), (2048, 32, 1))]),
], ids=["harmonics-1", "harmonics-2"])
def test_small_relayout_is_a_hook(equation, shapes):
    """torch-harmonics' vector SHT: ``bmm`` over ``m``, which is innermost in the result, of a
    strided slice.  Below ``permute_copy.MIN_BYTES`` the one-copy backward is a hook on the
    product, not a Function (whose ``apply``, forward and again backward, cost more than
    the copies): the forward's ops are the product and the result's one copy, the backward's
    the gradient's one copy into the product's order and the one ``bmm``, which reads it as
    row-major matrices; the result, and the gradient (batched, and under torch.func.grad), are
    torch.einsum's."""
    from einc.runtime.torch_executor.permute_copy import MIN_BYTES
    assert MIN_BYTES > 4 * 64 * 32 * 4
    g = torch.Generator().manual_seed(5)
    a, b = (torch.randn(shape[0] * stride[0], generator=g).as_strided(shape, stride) for shape, stride in shapes)
    a.requires_grad_()
    einc.einsum(equation, a, b)                 # (planned outside the log)
    with _Ops() as fwd:
        out = einc.einsum(equation, a, b)
    assert out.is_contiguous() and "_RelayoutBackward" not in grad_fns(out)
    assert [op for op, _ in fwd.ops if op not in ("permute", "view", "reshape")] == ["bmm", "clone"]
    gout = torch.randn(out.shape, generator=g)
    with _Ops() as bwd:
        (ga,) = torch.autograd.grad(out, a, gout)
    assert [op for op, _ in bwd.ops if op in ("clone", "copy_", "bmm")] == ["clone", "bmm"]
    (left, _), = [strides for op, strides in bwd.ops if op == "bmm"]
    assert left[-1] == 1
    a64 = a.detach().double().requires_grad_()
    ref = torch.einsum(equation, a64, b.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ga.double(), torch.autograd.grad(ref, a64, gout.double())[0], rtol=1e-5, atol=1e-5)
    (batched,) = torch.autograd.grad(einc.einsum(equation, a, b), a, torch.stack([gout, 2 * gout]),
                                     is_grads_batched=True)
    torch.testing.assert_close(batched[1], 2 * ga)
    by_func = torch.func.grad(lambda x: (einc.einsum(equation, x, b) * gout).sum())(a.detach())
    torch.testing.assert_close(by_func, ga)


def test_a_viewed_results_gradient_reaches_the_products_in_one_copy(monkeypatch):
    """With the result in any layout, ``ibnd,jbnd->ijbn`` returns its product ``(b n, i, j)``
    permuted, a view; the gradient, in ``ijbn``'s order, comes back through it as matrices
    with no unit-stride axis, which ``bmm`` would copy matrix by matrix in each product of
    its backward: a hook copies it once, and both products read it as it is.  (The step
    trains in the forward's layout, as autograd records it, not as ``Recorded``.)"""
    monkeypatch.setattr(training_layout, "for_training", lambda lay, *a, **k: lay)
    einc.cache_clear()
    a, b = leaves([(3, 2, 2, 4), (5, 2, 2, 4)], seed=4)
    out = einc.einsum("ibnd,jbnd->ijbn", a, b, layout="any")
    assert not out.is_contiguous()
    g = torch.randn(out.shape, dtype=D)
    with _Ops() as bwd:
        grads = torch.autograd.grad(out, (a, b), g)
    products = [strides for op, strides in bwd.ops if op == "bmm"]
    assert len(products) == 2 and all(s[-1] == 1 or s[-2] == 1 for strides in products for s in strides)
    ref = torch.einsum("ibnd,jbnd->ijbn", a, b)
    torch.testing.assert_close(out, ref)
    for x, y in zip(grads, torch.autograd.grad(ref, (a, b), g)):
        torch.testing.assert_close(x, y)
    einc.cache_clear()


def _spied_copies(monkeypatch):
    """The executor's permuted copies made from here on: a list their calls append to."""
    calls, real = [], tx._permuted_copy

    def spy(src, dst, sizes):
        copy = real(src, dst, sizes)

        def run(x):
            calls.append((tuple(src), tuple(dst)))
            return copy(x)
        return run
    monkeypatch.setattr(tx, "_permuted_copy", spy)
    return calls


def test_a_viewed_results_gradient_whose_groups_do_not_merge_is_copied_once(monkeypatch):
    """``abcd,ce->dbea`` with the result in any layout returns its product ``(a b, d, e)``
    permuted, a view, whose gradient in ``dbea``'s order does not merge ``a b``: the hook
    copies it once with the executor's permuted copy (the copy the training layout prices),
    which the reshape's backward then views, rather than leaving the copy to the reshape's
    backward (torch's copy, slower for this order).  Values and gradients are torch.einsum's."""
    monkeypatch.setattr(training_layout, "for_training", lambda lay, *a, **k: lay)
    calls = _spied_copies(monkeypatch)
    einc.cache_clear()
    a, b = leaves([(16, 16, 8, 16), (8, 16)], seed=5)
    out = einc.einsum("abcd,ce->dbea", a, b, layout="any")
    assert not out.is_contiguous() and calls == []
    g = torch.randn(out.shape, dtype=D)
    grads = torch.autograd.grad(out, (a, b), g)
    assert len(calls) == 1
    ref = torch.einsum("abcd,ce->dbea", a, b)
    torch.testing.assert_close(out, ref)
    for x, y in zip(grads, torch.autograd.grad(ref, (a, b), g)):
        torch.testing.assert_close(x, y)
    einc.cache_clear()


# Three operands whose first step, ``bced,dcba->cdea`` (summing ``b``), runs as the product
# ``(d c, e, a)``: the intermediate ``cdea`` is returned as its permuted view, the batch group
# ``d c`` not merging in ``cdea``'s order.
THREE = "bced,fca,dcba->dce"
THREE_SIZES = {"a": 16, "b": 24, "c": 12, "d": 12, "e": 8, "f": 24}


def _three(sizes, seed):
    return leaves([tuple(sizes[i] for i in t) for t in THREE.split("->")[0].split(",")], seed=seed)


@pytest.mark.parametrize("size", [0, 1, 2])
def test_three_operands_results_and_gradients(size):
    ops = _three(dict.fromkeys("abcdef", size), seed=6)
    out = einc.einsum(THREE, *ops)
    ref = torch.einsum(THREE, *ops)
    torch.testing.assert_close(out, ref)
    g = torch.randn(ref.shape, dtype=D)
    for x, y in zip(torch.autograd.grad(out, ops, g), torch.autograd.grad(ref, ops, g)):
        torch.testing.assert_close(x, y)


def test_a_permuted_intermediates_gradient_is_copied_once_by_the_executor(monkeypatch):
    """The intermediate of :data:`THREE`, a permuted view of its product, has its gradient
    copied into the product's order once, by the executor's permuted copy (a hook, as for a
    viewed result), not by the reshape's backward; results and gradients are torch.einsum's."""
    calls = _spied_copies(monkeypatch)
    einc.cache_clear()
    ops = _three(THREE_SIZES, seed=7)
    out = einc.einsum(THREE, *ops)
    viewed = ((1, 3, 2, 5), (3, 1, 2, 5))      # cdea -> dcea: b c e d f a numbered 0-5
    assert viewed not in calls
    g = torch.randn(out.shape, dtype=D)
    grads = torch.autograd.grad(out, ops, g)
    assert calls.count(viewed) == 1
    ref = torch.einsum(THREE, *ops)
    torch.testing.assert_close(out, ref)
    for x, y in zip(grads, torch.autograd.grad(ref, ops, g)):
        torch.testing.assert_close(x, y)
    einc.cache_clear()


def test_relayout_backward_is_contiguous_in_the_products_layout():
    x = torch.randn(2, 3, 4, dtype=D, requires_grad=True)       # natural (b, i, j)
    there = lambda t: t.permute(1, 2, 0).contiguous()           # noqa: E731 -> (i, j, b)
    back = lambda t: t.permute(2, 0, 1).contiguous()            # noqa: E731
    y = tx._Relayout.apply(x, there, back)
    torch.testing.assert_close(y, x.permute(1, 2, 0))
    g = torch.randn(3, 4, 2, dtype=D).transpose(0, 1).contiguous().transpose(0, 1)  # non-contiguous
    (gx,) = torch.autograd.grad(y, x, g)
    assert gx.is_contiguous()
    torch.testing.assert_close(gx, g.permute(2, 0, 1))


def test_strided_matrices():
    s = {"b": 2, "i": 3, "j": 4, "n": 5, "o": 1}
    assert not tx._strided_matrices(list("ibj"), [["b"], ["i"], ["j"]], s)     # row-major matrices
    assert tx._strided_matrices(list("ijb"), [["b"], ["i"], ["j"]], s)         # batch innermost
    assert not tx._strided_matrices(list("ibjn"), [["b"], ["i", "j"], ["n"]], s)  # rows do not merge
    assert tx._strided_matrices(list("ijob"), [["b"], ["i", "o"], ["j"]], s)   # size-1 indices merge
    assert not tx._strided_matrices(list("bij"), [["b"], ["i"], ["o", "j"]], s)


def test_operand_with_batch_innermost_is_copied_once_where_a_gradient_is_taken():
    """``ikc``'s (c, i, k) matrices have no unit stride: with a gradient to take, the
    backward (recorded.Recorded's) copies the operand once into a contiguous stack, which
    its products read as it is; the forward, recorded or not, gives the view to ``bmm``."""
    sizes = {"i": 4, "k": 3, "c": 2, "j": 5}
    a = torch.randn(4, 3, 2, dtype=D)
    view, stacked = tx._layout(list("ikc"), [["c"], ["i"], ["k"]], (2, 4, 3), sizes)
    assert view(a).data_ptr() == a.data_ptr()
    y = stacked(a)
    assert y.is_contiguous() and y.data_ptr() != a.data_ptr()
    torch.testing.assert_close(y, a.permute(2, 0, 1))
    # (c, k, j) from jkc: copied as the 2-D transpose (c, j, k), read transposed
    b = torch.randn(5, 3, 2, dtype=D)
    _, stacked = tx._layout(list("jkc"), [["c"], ["k"], ["j"]], (2, 3, 5), sizes)
    y = stacked(b)
    assert y.data_ptr() != b.data_ptr() and y.stride()[-2] == 1
    torch.testing.assert_close(y, b.permute(2, 1, 0))
    # a (c, i, k) view whose i has unit stride: as it is
    _, stacked = tx._layout(list("kci"), [["c"], ["i"], ["k"]], (2, 4, 3), sizes)
    x = torch.randn(3, 2, 4, dtype=D)
    assert stacked(x).data_ptr() == x.data_ptr()
    # nothing permuted: no stacked variant
    assert tx._layout(list("cik"), [["c"], ["i"], ["k"]], (2, 4, 3), sizes)[1] is None


def test_forward_mode_through_relayout():
    import torch.autograd.forward_ad as fwAD
    a, b = leaves([(3, 2, 2, 4), (5, 2, 2, 4)], seed=3)
    ta = torch.randn(3, 2, 2, 4, dtype=D)
    with fwAD.dual_level():
        out = einc.einsum("ibnd,jbnd->ijbn", fwAD.make_dual(a, ta), b)
        tangent = fwAD.unpack_dual(out).tangent
    torch.testing.assert_close(tangent, torch.einsum("ibnd,jbnd->ijbn", ta, b.detach()))


def test_vmap_and_grad_of_relayout_equations():
    a, b = (t.detach() for t in leaves([(4, 3, 2), (5, 3, 2)], seed=4))
    batched = torch.func.vmap(lambda x: einc.einsum("ikc,jkc->ijc", x, b))(torch.stack([a, 2 * a]))
    torch.testing.assert_close(batched[1], 2 * torch.einsum("ikc,jkc->ijc", a, b))
    ga = torch.func.grad(lambda x: einc.einsum("ikc,jkc->ijc", x, b).pow(2).sum())(a)
    a2 = a.clone().requires_grad_()
    (want,) = torch.autograd.grad(torch.einsum("ikc,jkc->ijc", a2, b).pow(2).sum(), a2)
    torch.testing.assert_close(ga, want)


def test_operand_batch_spares_the_copy_of_a_large_operand():
    """``qQ,Pqrs->QPrs``: ``Pqrs`` does not read as (q, Prs) through views, but as a stack
    over P of (q, rs) matrices it does; ``qQ`` (small) is broadcast over P instead, and
    the result (P, Q, rs) needs only the copy into ``QPrs``."""
    q, Q, P, r, s = range(5)
    sizes = [40, 10, 10, 40, 40]
    lay = ttgt.choose([q, Q], [P, q, r, s], [Q, P, r, s], sizes, tx._COPY_WORTH_SPARING)
    assert lay.batch == (P,) and lay.k == (q,) and "l" not in lay.copies and "r" not in lay.copies


@pytest.mark.parametrize("equation,shapes", [
    ("qQ,Pqrs->QPrs", [(4, 3), (2, 4, 3, 2)]),
    ("pP,qQ,rR,sS,pqrs->PQRS", [(3, 2), (3, 2), (3, 4), (3, 4), (3, 3, 3, 3)]),
    ("pP,qQ,pqX->PQX", [(4, 2), (4, 3), (4, 4, 6)]),
], ids=["one step", "ao2mo", "df_3index"])
def test_operand_batch_results_and_gradients(equation, shapes, monkeypatch):
    einc.cache_clear()
    # at these sizes the model copies instead: take the cheapest layout that broadcasts an
    # operand over an index of the other's own moved into the batch, where there is one
    monkeypatch.setattr(ttgt, "SMALL", 0)                       # small steps weigh such layouts too
    used = []
    monkeypatch.setattr(ttgt, "pick",
                        lambda found: used.append(min(found, key=lambda lay: (not lay.broadcast, lay.cost)))
                        or used[-1])
    ops = leaves(shapes, seed=5)
    out = einc.einsum(equation, *ops)
    assert any(lay.broadcast for lay in used)
    ref = torch.einsum(equation, *ops)
    assert out.is_contiguous()
    torch.testing.assert_close(out, ref)
    g = torch.randn(ref.shape, dtype=D)
    for x, y in zip(torch.autograd.grad(out, ops, g), torch.autograd.grad(ref, ops, g)):
        torch.testing.assert_close(x, y)
    f = lambda *x: einc.einsum(equation, *x)  # noqa: E731
    assert torch.autograd.gradcheck(f, ops) and torch.autograd.gradgradcheck(f, ops)
    with torch.no_grad():
        torch.testing.assert_close(einc.einsum(equation, *ops), ref)
    einc.cache_clear()


def test_no_grad_mode_keeps_the_forward_layout(monkeypatch):
    """Operands that require grad under ``torch.no_grad()``: nothing is recorded, no stack
    copy; with grad mode on, the same forward (the same bits) inside recorded.Recorded, whose
    backward makes the stack copies."""
    copies = []
    real = tx._stack_copy
    monkeypatch.setattr(tx, "_stack_copy", lambda *a: (lambda f: lambda x: copies.append(1) or f(x))(real(*a)))
    einc.cache_clear()
    a, b = leaves([(4, 3, 2), (5, 3, 2)], seed=6)
    with torch.no_grad():
        out = einc.einsum("ikc,jkc->ijc", a, b)
    assert not copies and out.grad_fn is None
    torch.testing.assert_close(out, torch.einsum("ikc,jkc->ijc", a.detach(), b.detach()))
    tracked = einc.einsum("ikc,jkc->ijc", a, b)
    assert not copies and torch.equal(tracked.detach(), out) and "RecordedBackward" in grad_fns(tracked)
    tracked.sum().backward()
    assert copies                                   # the backward's stack copies
    einc.cache_clear()


def test_what_only_a_gradient_runs_is_built_when_one_is_taken(monkeypatch):
    """The stack copies and a broadcast operand's training layout are made on the first
    call that records a gradient (the stack copies by its backward), not when the steps are
    built: a first call without one builds none of them; the call with one then gives
    torch's answer and gradients."""
    made = []
    real_stack, real_matmul = tx._stack_copy, tx._matmul
    monkeypatch.setattr(tx, "_stack_copy", lambda *a: made.append("stack") or real_stack(*a))
    monkeypatch.setattr(tx, "_matmul", lambda *a: made.append("matmul") or real_matmul(*a))
    einc.cache_clear()
    a, b = leaves([(4, 3, 2), (5, 3, 2)], seed=7)
    with torch.no_grad():
        out = einc.einsum("ikc,jkc->ijc", a, b)
    assert made == ["matmul"]                       # the forward's product only
    torch.testing.assert_close(out, torch.einsum("ikc,jkc->ijc", a.detach(), b.detach()))
    out = einc.einsum("ikc,jkc->ijc", a, b)
    ref = torch.einsum("ikc,jkc->ijc", a, b)
    torch.testing.assert_close(out, ref)
    g = torch.randn(ref.shape, dtype=D)
    for x, y in zip(torch.autograd.grad(out, (a, b), g), torch.autograd.grad(ref, (a, b), g)):
        torch.testing.assert_close(x, y)
    assert "stack" in made                          # made by the backward
    einc.cache_clear()
    # a broadcast operand's product (qQ over P): its training layout's product made on first use
    # (its partial gradients made dear, so that the training layout repays its Recorded step)
    monkeypatch.setattr(ttgt, "SMALL", 0)
    monkeypatch.setattr(ttgt, "GRAD_PARTIAL", 1e9)
    monkeypatch.setattr(ttgt, "pick", lambda found: min(found, key=lambda lay: (not lay.broadcast, lay.cost)))
    made.clear()
    a, b = leaves([(4, 3), (2, 4, 3, 2)], seed=8)
    with torch.no_grad():
        einc.einsum("qQ,Pqrs->QPrs", a, b)
    assert made.count("matmul") == 1
    out = einc.einsum("qQ,Pqrs->QPrs", a, b)
    assert made.count("matmul") == 2
    ref = torch.einsum("qQ,Pqrs->QPrs", a, b)
    g = torch.randn(ref.shape, dtype=D)
    for x, y in zip(torch.autograd.grad(out, (a, b), g), torch.autograd.grad(ref, (a, b), g)):
        torch.testing.assert_close(x, y)
    einc.cache_clear()


def test_the_training_layout_is_weighed_when_a_gradient_is_taken(monkeypatch):
    """A weighed step's training layout (``training_layout.for_training``) is weighed by the first
    call that records a gradient, once, not when the steps are built; where it is another
    layout, that call trains as it (recorded.Recorded: the forward's ops, so its bits) and
    gives torch's answer and gradients."""
    monkeypatch.setattr(ttgt, "SMALL", 0)                       # small steps are weighed too
    monkeypatch.setattr(ttgt, "GRAD_PARTIAL", 1e9)              # a broadcast operand's gradient: dearer
    monkeypatch.setattr(ttgt, "pick", lambda found: min(found, key=lambda lay: (not lay.broadcast, lay.cost)))
    weighed, real = [], training_layout.for_training
    monkeypatch.setattr(training_layout, "for_training", lambda lay, *a, **k: weighed.append((lay, real(lay, *a, **k)))
                        or weighed[-1][1])
    einc.cache_clear()
    a, b = leaves([(4, 3), (2, 4, 3, 2)], seed=9)
    with torch.no_grad():
        out = einc.einsum("qQ,Pqrs->QPrs", a, b)
    assert weighed == []
    torch.testing.assert_close(out, torch.einsum("qQ,Pqrs->QPrs", a.detach(), b.detach()))
    out = einc.einsum("qQ,Pqrs->QPrs", a, b)
    assert len(weighed) == 1 and weighed[0][0].broadcast and not weighed[0][1].broadcast    # another layout
    out2 = einc.einsum("qQ,Pqrs->QPrs", a, b)
    assert len(weighed) == 1
    g = torch.randn(out.shape, dtype=D)
    for got in (out, out2):
        ref = torch.einsum("qQ,Pqrs->QPrs", a, b)
        torch.testing.assert_close(got, ref)
        for x, y in zip(torch.autograd.grad(got, (a, b), g), torch.autograd.grad(ref, (a, b), g)):
            torch.testing.assert_close(x, y)
    einc.cache_clear()


def test_autograd_functions_carry_their_signature(monkeypatch):
    """torch binds each apply's arguments to forward's signature (setup_context is
    defined): the signature is built once, not on every call, for both einc Functions."""
    import inspect

    from einc.autograd import EinsumFunction
    built = []
    real = inspect._signature_from_function
    monkeypatch.setattr(inspect, "_signature_from_function", lambda *a, **k: built.append(a) or real(*a, **k))
    x = torch.randn(4, 8, requires_grad=True)
    y = tx._Relayout.apply(x, lambda t: t.t().contiguous(), lambda t: t.t().contiguous())
    assert torch.equal(y, x.t())
    assert not [a for a in built if getattr(a[1], "__qualname__", "").startswith("_Relayout")]
    assert inspect.signature(EinsumFunction.forward) is EinsumFunction.forward.__signature__
