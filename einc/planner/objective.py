"""What a contraction path costs as einc's torch executor runs it: the path search's objective.

:func:`seconds` predicts one call of a linear path, step by step (:func:`steps`: pairwise,
as :func:`einc.planner.plan.build_plan` makes them), as the torch executor
(:mod:`einc.runtime.torch_executor`) runs each:

- the step's kind, from its indices: a matrix product (a summed index shared, a kept
  index of one operand's own) at :data:`GEMM` per flop -- more where the product's
  shortest side is short (:data:`SHORT_SIDE`, the shape of the executor's layout model)
  -- plus :data:`PER_MATRIX` per matrix of a batch; a multiply-and-sum (a ``dot`` step,
  or a matrix product with few outputs per batch element:
  :func:`einc.planner.memory.counted_as_mul_sum`, most of which the executor runs faster,
  over blocks of the sum) at :data:`MUL_SUM` per element of the elementwise product; an
  elementwise or outer product costs its result's write;
- the copies it makes of its operands and result (:func:`einc.planner.memory.step_copies`:
  the operands laid out for ``mm``, the elementwise product of a multiply-and-sum, the
  last step's permuted result) at :data:`COPY` per element, and its result written at
  :data:`WRITE` per element; both more (:data:`SHORT_COPY`, :data:`SHORT_WRITE`) over
  the step's typical index size, since short indices make short runs (the executor's
  layout model prices a copy ~1 / run more per element);
- a fixed cost per step, :data:`STEP` (Python dispatch, views, allocation).

The rates are fitted to einc's own contractions on the development CPU (1 thread,
float32; ``python bench/objective.py --fit``: two-operand steps of every kind and random
trees of small networks, non-negative least squares on relative error), so the
prediction is in seconds of that machine.  Plans are made before the device is known and
one plan serves every device: these are the torch executor's figures, as
:mod:`einc.planner.slicecost`'s are.  The objective sees index sets, not layouts: paths
that differ only in the order of the executor's copies score alike.

:func:`sliced_seconds` is the same for a path sliced to a ``memory_limit`` (einc's live
bound, a quick greedy slicing of its own); :func:`least_sliced` ranks candidate paths by
it, so that the search under a limit chooses its tree as it will be sliced, and
:func:`sliced_reconfigured` adds the tree cotengra's slicing reconfiguration makes.
:class:`Shortlist` re-ranks the few best trees by flops of a random greedy search by
:func:`seconds`, and :func:`hyper_objective` is cotengra's objective for the
hyper-optimizer's trials.  Pure: no torch.
"""

from __future__ import annotations

import functools
import math
import random
from collections import namedtuple

from .memory import (
    _lives,
    below_steps,
    counted_as_mul_sum,
    counted_copies,
    hoisting,
    peak_and_excess,
    shared_peaks,
    timeline,
)
from .pathcost import path_cost

# Fitted on the development machine (bench/objective.py --fit; see the module docstring).
GEMM = 6.5e-12          # s per flop (opt_einsum's count) of a matrix product with long sides
SHORT_SIDE = 4          # a matrix side s costs (1 + (SHORT_SIDE / s) ** 2) times the rate
PER_MATRIX = 99e-9      # s per matrix of a batched product
MUL_SUM = 0.32e-9       # s per element of a multiply-and-sum's elementwise product
COPY = 0.069e-9         # s per element an operand or result is copied (memory.step_copies)
SHORT_COPY = 1.98e-9    # ... plus this over the step's typical index size
WRITE = 0.16e-9         # s per element of a step's result
SHORT_WRITE = 2.6e-9    # ... plus this over the step's typical index size
STEP = 23.4e-6          # s: the fixed cost of one step, and of the call's own work
# (a change to the ranking: a new einc.planner.searchkey.OBJECTIVE_VERSION, which remembered paths' key names)

FEATURES = ("gemm", "matrices", "mul_sum", "copies", "short_copies", "written", "short_written", "steps")
RATES = (GEMM, PER_MATRIX, MUL_SUM, COPY, SHORT_COPY, WRITE, SHORT_WRITE, STEP)

SHORTLIST = 4           # trees a random greedy search re-ranks by seconds: the best by flops
WINDOW = 4.0            # ... within this factor of the best flops
TIE = 0.02              # trees predicted within this share of each other are ranked by flops


def _size(term, sizes) -> int:
    return math.prod([sizes[i] for i in term])


