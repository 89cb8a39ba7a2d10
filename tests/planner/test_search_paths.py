"""The quality of the paths einc's search finds past the hyper-optimizer's floor, without a
clock: what its counted stages (seeded random greedy trials, ended on their count or where
they converge, and the refinement of their best tree) hand to its clocked ones, on
bench/paths.py's networks (tests/planner/search_networks.py's file).

The hyper-optimizer and the annealing after it run on the clock, so their paths are not
the same from run to run; here they are given counts instead: the hyper-optimizer no
trial, the annealing :data:`RUNS` runs (``einc.planner.anneal.annealed``'s ``most``, no
deadline), the rest of the search as it runs (its counted stages keep their guard, in the
thread's CPU time, which only a machine several times slower than nominal reaches). A poor
tree handed on is one these runs leave poor: on the 150-tensor hypernetwork einc's
objective ranks the trees they find from it slower than it, and keeps it; on the lattice
the trees they keep cost far more flops. The search's own annealing, within its budget,
did no better from those trees (bench/measured/paths-hyper-trials-2026-12-06.md). Paths
are weighed as bench/paths.py weighs them: log10 of opt_einsum's flop count.
"""

import math

import pytest

from einc.planner import anneal as A
from einc.planner import search as S
from tests.planner.search_networks import load

RUNS = 2        # annealing runs from the tree the counted stages hand on: fewer than the search's budget affords
# log10 flops: each bound lies between where the search ends with these counts at HYPER_STALE 512 (and with
# trials run to MAX_TRIALS) and where it ends at 256, the worse paths of paths-hyper-trials-2026-12-06.md
BOUNDS = {"random hypernetwork (150)": 12.1, "lattice 5x5x5 (125)": 14.6}


def _network(eq, shapes):
    """``(inputs, output, sizes)`` with int labels, as the search takes them."""
    lhs, out = eq.split("->")
    label: dict = {}
    inputs = [frozenset(label.setdefault(c, len(label)) for c in t) for t in lhs.split(",")]
    sizes = {label[c]: d for t, s in zip(lhs.split(","), shapes) for c, d in zip(t, s)}
    return inputs, frozenset(label[c] for c in out), sizes


@pytest.mark.skipif(S._cotengra() is None or S._cotengrust() is None,
                    reason="cotengrust's counted trials, cotengra's refinement and annealing")
@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_the_counted_stages_hand_on_a_tree_that_annealing_improves(monkeypatch, name):
    inputs, output, sizes = _network(*load()[name])
    annealed = A.annealed

    def counted(ctg, inputs, output, size_dict, path, t0, deadline, seed, rank, minimize, progress=None,
                afford=None, other=None, lost=0.0, over=None):
        # the search's annealing of its best tree as _hyper_annealed calls it, RUNS runs and no clock
        return annealed(ctg, inputs, output, size_dict, path, t0, math.inf, seed, rank, minimize, progress,
                        None, other, 0.0, most=RUNS, over=lambda cpu, clock: False)

    monkeypatch.setattr(S, "_hyper", lambda ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy, known,
                        *rest: (None, 0, "the hyper-optimizer given no trial", S._hyper_budget(greedy, known)))
    monkeypatch.setattr(A, "annealed", counted)
    path, report = S.find(inputs, output, sizes)
    assert "hyper-optimizer" in report.method and f"{RUNS} annealing runs" in report.reason, report
    assert len(path) == len(inputs) - 1
    log10_flops = math.log10(S.path_cost(inputs, output, sizes, path)[0])
    assert log10_flops <= BOUNDS[name], (name, log10_flops, report)
