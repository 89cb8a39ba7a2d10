"""One answer per call: the same operands give the same bits whether einc is called
eagerly, traced by ``make_fx`` (real, fake, symbolic) or ``aot_function``, compiled with
``torch.compile(fullgraph=True)``, or called after many other shapes -- forward and
gradients -- and under ``torch.func.vjp``/``jvp`` and forward AD (forward), over the
fuzzer's equations (einc/runtime/admission.py states the rule: the
answer is a function of the call, never of what ran before)."""

import random

import fuzz
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import einc
from einc.runtime import admission

SEEDS = range(40)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


pytestmark = pytest.mark.usefixtures("cleared_caches")


def _cases(seeds):
    """Fuzzer cases of float dtypes that torch.einsum answers, with their operands."""
    found = []
    for seed in seeds:
        case = fuzz.make_case(random.Random(seed), dtypes=DTYPES, max_operands=4)
        ops = fuzz.operands(case, seed)
        try:
            torch.einsum(case.oracle_equation, *ops)
        except Exception:       # noqa: BLE001 - a call torch refuses has no answer to compare
            continue
        found.append((case, ops))
    return found


CASES = _cases(SEEDS)


def _forward(case):
    return lambda *ops: einc.einsum(*case.args(ops))


def _gradients(case):
    """The gradients of ``(einsum * weight).sum()`` with respect to every operand."""
    def grads(weight, *ops):
        out = einc.einsum(*case.args(ops))
        return torch.autograd.grad((out * weight).sum(), ops, allow_unused=True)
    return grads


def _leaves(ops):
    return [o.detach().clone().requires_grad_() for o in ops]


