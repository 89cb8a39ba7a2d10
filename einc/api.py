"""torch.einsum's door: ``einsum``, ``explain``, ``shared_intermediates`` and the cache
controls (opt_einsum's door, ``contract`` and its kin, is :mod:`einc.opt_einsum_api`).
Each turns its arguments into an :class:`~einc.planner.equation.Equation`, an
:class:`~einc.planner.options.Options` and operands (or shapes), and goes down to the engine
(:mod:`einc.runtime.engine`); nothing below imports this module.

The hot path of :func:`einsum` on a cached key, called without keywords (no default filled
in): the parsed equation (an lru lookup by string), the routing checks, the default options
where torch's ``torch.backends.opt_einsum`` settings are at theirs (four dict reads), then
``engine.run`` (the key, a dict lookup, the entry's run function).  Four checks route a
call elsewhere: under torch.compile, torch.export or torch.jit.trace it becomes one call of
the custom op ``einc::einsum`` (:mod:`einc.custom_op`); an operand or mode with
``__torch_function__`` (an ``fx.Proxy``, a tensor subclass, a ``TorchFunctionMode``) gets
the call as it gets torch.einsum's; under autocast it takes torch.einsum's dtype there;
when an operand requires grad under grad mode, or a torch.func transform is active, it runs
through :class:`einc.autograd.EinsumFunction`.  Two more are one test: ``out=`` and an
open :func:`einc.shared_intermediates` context take :func:`special_call`.

opt_einsum's door routes its planned calls through one function, :func:`call`; both doors
read their options, ``backend=`` and shapes given as numbers with :mod:`einc.call_arguments`.
"""

from __future__ import annotations

import functools
import inspect

import torch

from . import autograd, call_arguments, config, custom_op, sharing, traced_doors
from . import named as named_axes
from .call_arguments import call_options, shape_of, torch_settings
from .errors import (
    ArgumentError,
    EquationError,
    OperandCountError,
    OperandTypeError,
    OutError,
    PathError,
    ShapeError,
    SizeKeywordError,
)
from .planner import notation, plan_for, slicing
from .planner.equation import Equation, call_form, for_operands, no_equation, parse, parse_as_called, sublist_equation
from .planner.givenpath import as_path
from .planner.graph import build
from .planner.options import AUTO, DEFAULT, DEFAULT_OPTIMIZE, Options, torch_optimize
from .planner.plan import Plan
from .runtime import dtypes, engine, sparse, triton_executor
from .runtime.engine import EincCacheInfo, cache_clear, cache_info, set_cache_size  # noqa: F401 - doors
from .runtime.explain import Explanation, explanation, size_class, torch_op
from .sharing import count_cached_ops, shared_intermediates  # noqa: F401 - doors


