"""Running a sliced plan: every slice through one inner cache entry, into an accumulator.

The slicing itself (which indices, in what chunks, the live-memory bound) is planned in
:mod:`einc.planner.slicing`; this module runs it.  :class:`Runner` runs a sliced plan, or
a range of its slices (:mod:`einc.distributed` spreads the ranges over ranks); steps whose
operands hold no sliced index run once per call, before the slice loop.
"""

from __future__ import annotations

import itertools
import logging
import math
import sys
import time

import torch

from .. import config
from ..planner import plan_for
from ..planner.equation import parse, text_of
from ..planner.options import ANY, Options
from ..planner.plan import Plan, build_plan
from ..planner.slicecost import time_text
from ..planner.slicing import check_cost, hoisting, linear_path
from .dispatch import Entry
from .dispatch import build_entry as _build_entry
from .dtypes import FLOAT32_OF, WIDE_UNSIGNED, in_int64, widened
from .select import Choice
from .torch_executor import step_functions


def accumulator_dtype(dtype):
    """The dtype a sliced result is summed in: float32 for 16-bit and 8-bit floats (torch
    has no addition for the latter), complex64 for complex32, int64 for the unsigned
    integers wider than 8 bits (torch has no addition for them; int64 wraps to the same
    bits), the result's own otherwise."""
    return _ACCUMULATORS.get(dtype, dtype)


_FLOAT8 = [getattr(torch, name) for name in dir(torch) if name.startswith("float8_")]
_ACCUMULATORS = {**FLOAT32_OF, **dict.fromkeys(_FLOAT8, torch.float32),
                 **{dtype: torch.int64 for dtype in WIDE_UNSIGNED}}
_NO_ADD = frozenset((*_FLOAT8, *WIDE_UNSIGNED))     # parts made the accumulator's dtype before add_


def natural_dtype(plan: Plan, result_dtype, operand_dtypes):
    """The sliced result's dtype: torch.einsum's (``result_dtype``), or where torch cannot
    say (None), what einc's torch executor gives the same path unsliced (int64 for
    integers whose sum torch itself trips on)."""
    if result_dtype is not None:
        return result_dtype
    return step_functions(build_plan(plan.graph, plan.equation, Options.of(plan.path)), operand_dtypes)[1]


_VIEWS_KEPT = 4096       # at most this many views of one operand are kept through a call (Runner.add)


