"""Autograd and torch.func for ``einc.einsum``: a :class:`torch.autograd.Function`.

:func:`einc.einsum` routes a call here when an operand requires grad under grad mode
or when a torch.func transform is active (:func:`einsum` holds that test); otherwise it
runs the plan directly.  One :class:`EinsumFunction` serves eager calls and the custom
op (:mod:`einc.custom_op`) under torch.compile: a :class:`Call` says which, and so
whether its forward and its gradient einsums run the engine or the op.

- ``backward``: the gradient of operand ``k`` is itself an einsum -- of the output's
  gradient with every other operand -- run through :func:`einc.einsum`, so it is
  planned and cached like any call, and double backward works because the backward
  is built from differentiable calls.  The equation comes from the
  :class:`~einc.planner.graph.ContractionGraph`, where ellipses and broadcasting are already
  integer indices, and is then put back into operand ``k``'s layout: an index
  summed within operand ``k`` alone (a broadcast size-1 dimension is one of those)
  is restored with ``expand``; a repeated index (a diagonal) is scattered back onto
  the diagonal with ``torch.diag_embed``, out of place, so vmap can batch it.
  Complex operands follow torch's convention (the other operands are conjugated).
- ``jvp``: forward mode; the sum over operands of the einsum with that operand
  replaced by its tangent.
- ``vmap``: a vmapped dimension becomes one more index of the same equation, so a
  vmapped call is one einc call (three or more operands not all batched, a numeric
  memory limit, a GPU, a batch dimension inside an operand: :func:`_vmap_as_is`; else
  the operands run their plan's torch ops, which torch batches itself).

Gradient equations depend on the operands' shapes only through which dimensions
have size 1 (broadcasting) and the ranks, so they are cached on that, and sizes are
read from the tensors at run time; the same code then also serves the traced
backward of the ``einc::einsum`` custom op under torch.compile, where sizes may be
symbolic.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from .errors import EincError
from .planner.equation import Equation, parse, term_text, text_of
from .planner.graph import ContractionGraph, build
from .planner.options import Options
from .runtime import dtypes, engine
from .runtime.cache import LRUCache

_interpreter_stack = torch._C._functorch.get_interpreter_stack
_FUNCTIONALIZE = torch._C._functorch.TransformType.Functionalize     # a Function under it fails
_VMAP = torch._C._functorch.TransformType.Vmap

# Whether a call needs the Function; bound once, as every call asks (bench/measured/overheads.md).
transforms_active = torch._C._are_functorch_transforms_active
grad_enabled = torch.is_grad_enabled
any_requires_grad = torch._C._any_requires_grad
# Forward AD: inside ``forward_ad.dual_level()`` an operand may be a dual tensor, which
# need not require grad; generated kernels and cuBLAS ``out=`` views drop its tangent.
forward_ad = torch.autograd.forward_ad
# Whether a trace records the call (:func:`tracing`).  ``is_dynamo_compiling`` is
# constant-folded to True by dynamo (so the flag, which dynamo would guard on, is never
# read while tracing); the flag is True for the rest of a compile session (AOTAutograd, a
# backend's make_fx) and during torch.export.
dynamo_tracing = torch.compiler.is_dynamo_compiling
compiler = torch.compiler if hasattr(torch.compiler, "_is_compiling_flag") else \
    type("_NoFlag", (), {"_is_compiling_flag": False})     # older torch: dynamo is still detected
jit_tracing = torch._C._is_tracing        # _get_tracing_state() is not None, without making its answer


def tracing() -> bool:
    """Whether torch.compile, torch.export or ``torch.jit.trace`` records the call: the doors
    then emit the custom op, and merge a named output uncached (so that dynamo does not
    trace a ``functools.lru_cache`` wrapper, which it warns of)."""
    return bool(dynamo_tracing() or compiler._is_compiling_flag or jit_tracing())


def needs_derivatives(operands) -> bool:
    """Whether autograd, forward AD or a torch.func transform must see through this call."""
    return transforms_active() or (any_requires_grad(*operands) and grad_enabled()) or \
        forward_ad._current_level >= 0


@dataclass(frozen=True)
class Call:
    """What a call contracts besides its operands: the equation, the options, and whether
    it runs as the custom op (``traced``: under torch.compile) or on the engine."""

    eq: Equation
    options: Options
    traced: bool = False

    def contract(self, text: str, *operands, gradient: bool = False, batch: bool = False):
        """The einsum ``text`` of the same kind of call (a gradient's gets its own path; a
        batched one, vmap's, its own random optimizer)."""
        options = self.options.for_gradient() if gradient else self.options.for_batch() if batch else self.options
        if self.traced:
            return torch.ops.einc.einsum.default(text, list(operands), *options.to_op())
        return einsum(parse(text), operands, options)


def einsum(eq: Equation, operands, options: Options) -> torch.Tensor:
    """``eq`` on ``operands``: :func:`differentiable` when a gradient or a torch.func
    transform needs it, else straight on the engine."""
    if needs_derivatives(operands):
        return differentiable(eq, operands, options)
    return engine.run(eq, operands, options)


def differentiable(eq: Equation, operands, options: Options) -> torch.Tensor:
    """A call that autograd or a torch.func transform must see through.

    Under plain autograd, forward AD and torch.func transforms (``grad``, ``jvp``,
    ``vjp``; ``vmap`` of one or two operands, see :func:`_vmap_as_is`), where the plan
    runs only torch ops (the torch executor: CPU tensors, dtypes without kernels) they
    differentiate, and batch, themselves: the plan runs as is and torch records its ops,
    so the backward is torch's own (no Function, no saved-tensor bookkeeping, no gradient
    einsums to plan) -- several times faster than the Function for small calls
    (``bench/func_overhead.py``, bench/measured/overheads.md: torch's machinery for a
    Function under a transform is Python).  Where generated kernels or cuBLAS views
    (``out=``) run, and under the other ``vmap`` calls (which then stay one einc call,
    planned over one more index), :class:`EinsumFunction` supplies the derivatives as
    einsums.  Under ``functionalize`` the plan of torch ops runs as is too (functionalized;
    its chunks joined in functional ops); where the Function would run, which has no
    functionalize rule, torch's einsum does.
    """
    transforms = transforms_active() and {i.key() for i in _interpreter_stack() or ()}
    vmapped = transforms and _VMAP in transforms
    if not vmapped or _vmap_as_is(operands, options):
        entry = engine.runnable(eq, operands, options)
        if entry.__class__ is tuple:        # torch's op answered, which autograd records
            return entry[0]
        # sliced: gradients sliced too; under vmap a sum over size 0 would give zeros made
        # without the batched operands, which vmap expands (stride 0, not a fresh tensor)
        if (entry.backend == "torch" and entry.plan.slicing is None
                and not (vmapped and entry.plan.empty_sum is not None)):
            return entry.run(operands)
    if transforms and _FUNCTIONALIZE in transforms:
        return engine.torch_op(eq, operands)    # a Function has no functionalize rule; torch's ops do
    return EinsumFunction.apply(Call(eq, options), *operands)


def _vmap_as_is(operands, options) -> bool:
    """Whether a call under ``vmap`` runs its plan's torch ops as they are, each batched
    by torch's own rule (in C++): one or two operands, so one step, whose order the batch
    cannot change, or more where the innermost vmap batches every one of them
    (:func:`_all_batched_here`); no numeric memory limit (the plan bounds one batch element; the
    Function's call over one more index bounds the whole batch); CPU tensors (elsewhere
    the entry would run, and measure, generated kernels, which take no batched tensor);
    each batch dimension outermost in memory (:func:`_batch_outermost`).
    The other calls, where a batch of some operands may make another order cheaper, take the Function's
    rule: one einc call planned over the batch index, which pays torch's Python machinery
    for a Function on every call (bench/measured/overheads.md)."""
    return (len(operands) <= 2 or _all_batched_here(operands)) and options.memory_limit in (None, "max_input") \
        and all(o.device.type == "cpu" and _batch_outermost(o) for o in operands)


_is_batched = torch._C._functorch.is_batchedtensor
_bdim = torch._C._functorch.maybe_get_bdim
_physical = torch._C._functorch.get_unwrapped
_level = torch._C._functorch.maybe_get_level
_current_level = torch._C._functorch.current_level


def _all_batched_here(operands) -> bool:
    """Whether the innermost ``vmap`` batches every operand: its batch is then one more
    index of every operand and of the result, which scales each step's cost alike and
    leaves the plan's order the best one."""
    level = _current_level()
    return all(_is_batched(o) and _level(o) == level for o in operands)


def _batch_outermost(x) -> bool:
    """Whether ``x``, where vmap batches it, holds its batch dimension outermost in memory:
    torch's batching rules move the batch dimension to the front, so elsewhere each copy
    the plan makes (laid out for one batch element's strides) would read across the batch
    (``abk,kj->bja`` vmapped over a dimension between ``b`` and ``k``: nearly all its time
    one such copy, more than the Function's one call over the batch index takes:
    bench/measured/overheads.md)."""
    if not _is_batched(x):
        return True
    physical, bdim = _physical(x), _bdim(x)
    strides = [st for st, n in zip(physical.stride(), physical.shape) if n != 1]
    return physical.shape[bdim] == 1 or physical.stride(bdim) >= max(strides)


@dataclass(frozen=True)
class GradRecipe:
    """How to compute the gradient of one operand.

    ``equation`` contracts the output's gradient (first) with the operands
    ``others``; its result has one dimension per index in ``result``.  ``lonely``
    lists ``(index, dim of operand k)`` for indices to restore with ``expand``;
    ``repeats`` ``(index, multiplicity)`` for diagonals to scatter back; ``term`` is
    operand ``k``'s indices in order.
    """

    equation: str
    others: tuple[int, ...]
    result: tuple[int, ...]
    lonely: tuple[tuple[int, int], ...]
    repeats: tuple[tuple[int, int], ...]
    term: tuple[int, ...]


@dataclass(frozen=True)
class Derived:
    """Everything a backward, jvp or vmap needs to know about one equation and shape class."""

    graph: ContractionGraph
    text: str                          # the graph as equation text (no ellipsis)
    grads: tuple[GradRecipe, ...]


_derived = LRUCache(4096)
engine.register("gradients", _derived.info, _derived.clear)


def grad_recipe(g: ContractionGraph, k: int) -> GradRecipe:
    term = g.inputs[k]
    others = tuple(j for j in range(g.num_operands) if j != k)
    present = set(g.output).union(*[g.inputs[j] for j in others])
    unique = list(dict.fromkeys(term))
    result = tuple(i for i in unique if i in present)
    lonely = tuple((i, term.index(i)) for i in unique if i not in present)
    repeats = tuple((i, term.count(i)) for i in unique if term.count(i) > 1)
    equation = ",".join([term_text(g.output)] + [term_text(g.inputs[j]) for j in others]) \
        + "->" + term_text(result)
    return GradRecipe(equation, others, result, lonely, repeats, term)


def _shape_class(shape) -> tuple[int, ...]:
    """A shape reduced to what the gradient equations depend on: rank and size-1 dims."""
    return tuple(1 if s == 1 else 2 for s in shape)


def derive(eq: Equation, shapes) -> Derived:
    """The graph-level equation text and the gradient recipes for ``eq`` at ``shapes``."""
    classes = tuple(_shape_class(s) for s in shapes)
    key = (eq.text, classes)
    found = _derived.get(key)
    if found is not None:
        return found

    def make():
        g = build(eq, classes)
        text = text_of(g.inputs, g.output)
        return Derived(g, text, tuple(grad_recipe(g, k) for k in range(g.num_operands)))
    return _derived.get_or_build(key, make)


def scatter(grad: torch.Tensor, recipe: GradRecipe, shape) -> torch.Tensor:
    """The gradient einsum's result, put into the layout of an operand of ``shape`` (out of place)."""
    order = list(recipe.result)
    if recipe.lonely:
        n = len(recipe.lonely)
        grad = grad.reshape(tuple(grad.shape) + (1,) * n).expand(
            *grad.shape, *[shape[d] for _, d in recipe.lonely])
        order += [i for i, _ in recipe.lonely]
    for i, r in recipe.repeats:
        d = order.index(i)
        if d != len(order) - 1:
            grad = grad.movedim(d, -1)
            order = order[:d] + order[d + 1:] + [i]
        for _ in range(r - 1):
            grad = torch.diag_embed(grad)
            order.append(i)
    # Each dimension of the operand takes the next unused dimension with its index.
    taken = [False] * len(order)
    perm = []
    for i in recipe.term:
        d = next(d for d, j in enumerate(order) if j == i and not taken[d])
        taken[d] = True
        perm.append(d)
    if perm != list(range(len(perm))):
        grad = grad.permute(perm)
    return grad


def operand_grads(eq: Equation, operands, grad_out, needed, contract, shapes, dtypes):
    """The gradient of every operand ``k`` with ``needed[k]``, else None.

    ``operands`` holds each operand whose value a gradient reads (every other operand's
    gradient does), else None; ``shapes`` and ``dtypes`` describe them all.
    ``contract(equation_text, *tensors)`` runs an einsum: :func:`einc.einsum` in
    eager mode, the custom op when traced.
    """
    d = derive(eq, shapes)
    grads = []
    for k, dtype in enumerate(dtypes):
        if not needed[k]:
            grads.append(None)
            continue
        recipe = d.grads[k]
        args = [grad_out] + [operands[j].conj() if operands[j].is_complex() else operands[j]
                             for j in recipe.others]
        if len({a.dtype for a in args}) > 1:   # a product of mixed dtypes: contract in the widest
            wide = args[0].dtype
            for a in args[1:]:
                wide = torch.promote_types(wide, a.dtype)
            args = [a.to(wide) for a in args]
        g = scatter(contract(recipe.equation, *args), recipe, shapes[k])
        if g.dtype != dtype:
            if g.is_complex() and not dtype.is_complex:
                g = g.real
            g = g.to(dtype)
        grads.append(g)
    return grads


def tangent(eq: Equation, operands, tangents, contract):
    """Forward mode: the sum over operands of the einsum with that operand's tangent."""
    text = derive(eq, [o.shape for o in operands]).text
    out = None
    for k, t in enumerate(tangents):
        if t is None:
            continue
        term = contract(text, *operands[:k], t, *operands[k + 1:])
        out = term if out is None else out + term
    return out


def batched(eq: Equation, in_dims, operands, contract):
    """vmap: the batch dimension becomes one more index; returns ``(result, 0)``.

    Integer and bool operands: torch's result dtype depends on the shapes (its sums promote
    to int64, its products do not), so the batched equation's may not be one batch
    element's, and torch may not evaluate it at all on bool ("d,db,da->" per element gives
    int64 counts; batched, "da,ab,ac->d" has a bool matrix product torch refuses, r15).  So
    the element's dtype is found first: where it is int64, the operands are contracted in
    int64 (exactly what einc does per element: docs/semantics.md's dtype rules), and the result
    takes it (where they still differ, an index of size 0 is summed or the result is
    empty: every value is 0, the cast exact; "d,dab,,,->" in int32 gave int32, r13)."""
    logical = [tuple(o.shape[:d]) + tuple(o.shape[d + 1:]) if d is not None else tuple(o.shape)
               for o, d in zip(operands, in_dims)]
    kinds = [o.dtype for o in operands]
    want = None
    if not any(k.is_floating_point or k.is_complex for k in kinds):
        want = dtypes.result_dtype(eq.torch_text, logical, kinds)   # (raises where torch refuses the dtype)
        # None: torch trips on its own promotion per element, where einc answers in int64
        if (want == torch.int64 or dtypes.in_int64(kinds, want)) and any(k != torch.int64 for k in kinds):
            operands = [o.to(torch.int64) for o in operands]
    try:
        result, dim = _batched(eq, in_dims, operands, contract, logical)
    except EincError:
        build(eq, logical)      # the caller's equation, sizes and caret where these shapes do not fit it
        dtypes.result_dtype(eq.torch_text, logical, kinds)      # or dtypes torch refuses
        raise
    if want is not None and want != result.dtype:
        result = result.to(want)
    return result, dim


def _batched(eq: Equation, in_dims, operands, contract, logical):
    g = derive(eq, logical).graph
    b = len(g.sizes)
    terms, moved = [], []
    for o, t, d in zip(operands, g.inputs, in_dims):
        if d is None:
            terms.append(t)
            moved.append(o)
        else:
            terms.append((b,) + t)
            moved.append(o.movedim(d, 0))
    if len(terms) == len([d for d in in_dims if d is None]):   # nothing batched
        return contract(",".join(map(term_text, terms)) + "->" + term_text(g.output), *moved), None
    text = ",".join(map(term_text, terms)) + "->" + term_text((b,) + g.output)
    return contract(text, *moved, batch=True), 0


class EinsumFunction(torch.autograd.Function):
    """``einc.einsum`` as an autograd.Function, for eager calls and the custom op alike
    (the :class:`Call` says which); see the module docstring."""

    generate_vmap_rule = False

    @staticmethod
    def forward(call: Call, *operands):
        if call.traced:     # the op again, below autograd (grad mode is off in here)
            return torch.ops.einc.einsum.default(call.eq.text, list(operands), *call.options.to_op())
        return engine.run(call.eq, operands, call.options)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.call = inputs[0]
        ctx.set_materialize_grads(False)       # an operand without a tangent costs no einsum
        operands, needed = inputs[1:], ctx.needs_input_grad[1:]
        # Only the operands a gradient reads: every other operand's gradient reads one, none
        # its own (so an inference tensor beside one that requires grad, as torch allows).
        # An inference tensor cannot be saved: a copy of it is (torch's own einsum saves the
        # tensors its decomposition makes of one, not the tensor itself).
        read = [any(needed[:j]) or any(needed[j + 1:]) for j in range(len(operands))]
        if ctx.call.traced and any(needed):     # a traced backward runs the call again: every operand
            read = [True] * len(operands)
        ctx.save_for_backward(*[(o.clone() if o.is_inference() else o) if r else None
                                for o, r in zip(operands, read)])
        ctx.reads = any(read)     # else the backward asks for nothing saved: it may run twice, as torch's
        ctx.shapes, ctx.dtypes = [o.shape for o in operands], [o.dtype for o in operands]
        ctx.save_for_forward(*operands)

    @staticmethod
    def backward(ctx, grad_out):
        n = len(ctx.needs_input_grad) - 1
        if grad_out is None:
            return (None,) * (1 + n)
        call = ctx.call
        saved = ctx.saved_tensors if ctx.reads else (None,) * n
        if call.traced and not grad_enabled() and not transforms_active():     # (double backward: einsums)
            return (None, *_traced_backward(call, saved, grad_out, ctx.needs_input_grad[1:]))
        grads = operand_grads(call.eq, saved, grad_out, ctx.needs_input_grad[1:],
                              lambda text, *ops: call.contract(text, *ops, gradient=True), ctx.shapes, ctx.dtypes)
        return (None, *grads)

    @staticmethod
    def jvp(ctx, _call_tangent, *tangents):
        return tangent(ctx.call.eq, ctx.saved_tensors, tangents, ctx.call.contract)

    @staticmethod
    def vmap(info, in_dims, call, *operands):
        return batched(call.eq, in_dims[1:], operands, call.contract)


def _traced_backward(call: Call, operands, grad_out, needed):
    """The custom op's gradients (a compiled or traced graph's backward): one call of
    ``einc::einsum_backward``, which runs the call again with autograd at run time, so that
    their bits are the eager call's."""
    grads = iter(torch.ops.einc.einsum_backward.default(
        call.eq.text, list(operands), grad_out, list(needed), *call.options.to_op()))
    return [next(grads) if n else None for n in needed]


# torch binds every apply's arguments to forward's signature where setup_context is
# defined, building the signature anew each time unless the function carries one.
EinsumFunction.forward.__signature__ = inspect.signature(EinsumFunction.forward)

__all__ = ["EinsumFunction", "Call", "einsum", "differentiable", "derive", "operand_grads", "tangent", "batched"]
