"""einc.einsum inside torch.compile: fullgraph (no graph breaks), static and dynamic shapes,
outputs and gradients equal to eager.  Most tests use the aot_eager backend (dynamo +
AOTAutograd + the op's fake implementation, no C++ compile); one runs inductor."""

import contextlib
import math
import subprocess
import sys

import pytest
import torch
from oracle import reference
from torch._dynamo.testing import CompileCounterWithBackend

import einc

D = torch.float64
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")


def _randn(*shape, seed=0, dtype=D):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


CASES = [
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("bqhd,bkhd->bhqk", [(2, 3, 2, 4), (2, 5, 2, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
    ("iij->j", [(3, 3, 2)]),
    ("bi,oij,bj->bo", [(2, 3), (4, 3, 5), (2, 5)]),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_fullgraph_matches_eager(equation, shapes, dynamic):
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda *x: einc.einsum(equation, *x).sin(), fullgraph=True, dynamic=dynamic,
                      backend=counter)
    ops = [_randn(*s, seed=k) for k, s in enumerate(shapes)]
    torch.testing.assert_close(f(*ops), reference(equation, *ops).sin())
    assert counter.frame_count == 1
    calls = [n for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any(n.target is torch.ops.einc.einsum.default for n in calls)
    if dynamic:          # other sizes, same structure: no recompile
        bigger = [_randn(*[d + 2 if d > 1 else d for d in s], seed=k) for k, s in enumerate(shapes)]
        torch.testing.assert_close(f(*bigger), reference(equation, *bigger).sin())
        assert counter.frame_count == 1


def test_gradients_under_compile_dynamic():
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda a, b, c: einc.einsum("ij,jkk,kl->li", a, b, c).cos().sum(), fullgraph=True,
                      dynamic=True, backend=counter)
    for seed, (i, j, k, m) in enumerate([(2, 3, 4, 5), (4, 2, 3, 6)]):
        ops = [_randn(i, j, seed=seed).requires_grad_(), _randn(j, k, k, seed=seed + 1).requires_grad_(),
               _randn(k, m, seed=seed + 2).requires_grad_()]
        got = torch.autograd.grad(f(*ops), ops)
        ref_ops = [o.detach().clone().requires_grad_() for o in ops]
        want = torch.autograd.grad(torch.einsum("ij,jkk,kl->li", *ref_ops).cos().sum(), ref_ops)
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y)
    assert counter.frame_count == 1


def test_call_forms_and_options():
    torch._dynamo.reset()
    a, b, c = _randn(3, 4), _randn(4, 5, seed=1), _randn(5, 2, seed=2)

    def f(a, b, c):
        x = einc.einsum("ij,jk,kl->il", [a, b, c], optimize=[(1, 2), (0, 1)])
        y = einc.einsum(a, [0, Ellipsis], b, [Ellipsis, 2], [2, 0], optimize="greedy", memory_limit=1000)
        z = einc.einsum("ij,jk,kl->il", a, b, c, optimize=False, memory_limit="max_input")
        return x, y, z
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b, c)
    want = (a @ b @ c, (a @ b).T, a @ b @ c)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)


def test_result_dtype_matches_eager():
    torch._dynamo.reset()
    x = torch.randint(-5, 5, (3, 4), dtype=torch.int32)
    f = lambda x: einc.einsum("ij->i", x)        # noqa: E731  (an integer sum promotes to int64)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    assert got.dtype == f(x).dtype == torch.int64
    assert torch.equal(got, f(x))


@pytest.mark.slow
def test_inductor_static_and_dynamic():
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    f = torch.compile(lambda q, k: torch.softmax(einc.einsum("bqd,bkd->bqk", q, k) * 0.5, -1), fullgraph=True,
                      dynamic=True, backend=counter)
    for s in (3, 5):     # sizes kept distinct: dynamo gives equal sizes one symbol ("duck sizing")
        q, k = _randn(2, s, 4, dtype=torch.float32), _randn(2, s + 2, 4, seed=1, dtype=torch.float32)
        torch.testing.assert_close(f(q, k), torch.softmax(torch.einsum("bqd,bkd->bqk", q, k) * 0.5, -1))
    assert counter.frame_count == 1


