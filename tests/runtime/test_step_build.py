"""What building a plan's step functions costs a first call (the torch executor's
``step_functions``): Python calls, each a frame (comprehensions and generators are frames
of their own before Python 3.12).  Counted, not timed: the count is what the time follows."""

import sys

import pytest
import torch

from einc.planner import plan_for
from einc.planner.equation import parse
from einc.planner.options import Options
from einc.runtime import torch_executor as tx


def _frames(plan):
    """The frames of the executor's own module that building ``plan``'s steps enters."""
    entered = []

    def seen(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == tx.__file__:
            entered.append(frame.f_code.co_name)
    sys.setprofile(seen)
    try:
        tx.step_functions(plan, [torch.float64] * plan.num_operands)
    finally:
        sys.setprofile(None)
    return entered


@pytest.mark.parametrize("eq,shapes", [
    ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 5), (5, 6)]),
    ("abc,cd,bde->ae", [(2, 3, 4), (4, 5), (3, 5, 6)]),
    ("ija,jkb,klc,lmd->imabcd", [(2, 3, 2), (3, 4, 2), (4, 3, 2), (3, 2, 2)]),
])
def test_a_contraction_step_is_built_in_few_python_calls(eq, shapes):
    """Each step's permutations, shapes and compositions are made without a generator
    where a builtin (``map``, ``all``) does, and two functions composed without a list:
    at most 60 frames of the executor's module a step (the layout's choice aside)."""
    plan = plan_for(parse(eq), shapes, Options.of(False))
    tx.step_functions(plan, [torch.float64] * plan.num_operands)       # (the layouts' caches warm)
    entered = _frames(plan)
    assert len(entered) <= 60 * len(plan.steps), sorted(entered)


def test_what_only_a_gradient_runs_is_kept_as_arguments_not_cells():
    """What a contraction step keeps for the first call that takes a gradient (its training
    layout, its stacked copies, ``bmm`` for ``mm``) is a partial of its arguments, made by
    that call: the step's builders make a closure cell only for what its own views read
    (Python makes every cell a function's inner functions name on each call, kept as long
    as one of them is, and the collector traverses each)."""
    assert tx._contract.__code__.co_cellvars == ()
    assert set(tx._matmul.__code__.co_cellvars) <= {"res_shape", "perm_out", "chunks", "whole"}
