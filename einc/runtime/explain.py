"""``explain``'s answer: what runs each step of a plan, for these dtypes and device.

:func:`explanation` is the one entry ``einc.explain`` (and opt_einsum's ``contract_path``)
use: a plain plan is described by :func:`describe` (an :class:`Explanation`); a sliced plan
by what runs each step of one slice.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from .. import config
from ..planner import plan_for
from ..planner.fuse import FUSED
from ..planner.options import Options
from ..planner.plan import CONTRACT, Plan, format_table
from . import select, triton_executor
from .admission import SMALL_CALL
from .dispatch import decide, static_choices, value_strides
from .dtypes import FLOAT32_OF
from .learn import LEARNING


class Explanation:
    """A plan with what runs each step and why: ``explain``'s answer.  Prints as the
    plan's table with a backend column and a line per step; the plan's attributes
    (``flops``, ``steps``, ``path``, ...) read through."""

    def __init__(self, plan, backends, note, reasons=(), size_class=None):
        self.plan = plan
        self.backends = tuple(backends)
        self.note = note
        self.reasons = tuple(reasons)
        self.size_class = size_class        # a SizeClass where the call runs its size class's plan

    def __getattr__(self, name):
        if name.startswith("__") or name == "plan":     # (copy and pickle ask before plan is set)
            raise AttributeError(name)
        return getattr(self.plan, name)

    def __str__(self) -> str:
        text = format_table(self.plan, self.backends, self.note)
        lines = [f"  step {s + 1}: {b} -- {r}" for s, (b, r) in enumerate(zip(self.backends, self.reasons)) if r]
        if self.size_class is not None:
            lines.append(f"  {self.size_class}")
        return text + ("\n" + "\n".join(lines) if lines else "")

    def to_dict(self) -> dict:
        d = self.plan.to_dict()
        # (no backend per step where torch's op runs the whole call: each step's is None, the note says why)
        backends = self.backends or (None,) * len(d["steps"])
        for step, backend, reason in zip(d["steps"], backends, self.reasons or [""] * len(backends)):
            step["backend"] = backend
            step["reason"] = reason
        d["backend_note"] = self.note
        c = self.size_class
        if c is not None:
            d["size_class"] = {"shapes": [list(x) for x in c.shapes],
                               "canonical_shapes": [list(x) for x in c.canonical], "cached": c.cached,
                               "path": [list(x) for x in c.plan.path]}
        return d


class SizeClass(NamedTuple):
    """What ``explain`` says of a call that runs its size class's plan
    (:mod:`einc.runtime.sizeclass`): the call's ``shapes``, the class's ``canonical``
    shapes, at which its plan (``plan``: the path and each step's layout) was made, whether
    the class was planned already (``cached``), and that path at the call's own sizes
    (``at_call``: the same steps, with this call's flops and sizes; the table shows it)."""

    shapes: tuple
    canonical: tuple
    cached: bool
    plan: Plan
    at_call: Plan

    def __str__(self) -> str:
        shapes = ", ".join(str(tuple(s)) for s in self.shapes)
        canonical = ", ".join(str(tuple(s)) for s in self.canonical)
        state = "planned already" if self.cached else "not planned yet (planned here for explain, and not kept)"
        return (f"Size class: this call runs the plan of its size class, planned once at the canonical shapes "
                f"{canonical} (each size 1 kept, every other the middle of its power-of-two octave), where its "
                f"path and each step's layout were chosen; the table shows that path at this call's sizes "
                f"{shapes}, which the class's steps read at run time; the class is {state}")


def size_class(eq, shapes, entry, options, cached: bool) -> SizeClass:
    """The :class:`SizeClass` of a call whose entry is its size class's: the class's path
    at the call's ``shapes`` (the steps the class's plan has, at these sizes)."""
    plan = entry.plan
    at_call = plan_for(eq, shapes, Options.of(plan.path, None, options.select, options.layout))
    at_call = dataclasses.replace(at_call, optimizer=plan.optimizer, notes=plan.notes)
    return SizeClass(tuple(map(tuple, shapes)), tuple(map(tuple, entry.size_class)), cached, plan, at_call)


def torch_op(plan, layout: str) -> Explanation:
    """``explain``'s answer for a call torch's einsum op answers whole (``EINC_NEW_SHAPES=torch``,
    :mod:`einc.runtime.admission`): no step of einc runs, so no backend per step; one line
    says what runs."""
    kept = "a fresh contiguous tensor" if layout == "contiguous" else "a fresh dense tensor in torch's order"
    return Explanation(plan, (), "torch's einsum op (torch._VF.einsum) runs the whole call, along the path above, "
                                 "none of einc's steps: EINC_NEW_SHAPES=torch gives it a call of at most "
                                 f"2**{SMALL_CALL.bit_length() - 1} multiply-adds, unplanned; its result is made "
                                 f"{kept}")


def _torch_note(plan, device_type: str, dtypes, why) -> str:
    """In plain words: why torch runs every step, and the copy a matrix product may make."""
    if why:
        reason = why.removeprefix("einc: ").split("; running on")[0]
    elif config.backend() == "torch":
        reason = "EINC_BACKEND=torch"
    elif device_type not in ("cuda", "cpu") or (device_type == "cpu" and config.backend() != "triton"):
        reason = (f"the operands are on the {device_type.upper()}, and generated kernels run on CUDA tensors "
                  "(EINC_BACKEND=triton runs them through Triton's interpreter, for testing)")
    elif not triton_executor.supports(dtypes):
        reason = f"no generated kernels for {', '.join(sorted({triton_executor.dtype_name(d) for d in dtypes}))}"
    else:
        reason = "the generated kernels could not be built (see the warning)"
    note = f"the torch executor runs every step (torch operations): {reason}"
    if any(step.kind == CONTRACT for step in plan.steps):
        note += ("; a matrix product step copies an operand whose dimensions are not laid out as a batch "
                 "of matrices")
    return note


def _kernel_note(backends, device_type: str) -> str:
    """In plain words, what the backends of the steps do (only those that run)."""
    parts = []
    if any(b.startswith("triton") for b in backends):
        parts.append("triton steps run generated kernels, which read the operands through their strides and "
                     "write a contiguous result" + (" (on CPU tensors through Triton's interpreter: slow, for "
                                                    "testing)" if device_type != "cuda" else ""))
    if "blas bmm/mm" in backends:
        parts.append("blas steps are one batched matrix product (torch.bmm / mm) on views of the operands, "
                     "with no copy")
    if "torch" in backends:
        parts.append("torch steps run torch operations, which may copy an operand")
    return "; ".join(parts)


def describe(plan, device_type: str, dtypes, shapes, entry=None, select_mode=None, strides=None) -> Explanation:
    """What runs each step of ``plan``: the entry's choices and kernels where it was built
    (it may have fallen back, or measured; its kernels are lowered for the strides of the
    operands it was built on), else what would be chosen for operands of ``shapes`` and
    ``strides`` (contiguous where not given; the cost model where the choice would be
    measured).  The kernels named are the ones :func:`~einc.runtime.dispatch.build_entry` loads for those strides."""
    empty = plan.empty_sum
    if empty is not None:       # (the zeros are made whole: no step runs, on no backend)
        return Explanation(plan, ["none"] * len(plan.steps),
                           f"the steps above do not run: the result is zeros, a sum over {empty}, "
                           "of size 0, whatever the other operands hold")
    if entry is not None:
        choices = entry.choices
        backend = entry.backend
        why = None
        strides = entry.strides if entry.strides is not None else strides
    else:
        backend, why = decide(device_type, dtypes)
        choices = None
    if backend != "triton":
        return Explanation(plan, ["torch"] * len(plan.steps), _torch_note(plan, device_type, dtypes, why),
                           [c.reason for c in choices] if choices else ())
    if choices is None:
        mode = select.mode_for(select_mode, device_type)
        if mode != "blas":          # steps that fuse show as one kernel (an entry's plan is fused already)
            plan = triton_executor.program(plan, dtypes[0])
        choices = static_choices(plan, value_strides(plan, shapes, strides),
                                  "model" if mode == "measure" else mode, dtypes[0])
        if mode in ("measure", "learn"):
            then = "; measured on the first call" if mode == "measure" else LEARNING
            choices = [select.Choice(c.backend, c.reason + then) for c in choices]
    kernels = triton_executor.kernels(plan, dtypes[0], shapes, strides)
    if any(c.backend == "plain" for c in choices):
        plain = triton_executor.kernels(plan, dtypes[0], shapes, strides, unit_tiles=False)
        kernels = [p if c.backend == "plain" else k for c, k, p in zip(choices, kernels, plain)]
    names = [f"triton {k.name}" if c.backend in ("triton", "plain") else _TORCH_NAMES.get(c.backend, "torch")
             for c, k in zip(choices, kernels)]
    return Explanation(plan, names, _kernel_note(names, device_type), [c.reason for c in choices])


_TORCH_NAMES = {"blas": "blas bmm/mm", "chunks": "torch in chunks"}


def explanation(plan: Plan, device_type: str, dtypes, shapes, entry=None, select_mode=None,
                strides=None) -> Explanation:
    """What runs each step of ``plan`` (an ``entry`` that ran: what it ran)."""
    if plan.slicing is not None:
        return _sliced(plan, device_type, dtypes, entry, select_mode)
    return describe(plan, device_type, dtypes, shapes, entry, select_mode, strides)


def _sliced(plan: Plan, device_type: str, dtypes, entry=None, select_mode=None) -> Explanation:
    """``explain``'s answer for a sliced plan: what runs each step of one slice (once a slice
    ran, what its entry runs: its plan, fused where kernels run, and its kernels)."""
    s = plan.slicing
    if len(set(dtypes)) == 1 and dtypes[0] in FLOAT32_OF:      # runtime/sliced.py: Runner._slice_entry
        wide = str(FLOAT32_OF[dtypes[0]]).removeprefix("torch.")
        why = (f"each slice of a 16-bit float plan contracts in {wide}, each step making its inputs {wide} "
               "as it reads them (generated kernels take each dtype as it is)")
        return Explanation(plan, ["torch"] * len(plan.steps), _torch_note(s.inner, device_type, dtypes, why))
    shapes = [tuple(s.inner.graph.sizes[i] for i in t) for t in s.inner.graph.inputs]
    ran = entry.inner if entry is not None else None
    if ran is not None and sum(_rows(ran.program)) != len(plan.steps):
        ran = None      # steps hoisted out of the slices ran apart: describe one whole slice as planned
    inner = describe(ran.program if ran is not None else s.inner, device_type, dtypes, shapes, ran or entry,
                     select_mode)
    # one row per step of the sliced plan: a fused step's kernel on each plan step it runs
    counts = _rows(inner.plan)
    backends = [b for b, n in zip(inner.backends, counts) for _ in range(n)]
    reasons = [r for r, n in zip(inner.reasons, counts) for _ in range(n)]
    return Explanation(plan, backends, inner.note, reasons)


def _rows(plan: Plan) -> list[int]:
    """For each step of ``plan``, how many steps of the unfused plan it runs."""
    return [len(step.numbers) if step.kind == FUSED else 1 for step in plan.steps]


__all__ = ["explanation", "describe", "size_class", "torch_op", "Explanation", "SizeClass"]