def test_the_op_itself_under_autograd_and_torch_func():
    """torch.ops.einc.einsum (what compiled graphs call): gradients, double backward,
    vmap, grad, jvp, and hessian, as for einc.einsum."""
    import einc.custom_op  # noqa: F401  (registers the op)
    op = torch.ops.einc.einsum.default
    a = _randn(3, 3, 4).requires_grad_()
    b = _randn(4, 5, seed=1).requires_grad_()
    f = lambda a, b: op("iij,jk->ki", [a, b], "auto", "")            # noqa: E731
    assert torch.autograd.gradcheck(f, (a, b))
    assert torch.autograd.gradgradcheck(f, (a, b))
    assert torch.autograd.gradcheck(lambda a, b: op("iij,jk->ki", [a, b], "path:0,1", ""), (a, b))
    a0, b0 = a.detach(), b.detach()
    xs = _randn(6, 3, 3, 4, seed=2)
    ref = lambda a: torch.einsum("iij,jk->ki", a, b0)                   # noqa: E731
    mine = lambda a: op("iij,jk->ki", [a, b0], "auto", "")              # noqa: E731
    torch.testing.assert_close(torch.func.vmap(mine)(xs), torch.func.vmap(ref)(xs))
    torch.testing.assert_close(torch.func.vmap(torch.func.grad(lambda a: mine(a).sin().sum()))(xs),
                               torch.func.vmap(torch.func.grad(lambda a: ref(a).sin().sum()))(xs))
    t = _randn(3, 3, 4, seed=3)
    torch.testing.assert_close(torch.func.jvp(mine, (a0,), (t,))[1], ref(t))
    torch.testing.assert_close(torch.func.hessian(lambda a: mine(a).pow(2).sum())(a0),
                               torch.func.hessian(lambda a: ref(a).pow(2).sum())(a0))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_forward_mode_under_compile_gives_the_tangent(backend):
    """jvp, jacfwd and forward_ad inside a compiled function: while dynamo and AOTAutograd
    trace the op, its tangent is the sum of the op with each operand's tangent (the op below
    autograd makes none: without that sum the compiled tangent would be zero)."""
    import torch.autograd.forward_ad as fwAD
    a, b, t = _randn(3, 4), _randn(4, 5, seed=1), _randn(3, 4, seed=2)
    mine = lambda a: einc.einsum("ij,jk->ik", a, b)                     # noqa: E731
    torch._dynamo.reset()
    out, tangent = torch.compile(lambda a, t: torch.func.jvp(mine, (a,), (t,)), backend=backend)(a, t)
    torch.testing.assert_close(out, a @ b)
    torch.testing.assert_close(tangent, t @ b)
    torch._dynamo.reset()
    jac = torch.compile(torch.func.jacfwd(lambda a: einc.einsum("ij->", a).sin()), backend=backend)(a)
    torch.testing.assert_close(jac, torch.full_like(a, math.cos(a.sum().item())))

    def dual(a, t):
        with fwAD.dual_level():
            return fwAD.unpack_dual(mine(fwAD.make_dual(a, t))).tangent
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(dual, backend=backend)(a, t), t @ b)
    with fwAD.dual_level():           # a dual tensor into a compiled function
        torch._dynamo.reset()
        got = torch.compile(mine, backend=backend)(fwAD.make_dual(a, t))
        torch.testing.assert_close(fwAD.unpack_dual(got).tangent, t @ b)


@pytest.mark.parametrize("trace", ["aot_eager", "jit.trace"])
def test_a_traced_backward_under_a_dispatch_mode_gives_the_gradients(trace):
    """A compiled or traced call's backward (``einc::einsum_backward``, the call again with
    autograd) run under a TorchDispatchMode, which runs the op below autograd: the gradients
    without the mode, bit for bit, rather than an error for a backward with nothing recorded."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    a, b = _randn(3, 4), _randn(4, 5, seed=1)
    f = lambda a, b: einc.einsum("ij,jk->ik", a, b)                    # noqa: E731
    torch._dynamo.reset()
    traced = torch.compile(f, backend="aot_eager") if trace == "aot_eager" else \
        torch.jit.trace(f, (a.requires_grad_(), b.requires_grad_()))
    grads = []
    for mode in (contextlib.nullcontext, PassThrough, lambda: FlopCounterMode(display=False)):
        leaves = [a.detach().requires_grad_(), b.detach().requires_grad_()]
        out = traced(*leaves)
        with mode():
            out.sum().backward()
        grads.append([x.grad for x in leaves])
    torch.testing.assert_close(grads[0][0], b.detach().sum(1).expand(3, 4))
    assert all(torch.equal(g, w) for got in grads[1:] for g, w in zip(got, grads[0]))


_COUNTED = """
import torch, einc
from torch.utils.flop_counter import FlopCounterMode
def counts(f, *ops, backward=False):
    with FlopCounterMode(display=False) as m:
        out = f(*ops)
        if backward:
            out.sum().backward()
    return m.get_total_flops()
