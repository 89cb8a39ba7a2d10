"""Sliced plans: ``memory_limit`` honoured by fixing indices, one slice at a time.

When the contraction order would hold more than ``memory_limit`` elements at once (see
below), the plan *slices* indices: for each value of the sliced indices, every operand is viewed at
that value (no copy), the smaller contraction that is left runs with one cached plan (its
own key in the plan cache, so the same kernels serve every slice), and the slice's result
is added into the result (a sliced output index selects where it goes instead).

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
float32 accumulator for float16 / bfloat16 results, complex64 for complex32), what
autograd saves for the backward when a gradient will be taken, and the second copy of an
integer or bool input converted (bool -> int64) for a matrix product.  A limit smaller than what must be alive together
with each index behind the peak sliced to one element cannot be met: slicing stops there,
and ``explain`` shows the peak that remains.

Who chooses what to slice:

- cotengra (``optimize="cotengra"`` or a cotengra optimizer, e.g. ``HyperOptimizer``):
  its path and its own slicing (``slicing_opts`` / ``ContractionTree.slice``);
- otherwise einc's rule: the path einc's optimizer finds under the limit if its live
  peak fits, else that path and the unlimited one, each sliced by repeatedly fixing the
  index (of an intermediate or an operand) that shrinks the live peak most (ties: fewer
  total flops) until it fits; the one with fewer total flops over all slices wins.

Either way einc checks the result against the live bound and, where it is exceeded (a
cotengra slicing bounds each intermediate alone, without copies), slices more by its own rule.
:class:`Runner` runs a sliced plan, or a range of its slices (:mod:`einc.distributed`
spreads the ranges over ranks).  Steps whose operands hold no sliced index run once per
call, before the slice loop (:func:`hoisting`); their results stay alive through every
slice, and the live bound counts them so.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .equation import letter, parse
from .errors import PathError
from .graph import ContractionGraph
from .options import AUTO, COTENGRA, Options
from .plan import Plan, build_plan, flop_count

_INSTALL = "pip install 'einc[tn]' (or pip install cotengra)"


@dataclass(frozen=True)
class Slicing:
    """How a plan is sliced: the graph ``indices`` fixed per slice (outermost first) and
    their ``sizes``; ``inner`` is what one slice runs (the graph without those indices,
    the same path); ``text`` its equation in letters (the inner plan cache's key)."""

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

    @property
    def overhead(self) -> float:
        """Total flops over all slices / the unsliced flops of the same path."""
        return self.inner.flops * self.num_slices / self.unsliced_flops if self.unsliced_flops else 1.0

    def values(self, s: int) -> tuple[int, ...]:
        """The sliced indices' values in slice ``s`` (the last index varies fastest)."""
        vals = []
        for size in reversed(self.sizes):
            s, v = divmod(s, size)
            vals.append(v)
        return tuple(reversed(vals))


# ----------------------------------------------------------------------- planning

def is_cotengra(optimize) -> bool:
    """Whether ``optimize`` asks cotengra to plan (its name, or one of its optimizers)."""
    return (isinstance(optimize, str) and optimize == COTENGRA) or \
        type(optimize).__module__.split(".")[0] == "cotengra"


def memory_limit_of(graph: ContractionGraph, memory_limit) -> int | None:
    """The limit in elements (``"max_input"``: the largest operand's size)."""
    if memory_limit == "max_input":
        return max((math.prod(graph.sizes[i] for i in set(t)) for t in graph.inputs), default=1)
    if memory_limit is not None and memory_limit < 1:
        raise PathError(f"einsum(): memory_limit={memory_limit} elements cannot hold any intermediate; "
                        "give at least 1 (or None, or -1, for no limit)")
    return memory_limit


def plan(graph: ContractionGraph, equation: str, options: Options) -> Plan:
    """The plan for ``graph``: :func:`~einc.plan.build_plan`'s where no limit applies and
    cotengra is not asked, else a plan sliced as needed (see the module docstring)."""
    limit = memory_limit_of(graph, options.memory_limit)
    cotengra = is_cotengra(options.optimize)
    if limit is None and not cotengra:
        return build_plan(graph, equation, options)
    if 0 in graph.sizes:        # nothing is allocated but the (empty) result
        return build_plan(graph, equation, Options.of(False, None, options.select))
    unlimited = Options.of(options.optimize, None, options.select)
    if cotengra:
        path, sliced = _cotengra_path(graph, options.optimize, limit)
        base = build_plan(graph, equation, Options.of(path, None, options.select))
        base = dataclasses.replace(base, optimizer=options.name)
        theirs = sliced
        if limit is not None:
            sliced = _greedy(base, limit, sliced)
        planner = "cotengra" if sliced == theirs else "cotengra and einc"     # einc sliced more
        return sliced_plan(graph, equation, base, sliced, limit, planner) if sliced else base
    candidates = []
    try:
        within = build_plan(graph, equation, options)
    except (RuntimeError, ValueError):      # opt_einsum's dp: no path under the limit
        within = None
    if within is not None:
        if live_peak(within.steps, within.graph.sizes, within.num_operands) <= limit:
            return within
        candidates.append(within)
    if not isinstance(options.optimize, tuple) or within is None:
        candidates.append(build_plan(graph, equation, unlimited))
    best = None
    for base in candidates:
        sliced = _greedy(base, limit, ())
        p = sliced_plan(graph, equation, base, sliced, limit, "einc")
        if best is None or p.flops < best.flops:
            best = p
    return best


def hoisting(steps, inputs, num_operands, sliced):
    """The order one call runs ``steps`` in when ``sliced`` indices are fixed per slice, and
    the hoisted results kept alive across the slice loop (the ``roots``): the steps whose
    operands hold no sliced index run once, before the loop, root by root; the rest run
    per slice.  Without a sliced index nothing is hoisted."""
    sliced = set(sliced)
    if not sliced:
        return tuple(steps), ()
    invariant = [not sliced.intersection(t) for t in inputs]
    leaves = {v: {v} for v in range(num_operands)}
    for step in steps:
        invariant.append(all(invariant[v] for v in step.operands))
        leaves[step.result] = set().union(*(leaves[v] for v in step.operands))
    roots = tuple(sorted({v for step in steps if not invariant[step.result]
                          for v in step.operands if v >= num_operands and invariant[v]}))
    order = [st for r in roots for st in steps if st.result <= r and leaves[st.result] <= leaves[r]]
    return tuple(order) + tuple(st for st in steps if not invariant[st.result]), roots


def step_copies(step, sizes, final: bool, sliced=()) -> int:
    """The most elements ``step`` may allocate inside itself at once, beyond its output
    (the torch executor's copies; the Triton executor makes none), with the ``sliced``
    indices fixed (size 1 in ``sizes``, absent from the slice's plan).  Counted, at the
    step's fullest moment:

    - a matrix product (a ``contract`` step): a copy of each input laid out for ``mm``
      (a permuted, or strided, view that does not read as matrices is copied, by the
      reshape or by ``mm`` itself); where an input has ``2**16`` elements or more, also
      half of it, for the other input broadcast over a batch split of it
      (:func:`~einc.runtime.torch_executor._operand_batch`);
    - ``dot`` and ``product`` steps: a copy of each input holding a summed index (its sum
      over the indices the other lacks); for ``dot``, the elementwise product of the
      inputs before the sum;
    - the last step of an entry (``final``): the permuted contiguous copy of its result
      while the raw one is alive -- made after the inputs' copies are freed, so the
      larger of the two counts.

    The step's kind is the slice's (the sliced indices left out), as the slice's plan has
    it.  Not counted: an integer or bool input converted for a matrix product (bool ->
    int64, an integer widened to an int64 sum) and then copied again for ``mm``."""
    from .runtime.torch_executor import _COPY_WORTH_SPARING
    sliced = set(sliced)

    def size(term):
        return math.prod(sizes[i] for i in set(term))
    last = size(step.output) if final else 0
    if len(step.inputs) == 1:
        return last
    a, b = (set(t) - sliced for t in step.inputs)
    summed = set(step.summed) - sliced
    if summed & a & b and not set(step.output) - sliced <= a & b:       # a matrix product
        copies = sum(size(t) for t in step.inputs)
        big = max(size(t) for t in step.inputs)
        if big >= _COPY_WORTH_SPARING:
            copies += big // 2
    else:
        copies = sum(size(t) for t in step.inputs if summed.intersection(t))
        if summed & a & b:                                                  # dot: a * b, then its sum
            copies += size(a & b)
    return max(copies, last)


def _lives(steps, sizes, num_operands, kept=(), finals=(), sliced=()):
    """Per step, the elements alive at its fullest moment and the values behind them:
    ``(elements, value ids)``.  Counted: the intermediates alive (its inputs, other
    branches' pending results), its output and the copies it makes inside itself
    (:func:`step_copies`; a step whose result is in ``finals`` is an entry's last).  An
    intermediate lives from the step that makes it until the step that consumes it;
    operands (ids below ``num_operands``) are the caller's tensors, or views of them,
    and cost nothing but their copies; the ``kept`` values (hoisted results) are never
    freed."""
    last = {v: s for s, step in enumerate(steps) for v in step.operands if v not in kept}
    live, total = {}, 0
    for s, step in enumerate(steps):
        out = math.prod(sizes[i] for i in step.output)
        yield total + out + step_copies(step, sizes, step.result in finals, sliced), (*live, *step.operands, step.result)
        for v in step.operands:
            if v >= num_operands and last.get(v) == s:
                total -= live.pop(v)
        live[step.result] = out
        total += out


def live_peak(steps, sizes, num_operands, inputs=(), sliced=()) -> int:
    """The most elements alive at once when ``steps`` run: intermediates, the last step's
    result included, and the copies steps make inside themselves (:func:`_lives`), with
    ``sliced`` indices of the graph's ``inputs`` fixed per slice (hoisted steps first,
    their results alive throughout; see :func:`hoisting`): what ``memory_limit`` bounds."""
    order, roots = hoisting(steps, inputs, num_operands, sliced)
    finals = set(roots) | ({order[-1].result} if order else set())
    return max((n for n, _ in _lives(order, sizes, num_operands, set(roots), finals, sliced)), default=0)


def _greedy(base: Plan, limit: int, sliced) -> tuple[int, ...]:
    """einc's rule: slice the index that shrinks the live peak (:func:`live_peak`) most
    until it fits in ``limit`` (ties: fewer total flops, then the lower id).  Only indices
    of the values behind an over-limit moment are candidates (the intermediates alive and
    the step's inputs, operands included, whose copies count); where none is left (each
    of those values is one element) the peak cannot shrink further."""
    steps, full, n = base.steps, base.graph.sizes, base.num_operands
    seen = [tuple(set().union(*step.inputs)) for step in steps]
    computing = {}              # index -> the steps that compute over it
    for s, t in enumerate(seen):
        for i in t:
            computing.setdefault(i, []).append(s)
    sliced = list(sliced)
    sizes = [1 if i in sliced else s for i, s in enumerate(full)]

    def flops(s):
        step = steps[s]
        return flop_count(seen[s], any(i not in sliced for i in step.summed), len(step.inputs),
                          sizes)

    inputs = base.graph.inputs
    indices = list(inputs) + [step.output for step in steps]      # by value id
    while True:
        order, roots = hoisting(steps, inputs, n, sliced)
        finals = set(roots) | {order[-1].result}
        over = {v for total, alive in _lives(order, sizes, n, set(roots), finals, sliced) if total > limit for v in alive}
        candidates = sorted({i for v in over for i in indices[v] if sizes[i] > 1})
        if not candidates:
            return tuple(sliced)
        costs = [flops(s) for s in range(len(steps))]
        total_flops, count = sum(costs), math.prod(full[j] for j in sliced)
        best = None
        for i in candidates:
            size, sizes[i] = sizes[i], 1
            sliced.append(i)
            fl = total_flops + sum(flops(s) - costs[s] for s in computing[i])
            top = live_peak(steps, sizes, n, inputs, sliced)
            sliced.pop()
            sizes[i] = size
            key = (top, fl * count * size, i)
            if best is None or key < best:
                best = key
        sliced.append(best[2])
        sizes[best[2]] = 1


def sliced_plan(graph: ContractionGraph, equation: str, base: Plan, sliced, limit, planner: str) -> Plan:
    """``base`` (a plan of ``graph``) with ``sliced`` indices fixed per slice: its steps
    are one slice's (sizes and flops per slice), its totals over all slices.  With no
    sliced index it is one slice of the whole contraction (:mod:`einc.distributed`)."""
    sliced = tuple(sliced)
    keep = [i for i in range(len(graph.sizes)) if i not in sliced]
    new = {i: j for j, i in enumerate(keep)}
    inner_graph = ContractionGraph(tuple(tuple(new[i] for i in t if i in new) for t in graph.inputs),
                                   tuple(new[i] for i in graph.output if i in new),
                                   tuple(graph.sizes[i] for i in keep), tuple(graph.names[i] for i in keep))
    # base's steps as a pairwise path: a step over more operands (opt_einsum's answer where no
    # path fits its limit) would be split anew for the slice's sizes, maybe otherwise
    inner = build_plan(inner_graph, str(inner_graph), Options.of(_linear(range(graph.num_operands), base.steps)))
    text = ",".join("".join(letter(i) for i in t if i in new) for t in graph.inputs) + "->" + \
        "".join(letter(i) for i in graph.output if i in new)

    def back(indices):
        return tuple(keep[i] for i in indices)
    steps = tuple(dataclasses.replace(s, inputs=tuple(back(t) for t in s.inputs), output=back(s.output),
                                      batch=back(s.batch), summed=back(s.summed)) for s in inner.steps)
    sizes = tuple(graph.sizes[i] for i in sliced)
    n = math.prod(sizes)
    live = live_peak(steps, tuple(1 if i in sliced else s for i, s in enumerate(graph.sizes)), graph.num_operands,
                     graph.inputs, sliced)
    unsliced_live = live_peak(base.steps, graph.sizes, graph.num_operands)
    slicing = Slicing(sliced, sizes, n, limit, base.flops, base.largest_intermediate, inner, text, planner,
                      live, unsliced_live)
    bound = "" if limit is None else (f"; the limit, {limit}, bounds them together" if live <= limit else
                                      f"; the limit, {limit}, is less than what must be alive together "
                                      "with every index behind the peak sliced")
    note = (f"  Live memory:  at most {live:.4g} elements at once per slice, intermediates and the copies "
            f"steps make inside{bound} (unsliced, this path holds {unsliced_live:.4g})")
    return dataclasses.replace(base, steps=steps, flops=inner.flops * n,
                               largest_intermediate=inner.largest_intermediate, slicing=slicing,
                               notes=base.notes + (note,))


def _cotengra():
    try:
        import cotengra
    except ImportError:
        raise PathError(f"einsum(): optimize='cotengra' (or a cotengra optimizer) needs cotengra, which is not "
                        f"installed: {_INSTALL}") from None
    return cotengra


def _cotengra_path(graph: ContractionGraph, optimize, limit):
    """cotengra's path and sliced indices for ``graph`` (its default hyper-optimizer for
    the name ``"cotengra"``, sliced to ``limit`` by cotengra)."""
    ctg = _cotengra()
    if graph.num_operands == 1:
        return ((0,),), ()
    inputs = [tuple(t) for t in graph.inputs]
    output = tuple(graph.output)
    size_dict = dict(enumerate(graph.sizes))
    if isinstance(optimize, str):
        optimize = ctg.HyperOptimizer(methods=["greedy"], max_repeats=32, minimize="flops", parallel=False,
                                      progbar=False, reconf_opts=None,
                                      slicing_opts={"target_size": limit} if limit is not None else None)
    if hasattr(optimize, "search"):
        tree = optimize.search(inputs, output, size_dict)
    else:
        tree = ctg.ContractionTree.from_path(inputs, output, size_dict, path=optimize(inputs, output, size_dict))
    if limit is not None and tree.max_size() > limit:
        tree = tree.slice(target_size=limit)
    path = tuple(tuple(int(i) for i in c) for c in tree.get_path())
    return path, tuple(int(i) for i in tree.sliced_inds)


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


# ----------------------------------------------------------------------- running

def accumulator_dtype(dtype):
    """The dtype a sliced result is summed in: float32 for 16-bit floats, complex64 for
    complex32, the result's own otherwise."""
    import torch
    return {torch.float16: torch.float32, torch.bfloat16: torch.float32,
            torch.complex32: torch.complex64}.get(dtype, dtype)


def natural_dtype(plan: Plan, result_dtype, operand_dtypes):
    """The sliced result's dtype: torch.einsum's (``result_dtype``), or where torch cannot
    say (None), what einc's torch executor gives the same path unsliced (int64 for
    integers whose sum torch itself trips on)."""
    if result_dtype is not None:
        return result_dtype
    from .runtime.torch_executor import step_functions
    return step_functions(build_plan(plan.graph, plan.equation, Options.of(plan.path)), operand_dtypes)[1]


class Runner:
    """Runs the slices of a sliced :class:`~einc.plan.Plan` through the engine's entry for
    one slice (``entry_of(equation, operands, options)``), into an accumulator."""

    def __init__(self, plan: Plan, result_dtype, select, entry_of):
        s = plan.slicing
        g = plan.graph
        self.plan = plan
        self.slicing = s
        self.eq = parse(s.text)
        self.options = Options.of(plan.path, None, select)
        position = {i: j for j, i in enumerate(s.indices)}
        self.operand_dims = [sorted(((d, position[i]) for d, i in enumerate(t) if i in position), reverse=True)
                             for t in g.inputs]
        self.output_dims = sorted(((d, position[i]) for d, i in enumerate(g.output) if i in position),
                                  reverse=True)
        self.shape = tuple(g.sizes[i] for i in g.output)
        self.result_dtype = result_dtype
        self.entry_of = entry_of
        self.entry = None           # the one slice's cache entry, once the first slice ran
        self._hoist(plan)

    def _hoist(self, plan: Plan) -> None:
        """Split the slice's steps: those whose operands hold no sliced index run once per
        call (:meth:`hoisted`); the rest, over the remaining operands and the hoisted
        results they consume (the ``roots``), run per slice."""
        g, n, sliced = plan.graph, plan.num_operands, set(self.slicing.indices)
        order, roots = hoisting(plan.steps, g.inputs, n, sliced)
        indices = [tuple(i for i in t if i not in sliced) for t in g.inputs] + [st.output for st in plan.steps]
        leaves = {v: {v} for v in range(n)}
        for step in plan.steps:
            leaves[step.result] = set().union(*(leaves[v] for v in step.operands))
        self.roots = []             # (value id, its equation, its leaf operands, its linear path)
        for r in roots:
            ops = sorted(leaves[r])
            steps = [st for st in plan.steps if st.result <= r and leaves[st.result] <= leaves[r]]
            text = ",".join("".join(letter(i) for i in indices[v]) for v in ops) + "->" + \
                "".join(letter(i) for i in indices[r])
            self.roots.append((r, parse(text), ops, _linear(ops, steps)))
        hoisted = set().union(*(leaves[r] for r in roots)) if roots else set()
        self.rest = [v for v in range(n) if v not in hoisted] + list(roots)
        steps = order[sum(len(path) for *_, path in self.roots):]      # the per-slice steps
        text = ",".join("".join(letter(i) for i in indices[v]) for v in self.rest) + "->" + \
            "".join(letter(i) for i in plan.graph.output if i not in sliced)
        self.eq = parse(text)
        self.options = Options.of(_linear(self.rest, steps), None, self.options.select)
        self.root_entries = [None] * len(self.roots)

    def hoisted(self, operands):
        """The hoisted results, one per root, computed once per call."""
        values = {}
        for k, (r, eq, ops, path) in enumerate(self.roots):
            args = [operands[v] for v in ops]
            if self.root_entries[k] is None:
                self.root_entries[k] = self.entry_of(eq, args, Options.of(path, None, self.options.select))
            values[r] = self.root_entries[k].run(args)
        return values

    def accumulator(self, operands):
        import torch
        return torch.zeros(self.shape, dtype=accumulator_dtype(self.result_dtype), device=operands[0].device)

    def add(self, acc, operands, start: int, stop: int) -> None:
        """Contract slices ``start .. stop-1`` and add each into ``acc``."""
        roots = self.hoisted(operands) if start < stop else {}
        for s in range(start, stop):
            vals = self.slicing.values(s)
            views = []
            for op, dims in zip(operands, self.operand_dims):
                for d, j in dims:
                    op = op.select(d, vals[j])
                views.append(op)
            ops = [views[v] if v < len(views) else roots[v] for v in self.rest]
            if self.entry is None:
                self.entry = self.entry_of(self.eq, ops, self.options)
            part = self.entry.run(ops)
            target = acc
            for d, j in self.output_dims:
                target = target.select(d, vals[j])
            target.add_(part)
            del part, target, ops, views    # this slice's part is freed before the next slice runs

    def finish(self, acc):
        return acc if acc.dtype == self.result_dtype else acc.to(self.result_dtype)

    def __call__(self, operands):
        acc = self.accumulator(operands)
        self.add(acc, operands, 0, self.slicing.num_slices)
        return self.finish(acc)


def _linear(values, steps) -> tuple[tuple[int, ...], ...]:
    """``steps`` (over value ids, starting from ``values``) as a linear path (opt_einsum's format)."""
    current, path = list(values), []
    for step in steps:
        pos = tuple(sorted(current.index(v) for v in step.operands))
        path.append(pos)
        for p in reversed(pos):
            current.pop(p)
        current.append(step.result)
    return tuple(path)


def build_entry(plan: Plan, operands, result_dtype, select, entry_of):
    """The plan cache's entry for a sliced plan: runs every slice with one inner entry;
    what runs each step (``backend``, ``choices``) is the inner entry's once it ran."""
    from .runtime.dispatch import Entry
    from .runtime.select import Choice
    runner = Runner(plan, natural_dtype(plan, result_dtype, [o.dtype for o in operands]), select, entry_of)
    entry = Entry(plan, None, "torch", [Choice("torch", "")] * len(plan.steps))

    def run(ops):
        out = runner(ops)
        entry.backend, entry.choices, entry.inner = runner.entry.backend, runner.entry.choices, runner.entry
        return out
    entry.run = run
    return entry


def explain(plan: Plan, device_type: str, dtypes, entry=None, select_mode=None):
    """``explain``'s answer for a sliced plan: what runs each step of one slice (once a slice
    ran, what its entry runs: its plan, fused where kernels run, and its kernels)."""
    from .runtime.dispatch import Explanation, describe
    s = plan.slicing
    shapes = [tuple(s.inner.graph.sizes[i] for i in t) for t in s.inner.graph.inputs]
    from .fuse import FUSED
    ran = entry.inner if entry is not None else None
    inner = describe(ran.plan if ran is not None else s.inner, device_type, dtypes, shapes, ran or entry, select_mode)
    # one row per step of the sliced plan: a fused step's kernel on each plan step it runs
    counts = [len(step.numbers) if step.kind == FUSED else 1 for step in inner.plan.steps]
    backends = [b for b, n in zip(inner.backends, counts) for _ in range(n)]
    reasons = [r for r, n in zip(inner.reasons, counts) for _ in range(n)]
    return Explanation(plan, backends, inner.note, reasons)


__all__ = ["Slicing", "Runner", "plan", "sliced_plan", "live_peak", "build_entry", "explain", "compared", "is_cotengra",
           "memory_limit_of", "accumulator_dtype", "natural_dtype"]
