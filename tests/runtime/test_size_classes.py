"""Plans that serve a size class (runtime/sizeclass.py): a small call of one or two
operands runs its class's plan, made once at the class's canonical sizes, whatever shape
of the class it has; checked against torch.einsum on float64 copies over the fuzzer's
equations (sizes 0 and 1, broadcasting, ellipses, repeated indices, transposed, sliced,
expanded and offset operands, both calling conventions), with gradients, and for one
answer whatever shapes of the class came first."""

import dataclasses
import gc
import random

import fuzz
import pytest
import torch
from threads import errors_in_threads

import einc
from einc.planner import plan_for
from einc.planner.equation import parse
from einc.planner.options import DEFAULT, Options
from einc.runtime import engine, sizeclass
from einc.runtime.torch_executor import ttgt

SEEDS = range(600)


@pytest.fixture(autouse=True)
def _class_plans(monkeypatch):
    monkeypatch.setenv("EINC_NEW_SHAPES", "class")
    einc.cache_clear()
    yield
    einc.cache_clear()


def _scaled(case, rng):
    """``case`` with every size above 1 scaled into a larger octave (the same map for every
    dimension of one size, so the shapes still fit the equation)."""
    sizes = {s for shape in case.shapes for s in shape if s > 1} | {s for s in case.sizes if s > 1}
    new = {s: rng.randint(4 * s, 8 * s - 1) for s in sorted(sizes)}
    grow = lambda s: new.get(s, s)  # noqa: E731
    return dataclasses.replace(case, shapes=[tuple(map(grow, sh)) for sh in case.shapes],
                               sizes=[grow(s) for s in case.sizes], ell_sizes=[grow(s) for s in case.ell_sizes])


def _cases():
    """Fuzzer cases of one or two float operands that torch.einsum answers, each at its
    own sizes and scaled twice."""
    found = []
    for seed in SEEDS:
        rng = random.Random(seed)
        case = fuzz.make_case(rng, dtypes=fuzz.FLOATS, max_operands=4)
        for variant in (case, _scaled(case, rng), _scaled(case, rng)):
            ops = fuzz.operands(variant, seed)
            try:
                torch.einsum(variant.oracle_equation, *ops)
            except Exception:       # noqa: BLE001 - error parity is the fuzzer's
                continue
            found.append((variant, ops))
    return found


CASES = _cases()


def _served_by_a_class(case, ops) -> bool:
    eq = parse(case.oracle_equation)
    entry = engine._plans.peek(engine._key(eq, ops, DEFAULT))
    return entry is not None and entry.size_class is not None


def test_class_plans_give_torch_s_answer_over_the_fuzzer_s_equations():
    served = 0
    for case, ops in CASES:
        before = [o.clone() for o in ops]
        out = einc.einsum(*case.args(ops))
        fuzz.check_result(case, out, ops, torch.einsum(case.oracle_equation, *ops).dtype)
        assert all(torch.equal(o, b) for o, b in zip(ops, before))
        served += _served_by_a_class(case, ops)
    assert served >= len(CASES) // 2, (served, len(CASES))


def test_class_plans_give_torch_s_gradients():
    checked = 0
    for case, ops in CASES:
        shapes = [o.shape for o in ops]
        if case.dtype != torch.float64 or sizeclass.canonical(parse(case.oracle_equation), shapes) is None:
            continue
        leaves = [o.detach().clone().requires_grad_() for o in ops]
        mine = [o.detach().clone().requires_grad_() for o in ops]
        ref = torch.einsum(case.oracle_equation, *leaves)
        out = einc.einsum(*case.args(mine))
        weight = torch.rand(ref.shape, dtype=ref.dtype, generator=torch.Generator().manual_seed(3))
        expected = torch.autograd.grad((ref * weight).sum(), leaves, allow_unused=True)
        got = torch.autograd.grad((out * weight).sum(), mine, allow_unused=True)
        for g, e in zip(got, expected):
            if e is None:
                assert g is None or not g.abs().max()
            else:
                torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-9 * case.summed_extent())
        checked += 1
    assert checked >= 100, checked


CLASS = {   # equation: shapes of one size class, in no particular order
    "bhid,bhjd->bhij": [[(1, 2, i, 16), (1, 2, j, 16)] for i, j in ((9, 11), (15, 8), (12, 12), (8, 14))],
    "ij,jk->ik": [[(i, j), (j, k)] for i, j, k in ((4, 5, 6), (7, 4, 4), (5, 7, 5))],
    "akbc,jk->cjba": [[(a, k, 9, 10), (3, k, )] for a, k in ((33, 40), (63, 33), (40, 63))],
    "zui,zvj->zuvij": [[(z, 3, 5), (z, 3, 4)] for z in (260, 300, 511)],
    "ij,ij->i": [[(i, j), (i, j)] for i, j in ((5, 300), (7, 260), (4, 511))],
    "iij->ji": [[(i, i, 5)] for i in (8, 13, 15)],
    "b...,b...->...": [[(3, 5, 1), (3, 5, 6)], [(2, 6, 1), (2, 6, 5)]],
}


@pytest.mark.parametrize("eq", list(CLASS))
def test_shapes_of_one_class_give_the_same_bits_in_any_order(eq):
    g = torch.Generator().manual_seed(0)
    ops = [[torch.randn(s, generator=g) for s in shapes] for shapes in CLASS[eq]]
    first = [einc.einsum(eq, *o) for o in ops]
    assert sizeclass.info().currsize == 1
    einc.cache_clear()
    again = [einc.einsum(eq, *o) for o in reversed(ops)][::-1]
    for a, b, o in zip(first, again, ops):
        assert torch.equal(a, b)
        torch.testing.assert_close(a.double(), torch.einsum(eq, *[x.double() for x in o]), rtol=1e-5, atol=1e-5)