a, b = torch.randn(8, 16), torch.randn(16, 4)
x, y, z = torch.randn(5, 6), torch.randn(6, 7), torch.randn(7, 3)
pair = lambda a, b: einc.einsum("ij,jk->ik", a, b)
three = lambda x, y, z: einc.einsum("ij,jk,kl->il", x, y, z)
torch._dynamo.reset()
found = [counts(torch.jit.trace(pair, (a, b)), a, b), counts(torch.compile(pair, backend="aot_eager"), a, b),
         counts(torch.jit.trace(three, (x, y, z)), x, y, z)]
leaves = [a.clone().requires_grad_(), b.clone().requires_grad_()]
found.append(counts(torch.jit.trace(pair, tuple(leaves)), *leaves, backward=True))
found.append(counts(torch.compile(pair, backend="aot_eager"), *leaves, backward=True))
print(found)
"""


def test_flop_counter_mode_counts_the_op_in_traced_graphs():
    # the op's kernels run below the mode, which saw the op alone and counted 0 flops; a
    # first counter is made before einc registers anything (a process of its own)
    out = subprocess.run([sys.executable, "-c", _COUNTED], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    mm, chain = 2 * 8 * 16 * 4, 2 * (6 * 7 * 3 + 5 * 6 * 3)    # torch.einsum's counts (jk,kl first)
    assert out.stdout.split("\n")[-2] == str([mm, mm, chain, 3 * mm, 3 * mm])


_FIRST_CONTRACT = """
import torch, einc
a, b = torch.randn(3, 4), torch.randn(4, 5)
f = torch.compile(lambda a, b: einc.contract("ij,jk->ik", a, b, optimize="greedy"), fullgraph=True)
torch.testing.assert_close(f(a, b), a @ b)
print("ok")
"""


def test_a_compiled_contract_is_one_graph_as_the_first_call_of_a_process():
    # a name for two operands was checked by interning its options, under a lock dynamo
    # cannot enter: fullgraph failed wherever no earlier call had interned them
    out = subprocess.run([sys.executable, "-c", _FIRST_CONTRACT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1] == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(8, 16), (16, 4)]), ("ij,ij->i", [(8, 16), (8, 16)]), ("ij,ij->ij", [(8, 16), (8, 16)]),
    ("ij->i", [(8, 16)]), ("i,j->ij", [(8,), (16,)]), ("ii->i", [(5, 5)]), ("ij,jk->k", [(8, 16), (16, 4)]),
    ("bij,bj->", [(3, 8, 16), (3, 16)]), ("ij,aj->i", [(8, 16), (1, 16)]), ("abc,abcd->d", [(4, 5, 6), (4, 5, 6, 7)]),
])
def test_flop_counter_mode_counts_a_traced_pair_as_it_counts_torch_einsum(equation, shapes):
    """The op's count is what the counter gives torch.einsum's ops for the same call: a
    matrix product's 2*M*N*K, none for a product with nothing summed or a sum of one operand,
    and none for an index one operand sums alone, not the plan's flops (128 for ij,ij->ij, 1024
    for ij,jk->k, where torch.einsum counts 0 and 128)."""
    from torch.utils.flop_counter import FlopCounterMode

    def counts(f, ops):
        with FlopCounterMode(display=False) as mode:
            f(*ops)
        return mode.get_total_flops()
    ops = [_randn(*s, seed=k) for k, s in enumerate(shapes)]
    traced = torch.jit.trace(lambda *o: einc.einsum(equation, *o), ops, check_trace=False)
    assert counts(traced, ops) == counts(lambda *o: torch.einsum(equation, *o), ops)


def test_the_op_itself_gives_a_tangent_where_its_plan_would_drop_it():
    # the op called with a dual operand and a scale (the compile backend's constant factor)
    import torch.autograd.forward_ad as fwAD

    import einc.custom_op  # noqa: F401  (registers the op)
    a, b, t = _randn(2, 3, 4), _randn(2, 4, 5, seed=1), _randn(2, 3, 4, seed=2)
    with fwAD.dual_level():
        out = torch.ops.einc.einsum.default("bij,bjk->bik", [fwAD.make_dual(a, t), b], "auto", "", scale=0.5)
        primal, tangent = fwAD.unpack_dual(out)
    torch.testing.assert_close(primal, 0.5 * (a @ b))
    torch.testing.assert_close(tangent, 0.5 * (t @ b))


def test_autocast_inside_compile_casts_like_torch_einsum():
    torch._dynamo.reset()
    a, b = _randn(8, 8, dtype=torch.float32), _randn(8, 8, seed=1, dtype=torch.float32)

    def f(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return einc.einsum("ij,jk->ik", a, b), einc.einsum("ij,ij->i", a, b)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b)
    assert [g.dtype for g in got] == [torch.bfloat16, torch.bfloat16]
    torch.testing.assert_close(got[0], (a.bfloat16() @ b.bfloat16()))


@pytest.mark.parametrize("eq, shapes", [("ij,jk->ik", [[(8, 16), (16, 4)], [(5, 7), (7, 3)]]),
                                        ("i,j->ij", [[(8,), (4,)], [(5,), (3,)]]),
                                        ("ij,jk,kl->il", [[(8, 16), (16, 4), (4, 3)], [(5, 7), (7, 30), (30, 2)]])])
def test_autocast_under_dynamic_shapes_gives_eager_s_dtype_and_bits(eq, shapes):
    """Under ``dynamic=True`` the autocast kernel meets symbolic sizes while dynamo traces:
    it asks torch's dtype there as at run time (it failed on hashing a symbolic size), and each
    size gives the eager call's dtype (torch.einsum's) and bits."""
    torch._dynamo.reset()
    f = torch.compile(lambda *x: einc.einsum(eq, *x), backend="aot_eager", dynamic=True)
    for k, sizes in enumerate(shapes):
        ops = [_randn(*s, seed=k + j, dtype=torch.float32) for j, s in enumerate(sizes)]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, eager, want = f(*ops), einc.einsum(eq, *ops), torch.einsum(eq, *ops)
        assert got.dtype == eager.dtype == want.dtype and torch.equal(got, eager)
    torch._dynamo.reset()


@pytest.mark.parametrize("inside", [True, False], ids=["autocast-inside", "autocast-outside"])
@pytest.mark.parametrize("backend", ["aot_eager", "einc"])
def test_autocast_keeps_torch_einsums_dtype_where_it_runs_no_matrix_product(inside, backend):
    """On a CPU torch.einsum autocasts only through its matrix products: an elementwise
    product or a lone sum stays float32, compiled as in eager, whether autocast is entered
    inside the compiled function or around it."""
    torch._dynamo.reset()
    a, b = _randn(8, 8, dtype=torch.float32), _randn(8, 8, seed=1, dtype=torch.float32)
    cases = [("ij,jk->ik", 2), ("ij,ij->ij", 2), ("ij->i", 1), ("ij,ij,ij->ij", 3)]

    def autocast(on):
        return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()

    def f(a, b):
        with autocast(inside):
            return [einc.einsum(eq, *(a, b, a)[:n]) for eq, n in cases]
    with autocast(True):
        want = [torch.einsum(eq, *(a, b, a)[:n]) for eq, n in cases]
    outside = autocast(not inside)
    options = {"inner": "eager", "rewrite": "all"} if backend == "einc" else None
    with outside:
        got = torch.compile(f, fullgraph=True, backend=backend, options=options)(a, b)
    assert [g.dtype for g in got] == [w.dtype for w in want] == [torch.bfloat16] + [torch.float32] * 3
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non-strict"])
def test_torch_export_with_dynamic_dims(strict):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(_randn(4, 5))

        def forward(self, x):
            return einc.einsum("bij,jk->bik", x, self.w).relu()
    m = M()
    dims = {"x": {0: torch.export.Dim("b"), 1: torch.export.Dim("n")}}
    ep = torch.export.export(m, (_randn(2, 3, 4, seed=1),), strict=strict, dynamic_shapes=dims)
    assert any(n.target is torch.ops.einc.einsum.default for n in ep.graph.nodes)
    x = _randn(5, 7, 4, seed=2)
    torch.testing.assert_close(ep.module()(x), m(x))


class _Selected(torch.nn.Module):
    """einsums over the rows a mask selects: sizes known only at run time (unbacked)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(_randn(4, 3))

    def forward(self, x):
        rows = x[x[:, 0] > 0]
        return (einc.einsum("bi,ij->bj", rows, self.w), einc.einsum("bi,bi->b", rows, rows),
                einc.einsum("bi,ci->bc", rows, rows), einc.einsum("...i,i->...", rows, x[0]),
                einc.einsum("bi,bi->", rows, rows))