def step_features(a, b, kept, sizes, final: bool = False) -> tuple:
    """The :data:`FEATURES` of one step ``a, b -> kept`` (sets of indices): what
    :data:`RATES` weigh.  One walk over the step's indices multiplies out every size it
    needs (a search weighs thousands of steps); its copies are counted by
    :func:`einc.planner.memory.step_copies`' rule (``counted_copies``), but for an
    operand's sum over the indices the other lacks, priced by the elements it reads (the
    operand's) where ``step_copies`` counts those it holds (the sum's)."""
    union = a | b
    na = nb = written = own = terms = batch = rows = cols = 1
    shared = summed_shared = kept_own = holds_a = holds_b = False
    dims = []
    for i in union:
        s = sizes[i]
        if s > 1:
            dims.append(s)
        in_a, in_b = i in a, i in b
        if in_a:
            na *= s
        if in_b:
            nb *= s
        if i in kept:
            written *= s
            if in_a and in_b:
                batch *= s
            else:
                kept_own = True         # a kept index not of both operands
                own *= s
                if in_a:
                    rows *= s
                else:
                    cols *= s
        else:
            holds_a, holds_b = holds_a or in_a, holds_b or in_b
            if in_a and in_b:
                terms *= s
                summed_shared = True
                shared = shared or s != 1
    gemm = matrices = mul_sum = 0
    mul_sum_run = counted_as_mul_sum(own, terms)
    if not shared:
        pass                    # an elementwise or outer product: its result's write
    elif not kept_own or mul_sum_run:    # a dot, or a matrix product priced as multiply-and-sum
        mul_sum = written * terms
    else:
        side = max(min(rows, cols, terms), 1)
        gemm = 2 * batch * rows * cols * terms * (1 + (SHORT_SIDE / side) ** 2)
        matrices = batch if batch > 1 else 0
    if summed_shared and kept_own:        # a matrix product
        copies = counted_copies(na, nb, True, True, True, written * terms if mul_sum_run else 0)
    else:
        copies = counted_copies(na, nb, holds_a, holds_b, False, batch * terms if summed_shared else 0)
    if final:
        copies += written
    # the copies and writes of tensors of short indices move short runs (einc's layout
    # model, runtime/torch_executor/ttgt.py, prices a run of r elements ~1 / r more per
    # element): weighed by one over the step's typical index size
    typical = math.exp(sum(map(math.log, dims)) / len(dims)) if dims else 1.0
    return gemm, matrices, mul_sum, copies, copies / typical, written, written / typical, 1


# one pairwise step (or a reduction: one input) of a path, as einc.planner.memory counts steps:
# value ids (operands 0..n-1, then one per step), index sets, whether it is the last
_Node = namedtuple("_Node", "operands result inputs output summed final")


def steps(inputs, output, path) -> list:
    """The steps einc runs for a linear ``path`` over ``inputs`` (sets of indices): a
    contraction of three or more operands pairwise, left to right, as
    :func:`einc.planner.plan.build_plan` makes it."""
    terms = [frozenset(t) for t in inputs]
    ids = list(range(len(terms)))
    count: dict = {}
    for t in (*terms, frozenset(output)):
        for i in t:
            count[i] = count.get(i, 0) + 1
    found: list = []
    for n, c in enumerate(path):
        if len(c) == 2:         # (most steps: one pair, kept as below with no later operand)
            x, y = (c[0], c[1]) if c[0] < c[1] else (c[1], c[0])
            v, acc, w, t = ids[x], terms[x], ids[y], terms[y]
            del terms[y], ids[y], terms[x], ids[x]
            for i in acc:
                count[i] -= 1
            for i in t:
                count[i] -= 1
            union = acc | t
            kept = frozenset([i for i in union if count[i]])
            value = len(inputs) + len(found)
            found.append(_Node((v, w), value, (acc, t), kept, union - kept, n == len(path) - 1))
            for i in kept:
                count[i] += 1
            terms.append(kept)
            ids.append(value)
            continue
        taken = [(ids[i], terms[i]) for i in sorted(c)]
        for i in sorted(c, reverse=True):
            del terms[i], ids[i]
        for _, t in taken:
            for i in t:
                count[i] -= 1
        last = n == len(path) - 1
        (v, acc), rest = taken[0], taken[1:]
        if not rest:
            rest = [(None, None)]
        for k, (w, t) in enumerate(rest, 1):
            later = frozenset().union(*(u for _, u in rest[k:]))
            union = acc | (t or frozenset())
            kept = frozenset(i for i in union if count[i] or i in later)
            value = len(inputs) + len(found)
            found.append(_Node((v,) if t is None else (v, w), value, (acc,) if t is None else (acc, t), kept,
                               union - kept, last and k == len(rest)))
            v, acc = value, kept
        for i in acc:
            count[i] += 1
        terms.append(acc)
        ids.append(v)
    return found


