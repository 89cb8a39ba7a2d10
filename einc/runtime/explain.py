"""``explain``'s answer: what runs each step of a plan, for these dtypes and device.

:func:`explanation` is the one entry ``einc.explain`` (and opt_einsum's ``contract_path``)
use: a plain plan is described by :func:`einc.runtime.dispatch.describe`; a sliced plan by
what runs each step of one slice.
"""

from __future__ import annotations

from ..planner.fuse import FUSED
from ..planner.plan import Plan
from .dispatch import Explanation, _torch_note, describe
from .dtypes import FLOAT32_OF


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
    if ran is not None and sum(_rows(ran.plan)) != len(plan.steps):
        ran = None      # steps hoisted out of the slices ran apart: describe one whole slice as planned
    inner = describe(ran.plan if ran is not None else s.inner, device_type, dtypes, shapes, ran or entry, select_mode)
    # one row per step of the sliced plan: a fused step's kernel on each plan step it runs
    counts = _rows(inner.plan)
    backends = [b for b, n in zip(inner.backends, counts) for _ in range(n)]
    reasons = [r for r, n in zip(inner.reasons, counts) for _ in range(n)]
    return Explanation(plan, backends, inner.note, reasons)


def _rows(plan: Plan) -> list[int]:
    """For each step of ``plan``, how many steps of the unfused plan it runs."""
    return [len(step.numbers) if step.kind == FUSED else 1 for step in plan.steps]


__all__ = ["explanation"]