def test_the_table_of_canonical_sizes_is_canonical_size_of_each():
    """The table the class keys read below its end (made an octave at a time) holds
    ``canonical_size(n)`` at every ``n``."""
    assert [sizeclass.canonical_size(n) for n in range(sizeclass._TABLE)] == sizeclass._C


def test_a_class_is_planned_once_at_its_own_sizes(monkeypatch):
    planned = []
    real = sizeclass._plan

    def plan(eq, shapes, options):
        planned.append(tuple(map(tuple, shapes)))
        return real(eq, shapes, options)
    monkeypatch.setattr(sizeclass, "_plan", plan)
    for i in range(8, 16):
        einc.einsum("bhid,bhjd->bhij", torch.randn(1, 2, i, 16), torch.randn(1, 2, 23 - i, 16))
    assert planned == [((1, 3, 12, 24), (1, 3, 12, 24))]        # (2: the middle of 2-3)
    assert einc.cache_info().classes.currsize == 1
    assert einc.cache_info().plans.currsize == 8     # each shape's key names its class's entry


@pytest.mark.parametrize("eq,shapes", [("ij,jk->ik", [(4, 5), (6, 3)]), ("iij->j", [(5, 6, 2)]),
                                       ("bij,bjk->bik", [(2, 3, 4), (3, 4, 5)]),
                                       ("ij,ij->", [(5, 3), (6, 3)])])
def test_shapes_that_do_not_fit_raise_as_torch_does(eq, shapes):
    """Sizes of one class that do not fit each other (5 and 6 are one octave) are refused,
    never contracted by a plan that merges them."""
    ops = [torch.randn(s) for s in shapes]
    with pytest.raises(RuntimeError):
        torch.einsum(eq, *ops)
    with pytest.raises(RuntimeError):
        einc.einsum(eq, *ops)


def test_other_settings_and_larger_calls_are_planned_per_shape(monkeypatch):
    a, b = torch.randn(64, 128), torch.randn(128, 129)
    einc.einsum("ij,jk->ik", a, b)          # past CLASS_WORK at its canonical sizes (96 * 96 * 192)
    assert sizeclass.info().currsize == 0
    chain = [torch.randn(2, 2) for _ in range(9)]
    einc.einsum("ab,bc,cd,de,ef,fg,gh,hi,ij->aj", *chain)      # past MOST_OPERANDS
    einc.einsum("ij,jk->ik", torch.randn(3, 4).to(torch.int32), torch.randn(4, 5).to(torch.int32))
    einc.einsum("ij,jk->ik", torch.randn(3, 0), torch.randn(0, 5))
    assert sizeclass.info().currsize == 0
    monkeypatch.setenv("EINC_NEW_SHAPES", "plan")
    einc.einsum("ij,jk->ik", torch.randn(3, 4), torch.randn(4, 5))
    assert sizeclass.info().currsize == 0 and einc.cache_info().plans.currsize == 5


def test_layout_any_and_scale_on_a_class_plan():
    a, b = torch.randn(6, 5, 7, 8), torch.randn(3, 5)
    out = einc.einsum("akbc,jk->cjba", a, b, layout="any")
    assert torch.ops.aten.is_non_overlapping_and_dense.default(out)
    torch.testing.assert_close(out, torch.einsum("akbc,jk->cjba", a, b))
    expr = einc.contract_expression("akbc,jk->cjba", a.shape, b.shape)
    torch.testing.assert_close(expr(a, b), torch.einsum("akbc,jk->cjba", a, b))
    assert sizeclass.info().currsize == 2


def test_the_class_s_layout_is_the_copy_model_s_choice_at_its_sizes(monkeypatch):
    """The layout is chosen once, at the canonical sizes, by the copy-cost model."""
    seen = []
    real = ttgt.choose

    def choose(ta, tb, out, sizes, *args, **kw):
        seen.append(tuple(sizes))
        return real(ta, tb, out, sizes, *args, **kw)
    monkeypatch.setattr(ttgt, "choose", choose)
    for k in (33, 40, 63):
        einc.einsum("akbc,jk->cjba", torch.randn(6, k, 7, 8), torch.randn(3, k))
    assert seen == [(6, 48, 6, 12, 3)]


