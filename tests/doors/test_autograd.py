"""Autograd: gradcheck, gradgradcheck, strided inputs, non-contiguous grad_outputs, forward
mode -- through torch's own autograd where a plan runs only torch ops (CPU tensors), and
through einc.autograd.EinsumFunction, whose gradients are einc einsums, where generated
kernels run (and directly, on every equation of the family)."""

import pytest
import torch
from oracle import reference

import einc

D = torch.float64
# torch's forward-AD module scripts a helper on first import; not einc's warning.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")

# (equation, shapes): repeated indices, ellipsis, broadcasting, lonely summed indices,
# 0-d operands, permuted outputs, 3+ operands.
FAMILY = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ii->i", [(3, 3)]),
    ("ii->", [(3, 3)]),
    ("iij->ji", [(3, 3, 2)]),
    ("iii->i", [(2, 2, 2)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("bij,bjk->kib", [(2, 3, 4), (2, 4, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("ij,j->ij", [(2, 1), (3,)]),
    (",ij->ij", [(), (2, 3)]),
    ("i,->", [(4,), ()]),
    ("->", [()]),
    ("bi,oij,bj->bo", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ab,bc,cd,de->ea", [(2, 3), (3, 4), (4, 2), (2, 3)]),
    ("ij,jk,kk->ik", [(2, 3), (3, 4), (4, 4)]),
    ("iaj,jb->ib", [(3, 2, 4), (4, 2)]),
    ("i,i,i->i", [(5,), (5,), (5,)]),
    ("ij,jk->ik", [(3, 0), (0, 2)]),
    ("bqhd,bkhd->bhqk", [(2, 3, 2, 4), (2, 5, 2, 4)]),
    ("...ij,...jk", [(2, 3, 4), (4, 2)]),          # implicit output
]
IDS = [f"{e}:{s}" for e, s in FAMILY]


def _inputs(shapes, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, dtype=D, generator=g).to(device).requires_grad_() for s in shapes]


@pytest.mark.parametrize("equation,shapes", FAMILY, ids=IDS)
def test_gradcheck(equation, shapes):
    ops = _inputs(shapes)
    assert torch.autograd.gradcheck(lambda *x: einc.einsum(equation, *x), ops)


@pytest.mark.parametrize("equation,shapes", FAMILY, ids=IDS)
def test_gradcheck_of_the_function(equation, shapes):
    """The Function's derivative rules (used where kernels run), applied directly."""
    from einc.autograd import Call, EinsumFunction
    from einc.planner.equation import parse
    from einc.planner.options import Options
    call = Call(parse(equation), Options.of())
    ops = _inputs(shapes)
    assert torch.autograd.gradcheck(lambda *x: EinsumFunction.apply(call, *x), ops)
    assert torch.autograd.gradgradcheck(lambda *x: EinsumFunction.apply(call, *x), ops)


@pytest.mark.parametrize("equation,shapes", FAMILY, ids=IDS)
def test_vmap_matches_a_loop(equation, shapes):
    """torch.func.vmap over a new leading dimension of every operand: each slice as einsum alone."""
    g = torch.Generator().manual_seed(1)
    ops = [torch.randn((3,) + tuple(s), dtype=D, generator=g) for s in shapes]
    out = torch.func.vmap(lambda *x: einc.einsum(equation, *x))(*ops)
    expected = torch.stack([reference(equation, *[o[b] for o in ops]) for b in range(3)])
    torch.testing.assert_close(out, expected)


def test_torch_ops_differentiate_themselves_on_the_torch_executor():
    """CPU tensors: the plan's torch ops are recorded by autograd (no Function), and the
    gradients are torch.einsum's."""
    a, b = _inputs([(3, 4), (4, 5)], seed=7)
    out = einc.einsum("ij,jk->ik", a, b)
    assert out.grad_fn is not None and out.grad_fn.name() != "EinsumFunctionBackward"
    g = torch.randn(3, 5, dtype=D)
    got = torch.autograd.grad(out, (a, b), g)
    want = torch.autograd.grad(torch.einsum("ij,jk->ik", a, b), (a, b), g)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("equation,shapes", FAMILY, ids=IDS)
def test_gradgradcheck(equation, shapes):
    ops = _inputs(shapes, seed=1)
    assert torch.autograd.gradgradcheck(lambda *x: einc.einsum(equation, *x), ops)


# Layouts applied inside the checked function, so einc sees the strided view.
def _transposed(shape):
    base = torch.randn(tuple(reversed(shape)), dtype=D, requires_grad=True)
    return base, lambda b: b.permute(*reversed(range(b.dim())))


def _sliced(shape):
    base = torch.randn(tuple(2 * s for s in shape), dtype=D, requires_grad=True)
    return base, lambda b: b[tuple(slice(None, None, 2) for _ in shape)]


def _expanded(shape):
    small = tuple(1 if k % 2 == 0 else s for k, s in enumerate(shape))
    base = torch.randn(small, dtype=D, requires_grad=True)
    return base, lambda b: b.expand(shape)


LAYOUTS = {"transposed": _transposed, "sliced": _sliced, "expanded": _expanded}
STRIDED = [fs for fs in FAMILY if all(len(s) >= 1 for s in fs[1]) and 0 not in sum(fs[1], ())]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("equation,shapes", STRIDED, ids=[f"{e}:{s}" for e, s in STRIDED])
def test_gradcheck_strided_inputs(equation, shapes, layout):
    made = [LAYOUTS[layout](s) for s in shapes]
    bases = [b for b, _ in made]
    views = [v for _, v in made]

    def f(*xs):
        return einc.einsum(equation, *[v(x) for v, x in zip(views, xs)])
    if any(sum(d > 1 for d in s) >= 2 for s in shapes):
        assert any(not v(b).is_contiguous() for v, b in zip(views, bases))
    assert torch.autograd.gradcheck(f, bases)


@pytest.mark.parametrize("kind", ["expanded", "transposed", "sliced"])
def test_noncontiguous_grad_outputs(kind):
    a, b, c = _inputs([(3, 4), (4, 5, 2), (2, 6)], seed=2)
    out = einc.einsum("ij,jkl,lm->mki", a, b, c)          # (6, 5, 3)
    if kind == "expanded":
        g = torch.randn(1, 5, 1, dtype=D).expand(6, 5, 3)
    elif kind == "transposed":
        g = torch.randn(3, 5, 6, dtype=D).permute(2, 1, 0)
    else:
        g = torch.randn(6, 10, 3, dtype=D)[:, ::2]
    assert not g.is_contiguous()
    got = torch.autograd.grad(out, (a, b, c), g)
    ref_ops = [x.detach().clone().requires_grad_() for x in (a, b, c)]
    want = torch.autograd.grad(torch.einsum("ij,jkl,lm->mki", *ref_ops), ref_ops, g)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)


def test_sum_backward_gives_expanded_grad_output():
    a, b = _inputs([(3, 4), (4, 5)], seed=3)
    einc.einsum("ij,jk->ik", a, b).sum().backward()      # grad_output: a 0-stride expand
    torch.testing.assert_close(a.grad, b.detach().sum(1).expand(3, 4))
    torch.testing.assert_close(b.grad, a.detach().sum(0)[:, None].expand(4, 5))


@pytest.mark.kernels
def test_gradients_run_through_einc(calls, kernel_device):
    a, b, c = _inputs([(2, 3), (3, 4), (4, 5)], device=kernel_device)
    out = einc.einsum("ij,jk,kl->il", a, b, c)
    assert out.grad_fn.name() == "EinsumFunctionBackward"
    calls.clear()
    out.backward(torch.ones_like(out))
    # One einsum per operand gradient: the output's gradient with the other operands.
    assert sorted(calls) == sorted(["ad,bc,cd->ab", "ad,ab,cd->bc", "ad,ab,bc->cd"])


@pytest.mark.kernels
def test_gradient_plans_are_cached(kernel_device):
    a, b = _inputs([(3, 4), (4, 5)], seed=4, device=kernel_device)
    einc.einsum("ij,jk->ik", a, b).sum().backward()
    before = einc.cache_info().plans
    a.grad = b.grad = None
    einc.einsum("ij,jk->ik", a, b).sum().backward()
    after = einc.cache_info().plans
    assert after.misses == before.misses
    assert after.hits >= before.hits + 3


def test_no_grad_path_unchanged():
    a, b = _inputs([(3, 4), (4, 5)], seed=5)
    with torch.no_grad():
        out = einc.einsum("ij,jk->ik", a, b)
    assert out.grad_fn is None and not out.requires_grad
    out = einc.einsum("ij,jk->ik", a.detach(), b.detach())
    assert out.grad_fn is None


@pytest.mark.kernels
def test_only_needed_gradients_are_computed(calls, kernel_device):
    a = torch.randn(3, 4, dtype=D, device=kernel_device, requires_grad=True)
    b = torch.randn(4, 5, dtype=D, device=kernel_device)
    out = einc.einsum("ij,jk->ik", a, b)
    calls.clear()
    out.sum().backward()
    assert len(calls) == 1 and b.grad is None


def test_complex_gradcheck():
    g = torch.Generator().manual_seed(6)
    ops = [torch.randn(s, dtype=torch.complex128, generator=g, requires_grad=True) for s in [(3, 4), (4, 2)]]
    assert torch.autograd.gradcheck(lambda a, b: einc.einsum("ij,jk->ki", a, b), ops)
    assert torch.autograd.gradgradcheck(lambda a, b: einc.einsum("ij,jk->ki", a, b), ops)


def test_mixed_dtype_product_gradients():
    a = torch.randn(3, dtype=torch.float32, requires_grad=True)
    b = torch.randn(4, dtype=D, requires_grad=True)
    out = einc.einsum("i,j->ij", a, b)
    assert out.dtype == D
    ga, gb = torch.autograd.grad(out.sum(), (a, b))
    assert ga.dtype == torch.float32 and gb.dtype == D
    torch.testing.assert_close(ga, b.detach().sum().float().expand(3))
    torch.testing.assert_close(gb, a.detach().sum().double().expand(4))


def test_double_backward_of_gradient_graph():
    a, b = _inputs([(3, 4), (4, 3)], seed=7)
    out = einc.einsum("ij,ji->", a, b)
    (ga,) = torch.autograd.grad(out, a, create_graph=True)
    assert ga.requires_grad
    (gb,) = torch.autograd.grad(ga.pow(2).sum(), b)
    torch.testing.assert_close(gb, 2 * b.detach())        # ga = b^T, d/db sum(b^T^2) = 2b


def test_forward_mode_dual_tensors():
    import torch.autograd.forward_ad as fwAD
    a, b, c = _inputs([(2, 3), (3, 4), (4,)], seed=8)
    ta, tc = torch.randn(2, 3, dtype=D), torch.randn(4, dtype=D)
    with fwAD.dual_level():
        out = einc.einsum("ij,jk,k->ki", fwAD.make_dual(a, ta), b, fwAD.make_dual(c, tc))
        tangent = fwAD.unpack_dual(out).tangent
    want = torch.einsum("ij,jk,k->ki", ta, b.detach(), c.detach()) + \
        torch.einsum("ij,jk,k->ki", a.detach(), b.detach(), tc)
    torch.testing.assert_close(tangent, want)


@pytest.mark.parametrize("equation,shapes", [fs for fs in FAMILY if 0 not in sum(fs[1], ())][::3],
                         ids=IDS[:-1][::3])
def test_jvp_matches_torch(equation, shapes):
    ops = [x.detach() for x in _inputs(shapes, seed=9)]
    tangents = [torch.randn_like(x) for x in ops]
    out, t = torch.func.jvp(lambda *x: einc.einsum(equation, *x), tuple(ops), tuple(tangents))
    want_out, want_t = torch.func.jvp(lambda *x: reference(equation, *x), tuple(ops), tuple(tangents))
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(t, want_t)


def test_explicit_path_is_not_reused_for_gradients():
    a, b, c = _inputs([(2, 3), (3, 4), (4, 5)], seed=10)
    out = einc.einsum("ij,jk,kl->il", a, b, c, optimize=[(1, 2), (0, 1)])
    out.sum().backward()
    torch.testing.assert_close(a.grad, (b @ c).detach().sum(1).expand(2, 3))


def test_a_random_optimizer_instance_is_not_reused_for_gradients():
    """opt_einsum's RandomGreedy answers for the one contraction it is first called with
    (it raises for any other); the gradient einsums plan with "auto", backward and
    torch.func.grad alike, and the instance keeps the forward's search."""
    import opt_einsum
    a, b, c = _inputs([(2, 3), (3, 4), (4, 5)], seed=12)
    optimizer = opt_einsum.RandomGreedy(max_repeats=4)
    einc.einsum("ij,jk,kl->il", a, b, c, optimize=optimizer).sum().backward()
    want = (b @ c).detach().sum(1).expand(2, 3)
    torch.testing.assert_close(a.grad, want)
    assert optimizer.best["flops"] < float("inf") and len(optimizer.costs) == 4
    fresh = opt_einsum.RandomGreedy(max_repeats=4)
    g = torch.func.grad(lambda x: einc.einsum("ij,jk,kl->il", x, b, c, optimize=fresh).sum())(a.detach())
    torch.testing.assert_close(g, want)
    # and vmap's batched equation, after a plain call and before one (it raised either way)
    f = lambda x: einc.einsum("ij,jk,kl->il", x, b.detach(), c.detach(), optimize=optimizer)  # noqa: E731
    xs = torch.randn(3, 2, 3, dtype=a.dtype)
    torch.testing.assert_close(torch.func.vmap(f)(xs), torch.stack([f(x) for x in xs]))
    torch.testing.assert_close(f(a.detach()), a.detach() @ b.detach() @ c.detach())


def test_sublists_with_large_indices():
    a, b = _inputs([(3, 4), (4, 2)], seed=11)
    f = lambda a, b: einc.einsum(a, [100, 260], b, [260, 7000], [7000, 100])     # noqa: E731
    assert torch.autograd.gradcheck(f, (a, b))
    assert torch.autograd.gradgradcheck(f, (a, b))


@pytest.fixture(params=["torch", "kernels"])
def derivative_device(request):
    """Both executors: the torch executor's ops carry derivatives themselves; generated
    kernels (CUDA's default; Triton's interpreter here) need einc's Function."""
    if request.param == "kernels":
        return request.getfixturevalue("kernel_device")
    einc.cache_clear()
    return torch.device("cpu")


def test_a_dual_tensor_that_does_not_require_grad_keeps_its_tangent(derivative_device):
    """Forward AD: a dual operand need not require grad; its tangent is kept where kernels run
    the call too (dropped, it would make jacobian(strategy="forward-mode") all zeros)."""
    import torch.autograd.forward_ad as fwAD
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, dtype=torch.float64, generator=g).to(derivative_device) for s in [(2, 3), (3, 4)])
    t = torch.randn(2, 3, dtype=torch.float64, generator=g).to(derivative_device)
    with fwAD.dual_level():
        got = fwAD.unpack_dual(einc.einsum("ij,jk->ik", fwAD.make_dual(a, t), b)).tangent
        want = fwAD.unpack_dual(torch.einsum("ij,jk->ik", fwAD.make_dual(a, t), b)).tangent
        assert got is not None
        torch.testing.assert_close(got, want)
        empty = fwAD.make_dual(torch.zeros(2, 0, dtype=torch.float64), torch.zeros(2, 0, dtype=torch.float64))
        zero = fwAD.unpack_dual(einc.einsum("ij,jk->ik", empty, torch.zeros(0, 3, dtype=torch.float64))).tangent
        assert zero is not None and torch.equal(zero, torch.zeros(2, 3, dtype=torch.float64))   # a sum over nothing
    for eq, x, y in [("ij,jk->ik", a, b), ("ii->i", a[:, :2], None)]:
        fn = (lambda f: (lambda x: f(eq, x, y))) if y is not None else (lambda f: (lambda x: f(eq, x)))
        got = torch.autograd.functional.jacobian(fn(einc.einsum), x, vectorize=True, strategy="forward-mode")
        torch.testing.assert_close(got, torch.autograd.functional.jacobian(fn(torch.einsum), x, vectorize=True,
                                                                           strategy="forward-mode"))


def test_batched_gradients_of_a_sliced_contraction():
    """is_grads_batched (jacobian(vectorize=True), gradcheck's batched check) on a sliced
    plan: its in-place adds into the result could not take the batch."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, dtype=torch.float64, generator=g, requires_grad=True) for s in [(4, 6), (6, 4)])
    v = torch.randn(3, 4, 4, dtype=torch.float64, generator=g)
    got = torch.autograd.grad(einc.einsum("ij,jk->ik", a, b, memory_limit=4), (a, b), v, is_grads_batched=True)
    want = torch.autograd.grad(torch.einsum("ij,jk->ik", a, b), (a, b), v, is_grads_batched=True)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
    assert torch.autograd.gradcheck(lambda x, y: einc.einsum("ij,jk->ik", x, y, memory_limit=4), (a, b),
                                    check_batched_grad=True)


def test_the_function_saves_only_what_a_gradient_reads(derivative_device):
    """An inference tensor beside one that requires grad, and a second backward of a sum
    (nothing saved), work as with torch.einsum where kernels run the call too: the function
    saves only what a gradient reads (saving every operand makes both raise)."""
    with torch.inference_mode():
        a = torch.randn(2, 3, dtype=torch.float64).to(derivative_device)
    b = torch.randn(1, dtype=torch.float64, device=derivative_device, requires_grad=True)    # j broadcast:
    einc.einsum("ij,j->i", a, b).sum().backward()           # torch.einsum saves a's sum, not a, and allows it
    torch.testing.assert_close(b.grad, a.sum().reshape(1))
    x = torch.randn(3, 3, dtype=torch.float64, device=derivative_device, requires_grad=True)
    for eq, once in (("ii->", torch.eye(3)), ("ij->j", torch.ones(3, 3)), ("ii->i", torch.eye(3))):
        x.grad = None
        out = einc.einsum(eq, x).sum()
        out.backward()
        out.backward()                  # nothing saved: torch allows it, so does einc
        torch.testing.assert_close(x.grad.cpu(), 2 * once.double())


@pytest.mark.parametrize("eq, shapes, dtype", [
    ("ij,ij->i", [(8, 64), (8, 64)], torch.bfloat16),               # a 16-bit multiply and sum (Summed)
    ("bij,cjk->bcik", [(8, 32, 64), (8, 64, 32)], torch.float32),   # a product autograd records (Recorded)
    # the forward's broadcast layout, which autograd records as it runs: an inference operand copied
    ("bij,cjk->bcik", [(4, 32, 64), (5, 64, 32)], torch.float32),
    ("abk,kj->jba", [(64, 64, 32), (32, 1100)], torch.float32),     # in blocks
])
def test_a_steps_backward_saves_only_the_operand_a_needed_gradient_reads(eq, shapes, dtype):
    """w's gradient reads x alone: w updated in place after the call, or x made under
    inference_mode, is no error, as with torch.einsum (both steps saved both operands)."""
    g = torch.Generator().manual_seed(2)
    w0, x = (torch.randn(s, generator=g).to(dtype) for s in shapes)
    w = w0.clone().requires_grad_()
    y = einc.einsum(eq, w, x)
    with torch.no_grad():
        w.add_(1.0)
    y.float().sum().backward()
    w64 = w0.double().requires_grad_()
    torch.einsum(eq, w64, x.double()).sum().backward()
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=2e-2, atol=2e-2)
    with torch.inference_mode():
        frozen = x.clone()
    v = w0.clone().requires_grad_()
    einc.einsum(eq, v, frozen).float().sum().backward()
    torch.testing.assert_close(v.grad, w.grad)


def test_a_second_order_through_a_step_that_saved_one_operand(monkeypatch):
    # a's gradient, recorded (create_graph), differentiated again for b: the step saved b alone
    from einc.runtime.torch_executor import recorded
    ran, forward = [], recorded.Recorded.forward
    monkeypatch.setattr(recorded.Recorded, "forward", staticmethod(lambda *a: ran.append(1) or forward(*a)))
    g = torch.Generator().manual_seed(4)
    # (a training layout of its own, whose saving repays a Recorded step: backward.RECORDED)
    a0 = torch.randn(8, 32, 64, dtype=torch.float64, generator=g)
    b0 = torch.randn(8, 64, 32, dtype=torch.float64, generator=g)
    found = []
    for einsum in (einc.einsum, torch.einsum):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        (ga,) = torch.autograd.grad(einsum("bij,cjk->bcik", a, b.detach()).square().sum(), a, create_graph=True)
        (gb,) = torch.autograd.grad((ga * a0).sum(), a)
        found.append((ga.detach(), gb))
    assert ran
    for got, want in zip(*found):
        torch.testing.assert_close(got, want)


def test_batched_gradients_through_the_multiply_and_sum_and_the_relayout():
    # torch.autograd's legacy batching (is_grads_batched, vectorized jacobians) has no rule
    # for einsum (the multiply and sum's gradient) nor the permuted copy's tiles: both raised
    from torch.autograd.functional import jacobian
    g = torch.Generator().manual_seed(6)
    a, b = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((8, 256, 256), (256, 256)))
    for einsum in (einc.einsum, torch.einsum):
        got = jacobian(lambda x, y: einsum("bij,ij->b", x, y), (a, b), vectorize=True)
        if einsum is einc.einsum:
            found = got
    for x, y in zip(found, got):
        torch.testing.assert_close(x, y)
    x, w = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((16, 128, 64), (16, 64, 128)))
    v = torch.randn(2, 128, 128, 16, generator=g, dtype=torch.float64)
    grads = []
    for einsum in (einc.einsum, torch.einsum):
        leaves = [x.clone().requires_grad_(), w.clone().requires_grad_()]
        grads.append(torch.autograd.grad(einsum("bik,bkj->jib", *leaves), leaves, v, is_grads_batched=True))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


# Through torch's own ops (a size class, a shape's plan, a permuted last copy) and through
# the Function (a sliced plan: memory_limit), whichever the call takes.
_MACHINERY = [("ab,bc,cd->da", [(2, 3), (3, 4), (4, 2)], {}), ("bij,bjk->kib", [(2, 3, 4), (2, 4, 3)], {}),
              ("ij,jk->ik", [(3, 4), (4, 5)], {"memory_limit": 4}), ("ii->i", [(3, 3)], {})]


@pytest.mark.parametrize("equation,shapes,kw", _MACHINERY, ids=[e for e, _, _ in _MACHINERY])
def test_checkpoint_reentrant_or_not_and_saved_tensor_hooks_give_torchs_gradients(equation, shapes, kw):
    ops = _inputs(shapes)
    weight = torch.randn(reference(equation, *ops).shape, dtype=D)
    expected = torch.autograd.grad((reference(equation, *ops) * weight).sum(), ops)

    def loss(*xs):
        return (einc.einsum(equation, *xs, **kw) * weight).sum()

    def grads(run):
        xs = [o.detach().clone().requires_grad_() for o in ops]
        run(xs).backward()          # (a reentrant checkpoint refuses torch.autograd.grad)
        return [x.grad for x in xs]

    runs = [lambda xs: torch.utils.checkpoint.checkpoint(loss, *xs, use_reentrant=True),
            lambda xs: torch.utils.checkpoint.checkpoint(loss, *xs, use_reentrant=False)]
    for pack in (lambda t: t.clone(), lambda t: t.mT.contiguous().mT if t.dim() > 1 else t.clone()):
        def hooked(xs, pack=pack):
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                return loss(*xs)
        runs.append(hooked)
    for run in runs + [lambda xs: _on_cpu(loss, xs)]:
        for got, want in zip(grads(run), expected):
            torch.testing.assert_close(got, want)


def _on_cpu(loss, xs):
    with torch.autograd.graph.save_on_cpu():
        return loss(*xs)


@pytest.mark.parametrize("equation,shapes,kw", _MACHINERY, ids=[e for e, _, _ in _MACHINERY])
def test_an_operand_updated_in_place_after_the_call_raises_at_backward_as_torchs(equation, shapes, kw):
    """Never a gradient of the new values: where einc's backward reads an operand changed since
    the call, torch's version check raises, as it does for torch.einsum; else the gradient is
    the one of the values the call saw."""
    for k in range(len(shapes)):
        leaves = _inputs(shapes)
        outcomes = []
        for run in (lambda *xs: einc.einsum(equation, *xs, **kw), lambda *xs: reference(equation, *xs)):
            ops = [x * 1 for x in leaves]
            y = run(*ops)
            with torch.no_grad():
                ops[k].mul_(2)
            try:
                outcomes.append(torch.autograd.grad(y.sum(), leaves))
            except RuntimeError as error:
                assert "modified by an inplace operation" in str(error)
                outcomes.append(None)
        if outcomes[0] is not None:         # einc saved nothing the change reached: the gradient is right
            expected = torch.autograd.grad(reference(equation, *leaves).sum(), leaves)
            for got, want in zip(outcomes[0], expected):
                torch.testing.assert_close(got, want)
