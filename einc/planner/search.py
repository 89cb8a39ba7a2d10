"""The path search for networks beyond dynamic programming's reach, within a budget.

:func:`search` first finds a greedy path (milliseconds), predicts what the contraction it
gives will cost (:func:`predicted_seconds`: flops, the traffic of the intermediates, a
fixed cost per step, at nominal CPU figures), and spends search time as
:func:`budget_for` affords: :data:`FRACTION` of the prediction plus :data:`REPAY` times
it up to :data:`SMALL`, at least :data:`FLOOR`, at most :data:`CAP`; its
:func:`allowance` (that fraction plus :data:`SMALL`) bounds the planning.  A budget under
:data:`HYPER_FLOOR` is counted, not clocked: seeded random greedy trials (cotengrust's,
else opt_einsum's) and the subtrees of cotengra's subtree reconfiguration of the best
tree, each at a nominal cost (:data:`TRIAL_SECONDS`, :data:`SUBTREES`), as many as the
budget affords, fewer where the trials stop finding better trees (:data:`STALE`), for no
more than :data:`GUARD` times the budget of this thread's CPU time.  From there on, random greedy
trials first (counted too), their best tree refined, then cotengra's hyper-optimizer (seeded
greedy trials and kahypar partitions, each refined by subtree reconfiguration) up to
:data:`HYPER_SHARE` of the budget, then its best tree annealed (cotengra's simulated
annealing, TreeSA's method: :mod:`einc.planner.anneal`) for the rest.  Trees
are ranked by the time einc's torch executor is predicted to take (:mod:`einc.planner.objective`;
the budgets weigh the nominal figures), not flops alone.  Without cotengra
the budget goes to random greedy trials.  Paths of searches of a few milliseconds or
more are remembered on disk (:mod:`einc.planner.pathcache`), under a key that names the
figures; they are defined in :mod:`einc.planner.searchkey`, which computes the key and
reads a remembered path without importing this module.

Deterministic for a given :data:`SEED` where the search stops on its counts or its convergence: below the
hyper-optimizer, unless the guard ends it (in the thread's CPU time, which other jobs do not advance, or on
the clock past :data:`CAP`: :func:`_ends`); where the budget stops a hyper-optimizer search (its stages in
this thread's CPU time, :data:`CAP` on the clock), what fits depends on the machine's speed (and on its load
where the clock ends it), and so may the path.
:class:`Report` says what ran, how long, how many trees and why it stopped (``explain``): docs/paths.md.
"""

from __future__ import annotations

import collections
import functools
import math
import random
import time

import opt_einsum

from . import anneal, objective, pathcache, slicebudget
from .graph import cycles
from .libraries import _kahypar, _linear, _methods, _optional, _seeded, _strings
from .pathcost import cost as _cost
from .pathcost import path_cost
from .reconfigure import combo as _combo
from .reconfigure import reconfigure as _reconfigure
from .reconfigure import reconfigured as _reconfigured
from .searchkey import (
    ANNEAL_SECONDS,
    ANNEAL_SHORT,
    ANNEAL_STEPS,
    ANNEAL_SWEEPS,
    CAP,
    CONVERGED,
    COSTMODS,
    ELEMENT_SECONDS,
    FLOOR,
    FLOP_SECONDS,
    FRACTION,
    GUARD,
    HYPER_FLOOR,
    HYPER_SHARE,
    HYPER_STALE,
    KAHYPAR_SPACE,
    LIMITED_MAX,
    LIMITED_TRIAL_SECONDS,
    MAX_TRIALS,
    PARTITION,
    PARTITION_AFFORD,
    PARTITION_SECONDS,
    PARTITION_TENSORS,
    PARTITION_TRIALS,
    PER_TENSOR,
    PROBE,
    QUICK_SHARE,
    RECONF_CHUNK,
    RECONF_SECONDS,
    REFINE_SHARE,
    REPAY,
    SEED,
    SMALL,
    STALE,
    STALE_GAIN,
    STEP_SECONDS,
    SUBTREES,
    TRIAL_SECONDS,
    WRITE_FACTOR,
    recall,
)
from .searchreport import Progress as _Progress
from .searchreport import Report
from .searchreport import seconds_text as _time

PROGRESS_SECONDS = 1.0  # a longer budget shows progress


def predicted_seconds(flops: float, written: float, steps: int) -> float:
    """einc's nominal time of a contraction (see the figures in einc.planner.searchkey)."""
    return flops * FLOP_SECONDS + written * ELEMENT_SECONDS + steps * STEP_SECONDS


