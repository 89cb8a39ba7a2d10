"""einc's default path search past dynamic programming's reach (einc.planner.search): the
budget, the report, determinism, the fallbacks without cotengra, and the ranking."""

import functools
import inspect
import json
import math
import os
import random
import stat
import subprocess
import sys
import time
import types

import entries
import opt_einsum
import pytest
import torch

import einc
from einc.errors import EquationError
from einc.planner import anneal as A
from einc.planner import libraries, objective, pathcache
from einc.planner import search as S
from einc.planner.options import DP_OPERANDS, _auto, _dynamic_programming, _optimal
from einc.planner.plan import path_cache_clear

HAS_COTENGRA = S._cotengra() is not None


def _regular(n, d_min, d_max, seed):
    """A random 3-regular network of ``n`` tensors (int labels), bonds of d_min..d_max."""
    rng = random.Random(seed)
    import networkx as nx
    g = nx.random_regular_graph(3, n, seed=seed)
    edge = {tuple(sorted(e)): k for k, e in enumerate(g.edges)}
    sizes = {k: rng.randint(d_min, d_max) for k in edge.values()}
    inputs = [frozenset(edge[tuple(sorted((v, u)))] for u in g.neighbors(v)) for v in range(n)]
    return inputs, sizes


def _cotengrust_or_skip(reason):
    rust = S._cotengrust()
    if rust is None:
        pytest.skip(reason)
    return rust


def _replace_trials(monkeypatch, rust, trials):
    """The search sees cotengrust with its random greedy trials run by ``trials`` (called as
    ``optimize_random_greedy_track_flops`` is), all else cotengrust's own."""
    class StandIn:
        def __getattr__(self, name):
            return getattr(rust, name)

        optimize_random_greedy_track_flops = staticmethod(trials)
    monkeypatch.setattr(S, "_cotengrust", lambda: StandIn())


