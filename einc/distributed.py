"""Slices of a sliced plan spread over the ranks of a torch.distributed process group.

``einc.distributed.einsum(eq, *operands, memory_limit=N, group=None)`` plans as
:func:`einc.einsum` does (:mod:`einc.planner.slicing`), on the group's first rank; every rank
then builds the same plan from that rank's path, sliced indices and chunks (so a randomized
planner such as cotengra's cannot make the ranks disagree), contracts an even share of
the slices (counts differ by at most one), and all-reduces the partial sums: every rank
returns the full result.  A plan that needs no slicing is one slice, contracted by one
rank.  Every rank must call it with operands of the same shapes, dtypes and values.

Failures: an error on any rank -- planning, or contracting its slices -- is
all-reduced as a flag before the sum, so every rank raises (the failing rank its own
error, the others a :class:`~einc.errors.EincError` naming the failed ranks) instead of
waiting in the sum.  A rank that dies outright is caught by the process group's
timeout (``torch.distributed.init_process_group(timeout=...)``).  Works on gloo (CPU
tensors) and NCCL (CUDA tensors: each rank's operands on its own device; the
accumulator, the failure flags and the planning broadcast live on that device; complex
and 16-bit integer sums are all-reduced in dtypes NCCL has, see :func:`_sum`).  The result
is not differentiable (the collectives are not autograd ops): operands that require
grad under grad mode are refused.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from . import config
from .errors import ArgumentError, EincError
from .planner import plan_for, slicing
from .planner.equation import call_form, parse
from .planner.graph import build
from .planner.options import Options
from .planner.plan import build_plan
from .runtime import dtypes, engine, sliced
from .runtime.cache import LRUCache


def share(num_slices: int, rank: int, world: int) -> tuple[int, int]:
    """``(start, stop)``: rank ``rank``'s contiguous share of ``num_slices`` slices, the
    first ``num_slices % world`` ranks taking one more.

    >>> [share(5, r, 2) for r in range(2)]
    [(0, 3), (3, 5)]
    """
    base, extra = divmod(num_slices, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def einsum(*args, optimize="auto", memory_limit=None, group=None, select=None, timings=None):
    """Contract like :func:`einc.einsum`, the slices shared by the ranks of ``group`` (the
    default process group when None); every rank returns the full result.

    ``timings``, a dict if given, receives this rank's ``slices`` (start, stop),
    ``seconds`` spent contracting them (before the all-reduce) and ``num_slices``.
    """
    # Whatever fails on one rank fails below, with the others, never alone before a
    # collective (the others would wait in it until the group's timeout).
    failure, eq, operands, options, shapes, mine, graph = _read(args, optimize, memory_limit, select)
    if failure is not None and not dist.is_initialized():
        raise failure               # no process group: no rank waits for this one
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device = _device(operands, group)

    path, indices, planner, name, chunks, bound, theirs = _decide(failure, eq, shapes, options, mine, rank,
                                                                  group, device)
    if failure is None and mine != theirs:
        failure = EincError(f"einc.distributed.einsum(): rank {rank}'s operands (shapes {mine[0]}, dtypes "
                            f"{mine[1]}) differ from rank 0's (shapes {theirs[0]}, dtypes {theirs[1]}): every "
                            "rank must pass the same shapes and dtypes")

    acc, seconds = None, 0.0
    start = stop = 0
    try:
        if failure is not None:
            raise failure
        types = tuple(o.dtype for o in operands)
        executor = "triton" if device.type == "cuda" and config.backend() != "torch" else "torch"
        key = (eq.text, tuple(shapes), types, options, device, world, executor, path, indices, planner, chunks, bound)
        plan, runner = _runners.get_or_build(key, lambda: _runner(eq, graph, operands, options, world, executor, path,
                                                                   indices, planner, chunks, bound))
        start, stop = share(plan.slicing.num_slices, rank, world)
        acc = runner.accumulator(operands, summed=True)      # (the ranks' parts are summed)
        t = time.perf_counter()
        runner.add(acc, operands, start, stop)
        seconds = time.perf_counter() - t
    except Exception as e:
        failure = e
    _raise_together(failure, eq, rank, world, device, group)
    if timings is not None:
        timings.update(slices=(start, stop), seconds=seconds, num_slices=plan.slicing.num_slices)
    if acc.dtype == torch.bool:         # logical or, as a sum of counts
        counts = acc.to(torch.int32)
        dist.all_reduce(counts, group=group)
        return counts > 0
    _sum(acc, group)
    return runner.finish(acc)


# A call's sliced plan and its runner, kept per key on every rank (the runner keeps its
# slices' entries), and rank 0's decision per equation, shapes and options: a call that
# came before plans nothing.  Every rank still takes part in the decision's broadcast, so
# a rank whose caches differ from the others' (emptied, or a new process) waits in no
# collective alone.
_runners = LRUCache(64)
_decisions = LRUCache(256)
engine.register("distributed", lambda: _runners.info(), lambda: (_runners.clear(), _decisions.clear()))


def _runner(eq, graph, operands, options, world, executor, path, indices, planner, chunks, bound):
    """``(plan, runner)`` of the decided slicing, its cost checked for ``world`` ranks."""
    result_dtype = dtypes.result_dtype(eq.torch_text, [o.shape for o in operands], [o.dtype for o in operands])
    base = build_plan(graph, eq.text, Options.of(path, None, options.select))
    plan = slicing.sliced_plan(graph, eq.text, base, indices, slicing.memory_limit_of(graph, options.memory_limit),
                               planner, chunks, bound)
    slicing.check_cost(plan, world, executor)
    runner = sliced.Runner(plan, sliced.natural_dtype(plan, result_dtype, [o.dtype for o in operands]),
                           options.select, engine.entry, [o.dtype for o in operands])
    return plan, runner


def _read(args, optimize, memory_limit, select):
    """The call read and checked on this rank: ``(failure, eq, operands, options, shapes,
    mine, graph)``, ``failure`` the error it raised (None for what it left unmade), raised
    later with the other ranks; ``mine``: the operands' shapes and dtypes."""
    operands = args[1:] if args and isinstance(args[0], str) else ()
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    eq = options = shapes = mine = graph = None
    try:
        text, operands = call_form(args)
        eq = parse(text)
        operands = list(operands)
        engine.check_operands(eq, operands)
        if torch.is_grad_enabled() and any(o.requires_grad for o in operands):
            raise ArgumentError("einc.distributed.einsum(): the result is not differentiable (the all-reduce is "
                                "not an autograd op); call it under torch.no_grad() or with detached operands")
        options = Options.of(optimize, memory_limit, select)
        shapes = [tuple(o.shape) for o in operands]
        mine = (shapes, [str(o.dtype) for o in operands])
        graph = build(eq, shapes)
    except Exception as e:
        return e, eq, operands, options, shapes, None, graph
    return None, eq, operands, options, shapes, mine, graph


