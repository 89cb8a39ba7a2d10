"""opt_einsum's door: ``contract``, ``contract_path``, ``contract_expression`` and ``PathInfo``
(:mod:`einc.pathinfo`), with opt_einsum's names and keywords, on top of torch.einsum's door
(:mod:`einc.api`), so that ``import einc as oe`` runs code written for ``opt_einsum``.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from . import autograd, numpy_keywords, sharing, traced_doors
from . import named as named_axes
from .api import _constant_result, _dynamo_tracing, call, einsum, explain
from .call_arguments import call_options, check_backend, shape_of
from .custom_op import _never_compiled, note_reading, refuse
from .custom_op import sizes as numbers
from .errors import (
    ArgumentError,
    DtypeError,
    EincError,
    EquationError,
    OperandCountError,
    OperandTypeError,
    ShapeError,
    UnsupportedDtypeError,
    expression_count,
)
from .pathinfo import PathInfo
from .planner import notation
from .planner.equation import (
    Equation,
    call_form,
    interleaved_labels,
    interleaved_text,
    opt_einsum_text,
    parse,
    sublist_equation,
    text_of,
)
from .planner.graph import broadcast
from .planner.options import AUTO, DEFAULT_OPTIMIZE, Options, callers_optimizer, normalized_optimize
from .planner.plan import Plan, callers_labels
from .planner.slicing import linear_path
from .runtime import dtypes, engine

_SHAPES_KEPT = 64     # the shapes of calls an expression keeps the runs of (a bound: sizes may change every call)


def _shapes_kept(operands):
    """The operands' shapes, under which :class:`ContractExpression` keeps the run a call of
    them takes; None where none is kept: while dynamo traces (each size it traced was
    guarded on a kept one's), for sizes that are symbolic (``make_fx``'s symbolic tracing:
    no value to key on), or for an operand that is no tensor."""
    if _dynamo_tracing():
        return None
    try:
        shapes = tuple([o.shape for o in operands])
    except AttributeError:      # not a tensor
        return None
    if any(type(n) is not int for s in shapes for n in s):
        return None
    return shapes


class ContractExpression:
    """A contraction planned once for fixed shapes; call it with operands of those shapes
    (without the constants, if any were given).

    A call is :func:`einsum` with the planned path, so it shares everything a call of
    einsum gets: the plan cache, the generated kernels, autograd, torch.func and
    torch.compile, torch's result dtype.  With ``constants`` the steps that involve only
    constant operands are contracted once, when the expression is built (as
    opt_einsum's expressions do), and each call runs the rest.

    As opt_einsum's, ``contraction`` is the equation as given (the interleaved form
    spelled with opt_einsum's letters), each run of constant terms in brackets
    (``"[ij],jk,[kl]->il"``), and ``num_args`` the number of operands a call takes (the
    constants not counted).

    >>> expr = einc.contract_expression("ij,jk->ik", (2, 3), (3, 4))  # doctest: +SKIP
    >>> expr(torch.ones(2, 3), torch.ones(3, 4)).shape                  # doctest: +SKIP
    torch.Size([2, 4])
    """

    def __new__(cls, *args, **kwargs):      # (a copy, an unpickled one: each kept by its id as it is made)
        return traced_doors.known(super().__new__(cls))

    def __init__(self, eq: Equation, shapes, plan: Plan, constants: dict, options: Options, text=None):
        self.equation = eq.text
        self._whole, self._labels = eq, ()       # _labels: as _reading takes them, for the caller's characters
        self.shapes, self.plan = tuple(shapes), plan
        self.constants = tuple(sorted(constants))
        self._variables = tuple(k for k in range(len(shapes)) if k not in constants)
        self.contraction = _const_einsum_str(eq.text if text is None else text, self.constants)
        self.num_args = len(self._variables)
        # Narrow integer constants whose result is int64: folded in int64, and a call's operands
        # of their dtype made int64 too, so that no step wraps (as einsum's whole call runs);
        # operands of another dtype meet the constants folded as they are, as einsum's would.
        self._narrow = next(iter(constants.values())).dtype if constants and _in_int64(eq, shapes, constants) else None
        # A variable's dimension of size 1 that the plan broadcast against a larger size (an
        # index of its own, which the constants were folded without): a call that gives it
        # another size runs the whole equation, as einsum would (:meth:`_run_whole`).
        self._broadcast = tuple(sorted(d for d in broadcast(eq, shapes) if d[0] not in constants)) if constants else ()
        # (the constants as given are kept only for those: folded, they are not needed)
        self._given = constants if self._narrow is not None or self._broadcast else None
        self._given_folded, self._fold_options = None, options
        self.constant_dtypes = {k: v.dtype for k, v in constants.items()}     # (as given: a dtype error's, below)
        if self._narrow is not None:
            constants = {k: v.to(torch.int64) for k, v in constants.items()}
        if constants:   # what is left of the planned path, over the operands left
            self._text, self._folded, path, self._slots = _fold_constants(plan, constants, options)
        else:   # the planned path, as explicit options: the same plan for every call
            self._text, self._folded, path, self._slots = eq.text, (), plan.path, None
        # A plan that keeps to the limit runs as it is: the limit asked again of the folded
        # remainder ("max_input" of its fewer, smaller operands) could slice what the whole
        # equation's bound let run; a sliced plan folds nothing and slices again the same.
        limit = options.memory_limit if plan.slicing is not None else None
        self._options = Options.of(path, limit, options.select, options.layout)
        self._eq = parse(self._text)
        self._whole_options = Options.of(plan.path, options.memory_limit, options.select, options.layout)
        # each variable's shape -> the method that runs a call of them (:meth:`__call__`; unbound:
        # no cycle keeps a dropped expression's constants), the planned shapes first
        self._planned = tuple(self.shapes[k] for k in self._variables)
        self._runs = {self._planned: ContractExpression._run}

    def __call__(self, *operands, out=None, backend=None):
        """The contraction of these operands (the variable ones); ``out`` and ``backend``
        as for :func:`einsum`.  Operands of shapes met before run at once, as the planned
        shapes do: their checks and which run they take are kept per shapes."""
        check_backend(backend)
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        if not all(isinstance(o, torch.Tensor) for o in operands) and torch._C._has_torch_function(operands):
            return self._recorded(operands, out)
        key = _shapes_kept(operands)
        run = None if key is None else self._runs.get(key)
        if run is None or self._broadcast and torch.jit.is_tracing():
            # (a trace keeps the run it records for every later shape: the whole equation,
            # where a dimension the folded constants broadcast may grow)
            return self._admit(operands, out)
        return run(self, operands, out)

    def _admit(self, operands, out):
        """A call of shapes not met before: checked (an error names the caller's characters),
        then run as :meth:`_run`, or :meth:`_run_whole` where a dimension the plan broadcast
        has grown or ``torch.jit.trace`` records a call where one may; the run is kept for
        later calls of these shapes (not one a trace records, nor one dynamo traces)."""
        with _reading(self.equation, self._labels):
            self._check(operands)
            traced = bool(self._broadcast) and torch.jit.is_tracing()
            grown = traced or any(operands[self._variables.index(k)].shape[d] != 1 for k, d in self._broadcast)
            run = ContractExpression._run_whole if grown else ContractExpression._run
            result = run(self, operands, out)
        key = None if traced else _shapes_kept(operands)
        if key is not None:
            if len(self._runs) >= _SHAPES_KEPT:        # (sizes that change every call)
                self._runs = {self._planned: ContractExpression._run}
            self._runs[key] = run
        return result

    def _recorded(self, operands, out):
        """A call of operands that are no tensors but take part in ``__torch_function__`` (an
        ``fx.Proxy``: ``torch.fx.symbolic_trace``): one call of :func:`einsum` with the planned
        path, which the tracer records -- the remainder on the folded constants, or the whole
        equation where the constants as given are kept (:meth:`_run_whole`)."""
        self._count(operands)
        if self._given is None:
            text, options, operands = self._text, self._options, self._operands(operands, self._folded)
        else:
            text, options, operands = self._whole.text, self._whole_options, self._with_given(operands)
        return einsum(text, *operands, optimize=options.optimize, memory_limit=options.memory_limit,
                      select=options.select, layout=options.layout, out=out)

    def _run_whole(self, operands, out):
        """The whole equation on these operands and the constants as given, along the planned
        path: a dimension the plan broadcast (size 1) has another size here, which the folded
        constants did not meet (they summed it away, or kept it as an index of its own)."""
        return call(self._whole, self._with_given(operands), self._whole_options, out)

    def _with_given(self, operands) -> list:
        """The whole equation's operands: these variables among the constants as given."""
        whole = [None] * len(self.shapes)
        for k, o in [*zip(self._variables, operands), *self._given.items()]:
            whole[k] = o
        return whole

    def _run(self, operands, out):
        folded = self._folded
        if self._narrow is not None:
            if all(o.dtype == self._narrow for o in operands) or self._in_int64(operands):
                operands = _widened(operands)
            else:
                folded = self._folded_as_given()
        if self.constants and torch.compiler.is_dynamo_compiling():     # (the op's error would name the remainder)
            traced_doors.dtypes_checked(self, operands, folded)
        try:
            return call(self._eq, self._operands(operands, folded), self._options, out)
        except (DtypeError, UnsupportedDtypeError) as error:    # (the remainder's: its letters, its operands)
            raise traced_doors.whole_error(self, operands, error) from None

    def _operands(self, operands, folded):
        """The remainder's operands: the variables ``operands`` among the constants' ``folded``
        values, each where its value stands in the plan."""
        if self._slots is None:
            return (*operands, *folded)
        ops = list(folded)
        for slot, o in zip(self._slots, operands):
            ops.insert(slot, o)
        return ops

    def _in_int64(self, operands) -> bool:
        """Whether einsum's whole call, these operands with the constants as given, gives
        int64: einsum then contracts every operand in int64 (several dtypes, each in the
        result's), as the constants were folded."""
        kinds = [self._narrow] * len(self.shapes)
        for o, k in zip(operands, self._variables):
            kinds[k] = o.dtype
        return dtypes.result_dtype(self._whole.torch_text, self.shapes, kinds) == torch.int64

    def _folded_as_given(self):
        """The constants folded in their own dtype, for operands of another dtype (made on the first such call)."""
        if self._given_folded is None:
            self._given_folded = _fold_constants(self.plan, self._given, self._fold_options)[1]
        return self._given_folded

    def _check(self, operands):
        for k, o in enumerate(operands):
            if not isinstance(o, torch.Tensor):
                refuse(OperandTypeError, f"operand {k} must be a torch.Tensor, got {type(o).__name__}")
        self._count(operands)
        # other sizes of the same rank run the planned path, as opt_einsum's expressions do
        # (a smaller last batch); einsum's own checks then name a size that does not fit
        for o, k in zip(operands, self._variables):
            if o.dim() != len(self.shapes[k]):
                refuse(ShapeError, f"operand {k} of the expression {self.equation!r} has shape "
                                   f"{numbers(o.shape)}, but the expression was planned for {self.shapes[k]} "
                                   f"({len(self.shapes[k])} dimensions)")
        if self.constants:      # a size that does not fit a constant's, named in the whole equation
            shapes = list(self.shapes)
            for o, k in zip(operands, self._variables):
                shapes[k] = tuple(o.shape)
            traced_doors.whole_built(self._whole, shapes)

    def _count(self, operands) -> None:
        if len(operands) != len(self._variables):
            refuse(OperandCountError, expression_count(self.equation, len(self._variables), self.constants,
                                                       len(operands)))

    def __repr__(self) -> str:
        shapes = [s if k in self._variables else "constant" for k, s in enumerate(self.shapes)]
        return f"<ContractExpression {self.equation!r} shapes={shapes}>"

    def __str__(self) -> str:
        return str(self.plan)


def _widened(operands):
    """``operands`` made int64; inside :func:`einc.shared_intermediates` each one once per
    context (kept in its cache), so that a repeated call shares its steps (keyed on the
    tensors' identities) instead of adding new ones."""
    cache = sharing.current_cache()
    if cache is None:
        return dtypes.widened(operands)
    out = []
    for o in operands:
        found = cache.get(("widened", id(o)))
        if found is None or found[0] is not o:
            found = cache["widened", id(o)] = (o, o.to(torch.int64))
        out.append(found[1])
    return out


def _in_int64(eq: Equation, shapes, constants: dict) -> bool:
    """Whether a call with operands of the constants' one narrow integer dtype is contracted
    in int64 (:func:`einc.runtime.dtypes.in_int64`: its result is int64), so that its
    constants are folded in int64: a folded step in the narrow dtype would wrap before the
    sum that promotes it (``ab,bc,c,d->a`` with int8 100s: 64000 for 40000000)."""
    kinds = {c.dtype for c in constants.values()}
    if len(kinds) != 1 or not kinds <= dtypes.INT64_EXACT:
        return False
    try:
        want = dtypes.result_dtype(eq.torch_text, shapes, list(kinds) * len(shapes))
    except Exception:       # noqa: BLE001  (torch has no such op: a call raises it)
        return False
    return dtypes.in_int64(kinds, want)


def _fold_constants(plan: Plan, constants: dict, options: Options):
    """Contract the plan's steps whose operands are all constant, once.

    Returns the equation of what is left -- the variable operands and the constant values still needed, in the
    order of their values in the plan (the operands' positions, then the steps folded), so that its steps take
    them as the plan's do, over the graph's indices (ellipses and broadcasting resolved) --, those constant
    values, the plan's other steps as a path over them (the path or optimizer the caller gave was for the whole
    equation: the operands are fewer), and where the variables stand among them (None: first).
    """
    g = plan.graph
    values = dict(constants)                # value id -> tensor
    terms = {k: g.inputs[k] for k in range(g.num_operands)}
    rest = []
    for step in plan.steps:
        terms[step.result] = step.output
        if plan.slicing is None and all(v in values for v in step.operands):    # sliced: no folding
            text = text_of(step.inputs, step.output)
            try:
                values[step.result] = autograd.einsum(parse(text), [values[v] for v in step.operands],
                                                      options.for_gradient())
            except (DtypeError, UnsupportedDtypeError) as error:    # (naming the step in the graph's letters)
                raise traced_doors.fold_error(error, plan, step) from None
            for v in step.operands:
                del values[v]
        else:
            rest.append(step)
    variables = [k for k in range(g.num_operands) if k not in constants]
    order = sorted(variables + list(values))
    slots = tuple(order.index(k) for k in variables)
    text = text_of([terms[v] for v in order], g.output)
    kept = tuple(values[v] for v in order if v in values)
    return text, kept, linear_path(order, rest) or ((0,),), None if slots == tuple(range(len(slots))) else slots


def _const_einsum_str(text: str, constants) -> str:
    """opt_einsum's ``ContractExpression.contraction``: ``text`` with the constant terms in
    brackets, a run of adjacent ones in one pair (``"[ij,jk],kl->il"``)."""
    if not constants:
        return text
    lhs, arrow, rhs = text.partition("->")
    terms = [f"[{t}]" if k in constants else t for k, t in enumerate(lhs.split(","))]
    return (",".join(terms) + arrow + rhs).replace("],[", ",")


def _equation_and_args(args):
    """``(equation, rest)`` from ``(equation, *rest)`` or opt_einsum's interleaved form
    ``(x0, sublist0, x1, sublist1, ..., [output])``, whose ``x`` are tensors or shapes.  The
    string as opt_einsum reads it, in einc's letters (:func:`_read`)."""
    if args and isinstance(args[0], str):
        return parse(_read(args[0])[0]), list(args[1:])
    text, rest = sublist_equation(interleaved_labels(args))
    return parse(text), rest


@_constant_result       # (dynamo reads it once, while tracing, as a constant)
def _read(text: str) -> tuple:
    """``(text, labels)``: the equation einc runs for ``text`` and, where it is not ``text``,
    which of its letters stand for which of the caller's characters (``((letter, character),
    ...)``): opt_einsum's reading of an equation torch's reading refuses and named notation
    does not read (:func:`~einc.planner.equation.opt_einsum_text`: ``"i1,1j->ij"``)."""
    return _read_once(text)


@functools.lru_cache(maxsize=1024)
def _read_once(text: str) -> tuple:
    try:
        parse(text)
        return text, ()
    except EincError:
        if _is_named(text):
            return text, ()
    return opt_einsum_text(text)


def _is_named(text) -> bool:
    """Whether the doors read ``text`` in named notation: as :func:`einsum` does, but for
    an equation that holds whitespace other than the space (a tab, a newline), which
    opt_einsum reads as an index (it strips spaces only), and so the doors too."""
    return notation.is_named(text) and not any(c.isspace() and c != " " for c in text)


@contextlib.contextmanager
def _reading(given: str, labels):
    """Within: einc's letters ``labels`` stand for the caller's characters -- to a caller's
    optimizer (:func:`~einc.planner.plan.callers_labels`), and in the message of an error
    about the equation or its shapes, which ends with a line saying how ``given`` was read."""
    if not labels:
        yield
        return
    if torch.compiler.is_dynamo_compiling():    # no except clause sees the error dynamo raises: the op ends it
        note_reading(_read_line(given, labels))
        with callers_labels(dict(labels)):
            yield
        note_reading(None)
        return
    try:
        with callers_labels(dict(labels)):
            yield
    except (EquationError, ShapeError, OperandCountError) as error:    # (those that name the equation's letters)
        error.args = (f"{error}{_read_line(given, labels)}",)
        raise


@_constant_result
def _read_line(given: str, labels) -> str:
    """The line that ends an error of :func:`_reading`: how ``given`` was read."""
    read = ", ".join(f"{a} for {c!r}" for a, c in labels)
    return f"\n  (the equation {given!r} as opt_einsum reads it, in einc's letters: {read})"


def _interleaved_letters(args, optimize, text: str) -> dict:
    """For a caller's optimizer (:func:`~einc.planner.options.callers_optimizer`) given the
    interleaved form: each of einc's letters in ``text`` (the sublists' equation) that
    opt_einsum letters otherwise, and opt_einsum's letter
    (:func:`~einc.planner.plan.callers_labels`); else none."""
    if not callers_optimizer(optimize):
        return {}
    ours = interleaved_text(args, text).split("->")[0]
    return {e: o for e, o in zip(text.split("->")[0], ours) if e != o}


def contract_expression(*args, constants=(), optimize=DEFAULT_OPTIMIZE, memory_limit=None, select=None,
                        use_blas=True, layout=None, **kwargs) -> ContractExpression:
    """Plan a contraction once for given shapes and return a reusable callable, as
    opt_einsum's ``contract_expression``: ``contract_expression("ij,jk->ik", (2, 3), (3, 4))``
    or interleaved, ``contract_expression((2, 3), [0, 1], (3, 4), [1, 2], [0, 2])``.

    ``constants`` lists the positions that hold a tensor instead of a shape: those are
    fixed, and the expression is then called with the other operands only.  As in
    opt_einsum, ``optimize=None`` or ``True`` means ``"auto"``; ``use_blas`` is accepted
    and has no effect (einc chooses matrix products itself); ``dtype``, ``order`` and
    ``casting`` as for :func:`contract`, checked here and applied by no call (give the
    expression operands of the dtype you want).  ``layout`` as for :func:`einsum`, for
    every call of the expression (``order="C"`` asks for ``"contiguous"``).  A named
    equation (:mod:`einc.planner.notation`) takes its sizes as further keywords.
    """
    if torch.compiler.is_dynamo_compiling():    # planned as a constant, not traced (:mod:`einc.traced_doors`)
        return traced_doors.expression(contract_expression, args, dict(
            constants=constants, optimize=optimize, memory_limit=memory_limit, select=select, use_blas=use_blas,
            layout=layout, **kwargs))
    sizes = {k: kwargs.pop(k) for k in list(kwargs) if k not in ("dtype", "order", "casting")}
    numpy_keywords.check("contract_expression", **kwargs)
    layout = numpy_keywords.layout_of("contract_expression", kwargs.get("order", "K"), layout)
    if sizes or (args and isinstance(args[0], str) and _is_named(args[0])):
        named, shapes, view_shapes, constants, known, viewed = named_axes.expression_parts(args, sizes, constants)
        inner = contract_expression(named.equation, *viewed, constants=constants, optimize=optimize,
                                    memory_limit=memory_limit, select=select, layout=layout, **kwargs)
        expr = named_axes.NamedExpression(named, inner, shapes, view_shapes, constants, known,
                                          inner._options.result_layout(), sizes)
        expr.contraction = _const_einsum_str(args[0], expr.constants)   # the named equation, as given
        expr.num_args = len(expr.shapes) - len(expr.constants)
        return expr
    eq, items = _equation_and_args(args)
    constants = sorted(set(int(k) for k in (constants or ())))
    for k in constants:
        if 0 <= k < len(items) and not isinstance(items[k], torch.Tensor) and hasattr(items[k], "dtype"):
            # an array (numpy's): einc contracts torch tensors only, as contract refuses an array operand
            raise OperandTypeError(f"contract_expression(): constant {k} must be a torch.Tensor, got "
                                   f"{type(items[k]).__name__} (pass torch.as_tensor of it; an array elsewhere "
                                   f"is read as a shape)")
        if not 0 <= k < len(items) or not isinstance(items[k], torch.Tensor):
            raise ArgumentError(f"contract_expression(): constant {k} must be the position of a tensor among "
                                f"the {len(items)} operands")
    options = call_options(_opt_einsum_optimize(optimize, len(items)), memory_limit, select, layout)
    shapes = [shape_of(x) for x in items]
    labels = _read(args[0])[1] if isinstance(args[0], str) else ()
    interleaved = () if isinstance(args[0], str) else _interleaved_letters(args, optimize, eq.text)
    with _reading(args[0], labels), callers_labels(interleaved) if interleaved else contextlib.nullcontext():
        plan = engine.expression_plan(eq, shapes, options)
    text = args[0] if isinstance(args[0], str) else interleaved_text(args, eq.text)
    expr = ContractExpression(eq, shapes, plan, {k: items[k] for k in constants}, options, text)
    if labels:
        expr.equation, expr._labels = args[0], labels         # (as the caller wrote it)
    return expr


def contract_path(*args, optimize=DEFAULT_OPTIMIZE, memory_limit=None, dtype=None, device=None, use_blas=True,
                  shapes=False, **sizes):
    """``(path, info)`` as opt_einsum's ``contract_path``: the contraction order einc runs
    for these operands (tensors or shapes; string or interleaved form), in opt_einsum's
    linear format, and a :class:`PathInfo` -- the plan with its backends, which prints as
    :func:`explain`'s table and has opt_einsum's ``PathInfo`` attributes (``opt_cost``,
    ``naive_cost``, ``speedup``, ``largest_intermediate``, ``eq``, ...).  ``dtype`` and
    ``device`` describe operands given as shapes (default float32 on the CPU); as in
    opt_einsum, ``optimize=None`` or ``True`` means ``"auto"``; ``use_blas`` and
    ``shapes`` are accepted (einc tells shapes from tensors itself).

    >>> path, info = einc.contract_path("ij,jk,kl->il", (8, 2), (2, 8), (8, 2))   # doctest: +SKIP
    """
    if torch.compiler.is_dynamo_compiling():    # planned as a constant, not traced (:mod:`einc.traced_doors`)
        return traced_doors.path(contract_path, args, dict(optimize=optimize, memory_limit=memory_limit, dtype=dtype,
                                                           device=device, use_blas=use_blas, shapes=shapes, **sizes))
    dtype = None if dtype is None else traced_doors.torch_dtype(dtype, "contract_path()")
    if len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], (list, tuple)) and args[1] and \
            all(isinstance(t, (torch.Tensor, tuple, list)) for t in args[1]):
        args = (args[0], *args[1])      # the operands (or shapes) as one list, as einsum and explain take them
    if sizes or (args and isinstance(args[0], str) and _is_named(args[0])):
        info = explain(args[0], *args[1:], optimize=_opt_einsum_optimize(optimize, len(args) - 1),
                       memory_limit=memory_limit, dtype=dtype, device=device, **sizes)
        path_info = PathInfo(info, [shape_of(x) for x in args[1:]])
        return path_info.path, path_info
    eq, items = _equation_and_args(args)
    text = eq.text
    if not isinstance(args[0], str):    # the interleaved form: its labels lettered as opt_einsum letters them
        text = interleaved_text(args, eq.text)
    labels = _read(args[0])[1] if isinstance(args[0], str) else ()
    with _reading(args[0], labels):
        info = explain(text, *items, optimize=_opt_einsum_optimize(optimize, len(items)), memory_limit=memory_limit,
                       dtype=dtype, device=device)
    if labels:      # the plan in the caller's characters
        caller = dict(labels)
        info.plan = info.plan.renamed(args[0], [caller.get(n, n) for n in info.plan.graph.names])
    path_info = PathInfo(info, [shape_of(x) for x in items])
    return path_info.path, path_info


