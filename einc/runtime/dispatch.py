"""Dispatch: which executor runs a plan, and the cache entry that remembers it.

CUDA tensors of a float dtype run generated Triton kernels; everything else runs
the torch executor.  ``EINC_BACKEND=triton`` sends CPU tensors to the generated
kernels too, through Triton's interpreter; ``EINC_BACKEND=torch`` keeps everything on
torch.  When Triton is missing or a kernel fails to build or compile, the plan falls
back to the torch executor with one warning: never a crash, never a wrong answer.
"""

from __future__ import annotations

import warnings

from .. import config
from ..errors import ConfigError
from ..lower import supported
from ..plan import format_table
from . import torch_executor, triton_executor

_warned: set = set()


class Entry:
    """A cache entry: the plan, the callable that runs it, and which backend that is."""

    __slots__ = ("plan", "run", "backend")

    def __init__(self, plan, run, backend):
        self.plan = plan
        self.run = run
        self.backend = backend


def _kernels_wanted(device_type: str, dtypes) -> bool:
    """Whether EINC_BACKEND, the device and the dtypes call for generated kernels."""
    mode = config.backend()
    if mode == "torch" or (device_type != "cuda" and mode != "triton"):
        return False
    return device_type in ("cuda", "cpu") and supported(triton_executor.dtype_name(d) for d in dtypes)


_NO_INTERPRETER = ("einc: EINC_BACKEND=triton needs Triton's interpreter for CPU tensors, but TRITON_INTERPRET "
                   "is set to a false value, or triton was imported before TRITON_INTERPRET=1 was set (set it "
                   "before importing triton). Running on the torch executor")
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


class Explanation:
    """A plan with what runs each step: ``explain``'s answer.  Prints as the plan's table
    with a backend column; the plan's attributes (``flops``, ``steps``, ``path``, ...) read
    through."""

    def __init__(self, plan, backends, note):
        self.plan = plan
        self.backends = tuple(backends)
        self.note = note

    def __getattr__(self, name):
        return getattr(self.plan, name)

    def __str__(self) -> str:
        return format_table(self.plan, self.backends, self.note)

    def to_dict(self) -> dict:
        d = self.plan.to_dict()
        for step, backend in zip(d["steps"], self.backends):
            step["backend"] = backend
        d["backend_note"] = self.note
        return d


def describe(plan, device_type: str, dtypes, shapes, backend: str | None = None) -> Explanation:
    """What runs each step of ``plan``: ``backend`` where an entry was built (it may have
    fallen back), else what :func:`decide` would pick."""
    why = None
    if backend is None:
        backend, why = decide(device_type, dtypes)
    if backend == "triton":
        names = [f"triton {k.name}" for k in triton_executor.kernels(plan, dtypes[0], shapes)]
        note = ("generated Triton kernels; no input is copied, permuted or reshaped: each kernel reads its "
                "operands through their strides and writes a contiguous result")
    else:
        names = ["torch"] * len(plan.steps)
        note = ("torch executor (CPU tensors, or dtypes without kernels); a matrix product step copies an "
                "operand whose layout is not a batched matrix")
        if why is not None:
            note += " -- " + why.removeprefix("einc: ")
    return Explanation(plan, names, note)


def build_entry(plan, operands, result_dtype=None) -> Entry:
    """Compile ``plan`` for these operands on the backend that suits them; the result is
    cast to ``result_dtype`` (torch.einsum's) where the executor's differs."""
    dtypes = [o.dtype for o in operands]
    torch_run = torch_executor.compile_plan(plan, dtypes)     # also checks the dtypes
    if result_dtype is not None and result_dtype != torch_run.dtype:
        torch_run = _cast(torch_run, result_dtype)
    entry = Entry(plan, torch_run, "torch")
    if choose(operands[0].device.type, dtypes) == "triton":
        try:
            triton_run = triton_executor.compile_plan(plan, dtypes[0], [tuple(o.shape) for o in operands])
        except ConfigError:         # a bad setting (EINC_CACHE_DIR, ...) is the user's to fix: say so
            raise
        except Exception as e:      # a generator bug must not cost the user an answer
            _fall_back(plan, e)
            return entry
        entry.run = _first_call(entry, triton_run, torch_run)
        entry.backend = "triton"
    return entry


def _cast(run, dtype):
    def cast(ops):
        return run(ops).to(dtype)
    cast.dtype = dtype
    return cast


def _first_call(entry, triton_run, torch_run):
    """Run the kernels; if they fail, warn once and let the torch executor answer.

    Triton compiles on the first launch, so a failure then moves the entry to the
    torch executor for good; a later failure (a view a 32-bit kernel cannot address)
    runs that one call on torch.  ``try`` costs nothing until something raises.
    """
    def first(ops):
        try:
            out = triton_run(ops)
        except Exception as e:
            _fall_back(entry.plan, e)
            entry.run, entry.backend = torch_run, "torch"
            return torch_run(ops)
        entry.run = run
        return out

    def run(ops):
        try:
            return triton_run(ops)
        except Exception as e:
            _fall_back(entry.plan, e)
            return torch_run(ops)
    return first


def _fall_back(plan, error):
    _warn_once(("kernel", plan.equation), f"einc: a generated kernel for {plan.equation!r} failed "
               f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
               "running this equation on the torch executor")


def forget_warnings() -> None:
    """Warn again, as in a new process (``einc.cache_clear``)."""
    _warned.clear()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)
