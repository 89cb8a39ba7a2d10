"""Named axes at the doors: the operands' views, the output's reshape, ``out=`` split.

:mod:`einc.planner.notation` parses a named equation (``"b n (h d), h d e -> b n (h e)"``)
and resolves its sizes; this module is the glue each door runs around its own call on
the resolved equation: :func:`einc.einsum` (:func:`operands`, :func:`views`,
:func:`split_out`, :func:`merged`), ``contract_expression`` (:func:`expression_parts`,
:class:`NamedExpression`) and ``explain`` (:func:`explain_parts`,
:class:`NamedExplanation`).  Tensors are touched only through their methods, so under
``torch.compile`` dynamo traces the views, the one call of the custom op on the resolved
equation, and the reshape.
"""

from __future__ import annotations

import contextlib
import functools
import operator

import torch

from .autograd import tracing
from .custom_op import _never_compiled, constant_result, note_reading, number, refuse, traced_error
from .custom_op import sizes as numbers
from .errors import (
    DtypeError,
    EincError,
    EquationError,
    LayoutError,
    OperandCountError,
    OperandTypeError,
    OutError,
    SizeKeywordError,
    UnsupportedDtypeError,
    caret,
    expression_count,
)
from .planner.equation import call_form, for_operands, parse
from .planner.graph import build
from .planner.notation import Named, describe, is_boolean, is_named, output_shape, resolve, structure


def views(operands, view_shapes, named: Named | None = None, door: str = "einsum") -> list:
    """Each operand viewed in its resolved shape (composite axes split; None: as it is); an
    operand that is not strided (sparse), which has no view, raises
    :class:`~einc.errors.LayoutError` naming it (``named``: the equation, for the message)."""
    try:
        return [o if v is None else o.view(v) for o, v in zip(operands, view_shapes)]
    except RuntimeError:        # (NotImplementedError too: "Could not run 'aten::view' ... 'SparseCPU'")
        for k, (o, v) in enumerate(zip(operands, view_shapes)):
            if v is not None and o.layout is not torch.strided:
                raise _unviewable(f"operand {k} is a {o.layout} tensor", f"operand {k}.to_dense()", named,
                                  door) from None
        raise


def recorded_views(named: Named, whole, sizes: dict, which) -> list:
    """:func:`views` of the operands at positions ``which`` of ``whole`` (the tensors the names
    resolve over) while ``torch.jit.trace`` records them: each split as an ``einc::named_view``
    op, which resolves the names at every run.  Where none of them splits (a merge only, or
    keyword sizes), the first is recorded as one all the same (viewed as it is): the names are
    resolved, and a size that does not fit refused, as the eager call refuses it."""
    names, values = " ".join(sizes), [operator.index(v) for v in sizes.values()]   # (the tracer takes no str[])
    split = [any(len(axis) > 1 for axis in named.inputs[k]) for k in which]
    return [torch.ops.einc.named_view(whole[k], list(whole), named.text, k, names, values)
            if split[n] or (n == 0 and not any(split)) else whole[k] for n, k in enumerate(which)]


def _unviewable(what: str, instead: str, named: Named | None, door: str) -> LayoutError:
    """:class:`~einc.errors.LayoutError` for a tensor that is not strided (``what``) whose axes a
    named equation splits or merges: torch has no view or reshape of such a tensor."""
    where = f"\n{caret(named.text, None)}" if named is not None else ""
    return LayoutError(f"{door}(): {what}, whose composite axes einc cannot split or merge (torch has no view or "
                       f"reshape of a tensor that is not strided; einc contracts strided tensors): pass "
                       f"{instead}{where}")


def check_tensors(operands, door="einsum") -> None:
    for k, o in enumerate(operands):
        if not isinstance(o, torch.Tensor):     # (a numpy array's view() takes a dtype)
            raise OperandTypeError(f"{door}(): operand {k} must be a torch.Tensor, got {type(o).__name__}")


def operands(args, sizes: dict) -> list:
    """The operands of an ``einsum`` call on a named equation (or with keyword sizes):
    after the equation, or as one list there (unchecked: see :func:`check_tensors`)."""
    if not args or not isinstance(args[0], str):     # not __class__: torch 2.11's dynamo reads it as no str
        raise SizeKeywordError(f"einsum(): keyword sizes ({', '.join(sizes)}) name the axes of an equation string; "
                            "the sublist format has none")
    return call_form(args)[1]


@functools.lru_cache(maxsize=1024)
def _resolved(named: Named, shapes: tuple, sizes: tuple) -> tuple:
    """:func:`resolve`'s sizes and view shapes, cached for eager calls (concrete shapes)."""
    known, view_shapes = resolve(named, shapes, dict(sizes))
    return tuple(known.items()), view_shapes


