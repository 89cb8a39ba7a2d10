"""Fusion: which steps of a plan run as one generated kernel, decided by the bytes saved.

A pure function of the plan (and the operands' dtype, for bytes).  Two patterns, around
one ``contract`` step (a matrix product on the kernel path):

- **prologue**: a ``product`` step ``X[bi] * Y[bj] -> T[bij]`` whose result the
  contraction reads (``bi,oij,bj->bo``): the contraction loads X and Y and multiplies
  them inside its tile loads, so ``T`` is never written;
- **epilogue**: a ``product`` step ``T * F`` that multiplies the contraction's result by a
  factor ``F`` over some of its indices (``nlhd,nhmd,nlh->nlhm``): the kernel multiplies
  its accumulator by F before the store and writes the product step's layout.

Bytes, in a model where each kernel reads each operand once per pass of the other
operand's tiles (``R`` passes: the other side's free extent over a 128-row tile):
unfused, a prologue costs ``X + Y + T`` (the product step) ``+ R*T`` (the contraction's
reads of T); fused, ``R*(X + Y)``.  It fuses where the difference is not negative (at equal
bytes one launch fewer wins): always for an outer product (``T`` much larger than ``X + Y``),
not for an elementwise product the contraction would read many times.  An epilogue saves
writing ``T`` and reading it back (``2*T``), always positive.

The result is a :class:`~einc.planner.plan.Plan` whose steps are the plan's, with each fused group
replaced by one :class:`FusedStep` (kind ``fused``) at the place of its last step: the
runtime unrolls it, ``explain`` prints it, :func:`lower_program` lowers it.  Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .plan import CONTRACT, PRODUCT, Plan, Step

FUSED = "fused"
TILE = 128                      # the row tile of the traffic model
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}   # dtypes with fused kernels


@dataclass(frozen=True)
class FusedStep(Step):
    """Steps of a plan run as one kernel.  ``operands`` are, in order, the factors of the
    contraction's first operand (one tensor, or the two of a fused product), those of its
    second, then the epilogue factor, if any; ``sides`` says how many each part has
    (``(a, b, e)``).  ``parts`` are the plan's steps it runs (in order), ``numbers`` their
    1-based numbers in the plan, ``saved`` the bytes the traffic model says fusing saves."""

    parts: tuple[Step, ...] = ()
    numbers: tuple[int, ...] = ()
    sides: tuple[int, int, int] = (1, 1, 0)
    saved: int = 0


def _numel(sizes, term) -> int:
    return math.prod(sizes[i] for i in set(term))


def _prologue_saving(plan: Plan, product: Step, contract: Step, side: int) -> int:
    """Elements of traffic saved by computing ``product`` inside ``contract``'s loads of operand ``side``."""
    sizes = plan.graph.sizes
    other = set(contract.inputs[1 - side])
    mine = set(contract.inputs[side])
    free = [i for i in contract.output if i in other and i not in mine]
    passes = max(1, math.ceil(math.prod(sizes[i] for i in free) / TILE))
    t = _numel(sizes, product.output)
    xy = sum(_numel(sizes, term) for term in product.inputs)
    return (1 + passes) * t - (passes - 1) * xy


def _fusable_product(plan: Plan, step: Step) -> bool:
    """A pairwise product that sums nothing (but size-1 broadcast dimensions, which a
    kernel reads at 0 by leaving them out of every group)."""
    return step.kind == PRODUCT and len(step.operands) == 2 and all(plan.graph.sizes[i] == 1 for i in step.summed)


def _sums_alone(step: Step, sizes) -> bool:
    """Whether a contraction sums an index (not of size 1) one of its operands alone holds:
    a fused kernel would sum it as part of K, after the product (an inf of the other
    operand times a 0 among its terms: NaN), where the plain kernel sums it while loading,
    before the product, as torch.einsum does."""
    a, b = map(set, step.inputs)
    return any(sizes[i] > 1 and (i not in a or i not in b) for i in step.summed)