def einsum(*args, **sizes):
    """Evaluate an einsum like ``torch.einsum``, planning once per key.

    Called as ``einsum(equation, *operands)`` or in torch's sublist format
    ``einsum(op0, sublist0, op1, sublist1, ..., [output_sublist])``.  ``optimize`` takes
    an opt_einsum strategy name (``"auto"``: exhaustive up to 5 operands, ``dp`` up to 16,
    random-greedy beyond), a ``PathOptimizer``, an explicit path, or False for left to
    right.  Not passed, it is ``"auto"`` unless torch's settings say otherwise, as they
    do for torch.einsum: ``torch.backends.opt_einsum.enabled = False`` contracts left to
    right, a ``strategy`` other than ``"auto"`` runs that strategy.  ``select`` says how
    each step's backend is chosen where generated kernels may run (``"learn"``, ``"measure"``,
    ``"model"``, ``"blas"``, ``"kernel"``; default ``EINC_SELECT``, see
    :mod:`einc.runtime.select`).  The result is a fresh tensor (never a view of an
    operand), with torch.einsum's dtype (under autocast too); ``layout`` says how it is
    laid out: ``"contiguous"`` (the default, unless ``EINC_LAYOUT`` says otherwise)
    standard contiguous, ``"any"`` dense and non-overlapping in the order einc's cheapest
    plan writes it (as torch.einsum and opt_einsum return it, with no final copy; under
    torch.compile, contiguous) -- or ``out``, written in
    place, where given (it must have the result's shape, dtype and device; as for
    torch's ``out=``, not with operands that require grad under grad mode).
    ``backend`` is accepted for opt_einsum's sake where it names torch (None, ``"auto"``,
    ``"torch"``).  The equation may name its axes, with composite axes such as
    ``"b n (h d), h d e -> b n (h e)"`` and sizes by keyword (``h=8``): see
    :mod:`einc.planner.notation`.

    >>> import torch, einc
    >>> einc.einsum("ij,jk->ik", torch.ones(2, 3), torch.ones(3, 4)).shape
    torch.Size([2, 4])
    """
    optimize, memory_limit, select, out, backend, layout = given = _NO_OPTIONS
    if sizes:       # the options, out of the dict the call makes (a call without keywords fills no default)
        optimize, memory_limit, select, out, backend, layout = given = tuple(map(sizes.pop, _KEYWORDS, _NO_OPTIONS))
        if backend is not None and backend not in _TORCH_BACKENDS:
            _reject_backend(backend)
        if sizes:
            return _named(args, sizes, optimize, memory_limit, select, out, backend, layout)
    if _dynamo_tracing() or _compiler._is_compiling_flag or _jit_tracing():     # tracing(), inline
        if args and isinstance(args[0], str) and _is_named(args[0], len(_operands_of(args))):  # (isinstance: 2.11)
            return _named(args, sizes, optimize, memory_limit, select, out, backend, layout)
        return traced_call(args, optimize, memory_limit, select, out, layout)   # compile, export, jit.trace: the op
    if args and args[0].__class__ is str:      # planner.equation.call_form, inline: one frame less
        operands = args[1:]
        if len(operands) == 1 and operands[0].__class__ in (list, tuple):
            operands = operands[0]
        try:
            eq = parse(args[0])
        except EquationError as error:
            if not notation.is_named(args[0]):
                raise for_operands(error, len(operands)) from None
            with named_axes.torch_error_first(for_operands(error, len(operands)), args[0]):
                return _named(args, sizes, optimize, memory_limit, select, out, backend, layout)
    else:
        if args and not hasattr(type(args[0]), "__torch_function__"):     # no operand: a tensor, an fx.Proxy
            raise OperandTypeError(no_equation(args[0]))
        text, operands = sublist_equation(args)
        eq = parse_as_called(text, len(operands))
    if _has_torch_function(operands):     # fx.Proxy, a TorchFunctionMode, a tensor subclass
        return _torch_function((eq.text, *operands), operands, optimize, memory_limit, select, out, backend, layout)
    if given is _NO_OPTIONS and "enabled" not in _OE_OWN and "strategy" not in _OE_OWN and _OE_MOD["enabled"] and \
            _OE_MOD["strategy"] == _AUTO:   # no option passed (one test), torch's settings at theirs (neither assigned)
        options = DEFAULT
    else:
        options = call_options(optimize, memory_limit, select, layout)
    if out is not None or _SHARING:
        return special_call(eq, operands, options, out)
    if _autocast_any():
        return _autocast_call(eq, operands, options)
    # autograd.einsum's test, inline: the no-grad hot path stays one call down to the engine.
    if _transforms_active() or (_any_requires_grad(*operands) and _grad_enabled()) or _FORWARD_AD._current_level >= 0:
        return autograd.differentiable(eq, operands, options)
    return engine.run(eq, operands, options)


def _named(args, sizes, optimize, memory_limit, select, out, backend, layout=None):
    """A named equation (or keyword sizes): views, einsum on the resolved equation, the
    output's reshape (:mod:`einc.named`).  An ``fx.Proxy``, a ``TorchFunctionMode`` or a
    tensor subclass gets the call as written (one node of :func:`einsum`, sizes as keywords),
    its options checked first."""
    options = {"optimize": optimize, "memory_limit": memory_limit, "select": select, "backend": backend,
               "layout": layout}
    options = {k: v for k, v in options.items() if v is not (DEFAULT_OPTIMIZE if k == "optimize" else None)}
    if not tracing() and args and args[0].__class__ is str:
        operands = _operands_of(args)
        if _has_torch_function(operands):
            call_options(optimize, memory_limit, select, layout)    # as _torch_function: no node eager refuses
            relevant = tuple(operands) + ((out,) if out is not None else ())
            more = {"out": out} if out is not None else {}
            return torch.overrides.handle_torch_function(einsum, relevant, args[0], *operands, **options, **more,
                                                         **sizes)
    tensors = named_axes.operands(args, sizes)
    named = _named_structure(args[0])
    named_axes.check_tensors(tensors)
    traced = tracing()
    known, view_shapes = named_axes.resolved(named, [o.shape for o in tensors], sizes, traced)
    views = named_axes.recorded_views(named, tensors, sizes, range(len(tensors))) if traced and \
        not _dynamo_tracing() and _jit_tracing() else named_axes.views(tensors, view_shapes, named)   # (dynamo: no _C)
    with named_axes.written(named):     # (a dtype error names the resolved letters)
        if not named.merges:
            return einsum(named.equation, *views, out=out, **options)     # no merge: out= as it is
        if out is not None:     # out= seen as the resolved equation's result: einsum checks and writes it
            einsum(named.equation, *views, out=named_axes.split_out(named, out, [v.shape for v in views]), **options)
            return out
        return named_axes.merged(named, einsum(named.equation, *views, **options), traced)