@pytest.mark.parametrize("how", ["export strict", "export non-strict", "compile fullgraph"])
def test_data_dependent_sizes_trace_as_torch_einsums_do(how):
    m = _Selected()
    x = _randn(6, 4, seed=1)
    if how == "compile fullgraph":
        torch._dynamo.reset()
        compiled = torch.compile(m, backend="aot_eager", fullgraph=True)

        def run(x):
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                return compiled(x)
    else:
        ep = torch.export.export(m, (x,), strict=how == "export strict")
        assert any(n.target is torch.ops.einc.einsum.default for n in ep.graph.nodes)
        run = ep.module()
    for k, rows in enumerate([4, 1, 0, 6]):     # (the traced graph assumed no size of 1 or 0)
        x = _randn(6, 4, seed=k)
        x[:, 0] = torch.arange(6) < rows
        want = [reference(eq, *ops) for eq, ops in [
            ("bi,ij->bj", (x[:rows], m.w)), ("bi,bi->b", (x[:rows],) * 2), ("bi,ci->bc", (x[:rows],) * 2),
            ("...i,i->...", (x[:rows], x[0])), ("bi,bi->", (x[:rows],) * 2)]]
        for got, w in zip(run(x), want):
            torch.testing.assert_close(got, w.to(got.dtype))
    torch._dynamo.reset()