_merged = functools.lru_cache(maxsize=1024)(lambda named, shape: output_shape(named, shape))


def resolved(named: Named, shapes, sizes: dict, traced: bool = False) -> tuple[dict, tuple]:
    """``(sizes of every name, each operand's view shape)`` at the operands' ``shapes``.  While
    ``traced`` the sizes are resolved on every call (they may be symbolic: an error is worded
    again with their values, :func:`_refused`), else cached."""
    if traced:
        try:
            return resolve(named, shapes, sizes)
        except EincError:
            _refused(named.text, [numbers(s) for s in shapes], {k: number(v) for k, v in sizes.items()})
            raise
    # The cache is keyed on ints: h=2.0 (refused) must not find h=2's entry, nor a 0-d
    # tensor h=torch.tensor(2) make an entry per call.  A size that is no int is
    # resolved uncached, which raises the error that names it.
    try:
        if any(is_boolean(v) for v in sizes.values()):
            raise TypeError
        key = tuple((k, operator.index(v)) for k, v in sizes.items())
    except TypeError:
        resolve(named, shapes, sizes)
        raise AssertionError("resolve accepted a size that is not an int") from None
    known, view_shapes = _resolved(named, tuple(tuple(s) for s in shapes), key)
    return dict(known), view_shapes


@constant_result
def _refused(text: str, shapes, sizes: dict):
    """The error :func:`resolve` raises for the named equation ``text`` at these sizes
    (numbers), raised as dynamo lets it through (:func:`einc.custom_op.traced_error`; called as
    a constant while it traces)."""
    try:
        resolve(structure(text), shapes, sizes)
    except EincError as error:
        raise traced_error(error) from None


def merged(named: Named, result, traced: bool = False, door: str = "einsum"):
    """The resolved equation's ``result`` in the named output's shape (composite axes
    merged: a view of einc's contiguous result; of a ``layout="any"`` one, a view where its
    strides merge, else a contiguous copy: dense either way).  A result that is not strided
    (torch's einsum's, for a sparse operand), which has no reshape, raises
    :class:`~einc.errors.LayoutError`."""
    shape = output_shape(named, result.shape) if traced else _merged(named, tuple(result.shape))
    if shape is None:
        return result
    try:
        return result.reshape(shape)
    except RuntimeError:        # ("reshape is not implemented for sparse tensors")
        if result.layout is torch.strided:
            raise
        raise _unviewable(f"the result is a {result.layout} tensor (torch's einsum's, for a call with an operand "
                          "that is not strided)", "the sparse operands .to_dense(), or write the output's axes "
                          "apart", named, door) from None


def split_out(named: Named, out, shapes):
    """``out=`` viewed in the resolved equation's output shape (its composite axes split);
    ``shapes``: the operands' in the resolved equation."""
    # (einsum's error where the operands do not fit; dynamo traces parse's body, not its cache)
    graph = build((parse.__wrapped__ if torch.compiler.is_dynamo_compiling() else parse)(named.equation), shapes)
    split = [graph.sizes[i] for i in graph.output]
    want = tuple(output_shape(named, split) or split)
    fits = tuple(out.shape) == want
    try:
        if fits:
            return out.view(split)
    except RuntimeError:
        pass
    # (the sizes as numbers: while dynamo traces, refuse raises einc's error as the eager call does)
    refuse(OutError, f"einsum(): out= has shape {numbers(out.shape)}, but the result has shape {numbers(want)}"
                     + (f" (out= must also split into its axes by strides: its strides are {numbers(out.stride())})"
                        if fits else "") + f"\n{caret(named.text, None)}")


def _shapes(items) -> list:
    return [tuple(x.shape) if hasattr(x, "shape") else tuple(int(s) for s in x) for x in items]


def expression_parts(args, sizes: dict, constants):
    """``contract_expression`` on a named equation, before the door plans the resolved one:
    ``(named, shapes, view shapes, constants, sizes of every name, the items viewed)``."""
    if not args or not isinstance(args[0], str):
        raise SizeKeywordError("contract_expression(): keyword sizes name the axes of an equation string; the "
                            "interleaved format has none")
    named = structure(args[0])
    items = list(args[1:])
    shapes = _shapes(items)
    known, view_shapes = resolve(named, shapes, sizes)
    constants = sorted(set(int(k) for k in (constants or ())))
    viewed = [x.view(v) if (hasattr(x, "view") and v is not None and k in constants) else
              (v if v is not None else x) for k, (x, v) in enumerate(zip(items, view_shapes))]
    return named, shapes, view_shapes, constants, known, viewed