triton_executor.claim_interpreter()     # before torch._dynamo (torch.compile imports it) imports triton


_constant_result = custom_op.constant_result    # (dynamo calls it while tracing, keeps its result)


@_constant_result
def _is_named(text: str, count: int) -> bool:
    """:func:`einc.named.named_reading`, read once while dynamo traces."""
    return named_axes.named_reading(text, count)


@_constant_result
def _named_structure(text: str):
    """:func:`einc.planner.notation.structure`, read once while dynamo traces (the parse itself is
    not traced: only the views, the op and the reshape are); its error as the eager call's."""
    try:
        return notation.structure(text)
    except EquationError as error:
        raise custom_op.traced_error(error) from None


# The checks above, bound once.
tracing = autograd.tracing
_dynamo_tracing, _compiler, _jit_tracing = autograd.dynamo_tracing, autograd.compiler, autograd.jit_tracing
_transforms_active = autograd.transforms_active
_grad_enabled = autograd.grad_enabled
_any_requires_grad = autograd.any_requires_grad
_FORWARD_AD = autograd.forward_ad
_autocast_any = getattr(torch._C, "_is_any_autocast_enabled", lambda: torch.is_autocast_enabled())
_has_torch_function = torch._C._has_torch_function
_KEYWORDS = dict(optimize=DEFAULT_OPTIMIZE, memory_limit=None, select=None, out=None, backend=None, layout=None)
_NO_OPTIONS = tuple(_KEYWORDS.values())
einsum.__signature__ = inspect.signature(lambda *args, optimize=DEFAULT_OPTIMIZE, memory_limit=None, select=None,
                                         out=None, backend=None, layout=None, **sizes: None)
_AUTO = AUTO
_OE_OWN, _OE_MOD = call_arguments.OE_OWN, call_arguments.OE_MOD      # torch's settings, read as torch.einsum reads them
_TORCH_BACKENDS, _reject_backend = call_arguments.TORCH_BACKENDS, call_arguments.reject_backend
_SHARING = sharing.STACKS      # non-empty while some thread is inside shared_intermediates()
# never a compiled frame of its own (inlined where traced): a graph break at a failing call traced each frame below
custom_op._never_compiled(einsum.__code__)


# ----------------------------------------------------------------------- __torch_function__ and TorchScript

def _torch_function(args, operands, optimize, memory_limit, select, out, backend, layout=None):
    """``__torch_function__`` dispatch, as torch.einsum takes part in it: an ``fx.Proxy``
    records one ``call_function`` node of :func:`einsum`, a ``TorchFunctionMode`` or a tensor
    subclass sees the call (and calls :func:`einsum` again, with its own handling off).
    ``args`` are the equation string then the operands one by one, as torch.einsum passes
    them on (operands given as one list, and the sublist format, arrive unpacked: torch.fx
    passes such as opt_einsum_fx's read ``node.args[1:]`` as the operands).  Keywords left
    at their defaults are not passed on, so a recorded node names only what the caller
    wrote.  What a node cannot record (a numpy array as an operand, ``object()`` as optimize)
    raises the eager call's error, in its order: the options', then the operands'; an
    optimizer object, which eager takes, einc's PathError under fx (no node holds one)."""
    call_options(optimize, memory_limit, select, layout)
    traced_doors.fx_recordable(operands, as_path(optimize))
    if not all(isinstance(o, torch.Tensor) or _has_torch_function((o,)) for o in operands):
        engine.check_operands(parse(args[0]), [torch.empty(0, device="meta") if isinstance(o, torch.Tensor) or
                                               _has_torch_function((o,)) else o for o in operands])
    given = {"optimize": as_path(optimize), "memory_limit": traced_doors.limit_plain(memory_limit),
             "select": select, "out": out, "backend": backend, "layout": layout}
    kwargs = {k: v for k, v in given.items() if v is not (DEFAULT_OPTIMIZE if k == "optimize" else None)}
    relevant = tuple(operands) + ((out,) if out is not None else ())
    return torch.overrides.handle_torch_function(einsum, relevant, *args, **kwargs)


