"""``einc::einsum``: einc as a torch.library custom op, for torch.compile.

Under ``torch.compile`` :func:`einc.einsum` does not run its Python (parse, cache,
plan, generated run function): dynamo would have to trace all of it, and the plan's
reshapes bake in concrete sizes, which breaks ``dynamic=True``.  Instead it emits one
call of the custom op ``einc::einsum(str equation, Tensor[] operands, str optimize,
str memory_limit, str layout) -> Tensor``:

- dynamo and AOTAutograd see an opaque op with a fake implementation that computes
  the output's shape (from the graph stage, so symbolic sizes work and broadcasting
  is checked) and dtype (torch.einsum's, as in eager calls);
- at run time the op is plain einc: plan cache, plan, executor -- so compiled code
  gets the same plans and kernels as eager code, and a new shape under
  ``dynamic=True`` is one more cache entry, not a recompile; the fake kernel states a
  contiguous result before any plan exists (sizes may be symbolic), so the op runs the
  plan of the layout the call asked for and returns its result made contiguous where it
  is not (``"any"`` allows it): the eager call's values, bit for bit;
- its Autograd kernel applies :class:`einc.autograd.EinsumFunction` (the one eager
  calls use, told by its ``Call`` that it is traced), whose backward is one call of
  ``einc::einsum_backward`` (the call again with autograd, at run time: the eager
  call's gradients, bit for bit) and, for double backward and torch.func transforms,
  gradient einsums that are again calls of the op, so training graphs trace through
  it (the batching rule is registered for the op too);
- inductor treats it as an extern call and compiles the rest of the graph around it.

This was chosen over tracing einc's own Python at compile time because it needs no
trace-time planning with symbolic sizes and behaves the same under every backend
(inductor, eager, aot_eager, einc's own).  The op is defined with ``torch.library.Library``
rather than ``torch.library.custom_op``, whose Python wrappers cost several times what
this op adds to ``einc.einsum`` when a compiled graph runs it (bench/measured/overheads.md).
``optimize``, ``memory_limit`` and ``layout`` travel as strings
(:meth:`einc.planner.options.Options.to_op`); a ``PathOptimizer`` object cannot,
so under torch.compile ``optimize`` must be a strategy name, a bool, or an explicit
path (a ``PathOptimizer`` makes dynamo fall back to eager for that frame, and fails
under ``fullgraph=True``).

A call that cannot run fails while dynamo traces it (in the fake kernel, or in einc's
checks before the op): einc's error is raised as dynamo lets it out of a trace
(:func:`traced_error`), so that the compiled call raises the eager call's class and text
(a product torch has no kernel for, in a node dynamo runs for ``torch.einsum = einc.einsum``,
when the node runs: :func:`_fake_dtype`).
"""

import contextlib
import functools
import operator
import os
import sys
import threading
import traceback
import weakref
from typing import NoReturn

import torch

from . import autograd, errors, op_flops
from .errors import DtypeError, EincError, EquationError, OperandCountError, ShapeError, UnsupportedDtypeError
from .planner import notation
from .planner.equation import call_form, parse, parse_as_called
from .planner.graph import build
from .planner.options import AUTO, Options, encode
from .runtime import dtypes, engine

# ``scale`` multiplies the result (the torch.compile backend passes its constant factors
# here, so a generated kernel applies them in its epilogue instead of a pass of their own)
_SCHEMA = ('(str equation, Tensor[] operands, str optimize, str memory_limit, str layout="", float scale=1.0) '
           '-> Tensor')


def constant_result(fn):
    """``torch.compiler.assume_constant_result``: dynamo calls ``fn`` while it traces and
    keeps its result as a constant.  The mark is the attribute torch's decorator sets; set
    here because torch's imports dynamo, which would cost einc's first call seconds."""
    fn._dynamo_marked_constant = True
    return fn


