"""Stage 3, plan: :class:`ContractionGraph` + optimizer -> :class:`Plan` of :class:`Step`.

opt_einsum chooses the order (the call's :class:`~einc.planner.options.Options` say how); this
module turns its linear path into named steps.
Values are numbered as in SSA form: operands are ``T0 .. Tn-1`` and step ``s``
produces ``T(n+s)``.  Each step records the indices of its operands (repeats and
indices unique to one operand included: executors fold those into the step), the
indices it keeps, in order, the indices it sums, and what it costs.  Pure Python:
opt_einsum is the only import beyond the standard library.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import opt_einsum

from ..errors import PathError
from .equation import ELLIPSIS
from .graph import ContractionGraph, _display
from .options import AUTO, LEFT_TO_RIGHT, Options, _auto, callers_optimizer

# Step kinds: what an executor has to do.
CONTRACT = "contract"   # pairwise, sums a shared index and keeps others: a (batched) matrix product
DOT = "dot"             # pairwise, sums shared indices and keeps only batch ones: multiply-and-sum
PRODUCT = "product"     # pairwise, sums no shared index: elementwise or outer product
REDUCE = "reduce"       # one operand: diagonal, sum, transpose


@dataclass(frozen=True)
class Step:
    """One step: ``operands`` (value ids) -> value ``result``.

    ``inputs[k]`` is operand ``k``'s index per dimension, ``output`` the result's
    indices in order, ``batch`` the kept indices shared by both operands, ``summed``
    every index that disappears here.
    """

    kind: str
    operands: tuple[int, ...]
    result: int
    inputs: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]
    batch: tuple[int, ...]
    summed: tuple[int, ...]
    flops: int
    size: int


@dataclass(frozen=True)
class Plan:
    """A contraction order with its costs; ``str(plan)`` is the table ``explain`` prints."""

    graph: ContractionGraph
    equation: str
    optimizer: str
    path: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    naive_flops: int
    flops: int
    largest_intermediate: int
    slicing: object = None      # an einc.planner.slicing.Slicing where indices are sliced
    notes: tuple[str, ...] = ()     # more lines for the printout (cotengra's plan against einc's)

    @property
    def num_operands(self) -> int:
        return self.graph.num_operands

    @property
    def speedup(self) -> float:
        return self.naive_flops / self.flops if self.flops else 1.0

    @property
    def empty_sum(self) -> str | None:
        """The name of an index of size 0 that the plan sums over, else None: the result
        is then zeros, whatever the operands hold (a sum over nothing), which no order of
        steps gives beside an inf (0 * inf is NaN)."""
        g = self.graph
        out = set(g.output)
        return next((g.names[i] for t in g.inputs for i in t if g.sizes[i] == 0 and i not in out), None)

    def renamed(self, equation: str, names) -> Plan:
        """This plan for ``equation``, equal to its own but for the letters (the same
        canonical form: the plan cache's key), whose graph names its indices ``names``."""
        return replace(self, equation=equation, graph=replace(self.graph, names=tuple(names)))

    def describe(self, step: Step) -> str:
        """``'ij,jk->ik'`` for a step, in the graph's index names."""
        numbered = self.numbered(step)
        return ",".join(self.term(t, numbered) for t in step.inputs) + "->" + self.term(step.output, numbered)

    def term(self, indices, numbered: bool = False) -> str:
        """Display string of ``indices`` as the equation writes them: ``'bij'``, the
        ellipsis's dimensions together as one ``...``.  Where they do not stand together
        (or ``numbered``), each is written ``...0``, ``...1`` (its place in the ellipsis)."""
        names = [self.graph.names[i] for i in indices]
        if numbered or self._split(indices):
            return "".join("..." + n[1:] if n.startswith("…") else n for n in names)
        return "".join("..." if n.startswith("…") else n for k, n in enumerate(names)
                       if not (n.startswith("…") and k and names[k - 1].startswith("…")))

    def _split(self, indices) -> bool:
        """Whether the ellipsis's dimensions among ``indices`` stand in more than one run."""
        return "x" in "".join("e" if self.graph.names[i].startswith("…") else "x" for i in indices).strip("x")

    def numbered(self, step: Step) -> bool:
        """Whether ``step`` is shown with numbered ellipsis dimensions (one of its terms splits them)."""
        return any(self._split(t) for t in (*step.inputs, step.output))

    def __str__(self) -> str:
        return format_table(self)

    def to_dict(self) -> dict:
        """The plan as plain data (for JSON): equation, optimizer, path, steps, totals."""
        return {
            "equation": self.equation, "optimizer": self.optimizer, "path": [list(c) for c in self.path],
            "steps": [{"step": s + 1, "kind": step.kind, "operands": [f"T{v}" for v in step.operands],
                       "result": f"T{step.result}", "contraction": self.describe(step),
                       "summed": self.term(step.summed, self.numbered(step)), "flops": step.flops, "size": step.size}
                      for s, step in enumerate(self.steps)],
            "totals": {"flops": self.flops, "largest_intermediate": self.largest_intermediate,
                       "steps": len(self.steps), "speedup_over_naive": self.speedup},
            "naive": {"flops": self.naive_flops},
            "slicing": None if self.slicing is None else {
                "indices": self.graph.term(self.slicing.indices), "slices": self.slicing.num_slices,
                "memory_limit": self.slicing.memory_limit, "flops_overhead": self.slicing.overhead,
                "planner": self.slicing.planner, "chunks": list(self.slicing.chunks), "bound": self.slicing.bound,
                "estimated_seconds": self.slicing.seconds, "overhead_seconds": self.slicing.overhead_seconds,
                "unsliced_seconds": self.slicing.unsliced_seconds},
        }


def flop_count(indices, summed: bool, num_terms: int, sizes) -> int:
    """opt_einsum's convention: a multiply-add counts 2, a product or sum counts 1."""
    factor = max(1, num_terms - 1) + (1 if summed else 0)
    return math.prod(map(sizes.__getitem__, indices)) * factor


# ----------------------------------------------------------------------- the path

def _path(graph: ContractionGraph, options: Options):
    """``(path, notes)``: the path, and what the search says of itself (einc's default past
    dynamic programming's reach).  A path is searched for the call's own sizes and kept
    for them: never one found for other sizes, so that the order a call sums in is a
    function of the call, whatever shapes came first."""
    fn, path = options.resolve()
    n = graph.num_operands
    if n == 1:
        return ((0,),), ()
    if path == LEFT_TO_RIGHT:
        return left_to_right(n), ()
    if path is not None:
        return path, ()
    if n == 2:
        return ((0, 1),), ()          # the only order there is
    key = None
    if options.memory_limit is None and options.optimize == "auto":
        # einc's default search, kept for these sizes (another layout or dtype of the shape)
        key = (graph.inputs, graph.output, graph.sizes, options.optimize)
        found = _PATHS.get(key)
        if found is not None:
            return found
    weighed = None
    if not callers_optimizer(options.optimize):
        # einc's own searches get int labels: their hashes, unlike strings', are the same
        # in every process, so set iteration order (which breaks ties in greedy searches)
        # and the path are too.
        inputs = [set(term) for term in graph.inputs]
        output = set(graph.output)
        # opt_einsum's strategies weigh the true sizes, as in opt_einsum: where a size-0 index
        # is kept (the result is empty) a path of empty steps costs 0 and is found; where one
        # is summed the result is zeros and no step runs. einc's own search weighs a size 0
        # as 1 (the network with the index of size 1, whose costs bound these), and so does
        # a strategy that fails on a 0 (opt_einsum's dp: "No contraction found").
        size_dict = dict(enumerate(graph.sizes))
        weighed = {i: s or 1 for i, s in enumerate(graph.sizes)}
        if fn is _auto:
            size_dict = weighed
    else:
        # A caller's optimizer (or a function registered by name) gets what opt_einsum gives
        # one: frozensets of the caller's one-character labels (opt_einsum's spelling of
        # ellipses and broadcasting), and sizes by label, a label's largest.
        labels = opt_einsum_labels(graph, getattr(_CALLERS, "labels", None))
        inputs = [frozenset([labels[i] for i in term]) for term in graph.inputs]
        output = frozenset([labels[i] for i in graph.output])
        size_dict = {}
        for c, s in zip(labels, graph.sizes):
            if size_dict.get(c, 1) == 1:
                size_dict[c] = s
    memory_limit = options.memory_limit
    if memory_limit == "max_input":
        memory_limit = max_input(graph)
    reports: list = []
    if fn is _auto:
        found = fn(inputs, output, size_dict, memory_limit, reports)
    else:
        try:
            found = fn(inputs, output, size_dict, memory_limit)
        except RuntimeError:
            if weighed is None or weighed == size_dict:
                raise
            found = fn(inputs, output, weighed, memory_limit)
    path = tuple([tuple(map(int, c)) for c in found])
    notes = tuple(r.text() for r in reports)
    if key is not None:
        with _PATHS_LOCK:
            _PATHS[key] = (path, notes)
            while len(_PATHS) > PATH_CACHE_SIZE:
                _PATHS.popitem(last=False)
    return path, notes


def max_input(graph: ContractionGraph) -> int:
    """``memory_limit="max_input"`` in elements, as opt_einsum counts it: the largest of the
    operands and the output (each term's size, a repeated index as often as it appears, a
    size-1 dimension broadcast against a larger one at its label's larger size)."""
    size: dict = {}
    for name, n in zip(graph.names, graph.sizes):       # (a broadcast index shows its label's name)
        size[name] = max(size.get(name, 1), n)
    return max(math.prod(size[graph.names[i]] for i in t) for t in (*graph.inputs, graph.output))


def opt_einsum_labels(graph: ContractionGraph, rename=None) -> tuple[str, ...]:
    """Each index's label as opt_einsum spells it: its name (through ``rename``, where the
    name stands for another character: see :func:`callers_labels`); a size-1 dimension
    broadcast against a larger one, an index of its own here, its label's; an ellipsis
    dimension one of the characters the equation does not use, as ``opt_einsum.parser``
    spells ellipses out (as many unused characters, in ``get_symbol``'s order, as the most
    dimensions an operand has, the widest ellipsis taking the last of them).

    >>> from einc.planner.equation import parse
    >>> from einc.planner.graph import build
    >>> "".join(opt_einsum_labels(build(parse("...a,...a->..."), [(4, 4), (4, 4, 4)])))
    'dac'
    """
    rename = rename or {}
    names = [rename.get(n, n) for n in graph.names]
    dims = [int(n[1:]) for n in names if len(n) > 1]        # ellipsis dimensions, "…j": j from the left
    if not dims:
        return tuple(names)
    used = {n for n in names if len(n) == 1}
    most = max(len(t) for t in graph.inputs)
    unused = [c for c in map(opt_einsum.get_symbol, range(most + len(used))) if c not in used][:most]
    width = max(dims) + 1
    return tuple(n if len(n) == 1 else unused[most - width + int(n[1:])] for n in names)


_CALLERS = threading.local()    # .labels: {einc's letter: the caller's character}, while a door plans


@contextlib.contextmanager
def callers_labels(labels):
    """Within: a caller's optimizer sees each letter of ``labels`` (a dict) as its value, the
    character the caller wrote (opt_einsum's doors read any character as an index, and
    hand einc an equation in letters)."""
    before = getattr(_CALLERS, "labels", None)
    _CALLERS.labels = labels
    try:
        yield
    finally:
        _CALLERS.labels = before


def left_to_right(n: int) -> tuple:
    """torch.einsum's order without opt_einsum, ``((A B) C) D ...``, as a linear path
    (each result goes to the end of the list, so every step after the first pairs the
    next operand, now first, with the last result).

    >>> left_to_right(4)
    ((0, 1), (0, 2), (0, 1))
    """
    return ((0, 1),) + tuple((0, n - 1 - s) for s in range(1, n - 1)) if n > 1 else ((0,),)


PATH_CACHE_SIZE = 4096      # paths kept per (equation, sizes, strategy); the oldest go first
_PATHS: OrderedDict = OrderedDict()
_PATHS_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_PATHS_LOCK._at_fork_reinit)   # a fork while another thread holds it