def contract(*args, out=None, dtype=None, order="K", casting="safe", use_blas=True, optimize=DEFAULT_OPTIMIZE,
             memory_limit=None, backend="auto", select=None, layout=None, **sizes):
    """opt_einsum's ``contract`` on einc: :func:`einsum` with opt_einsum's keywords, so that
    ``import einc as oe`` runs code written for ``opt_einsum.contract`` on torch tensors.

    ``optimize`` as opt_einsum's (``None`` or ``True`` mean ``"auto"``, einc's search);
    ``out`` as :func:`einsum`'s; ``backend`` must name torch (``"auto"``, ``"torch"`` or
    None); ``use_blas`` has no effect (einc chooses matrix products itself).  ``dtype``
    (a torch dtype, or its name such as ``"float64"``) casts the operands first, allowed
    by ``casting`` (numpy's names: ``"no"``/``"equiv"`` the same dtype, ``"safe"`` where
    torch's type promotion keeps the target, ``"same_kind"`` as ``torch.can_cast``,
    ``"unsafe"`` any).  ``layout`` as for :func:`einsum`; ``order`` is ``"K"`` (the
    result as ``layout`` says) or ``"C"`` (C-contiguous: ``layout="contiguous"``, which
    ``layout="any"`` contradicts).  A named equation (:mod:`einc.planner.notation`) takes its sizes as
    further keywords, as for :func:`einsum`: ``contract("b (h d), h d e -> b (h e)", x, w, h=8)``.
    Otherwise the equation is read as opt_einsum reads it, as in :func:`contract_path` and
    :func:`contract_expression`: any character but ``,``, ``.``, the space and one ``->``
    is an index, a tab or a newline too (``contract("i1,1j->ij", a, b)``; :func:`einsum`
    takes letters).

    >>> import torch, einc
    >>> einc.contract("ij,jk->ik", torch.ones(2, 3), torch.ones(3, 4)).shape
    torch.Size([2, 4])
    """
    check_backend(backend)
    if dtype is not None or order != "K" or casting != "safe":
        numpy_keywords.check("contract", dtype=dtype, order=order, casting=casting)
        if dtype is not None and numpy_keywords.proxied(args):     # (cast as the recorded call runs)
            given = dict(out=out, dtype=dtype, order=order, casting=casting, use_blas=use_blas, optimize=optimize,
                         memory_limit=memory_limit, backend=backend, select=select, layout=layout)
            kwargs = {k: v for k, v in given.items() if v is not contract.__kwdefaults__[k]}
            return torch.overrides.handle_torch_function(contract, numpy_keywords.operands(args), *args, **kwargs,
                                                         **sizes)
        if dtype is not None:
            args = numpy_keywords.cast_operands(args, traced_doors.torch_dtype(dtype, "contract()"), casting)
        layout = numpy_keywords.layout_of("contract", order, layout)
    optimize = _opt_einsum_optimize(optimize, len(call_form(args)[1]) if args and isinstance(args[0], str) else
                                    len(args) // 2)
    given, labels = args[0] if args else None, ()
    if isinstance(given, str) and not sizes:
        text, labels = _read(given)
        if labels:
            args = (text, *args[1:])
    ours = interleaved_labels(args)
    # (a caller's optimizer given the interleaved form sees opt_einsum's letters for its labels)
    interleaved = {} if isinstance(given, str) or not callers_optimizer(optimize) else \
        _interleaved_letters(args, optimize, sublist_equation(ours)[0])
    with _reading(given, labels) if labels else callers_labels(interleaved) if interleaved else \
            contextlib.nullcontext():
        return einsum(*ours, optimize=optimize, memory_limit=memory_limit, select=select, out=out, layout=layout,
                      **sizes)


def _opt_einsum_optimize(optimize, operands: int):
    """opt_einsum's spelling: ``None`` and ``True`` mean ``"auto"`` (einc's ``einsum`` reads
    None as left to right, as numpy's ``optimize=False``); for one or two ``operands`` any
    name, as in opt_einsum, which looks no name up for them (their one path needs none)."""
    if optimize is None or optimize is True:
        return AUTO
    if operands <= 2 and isinstance(optimize, str):
        try:
            normalized_optimize(optimize)
        except KeyError:            # (UnknownOptimizerError)
            return AUTO
    return optimize


_never_compiled(*(f.__code__ for f in (contract, contract_path, contract_expression, ContractExpression.__call__)))