def budget_for(seconds: float) -> float:
    """The search time a contraction predicted at ``seconds`` affords: :data:`FRACTION` of
    it, plus :data:`REPAY` times it up to :data:`SMALL` (the plan is paid once per key and
    remembered), at least :data:`FLOOR` (a few milliseconds of random greedy trials find
    far better trees than greedy's on networks that contract in a millisecond), at most
    :data:`CAP`."""
    return min(CAP, FRACTION * seconds + min(SMALL, max(FLOOR, REPAY * seconds)))


def allowance(seconds: float) -> float:
    """The most a search of a contraction predicted at ``seconds`` may run in all:
    :data:`FRACTION` of it plus :data:`SMALL`, at most :data:`CAP`.  Refining the best
    random greedy tree of a small budget may run up to it."""
    return min(CAP, FRACTION * seconds + SMALL)


def search(inputs, output, size_dict, memory_limit=None, seed: int = SEED):
    """``(path, report)``: the path an earlier search of the same network found and einc
    remembered (:func:`einc.planner.searchkey.recall`), else the one a search finds
    (:func:`searched`)."""
    found, name, tag = recall(inputs, output, size_dict, memory_limit, seed)
    return found if found is not None else searched(inputs, output, size_dict, memory_limit, name, tag, seed)


def searched(inputs, output, size_dict, memory_limit, name, tag, seed: int = SEED):
    """``(path, report)`` of :func:`find`, its path remembered as entry ``name`` of version
    ``tag`` (einc.planner.pathcache) where the search ran long enough to be worth it."""
    path, report = find(inputs, output, size_dict, memory_limit, seed)
    if report.seconds >= pathcache.STORE_SECONDS:
        pathcache.store(name, tag, path, {"report": report._asdict()})
    return path, report


