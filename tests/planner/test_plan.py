"""The planner: path quality, optimizer options, explain and contract_expression."""

import random

import opt_einsum
import opt_einsum.testing
import pytest
import torch

import einc
from einc.planner import plan_for
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.options import Options
from einc.planner.plan import CONTRACT, DOT, PRODUCT, REDUCE, PairPlans, build_plan, resized


def _opt_cost(eq, shapes, optimize):
    """The cost of opt_einsum's path for ``optimize``, counted by einc's planner."""
    path = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=optimize)[0]
    return einc.explain(eq, *shapes, optimize=path).flops


def test_ten_matrix_chain_matches_dp():
    sizes = [random.Random(3).randint(2, 64) for _ in range(11)]
    letters = "abcdefghijk"
    eq = ",".join(letters[i] + letters[i + 1] for i in range(10)) + "->ak"
    shapes = [(sizes[i], sizes[i + 1]) for i in range(10)]
    plan = einc.explain(eq, *shapes)
    assert plan.flops <= _opt_cost(eq, shapes, "dp")
    assert plan.flops <= _opt_cost(eq, shapes, "auto")


@pytest.mark.parametrize("seed", range(12))
def test_default_is_no_costlier_than_dp(seed):
    """For random networks of up to 16 operands einc's default finds paths as cheap as dp."""
    rng = random.Random(seed)
    n = rng.randint(3, 16)
    eq, shapes = opt_einsum.testing.rand_equation(n, 3, n_out=rng.randint(0, 2), seed=seed, d_max=4)[:2]
    plan = plan_for(eq, shapes)         # the search at these sizes (a small call runs its size class's path)
    assert plan.flops <= _opt_cost(eq, shapes, "dp")


def test_optimizer_names_pathoptimizer_and_explicit_path():
    a, b, c = torch.randn(4, 5), torch.randn(5, 6), torch.randn(6, 2)
    ref = a @ b @ c
    for optimize in ["greedy", "optimal", "dp", "branch-2", "auto-hq", "random-greedy", False,
                     opt_einsum.RandomGreedy(max_repeats=4), [(1, 2), (0, 1)], [(0, 1, 2)]]:
        out = einc.einsum("ij,jk,kl->il", a, b, c, optimize=optimize)
        torch.testing.assert_close(out, ref)
    assert einc.explain("ij,jk,kl->il", a, b, c, optimize=[(1, 2), (0, 1)]).path == ((1, 2), (0, 1))
    assert einc.explain("ij,jk,kl->il", a, b, c, optimize=False).path == ((0, 1), (0, 1))


def test_a_plain_list_path_is_read_by_its_types_not_position_by_position(monkeypatch):
    """A list path (opt_einsum's ``contract_path`` gives one) is no dict key, so each call
    reads it again: a path of Python ints is taken as it is, its positions not read one by
    one; numpy's integers are still read so, and a bool is still no position."""
    import numpy as np

    from einc.errors import PathError
    from einc.planner import givenpath
    from einc.planner.options import normalized_optimize
    read, real = [], givenpath._index
    monkeypatch.setattr(givenpath, "_index", lambda i: read.append(i) or real(i))
    path = [(0, 1)] + [[0, n] for n in range(38, 0, -1)]
    want = tuple(tuple(p) for p in path)
    assert normalized_optimize(path) == normalized_optimize(tuple(path)) == (want, "explicit")
    assert read == []
    assert Options.of(path) is Options.of(list(path)) is Options.of(want)
    assert normalized_optimize([(np.int64(0), 1)] + path[1:]) == (want, "explicit") and read
    with pytest.raises(PathError):
        normalized_optimize([(True, False)] + path[1:])


def test_a_path_of_bools_or_floats_is_refused_after_the_equal_int_path_ran():
    """True == 1 and 1.0 == 1 as dict keys: a tuple path of bools or floats finds the options
    of the equal path of ints once that one ran. It is refused as in a process where it did
    not, through einsum and Options.of alike; numpy's integers are still read."""
    import numpy as np

    from einc.errors import PathError
    ops = [torch.rand(2, 3), torch.rand(3, 4), torch.rand(4, 5)]
    want = einc.einsum("ij,jk,kl->il", *ops, optimize=((1, 0), (0, 1)))
    for path in (((True, False), (0, 1)), ((1.0, 0.0), (0, 1)), ((1, 0), (False, True))):
        with pytest.raises(PathError, match="list of tuples of ints"):
            einc.einsum("ij,jk,kl->il", *ops, optimize=path)
        with pytest.raises(PathError, match="list of tuples of ints"):
            Options.of(path)
    numpy_path = ((np.int64(1), np.int64(0)), (0, 1))
    assert torch.equal(einc.einsum("ij,jk,kl->il", *ops, optimize=numpy_path), want)
    assert Options.of(numpy_path) is Options.of(((1, 0), (0, 1)))


