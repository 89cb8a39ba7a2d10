"""Steps too small for the layout choice to repay itself: their layout taken as it comes.

:func:`einc.runtime.torch_executor.ttgt.choose` weighs a step's layouts by the copy-cost
model, in Python, once a process per step signature (:data:`CHOICE_NS` a choice, the
median of the small steps' choices that the networks of ``bench/paths.py`` make); what it
saves is saved on each call.  A plan's one-off work is to repay itself in
:data:`~einc.planner.searchkey.REPAY` calls (the search's allowance counts so), so where
REPAY times the most any layout could save a call (:func:`most_saved`) is less than the
choice's own cost, the step is not weighed: it runs in its direct layout
(:func:`layout`), the first candidate ``choose`` weighs, the one ties keep.

The bound holds for the steps whose tensors all have fewer than ``ttgt.SMALL`` elements
(larger ones are always weighed): their candidates share the group sizes (no index moves
into the batch), so each costs at least the product's least
(``ttgt._product_ns``), and the direct layout at most that, plus its left operand read
along its rows (``ttgt.ROWS_UNIT``), plus a copy of each of its three tensors at the
model's dearest rate per element (:func:`_dearest`).  The rule depends on the step's
indices and sizes and the dtype's size only.
"""

from __future__ import annotations

import functools
import math

from ...planner.searchkey import REPAY
from . import training_layout, ttgt

CHOICE_NS = 50e3        # ns: what a small step's layout choice costs (ttgt.choose, in Python)


class Direct(ttgt.Layout):
    """A direct layout (:func:`layout`): not weighed, for the forward or for training."""


def _dearest(elems: int) -> float:
    """The most ns per float32 element the copy model charges a copy of ``elems`` elements
    (ttgt._planned_copy_ns at its dearest: runs of one element as far apart as the source
    allows, or the innermost index moved with both strides far, and fresh pages)."""
    keep = ttgt.COPY_KEEP + ttgt.SHORT_RUN * (1 + min(elems, ttgt.FAR_MOST) / ttgt.FAR_STEP)
    move = (ttgt.COPY_MOVE + ttgt.SHORT_INNER) * ttgt.CONFLICT
    return max(keep, move) + (ttgt.FRESH if elems >= ttgt.FRESH_FROM else 0.0)


def most_saved(ta, tb, out, sizes, itemsize=4):
    """``(the most ns any layout of ``ta, tb -> out`` could save a call against the direct
    one, the direct one's most ns)``, or None where the step is weighed in full (a tensor
    of ``ttgt.SMALL`` elements or more: its layouts may move indices into the batch)."""
    found = _bound(ta, tb, out, sizes, itemsize)
    return None if found is None else found[:2]


def _bound(ta, tb, out, sizes, itemsize, within=math.inf):
    """:func:`most_saved`'s pair and the direct layout's groups ``(batch, m, n, k)``; None
    as soon as the copies' part of the saving reaches ``within``."""
    size = sizes.__getitem__
    elems = [math.prod(map(size, ta)), math.prod(map(size, tb)), math.prod(map(size, out))]
    if max(elems) >= ttgt.SMALL:
        return None
    scale = itemsize / 4
    if sum(elems) * (ttgt.COPY_KEEP + ttgt.SHORT_RUN) * scale >= within:
        return None         # (every copy's dearest rate is that or more)
    saved = sum([e * _dearest(e) for e in elems]) * scale
    if saved >= within:
        return None
    sa, sb = set(ta), set(tb)
    groups = ([i for i in out if i in sa and i in sb], [i for i in out if i in sa and i not in sb],
              [i for i in out if i in sb and i not in sa], [i for i in ta if i in sb and i not in out])
    dims = [math.prod(map(size, g)) for g in groups]
    least = ttgt._product_ns(*dims, scale)
    saved += ttgt._product_ns(*dims, scale, True, ttgt._k_unit_applies(dims)) - least
    return saved, least + saved, groups


