"""Front end: ``einsum``, ``contract_expression``, ``explain`` and the cache controls.

The hot path of :func:`einsum` is: look up the parsed equation (by string), build
the key (canonical equation, optimizer, the first operand's device and layout, every
operand's shape and dtype), look up the compiled plan, run it.  Everything else
happens once per key on a miss.  Operands on mixed devices or layouts fail inside
torch's ops, as they do in torch.einsum.

Two checks route a call elsewhere: under torch.compile (or torch.export) it becomes one
call of the custom op ``einc::einsum`` (:mod:`einc.custom_op`); when an operand
requires grad under grad mode, or a torch.func transform is active, it runs through
:class:`einc.autograd.EinsumFunction`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import autograd, config, custom_op
from .equation import Equation, letter, parse, sublist_equation
from .errors import ArgumentError, OperandCountError, OperandTypeError, ShapeError
from .graph import build
from .plan import Plan, build_plan
from .runtime import dtypes
from .runtime.cache import CacheInfo, LRUCache
from .runtime.dispatch import Entry, build_entry, describe_backends

_plans = LRUCache(config.cache_size())


def einsum(*args, optimize="auto", memory_limit=None):
    """Evaluate an einsum like ``torch.einsum``, planning once per key.

    Called as ``einsum(equation, *operands)`` or in torch's sublist format
    ``einsum(op0, sublist0, op1, sublist1, ..., [output_sublist])``.  ``optimize`` takes
    an opt_einsum strategy name (default ``"auto"``: exhaustive up to 5 operands, ``dp``
    up to 16, random-greedy beyond), a ``PathOptimizer``, an explicit path, or False for
    left to right.  The result is always a fresh tensor in standard contiguous layout,
    with torch.einsum's dtype (under autocast too).

    >>> import torch, einc
    >>> einc.einsum("ij,jk->ik", torch.ones(2, 3), torch.ones(3, 4)).shape
    torch.Size([2, 4])
    """
    if _dynamo_tracing() or _compiler._is_compiling_flag:     # torch.compile, export: the custom op
        return custom_op.traced_einsum(args[0] if args else None, args[1:], optimize, memory_limit)
    if args and args[0].__class__ is str:
        operands = args[1:]
        if len(operands) == 1 and operands[0].__class__ in (list, tuple):
            operands = operands[0]
        eq = parse(args[0])
    else:
        text, operands = sublist_equation(args)
        eq = parse(text)
    if _autocast_any():
        return _autocast_call(eq, operands, optimize, memory_limit)
    if _transforms_active() or (_any_requires_grad(*operands) and _grad_enabled()):
        return autograd.einsum(eq, operands, optimize, memory_limit)
    return _run(eq, operands, optimize, memory_limit)


# The checks above, bound once; they cost about 0.1 us plus 0.05 us per operand.
# ``is_dynamo_compiling`` is constant-folded to True by dynamo (so the flag, which dynamo
# would guard on, is never read while tracing); the flag is True for the rest of a
# compile session (AOTAutograd, a backend's make_fx) and during torch.export.
_dynamo_tracing = torch.compiler.is_dynamo_compiling
_compiler = torch.compiler if hasattr(torch.compiler, "_is_compiling_flag") else \
    type("_NoFlag", (), {"_is_compiling_flag": False})     # older torch: dynamo is still detected
_transforms_active = torch._C._are_functorch_transforms_active
_grad_enabled = torch.is_grad_enabled
_any_requires_grad = torch._C._any_requires_grad
_autocast_any = getattr(torch._C, "_is_any_autocast_enabled", lambda: torch.is_autocast_enabled())


def _autocast_call(eq: Equation, operands, optimize, memory_limit):
    """Under autocast: torch.einsum's result dtype there, computed in that dtype.

    Whether torch.einsum's result takes the autocast dtype depends on the ops it runs
    (on a CPU only its matrix products autocast), so einc asks torch once per key, casts
    the operands autocast would cast when the answer is the autocast dtype, and runs with
    autocast off so that the whole plan computes in one dtype.
    """
    _check_operands(eq, operands)
    device = operands[0].device.type
    if not torch.is_autocast_enabled(device):
        with torch.autocast(device, enabled=False):     # autocast on another device only
            return einsum(eq.text, *operands, optimize=optimize, memory_limit=memory_limit)
    cast = torch.get_autocast_dtype(device)
    if dtypes.autocast_dtype(eq.canonical, operands) == cast:
        operands = [o.to(cast) if dtypes.autocast_eligible(o, cast) else o for o in operands]
    with torch.autocast(device, enabled=False):
        return einsum(eq.text, *operands, optimize=optimize, memory_limit=memory_limit)


def _run(eq: Equation, operands, optimize, memory_limit):
    """The plan for ``eq`` and these operands, from the cache or built, run (no autograd routing)."""
    opt = optimize if optimize.__class__ is str else _optimizer_key(optimize)
    try:
        first = operands[0]
        key = (eq.canonical, opt, memory_limit, first.device, first.layout,
               tuple([(o.shape, o.dtype) for o in operands]))
    except (AttributeError, IndexError):
        _check_operands(eq, operands)
        raise
    entry = _plans.get(key)
    if entry is None:
        entry = _plans.get_or_build(key, lambda: _compile(eq, operands, optimize, memory_limit))
    return entry.run(operands)


def _optimizer_key(optimize):
    if isinstance(optimize, list):
        return tuple(tuple(c) if isinstance(c, list) else c for c in optimize)
    return optimize


def _check_operands(eq: Equation, operands):
    if not operands:
        raise ArgumentError("einsum(): must specify the equation string and at least one operand, "
                            "or at least one operand and its subscripts list")
    for k, o in enumerate(operands):
        if not isinstance(o, torch.Tensor):
            raise OperandTypeError(f"einsum(): expected Tensor as element {k} in argument 1, but got "
                                   f"{type(o).__name__}: operand {k} must be a torch.Tensor, got "
                                   f"{type(o).__name__}\n  {eq.text}")
    if len(operands) != eq.num_operands:
        if len(operands) >= 3:      # torch.einsum fails in opt_einsum's path search first
            head = (f"Number of einsum subscripts, {eq.num_operands}, must be equal to the number of "
                    f"operands, {len(operands)}")
        else:
            fewer = "fewer" if len(operands) < eq.num_operands else "more"
            head = f"{fewer} operands were provided than specified in the equation"
        raise OperandCountError(
            f"einsum(): {head}: it names {eq.num_operands} "
            f"({', '.join(repr(eq.term(k)) for k in range(eq.num_operands))}) but "
            f"{len(operands)} {'was' if len(operands) == 1 else 'were'} passed\n  {eq.text}")


def _compile(eq: Equation, operands, optimize, memory_limit) -> Entry:
    _check_operands(eq, operands)
    shapes = [o.shape for o in operands]
    plan = build_plan(build(eq, shapes), eq.text, optimize, memory_limit)
    return build_entry(plan, operands, dtypes.result_dtype(eq.canonical, shapes, [o.dtype for o in operands]))


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
            device=None) -> Plan:
    """The plan einc runs for these operands (tensors, or shapes with ``dtype`` and
    ``device``, default float32 on the CPU), with the backend of each step; print it
    for a table.

    >>> print(einc.explain("ij,jk,kl->il", (8, 2), (2, 8), (8, 2)))   # doctest: +SKIP
    """
    eq = parse(equation)
    if len(operands_or_shapes) == 1 and isinstance(operands_or_shapes[0], (list, tuple)) and \
            all(isinstance(x, (torch.Tensor, list, tuple, torch.Size)) for x in operands_or_shapes[0]):
        operands_or_shapes = tuple(operands_or_shapes[0])
    shapes = [_shape_of(x) for x in operands_or_shapes]
    _check_count(eq, len(shapes))
    tensors = [x for x in operands_or_shapes if isinstance(x, torch.Tensor)]
    dtypes = [x.dtype for x in tensors] if tensors else [dtype or torch.float32] * len(shapes)
    device_type = torch.device(device or (tensors[0].device if tensors else "cpu")).type
    plan = build_plan(build(eq, shapes), eq.text, optimize, memory_limit)
    return describe_backends(plan, device_type, dtypes, shapes)


def _check_count(eq: Equation, n: int):
    if n != eq.num_operands:
        raise OperandCountError(f"einsum(): the equation names {eq.num_operands} operands but {n} "
                                f"{'was' if n == 1 else 'were'} given\n  {eq.text}")


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

    def __init__(self, eq: Equation, shapes, plan: Plan, constants: dict, optimize, memory_limit):
        self.equation = eq.text
        self.shapes = tuple(shapes)
        self.plan = plan
        self.constants = tuple(sorted(constants))
        self._variables = tuple(k for k in range(len(shapes)) if k not in constants)
        self._memory_limit = memory_limit
        if constants:
            self._text, self._folded = _fold_constants(plan, constants, optimize, memory_limit)
            self._optimize = optimize
        else:
            self._text, self._folded, self._optimize = eq.text, (), plan.path

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
        return einsum(self._text, *operands, *self._folded, optimize=self._optimize,
                      memory_limit=self._memory_limit)

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


def _fold_constants(plan: Plan, constants: dict, optimize, memory_limit):
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
        if all(v in values for v in step.operands):
            text = ",".join(_letters(t) for t in step.inputs) + "->" + _letters(step.output)
            values[step.result] = einsum(text, *[values[v] for v in step.operands], optimize=optimize,
                                         memory_limit=memory_limit)
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


def contract_expression(*args, constants=(), optimize="auto", memory_limit=None) -> ContractExpression:
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
    shapes = [_shape_of(x) for x in items]
    _check_count(eq, len(shapes))
    plan = build_plan(build(eq, shapes), eq.text, optimize, memory_limit)
    return ContractExpression(eq, shapes, plan, {k: items[k] for k in constants}, optimize, memory_limit)


def contract_path(*args, optimize="auto", memory_limit=None, dtype=None, device=None):
    """``(path, info)`` as opt_einsum's ``contract_path``: the contraction order einc runs
    for these operands (tensors or shapes; string or interleaved form), in opt_einsum's
    linear format, and the plan, which prints as :func:`explain`'s table.

    >>> path, info = einc.contract_path("ij,jk,kl->il", (8, 2), (2, 8), (8, 2))   # doctest: +SKIP
    """
    eq, items = _equation_and_args(args)
    plan = explain(eq.text, *items, optimize=optimize, memory_limit=memory_limit, dtype=dtype, device=device)
    return [tuple(c) for c in plan.path], plan


class EincCacheInfo(NamedTuple):
    plans: CacheInfo
    equations: CacheInfo


def cache_info() -> EincCacheInfo:
    """Hits, misses and sizes of the plan cache and the parsed-equation cache."""
    p = parse.cache_info()
    return EincCacheInfo(_plans.info(), CacheInfo(p.hits, p.misses, p.maxsize, p.currsize))


def cache_clear() -> None:
    """Empty both caches."""
    _plans.clear()
    parse.cache_clear()


def set_cache_size(maxsize: int) -> None:
    """Bound the plan cache to ``maxsize`` entries (default ``EINC_CACHE_SIZE`` or 4096)."""
    if maxsize < 1:
        raise ArgumentError("the cache size must be at least 1")
    _plans.maxsize = maxsize