def find(inputs, output, size_dict, memory_limit=None, seed: int = SEED):
    """``(path, report)``: a linear path for ``inputs`` (sets of int indices) -> ``output``,
    found within the budget the greedy path's predicted time affords.  With a
    ``memory_limit`` (elements; einc slices the path it returns, einc.planner.slicing):
    where the budget reaches the hyper-optimizer, its trees are ranked as cotengra's
    slicing reconfiguration slices them to that size; below, or without cotengra, a few
    trees (cotengra's slicing reconfiguration of the unlimited one, the unlimited search's,
    opt_einsum's random greedy trials under the limit, greedy's) are ranked by their
    predicted time once sliced (einc.planner.objective.ranked_sliced), within one budget
    with the slicer (:func:`sliced_budget`, einc.planner.slicebudget)."""
    ctg = _cotengra()       # imported before the clock starts: once a process, not once a plan
    t0, cpu0 = time.perf_counter(), time.thread_time()
    inputs = [frozenset(t) for t in inputs]
    output = frozenset(output)
    path = _greedy(inputs, output, size_dict, None)
    greedy = _predict(inputs, output, size_dict, path, memory_limit is None)     # (ranked last, without a limit)
    budget = budget_for(greedy)
    if memory_limit is not None and (budget < HYPER_FLOOR or ctg is None):
        return _limited(ctg, inputs, output, size_dict, memory_limit, seed, t0, path, greedy, budget)

    # below the hyper-optimizer the search's work is counted (trials and subtrees at nominal
    # costs), not clocked: the same path on a loaded machine, in more time, up to a guard; a
    # hyper search's random greedy trials are counted too, and end where they converge over a
    # longer run (ended after STALE, they left the later stages poorer trees on hypernetworks and lattices)
    counted = ctg is None or budget < HYPER_FLOOR

    def affords(seconds):       # the budget of a tree predicted at ``seconds``, within the first one; a
        return min(budget, max(budget_for(seconds), SMALL))     # small one is kept whole

    def trials_get(seconds):    # the random greedy trials' share of the budget of a best tree predicted at ``seconds``
        if ctg is not None and affords(seconds) >= HYPER_FLOOR:
            return QUICK_SHARE * affords(seconds)
        if ctg is not None and _partitions(affords(seconds) * (1 - PARTITION_TRIALS), inputs):
            return affords(seconds) * PARTITION_TRIALS      # the rest: a partition tree, and both refined
        return affords(seconds) * (1 - REFINE_SHARE if ctg is not None else 1)    # the refinement's share left

    per_trial = TRIAL_SECONDS * sum(map(len, inputs))
    guard = counted_ends(t0)(min(CAP, GUARD * budget) - (time.thread_time() - cpu0))
    quick, trials, reason, work = None, 0, "", 0.0
    if memory_limit is None:
        quick, trials, reason, work = _random_greedy(inputs, output, size_dict, None, seed, t0, trials_get(greedy),
                                                     trials_get, per_trial, guard, STALE if counted else HYPER_STALE)
        budget = affords(_predict(inputs, output, size_dict, quick))
    rg = "random greedy" + (" (cotengrust)" if _cotengrust() else " (opt_einsum)")
    if ctg is None or budget < HYPER_FLOOR:
        method = rg
        if ctg is not None:     # the rest of the budget (the trials' work counted, else the refinement's share)
            best = _predict(inputs, output, size_dict, quick)
            left = budget - work - PER_TENSOR * len(inputs) if counted or _cotengrust() else REFINE_SHARE * budget
            quick, sizes, runs, parted = _refined(ctg, inputs, output, size_dict, quick, left, _ends(
                math.inf if counted else min(GUARD * left, allowance(best)), guard=guard), seed, not counted)
            ran = (["subtrees of " + " then ".join(map(str, sizes))] if sizes else []) + \
                ([f"{runs} short annealing run" + ("s" if runs != 1 else "")] if runs is not None else [])
            method += ", its best tree refined (cotengra: " + ("a kahypar partition's tree kept; " if parted else "") \
                + "; ".join(ran) + ")" if ran else ""
            trials += len(sizes) + (runs is not None)   # each subtree size a trial, the annealing runs one
        if ctg is not None and budget_for(greedy) >= HYPER_FLOOR:
            reason += f" (of the best predicted time, the hyper-optimizer's {_time(HYPER_FLOOR)} not reached)"
        return _finish(method, t0, trials + 1, reason, greedy, path, quick, inputs, output, size_dict, budget,
                       memory_limit)
    # the hyper-optimizer: the best random greedy tree refined first, where the budget left affords it
    refined = ""
    if quick is not None and budget - (time.thread_time() - cpu0) >= RECONF_SECONDS * len(inputs):
        tree = _reconfigured(ctg, inputs, output, size_dict, quick,
                             ended=counted_ends(t0)(budget - (time.thread_time() - cpu0)))
        trials += 1
        # the reconfiguration weighs flops and writes as cotengra does: kept where einc's objective agrees
        keep = _rank(inputs, output, size_dict, tree) <= _rank(inputs, output, size_dict, quick)
        quick = tree if keep else quick
        refined = " (its best tree refined)" if keep else " (its best tree refined, ranked slower, not kept)"
    best, hyper_trials, reason, budget, annealed = _hyper_annealed(ctg, inputs, output, size_dict, memory_limit,
                                                                   seed, t0, greedy, budget, quick, path, cpu0)
    method = (rg + refined + ", then " if quick is not None else "") + \
        "hyper-optimizer (cotengra: " + ", ".join(_methods()) + \
        "; subtree reconfiguration" + ("; slicing reconfiguration" if memory_limit is not None else "") + ")" + \
        (", its best tree annealed (cotengra's simulated annealing)" if annealed else "")
    return _finish(method, t0, trials + hyper_trials + annealed + 1, reason, greedy, path, best, inputs, output,
                   size_dict, budget, memory_limit)


def _hyper_annealed(ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy, budget, quick, path, cpu0):
    """The hyper-optimizer up to :data:`HYPER_SHARE` of the budget (under a memory limit, all
    of it but the slicer's share, einc.planner.slicebudget), then its best tree and
    ``quick``, the better-ranked first, annealed in turn for the rest: ``(best path, trials,
    reason, budget, annealing runs)``, the budget in this thread's CPU time since ``cpu0``, :data:`CAP` on
    the clock since ``t0``.  Where the hyper-optimizer's tree brought the budget forward, no annealing run
    is begun that a gain like that one would leave past its end (einc.planner.anneal's rule after a run's gain)."""
    known = _predict(inputs, output, size_dict, quick) if quick is not None else math.inf
    before = _hyper_budget(greedy, known)
    progress = _Progress(budget) if budget >= PROGRESS_SECONDS else None
    try:
        share = HYPER_SHARE if memory_limit is None else 1 - slicebudget.SLICER_SHARE
        best, trials, reason, budget = _hyper(ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy,
                                              known, share, progress, cpu0)
        other = quick       # the runner-up, annealed in turn with the best where ranked near it
        if best is None or (quick is not None and _rank(inputs, output, size_dict, quick) <
                            _rank(inputs, output, size_dict, best)):
            best, other = quick if quick is not None else path, best
        annealed = 0
        if memory_limit is None and HYPER_SHARE < 1:
            best, annealed, why = anneal.annealed(
                ctg, inputs, output, size_dict, best, t0, cpu0 + budget, seed,
                functools.partial(_rank, inputs, output, size_dict), f"combo-{WRITE_FACTOR:g}", progress,
                lambda p: cpu0 + max(budget_for(_predict(inputs, output, size_dict, p)), FLOOR), other,
                max(0.0, before - budget), over=lambda cpu, clock: counted_ends(t0 - clock)(cpu)())
            reason += f"; then {annealed} annealing runs of its best tree ({why})" if annealed else \
                "; no time left to anneal its best tree"
    finally:
        if progress is not None:
            progress.close()
    return best, trials, reason, budget, annealed


