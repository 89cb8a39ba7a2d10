"""One budget for planning under a memory limit (einc.planner.slicebudget): the search's
stages and the slicer keep to the share a test sets, and still slice within the limit."""

import math
import time

import opt_einsum
import pytest
import torch

import einc
from einc.planner import memory, objective, pathcache, plan_for, search, slicebudget, slicing
from einc.planner.options import Options
from tests.planner.test_objective import HAS_COTENGRA, _regular


def _equation(inputs, sizes):
    labels = sorted({i for t in inputs for i in t})
    eq = ",".join("".join(opt_einsum.get_symbol(labels.index(i)) for i in sorted(t)) for t in inputs) + "->"
    return eq, [tuple(sizes[i] for i in sorted(t)) for t in inputs]


def _planned(monkeypatch, eq, shapes, limit):
    """The plan under ``limit`` with nothing remembered, and the live-memory passes and
    cotengra reconfiguration rounds it took."""
    getattr(memory._shared, "cache_clear", lambda: None)()
    search._greedy_seconds.cache_clear()
    counted = {"passes": 0, "rounds": 0}
    real_peak, real_moments = objective.peak_and_excess, slicing._Model._moments

    def peak(*a, **k):
        counted["passes"] += 1
        return real_peak(*a, **k)

    def moments(self, chunks, over=None):
        counted["passes"] += 1
        return real_moments(self, chunks, over)
    monkeypatch.setattr(objective, "peak_and_excess", peak)
    monkeypatch.setattr(slicing._Model, "_moments", moments)
    real_reconf = objective.sliced_reconfigured

    def reconf(*a, **k):
        found = real_reconf(*a, **k)
        counted["rounds"] += found[1]
        return found
    monkeypatch.setattr(objective, "sliced_reconfigured", reconf)
    p = plan_for(eq, shapes, Options.of("auto", limit, None))
    monkeypatch.setattr(objective, "peak_and_excess", real_peak)
    monkeypatch.setattr(slicing._Model, "_moments", real_moments)
    monkeypatch.setattr(objective, "sliced_reconfigured", real_reconf)
    return p, counted


@pytest.mark.skipif(not HAS_COTENGRA, reason="the slicing reconfiguration is cotengra's")
def test_a_sliced_search_keeps_to_a_budget_the_test_sets_and_still_slices_within_the_limit(monkeypatch, fresh_cache,
                                                                                            cpu_clock):
    inputs, sizes = _regular(40, 2, 4, seed=3)
    limit = 1024
    eq, shapes = _equation(inputs, sizes)
    monkeypatch.setattr(pathcache, "STORE_SECONDS", math.inf)       # nothing remembered: every plan searches
    whole, afforded = _planned(monkeypatch, eq, shapes, limit)
    assert whole.slicing is not None and whole.slicing.live <= limit
    assert afforded["rounds"] > 0 and afforded["passes"] > 0
    # a budget of a millisecond: no reconfiguration, no trials, no ranking, one cut by the slicer
    monkeypatch.setattr(search, "allowance", lambda seconds: 1e-3)
    tight, spent = _planned(monkeypatch, eq, shapes, limit)
    assert spent["rounds"] == 0 and spent["passes"] < afforded["passes"]
    assert tight.slicing is not None and tight.slicing.live <= limit       # the floor: still a slicing within it
    text = "\n".join(tight.notes)
    assert "budget 1 ms" in text and "not begun" in text and "no share left" in text
    assert "Slicer: 1 of" in text and "its share spent" in text
    # and the slicing so chosen runs right
    ops = [torch.rand(s, dtype=torch.float64) + 0.5 for s in shapes]
    info = einc.explain(eq, *ops, memory_limit=limit)
    assert info.slicing is not None and info.slicing.live <= limit
    torch.testing.assert_close(einc.einsum(eq, *ops, memory_limit=limit), opt_einsum.contract(eq, *ops,
                                                                                                backend="torch"))