def test_sizes_past_the_generated_table_are_classed_too():
    """A size past the generated classifier's table (2**14) is read the slow way."""
    for n in (20000, 30000):
        a, b = torch.randn(3, n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
        torch.testing.assert_close(einc.einsum("ij,j->i", a, b), torch.einsum("ij,j->i", a, b))
    assert sizeclass.info().currsize == 1
    assert sizeclass.canonical(parse("ij,j->i"), [(3, 20000), (20001,)]) is None
    assert sizeclass.canonical(parse("ij,j->i"), [(3, 20000), (1,)]) == ((3, 24576), (1,))


def test_a_scaled_call_runs_the_class_s_plan_times_the_scale():
    """The compile backend's scaled call (``engine.run_scaled``) on a class's entry."""
    eq = parse("bhid,bhjd->bhij")
    a, b = torch.randn(1, 2, 9, 16, dtype=torch.float64), torch.randn(1, 2, 11, 16, dtype=torch.float64)
    out = engine.run_scaled(eq, (a, b), DEFAULT, 0.25)
    torch.testing.assert_close(out, 0.25 * torch.einsum("bhid,bhjd->bhij", a, b))
    assert sizeclass.info().currsize == 1


def test_threads_asking_for_one_class_plan_it_once(monkeypatch):
    planned = []
    real = sizeclass._plan
    monkeypatch.setattr(sizeclass, "_plan", lambda *args: planned.append(1) or real(*args))

    def work(k):
        for i in range(8, 16):
            a, b = torch.randn(1, 2, i, 16, dtype=torch.float64), torch.randn(1, 2, 23 - k, 16, dtype=torch.float64)
            torch.testing.assert_close(einc.einsum("bhid,bhjd->bhij", a, b), torch.einsum("bhid,bhjd->bhij", a, b))
    errors = errors_in_threads(work, range(8, 12))
    assert not errors and planned == [1]


@pytest.mark.parametrize("eq,shapes", [("bhid,bhjd->bhij", [(1, 2, 9, 16), (1, 2, 11, 16)]),
                                       ("akbc,jk->cjba", [(6, 33, 5, 4), (3, 33)]),
                                       ("ij,ij->i", [(5, 300), (5, 300)]), ("iij->ji", [(8, 8, 5)]),
                                       ("zui,zvj->zuvij", [(30, 3, 5), (30, 3, 4)])])
def test_torch_func_transforms_through_a_class_plan(eq, shapes):
    """vmap, jvp and grad of torch.func run the class's torch ops with torch's own rules."""
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, dtype=torch.float64, generator=g) for s in shapes]
    batched = [torch.randn((3, *s), dtype=torch.float64, generator=g) for s in shapes]
    mine = torch.func.vmap(lambda *xs: einc.einsum(eq, *xs))(*batched)
    torch.testing.assert_close(mine, torch.func.vmap(lambda *xs: torch.einsum(eq, *xs))(*batched))
    tangents = [torch.randn_like(o) for o in ops]
    out, tangent = torch.func.jvp(lambda *xs: einc.einsum(eq, *xs), tuple(ops), tuple(tangents))
    want, want_tangent = torch.func.jvp(lambda *xs: torch.einsum(eq, *xs), tuple(ops), tuple(tangents))
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(tangent, want_tangent)
    grads = torch.func.grad(lambda *xs: einc.einsum(eq, *xs).sin().sum(), argnums=tuple(range(len(ops))))(*ops)
    want = torch.func.grad(lambda *xs: torch.einsum(eq, *xs).sin().sum(), argnums=tuple(range(len(ops))))(*ops)
    torch.testing.assert_close(grads, want)
    assert sizeclass.info().currsize >= 1


def test_three_operands_run_their_class_s_path_and_steps():
    """A call of three operands: the path and each step's layout chosen at the class's
    sizes, intermediates laid along their steps' outputs; one plan for the class."""
    def make(z):
        g = torch.Generator().manual_seed(z)
        return [torch.randn(z, 4, 5, 3, dtype=torch.float64, generator=g), torch.randn(z, 4, dtype=torch.float64,
                generator=g), torch.randn(z, 5, 2, dtype=torch.float64, generator=g)]
    calls = [make(z) for z in (300, 511, 260, 400)]
    first = [einc.einsum("zuvw,zu,zvj->zwj", *ops) for ops in calls]
    for ops, out in zip(calls, first):
        torch.testing.assert_close(out, torch.einsum("zuvw,zu,zvj->zwj", *ops))
    assert sizeclass.info().currsize == 1
    einc.cache_clear()
    assert all(torch.equal(einc.einsum("zuvw,zu,zvj->zwj", *ops), out)
               for ops, out in reversed(list(zip(calls, first))))


def test_explain_and_contract_path_describe_the_class_s_plan_that_runs():
    """A call its size class serves runs the class's path, which is not always the path
    planned for its shape alone: here ``(1, 2)`` first, chosen at the canonical sizes
    (3, 3), (3, 12), (12, 6), where (2, 3), (3, 8), (8, 4) alone would take ``(0, 1)``
    first.  explain and contract_path give the path that runs, each step's layout as the
    class's step runs it, and the costs at the call's sizes; before the class is planned
    (planned for explain, not kept) and after."""
    import opt_einsum

    from einc.planner import plan_for
    eq, shapes = "ab,bc,cd->ad", [(2, 3), (3, 8), (8, 4)]
    own = plan_for(eq, shapes)
    before = einc.explain(eq, *shapes)
    assert sizeclass.info().currsize == 0 and einc.cache_info().plans.currsize == 0
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    torch.testing.assert_close(einc.einsum(eq, *ops), torch.einsum(eq, *ops))
    ran = engine._plans.peek(engine._key(parse(eq), ops, DEFAULT))
    assert ran.size_class == ((3, 3), (3, 12), (12, 6))
    after = einc.explain(eq, *ops)
    path, info = einc.contract_path(eq, *shapes)
    cost = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)[1].opt_cost
    for shown in (before, after, info):
        assert tuple(shown.path) == ran.plan.path != own.path
        assert shown.size_class.plan.path == ran.plan.path and shown.size_class.canonical == ran.size_class
        assert shown.reasons == tuple(c.reason for c in ran.choices) and "mm(" in shown.reasons[0]
        assert shown.flops == cost > own.flops
        assert "Size class: this call runs the plan of its size class" in str(shown)
    assert tuple(path) == ran.plan.path and info.opt_cost == cost
    assert not before.size_class.cached and after.size_class.cached
    assert after.to_dict()["size_class"]["canonical_shapes"] == [[3, 3], [3, 12], [12, 6]]
    pair = [o.to(torch.complex64) for o in ops[:2]]     # each op the class's step runs, and no more
    assert [r.split(": ", 1)[1] for r in einc.explain("ab,bc->ac", *pair).reasons] == ["mm(a, b)"]
    big = einc.explain(eq, (64, 128), (128, 129), (129, 2))         # past CLASS_WORK: planned per shape
    assert big.size_class is None and "Size class" not in str(big)