def _register_for_torchscript() -> None:
    """``torch.jit.script`` compiles a call of :func:`einsum` (or of ``torch.einsum`` once it is
    einc's) as the custom op's overload ``einc::einsum.script(str equation, Tensor[] operands,
    *, str optimize, str memory_limit, str? layout)``: TorchScript compiles builtins only, and packs the
    operands of ``einsum(eq, a, b)`` into the list as it does for ``aten::einsum``.  The table
    is TorchScript's own (private, stable since torch 1.x); where it is missing, scripting a
    call fails as scripting any function TorchScript cannot compile does, and nothing else
    changes."""
    try:
        from torch.jit._builtins import _register_builtin
    except ImportError:     # pragma: no cover - a torch without the table
        return
    _register_builtin(einsum, "einc::einsum")


_register_for_torchscript()


# ----------------------------------------------------------------------- out= and sharing

def special_call(eq: Equation, operands, options: Options, out):
    """A call with ``out=`` or inside :func:`einc.shared_intermediates`: checks ``out``
    first (nothing is written on an error), runs the plan (step by step through the
    sharing cache where there is one), then writes ``out``."""
    if out is not None:
        _check_out(out, operands)
    cache = sharing.current_cache()
    plan = None
    # a bounded call keeps no whole intermediates; a sparse operand's call is torch's, as outside: nothing to share
    if cache is not None and options.memory_limit is None and _all_strided(eq, operands):
        plan = _shared_plan(eq, tuple(o.shape for o in operands), options)
        # zeros, or an empty result, as the whole call gives them (in torch's dtype for it, which
        # a step of its own may have no product for): no step to share
        if plan.empty_sum is not None or any(0 in o.shape for o in operands):
            plan = None
    if plan is None:
        result = eager_call(eq, operands, options)
    else:
        step_options = Options.of(_AUTO, None, options.select, options.layout)
        want = dtypes.result_dtype(eq.torch_text, [o.shape for o in operands], [o.dtype for o in operands])
        # narrow integers with an int64 result: each step in int64, as the whole call runs them
        # (a step in the narrow dtype would wrap before the sum that promotes it)
        exact = dtypes.in_int64([o.dtype for o in operands], want)
        # operands of several dtypes: each step in the result's dtype, as the whole call
        # contracts them (a step of its own dtypes would round, or be refused, in a narrower one)
        mixed = not exact and want is not None and len({o.dtype for o in operands}) > 1
        tag = "int64" if exact else f"as {want}" if mixed else None
        result = sharing.run(plan, operands, cache, lambda text, ops: eager_call(
            parse(text), dtypes.widened(ops) if exact else [o.to(want) for o in ops] if mixed else _alike(ops),
            step_options), tag)
        result = result.to(want or result.dtype)    # torch.einsum's dtype for the whole call, as einsum gives it
        if options.result_layout() == "contiguous":   # (a step cached by a call that asked for any layout)
            result = result.contiguous()
    return result if out is None else _write_out(out, result)


def _all_strided(eq: Equation, operands) -> bool:
    """Whether every operand is strided (torch.einsum's error for non-tensors or a wrong count)."""
    engine.check_operands(eq, operands)
    return all(o.layout is torch.strided for o in operands)


def _alike(ops):
    """A shared step's operands: integers of several widths (an int64 intermediate beside
    an int32 operand; einc contracts integers in int64) widened to int64."""
    if len({o.dtype for o in ops}) > 1 and not any(o.dtype.is_floating_point or o.dtype.is_complex for o in ops):
        return [o.to(torch.int64) for o in ops]
    return ops


@functools.lru_cache(maxsize=1024)
def _shared_plan(eq: Equation, shapes, options: Options) -> Plan:
    """The plan a call inside :func:`einc.shared_intermediates` runs step by step (only the
    plan: the whole equation's executor is never built for it)."""
    return plan_for(eq, shapes, options)


