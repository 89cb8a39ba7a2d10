"""A plan's steps unrolled into one small Python function (shared by both executors)."""

from __future__ import annotations

import inspect
import math

import torch

from ..planner.fuse import FUSED, FusedStep
from ..planner.plan import Plan
from .torch_executor import reuse
from .torch_executor.permute_copy import untracked

# Compiled run functions by source: the source depends on the plan's structure only (which
# value each step reads and when it dies), not on sizes, so a new shape of a known
# equation reuses the code object and only binds its step functions.
_CODE: dict = {}


CALLS_BEFORE_CODE = 16      # the call of a plan's run that compiles its function (those before it loop)


def unroll(plan, step_functions):
    """``run(operands, scale=None)`` calling ``step_functions[s]`` on each step's operands in turn.

    With a ``scale`` the result is multiplied by it: inside the last step where its
    function takes a ``scale`` keyword (a generated kernel's ``launch``: the kernel's
    epilogue), else by one multiply after it.  Intermediates are deleted after their last
    use.  The calls before its :data:`CALLS_BEFORE_CODE`-th run the steps by a loop, that
    call and the later ones one generated function (the same calls, in the same order, with
    the same arguments):
    its compile costs more than a first call's loop, and many plans run a few times.
    ``run.promote(entry)`` has that call put the function in ``entry.run`` where ``run``
    is there, so that the entry calls it directly.  Where a tensor of the plan is large
    (:data:`~einc.runtime.torch_executor.reuse.MIN_ELEMENTS`), each call's steps but the
    last may write their new tensors into the memory of the intermediates it has deleted
    (:func:`reused`), and the last step (or a one-step plan's with a large result) makes a
    large result itself on huge pages (:data:`~einc.runtime.torch_executor.reuse.FRESH`).
    """
    n = plan.num_operands
    last_use = {}
    for s, step in enumerate(plan.steps):
        for v in step.operands:
            last_use[v] = s
    final = len(plan.steps) - 1
    schedule = [(fn, step.operands, step.result, tuple([v for v in step.operands if v >= n and last_use[v] == s]),
                 s == final) for s, (step, fn) in enumerate(zip(plan.steps, step_functions))]
    last_scaled = scaled(schedule[-1][0])
    if not _large(plan):
        run = _interpreted(schedule, n, last_scaled)
        return reused(run, reuse.FRESH) if _large_result(plan) else run
    fn, operands, result, dead, _ = schedule[-1]
    schedule = [(_in_turn(fn), *rest) for fn, *rest in schedule[:-1]]
    schedule.append((_without_blocks(fn), operands, result, dead, True))
    return reused(_interpreted(schedule, n, _without_blocks(last_scaled)))


def _large(plan) -> bool:
    """Whether a step of ``plan`` (of more than one) reads or writes a tensor of
    :data:`~einc.runtime.torch_executor.reuse.MIN_ELEMENTS` elements or more."""
    sizes = plan.graph.sizes
    return len(plan.steps) > 1 and any(math.prod(map(sizes.__getitem__, term)) >= reuse.MIN_ELEMENTS
                                       for step in plan.steps for term in (*step.inputs, step.output))


def _large_result(plan) -> bool:
    """Whether ``plan`` has one step, whose result may be of
    :data:`~einc.runtime.torch_executor.reuse.HUGE_BYTES` or more (complex128's elements)."""
    sizes = plan.graph.sizes
    return len(plan.steps) == 1 and math.prod(map(sizes.__getitem__, plan.steps[0].output)) * 16 >= reuse.HUGE_BYTES


def reused(run, fresh=None):
    """``run(ops, scale)`` with a call's :class:`~einc.runtime.torch_executor.reuse.Blocks`
    (or ``fresh``: :data:`~einc.runtime.torch_executor.reuse.FRESH`) current on its thread
    where the call may have them (:func:`_may_reuse`): its steps' large new tensors take
    the memory of the intermediates the call has deleted."""
    def call(ops, scale=None):
        if not _may_reuse(ops):
            return run(ops, scale)
        before = reuse.make_current(fresh or reuse.Blocks())
        try:
            return run(ops, scale)
        finally:
            reuse.make_current(before)
    call.promote = lambda entry: None   # (the call stays the entry's: it opens the blocks)
    return call


def _may_reuse(ops) -> bool:
    """Whether a call on ``ops`` may reuse its memory (:mod:`~einc.runtime.torch_executor.reuse`'s
    rules): all on the CPU, nothing that autograd records or anything else watches."""
    if not reuse.Blocks.usable or torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() \
            or torch._C._is_torch_function_mode_enabled():
        return False
    return all(map(untracked, ops))


