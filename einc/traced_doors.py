"""opt_einsum's planning doors, ``contract_path`` and ``contract_expression``, called while
dynamo traces a compiled function.

Planning is host work on sizes: dynamo does not trace ``contract_path`` (einc's planner
takes locks and reads its caches; dynamo stopped on the first of them, under
``fullgraph=True`` with its own error).  It calls the door once, as a constant
(``constant_result``), on the operands' shapes: a size traced as a symbol is specialized to
its value (:func:`einc.custom_op.number`: dynamo guards on it, so other sizes trace again, as the eager
door plans again).  Each tensor is described by its shape, strides, dtype and device, and the
door is called on stand-ins of that description (fake tensors, which hold no memory): the
answer is the eager call's, whatever the tensors' layouts and dtypes.  A tensor that is not
strided (sparse) cannot be stood in for, nor can an expression be made a constant (dynamo
cannot call it): there dynamo breaks the graph and runs the door eagerly, and under
``fullgraph=True`` einc raises an :class:`~einc.errors.ArgumentError` that says to call the
door outside the compiled function.

Here too what the doors read as dynamo calls it, eager or traced: a dtype's name
(:func:`torch_dtype`), an expression's shapes against its constants' (:func:`whole_built`),
and the dtype error of an expression's call with constants (:func:`whole_error`,
:func:`dtypes_checked`).
"""

from __future__ import annotations

import sys
import weakref

import numpy
import torch

from .custom_op import _kind, constant_result, number, reject_under_fullgraph, sizes, strict, traced_error
from .errors import ArgumentError, DtypeError, EincError, PathError, ShapeError, UnsupportedDtypeError
from .named import as_written
from .planner.equation import Equation, call_form, parse, parse_as_called, sublist_equation
from .planner.givenpath import as_path
from .planner.graph import build
from .planner.options import AUTO, Options, plain_limit
from .runtime import dtypes, engine


def path(door, args, kwargs):
    """``door(*args, **kwargs)`` (``contract_path``) while dynamo traces."""
    if len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], (list, tuple)) and args[1] and \
            all(isinstance(t, (torch.Tensor, tuple, list)) for t in args[1]):
        args = (args[0], *args[1])      # (the operands as one list, as the door reads them)
    if "optimize" in kwargs:
        kwargs = {**kwargs, "optimize": as_path(numpy_read(kwargs["optimize"]))}
    if "memory_limit" in kwargs:
        kwargs = {**kwargs, "memory_limit": numpy_read(kwargs["memory_limit"])}
    described = _described(args)
    if described is None:
        return _eagerly(door, "contract_path", args, kwargs, "strided tensors or shapes; call it outside the "
                                                             "compiled function")
    planned = _planned(door, *described, kwargs)
    if planned is None:     # an error, without fullgraph: the door run eagerly raises it
        return torch.compiler.disable(door)(*args, **kwargs)
    return planned


def expression(door, args, kwargs):
    """``door(*args, **kwargs)`` (``contract_expression``) while dynamo traces: run eagerly,
    dynamo breaking the graph there (under ``fullgraph=True``, einc's error).  As a constant
    the expression could not be called: dynamo guards the call of an object on where it came
    from, which it cannot do for a constant (torch 2.13)."""
    return _eagerly(door, "contract_expression", args, kwargs, "no expression while it traces; build the "
                                                               "expression outside the compiled function and "
                                                               "call it inside")


def numpy_read(optimize):
    """A path's (or a memory limit's, or a sublist's) numpy arrays and integers as lists and
    ints, read while dynamo traces.  Dynamo reads a numpy value as a tensor, an input of the
    graph whose value it does not know (an int64's it specializes where asked, an int32's it
    cannot), but the op's text needs the path: so each is read as a constant, its value at the
    trace.  (Dynamo guards its dtype and shape, not its values: a path changed in place later
    runs the traced one, which contracts the same equation.)  A numpy scalar met outside dynamo
    (jit.trace, torch.fx) is read as Python's too: the op's text and an fx node take no numpy
    value.  Anything else as given."""
    if isinstance(optimize, _NUMPY):     # (a numpy integer is an ndarray to dynamo)
        return _numpy_value(optimize)
    if not isinstance(optimize, (list, tuple)):
        return optimize
    return [_numpy_value(p) if isinstance(p, _NUMPY) else
            [_numpy_value(i) if isinstance(i, _NUMPY) else i for i in p] if isinstance(p, (list, tuple)) else p
            for p in optimize]


_NUMPY = (numpy.ndarray, numpy.generic)