def traced_einsum(equation, operands, optimize, memory_limit, layout=None):
    """What :func:`einc.einsum` does under torch.compile: one call of the custom op.
    Plain code, traced by dynamo: the options are checked when the op decodes them."""
    text, operands = call_form((equation, *operands))
    if not all(isinstance(o, torch.Tensor) for o in operands):      # (the op takes tensors alone)
        _not_tensors(text, [None if isinstance(o, torch.Tensor) else type(o).__name__ for o in operands])
    if not torch.compiler.is_dynamo_compiling():
        if _onnx_exporting():
            # torch.onnx.export traces the model (torch.jit.trace): aten::einsum, which ONNX has as Einsum
            return torch._VF.einsum(text, list(operands))
    elif not all(o.dtype in _PRODUCTS for o in operands):
        # (a product torch has no kernel for, a NotImplementedError, which dynamo would make its
        # own error before it let einc's through from the fake kernel: asked here, as a constant;
        # at sizes of 2 first, which compare no size, a data-dependent one included, with 0 or 1)
        types, options = tuple(o.dtype for o in operands), encode(optimize, memory_limit)
        if not _kernel_exists(text, types, tuple((2,) * o.dim() for o in operands), *options, False):
            _kernel_exists(text, types, tuple(tuple([_kind(n) for n in o.shape]) for o in operands), *options)
    return einsum_op(text, list(operands), *encode(optimize, memory_limit), layout.lower() if layout else "")


def _kind(n) -> int:
    """:func:`_probe` of a size dynamo traces: a data-dependent one is neither 0 nor 1, as the
    fake kernel takes it (``guard_or_false``: no guard on its value; a torch without it
    compares the size)."""
    try:
        from torch.fx.experimental.symbolic_shapes import guard_or_false
    except ImportError:
        return _probe(n)
    return 0 if guard_or_false(n == 0) else 1 if guard_or_false(n == 1) else 2


# dtypes whose products torch has (on the CPU, where einc asks it): no call of them needs the check
_PRODUCTS = dtypes.COMPUTED | {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}


@constant_result
def _kernel_exists(equation, types, shapes, optimize, memory_limit, raising=True) -> bool:
    """Whether torch has the products of a call of operands of ``types`` at sizes of ``shapes``' kinds (:func:`_probe`);
    where it has not, and ``raising``, raise the call's :class:`~einc.errors.UnsupportedDtypeError` as
    :func:`traced_error` makes it while dynamo traces.  The call's other errors are the fake kernel's."""
    try:
        _result_dtype(equation, types, shapes, optimize, memory_limit)
    except errors.UnsupportedDtypeError as error:
        if not raising:
            return False
        raise traced_error(error) from None
    except Exception:       # noqa: BLE001 -- (the fake kernel raises it, with the call's sizes)
        pass
    return True


@constant_result
def _not_tensors(text, kinds):
    """The error einsum raises for operands some not tensors (None: a tensor; others by type
    name, which dynamo passes on: no numpy array) where dynamo traces (as a constant) or jit does."""
    try:
        eq = parse_as_called(text, len(kinds))
        engine.check_operands(eq, [torch.empty(0, device="meta") if k is None else type(k, (), {})() for k in kinds])
    except EincError as error:
        raise traced_error(error) from None


def _onnx_exporting() -> bool:
    """Whether ``torch.onnx.export`` is tracing the model (never true before ``torch.onnx`` is imported)."""
    onnx = sys.modules.get("torch.onnx")
    return onnx is not None and onnx.is_in_onnx_export()


# ------------------------------------------------------------------ the op

_lib = torch.library.Library("einc", "DEF")
_lib.define("einsum" + _SCHEMA)


def _impl(equation, operands, optimize, memory_limit, layout="", scale=1.0):
    """The kernel for every device: plain einc (plan cache, plan, executor), its result contiguous
    as the fake kernel states it (a copy of its values, where ``"any"`` wrote another order)."""
    options = Options.from_op(optimize, memory_limit, layout)
    if scale != 1.0:
        return engine.run_scaled(parse(equation), operands, options, scale).contiguous()
    return engine.run(parse(equation), operands, options).contiguous()


