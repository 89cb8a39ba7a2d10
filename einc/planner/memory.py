"""The live-memory model: what a plan holds at once while its steps run.

The live bound that ``memory_limit`` sets (:mod:`einc.planner.slicing`) counts, step by
step, the intermediates alive together, each step's output and the copies the step makes
inside itself (:func:`step_copies`, the torch executor's copy model, whose thresholds
:mod:`einc.runtime.torch_executor` follows); :func:`live_peak` is the most of it at any
moment.  Steps whose operands hold no sliced index run once, before the slice loop
(:func:`hoisting`), and their results stay alive through every slice.  Pure: no torch.
"""

from __future__ import annotations

import functools
import math
import operator


def hoisting(steps, inputs, num_operands, sliced, below=None):
    """The order one call runs ``steps`` in when ``sliced`` indices are fixed per slice, and
    the hoisted results kept alive across the slice loop (the ``roots``): the steps whose
    operands hold no sliced index run once, before the loop, root by root; the rest run
    per slice.  Without a sliced index nothing is hoisted.  ``below``: per step, the set
    of the indices of the operands under it, where the caller keeps it."""
    sliced = set(sliced)
    if not sliced:
        return tuple(steps), ()
    invariant = [sliced.isdisjoint(t) for t in inputs]
    if below is None:
        for step in steps:
            invariant.append(all(invariant[v] for v in step.operands))
    else:
        invariant += [sliced.isdisjoint(b) for b in below]
    roots = tuple(sorted({v for step in steps if not invariant[step.result]
                          for v in step.operands if v >= num_operands and invariant[v]}))
    # Each root's subtree (the steps that make it), found from the root down: the subtrees
    # of a contraction tree's roots are disjoint.
    making = {step.result: step for step in steps}
    root_of = {}
    for r in roots:
        stack = [r]
        while stack:
            v = stack.pop()
            if v in making:
                root_of[v] = r
                stack.extend(making[v].operands)
    under = {r: [] for r in roots}
    for st in steps:
        if st.result in root_of:
            under[root_of[st.result]].append(st)
    order = [st for r in roots for st in under[r]]
    return tuple(order) + tuple(st for st in steps if not invariant[st.result]), roots


# The torch executor's copy model, which the live bound counts (step_copies) and the torch
# executor follows (einc.runtime.torch_executor imports these):
# - a contraction with at most FEW_OUTPUTS outputs per batch element, each a sum of at
#   least LONG_SUM terms, runs over blocks of the sum (runtime/torch_executor/blocked.py),
#   as multiply-and-sum where no block divides it, as one matrix product in 16-bit floats;
#   counted as the multiply-and-sum, the most of the three;
FEW_OUTPUTS = 16
LONG_SUM = 4096
# - an operand may be broadcast over a batch index of the other's own and copied expanded
#   (einc.runtime.torch_executor.ttgt) only where the larger operand has COPY_WORTH_SPARING elements or
#   more and the expanded copy at most half of it.
COPY_WORTH_SPARING = 1 << 16


def step_copies(step, sizes, final: bool, sliced=()) -> int:
    """The most elements ``step`` may allocate inside itself at once, beyond its output
    (the torch executor's copies; the Triton executor makes none), with the ``sliced``
    indices fixed (size 1 in ``sizes``, absent from the slice's plan).  Counted, at the
    step's fullest moment:

    - a matrix product (a ``contract`` step): a copy of each input laid out for ``mm``
      (a permuted, or strided, view that does not read as matrices is copied, by the
      reshape or by ``mm`` itself); where an input has ``2**16`` elements or more, also
      half of it, for the other input broadcast over a batch index of its own and copied
      expanded (:mod:`einc.runtime.torch_executor.ttgt` allows no larger expanded copy);
    - a matrix product with few outputs per batch element (one, or at most
      ``FEW_OUTPUTS`` sums of ``LONG_SUM`` terms or more; :func:`counted_as_mul_sum`): also
      the elementwise product of a multiply-and-sum before its sum;
    - ``dot`` and ``product`` steps: the sum of each input holding a summed index over
      the indices the other lacks (a new tensor of the indices it keeps: the sum reads the
      input, a view, where it is); for ``dot``, the elementwise product of the inputs
      before the sum;
    - the last step of an entry (``final``): the permuted contiguous copy of its result
      while the raw one is alive -- made after the inputs' copies are freed, so the
      larger of the two counts.

    The step's kind is the slice's (the sliced indices left out), as the slice's plan has
    it.  Not counted: an input converted for a matrix product (bool -> int64, an integer
    widened to an int64 sum, a 16-bit float to float32 in a slice) and then copied again
    for ``mm``."""
    if not isinstance(sliced, (set, frozenset)):
        sliced = set(sliced)

    def size(term):
        return math.prod([sizes[i] for i in set(term)])
    last = size(step.output) if final else 0
    if len(step.inputs) == 1:
        return last
    ta, tb = step.inputs
    a, b = (set(ta) - sliced, set(tb) - sliced) if sliced else (set(ta), set(tb))
    summed = set(step.summed) - sliced
    shared = summed & a & b
    out = set(step.output) - sliced
    if shared and not out <= a & b:       # a matrix product
        sums = counted_as_mul_sum(size(out - (a & b)), size(shared))
        copies = counted_copies(size(ta), size(tb), True, True, True, size(out | shared) if sums else 0)
    else:
        copies = counted_copies(size(a - (summed - b)), size(b - (summed - a)), bool(summed.intersection(ta)),
                                bool(summed.intersection(tb)), False, size(a & b) if shared else 0)
    return max(copies, last)