def path_cache_clear() -> None:
    with _PATHS_LOCK:
        _PATHS.clear()


# ----------------------------------------------------------------------- steps

def build_plan(graph: ContractionGraph, equation: str = "", options: Options | None = None) -> Plan:
    """Plan ``graph`` with ``options`` (default: einc's ``auto``): find a path and describe
    each step.

    >>> from einc.planner.equation import parse
    >>> from einc.planner.graph import build
    >>> p = build_plan(build(parse("ij,jk,kl->il"), [(8, 2), (2, 8), (8, 2)]))
    >>> [s.kind for s in p.steps]
    ['contract', 'contract']
    """
    options = options or Options.of()
    path, notes = _path(graph, options)
    n = graph.num_operands
    if n <= 2 and len(path) == 1 and sorted(path[0]) == list(range(n)):
        # One step of every operand, the last: what _steps makes of it, without counting
        # which values hold which index (only steps before the last need that).
        step = _make_step(list(range(n)), n, list(graph.inputs), None, graph, None)
        return Plan(graph, equation or str(graph), options.name, tuple(path), (step,), step.flops, step.flops,
                    step.size, notes=notes)
    steps = _steps(graph, path)

    flops = sum(s.flops for s in steps)
    largest = max(s.size for s in steps)
    return Plan(graph, equation or str(graph), options.name, tuple(path), tuple(steps), naive_flops(graph), flops,
                largest, notes=notes)