def _equation(inputs):
    labels = sorted({i for t in inputs for i in t})
    return ",".join("".join(opt_einsum.get_symbol(labels.index(i)) for i in sorted(t)) for t in inputs) + "->"


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch, tmp_path):
    """A fresh cache folder for each test (remembered paths would answer the searches)."""
    folder = tmp_path / "einc-cache"
    monkeypatch.setenv("EINC_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def fresh():
    path_cache_clear()
    einc.cache_clear()
    yield
    path_cache_clear()
    einc.cache_clear()


def test_up_to_dynamic_programmings_reach_the_paths_are_dps():
    # cotengrust runs opt_einsum's dp search where installed: the same least cost, ties
    # broken its own way; with a memory limit (which cotengrust's takes no part in) and
    # without cotengrust, opt_einsum's dp itself
    rng = random.Random(1)
    for n in (6, 10, 12, DP_OPERANDS):
        inputs, sizes = _regular(n, 2, 5, seed=rng.randrange(100))
        want = opt_einsum.paths.dynamic_programming(inputs, set(), sizes)
        got = _auto(inputs, set(), sizes)
        assert S.path_cost(inputs, set(), sizes, got)[0] == S.path_cost(inputs, set(), sizes, want)[0]
        assert _auto(inputs, set(), sizes, memory_limit=10 ** 6) == \
            opt_einsum.paths.dynamic_programming(inputs, set(), sizes, 10 ** 6)


def _letters(equation, sizes):
    """``(inputs, output, sizes)`` of ``equation`` with int labels, as einc's searches take them."""
    lhs, out = equation.split("->")
    label = {c: k for k, c in enumerate(sorted(sizes))}
    return [{label[c] for c in t} for t in lhs.split(",")], {label[c] for c in out}, \
        {label[c]: s for c, s in sizes.items()}


def _products(inputs, output, sizes, path):
    """cotengrust's flops of a linear ``path``: each pair's product of its indices' sizes."""
    terms, total = [set(t) for t in inputs], 0
    for pair in path:
        taken = [terms.pop(k) for k in sorted(pair, reverse=True)]
        both = set().union(*taken)
        total += math.prod(sizes[i] for i in both) if len(taken) == 2 else 0
        rest = set(output).union(*terms)
        terms.append({i for i in both if i in rest})
    return total


# tensorly-torch's CP linear layer: one rank index of 1024 on nine of ten operands
CP_LAYER = ("bcdef,a,ga,ha,ia,ja,ca,da,ea,fa->bghij", {"a": 1024, "b": 64, **{c: 4 for c in "cdefghij"}})


@pytest.mark.skipif(S._cotengrust() is None, reason="cotengrust's dp")
@pytest.mark.parametrize("equation, sizes", [CP_LAYER, ("ab,bc,cd,de,ef,fg->ag", dict(zip("abcdefg", range(2, 9))))])
def test_the_dp_starts_its_sieve_at_a_paths_cost(monkeypatch, equation, sizes):
    # cotengrust's dp searches again at every doubling of its cap, from 2 flops up to the
    # optimum: started at a random greedy path's cost, it searches once
    import cotengrust
    caps, real = [], cotengrust.optimize_optimal

    def recorded(*args, **kwargs):
        caps.append(kwargs.get("cost_cap"))
        return real(*args, **kwargs)
    monkeypatch.setattr(cotengrust, "optimize_optimal", recorded)
    inputs, output, sizes = _letters(equation, sizes)
    got = _auto(inputs, output, sizes)
    want = opt_einsum.paths.dynamic_programming(inputs, output, sizes)
    assert S.path_cost(inputs, output, sizes, got)[0] == S.path_cost(inputs, output, sizes, want)[0]
    assert caps[0] is not None and math.log(_products(inputs, output, sizes, got)) <= caps[0]
    greedy = S._greedy([frozenset(t) for t in inputs], frozenset(output), sizes, None)
    assert caps[0] <= math.log(_products(inputs, output, sizes, greedy)) + 1e-3


@pytest.mark.skipif(S._cotengrust() is None, reason="cotengrust's dp")
def test_the_dp_keeps_a_greedy_path_where_its_simplifications_cost_flops():
    # `g` on three tensors and `f` on one: cotengrust sums `fg` alone first, and its dp (and
    # its greedy) then keep `g` on a large intermediate, 75x opt_einsum's dp
    import cotengrust
    equation = "e,de,acd,fg,ac,be,ade,e,bcg,g->ad"
    inputs, output, sizes = _letters(equation, {"a": 17, "b": 17, "c": 1, "d": 100, "e": 5, "f": 8, "g": 100})
    label = {i: opt_einsum.get_symbol(i) for i in sizes}
    network = ([[label[i] for i in t] for t in inputs], [label[i] for i in output],
               {label[i]: float(s) for i, s in sizes.items()})
    dp_alone = S.path_cost(inputs, output, sizes, [tuple(c) for c in cotengrust.optimize_optimal(*network)])[0]
    got = S.path_cost(inputs, output, sizes, _auto(inputs, output, sizes))[0]
    theirs = S.path_cost(inputs, output, sizes, opt_einsum.paths.dynamic_programming(inputs, output, sizes))[0]
    assert dp_alone > 10 * theirs and got <= 2 * theirs, (dp_alone, got, theirs)


def test_a_cost_without_a_finite_log_leaves_the_dp_its_own_start():
    from einc.planner.options import _cap
    # a cap of -inf would stay -inf through cotengrust's doublings, which never end
    assert [_cap(f) for f in (-math.inf, math.nan, math.inf, 0.0)] == [None] * 4
    assert _cap(2.0) == pytest.approx(2 * math.log(10), rel=1e-4)


def _optimal_model(inputs, output, sizes, path, limit=math.inf):
    """opt_einsum ``optimal``'s own count of a pairwise path: each pair's product of its
    indices' sizes, twice where it sums an index the two share; inf where an intermediate
    holds more than ``limit`` elements."""
    terms, total = [frozenset(t) for t in inputs], 0
    for i, j in path:
        a, b = terms[i], terms[j]
        rest = [t for k, t in enumerate(terms) if k not in (i, j)]
        keep = frozenset(output).union(*rest)
        total += math.prod(sizes[x] for x in a | b) * (1 + bool((a & b) - keep))
        terms = rest + [(a | b) & keep]
        if rest and math.prod(sizes[x] for x in terms[-1]) > limit:
            return math.inf
    return total


def _least(inputs, output, sizes, limit=math.inf):
    """The least ``_optimal_model`` count over every pairwise path (a brute force)."""
    import itertools
    n = len(inputs)
    paths = itertools.product(*[list(itertools.combinations(range(k), 2)) for k in range(n, 1, -1)])
    return min(_optimal_model(inputs, output, sizes, p, limit) for p in paths)


@pytest.mark.parametrize("equation, sizes, limit, path", [
    # opt_einsum issue 254: the scale first, the intermediate 8x smaller
    ("bgk,bkd,bk->bgd", {"b": 64, "g": 8, "k": 4096, "d": 128}, None, ((0, 2), (0, 1))),
    ("ab,b,b,b,c->ac", {"a": 3, "b": 4, "c": 2}, 12, None),       # (memory_limit="max_input")
    ("bd,bd,cd,cd,bd->", {"b": 64, "c": 24, "d": 40}, None, None),
])
def test_the_exhaustive_search_is_exhaustive_where_an_index_is_on_three_operands(equation, sizes, limit, path):
    # opt_einsum's optimal caches a pair under its two index sets, which two different
    # tensors may share: it returned a path costlier than greedy's on each of these
    inputs, output, sizes = _letters(equation, sizes)
    got = _auto(inputs, output, sizes, memory_limit=limit)
    least = _least(inputs, output, sizes, limit or math.inf)
    assert _optimal_model(inputs, output, sizes, got, limit or math.inf) == least
    raw = opt_einsum.paths.optimal(inputs, output, sizes, limit)
    assert _optimal_model(inputs, output, sizes, raw, limit or math.inf) > least  # (the case shows the cache's error)
    if path is not None:
        assert tuple(got) == path
    # and einsum runs that path: the answer torch.einsum gives
    shapes = [[sizes[i] for i in sorted(t)] for t in inputs]
    if math.prod(sizes.values()) < 10 ** 6:
        letters = "abcdefgh"
        eq = ",".join("".join(letters[i] for i in sorted(t)) for t in inputs) + "->" + \
            "".join(letters[i] for i in sorted(output))
        ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
        assert torch.allclose(einc.einsum(eq, *ops), torch.einsum(eq, *ops))


def _shared_network(rng, n):
    """``n`` operands of 1-3 indices drawn from few: indices on three or more operands, equal
    index sets, size-1 indices."""
    labels = range(rng.randint(2, 8))
    inputs = [frozenset(rng.sample(labels, rng.randint(1, min(3, len(labels))))) for _ in range(n)]
    used = sorted(set().union(*inputs))
    output = {i for i in used if rng.random() < 0.3}
    return inputs, output, {i: rng.choice([1, 2, 3, 5, 8, 17, 64, 100]) for i in used}


def test_the_exhaustive_search_finds_the_least_count_on_random_networks():
    # with and without a memory limit no tighter than the search's
    rng = random.Random(7)
    for _ in range(150):
        inputs, output, sizes = _shared_network(rng, rng.randint(3, 5))
        got = _optimal(inputs, output, sizes, None)
        assert _optimal_model(inputs, output, sizes, got) == _least(inputs, output, sizes), (inputs, output, sizes)
        assert _optimal(inputs, output, sizes, math.prod(sizes.values())) == got


def test_up_to_16_operands_no_path_costs_more_than_torch_einsums():
    # opt_einsum's `auto` (torch.einsum's search) against einc's, each in the count einc's
    # steps run: einc's exhaustive search and dp minimize counts of their own, and where an
    # index is on three operands cotengrust's simplifications can cost 4x more than `auto`
    rng = random.Random(11)
    cheaper = 0
    for n in [*range(3, DP_OPERANDS + 1)] * 12:
        inputs, output, sizes = _shared_network(rng, n)
        got = S.path_cost(inputs, output, sizes, _auto(inputs, output, sizes))[0]
        theirs = S.path_cost(inputs, output, sizes, opt_einsum.paths.auto(inputs, output, sizes))[0]
        found = (_optimal if n <= 5 else _dynamic_programming)(inputs, output, sizes, None)
        assert got <= theirs and got <= S.path_cost(inputs, output, sizes, found)[0], (inputs, output, sizes)
        cheaper += got < theirs
    assert cheaper > 50         # (and the search still finds cheaper paths than `auto` on many)


def test_dynamic_programming_runs_without_cotengrust(monkeypatch):
    inputs, sizes = _regular(10, 2, 5, seed=3)
    monkeypatch.setitem(sys.modules, "cotengrust", None)       # as where it is not installed
    assert _auto(inputs, set(), sizes) == opt_einsum.paths.dynamic_programming(inputs, set(), sizes)


def test_path_cost_counts_as_einc_does():
    # ij,jk,kl->il at 2x3, 3x4, 4x5: (ij,jk) 2*3*4 multiply-adds, then 2*4*5
    inputs = [frozenset({0, 1}), frozenset({1, 2}), frozenset({2, 3})]
    sizes = {0: 2, 1: 3, 2: 4, 3: 5}
    flops, written, largest, steps = S.path_cost(inputs, {0, 3}, sizes, ((0, 1), (0, 1)))
    plan = einc.planner.plan_for("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], einc.planner.Options.of(((0, 1), (0, 1))))
    assert flops == plan.flops == 2 * (24 + 40)
    assert (written, largest, steps) == (8 + 10, 10, 2)


def test_path_cost_agrees_with_opt_einsum_on_a_network_of_40_tensors():
    inputs, sizes = _regular(40, 2, 5, seed=3)
    path = S._greedy(inputs, frozenset(), sizes, None)
    shapes = [tuple(sizes[i] for i in sorted(t)) for t in inputs]
    _, info = opt_einsum.contract_path(_equation(inputs), *shapes, shapes=True, optimize=[list(c) for c in path])
    flops, _, largest, steps = S.path_cost(inputs, frozenset(), sizes, path)
    assert (flops, largest, steps) == (info.opt_cost, info.largest_intermediate, len(inputs) - 1)
    assert S._cost(inputs, frozenset(), sizes, path) == S.path_cost(inputs, frozenset(), sizes, path)


def test_the_budget_is_a_share_of_the_predicted_time_capped():
    assert S.budget_for(0.0) == pytest.approx(S.FLOOR)                     # a few ms, however small
    assert S.budget_for(0.001) == pytest.approx(0.001 * S.FRACTION + 0.001 * S.REPAY)
    assert S.budget_for(1.0) == pytest.approx(S.FRACTION + S.SMALL)        # ... up to a tenth of a second more
    assert S.budget_for(50.0) == pytest.approx(50 * S.FRACTION + S.SMALL)
    assert S.budget_for(1e9) == S.CAP
    assert S.predicted_seconds(1e9, 0, 0) == pytest.approx(1e9 * S.FLOP_SECONDS)
    # never more than the allowance: a tenth of the predicted time and a tenth of a second
    for seconds in (0.0, 1e-4, 0.003, 0.02, 0.3, 4.0, 80.0, 1e5):
        assert S.budget_for(seconds) <= S.allowance(seconds) <= S.FRACTION * seconds + S.SMALL


def test_a_network_that_contracts_in_a_millisecond_gets_a_few_milliseconds_of_trials(cpu_clock):
    # a random 3-regular network of 60 tensors contracts in about a millisecond: its greedy
    # path is several times costlier than a few random greedy trials' best
    inputs, sizes = _regular(60, 2, 2, seed=1)
    greedy = S._greedy(inputs, frozenset(), sizes, None)
    greedy_flops = S.path_cost(inputs, frozenset(), sizes, greedy)[0]
    path, report = S.find(inputs, set(), sizes)
    assert report.greedy_seconds < 0.002 and report.budget == pytest.approx(S.budget_for(report.greedy_seconds))
    assert report.method.startswith("random greedy") and report.trials > 1
    # the trials the budget affords at their nominal cost, counted, not clocked (or fewer, converged)
    affordable = report.budget / (S.TRIAL_SECONDS * sum(map(len, inputs)))
    assert "trials" in report.reason and 8 <= report.trials <= affordable + 64 + len(S.SUBTREES)
    assert S.path_cost(inputs, frozenset(), sizes, path)[0] == report.flops <= greedy_flops
    assert report.best_seconds <= report.greedy_seconds
    assert report.seconds < S.GUARD * report.budget + 0.25     # one chunk of refinement past its guard


def test_a_small_search_counts_its_work_so_a_slow_machine_finds_the_same_path(monkeypatch, cpu_clock):
    # below the hyper-optimizer the budget is counted in trials and subtrees at nominal
    # costs: a machine three times slower runs longer, and finds the same path
    rust = _cotengrust_or_skip("cotengrust's trials")
    inputs, sizes = _regular(60, 2, 2, seed=1)
    path, report = S.find(inputs, set(), sizes)
    assert S.budget_for(report.greedy_seconds) < S.HYPER_FLOOR
    calls = []

    def slow(*args, ntrials, **kwargs):
        start = time.thread_time()
        out = rust.optimize_random_greedy_track_flops(*args, ntrials=ntrials, **kwargs)
        calls.append(ntrials)
        cpu_clock.sleep(2 * (time.thread_time() - start))
        return out
    _replace_trials(monkeypatch, rust, slow)
    slow_path, slow_report = S.find(inputs, set(), sizes)
    assert calls
    assert (slow_path, slow_report.trials, slow_report.reason) == (path, report.trials, report.reason)


def test_random_greedy_trials_end_where_they_stop_finding_better_trees(cpu_clock):
    # a matrix product state: every random greedy trial finds the greedy tree's cost, so
    # the trials end after STALE of them, long before the budget's count
    inputs = [frozenset({0, 1})] + [frozenset({i, i + 1, i + 2}) for i in range(1, 60, 2)]
    sizes = {i: (2 if i % 2 == 0 else 16) for i in range(64)}
    per_trial = S.TRIAL_SECONDS * sum(map(len, inputs))
    _, trials, reason, work = S._random_greedy(inputs, frozenset(), sizes, None, 0, S.time.perf_counter(), 1.0,
                                               None, per_trial)
    assert reason.startswith("converged") and trials < 2 * S.STALE + 64
    # counted: the trials, and the ranking of the few best trees by the objective
    ranking = S.PER_TENSOR * len(inputs) * objective.SHORTLIST
    assert trials * per_trial < work <= trials * per_trial + ranking < 1.0


@pytest.mark.skipif(not HAS_COTENGRA, reason="the refinement is cotengra's")
def test_without_cotengrust_the_refinement_gets_what_the_clocked_trials_left(monkeypatch, cpu_clock):
    # opt_einsum's trials are clocked: the refinement gets the budget less the time they took
    monkeypatch.setattr(S, "_cotengrust", lambda: None)
    monkeypatch.setattr(opt_einsum.path_random, "time", types.SimpleNamespace(time=cpu_clock.perf_counter))
    given = []
    refine = S._refine

    def spy(ctg, inputs, output, size_dict, best, work, ended):
        given.append(work)
        return refine(ctg, inputs, output, size_dict, best, work, ended)
    monkeypatch.setattr(S, "_refine", spy)
    # a budget of 0.1 s: one trial (milliseconds, more on a loaded machine) past the trials'
    # share cannot take all of what they leave
    monkeypatch.setattr(S, "FLOOR", S.SMALL)
    inputs, sizes = _regular(60, 2, 2, seed=1)
    _, report = S.find(inputs, set(), sizes)
    assert report.method.startswith("random greedy (opt_einsum)") and len(given) == 1
    assert 0 < given[0] <= report.budget * (1 - S.REFINE_SHARE) + 0.005


def test_a_counted_search_still_stops_at_its_guard(monkeypatch):
    # on a machine so slow that the nominal costs are far off, its CPU time still ends it
    monkeypatch.setattr(S, "GUARD", 1e-9)
    inputs, sizes = _regular(60, 2, 2, seed=1)
    _, report = S.find(inputs, set(), sizes)
    assert report.trials <= 8 + len(S.SUBTREES) and "allowance spent" in report.reason


def test_a_loaded_machine_finds_the_counted_searchs_path_later_not_cut(cpu_clock):
    # other jobs slow the clock, not the search's own CPU time: with the clock at twenty times
    # the thread's CPU time the counted search runs past GUARD times its budget on the clock,
    # and finds the same path, trees and refinement as on a quiet machine
    inputs, sizes = _regular(60, 2, 2, seed=1)
    path, report = S.find(inputs, set(), sizes)
    assert report.budget < S.HYPER_FLOOR and "refined" in report.method
    cpu_clock.rate = 20.0
    loaded_path, loaded = S.find(inputs, set(), sizes)
    assert S.GUARD * loaded.budget < loaded.seconds < S.CAP
    assert (loaded_path, loaded.method, loaded.trials, loaded.reason) == (path, report.method, report.trials,
                                                                          report.reason)


def test_the_clock_still_ends_a_counted_search_that_gets_no_cpu(monkeypatch, cpu_clock):
    # a process that gets no CPU for CAP seconds (a batch of trials that stood still on the
    # clock) ends its search at the next look: no more trials, no refinement
    rust = _cotengrust_or_skip("cotengrust's counted trials")

    def stuck(*args, **kwargs):
        cpu_clock.sleep(S.CAP)
        return rust.optimize_random_greedy_track_flops(*args, **kwargs)
    _replace_trials(monkeypatch, rust, stuck)
    inputs, sizes = _regular(60, 2, 2, seed=1)
    _, report = S.find(inputs, set(), sizes)
    assert "allowance spent after 8 trials" in report.reason and "refined" not in report.method
    assert S.CAP <= report.seconds < S.CAP + 1


def test_trials_that_gain_a_percent_or_so_converge(monkeypatch, cpu_clock):
    # on a matrix product state greedy's tree is near the best: trials that keep finding trees
    # a fraction of a percent better end as those that find none do
    rust = _cotengrust_or_skip("cotengrust's batches")
    batches = [0]

    def creeping(*args, **kwargs):
        batches[0] += 1
        ssa, _ = rust.optimize_random_greedy_track_flops(*args, **kwargs)
        return ssa, 9.0 - 0.001 * batches[0]        # each batch 0.2 % better than the one before
    _replace_trials(monkeypatch, rust, creeping)
    inputs, sizes = _regular(30, 2, 4, seed=1)
    per_trial = S.TRIAL_SECONDS * sum(map(len, inputs))
    _, trials, reason, _ = S._random_greedy(inputs, frozenset(), sizes, None, 0, S.time.perf_counter(), 60.0, None,
                                            per_trial)
    assert reason.startswith("converged") and trials <= 2 * S.STALE + 32


@pytest.mark.skipif(not HAS_COTENGRA, reason="cotengra's subtree reconfiguration")
def test_a_refinement_that_affords_no_subtree_makes_no_tree(monkeypatch):
    # on hundreds of tensors making cotengra's tree and ranking the result cost as much as the
    # subtrees: counted first, so that work for one subtree alone makes nothing
    ctg = S._cotengra()
    made = []
    real = ctg.ContractionTree.from_path
    monkeypatch.setattr(ctg.ContractionTree, "from_path", lambda *a, **k: made.append(1) or real(*a, **k))
    inputs, sizes = _regular(200, 2, 4, seed=1)
    greedy = S._greedy(inputs, frozenset(), sizes, None)
    path, ran = S._refine(ctg, inputs, frozenset(), sizes, greedy, S.SUBTREES[0][1] * 1.01, S._ends())
    assert path == greedy and ran == () and not made
    path, ran = S._refine(ctg, inputs, frozenset(), sizes, greedy, 0.05, S._ends())
    assert ran and made


def test_trial_batches_keep_to_the_budget_on_hundreds_of_tensors(monkeypatch, cpu_clock):
    # a trial on hundreds of tensors takes milliseconds: batches sized by the time left, not
    # doubled blindly (here each trial takes 2 ms)
    rust = _cotengrust_or_skip("cotengrust's batches")
    sizes_asked = []

    def slow(*args, ntrials, **kwargs):
        sizes_asked.append(ntrials)
        cpu_clock.sleep(0.002 * ntrials)
        return rust.optimize_random_greedy_track_flops(*args, ntrials=1, **kwargs)
    _replace_trials(monkeypatch, rust, slow)
    inputs, sizes = _regular(30, 2, 4, seed=1)
    start = cpu_clock.perf_counter()
    monkeypatch.setattr(S, "STALE", 10 ** 9)
    _, trials, reason, _ = S._random_greedy(inputs, frozenset(), sizes, None, 0, start, 0.15)
    # doubled: 8, 16, 32 trials (112 ms), then 64 more (240 ms in all); here about 19 more.
    # (The trials' own time, not the wall clock's, which a loaded machine stretches: the
    # batches are sized by the time left, so load makes them smaller, never larger.)
    assert reason == "time budget spent" and sizes_asked[:2] == [8, 16] and max(sizes_asked) <= 32
    assert 0.002 * sum(sizes_asked) < 0.15 + 0.06


def test_random_greedy_batches_take_turns_with_two_costmod_ranges(monkeypatch):
    # cotengrust's own range (matrix chains need its ends), then a narrower one, in turn
    rust = _cotengrust_or_skip("cotengrust's batches")
    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["costmod"])
        return rust.optimize_random_greedy_track_flops(*args, **kwargs)
    _replace_trials(monkeypatch, rust, spy)
    monkeypatch.setattr(S, "MAX_TRIALS", 64)
    monkeypatch.setattr(S, "STALE", 10 ** 9)
    inputs, sizes = _regular(30, 2, 4, seed=1)
    _, trials, reason, _ = S._random_greedy(inputs, frozenset(), sizes, None, 0, time.perf_counter(), 60.0)
    assert reason == "64 trials" and len(seen) >= 3
    assert seen[:3] == [(0.1, 4.0), (0.5, 2.0), (0.1, 4.0)] == [S.COSTMODS[0], S.COSTMODS[1], S.COSTMODS[0]]


def test_a_costlier_network_is_searched_within_its_budget_and_explain_says_so(fresh, cpu_clock):
    inputs, sizes = _regular(40, 4, 6, seed=1)
    path, report = S.search(inputs, set(), sizes)
    greedy = S._greedy(inputs, frozenset(), sizes, None)
    assert report.method != "greedy" and report.trials > 1
    assert report.best_seconds <= report.greedy_seconds
    assert S._predict(inputs, frozenset(), sizes, path) == pytest.approx(report.best_seconds)
    assert report.best_seconds <= S._predict(inputs, frozenset(), sizes, greedy)
    # within the allowance (trials, then the refinement), and the overrun of one chunk of refinement
    assert report.seconds <= S.allowance(report.greedy_seconds) + 0.25
    eq = _equation(inputs)
    labels = sorted({i for t in inputs for i in t})
    shapes = [tuple(sizes[i] for i in sorted(t)) for t in inputs]
    text = str(einc.explain(eq, *[torch.empty(s) for s in shapes]))
    line = next(x for x in text.splitlines() if "Path search" in x)
    assert "trees in" in line and "stopped:" in line and "budget" in line
    assert len(labels) > 52


def test_the_path_is_right(fresh):
    # 20 operands in letters: einc's result against torch.einsum on float64
    eq = "ab,bc,cd,de,ef,fg,gh,hi,ij,jk,kl,lm,mn,no,op,pq,qr,rs,st,tu,ua->"
    shapes = [(7, 7)] * 21
    ops = [torch.randn(s, dtype=torch.float64) for s in shapes]
    torch.testing.assert_close(einc.einsum(eq, *ops), torch.einsum(eq, *ops))


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_past_half_a_second_of_budget_the_hyper_optimizer_runs_and_beats_greedy(monkeypatch, cpu_clock):
    monkeypatch.setattr(S, "CAP", 0.6)
    monkeypatch.setattr(S, "HYPER_FLOOR", 0.05)     # still reached with the random greedy tree's budget
    inputs, sizes = _regular(60, 3, 5, seed=4)
    _, report = S.search(inputs, set(), sizes)
    assert S.budget_for(report.greedy_seconds) >= S.HYPER_FLOOR
    assert "hyper-optimizer" in report.method
    assert report.best_seconds < report.greedy_seconds
    assert report.seconds < S.CAP + 3     # the last trial may run past it


def _hyper_trials(monkeypatch, cpu_clock, budget, cpu=0.0, clock=0.0, share=1.0):
    """A run of ``_hyper`` on a small graph, to ``share`` of the budget, giving ``(path, trials, reason,
    budget)``: each trial taking ``cpu`` seconds more of this thread's CPU time and ``clock`` seconds more
    on the clock alone."""
    ctg = S._cotengra()

    class Slow(ctg.HyperOptimizer):
        def search(self, *args, **kwargs):
            start = time.thread_time()
            while time.thread_time() < start + cpu:
                pass
            cpu_clock.sleep(clock)
            return super().search(*args, **kwargs)
    monkeypatch.setattr(ctg, "HyperOptimizer", Slow)
    monkeypatch.setattr(S, "budget_for", lambda seconds: budget)
    inputs, sizes = _regular(20, 2, 3, seed=1)
    return lambda: S._hyper(ctg, inputs, frozenset(), sizes, None, 0, cpu_clock.perf_counter(), 1.0, math.inf,
                            share)


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_no_hyper_trial_is_begun_that_would_end_past_the_budget_and_load_does_not_move_it(monkeypatch,
                                                                                           cpu_clock):
    # trials of 0.05 s of this thread's CPU time (and their own work, milliseconds) on a 0.2 s
    # budget: three end by 0.2 s; a fourth would end past it. With the clock at five times the
    # thread's CPU time (other jobs on the machine) the same three run, to the same path
    run = _hyper_trials(monkeypatch, cpu_clock, 0.2, cpu=0.05)
    start = time.thread_time()
    quiet = run()
    assert time.thread_time() - start < 0.2
    assert quiet[0] is not None and quiet[1] == 3 and "the next trial would end past it" in quiet[2]
    cpu_clock.rate = 5.0
    assert run() == quiet


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_the_clock_still_ends_a_hyper_search_that_gets_no_cpu(monkeypatch, cpu_clock):
    # trials that stand still on the clock for a third of CAP each, their CPU time far within
    # the share: the second ends at two thirds of CAP, and a third would end at CAP
    start = cpu_clock.perf_counter()
    path, trials, reason, _ = _hyper_trials(monkeypatch, cpu_clock, 2.0, clock=S.CAP / 3)()
    assert path is not None and trials == 2 and f"capped at {S.CAP:g} s" in reason
    assert cpu_clock.perf_counter() - start < S.CAP


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_a_hyper_search_that_gets_little_cpu_ends_at_its_share_of_the_clock_s_cap(monkeypatch, cpu_clock):
    # trials that stand still on the clock for an eighth of CAP each, their CPU time far within a
    # 30 % share: the second ends at a quarter of CAP, and a third would end past 30 % of it,
    # where annealing's share of CAP begins
    start = cpu_clock.perf_counter()
    path, trials, reason, _ = _hyper_trials(monkeypatch, cpu_clock, 2.0, clock=S.CAP / 8, share=0.3)()
    assert path is not None and trials == 2 and f"capped at {0.3 * S.CAP:g} s" in reason
    assert cpu_clock.perf_counter() - start < 0.3 * S.CAP


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_the_hyper_optimizer_stops_at_its_share_and_annealing_takes_the_rest(monkeypatch, cpu_clock):
    monkeypatch.setattr(S, "budget_for", lambda seconds: 1.0)
    monkeypatch.setattr(A, "ANNEAL_SECONDS", 1e-4)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    ran = []
    annealed = A.annealed

    def spy(*args, **kwargs):
        ran.append(cpu_clock.perf_counter())
        return annealed(*args, **kwargs)
    monkeypatch.setattr(A, "annealed", spy)
    t0 = cpu_clock.perf_counter()
    path, report = S.find(inputs, set(), sizes)
    assert "hyper-optimizer" in report.method and "annealed" in report.method, report
    assert "its share of the time budget spent" in report.reason and "annealing runs" in report.reason, report
    assert len(ran) == 1 and ran[0] - t0 < 1.0       # begun within the budget, not after it
    assert len(path) == len(inputs) - 1


@pytest.mark.skipif(not HAS_COTENGRA or S._cotengrust() is None, reason="cotengrust's trials, cotengra's search")
def test_a_hyper_searchs_random_greedy_trials_end_where_they_converge_over_a_longer_run(monkeypatch, cpu_clock):
    # a matrix product state: every trial finds the same tree; a hyper search's budget would
    # afford far more than MAX_TRIALS of them, and they end after HYPER_STALE, not STALE
    inputs = [frozenset({0, 1})] + [frozenset({i, i + 1, i + 2}) for i in range(1, 60, 2)]
    sizes = {i: (2 if i % 2 == 0 else 16) for i in range(64)}
    monkeypatch.setattr(S, "budget_for", lambda seconds: 5.0)
    ran = []
    trials = S._random_greedy
    monkeypatch.setattr(S, "_random_greedy", lambda *args: ran.append(trials(*args)) or ran[-1])
    monkeypatch.setattr(S, "_hyper_annealed", lambda *args: (args[10], 0, "stub", 5.0, 0))
    _, report = S.find(inputs, set(), sizes)
    assert report.reason == "stub" and len(ran) == 1
    assert ran[0][2].startswith("converged") and S.HYPER_STALE <= ran[0][1] < min(2 * S.HYPER_STALE, S.MAX_TRIALS)


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
@pytest.mark.parametrize("after", [1.0, 0.3])
def test_no_annealing_run_is_begun_that_a_gain_like_the_hyper_optimizers_would_leave_past_its_end(monkeypatch,
                                                                                                   after):
    # the hyper-optimizer's tree brought the budget from 1 s to 0.3 s: a gain like it would
    # leave none, so annealing begins no run; where its trees gained nothing, annealing runs
    monkeypatch.setattr(S, "budget_for", lambda seconds: 1.0)
    monkeypatch.setattr(A, "ANNEAL_SECONDS", 1e-4)
    inputs, sizes = _regular(30, 3, 4, seed=2)
    output = frozenset()
    greedy = S._greedy(inputs, output, sizes, None)
    monkeypatch.setattr(S, "_hyper", lambda *args: (greedy, 1, "stub", after))
    best, trials, reason, budget, runs = S._hyper_annealed(S._cotengra(), inputs, output, sizes, None, 0,
                                                           time.perf_counter(), 1.0, 1.0, None, greedy,
                                                           time.thread_time())
    assert budget == after and trials == 1
    assert (runs == 0) == (after < 1.0) and ("no time left" in reason) == (after < 1.0), reason


def _annealed(inputs, sizes, seconds, **kwargs):
    """``(path, runs, why, start, linear)``: annealing from the left-to-right tree (a poor
    one) of ``inputs`` for up to ``seconds``."""
    linear = tuple((0, 1) for _ in range(len(inputs) - 1))
    start = time.thread_time()
    return (*_anneal(inputs, frozenset(), sizes, linear, start + seconds, **kwargs), start, linear)


def _anneal(inputs, output, sizes, path, deadline, **kwargs):
    """einc.planner.anneal.annealed as the search calls it (its ranking, its weight, its end:
    ``deadline`` in this thread's CPU time, CAP on the clock, the cpu_clock fixture's where a test takes it)."""
    t0 = A.time.perf_counter()
    return A.annealed(S._cotengra(), inputs, output, sizes, path, t0, deadline, 0,
                      functools.partial(S._rank, inputs, output, sizes), f"combo-{S.WRITE_FACTOR:g}",
                      **{"over": lambda cpu, clock: S.counted_ends(t0 - clock)(cpu)(), **kwargs})


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_annealing_finds_a_better_tree_than_a_poor_one_and_never_a_worse_one():
    inputs, sizes = _regular(30, 3, 4, seed=2)
    output = frozenset()
    path, runs, _, _, linear = _annealed(inputs, sizes, 0.3)
    assert runs >= 1
    assert S._rank(inputs, output, sizes, path) < S._rank(inputs, output, sizes, linear)
    again, _, _ = _anneal(inputs, output, sizes, path, time.thread_time() + 0.3)
    assert S._rank(inputs, output, sizes, again) <= S._rank(inputs, output, sizes, path)


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_annealing_ends_where_runs_stop_finding_better_trees_not_only_on_the_clock(cpu_clock):
    inputs, sizes = _regular(12, 2, 3, seed=3)
    path, runs, why, start, _ = _annealed(inputs, sizes, 600.0)
    assert why.startswith("converged") and A.ANNEAL_STALE <= runs < 100, (runs, why)
    assert time.thread_time() - start < 60


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_annealing_given_a_count_runs_that_many_and_no_deadline_ends_it():
    # the seam of tests/planner/test_search_paths.py: the same runs, counted, on any machine
    inputs, sizes = _regular(30, 3, 4, seed=2)
    path, runs, why, _, _ = _annealed(inputs, sizes, math.inf, most=2)
    assert (runs, why) == (2, "2 runs, as asked")
    assert _annealed(inputs, sizes, math.inf, most=2)[:3] == (path, runs, why)


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_annealing_shows_its_best_tree_s_flops_as_the_search_counts_them():
    inputs, sizes = _regular(30, 3, 4, seed=2)
    shown = []

    class Bar:
        def update(self, elapsed, trials, flops):
            shown.append(flops)
    path, runs, _, _, _ = _annealed(inputs, sizes, 0.3, progress=Bar())
    assert len(shown) == runs >= 1 and shown[-1] == S.path_cost(inputs, frozenset(), sizes, path)[0]


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_a_better_annealed_tree_affords_less_search():
    inputs, sizes = _regular(30, 3, 4, seed=2)
    path, runs, why, start, _ = _annealed(inputs, sizes, 600.0, afford=lambda p: time.thread_time())
    assert runs == 1 and why == "time budget spent"     # the first run's better tree affords no more
    assert time.thread_time() - start < 60


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_annealing_begins_no_run_that_a_gain_like_the_last_would_leave_past_its_deadline(monkeypatch):
    # runs of 0.2 s of CPU time, each finding a better tree that affords 0.4 s less: the first
    # ends at 0.2 s, its tree affords 0.6 s; a second run would end at 0.4 s, its tree affording 0.2 s
    ctg = S._cotengra()
    slow = ctg.ContractionTree.simulated_anneal

    def anneal(self, *args, **kwargs):
        _spin(0.2)
        return slow(self, *args, **kwargs)
    monkeypatch.setattr(ctg.ContractionTree, "simulated_anneal", anneal)
    inputs, sizes = _regular(12, 2, 3, seed=3)
    linear = tuple((0, 1) for _ in range(len(inputs) - 1))
    ranks, gains = iter(range(0, -100, -1)), []
    start = time.thread_time()

    def afford(path):
        gains.append(path)
        return start + 1.0 - 0.4 * len(set(map(tuple, gains)))
    path, runs, why = A.annealed(ctg, inputs, frozenset(), sizes, linear, time.perf_counter(), start + 1.0, 0,
                                 lambda p: next(ranks), "flops", afford=afford, over=lambda cpu, clock: cpu <= 0)
    assert runs == 1 and why == "time budget spent"
    assert time.thread_time() - start < 0.6       # within what its best tree affords


def _spin(seconds):
    """``seconds`` of this thread's CPU time spent."""
    start = time.thread_time()
    while time.thread_time() < start + seconds:
        pass


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
@pytest.mark.parametrize("near", [True, False])
def test_annealing_takes_turns_between_the_best_tree_and_a_runner_up_near_it(monkeypatch, near, cpu_clock):
    # a runner-up ranked within ANNEAL_RUNNER_UP times the best gets a chain of its own: the
    # second run starts from it; a far worse one (the left-to-right tree) gets none
    ctg = S._cotengra()
    slow = ctg.ContractionTree.simulated_anneal
    starts = []

    def anneal(self, *args, **kwargs):
        starts.append(self.total_flops())
        return slow(self, *args, **kwargs)
    monkeypatch.setattr(ctg.ContractionTree, "simulated_anneal", anneal)
    monkeypatch.setattr(A, "ANNEAL_STALE", 4)
    inputs, sizes = _regular(30, 3, 4, seed=2)
    output = frozenset()
    best = S._greedy(inputs, output, sizes, None)
    other = S._random_greedy(inputs, output, sizes, None, 1, S.time.perf_counter(), 1.0, None,
                             S.TRIAL_SECONDS)[0] if near else tuple((0, 1) for _ in range(len(inputs) - 1))
    if S._rank(inputs, output, sizes, other) < S._rank(inputs, output, sizes, best):
        best, other = other, best
    assert (S._rank(inputs, output, sizes, other) <= A.ANNEAL_RUNNER_UP * S._rank(inputs, output, sizes, best)) == near
    flops = ctg.ContractionTree.from_path(*libraries._strings(inputs, output, sizes), path=other).total_flops()
    path, runs, why = _anneal(inputs, output, sizes, best, time.thread_time() + 600.0, other=other)
    assert runs == len(starts) >= 4 and why.startswith("converged")
    assert (starts[1] == flops) == near and (flops in starts) == near
    assert S._rank(inputs, output, sizes, path) <= S._rank(inputs, output, sizes, best)


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def _slow_annealing(monkeypatch, cpu_clock, cpu=0.0, clock=0.0):
    """Annealing runs of ``cpu`` seconds of this thread's CPU time, their own work included,
    and ``clock`` seconds more on the clock alone."""
    ctg = S._cotengra()
    slow = ctg.ContractionTree.simulated_anneal

    def anneal(self, *args, **kwargs):
        start = time.thread_time()
        out = slow(self, *args, **kwargs)
        _spin(max(0.0, cpu - (time.thread_time() - start)))
        cpu_clock.sleep(clock)
        return out
    monkeypatch.setattr(ctg.ContractionTree, "simulated_anneal", anneal)
    return _regular(20, 2, 3, seed=1)


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_no_annealing_run_is_begun_that_would_end_past_the_deadline_and_load_does_not_move_it(monkeypatch,
                                                                                              cpu_clock):
    # runs of 0.3 s of CPU time: three end by 0.9 s, a fourth would end at 1.2 s, past the
    # deadline at 1 s. With the clock at five times the thread's CPU time the same three run
    inputs, sizes = _slow_annealing(monkeypatch, cpu_clock, cpu=0.3)
    path, runs, _, start, _ = _annealed(inputs, sizes, 1.0)
    assert runs == 3 and time.thread_time() - start < 1.0
    cpu_clock.rate = 5.0
    assert _annealed(inputs, sizes, 1.0)[:2] == (path, runs)


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_the_clock_still_ends_annealing_that_gets_no_cpu(monkeypatch, cpu_clock):
    # runs that stand still on the clock for a third of CAP each, their CPU time far within
    # the deadline: the second ends at two thirds of CAP, and a third would end at CAP
    inputs, sizes = _slow_annealing(monkeypatch, cpu_clock, clock=S.CAP / 3)
    start = cpu_clock.perf_counter()
    path, runs, why, _, _ = _annealed(inputs, sizes, 600.0)
    assert runs == 2 and why == "time budget spent" and cpu_clock.perf_counter() - start < S.CAP


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_a_search_stops_where_the_best_tree_no_longer_affords_the_hyper_optimizer(monkeypatch, cpu_clock):
    # the greedy path predicts a minute (a 0.6 s budget), random greedy finds one of about
    # a second, whose budget (0.1 s) is under the hyper-optimizer's half second: no kahypar trial runs
    monkeypatch.setattr(S, "CAP", 0.6)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    _, report = S.search(inputs, set(), sizes)
    assert S.budget_for(report.greedy_seconds) >= S.HYPER_FLOOR > S.budget_for(report.best_seconds)
    assert report.method.startswith("random greedy (cotengrust)") and "not reached" in report.reason
    assert "hyper-optimizer" not in report.method and "refined" in report.method    # a small budget's refinement
    assert report.seconds < S.allowance(report.best_seconds) + S.QUICK_SHARE * S.CAP + 0.2


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_a_search_that_falls_back_from_the_hyper_optimizer_counts_its_work(monkeypatch, cpu_clock):
    # the greedy path affords the hyper-optimizer, the best random greedy tree does not: the
    # search then is a small one of that tree's budget, its trials and refinement counted, so
    # a machine three times slower finds the same path, and the work stays within the budget
    rust = _cotengrust_or_skip("cotengrust's trials")
    monkeypatch.setattr(S, "CAP", 0.6)
    monkeypatch.setattr(S, "HYPER_STALE", 256)    # trials that end within the slow machine's cap
    inputs, sizes = _regular(60, 3, 5, seed=4)
    given = []
    refined = S._refined
    monkeypatch.setattr(S, "_refined", lambda *args: given.append(args[5]) or refined(*args))
    path, report = S.find(inputs, set(), sizes)
    assert "not reached" in report.reason and len(given) == 1
    assert 0 < given[0] <= report.budget - 8 * S.TRIAL_SECONDS * sum(map(len, inputs))     # what the trials left

    def slow(*args, **kwargs):
        start = time.thread_time()
        out = rust.optimize_random_greedy_track_flops(*args, **kwargs)
        cpu_clock.sleep(2 * (time.thread_time() - start))
        return out
    _replace_trials(monkeypatch, rust, slow)
    slow_path, slow_report = S.find(inputs, set(), sizes)
    assert (slow_path, slow_report.trials, slow_report.reason) == (path, report.trials, report.reason)


@pytest.mark.skipif(not HAS_COTENGRA or not S._kahypar(), reason="cotengra's kahypar partition tree")
def test_a_loaded_machine_refines_as_far_where_the_best_trees_allowance_bounds_the_refinement(monkeypatch,
                                                                                               cpu_clock):
    # a search that falls back from the hyper-optimizer refines its best tree and a kahypar
    # partition tree up to the allowance of its best tree, in this thread's CPU time: where
    # other jobs take the core during the partition (the clock runs on, here seven times its
    # own work), the refinement goes as far, and the path is the same
    inputs, sizes = _regular(100, 2, 4, seed=4)
    path, report = S.find(inputs, set(), sizes)
    assert "not reached" in report.reason and "a kahypar partition's tree kept; subtrees of 6" in report.method
    from cotengra.pathfinders.path_kahypar import kahypar_to_tree
    partition = kahypar_to_tree.trial_fn

    def loaded(*args, **kwargs):
        start = time.thread_time()
        out = partition(*args, **kwargs)
        cpu_clock.sleep(7 * (time.thread_time() - start))
        return out
    monkeypatch.setattr(kahypar_to_tree, "trial_fn", loaded)
    again, loaded_report = S.find(inputs, set(), sizes)
    assert (again, loaded_report.method, loaded_report.trials) == (path, report.method, report.trials)


@pytest.mark.skipif(not HAS_COTENGRA or not S._kahypar(), reason="cotengra's annealing and kahypar partition tree")
def test_a_search_fallen_back_from_the_hyper_optimizer_anneals_in_place_of_larger_subtrees(monkeypatch, cpu_clock):
    # the greedy path afforded the hyper-optimizer (and its annealing), the best random greedy tree does
    # not: the work of the subtrees of 8 and 10 leaves goes to short annealing runs, as many as it affords,
    # counted, so that the clock at twenty times the thread's CPU time gives the same runs and path
    asked = []
    real = A.annealed
    monkeypatch.setattr(A, "annealed", lambda *args, **kwargs: asked.append(kwargs) or real(*args, **kwargs))
    inputs, sizes = _regular(100, 2, 4, seed=4)
    path, report = S.find(inputs, set(), sizes)
    assert "not reached" in report.reason and "subtrees of 6; " in report.method
    assert "short annealing run" in report.method and " then 8" not in report.method
    assert len(asked) == 1 and asked[0]["steps"] == S.ANNEAL_SHORT and asked[0]["most"] >= 1
    cpu_clock.rate = 20.0
    again, loaded = S.find(inputs, set(), sizes)
    assert (again, loaded.method, loaded.trials) == (path, report.method, report.trials) and len(asked) == 2
    # a search whose greedy path is below the hyper-optimizer keeps its larger subtrees, and anneals nothing
    small, sizes = _regular(60, 2, 2, seed=1)
    _, report = S.find(small, set(), sizes)
    assert report.budget < S.HYPER_FLOOR and "annealing" not in report.method and len(asked) == 2


def _printed_under_two_hash_seeds(code: str) -> set[str]:
    """What ``code`` prints in two processes of other hash seeds, each with a cache folder of
    its own (so that both search); each must exit 0."""
    outs = set()
    for hashseed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed, EINC_CACHE_DIR=os.environ["EINC_CACHE_DIR"] + hashseed,
                   PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(__file__)), os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        outs.add(out.stdout)
    return outs


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_the_same_seed_gives_the_same_path_in_any_process():
    # trial counts, not the clock, end these searches: the paths must agree
    code = ("import random\nfrom einc.planner import search as S\n" + inspect.getsource(_regular) +
            "S.FRACTION, S.CAP, S.MAX_TRIALS = 1e9, 1e9, 5\n"
            "inputs, sizes = _regular(50, 2, 4, seed=2)\n"
            "path, report = S.search(inputs, set(), sizes)\n"
            "assert 'trials' in report.reason, report.reason\n"
            "print(path)\n")
    outs = _printed_under_two_hash_seeds(code)
    assert len(outs) == 1


