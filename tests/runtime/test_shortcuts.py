"""The executor's newest shortcuts, tested as users call einc: a plan's run by a loop until
its ``CALLS_BEFORE_CODE``-th call then compiled (runtime/program.py, a size class's step in
torch_executor/classed.py), small steps in their direct layout (torch_executor/direct.py),
operands' memory orders in the plan key (torch_executor/orders.py) and ``squeeze.dim`` for
one size-1 index.  Each promises the same answer for every size, dtype, layout and door."""

import threading

import pytest
import torch
from threads import errors_in_threads
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc.planner.equation import parse
from einc.planner.options import DEFAULT
from einc.runtime import dispatch, engine, program
from einc.runtime.torch_executor import classed, direct, ttgt


@pytest.fixture(autouse=True)
def _fresh():
    einc.cache_clear()
    ttgt.cache_clear()
    yield
    einc.cache_clear()


class _Ops(TorchDispatchMode):
    """The aten ops called under it, in order."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _oracle(eq, ops):
    wide = [x.to(torch.complex128 if x.dtype.is_complex else torch.float64) for x in ops]
    return torch.einsum(eq, *wide)


_TORCH_EINSUM = torch.einsum        # torch's own, whatever a test patches
CHAIN = "ab,bc,cd,de->ae"


def _chain(dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 6), (6, 7), (7, 1), (1, 3)]
    return [torch.randn(s, generator=g).to(dtype).requires_grad_(grad) for s in shapes]


def _calls(run, count):
    """``run()``'s results and aten ops, call by call."""
    results, ops = [], []
    for _ in range(count):
        with _Ops() as seen:
            results.append(run())
        ops.append(seen.ops)
    return results, ops


def _sublist(eq, ops):
    """``eq``'s sublist form (the other calling convention) with ``ops``."""
    ins, out = eq.split("->")
    args = []
    for term, x in zip(ins.split(","), ops):
        args += [x, [ord(c) - ord("a") for c in term]]
    return args + [[ord(c) - ord("a") for c in out]]


@pytest.mark.parametrize("how", ["string", "sublist", "scale", "no_grad", "inference"])
def test_loop_and_compiled_runs_call_the_same_aten_ops_with_the_same_bits(new_shapes, how, monkeypatch):
    """Every call, before and after the switch to the compiled function, runs the same aten
    ops and gives the same bits, whichever calling convention or grad mode calls it."""
    ops = _chain()
    entry = engine.entry(parse(CHAIN), ops, DEFAULT)
    calls = {
        "string": lambda: einc.einsum(CHAIN, *ops),
        "sublist": lambda: einc.einsum(*_sublist(CHAIN, ops)),
        "scale": lambda: engine.run_scaled(parse(CHAIN), ops, DEFAULT, 0.5),
        "no_grad": lambda: torch.no_grad()(lambda: einc.einsum(CHAIN, *ops))(),
        "inference": lambda: torch.inference_mode()(lambda: einc.einsum(CHAIN, *ops))(),
    }
    first = entry.run
    results, seen = _calls(calls[how], program.CALLS_BEFORE_CODE + 3)
    assert entry.run is not first, "the entry's run was not swapped for the compiled one"
    assert all(s == seen[0] for s in seen), [i for i, s in enumerate(seen) if s != seen[0]]
    assert all(torch.equal(r, results[0]) for r in results)
    want = _oracle(CHAIN, ops) * (0.5 if how == "scale" else 1)
    torch.testing.assert_close(results[0].double(), want, rtol=1e-5, atol=1e-5)


SWITCH_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", SWITCH_DTYPES)
def test_every_dtype_keeps_its_bits_and_ops_across_the_switch(dtype, new_shapes, monkeypatch):
    """Each dtype, one tensor passed as several operands (aliased), past the switch: the
    same ops every call after the first (which builds the entry), the same bits every
    call, and torch's answer (bools: an elementwise product, the
    matrix products torch refuses)."""
    x = (torch.rand(6, 6, generator=torch.Generator().manual_seed(17), dtype=torch.float64) * 4 - 2).round()
    x = x.to(dtype)
    eq = "ab,ab,ab->ab" if dtype == torch.bool else "ab,bc,cd->ad"
    results, seen = _calls(lambda: einc.einsum(eq, x, x, x), program.CALLS_BEFORE_CODE + 3)
    assert all(s == seen[1] for s in seen[1:]), [i for i, s in enumerate(seen) if s != seen[1]]
    assert all(torch.equal(r, results[0]) for r in results)
    want = _TORCH_EINSUM(eq, x, x, x)
    assert results[0].dtype == want.dtype
    torch.testing.assert_close(results[0], want, rtol=1e-2, atol=1e-2)


