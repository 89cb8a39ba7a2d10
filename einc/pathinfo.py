"""opt_einsum's ``PathInfo``: :func:`einc.contract_path`'s info, :func:`einc.explain`'s answer
with opt_einsum's names and counts."""

from __future__ import annotations

import dataclasses
import functools
import math

from .planner.options import LEFT_TO_RIGHT
from .planner.plan import Plan, opt_einsum_labels
from .runtime.explain import Explanation


class PathInfo(Explanation):
    """:func:`contract_path`'s info: :func:`explain`'s answer (prints as its table; the
    plan's attributes read through) with opt_einsum's ``PathInfo`` names:
    ``opt_cost`` (flops of the plan, opt_einsum's count), ``naive_cost`` and ``speedup``
    (opt_einsum's: see :attr:`naive_cost`), ``largest_intermediate``, ``path`` (a list of
    tuples), ``eq`` (the equation with its output, ellipses spelled out), ``input_subscripts``,
    ``output_subscript``, ``indices``, ``shapes``, ``size_dict``, ``size_list`` (each step's
    result size) and ``scale_list`` (each step's number of indices).  Its table shows
    these ``naive_cost`` and ``speedup``; ``info.plan`` keeps einc's own count
    (``plan.naive_flops``), which ``explain`` shows.  Each of these is worked out from the
    plan once, when first read, and kept (as opt_einsum's are values)."""

    _text = None        # its table, where it was planned as a constant under torch.compile (keep)

    def __init__(self, info: Explanation, shapes):
        super().__init__(info.plan, info.backends, info.note, info.reasons, info.size_class)
        self.shapes = [tuple(s) for s in shapes]

    def keep(self) -> None:
        """Make ``str()`` answer the table as it is now, without making it again, and every
        attribute a value of the instance: the info of a ``contract_path`` planned as a constant
        while dynamo traces (:mod:`einc.traced_doors`).  Dynamo would trace the table's making
        in the compiled function, and cannot (it stopped on the table's counts), and it cannot
        read a property of a constant (it guards the getter's source, which a constant has
        not): it left ``info.opt_cost`` unread, so ``x * info.opt_cost`` raised its
        ``Unsupported``.  A value in the instance it reads as a constant.  The table and the
        attributes are functions of the sizes, as the info is."""
        self._text = str(self)
        for name, attribute in vars(PathInfo).items():
            if isinstance(attribute, functools.cached_property):
                getattr(self, name)

    @functools.cached_property
    def opt_cost(self) -> int:
        return self.plan.flops

    @functools.cached_property
    def naive_cost(self) -> int:
        """opt_einsum's naive count: every index of the equation in one loop nest, times
        the number of operands less one (at least 1), plus 1 where an index is shared by
        two operands (summed or not), as ``opt_einsum.contract_path`` counts it.  (einc's
        ``plan.naive_flops`` adds the 1 where an index is summed instead.)"""
        terms = [set(t) for t in self.input_subscripts.split(",")]
        indices = set().union(*terms)
        size = self.size_dict
        inner = sum(len(t) for t in terms) > len(indices)
        return math.prod(size[i] for i in indices) * (max(1, len(terms) - 1) + inner)

    @functools.cached_property
    def speedup(self) -> float:
        """``naive_cost / opt_cost`` (over 1 where ``opt_cost`` is 0), as opt_einsum's."""
        return self.naive_cost / max(self.opt_cost, 1)

    def __str__(self) -> str:
        if self._text is not None:
            return self._text
        fields = {f.name: getattr(self.plan, f.name) for f in dataclasses.fields(self.plan)}
        fields["naive_flops"] = self.naive_cost
        return str(Explanation(_OptEinsumCounts(**fields), self.backends, self.note, self.reasons, self.size_class))

    @functools.cached_property
    def path(self) -> list:
        """Left to right (``optimize=False``), opt_einsum's one step of every operand, which
        einc runs pairwise, left to right, as any explicit step of three or more."""
        n = len(self.plan.graph.inputs)
        return [tuple(range(n))] if self.plan.optimizer == LEFT_TO_RIGHT and n > 2 else list(map(tuple, self.plan.path))

    @functools.cached_property
    def _letters(self) -> tuple:
        """Each index's character, as opt_einsum spells it (the caller's; an ellipsis
        dimension's one the equation does not use; a size-1 dimension broadcast against a
        larger one, an index of its own in einc's graph, its label's):
        :func:`~einc.planner.plan.opt_einsum_labels`."""
        return opt_einsum_labels(self.plan.graph)

    def _term(self, indices) -> str:
        letters = self._letters
        return "".join(letters[i] for i in indices)

    @functools.cached_property
    def input_subscripts(self) -> str:
        return ",".join(self._term(t) for t in self.plan.graph.inputs)

    @functools.cached_property
    def output_subscript(self) -> str:
        return self._term(self.plan.graph.output)

    @functools.cached_property
    def eq(self) -> str:
        return f"{self.input_subscripts}->{self.output_subscript}"

    @functools.cached_property
    def indices(self) -> frozenset:
        return frozenset(self._term(t) for t in self.plan.graph.inputs for t in [(i,) for i in t])

    @functools.cached_property
    def size_dict(self) -> dict:
        """letter -> size; a letter broadcast (size 1 against n) has size n, as in opt_einsum."""
        sizes: dict = {}
        for c, n in zip(self._letters, self.plan.graph.sizes):
            if sizes.get(c, 1) == 1:
                sizes[c] = n
        return sizes

    @functools.cached_property
    def size_list(self) -> list:
        return [step.size for step in self.plan.steps]

    @functools.cached_property
    def scale_list(self) -> list:
        return [len({i for t in step.inputs for i in t}) for step in self.plan.steps]


class _OptEinsumCounts(Plan):
    """A plan as :class:`PathInfo`'s table shows it: its speedup opt_einsum's, over at
    least 1 flop (its ``naive_flops`` is set to :attr:`PathInfo.naive_cost`)."""

    @property
    def speedup(self) -> float:
        return self.naive_flops / max(self.flops, 1)