def _in_turn(fn):
    """``fn``, a step before the last, run with no free block held where it may allocate a
    large tensor outside :func:`~einc.runtime.torch_executor.reuse.spare` (no ``fn.spares``):
    the dead intermediates' memory goes back to the allocator before it."""
    if getattr(fn, "spares", False):
        return fn

    def run(*args):
        blocks = reuse.current()
        if blocks is not None:
            blocks.drop_free()
        return fn(*args)
    return run


def _without_blocks(fn):
    """``fn`` run with no blocks current, the free ones let go first: the last step's result
    is memory nobody has seen, allocated while the call holds no dead memory (where the call
    holds blocks, :data:`~einc.runtime.torch_executor.reuse.FRESH` is current instead)."""
    def run(*args):
        before = reuse.current()
        if before is None:
            return fn(*args)
        before.drop_free()
        reuse.make_current(reuse.FRESH)
        try:
            return fn(*args)
        finally:
            reuse.make_current(before)
    return run


def _interpreted(schedule, n, last_scaled):
    """:func:`unroll`'s ``run``: ``schedule`` (each step's function, operands, result, the
    intermediates it reads last, and whether it is the last step) run by a loop, until the
    call that compiles the same calls (:func:`_source`, written then: most plans never get
    there)."""
    calls, made, holders = [0], [], []

    def run(ops, scale=None):
        if made:
            return made[0](ops, scale)
        calls[0] += 1
        if calls[0] >= CALLS_BEFORE_CODE:
            made.append(_compiled(*_source(schedule, n, last_scaled)))
            for entry in holders:
                if entry.run is run:
                    entry.run = made[0]
            return made[0](ops, scale)
        values = {}
        result = None
        for fn, operands, result, dead, last in schedule:
            args = [ops[v] if v < n else values[v] for v in operands]
            if last and scale is not None:
                values[result] = last_scaled(*args, scale)
            else:
                values[result] = fn(*args)
            del args
            for v in dead:
                del values[v]
        return values[result]
    run.promote = holders.append
    return run


def _source(schedule, n, last_scaled):
    """``(source, names)``: one function making :func:`_interpreted`'s calls of ``schedule``,
    its names bound to the step functions (``step0``, ...) and ``last_scaled`` (``scaled``)."""
    name = lambda v: f"ops[{v}]" if v < n else f"t{v}"  # noqa: E731
    lines = ["def run(ops, scale=None):"]
    env = {"scaled": last_scaled}
    for s, (fn, operands, result, dead, last) in enumerate(schedule):
        env[f"step{s}"] = fn
        args = ", ".join(name(v) for v in operands)
        if last:
            lines += ["    if scale is None:", f"        t{result} = step{s}({args})", "    else:",
                      f"        t{result} = scaled({args}, scale)"]
        else:
            lines.append(f"    t{result} = step{s}({args})")
        lines += [f"    del t{v}" for v in dead]
    lines.append(f"    return t{schedule[-1][2]}")
    return "\n".join(lines) + "\n", env


def _compiled(source, env):
    code = _CODE.get(source)
    if code is None:
        if len(_CODE) >= 4096:
            _CODE.clear()
        code = _CODE.setdefault(source, compile(source, "<einc plan>", "exec"))
    exec(code, env)
    return env["run"]


def scaled(fn):
    """``fn`` with a last positional argument ``scale`` multiplying its result."""
    code = getattr(fn, "__code__", None)
    if code is not None and not code.co_flags & inspect.CO_VARKEYWORDS:     # a plain function: its names
        takes_scale = "scale" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    else:
        try:
            takes_scale = "scale" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_scale = False
    if takes_scale:
        def in_epilogue(*args):
            return fn(*args[:-1], scale=args[-1])
        return in_epilogue

    def after(*args):
        return fn(*args[:-1]) * args[-1]
    return after


def unit_functions(program: Plan, plan: Plan, functions):
    """One function per step of ``program`` (:func:`fuse_plan`'s result) from ``functions``,
    one per step of ``plan``: a fused step runs its parts' functions in turn (the torch
    executor's answer for a fused kernel)."""
    by_result = {step.result: fn for step, fn in zip(plan.steps, functions)}
    return [_composed(step, [by_result[p.result] for p in step.parts]) if step.kind == FUSED
            else by_result[step.result] for step in program.steps]


def _composed(step: FusedStep, fns):
    def run(*args):
        values = dict(zip(step.operands, args))
        for part, fn in zip(step.parts, fns):
            values[part.result] = fn(*[values[v] for v in part.operands])
        return values[step.result]
    return run