_lib.impl("einsum", _impl, "CompositeExplicitAutograd")
einsum_op = torch.ops.einc.einsum.default

# TorchScript's door (``torch.jit.script`` of code calling ``einc.einsum``): the operands
# last among the positional arguments, so that ``einsum(eq, a, b)`` packs ``a, b`` into the
# list as it does for ``aten::einsum``; it decomposes into the op above (which has every kernel).
# ``layout`` (None: ``EINC_LAYOUT``'s) is checked and carried, as the op carries it.
_lib.define('einsum.script(str equation, Tensor[] operands, *, str optimize="auto", str memory_limit="", '
            'str? layout=None) -> Tensor')


def _script(equation, operands, optimize="auto", memory_limit="", layout=None):
    layout = Options.of(AUTO, None, None, layout).layout or ""
    if notation.is_named(equation):     # a named equation (no keyword sizes in TorchScript): views, op, reshape
        named = notation.structure(equation)
        views = notation.resolve(named, [o.shape for o in operands], {})[1]
        out = einsum_op(named.equation, [o if v is None else o.view(v) for o, v in zip(operands, views)],
                        optimize, memory_limit, layout)
        shape = notation.output_shape(named, out.shape)
        return out if shape is None else out.reshape(shape)
    return einsum_op(equation, operands, optimize, memory_limit, layout)


_lib.impl("einsum.script", _script, "CompositeImplicitAutograd")

_modes = torch._C._len_torch_dispatch_stack
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _autograd_kernel(equation, operands, optimize, memory_limit, layout="", scale=1.0):
    """The Autograd kernel: :class:`einc.autograd.EinsumFunction` when a gradient is needed.

    Otherwise it runs einc directly when the operands are plain tensors and no dispatch
    mode is active (a compiled graph at run time: re-dispatching would add to every call,
    bench/measured/overheads.md),
    and re-dispatches below autograd when they are not (fake or functional tensors
    while tracing), so that the op stays one opaque node in traced graphs.
    """
    if autograd.grad_enabled() and autograd.any_requires_grad(operands):
        if autograd.transforms_active():
            # torch.func.grad & co. around a direct call of the op: an autograd.Function
            # cannot be applied from inside a kernel there, so run the executor's
            # differentiable ops.  (einc.einsum itself applies the Function before any
            # kernel, so this is only reached by calling torch.ops.einc.einsum.)
            return _impl(equation, operands, optimize, memory_limit, layout, scale)
        call = autograd.Call(parse(equation), Options.from_op(optimize, memory_limit, layout), traced=True)
        out = autograd.EinsumFunction.apply(call, *operands)
        return out if scale == 1.0 else out * scale     # training: the scale as its own op
    modes = _modes()
    if modes and op_flops.counting():
        op_flops.register()
    if modes or autograd.forward_ad._current_level >= 0 or autograd.transforms_active():
        dual = _forward(equation, operands, optimize, memory_limit, layout, scale)
        if dual is not None:
            return dual
    if not modes and all(type(o) in _PLAIN for o in operands):
        return _impl(equation, operands, optimize, memory_limit, layout, scale)
    with torch._C._AutoDispatchBelowAutograd():
        return einsum_op(equation, operands, optimize, memory_limit, layout, scale)


