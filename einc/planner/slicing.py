"""Sliced plans: ``memory_limit`` honoured by cutting indices, one slice at a time.

When the contraction order would hold more than ``memory_limit`` elements at once (see
below), the plan *slices* indices: each sliced index is cut into chunks of ``c`` values
(``c = 1``: one value, the index leaves the slice's equation), every operand is viewed
at the slice's chunk (``select`` or ``narrow``, no copy), the smaller contraction that
is left runs with one cached plan (its own key in the plan cache, so the same kernels
serve every slice; a last, shorter chunk has its own), and the slice's result is added
into the result (a sliced output index selects where it goes instead).

What ``memory_limit`` bounds: what one slice holds at once -- its intermediates alive
together and the copies a step makes inside itself.  The plan's steps run in order and
each intermediate lives from the step that makes it until the step that consumes it (the
executors delete it then), so while a step runs, its inputs, its output and the pending
results of other branches all hold memory, and so do the step's own temporaries
(:func:`step_copies`, the torch executor's; the Triton executor makes none): a copy of
each input of a matrix product, laid out for ``mm`` (a slice of an operand is a strided
view, often copied), the elementwise product of a ``dot`` step, and the last step's
result permuted into a contiguous copy.  The most elements held at once over the slice
(:func:`live_peak`, the slice's part of the result included) is what must fit in the
limit -- and with it every single intermediate.  Not counted: the operands (each slice
views them), the full result, which cannot be sliced away (it is allocated once, in a
float32 accumulator for float16 / bfloat16 results where a sliced index is summed,
complex64 for complex32), what autograd saves for the backward when a gradient will be
taken, and the second copy of an input converted for a matrix product (bool -> int64, a
narrow integer -> int64, a 16-bit float -> float32 in a slice: runtime/sliced.py), the
conversion counted in elements as the step's copy of it.  A limit smaller than what must be alive together
with each index behind the peak sliced to one element cannot be met: slicing stops there,
and ``explain`` shows the peak that remains.

Two kinds of bound (``Slicing.bound``): a number is the *live* bound above; ``"max_input"``
has opt_einsum's meaning, each intermediate alone at most the largest operand or the
output (no copies, nothing summed over what is alive together): a path that keeps to it runs
unsliced, else the slicing meets that per-intermediate bound.

Who chooses what to slice:

- cotengra (``optimize="cotengra"`` or a cotengra optimizer, e.g. ``HyperOptimizer``):
  its path and its own slicing (``slicing_opts`` / ``ContractionTree.slice``);
- otherwise einc's rule, by cost: the path einc's optimizer finds under the limit if it
  fits, else that path and the unlimited one (only the first where the search under the
  limit reached cotengra's hyper-optimizer), each sliced by :func:`_choose` -- chunks
  halved where they are behind a moment over the limit, then widened back to the largest
  that fits, the slicing estimated fastest (:mod:`einc.planner.slicecost`: the flops of every
  slice, with the adds of each slice's result where a summed index is sliced, plus a fixed
  cost per step of a slice) kept; the faster of the two paths wins.  Past 16 operands,
  with einc's default search, the slicer has its share of the search's budget
  (:mod:`einc.planner.slicebudget`), and its choice is kept on disk beside the search's
  path and read back by the next process (:mod:`einc.planner.slicecache`).

Either way einc checks the result against the bound and, where it is exceeded (a
cotengra slicing bounds each intermediate alone, without copies), slices more by its own
rule.  A slicing estimated at far more than the unsliced contraction is refused when its
entry is built (:func:`check_cost`).
Planning only (pure: no torch): :class:`einc.runtime.sliced.Runner` runs a sliced plan, or a
range of its slices (:mod:`einc.distributed` spreads the ranges over ranks).  Steps whose
operands hold no sliced index run once per call, before the slice loop (:func:`hoisting`);
their results stay alive through every slice, and the live bound counts them so.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass

from ..errors import MemoryLimitError
from . import slicecost
from .cotengrapath import cotengra_path
from .equation import text_of
from .graph import ContractionGraph
from .memory import (
    COPY_WORTH_SPARING,
    FEW_OUTPUTS,
    LONG_SUM,
    hoisting,
    live_peak,
    step_copies,
)
from .options import AUTO, COTENGRA, DP_OPERANDS, Options, callers_optimizer
from .plan import Plan, Step, _path, build_plan, max_input, naive_flops
from .slicemodel import COST_PASS, INTERMEDIATE, LIVE, _Model, lone_sums


@dataclass(frozen=True)
class Slicing:
    """How a plan is sliced: the graph ``indices`` cut per slice (outermost first), their
    full ``sizes`` and ``chunks`` (how many values of each index one slice takes: 1, the
    index is fixed and leaves the slice's equation; more, the slice holds that many
    values, the last chunk of an index maybe fewer); ``inner`` is what one full slice
    runs (the same path, the chunked sizes); ``text`` its equation in letters.
    ``bound``: what ``memory_limit`` bounds, ``"live"`` (einc's: what is alive at once,
    step copies included) or ``"intermediate"`` (``"max_input"``, opt_einsum's: each
    intermediate alone).  ``seconds``, ``overhead_seconds`` and ``unsliced_seconds`` are
    :mod:`einc.planner.slicecost`'s estimates: one call, the per-slice fixed cost within it, and
    the same path unsliced."""

    indices: tuple[int, ...]
    sizes: tuple[int, ...]
    num_slices: int
    memory_limit: int | None
    unsliced_flops: int         # the same path without slicing
    unsliced_largest: int
    inner: Plan
    text: str
    planner: str                # "einc", "cotengra", or "cotengra and einc": who chose the sliced indices
    live: int = 0               # the most elements alive at once in one slice: intermediates and step copies
    unsliced_live: int = 0      # the same, for the path unsliced
    chunks: tuple[int, ...] = ()
    bound: str = "live"
    flops: int = 0              # over all slices, the steps run once included
    seconds: float = 0.0
    overhead_seconds: float = 0.0
    unsliced_seconds: float = 0.0
    once_steps: int = 0         # steps run once per call (they hold no sliced index)
    slice_steps: int = 0        # steps run per slice

    def estimate(self, executor: str = slicecost.PLANNING) -> tuple[float, float, float]:
        """``(seconds, overhead_seconds, unsliced_seconds)`` with ``executor``'s figures."""
        total, fixed = slicecost.seconds(self.flops, self.once_steps, self.num_slices, self.slice_steps, executor)
        return total, fixed, slicecost.seconds(self.unsliced_flops, self.once_steps + self.slice_steps, 0, 0,
                                               executor)[0]

    @property
    def overhead(self) -> float:
        """Total flops over all slices / the unsliced flops of the same path."""
        return self.flops / self.unsliced_flops if self.unsliced_flops else 1.0

    @property
    def counts(self) -> tuple[int, ...]:
        """How many chunks each sliced index is cut into."""
        return tuple(-(-d // c) for d, c in zip(self.sizes, self.chunks))

    def windows(self, s: int) -> tuple[tuple[int, int], ...]:
        """``(start, length)`` of each sliced index in slice ``s`` (the last index varies fastest)."""
        out = []
        for size, chunk, count in zip(reversed(self.sizes), reversed(self.chunks), reversed(self.counts)):
            s, k = divmod(s, count)
            out.append((k * chunk, min(chunk, size - k * chunk)))
        return tuple(reversed(out))


# ----------------------------------------------------------------------- planning

def is_cotengra(optimize) -> bool:
    """Whether ``optimize`` asks cotengra to plan (its name, or one of its optimizers)."""
    return (isinstance(optimize, str) and optimize == COTENGRA) or \
        type(optimize).__module__.split(".")[0] == "cotengra"


def memory_limit_of(graph: ContractionGraph, memory_limit) -> int | None:
    """The limit in elements (``"max_input"``: opt_einsum's, :func:`~einc.planner.plan.max_input`)."""
    if memory_limit == "max_input":
        return max_input(graph)
    return memory_limit                 # (checked by Options: None, or at least 1)




def plan(graph: ContractionGraph, equation: str, options: Options) -> Plan:
    """The plan for ``graph``: :func:`~einc.planner.plan.build_plan`'s where no limit applies and
    cotengra is not asked, else a plan sliced as needed (see the module docstring)."""
    limit = memory_limit_of(graph, options.memory_limit)
    bound = INTERMEDIATE if options.memory_limit == "max_input" else LIVE
    cotengra = is_cotengra(options.optimize)
    if limit is None and not cotengra:
        return build_plan(graph, equation, options)
    if 0 in graph.sizes:
        # The result is empty, or zeros (a sum over nothing): the caller's order (einc's for
        # cotengra) with no limit, which weighs the empty index as 1 (plan._path) and so
        # meets it early; left to right built ij,jk -> ik before the empty kl in ij,jk,kl->il.
        # (a caller's optimizer is still handed the limit, as opt_einsum hands it)
        handed = options.memory_limit if _callers(options) else None
        return build_plan(graph, equation, Options.of(AUTO if cotengra else options.optimize, handed, options.select))
    unlimited = Options.of(options.optimize, None, options.select)
    began = time.perf_counter()
    if cotengra:
        return _cotengra_plan(graph, equation, options, limit, bound)
    # einc's search keeps its path on disk, and the slicing of it with it (remembered only
    # where the path does not fit unsliced)
    remembers = options.optimize == AUTO and graph.num_operands > DP_OPERANDS
    if remembers and (found := _recalled(graph, equation, options, unlimited, limit, bound)) is not None:
        return found
    candidates, models = [], []         # the paths to slice, and each one's model (one each)
    try:
        within = build_plan(graph, equation, options)
    except (RuntimeError, ValueError):      # opt_einsum's dp: no path under the limit
        within = None
    if within is not None:
        models.append(_Model(within, bound))
        if models[0].peak({}, limit)[0] <= limit:
            return within
        candidates.append(within)
    # the path of the search without the limit, sliced by einc, unless the search under it
    # reached the hyper-optimizer, which ranks its trees as cotengra slices them: beside
    # those, a second search of up to the same budget doubled the planning for paths that
    # lost (docs/paths.md#memory_limit). A path given, or a caller's optimizer (asked once,
    # with the limit, as opt_einsum asks it), is sliced as it is.
    hyper = remembers and _hyper(graph)
    if (not (isinstance(options.optimize, tuple) or _callers(options)) or within is None) and not (
            hyper and within is not None):
        other = build_plan(graph, equation, unlimited)
        if within is None or other.path != within.path:
            candidates.append(other)
            models.append(_Model(other, bound))
    t0 = time.perf_counter()
    # (with einc's search: its budget's; past the hyper floor on the clock too, from ``began``)
    share = _share(graph, candidates[0], began if hyper else None) if remembers else None
    if share is not None:
        for model in models:
            model.count = share.count
    chosen = [None] * len(models)
    # the cuts by peak of every path before the cuts by cost: under a share, each path is
    # weighed by its cheaper cuts before one is by its dearer ones
    for rules in ((_BY_PEAK,), (_BY_COST,)):
        for k, model in enumerate(models):
            chosen[k] = _weigh(model, limit, (), share, rules, chosen[k], models[0].met)
    best, weighed = None, 0
    for base, model, found in zip(candidates, models, chosen):
        if found is None:
            continue
        chunks = found[1]
        p = sliced_plan(graph, equation, base, tuple(chunks), limit, "einc", tuple(chunks.values()), bound,
                        model=model)
        weighed += 1
        key = (_peak(p) > limit, p.slicing.seconds, p.flops)
        if best is None or key < best[0]:
            best = key, p
    if remembers and _peak(best[1]) <= limit:
        _remember(graph, limit, bound, best[1], within, time.perf_counter() - t0)
    if share is not None:
        return dataclasses.replace(best[1], notes=best[1].notes + (share.text(len(candidates), weighed, _RULES),))
    return best[1]


def _cotengra_plan(graph, equation: str, options: Options, limit, bound) -> Plan:
    """The plan of cotengra's optimizer: its path, sliced as it slices, by einc too past ``limit``."""
    path, theirs = cotengra_path(graph, options.optimize, limit)
    theirs = [i for i in theirs if i not in lone_sums(graph.inputs, graph.output)]     # (summed first)
    base = build_plan(graph, equation, Options.of(path, None, options.select))
    base = dataclasses.replace(base, optimizer=options.name)
    chunks = dict.fromkeys(theirs, 1)
    if limit is not None:
        chunks = _choose(_Model(base, bound), limit, theirs)
    planner = "cotengra" if set(chunks) == set(theirs) else "cotengra and einc"     # einc sliced more
    return sliced_plan(graph, equation, base, tuple(chunks), limit, planner, tuple(chunks.values()),
                       bound) if chunks else base


def _callers(options: Options) -> bool:
    """Whether ``options`` run a caller's optimizer (a ``PathOptimizer``, a function, or one
    registered by name: :func:`~einc.planner.options.callers_optimizer`)."""
    return callers_optimizer(options.optimize)


def _hyper(graph) -> bool:
    from . import search  # (only where einc's search runs)
    return search.slices_its_trees(graph.inputs, graph.output, dict(enumerate(graph.sizes)))


def _share(graph, base: Plan, start: float | None = None):
    """The slicer's share of the budget of planning ``graph`` under a limit
    (:mod:`einc.planner.slicebudget`), its passes counted over ``base``'s steps, guarded as the counted
    search is; where ``start`` (the clock when planning began) is given, within the budget on the clock too."""
    from . import search, slicebudget  # (only where einc's search runs)
    budget = search.sliced_budget(graph.inputs, graph.output, dict(enumerate(graph.sizes)))
    return slicebudget.Slicer(budget, len(base.steps), None if start is None else start + budget, search.counted_ends())


def _recalled(graph, equation, options, unlimited, limit, bound) -> Plan | None:
    """The sliced plan of the slicing remembered for ``graph`` (:mod:`einc.planner.slicecache`)
    where it is there, checks, keeps to ``limit`` and passes the cost check; else None (the
    slicer chooses).  Of a
    pairwise path only the slice's plan is built, the path's figures read with it."""
    from . import slicecache  # (with the path cache: only where einc's search runs)
    memo, searched = slicecache.recall(graph, limit, bound)
    if memo is None or not lone_sums(graph.inputs, graph.output).isdisjoint(memo.indices):
        return None         # (an older einc's slicing of an index it now sums first: chosen anew)
    chosen = options if memo.base == slicecache.LIMITED else unlimited
    path, notes = (searched[0], (searched[1].text(),)) if chosen is options and searched is not None else \
        _path(graph, chosen)
    if path != memo.path:
        return None
    flops, largest, unsliced_live, *cost = memo.figures
    base, known = Plan(graph, equation or str(graph), chosen.name, path, (), naive_flops(graph), flops, largest,
                       notes=notes), (unsliced_live, *cost)
    if any(len(c) != 2 for c in path):      # a step over more operands: the pairs its plan makes
        base, known = dataclasses.replace(build_plan(graph, equation, Options.of(path)), optimizer=chosen.name,
                                          notes=notes), None
    p = sliced_plan(graph, equation, base, memo.indices, limit, "einc", memo.chunks, bound, known)
    # a slicing the cost check would refuse, unless refused when chosen: then choosing again
    # would choose it again
    if _peak(p) > limit or (not memo.refused and slicecost.refusal(p.slicing) is not None):
        return None
    return dataclasses.replace(p, notes=p.notes + ("Slicer: remembered, the slicing an earlier plan chose "
                                                   "(einc.planner.slicecache)",))


def _remember(graph, limit, bound, p: Plan, within: Plan | None, seconds: float) -> None:
    """Keep the slicing of ``p``, chosen in ``seconds``, beside the search's path on disk."""
    from . import slicecache
    if seconds >= slicecache.STORE_SECONDS:
        base = slicecache.LIMITED if within is not None and p.path == within.path else slicecache.UNLIMITED
        slicecache.remember(graph, limit, bound, slicecache.of(base, p))


def _peak(p: Plan) -> int:
    """What ``memory_limit`` bounds in sliced plan ``p``."""
    s = p.slicing
    return s.live if s.bound == LIVE else p.largest_intermediate


def check_cost(plan: Plan, world: int = 1, executor: str = slicecost.PLANNING) -> None:
    """Raise :class:`~einc.errors.MemoryLimitError` where ``plan``'s slicing costs too
    much on ``executor`` (:func:`einc.planner.slicecost.refusal`), naming the limit
    :func:`suggest_limit` finds; ``world`` ranks share the slices (:mod:`einc.distributed`)."""
    s = plan.slicing
    if s is None or world > 1 and s.estimate(executor)[0] / world <= slicecost.FLOOR_SECONDS:
        return
    sentence = slicecost.refusal(s, executor)
    if sentence is None:
        return
    limit = suggest_limit(plan, executor)
    whole = " (what this path holds unsliced: every slicing of it is estimated above that)" \
        if limit >= s.unsliced_live else ""
    raise MemoryLimitError(
        f"einsum(): {sentence}. On this path the smallest limit (a power of two) estimated within "
        f"{slicecost.WITHIN:g}x of the unsliced time is memory_limit={limit}{whole}; pass that or more, "
        "or set EINC_SLICE_OVERHEAD=off to run this "
        f"slicing anyway (einc.explain shows the plan)\n  {plan.equation}")


def suggest_limit(plan: Plan, executor: str = slicecost.PLANNING) -> int:
    """The smallest limit in einc's own (live) bound -- a power of two, or what ``plan``'s
    path holds unsliced -- at which that path, sliced by einc's rule, is estimated within
    :data:`einc.planner.slicecost.WITHIN` times its unsliced time on ``executor``: a bisection
    over the powers of two between ``plan``'s limit and that unsliced peak.  The path is
    ``plan``'s own, so no path search runs again."""
    s = plan.slicing
    estimate = estimator(build_plan(plan.graph, plan.equation, Options.of(plan.path)), executor)
    top = max(s.unsliced_live, 1)
    lo, hi = max(0, math.ceil(math.log2(max(s.memory_limit, 1)))), max(0, math.ceil(math.log2(top)))

    def fits(k: int) -> bool:
        if 2 ** k >= top:
            return True
        total, unsliced = estimate(2 ** k)
        return total <= slicecost.WITHIN * unsliced
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return min(2 ** lo, top)


def estimator(base: Plan, executor: str = slicecost.PLANNING):
    """A function of a limit (einc's live bound) giving ``(seconds, unsliced seconds)`` of
    ``base``'s path sliced by einc's rule (:func:`_choose`), with ``executor``'s figures;
    one model weighs every limit asked, so a slicing two limits share is weighed once."""
    model = _Model(base, LIVE)
    unsliced = slicecost.seconds(base.flops, len(base.steps), 0, 0, executor)[0]

    def estimate(limit: int) -> tuple[float, float]:
        chunks = _choose(model, limit, ())
        flops, _, _, once, per = model.cost(chunks)
        num = math.prod(-(-model.full[i] // c) for i, c in chunks.items())
        return slicecost.seconds(flops, once, num, per, executor)[0], unsliced
    return estimate


def _larger_chunks(d: int, c: int) -> list[int]:
    """The chunk sizes of an index of size ``d`` larger than ``c`` that change the slice
    count (``ceil(d / n)`` for fewer chunks ``n``), ascending; ``d`` (unsliced) last."""
    count, out, n = -(-d // c), [], 1
    while n < count:
        v = -(-d // n)
        out.append(v)
        n = -(-d // (v - 1)) if v > 1 else count
    return sorted(set(out))


_RULES = 4         # the cuts _choose makes: two rules, each by two guides


def _choose(model: _Model, limit: int, fixed=(), share=None) -> dict[int, int]:
    """einc's rule: the slicing of ``model``'s plan, ``{index: values per slice}``, that
    meets ``limit`` at the least estimated cost.  Greedy cuts (:func:`_cut`) by two rules,
    each guided by the model and by the model without the adds into the accumulator (they
    may steer the first cuts away from summed indices and miss a cheaper mix), each
    widened (:func:`_widen`); the one estimated cheaper wins (one that fits first).
    ``fixed`` indices (cotengra's) stay sliced one value at a time.  ``share``: as
    :func:`_weigh` takes it."""
    return _weigh(model, limit, fixed, share)[1]


def _weigh(model: _Model, limit: int, fixed=(), share=None, rules=None, best=None, guess=0):
    """:func:`_choose`'s cuts by ``rules`` (default both, by peak first), each by both
    guides: ``(key, chunks)`` of the cheapest, or ``best`` (an earlier call's, by other
    rules) where none of these is cheaper.  ``share``
    (:class:`einc.planner.slicebudget.Slicer`), where given, is asked before each cut
    whether it is afforded, the first of all always run: a cut by peak where one as long
    as the longest so far fits, a cut by cost where the passes it is expected to take fit
    too (it weighs in full each halving the cuts by peak of this model met).  On a path not
    cut yet, any cut is expected to weigh in full the ``guess`` halvings (those another
    path's cuts met): its floors are not yet known to prune.  None where no cut ran."""
    for rule, guide in itertools.product(rules or (_BY_PEAK, _BY_COST), (model, model.without_adds())):
        met = model.met or guess
        if share is not None and share.rules and \
                not share.afford((1 + COST_PASS) * met if rule == _BY_COST or not model.met else 0.0):
            continue
        if share is not None:
            share.begin()
        halvings = []
        chunks = _widen(model, limit, _cut(guide, limit, fixed, rule, halvings), fixed)
        model.met = max(model.met, sum(halvings))
        key = (model.peak(chunks, limit)[0] > limit, model.cost(chunks)[1])
        if best is None or key < best[0]:
            best = key, chunks
    return best


_BY_COST, _BY_PEAK = "cost", "peak"


def _cut(model: _Model, limit: int, fixed, rule: str, halvings=None) -> dict[int, int]:
    """While a moment of a slice holds more than ``limit``, halve the chunk of one index
    behind such a moment (a value alive there, or a step's input, whose copies count):
    by ``rule`` ``"cost"`` the one that adds the least estimated time per element of
    excess it removes, by ``"peak"`` the one that lowers the peak most (ties: less
    time).  Where no index behind an over-limit moment can shrink further, the limit
    cannot be met: cutting stops there.  By peak under the live bound, the halvings are
    weighed in the order of their floors (:meth:`~einc.planner.slicemodel._Model.floors`,
    bounds under their peaks): one whose floor is above the least peak found so far is not
    weighed, as it could not be taken (under opt_einsum's bound a peak is only the largest
    intermediate, as cheap to weigh as a floor).  ``halvings``, where given, gets the
    count of the halvings each cut met."""
    full = model.full
    chunks = dict.fromkeys(fixed, 1)
    peak, excess = model.peak(chunks, limit)
    while peak > limit:
        over = model.behind(chunks, limit)
        candidates = sorted({i for v in over for i in model.indices[v]
                             if chunks.get(i, full[i]) > 1 and i not in model.lone})
        if not candidates:
            break
        if halvings is not None:
            halvings.append(len(candidates))
        floors = None
        if rule == _BY_PEAK and model.bound == LIVE:
            # a halving whose floor is above the least peak found cannot be taken: the
            # candidates by floor, the rest left unweighed once one passes that peak
            floors = model.floors(chunks, candidates)
            candidates.sort(key=lambda i: (floors[i], i))
        if rule == _BY_COST:
            now = model.cost(chunks)[1]
        best = None
        for i in candidates:
            if floors is not None and best is not None and floors[i] > best[0][0]:
                break
            trial = {**chunks, i: (chunks.get(i, full[i]) + 1) // 2}
            result = model.peak(trial, limit)
            if rule == _BY_PEAK and best is not None and result[0] > best[0][0]:
                continue            # (its time is weighed only where its peak is the least so far)
            t = model.cost(trial)[1]
            if rule == _BY_PEAK:
                key = (result[0], t, i)
            elif result[1] < excess:
                key = (0, (t - now) / (excess - result[1]), i)
            else:
                key = (1, result[0], t, i)
            if best is None or key < best[0]:
                best = key, trial, result
        _, chunks, (peak, excess) = best
    return chunks


def _widen(model: _Model, limit: int, chunks, fixed) -> dict[int, int]:
    """Where ``chunks`` fits ``limit``: index by index, the largest chunk that still fits
    (a bisection over the sizes that change the slice count; the whole index unslices
    it), taken where that is estimated cheaper, until none is."""
    full = model.full
    if model.peak(chunks, limit)[0] > limit:
        return chunks
    changed = True
    while changed:
        changed = False
        for i in [i for i in chunks if i not in fixed]:
            sizes = _larger_chunks(full[i], chunks[i])
            lo, hi, found = 0, len(sizes) - 1, None
            while lo <= hi:
                mid = (lo + hi) // 2
                trial = {k: (sizes[mid] if k == i else c) for k, c in chunks.items() if k != i or sizes[mid] < full[i]}
                if model.peak(trial, limit)[0] <= limit:
                    found, lo = trial, mid + 1
                else:
                    hi = mid - 1
            if found is not None and model.cost(found)[1] < model.cost(chunks)[1]:
                chunks, changed = found, True
    return chunks


def sliced_plan(graph: ContractionGraph, equation: str, base: Plan, sliced, limit, planner: str, chunks=None,
                bound: str = LIVE, known=None, model=None) -> Plan:
    """``base`` (a plan of ``graph``) with ``sliced`` indices cut per slice into ``chunks``
    (values per slice, default 1 each): its steps are one full slice's (sizes and flops
    per slice), its flops the total over all slices.  With no sliced index it is one
    slice of the whole contraction (:mod:`einc.distributed`).  ``known``: ``(live peak
    unsliced, flops, steps once, steps per slice)``, remembered (:mod:`einc.planner.slicecache`)
    for a ``base`` of no steps, its path pairwise.  ``model``: the slicer's model of ``base``
    (with the adds), whose costs are kept, where it made one."""
    sliced = tuple(sliced)
    chunks = tuple(chunks) if chunks is not None else (1,) * len(sliced)
    width = dict(zip(sliced, chunks))
    dropped = {i for i, c in width.items() if c == 1}
    keep = [i for i in range(len(graph.sizes)) if i not in dropped]
    new = {i: j for j, i in enumerate(keep)}
    sizes = tuple(width.get(i, d) for i, d in enumerate(graph.sizes))
    inner_graph = ContractionGraph(tuple(tuple(new[i] for i in t if i in new) for t in graph.inputs),
                                   tuple(new[i] for i in graph.output if i in new),
                                   tuple(sizes[i] for i in keep), tuple(graph.names[i] for i in keep))
    # base's steps as a pairwise path: a step over more operands (opt_einsum's answer where no
    # path fits its limit) would be split anew for the slice's sizes, maybe otherwise
    pairs = linear_path(range(graph.num_operands), base.steps) if known is None else \
        tuple(tuple(sorted(c)) for c in base.path)
    inner = build_plan(inner_graph, str(inner_graph), Options.of(pairs))
    text = text_of([[i for i in t if i in new] for t in graph.inputs], [i for i in graph.output if i in new])

    def back(indices):
        return tuple([keep[i] for i in indices])
    steps = tuple([Step(s.kind, s.operands, s.result, tuple([back(t) for t in s.inputs]), back(s.output),
                        back(s.batch), back(s.summed), s.flops, s.size) for s in inner.steps])
    live = live_peak(steps, sizes, graph.num_operands, graph.inputs, sliced, dropped)
    num = math.prod(-(-graph.sizes[i] // c) for i, c in width.items())
    if known is None:
        unsliced_live = live_peak(base.steps, graph.sizes, graph.num_operands)
        flops, seconds, fixed, once, per = (model or _Model(base, bound)).cost(width)
    else:
        unsliced_live, flops, once, per = known
        seconds, fixed = slicecost.seconds(flops, once, num, per)
    unsliced_seconds = slicecost.seconds(base.flops, once + per, 0, 0)[0]
    slicing = Slicing(sliced, tuple(graph.sizes[i] for i in sliced), num, limit, base.flops, base.largest_intermediate,
                      inner, text, planner, live, unsliced_live, chunks, bound, flops, seconds, fixed, unsliced_seconds,
                      once, per)
    if bound == INTERMEDIATE:
        fits = inner.largest_intermediate <= limit
        bounds = (f"; the limit, {limit} (memory_limit='max_input', opt_einsum's meaning), bounds each "
                  "intermediate alone" if fits else
                  f"; the limit, {limit} (memory_limit='max_input'), is less than an intermediate with every "
                  "index sliced")
    else:
        bounds = "" if limit is None else (f"; the limit, {limit}, bounds them together" if live <= limit else
                                           f"; the limit, {limit}, is less than what must be alive together "
                                           "with every index behind the peak sliced")
    notes = (f"  Live memory:  at most {live:.4g} elements at once per slice, intermediates and the copies "
             f"steps make inside{bounds} (unsliced, this path holds {unsliced_live:.4g})",)
    refused = slicecost.refusal(slicing)
    if refused is not None:
        notes += (f"  Refused:  einsum raises MemoryLimitError: {refused}",)
    return dataclasses.replace(base, steps=steps, flops=flops, largest_intermediate=inner.largest_intermediate,
                               slicing=slicing, notes=base.notes + notes)


def compared(theirs: Plan, options: Options) -> Plan:
    """For ``explain``: a plan cotengra made, with lines comparing it with einc's default
    plan for the same limit (planned here, so that only ``explain`` pays for it)."""
    if not is_cotengra(options.optimize):
        return theirs
    graph = theirs.graph
    mine = plan(graph, theirs.equation, Options.of(AUTO, options.memory_limit, options.select))

    def summary(p):
        s = p.slicing
        live = s.live if s else live_peak(p.steps, graph.sizes, graph.num_operands)
        return (f"{p.flops:.4g} flops, largest intermediate {p.largest_intermediate:.4g}, "
                f"at most {live:.4g} elements live at once (intermediates and step copies), "
                + (f"{s.num_slices} slices over {', '.join(graph.names[i] for i in s.indices)}" if s
                   else "not sliced"))
    return dataclasses.replace(theirs, notes=theirs.notes + (f"einc auto path: {summary(mine)}",
                                                             f"cotengra path:  {summary(theirs)}"))


def linear_path(values, steps) -> tuple[tuple[int, ...], ...]:
    """``steps`` (over value ids, starting from ``values``) as a linear path (opt_einsum's format)."""
    current, path = list(values), []
    for step in steps:
        pos = tuple(sorted(current.index(v) for v in step.operands))
        path.append(pos)
        for p in reversed(pos):
            current.pop(p)
        current.append(step.result)
    return tuple(path)


__all__ = ["Slicing", "LIVE", "INTERMEDIATE", "FEW_OUTPUTS", "LONG_SUM", "COPY_WORTH_SPARING", "plan",
           "sliced_plan", "estimator", "check_cost", "suggest_limit", "live_peak", "step_copies", "hoisting",
           "linear_path", "compared", "is_cotengra", "memory_limit_of"]
