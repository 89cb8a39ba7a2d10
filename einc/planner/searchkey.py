"""The key of a path the search remembers, and the figures of the search that it names.

A search's path is kept on disk (:mod:`einc.planner.pathcache`) under a name made of the
network and a version tag (:func:`version`): the search's figures, its annealing's, its
objective's version and which of cotengra, cotengrust and kahypar are installed, so that
a change to any of them misses every old entry.  Those figures live here, and
:mod:`einc.planner.search` and :mod:`einc.planner.anneal` take theirs from here, so that a
process that finds its network's path on disk (:func:`recall`) names and reads the entry
without importing the search, its annealing or its objective.  Pure: no torch.
"""

from __future__ import annotations

import functools
import time

from . import pathcache, slicebudget
from .libraries import _installed
from .searchreport import remembered

# Nominal CPU figures of einc's torch executor (those of einc.planner.slicecost): a flop on
# operands of tens of elements a side at 5 GFLOP/s, a fixed cost per step.  An
# intermediate element costs four 4-byte transfers -- its write, its read, and the
# permuting copy the executor makes of most matrix-product operands (a read and a write;
# einc.planner.slicing.step_copies) -- at a nominal 10 GB/s: eight flops' time.
FLOP_SECONDS = 0.2e-9
ELEMENT_SECONDS = 4 * 4 / 10e9
STEP_SECONDS = 15e-6
WRITE_FACTOR = ELEMENT_SECONDS / FLOP_SECONDS      # cotengra's "combo" weight of written elements

FRACTION = 0.1          # of the best predicted contraction time, spent searching
FLOOR = 0.005           # seconds: the least any search past dynamic programming's reach is given
SMALL = 0.1             # seconds: added to the fraction, or REPAY times the predicted time where that is less
REPAY = 20              # a search as long as this many contractions, up to SMALL, pays for itself in tens of calls
HYPER_FLOOR = 0.5       # seconds: from here on cotengra's hyper-optimizer, whose trials are too slow for less
QUICK_SHARE = 0.3       # of a hyper search's budget, given to random greedy trials first
REFINE_SHARE = 0.5      # of a small search's budget, left to refining the best random greedy tree
RECONF_SECONDS = 0.01   # per tensor: the budget left that refining the best random greedy tree needs
RECONF_CHUNK = 8        # subtrees reconfigured between looks at the clock
# a small search of PARTITION_TENSORS or more, whose refinement affords it, also refines a kahypar
# partition tree (cotengra's, of these parameters, at PARTITION_SECONDS per tensor); its trials then
# get PARTITION_TRIALS of the budget, and each tree PROBE of what the partition left
PARTITION = {"parts": 4, "cutoff": 25, "imbalance": 0.1, "random_strength": 0.01, "weight_edges": "log"}
PARTITION_TENSORS, PARTITION_SECONDS, PARTITION_TRIALS, PROBE = 100, 0.7e-3, 0.1, 0.25
PARTITION_AFFORD = 1.2        # a partition is made where the refinement's work is this many partitions' or more
# cotengrust's random greedy weighing of the tensors removed against the one made, in
# turn by batch: its own range (matrix chains need its ends), and a narrower one that
# finds better trees on regular graphs and the language-model networks
COSTMODS = ((0.1, 4.0), (0.5, 2.0))
# the hyper-optimizer's kahypar trials without hyperedges: fewer parts, less noise, larger leaves
# than cotengra's ranges, whose trials seldom beat the refined random greedy tree (on hypergraphs they do)
KAHYPAR_SPACE = {"parts": {"type": "INT", "min": 2, "max": 4}, "cutoff": {"type": "INT", "min": 20, "max": 40},
                 "random_strength": {"type": "FLOAT_EXP", "min": 0.01, "max": 0.1},
                 "imbalance": {"type": "FLOAT", "min": 0.01, "max": 0.2}}