def _forward(equation, operands, optimize, memory_limit, layout, scale):
    """Forward AD (``torch.func.jvp``, ``jacfwd``, ``forward_ad.dual_level``) with no gradient
    asked: the result and its tangent, the sum over operands of the op with that operand
    replaced by its tangent, made dual; None where no operand carries a tangent.  Below
    autograd the op would drop the tangents, and while torch.compile traces the call (fake
    or functional tensors) nothing else would put one on the result: the compiled graph's
    tangent would be zero.  Asked under forward AD, a transform or a dispatch mode
    (tracing): AOTAutograd retraces a graph whose dual level Python's ``forward_ad``
    does not record, so the tangents are read at level 0, the one level forward AD has
    outside functorch's nesting."""
    level = max(autograd.forward_ad._current_level, 0)
    with torch._C._DisableTorchDispatch():      # (a look that no trace records: the primal views go)
        if all(torch._VF._unpack_dual(o, level)[1] is None for o in operands):
            return None
    unpacked = [torch._VF._unpack_dual(o, level) for o in operands]
    tangents = [t for _, t in unpacked]
    primals = [p for p, _ in unpacked]
    call = autograd.Call(parse(equation), Options.from_op(optimize, memory_limit, layout), traced=True)
    out = einsum_op(equation, primals, optimize, memory_limit, layout, scale)
    tangent = autograd.tangent(call.eq, primals, tangents, call.contract)
    return torch._VF._make_dual(out, tangent if scale == 1.0 else tangent * scale, level=level)


_lib.impl("einsum", _autograd_kernel, "Autograd")


def _autocast_kernel(device_type: str, key):
    """Under autocast the op behaves like torch.einsum, as :func:`einc.einsum` does: its floating operands (not float64)
    are cast to the autocast dtype where torch.einsum's result takes it
    (:func:`~einc.runtime.dtypes.autocast_operands`), then the op runs with autocast off.  (The cast is then part of
    traced graphs, so the fake and the real kernels agree.)"""
    keys = torch._C.DispatchKeySet(key)

    def kernel(equation, operands, optimize, memory_limit, layout="", scale=1.0):
        try:
            cast = dtypes.autocast_operands(parse(equation).torch_text, operands, device_type)
        except EincError as error:      # (a call autocast refuses; while dynamo traces, as it lets it through)
            raise traced_error(error) from None
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return einsum_op(equation, cast, optimize, memory_limit, layout, scale)
    return kernel


_autocast_cpu = _autocast_kernel("cpu", torch._C.DispatchKey.AutocastCPU)
_lib.impl("einsum", _autocast_cpu, "AutocastCPU")
_lib.impl("einsum", _autocast_kernel("cuda", torch._C.DispatchKey.AutocastCUDA), "AutocastCUDA")


def _never_compiled(*codes) -> None:
    """Mark the op's kernels (and :func:`einc.einsum`) so that dynamo never compiles them, nor
    what they call, as a frame of its own: where it breaks a graph at the op (a call that fails:
    dynamo then runs it eagerly), it would otherwise trace each frame of einc's runtime in turn.
    (Dynamo still inlines them where it traces a function that calls them.)  (What
    ``torch.library.custom_op``'s wrapper does at every call, marked here once on the code
    objects: compiled graphs run the kernels with dynamo off, and never pay for it.)"""
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
        for code in codes:
            set_code_exec_strategy(code, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))
    except (ImportError, AttributeError, TypeError):    # a torch without these: such a call is only slower
        pass


_never_compiled(_impl.__code__, _autograd_kernel.__code__, _autocast_cpu.__code__)   # (one code: both devices')


# Where a size is data-dependent (an unbacked symbol: ``x[mask]``, ``nonzero``), no guard
# can ask whether it is 1: the graph is built with this stand-in for every such size,
# neither 0 nor 1 (as torch's size-oblivious checks take it), and equal to itself, so that
# two data-dependent sizes of one label agree here and are checked when the op runs.
_UNBACKED = 2 ** 62 + 3


def _fake(equation, operands, optimize, memory_limit, layout="", scale=1.0):
    try:
        eq = parse_as_called(equation, len(operands))
        engine.check_operands(eq, operands)
        shapes = [[_UNBACKED if _unbacked(n) else n for n in o.shape] for o in operands]
        graph = _built(eq, shapes)          # checks sizes; symbolic sizes work
        dtype = _fake_dtype(equation, tuple(o.dtype for o in operands),
                            tuple(tuple(_probe(s) for s in shape) for shape in shapes), optimize, memory_limit)
    except EincError as error:      # (while dynamo traces, as it lets the error through)
        raise traced_error(error) from None
    sizes = list(graph.sizes)
    for term, o, shape in zip(graph.inputs, operands, shapes):
        for i, n, m in zip(term, o.shape, shape):
            if m is _UNBACKED and sizes[i] is _UNBACKED:
                sizes[i] = n        # the size an operand gives it
    return operands[0].new_empty([sizes[i] for i in graph.output], dtype=dtype)