engine.register("shared_plans", _shared_plan.cache_info, _shared_plan.cache_clear)


def call(eq: Equation, operands, options: Options, out=None):
    """einsum on an equation already parsed and options already made (opt_einsum's
    ``ContractExpression``): the routing of :func:`einsum` below its argument handling --
    the custom op while compiling, :func:`special_call` for ``out=`` or an open sharing
    context, else :func:`eager_call`."""
    if tracing():
        return traced_call((eq.text, *operands), options.optimize, options.memory_limit, None, out, options.layout)
    if out is not None or sharing.STACKS:
        return special_call(eq, operands, options, out)
    return eager_call(eq, operands, options)


def eager_call(eq: Equation, operands, options: Options):
    """einsum's eager call below the front end: autocast, autograd, the engine."""
    if _autocast_any():
        return _autocast_call(eq, operands, options)
    return autograd.einsum(eq, operands, options)


def _check_out(out, operands) -> None:
    """Raise where ``out=`` cannot be used for these operands (:func:`_out_refused`)."""
    problem = _out_refused(out, operands)
    if problem is not None:
        raise _ERRORS[problem[0]](problem[1])


def _out_refused(out, operands, traced: bool = False):
    """``(error name, message)`` where ``out=`` is not a tensor, or autograd would have to see
    through it (torch's rule for ``out=``); else None."""
    if not isinstance(out, torch.Tensor):
        return "OperandTypeError", f"einsum(): out= must be a torch.Tensor, got {type(out).__name__}"
    if not traced and _transforms_active():
        return "OutError", ("einsum(): out= is not supported under torch.func transforms (vmap, grad, jvp); "
                            "use the returned tensor")
    if torch.is_grad_enabled() and (out.requires_grad or any(
            isinstance(o, torch.Tensor) and o.requires_grad for o in operands)):
        return "OutError", ("einsum(): functions with out=... arguments don't support automatic "
                            "differentiation, but one of the arguments requires grad: call it under "
                            "torch.no_grad(), or drop out= and use the returned tensor")
    return None


def _out_mismatch(out, result, shape=tuple):
    """The message where ``out`` cannot take ``result`` (shape, dtype, device); else None.
    ``shape`` spells a tensor's shape in it (:func:`custom_op.sizes` while dynamo traces)."""
    if out.shape != result.shape:
        return (f"einsum(): out= has shape {shape(out.shape)}, but the result has shape "
                f"{shape(result.shape)}; einc does not resize out=")
    if out.dtype != result.dtype:
        return (f"einsum(): Expected out tensor to have dtype {result.dtype}, but got {out.dtype} "
                "instead (out= takes the result's dtype, torch.einsum's for these operands)")
    if out.device != result.device:
        return f"einsum(): out= is on {out.device}, but the result is on {result.device}"
    return None


def _write_out(out, result):
    """Copy ``result`` into ``out`` after checking its shape, dtype and device."""
    problem = _out_mismatch(out, result)
    if problem is not None:
        raise OutError(problem)
    return out.copy_(result) if out.layout is torch.strided is result.layout else sparse.write_out(out, result)


_ERRORS = {"OperandTypeError": OperandTypeError, "OutError": OutError, "PathError": PathError,
           "ShapeError": ShapeError, "ArgumentError": ArgumentError, "OperandCountError": OperandCountError,
           "SizeKeywordError": SizeKeywordError}


# ----------------------------------------------------------------------- under torch.compile