# the hyper-optimizer runs until this share of the budget has passed (after the random greedy trials'
# QUICK_SHARE: a trial or a few); the rest anneals its best tree (einc.planner.anneal)
HYPER_SHARE = 0.3
CAP = 10.0              # seconds: the most any search runs
MAX_TRIALS = 1024       # trees: the most any search tries
# Below the hyper-optimizer the search's work is counted at nominal costs (one core, no other
# load), so that its path does not depend on the machine's load: a random greedy trial, per
# index of every operand (cotengrust); a subtree reconfigured, by its leaves (cotengra), each
# size tried only where the one before gained.  GUARD: the most a counted search may run, as a
# multiple of its budget in its thread's CPU time, where the machine is far slower than nominal
# (other jobs do not advance that time; on the clock, CAP bounds it).
TRIAL_SECONDS = 1.2e-6
SUBTREES = ((6, 0.6e-3), (8, 1.5e-3), (10, 4e-3))
# per tensor, a tree ranked by the objective, made by cotengra from a path (and its path read
# back), or ranked subtree by subtree for a chunk of reconfiguration: on hundreds of tensors
# these cost as much as the trials and subtrees themselves
PER_TENSOR = 12e-6
GUARD = 4
STALE = 16              # random greedy trials end where the latter half of this many or more found no better tree,
STALE_GAIN = 0.01       # ... better by this much of log10 flops (2.3 %) or more
HYPER_STALE = 512       # ... or, in a hyper-optimizer search, of this many or more
CONVERGED = 128         # trials without a better tree end a hyper search
# Under a memory limit below the hyper-optimizer, opt_einsum's random greedy trials (in
# Python, the limit checked at each step) are counted too: LIMITED_TRIAL_SECONDS per index
# of every operand, as many as their share of the budget affords (einc.planner.slicebudget),
# up to LIMITED_MAX.
LIMITED_TRIAL_SECONDS = 40e-6
LIMITED_MAX = 128
SEED = 0
# an annealing run (einc.planner.anneal): ANNEAL_STEPS temperatures of ANNEAL_SWEEPS sweeps;
# ANNEAL_SECONDS a tensor: a run's time before one is timed; ANNEAL_STALE runs in a row without a
# better tree end the annealing; a second start gets its own chain where ranked within
# ANNEAL_RUNNER_UP times the best (a far worse one's chain spends half the runs on trees that
# seldom catch up)
ANNEAL_STEPS, ANNEAL_SWEEPS, ANNEAL_SECONDS, ANNEAL_STALE, ANNEAL_RUNNER_UP = 20, 20, 3e-3, 8, 4
# a counted search fallen back from the hyper-optimizer (its greedy tree's budget reached it, its best
# random greedy tree's does not) anneals its refined tree by runs of these temperatures and sweeps, in
# place of subtrees of 8 and 10 leaves, at ANNEAL_SECONDS a tensor in proportion: on the language-model
# networks such runs gain more than larger subtrees
ANNEAL_SHORT = (10, 5)
OBJECTIVE_VERSION = "objective-3"   # einc.planner.objective's ranking of trees, by name: a new one, a new name


@functools.cache
def _libraries() -> tuple[str, ...]:
    """The search's optional libraries installed, looked up once a process: the import
    system's look-ups are most of what a key costs, and every new plan makes one.  A library
    installed while a process runs is named in the next process's keys (any entry holds a
    valid path, whichever search found it: the key decides which searches' paths are read)."""
    return tuple(m for m in ("cotengra", "cotengrust", "kahypar") if _installed(m))


def version(seed: int = SEED) -> str:
    """The search's name and figures, part of a remembered path's key (einc.planner.pathcache)."""
    found = _libraries()
    return ":".join(map(str, (pathcache.VERSION, FRACTION, FLOOR, SMALL, HYPER_FLOOR, QUICK_SHARE, REFINE_SHARE, CAP,
                              MAX_TRIALS, STALE, STALE_GAIN, TRIAL_SECONDS, SUBTREES, GUARD, PER_TENSOR, CONVERGED,
                              RECONF_SECONDS, RECONF_CHUNK, COSTMODS, REPAY, PARTITION, PARTITION_TENSORS,
                              PARTITION_SECONDS, PARTITION_AFFORD, PARTITION_TRIALS, PROBE, KAHYPAR_SPACE,
                              WRITE_FACTOR, HYPER_SHARE, ANNEAL_STEPS, ANNEAL_SWEEPS, ANNEAL_SECONDS, ANNEAL_STALE,
                              ANNEAL_RUNNER_UP, OBJECTIVE_VERSION, slicebudget.figures(), LIMITED_TRIAL_SECONDS,
                              LIMITED_MAX, HYPER_STALE, ANNEAL_SHORT, seed, *found)))


def entry(inputs, output, size_dict, memory_limit=None, seed: int = SEED) -> tuple[str, str]:
    """``(name, version)`` of the network's entry in the path cache: where the search
    remembers its path (and einc.planner.slicecache the slicing of it)."""
    tag = version(seed)
    return pathcache.key(inputs, output, size_dict, memory_limit, tag), tag


def recall(inputs, output, size_dict, memory_limit=None, seed: int = SEED):
    """``(found, name, version)``: ``found`` the ``(path, report)`` of the path an earlier
    search of the network (``inputs`` and ``output`` as sets of int indices) found
    and einc remembered, where its entry is there and well-formed, else None; ``name`` and
    ``version`` the entry's (:func:`entry`), where a search stores its path."""
    t0 = time.perf_counter()
    name, tag = entry(inputs, output, size_dict, memory_limit, seed)
    hit = pathcache.load(name, tag, len(inputs))
    was = None if hit is None else remembered(hit[1], time.perf_counter() - t0)
    return (None if was is None else (hit[0], was)), name, tag


__all__ = ["entry", "recall", "version"]