def counted_as_mul_sum(outputs: int, terms: int) -> bool:
    """Whether a matrix product with ``outputs`` elements per batch element (its own kept
    indices) and sums of ``terms`` is counted (and priced, :mod:`einc.planner.objective`)
    as a multiply-and-sum: one output, which the torch executor runs so, or few outputs of
    long sums, which it runs over blocks of the sum (a batch of matrix products, whose
    partial sums hold fewer elements than the elementwise product and take less time), as
    multiply-and-sum where no block divides the sum, and as one matrix product in 16-bit
    floats (runtime/torch_executor/blocked.py)."""
    return outputs == 1 or (outputs <= FEW_OUTPUTS and terms >= LONG_SUM)


def counted_copies(na: int, nb: int, holds_a: bool, holds_b: bool, matrix: bool, product: int) -> int:
    """:func:`step_copies`' count of a two-operand step from its parts, where the planner's
    objective (:mod:`einc.planner.objective`) also takes it: operands of ``na`` and ``nb``
    elements; for a matrix product (``matrix``) both laid out for ``mm`` (the larger again
    in half where it is worth sparing) and ``product`` the elementwise product's elements
    where it runs as multiply-and-sum, else 0; otherwise each operand holding a summed
    index (``holds_a``, ``holds_b``) summed, and ``product`` a dot's elementwise product."""
    if matrix:
        return na + nb + (max(na, nb) // 2 if max(na, nb) >= COPY_WORTH_SPARING else 0) + product
    return (na if holds_a else 0) + (nb if holds_b else 0) + product


def _lives(rows, sizes, sliced=(), over=-1, memo=None, finals=(), kept=()):
    """Per step of ``rows`` (:func:`timeline`'s, in the order the steps run), the elements
    alive at its fullest moment and the values behind them: ``(elements, value ids)``, the
    values only where the elements exceed ``over``.  Counted: the intermediates alive (its
    inputs, other branches' pending results), its output and the copies it makes inside
    itself (:func:`step_copies`, with ``sliced`` indices taken one value at a time; a step
    whose result is in ``finals`` is an entry's last).  An intermediate lives from the step
    that makes it until the step that consumes it; operands (ids below the number of
    operands) are the caller's tensors, or views of them, and cost nothing but their
    copies; the ``kept`` values (hoisted results) are never freed.  ``memo``: a dict kept
    by a caller that weighs many sizes and slicings of the same steps
    (:mod:`einc.planner.slicing`), where each step's output and copies are kept by what
    they depend on: the sizes of the step's own indices, which of them are ``sliced``, and
    whether it is a last step."""
    keyed, memo = _keyed(sizes, sliced), {} if memo is None else memo
    live, total = {}, 0
    for step, own, consumed in rows:
        final = step.result in finals
        key = (step.result, final, own(keyed))
        found = memo.get(key)
        if found is None:
            found = memo[key] = _step_elements(step, sizes, final, sliced)
        out, copies = found
        now = total + out + copies
        yield now, ((*live, *step.operands, step.result) if now > over else ())
        for v in consumed:
            if v not in kept:
                total -= live.pop(v)
        live[step.result] = out
        total += out


def moments(rows, sizes, sliced=(), memo=None, finals=(), kept=()) -> list:
    """The elements of :func:`_lives`' moments alone, in one list (the values behind them
    not kept): what a peak and its excess over a limit are read from."""
    keyed, memo = _keyed(sizes, sliced), {} if memo is None else memo
    outs, total, found = {}, 0, []
    for step, own, consumed in rows:
        final = step.result in finals
        key = (step.result, final, own(keyed))
        got = memo.get(key)
        if got is None:
            got = memo[key] = _step_elements(step, sizes, final, sliced)
        out, copies = got
        found.append(total + out + copies)
        for v in consumed:
            if v not in kept:
                total -= outs.pop(v)
        outs[step.result] = out
        total += out
    return found


def timeline(steps, num_operands, memo=None) -> dict:
    """``steps`` as :func:`_lives` and :func:`moments` read them, by result id: ``(step,
    own, consumed)``, a reader of the step's own indices' entries and the intermediates it
    consumes (each consumed by one step, whatever order the steps run in).  ``memo``
    keeps the readers, per step."""
    memo = {} if memo is None else memo
    found = {}
    for step in steps:
        own = memo.get(step.result)      # (a memo serves one plan's steps: a result id names a step)
        if own is None:
            own = memo[step.result] = _reader(set(step.output).union(*step.inputs))
        found[step.result] = step, own, tuple(v for v in step.operands if v >= num_operands)
    return found


def _keyed(sizes, sliced):
    """``sizes`` with the ``sliced`` indices (one value at a time) read as -1: a step's own
    entries of it key its output and copies."""
    keyed = dict(sizes) if isinstance(sizes, dict) else list(sizes)
    for i in sliced:
        keyed[i] = -1
    return keyed


def _reader(indices):
    """A function reading ``indices``' entries of a sequence at once (a tuple, or one entry)."""
    return operator.itemgetter(*sorted(indices)) if indices else (lambda _: ())


def _step_elements(step, sizes, final, sliced):
    return math.prod([sizes[i] for i in step.output]), step_copies(step, sizes, final, sliced)


def live_peak(steps, sizes, num_operands, inputs=(), sliced=(), dropped=None, memo=None, below=None) -> int:
    """The most elements alive at once when ``steps`` run: intermediates, the last step's
    result included, and the copies steps make inside themselves (:func:`_lives`), with
    ``sliced`` indices of the graph's ``inputs`` cut per slice (hoisted steps first,
    their results alive throughout; see :func:`hoisting`), of which the ``dropped`` ones
    (default: all) take one value per slice, the others a chunk (its size in ``sizes``):
    what ``memory_limit`` bounds.  ``memo`` and ``below`` as :func:`_lives` and
    :func:`hoisting` take them, for a caller that weighs many slicings of ``steps``."""
    order, roots = hoisting(steps, inputs, num_operands, sliced, below)
    finals = set(roots) | ({order[-1].result} if order else set())
    dropped = sliced if dropped is None else dropped
    return max(moments(timeline(order, num_operands, memo).values(), sizes, dropped, memo, finals, set(roots)),
               default=0)


def peak_and_excess(steps, sizes, num_operands, inputs, sliced, limit, memo=None, below=None) -> tuple[int, int]:
    """``(peak, excess)`` of ``steps`` with the ``sliced`` indices taken one value per slice
    (size 1 in ``sizes``): :func:`live_peak`, and the sum of what each moment holds beyond
    ``limit`` (what the slicer's cuts weigh); ``memo`` and ``below`` as it takes them."""
    order, roots = hoisting(steps, inputs, num_operands, sliced, below)
    finals = set(roots) | ({order[-1].result} if order else set())
    peak = excess = 0
    for now in moments(timeline(order, num_operands, memo).values(), sizes, sliced, memo, finals, set(roots)):
        peak = max(peak, now)
        if now > limit:
            excess += now - limit
    return peak, excess


def shared_peaks(inputs, output, sizes, path, limit) -> dict:
    """A memo of :func:`peak_and_excess` per set of indices sliced one value at a time, for
    the network ``inputs -> output`` (``sizes``: by index, a dict or a sequence), its linear
    ``path`` and ``limit``: the same dict for the same arguments, for the last few.  The
    search ranks its candidate paths as sliced (:mod:`einc.planner.objective`) and the
    slicer (:mod:`einc.planner.slicing`) then slices two of them, over many of the same
    slicings: the moments weighed once serve both."""
    named = sorted(sizes.items()) if isinstance(sizes, dict) else list(enumerate(sizes))
    return _shared((tuple(frozenset(t) for t in inputs), frozenset(output), tuple(named), tuple(map(tuple, path)),
                    limit))


@functools.lru_cache(maxsize=8)
def _shared(key) -> dict:
    return {}


def below_steps(steps, inputs) -> list:
    """Per step, the set of the indices of the operands under it (:func:`hoisting`'s ``below``)."""
    below = [frozenset(t) for t in inputs]
    for step in steps:
        below.append(frozenset().union(*(below[v] for v in step.operands)))
    return below[len(inputs):]


__all__ = ["FEW_OUTPUTS", "LONG_SUM", "COPY_WORTH_SPARING", "counted_copies", "counted_as_mul_sum", "step_copies",
           "moments", "timeline", "live_peak", "hoisting", "below_steps", "peak_and_excess", "shared_peaks"]