def test_contract_expression_compiles_without_graph_breaks():
    expr = einc.contract_expression("ij,jk,kl->il", (3, 4), (4, 5), (5, 2))
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)
    compiled = torch.compile(lambda x, y, z: expr(x, y, z) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(a, b, c), 2 * (a @ b @ c))


_K = _randn(5, 6, seed=7)
_EXPRESSIONS = {"plain": einc.contract_expression("ij,jk,kl->il", (3, 5), (5, 6), (6, 2)),
                "constants": einc.contract_expression("ij,jk,kl->il", (3, 5), _K, (6, 2), constants=[1])}


@pytest.mark.parametrize("dynamic,graphs", [(True, 1), (None, 2)], ids=["dynamic", "automatic"])
def test_an_expressions_call_compiles_once_for_its_sizes(dynamic, graphs):
    """While dynamo traces an expression's call it checks and runs the call without looking the
    operands' shapes up among those it has met (the runs it keeps per shapes), as einsum and
    contract trace: under dynamic=True one graph (two where dynamo first traces sizes as
    numbers).  Traced, that lookup would make dynamo guard every size on the planned ones: a
    graph per size (three for three)."""
    calls = {"plain": lambda a, b, c: _EXPRESSIONS["plain"](a, b, c),
             "constants": lambda a, b, c: _EXPRESSIONS["constants"](a, c),
             "einsum": lambda a, b, c: einc.einsum("ij,jk,kl->il", a, b, c),
             "contract": lambda a, b, c: einc.contract("ij,jk,kl->il", a, b, c)}
    for name, fn in calls.items():
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("eager")
        compiled = torch.compile(fn, backend=counter, dynamic=dynamic)
        try:
            for n in (3, 4, 7):
                ops = (_randn(n, 5, seed=n), _K, _randn(6, 2, seed=n + 1))
                torch.testing.assert_close(compiled(*ops), reference("ij,jk,kl->il", *ops))
        finally:
            torch._dynamo.reset()
        assert counter.frame_count == graphs, name