def test_a_small_search_gives_the_same_path_in_any_process():
    # the random greedy tier, its trials ended by their count and its refinement by running
    # out of subtrees (a large allowance), not by the clock: the paths must agree
    code = ("import random\nfrom einc.planner import search as S\n" + inspect.getsource(_regular) +
            "S.MAX_TRIALS, S.SMALL, S.FLOOR, S.HYPER_FLOOR = 16, 30.0, 30.0, 1e9\n"
            "inputs, sizes = _regular(40, 2, 3, seed=2)\n"
            "path, report = S.search(inputs, set(), sizes)\n"
            "assert 'trials' in report.reason and 'hyper' not in report.method, report\n"
            "print(report.method, path)\n")
    outs = _printed_under_two_hash_seeds(code)
    assert len(outs) == 1
    assert not HAS_COTENGRA or "refined" in outs.pop()


def test_without_cotengra_the_budget_goes_to_random_greedy(monkeypatch):
    monkeypatch.setattr(S, "_cotengra", lambda: None)
    monkeypatch.setattr(S, "CAP", 0.3)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    _, report = S.search(inputs, set(), sizes)
    assert report.method == "random greedy (cotengrust)"
    assert report.best_seconds <= report.greedy_seconds
    monkeypatch.setattr(S, "_cotengrust", lambda: None)
    pathcache.clear()
    _, report = S.search(inputs, set(), sizes)
    assert report.method == "random greedy (opt_einsum)" and report.trials > 2
    assert report.seconds < 0.3 + 0.5
    assert report.best_seconds <= report.greedy_seconds


