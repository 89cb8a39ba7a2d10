"""The last stage of a hyper-optimizer search (einc.planner.search): its best trees annealed.

cotengra's simulated annealing (TreeSA's method, after Kalachev et al. and
OMEinsumContractionOrders.jl), run after run, each seeded anew and begun from the best
tree so far of its chain (the search's best tree, and the runner-up from another method, in
turn), kept where the search's ranking of trees ranks it better.  docs/paths.md, step 6.
"""

from __future__ import annotations

import time

from .libraries import _linear, _strings
from .pathcost import cost as _cost
from .searchkey import ANNEAL_RUNNER_UP, ANNEAL_SECONDS, ANNEAL_STALE, ANNEAL_STEPS, ANNEAL_SWEEPS


def annealed(ctg, inputs, output, size_dict, path, t0, deadline, seed, rank, minimize, progress=None,
             afford=None, other=None, lost=0.0, most=None, *, over, steps=(ANNEAL_STEPS, ANNEAL_SWEEPS)):
    """``(path, runs, why they ended)``: ``path`` annealed by cotengra's simulated annealing
    (weighing ``minimize``, cotengra's name of a cost) run after run, each seeded anew and
    begun from the best tree so far; with ``other`` (a start ranked no better than ``path``,
    from another method, and within :data:`ANNEAL_RUNNER_UP` times its rank), runs take
    turns between the two chains, each begun from its own best tree: a chain kept to one
    start can stay among trees the ranking prefers to the better ones the other leads to.
    Up to ``deadline`` in this thread's CPU time (``time.thread_time()``, which other jobs do not
    advance) or until ``over(cpu, clock)`` (the search's: :data:`einc.planner.search.CAP` on the
    clock), none begun that, as long as the longest so far (``cpu`` seconds left before the
    deadline, ``clock`` on the clock), or :data:`ANNEAL_SECONDS` a tensor before the first, would
    end past either; or until
    :data:`ANNEAL_STALE` runs in a row found no better tree; trees ranked by
    ``rank(path)``.  ``afford(path)``: the deadline a better tree affords (a better tree,
    less search), where sooner; then no run is begun that would end past the deadline a
    gain like the last one would leave (``lost``: the seconds the gain of the stage before
    brought the deadline forward, before any run's).  ``progress.update(seconds since t0, runs, flops)``
    after each run.  ``most``: at most this many runs, counted (the hyper-optimizer's stage gives none: its
    runs are timed; the counted refinement of a search fallen back from it gives a count and no deadline, as
    a test of what the counted stages hand on does).  ``steps``: a run's temperatures and sweeps of each."""
    starts = [path] + ([other] if other is not None and list(other) != list(path) and
                       rank(other) <= ANNEAL_RUNNER_UP * rank(path) else [])
    try:
        chains = [ctg.ContractionTree.from_path(*_strings(inputs, output, size_dict), path=p) for p in starts]
    except (ValueError, KeyError, IndexError):
        return path, 0, "cotengra did not take the path as a tree"
    ranks = [rank(p) for p in starts]
    best, runs, longest, gained = ranks[0], 0, (ANNEAL_SECONDS * len(inputs),) * 2, 0     # (CPU, clock)
    while not over(deadline - time.thread_time() - longest[0] - lost, longest[1]) and runs - gained < ANNEAL_STALE \
            and (most is None or runs < most):
        start = time.thread_time(), time.perf_counter()
        c = runs % len(chains)
        found = chains[c].simulated_anneal(minimize=minimize, seed=seed + runs, tsteps=steps[0], numiter=steps[1])
        runs += 1
        longest = max(longest[0], time.thread_time() - start[0]), max(longest[1], time.perf_counter() - start[1])
        candidate = _linear(found.get_path())
        r = rank(candidate)
        if r < ranks[c]:
            chains[c], ranks[c] = found, r
        if r < best:
            path, best, gained = candidate, r, runs
            if afford is not None:      # (a run that finds a better tree may end past what that tree affords)
                affords = afford(path)
                deadline, lost = min(deadline, affords), max(0.0, deadline - affords)
        if progress is not None:
            progress.update(time.perf_counter() - t0, runs, _cost(inputs, output, size_dict, path)[0])
    if runs - gained >= ANNEAL_STALE:
        return path, runs, f"converged: no better tree in the last {ANNEAL_STALE}"
    return path, runs, "time budget spent" if most is None or runs < most else f"{most} runs, as asked"


__all__ = ["ANNEAL_RUNNER_UP", "ANNEAL_SECONDS", "ANNEAL_STALE", "ANNEAL_STEPS", "ANNEAL_SWEEPS", "annealed"]
