"""Sliced plans: ``memory_limit`` honoured by fixing indices, one slice at a time.

When no contraction order keeps every intermediate within ``memory_limit`` elements, the
plan *slices* indices: for each value of the sliced indices, every operand is viewed at
that value (no copy), the smaller contraction that is left runs with one cached plan (its
own key in the plan cache, so the same kernels serve every slice), and the slice's result
is added into the result (a sliced output index selects where it goes instead).

What ``memory_limit`` bounds: the result of every step of one slice, the last step
included (so a result larger than the limit slices output indices).  The operands and
the full result are not counted -- the result cannot be sliced away, it is allocated
once, in a float32 accumulator for float16 / bfloat16 results (complex64 for complex32).

Who chooses what to slice:

- cotengra (``optimize="cotengra"`` or a cotengra optimizer, e.g. ``HyperOptimizer``):
  its path and its own slicing (``slicing_opts`` / ``ContractionTree.slice``);
- otherwise einc's rule: the path einc's optimizer finds under the limit if it fits, else
  the unlimited path, and then repeatedly slice the index that shrinks the largest
  intermediate most (ties: fewer total flops) until every step fits.  Of the two paths
  the one with fewer total flops over all slices wins.

Either way einc checks the result and, should a step still exceed the limit, slices more
by its own rule.  :class:`Runner` runs a sliced plan, or a range of its slices
(:mod:`einc.distributed` spreads the ranges over ranks).
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
    planner: str                # "einc" or "cotengra": who chose the sliced indices

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
        if limit is not None:
            sliced = _greedy(base, limit, sliced)
        return sliced_plan(graph, equation, base, sliced, limit, "cotengra") if sliced else base
    candidates = []
    try:
        within = build_plan(graph, equation, options)
    except (RuntimeError, ValueError):      # opt_einsum's dp: no path under the limit
        within = None
    if within is not None:
        if within.largest_intermediate <= limit:
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


def _costs(steps, sizes, sliced):
    """(largest per-slice intermediate, per-slice flops) of ``steps`` with ``sizes``."""
    largest, flops = 0, 0
    for step in steps:
        seen = set().union(*step.inputs)
        largest = max(largest, math.prod(sizes[i] for i in step.output))
        flops += flop_count(seen, any(i not in sliced for i in step.summed), len(step.inputs), sizes)
    return largest, flops


def _greedy(base: Plan, limit: int, sliced) -> tuple[int, ...]:
    """einc's rule: slice the index that shrinks the largest intermediate most until
    every step of ``base`` fits in ``limit`` (ties: fewer total flops, then the lower id)."""
    full = base.graph.sizes
    sliced = list(sliced)
    sizes = [1 if i in sliced else s for i, s in enumerate(full)]
    while True:
        largest, _ = _costs(base.steps, sizes, sliced)
        if largest <= limit:
            return tuple(sliced)
        over = [st for st in base.steps if math.prod(sizes[i] for i in st.output) > limit]
        best = None
        for i in sorted({i for st in over for i in st.output if sizes[i] > 1}):
            trial = list(sizes)
            trial[i] = 1
            big, flops = _costs(base.steps, trial, sliced + [i])
            key = (big, flops * math.prod(full[j] for j in sliced + [i]), i)
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
    inner = build_plan(inner_graph, str(inner_graph), Options.of(base.path))
    text = ",".join("".join(letter(i) for i in t if i in new) for t in graph.inputs) + "->" + \
        "".join(letter(i) for i in graph.output if i in new)

    def back(indices):
        return tuple(keep[i] for i in indices)
    steps = tuple(dataclasses.replace(s, inputs=tuple(back(t) for t in s.inputs), output=back(s.output),
                                      batch=back(s.batch), summed=back(s.summed)) for s in inner.steps)
    sizes = tuple(graph.sizes[i] for i in sliced)
    n = math.prod(sizes)
    slicing = Slicing(sliced, sizes, n, limit, base.flops, base.largest_intermediate, inner, text, planner)
    return dataclasses.replace(base, steps=steps, flops=inner.flops * n,
                               largest_intermediate=inner.largest_intermediate, slicing=slicing)


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
        return (f"{p.flops:.4g} flops, largest intermediate {p.largest_intermediate:.4g}, "
                + (f"{s.num_slices} slices over {', '.join(graph.names[i] for i in s.indices)}" if s
                   else "not sliced"))
    return dataclasses.replace(theirs, notes=(f"einc auto path: {summary(mine)}", f"cotengra path:  {summary(theirs)}"))


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

    def accumulator(self, operands):
        import torch
        return torch.zeros(self.shape, dtype=accumulator_dtype(self.result_dtype), device=operands[0].device)

    def add(self, acc, operands, start: int, stop: int) -> None:
        """Contract slices ``start .. stop-1`` and add each into ``acc``."""
        for s in range(start, stop):
            vals = self.slicing.values(s)
            ops = []
            for op, dims in zip(operands, self.operand_dims):
                for d, j in dims:
                    op = op.select(d, vals[j])
                ops.append(op)
            if self.entry is None:
                self.entry = self.entry_of(self.eq, ops, self.options)
            part = self.entry.run(ops)
            target = acc
            for d, j in self.output_dims:
                target = target.select(d, vals[j])
            target.add_(part)

    def finish(self, acc):
        return acc if acc.dtype == self.result_dtype else acc.to(self.result_dtype)

    def __call__(self, operands):
        acc = self.accumulator(operands)
        self.add(acc, operands, 0, self.slicing.num_slices)
        return self.finish(acc)


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


__all__ = ["Slicing", "Runner", "plan", "sliced_plan", "build_entry", "explain", "compared", "is_cotengra",
           "memory_limit_of", "accumulator_dtype", "natural_dtype"]