class NamedExpression:
    """A planned named contraction (``contract_expression`` on a named equation): views the
    operands, calls the expression planned for the resolved equation, merges the output.  As
    an unnamed expression (and opt_einsum's) it takes operands of the planned ranks at other
    sizes: the names are resolved again at the call's shapes (among the constants' and with
    the keyword ``sizes``), as :func:`einc.einsum` resolves them."""

    def __init__(self, named: Named, inner, shapes, view_shapes, constants, known: dict, layout="contiguous",
                 sizes=None):
        self.named = named
        self._description = describe(named, shapes, known, layout)
        self.equation = named.text
        self.shapes = tuple(shapes)
        self.constants = tuple(constants)
        self._inner = inner
        self._variables = tuple(k for k in range(len(shapes)) if k not in constants)
        self._sizes = {k: operator.index(v) for k, v in (sizes or {}).items()}
        self._planned = (list(self.shapes), tuple(view_shapes))

    @property
    def plan(self):
        return self._inner.plan

    def __call__(self, *operands, out=None, backend=None):
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        check_tensors(operands, "contract_expression")
        if len(operands) != len(self._variables):
            refuse(OperandCountError, expression_count(self.equation, len(self._variables), self.constants,
                                                       len(operands)))
        shapes, sizes, view_shapes = self._resolved(operands, tracing())
        if torch.jit.is_tracing():      # (the constants stand in as meta tensors: no memory)
            whole = [torch.empty(s, device="meta") for s in shapes]
            for o, k in zip(operands, self._variables):
                whole[k] = o
            viewed = recorded_views(self.named, whole, sizes, self._variables)
        else:
            viewed = views(operands, [view_shapes[k] for k in self._variables], self.named, "contract_expression")
        with written(self.named):
            if out is not None:
                split = [s if v is None else v for s, v in zip(shapes, view_shapes)]
                self._inner(*viewed, out=split_out(self.named, out, split) if self.named.merges else out,
                            backend=backend)
                return out
            result = self._inner(*viewed, backend=backend)
        return merged(self.named, result, tracing(), door="contract_expression")

    def _resolved(self, operands, traced: bool) -> tuple:
        """``(shapes, sizes, view shapes)`` of a call: the operands' shapes among the constants',
        the keyword sizes, and the names resolved at them (the planned view shapes at the
        planned shapes)."""
        if not traced:
            shapes = list(self.shapes)
            for o, k in zip(operands, self._variables):
                shapes[k] = tuple(o.shape)
            if shapes == self._planned[0]:
                return shapes, self._sizes, self._planned[1]
            return shapes, self._sizes, resolved(self.named, shapes, self._sizes)[1]
        # (as numbers: under dynamic=True dynamo traces those of an expression in a closure as symbols)
        shapes = [numbers(s) for s in self.shapes]
        sizes = {k: number(v) for k, v in self._sizes.items()}
        for o, k in zip(operands, self._variables):
            shapes[k] = o.shape
        return shapes, sizes, resolved(self.named, shapes, sizes, True)[1]

    def __repr__(self) -> str:
        return f"<ContractExpression {self.equation!r} (resolved: {self.named.equation!r}) shapes={list(self.shapes)}>"

    def __str__(self) -> str:
        return self._description + "\n" + str(self._inner)


_lib = torch.library.Library("einc", "FRAGMENT")

# A named split as an op of a graph ``torch.jit.trace`` records (a call's, an expression's):
# the graph recorded the view with the shape of the trace (a keyword size fixed, the other
# parts read from the operands), and where a size does not divide ran view's error ("shape
# '[2, 4, 2]' is invalid"), where the eager call raises its ShapeError; this op resolves the
# names at every run, as the eager call does (cached per shape), and views the operand as it
# resolves (TorchScript reports an op's error as a RuntimeError with its text).
_lib.define("named_view(Tensor(a) self, Tensor[] operands, str equation, int operand, str names, int[] sizes) "
            "-> Tensor(a)")


def _named_view(operand, operands, text, k, names, sizes):
    view_shapes = resolved(structure(text), [o.shape for o in operands], dict(zip(names.split(), sizes)))[1]
    return operand.view(operand.shape if view_shapes[k] is None else view_shapes[k])


_lib.impl("named_view", _named_view, "CompositeImplicitAutograd")