def test_einc_imports_and_plans_where_cotengra_is_absent():
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('cotengra', 'cotengrust', 'kahypar'):\n"
            "            raise ImportError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import einc, torch\n"
            "eq = ','.join(a + b for a, b in zip('abcdefghijklmnopqrst', 'bcdefghijklmnopqrstu')) + '->au'\n"
            "ops = [torch.randn(9, 9, dtype=torch.float64) for _ in range(20)]\n"
            "torch.testing.assert_close(einc.einsum(eq, *ops), torch.einsum(eq, *ops))\n"
            "assert 'cotengra' not in sys.modules and 'cotengrust' not in sys.modules\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_a_long_search_shows_a_progress_bar_on_a_terminal(monkeypatch, capsys):
    class Tty:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

        def isatty(self):
            return True
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(S, "PROGRESS_SECONDS", 0.1)
    monkeypatch.setattr(S, "HYPER_FLOOR", 0.1)
    monkeypatch.setattr(S, "CAP", 0.3)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    S.search(inputs, set(), sizes)
    assert "einc path search" in tty.text


# ----------------------------------------------------------------------- remembered paths

SECOND = ("import json, sys, time\n"
          "from einc.planner import search as S, plan_for\n"
          "from einc.planner.equation import letter\n"
          "import random\n" + inspect.getsource(_regular) +
          "S.CAP = 0.3\n"
          "inputs, sizes = _regular(60, 3, 5, seed=4)\n"
          "labels = sorted({i for t in inputs for i in t})\n"
          "eq = ','.join(''.join(letter(labels.index(i)) for i in sorted(t)) for t in inputs) + '->'\n"
          "shapes = [[sizes[i] for i in sorted(t)] for t in inputs]\n"
          "t = time.thread_time()\n"
          "found = S.search(inputs, set(), sizes)[0]\n"
          "search = time.thread_time() - t\n"
          "t = time.thread_time()\n"
          "plan = plan_for(eq, shapes)\n"
          "print(json.dumps([search, time.thread_time() - t, plan.notes, plan.path, found]))\n")


