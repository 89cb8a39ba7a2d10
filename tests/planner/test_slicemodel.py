"""How einc's slicer weighs the slicings of one path (einc.planner.slicemodel) and cuts them
(einc.planner.slicing._cut): what it weighs, what it counts, and that a cheaper weighing
chooses what the full one chose."""

import math
import random

import opt_einsum
import opt_einsum.testing
import pytest

from einc.planner import plan_for, slicebudget, slicemodel, slicing
from einc.planner.options import Options
from tests.planner.test_objective import _regular


def _plan(n=24, seed=6, d_max=2):
    inputs, sizes = _regular(n, 2, d_max, seed=seed)
    labels = sorted({i for t in inputs for i in t})
    eq = ",".join("".join(opt_einsum.get_symbol(labels.index(i)) for i in sorted(t)) for t in inputs) + "->"
    shapes = [tuple(sizes[i] for i in sorted(t)) for t in inputs]
    return plan_for(eq, shapes, Options.of("greedy"))


def test_the_model_makes_the_key_of_the_memo_it_shares_with_the_search_once_per_limit(monkeypatch):
    # the memo shared with the search's ranking is keyed by the whole network: made for
    # each slicing weighed, it was a good part of what a cut of a large network cost
    made = []
    real = slicemodel.shared_peaks

    def shared(*args):
        made.append(args[-1])
        return real(*args)
    monkeypatch.setattr(slicemodel, "shared_peaks", shared)
    model = slicing._Model(_plan(), "live")
    slicing._choose(model, 64)
    assert len(made) == len(set(made)) == 1


def test_a_cut_by_cost_is_begun_only_where_the_passes_it_is_expected_to_take_fit():
    # a cut by cost weighs in full every halving the cuts by peak met: where that would pass
    # the slicer's share it is not begun, though the cuts by peak so far were short enough
    p, limit = _plan(40, 3), 1024
    free = slicebudget.Slicer(1e9, len(p.steps))
    slicing._choose(slicing._Model(p, "live", count=free.count), limit, (), free)
    by_peak = free.starts[2]                    # the work of the two cuts by peak
    longest = max(free.starts[1], free.starts[2] - free.starts[1])
    halvings = []
    slicing._cut(slicing._Model(p, "live"), limit, (), slicing._BY_PEAK, halvings)
    expected = (1 + slicemodel.COST_PASS) * sum(halvings) * len(p.steps) * slicebudget.PASS_SECONDS
    assert expected > longest
    share = slicebudget.Slicer((by_peak + (longest + expected) / 2) / slicebudget.SLICER_SHARE, len(p.steps))
    slicing._choose(slicing._Model(p, "live", count=share.count), limit, (), share)
    assert share.rules == 2
    assert "the next rule would pass its share (expected" in share.text(1, 1, slicing._RULES)


def test_the_slicer_asks_for_the_longer_of_a_rule_expected_and_the_longest_so_far():
    share = slicebudget.Slicer(100 * slicebudget.PASS_SECONDS / slicebudget.SLICER_SHARE, steps=1)
    share.begin()
    share.count[0] += 30
    assert share.afford() and share.afford(60) and not share.afford(70)
    assert share.afford(10) and share.need == 30 * slicebudget.PASS_SECONDS