def fuse_plan(plan: Plan, dtype: str) -> Plan:
    """``plan`` with the steps that fuse (saving bytes, for operands of ``dtype``) merged
    into :class:`FusedStep` s; ``plan`` itself where nothing fuses.

    >>> from einc.planner.equation import parse
    >>> from einc.planner.graph import build
    >>> from einc.planner.plan import build_plan
    >>> p = build_plan(build(parse("bi,oij,bj->bo"), [(64, 32), (16, 32, 32), (64, 32)]))
    >>> [s.kind for s in p.steps], [s.kind for s in fuse_plan(p, "float32").steps]
    (['product', 'contract'], ['fused'])
    """
    itemsize = ITEMSIZE.get(dtype)
    if itemsize is None:
        return plan
    sizes = plan.graph.sizes
    maker = {step.result: s for s, step in enumerate(plan.steps)}
    user = {v: s for s, step in enumerate(plan.steps) for v in step.operands}
    taken: set[int] = set()
    groups: dict[int, FusedStep] = {}          # place (last step's number) -> fused step
    for s, step in enumerate(plan.steps):
        if step.kind != CONTRACT or s in taken or _sums_alone(step, sizes):
            continue
        parts = {s}
        sides: list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]] = []
        saved = 0
        for side, v in enumerate(step.operands):
            p = maker.get(v)
            if p is not None and p not in taken and _fusable_product(plan, plan.steps[p]):
                gain = _prologue_saving(plan, plan.steps[p], step, side)
                if gain >= 0:       # at equal bytes one launch fewer wins
                    parts.add(p)
                    saved += gain
                    sides.append((plan.steps[p].operands, plan.steps[p].inputs))
                    continue
            sides.append(((v,), (step.inputs[side],)))
        e_ops: tuple[int, ...] = ()
        e_terms: tuple[tuple[int, ...], ...] = ()
        output = step.output
        result = step.result
        e = user.get(step.result)
        if e is not None and e not in taken and _fusable_product(plan, plan.steps[e]):
            epi = plan.steps[e]
            k = epi.operands.index(step.result)
            factor = epi.inputs[1 - k]
            if set(factor) - set(epi.summed) <= set(step.output) and set(epi.output) == set(step.output):
                parts.add(e)
                saved += 2 * _numel(sizes, step.output)
                e_ops, e_terms = (epi.operands[1 - k],), (factor,)
                output, result = epi.output, epi.result
        if len(parts) == 1:
            continue
        taken |= parts
        order = tuple(sorted(parts))
        ops = sides[0][0] + sides[1][0] + e_ops
        terms = sides[0][1] + sides[1][1] + e_terms
        members = tuple(plan.steps[p] for p in order)
        groups[order[-1]] = FusedStep(
            FUSED, ops, result, terms, output, step.batch, step.summed, sum(m.flops for m in members),
            math.prod(sizes[i] for i in output), members, tuple(p + 1 for p in order),
            (len(sides[0][0]), len(sides[1][0]), len(e_ops)), saved * itemsize)
    if not groups:
        return plan
    steps = tuple(groups.get(s, step) for s, step in enumerate(plan.steps)
                  if s in groups or s not in taken)
    return replace(plan, steps=steps, largest_intermediate=max(st.size for st in steps))


def is_fused(plan: Plan) -> bool:
    return any(step.kind == FUSED for step in plan.steps)


def reason(step: FusedStep, plan: Plan | None = None) -> str:
    """Why ``step`` is one kernel, in words (``explain``'s reason column)."""
    what = " + ".join(f"{p.kind}" + (f" {plan.describe(p)}" if plan is not None else "") for p in step.parts)
    return (f"plan steps {'+'.join(map(str, step.numbers))} fused into one kernel ({what}); "
            f"saves ~{step.saved / 1e6:.4g} MB of memory traffic")


def notes(plan: Plan) -> str:
    """Lines under a plan's table naming each fused step's parts ('' if none)."""
    lines = [f"  step {s + 1}: {reason(step, plan)}" for s, step in enumerate(plan.steps) if step.kind == FUSED]
    return "\n".join(lines)


__all__ = ["FUSED", "FusedStep", "fuse_plan", "is_fused", "reason", "notes"]
