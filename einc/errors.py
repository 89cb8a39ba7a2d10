"""einc's exceptions.

Every error einc raises derives from :class:`EincError` and from the built-in type
that ``torch.einsum`` raises for the same condition, so ``except RuntimeError``
written against torch keeps working.  torch.einsum raises ``RuntimeError`` for a bad
equation, operand count or shape with one or two operands, and ``ValueError`` (from
opt_einsum's path search, which runs first) with three or more: those einc errors
derive from both.  Each message starts with torch's own sentence for the condition
(code written against torch matches it with ``assertRaisesRegex``), then names the
operand, the index and the sizes, and points at the equation with a caret.

einc's warnings go through :func:`warn`, which names the caller's line.
"""

from __future__ import annotations

import operator
import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _torch_package() -> str:
    torch = sys.modules.get("torch")
    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep if torch is not None else _PACKAGE


def _generated() -> tuple[str, ...]:
    """Where torch's generated code lives: FX graph modules (``<eval_with_key>.N``) and,
    once inductor was imported, its cache of compiled modules."""
    found = ("<eval_with_key>",)
    utils = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    if utils is not None:       # (cache_dir() would set TORCHINDUCTOR_CACHE_DIR and make the folder)
        try:
            folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or utils.default_cache_dir()
            found += (os.path.abspath(folder) + os.sep,)
        except Exception:           # noqa: BLE001 -- another torch's layout: the FX frames only
            pass
    return found


def warn(message: str, category=RuntimeWarning) -> None:
    """Warn as from the first line outside einc and torch that led here (the caller's:
    under vmap or torch.compile, torch's own frames and the code it generated stand
    between), so that ``warnings.filterwarnings(module=...)`` and the once-per-location
    rule apply to the caller's code, not einc's; where every frame is theirs, the
    outermost."""
    inside = (_PACKAGE, _torch_package()) + _generated()
    frame, level, last = sys._getframe(1), 2, 2
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
        if frame is not None:
            last = level
    warnings.warn(message, category, stacklevel=level if frame is not None else last)


class EincError(Exception):
    """Base class of every einc error."""


class EquationError(EincError, RuntimeError, ValueError):
    """The equation text is malformed (bad character, misplaced ``->`` or ``.``)."""


class OperandCountError(EincError, RuntimeError, ValueError):
    """The equation names a different number of operands than were passed."""


class ShapeError(EincError, RuntimeError, ValueError):
    """An operand's shape does not fit the equation (ndim or index sizes)."""


class DtypeError(EincError, RuntimeError):
    """Operands have dtypes that cannot be contracted together."""


class UnsupportedDtypeError(EincError, NotImplementedError):
    """A dtype torch cannot contract (``bool`` has no matrix product)."""


class OperandTypeError(EincError, TypeError, ValueError):
    """An operand is not a tensor, or a sublist holds something other than ints.  (torch
    raises TypeError for some of these calls and, through opt_einsum, ValueError for
    others: this is both.)"""


class ArgumentError(EincError, ValueError):
    """A call was malformed: no operands, a bad sublist subscript, a bad option."""


class PathError(EincError, ValueError):
    """An explicit contraction path or an optimizer name is invalid."""


class UnknownOptimizerError(PathError, KeyError):
    """``optimize=`` names no strategy: a :class:`PathError` (a ``ValueError``), and a
    ``KeyError``, as opt_einsum's lookup of the name raises."""

    __str__ = Exception.__str__         # the message, not KeyError's repr of it


class MemoryLimitError(EincError, ValueError):
    """``memory_limit`` can be met only by a slicing estimated to cost far more than the
    unsliced contraction (see :mod:`einc.planner.slicecost`); the message names the estimated
    slice count and time and, on the same path, the smallest power-of-two limit that keeps
    the cost within 2x."""


def caret(equation: str, position: int | None) -> str:
    """Return the equation with a caret under ``position`` (two indented lines).

    >>> print(caret("ij,jk->ik", 3))
      ij,jk->ik
         ^
    """
    if position is None or position < 0:
        return f"  {equation}"
    # (operator.index: torch 2.11's dynamo reads an int of a named expression's equation as a
    # symbol under dynamic=True, and cannot multiply a str by one; the index is its value)
    return f"  {equation}\n  {' ' * operator.index(position)}^"


def expression_count(equation: str, takes: int, constants, got: int) -> str:
    """The message of an expression (``contract_expression``'s, a named equation's too)
    called with ``got`` operands where it takes ``takes`` (its ``constants`` not counted):
    one sentence for every kind of expression.

    >>> expression_count("ij,jk->ik", 1, [1], 2)
    "this expression for 'ij,jk->ik' takes 1 operands (its operands [1] are constants), got 2"
    """
    but = f" (its operands {list(constants)} are constants)" if constants else ""
    return f"this expression for {equation!r} takes {takes} operands{but}, got {got}"


class ConfigError(EincError, ValueError):
    """An environment setting (``EINC_*``) has a value einc does not accept."""


class ReentrantCallError(EincError, RuntimeError):
    """A thread asked for a plan while it was building that same plan (planning called back
    into einc for the same key): raised, never waited on."""


class LayoutError(EincError, RuntimeError):
    """An operand is not a strided tensor (sparse, mkldnn) where torch's einsum, which
    answers for such operands, cannot contract it or would broadcast it (torch multiplies
    a broadcast sparse tensor wrongly): a ``RuntimeError``, as torch's own errors there."""


class UnsupportedLayoutError(LayoutError, NotImplementedError):
    """A :class:`LayoutError` where torch's einsum has no op for the operand's layout (an
    mkldnn tensor has no ``as_strided``): a ``NotImplementedError``, as torch's error is."""


class OutError(EincError, RuntimeError):
    """``out=`` cannot take the result (shape, dtype or device differ), or autograd would
    have to see through it (torch's ``out=`` rule)."""


class SizeKeywordError(ArgumentError, TypeError):
    """A keyword argument that is neither one of the door's keywords nor an axis of the
    (named) equation: a ``TypeError``, as torch.einsum's unexpected keyword is."""


class KernelLoadError(EincError, RuntimeError):
    """A generated kernel module failed to load; the message holds its numbered source."""