def traced_call(args, optimize, memory_limit, select, out, layout=None):
    """einsum under torch.compile / export: one call of the custom op (see :mod:`einc.custom_op`),
    which runs the plan of ``layout`` and returns its values contiguous (its fake kernel states
    the strides before any plan exists: :meth:`Options.from_op`)."""
    # (checked in the eager call's order: the equation, the options, out=, then the operands; a sublist's and a
    # path's numpy values read as Python's, and an int of a path or limit read from a local under dynamic=True, a
    # symbol, as its value, which dynamo guards on: str() of a symbol, writing the op's options, is Unsupported)
    if args and not isinstance(args[0], str):
        if not isinstance(args[0], torch.Tensor):    # (dynamo traces no hasattr of a numpy type)
            _refuse_traced("OperandTypeError", no_equation(args[0]))
        args = traced_doors.numpy_sublists(args)
    given = memory_limit
    if optimize is DEFAULT_OPTIMIZE:
        optimize = _traced_default_optimize()
    optimize, memory_limit = traced_doors.options_read(args, optimize, memory_limit, select, layout)
    if select is not None:
        _refuse_traced("ArgumentError", "einsum(): select= cannot be passed to the compiled op; set EINC_SELECT "
                                        "instead")
    if not (optimize is None or isinstance(optimize, (str, bool, list, tuple))):     # an optimizer object
        _reject_under_fullgraph("PathError", traced_doors.optimizer_message(type(optimize).__name__))
        # a graph break: the call runs eagerly, dynamo kept out of einc's runtime (torch
        # 2.11's dynamo failed building guards on its plan cache when it traced it)
        return torch.compiler.disable(_untraced_einsum)(args, optimize, given, out, layout)
    if out is not None:
        problem = _out_refused(out, _operands_of(args), traced=True)
        if problem is not None:
            _refuse_traced(*problem)
    result = custom_op.traced_einsum(args[0] if args else None, args[1:], optimize, memory_limit, layout)
    if out is None:
        return result
    problem = _out_mismatch(out, result, custom_op.sizes)
    if problem is not None:
        _refuse_traced("OutError", problem)
    return out.copy_(result)


def _untraced_einsum(args, optimize, memory_limit, out, layout=None):
    """einsum run eagerly where the compiled op cannot carry the call (a PathOptimizer
    object); :func:`traced_call` calls it through ``torch.compiler.disable``, applied there
    rather than here so that importing einc does not import dynamo."""
    return einsum(*args, optimize=optimize, memory_limit=memory_limit, out=out, layout=layout)


def _refuse_traced(error: str, message: str):
    """Raise einc's error while dynamo traces (:func:`einc.custom_op.refuse`): the caller's
    under ``fullgraph=True``; otherwise dynamo runs the frame eagerly, where the same check
    raises again or the call works (``select=``)."""
    custom_op.refuse(_ERRORS[error], message)


@_constant_result
def _traced_default_optimize():
    """einc's default under torch's settings, read once while tracing (as torch.einsum's
    decomposition reads them when it is traced)."""
    return torch_optimize(*torch_settings())


def _reject_under_fullgraph(error: str, message: str) -> bool:
    """:func:`einc.custom_op.reject_under_fullgraph` with einc's error named ``error``."""
    return custom_op.reject_under_fullgraph(_ERRORS[error], message)