def _fake_dtype(equation, types, shapes, optimize, memory_limit):
    """The result's dtype (:func:`_result_dtype`).  Where torch has no product for these dtypes and dynamo traces, the
    operands' promoted dtype: dynamo runs this kernel for a node of its own where ``torch.einsum = einc.einsum`` (it
    records the call as torch's), and makes the ``NotImplementedError`` raised here its own error before einc's can
    pass, so the node is kept and raises the eager call's error when it runs, as torch.einsum's own does.  (Where dynamo
    traces a call of einc.einsum, :func:`traced_einsum` raises it first.)"""
    try:
        return _result_dtype(equation, types, shapes, optimize, memory_limit)
    except errors.UnsupportedDtypeError:
        if _tracer() is None:
            raise
        return functools.reduce(torch.promote_types, types)


def _built(eq, shapes):
    """:func:`build` on these sizes; where they are symbolic and do not fit, its error worded
    with the sizes traced (their example values, those the eager call names)."""
    try:
        return build(eq, shapes)
    except ShapeError:
        examples = [[_example(n) for n in shape] for shape in shapes]
        if any(isinstance(n, torch.SymInt) for shape in shapes for n in shape) and \
                all(type(n) is int for shape in examples for n in shape):
            build(eq, examples)
        raise


def _example(n):
    """A size as a number: a symbolic size's example value (None where it has none)."""
    return getattr(n.node, "hint", None) if isinstance(n, torch.SymInt) else n


def _unbacked(n) -> bool:
    if not isinstance(n, torch.SymInt):
        return False
    # (symbolic sizes come from a tracer that has imported it: a plain call never imports sympy)
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    return bool(free_unbacked_symbols(n))


torch.library.register_fake("einc::einsum", _fake, lib=_lib)


def _probe(size) -> int:
    """A stand-in size with the same broadcasting behaviour (0, 1, or more)."""
    return 0 if size == 0 else 1 if size == 1 else 2


@functools.lru_cache(maxsize=1024)
def _result_dtype(equation, types, shapes, optimize, memory_limit):
    """The result dtype einc gives (torch.einsum's), from a run on meta tensors."""
    probes = [torch.empty(s, dtype=d, device="meta") for s, d in zip(shapes, types)]
    return _impl(equation, probes, optimize, memory_limit).dtype


# The gradients of a traced call (AOTAutograd's, make_fx's backward): the same call again
# with autograd, at run time, so that a compiled or traced backward gives the bits the eager
# call's backward gives (autograd through the plan's own ops where the eager call records
# them; gradient einsums summed in their own order would round differently).
_lib.define("einsum_backward(str equation, Tensor[] operands, Tensor grad, bool[] needed, str optimize, "
            'str memory_limit, str layout="") -> Tensor[]')


def _backward(equation, operands, grad, needed, optimize, memory_limit, layout=""):
    with torch.enable_grad(), _recording():
        leaves = [o.detach().requires_grad_(n) for o, n in zip(operands, needed)]
        out = autograd.einsum(parse(equation), leaves, Options.from_op(optimize, memory_limit, layout))
        wanted = [x for x, n in zip(leaves, needed) if n]
        grads = torch.autograd.grad(out, wanted, grad, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g.contiguous() for x, g in zip(wanted, grads)]


# autograd's dispatch keys as torch excludes them below autograd (the functionality, for every backend)
_AUTOGRAD_KEYS = [getattr(torch._C.DispatchKey, k) for k in ("AutogradFunctionality", "AutogradOther",
                                                             "AutogradNestedTensor", "ADInplaceOrView")]