def _steps(graph: ContractionGraph, path) -> list[Step]:
    """The steps of ``path``, a linear path over ``graph``'s operands (checked here)."""
    n = graph.num_operands
    terms = list(graph.inputs)              # per value id, its indices per dimension
    live = list(range(n))                   # value ids, in opt_einsum's list order
    # how many values not yet contracted hold each index: a step's result keeps those the
    # others hold (counted, not gathered from every other value: quadratic on hundreds)
    held = [0] * len(graph.sizes)
    wanted = set(graph.output)
    for t in terms:
        for i in set(t):
            held[i] += 1
    steps: list[Step] = []
    for contraction in path:
        order = sorted(contraction)
        if not order or len(set(order)) != len(order) or not 0 <= order[0] <= order[-1] < len(live):
            raise PathError(f"einsum(): invalid contraction {contraction} in path {list(path)} "
                            f"({len(live)} operands remain at that point)")
        taken = [live[i] for i in order]
        for i in reversed(order):
            live.pop(i)
        # A contraction of three or more operands runs pairwise, left to right.
        while True:
            group = taken[:2]
            rest = taken[2:]
            last = not live and not rest
            step = _make_step(group, len(terms), terms, held, graph, None if last else wanted)
            for i in step.output:       # distinct
                held[i] += 1
            steps.append(step)
            terms.append(step.output)
            taken = [step.result] + rest
            if not rest:
                break
        live.append(taken[0])
    if len(live) != 1:
        raise PathError(f"einsum(): path {list(path)} leaves {len(live)} operands uncontracted")
    if steps[-1].output != graph.output:      # e.g. an explicit path ending on a pairwise step kept order
        steps.append(_make_step([live[0]], len(terms), terms, None, graph, None))
    return steps


