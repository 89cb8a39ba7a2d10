"""Dispatch: which executor runs a plan, and the cache entry that remembers it.

CUDA tensors of a float dtype run generated Triton kernels; everything else runs
the torch executor.  ``EINC_BACKEND=triton`` sends CPU tensors to the generated
kernels too, through Triton's interpreter; ``EINC_BACKEND=torch`` keeps everything on
torch.  When Triton is missing or a kernel fails to build or compile, the plan falls
back to the torch executor with one warning: never a crash, never a wrong answer.
"""

from __future__ import annotations

import torch

from .. import config
from ..errors import ConfigError, warn
from ..planner import fuse
from ..planner.plan import CONTRACT, DOT
from ..planner.strides import contiguous
from . import learn, select, torch_executor, triton_executor
from .program import scaled, unit_functions, unroll
from .torch_executor import blas

_warned: set = set()


class Entry:
    """A cache entry: the plan it was built for (``plan``), the callable that runs it, which
    backend that is (``triton`` where generated kernels may run, else ``torch``), the steps
    that callable runs (``program``: the plan, or where kernels run, its fused program; the
    plan again after a fallback to the torch executor), what runs each of those steps
    (``choices``, a :class:`~einc.runtime.select.Choice` per step), and the operands'
    strides its kernels were lowered for (``None`` where it runs none): the kernels that
    run, which ``explain`` names.  A sliced plan's entry also holds, once a slice ran, the
    entry that runs each slice (``inner``).  The entry of a size class
    (:mod:`einc.runtime.sizeclass`) holds the class's canonical shapes (``size_class``), at
    which its ``plan`` was made, and where its ``run`` does nothing but call one function on
    its two operands as they come (``direct``), that function, which a cached call runs
    without ``run``'s frame."""

    __slots__ = ("plan", "program", "run", "backend", "choices", "strides", "inner", "size_class", "direct")

    def __init__(self, plan, run, backend, choices, strides=None, size_class=None):
        self.plan = plan
        self.program = plan
        self.run = run
        self.backend = backend
        self.choices = choices
        self.strides = strides
        self.inner = None
        self.size_class = size_class
        self.direct = None


def _kernels_wanted(device_type: str, dtypes) -> bool:
    """Whether EINC_BACKEND, the device and the dtypes call for generated kernels."""
    mode = config.backend()
    if mode == "torch" or (device_type != "cuda" and mode != "triton"):
        return False
    return device_type in ("cuda", "cpu") and triton_executor.supports(dtypes)


_NO_INTERPRETER = ("einc: EINC_BACKEND=triton needs Triton's interpreter for CPU tensors, but TRITON_INTERPRET "
                   "is set to a false value, or triton was imported before it was set (torch.compile imports it; "
                   "einc sets it before its own import of triton where no CUDA device is present): set "
                   "TRITON_INTERPRET=1 before importing triton. Running on the torch executor")
_NO_TRITON = "einc: triton is not installed; running on the torch executor (pip install 'einc[triton]')"


def decide(device_type: str, dtypes) -> tuple[str, str | None]:
    """``("triton" or "torch", why not triton)`` for operands on ``device_type`` with
    ``dtypes``; the reason is given only where kernels were wanted but cannot run.  No side
    effects (``explain`` asks this too)."""
    if not _kernels_wanted(device_type, dtypes):
        return "torch", None
    if device_type == "cpu" and not triton_executor.interpreter_possible():
        return "torch", _NO_INTERPRETER
    if not triton_executor.installed():
        return "torch", _NO_TRITON
    return "triton", None


def choose(device_type: str, dtypes) -> str:
    """:func:`decide`, warning once where kernels were wanted but cannot run."""
    backend, why = decide(device_type, dtypes)
    if why is not None:
        _warn_once(why, why)
    elif backend == "triton" and device_type == "cpu":
        triton_executor.use_interpreter()
    return backend


def value_strides(plan, shapes, strides=None):
    """Each value's strides (operands: ``strides``, or contiguous ``shapes`` where not
    given; results: contiguous in their step's output order, as kernels and blas steps
    write them)."""
    values = {v: contiguous(tuple(sh)) for v, sh in enumerate(shapes)}
    for step in plan.steps:
        values[step.result] = contiguous(tuple(plan.graph.sizes[i] for i in step.output))
    if strides is not None:
        values.update({v: tuple(st) for v, st in enumerate(strides)})
    return values


