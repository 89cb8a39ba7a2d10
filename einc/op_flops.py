"""The flops of the custom ops ``einc::einsum`` and ``einc::einsum_backward`` for torch's
``FlopCounterMode``.

The counter sees each op whole (the ops inside its kernels run below the mode), and copies
torch's registry of counts when it is made: each op's count is registered there (for
counters made later) and added to the counters in the mode stack, whenever a dispatch mode
meets the op where the counter's module is loaded (importing it costs more than einc's
import): :func:`register`, which :mod:`einc.custom_op`'s Autograd kernel calls.
"""

import math
import sys

import torch

from . import autograd
from .planner import plan_for
from .planner.equation import parse
from .planner.graph import build
from .planner.options import Options


def counting() -> bool:
    """Whether torch's flop counter is loaded (a mode may count)."""
    return "torch.utils.flop_counter" in sys.modules


def register():
    """The ops' counts, in torch's registry and in the counters of the dispatch modes active."""
    counter = sys.modules["torch.utils.flop_counter"]
    counts = {torch.ops.einc.einsum: _flops, torch.ops.einc.einsum_backward: _backward_flops}
    for op, count in counts.items():
        if op not in counter.flop_registry:
            counter.register_flop_formula(op)(count)
    for mode in torch.utils._python_dispatch._get_current_dispatch_mode_stack():
        registry = getattr(getattr(mode, "counter", None), "flop_registry", None)
        if isinstance(registry, dict) and torch.ops.einc.einsum not in registry:
            registry.update((op, counter.flop_registry[op]) for op in counts)


def _flops(equation, shapes, optimize, memory_limit, layout="", scale=1.0, *args, out_shape=None, **kwargs) -> int:
    """The flops of the path einc runs for these shapes, each step counted as the counter
    counts torch.einsum's ops for it: a step of two operands that sums an index both hold is
    a batched matrix product, 2 * batch * M * N * K over its indices but those one operand
    sums alone (torch sums them first, uncounted); any other step (a product with nothing
    summed, a sum of one operand) runs ops the counter does not count."""
    plan = plan_for(parse(equation), [tuple(s) for s in shapes], Options.from_op(optimize, memory_limit, layout))
    total = 0
    for step in plan.steps:
        if len(step.inputs) != 2:
            continue
        left, right = set(step.inputs[0]), set(step.inputs[1])
        if not set(step.summed) & left & right:
            continue
        alone = set(step.summed) - (left & right)
        total += 2 * math.prod(plan.graph.sizes[i] for i in (left | right) - alone)
    return total


def _backward_flops(equation, shapes, grad_shape, needed, optimize, memory_limit, layout="", *args, out_shape=None,
                    **kwargs) -> int:
    """The flops of the gradient einsums of the operands ``needed`` (one each, as the backward runs)."""
    graph = build(parse(equation), [tuple(s) for s in shapes])
    total = 0
    for k, n in enumerate(needed):
        if n:
            recipe = autograd.grad_recipe(graph, k)
            terms = [graph.output] + [graph.inputs[j] for j in recipe.others]
            shapes = [[graph.sizes[i] for i in t] for t in terms]
            total += _flops(recipe.equation, shapes, optimize, memory_limit, layout)
    return total


__all__ = ["counting", "register"]