def test_the_ranking_keeps_the_first_tree_where_its_share_ranks_none_to_the_end(cpu_clock):
    inputs, sizes = _regular(24, 2, 4, seed=6)
    out, limit = frozenset(), 256
    paths = [search._greedy(inputs, out, sizes, None), search.search(inputs, out, sizes, None)[0]]
    full = objective.ranked_sliced(paths, inputs, out, sizes, limit)
    assert full[2] == 2 and full[1] > 1
    none = objective.ranked_sliced(paths, inputs, out, sizes, limit, 0)
    assert none[0] == tuple(map(tuple, paths[0])) and none[2] == 0 and "the first kept" in none[3]
    one = objective.ranked_sliced(paths, inputs, out, sizes, limit, full[1] - 1)
    assert one[1] <= full[1] and one[2] <= 2


def test_the_ledger_counts_marks_and_stops_at_its_guard():
    ledger = slicebudget.Ledger(0.1, search.counted_ends(t0=0.0))     # CAP on the clock long past: nothing is left
    assert ledger.left(1.0) == 0.0
    ledger = slicebudget.Ledger(1e-4, search.counted_ends())     # a guard of 0.8 ms of this thread's CPU time
    assert ledger.left(1.0) > 0.0
    start = time.thread_time()
    while time.thread_time() < start + slicebudget.GUARD * 1e-4:
        pass
    assert ledger.left(1.0) == 0.0
    ledger = slicebudget.Ledger(0.1, search.counted_ends())
    ledger.charge("a stage", 0.03, "why")
    assert ledger.left(0.5) == pytest.approx(0.02) and ledger.left(0.2) == 0.0
    assert "a stage 30 ms (why)" in ledger.text()
    assert slicebudget.rounds(4096, 256) == 4 and slicebudget.rounds(100, 256) == 0


@pytest.mark.skipif(not HAS_COTENGRA, reason="the slicing reconfiguration is cotengra's")
@pytest.mark.parametrize("rate", [2.0, 20.0])
def test_the_sliced_choice_is_counted_not_clocked(monkeypatch, fresh_cache, cpu_clock, rate):
    # a clock running twice or twenty times as fast as the thread's CPU time (other jobs on
    # the machine) plans the same path and slicing: the stages stop on their counts, and the
    # guard, in the thread's CPU time, is far off though the clock passes GUARD times the budget
    inputs, sizes = _regular(40, 2, 4, seed=3)
    limit = 1024
    eq, shapes = _equation(inputs, sizes)
    monkeypatch.setattr(pathcache, "STORE_SECONDS", math.inf)
    calm, _ = _planned(monkeypatch, eq, shapes, limit)
    cpu_clock.rate = rate
    start = cpu_clock.perf_counter()
    busy, _ = _planned(monkeypatch, eq, shapes, limit)
    budget = search.sliced_budget(inputs, frozenset(), sizes)
    assert rate < 10 or cpu_clock.perf_counter() - start > slicebudget.GUARD * budget
    assert (busy.path, busy.slicing) == (calm.path, calm.slicing)
    # the slicer's line, and the stages of the search's: what they counted
    counted = [[n[n.find("stages"):] for n in p.notes if "Slicer:" in n or "stages" in n] for p in (calm, busy)]
    assert len(counted[0]) == 2 and counted[1] == counted[0]


def test_the_slicer_begins_no_rule_that_one_as_long_as_the_longest_would_take_past_its_share():
    # a share of 100 passes over one step: after a rule of 40 passes another fits; after two,
    # a third as long would end at 120: not begun, though 80 passes leave the share unspent
    share = slicebudget.Slicer(100 * slicebudget.PASS_SECONDS / slicebudget.SLICER_SHARE, steps=1)
    share.begin()
    share.count[0] += 40
    assert share.afford()
    share.begin()
    share.count[0] += 40
    assert share.work() < share.budget and not share.afford()
    assert "the next rule would pass its share" in share.text(paths=1, weighed=1, rules=8)