def node_features(node, sizes) -> tuple:
    """The :data:`FEATURES` of one step of :func:`steps`."""
    if len(node.inputs) == 1:       # a reduction: the operand read (a copy), its result written
        return 0, 0, 0, _size(node.inputs[0], sizes), 0, _size(node.output, sizes), 0, 1
    return step_features(*node.inputs, node.output, sizes, node.final)


def features(inputs, output, sizes, path, memo=None) -> tuple:
    """The :data:`FEATURES` of a linear ``path`` over ``inputs`` (sets of indices), summed
    over its :func:`steps`; ``memo`` (a dict) keeps each step's for other paths of the
    same network (random greedy trees share most of their steps)."""
    if all(len(c) == 2 for c in path):
        found = _pair_features(inputs, output, sizes, path, memo)
        return tuple(map(sum, zip(*found))) if found else (0.0,) * len(FEATURES)
    found = []
    for node in steps(inputs, output, path):
        if memo is None:
            found.append(node_features(node, sizes))
            continue
        key = (node.inputs, node.output, node.final)
        one = memo.get(key)
        if one is None:
            one = memo[key] = node_features(node, sizes)
        found.append(one)
    return tuple(map(sum, zip(*found))) if found else (0.0,) * len(FEATURES)


def seconds_and_cost(inputs, output, sizes, path, memo=None) -> tuple:
    """``(seconds, cost)``: :func:`seconds` of a linear ``path`` and its
    :func:`einc.planner.pathcost.path_cost`, from one walk over a path of pairs (the search
    predicts the time of the trees it ranks, and ranks those it predicts)."""
    if not all(len(c) == 2 for c in path):
        return seconds(inputs, output, sizes, path, memo), path_cost(inputs, output, sizes, path)
    cost = [0, 0, 0, len(path)]
    found = _pair_features(inputs, output, sizes, path, memo, cost)
    return weigh(tuple(map(sum, zip(*found))) if found else (0.0,) * len(FEATURES)), tuple(cost)


def _pair_features(inputs, output, sizes, path, memo, cost=None) -> list:
    """Each step's :data:`FEATURES` of a ``path`` of pairs alone (most are): the walk of
    :func:`steps`, without its nodes, each step looked up in ``memo`` (where given) under
    :func:`features`' key; with ``cost`` (a list ``[0, 0, 0, steps]``), the path's
    :func:`~einc.planner.pathcost.path_cost` added up in it as the walk goes."""
    terms = [frozenset(t) for t in inputs]
    count: dict = {}
    for t in (*terms, frozenset(output)):
        for i in t:
            count[i] = count.get(i, 0) + 1
    found, last = [], len(path) - 1
    size = sizes.__getitem__
    for n, (x, y) in enumerate(path):
        if x > y:
            x, y = y, x
        acc, t = terms[x], terms[y]
        del terms[y], terms[x]
        for i in acc:
            count[i] -= 1
        for i in t:
            count[i] -= 1
        union = acc | t
        kept = frozenset([i for i in union if count[i]])
        if cost is not None:        # (path_cost's count of a pair)
            elems = math.prod(map(size, kept))
            cost[0] += math.prod(map(size, union)) * (1 + (len(kept) < len(union)))
            cost[1] += elems
            cost[2] = max(cost[2], elems)
        if memo is None:
            found.append(step_features(acc, t, kept, sizes, n == last))
        else:
            key = ((acc, t), kept, n == last)
            one = memo.get(key)
            if one is None:
                one = memo[key] = step_features(acc, t, kept, sizes, n == last)
            found.append(one)
        for i in kept:
            count[i] += 1
        terms.append(kept)
    return found


@functools.lru_cache(maxsize=4)
def _memo(key) -> dict:
    return {}


def memo_for(inputs, output, sizes) -> dict:
    """A memo of :func:`features` for the network (the same dict for the same network, for
    the last few networks): a search weighs many trees that share most of their steps."""
    return _memo((tuple(frozenset(t) for t in inputs), frozenset(output), tuple(sorted(sizes.items()))))