def _operands_of(args):
    """The operands of ``einsum(*args)``, string or sublist form (the sublists unchecked)."""
    if args and isinstance(args[0], str):
        return call_form(args)[1]
    return args[0::2][:len(args) // 2]


def _autocast_call(eq: Equation, operands, options: Options):
    """Under autocast: torch.einsum's result dtype there, computed in that dtype.

    Whether torch.einsum's result takes the autocast dtype depends on the ops it runs
    (on a CPU only its matrix products autocast), so einc asks torch once per key, casts
    the operands autocast would cast when the answer is the autocast dtype, and runs with
    autocast off so that the whole plan computes in one dtype.
    """
    engine.check_operands(eq, operands)
    device = operands[0].device.type
    operands = dtypes.autocast_operands(eq.torch_text, operands, device)
    with torch._C._DisableAutocast():       # (every device's: einc's ops run on the operands' alone)
        return autograd.einsum(eq, operands, options)


def explain(equation, *operands_or_shapes, optimize=DEFAULT_OPTIMIZE, memory_limit=None, dtype=None,
            device=None, select=None, layout=None, **sizes) -> Explanation:
    """The plan einc runs for these operands (tensors, or shapes with ``dtype`` and
    ``device``, default float32 on the CPU), with what runs each step; print it for a
    table.  For tensors whose plan einc has already run, each step shows what ran and
    why (measured µs where it was timed; a kernel that failed and fell back shows
    ``torch``); otherwise what would run for these tensors' strides (contiguous operands
    for shapes), decided by the cost model -- also for ``device="cuda"`` on a machine
    without a GPU.  A named equation (:mod:`einc.planner.notation`, sizes by keyword) is explained
    as its resolved equation, under a header saying how the names resolved.  ``layout``
    as for :func:`einsum`: with ``"any"`` the last step's copy into the result's order is
    neither counted nor made, and the note says so.

    Called as ``explain(equation, *operands)`` or in torch's sublist form
    ``explain(op0, sublist0, op1, sublist1, ..., [output_sublist])``, each operand a tensor
    or a shape.

    >>> print(einc.explain("ij,jk,kl->il", (8, 2), (2, 8), (8, 2)))   # doctest: +SKIP
    """
    if isinstance(equation, str) and len(operands_or_shapes) == 1 and \
            isinstance(operands_or_shapes[0], (list, tuple)) and operands_or_shapes[0] and \
            all(isinstance(x, (torch.Tensor, list, tuple, torch.Size)) for x in operands_or_shapes[0]):
        # operands (or shapes) given as one list (not a sublist: ints, or 0-d tensors);
        # a lone () is the shape of a 0-d operand
        operands_or_shapes = tuple(operands_or_shapes[0])
    if sizes or (isinstance(equation, str) and notation.is_named(equation)):
        named, viewed, header = named_axes.explain_parts(
            equation, operands_or_shapes, sizes, call_options(optimize, memory_limit, select, layout).result_layout())
        shown = explain(named.equation, *viewed, optimize=optimize, memory_limit=memory_limit,
                        dtype=dtype, device=device, select=select, layout=layout)
        return named_axes.NamedExplanation(shown, header)
    if not isinstance(equation, str):       # torch's sublist form, as einsum and contract_path take it
        equation, operands_or_shapes = sublist_equation((equation, *operands_or_shapes))
    eq = parse(equation)
    options = call_options(optimize, memory_limit, select, layout)
    engine.check_settings()         # as einsum would: explain describes a run that can happen
    shapes = [shape_of(x) for x in operands_or_shapes]
    tensors = [x for x in operands_or_shapes if isinstance(x, torch.Tensor)]
    asked = None if dtype is None else dtypes.torch_dtype(dtype, "explain()")
    if tensors and asked is not None and any(x.dtype != asked for x in tensors):
        raise ArgumentError(f"explain(): dtype={asked} describes operands given as shapes; these tensors are "
                            f"{', '.join(sorted({str(x.dtype) for x in tensors}))} (cast them, or pass shapes)")
    types = [x.dtype for x in tensors] if tensors else [asked or torch.float32] * len(shapes)
    device_type = torch.device(device or (tensors[0].device if tensors else "cpu")).type
    whole = bool(tensors) and len(tensors) == len(shapes) and all(x.layout is torch.strided for x in tensors)
    # the entry einc runs for the call: cached, or its size class's (whose plan is made at the class's sizes)
    entry, cached = None, False
    if whole:
        entry, cached = engine.explained_entry(eq, tensors, options)
    elif not tensors and shapes:
        entry, cached = engine.explained_entry(eq, None, options, shapes, types[0], torch.device(device or "cpu"))
    classed, by_torch = None, None
    if entry is not None and entry.size_class is not None:     # the class's path, at this call's sizes
        classed = size_class(eq, shapes, entry, options, cached)
        plan = classed.at_call
    elif entry is not None:
        plan = entry.program
    elif config.new_shapes() == "torch":    # a small call torch's op answers along its size class's path
        kinds = [*types, *types[:1] * (len(shapes) - len(types))]
        plan = plan_for(eq, shapes, options)       # (einc's error for shapes that do not fit, before torch's)
        by_torch = engine.torch_answers(eq, shapes, options, kinds, device_type)
        plan = engine.answered_plan(eq, shapes, options, plan, by_torch)
    else:
        plan = plan_for(eq, shapes, options)
    if plan.equation != eq.text:    # a cached plan of an equation equal but for its letters: the caller's
        plan = plan.renamed(eq.text, build(eq, shapes).names)
    plan = slicing.compared(plan, options)     # cotengra's plan against einc's default
    strides = [tuple(x.stride()) for x in tensors] if whole else None
    shown = torch_op(plan, options.result_layout()) if by_torch is not None else \
        explanation(plan, device_type, types, shapes, entry, options.select, strides)
    shown = sparse.explained(shown, operands_or_shapes)
    shown.size_class = classed
    # (not where no step of the plan writes the result: torch's einsum's, for a sparse operand; zeros)
    if options.result_layout() == "any" and plan.empty_sum is None and by_torch is None and \
            all(x.layout is torch.strided for x in tensors):
        shown.note += ("; layout 'any': the result is a fresh dense tensor in the order the last step writes it "
                       "(no final copy into the equation's order)")
    return shown