def test_ints_read_from_locals_trace_under_dynamic():
    """Under dynamic=True dynamo traces an int it reads from a local (an argument, a closure's cell,
    their attributes) as a symbol: an explicit path or a memory_limit so given to einsum, and an
    expression's path, shapes and positions (an expression in a closure), raised its Unsupported
    (str() of a symbol writing the op's options; a symbol passed to a constant), with fullgraph,
    and ran eagerly without.  They are read as their values: one graph, eager's answer."""
    path, limit, eq, named_eq = [(0, 1), (0, 1)], 1000, "ij,jk,kl->il", "b (h d), h d e -> b (h e)"
    plain = einc.contract_expression(eq, (3, 5), (5, 6), (6, 2))
    constants = einc.contract_expression(eq, (3, 5), _K, (6, 2), constants=[1])
    named = einc.contract_expression(named_eq, (3, 6), (2, 3, 4), h=2)
    named_constants = einc.contract_expression(named_eq, (3, 6), _randn(2, 3, 4), constants=[1], h=2)
    three = [(_randn(n, 5, seed=n), _K, _randn(6, 2, seed=n + 1)) for n in (3, 4, 7)]
    calls = {"path": (lambda a, b, c: einc.einsum(eq, a, b, c, optimize=path), three),
             "limit": (lambda a, b, c: einc.einsum(eq, a, b, c, memory_limit=limit), three),
             "path argument": (lambda a, b, c, p=path: einc.einsum(eq, a, b, c, optimize=p), three),
             "expression": (lambda a, b, c: plain(a, b, c), three),
             "constants": (lambda a, b, c: constants(a, c), three),
             "named": (lambda x, w: named(x, w), [(_randn(3, 6), _randn(2, 3, 4, seed=1))]),
             "named constants": (lambda x: named_constants(x), [(_randn(3, 6),)])}
    for name, (fn, calls_of) in calls.items():
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("eager")
        compiled = torch.compile(fn, backend=counter, dynamic=True, fullgraph=True)
        try:
            for ops in calls_of:
                torch.testing.assert_close(compiled(*ops), fn(*ops))
        finally:
            torch._dynamo.reset()
        assert counter.frame_count == 1, name


def test_contract_path_compiles_under_fullgraph_as_eager_plans():
    """Under fullgraph contract_path is planned as a constant (dynamo does not trace einc's
    planner), its sizes specialized: a call at new sizes plans again, as eager does."""
    def fn(a, b, c):
        path, info = einc.contract_path("ij,jk,kl->il", a, b, c)
        return einc.einsum("ij,jk,kl->il", a, b, c, optimize=path), path, info
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="eager")
        for shapes in [((2, 30), (30, 40), (40, 5)), ((30, 40), (40, 5), (5, 2))]:
            args = [_randn(*s, seed=k) for k, s in enumerate(shapes)]
            got, want = compiled(*args), fn(*args)
            assert torch.equal(got[0], want[0]) and got[1] == want[1] and str(got[2]) == str(want[2])
    finally:
        torch._dynamo.reset()


def test_the_info_of_contract_path_prints_inside_a_fullgraph_function():
    """str(info) inside the compiled function raised dynamo's Unsupported (it traced the table's
    making); the info, planned as a constant, keeps its text, which is eager's."""
    def fn(a, b, c):
        _, info = einc.contract_path("ij,jk,kl->il", a, b, c)
        return a + 1, str(info), f"{info}", info.opt_cost, info.eq
    ops = [_randn(*s, seed=k) for k, s in enumerate([(2, 30), (30, 40), (40, 5)])]
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, fullgraph=True, backend="eager")(*ops)
    finally:
        torch._dynamo.reset()
    want = fn(*ops)
    assert got[1:] == want[1:] and "Optimized FLOP count" in got[1]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_the_numbers_of_contract_path_compute_inside_a_fullgraph_function(dynamic):
    """``x * info.opt_cost`` raised dynamo's Unsupported (python_type): dynamo could not read a
    property of the info, a constant (it guards the getter's source), and left it unread, which
    only a returned value survives; the info keeps its attributes as values, read as constants."""
    def fn(x, a, b, c):
        _, info = einc.contract_path("ij,jk,kl->il", a, b, c)
        return (x * info.opt_cost, x * info.naive_cost, x * info.speedup, x * info.largest_intermediate,
                x * info.size_list[-1], x + len(info.path), x * info.size_dict["j"], info.eq, info.path)
    args = [_randn(2), *[_randn(*s, seed=k) for k, s in enumerate([(2, 30), (30, 40), (40, 5)])]]
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, fullgraph=True, dynamic=dynamic, backend="eager")(*args)
    finally:
        torch._dynamo.reset()
    want = fn(*args)
    for g, w in zip(got, want):
        assert torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w