def weigh(found, rates=RATES) -> float:
    """Seconds of :data:`FEATURES` ``found`` at ``rates``."""
    return sum(x * r for x, r in zip(found, rates))


def seconds(inputs, output, sizes, path, memo=None) -> float:
    """einc's predicted seconds of one call contracting ``path`` on the torch executor (see
    the module docstring; ``memo``: :func:`features`')."""
    return weigh(features(inputs, output, sizes, path, memo))


def pick(scored):
    """The index of the tree to keep of ``scored`` ``(flops, seconds)`` pairs: the least
    flops, unless another is predicted more than :data:`TIE` faster than the kept one
    (taken in order of flops).  Within a few percent the prediction does not tell trees
    apart -- on small networks the fixed cost per step makes every tree's alike, and what
    differs is layout, which it does not see -- and flops decide."""
    order = sorted(range(len(scored)), key=lambda k: scored[k][0])
    best = order[0]
    for k in order[1:]:
        if scored[k][1] < scored[best][1] * (1 - TIE):
            best = k
    return best


class Shortlist:
    """The few best trees of a random greedy search by flops (:data:`SHORTLIST`, within
    :data:`WINDOW` of the least); :meth:`best` keeps one of them by :func:`pick`: flops
    alone ranks a tree of many small matrix products or copies above a faster one.  The
    trees are weighed once, when the search ends, so that the trials keep their time."""

    def __init__(self, inputs, output, sizes, size: int = SHORTLIST, window: float = WINDOW):
        self.net = (inputs, output, sizes)
        self.size, self.window = size, math.log10(window)
        self.kept: list = []            # (log10 flops, path), least flops first
        self.memo = memo_for(inputs, output, sizes)

    def wants(self, log10_flops: float) -> bool:
        """Whether a tree of ``log10_flops`` would be kept."""
        return not self.kept or (log10_flops <= self.kept[0][0] + self.window and
                                 (len(self.kept) < self.size or log10_flops < self.kept[-1][0]))

    def add(self, log10_flops: float, path) -> None:
        """Offer ``path`` of ``log10_flops``."""
        if not self.wants(log10_flops) or any(p == path for _, p in self.kept):
            return
        kept = sorted([*self.kept, (log10_flops, path)], key=lambda k: k[0])
        self.kept = [k for k in kept[:self.size] if k[0] <= kept[0][0] + self.window]

    def best(self, rank=None):
        """The tree kept (None if none was offered); ``rank(path)``, where given, is its
        :func:`seconds` (the search's, which remembers them for its later looks)."""
        if not self.kept:
            return None
        scored = [(f, rank(p) if rank is not None else seconds(*self.net, p, self.memo)) for f, p in self.kept]
        return self.kept[pick(scored)][1]


def sliced_seconds(inputs, output, sizes, path, limit: int) -> tuple[bool, float]:
    """``(over, seconds)`` of ``path`` sliced to hold at most ``limit`` elements at once
    (einc's live bound, :func:`einc.planner.memory.live_peak`): whether it still holds
    more, and its predicted seconds.  The slicing is a quick greedy one, of one value per
    slice: at each turn the index of the tensors behind the fullest moment that lowers the
    peak most, the cheaper of equals.  einc's slicer (:mod:`einc.planner.slicing`) then
    slices the path chosen by its own rule; this one only ranks paths.  A sliced step
    runs once per slice at its sliced size, a step whose operands hold no sliced index
    once (:func:`einc.planner.memory.hoisting`), and each slice costs :data:`STEP` more
    and, where a summed index is sliced, the write of its part into the result."""
    turns = _slicing(inputs, output, sizes, path, limit)
    while True:
        try:
            next(turns)
        except StopIteration as done:
            return done.value