@contextlib.contextmanager
def _recording():
    """Autograd on in this thread's dispatch, for the call :func:`_backward` runs again.  A
    ``TorchDispatchMode`` (``FlopCounterMode``, compiled autograd's tracing) runs the op
    with autograd's dispatch keys excluded, where nothing would be recorded to take the
    gradients of; they are let through, and restored after."""
    excluded = [k for k in _AUTOGRAD_KEYS if torch._C._dispatch_tls_is_dispatch_key_excluded(k)]
    for k in excluded:
        torch._C._dispatch_tls_set_dispatch_key_excluded(k, False)
    try:
        yield
    finally:
        for k in excluded:
            torch._C._dispatch_tls_set_dispatch_key_excluded(k, True)


_lib.impl("einsum_backward", _backward, "CompositeExplicitAutograd")
torch.library.register_fake(
    "einc::einsum_backward", lambda equation, operands, grad, needed, optimize, memory_limit, layout="":
    [o.new_empty(o.shape) for o, n in zip(operands, needed) if n], lib=_lib)


def _vmap(info, in_dims, equation, operands, optimize, memory_limit, layout="", scale=1.0):
    call = autograd.Call(parse(equation), Options.from_op(optimize, memory_limit, layout), traced=True)
    out, dim = autograd.batched(call.eq, in_dims[1], operands, call.contract)
    return (out if scale == 1.0 else out * scale), dim


torch.library.register_vmap("einc::einsum", _vmap, lib=_lib)

engine.register("traced", _result_dtype.cache_info, _result_dtype.cache_clear)


def _symbolic(eq, operands, options):
    """A call with symbolic sizes (``make_fx``'s symbolic tracing): the op, whose fake kernel
    gives the result's symbolic shape and which runs einc's plan at run time, as the same
    call run eagerly does (torch's einsum there would sum in another order)."""
    return einsum_op(eq.text, list(operands), *options.to_op())


engine.on_symbolic(_symbolic)


# ------------------------------------------------------------------ einc's errors while dynamo traces

def _tracer():
    """The frame dynamo traces in this thread (its root translator), or None."""
    convert = sys.modules.get("torch._dynamo.symbolic_convert")
    try:
        return None if convert is None else convert.InstructionTranslator.current_tx()
    except Exception:       # noqa: BLE001 -- not tracing (nothing set), or dynamo's internals moved
        return None


def traced_error(error: Exception) -> Exception:
    """``error`` as dynamo lets it reach the caller, where dynamo traces; else ``error``.

    dynamo rewraps what a fake kernel, or a function it calls as a constant, raises while
    it traces (as its ``TorchRuntimeError`` or ``InternalTorchDynamoError``), and a raise it
    traces becomes its "Observed exception": its ``Unsupported`` alone reaches the caller as
    raised.  So einc's error is raised as an instance of a class made of its class and
    ``Unsupported``, named as its class and with its text: under ``fullgraph=True`` the
    caller gets einc's class (its ``except`` clauses catch it) and eager's message; where
    dynamo may break the graph it does, and the call runs eagerly, which raises the error
    itself.  A line said by :func:`note_reading` ends an equation's or shapes' error; an
    equation it says is named by a dtype error in place of the one it was raised for."""
    tx = _tracer()
    if tx is None or not isinstance(error, EincError) or hasattr(error, "_einc_message"):
        return error
    message, note = str(error), getattr(_NOTE, "reading", None)
    _NOTE.reading = None
    if note is not None and note[0]() is tx:
        if note[1] is not None and isinstance(error, (EquationError, ShapeError, OperandCountError)):
            message += note[1]
        if note[2] and getattr(error, "equation", None) and isinstance(error, (DtypeError, UnsupportedDtypeError)):
            message = message.replace(repr(error.equation), repr(note[2]))     # (:func:`dtypes.naming`'s)
    passing = _passing(type(error))(message)
    passing._einc_message = message
    stack = [f for f in getattr(passing, "real_stack", None) or () if not f.filename.startswith(_PACKAGE)]
    if stack and hasattr(passing, "add_note"):      # the caller's line, which dynamo adds to the hidden args
        passing.add_note("from user code (traced by torch.compile):\n" + "".join(traceback.format_list(stack)))
    return passing