def test_contract_path_of_strided_views_and_mixed_dtypes_compiles_under_fullgraph():
    """contract_path of a transposed view, or of operands of two dtypes, compiles under fullgraph
    (and without it, unbroken): the door reads stand-ins of each tensor's shape, strides, dtype
    and device, as eager reads it.  Tensors described by their shapes, one dtype and one device
    would raise ArgumentError there (and break the graph without fullgraph)."""
    eq = "ij,jk,kl->il"
    fn = lambda *ops: einc.contract_path(eq, *ops)      # noqa: E731
    for ops in [(_randn(48, 64).t(), _randn(48, 80, seed=1), _randn(80, 2, seed=2)),
                (_randn(3, 4), _randn(4, 5, seed=1, dtype=torch.float32), _randn(5, 2, seed=2))]:
        torch._dynamo.reset()
        try:
            got, want = torch.compile(fn, fullgraph=True, backend="eager")(*ops), fn(*ops)
        finally:
            torch._dynamo.reset()
        assert got[0] == want[0] and str(got[1]) == str(want[1])


@pytest.mark.parametrize("limit", [math.inf, 20.0, -1, "max_input"])
def test_memory_limits_a_compiled_call_takes_as_an_eager_one(limit):
    """The op carries memory_limit as text: inf (no limit) and whole floats as in eager
    calls (inf overflowed int() while dynamo traced)."""
    torch._dynamo.reset()
    a, b, c = _randn(3, 4), _randn(4, 5, seed=1), _randn(5, 2, seed=2)
    f = torch.compile(lambda x, y, z: einc.einsum("ij,jk,kl->il", x, y, z, memory_limit=limit),
                      backend="eager", fullgraph=True)
    torch.testing.assert_close(f(a, b, c), einc.einsum("ij,jk,kl->il", a, b, c, memory_limit=limit))