def _slicing(inputs, output, sizes, path, limit: int, count=None):
    """:func:`sliced_seconds` turn by turn: before each, yields the least cost of the
    slicing so far and of any it may grow to (:func:`_least_cost`); returns ``(over,
    seconds)``.  ``count[0]``, where given, is raised by each live-memory pass the slicing
    weighs (a peak asked, whether or not shared, the moments behind the peak, a cost)."""
    nodes = steps(inputs, output, path)
    inputs = [frozenset(t) for t in inputs]
    sliced: set = set()
    memo, below = {}, below_steps(nodes, inputs)      # (many slicings of one path are weighed)
    shared = shared_peaks(inputs, output, sizes, path, limit)     # (and the slicer weighs them again)
    count = [0] if count is None else count

    def peak_of(cut):
        count[0] += 1
        key = frozenset(cut)
        found = shared.get(key)
        if found is None:
            found = shared[key] = peak_and_excess(nodes, _cut(sizes, cut), len(inputs), inputs, key, limit, memo,
                                                  below)
        return found[0]

    def cost_of(cut):
        count[0] += 1
        return _sliced_cost(nodes, inputs, output, sizes, cut)
    peak = peak_of(sliced)
    while peak > limit:
        yield _least_cost(below, sizes, sliced)
        count[0] += 1
        behind = _behind(nodes, inputs, sizes, sliced, limit, memo, below)
        tried = sorted((peak_of(sliced | {i}), repr(i), i) for i in behind - sliced if sizes[i] > 1)
        if not tried or tried[0][0] >= peak:
            break               # nothing lowers it: the limit cannot be met on this path
        meeting = [t for t in tried if t[0] <= limit]
        peak, _, i = min(meeting, key=lambda t: cost_of(sliced | {t[2]})) if meeting else tried[0]
        sliced.add(i)
    return peak > limit, cost_of(sliced)


def _least_cost(below, sizes, sliced) -> float:
    """A bound under :func:`_sliced_cost` of ``sliced`` and of every slicing that slices
    more: :data:`STEP` for each step run once, for each step run per slice, and for each
    slice (every step's features weigh at least that much; slicing more only adds slices
    and takes steps out of the hoisted ones).  ``below``: :func:`~einc.planner.memory.below_steps`."""
    if not sliced:
        return STEP * len(below)
    per = sum(1 for b in below if not sliced.isdisjoint(b))
    return STEP * (len(below) - per + math.prod(sizes[i] for i in sliced) * (per + 1))


def _cut(sizes, sliced):
    return {i: 1 if i in sliced else d for i, d in sizes.items()} if sliced else sizes


def _behind(nodes, inputs, sizes, sliced, limit, memo=None, below=None):
    """The indices of the tensors alive at the moments over ``limit`` (as
    :func:`einc.planner.memory.live_peak` counts them)."""
    order, roots = hoisting(nodes, inputs, len(inputs), tuple(sliced), below)
    finals = set(roots) | ({order[-1].result} if order else set())
    terms = [*inputs, *(n.output for n in nodes)]
    values = set()
    for _, alive in _lives(timeline(order, len(inputs), memo).values(), _cut(sizes, sliced), tuple(sliced), limit,
                           memo, finals, set(roots)):
        values.update(alive)
    return set().union(*(terms[v] for v in values))


def _sliced_cost(nodes, inputs, output, sizes, sliced):
    count = math.prod(sizes[i] for i in sliced)
    cut = _cut(sizes, sliced)
    invariant = [not sliced & t for t in inputs]
    total = 0.0
    for node in nodes:
        invariant.append(all(invariant[v] for v in node.operands))
        if invariant[-1]:
            total += weigh(node_features(node, sizes))
        else:
            total += count * weigh(node_features(node, cut))
    if sliced:
        total += count * (STEP + (WRITE * _size(output, cut) if sliced - set(output) else 0.0))
    return total


def least_sliced(paths, inputs, output, sizes, limit: int):
    """The first of ``paths`` estimated fastest once sliced to ``limit`` (:func:`sliced_seconds`;
    one that cannot meet the limit last): :func:`ranked_sliced` with no bound on its passes."""
    return ranked_sliced(paths, inputs, output, sizes, limit)[0]