@functools.cache
def _passing(cls):
    """``cls`` and dynamo's ``Unsupported``: named as ``cls``, its text the one given when
    raised (dynamo appends to the arguments), pickled as a plain ``cls``."""
    from torch._dynamo.exc import Unsupported
    return type(cls.__name__, (cls, Unsupported), {
        "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
        "__init__": Unsupported.__init__,       # (not ValueError's, first in some classes' order: its fields)
        "__str__": lambda self: self._einc_message,
        "__repr__": lambda self: f"{cls.__name__}({self._einc_message!r})",
        "__reduce__": lambda self: (cls, (self._einc_message,))})


_NOTE = threading.local()
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def refuse(cls, message: str) -> NoReturn:
    """Raise ``cls(message)`` (an einc error); while dynamo traces, at trace time and as
    :func:`traced_error` makes it, rather than as a raise dynamo traces (its "Observed
    exception" under ``fullgraph=True``)."""
    if torch.compiler.is_dynamo_compiling():
        _refuse_now(cls.__name__, message)
    raise traced_error(cls(message))    # (where dynamo runs einc on fake tensors: torch.einsum = einc.einsum)


@constant_result
def _refuse_now(name: str, message: str):
    """(dynamo calls it as it traces, with the message made)"""
    raise traced_error(getattr(errors, name)(message))


def sizes(shape) -> tuple:
    """``shape`` as numbers (:func:`number`); a 0-d tensor, ``torch.jit.trace``'s size, as its int."""
    return tuple([int(n) if isinstance(n, torch.Tensor) else number(n) for n in shape])


def number(n):
    """``n`` as a number where it is a size: a size dynamo traces as a symbol (``dynamic=True``)
    is specialized to its value (``operator.index``: dynamo guards on it), so that an error's
    message is text dynamo can hand over, naming the sizes as the eager call's does.  For a
    call that fails, or whose answer depends on the sizes' values (planning)."""
    return operator.index(n) if isinstance(n, (int, torch.SymInt)) and not isinstance(n, bool) else n


def reject_under_fullgraph(cls, message: str) -> bool:
    """Raise einc's ``cls(message)`` where dynamo may not break the graph (``fullgraph=True``),
    as :func:`traced_error` makes it; elsewhere return False and let the frame run eagerly."""
    return _reject_now(cls.__name__, message)


@constant_result
def _reject_now(name: str, message: str) -> bool:
    """(called at trace time, as dynamo lets its error through: not dynamo's "observed exception")"""
    if strict():
        raise traced_error(getattr(errors, name)(message))
    return False


def strict() -> bool:
    """Whether dynamo may not break the graph where it traces now (``fullgraph=True``); True
    where it does not trace, or its internals moved (einc's error is then raised plainly)."""
    tx = _tracer()
    return tx is None or bool(getattr(tx, "one_graph", True) or getattr(tx, "error_on_graph_break", False))


@constant_result
def note_reading(line, written=None) -> bool:
    """While dynamo traces: ``line`` ends the message of the equation's or shapes' error that the
    next call of the op it fakes raises (opt_einsum's doors: how the caller's characters were read);
    its dtype error names ``written`` (a named call's text: :func:`einc.named.written`). None forgets."""
    tx = _tracer()
    _NOTE.reading = None if (line is None and written is None) or tx is None else (weakref.ref(tx), line, written)
    return True


__all__ = ["einsum_op", "traced_einsum", "traced_error", "refuse", "note_reading", "constant_result", "sizes",
           "number", "reject_under_fullgraph", "strict"]