def _same(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None or (a if b is None else b).abs().max() == 0
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_the_fuzzer_draws_enough_cases():
    assert len(CASES) >= 25


@pytest.mark.parametrize("new_shapes", ["class", "plan", "torch"])
@pytest.mark.parametrize("mode", ["real", "fake", "symbolic"])
def test_make_fx_graphs_give_the_eager_bits(mode, new_shapes, monkeypatch):
    """A graph traced with real, fake or symbolic tensors, run on the operands, gives what
    the eager call gives, forward and gradients (with symbolic sizes the graph holds the
    custom op, which runs einc's plan at run time, not torch's einsum)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    for case, ops in CASES:
        expected = _forward(case)(*ops)
        graph = make_fx(_forward(case), tracing_mode=mode)(*ops)
        assert _same(graph(*ops), expected), (mode, case.equation, case.shapes)
        weight = torch.rand(expected.shape, dtype=expected.dtype, generator=torch.Generator().manual_seed(1))
        leaves = _leaves(ops)
        grads = _gradients(case)(weight, *leaves)
        traced = make_fx(_gradients(case), tracing_mode=mode)(weight, *_leaves(ops))
        assert _same(traced(weight, *leaves), grads), (mode, "gradients", case.equation, case.shapes)


def _under(way, case, ops):
    """The result of the call as ``way`` records it."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import functionalize, jvp, vjp
    f = _forward(case)
    if way == "functionalize":
        return functionalize(f)(*ops)
    if way == "vjp":
        return vjp(f, *ops)[0]
    tangents = tuple(torch.ones_like(o) for o in ops)
    if way == "jvp":
        return jvp(f, tuple(ops), tangents)[0]
    with fwAD.dual_level():
        return fwAD.unpack_dual(f(*[fwAD.make_dual(o, t) for o, t in zip(ops, tangents)])).primal.clone()


@pytest.mark.parametrize("new_shapes", ["class", "plan", "torch"])
@pytest.mark.parametrize("way", ["vjp", "jvp", "forward AD", "functionalize"])
def test_transforms_give_the_eager_bits(way, new_shapes, monkeypatch):
    """Under ``torch.func.vjp``, ``jvp`` and ``functionalize`` and forward AD, which record
    the ops themselves, the call gives the eager bits (in chunks: tests/runtime/test_chunked.py)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    for case, ops in CASES:
        expected = _forward(case)(*ops)
        assert _same(_under(way, case, ops), expected), (way, case.equation, case.shapes)


def test_a_symbolic_trace_holds_einc_s_op():
    a, b = torch.randn(1, 2, 9, 16), torch.randn(1, 2, 11, 16)
    graph = make_fx(lambda a, b: einc.einsum("bhid,bhjd->bhij", a, b), tracing_mode="symbolic")(a, b)
    targets = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    assert targets == {"einc.einsum.default"}, targets
    c, d = torch.randn(1, 2, 30, 16), torch.randn(1, 2, 7, 16)       # other sizes: the same graph
    assert torch.equal(graph(c, d), einc.einsum("bhid,bhjd->bhij", c, d))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_calls_give_the_eager_bits(backend):
    """torch.compile(fullgraph=True): the custom op runs einc's plan at run time; forward
    and gradients equal the eager call's."""
    torch._dynamo.reset()
    for case, ops in CASES[:12]:
        expected = _forward(case)(*ops)
        weight = torch.rand(expected.shape, dtype=expected.dtype, generator=torch.Generator().manual_seed(1))
        leaves = _leaves(ops)
        grads = _gradients(case)(weight, *leaves)
        compiled = torch.compile(_forward(case), fullgraph=True, backend=backend, dynamic=False)
        assert _same(compiled(*ops), expected), (backend, case.equation, case.shapes)
        mine = _leaves(ops)
        out = compiled(*mine)
        if out.requires_grad:
            assert _same(torch.autograd.grad((out * weight).sum(), mine, allow_unused=True), grads), \
                (backend, "gradients", case.equation, case.shapes)
        torch._dynamo.reset()


@pytest.mark.parametrize("new_shapes", ["class", "plan", "torch"])
def test_a_call_gives_the_same_bits_after_a_thousand_other_shapes(new_shapes, monkeypatch):
    """The backend and order are a function of the call: the first call of a process and
    the same call after a thousand other shapes of its equation (and every fuzzer case)
    agree, bit for bit."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    eqs = {
        "bhid,bhjd->bhij": lambda n: [torch.randn(1, 2, n, 16), torch.randn(1, 2, n + 3, 16)],
        "bgoxy,bgckxy->gock": lambda n: [torch.randn(2, 3, 4, n, 6), torch.randn(2, 3, 5, 2, n, 6)],
        "zuvw,zu,zvj->zwj": lambda n: [torch.randn(n, 3, 4, 5), torch.randn(n, 3), torch.randn(n, 4, 2)],
    }
    probes = {eq: make(40) for eq, make in eqs.items()}
    first = {eq: einc.einsum(eq, *ops) for eq, ops in probes.items()}
    fuzzed = [_forward(case)(*ops) for case, ops in CASES]
    einc.cache_clear()
    for n in range(1, 1001):
        eq = list(eqs)[n % len(eqs)]
        einc.einsum(eq, *eqs[eq](1 + n % 340))
    for eq, ops in probes.items():
        assert torch.equal(einc.einsum(eq, *ops), first[eq]), eq
    for (case, ops), expected in zip(reversed(CASES), reversed(fuzzed)):
        assert _same(_forward(case)(*ops), expected), (case.equation, case.shapes)


def test_gradients_after_other_shapes_and_under_checkpoint_agree():
    eq = "bgoxy,bgckxy->gock"
    make = lambda n: [torch.randn(2, 3, 4, n, 6), torch.randn(2, 3, 5, 2, n, 6)]   # noqa: E731
    ops = make(9)
    leaves = _leaves(ops)
    first = torch.autograd.grad(einc.einsum(eq, *leaves).tanh().sum(), leaves)
    for n in range(10, 60):
        einc.einsum(eq, *make(n))
    again = _leaves(ops)
    out = torch.utils.checkpoint.checkpoint(lambda a, b: einc.einsum(eq, a, b).tanh(), *again, use_reentrant=False)
    assert _same(torch.autograd.grad(out.sum(), again), first)


@pytest.mark.parametrize("eq,shapes", [("ij,jk->ik", [(3, 4), (4, 5)]),
                                       ("bgoxy,bgckxy->gock", [(2, 3, 4, 5, 6), (2, 3, 7, 2, 5, 6)]),
                                       ("ab,bc,cd->ad", [(3, 4), (4, 5), (5, 2)])])
def test_opcheck_passes_on_einc_s_op(eq, shapes):
    ops = [torch.randn(s, requires_grad=True) for s in shapes]
    result = torch.library.opcheck(torch.ops.einc.einsum.default, (eq, ops, "auto", ""))
    assert set(result.values()) == {"SUCCESS"}, result


def test_torch_mode_answers_small_calls_with_torch_s_op_and_plans_large_ones(monkeypatch):
    """EINC_NEW_SHAPES=torch: a call of at most SMALL_CALL multiply-adds is torch's op, every
    time (nothing planned); a larger one is planned."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "torch")
    a, b = torch.randn(1, 2, 100, 16), torch.randn(1, 2, 100, 16)
    for _ in range(3):
        out = einc.einsum("bhid,bhjd->bhij", a, b)
        assert torch.equal(out, torch._VF.einsum("bhid,bhjd->bhij", [a, b]).contiguous())
    assert einc.cache_info().plans.currsize == 0
    big = torch.randn(64, 128), torch.randn(128, 129)
    assert admission.SMALL_CALL < 64 * 128 * 129
    einc.einsum("ij,jk->ik", *big)
    assert einc.cache_info().plans.currsize == 1


# Shapes of one size class each (runtime/sizeclass.py): one plan, made at the class's sizes.
CLASS_CALLS = {
    "bhid,bhjd->bhij": [[(1, 2, i, 16), (1, 2, j, 16)] for i, j in ((9, 11), (15, 8), (12, 12), (8, 14))],
    "akbc,jk->cjba": [[(6, k, 5, 4), (3, k)] for k in (33, 40, 63)],
    "ij,ij->i": [[(i, 300), (i, 300)] for i in (5, 7, 4)],
}


@pytest.mark.parametrize("eq", list(CLASS_CALLS))
def test_shapes_of_one_class_agree_in_any_order_eager_traced_and_compiled(eq, monkeypatch):
    """Under EINC_NEW_SHAPES=class, shapes of one size class give the same bits whichever
    came first, eagerly, in a graph traced with symbolic sizes on another shape of the
    class, and compiled (fullgraph, dynamic sizes), forward and gradients."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    g = torch.Generator().manual_seed(0)
    calls = [[torch.randn(s, generator=g) for s in shapes] for shapes in CLASS_CALLS[eq]]
    run = lambda *ops: einc.einsum(eq, *ops)  # noqa: E731
    expected = [run(*ops) for ops in calls]
    einc.cache_clear()
    assert all(_same(run(*ops), want) for ops, want in zip(reversed(calls), reversed(expected)))
    graph = make_fx(run, tracing_mode="symbolic")(*calls[0])
    assert all(_same(graph(*ops), want) for ops, want in zip(calls, expected))
    torch._dynamo.reset()
    compiled = torch.compile(run, fullgraph=True, backend="aot_eager", dynamic=True)
    for ops, want in zip(calls, expected):
        assert _same(compiled(*ops), want)
        leaves, mine = _leaves(ops), _leaves(ops)
        weight = torch.rand(want.shape, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad((run(*leaves) * weight).sum(), leaves)
        assert _same(torch.autograd.grad((compiled(*mine) * weight).sum(), mine), grads)
    torch._dynamo.reset()


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk,kl->", [(3, 33), (33, 17), (17, 2)]),
    ("ij,j,jk->ik", [(3, 7), (7,), (7, 2)]),
    ("ab,bc,ca->", [(13, 9), (9, 1), (1, 13)]),
])
@pytest.mark.parametrize("new_shapes", ["plan", "class", "torch"])
def test_contract_expression_gives_einsum_s_bits_for_its_shapes(eq, shapes, new_shapes, monkeypatch):
    """An expression's call is einsum's call of the same operands: the same bits.  Its plan
    took the path searched at its own shapes, where einsum (and contract, and contract_path's
    report) runs a small call's size class's path, searched at canonical sizes: a float32
    sum in another order (each of these paths differed)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, generator=g) for s in shapes]
    want = einc.einsum(eq, *ops)
    expr = einc.contract_expression(eq, *shapes)
    assert torch.equal(expr(*ops), want) and torch.equal(einc.contract(eq, *ops), want)
    assert list(expr.plan.path) == list(einc.contract_path(eq, *ops)[0])