def naive_flops(graph: ContractionGraph) -> int:
    """The flops of contracting ``graph`` in one step (a plan's ``naive_flops``)."""
    all_indices = {i for t in graph.inputs for i in t}
    return flop_count(all_indices, bool(all_indices - set(graph.output)), graph.num_operands, graph.sizes)


def resized(plan: Plan, sizes) -> Plan:
    """``plan`` with its indices at ``sizes`` (one per index of its graph, 1 where the graph's
    is 1 and only there): :func:`build_plan`'s plan of that graph where its path does not
    depend on the sizes (one or two operands, or a path given), its steps' costs counted
    again, as :func:`_make_step` counts them.

    >>> from einc.planner.equation import parse
    >>> from einc.planner.graph import build
    >>> resized(build_plan(build(parse("ij,jk->ik"), [(2, 3), (3, 4)])), (5, 6, 7)).flops
    420
    """
    g = plan.graph
    sizes = tuple(sizes)
    steps = tuple([Step(s.kind, s.operands, s.result, s.inputs, s.output, s.batch, s.summed,
                        flop_count(dict.fromkeys(i for t in s.inputs for i in t), bool(s.summed), len(s.inputs), sizes),
                        math.prod([sizes[i] for i in s.output])) for s in plan.steps])
    graph = ContractionGraph(g.inputs, g.output, sizes, g.names)
    return Plan(graph, plan.equation, plan.optimizer, plan.path, steps, naive_flops(graph), sum(s.flops for s in steps),
                max(s.size for s in steps), notes=plan.notes)


