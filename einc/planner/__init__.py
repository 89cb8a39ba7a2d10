"""The planner: equation -> graph -> plan (opt_einsum's order, slicing, fusion decisions).

Pure Python: nothing here imports torch or triton (``tests/test_layering.py``).
"""

from __future__ import annotations

import operator

from ..errors import OperandCountError
from . import slicing
from .equation import Equation, parse
from .graph import build
from .options import DEFAULT, Options
from .plan import Plan


def check_count(eq: Equation, n: int) -> None:
    """Raise if ``n`` operands (or shapes) do not fit ``eq``, in torch.einsum's words."""
    if n == eq.num_operands:
        return
    if n >= 3:      # torch.einsum fails in opt_einsum's path search first
        head = f"Number of einsum subscripts, {eq.num_operands}, must be equal to the number of operands, {n}"
    else:
        head = f"{'fewer' if n < eq.num_operands else 'more'} operands were provided than specified in the equation"
    raise OperandCountError(
        f"einsum(): {head}: it names {eq.num_operands} "
        f"({', '.join(repr(eq.term(k)) for k in range(eq.num_operands))}) but "
        f"{n} {'was' if n == 1 else 'were'} passed\n  {eq.text}")


def plan_for(equation: Equation | str, shapes, options: Options = DEFAULT) -> Plan:
    """Parse, resolve, plan: the one pipeline every door (and ``einc dump``) uses.  The
    plan of ``equation`` (text or parsed) for operands of these ``shapes``: opt_einsum's
    order as ``options`` ask, sliced where ``options.memory_limit`` requires (fusion is
    decided later, per dtype: :func:`einc.planner.fuse.fuse_plan`).

    >>> plan_for("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]).path
    ((0, 1), (0, 1))
    """
    eq = parse(equation) if isinstance(equation, str) else equation
    check_count(eq, len(shapes))
    # sizes as ints (numpy's integers too: a path remembered on disk is named in json, and a
    # limit of 'max_input' made of them seeds the slicer's random trials)
    shapes = [s if all(type(d) is int for d in s) else tuple(map(operator.index, s)) for s in shapes]
    return slicing.plan(build(eq, shapes), eq.text, options)


__all__ = ["plan_for", "check_count"]
