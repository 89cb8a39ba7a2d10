"""How einc's slicer weighs the slicings of one path (einc.planner.slicemodel) and cuts them
(einc.planner.slicing._cut): what it weighs, what it counts, and that a cheaper weighing
chooses what the full one chose."""

import opt_einsum

from einc.planner import plan_for, slicemodel, slicing
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