def layout(ta, tb, out, sizes, itemsize=4):
    """The direct layout of a step not worth weighing (:func:`most_saved` times REPAY under
    :data:`CHOICE_NS`), else None: no swap, the batch, left and right groups in ``out``'s
    order (``ttgt.groups``), the summed indices in ``ta``'s, no copy flipped; its ``copies``
    as ``ttgt.cost`` names them, its ``cost`` the bound on its ns (not weighed)."""
    if ttgt.pick is not ttgt._PICK:     # tests replace pick to run other layouts: every step weighed
        return None
    # the rule depends on the indices' places and sizes, not their names (as ttgt.choose's
    # layouts): renamed 0, 1, ... in order of appearance, steps alike but for their names (a
    # circuit's gates, a chain's links) share one answer
    names = tuple(dict.fromkeys([*ta, *tb, *out]))
    place = {i: k for k, i in enumerate(names)}.__getitem__
    found = _direct(tuple(map(place, ta)), tuple(map(place, tb)), tuple(map(place, out)),
                    tuple(map(sizes.__getitem__, names)), itemsize, CHOICE_NS)
    if found is None:
        return None
    name = names.__getitem__
    batch, m, n, k, copies, cost = found
    return Direct(False, tuple(map(name, batch)), tuple(map(name, m)), tuple(map(name, n)), tuple(map(name, k)),
                  copies, "", cost)


@functools.lru_cache(maxsize=4096)
def _direct(ta, tb, out, sizes, itemsize, choice_ns):
    """:func:`layout`'s fields ``(batch, m, n, k, copies, cost)`` of a step renamed 0, 1, ...
    (``sizes``: theirs in order), or None; cleared with ttgt's caches (``ttgt.cache_clear``)."""
    found = _bound(ta, tb, out, sizes, itemsize, choice_ns / REPAY)
    if found is None or REPAY * found[0] >= choice_ns:
        return None
    batch, m, n, k = map(tuple, found[2])
    ones = frozenset([i for i in (*ta, *tb, *out) if sizes[i] == 1])
    live = (lambda order: [i for i in order if i not in ones]) if ones else list
    empty = 0 in map(sizes.__getitem__, ta), 0 in map(sizes.__getitem__, tb)   # nothing to copy
    copies = "l" * (not empty[0] and ttgt._read(ta, (batch, m, k), ones)[0] is not None) + \
        "r" * (not empty[1] and ttgt._read(tb, (batch, k, n), ones)[0] is not None) + \
        "c" * (live((*batch, *m, *n)) != live(out))
    return batch, m, n, k, copies, found[1]


ttgt.clear_with(_direct)


def choose(ta, tb, out, sizes, worth_sparing, itemsize=4, loops=True, free_out=False) -> ttgt.Layout:
    """The step's direct :func:`layout` where it is not worth weighing, else ``ttgt.choose``'s."""
    return layout(ta, tb, out, sizes, itemsize) or ttgt.choose(ta, tb, out, sizes, worth_sparing, itemsize,
                                                               loops=loops, free_out=free_out)


def weighed(lay) -> bool:
    """Whether ``lay`` was weighed (not :class:`Direct`): only then may :func:`for_training`
    take another layout."""
    return not isinstance(lay, Direct)


def for_training(lay, ta, tb, out, sizes, worth_sparing, itemsize=4, free_out=False, final=False) -> ttgt.Layout:
    """``lay`` itself where it is direct (a step too small to weigh is not weighed for
    training either), else ``training_layout.for_training``'s layout (``for_looped``'s for a looped one)."""
    if not weighed(lay):
        return lay
    if lay.outer:       # (a looped layout writes the result it makes: never free_out)
        return training_layout.for_looped(lay, ta, tb, out, sizes, worth_sparing, itemsize, final=final)
    return training_layout.for_training(lay, ta, tb, out, sizes, worth_sparing, itemsize, free_out=free_out,
                                        final=final)


__all__ = ["CHOICE_NS", "Direct", "choose", "for_training", "layout", "most_saved", "weighed"]