@pytest.mark.parametrize("three", [False, True])
def test_a_device_keeps_its_own_entry_and_class(three):
    """The plan cache's key names the CPU by a bool, any other device by itself: a call on
    the meta device after the same shapes on the CPU (and back) gets its own entry and size
    class, and a result on its operands' device."""
    eq = "ij,jk,kl->il" if three else "ij,jk->ik"
    cpu = [torch.randn(4, 4, dtype=torch.float64) for _ in range(3 if three else 2)]
    meta = [o.to("meta") for o in cpu]
    want = torch.einsum(eq, *cpu)
    for ops in (cpu, meta, cpu, meta):
        got = einc.einsum(eq, *ops)
        assert got.device == ops[0].device and got.shape == want.shape
        if got.device.type == "cpu":
            torch.testing.assert_close(got, want)
    entries = {engine._key(parse(eq), ops, DEFAULT)[5] for ops in (cpu, meta)}
    assert entries == {True, torch.device("meta")}
    assert engine.cache_info().plans.currsize == 2 and engine.cache_info().classes.currsize == 2


@pytest.mark.parametrize("where", [0, 1, 2])
def test_operands_on_several_devices_have_no_class_and_get_torchs_answer(where):
    """A miss asks the size class first and torch's own check after it, so no class may
    serve operands on several devices: the class key is None for them, by the checks one by
    one and by the generated classifier alike, and a meta operand among CPU ones gets
    torch's answer (a meta result) once the equation's classifier is generated too."""
    eq = parse("ij,jk,kl->il")
    for n in range(sizeclass.SIGHTS_BEFORE_CODE + 2):     # past the sights: the generated classifier
        cpu = [torch.randn(3, 4 + n), torch.randn(4 + n, 5), torch.randn(5, 2)]
        torch.testing.assert_close(einc.einsum(eq.text, *cpu), torch.einsum(eq.text, *cpu))
    assert (eq.canonical, DEFAULT) in sizeclass._keyed
    ops = [torch.randn(3, 9), torch.randn(9, 5), torch.randn(5, 2)]
    ops[where] = ops[where].to("meta")
    key = engine._key(eq, ops, DEFAULT)
    assert sizeclass._class_key(eq, ops, DEFAULT, key) is None
    assert sizeclass._checked_key(eq, ops, DEFAULT, key) is None
    classes = engine.cache_info().classes.currsize
    want = torch.einsum(eq.text, *ops)
    got = einc.einsum(eq.text, *ops)
    assert got.device == want.device and got.shape == want.shape
    assert engine.cache_info().classes.currsize == classes


def _counting_compiles(monkeypatch):
    """The sources einc compiles for its size classes from now on (the classifiers and the
    classes' step functions)."""
    import builtins
    compiled, real = [], builtins.compile

    def counting(source, filename, *args, **kwargs):
        if filename == "<einc size class>":
            compiled.append(source)
        return real(source, filename, *args, **kwargs)
    monkeypatch.setattr(builtins, "compile", counting)
    return compiled


def _class_key(eq, shapes, options=DEFAULT, dtype=torch.float32):
    ops = [torch.zeros(shape, dtype=dtype) for shape in shapes]
    return sizeclass._class_key(eq, ops, options, engine._key(eq, ops, options))


def test_the_first_shapes_of_an_equation_are_classed_by_a_loop_then_by_generated_code(monkeypatch):
    """A compile costs what some fifty runs of the loop cost: an equation seen once (most
    of a first training step's) compiles no classifier; one seen more often compiles one
    per equation and ranks, whatever options its calls pass."""
    compiled = _counting_compiles(monkeypatch)
    eq = parse("bij,bjk->bik")
    for n in range(sizeclass.SIGHTS_BEFORE_CODE):
        assert _class_key(eq, [(2, 3, 4 + n), (2, 4 + n, 5)])[2] == ((3, 3, sizeclass.canonical_size(4 + n)),
                                                                    (3, sizeclass.canonical_size(4 + n), 6))
    assert compiled == []
    assert _class_key(eq, [(2, 3, 7), (2, 7, 5)])[2] == ((3, 3, 6), (3, 6, 6))
    assert len(compiled) == 1 and compiled[0].startswith("def classify(")
    left_to_right = Options.of(False)
    for _ in range(sizeclass.SIGHTS_BEFORE_CODE + 2):
        assert _class_key(eq, [(2, 3, 9), (2, 9, 5)], left_to_right)[:3] == (
            eq.canonical, left_to_right, ((3, 3, 12), (3, 12, 6)))
    assert len(compiled) == 1


