"""``einc::einsum``: einc as a torch.library custom op, for torch.compile.

Under ``torch.compile`` :func:`einc.einsum` does not run its Python (parse, cache,
plan, generated run function): dynamo would have to trace all of it, and the plan's
reshapes bake in concrete sizes, which breaks ``dynamic=True``.  Instead it emits one
call of the custom op ``einc::einsum(str equation, Tensor[] operands, str optimize,
str memory_limit) -> Tensor``:

- dynamo and AOTAutograd see an opaque op with a fake implementation that computes
  the output's shape (from the graph stage, so symbolic sizes work and broadcasting
  is checked) and dtype (from the torch executor run on ``meta`` tensors);
- at run time the op is plain einc: plan cache, plan, executor -- so compiled code
  gets the same plans and kernels as eager code, and a new shape under
  ``dynamic=True`` is one more cache entry, not a recompile;
- its Autograd kernel applies an autograd.Function with the backward, jvp and vmap
  rules of :mod:`einc.autograd`, the gradient einsums again calls of the op, so
  training graphs trace through it (the batching rule is registered for the op too);
- inductor treats it as an extern call and compiles the rest of the graph around it.

This was chosen over tracing einc's own Python at compile time because it needs no
trace-time planning with symbolic sizes and behaves the same under every backend
(inductor, eager, aot_eager, einc's own).  The op is defined with ``torch.library.Library``
rather than ``torch.library.custom_op``, whose Python wrappers cost about 12 us a call
(this op adds about 3 us to ``einc.einsum`` when a compiled graph runs it).
``optimize`` and ``memory_limit`` travel as strings; a ``PathOptimizer`` object cannot,
so under torch.compile ``optimize`` must be a strategy name, a bool, or an explicit
path (a ``PathOptimizer`` makes dynamo fall back to eager for that frame, and fails
under ``fullgraph=True``).
"""

import functools

import torch

from . import api, autograd
from .equation import parse, sublist_equation
from .errors import PathError
from .graph import build

_SCHEMA = "(str equation, Tensor[] operands, str optimize, str memory_limit) -> Tensor"


# ------------------------------------------------------------------ options as strings

def encode_optimize(optimize) -> str:
    """``optimize`` as the op's string argument (dynamo traces this; keep it plain)."""
    if isinstance(optimize, str):
        return optimize
    if optimize is True:
        return "auto"
    if optimize is False or optimize is None:
        return "false"
    if isinstance(optimize, (list, tuple)):
        pairs = []
        for pair in optimize:
            if isinstance(pair, str) and pair == "einsum_path":
                continue
            if not isinstance(pair, (list, tuple)):
                raise PathError(f"einsum(): an explicit path is a list of tuples of ints, got {optimize!r}")
            pairs.append(",".join([str(int(i)) for i in pair]))
        return "path:" + ";".join(pairs)
    raise PathError("einsum(): under torch.compile, optimize must be a strategy name, a bool or an explicit "
                    f"path; a {type(optimize).__name__} object cannot be passed to the compiled op")


@functools.lru_cache(maxsize=256)
def decode_optimize(text: str):
    if text == "false":
        return False
    if text.startswith("path:"):
        body = text[5:]
        return tuple(tuple(int(i) for i in pair.split(",") if i) for pair in body.split(";")) if body else ()
    return text


def encode_memory_limit(memory_limit) -> str:
    if memory_limit is None:
        return ""
    if isinstance(memory_limit, str):
        return memory_limit
    return str(int(memory_limit))


@functools.lru_cache(maxsize=256)
def decode_memory_limit(text: str):
    if not text:
        return None
    return text if not text.isdigit() else int(text)


# ------------------------------------------------------------------ the traced call

def traced_einsum(equation, operands, optimize, memory_limit):
    """What :func:`einc.einsum` does under torch.compile: one call of the custom op."""
    if isinstance(equation, str):
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        text = equation
    else:
        text, operands = sublist_equation((equation,) + tuple(operands))
    return einsum_op(text, list(operands), encode_optimize(optimize), encode_memory_limit(memory_limit))


# ------------------------------------------------------------------ the op

_lib = torch.library.Library("einc", "DEF")
_lib.define("einsum" + _SCHEMA)


def _impl(equation, operands, optimize, memory_limit):
    """The kernel for every device: plain einc (plan cache, plan, executor)."""
    args = _decoded(equation, optimize, memory_limit)
    return api._run(args[0], operands, args[1], args[2])


@functools.lru_cache(maxsize=4096)
def _decoded(equation, optimize, memory_limit):
    return parse(equation), decode_optimize(optimize), decode_memory_limit(memory_limit)


_lib.impl("einsum", _impl, "CompositeExplicitAutograd")
einsum_op = torch.ops.einc.einsum.default