def _limited(ctg, inputs, output, size_dict, memory_limit, seed, t0, path, greedy, budget):
    """``(path, report)`` under a limit below the hyper-optimizer: the unlimited search's
    path, that tree reconfigured as cotengra slices it, opt_einsum's random greedy trials
    under the limit and the greedy ``path``, ranked as each is sliced: the slicing chosen
    with the tree.  The stages share one budget (einc.planner.slicebudget)."""
    ledger = slicebudget.Ledger(allowance(greedy), counted_ends(t0))     # (sliced_budget's)
    free, found = search(inputs, output, size_dict, None, seed)
    ledger.charge("the search without the limit", min(found.budget, slicebudget.FREE_SHARE * ledger.budget),
                  "its own budget, counted")
    more, per_round = (), slicebudget.ROUND_SECONDS * len(inputs)
    if ctg is not None:
        more, ran, what = objective.sliced_reconfigured(ctg, _strings(inputs, output, size_dict), free, memory_limit,
                                                        WRITE_FACTOR, ledger.left(slicebudget.RECONF_MARK) // per_round,
                                                        ledger.ended)
        ledger.charge("slicing reconfiguration", ran * per_round, what or "nothing to slice")
    per_trial = LIMITED_TRIAL_SECONDS * max(1, sum(map(len, inputs)))     # (scalars only: no index at all)
    trials = min(LIMITED_MAX, int(ledger.left(slicebudget.TRIALS_MARK) / per_trial))
    limited = ()
    if trials:
        with _seeded(seed):
            limited = (_linear(opt_einsum.path_random.random_greedy(
                [set(t) for t in inputs], set(output), size_dict, memory_limit, max_repeats=trials)),)
    ledger.charge("random greedy under the limit", trials * per_trial,
                  (f"{trials} trial" + ("s" if trials != 1 else "")) if trials else "no share left")
    steps = max(len(inputs) - 1, 1)
    path, passes, ranked, why = objective.ranked_sliced((*more, free, *limited, path), inputs, output, size_dict,
                                                        memory_limit, ledger.passes(slicebudget.RANK_MARK, steps))
    ledger.charge("ranking", passes * steps * slicebudget.PASS_SECONDS, f"{passes} passes; {why}")
    return path, _report("the search without the limit" +
                         (", its tree sliced and reconfigured (cotengra)" if more else "") +
                         (", random greedy under the limit (opt_einsum)" if limited else "") +
                         ", greedy; ranked as sliced to the limit (einc.planner.objective)", t0, 1 + ranked,
                         f"stages (counted, einc.planner.slicebudget): {ledger.text()}", greedy,
                         _predict(inputs, output, size_dict, path, False), inputs, output, size_dict, path,
                         ledger.budget, False)


def sliced_budget(inputs, output, size_dict) -> float:
    """The budget the search under a memory limit and the slicer share (einc.planner.slicebudget):
    the :func:`allowance` of the greedy path's predicted time."""
    return allowance(_greedy_seconds(tuple(map(frozenset, inputs)), frozenset(output), tuple(size_dict.items())))


@functools.lru_cache(maxsize=8)
def _greedy_seconds(inputs, output, sizes) -> float:
    size_dict = dict(sizes)
    return _predict(inputs, output, size_dict, _greedy(inputs, output, size_dict, None), False)


def slices_its_trees(inputs, output, size_dict) -> bool:
    """Whether the search under a memory limit reaches the hyper-optimizer, whose trees
    cotengra's slicing reconfiguration slices to the limit as they are ranked, within all
    of the budget but the slicer's share (:data:`einc.planner.slicebudget.SLICER_SHARE`)."""
    greedy = _greedy_seconds(tuple(map(frozenset, inputs)), frozenset(output), tuple(size_dict.items()))
    return _cotengra() is not None and budget_for(greedy) >= HYPER_FLOOR