class Runner:
    """Runs the slices of a sliced :class:`~einc.planner.plan.Plan` through the engine's entry for
    one slice (``entry_of(equation, operands, options)``), into an accumulator."""

    def __init__(self, plan: Plan, result_dtype, select, entry_of, operand_dtypes=()):
        s = plan.slicing
        g = plan.graph
        self.plan = plan
        self.slicing = s
        self.eq = parse(s.text)
        # where no sliced index is summed, each element is one slice's: written, not added
        # (float8 has no addition; a -0.0 stays -0.0)
        self.sums = bool(set(s.indices) - set(g.output))
        # each slice's result is only added into the accumulator: in the order its plan writes it
        self.options = Options.of(plan.path, None, select, ANY)
        position = {i: j for j, i in enumerate(s.indices)}
        chunked = {i for i, c in zip(s.indices, s.chunks) if c > 1}
        # (dimension, sliced index's position, whether it is chunked: narrowed, not selected), last dims first
        self.operand_dims = [sorted(((d, position[i], i in chunked) for d, i in enumerate(t) if i in position),
                                    reverse=True) for t in g.inputs]
        self.output_dims = sorted(((d, position[i], i in chunked) for d, i in enumerate(g.output) if i in position),
                                  reverse=True)
        self.shape = tuple(g.sizes[i] for i in g.output)
        self.result_dtype = result_dtype
        self.entry_of = entry_of
        self.entry = None           # the (first) slice's cache entry, once a slice ran
        self.entries = {}           # chunk lengths -> the slice entry for them (a last, shorter chunk has its own)
        self.in_int64 = in_int64(operand_dtypes, result_dtype)     # narrow integers contracted in int64
        # 16-bit floats: each slice's steps widen their inputs to float32 (complex32: complex64)
        kinds = set(operand_dtypes)
        self.half = len(kinds) == 1 and result_dtype in kinds and result_dtype in FLOAT32_OF
        self._hoist(plan)

    def _hoist(self, plan: Plan) -> None:
        """Split the slice's steps: those whose operands hold no sliced index run once per
        call (:meth:`hoisted`); the rest, over the remaining operands and the hoisted
        results they consume (the ``roots``), run per slice."""
        g, n, sliced = plan.graph, plan.num_operands, set(self.slicing.indices)
        dropped = {i for i, c in zip(self.slicing.indices, self.slicing.chunks) if c == 1}
        order, roots = hoisting(plan.steps, g.inputs, n, sliced)
        indices = [tuple(i for i in t if i not in dropped) for t in g.inputs] + [st.output for st in plan.steps]
        leaves = {v: {v} for v in range(n)}
        for step in plan.steps:
            leaves[step.result] = set().union(*(leaves[v] for v in step.operands))
        self.roots = []             # (value id, its equation, its leaf operands, its linear path)
        for r in roots:
            ops = sorted(leaves[r])
            steps = [st for st in plan.steps if st.result <= r and leaves[st.result] <= leaves[r]]
            text = text_of([indices[v] for v in ops], indices[r])
            self.roots.append((r, parse(text), ops, linear_path(ops, steps)))
        hoisted = set().union(*(leaves[r] for r in roots)) if roots else set()
        self.rest = [v for v in range(n) if v not in hoisted] + list(roots)
        steps = order[sum(len(path) for *_, path in self.roots):]      # the per-slice steps
        text = text_of([indices[v] for v in self.rest], [i for i in plan.graph.output if i not in dropped])
        self.eq = parse(text)
        self.options = Options.of(linear_path(self.rest, steps), None, self.options.select, ANY)
        self.root_entries = [None] * len(self.roots)

    def hoisted(self, operands):
        """The hoisted results, one per root, computed once per call."""
        values = {}
        for k, (r, eq, ops, path) in enumerate(self.roots):
            args = self._exact([operands[v] for v in ops])
            if self.root_entries[k] is None:
                self.root_entries[k] = self.entry_of(eq, args, Options.of(path, None, self.options.select, ANY))
            values[r] = self.root_entries[k].run(args)
        return values

    def _exact(self, tensors):
        """``tensors`` in int64 where the call's operands are contracted so
        (:func:`~einc.runtime.dtypes.in_int64`): a slice's smaller equation would keep
        torch's narrow dtype (a summed index of size 1 there is squeezed, not summed) and
        wrap before the int64 sum.  A slice's views are widened per slice and freed with
        it; an operand no slice cuts, once per call (:meth:`add`): it is read whole by
        every slice, so the copy is alive at each slice's peak either way."""
        return widened(tensors) if self.in_int64 else tensors

    def _slice_entry(self, ops):
        """The entry that runs one slice: the engine's (its plan cache), or for 16-bit floats
        one of the runner's own, whose steps each widen their inputs to float32 as they read
        them (``widen``, on the torch executor), so that the slice's part of a sum reaches
        the float32 accumulator unrounded: one chunk of a sum may overflow float16 where the
        whole does not (inf - inf: NaN across slices), and a slice may multiply what torch
        sums first (``,aa->`` sliced on ``a``).  The copies are a step's inputs, as the
        live bound counts them; nothing is widened whole."""
        if not self.half:
            return self.entry_of(self.eq, ops, self.options)
        plan = plan_for(self.eq, [o.shape for o in ops], self.options)
        return _build_entry(plan, ops, None, self.options.select, widen=True, layout=ANY)

    def accumulator(self, operands, summed: bool = False):
        """Zeros the slices add into: of :func:`accumulator_dtype` where a sliced index is
        summed (parts of one element's sum added together) or the accumulator is ``summed``
        with others (:mod:`einc.distributed`'s ranks); where every sliced index is kept,
        each element is one slice's, rounded once however it is stored: the result's
        dtype, no second tensor to convert (a float32 one beside a float16 result would be
        three times the result's memory)."""
        summed = summed or self.sums
        dtype = accumulator_dtype(self.result_dtype) if summed or self.result_dtype in WIDE_UNSIGNED else \
            self.result_dtype
        return torch.zeros(self.shape, dtype=dtype, device=operands[0].device)

    def add(self, acc, operands, start: int, stop: int) -> None:
        """Contract slices ``start .. stop-1`` and add each into ``acc`` (or write it into its
        place, for a sliced output index).  A run estimated longer than a few seconds
        reports progress (:class:`Progress`); an interrupt (Ctrl-C) leaves
        ``acc`` part-summed, so callers hand out only an accumulator of their own making,
        once every slice ran.

        The loop does per slice only what depends on it: the slices are walked in order
        (the last index fastest), and each operand's view of a slice -- a ``select`` for
        an index taken one value at a time, a ``narrow`` for a chunk -- is made once per
        call for each chunk of the sliced indices it holds and kept (views hold no memory)."""
        if start >= stop:
            return
        roots = self.hoisted(operands)
        if self.in_int64:       # an operand no slice cuts: widened once per call, not once per slice
            operands = [o if self.operand_dims[v] else widened([o])[0] for v, o in enumerate(operands)]
        s = self.slicing
        estimate = s.seconds * (stop - start) / s.num_slices
        progress = Progress(stop - start, estimate, self.plan.equation) \
            if estimate > PROGRESS_SECONDS else None
        chunks, sizes, entries, n = s.chunks, s.sizes, self.entries, len(operands)
        partial = any(d % c for d, c in zip(sizes, chunks))     # a last, shorter chunk: its own entry

        def view(tensor, dims, pos):
            for d, j, chunk in dims:
                first = pos[j] * chunks[j]
                tensor = tensor.narrow(d, first, min(chunks[j], sizes[j] - first)) if chunk else \
                    tensor.select(d, first)
            return tensor
        slots = [(v, self.operand_dims[v] if v < n else None) for v in self.rest]
        caches = [({} if dims and self._few(dims) else None) for _, dims in slots]
        out_cache = {} if self.output_dims and self._few(self.output_dims) else None
        entry = self.entry if not partial else None
        try:
            for pos in itertools.islice(itertools.product(*map(range, s.counts)), start, stop):
                ops = []
                for (v, dims), cache in zip(slots, caches):
                    if dims is None:
                        ops.append(roots[v])
                    elif not dims:
                        ops.append(operands[v])
                    elif cache is None:
                        ops.append(view(operands[v], dims, pos))
                    else:
                        key = tuple([pos[j] for _, j, _ in dims])
                        found = cache.get(key)
                        if found is None:
                            found = cache[key] = view(operands[v], dims, pos)
                        ops.append(found)
                ops = self._exact(ops)
                if entry is None:
                    lengths = tuple([min(c, d - p * c) for p, c, d in zip(pos, chunks, sizes)])
                    entry = entries.get(lengths)
                    if entry is None:
                        entry = entries[lengths] = self._slice_entry(ops)
                        self.entry = self.entry or entry
                part = entry.run(ops)
                if out_cache is None:
                    target = view(acc, self.output_dims, pos)
                else:
                    key = tuple([pos[j] for _, j, _ in self.output_dims])
                    target = out_cache.get(key)
                    if target is None:
                        target = out_cache[key] = view(acc, self.output_dims, pos)
                if not self.sums:
                    target.copy_(part)
                else:
                    if acc.dtype != part.dtype and part.dtype in _NO_ADD:   # torch cannot mix them in add_
                        part = part.to(acc.dtype)
                    target.add_(part)
                del part, target, ops       # this slice's part is freed before the next slice runs
                if partial:
                    entry = None
                if progress is not None:
                    progress.advance()
        finally:
            if progress is not None:
                progress.close()

    def _few(self, dims) -> bool:
        """Whether the views of one operand over ``dims`` are few enough to keep for a call."""
        return math.prod(self.slicing.counts[j] for _, j, _ in dims) <= _VIEWS_KEPT

    def finish(self, acc):
        return acc if acc.dtype == self.result_dtype else acc.to(self.result_dtype)

    def __call__(self, operands):
        acc = self.accumulator(operands)
        self.add(acc, operands, 0, self.slicing.num_slices)
        return self.finish(acc)