def test_a_second_process_finds_the_path_on_disk_in_10_ms(cache_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", SECOND], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    (first, _, _, first_path, first_found), (second, planned, notes, path, found) = runs
    assert first > 0.05                         # the first process searched
    assert "remembered (einc.planner.pathcache)" in notes[0] and path == first_path and found == first_found
    # the search's part of planning: reading the entry; the rest is building the plan's 59 steps
    # (CPU time of the process's thread, which other jobs on the machine do not inflate)
    assert second <= 0.010 and planned <= 0.050
    (entry,) = (cache_dir / "paths").iterdir()        # plan_for's network is S.search's, numbered alike
    assert entry.suffix == ".json" and stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE((cache_dir / "paths").stat().st_mode) == 0o700


def _search_and_entry(monkeypatch):
    monkeypatch.setattr(S, "CAP", 0.2)
    inputs, sizes = _regular(60, 3, 5, seed=4)
    path, report = S.search(inputs, set(), sizes)
    assert "remembered" not in report.method
    again = S.search(inputs, set(), sizes)
    assert again[0] == path and again[1].method.startswith("remembered")
    (entry,) = pathcache.folder().iterdir()
    return inputs, sizes, path, entry


@pytest.mark.parametrize("damage", entries.KINDS)
def test_a_corrupt_or_foreign_entry_is_ignored(monkeypatch, damage):
    inputs, sizes, path, entry = _search_and_entry(monkeypatch)
    record = entries.damage(entry, damage, "einc-paths-0")
    again, report = S.search(inputs, set(), sizes)
    assert "remembered" not in report.method
    assert S.path_cost(inputs, set(), sizes, again)[0] > 0
    if damage != "link":            # written again, whole
        assert json.loads(entry.read_text())["key"] == record["key"]


def test_a_folder_others_can_write_is_not_used(monkeypatch, cache_dir):
    inputs, sizes, path, entry = _search_and_entry(monkeypatch)
    os.chmod(cache_dir / "paths", 0o777)
    with pytest.warns(RuntimeWarning, match="others can write it"):
        assert pathcache.folder() is None
        _, report = S.search(inputs, set(), sizes)
    assert "remembered" not in report.method        # the entry there is not read


def test_the_folder_is_bounded(monkeypatch):
    monkeypatch.setattr(pathcache, "MAX_ENTRIES", 3)
    for k in range(5):
        pathcache.store(f"{k:064x}", "v", ((0, 1),), {})
        os.utime(pathcache.folder() / f"{k:064x}.json", (1000 + k, 1000 + k))
    names = sorted(p.name for p in pathcache.folder().iterdir())
    assert len(names) == 3 and names[-1] == f"{4:064x}.json"
    assert pathcache.load(f"{4:064x}", "v", 2) == (((0, 1),), json.loads((pathcache.folder() / names[-1]).read_text()))
    assert pathcache.load(f"{4:064x}", "v", 3) is None         # a path for another network


# ----------------------------------------------------------------------- opt_einsum's symbols

def test_every_symbol_opt_einsum_writes_is_an_index():
    from einc.planner.equation import parse
    symbols = [opt_einsum.get_symbol(i) for i in (*range(6000), 55295, 55296, 60000, 100000, 1000000)]
    assert "×" in symbols and "÷" in symbols and not all(s.isalpha() for s in symbols)
    for k in range(0, len(symbols), 500):
        chunk = symbols[k:k + 500]
        eq = parse(",".join(chunk) + "->" + "".join(chunk[:3]))
        assert [t[0] for t in eq.inputs] == chunk and eq.output == tuple(chunk[:3])
    assert parse("ij,jk->ik") == parse("ij,jk->ik") and parse("ij,jk").output == ("i", "k")
    with pytest.raises(EquationError, match="U\\+00C0"):
        parse("i1,jk")


def test_an_equation_opt_einsum_writes_contracts_as_its_letters_do():
    # '×' (75), '÷' (107) and a combining mark (U+0300, 628) as indices, implicit output too
    x, d, c = opt_einsum.get_symbol(75), opt_einsum.get_symbol(107), opt_einsum.get_symbol(628)
    assert (x, d, c) == ("×", "÷", "\u0300")
    ops = [torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64),
           torch.randn(5, 2, dtype=torch.float64)]
    for eq, ref in ((f"a{x},{x}{d},{d}{c}->a{c}", "ab,bc,cd->ad"), (f"{c}{x},{x}{d}", "db,bc")):
        torch.testing.assert_close(einc.einsum(eq, *ops[:eq.count(",") + 1]),
                                   torch.einsum(ref, *ops[:eq.count(",") + 1]))
    # an opt_einsum-made equation of 80 operands (symbols past the letters), as opt_einsum contracts it
    from opt_einsum.testing import rand_equation
    eq, shapes = rand_equation(80, 3, seed=3, d_min=2, d_max=3)
    assert any(not ch.isalpha() and ch not in ",->" for ch in eq)
    ops = [torch.rand(s, dtype=torch.float64) for s in shapes]
    torch.testing.assert_close(einc.einsum(eq, *ops), opt_einsum.contract(eq, *ops, backend="torch"))