def test_a_callers_optimizer_is_called_as_opt_einsum_calls_it():
    """A PathOptimizer gets frozensets of the caller's one-letter labels and sizes by
    label, so one written for opt_einsum runs, and an instance opt_einsum has planned a
    contraction with can plan the same contraction in einc."""
    seen = []

    class Letters(opt_einsum.paths.PathOptimizer):
        def __call__(self, inputs, output, size_dict, memory_limit=None):
            seen.append((inputs, output, size_dict))
            order = sorted(range(len(inputs)), key=lambda k: "".join(sorted(inputs[k])))  # strings only
            return [(order[-2], order[-1])] + [(0, 1)] * (len(inputs) - 2)

    a, b, c = torch.randn(4, 5), torch.randn(5, 6), torch.randn(6, 2)
    torch.testing.assert_close(einc.einsum("ij,jk,kl->il", a, b, c, optimize=Letters()), a @ b @ c)
    inputs, output, size_dict = seen[0]
    assert all(isinstance(t, frozenset) for t in inputs) and isinstance(output, frozenset)
    assert sorted(size_dict.items()) == [("i", 4), ("j", 5), ("k", 6), ("l", 2)]
    shared = opt_einsum.RandomGreedy(max_repeats=4)
    path, _ = opt_einsum.contract_path("ij,jk,kl->il", a, b, c, optimize=shared)
    assert einc.contract_path("ij,jk,kl->il", a, b, c, optimize=shared)[0] == path


def test_memory_limit_is_honoured():
    shapes = [(10, 10), (10, 10), (10, 10)]
    eq = "ab,cd,ef->abcdef"
    limited = einc.explain(eq, *shapes, memory_limit=100, optimize="greedy")
    assert limited.path == ((0, 1, 2),)
    # "max_input": opt_einsum's bound, each intermediate at most the largest operand's or the
    # output's size: 10^6 here (no slicing); 1000 for a tetrahedron of 10x10x10 tensors,
    # whose every order makes an intermediate of 10^4
    assert einc.explain(eq, *shapes, memory_limit="max_input").slicing is None
    info = einc.explain("abc,ade,bdf,cef->", *[(10, 10, 10)] * 4, memory_limit="max_input")
    assert info.slicing.memory_limit == 1000 and info.slicing.bound == "intermediate"
    assert info.largest_intermediate <= 1000 < info.slicing.unsliced_largest
    # a number: einc's live bound, what is alive at once (step copies included)
    info = einc.explain(eq, *shapes, memory_limit=100)
    assert info.slicing.bound == "live" and info.slicing.live <= 100 < info.slicing.unsliced_live


def test_step_kinds():
    def kinds(eq, *shapes):
        return [s.kind for s in build_plan(build(parse(eq), shapes)).steps]
    assert kinds("ij,jk->ik", (2, 3), (3, 4)) == [CONTRACT]
    assert kinds("bij,bij->b", (2, 3, 4), (2, 3, 4)) == [DOT]
    assert kinds("i,j->ij", (2,), (3,)) == [PRODUCT]
    assert kinds("ii->i", (3, 3)) == [REDUCE]