_grad_enabled = torch.is_grad_enabled
_any_requires_grad = torch._C._any_requires_grad
_modes = torch._C._len_torch_dispatch_stack
_transforms_active = torch._C._are_functorch_transforms_active
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _autograd_kernel(equation, operands, optimize, memory_limit):
    """The Autograd kernel: the backward of :mod:`einc.autograd` when a gradient is needed.

    Otherwise it runs einc directly when the operands are plain tensors and no dispatch
    mode is active (a compiled graph at run time: re-dispatching costs ~7 us a call),
    and re-dispatches below autograd when they are not (fake or functional tensors
    while tracing), so that the op stays one opaque node in traced graphs.
    """
    if _grad_enabled() and _any_requires_grad(operands):
        if _transforms_active():
            # torch.func.grad & co. around a direct call of the op: an autograd.Function
            # cannot be applied from inside a kernel there, so run the executor's
            # differentiable ops.  (einc.einsum itself applies einc.autograd before any
            # kernel, so this is only reached by calling torch.ops.einc.einsum.)
            return _impl(equation, operands, optimize, memory_limit)
        return OpFunction.apply(equation, optimize, memory_limit, *operands)
    if not _modes() and all(type(o) in _PLAIN for o in operands):
        return _impl(equation, operands, optimize, memory_limit)
    with torch._C._AutoDispatchBelowAutograd():
        return einsum_op(equation, operands, optimize, memory_limit)


_lib.impl("einsum", _autograd_kernel, "Autograd")


def _autocast_kernel(device_type: str, key):
    """Under autocast the op behaves like torch.einsum there: floating operands are cast to
    the autocast dtype, then the op runs with autocast off.  (The cast is then part of
    traced graphs, so the fake and the real kernels agree on the dtype.)"""
    keys = torch._C.DispatchKeySet(key)

    def kernel(equation, operands, optimize, memory_limit):
        dtype = torch.get_autocast_dtype(device_type)
        cast = [o.to(dtype) if o.is_floating_point() and o.dtype != dtype else o for o in operands]
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return einsum_op(equation, cast, optimize, memory_limit)
    return kernel


_lib.impl("einsum", _autocast_kernel("cpu", torch._C.DispatchKey.AutocastCPU), "AutocastCPU")
_lib.impl("einsum", _autocast_kernel("cuda", torch._C.DispatchKey.AutocastCUDA), "AutocastCUDA")


def _fake(equation, operands, optimize, memory_limit):
    eq = parse(equation)
    api._check_operands(eq, operands)
    graph = build(eq, [o.shape for o in operands])          # checks sizes; symbolic sizes work
    dtype = _result_dtype(equation, tuple(o.dtype for o in operands),
                          tuple(tuple(_probe(s) for s in o.shape) for o in operands), optimize, memory_limit)
    return operands[0].new_empty([graph.sizes[i] for i in graph.output], dtype=dtype)


torch.library.register_fake("einc::einsum", _fake, lib=_lib)


def _probe(size) -> int:
    """A stand-in size with the same broadcasting behaviour (0, 1, or more)."""
    return 0 if size == 0 else 1 if size == 1 else 2


@functools.lru_cache(maxsize=1024)
def _result_dtype(equation, dtypes, shapes, optimize, memory_limit):
    """The executor's result dtype (integer sums promote), from a run on meta tensors."""
    probes = [torch.empty(s, dtype=d, device="meta") for s, d in zip(shapes, dtypes)]
    return _impl(equation, probes, optimize, memory_limit).dtype


def _contract(optimize, memory_limit):
    def contract(text, *ops):
        return einsum_op(text, list(ops), optimize, memory_limit)
    return contract


class OpFunction(torch.autograd.Function):
    """The op's autograd: the rules of :mod:`einc.autograd`, with einsums as op calls."""

    generate_vmap_rule = False

    @staticmethod
    def forward(equation, optimize, memory_limit, *operands):
        return einsum_op(equation, list(operands), optimize, memory_limit)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.einc = inputs[:3]
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*inputs[3:])
        ctx.save_for_forward(*inputs[3:])

    @staticmethod
    def backward(ctx, grad):
        equation, optimize, memory_limit = ctx.einc
        n = len(ctx.needs_input_grad) - 3
        if grad is None:
            return (None,) * (3 + n)
        if optimize.startswith("path:"):       # the forward's path does not fit the gradient's equation
            optimize = "auto"
        grads = autograd.operand_grads(parse(equation), ctx.saved_tensors, grad, ctx.needs_input_grad[3:],
                                       _contract(optimize, memory_limit))
        return (None, None, None, *grads)

    @staticmethod
    def jvp(ctx, _eq, _opt, _ml, *tangents):
        equation, optimize, memory_limit = ctx.einc
        return autograd.tangent(parse(equation), ctx.saved_tensors, tangents, _contract(optimize, memory_limit))

    @staticmethod
    def vmap(info, in_dims, equation, optimize, memory_limit, *operands):
        return autograd.batched(parse(equation), in_dims[3:], operands, _contract(optimize, memory_limit))


def _vmap(info, in_dims, equation, operands, optimize, memory_limit):
    return autograd.batched(parse(equation), in_dims[1], operands, _contract(optimize, memory_limit))


torch.library.register_vmap("einc::einsum", _vmap, lib=_lib)

__all__ = ["einsum_op", "traced_einsum", "encode_optimize", "encode_memory_limit", "OpFunction"]