# ----------------------------------------------------------------------- the objective

def test_trees_are_ranked_by_predicted_time_with_a_derived_write_weight(monkeypatch):
    # an intermediate element: a write, a read and a permuting copy's read and write, 4 bytes at 10 GB/s,
    # against a flop at 5 GFLOP/s
    assert S.WRITE_FACTOR == pytest.approx((4 * 4 / 10e9) / 0.2e-9) == pytest.approx(8)
    # of two paths with equal flops, the one writing fewer elements is predicted faster
    assert S.predicted_seconds(1e9, 1e6, 10) < S.predicted_seconds(1e9, 2e6, 10)
    if not HAS_COTENGRA:
        return
    seen = {}
    real = S._cotengra().HyperOptimizer

    def spy(**kwargs):
        seen.update(kwargs)
        return real(**kwargs)
    monkeypatch.setattr(S._cotengra(), "HyperOptimizer", spy)
    monkeypatch.setattr(S, "HYPER_FLOOR", 0.0)
    monkeypatch.setattr(S, "FLOOR", 0.0)
    monkeypatch.setattr(S, "MAX_TRIALS", 3)
    inputs, sizes = _regular(30, 2, 4, seed=5)
    S.find(inputs, set(), sizes)
    # trials scored by einc's objective; subtree reconfiguration weighs combo-8 locally
    assert seen["minimize"].get_dynamic_programming_minimize() == f"combo-{S.WRITE_FACTOR}"
    assert seen["slicing_reconf_opts"] is None
    path = ((0, 1),) * (len(inputs) - 1)
    tree = S._cotengra().ContractionTree.from_path(*S._strings(inputs, set(), sizes), path=path)
    assert seen["minimize"]({"tree": tree}) == pytest.approx(math.log2(1 + 1e9 * objective.seconds(
        inputs, set(), sizes, path)))
    S.find(inputs, set(), sizes, memory_limit=64)
    assert seen["slicing_reconf_opts"] == {"target_size": 64} and seen["minimize"] == "combo-8"


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_under_a_memory_limit_the_hyper_search_slices_inside_and_einc_keeps_the_bound(monkeypatch, fresh):
    monkeypatch.setattr(S, "HYPER_FLOOR", 0.0)      # the hyper tier on a network small enough to run
    monkeypatch.setattr(S, "FLOOR", 0.0)
    monkeypatch.setattr(S, "MAX_TRIALS", 6)
    inputs, sizes = _regular(24, 2, 4, seed=6)
    eq = _equation(inputs)
    shapes = [tuple(sizes[i] for i in sorted(t)) for t in inputs]
    ops = [torch.rand(s, dtype=torch.float64) + 0.5 for s in shapes]
    info = einc.explain(eq, *ops, memory_limit=256)
    text = str(info)
    assert "slicing reconfiguration" in text
    assert info.slicing is None or info.slicing.live <= 256 or info.largest_intermediate <= 256
    out = einc.einsum(eq, *ops, memory_limit=256)
    torch.testing.assert_close(out, opt_einsum.contract(eq, *ops, backend="torch"))