def test_the_generated_classifier_answers_as_the_checks_one_by_one(monkeypatch):
    """Past its first sights an equation's calls are classed by its generated function,
    which answers as the checks read one by one (the loop's): for other dtypes, mixed
    dtypes, a sparse operand, sizes 0 and past the table, and another rank of an ellipsis
    (which it leaves to the checks)."""
    def both(eq, ops):
        key = engine._key(eq, ops, DEFAULT)
        fast = sizeclass._class_key(eq, ops, DEFAULT, key)
        assert fast == sizeclass._checked_key(eq, ops, DEFAULT, key), (eq.text, [o.shape for o in ops])
        return fast

    eq = parse("...ij,...jk->...ik")
    for n in range(sizeclass.SIGHTS_BEFORE_CODE + 1):
        assert both(eq, [torch.zeros(2, 3, 5 + n), torch.zeros(2, 5 + n, 4)])[2] == (
            (3, 3, sizeclass.canonical_size(5 + n)), (3, sizeclass.canonical_size(5 + n), 6))
    assert (eq.canonical, DEFAULT) in sizeclass._keyed
    generated = []
    monkeypatch.setattr(sizeclass, "_checked_key", lambda *args: generated.append(args) or None)
    assert _class_key(eq, [(2, 3, 9), (2, 9, 5)])[2] == ((3, 3, 12), (3, 12, 6))
    assert generated == []          # (the generated function answered)
    monkeypatch.undo()
    assert both(eq, [torch.zeros(2, 3, 9), torch.zeros(2, 9, 5, dtype=torch.float64)]) is None
    assert both(eq, [torch.zeros(2, 3, 9, dtype=torch.int64), torch.zeros(2, 9, 5, dtype=torch.int64)]) is None
    assert both(eq, [torch.zeros(2, 3, 9), torch.zeros(2, 9, 5).to_sparse()]) is None
    assert both(eq, [torch.zeros(2, 0, 9), torch.zeros(2, 9, 5)]) is None
    assert both(eq, [torch.zeros(1, 3, 9), torch.zeros(2, 9, 5)])[2] == ((1, 3, 12), (3, 12, 6))
    assert both(eq, [torch.zeros(3, 3, 9), torch.zeros(2, 9, 5)]) is None
    assert both(eq, [torch.zeros(2, 3, 20000), torch.zeros(2, 20000, 30)]) is None
    assert both(eq, [torch.zeros(1, 3, 20000), torch.zeros(1, 20000, 1)])[2] == ((1, 3, 24576), (1, 24576, 1))
    assert both(eq, [torch.zeros(4, 2, 3, 9), torch.zeros(2, 9, 5)])[2] == ((6, 3, 3, 12), (3, 12, 6))
    for n in range(sizeclass.SIGHTS_BEFORE_CODE):     # another rank's sights: then its own function
        assert both(eq, [torch.zeros(4, 2, 3, 5 + n), torch.zeros(2, 5 + n, 4)]) is not None
    monkeypatch.setattr(sizeclass, "_checked_key", lambda *args: generated.append(args) or None)
    assert _class_key(eq, [(4, 2, 3, 9), (2, 9, 5)])[2] == ((6, 3, 3, 12), (3, 12, 6))
    assert _class_key(eq, [(2, 3, 9), (2, 9, 5)])[2] == ((3, 3, 12), (3, 12, 6))
    assert generated == []


def test_an_equation_s_labels_are_resolved_once_for_the_loop(monkeypatch):
    """The loop that classifies an equation's first shapes resolves its labels (an ellipsis's
    dimensions among them) once per equation and ranks, not at each sight; a symbolic or
    zero size, a diagonal of unequal sizes and sizes that do not broadcast are not classed."""
    resolved = []
    labels = sizeclass._labels
    monkeypatch.setattr(sizeclass, "_labels", lambda *args: resolved.append(args[1]) or labels(*args))
    sizeclass.clear()
    eq = parse("b...i,bij->bj...")
    for n in range(2, 8):
        assert sizeclass.canonical(eq, [(2, 5, n), (2, n, 3)]) == ((3, 6, sizeclass.canonical_size(n)),
                                                                  (3, sizeclass.canonical_size(n), 3))
    assert resolved == [(3, 3)]
    diagonal = parse("bii,bi->b")
    assert sizeclass.canonical(diagonal, [(2, 3, 3), (1, 3)]) == ((3, 3, 3), (1, 3))
    unfit = ([(2, 1, 3), (2, 3)], [(2, 3, 3), (2, 4)], [(0, 3, 3), (2, 3)],
             [(2, 3, 3), (2.0, 3)])        # (2.0: not an int, as a symbolic size is not)
    for shapes in unfit:
        assert sizeclass.canonical(diagonal, shapes) is None, shapes
    assert resolved == [(3, 3), (3, 2)]


def test_the_generated_classifier_answers_as_the_loop_over_the_fuzzer_s_shapes():
    checked = 0
    for _, ops in CASES:
        eq = parse(_.oracle_equation)
        key = engine._key(eq, ops, DEFAULT)
        generated = sizeclass._classifier(eq, tuple(o.dim() for o in ops))
        assert generated(key, ops) == sizeclass._checked_key(eq, ops, DEFAULT, key), (eq.text, key)
        checked += generated(key, ops) is not None
    assert checked >= len(CASES) // 2


def test_classes_of_one_structure_compile_their_step_once(monkeypatch):
    """float32 and float64 are two classes of ``ij,jk->ik`` with one step's text: compiled
    once, each with its own environment, each giving its own dtype's answer."""
    compiled = _counting_compiles(monkeypatch)
    for dtype in (torch.float32, torch.float64):
        a, b = torch.randn(5, 6, dtype=dtype), torch.randn(6, 7, dtype=dtype)
        run = engine.entry(parse("ij,jk->ik"), (a, b), DEFAULT).run.compiled()
        out = run((a, b))
        assert out.dtype == dtype
        torch.testing.assert_close(out, a @ b)
    assert sizeclass.info().currsize == 2
    assert len(compiled) == 1 and compiled[0].startswith("def run(")

def test_classes_of_one_structure_read_their_step_s_ops_once(monkeypatch):
    """``explain``'s reason for a class's step is read from its source once per text: a
    second class of the same text (another octave of ``ij,jk->ik``) takes the first's
    reason, the same words, without reading the source again."""
    reads = []
    ops = sizeclass._ops
    monkeypatch.setattr(sizeclass, "_ops", lambda fn: reads.append(fn.source) or ops(fn))
    entries = [engine.entry(parse("ij,jk->ik"), (torch.randn(m, 6), torch.randn(6, 7)), DEFAULT) for m in (5, 40)]
    assert entries[0].size_class != entries[1].size_class
    assert entries[0].run.source == entries[1].run.source
    assert [c.reason for c in entries[0].choices] == [c.reason for c in entries[1].choices]
    assert "mm(a, b)" in entries[0].choices[0].reason and len(reads) == 1