def test_a_chain_of_products_is_laid_out_in_the_results_order():
    """Products' intermediates follow the result's order, the indices it lacks after, so that
    the last step permutes nothing; matrix products keep batch, A's free, B's free."""
    n = 16
    letters = "abcdefghijklmnop"
    plan = einc.explain(",".join(letters) + "->" + letters, *[(2,)] * n,
                        optimize=[(0, 1)] + [(0, n - k) for k in range(2, n)])
    assert all(s.kind == PRODUCT for s in plan.steps)
    for step in plan.steps:
        out = plan.graph.term(step.output)
        assert out == "".join(sorted(out)), out        # in the result's order, never reversed
    plan = einc.explain("ab,c,cd->abd", (2, 3), (4,), (4, 5), optimize=[(0, 1), (0, 1)])
    assert plan.graph.term(plan.steps[0].output) == "abc"           # c, not in the result, last
    plan = einc.explain("ab,bc,cd->ad", (2, 3), (3, 4), (4, 5), optimize=[(1, 2), (0, 1)])
    assert plan.graph.term(plan.steps[0].output) == "bd" and plan.steps[0].kind == CONTRACT


def test_explain_table_and_contract_expression():
    plan = einc.explain("ij,jk,kl->il", (8, 2), (2, 8), (8, 2))
    text = str(plan)
    for field in ["Complete contraction", "Naive FLOP count", "Optimized FLOP count", "Largest intermediate",
                  "contract", "T1,T2->T3"]:
        assert field in text
    assert plan.naive_flops > plan.flops
    assert plan.largest_intermediate == 8 * 2
    expr = einc.contract_expression("ij,jk,kl->il", (8, 2), (2, 8), (8, 2))
    ops = [torch.randn(8, 2), torch.randn(2, 8), torch.randn(8, 2)]
    torch.testing.assert_close(expr(*ops), ops[0] @ ops[1] @ ops[2])
    torch.testing.assert_close(expr(ops), ops[0] @ ops[1] @ ops[2])
    assert "Optimized FLOP count" in str(expr)
    assert einc.explain("ij,jk,kl->il", ops).path == plan.path       # tensors work as well as shapes


@pytest.mark.slow
def test_plans_are_the_same_in_every_process():
    """Greedy searches break ties by set order; einc's int labels make that order fixed."""
    import os
    import subprocess
    import sys
    code = ("import opt_einsum.testing as t, einc\n"
            "eq, shapes = t.rand_equation(24, 3, seed=7, d_max=3)\n"
            "print(einc.explain(eq, *shapes).path)\n")
    paths = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=dict(os.environ, PYTHONHASHSEED=seed)).stdout for seed in ("1", "2", "3")}
    assert len(paths) == 1


def test_graph_checks_the_number_of_shapes():
    from einc.errors import OperandCountError
    with pytest.raises(OperandCountError):
        build(parse("ij,jk->ik"), [(2, 3)])


def test_true_and_one_are_not_the_same_argument():
    """True == 1 and False == 0 in Python: a valid optimize=True/False or memory_limit=1
    used first must not make the invalid optimize=1/0 or memory_limit=True/False pass."""
    from einc.errors import PathError
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)
    for valid in [dict(memory_limit=1), dict(optimize=True), dict(optimize=False), dict(memory_limit=0.0 + 1)]:
        einc.einsum("ij,jk,kl->il", a, b, c, **valid)
    for invalid in [dict(memory_limit=True), dict(memory_limit=False), dict(optimize=1), dict(optimize=0)]:
        with pytest.raises(PathError):
            einc.einsum("ij,jk,kl->il", a, b, c, **invalid)


@pytest.mark.parametrize("memory_limit", [None, 10 ** 9, "max_input", 5])
@pytest.mark.parametrize("optimize", ["auto", "greedy", "optimal", "dp", "branch-2", "random-greedy", "cotengra"])
def test_an_empty_kept_index_is_planned_not_left_to_right(optimize, memory_limit):
    """``ij,jk,kl->il`` with l = 0 is planned with empty intermediates and no flops, under a
    memory_limit or cotengra too (where the slicer's own shortcut plans), as torch's order
    runs it (its first step touches the empty operand): left to right, the first step would be
    an n x n outer product of the other operands (10^10 elements at n = 10^5, from 0.8 MB of
    operands).  einc's search weighs the 0 as 1; opt_einsum's strategies, by name, weigh the
    true sizes and take opt_einsum's path."""
    if optimize == "cotengra":
        pytest.importorskip("cotengra")
    n = 100_000
    shapes = [(n, 1), (1, n), (n, 0)]
    plan = plan_for("ij,jk,kl->il", shapes, Options.of(optimize, memory_limit))
    assert plan.largest_intermediate == 0 and plan.flops == 0 and plan.slicing is None
    if optimize == "auto":
        assert plan.path == plan_for("ij,jk,kl->il", [(n, 1), (1, n), (n, 1)], Options.of(optimize)).path
    elif optimize not in ("cotengra", "random-greedy"):
        theirs = opt_einsum.contract_path("ij,jk,kl->il", *shapes, shapes=True, optimize=optimize)[0]
        assert plan.path == tuple(theirs)
    a, b, c = torch.randn(300, 1), torch.randn(1, 300), torch.randn(300, 0)
    out = einc.einsum("ij,jk,kl->il", a, b, c, optimize=optimize, memory_limit=memory_limit)
    assert out.shape == (300, 0) and out.dtype == torch.float32