def test_loop_and_compiled_runs_give_the_same_gradients_and_backward_ops(new_shapes, monkeypatch):
    ops = _chain(torch.float64, grad=True)
    weight = torch.rand(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def call():
        out = einc.einsum(CHAIN, *ops)
        return torch.autograd.grad((out * weight).sum(), ops)
    call()      # (its first call builds the entry and the backward's: torch is asked for dtypes there)
    results, seen = _calls(call, program.CALLS_BEFORE_CODE + 3)
    assert all(s == seen[0] for s in seen), [i for i, s in enumerate(seen) if s != seen[0]]
    assert all(all(map(torch.equal, r, results[0])) for r in results)
    wide = [x.detach().clone().requires_grad_() for x in ops]
    want = torch.autograd.grad((torch.einsum(CHAIN, *wide) * weight).sum(), wide)
    for g, w in zip(results[0], want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_second_order_gradients_keep_their_bits_across_the_switch(new_shapes, monkeypatch):
    ops = _chain(torch.float64, grad=True)

    def call():
        (ga,) = torch.autograd.grad(einc.einsum(CHAIN, *ops).sin().sum(), ops[0], create_graph=True)
        return torch.autograd.grad(ga.square().sum(), ops[1:])
    results = [call() for _ in range(program.CALLS_BEFORE_CODE + 3)]
    assert all(all(map(torch.equal, r, results[0])) for r in results)
    wide = [x.detach().clone().requires_grad_() for x in ops]
    (ga,) = torch.autograd.grad(torch.einsum(CHAIN, *wide).sin().sum(), wide[0], create_graph=True)
    for g, w in zip(results[0], torch.autograd.grad(ga.square().sum(), wide[1:])):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


CLASS_SHAPES = [[(3, 5, 4), (3, 4, 6)], [(3, 7, 4), (3, 4, 5)], [(2, 5, 3), (2, 3, 7)], [(3, 6, 4), (3, 4, 7)],
                [(3, 1, 4), (3, 4, 6)], [(3, 5, 0), (3, 0, 6)], [(0, 5, 4), (0, 4, 6)], [(3, 5, 1), (3, 1, 6)]]


def test_a_class_s_shapes_give_their_own_bits_before_and_after_the_switch(monkeypatch):
    """Shapes of one size class (and their neighbours with sizes 0 and 1) called in turn,
    so that the class's step switches to compiled code mid-way: each shape's answer has
    the bits it has alone in a fresh process, and torch's value."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    g = torch.Generator().manual_seed(13)
    calls = [[torch.randn(s, generator=g) for s in shapes] for shapes in CLASS_SHAPES]
    eq = "bik,bkj->bji"
    alone = []
    for ops in calls:
        einc.cache_clear()
        alone.append(einc.einsum(eq, *ops))
        torch.testing.assert_close(alone[-1], _TORCH_EINSUM(eq, *ops))
    einc.cache_clear()
    for k in range(3 * program.CALLS_BEFORE_CODE):
        ops = calls[k % len(calls)]
        assert torch.equal(einc.einsum(eq, *ops), alone[k % len(calls)]), CLASS_SHAPES[k % len(calls)]
    assert not isinstance(engine.entry(parse(eq), calls[0], DEFAULT).run, classed._Interpreted)


TWO_KINDS = [(CHAIN, [(5, 6), (6, 7), (7, 1), (1, 3)]), ("bik,bkj->bji", [(3, 5, 4), (3, 4, 6)])]  # (a class's: 1 step)


@pytest.mark.parametrize("eq,shapes", TWO_KINDS)
def test_two_threads_calling_a_new_plan_around_its_switch_agree(new_shapes, eq, shapes, monkeypatch):
    """Two threads call one plan from its 10th call to past its switch at once: every
    answer has the first call's bits, and the entry ends up running the compiled code."""
    g = torch.Generator().manual_seed(2)
    ops = [torch.randn(s, generator=g) for s in shapes]
    entry = engine.entry(parse(eq), ops, DEFAULT)
    first = entry.run
    want = einc.einsum(eq, *ops)
    for _ in range(8):
        einc.einsum(eq, *ops)
    start, got = threading.Barrier(2), [[], []]

    def work(t):
        start.wait()
        for _ in range(2 * program.CALLS_BEFORE_CODE):
            got[t].append(einc.einsum(eq, *ops))
    errors = errors_in_threads(work, range(2))
    assert not errors, errors
    assert all(torch.equal(r, want) for r in got[0] + got[1])
    assert entry.run is not first
    assert einc.einsum(eq, *ops).data_ptr() != want.data_ptr() and torch.equal(einc.einsum(eq, *ops), want)


@pytest.mark.parametrize("eq,shapes", TWO_KINDS)
def test_a_run_wrapped_in_a_cast_keeps_its_wrapper_and_bits_across_the_switch(new_shapes, eq, shapes, monkeypatch):
    """Where the entry's run is wrapped (a cast to torch's dtype, as dispatch wraps it where
    the executor's differs), the switch to compiled code happens underneath the wrapper,
    never in place of it: every call is cast, with the same bits and ops."""
    g = torch.Generator().manual_seed(3)
    ops = [torch.randn(s, generator=g) for s in shapes]
    entry = engine.entry(parse(eq), ops, DEFAULT)
    wrapped = entry.run = dispatch._cast(entry.run, torch.float64)
    results, seen = _calls(lambda: einc.einsum(eq, *ops), program.CALLS_BEFORE_CODE + 3)
    assert entry.run is wrapped
    assert all(r.dtype == torch.float64 for r in results)
    assert all(s == seen[0] for s in seen) and all(torch.equal(r, results[0]) for r in results)
    torch.testing.assert_close(results[0], _oracle(eq, ops), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq,shapes", TWO_KINDS)
def test_vmap_and_func_grad_keep_their_bits_across_the_switch(new_shapes, eq, shapes, monkeypatch):
    """``torch.func.vmap`` (batched tensors through the plan's own ops) and ``torch.func.grad``
    called past the switch: each call the first one's bits, and the oracle's value."""
    g = torch.Generator().manual_seed(15)
    ops = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    batch = torch.randn(3, *shapes[0], generator=g, dtype=torch.float64)
    mapped = torch.func.vmap(lambda x: einc.einsum(eq, x, *ops[1:]))
    graded = torch.func.grad(lambda x: einc.einsum(eq, x, *ops[1:]).sin().sum())
    first = mapped(batch), graded(ops[0])
    for _ in range(program.CALLS_BEFORE_CODE + 2):
        assert torch.equal(mapped(batch), first[0]) and torch.equal(graded(ops[0]), first[1])
    ins, out = eq.split("->")
    torch.testing.assert_close(first[0], _TORCH_EINSUM(f"Z{ins.split(',')[0]},{ins.split(',', 1)[1]}->Z{out}",
                                                       batch, *ops[1:]), rtol=1e-12, atol=1e-12)
    theirs = torch.func.grad(lambda x: _TORCH_EINSUM(eq, x, *ops[1:]).sin().sum())(ops[0])
    torch.testing.assert_close(first[1], theirs, rtol=1e-12, atol=1e-12)


def test_a_class_step_s_interpreted_and_compiled_runs_cast_and_scale_alike(monkeypatch):
    """A size class's one-step run of float16 operands (its result cast as torch's) with
    and without a scale, interpreted and compiled: the same bits and ops."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    g = torch.Generator().manual_seed(4)
    ops = [torch.randn(s, generator=g).half() for s in [(3, 5, 4), (3, 4, 6)]]
    eq = "bik,bkj->bji"
    entry = engine.entry(parse(eq), ops, DEFAULT)
    assert isinstance(entry.run, classed._Interpreted)
    results, seen = _calls(lambda: (entry.run(ops), entry.run(ops, 0.25)), classed.CALLS_BEFORE_CODE + 2)
    assert not isinstance(entry.run, classed._Interpreted)
    assert all(s == seen[0] for s in seen)
    assert all(torch.equal(r[0], results[0][0]) and torch.equal(r[1], results[0][1]) for r in results)
    assert results[0][0].dtype == torch.float16
    torch.testing.assert_close(results[0][0].double(), _oracle(eq, ops), rtol=2e-3, atol=2e-3)


# --- direct layouts at the size boundary -----------------------------------------------------

def _sized(elements):
    """``ab,bc->ac`` shapes whose largest tensor has ``elements`` elements."""
    return {ttgt.SMALL - 1: [(63, 65), (65, 2)], ttgt.SMALL: [(64, 64), (64, 2)]}[elements]


BOUNDARY = [("ab,bc->ac", shape) for shape in (_sized(ttgt.SMALL - 1), _sized(ttgt.SMALL))] + [
    ("ab,bc->ca", [(1, 4095), (4095, 1)]), ("abc,cd->dba", [(1, 63, 65), (65, 0)]),
    ("abc,acd->abd", [(3, 1, 1365), (3, 1365, 1)]), ("ab,ab->a", [(63, 65), (63, 65)]),
    ("abc,bc->a", [(0, 64, 64), (64, 64)]), ("abc,bc->a", [(1, 64, 64), (64, 64)]),
    ("abc,acd->abd", [(0, 3, 4), (0, 4, 5)]), ("abc,acd->abd", [(1, 63, 65), (1, 65, 1)]),
    ("abc,acd->abd", [(2, 0, 4), (2, 4, 5)]), ("abc,acd->abd", [(2, 3, 1), (2, 1, 0)]),
]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.int64, torch.bool]
TOL = {torch.float16: 2e-2, torch.bfloat16: 1e-1, torch.float32: 1e-5, torch.float64: 1e-12, torch.complex64: 1e-5}


def _operand(shape, dtype, how, g):
    x = torch.rand(shape, generator=g, dtype=torch.float64)
    x = (x * 4 - 2).round().to(dtype) if dtype in (torch.int64, torch.bool) else x.to(dtype)
    if how == "permuted" and x.dim() >= 2:
        return x.transpose(0, -1).contiguous().transpose(0, -1)
    if how == "sliced":
        return torch.cat([x, x], dim=-1)[..., ::2] if x.dim() else x
    if how == "broadcast" and x.dim() >= 1 and shape[0] > 1:
        return x[:1].expand(shape)
    return x


def _torch_s(eq, ops):
    """torch.einsum's answer, or the error it raises (bool matrix products)."""
    try:
        return torch.einsum(eq, *ops)
    except (RuntimeError, NotImplementedError) as e:
        return e


def _close(got, want, dtype):
    if dtype in (torch.int64, torch.bool):
        assert got.dtype == want.dtype and torch.equal(got, want)
        return
    top = max(_oracle("...->...", [want]).abs().max().item(), 1.0) if want.numel() else 1.0
    torch.testing.assert_close(got.to(want.dtype), want, rtol=0, atol=TOL[dtype] * top)


@pytest.mark.parametrize("how", ["plain", "permuted", "sliced", "broadcast"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_direct_and_a_weighed_step_give_the_oracle_s_answer_at_the_size_boundary(dtype, how, monkeypatch):
    """At ``ttgt.SMALL - 1`` and ``ttgt.SMALL`` elements, with sizes 0 and 1 in each role:
    every step forced direct (where allowed) and every step weighed both answer as torch
    does (integers and bools exactly, in torch's dtype)."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    g = torch.Generator().manual_seed(5)
    for eq, shapes in BOUNDARY:
        ops = [_operand(s, dtype, how, g) for s in shapes]
        want = _torch_s(eq, ops) if dtype in (torch.int64, torch.bool) else _oracle(eq, ops)
        for choice_ns in (float("inf"), 0.0):
            monkeypatch.setattr(direct, "CHOICE_NS", choice_ns)
            einc.cache_clear()
            ttgt.cache_clear()
            if isinstance(want, Exception):
                with pytest.raises(type(want)):
                    einc.einsum(eq, *ops)
            else:
                _close(einc.einsum(eq, *ops), want, dtype)


def test_the_size_boundary_is_where_direct_layouts_stop():
    below, at = _sized(ttgt.SMALL - 1), _sized(ttgt.SMALL)
    sizes = lambda s: {"a": s[0][0], "b": s[0][1], "c": s[1][1]}  # noqa: E731
    assert direct.most_saved("ab", "bc", "ac", sizes(below)) is not None
    assert direct.most_saved("ab", "bc", "ac", sizes(at)) is None


@pytest.mark.parametrize("shapes", [_sized(ttgt.SMALL - 1), _sized(ttgt.SMALL), [(1, 64), (64, 0)]])
def test_a_boundary_call_gives_one_answer_eager_traced_compiled_and_after_other_shapes(shapes):
    """The same call, forward and gradients: the same bits eager, under ``make_fx``, under
    ``torch.compile(fullgraph=True)`` and after many other shapes of its equation."""
    eq = "ab,bc->ca"
    g = torch.Generator().manual_seed(6)
    ops = [torch.randn(s, generator=g) for s in shapes]

    def forward(a, b):
        return einc.einsum(eq, a, b)

    def both(a, b, fn=forward):
        out = fn(a, b)
        return (out, *torch.autograd.grad(out.sum(), (a, b))) if out.numel() else (out,)
    leaves = lambda: [o.clone().requires_grad_() for o in ops]  # noqa: E731
    eager = both(*leaves())
    traced = make_fx(lambda a, b: both(a, b))(*leaves())(*leaves())
    torch._dynamo.reset()
    compiled = both(*leaves(), fn=torch.compile(forward, fullgraph=True, backend="aot_eager", dynamic=False))
    torch._dynamo.reset()
    for n in range(1, 300):
        einc.einsum(eq, torch.randn(1 + n % 70, 1 + n % 61), torch.randn(1 + n % 61, n % 3))
    later = both(*leaves())
    for other in (traced, compiled, later):
        assert all(torch.equal(x, y) for x, y in zip(eager, other)) and len(eager) == len(other)
    torch.testing.assert_close(eager[0].double(), _oracle(eq, ops), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_direct_and_weighed_steps_give_the_oracle_s_gradients_at_the_size_boundary(dtype, monkeypatch):
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    g = torch.Generator().manual_seed(11)
    for eq, shapes in BOUNDARY:
        ops = [_operand(s, dtype, "permuted", g).requires_grad_() for s in shapes]
        wide = [x.detach().double().requires_grad_() for x in ops]
        want = torch.einsum(eq, *wide)
        weight = torch.rand(want.shape, generator=g, dtype=torch.float64)
        theirs = torch.autograd.grad((want * weight).sum(), wide)
        for choice_ns in (float("inf"), 0.0):
            monkeypatch.setattr(direct, "CHOICE_NS", choice_ns)
            einc.cache_clear()
            ttgt.cache_clear()
            out = einc.einsum(eq, *ops)
            for mine, w in zip(torch.autograd.grad((out * weight.to(dtype)).sum(), ops), theirs):
                _close(mine, w, dtype)


# --- K_UNIT: the search that prices a right operand read along K ----------------------------

def _k_steps(rng, count):
    """Steps ``ta, tb -> out`` of 3-6 indices, one of each role (batch, left's, right's,
    summed) at least but batch, sizes 1 to 128: products around ``ttgt.K_UNIT_FROM``."""
    steps = []
    while len(steps) < count:
        roles = [rng.choice("bmnkmnk") for _ in range(rng.randint(3, 6))]
        if not {"m", "n", "k"} <= set(roles):
            continue
        terms = [[i for i, r in enumerate(roles) if r in keep] for keep in ("bmk", "bnk", "bmn")]
        for t in terms:
            rng.shuffle(t)
        steps.append((*terms, {i: rng.choice([1, 8, 16, 24, 64, 128]) for i in range(len(roles))}))
    return steps


def test_the_search_with_k_unit_takes_what_pick_takes_among_every_candidate(monkeypatch):
    """``choose`` searches without ``K_UNIT`` first and again with it only where the
    cheapest reads its right operand along K: it takes what ``pick`` takes over every
    candidate priced with ``K_UNIT`` (``reads``) and without it (training), and
    ``K_UNIT`` decides some of these steps."""
    monkeypatch.setattr(ttgt, "SMALL", 0)
    steps = _k_steps(__import__("random").Random(12), 120)

    def decide():
        ttgt.cache_clear()
        return [ttgt.choose(ta, tb, out, sizes, 0, 4, loops=loops, reads=reads)
                for ta, tb, out, sizes in steps for loops in (True, False) for reads in (True, False)]
    fast = decide()
    real = ttgt.pick
    monkeypatch.setattr(ttgt, "pick", lambda found: real(found))
    assert decide() == fast
    assert any(fast[k] != fast[k + 1] for k in range(0, len(fast), 2)), "K_UNIT decided none of the steps"


# --- memory orders and size-1 indices -------------------------------------------------------

def _strided(shape, strides, g, dtype=torch.float64):
    room = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 1
    return torch.randn(room, generator=g, dtype=dtype).as_strided(shape, strides)


@pytest.mark.parametrize("strides_a", [(64, 1, 1), (64, 9999, 1), (1, 0, 64), (64, 0, 1), (1, 7, 64), (2, 0, 1)])
def test_operands_at_or_above_small_with_odd_strides_give_the_oracle_s_answer(strides_a):
    """Size-1 dimensions with any stride, transposed, stride-0 and overlapping operands of
    ``ttgt.SMALL`` elements and more (their memory order is read): torch's answer, and
    operands whose size-1 strides alone differ share their entry."""
    g = torch.Generator().manual_seed(7)
    a = _strided((64, 1, 64), strides_a, g)
    b = _strided((64, 1, 5), (5, 3, 1), g)
    for eq in ("aub,avc->bc", "aub,bvc->auc", "aub,avc->cub"):
        x, y = (a, b) if eq != "aub,bvc->auc" else (a, b.transpose(0, 2).contiguous().transpose(0, 2)[:, :, :5])
        torch.testing.assert_close(einc.einsum(eq, x, y), torch.einsum(eq, x, y), rtol=1e-12, atol=1e-12)
    same = a.as_strided(a.shape, (a.stride(0), 12345, a.stride(2)))
    before = einc.cache_info().plans.currsize
    torch.testing.assert_close(einc.einsum("aub,avc->bc", same, b), torch.einsum("aub,avc->bc", same, b))
    assert einc.cache_info().plans.currsize == before


def test_an_expanded_operand_and_a_transposed_one_of_its_memory_order_share_an_entry_and_answer():
    """A (64, 64) operand expanded from (64, 1) (strides (1, 0)) and a transposed one
    (strides (1, 64)) lie in one order: one entry, each with torch's answer."""
    g = torch.Generator().manual_seed(14)
    w = torch.randn(64, 9, generator=g, dtype=torch.float64)
    expanded = torch.randn(64, 1, generator=g, dtype=torch.float64).expand(64, 64)
    transposed = torch.randn(64, 64, generator=g, dtype=torch.float64).T
    for x in (expanded, transposed, expanded):
        for eq in ("ij,jk->ik", "ij,ik->jk"):
            torch.testing.assert_close(einc.einsum(eq, x, w), torch.einsum(eq, x, w), rtol=1e-12, atol=1e-12)
    assert einc.cache_info().plans.currsize == 2


def test_a_result_never_aliases_an_operand():
    """One tensor passed as both operands, or a result in an operand's own order: writing
    into the result in place leaves the operands as they were."""
    g = torch.Generator().manual_seed(8)
    a = torch.randn(64, 64, generator=g, dtype=torch.float64)
    for eq in ("ab,bc->ac", "ab,bc->ab", "ab->ab", "ab->ba", "ab,cd->ab"):
        ops = [a, a] if "," in eq else [a]
        if eq == "ab,cd->ab":
            ops = [a, torch.ones(1, 1, dtype=torch.float64)]
        keep = a.clone()
        out = einc.einsum(eq, *ops)
        out.add_(1)
        assert torch.equal(a, keep), eq


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("eq,shapes", [("abc,cd->ad", [(3, 1, 4), (4, 5)]), ("abc,cd->ad", [(3, 1, 0), (0, 5)]),
                                       ("abce,cd->ad", [(3, 1, 4, 1), (4, 5)]), ("ab,bc->c", [(1, 1), (1, 7)])])
def test_a_lonely_size_one_index_is_squeezed_in_every_dtype_and_door(eq, shapes, dtype):
    """One size-1 index an operand alone holds (``squeeze(dim)``), or two: torch's answer
    and dtype eagerly, under ``make_fx``, ``jit.trace`` and ``torch.compile``."""
    g = torch.Generator().manual_seed(9)
    ops = [_operand(s, dtype, "plain", g) for s in shapes]
    want = _torch_s(eq, ops)
    call = lambda *xs: einc.einsum(eq, *xs)  # noqa: E731
    if isinstance(want, Exception):
        with pytest.raises(type(want)):
            call(*ops)
        return
    got = call(*ops)
    assert got.dtype == want.dtype
    if dtype in (torch.int64, torch.bool):
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype] * 4)
    assert torch.equal(make_fx(call)(*ops)(*ops), got)
    assert torch.equal(torch.jit.trace(call, ops, check_trace=False)(*ops), got)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(call, fullgraph=True, backend="eager")(*ops), got)
    torch._dynamo.reset()


# --- the doors and PyTorch's machinery through both shortcuts ---------------------------------



class _Net(torch.nn.Module):
    def forward(self, a, b, c):
        return torch.einsum("ab,bc,cd->ad", a, b, c)


@pytest.mark.parametrize("choice_ns", [float("inf"), 0.0])
def test_direct_and_weighed_steps_answer_alike_through_every_door(choice_ns, monkeypatch):
    """Small steps forced direct, or all weighed, called past the plan's switch to compiled
    code: the patched ``torch.einsum`` under ``fx.symbolic_trace`` and ``jit.trace``,
    ``contract_expression``, ``vmap``, and ``torch.func.grad`` to the second order agree
    with the oracle, and each door's calls with its first call's bits."""
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    monkeypatch.setattr(direct, "CHOICE_NS", choice_ns)
    g = torch.Generator().manual_seed(10)
    a, b, c = (torch.randn(s, generator=g, dtype=torch.float64) for s in [(4, 1), (1, 5), (5, 3)])
    eq = "ab,bc,cd->ad"
    want = _TORCH_EINSUM(eq, a, b, c)
    monkeypatch.setattr(torch, "einsum", einc.einsum)
    doors = {"fx": torch.fx.symbolic_trace(_Net()), "jit": torch.jit.trace(_Net(), (a, b, c), check_trace=False),
             "expression": einc.contract_expression(eq, a.shape, b.shape, c.shape)}
    assert any(n.target is einc.einsum for n in doors["fx"].graph.nodes)
    for name, door in doors.items():
        answers = [door(a, b, c) for _ in range(program.CALLS_BEFORE_CODE + 2)]
        assert all(torch.equal(x, answers[0]) for x in answers), name
        torch.testing.assert_close(answers[0], want, rtol=1e-12, atol=1e-12)
    batch = torch.randn(3, 4, 1, generator=g, dtype=torch.float64)
    mapped = torch.func.vmap(lambda x: einc.einsum(eq, x, b, c))(batch)
    torch.testing.assert_close(mapped, _TORCH_EINSUM("zab,bc,cd->zad", batch, b, c), rtol=1e-12, atol=1e-12)
    f = lambda fn: lambda x: fn(eq, x, b, c).sin().sum()  # noqa: E731
    second = torch.func.grad(lambda x: torch.func.grad(f(einc.einsum))(x).sum())(a)
    theirs = torch.func.grad(lambda x: torch.func.grad(f(_TORCH_EINSUM))(x).sum())(a)
    torch.testing.assert_close(second, theirs, rtol=1e-12, atol=1e-12)


def test_the_einc_backend_s_scaled_calls_keep_their_bits_across_the_switch(new_shapes, monkeypatch):
    """``torch.compile(backend="einc")`` turns a matmul chain and its factor into einc's op
    (the factor as the op's scale or a graph op): called past the plan's switch, each call
    has the first one's bits and the oracle's value, forward and gradients."""
    import einc.dynamo
    g = torch.Generator().manual_seed(16)
    shapes = [(6, 5), (5, 7), (7, 1), (1, 4)]
    ops = [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b, c, d: (a @ b @ c @ d) * 0.5, fullgraph=True,
                       backend=einc.dynamo.make_backend(inner="eager", rewrite="all"))

    def call():
        out = fn(*ops)
        return (out, *torch.autograd.grad(out.sin().sum(), ops))
    program._CODE.clear()
    first = call()
    assert einc.dynamo.last_report.rewrites and not program._CODE
    for _ in range(program.CALLS_BEFORE_CODE + 2):
        assert all(map(torch.equal, call(), first))
    assert program._CODE, "no plan's run switched to compiled code"
    torch._dynamo.reset()
    wide = [x.detach().clone().requires_grad_() for x in ops]
    want = wide[0] @ wide[1] @ wide[2] @ wide[3] * 0.5
    torch.testing.assert_close(first[0], want, rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(first[1:], torch.autograd.grad(want.sin().sum(), wide)):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-12)
