"""opt_einsum's numpy keywords, ``dtype``, ``order`` and ``casting``, as :func:`einc.contract`
and :func:`einc.contract_expression` read them: checked (:func:`check`), the operands cast
(:func:`cast_operands`), ``order`` as the ``layout`` it asks for (:func:`layout_of`).
"""

from __future__ import annotations

import torch

from . import traced_doors
from .custom_op import constant_result, refuse
from .errors import ArgumentError, DtypeError, OperandTypeError
from .planner.equation import call_form

CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def layout_of(door: str, order: str, layout):
    """The ``layout`` numpy's ``order`` asks for: ``"C"`` a C-contiguous result."""
    if order != "C":
        return layout
    if isinstance(layout, str) and layout.lower() == "any":
        refuse(ArgumentError, f"{door}(): order='C' asks for a C-contiguous result, layout='any' for any dense "
                              "layout: pass one of them")
    return "contiguous" if layout is None else layout


def check(door: str, dtype=None, order="K", casting="safe", **unknown) -> None:
    """Raise where ``door`` cannot honour these keywords (``unknown`` ones included), or
    ``dtype`` names no torch dtype."""
    if unknown:
        refuse(ArgumentError, f"{door}(): unexpected keyword {', '.join(sorted(unknown))}")
    if order not in ("K", "C"):
        refuse(ArgumentError, f"{door}(): order={order!r} cannot be honoured: einc's results are C-contiguous, "
                              "or with layout='any' dense in its plan's order (order 'K' or 'C')")
    if casting not in CASTINGS:
        refuse(ArgumentError, f"{door}(): casting must be one of {', '.join(CASTINGS)}, got {casting!r}")
    if dtype is not None:
        traced_doors.torch_dtype(dtype, "contract()")


def operands(args) -> list:
    """The operands of ``args``, string or interleaved form."""
    return list(call_form(args)[1]) if args and isinstance(args[0], str) else list(args[0:len(args) // 2 * 2:2])


def proxied(args) -> bool:
    """Whether an operand of ``args`` is no tensor but takes part in ``__torch_function__``
    (an ``fx.Proxy``): it has no dtype to cast from, so the call is recorded whole
    (:func:`einc.contract` passes it on), and cast when the graph runs."""
    return any(not isinstance(o, torch.Tensor) and hasattr(type(o), "__torch_function__") for o in operands(args))


@constant_result       # (dynamo calls it as it traces: torch.can_cast gives no tensor)
def _castable(source: torch.dtype, target: torch.dtype, casting: str) -> bool:
    if casting in ("no", "equiv"):
        return source == target
    if casting == "safe":
        return torch.promote_types(source, target) == target
    if casting == "same_kind":
        return torch.can_cast(source, target)
    return True


def cast_operands(args, dtype: torch.dtype, casting: str):
    """``args`` with every operand cast to ``dtype`` (string or interleaved form)."""
    def cast(k, o):
        if not isinstance(o, torch.Tensor):
            refuse(OperandTypeError, f"contract(): operand {k} must be a torch.Tensor, got {type(o).__name__}")
        if not _castable(o.dtype, dtype, casting):
            looser = " or ".join(repr(c) for c in CASTINGS[CASTINGS.index(casting) + 1:]
                                 if _castable(o.dtype, dtype, c))
            refuse(DtypeError, f"contract(): cannot cast operand {k} from {o.dtype} to {dtype} with "
                               f"casting={casting!r}; pass casting={looser} to allow it")
        return o.to(dtype)
    if args and isinstance(args[0], str):
        text, operands = call_form(args)
        return (text, *[cast(k, o) for k, o in enumerate(operands)])
    n = len(args) // 2
    return tuple(cast(i // 2, a) if i % 2 == 0 and i < 2 * n else a for i, a in enumerate(args))
