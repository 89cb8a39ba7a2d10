"""What the doors read of a call's arguments, for torch.einsum's door (:mod:`einc.api`) and
opt_einsum's (:mod:`einc.opt_einsum_api`) alike: the options, with einc's default
``optimize`` under torch's ``torch.backends.opt_einsum`` settings (:func:`call_options`),
``backend=`` (:func:`check_backend`), and a shape given as numbers (:func:`shape_of`)."""

from __future__ import annotations

import math
import numbers
import operator

import torch

from . import custom_op
from .errors import ArgumentError, OperandTypeError, ShapeError
from .planner import notation
from .planner.givenpath import plain
from .planner.options import AUTO, DEFAULT_OPTIMIZE, INTERNED, Options, torch_optimize

# ----------------------------------------------------------------------- torch's settings and the options

# torch.einsum reads ``torch.backends.opt_einsum.enabled`` and ``.strategy`` as attributes of
# a module wrapper: a value assigned to the attribute (``torch.backends.opt_einsum.enabled =
# False``) lands in the wrapper's own dict and wins; otherwise the wrapped module's global
# holds it (set by ``torch.backends.opt_einsum.flags()`` / ``set_flags()``).  einc reads the
# same two dicts directly -- four dict lookups, where the attribute read costs a Python
# ``__getattr__`` -- on every default call, so a change is seen by the next call.
_OE = torch.backends.opt_einsum
OE_OWN = vars(_OE) if hasattr(_OE, "m") else {}      # (a plain module: its own dict is the one place)
OE_MOD = vars(getattr(_OE, "m", _OE))
if "enabled" not in OE_MOD or "strategy" not in OE_MOD:     # a torch that keeps them elsewhere
    OE_OWN, OE_MOD = {}, {"enabled": True, "strategy": AUTO}


def torch_settings() -> tuple:
    """``(enabled, strategy)`` of ``torch.backends.opt_einsum``, as torch.einsum reads them."""
    return (OE_OWN.get("enabled", OE_MOD.get("enabled", True)),
            OE_OWN.get("strategy", OE_MOD.get("strategy", AUTO)))


def call_options(optimize, memory_limit, select, layout=None) -> Options:
    """The call's options; einc's default ``optimize`` under torch's settings where it was
    not passed (see :func:`einc.planner.options.torch_optimize`)."""
    if optimize is DEFAULT_OPTIMIZE:
        optimize = torch_optimize(*torch_settings())
    try:
        options = INTERNED[optimize, memory_limit, select, layout]
    except (KeyError, TypeError):
        return Options.of(optimize, memory_limit, select, layout)
    # True == 1 and 1.0 == 1 as keys: a tuple path of bools or floats finds an int path's
    # options, which only a path of Python ints may take (else as a first call reads it)
    return options if optimize.__class__ is not tuple or plain(optimize) else Options.of(optimize, memory_limit,
                                                                                          select, layout)


# ----------------------------------------------------------------------- backend=

TORCH_BACKENDS = ("auto", "torch")


def check_backend(backend) -> None:
    """Raise for a ``backend=`` that names no torch backend (None, ``"auto"``, ``"torch"``)."""
    if backend is not None and backend not in TORCH_BACKENDS:
        reject_backend(backend)


def reject_backend(backend):
    """Raise einc's ArgumentError for a ``backend=`` that names no torch backend (under
    dynamo, as :func:`einc.custom_op.refuse` lets it out of a trace)."""
    custom_op.refuse(ArgumentError, f"einc runs on torch tensors only: backend={backend!r} is not one einc can use "
                     "(it accepts None, 'auto' and 'torch'). For other array libraries keep opt_einsum.contract; "
                     "for torch tensors drop backend= or pass backend='torch'")


# ----------------------------------------------------------------------- shapes given as numbers

def shape_of(x):
    """The shape of ``x``, a tensor (or an array) or a shape given as numbers (each a whole
    number, none negative)."""
    if isinstance(x, torch.Tensor) or (hasattr(x, "shape") and hasattr(x, "dtype")):    # a tensor, an array
        return tuple(x.shape)
    try:
        sizes = tuple(x)
    except TypeError:
        raise OperandTypeError(f"expected a tensor or a shape (a sequence of ints), got {type(x).__name__}") \
            from None
    shape = tuple(_size(s, sizes) for s in sizes)
    if any(s < 0 for s in shape):
        raise ShapeError(f"a shape cannot hold negative sizes: {shape}")
    return shape


def _size(s, shape) -> int:
    """A size of a shape given as numbers: an int (numpy's, a 0-d tensor's, a float such as
    8.0 that is one), never 8.5 taken as 8."""
    try:
        if not notation.is_boolean(s):      # (operator.index takes True as 1)
            return operator.index(s)
    except TypeError:
        if isinstance(s, numbers.Real) and not isinstance(s, bool) and math.isfinite(s) and float(s).is_integer():
            return int(s)
    raise OperandTypeError(f"a shape's sizes must be whole numbers, got {s!r} in {shape!r}")
