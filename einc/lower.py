"""Stage 4, lower: a plan step + dtypes -> a :class:`~einc.ir.Kernel`.

Pure Python.  Indices keep the graph's ids, which follow the order of first
appearance, so the kernel for a key never depends on the letters a caller used
(``ik,kj`` and ``ab,bc`` lower to the same kernel, byte for byte).
"""

from __future__ import annotations

import hashlib
import math

from .ir import KERNEL_DTYPES, MATMUL, REDUCE, Kernel, Operand, index_name
from .plan import CONTRACT, Plan, Step

INT32_LIMIT = 2**31


def supported(dtypes) -> bool:
    """Whether generated kernels handle operands of these dtypes (one float dtype)."""
    dtypes = set(dtypes)
    return len(dtypes) == 1 and next(iter(dtypes)) in KERNEL_DTYPES


def lower_step(plan: Plan, s: int, dtype: str, shapes) -> Kernel:
    """Lower step ``s`` of ``plan``; ``shapes`` maps each value id to its shape.

    >>> from einc.equation import parse
    >>> from einc.graph import build
    >>> from einc.plan import build_plan
    >>> p = build_plan(build(parse("ij,jk->ik"), [(2, 3), (3, 4)]))
    >>> lower_step(p, 0, "float32", {0: (2, 3), 1: (3, 4)}).kind
    'matmul'
    """
    step = plan.steps[s]
    sizes = plan.graph.sizes
    names = "abc"[: len(step.inputs)]
    inputs = tuple(Operand(nm, dims) for nm, dims in zip(names, step.inputs))
    output = Operand("c", step.output)
    out_shape = tuple(sizes[i] for i in step.output)
    in_shapes = tuple(tuple(shapes[v]) for v in step.operands)
    summed = step.summed
    if step.kind == CONTRACT:
        ta, tb = set(step.inputs[0]), set(step.inputs[1])
        groups = (("batch", step.batch),
                  ("m", tuple(i for i in step.output if i in ta and i not in tb)),
                  ("n", tuple(i for i in step.output if i in tb and i not in ta)),
                  # shared summed indices, then those summed in one operand only (stride 0 in the other)
                  ("k", tuple(i for i in summed if i in ta and i in tb)
                   + tuple(i for i in summed if not (i in ta and i in tb))))
        kind = MATMUL
    else:
        groups = (("o", step.output), ("k", summed))
        kind = REDUCE
    acc = "float64" if dtype == "float64" else "float32"
    # 64-bit offsets when a tensor has 2^31 elements or more; the launcher of a 32-bit
    # kernel refuses views that reach that far into their storage (the torch executor
    # then runs the step).
    big = any(math.prod(sh) >= INT32_LIMIT for sh in in_shapes + (out_shape,))
    title = _title(plan, s)
    body = (kind, groups, inputs, output, dtype, acc, big, in_shapes, out_shape)
    digest = hashlib.sha256(repr(body).encode()).hexdigest()[:8]
    short = "_".join("".join(index_name(i) for i in op.dims) for op in inputs + (output,))
    prefix = "mm" if kind == MATMUL else "red"
    name = f"einc_{prefix}_{short}_{digest}"
    return Kernel(kind, name, _canonical(plan), title, groups, inputs, output,
                  in_shapes + (out_shape,), dtype, acc, big)


def _canonical(plan: Plan) -> str:
    g = plan.graph
    return ",".join("".join(index_name(i) for i in t) for t in g.inputs) + "->" + \
        "".join(index_name(i) for i in g.output)


def _title(plan: Plan, s: int) -> str:
    step: Step = plan.steps[s]
    term = lambda dims: "".join(index_name(i) for i in dims)  # noqa: E731
    operands = " · ".join(f"T{v}[{term(t)}]" for v, t in zip(step.operands, step.inputs))
    over = f" over {term(step.summed)}" if step.summed else ""
    return f"step {s + 1}/{len(plan.steps)} ({step.kind}): {operands}{over} -> T{step.result}[{term(step.output)}]"


def lower_plan(plan: Plan, dtype: str, shapes) -> tuple[Kernel, ...]:
    """Every step of ``plan`` as a kernel; ``shapes`` are the operands' shapes."""
    values = {v: tuple(sh) for v, sh in enumerate(shapes)}
    kernels = []
    for s, step in enumerate(plan.steps):
        kernels.append(lower_step(plan, s, dtype, values))
        values[step.result] = tuple(plan.graph.sizes[i] for i in step.output)
    return tuple(kernels)


__all__ = ["lower_step", "lower_plan", "supported", "REDUCE", "MATMUL"]