class PairPlans:
    """:func:`build_plan`'s plans of one two-operand equation without an ellipsis (in its
    operands or its output, where one covers no dimension), under
    options whose path is the one order there is (einc's default search or left to right,
    no memory limit), for shapes that fit it (each label's sizes other than 1 equal: the
    caller's check) -- as ``plan_for`` gives them, without its general machinery: the
    labels resolved once, and the graph and step of each pattern of broadcast dimensions (a
    size 1 against a larger size of its label, an index of its own) made once
    (:meth:`_structure`); a plan of that pattern at other sizes is the same but for its
    sizes and costs."""

    __slots__ = ("text", "name", "terms", "output", "labels", "structures")

    def __init__(self, eq, options: Options):
        self.text, self.name, self.terms, self.output = eq.text, options.name, eq.inputs, eq.output
        self.labels = eq.inputs[0] + eq.inputs[1]       # each dimension's, the operands' in turn
        self.structures: dict = {}      # broadcast dimensions -> (graph, each index's label, step, its indices)

    @staticmethod
    def serves(eq, options: Options) -> bool:
        """Whether ``eq`` and ``options`` are ones this plans (see the class)."""
        return len(eq.inputs) == 2 and (options.optimize == AUTO or options.optimize is False) and \
            options.memory_limit is None and not any(ELLIPSIS in t for t in (*eq.inputs, eq.output))

    def plan(self, shapes) -> Plan:
        dims = (*shapes[0], *shapes[1])
        size = {label: n for label, n in zip(self.labels, dims) if n != 1}     # each label's, where not 1
        own = tuple([d for d, (label, n) in enumerate(zip(self.labels, dims)) if n == 1 and label in size])
        found = self.structures.get(own)
        if found is None:
            found = self.structures[own] = self._structure(own)
        graph, read, s, seen = found
        sizes = tuple([size.get(label, 1) for label in read])
        graph = ContractionGraph(graph.inputs, graph.output, sizes, graph.names)
        step = Step(s.kind, s.operands, s.result, s.inputs, s.output, s.batch, s.summed,
                    flop_count(seen, bool(s.summed), 2, sizes), math.prod([sizes[i] for i in s.output]))
        return Plan(graph, self.text, self.name, ((0, 1),), (step,), step.flops, step.flops, step.size)

    def _structure(self, own):
        """``(graph, read, step, seen)`` of a pattern of broadcast dimensions (``own``: their
        places among both operands' dimensions), as :func:`einc.planner.graph.build` and
        :func:`build_plan` make them (at sizes 1: :meth:`plan` puts in the sizes and costs):
        each index's label in ``read`` (its own name for a broadcast dimension, whose size
        is 1), the step's indices in ``seen``."""
        ids = {label: k for k, label in enumerate(dict.fromkeys(self.labels))}
        flat = [ids[label] for label in self.labels]
        rank = len(self.terms[0])
        for d in own:       # in order: as graph.build numbers them
            k = int(d >= rank)
            flat[d] = ids.setdefault(f"{self.labels[d]}'{k}", len(ids))
        inputs = [tuple(flat[:rank]), tuple(flat[rank:])]
        output = tuple([ids.setdefault(label, len(ids)) for label in self.output])
        read = tuple(ids)
        graph = ContractionGraph(tuple(inputs), output, (1,) * len(read),
                                 tuple([name if len(name) == 1 else _display(name) for name in read]))
        return graph, read, _make_step([0, 1], 2, inputs, None, graph, None), tuple(dict.fromkeys(flat))


def _follows(term, order) -> bool:
    """Whether ``term``'s indices appear in ``order`` in the same order."""
    place = [order.index(i) for i in dict.fromkeys(term) if i in order]
    return place == sorted(place)