@pytest.mark.skipif(not HAS_COTENGRA, reason="the hyper-optimizer is cotengra's")
def test_past_the_hyper_floor_one_search_runs_under_the_limit_and_leaves_the_slicer_its_share(monkeypatch,
                                                                                             fresh_cache):
    # the hyper-optimizer slices its trees as it ranks them: the search without the limit
    # is not run beside it, and the slicer's share is left out of the hyper-optimizer's
    inputs, sizes = _regular(24, 3, 4, seed=5)
    eq, shapes = _equation(inputs, sizes)
    monkeypatch.setattr(search, "HYPER_FLOOR", 0.0)
    shares, finds, real_find = [], [], search.find

    def hyper(ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy, known=math.inf, share=1.0,
              progress=None, cpu0=None):
        shares.append(share)
        return search._greedy(inputs, output, size_dict, None), 1, "stub", 1.0

    def find(inputs, output, size_dict, memory_limit=None, seed=search.SEED):
        finds.append(memory_limit)
        return real_find(inputs, output, size_dict, memory_limit, seed)
    monkeypatch.setattr(search, "_hyper", hyper)
    monkeypatch.setattr(search, "find", find)
    p = plan_for(eq, shapes, Options.of("auto", 256, None))
    assert finds == [256] and shares == [1 - slicebudget.SLICER_SHARE]
    assert p.slicing is not None and p.slicing.live <= 256


def test_the_slicer_begins_no_rule_that_one_as_long_on_the_clock_would_end_past_its_deadline(monkeypatch):
    # the clock: rules of 3 s each; a deadline at 10 s admits a third rule begun at 6 s
    # (ends at 9) but not a fourth at 9, though the counted share is far from spent
    now = [0.0]
    monkeypatch.setattr(slicebudget.time, "perf_counter", lambda: now[0])
    share = slicebudget.Slicer(1e6, steps=1, deadline=10.0)
    for _ in range(3):
        assert share.afford()
        share.begin()
        now[0] += 3.0
    assert not share.afford() and share.work() < share.budget
    assert "past the planning's budget on the clock" in share.text(paths=1, weighed=1, rules=8)
    assert slicebudget.Slicer(1e6, steps=1).afford()       # no deadline: the count alone


@pytest.mark.skipif(not HAS_COTENGRA, reason="the hyper-optimizer is cotengra's")
def test_past_the_hyper_floor_the_slicer_keeps_to_the_planning_budget_on_the_clock(monkeypatch, fresh_cache):
    # the hyper-optimizer's tree is the clock's: where the search has spent the whole budget
    # on the clock (a loaded machine), the slicer runs its first rule alone, still within the limit
    import time
    inputs, sizes = _regular(24, 3, 4, seed=5)
    eq, shapes = _equation(inputs, sizes)
    monkeypatch.setattr(search, "HYPER_FLOOR", 0.0)
    monkeypatch.setattr(pathcache, "STORE_SECONDS", math.inf)
    monkeypatch.setattr(search, "allowance", lambda seconds: 100.0)       # a share the count leaves unspent
    real, skew = time.perf_counter, [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: real() + skew[0])

    def hyper(ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy, known=math.inf, share=1.0,
              progress=None, cpu0=None):
        skew[0] = search.sliced_budget(inputs, output, size_dict)       # the budget spent on the clock
        return search._greedy(inputs, output, size_dict, None), 1, "stub", 1.0
    monkeypatch.setattr(search, "_hyper", hyper)
    p = plan_for(eq, shapes, Options.of("auto", 256, None))
    assert p.slicing is not None and p.slicing.live <= 256
    text = "\n".join(p.notes)
    assert "Slicer: 1 of" in text and "past the planning's budget on the clock" in text


def test_a_rule_expected_to_take_longer_on_the_clock_than_is_left_is_not_begun(monkeypatch):
    # one rule of 100 counted passes took 2 s on the clock (a loaded machine): a rule expected
    # to take 400 passes would take about 8 s, past a deadline 5 s away; one of 100 fits
    now = [0.0]
    monkeypatch.setattr(slicebudget.time, "perf_counter", lambda: now[0])
    share = slicebudget.Slicer(1e6, steps=1, deadline=7.0)
    share.begin()
    share.count[0] += 100
    now[0] += 2.0
    assert share.afford(100) and not share.afford(400) and share.late