def _lattice(rows, cols, d_min, d_max, seed):
    """A ``rows`` x ``cols`` square lattice network (int labels), bonds of d_min..d_max."""
    rng = random.Random(seed)
    bonds, terms = {}, [set() for _ in range(rows * cols)]
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0)):
                if r + dr < rows and c + dc < cols:
                    k = len(bonds)
                    bonds[k] = rng.randint(d_min, d_max)
                    terms[r * cols + c].add(k)
                    terms[(r + dr) * cols + c + dc].add(k)
    return [frozenset(t) for t in terms], bonds


@pytest.mark.skipif(not HAS_COTENGRA, reason="the refinement is cotengra's subtree reconfiguration")
def test_a_small_budget_refines_its_best_tree(monkeypatch):
    inputs, sizes = _lattice(8, 8, 2, 4, seed=0)
    greedy = S._predict(inputs, frozenset(), sizes, S._greedy(inputs, frozenset(), sizes, None))
    assert 0 < S.budget_for(greedy) < S.HYPER_FLOOR                  # the random greedy tier
    path, report = S.find(inputs, set(), sizes)
    assert "refined" in report.method and report.trials >= 2
    # the same best random greedy tree (64 trials, not the clock), refined and not
    monkeypatch.setattr(S, "MAX_TRIALS", 64)
    monkeypatch.setattr(S, "STALE", 10 ** 9)
    best, _, reason, _ = S._random_greedy(inputs, frozenset(), sizes, None, 0, time.perf_counter(), 60.0)
    assert reason == "64 trials"
    # work no refinement spends, no deadline: each size runs until a chunk of subtrees gains nothing
    refined, sizes_run = S._refine(S._cotengra(), inputs, frozenset(), sizes, best, 1e9, S._ends())
    assert sizes_run[0] == 6 and set(sizes_run) <= {size for size, _ in S.SUBTREES}
    assert S._rank(inputs, frozenset(), sizes, refined) < S._rank(inputs, frozenset(), sizes, best)