@pytest.mark.parametrize("optimize", ["greedy", "optimal", "branch-2", "auto-hq", "dp"])
def test_opt_einsum_strategies_weigh_a_size_0_as_opt_einsum_does(optimize):
    """A named strategy weighs a size 0 as opt_einsum does, so its path (and the PathInfo's
    largest intermediate and flops) is opt_einsum's: ``ce,cbd,dea->ba`` with b = 0 makes only
    empty tensors, where weighing the 0 as 1 makes a 30-element ``cda`` at 300 flops; where
    opt_einsum's ``dp`` fails on a 0 ("No contraction found"), einc plans as for size 1 and
    runs."""
    for eq, shapes in [("ce,cbd,dea->ba", [(2, 5), (2, 0, 3), (3, 5, 5)]),
                       ("fd,bc,efc,ead->ab", [(3, 5), (2, 5), (5, 3, 5), (5, 0, 5)]),
                       ("ecd,adec,b->ba", [(2, 1, 3), (4, 3, 2, 1), (0,)])]:
        plan = plan_for(eq, shapes, Options.of(optimize))
        try:
            path, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=optimize)
        except RuntimeError:
            assert optimize == "dp"
            continue
        assert plan.path == tuple(path), eq
        assert plan.flops == info.opt_cost and plan.largest_intermediate == info.largest_intermediate, eq


@pytest.mark.parametrize("seed", range(40))
def test_the_slicers_memos_weigh_as_the_plain_live_model(seed):
    """The slicer weighs thousands of slicings of one plan: hoisting from the indices under
    each step, and each step's elements from a memo, give what the plain functions give."""
    from einc.planner import memory
    from einc.planner.slicing import _Model
    rng = random.Random(seed)
    eq, shapes = opt_einsum.testing.rand_equation(rng.randint(3, 24), 3, seed=seed, d_min=2, d_max=4)
    p = plan_for(eq, shapes, Options.of("greedy"))
    g, n = p.graph, len(p.graph.inputs)
    model, memo = _Model(p, "live"), {}
    for _ in range(6):
        sliced = rng.sample(range(len(g.sizes)), rng.randint(1, min(4, len(g.sizes))))
        want = memory.hoisting(p.steps, g.inputs, n, sliced)
        assert memory.hoisting(p.steps, g.inputs, n, frozenset(sliced), model._below) == want
        order, roots = want
        sizes = [1 if i in sliced else d for i, d in enumerate(g.sizes)]
        finals = set(roots) | ({order[-1].result} if order else set())
        plain = list(memory._lives(memory.timeline(order, n).values(), sizes, set(sliced), -1, None, finals,
                                   set(roots)))
        for _ in range(2):      # the second time from the memo
            rows = memory.timeline(order, n, memo).values()
            assert list(memory._lives(rows, sizes, set(sliced), -1, memo, finals, set(roots))) == plain
            assert memory.moments(rows, sizes, set(sliced), memo, finals, set(roots)) == [m for m, _ in plain]
            assert model._moments(dict.fromkeys(sliced, 1), -1) == plain
            assert model._moments(dict.fromkeys(sliced, 1)) == [m for m, _ in plain]


@pytest.mark.parametrize("eq", ["ij,jk->ik", "bij,bkj->bik", "ab,cb->abc", "ii,ij->j", "i,i->", "...ij,jk->...ik",
                                "aij->ja", "ij,jk,kl->il"])