def test_a_class_s_reason_is_read_when_explain_asks(monkeypatch):
    """A class planned by a call does not read its step's ops for ``explain`` (most classes
    are never explained); ``explain`` reads them, with the same words as before."""
    reads = []
    ops = sizeclass._ops
    monkeypatch.setattr(sizeclass, "_ops", lambda fn: reads.append(fn.source) or ops(fn))
    a, b = torch.randn(5, 6), torch.randn(6, 7)
    einc.einsum("ij,jk->ik", a, b)
    assert reads == []
    shown = str(einc.explain("ij,jk->ik", a, b))
    assert len(reads) == 1 and "the size class's step, its layout chosen at the class's sizes: mm(a, b)" in shown


def test_a_class_s_step_is_written_as_source_only_when_compiled_or_explained(monkeypatch):
    """A class's first calls run its step's ops as recorded, with no source written (most
    classes run a few times and are never explained); ``explain`` and the compile write it,
    once, the text the ops were recorded for."""
    from einc.runtime.torch_executor import classed
    written = []
    text = classed._text
    monkeypatch.setattr(classed, "_text", lambda *args: written.append(args[0]) or text(*args))
    a, b = torch.randn(3, 5, 6), torch.randn(3, 7, 6).transpose(1, 2)
    first = einc.einsum("bij,bjk->bik", a, b)
    assert written == []
    entry = engine.entry(parse("bij,bjk->bik"), (a, b), DEFAULT)
    assert "bmm(a, b)" in str(einc.explain("bij,bjk->bik", a, b)) and len(written) == 1
    for _ in range(classed.CALLS_BEFORE_CODE):
        einc.einsum("bij,bjk->bik", a, b)
    assert entry.run.source.startswith("def run(") and len(written) == 1
    assert torch.equal(einc.einsum("bij,bjk->bik", a, b), first)


def _ops_run(run, ops):
    """The aten ops ``run(ops)`` dispatches, with their arguments' shapes, strides and constants."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    def arg(x):
        return (tuple(x.shape), x.stride(), x.dtype) if isinstance(x, torch.Tensor) else x

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((str(func), [arg(x) for x in args], {k: arg(v) for k, v in (kwargs or {}).items()}))
            return func(*args, **(kwargs or {}))
    with Recording():
        out = run(ops)
    return seen, out


def test_a_class_s_interpreted_ops_are_its_compiled_source_s_over_the_fuzzer_s_equations():
    """The ops a class's first calls run one by one and those of its compiled source are the
    same aten ops with the same arguments, and give the same bits."""
    checked = 0
    for case, ops in CASES[::3]:
        eq = parse(case.oracle_equation)
        entry, _ = sizeclass.explained(eq, ops, DEFAULT, engine._key(eq, ops, DEFAULT))
        if entry is None or not hasattr(entry.run, "compiled"):
            continue
        looped, a = _ops_run(entry.run, ops)
        compiled, b = _ops_run(entry.run.compiled(), ops)
        assert looped == compiled and torch.equal(a, b), case.oracle_equation
        checked += 1
    assert checked >= len(CASES) // 20, (checked, len(CASES))


def test_a_class_s_step_passes_dimensions_and_sizes_as_separate_arguments():
    """A class's step hands torch a permutation's dimensions and a reshape's sizes as
    separate arguments, not as one tuple, whose parse costs torch's argument parser more
    than the call's own work on a tiny shape: in its interpreted ops and its compiled
    source alike, with the bits of the same ops spelled with tuples."""
    einc.cache_clear()
    x, y = torch.randn(3, 4, 5), torch.randn(6, 5)
    run = engine.entry(parse("abc,dc->dab"), (x, y), DEFAULT).run
    methods = [op for op in run.ops if op[0] == "method"]
    assert methods and all(arg.__class__ is int for op in methods for arg in op[3]), run.ops
    assert ".permute((" not in run.source and ".reshape((" not in run.source, run.source
    spelled = torch.mm(y, x.permute((2, 0, 1)).reshape((5, 12))).reshape((6, 3, 4))
    assert torch.equal(run((x, y)), spelled) and torch.equal(run.compiled()((x, y)), spelled)


def test_a_class_s_step_swaps_its_last_two_dimensions_by_mT():
    """A class's step that swaps an operand's last two dimensions, its others in place (a
    key's transpose in attention scores, a weight read transposed), takes ``.mT``, the
    same view as the permutation with no argument to parse: in its interpreted ops and its
    compiled source alike, with the bits of the permutation."""
    einc.cache_clear()
    a, b = torch.randn(1, 2, 40, 16), torch.randn(1, 2, 50, 16)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    for text, ops, spelled in (("bhid,bhjd->bhij", (a, b), lambda: torch.matmul(a, b.permute((0, 1, 3, 2)))),
                               ("ij,kj->ik", (x, w), lambda: torch.mm(x, w.permute((1, 0))))):
        run = engine.entry(parse(text), ops, DEFAULT).run
        assert [op for op in run.ops if op[0] in ("method", "attribute")] == [("attribute", "b", "mT")], run.ops
        assert "b = b.mT" in run.source, run.source
        assert torch.equal(run(ops), spelled()) and torch.equal(run.compiled()(ops), spelled())


def test_classes_of_one_structure_share_their_plan_and_step(monkeypatch):
    """Classes of one equation, options and pattern of size-1 dimensions at other octaves
    take the first one's plan at their sizes and, where their sizes decide alike (the same
    layout), its step's ops: planned once, built once, each class its own plan's sizes."""
    from einc.planner.plan import PairPlans
    from einc.runtime.torch_executor import classed
    planned, emitted = [], []
    structure, emit = PairPlans._structure, classed._emitted
    monkeypatch.setattr(PairPlans, "_structure", lambda *args: planned.append(args[1]) or structure(*args))
    monkeypatch.setattr(classed, "_emitted", lambda *args: emitted.append(args) or emit(*args))
    eq = parse("bij,bjk->bik")
    entries = [engine.entry(eq, (torch.randn(b, 9, 5), torch.randn(b, 5, 11)), DEFAULT) for b in (3, 6, 12)]
    assert len({e.size_class for e in entries}) == 3 and len(planned) == 1 and len(emitted) == 1
    for e in entries:
        assert e.plan == plan_for(eq, e.size_class, DEFAULT)
    assert entries[1].run is not entries[0].run and entries[1].run.source == entries[0].run.source
    engine.entry(eq, (torch.randn(1, 9, 5), torch.randn(7, 5, 11)), DEFAULT)    # broadcast: another structure
    assert len(planned) == 2 and len(emitted) == 2


def test_classes_of_two_operands_are_planned_without_plan_for_once_per_graph(monkeypatch):
    """A class of two operands takes its plan from its equation's PairPlans, not from
    ``plan_for``: the classes of e3nn's ``edb,eca->ecdab`` at five patterns of size-1
    dimensions (none broadcast against a larger size: one graph) make one structure, and
    each plan is the one ``plan_for`` gives at the class's sizes."""
    from einc.planner.plan import PairPlans
    made, planned = [], []
    structure, real = PairPlans._structure, sizeclass.plan_for
    monkeypatch.setattr(PairPlans, "_structure", lambda *args: made.append(args[1]) or structure(*args))
    monkeypatch.setattr(sizeclass, "plan_for", lambda *args: planned.append(args[1]) or real(*args))
    eq = parse("edb,eca->ecdab")
    patterns = [((40, 1, 1), (40, 16, 1)), ((40, 1, 3), (40, 16, 1)), ((40, 1, 5), (40, 16, 1)),
                ((40, 1, 1), (40, 16, 3)), ((40, 1, 1), (40, 16, 5))]
    entries = [engine.entry(eq, [torch.randn(*s) for s in shapes], DEFAULT) for shapes in patterns]
    assert len({e.size_class for e in entries}) == 5 and made == [()] and planned == []
    for e in entries:
        assert e.plan == real(eq, e.size_class, DEFAULT)
    engine.entry(eq, [torch.randn(40, 1, 3), torch.randn(1, 16, 1)], DEFAULT)     # e broadcast: another graph
    assert made == [(), (3,)] and planned == []     # (the second operand's first dimension)