NUMPY_PATHS = {
    "int64": lambda np: [(np.int64(1), np.int64(2)), (np.int64(0), np.int64(1))],
    "int32": lambda np: [(np.int32(1), np.intp(2)), (np.int8(0), 1)],
    "array": lambda np: np.array([[1, 2], [0, 1]], dtype=np.int32),
    "arrays": lambda np: [np.array([1, 2]), np.array([0, 1])],
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("form", NUMPY_PATHS)
def test_a_path_of_numpy_values_runs_in_every_door_as_eagerly(form, dynamic):
    """opt_einsum takes a path of numpy integers, or a numpy array: so do the eager doors, and
    each door runs the path as the eager call does (the path, as contract_path reports it),
    under torch.compile(fullgraph=True) and torch.fx too.  Handed to dynamo as it is, each numpy
    value would be read as a tensor of unknown value, the op's text its Unsupported (repr() of an
    ndarray; an int32 it cannot read; an array refused as no path), and torch.fx cannot record a
    numpy value in a node."""
    np = pytest.importorskip("numpy")
    path = NUMPY_PATHS[form](np)
    eq, ops = "ij,jk,kl->il", (_randn(3, 4), _randn(4, 5, seed=1), _randn(5, 2, seed=2))
    calls = {"einsum": lambda a, b, c: einc.einsum(eq, a, b, c, optimize=path),
             "contract": lambda a, b, c: einc.contract(eq, a, b, c, optimize=path),
             "argument": lambda a, b, c, p=path: einc.contract(eq, a, b, c, optimize=p)}
    want = einc.einsum(eq, *ops, optimize=[(1, 2), (0, 1)])
    for name, fn in calls.items():
        torch._dynamo.reset()
        try:
            got = torch.compile(fn, fullgraph=True, dynamic=dynamic, backend="eager")(*ops)
        finally:
            torch._dynamo.reset()
        torch.testing.assert_close(got, want, msg=name)
    torch.testing.assert_close(torch.fx.symbolic_trace(calls["einsum"])(*ops), want)
    torch.testing.assert_close(torch.jit.trace(calls["contract"], ops)(*ops), want)
    planned = lambda a, b, c: einc.contract_path(eq, a, b, c, optimize=path)[0]   # noqa: E731
    torch._dynamo.reset()
    try:
        assert torch.compile(planned, fullgraph=True, dynamic=dynamic, backend="eager")(*ops) == [(1, 2), (0, 1)]
    finally:
        torch._dynamo.reset()


def test_a_numpy_path_that_is_no_path_is_the_same_error_in_every_door():
    """A float or a bool among a path's numpy values is eager's PathError in each door, its
    text naming the values as Python's (dynamo raised Unsupported, torch.fx could not record it)."""
    np = pytest.importorskip("numpy")
    eq, ops = "ij,jk,kl->il", (_randn(3, 4), _randn(4, 5, seed=1), _randn(5, 2, seed=2))
    for path in ([(np.float64(0), 1), (0, 1)], [(np.bool_(False), np.int64(1)), (0, 1)]):
        fn = lambda a, b, c, p=path: einc.einsum(eq, a, b, c, optimize=p)      # noqa: E731
        with pytest.raises(einc.errors.PathError) as eager:
            fn(*ops)
        assert "np." not in str(eager.value)
        torch._dynamo.reset()
        try:
            with pytest.raises(einc.errors.PathError) as compiled:
                torch.compile(fn, fullgraph=True, backend="eager")(*ops)
        finally:
            torch._dynamo.reset()
        with pytest.raises(einc.errors.PathError) as fx:
            torch.fx.symbolic_trace(lambda a, b, c: fn(a, b, c))(*ops)
        assert str(compiled.value) == str(fx.value) == str(eager.value)


def _in_every_door(calls, ops, dynamic):
    """Each of ``calls`` (name -> function of ``ops``) under torch.compile(fullgraph=True),
    torch.fx.symbolic_trace and torch.jit.trace, as name -> result."""
    got = {}
    for name, fn in calls.items():
        torch._dynamo.reset()
        try:
            got[f"compile {name}"] = torch.compile(fn, fullgraph=True, dynamic=dynamic, backend="eager")(*ops)
        finally:
            torch._dynamo.reset()
        got[f"fx {name}"] = torch.fx.symbolic_trace(fn)(*ops)
        got[f"jit {name}"] = torch.jit.trace(fn, ops)(*ops)
    return got


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_numpy_memory_limit_runs_in_every_door_as_eagerly(dynamic):
    """memory_limit=np.int64(10) (a numbers.Real, which the eager call takes as 10) runs as 10 in
    each door, a limit that changes this call's path (contract_path, compiled, reports it).
    Handed on as it is, dynamo under torch.compile(fullgraph=True) would read it as a tensor (the
    op's text its Unsupported: repr() on tensor), torch.jit.trace would write it into the op's
    text as 'np.int64(10)' (a PathError), and torch.fx cannot record it."""
    np = pytest.importorskip("numpy")
    eq, ops = "ij,jk,kl->il", (_randn(3, 4), _randn(4, 5, seed=1), _randn(5, 2, seed=2))
    limit, want = np.int64(10), reference(eq, *ops)
    calls = {"einsum": lambda a, b, c: einc.einsum(eq, a, b, c, memory_limit=limit),
             "contract": lambda a, b, c: einc.contract(eq, a, b, c, memory_limit=limit)}
    torch.testing.assert_close(calls["einsum"](*ops), want)
    for name, got in _in_every_door(calls, ops, dynamic).items():
        torch.testing.assert_close(got, want, msg=name)
    planned = lambda a, b, c: einc.contract_path(eq, a, b, c, memory_limit=limit)[0]   # noqa: E731
    assert planned(*ops) == einc.contract_path(eq, *ops, memory_limit=10)[0] != einc.contract_path(eq, *ops)[0]
    torch._dynamo.reset()
    try:
        assert torch.compile(planned, fullgraph=True, dynamic=dynamic, backend="eager")(*ops) == planned(*ops)
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_numpy_sublists_run_in_every_door_as_eagerly(dynamic):
    """torch's sublist call with numpy integers, bools (as 0 and 1) or arrays as subscripts, as
    the eager call takes them: under torch.compile(fullgraph=True) dynamo read each as a tensor
    of unknown value (Unsupported: "torch.* op returned non-Tensor"; an array's a data-dependent
    guard).  Each door reads them as the eager call does."""
    np = pytest.importorskip("numpy")
    a, b = _randn(3, 4), _randn(4, 5, seed=1)
    want = reference("ij,jk->ik", a, b)
    calls = {"ints": lambda x, y: einc.einsum(x, [np.int64(0), np.int32(1)], y, [1, np.intp(2)], [0, np.int8(2)]),
             "bools": lambda x, y: einc.einsum(x, [np.bool_(False), np.bool_(True)], y, [1, 2], [0, 2]),
             "arrays": lambda x, y: einc.einsum(x, np.array([0, 1]), y, np.array([1, 2], dtype=np.int32),
                                                np.array([0, 2])),
             "ellipsis": lambda x, y: einc.einsum(x, [Ellipsis, np.int64(1)], y, [np.int64(1), 2], [Ellipsis, 2])}
    for name, fn in calls.items():
        torch.testing.assert_close(fn(a, b), want, msg=f"eager {name}")
    for name, got in _in_every_door(calls, (a, b), dynamic).items():
        torch.testing.assert_close(got, want, msg=name)