def _blas_able(dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _modelled(step, sizes, why) -> select.Choice:
    """Learn mode's first choice for a step that is no copy-free matrix product."""
    if step.kind == CONTRACT and len(step.inputs) == 2 and blas.result_order(step, sizes)[3] is None:
        return select.Choice("triton", f"modelled: the kernel writes the result in its order ({why})")
    if step.kind == DOT:
        return select.Choice("triton", "modelled: the kernel multiplies and sums in one pass")
    return select.Choice("torch", f"modelled: torch ops ({why}; they may copy an operand, then cuBLAS)")


def static_choices(plan, strides, mode, dtype):
    """Each step's choice without timing (``kernel``, ``blas``, ``model``, or ``learn``'s
    first choice: cuBLAS for a copy-free matrix product, the kernel where it fuses, writes a
    permuted result or multiplies and sums, torch's copies and cuBLAS otherwise)."""
    choices = []
    for step in plan.steps:
        if step.kind == fuse.FUSED:
            choices.append(select.Choice("triton", fuse.reason(step, plan)))
            continue
        gemm, why = (blas.classify(step, plan.graph.sizes, *[strides[v] for v in step.operands])
                     if len(step.operands) == 2 and _blas_able(dtype) else (None, f"a {step.kind} step"))
        if mode == "kernel":
            choices.append(select.Choice("triton", "EINC_SELECT / select= kernel"))
        elif gemm is not None:
            choices.append(select.Choice("blas", "one strided-batched matrix product on the operands as they are"))
        elif mode == "learn":
            choices.append(_modelled(step, plan.graph.sizes, why))
        elif mode == "blas":
            choices.append(select.Choice("torch", f"torch ops ({why}; they may copy an operand)"))
        else:
            choices.append(select.Choice("triton", f"no copy-free matrix product ({why}): the kernel reads any "
                                                   "strides"))
    return choices


def zeros_entry(plan, device, result_dtype, index: str) -> Entry:
    """The entry of a plan that sums over an index of size 0 (``index``): the result is
    zeros, as the sum over nothing is, whatever the other operands hold.  Any order of
    steps would otherwise multiply that empty sum's 0 by the others: 0 * inf is NaN
    (torch.einsum gives NaN or 0 there as its path happens to fall; numpy.einsum 0)."""
    shape = tuple(plan.graph.sizes[i] for i in plan.graph.output)

    def run(ops, scale=None):
        out = torch.zeros(shape, dtype=result_dtype, device=device)
        if (torch.is_grad_enabled() and any(o.requires_grad for o in ops)) or \
                torch.autograd.forward_ad._current_level >= 0:
            # The result is 0 for any values, so every derivative is 0: a sum over an empty
            # slice of each operand joins it to the graph (and a dual operand's tangent) as
            # exactly that, at every order (exp: each derivative still reads the operand).
            for o in ops:
                if o.is_floating_point() or o.is_complex():
                    out = out + o.reshape(-1)[:0].exp().sum()
        return out
    return Entry(plan, run, "torch", [select.Choice("torch", "")] * len(plan.steps))


def build_entry(plan, operands, result_dtype=None, select_mode=None, widen=False, layout="contiguous") -> Entry:
    """Compile ``plan`` for these operands: the torch executor, and where generated
    kernels may run, a backend per step (see :mod:`einc.runtime.select`); the result is
    cast to ``result_dtype`` (torch.einsum's) where the executor's differs.  ``layout``:
    the result's, ``"contiguous"`` or ``"any"`` (the torch executor's last step keeps the
    order it writes; generated kernels and zeros are contiguous, which both allow).  With
    ``widen``, narrow integer operands are contracted in int64 (no kernel takes integers),
    16-bit floats in float32 (a slice of a sliced plan: runtime/sliced.py), each made so by
    the step that reads it, on the torch executor."""
    dtypes = [o.dtype for o in operands]
    torch_fns, natural = torch_executor.step_functions(plan, dtypes, widen,      # also checks the dtypes
                                                       torch_executor.memory_orders(operands), layout)
    empty = plan.empty_sum
    if empty is not None:
        return zeros_entry(plan, operands[0].device, result_dtype or natural, empty)
    torch_run = unroll(plan, torch_fns)
    if result_dtype is not None and result_dtype != natural:
        torch_run = _cast(torch_run, result_dtype)
    device_type = operands[0].device.type
    entry = Entry(plan, torch_run, "torch", [select.Choice("torch", "")] * len(plan.steps))
    promote = getattr(torch_run, "promote", None)
    if promote is not None:     # a loop over the steps until it is called often enough to pay for its compile
        promote(entry)
    if widen or choose(device_type, dtypes) != "triton":      # (kernels take each dtype as it is)
        return entry
    mode = select.mode_for(select_mode, device_type)
    if mode != "blas":      # generated kernels may run: fuse the steps that save memory traffic
        program = triton_executor.program(plan, dtypes[0])
        torch_fns, plan = unit_functions(program, plan, torch_fns), program
    operand_strides = tuple(tuple(o.stride()) for o in operands)
    shapes = [tuple(o.shape) for o in operands]
    try:
        lowered = triton_executor.kernels(plan, dtypes[0], shapes, operand_strides)
        launches = [] if mode == "learn" else [triton_executor.launch_of(k) for k in lowered]   # (learn: later)
    except ConfigError:         # a bad setting (EINC_CACHE_DIR, ...) is the user's to fix: say so
        raise
    except Exception as e:      # a generator bug must not cost the user an answer
        _fall_back(plan, e)
        return entry
    entry.program, entry.backend, entry.strides = plan, "triton", operand_strides
    strides = value_strides(plan, shapes, operand_strides)
    if mode in ("measure", "learn"):
        try:
            plain = triton_executor.plain_kernels(plan, dtypes[0], shapes, operand_strides, lowered)
        except ConfigError:
            raise
        except Exception:       # an optional candidate: the default kernels still run
            plain = {}
        if mode == "learn":
            static = [select.Choice(c.backend, c.reason + learn.LEARNING)
                      for c in static_choices(plan, strides, "learn", dtypes[0])]
            entry.run = _learning_call(entry, lowered, plain, torch_fns, torch_run, static)
            entry.choices = static
            return entry
        entry.run = _measuring_call(entry, launches, plain, torch_fns, torch_run, [k.name for k in lowered])
        entry.choices = [select.Choice("triton", "measured on the first call")] * len(plan.steps)
        return entry
    entry.choices = static_choices(plan, strides, mode, dtypes[0])
    functions = [_step_function(plan, s, c.backend, launches, torch_fns, strides)
                 for s, c in enumerate(entry.choices)]
    entry.run = _first_call(entry, unroll(plan, functions), torch_run)
    return entry


def _step_function(plan, s, backend, launches, torch_fns, strides):
    step = plan.steps[s]
    if backend == "triton":
        return launches[s]
    if backend == "blas" and len(step.operands) == 2:
        fn = blas.step_function(step, plan.graph.sizes, *[strides[v] for v in step.operands], torch_fns[s])
        if fn is not None:
            return fn
    return torch_fns[s]


def candidates(plan, s, torch_fns, strides) -> dict:
    """Step ``s``'s candidates that are no generated kernel, for operands of ``strides``:
    ``blas`` where the step is one copy-free cuBLAS product, else ``torch``; beside ``blas``,
    ``torch`` too where the copy-cost model's layout copies; ``chunks`` where the step's
    product may be made a chunk at a time."""
    other = _step_function(plan, s, "blas", (), torch_fns, strides)
    found = {"blas" if other is not torch_fns[s] else "torch": other}
    if "blas" in found and getattr(torch_fns[s], "ttgt", None) is not None:
        found["torch"] = torch_fns[s]      # copies + cuBLAS in the copy-cost model's layout
    if getattr(torch_fns[s], "chunked", None) is not None:
        found["chunks"] = torch_fns[s].chunked     # the same, a chunk of the product at a time
    return found


def _kernel_names(s, names, plain) -> tuple:
    return (names[s], plain[s].name) if s in plain else (names[s],)


def _measuring_call(entry, launches, plain, torch_fns, torch_run, names):
    """The entry's first run: time each step's candidates on this call's values, keep the
    fastest (or the decision remembered on disk), then run the chosen functions from then on.
    ``plain``: the steps' ``plain`` kernels (IR) where they differ from ``launches``'
    kernels, loaded only where a step is timed or its remembered choice is ``plain``;
    ``names``: the default kernels' names (in the decisions' keys)."""
    plan = entry.program
    last = {v: s for s, step in enumerate(plan.steps) for v in step.operands}
    final = len(plan.steps) - 1

    def first(ops, scale=None):
        if _unreadable(ops):                # this call on torch; measure on a call kernels can read
            return torch_run(ops, scale)
        values = dict(enumerate(ops))       # by value id: a fused step's result skips its parts' ids
        choices, functions = [], []
        try:
            for s, step in enumerate(plan.steps):
                args = [values[v] for v in step.operands]
                strides = {v: tuple(values[v].stride()) for v in step.operands}
                found = candidates(plan, s, torch_fns, strides)
                other = next(iter(found.values()))
                candidates_s = {"triton": launches[s], **found}
                key = select.signature(step, args[0].device, args, _kernel_names(s, names, plain))
                choice = select.remembered(key)
                if s in plain and (choice is None or choice.backend not in candidates_s):
                    loaded = _optional(plain[s])    # the kernel without the stranded index's move
                    if loaded is not None:
                        candidates_s["plain"] = loaded
                if choice is None or choice.backend not in candidates_s:
                    if select.capturing():
                        choice = static_choices(plan, strides, "model", args[0].dtype)[s]
                    else:
                        screens = {n: triton_executor.screen_of(candidates_s[n]) for n in ("triton", "plain")
                                   if n in candidates_s}
                        choice = select.measure(candidates_s, args, {n: f for n, f in screens.items() if f})
                        select.remember(key, choice)
                fn = candidates_s.get(choice.backend, other)
                choices.append(choice)
                functions.append(fn)
                if s == final and scale is not None:      # into the kernel's epilogue, as unroll does
                    values[step.result] = scaled(fn)(*args, scale)
                else:
                    values[step.result] = fn(*args)
                _free(values, plan, step, s, last)
                del args
        except Exception as e:      # a kernel that fails to compile: the torch executor, for good
            if _this_call_only(e, ops):
                return torch_run(ops, scale)
            _fall_back(plan, e)
            entry.run, entry.backend, entry.program = torch_run, "torch", entry.plan
            entry.choices = [select.Choice("torch", "a generated kernel failed")] * len(entry.plan.steps)
            return torch_run(ops, scale)
        entry.choices = choices
        entry.run = _first_call(entry, unroll(plan, functions), torch_run)
        return values[plan.steps[-1].result]
    return first


def _free(values, plan, step, s, last) -> None:
    """Drop the intermediates step ``s`` read for the last time, as unroll's run does."""
    for v in step.operands:
        if v >= plan.num_operands and last[v] == s:
            values.pop(v, None)


def _learning_call(entry, lowered, plain, torch_fns, torch_run, static):
    """Learn mode's run (:mod:`einc.runtime.learn`) until every step is decided, then the
    decided program's.  ``lowered``/``plain``: the kernels (IR), loaded only on the
    background thread; ``static``: the modelled choice per step."""
    plan = entry.program

    def load(s, name):
        return triton_executor.launch_of(plain[s] if name == "plain" else lowered[s])
    learner = learn.Learner(static, load)
    names = [k.name for k in lowered]
    calls = [0]

    def call(ops, scale=None):
        if _unreadable(ops) or _no_memory(ops) or not learner.lock.acquire(blocking=False):
            return torch_run(ops, scale)        # (another thread is learning on this entry)
        try:
            for _, name, error in learner.failures():
                if name != "plain":
                    _warn_kernel(plan, error)
            calls[0] += 1
            capturing = select.capturing()      # (no timing then, no job, no timing read)
            out = _learn_run(learner, plan, ops, scale, calls[0] > 1 and not capturing, not capturing, torch_fns,
                             names, plain)
            if out is None:                     # a kernel failed in this call: torch answers it
                return torch_run(ops, scale)
            functions, decided = learner.after_call(read=not capturing)
            for key, choice in decided:
                select.remember(key, choice)
            entry.choices = learner.choices() + static[len(learner.steps):]
            if functions is not None:
                entry.run = _first_call(entry, unroll(plan, functions), torch_run)
            return out
        finally:
            learner.lock.release()
    return call


def _learn_run(learner, plan, ops, scale, timing, submit, torch_fns, names, plain):
    """One learning call of ``plan`` on ``ops``: each step runs (and, with ``timing``, times)
    what ``learner`` picks, handing kernels not ready to the background threads where
    ``submit``; None where a kernel failed on this call (torch answers it)."""
    last = {v: s for s, step in enumerate(plan.steps) for v in step.operands}
    final = len(plan.steps) - 1
    values = dict(enumerate(ops))           # by value id: a fused step's result skips its parts' ids
    for s, step in enumerate(plan.steps):
        args = [values[v] for v in step.operands]
        if s == len(learner.steps):         # the first call that reaches this step
            strides = {v: tuple(values[v].stride()) for v in step.operands}
            key = select.signature(step, args[0].device, args, _kernel_names(s, names, plain))
            kernels = ("triton", "plain") if s in plain else ("triton",)
            learner.setup(s, candidates(plan, s, torch_fns, strides), kernels, key, select.remembered(key))
        scaling = s == final and scale is not None
        name, fn, timed = learner.pick(s, args, scaling and scale != 1.0, timing, submit)
        if scaling:                         # into the kernel's epilogue, as unroll does
            fn, args = scaled(fn), [*args, scale]
        try:
            if timed:
                out, reading = learn.timer(fn, args)
                learner.record(s, name, reading)
            else:
                out = fn(*args)
        except Exception as e:
            if name not in learn.KERNELS:
                raise
            if not _this_call_only(e, ops):
                learner.drop(s, name, e)
                if name != "plain":
                    _warn_kernel(plan, e)
            return None
        values[step.result] = out
        _free(values, plan, step, s, last)
        del args
    return values[plan.steps[-1].result]


def _optional(kernel):
    """``kernel``'s launch function, or None where it does not load (an optional candidate)."""
    try:
        return triton_executor.launch_of(kernel)
    except ConfigError:
        raise
    except Exception:
        return None


def _cast(run, dtype):
    def cast(ops, scale=None):
        return run(ops, scale).to(dtype)
    return cast


def _first_call(entry, triton_run, torch_run):
    """Run the kernels; if they fail, warn once and let the torch executor answer.

    Triton compiles on the first launch, so a failure then moves the entry to the
    torch executor for good; a later failure (a view a 32-bit kernel cannot address)
    runs that one call on torch.  ``try`` costs nothing until something raises.
    """
    def first(ops, scale=None):
        if _unreadable(ops):
            return torch_run(ops, scale)
        try:
            out = triton_run(ops, scale)
        except Exception as e:
            if _this_call_only(e, ops):
                return torch_run(ops, scale)
            _fall_back(entry.program, e)
            entry.run, entry.backend, entry.program = torch_run, "torch", entry.plan
            return torch_run(ops, scale)
        entry.run = run
        return out

    def run(ops, scale=None):
        if _unreadable(ops):
            return torch_run(ops, scale)
        try:
            return triton_run(ops, scale)
        except Exception as e:
            if not _this_call_only(e, ops):
                _fall_back(entry.program, e)
            return torch_run(ops, scale)
    return first


def _unreadable(ops) -> bool:
    """Whether a generated kernel, which reads an operand's memory through its strides,
    would misread one: a tensor with the negative bit (a view such as ``z.conj().imag``,
    whose values are the negated memory) or a zero tensor (no memory); or could not read
    it: a fake tensor (``make_fx``'s, a ``FakeTensorMode``), whose launch would ask for its
    data pointer (a deprecation warning) and fail on every call.  torch's ops read them
    right; a C call per operand, and a type check."""
    return any(o.is_neg() or o._is_zerotensor() or (type(o) not in _PLAIN and _no_memory((o,))) for o in ops)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _this_call_only(error, ops) -> bool:
    """Whether a kernel's failure is this call's operands', not the kernel's: a view that
    32-bit offsets cannot reach (:mod:`einc.runtime.triton_executor.launch`), or fake tensors (a fake mode,
    tracing) and other tensors without storage (the batched tangents of
    ``jacobian(vectorize=True)``): no memory to launch on.  Such a call runs on torch and
    the kernels stay."""
    return isinstance(error, OverflowError) or _no_memory(ops)


def _no_memory(ops) -> bool:
    """Whether an operand has no memory to launch on: a fake tensor, a tensor without storage."""
    from torch._subclasses.fake_tensor import FakeTensor
    return any(isinstance(o, FakeTensor) or not torch._C._has_storage(o) for o in ops)


def _fall_back(plan, error):
    _warn_once(("kernel", plan.equation), f"einc: a generated kernel for {plan.equation!r} failed "
               f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
               "running this equation on the torch executor")


def _warn_kernel(plan, error):
    _warn_once(("kernel", plan.equation), f"einc: a generated kernel for {plan.equation!r} failed "
               f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
               "its steps run cuBLAS or torch ops")


def forget_warnings() -> None:
    """Warn again, as in a new process (``einc.cache_clear``)."""
    _warned.clear()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warn(message)