def test_a_class_build_works_out_nothing_its_class_settles(monkeypatch):
    """A class's sizes hold no 0 (:func:`sizeclass.canonical` refuses one), so a class build
    does not ask its plan for a sum over an empty index; its equation's torch spelling
    (for the result dtype) is worked out once per equation, not once per class."""
    from einc.planner.plan import Plan
    monkeypatch.setattr(Plan, "empty_sum", property(lambda self: pytest.fail("a class asked for empty_sum")))
    eq = parse("qrs,qts->qrt")
    assert sizeclass.canonical(eq, [(4, 0, 3), (4, 2, 3)]) is None
    for n in (2, 5, 9):
        entry = engine.entry(eq, [torch.randn(n, 3, 4), torch.randn(n, 7, 4)], DEFAULT)
        assert entry.size_class is not None and vars(eq)["torch_text"] == "qrs,qts->qrt"


def test_classes_whose_size_1_dimensions_differ_outside_the_sums_share_their_step(monkeypatch):
    """A step's analysis reads whether its summed indices have size 1, no other size: classes
    of one equation whose size-1 dimensions differ elsewhere share its analysis and ops, each
    with its own plan and the ops and bits it gets when built alone; a summed index of
    size 1 is another step (a product)."""
    from einc.runtime.torch_executor import classed
    analysed, emitted = [], []
    analyse, emit = classed._analysed, classed._emitted
    monkeypatch.setattr(classed, "_analysed", lambda *args: analysed.append(args) or analyse(*args))
    monkeypatch.setattr(classed, "_emitted", lambda *args: emitted.append(args) or emit(*args))
    calls = [("edb,eca->ecdab", [(40, 1, 1), (40, 16, 1)]), ("edb,eca->ecdab", [(40, 1, 3), (40, 16, 1)]),
             ("edb,eca->ecdab", [(40, 1, 1), (40, 16, 3)]), ("dca,dba->dcb", [(40, 1, 3), (40, 16, 3)]),
             ("dca,dba->dcb", [(40, 2, 3), (40, 16, 3)]), ("dca,dba->dcb", [(40, 2, 1), (40, 16, 1)])]
    built = []
    for k, (text, shapes) in enumerate(calls):
        eq, ops = parse(text), [torch.randn(*s, generator=torch.Generator().manual_seed(k)) for s in shapes]
        entry = engine.entry(eq, ops, DEFAULT)
        assert entry.plan == plan_for(eq, entry.size_class, DEFAULT)
        built.append((eq, ops, entry.run.source, engine.run(eq, ops, DEFAULT)))
        if k == 2:
            assert len(analysed) == len(emitted) == 1      # ecdab's three classes: one product
    assert len(analysed) == 3       # and dcb's contraction, and its sum over 1
    for eq, ops, source, result in built:
        einc.cache_clear()
        alone = engine.entry(eq, ops, DEFAULT)
        assert alone.run.source == source
        assert torch.equal(engine.run(eq, ops, DEFAULT), result)
        expected = torch.einsum(eq.text, *[o.double() for o in ops])
        torch.testing.assert_close(result.double(), expected, rtol=1e-5, atol=1e-5)


