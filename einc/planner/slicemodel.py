"""How einc's slicer weighs the slicings of one path (:class:`_Model`): the moments of a
slice against ``memory_limit`` and the estimated cost of a call, each slicing weighed once;
:mod:`einc.planner.slicing` chooses among them."""

from __future__ import annotations

import copy
import math
import operator

from . import slicecost
from .memory import _lives, below_steps, hoisting, moments, shared_peaks, step_copies, timeline
from .plan import Plan, flop_count

LIVE, INTERMEDIATE = "live", "intermediate"       # what memory_limit bounds (Slicing.bound)
COST_PASS = 0.2     # a slicing's cost (a sum over the steps) weighed as this share of a live-memory pass
FLOOR_STEP = 3.0    # a step's own moment weighed or read back as this many steps of a live-memory pass


class _Model:
    """The slicings of one ``base`` plan weighed: for ``chunks`` (index -> values per
    slice), the moments of a slice against the bound (:meth:`peak`) and the estimated cost
    of a call (:meth:`cost`, :mod:`einc.planner.slicecost`)."""

    def __init__(self, base: Plan, bound: str, adds: bool = True, count=None):
        self.base, self.bound, self.adds = base, bound, adds
        self.count = [0] if count is None else count   # live-memory passes: a peak or cost weighed, the moments behind
        self.steps, self.full, self.n = base.steps, base.graph.sizes, base.num_operands
        self.inputs = base.graph.inputs
        # indices one operand alone holds, summed: never sliced (see :func:`lone_sums`)
        self.lone = lone_sums(base.graph.inputs, base.graph.output)
        self.seen = [frozenset().union(*step.inputs) for step in self.steps]
        self.indices = list(self.inputs) + [step.output for step in self.steps]      # by value id
        self._peaks, self._costs = {}, {}
        self._hoisted, self._steps = {}, {}     # hoisting per sliced set; _lives' memo of steps
        self._timeline = timeline(self.steps, self.n, self._steps)
        # the indices of the operands below each step (a step runs once per call where none
        # of these is sliced), and per step what :meth:`_cost` reads: those, its own
        # indices, its summed ones, its flops over a full slice with its summed indices
        # summed in it or not, and in all
        self._below = below_steps(self.steps, self.inputs)
        self._rows = [(below, seen, frozenset(step.summed),
                       tuple(flop_count(seen, summed, len(step.inputs), self.full) for summed in (False, True)),
                       step.flops) for below, seen, step in zip(self._below, self.seen, self.steps)]
        self._limits = {}       # the memo shared with the search's ranking, per limit
        # (for floors) each step's own indices read at once, and the memos of the steps' own
        # moments and of the floors
        self._own, self._locals, self._floors = [], {}, {}
        self._without = None    # the second guide (without_adds)
        self.met = 0            # the most halvings a cut of this path met (einc.planner.slicing._weigh)
        for step in self.steps:
            own = sorted(set(step.output).union(*step.inputs))
            self._own.append((operator.itemgetter(*own) if own else (lambda _: ()), frozenset(own)))

    def without_adds(self) -> _Model:
        """The same slicings, their cost without the adds into the accumulator (the moments,
        the same, are shared): a second guide for :func:`_cut`, whose greedy cuts the adds
        may steer away from a cheaper mix of summed and kept indices."""
        if self._without is None:
            other = copy.copy(self)     # (its memos, count and figures shared: all but the costs)
            other.adds, other._costs = False, {}
            self._without = other
        return self._without

    def _moments(self, chunks, over=None):
        """Per moment of one (full) slice: ``(elements, the values behind them)``, the
        values only for the moments over ``over``; without ``over``, the elements alone."""
        sizes = list(self.full)
        for i, c in chunks.items():
            sizes[i] = c
        sliced = frozenset(chunks)
        hoisted = self._hoisted.get(sliced)
        if hoisted is None:     # it depends on which indices are sliced, not on their chunks
            order, roots = hoisting(self.steps, self.inputs, self.n, sliced, self._below)
            hoisted = self._hoisted[sliced] = (order, [self._timeline[step.result] for step in order],
                                               set(roots) | ({order[-1].result} if order else set()), set(roots))
        order, steps, finals, roots = hoisted
        if self.bound == INTERMEDIATE:       # each intermediate alone (opt_einsum's bound)
            found = [math.prod([sizes[i] for i in step.output]) for step in order]
            return found if over is None else [(n, (step.result,)) for n, step in zip(found, order)]
        dropped = [i for i, c in chunks.items() if c == 1]
        if over is None:
            return moments(steps, sizes, dropped, self._steps, finals, roots)
        return list(_lives(steps, sizes, dropped, over, self._steps, finals, roots))

    def peak(self, chunks, limit):
        """``(peak, excess)``: the most held at once, and the sum of what each moment holds
        beyond ``limit`` (remembered per slicing: the passes of :func:`_choose` weigh many
        slicings more than once; those of one value per slice of each index under the live
        bound also shared with the search's ranking, :func:`einc.planner.memory.shared_peaks`)."""
        key = (frozenset(chunks.items()), limit)
        found = self._peaks.get(key)
        if found is None:
            self.count[0] += 1      # (counted whether or not the search weighed it: the same count either way)
            shared = self._shared(limit) if self.bound == LIVE and max(chunks.values(), default=1) == 1 else None
            found = shared.get(frozenset(chunks)) if shared is not None else None
            if found is None:
                totals = self._moments(chunks)
                found = max(totals, default=0), sum(total - limit for total in totals if total > limit)
                if shared is not None:
                    shared[frozenset(chunks)] = found
            self._peaks[key] = found
        return found

    def floors(self, chunks, candidates) -> dict:
        """Per index of ``candidates``, a bound under the live peak of ``chunks`` with that
        index's chunk halved (as :func:`einc.planner.slicing._cut` halves it), whatever steps
        that slicing hoists: the fullest own moment (:meth:`_local`) of the steps that do
        not hold the index, which the halving leaves as they are: one sort of the steps
        gives every halving's (the steps that hold it, weighed at its halved chunk, would
        bound it closer but cost more passes than they save where many halvings tie)."""
        found = self._floors.setdefault(frozenset(chunks.items()), {})
        if any(i not in found for i in candidates):
            sizes, flags = self._sized(chunks)
            here = [self._local(k, sizes, flags) for k in range(len(self.steps))]
            fullest = sorted(range(len(here)), key=here.__getitem__, reverse=True)
            for i in candidates:
                if i not in found:
                    found[i] = next((here[k] for k in fullest if i not in self._own[k][1]), 0)
        return found

    def _sized(self, chunks):
        """The sizes of one slice of ``chunks``, and which indices it takes one value at a time."""
        flags = [False] * len(self.full)
        for i, c in chunks.items():
            flags[i] = c == 1
        return [chunks.get(i, d) for i, d in enumerate(self.full)], flags

    def _local(self, k, sizes, flags) -> int:
        """Step ``k``'s own moment at ``sizes`` (``flags``: the indices taken one value at a
        time): its operands that are intermediates, its output and its copies (an entry's
        last copy counted for the plan's last step only), all alive while it runs, so
        under every moment of it whatever is alive beside them.  Weighed once for each
        sizes of its own indices; counted, weighed anew or read back with the key made
        for it, as :data:`FLOOR_STEP` steps of a pass."""
        self.count[0] += FLOOR_STEP / len(self.steps)
        own, indices = self._own[k]
        key = (k, own(sizes), own(flags))
        found = self._locals.get(key)
        if found is None:
            step, n = self.steps[k], self.n
            found = self._locals[key] = math.prod([sizes[i] for i in step.output]) + \
                step_copies(step, sizes, k == len(self.steps) - 1, {i for i in indices if flags[i]}) + \
                sum(math.prod([sizes[i] for i in self.indices[v]]) for v in step.operands if v >= n)
        return found

    def _shared(self, limit) -> dict:
        found = self._limits.get(limit)     # (its key is the whole network's: made once per limit)
        if found is None:
            graph = self.base.graph
            found = self._limits[limit] = shared_peaks(graph.inputs, graph.output, graph.sizes, self.base.path, limit)
        return found

    def behind(self, chunks, limit) -> set:
        """The values behind the moments of a slice over ``limit``."""
        self.count[0] += 1
        return {v for total, alive in self._moments(chunks, limit) if total > limit for v in alive}

    def cost(self, chunks):
        """``(flops, seconds, fixed seconds, steps once, steps per slice)`` of one call: the
        flops over every slice (a step runs once per slice; the steps holding no sliced
        index once per call), the estimated time and the per-slice fixed cost within it."""
        key = frozenset(chunks.items())
        found = self._costs.get(key)
        if found is None:
            self.count[0] += COST_PASS
            found = self._costs[key] = self._cost(chunks)
        return found

    def _cost(self, chunks):
        counts = [1] * len(self.full)       # the slices over each index
        for i, c in chunks.items():
            counts[i] = -(-self.full[i] // c)
        sliced = set(chunks)
        dropped = {i for i, c in chunks.items() if c == 1}
        slices = math.prod(counts)
        held = counts.__getitem__
        flops = once = 0
        for below, seen, summed, pair, whole in self._rows:
            if sliced.isdisjoint(below):
                once += 1
                flops += whole
            else:       # over the slices of the sliced indices the step does not hold
                flops += pair[not dropped.issuperset(summed)] * (slices // math.prod(map(held, seen)))
        if self.adds and sliced.difference(self.base.graph.output):
            # a sliced index is summed: each slice's result is added into the accumulator (the
            # sums a step leaves to the slicing, one value at a time, are these adds)
            flops += slices * math.prod(chunks.get(i, self.full[i]) for i in self.base.graph.output)
        per = len(self._rows) - once
        total, fixed = slicecost.seconds(flops, once, slices, per)
        return flops, total, fixed, once, per


def lone_sums(inputs, output) -> frozenset:
    """The indices summed in one operand alone.  The executors sum such an index in its
    operand before any product, as torch.einsum does, so an inf there meets the other
    operands' zeros only through the whole sum (``i,j->i``: ``inf * sum(b)``); a slice of
    it would multiply before summing (``inf * 0`` in one slice: NaN where the sum is not
    0), and it slices no intermediate away that slicing the operand's other indices
    would not."""
    counts: dict = {}
    for term in inputs:
        for i in set(term):
            counts[i] = counts.get(i, 0) + 1
    return frozenset([i for i, c in counts.items() if c == 1 and i not in output])


__all__ = ["COST_PASS", "FLOOR_STEP", "INTERMEDIATE", "LIVE", "lone_sums"]