def _make_step(operands, result, terms, held, graph, wanted) -> Step:
    """The step contracting ``operands`` (value ids; ``terms``: each value's indices) into
    value ``result``.  ``held`` counts, per index, the values not yet contracted that hold
    it, ``operands`` among them; they are taken off it here.  The result keeps the indices
    still held elsewhere, and those in ``wanted`` (the output's, as a set); the last step,
    whose ``wanted`` is None, makes the output."""
    sizes = graph.sizes
    pair = len(operands) == 2
    if pair:
        inputs = (terms[operands[0]], terms[operands[1]])
        a = set(inputs[0])
        both = a.intersection(inputs[1])
        # the indices in order of first appearance: A's, then those only B holds
        seen = list(dict.fromkeys(inputs[0] + inputs[1]))
    else:
        inputs = tuple([terms[v] for v in operands])
        both = set()
        seen = list(dict.fromkeys([i for t in inputs for i in t]))
    if held is not None:        # each operand no longer holds its indices (a shared one, two)
        for i in seen:
            held[i] -= 1
        for i in both:
            held[i] -= 1
    if wanted is None:
        output = graph.output
        gone = set(output)
        summed = tuple([i for i in seen if i not in gone])
    else:
        kept = [i for i in seen if held[i] or i in wanted]
        summed = tuple([i for i in seen if not (held[i] or i in wanted)]) if len(kept) < len(seen) else ()
    shares = not both.isdisjoint(summed)        # a shared index is summed
    batch = ()
    if wanted is not None:
        if both.isdisjoint(kept):
            output = tuple(kept)
        else:
            # Natural order for a matrix product: batch, then A's free, then B's free (as
            # ``seen``, ``kept`` runs A's indices first, then those only B holds).
            batch = tuple([i for i in kept if i in both])
            output = batch + tuple([i for i in kept if i not in both])
        if pair and not shares and kept and all(i in wanted for i in kept) \
                and all(_follows(t, in_order := tuple([i for i in graph.output if i in kept])) for t in inputs):
            # A product (nothing shared is summed) of the result's indices only, whose
            # operands already run in the result's order: in that order, so that a chain of
            # products ends in it with no permuting copy (in a matrix product's order, a
            # chain that puts each new operand first reverses it, and that copy was most of
            # an outer product of 16 vectors: bench/measured/pairwise.md).  Otherwise the
            # matrix product's order: a product with an index still to be summed is read
            # best so by the step that sums it, and one whose operand runs otherwise would
            # read it across its strides.
            output = in_order
            batch = tuple([i for i in output if i in both])
    elif both:
        batch = tuple([i for i in output if i in both])
    if not pair:
        kind = REDUCE
    elif not shares:
        kind = PRODUCT
    elif len(batch) == len(output):
        kind = DOT
    else:
        kind = CONTRACT
    flops = flop_count(seen, bool(summed), len(inputs), sizes)
    size = math.prod(map(sizes.__getitem__, output))
    return Step(kind, tuple(operands), result, inputs, output, batch, summed, flops, size)


# ----------------------------------------------------------------------- printing

def format_table(plan: Plan, backends=(), note: str = "") -> str:
    """The plan as a table, in the manner of opt_einsum's ``PathInfo``; ``backends`` (what
    runs each step) and ``note`` are the runtime's, shown by ``explain``."""
    lines = [
        f"  Complete contraction:  {plan.equation}",
        f"             Optimizer:  {plan.optimizer}",
        f"      Naive FLOP count:  {plan.naive_flops:.4g}",
        f"  Optimized FLOP count:  {plan.flops:.4g}",
        f"   Theoretical speedup:  {plan.speedup:.4g}",
        f"  Largest intermediate:  {plan.largest_intermediate:.4g} elements",
    ]
    s = plan.slicing
    if s is not None:
        names = ", ".join(plan.graph.names[i] + ("" if c == 1 else f" in chunks of {c}")
                          for i, c in zip(s.indices, s.chunks)) or "none"
        lines += [f"        Sliced indices:  {names} ({s.num_slices} slices, chosen by {s.planner}; each slice "
                  "runs the steps below, sizes per slice)",
                  f"         Memory limit:  {'none' if s.memory_limit is None else f'{s.memory_limit} elements'} "
                  f"(unsliced, this path's largest intermediate is {s.unsliced_largest:.4g})",
                  f"  Slicing FLOP overhead:  {s.overhead:.4g}x ({plan.flops:.4g} over all slices, "
                  f"{s.unsliced_flops:.4g} unsliced)",
                  f"        Estimated time:  {s.seconds * 1e3:.4g} ms, of which per-slice overhead "
                  f"{s.overhead_seconds * 1e3:.4g} ms (unsliced {s.unsliced_seconds * 1e3:.4g} ms: "
                  f"{s.seconds / s.unsliced_seconds if s.unsliced_seconds else 1:.3g}x; einc.planner.slicecost)"]
    lines += [f"  {note}" for note in plan.notes]
    rows = [("step", "kind", "operands", "contraction", "summed", "flops", "size")
            + (("backend",) if backends else ())]
    for s, step in enumerate(plan.steps):
        rows.append((f"{s + 1}", step.kind, ",".join(f"T{v}" for v in step.operands) + f"->T{step.result}",
                     plan.describe(step), plan.term(step.summed, plan.numbered(step)) or "-", f"{step.flops:.4g}",
                     f"{step.size:.4g}") + ((backends[s],) if backends else ()))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    rule = "-" * max(len(t) for t in table)
    notes = [rule, f"  Backend: {note}"] if note else []
    return "\n".join(lines + [rule, table[0], rule] + table[1:] + notes)