def options_read(args, optimize, memory_limit, select, layout) -> tuple:
    """``(optimize, memory_limit)`` as the op's text carries them (a path's, a limit's numpy
    values as Python's: :func:`numpy_read`), checked at trace time in the eager call's order:
    a string equation in ``args`` (the call's) that does not parse, then ``optimize``,
    ``memory_limit``, ``select`` and ``layout`` as :meth:`Options.of` reads them, each raising
    the eager call's error (a limit spelled as eager spells it: the op's text carried its repr,
    which read back as a string, ``'True'`` for True).  An optimizer object, which eager takes,
    comes back as given (the compiled op cannot carry it: the caller refuses it)."""
    text = args[0] if args and isinstance(args[0], str) else None
    count = len(call_form(args)[1]) if text is not None else 0
    checked, spelled = optimize, None
    if not _plain_option(optimize) and type(optimize) is _OBJECT:   # (dynamo's ObjectVariable: no callable(),
        checked, spelled = None, f"<object object at {hex(id(optimize))}>"     # repr() nor hasattr() of it traces)
    else:
        optimize = checked = as_path(numpy_read(optimize))
        if not _plain_option(optimize) and callable(optimize):
            checked = AUTO
    return optimize, _options_read(text, count, checked, spelled, number(numpy_read(memory_limit)), select, layout)


@constant_result
def _options_read(text, count: int, optimize, spelled, memory_limit, select, layout):
    """(dynamo calls it as it traces: its error as dynamo lets it through; ``spelled``, where
    given, the repr of an ``optimize`` it could not pass)"""
    try:
        if text is not None:
            parse_as_called(text, count)
        return Options.of(_Spelled(spelled) if spelled is not None else optimize, memory_limit, select,
                          layout).memory_limit
    except EincError as error:
        raise traced_error(error) from None


def _plain_option(optimize) -> bool:
    """Whether ``optimize`` is a name, a bool, a path or None: no object."""
    return optimize is None or isinstance(optimize, (str, bool, list, tuple))


_OBJECT = object     # (a global: dynamo cannot guard the builtin read from this module)


def optimizer_message(name: str, door: str = "torch.compile",
                      holder: str = "the compiled op carries optimize as text") -> str:
    """PathError's text for an optimizer object (``name``, its class) that ``door`` cannot take."""
    return (f"einsum(): under {door}, optimize= cannot be a {name} object: {holder}. Find the path outside "
            f"the {'compiled' if door == 'torch.compile' else 'traced'} function and pass it (path, _ = "
            "einc.contract_path(equation, *shapes, optimize=optimizer); einc.einsum(..., optimize=path)), or "
            "pass a strategy name such as 'greedy' or 'dp'")


def fx_recordable(operands, optimize) -> None:
    """Raise PathError where torch.fx would record ``optimize``, an optimizer object, in a node:
    no node holds one (fx's own NotImplementedError); a tensor subclass or a mode takes it."""
    fx = sys.modules.get("torch.fx")
    if not _plain_option(optimize) and fx is not None and any(isinstance(o, fx.Proxy) for o in operands):
        raise PathError(optimizer_message(type(optimize).__name__, "torch.fx", "no graph node holds one"))