def explain_parts(text, items, sizes: dict, layout: str = "contiguous"):
    """``explain`` on a named equation, before the door explains the resolved one:
    ``(named, the items viewed, the header saying how the names resolved)``; ``layout``: the
    result's (``"any"``: a merge may copy; where a tensor is not strided, torch's einsum's
    result is merged: :func:`~einc.planner.notation.describe`'s ``"torch"``)."""
    if not isinstance(text, str):
        raise SizeKeywordError(f"explain(): keyword sizes ({', '.join(sizes)}) name the axes of an equation string; "
                            "the sublist format has none")
    named = structure(text)
    shapes = _shapes(items)
    known, view_shapes = resolve(named, shapes, sizes)
    tensors = [x for x in items if isinstance(x, torch.Tensor)]
    if len(tensors) == len(items):
        viewed = views(tensors, view_shapes, named, "explain")   # (as the call views them, or its error)
        if any(x.layout is not torch.strided for x in tensors):
            layout = "torch"        # the call, and so its result, is torch's einsum's
    else:
        viewed = [x if v is None else (x.view(v) if hasattr(x, "view") else v) for x, v in zip(items, view_shapes)]
    return named, viewed, describe(named, shapes, known, layout)


class NamedExplanation:
    """:func:`einc.explain`'s answer for a named equation: the resolved equation's
    explanation (its attributes read through), printed under the names' resolution."""

    def __init__(self, info, header: str):
        self.info = info
        self.header = header

    def __getattr__(self, name):
        return getattr(self.info, name)

    def __str__(self) -> str:
        return self.header + "\n" + str(self.info)

    def to_dict(self) -> dict:
        d = self.info.to_dict()
        d["named"] = self.header
        return d


def as_written(error, text: str):
    """``error``, raised by a door's call on another spelling of the equation ``text`` the
    caller wrote (a named equation's resolved letters; what an expression's constants leave of
    it), made to name ``text`` where its message names the one it was raised for
    (``error.equation``: a dtype error, from :func:`einc.runtime.dtypes.naming`), as the
    call's other errors do."""
    spelled = getattr(error, "equation", None)
    if isinstance(error, (DtypeError, UnsupportedDtypeError)) and spelled is not None and spelled != text:
        error.args = (str(error).replace(repr(spelled), repr(text)),)
        error.equation = text
    return error


class written:
    """Around a door's call on ``named``'s resolved equation: its dtype error names the equation
    as the caller wrote it (:func:`as_written`); while dynamo traces, where the error comes from
    the op's fake kernel past any ``except`` clause, as :func:`~einc.custom_op.traced_error`
    makes it (told by :func:`~einc.custom_op.note_reading`)."""

    __slots__ = ("named",)

    def __init__(self, named: Named):
        self.named = named

    def __enter__(self):
        if torch.compiler.is_dynamo_compiling():
            note_reading(None, self.named.text)

    def __exit__(self, kind, error, traceback) -> bool:
        if torch.compiler.is_dynamo_compiling():
            note_reading(None)
        elif isinstance(error, (DtypeError, UnsupportedDtypeError)):     # (which name the resolved letters)
            as_written(error, self.named.text)
        return False


# (as frames of their own, where dynamo breaks a graph at a call that fails, they run as uncompiled, as
# einsum does: the exit names the text, and the expression's call traces nothing of einc frame by frame)
_never_compiled(written.__enter__.__code__, written.__exit__.__code__, NamedExpression.__call__.__code__)


@contextlib.contextmanager
def torch_error_first(error, text: str):
    """Around the named reading of ``text``, an equation torch's notation does not take
    (``error``): where that reading fails too and ``text`` has no parenthesis (so nothing
    says it was meant as named axes: ``ij->i j k``), the error is torch's, the named
    reading's after it."""
    try:
        yield
    except EquationError as named_error:
        if "(" in text:
            raise
        reading = str(named_error).split("\n")[0].removeprefix("einsum(): ")
        raise type(error)(f"{error}\nread as named axes instead, it fails too: {reading}") from None


def named_reading(text: str, count: int) -> bool:
    """Whether a traced call reads ``text`` as named axes (:func:`is_named`); where that
    reading fails too, the eager call's error, which read ``text`` in torch's notation first
    (:func:`torch_error_first`, worded for ``count`` operands), raised as dynamo lets it out."""
    if not is_named(text):
        return False
    try:
        parse(text)
    except EquationError as error:
        try:
            with torch_error_first(for_operands(error, count), text):
                structure(text)
        except EquationError as found:
            raise traced_error(found) from None
    return True


__all__ = ["named_reading", "views", "recorded_views", "check_tensors", "operands", "resolved", "merged", "split_out",
           "expression_parts", "NamedExpression", "explain_parts", "NamedExplanation", "as_written", "written",
           "torch_error_first"]
