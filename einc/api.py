"""The doors: ``einsum``, ``explain``, ``contract_expression``, ``contract_path`` and the
cache controls.  Each turns its arguments into an :class:`~einc.equation.Equation`, an
:class:`~einc.options.Options` and operands (or shapes), and goes down to the engine
(:mod:`einc.runtime.engine`); nothing below imports this module.

The hot path of :func:`einsum` on a cached key: the parsed equation (an lru lookup by
string), the options (a dict lookup), the routing checks, then ``engine.run`` (the key,
a dict lookup, the entry's run function).  Three checks route a call elsewhere: under
torch.compile (or torch.export) it becomes one call of the custom op ``einc::einsum``
(:mod:`einc.custom_op`); under autocast it takes torch.einsum's dtype there; when an
operand requires grad under grad mode, or a torch.func transform is active, it runs
through :class:`einc.autograd.EinsumFunction`.
"""

from __future__ import annotations

import torch

from . import autograd, custom_op, slicing
from .equation import Equation, letter, parse, sublist_equation
from .errors import ArgumentError, OperandCountError, OperandTypeError, ShapeError
from .options import DEFAULT, INTERNED, Options
from .plan import Plan
from .runtime import dispatch, dtypes, engine
from .runtime.engine import EincCacheInfo, cache_clear, cache_info, set_cache_size  # noqa: F401 - doors


def einsum(*args, optimize="auto", memory_limit=None, select=None):
    """Evaluate an einsum like ``torch.einsum``, planning once per key.

    Called as ``einsum(equation, *operands)`` or in torch's sublist format
    ``einsum(op0, sublist0, op1, sublist1, ..., [output_sublist])``.  ``optimize`` takes
    an opt_einsum strategy name (default ``"auto"``: exhaustive up to 5 operands, ``dp``
    up to 16, random-greedy beyond), a ``PathOptimizer``, an explicit path, or False for
    left to right.  ``select`` says how each step's backend is chosen where generated
    kernels may run (``"measure"``, ``"model"``, ``"blas"``, ``"kernel"``; default
    ``EINC_SELECT``, see :mod:`einc.runtime.select`).  The result is always a fresh
    tensor in standard contiguous layout, with torch.einsum's dtype (under autocast too).

    >>> import torch, einc
    >>> einc.einsum("ij,jk->ik", torch.ones(2, 3), torch.ones(3, 4)).shape
    torch.Size([2, 4])
    """
    if _dynamo_tracing() or _compiler._is_compiling_flag:     # torch.compile, export: the custom op
        if select is not None:
            raise ArgumentError("einsum(): select= cannot be passed to the compiled op; set EINC_SELECT instead")
        return custom_op.traced_einsum(args[0] if args else None, args[1:], optimize, memory_limit)
    if args and args[0].__class__ is str:
        operands = args[1:]
        if len(operands) == 1 and operands[0].__class__ in (list, tuple):
            operands = operands[0]
        eq = parse(args[0])
    else:
        text, operands = sublist_equation(args)
        eq = parse(text)
    if optimize is _AUTO and memory_limit is None and select is None:     # the default: no lookup
        options = DEFAULT
    else:
        try:
            options = INTERNED[optimize, memory_limit, select]
        except (KeyError, TypeError):
            options = Options.of(optimize, memory_limit, select)
    if _autocast_any():
        return _autocast_call(eq, operands, options)
    # autograd.einsum's test, inline: the no-grad hot path stays one call down to the engine.
    if _transforms_active() or (_any_requires_grad(*operands) and _grad_enabled()):
        return autograd.differentiable(eq, operands, options)
    return engine.run(eq, operands, options)


# The checks above, bound once.  ``is_dynamo_compiling`` is constant-folded to True by
# dynamo (so the flag, which dynamo would guard on, is never read while tracing); the
# flag is True for the rest of a compile session (AOTAutograd, a backend's make_fx) and
# during torch.export.
_dynamo_tracing = torch.compiler.is_dynamo_compiling
_compiler = torch.compiler if hasattr(torch.compiler, "_is_compiling_flag") else \
    type("_NoFlag", (), {"_is_compiling_flag": False})     # older torch: dynamo is still detected
_transforms_active = autograd.transforms_active
_grad_enabled = autograd.grad_enabled
_any_requires_grad = autograd.any_requires_grad
_autocast_any = getattr(torch._C, "_is_any_autocast_enabled", lambda: torch.is_autocast_enabled())
_AUTO = "auto"