class _Spelled:
    """An object no ``optimize`` takes, whose repr is ``text``."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def limit_plain(memory_limit):
    """``memory_limit`` as Python's value (:func:`~einc.planner.options.plain_limit`), read
    while dynamo traces (:func:`numpy_read`) or not: a torch.fx node records it so (its
    arguments take no numpy value nor Decimal)."""
    return plain_limit(numpy_read(memory_limit))


def numpy_sublists(args) -> tuple:
    """``args`` of torch's sublist call (``op0, sub0, op1, sub1, ..., [output]``) with each
    sublist read by :func:`numpy_read`, as eager calls read its numpy integers and arrays.
    Where each is a list or tuple of Python's ints, Ellipsis and other constants (a float,
    a string: no subscript, which eager refuses), they are read as dynamo
    traces (:func:`_sublists_read`): a sublist that is no equation raises the eager call's
    error, not a raise dynamo traces (its "Observed exception" under ``fullgraph=True``), nor
    one from the node dynamo runs on fake tensors for a patched ``torch.einsum`` (its
    ``TorchRuntimeError``)."""
    last = len(args) - 1 if len(args) % 2 else None
    args = tuple([numpy_read(a) if k % 2 or k == last else a for k, a in enumerate(args)])
    subs = [a for k, a in enumerate(args) if k % 2 or k == last]
    if all(isinstance(s, (list, tuple)) for s in subs) and \
            all(isinstance(i, _CONSTANTS) or i is Ellipsis or i is None for s in subs for i in s):
        # (an int read as a symbol, dynamic=True, as its value: the equation's text needs it)
        _sublists_read(tuple([tuple([number(i) for i in s]) if k % 2 or k == last else None
                              for k, s in enumerate(args)]))
    return args


_CONSTANTS = (int, float, complex, str, bytes)


@constant_result
def _sublists_read(args) -> bool:
    """(dynamo calls it as it traces: the operands' places None, the sublists as given)"""
    try:
        text, operands = sublist_equation(args)
        parse_as_called(text, len(operands))
    except EincError as error:
        raise traced_error(error) from None
    return True


@constant_result
def _numpy_value(array):
    """(dynamo calls it as it traces, with the value as a tensor)"""
    return array.tolist()


def _described(args):
    """``(args, tensors)``: ``args`` with each shape given as numbers, each tensor's place
    None, and each tensor's ``(position, shape, strides, dtype, device)``; None where a tensor
    is not strided (sparse: no stand-in takes its place)."""
    operands = range(1, len(args)) if args and isinstance(args[0], str) else range(0, len(args) // 2 * 2, 2)
    out, tensors = list(args), []
    for k in operands:
        x = args[k]
        if isinstance(x, torch.Tensor):
            if x.layout != torch.strided:
                return None
            tensors.append((k, sizes(x.shape), sizes(x.stride()), x.dtype, x.device))
            out[k] = None
        elif isinstance(x, (torch.Size, tuple, list)):
            out[k] = sizes(x)
    return tuple(out), tuple(tensors)


@constant_result
def _planned(door, args, tensors, kwargs):
    """(called by dynamo as it traces, its answer kept as a constant; its error the eager
    call's under ``fullgraph=True``, else None: a graph break here would have dynamo compile
    the door's frames, which call the door again.)  Each tensor is a stand-in of its shape,
    strides, dtype and device, a fake tensor (no memory), which the door reads as it reads
    the caller's."""
    args = list(args)
    if tensors:
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            for k, shape, strides, dtype, device in tensors:
                args[k] = torch.empty_strided(shape, strides, dtype=dtype, device=device)
    try:
        answer = door(*args, **kwargs)
    except EincError as error:
        if strict():
            raise traced_error(error) from None
        return None
    answer[1].keep()     # (the info: its str() and attributes in the compiled function, as the eager call's)
    return answer


def _eagerly(door, name: str, args, kwargs, message: str):
    """The door run eagerly: a graph break, or under ``fullgraph=True`` einc's error."""
    reject_under_fullgraph(ArgumentError, f"{name}(): under torch.compile, einc plans {message}")
    return torch.compiler.disable(door)(*args, **kwargs)


def whole_built(whole: Equation, shapes) -> None:
    """:func:`build` of an expression's whole equation at ``shapes`` (its operands' among its
    constants'), whose error names a size that does not fit a constant's; while dynamo traces,
    raised at trace time (:func:`built`: a raise dynamo traces is its own error)."""
    if not torch.compiler.is_dynamo_compiling():
        build(whole, shapes)
        return
    try:
        build(whole, shapes)
    except ShapeError:
        built(fields(whole), [sizes(s) for s in shapes])


def fields(eq: Equation) -> tuple:
    """``eq``'s fields, as a constant dynamo passes on (torch 2.11's cannot pass a frozen dataclass)."""
    return eq.text, eq.inputs, eq.output, eq.explicit, eq.input_positions, eq.output_positions, eq.canonical


@constant_result
def built(fields: tuple, shapes):
    """:func:`build`'s error for the :class:`Equation` of ``fields`` at these shapes, raised as
    dynamo lets it through (the shapes as numbers: :func:`einc.custom_op.sizes`)."""
    try:
        return build(Equation(*fields), shapes) is None
    except EincError as error:
        raise traced_error(error) from None


def torch_dtype(dtype, door: str) -> torch.dtype:
    """:func:`einc.runtime.dtypes.torch_dtype`, its error raised as the eager call's under dynamo:
    under ``fullgraph=True`` at trace time, else by the call run eagerly at a graph break (dynamo
    would trace numpy's reading of the name, which it cannot)."""
    found = _dtype_read(dtype, door)
    return found if found is not None else torch.compiler.disable(dtypes.torch_dtype)(dtype, door)


@constant_result       # (dynamo calls it as it traces: numpy's reading is no code it traces)
def _dtype_read(dtype, door: str):
    try:
        return dtypes.torch_dtype(dtype, door)
    except DtypeError as error:
        if strict():
            raise traced_error(error) from None
        return None


# ----------------------------------------------------------------- an expression's dtype error

def whole_error(expr, operands, error):
    """The error a call of ``expr`` (a ``ContractExpression``) on ``operands`` raises where what
    its constants leave (the remainder: spelled in the graph's letters, on the folded values)
    raised the dtype error ``error``: the whole equation's on these operands and the constants,
    as :func:`einc.contract` raises it (asked of meta tensors: no memory, nothing computed);
    where the whole has none (values folded in another dtype), or autocast is on (whose
    probes need the operands' device), ``error`` naming the expression's equation."""
    if not expr.constants:
        return error
    return _whole(error, expr._whole, *_whole_operands(expr, [o.dtype for o in operands], [o.shape for o in operands]),
                  expr._whole_options, expr.equation)


def _whole_operands(expr, dtypes, shapes, size=None) -> tuple:
    """``(shapes, dtypes)`` of the whole equation's operands: the variables' ``dtypes`` and
    ``shapes`` among the constants' (each of their sizes mapped by ``size``, where given)."""
    whole = [s if size is None else tuple([size(n) for n in s]) for s in expr.shapes]
    kinds = dict(expr.constant_dtypes)
    for k, dtype, shape in zip(expr._variables, dtypes, shapes):
        whole[k], kinds[k] = shape, dtype
    return whole, [kinds[k] for k in range(len(whole))]


def fold_error(error, plan, step):
    """The dtype error of a ``step`` of ``plan`` that contracts constants only, as an expression
    is built, made to name the step's equation in the caller's letters (it is raised naming the
    graph's), with a line naming the expression's equation."""
    error = as_written(error, plan.describe(step))
    error.args = (f"{error}\n  (a step of {plan.equation!r} on its constants, contracted as the expression is "
                  "built)",)
    return error


def _whole(error, whole: Equation, shapes, kinds, options: Options, written: str):
    if not _autocast_any():
        try:
            _meta_run(whole, shapes, kinds, options)
        except (DtypeError, UnsupportedDtypeError) as found:
            return found
        except Exception:       # noqa: BLE001 -- (no call of the whole to ask: the remainder's error stands)
            pass
    return as_written(error, written)


def _meta_run(eq: Equation, shapes, kinds, options: Options):
    return engine.run(eq, [torch.empty(s, dtype=d, device="meta") for s, d in zip(shapes, kinds)], options)


_autocast_any = getattr(torch._C, "_is_any_autocast_enabled", torch.is_autocast_enabled)


_expressions = weakref.WeakValueDictionary()     # id -> each ContractExpression alive, for _checked


def known(expr):
    """``expr``, kept by its ``id`` for :func:`dtypes_checked` (``ContractExpression.__new__``:
    a copy or an unpickled one too)."""
    _expressions[id(expr)] = expr
    return expr


def dtypes_checked(expr, operands, folded) -> None:
    """While dynamo traces a call of ``expr`` with constants on ``operands`` (``folded``: the
    constants' values its remainder takes): :func:`whole_error`'s error where the remainder's
    call raises a dtype error, which the op's fake kernel would raise naming the remainder.
    Asked as a constant, at sizes of the operands' kinds (0, 1 or more: no guard), as the
    fake kernel asks; the expression is passed as its ``id`` (dynamo guards on its identity),
    looked up there, and its equations, shapes and path read as they are: read by dynamo
    from a local under ``dynamic=True``, their ints were symbols, which no constant takes;
    the object itself torch 2.11's dynamo cannot hand a constant (torch 2.13's can)."""
    _checked(id(expr), _kinds(expr._operands(operands, folded)), _kinds(operands))


def _kinds(tensors) -> tuple:
    """The dtypes of ``tensors``, and their shapes as sizes' kinds (:func:`~einc.custom_op._kind`)."""
    return tuple([o.dtype for o in tensors]), tuple([tuple([_kind(n) for n in o.shape]) for o in tensors])


@constant_result
def _checked(key, remainder, variables) -> bool:
    """(dynamo calls it as it traces, a constant)"""
    expr = _expressions[key]
    try:
        _meta_run(parse(expr._text), remainder[1], remainder[0], Options.of(expr._options.optimize,
                                                                            expr._options.memory_limit))
    except (DtypeError, UnsupportedDtypeError) as error:
        options = Options.of(expr._whole_options.optimize, expr._whole_options.memory_limit)
        raise traced_error(_whole(error, expr._whole, *_whole_operands(expr, *variables, _kind), options,
                                  expr.equation)) from None
    except Exception:       # noqa: BLE001 -- (the op's fake kernel raises it)
        pass
    return True
