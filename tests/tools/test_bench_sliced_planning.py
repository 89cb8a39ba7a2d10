"""bench/sliced_planning.py's split of a plan's thread CPU time: the path search, and the
rest of the slicer's ``plan``."""

import math

import opt_einsum

from bench import sliced_planning
from einc.planner import memory, pathcache, plan_for, search, slicing
from einc.planner.options import Options
from tests.planner.test_objective import _regular


def test_the_search_and_the_slicer_are_timed_apart(monkeypatch, fresh_cache):
    inputs, sizes = _regular(24, 2, 4, seed=6)
    labels = sorted({i for t in inputs for i in t})
    eq = ",".join("".join(opt_einsum.get_symbol(labels.index(i)) for i in sorted(t)) for t in inputs) + "->"
    shapes = [tuple(sizes[i] for i in sorted(t)) for t in inputs]
    monkeypatch.setattr(pathcache, "STORE_SECONDS", math.inf)      # nothing remembered: both run
    monkeypatch.setattr(search, "find", search.find)              # (both restored after the test)
    monkeypatch.setattr(slicing, "plan", slicing.plan)
    getattr(memory._shared, "cache_clear", lambda: None)()
    search._greedy_seconds.cache_clear()
    parts = sliced_planning._timed_parts()
    p = plan_for(eq, shapes, Options.of("auto", 257, None))
    assert p.slicing is not None
    assert 0 < parts["search"] < parts["plan"]
    searched = parts["search"]
    plan_for(eq, shapes, Options.of("greedy", 257, None))       # no search: the slicer alone
    assert parts["search"] == searched and parts["plan"] > searched