@pytest.mark.parametrize("new_shapes", ["plan", "class", "torch"])
def test_explain_and_contract_path_report_the_path_that_runs(new_shapes, monkeypatch):
    """``explain`` and ``contract_path`` report the path the call runs, for tensors and for
    shapes: under ``EINC_NEW_SHAPES=torch`` the size class's path that torch's op is given
    (runtime/admission.py), not the one searched at the call's own shapes."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    given, checked = [], []

    def spy(*a, **k):
        # (meta operands: explain's check that torch's op takes the call)
        (checked if a[1][0].is_meta else given).append(k.get("path"))
        return torch._VF.einsum(*a, **k)
    monkeypatch.setattr(admission, "_einsum", spy)
    eq, shapes = "ij,jk,kl->", [(3, 33), (33, 17), (17, 2)]
    ops = [torch.randn(s, generator=torch.Generator().manual_seed(0)) for s in shapes]
    own = [(1, 2), (0, 1)]      # the path searched at these shapes; the class's is [(0, 1), (0, 1)]
    runs = list(einc.contract_expression(eq, *shapes).plan.path)
    assert (runs == own) == (new_shapes == "plan")
    einc.einsum(eq, *ops)
    if new_shapes == "torch":
        assert given == [[i for pair in runs for i in pair]]
    for operands in (ops, shapes):
        assert list(einc.contract_path(eq, *operands)[0]) == runs
        assert list(einc.explain(eq, *operands).path) == runs
        assert einc.explain(eq, *operands).optimizer == "auto"     # (the search asked for, not "explicit")
    checked.clear()
    einc.explain(eq, *shapes)
    assert len(checked) == (new_shapes == "torch")      # torch's op asked once for its path, not again


@pytest.mark.parametrize("new_shapes", ["plan", "class", "torch"])
@pytest.mark.parametrize("eq, shapes", [("ij,jk,kl->il", [(3, 33), (33, 17), (17, 2)]), ("ij,jk->ki", [(5, 4), (4, 6)]),
                                        ("ij->ji", [(4, 5)])])
def test_explain_says_torch_s_op_runs_a_call_it_answers(eq, shapes, new_shapes, monkeypatch):
    """Under ``EINC_NEW_SHAPES=torch`` torch's op runs a small call whole: ``explain`` shows
    no backend per step but one line naming it (for tensors and for shapes); a call torch's
    op does not answer (mixed dtypes, which it refuses; narrow integers; a size 0) keeps its steps' backends."""
    monkeypatch.setenv("EINC_NEW_SHAPES", new_shapes)
    ops = [torch.randn(s) for s in shapes]
    for operands in (ops, shapes):
        shown = einc.explain(eq, *operands)
        whole = "torch's einsum op (torch._VF.einsum) runs the whole call" in shown.note
        assert whole == (new_shapes == "torch") and (shown.backends == ()) == whole
        assert ("  Backend: torch's einsum op" in str(shown)) == whole
        assert str(shown).split("\n")[7].rstrip().endswith("backend") != whole
        steps = shown.to_dict()["steps"]     # (explain --json: every step keeps its key)
        assert all("backend" in s for s in steps) and all(s["backend"] is None for s in steps) == whole
    mixed = einc.explain(eq, *ops[:-1], ops[-1].double()) if len(ops) > 1 else einc.explain(eq, *shapes, dtype="int8")
    assert mixed.backends == ("torch",) * len(mixed.steps) and "torch's einsum op" not in mixed.note
    empty = einc.explain(eq, *[(0, *s[1:]) if k == 0 else s for k, s in enumerate(shapes)])
    assert "torch's einsum op" not in empty.note


@pytest.mark.parametrize("mode", ["real", "fake", "symbolic"])
def test_an_expression_traced_by_make_fx_gives_its_eager_bits(mode):
    """An expression's call traced by ``make_fx``: with symbolic sizes it looked up its kept
    runs by shape, and a symbolic size is unhashable (TypeError); the graph gives the eager
    call's bits, at another size too where the sizes are symbolic."""
    g = torch.Generator().manual_seed(0)
    expr = einc.contract_expression("ij,jk,kl->li", (5, 17), (17, 9), (9, 2))
    ops = [torch.randn(s, generator=g, dtype=torch.float64) for s in [(5, 17), (17, 9), (9, 2)]]
    graph = make_fx(lambda *x: expr(*x), tracing_mode=mode)(*ops)
    assert torch.equal(graph(*ops), expr(*ops))
    if mode == "symbolic":
        other = [torch.randn(s, generator=g, dtype=torch.float64) for s in [(7, 17), (17, 9), (9, 3)]]
        assert torch.equal(graph(*other), expr(*other))