def test_a_searched_path_of_three_operands_is_never_taken_from_another_class():
    """A searched path of three operands depends on the sizes: a class takes its own,
    whichever class of its structure came first."""
    eq = parse("ij,jk,kl->il")
    options = DEFAULT
    wide = (torch.randn(2, 24), torch.randn(24, 24), torch.randn(24, 24))     # (ij, jk) first
    tall = (torch.randn(24, 24), torch.randn(24, 24), torch.randn(24, 2))     # (jk, kl) first
    first, second = (engine.entry(eq, ops, options) for ops in (wide, tall))
    assert first.size_class != second.size_class
    assert first.plan.path != second.plan.path
    assert second.plan == plan_for(eq, second.size_class, options)


def test_classes_sharing_a_structure_get_the_plan_and_step_of_their_own_sizes():
    """Over the fuzzer's equations, each class built with what earlier classes of its
    structure left (plans, steps' analyses and ops) has the plan, the step functions' text
    and the reasons it gets when built alone."""
    from einc.runtime.torch_executor import classed
    checked = 0
    for case, ops in CASES:
        eq = parse(case.oracle_equation)
        key = engine._key(eq, ops, DEFAULT)
        shared, _ = sizeclass.explained(eq, ops, DEFAULT, key)
        if shared is None:
            continue
        sizeclass._plans.clear()
        sizeclass._pairs.clear()
        classed._steps.clear()
        alone, _ = sizeclass.explained(eq, ops, DEFAULT, key)
        assert shared.plan == alone.plan, case.oracle_equation
        assert getattr(shared.run, "source", None) == getattr(alone.run, "source", None)
        assert [c.reason for c in shared.choices] == [c.reason for c in alone.choices]
        checked += 1
    assert checked >= len(CASES) // 2, (checked, len(CASES))


def test_a_class_s_step_runs_interpreted_then_compiled_with_the_same_bits(monkeypatch):
    """A class's first calls run its step's ops one by one, with no compile (most classes of
    a first training step run once or a few times); the call that has run it often enough
    puts the compiled function in the entry; both give the same bits, gradients too."""
    from einc.runtime.torch_executor import classed
    compiled = _counting_compiles(monkeypatch)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 9, 5, generator=g, requires_grad=True)
    b = torch.randn(4, 5, 11, generator=g).transpose(1, 2)     # read in another order
    first = einc.einsum("bij,bkj->bik", a, b)
    (ga,) = torch.autograd.grad(first.square().sum(), a)
    assert compiled == []
    entry = engine.entry(parse("bij,bkj->bik"), (a, b), DEFAULT)
    interpreted = entry.run
    for _ in range(classed.CALLS_BEFORE_CODE):
        out = einc.einsum("bij,bkj->bik", a, b)
    assert entry.run is not interpreted and len(compiled) == 1 and compiled[0].startswith("def run(")
    again = einc.einsum("bij,bkj->bik", a, b)
    (ga2,) = torch.autograd.grad(again.square().sum(), a)
    assert torch.equal(first, out) and torch.equal(first, again) and torch.equal(ga, ga2)
    torch.testing.assert_close(first, torch.einsum("bij,bkj->bik", a, b))


def test_interpreted_and_compiled_steps_give_the_same_bits_over_the_fuzzer_s_equations():
    checked = 0
    for case, ops in CASES:
        eq = parse(case.oracle_equation)
        einc.einsum(*case.args(ops))
        entry = engine._plans.peek(engine._key(eq, ops, DEFAULT))
        if entry is None or entry.size_class is None or not hasattr(entry.run, "compiled"):
            continue
        assert torch.equal(entry.run(ops), entry.run.compiled()(ops)), case.oracle_equation
        assert torch.equal(entry.run(ops, 0.5), entry.run.compiled()(ops, 0.5))
        checked += 1
    assert checked >= len(CASES) // 6, (checked, len(CASES))


def test_classes_of_one_pattern_of_read_orders_share_one_tuple():
    """A class build reads the operands' orders (None for a contiguous one) from its class
    key: keys of one pattern, each key's own tuple, give one tuple (the step memo's keys
    hold it), not one made per class."""
    first = sizeclass._orders((None,) * 5 + ((True, (1, 0)),))
    again = sizeclass._orders((None,) * 5 + (tuple([True, (1, 0)]),))
    assert first == (None, (1, 0)) and again is first


def test_a_class_s_interpreted_run_keeps_its_entry_in_no_container_of_its_own():
    """The interpreted run a class build makes holds the entry that promotes it itself: one
    tracked object made for the run and its entry, where a list held it; promoted as
    before (the entry's run compiled at the run's ``CALLS_BEFORE_CODE``-th call)."""
    from einc.runtime.torch_executor import classed

    a, b = torch.randn(5, 6), torch.randn(6, 7)
    entry = engine.entry(parse("ij,jk->ik"), (a, b), DEFAULT)
    gc.disable()
    try:
        start = gc.get_count()[0]
        run = classed._Interpreted(entry.run.ops, "c", "", None, entry.run.env)
        run.promote(entry)
        made = gc.get_count()[0] - start
    finally:
        gc.enable()
    assert made == 1
    entry.run = run
    for _ in range(classed.CALLS_BEFORE_CODE):
        torch.testing.assert_close(entry.run((a, b)), a @ b)
    assert entry.run is not run and run.holder is None
    torch.testing.assert_close(entry.run((a, b)), a @ b)