def _decide(failure, eq, shapes, options, mine, rank: int, group, device) -> tuple:
    """The plan: the first rank's choice of path and sliced indices, on every rank, with its
    operands' shapes and dtypes: ``(path, indices, planner, optimizer, chunks, bound,
    rank 0's shapes and dtypes)``.  A rank whose operands differ fails (a contraction of
    other shapes, all-reduced with the others', would be wrong on every rank)."""
    decision, error = [None], None
    if rank == 0:
        try:
            if failure is not None:
                raise failure
            decision[0] = (*_decisions.get_or_build((eq.text, tuple(shapes), options),
                                                    lambda: _decision(eq, shapes, options)), mine)
        except Exception as e:      # every rank must hear of it, not wait in the broadcast
            error = e
            decision[0] = f"{type(e).__name__}: {e}"
    dist.broadcast_object_list(decision, src=_global_rank(group, 0), group=group,
                               device=device if device.type == "cuda" else None)
    if isinstance(decision[0], str):
        if error is not None:
            raise error
        if failure is not None:
            raise failure
        raise EincError(f"einc.distributed.einsum(): planning failed on rank 0: {decision[0]}")
    return decision[0]


def _decision(eq, shapes, options) -> tuple:
    """``(path, sliced indices, planner, optimizer, chunks, bound)`` of the plan for the call."""
    plan = plan_for(eq, shapes, options)
    s = plan.slicing
    return (plan.path, s.indices if s else (), s.planner if s else "einc", plan.optimizer, s.chunks if s else (),
            s.bound if s else slicing.LIVE)


def _raise_together(failure, eq, rank: int, world: int, device, group) -> None:
    """Raise on every rank where any rank failed: the failing rank its own error, the
    others one naming the failed ranks."""
    failed = torch.zeros(world, dtype=torch.int32, device=device)
    failed[rank] = failure is not None
    dist.all_reduce(failed, group=group)
    if failed.any():
        if failure is not None:
            raise failure
        ranks = [r for r in range(world) if failed[r]]
        raise EincError(f"einc.distributed.einsum(): rank{'s' if len(ranks) > 1 else ''} "
                        f"{', '.join(map(str, ranks))} of {world} failed contracting {eq.text!r}; "
                        "every rank raises")


def _sum(acc, group) -> None:
    """All-reduce ``acc`` (a sum) in place, in a dtype both gloo and NCCL sum: a complex
    accumulator as its real pairs (NCCL has no complex sum), int16 and the unsigned
    16/32-bit types (neither backend sums them) in int64, copied back (an integer sum
    wraps alike modulo the narrower type), uint64 as the int64 of the same bits."""
    if acc.is_complex():
        dist.all_reduce(torch.view_as_real(acc), group=group)
    elif acc.dtype == torch.uint64:
        dist.all_reduce(acc.view(torch.int64), group=group)
    elif acc.dtype in (torch.int16, torch.uint16, torch.uint32):
        wide = acc.to(torch.int64)
        dist.all_reduce(wide, group=group)
        acc.copy_(wide)
    else:
        dist.all_reduce(acc, group=group)


def _device(operands, group) -> torch.device:
    """The device of this rank's collectives: its first operand's, else (no tensor to ask)
    the one the group's backend needs."""
    first = operands[0] if operands else None
    if isinstance(first, torch.Tensor):
        return first.device
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _global_rank(group, rank: int) -> int:
    if group is None:
        return rank
    return dist.get_global_rank(group, rank)


__all__ = ["einsum", "share"]