def _refine(ctg, inputs, output, size_dict, best, work, ended, subtrees=SUBTREES):
    """``(path, sizes)``: ``best`` refined by cotengra's subtree reconfiguration, by
    subtrees of 6 leaves, then of 8, then of 10 (:data:`SUBTREES`), as many as ``work``
    seconds afford at their nominal costs, and until ``ended()`` (:func:`_ends`);
    refining the best tree by small subtrees gains more than further trials on lattices,
    regular graphs and the language-model networks. ``sizes``: the subtree sizes that ran."""
    ran, n = (), len(inputs)
    work -= 2 * PER_TENSOR * n      # the tree made from the path, and the refined one's path ranked
    if not subtrees or work < subtrees[0][1]:
        return best, ran
    try:
        tree = ctg.ContractionTree.from_path(*_strings(inputs, output, size_dict), path=best)
        for size, each in subtrees:
            each += PER_TENSOR * n / max(RECONF_CHUNK, n // 16)     # its share of its chunk's ranking
            if work < each or ended():
                break
            was = _combo(tree)
            work -= _reconfigure(tree, size, ended, int(work / each)) * each
            ran += (size,)
            if _combo(tree) >= was:
                break       # where small subtrees gain nothing, larger ones (several times dearer) seldom do
    except (ValueError, KeyError, IndexError):      # a path cotengra does not take as a tree: kept as it is
        return best, ran
    path = _linear(tree.get_path())
    if _rank(inputs, output, size_dict, path) < _rank(inputs, output, size_dict, best):
        return path, ran
    return best, ran


def _ends(cpu=math.inf, clock=math.inf, guard=lambda: False):
    """Whether a stage is to end: a test, true once this thread has run ``cpu`` seconds more
    (``time.thread_time()``: a loaded machine then gets the same work done, in more time),
    the clock has reached ``clock`` (``time.perf_counter()``) or ``guard()`` is true."""
    end = time.thread_time() + cpu
    return lambda: time.thread_time() >= end or time.perf_counter() >= clock or guard()


def counted_ends(t0=None, cap=None):
    """The counted work's guard, the search's and einc.planner.slicebudget's: ``ends(cpu)``, :func:`_ends`
    of ``cpu`` seconds more, or of ``cap`` (:data:`CAP`) on the clock past ``t0`` (now): a process that gets no CPU."""
    return functools.partial(_ends, clock=(time.perf_counter() if t0 is None else t0) + (CAP if cap is None else cap))


def _partitions(work, inputs) -> bool:
    """Whether ``work`` seconds (nominal) afford a kahypar partition tree (:data:`PARTITION`),
    and the network has cycles (a tree's or a chain's best order is the random greedy's)."""
    n = len(inputs)
    return n >= PARTITION_TENSORS and work >= PARTITION_AFFORD * PARTITION_SECONDS * n and _kahypar() and \
        cycles(inputs) > 0


def _refined(ctg, inputs, output, size_dict, best, work, ended, seed, short=False):
    """``(path, sizes, runs, partitioned)``: :func:`_refine` of ``best`` with ``work``, or where it
    affords one, of a kahypar partition tree too: both by subtrees of 6 leaves with
    :data:`PROBE` of the work left each, then the better one by larger subtrees with the
    rest.  On random regular and connected graphs of a hundred tensors a partition tree so
    refined reaches about half the flops of the best random greedy tree's.  With ``short`` (a
    search fallen back from the hyper-optimizer), the larger subtrees' work (all but twice
    :data:`PROBE` of it, without a partition) goes to short annealing runs (:func:`_annealed_short`).
    ``sizes``: the subtree sizes that ran; ``runs``: the short annealing runs, None where none was begun."""
    if not _partitions(work, inputs):
        if not short:
            return (*_refine(ctg, inputs, output, size_dict, best, work, ended), None, False)
        path, sizes = _refine(ctg, inputs, output, size_dict, best, 2 * PROBE * work, ended, SUBTREES[:1])
        path, runs = _annealed_short(ctg, inputs, output, size_dict, path, (1 - 2 * PROBE) * work, ended, seed)
        return path, sizes, runs, False
    from cotengra.pathfinders.path_kahypar import kahypar_to_tree
    with _seeded(seed):
        tree = kahypar_to_tree.trial_fn(*_strings(inputs, output, size_dict), seed=seed, **PARTITION)
    work -= PARTITION_SECONDS * len(inputs)
    probed = [(*_refine(ctg, inputs, output, size_dict, p, PROBE * work, ended, SUBTREES[:1]), p is best)
              for p in (best, _linear(tree.get_path()))]
    path, sizes, kept = min(probed, key=lambda r: (_rank(inputs, output, size_dict, r[0]), not r[2]))
    if short:
        path, runs = _annealed_short(ctg, inputs, output, size_dict, path, (1 - 2 * PROBE) * work, ended, seed)
        return path, sizes, runs, not kept
    path, more = _refine(ctg, inputs, output, size_dict, path, (1 - 2 * PROBE) * work, ended, SUBTREES[1:])
    return path, sizes + more, None, not kept


def _annealed_short(ctg, inputs, output, size_dict, path, work, ended, seed):
    """``(path, runs)``: ``path`` annealed (einc.planner.anneal) by runs of :data:`ANNEAL_SHORT`
    temperatures and sweeps, seeded, as many as ``work`` affords at their nominal cost (counted, until
    ``ended()``); ``runs``: how many ran, None where none was begun."""
    n = len(inputs)
    each = ANNEAL_SECONDS * n * ANNEAL_SHORT[0] * ANNEAL_SHORT[1] / (ANNEAL_STEPS * ANNEAL_SWEEPS)
    most = int((work - PER_TENSOR * n) / (each + PER_TENSOR * n))   # the tree made; each run's tree ranked
    if most < 1 or ended():
        return path, None
    path, runs, _ = anneal.annealed(ctg, inputs, output, size_dict, path, time.perf_counter(), math.inf, seed,
                                    functools.partial(_rank, inputs, output, size_dict), f"combo-{WRITE_FACTOR:g}",
                                    most=most, over=lambda cpu, clock: ended(), steps=ANNEAL_SHORT)
    return path, runs


def _finish(method, t0, trials, reason, greedy, first, best, inputs, output, size_dict, budget, memory_limit):
    """``(path, report)``: ``best``, or the ``first`` (greedy) path where that is predicted faster."""
    seconds = _predict(inputs, output, size_dict, best)
    if memory_limit is None and _rank(inputs, output, size_dict, best) > _rank(inputs, output, size_dict, first):
        best, seconds = first, greedy       # never worse than the first path
    return best, _report(method, t0, trials, reason, greedy, seconds, inputs, output, size_dict, best, budget)


def _report(method, t0, trials, reason, greedy, best, inputs, output, size_dict, path, budget, ranked=True) -> Report:
    flops, _, largest, _ = _costs(inputs, output, size_dict, path, ranked)
    return Report(method, time.perf_counter() - t0, trials, reason, greedy, best, flops, largest, budget)


def _predict(inputs, output, size_dict, path, ranked=True) -> float:
    """The nominal seconds of ``path`` (:func:`predicted_seconds`): what budgets and reports weigh."""
    flops, written, _, steps = _costs(inputs, output, size_dict, path, ranked)
    return predicted_seconds(flops, written, steps)


def _costs(inputs, output, size_dict, path, ranked=True):
    """``path_cost`` of ``path``: with ``ranked`` (a path the search ranks too, as it ranks
    every path it predicts but under a memory limit), from the walk that ranks it."""
    if ranked:
        return _ranked(tuple(inputs), frozenset(output), tuple(size_dict.items()), tuple(map(tuple, path)))[1]
    return _cost(inputs, output, size_dict, path)


def _rank(inputs, output, size_dict, path) -> float:
    """What trees are ranked by: the seconds einc's torch executor is predicted to take
    (einc.planner.objective), remembered for the last few paths."""
    return _ranked(tuple(inputs), frozenset(output), tuple(size_dict.items()), tuple(map(tuple, path)))[0]


@functools.lru_cache(maxsize=32)
def _ranked(inputs, output, sizes, path):
    """``(seconds, path_cost)`` of ``path``: one walk over its steps gives both."""
    sizes = dict(sizes)
    return objective.seconds_and_cost(inputs, output, sizes, path, objective.memo_for(inputs, output, sizes))


_cotengrust = functools.partial(_optional, "cotengrust")
_cotengra = functools.partial(_optional, "cotengra")


def _greedy(inputs, output, size_dict, memory_limit):
    if memory_limit is None and (rust := _cotengrust()) is not None:
        ssa = rust.optimize_greedy(*_strings(inputs, output, size_dict), use_ssa=True)
        return _linear(rust.ssa_to_linear(ssa, len(inputs)))
    return _linear(opt_einsum.paths.greedy([set(t) for t in inputs], set(output), size_dict, memory_limit))


def _random_greedy(inputs, output, size_dict, memory_limit, seed, t0, budget, limit=None, per_trial=None,
                   guard=lambda: False, stale=STALE):
    """Seeded random greedy trials until ``budget`` is spent: ``(path, trials, reason,
    work)``.  With cotengrust, ``limit(predicted seconds)`` gives the budget of the best
    tree so far (taken where less than before: a better tree affords less search); with
    ``per_trial`` (nominal seconds), the budget is counted in trials until ``guard()``
    (:func:`_ends`), not clocked, and they end where the latter half of ``stale``
    trials or more found no better tree.  ``work``: the seconds the trials took
    since ``t0``, nominal where counted (opt_einsum's trials are clocked)."""
    rust = _cotengrust()
    if rust is not None and memory_limit is None:
        best, best_flops, trials, rounds, found = None, math.inf, 0, 0, 0
        ranked = objective.Shortlist(inputs, output, size_dict)     # the best few by flops, ranked by seconds
        rank = functools.partial(_rank, inputs, output, size_dict)
        args = _strings(inputs, output, size_dict)
        batch = 8
        while True:
            start = time.perf_counter()
            ssa, log10_flops = rust.optimize_random_greedy_track_flops(*args, ntrials=batch, seed=seed + trials,
                                                                      costmod=COSTMODS[rounds % 2], use_ssa=True)
            rounds += 1
            trials += batch
            if ranked.wants(log10_flops):
                ranked.add(log10_flops, _linear(rust.ssa_to_linear(ssa, len(inputs))))
            if log10_flops < best_flops:
                if log10_flops < best_flops - STALE_GAIN:
                    found = trials          # (a gain of a few percent does not keep the trials going)
                best, best_flops = ranked.kept[0][1], log10_flops
                if limit is not None:
                    budget = min(budget, limit(_predict(inputs, output, size_dict, best)))
            now = time.perf_counter()       # counted: the trials, and the shortlist's ranking
            work = trials * per_trial + PER_TENSOR * len(inputs) * len(ranked.kept) if per_trial else now - t0
            if trials >= MAX_TRIALS:
                return ranked.best(rank), trials, f"{MAX_TRIALS} trials", work
            if per_trial and work >= budget:
                return ranked.best(rank), trials, f"{trials} trials (what the budget affords)", work
            if not per_trial and now - t0 >= budget:
                return ranked.best(rank), trials, "time budget spent", work
            if per_trial and trials >= stale and trials >= 2 * found:
                reason = f"converged (no better tree in the last {trials - found} of {trials} trials)"
                return ranked.best(rank), trials, reason, work
            if guard():
                return ranked.best(rank), trials, f"time allowance spent after {trials} trials", work
            # twice as many as before, up to 64, and no more than the budget holds: counted, or
            # by the clock (a trial on hundreds of tensors takes milliseconds)
            each, held = (per_trial, budget - work) if per_trial else ((now - start) / batch, budget - (now - t0))
            batch = max(1, min(2 * batch, 64, math.ceil(held / each) if each > 0 else 64))
    opt = opt_einsum.RandomGreedy(max_repeats=MAX_TRIALS, max_time=max(0.0, budget - (time.perf_counter() - t0)),
                                  minimize="flops")
    with _seeded(seed):     # opt_einsum seeds Python's random numbers with each trial's number
        path = opt([set(t) for t in inputs], set(output), size_dict, memory_limit)
    trials = len(opt.costs)
    return _linear(path), trials, "time budget spent" if trials < MAX_TRIALS else f"{MAX_TRIALS} trials", \
        time.perf_counter() - t0


def _hyper_budget(greedy_seconds, best_seconds) -> float:
    """A hyper search's budget once its best tree is predicted at ``best_seconds``: that
    tree's, within the greedy path's."""
    return min(budget_for(greedy_seconds), max(budget_for(best_seconds), FLOOR))


_REGISTERED = False


def _register(ctg):
    """A greedy trial for cotengra's hyper-optimizer that takes its seed from Python's
    random numbers (cotengra's own leaves cotengrust's unseeded)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from cotengra.hyperoptimizers.hyper import get_hyper_space, register_hyper_function

    def trial(inputs, output, size_dict, random_strength=0.0, temperature=0.0, costmod=1.0):
        seed = random.randrange(2 ** 31)
        sizes = ctg.core.jitter_dict(size_dict, random_strength, seed) if random_strength else size_dict
        rust = _cotengrust()
        if rust is not None:
            ssa = rust.optimize_greedy(inputs, output, sizes, temperature=temperature, costmod=costmod, seed=seed,
                                       use_ssa=True)
        else:
            from cotengra.pathfinders.path_basic import optimize_greedy
            with _seeded(seed):
                ssa = optimize_greedy(inputs, output, sizes, temperature=temperature, costmod=costmod, use_ssa=True)
        return ctg.ContractionTree.from_path(inputs, output, size_dict, ssa_path=ssa)

    register_hyper_function("einc-greedy", trial, dict(get_hyper_space()["greedy"]))
    if _kahypar():
        from cotengra.pathfinders.path_kahypar import kahypar_to_tree
        register_hyper_function("einc-kahypar", kahypar_to_tree.trial_fn,
                                {**get_hyper_space()["kahypar"], **KAHYPAR_SPACE})
    _REGISTERED = True


def _hyper(ctg, inputs, output, size_dict, memory_limit, seed, t0, greedy_seconds, known=math.inf, share=1.0,
           progress=None, cpu0=None):
    """cotengra's hyper-optimizer, one trial at a time, until ``share`` of the budget of the best tree so far
    (``known``: the best predicted seconds before) is spent in this thread's CPU time since ``cpu0`` (now), or
    ``share`` of :data:`CAP` on the clock since ``t0``: ``(path, trials, reason, budget)``, no path if all failed."""
    _register(ctg)
    graph = max(collections.Counter(i for t in inputs for i in t).values(), default=0) <= 2     # no hyperedges
    methods = [{"greedy": "einc-greedy", "kahypar": "einc-kahypar" if graph else m}.get(m, m) for m in _methods()]
    slicing = {"target_size": memory_limit} if memory_limit is not None else None
    opt = ctg.HyperOptimizer(methods=methods, minimize=objective.hyper_objective(memory_limit, WRITE_FACTOR),
                             max_repeats=1,
                             parallel=False, optlib="sbplx", seed=seed, reconf_opts={},
                             slicing_reconf_opts=slicing, on_trial_error="ignore", progbar=False)
    args = _strings(inputs, output, size_dict)
    budget = _hyper_budget(greedy_seconds, known)
    cpu0, reason, longest = time.thread_time() if cpu0 is None else cpu0, "", (0.0, 0.0)   # (longest: CPU, clock)
    with _seeded(seed):
        while True:
            start = time.thread_time(), time.perf_counter()
            opt.search(*args)       # (in this thread: parallel=False)
            best, flops = known, math.nan
            if "tree" in opt.best:
                flops, written, _, steps = _cost(inputs, output, size_dict, _linear(opt.tree.get_path()))
                best = min(best, predicted_seconds(flops, written, steps))
            budget = _hyper_budget(greedy_seconds, best)
            cpu, elapsed = time.thread_time() - cpu0, time.perf_counter() - t0
            longest = max(longest[0], cpu0 + cpu - start[0]), max(longest[1], t0 + elapsed - start[1])
            trials = len(opt.scores)
            if progress is not None:
                progress.update(elapsed, trials, flops)
            # a kahypar trial on hundreds of tensors may take seconds: none is begun that, as long as the longest so
            # far, would end past the share in this thread's CPU time or of CAP on the clock (annealing gets the rest)
            if counted_ends(t0 - longest[1], share * CAP)(share * budget - cpu - longest[0])():
                reason = ("its share of the " if share < 1 else "") + \
                    "time budget spent (of the best predicted time, in this thread's CPU time" + \
                    (f", capped at {share * CAP:g} s" if max(budget, (elapsed + longest[1]) / share) >= CAP else "") + \
                    ("; the next trial would end past it)" if cpu < share * budget else ")")
                break
            if trials >= MAX_TRIALS:
                reason = f"{MAX_TRIALS} trials"
                break
            if opt.trials_since_best >= CONVERGED:
                reason = f"converged (no better tree in {CONVERGED} trials)"
                break
    path = _linear(opt.tree.get_path()) if "tree" in opt.best else None
    return path, len(opt.scores), reason, budget


__all__ = ["CAP", "FLOOR", "FRACTION", "HYPER_FLOOR", "SEED", "WRITE_FACTOR", "Report", "allowance", "budget_for",
           "counted_ends", "path_cost", "predicted_seconds", "search", "searched", "slices_its_trees"]