def _autocast_call(eq: Equation, operands, options: Options):
    """Under autocast: torch.einsum's result dtype there, computed in that dtype.

    Whether torch.einsum's result takes the autocast dtype depends on the ops it runs
    (on a CPU only its matrix products autocast), so einc asks torch once per key, casts
    the operands autocast would cast when the answer is the autocast dtype, and runs with
    autocast off so that the whole plan computes in one dtype.
    """
    engine.check_operands(eq, operands)
    device = operands[0].device.type
    if torch.is_autocast_enabled(device):
        cast = torch.get_autocast_dtype(device)
        if dtypes.autocast_dtype(eq.torch_text, operands) == cast:
            operands = [o.to(cast) if dtypes.autocast_eligible(o, cast) else o for o in operands]
    with torch.autocast(device, enabled=False):     # (autocast on another device only: as is)
        return autograd.einsum(eq, operands, options)


def _shape_of(x):
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    try:
        shape = tuple(int(s) for s in x)
    except TypeError:
        raise OperandTypeError(f"expected a tensor or a shape (a sequence of ints), got {type(x).__name__}") \
            from None
    if any(s < 0 for s in shape):
        raise ShapeError(f"a shape cannot hold negative sizes: {shape}")
    return shape


def explain(equation, *operands_or_shapes, optimize="auto", memory_limit=None, dtype=None,
            device=None, select=None) -> dispatch.Explanation:
    """The plan einc runs for these operands (tensors, or shapes with ``dtype`` and
    ``device``, default float32 on the CPU), with what runs each step; print it for a
    table.  For tensors whose plan einc has already run, each step shows what ran and
    why (measured µs where it was timed; a kernel that failed and fell back shows
    ``torch``); otherwise what would run, decided by the cost model for contiguous
    operands -- also for ``device="cuda"`` on a machine without a GPU.

    >>> print(einc.explain("ij,jk,kl->il", (8, 2), (2, 8), (8, 2)))   # doctest: +SKIP
    """
    eq = parse(equation)
    if len(operands_or_shapes) == 1 and isinstance(operands_or_shapes[0], (list, tuple)) and \
            operands_or_shapes[0] and \
            all(isinstance(x, (torch.Tensor, list, tuple, torch.Size)) for x in operands_or_shapes[0]):
        # operands (or shapes) given as one list; a lone () is the shape of a 0-d operand
        operands_or_shapes = tuple(operands_or_shapes[0])
    options = Options.of(optimize, memory_limit, select)
    shapes = [_shape_of(x) for x in operands_or_shapes]
    tensors = [x for x in operands_or_shapes if isinstance(x, torch.Tensor)]
    entry = engine.cached_entry(eq, tensors, options) if tensors and len(tensors) == len(shapes) else None
    plan = entry.plan if entry is not None else engine.plan_for(eq, shapes, options)
    types = [x.dtype for x in tensors] if tensors else [dtype or torch.float32] * len(shapes)
    device_type = torch.device(device or (tensors[0].device if tensors else "cpu")).type
    plan = slicing.compared(plan, options)     # cotengra's plan against einc's default
    if plan.slicing is not None:
        return slicing.explain(plan, device_type, types, entry, select)
    return dispatch.describe(plan, device_type, types, shapes, entry, select)


class ContractExpression:
    """A contraction planned once for fixed shapes; call it with operands of those shapes
    (without the constants, if any were given).

    A call is :func:`einsum` with the planned path, so it shares everything a call of
    einsum gets: the plan cache, the generated kernels, autograd, torch.func and
    torch.compile, torch's result dtype.  With ``constants`` the steps that involve only
    constant operands are contracted once, when the expression is built (as
    opt_einsum's expressions do), and each call runs the rest.

    >>> expr = einc.contract_expression("ij,jk->ik", (2, 3), (3, 4))  # doctest: +SKIP
    >>> expr(torch.ones(2, 3), torch.ones(3, 4)).shape                  # doctest: +SKIP
    torch.Size([2, 4])
    """

    def __init__(self, eq: Equation, shapes, plan: Plan, constants: dict, options: Options):
        self.equation = eq.text
        self.shapes = tuple(shapes)
        self.plan = plan
        self.constants = tuple(sorted(constants))
        self._variables = tuple(k for k in range(len(shapes)) if k not in constants)
        if constants:
            self._text, self._folded = _fold_constants(plan, constants, options)
            self._options = options
        else:   # the planned path, as explicit options: the same plan for every call
            self._text, self._folded = eq.text, ()
            self._options = Options.of(plan.path, options.memory_limit, options.select)
        self._eq = parse(self._text)

    def __call__(self, *operands):
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        try:
            wrong = len(operands) != len(self._variables) or any(
                o.shape != self.shapes[k] for o, k in zip(operands, self._variables))
        except AttributeError:      # not a tensor
            wrong = True
        if wrong:
            self._check(operands)
        operands = (*operands, *self._folded)
        if _dynamo_tracing() or _compiler._is_compiling_flag:
            return custom_op.traced_einsum(self._text, operands, self._options.optimize,
                                           self._options.memory_limit)
        if _autocast_any():
            return _autocast_call(self._eq, operands, self._options)
        return autograd.einsum(self._eq, operands, self._options)

    def _check(self, operands):
        for k, o in enumerate(operands):
            if not isinstance(o, torch.Tensor):
                raise OperandTypeError(f"operand {k} must be a torch.Tensor, got {type(o).__name__}")
        if len(operands) != len(self._variables):
            raise OperandCountError(f"this expression for {self.equation!r} takes {len(self._variables)} "
                                    f"operands{self._but_constants()}, got {len(operands)}")
        for o, k in zip(operands, self._variables):
            if tuple(o.shape) != self.shapes[k]:
                raise ShapeError(f"operand {k} of the expression {self.equation!r} has shape "
                                 f"{tuple(o.shape)}, but the expression was planned for {self.shapes[k]}")

    def _but_constants(self) -> str:
        return f" (its operands {list(self.constants)} are constants)" if self.constants else ""

    def __repr__(self) -> str:
        shapes = [s if k in self._variables else "constant" for k, s in enumerate(self.shapes)]
        return f"<ContractExpression {self.equation!r} shapes={shapes}>"

    def __str__(self) -> str:
        return str(self.plan)