_legacy_batched = torch._C._functorch.is_legacy_batchedtensor    # torch.autograd's is_grads_batched


def build_entry(plan: Plan, operands, result_dtype, select, entry_of, unsliced=None):
    """The plan cache's entry for a sliced plan: runs every slice with one inner entry;
    what runs each step (``backend``, ``choices``) is the inner entry's once it ran.
    Operands batched by ``torch.autograd.grad(..., is_grads_batched=True)`` (a batched
    backward, ``jacobian(vectorize=True)``) run ``unsliced(operands)`` instead: the plan's
    path unsliced (each slice's sum is added in place into the result, which such a batch
    cannot do; nor has torch's einsum op a rule for it)."""
    kernels = operands[0].device.type == "cuda" and config.backend() != "torch" and \
        operands[0].dtype not in FLOAT32_OF        # (16-bit float slices run the torch executor)
    check_cost(plan, executor="triton" if kernels else "torch")
    runner = Runner(plan, natural_dtype(plan, result_dtype, [o.dtype for o in operands]), select, entry_of,
                    [o.dtype for o in operands])
    entry = Entry(plan, None, "torch", [Choice("torch", "")] * len(plan.steps))

    def run(ops, scale=None):
        if unsliced is not None and any(_legacy_batched(o) for o in ops):
            out = unsliced(ops)     # batched gradients (is_grads_batched): add_ into a slice cannot take them
            return out if scale is None else out * scale
        out = runner(ops)
        entry.backend, entry.choices, entry.inner = runner.entry.backend, runner.entry.choices, runner.entry
        return out if scale is None else out * scale    # as the unrolled program scales a torch step
    entry.run = run
    return entry


log = logging.getLogger("einc")
PROGRESS_SECONDS = 3.0      # a run estimated longer than this reports progress


class Progress:
    """Progress of a long sliced run: a tqdm bar where stderr is a terminal, else the
    ``einc`` logger (a line at the start, about every 10% and at the end).  Used only
    for runs estimated longer than :data:`PROGRESS_SECONDS`."""

    def __init__(self, total: int, estimate: float, equation: str):
        what = equation if len(equation) <= 40 else equation[:37] + "..."
        self.total, self.done, self.what = total, 0, what
        self.bar = None
        self.t0 = time.perf_counter()
        self.step = max(1, total // 10)
        if sys.stderr is not None and getattr(sys.stderr, "isatty", lambda: False)():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=f"einc {what}", unit="slice", leave=False, file=sys.stderr)
        else:
            log.info("einc: contracting %s: %d slices, estimated %s", what, total, time_text(estimate))

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.done % self.step < n or self.done == self.total:
            log.info("einc: %s: %d / %d slices, %s", self.what, self.done, self.total,
                     time_text(time.perf_counter() - self.t0))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = ["Runner", "build_entry", "accumulator_dtype", "natural_dtype", "Progress", "PROGRESS_SECONDS"]