def test_a_plan_resized_is_the_plan_of_its_sizes(eq):
    """A plan whose path does not depend on the sizes (one or two operands, a path given),
    at other sizes with the same size-1 dimensions, is the plan planned at those sizes."""
    rng = random.Random(eq)
    e = parse(eq)
    options = Options.of(False) if e.num_operands > 2 else Options.of("auto")
    compared = 0
    for _ in range(40):
        ones = [{label: rng.random() < 0.3 for label in t} for t in e.inputs]     # (an ellipsis: one dimension)
        plans = []
        for _ in range(2):
            size = {}
            shapes = [tuple(1 if mine[label] else size.setdefault(label, rng.randint(2, 40)) for label in t)
                      for t, mine in zip(e.inputs, ones)]
            plans.append(plan_for(e, shapes, options))
        assert resized(plans[0], plans[1].graph.sizes) == plans[1]
        compared += plans[0].graph.sizes != plans[1].graph.sizes
    assert compared >= 30


@pytest.mark.parametrize("seed", range(4))
def test_pair_plans_are_plan_for_s_plans(seed):
    """PairPlans' plan of a two-operand equation (diagonals, broadcast dimensions, sizes 1,
    an empty output) is ``plan_for``'s at every shape that fits it, whichever patterns it
    saw before; under einc's search and left to right, a layout asked or not."""
    rng = random.Random(seed)
    compared = 0
    for _ in range(300):
        letters = "abcdef"[:rng.randint(1, 6)]
        terms = ["".join(rng.choice(letters) for _ in range(rng.randint(0, 4))) for _ in range(2)]
        pool = sorted(set("".join(terms)))
        rng.shuffle(pool)
        eq = parse(f"{terms[0]},{terms[1]}->{''.join(pool[:rng.randint(0, len(pool))])}")
        options = rng.choice([Options.of("auto"), Options.of(False), Options.of("auto", None, None, "any")])
        assert PairPlans.serves(eq, options)
        pairs = PairPlans(eq, options)
        for _ in range(3):
            size = {label: rng.choice([1, 2, 3, 6]) for label in pool}
            ones = {label: rng.random() < 0.3 for label in pool}
            shapes = [tuple(1 if ones[label] and k else size[label] for label in t) for k, t in enumerate(terms)]
            assert pairs.plan(shapes) == plan_for(eq, shapes, options), (eq.text, shapes)
            compared += 1
    assert compared == 900
    assert not PairPlans.serves(parse("...ij,jk->...ik"), Options.of("auto"))
    assert not PairPlans.serves(parse("ij,jk->ik"), Options.of(((0, 1),)))
    assert not PairPlans.serves(parse("ij,jk,kl->il"), Options.of(False))


# Plans of one step (one or two operands), as the step loop of build_plan made them before
# it took them apart: kinds, terms, kept and summed indices, costs.
_ONE_STEP = [
    ('ij,jk->ik', [(2, 3), (3, 4)], 'auto', ((0, 1),), 48, 48, 8,
     [('contract', (0, 1), 2, ((0, 1), (1, 2)), (0, 2), (), (1,), 48, 8)]),
    ('ij,jk->ik', [(2, 3), (3, 4)], ((1, 0),), ((1, 0),), 48, 48, 8,
     [('contract', (0, 1), 2, ((0, 1), (1, 2)), (0, 2), (), (1,), 48, 8)]),
    ('bij,bkj->bik', [(5, 1, 3), (5, 4, 3)], 'auto', ((0, 1),), 120, 120, 20,
     [('contract', (0, 1), 2, ((0, 1, 2), (0, 3, 2)), (0, 1, 3), (0,), (2,), 120, 20)]),
    ('ab,cb->abc', [(2, 3), (4, 3)], 'auto', ((0, 1),), 24, 24, 24,
     [('product', (0, 1), 2, ((0, 1), (2, 1)), (0, 1, 2), (1,), (), 24, 24)]),
    ('ii,ij->j', [(3, 3), (3, 2)], 'auto', ((0, 1),), 12, 12, 2,
     [('contract', (0, 1), 2, ((0, 0), (0, 1)), (1,), (), (0,), 12, 2)]),
    ('i,i->', [(4,), (4,)], False, ((0, 1),), 8, 8, 1,
     [('dot', (0, 1), 2, ((0,), (0,)), (), (), (0,), 8, 1)]),
    ('iij->ji', [(3, 3, 2)], 'auto', ((0,),), 6, 6, 6,
     [('reduce', (0,), 1, ((0, 0, 1),), (1, 0), (), (), 6, 6)]),
    ('...ij,jk->k...i', [(2, 1, 3, 4), (4, 5)], 'auto', ((0, 1),), 240, 240, 30,
     [('contract', (0, 1), 2, ((0, 1, 2, 3), (3, 4)), (4, 0, 1, 2), (), (3,), 240, 30)]),
    ('ab,ab->ba', [(0, 2), (1, 2)], 'greedy', ((0, 1),), 0, 0, 0,
     [('product', (0, 1), 2, ((0, 1), (2, 1)), (1, 0), (1,), (2,), 0, 0)]),
    ('edb,eca->ecdab', [(384, 1, 3), (384, 24, 1)], 'auto', ((0, 1),), 27648, 27648, 27648,
     [('product', (0, 1), 2, ((0, 1, 2), (0, 3, 4)), (0, 3, 1, 4, 2), (0,), (), 27648, 27648)]),
    ('ij->', [(3, 4)], False, ((0,),), 24, 24, 1,
     [('reduce', (0,), 1, ((0, 1),), (), (), (0, 1), 24, 1)]),
]


