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
from .equation import Equation, from_sublists, parse
from .errors import ArgumentError, OperandCountError, OperandTypeError, ShapeError
from .graph import build
from .plan import Plan, build_plan
from .runtime.cache import CacheInfo, LRUCache
from .runtime.dispatch import Entry, build_entry, describe_backends
from .runtime.torch_executor import compile_plan

_plans = LRUCache(config.cache_size())


def einsum(equation, *operands, optimize="auto", memory_limit=None):
    """Evaluate an einsum like ``torch.einsum``, planning once per key.

    ``optimize`` takes an opt_einsum strategy name (default ``"auto"``: exhaustive up
    to 5 operands, ``dp`` up to 16, random-greedy beyond), a ``PathOptimizer``, an
    explicit path, or False for left to right.  The result is always a fresh tensor
    in standard contiguous layout.

    >>> import torch, einc
    >>> einc.einsum("ij,jk->ik", torch.ones(2, 3), torch.ones(3, 4)).shape
    torch.Size([2, 4])
    """
    if _dynamo_tracing() or _compiler._is_compiling_flag:     # torch.compile, export: the custom op
        return custom_op.traced_einsum(equation, operands, optimize, memory_limit)
    if equation.__class__ is str:
        if len(operands) == 1 and operands[0].__class__ in (list, tuple):
            operands = operands[0]
        eq = parse(equation)
    else:
        eq, operands = _sublist_call(equation, operands)
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


def _sublist_call(first, rest):
    args = (first,) + tuple(rest)
    if len(args) < 2:
        raise ArgumentError("einsum(): must specify the equation string and at least one operand, "
                            "or at least one operand and its subscripts list")
    operands = list(args[0::2][: len(args) // 2])
    sublists = list(args[1::2][: len(args) // 2])
    output = args[-1] if len(args) % 2 else None
    return from_sublists(sublists, output), operands


def _check_operands(eq: Equation, operands):
    if not operands:
        raise ArgumentError("einsum(): must specify the equation string and at least one operand, "
                            "or at least one operand and its subscripts list")
    for k, o in enumerate(operands):
        if not isinstance(o, torch.Tensor):
            raise OperandTypeError(f"einsum(): operand {k} must be a torch.Tensor, got "
                                   f"{type(o).__name__}\n  {eq.text}")
    if len(operands) != eq.num_operands:
        fewer = "fewer" if len(operands) < eq.num_operands else "more"
        raise OperandCountError(
            f"einsum(): {fewer} operands were provided than specified in the equation: it names "
            f"{eq.num_operands} ({', '.join(repr(eq.term(k)) for k in range(eq.num_operands))}) but "
            f"{len(operands)} {'was' if len(operands) == 1 else 'were'} passed\n  {eq.text}")


def _compile(eq: Equation, operands, optimize, memory_limit) -> Entry:
    _check_operands(eq, operands)
    graph = build(eq, [o.shape for o in operands])
    plan = build_plan(graph, eq.text, optimize, memory_limit)
    return build_entry(plan, operands)


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
    """A contraction planned once for fixed shapes; call it with operands of those shapes.

    >>> expr = einc.contract_expression("ij,jk->ik", (2, 3), (3, 4))  # doctest: +SKIP
    >>> expr(torch.ones(2, 3), torch.ones(3, 4)).shape                  # doctest: +SKIP
    torch.Size([2, 4])
    """

    def __init__(self, eq: Equation, shapes, plan: Plan):
        self.equation = eq.text
        self.shapes = tuple(shapes)
        self.plan = plan
        self._runs: dict = {}

    def __call__(self, *operands):
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        dtypes = tuple([o.dtype for o in operands]) if len(operands) == len(self.shapes) else None
        run = self._runs.get(dtypes)
        if run is None:
            self._check(operands)
            run = self._runs.setdefault(dtypes, compile_plan(self.plan, dtypes))
        elif any(o.shape != s for o, s in zip(operands, self.shapes)):
            self._check(operands)
        return run(operands)

    def _check(self, operands):
        for k, o in enumerate(operands):
            if not isinstance(o, torch.Tensor):
                raise OperandTypeError(f"operand {k} must be a torch.Tensor, got {type(o).__name__}")
        if len(operands) != len(self.shapes):
            raise OperandCountError(f"this expression for {self.equation!r} takes {len(self.shapes)} "
                                    f"operands, got {len(operands)}")
        for k, (o, s) in enumerate(zip(operands, self.shapes)):
            if tuple(o.shape) != s:
                raise ShapeError(f"operand {k} of the expression {self.equation!r} has shape "
                                 f"{tuple(o.shape)}, but the expression was planned for {s}")

    def __repr__(self) -> str:
        return f"<ContractExpression {self.equation!r} shapes={list(self.shapes)}>"

    def __str__(self) -> str:
        return str(self.plan)


def contract_expression(equation, *shapes, optimize="auto", memory_limit=None) -> ContractExpression:
    """Plan ``equation`` once for ``shapes`` and return a reusable callable (as opt_einsum's)."""
    eq = parse(equation)
    shapes = [_shape_of(s) for s in shapes]
    _check_count(eq, len(shapes))
    return ContractExpression(eq, shapes, build_plan(build(eq, shapes), eq.text, optimize, memory_limit))


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