def _exhaustive_cut(model, limit, fixed=()):
    """The cut by peak weighing every halving behind an over-limit moment, with no floors (the
    reference the floored search must match): the least peak, then the least time, then the
    least index."""
    full, chunks = model.full, dict.fromkeys(fixed, 1)
    peak = model.peak(chunks, limit)[0]
    while peak > limit:
        over = model.behind(chunks, limit)
        candidates = sorted({i for v in over for i in model.indices[v] if chunks.get(i, full[i]) > 1})
        if not candidates:
            break
        trials = [{**chunks, i: (chunks.get(i, full[i]) + 1) // 2} for i in candidates]
        chunks = min(trials, key=lambda t: (model.peak(t, limit)[0], model.cost(t)[1], sorted(set(t) - set(chunks))))
        peak = model.peak(chunks, limit)[0]
    return chunks


@pytest.mark.parametrize("seed", range(24))
def test_the_cut_by_peak_weighing_by_floors_cuts_as_weighing_every_halving(seed):
    rng = random.Random(seed)
    eq, shapes = opt_einsum.testing.rand_equation(rng.randint(3, 20), 3, seed=seed, d_min=2,
                                                  d_max=rng.choice([2, 5, 8]), n_out=rng.choice([0, 1, 2]))
    p = plan_for(eq, shapes, Options.of("greedy"))
    for bound in (slicemodel.LIVE, slicemodel.INTERMEDIATE):
        top = slicing._Model(p, bound).peak({}, 1)[0]
        for limit in {max(1, top // 3), max(1, top // 50)}:
            fixed = [i for i in rng.sample(range(len(p.graph.sizes)), 1) if p.graph.sizes[i] > 1]
            want = _exhaustive_cut(slicing._Model(p, bound), limit, fixed)
            assert slicing._cut(slicing._Model(p, bound), limit, fixed, slicing._BY_PEAK) == want


@pytest.mark.parametrize("seed", range(12))
def test_a_floor_is_under_the_peak_of_its_halving(seed):
    # whatever the halving hoists or stops hoisting: each step's own moment is in its peak
    rng = random.Random(seed)
    eq, shapes = opt_einsum.testing.rand_equation(rng.randint(3, 20), 3, seed=seed, d_min=2, d_max=6)
    p = plan_for(eq, shapes, Options.of(rng.choice(["greedy", "auto"])))
    model, sizes = slicing._Model(p, slicemodel.LIVE), p.graph.sizes
    halved = 0
    for _ in range(6):
        chunks = {i: rng.randint(1, sizes[i] - 1) for i in rng.sample(range(len(sizes)), 2) if sizes[i] > 1}
        candidates = [i for i in range(len(sizes)) if chunks.get(i, sizes[i]) > 1]
        floors = model.floors(chunks, candidates)
        for i in candidates:
            trial = {**chunks, i: (chunks.get(i, sizes[i]) + 1) // 2}
            assert floors[i] <= model.peak(trial, 1)[0]
            halved += 1
    assert halved > 10


def test_the_cut_by_peak_weighs_a_fraction_of_the_passes_of_weighing_every_halving():
    # on a 40-tensor network most halvings cannot lower the peak as much as the best one:
    # their floors, each step's own moment, say so before any pass is made
    p, limit = _plan(40, 3), 1024
    every, floors = slicing._Model(p, "live"), slicing._Model(p, "live")
    want = _exhaustive_cut(every, limit)
    assert slicing._cut(floors, limit, (), slicing._BY_PEAK) == want
    assert floors.count[0] < every.count[0] / 2



def _regular_equation():
    """A random 2-regular network of 24 tensors, its equation and shapes."""
    inputs, sizes = _regular(24, 2, 4, seed=6)
    labels = sorted({i for t in inputs for i in t})
    eq = ",".join("".join(opt_einsum.get_symbol(labels.index(i)) for i in sorted(t)) for t in inputs) + "->"
    return eq, [tuple(sizes[i] for i in sorted(t)) for t in inputs]

def test_the_slicer_cuts_both_paths_by_peak_before_either_by_cost(monkeypatch, fresh_cache):
    # under its share, the slicer weighs each path by its cheaper cuts before any path by
    # its dearer ones: the unlimited path may slice the better, and a cut by cost of the
    # search's path must not spend the share it needs
    from einc.planner import memory, pathcache
    eq, shapes = _regular_equation()
    monkeypatch.setattr(pathcache, "STORE_SECONDS", math.inf)      # nothing remembered: the slicer runs
    monkeypatch.setattr(slicebudget, "SLICER_SHARE", 100.0)          # a share every cut fits
    getattr(memory._shared, "cache_clear", lambda: None)()
    cuts, real = [], slicing._cut

    def cut(model, limit, fixed, rule, *more):
        cuts.append((model.base.path, rule))
        return real(model, limit, fixed, rule, *more)
    monkeypatch.setattr(slicing, "_cut", cut)
    p = plan_for(eq, shapes, Options.of("auto", 256, None))
    paths = list(dict.fromkeys(path for path, _ in cuts))
    assert len(paths) == 2 and p.slicing is not None and p.slicing.live <= 256
    assert [rule for _, rule in cuts] == [slicing._BY_PEAK] * 4 + [slicing._BY_COST] * 4
    assert [path for path, _ in cuts] == [paths[0]] * 2 + [paths[1]] * 2 + [paths[0]] * 2 + [paths[1]] * 2


def test_a_steps_own_moment_read_back_from_its_memo_is_counted_too():
    # reading it back makes its key from the step's sizes: on a large path the floors read
    # far more moments back than they weigh anew, and the count must say what they cost
    model = slicing._Model(_plan(), "live")
    sizes, flags = model._sized({})
    model._local(0, sizes, flags)
    once = model.count[0]
    model._local(0, sizes, flags)
    assert once == slicemodel.FLOOR_STEP / len(model.steps) and model.count[0] == 2 * once


def test_the_slicer_models_each_path_once(monkeypatch, fresh_cache):
    # a model's figures (each step's flops, the operands under it) take a pass over the
    # path's steps: the check that the path fits unsliced, the cuts and the sliced plan
    # share one model per path
    from einc.planner import memory, pathcache
    eq, shapes = _regular_equation()
    monkeypatch.setattr(pathcache, "STORE_SECONDS", math.inf)
    getattr(memory._shared, "cache_clear", lambda: None)()
    made, real = [], slicemodel._Model.__init__

    def init(self, base, *args, **kwargs):
        made.append(base.path)
        real(self, base, *args, **kwargs)
    monkeypatch.setattr(slicemodel._Model, "__init__", init)
    p = plan_for(eq, shapes, Options.of("auto", 256, None))
    assert p.slicing is not None and "on 2 of 2 paths" in p.notes[-1]
    assert len(made) == len(set(made)) == 2


def test_a_path_not_cut_yet_is_expected_to_weigh_every_halving_the_first_path_met(monkeypatch, fresh_cache):
    # another path's floors are not yet known to prune: its first cut is begun only where
    # weighing in full each halving the first path's cuts met would fit, not merely one as
    # long as the first path's cut, which its floors made short
    from einc.planner import memory, pathcache
    eq, shapes = _regular_equation()
    monkeypatch.setattr(pathcache, "STORE_SECONDS", math.inf)
    shares, models, real = [], [], slicing._weigh

    def weigh(model, *args, **kwargs):
        models.append(model)
        return real(model, *args, **kwargs)
    monkeypatch.setattr(slicing, "_weigh", weigh)

    def planned(budget):
        getattr(memory._shared, "cache_clear", lambda: None)()
        monkeypatch.setattr(slicing, "_share", lambda graph, base, start=None: shares.append(
            slicebudget.Slicer(budget / slicebudget.SLICER_SHARE, len(base.steps))) or shares[-1])
        models.clear()
        return plan_for(eq, shapes, Options.of("auto", 256, None))
    planned(1.0)
    free, first = shares[-1], models[0]
    by_peak = free.starts[2]                    # the work of the first path's two cuts by peak
    longest = max(free.starts[1], free.starts[2] - free.starts[1])
    expected = (1 + slicemodel.COST_PASS) * first.met * len(first.steps) * slicebudget.PASS_SECONDS
    assert expected > longest
    p = planned(by_peak + (longest + expected) / 2)
    assert "on 1 of 2 paths" in p.notes[-1] and p.slicing is not None and p.slicing.live <= 256