def ranked_sliced(paths, inputs, output, sizes, limit: int, most: float = math.inf):
    """``(path, passes, ranked, why)``: of ``paths`` (the likeliest first), the one
    estimated fastest once sliced to ``limit`` (:func:`sliced_seconds`; one that cannot
    meet the limit last, ties to the first), the live-memory passes weighed, the paths
    ranked, and why the ranking stopped.  Each path's slicing runs turn by turn and stops
    where its bound (:func:`_least_cost`) passes the fastest slicing found that meets the
    limit: a path so stopped is slower whatever it would slice further, so with every path
    ranked the choice is the one of slicing them all to the end.  The ranking stops once
    ``most`` passes are spent, between turns: a path it leaves half sliced is not kept,
    and where none was ranked to its end, the first is (einc's slicer then compares it
    with the unlimited path)."""
    unique = list(dict.fromkeys(tuple(map(tuple, p)) for p in paths))
    count, best, why = [0], None, f"every tree ranked ({len(unique)})"
    for k, path in enumerate(unique):
        turns = _slicing(inputs, output, sizes, path, limit, count)
        try:
            while True:
                bound = next(turns)
                if best is not None and not best[0] and bound > best[1]:
                    break           # bound to be slower than the fastest found
                if count[0] >= most:
                    return unique[best[2] if best else 0], count[0], k, \
                        f"its share spent in tree {k + 1} of {len(unique)}" + ("" if best else ", the first kept")
        except StopIteration as done:
            if best is None or (*done.value, k) < best:
                best = (*done.value, k)
        if k + 1 < len(unique) and count[0] >= most:
            return unique[best[2]], count[0], k + 1, f"its share spent after {k + 1} of {len(unique)} trees"
    return unique[best[2]], count[0], len(unique), why


def sliced_reconfigured(ctg, net, path, limit: int, factor: float, most: float = math.inf,
                        ended=lambda: False) -> tuple[list, int, str]:
    """``(paths, rounds, what ran)``: ``path`` as cotengra's slicing reconfiguration leaves
    it (its ``slice_and_reconfigure``, round by round: indices sliced, then subtrees of the
    tree reconfigured for the sliced costs), unsliced, for each of two targets: a quarter
    of ``limit``, then ``limit`` (cotengra bounds each intermediate alone, einc what is alive at
    once, copies included); the rounds run.  ``net`` is ``(inputs, output, sizes)`` with
    one-character labels (cotengra's).  At most ``most`` rounds in all: a target whose
    rounds (:func:`einc.planner.slicebudget.rounds`) do not fit what is left is not begun;
    once ``ended()`` (the guard, einc.planner.slicebudget) no round is, and a target so
    stopped is kept as it is."""
    from cotengra.scoring import get_score_fn

    from .slicebudget import rounds
    found, ran, done, state = [], [], 0, random.getstate()
    minimize = get_score_fn(f"combo-{factor:g}")
    for target in (max(limit // 4, 2), max(limit, 2)):     # (the quarter's tree is the faster more often)
        random.seed(target)         # cotengra's slicer draws from Python's random numbers: the same path each time
        try:
            tree = ctg.ContractionTree.from_path(*net, path=path)
            if done + rounds(tree.max_size(), target) > most:
                ran.append(f"target {target} not begun ({rounds(tree.max_size(), target)} rounds)")
                continue
            began = done
            while tree.max_size() > target and done < most and not ended():
                tree.slice_(temperature=0.01, target_slices=2, minimize=minimize, allow_outer=True, max_repeats=16)
                tree.subtree_reconfigure_(subtree_size=6, minimize=minimize)
                done += 1
            tree.unslice_all_()
            ran.append(f"target {target}: {done - began} round" + ("s" if done - began != 1 else ""))
        except (ValueError, KeyError, IndexError, RuntimeError):    # a path cotengra does not take as a tree
            continue
        finally:
            random.setstate(state)
        found.append(tuple(tuple(int(i) for i in c) for c in tree.get_path()))
    return found, done, ", ".join(ran)


def hyper_objective(memory_limit, factor: float):
    """What cotengra's hyper-optimizer minimizes: without a limit, :func:`seconds` of each
    trial's tree (an objective whose local costs, for subtree reconfiguration, stay
    cotengra's ``combo`` of flops and ``factor`` times each written element, in the
    units its dynamic programming needs); with one, ``combo`` (its trees are sliced)."""
    if memory_limit is not None:
        return f"combo-{factor:g}"
    return _seconds_objective()(factor)


@functools.lru_cache(maxsize=1)
def _seconds_objective():
    from cotengra.scoring import ComboObjective

    class Seconds(ComboObjective):
        __slots__ = ()

        def __repr__(self):         # cotengra's names only the class's own slots (none)
            return f"einc.Seconds(factor={self.factor})"

        def __call__(self, trial):
            tree = trial["tree"]
            path = tuple(tuple(int(i) for i in c) for c in tree.get_path())
            found = seconds([frozenset(t) for t in tree.inputs], frozenset(tree.output), tree.size_dict, path)
            return math.log2(1 + found * 1e9)      # nanoseconds, positive as cotengra's scores are

    return Seconds