def _fold_constants(plan: Plan, constants: dict, options: Options):
    """Contract the plan's steps whose operands are all constant, once.

    Returns the equation of what is left -- the variable operands (in order), then the
    constant values still needed, over the graph's indices (ellipses and broadcasting
    resolved) -- and those constant values.
    """
    g = plan.graph
    values = dict(constants)                # value id -> tensor
    terms = {k: g.inputs[k] for k in range(g.num_operands)}
    for step in plan.steps:
        terms[step.result] = step.output
        if plan.slicing is None and all(v in values for v in step.operands):    # sliced: no folding
            text = ",".join(_letters(t) for t in step.inputs) + "->" + _letters(step.output)
            values[step.result] = autograd.einsum(parse(text), [values[v] for v in step.operands],
                                                  options.for_gradient())
            for v in step.operands:
                del values[v]
    variables = [k for k in range(g.num_operands) if k not in constants]
    kept = sorted(values)
    text = ",".join(_letters(terms[v]) for v in variables + kept) + "->" + _letters(g.output)
    return text, tuple(values[v] for v in kept)


def _letters(indices) -> str:
    return "".join(letter(i) for i in indices)


def _equation_and_args(args):
    """``(equation, rest)`` from ``(equation, *rest)`` or opt_einsum's interleaved form
    ``(x0, sublist0, x1, sublist1, ..., [output])``, whose ``x`` are tensors or shapes."""
    if args and isinstance(args[0], str):
        return parse(args[0]), list(args[1:])
    text, rest = sublist_equation(args)
    return parse(text), rest


def contract_expression(*args, constants=(), optimize="auto", memory_limit=None,
                        select=None) -> ContractExpression:
    """Plan a contraction once for given shapes and return a reusable callable, as
    opt_einsum's ``contract_expression``: ``contract_expression("ij,jk->ik", (2, 3), (3, 4))``
    or interleaved, ``contract_expression((2, 3), [0, 1], (3, 4), [1, 2], [0, 2])``.

    ``constants`` lists the positions that hold a tensor instead of a shape: those are
    fixed, and the expression is then called with the other operands only.
    """
    eq, items = _equation_and_args(args)
    constants = sorted(set(int(k) for k in constants))
    for k in constants:
        if not 0 <= k < len(items) or not isinstance(items[k], torch.Tensor):
            raise ArgumentError(f"contract_expression(): constant {k} must be the position of a tensor among "
                                f"the {len(items)} operands")
    options = Options.of(optimize, memory_limit, select)
    shapes = [_shape_of(x) for x in items]
    plan = engine.plan_for(eq, shapes, options)
    return ContractExpression(eq, shapes, plan, {k: items[k] for k in constants}, options)


def contract_path(*args, optimize="auto", memory_limit=None, dtype=None, device=None):
    """``(path, info)`` as opt_einsum's ``contract_path``: the contraction order einc runs
    for these operands (tensors or shapes; string or interleaved form), in opt_einsum's
    linear format, and the plan with its backends, which prints as :func:`explain`'s table.

    >>> path, info = einc.contract_path("ij,jk,kl->il", (8, 2), (2, 8), (8, 2))   # doctest: +SKIP
    """
    eq, items = _equation_and_args(args)
    info = explain(eq.text, *items, optimize=optimize, memory_limit=memory_limit, dtype=dtype, device=device)
    return [tuple(c) for c in info.path], info
