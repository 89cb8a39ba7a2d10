"""What a sliced plan costs, and the check that refuses a ``memory_limit`` that cannot pay.

einc's slicer (:mod:`einc.planner.slicing`) meets the memory bound with the slicing estimated
to run fastest.  The estimate of one call of a sliced plan:

    seconds = flops over all slices * flop_seconds
              + steps run once (hoisted) * step_seconds
              + slices * (steps of one slice + 1) * step_seconds

``flop_seconds`` and ``step_seconds`` are per executor (:data:`EXECUTOR_COSTS`): the
fixed cost of one step (Python dispatch, views, allocations, a launch) and the time per
flop (opt_einsum's count) on the small operands a slice holds; the ``+ 1`` is the
slice's own work (viewing the operands, adding its part into the result).  Where a
summed index is sliced, the flops include those adds (one per element of a slice's
result, per slice): the sums its steps leave to the slicing, so that a step sliced down
to a product counts what it did unsliced, not half.  Plans are
made before the device is known (the plan cache is per device, the plan is not), so the
slicer weighs the torch executor's figures, the larger per-flop time: on a GPU, where
flops are cheaper, it may choose more slices than needed, never fewer.

A limit that cannot pay: where the cheapest slicing that meets the bound is estimated
at more than ``EINC_SLICE_OVERHEAD`` (default 100) times the same estimate of the
unsliced contraction, and more than :data:`FLOOR_SECONDS` (both with the figures of
the executor the operands' device runs: Triton's for CUDA tensors), building the call's
entry raises :class:`~einc.errors.MemoryLimitError` -- before any slice runs -- naming the
estimated slices and time and, on the same path, the smallest power-of-two limit whose
slicing is estimated within 2x
(:func:`einc.planner.slicing.check_cost`, :func:`einc.planner.slicing.suggest_limit`).  ``explain``
still shows such a plan, with the same sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import config


@dataclass(frozen=True)
class ExecutorCost:
    """One executor's figures for the slicer's estimate (see the module docstring)."""

    step_seconds: float     # the fixed cost of one step, whatever its size
    flop_seconds: float     # seconds per flop on a slice's small operands


# Calibrated on the development machine (1 thread, float64; bench/measured/sliced.md): the
# torch executor's step as an einc call of one small matrix-product step with the permutes
# a general step needs, its flop rate one within the range float64 contractions of
# 16..64-wide operands run at.  The Triton executor: a generated kernel's launch through
# its Python launcher, and an H100-class GPU's float32 throughput on small tiles.
EXECUTOR_COSTS = {
    "torch": ExecutorCost(step_seconds=15e-6, flop_seconds=0.2e-9),
    "triton": ExecutorCost(step_seconds=20e-6, flop_seconds=1e-12),
}
PLANNING = "torch"          # whose figures the slicer weighs (plans are made before the device is known)

FLOOR_SECONDS = 1.0         # an estimate below this is never refused, whatever the ratio
WITHIN = 2.0                # the suggested limit keeps the estimate within this many times the unsliced


def seconds(flops: float, once_steps: int, slices: int, slice_steps: int, executor: str = PLANNING):
    """``(total, fixed)``: the estimated seconds of a call, and of those the per-slice fixed cost."""
    cost = EXECUTOR_COSTS[executor]
    fixed = slices * (slice_steps + 1) * cost.step_seconds
    return flops * cost.flop_seconds + once_steps * cost.step_seconds + fixed, fixed


def refusal(slicing, executor: str = PLANNING) -> str | None:
    """The sentence :class:`MemoryLimitError` says for a slicing that costs too much with
    ``executor``'s figures, else None."""
    total, fixed, unsliced = slicing.estimate(executor)
    ratio = total / unsliced if unsliced else 1.0
    if slicing.memory_limit is None or total <= FLOOR_SECONDS or ratio <= config.slice_overhead():
        return None
    if slicing.bound == "intermediate":
        limit = (f"memory_limit='max_input' (each intermediate within the largest operand or the output, "
                 f"{slicing.memory_limit} elements)")
    else:
        limit = f"memory_limit={slicing.memory_limit} elements"
    return (f"{limit} is met only by {slicing.num_slices} slices, "
            f"estimated at {time_text(total)} ({ratio:.0f}x the unsliced {time_text(unsliced)}, "
            f"{time_text(fixed)} of it per-slice overhead)")


def time_text(t: float) -> str:
    if t >= 3600:
        return f"{t / 3600:.1f} h"
    if t >= 60:
        return f"{t / 60:.1f} min"
    if t >= 1:
        return f"{t:.1f} s"
    return f"{t * 1e3:.3g} ms"


__all__ = ["EXECUTOR_COSTS", "ExecutorCost", "seconds", "refusal", "time_text", "WITHIN", "FLOOR_SECONDS"]