@pytest.mark.parametrize("case", _ONE_STEP, ids=lambda c: f"{c[0]}-{c[2]}")
def test_a_plan_of_one_step_is_the_step_loops(case):
    """A plan of one or two operands in one step is what the general step loop gives
    (diagonals, broadcast dimensions, an ellipsis, an empty index, a path given reversed)."""
    eq, shapes, optimize, path, naive, flops, largest, steps = case
    p = plan_for(eq, shapes, Options.of(optimize))
    assert (p.path, p.naive_flops, p.flops, p.largest_intermediate) == (path, naive, flops, largest)
    assert [(s.kind, s.operands, s.result, s.inputs, s.output, s.batch, s.summed, s.flops, s.size)
            for s in p.steps] == steps


@pytest.mark.parametrize("eq, shapes, inputs, output, sizes, names", [
    ("ij,jk->ik", [(2, 1), (3, 4)], ((0, 3), (1, 2)), (0, 2), (2, 3, 4, 1), ("i", "j", "k", "j")),
    ("...ij,j...->i...", [(5, 1, 2, 3), (3, 1, 4)], ((0, 4, 2, 3), (3, 5, 1)), (2, 0, 1), (5, 4, 2, 3, 1, 1),
     ("…0", "…1", "i", "j", "…1", "…0")),
    ("ba,a...->...b", [(1, 2), (1, 1)], ((0, 1), (3, 2)), (2, 0), (1, 2, 1, 1), ("b", "a", "…0", "a")),
    ("ii...->...", [(2, 2)], ((0, 0),), (), (2,), ("i",)),
])
def test_a_graph_numbers_its_indices_in_order_of_appearance(eq, shapes, inputs, output, sizes, names):
    """Indices are numbered as they first appear in the operands, then a size-1 dimension
    broadcast against a larger one gets an index of its own (shown by its label's name),
    and an ellipsis's dimensions are numbered from the widest's left."""
    g = build(parse(eq), shapes)
    assert (g.inputs, g.output, g.sizes, g.names) == (inputs, output, sizes, names)



def test_the_slicers_cut_by_peak_times_only_the_halvings_of_the_least_peak():
    # cutting by peak, a halving whose peak is above the least found so far is not taken
    # whatever its time: fewer halvings are timed than weighed, and the cut meets the limit
    from einc.planner import slicing
    inputs = ["ab", "bc", "cd", "de", "ea", "af", "fg", "gh", "hb", "ci", "ij", "jd"]
    p = plan_for(",".join(inputs) + "->", [(4, 4)] * len(inputs), Options.of("greedy"))
    model = slicing._Model(p, "live")
    weighed, timed = [], []
    peak, cost = model.peak, model.cost
    model.peak = lambda chunks, limit: weighed.append(dict(chunks)) or peak(chunks, limit)
    model.cost = lambda chunks: timed.append(dict(chunks)) or cost(chunks)
    chunks = slicing._cut(model, 64, (), slicing._BY_PEAK)
    assert peak(chunks, 64)[0] <= 64 < peak({}, 64)[0]
    assert len(timed) < len(weighed)