@pytest.mark.skipif(not HAS_COTENGRA or not S._kahypar() or S._cotengrust() is None,
                    reason="cotengrust's counted trials, cotengra's kahypar partition")
def test_a_small_search_of_a_hundred_tensors_refines_a_partition_tree_too(monkeypatch, cpu_clock):
    # a random 3-regular network of 100 tensors: random greedy trees and their refinement
    # stop at about twice the flops of a kahypar partition tree so refined
    inputs, sizes = _regular(100, 2, 3, seed=1)
    path, report = S.find(inputs, set(), sizes)
    assert report.budget < S.HYPER_FLOOR and "kahypar partition" in report.method
    assert S.find(inputs, set(), sizes)[0] == path                       # counted: the same path again
    monkeypatch.setattr(S, "PARTITION_TENSORS", 10 ** 9)
    _, without = S.find(inputs, set(), sizes)
    assert "partition" not in without.method and report.flops < 0.75 * without.flops


@pytest.mark.skipif(not HAS_COTENGRA, reason="the refinement is cotengra's")
def test_a_network_under_a_hundred_tensors_gets_no_partition_tree(monkeypatch):
    from cotengra.pathfinders.path_kahypar import kahypar_to_tree

    def refuse(*args, **kwargs):
        raise AssertionError("a partition tree on a network of fewer than PARTITION_TENSORS tensors")
    monkeypatch.setattr(kahypar_to_tree, "trial_fn", refuse)
    inputs, sizes = _lattice(8, 8, 2, 4, seed=0)
    _, report = S.find(inputs, set(), sizes)
    assert len(inputs) < S.PARTITION_TENSORS and "refined" in report.method and "partition" not in report.method


@pytest.mark.skipif(not HAS_COTENGRA, reason="the refinement is cotengra's")
def test_a_network_without_cycles_gets_no_partition_tree(monkeypatch):
    # a random tree of 120 tensors, with a budget that would afford a partition tree
    from cotengra.pathfinders.path_kahypar import kahypar_to_tree

    def refuse(*args, **kwargs):
        raise AssertionError("a partition tree on a network without cycles")
    monkeypatch.setattr(kahypar_to_tree, "trial_fn", refuse)
    monkeypatch.setattr(S, "budget_for", lambda seconds: 0.3)     # under the hyper-optimizer's floor
    rng = random.Random(3)
    inputs = [frozenset()] * 120
    for k in range(1, 120):         # tensor k joins one earlier tensor by index k
        j = rng.randrange(k)
        inputs[j], inputs[k] = inputs[j] | {k}, inputs[k] | {k}
    sizes = {i: rng.randint(2, 8) for i in range(1, 120)}
    assert S.cycles(inputs) == 0
    path, report = S.find(inputs, set(), sizes)
    assert report.budget >= S.PARTITION_AFFORD * S.PARTITION_SECONDS * len(inputs) and "refined" in report.method
    assert len(path) == len(inputs) - 1 and "partition" not in report.method


@pytest.mark.skipif(not HAS_COTENGRA or not S._kahypar(), reason="cotengra's kahypar trials")
def test_the_hyper_optimizer_narrows_kahypar_where_the_network_has_no_hyperedges(monkeypatch):
    ctg = S._cotengra()
    asked, real = [], ctg.HyperOptimizer

    def recording(*args, methods, **kwargs):
        asked.append(methods)
        return real(*args, methods=methods, **kwargs)
    monkeypatch.setattr(ctg, "HyperOptimizer", recording)
    inputs, sizes = _regular(30, 2, 3, seed=0)
    hyperedges = [*inputs, frozenset({0, 1})]       # bonds 0 and 1 on three tensors each
    for network in (inputs, hyperedges):
        path, trials, _, _ = S._hyper(ctg, network, frozenset(), sizes, None, 0, time.perf_counter(), 1e-3)
        assert path is not None and trials >= 1
    assert asked == [["einc-greedy", "einc-kahypar"], ["einc-greedy", "kahypar"]]
    from cotengra.hyperoptimizers.hyper import get_hyper_space
    space = get_hyper_space()
    assert space["einc-kahypar"]["parts"]["max"] == 4 < space["kahypar"]["parts"]["max"]


def test_the_labelled_network_is_made_once_and_handed_out_as_copies(monkeypatch):
    """The search converts its network to one-letter labels once; a caller that changes
    what it got (cotengra is given these lists and dicts) changes no later caller's."""
    inputs, output, sizes = [frozenset({0, 1}), frozenset({1, 2})], frozenset({0, 2}), {0: 2, 1: 3, 2: 4}
    libraries._labelled.cache_clear()
    calls = []
    real = S.opt_einsum.get_symbol
    monkeypatch.setattr(S.opt_einsum, "get_symbol", lambda i: calls.append(i) or real(i))
    first = S._strings(inputs, output, sizes)
    assert first == ([("a", "b"), ("b", "c")], ("a", "c"), {"a": 2, "b": 3, "c": 4})
    made = len(calls)
    first[0].append(("z",))
    first[2]["z"] = 9
    assert S._strings(inputs, output, sizes) == ([("a", "b"), ("b", "c")], ("a", "c"), {"a": 2, "b": 3, "c": 4})
    assert len(calls) == made


@pytest.mark.skipif(not HAS_COTENGRA, reason="needs cotengra")
def test_the_hyper_tier_keeps_its_best_random_greedy_tree_where_the_refined_one_ranks_slower(monkeypatch,
                                                                                                cpu_clock):
    """The subtree reconfiguration before the hyper-optimizer weighs trees as cotengra does;
    its tree is kept only where einc's objective ranks it no slower than the one it refined."""
    monkeypatch.setattr(S, "budget_for", lambda seconds: 1.0)
    monkeypatch.setattr(A, "ANNEAL_SECONDS", 1e-4)
    monkeypatch.setattr(S, "HYPER_STALE", 256)    # trials that leave the refinement its share of the 1 s
    inputs, sizes = _regular(60, 3, 5, seed=4)
    poor = tuple((0, 1) for _ in range(len(inputs) - 1))      # left to right: ranked far slower
    handed = []
    hyper = S._hyper_annealed

    def spy(ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy, budget, quick, path, cpu0):
        handed.append(quick)
        return hyper(ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy, budget, quick, path, cpu0)
    monkeypatch.setattr(S, "_reconfigured", lambda *args, **kwargs: poor)
    monkeypatch.setattr(S, "_hyper_annealed", spy)
    _, report = S.find(inputs, set(), sizes)
    assert len(handed) == 1 and handed[0] is not None and tuple(map(tuple, handed[0])) != poor
    assert "not kept" in report.method, report


def test_a_store_within_the_bound_reads_no_entry_s_times(monkeypatch):
    monkeypatch.setattr(pathcache, "MAX_ENTRIES", 10)
    scanned = []
    real = pathcache.cachefiles.scan
    monkeypatch.setattr(pathcache.cachefiles, "scan", lambda *a, **k: scanned.append(1) or real(*a, **k))
    for k in range(10):
        pathcache.store(f"{k:064x}", "v", ((0, 1),), {})
        os.utime(pathcache.folder() / f"{k:064x}.json", (1000 + k, 1000 + k))
    assert not scanned                          # within the bound: names counted, no file's times read
    pathcache.store(f"{10:064x}", "v", ((0, 1),), {})
    names = sorted(p.name for p in pathcache.folder().iterdir())
    assert len(scanned) == 1 and len(names) == 9 and names[0] == f"{2:064x}.json"    # the oldest two went
    pathcache.store(f"{11:064x}", "v", ((0, 1),), {})
    assert len(scanned) == 1 and len(list(pathcache.folder().iterdir())) == 10
