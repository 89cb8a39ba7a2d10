"""The slicing einc's slicer chose, remembered beside the path in the path cache's entry.

Under a ``memory_limit``, a path of einc's search (:mod:`einc.planner.search`, past dynamic
programming's reach) is remembered on disk (:mod:`einc.planner.pathcache`); choosing how
to slice it (:func:`einc.planner.slicing.plan`: two candidate paths, each weighed over
thousands of slicings) costs far more than reading it.  So the entry of the search under
the limit also keeps, per bound (``"live"``, ``"intermediate"``: the limit ``"max_input"``
shares the key of its number), the slicing chosen: which candidate path was sliced (the
search's under the limit, or the unlimited search's), that path, and the sliced indices
with their chunks, in the slicer's order, and the figures of that path unsliced and so
sliced (flops, largest intermediate and live peak unsliced; flops, steps run once and
per slice sliced).  A second process builds that sliced plan from them -- the same plan
the slicer's choice gives, steps, slices and notes -- instead of choosing again, and
builds only the slice's plan: the path's own, whose figures these are, is not built.

Remembered only where the slicing met the limit, its choice took :data:`STORE_SECONDS`
or longer, and the search's entry is on disk (a search too short to be remembered leaves
none: the slicing is then chosen again).  Read as the path cache reads (JSON, a regular
file, its safety rules), and used only where every field checks against this network:
the slicer's version (:func:`version`: its figures, so that a change of rule misses),
the candidate's path (it must be the path planned here), indices of this network, each
chunk a whole number from 1 to below its index's size, the figures whole numbers (the
flops, sizes and steps run per slice at least 1, the steps those of the path); the
slicer then checks that the plan so sliced keeps to the limit (its live peak, one pass
over the slice's steps) and that the cost check would not refuse it
(:func:`einc.planner.slicecost.refusal`), unless it refused it when the slicer chose it
(``refused``: choosing again would choose the same).  The figures are estimates and what explain shows: the plan's
steps and its bound are always made from the path and the slicing.  Anything
else is ignored: the slicer chooses again and its choice overwrites the entry.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from . import memory, pathcache, slicebudget, slicecost

SLICER = "einc-slicer-7"        # the slicer's rule (einc.planner.slicing._choose); its figures appended
STORE_SECONDS = pathcache.STORE_SECONDS     # a shorter choice is not stored
LIMITED, UNLIMITED = "limited", "unlimited"     # which candidate path was sliced
FIGURES = 6                     # Remembered.figures


class Remembered(NamedTuple):
    base: str                   # LIMITED or UNLIMITED
    path: tuple                 # that candidate's path
    indices: tuple[int, ...]    # sliced, in the slicer's order
    chunks: tuple[int, ...]     # values per slice of each
    # the path's flops, largest intermediate and live peak unsliced; so sliced, its flops,
    # steps run once and steps run per slice (einc.planner.slicing.sliced_plan's ``known``)
    figures: tuple[int, ...] = ()
    refused: bool = False       # whether the cost check refused it when chosen


def of(base: str, plan) -> Remembered:
    """The slicing of the sliced ``plan`` (einc.planner.slicing's) of candidate ``base``, to remember."""
    s = plan.slicing
    return Remembered(base, plan.path, s.indices, s.chunks, (s.unsliced_flops, s.unsliced_largest, s.unsliced_live,
                                                             s.flops, s.once_steps, s.slice_steps),
                      slicecost.refusal(s) is not None)


def version() -> str:
    """The slicer's name and the figures its choice depends on."""
    cost = slicecost.EXECUTOR_COSTS[slicecost.PLANNING]
    return ":".join(map(str, (SLICER, cost.step_seconds, cost.flop_seconds, memory.FEW_OUTPUTS, memory.LONG_SUM,
                              memory.COPY_WORTH_SPARING, slicebudget.figures())))


def _entry(graph, limit):
    """``(name, version)`` of the path cache's entry of einc's search of ``graph`` under
    ``limit``, numbered as :func:`einc.planner.plan.build_plan` hands it to the search."""
    from . import searchkey  # (as einc.planner.options imports it: only where a search runs)
    inputs = [frozenset(t) for t in graph.inputs]
    return searchkey.entry(inputs, frozenset(graph.output), {i: s or 1 for i, s in enumerate(graph.sizes)}, limit)


def lookup(graph, limit: int, bound: str) -> Remembered | None:
    """The slicing remembered for ``graph`` under ``limit`` and ``bound``, where its
    fields check against ``graph`` (see the module docstring), else None."""
    return recall(graph, limit, bound)[0]


def recall(graph, limit: int, bound: str):
    """``(slicing, searched)``: :func:`lookup`'s slicing, and the path of the search whose
    entry holds it with that search's report (einc.planner.searchreport.remembered), where
    both are there and well-formed, else None: read once for both."""
    from .searchreport import remembered
    t0 = time.perf_counter()
    name, tag = _entry(graph, limit)
    hit = pathcache.load(name, tag, graph.num_operands)
    if hit is None:
        return None, None
    slicings = hit[1].get("slicings")
    found = valid(slicings.get(bound), graph) if isinstance(slicings, dict) else None
    report = remembered(hit[1], time.perf_counter() - t0) if found is not None else None
    return found, (hit[0], report) if report is not None else None


def valid(record, graph) -> Remembered | None:
    """``record`` (one bound's slicing, as read) as a :class:`Remembered` of ``graph``, or
    None where any field is missing, of the wrong type, or names what ``graph`` has not."""
    if not isinstance(record, dict) or record.get("slicer") != version() or record.get("base") not in (LIMITED,
                                                                                                        UNLIMITED):
        return None
    path = pathcache.valid_path(record.get("path"), graph.num_operands)
    indices, chunks, figures = record.get("indices"), record.get("chunks"), record.get("figures")
    if path is None or not isinstance(indices, list) or not isinstance(chunks, list) or not indices or \
            len(indices) != len(chunks) or len(set(indices)) != len(indices):
        return None
    if not isinstance(figures, list) or len(figures) != FIGURES or not all(type(f) is int and f >= 0 for f in figures):
        return None
    if type(record.get("refused", False)) is not bool:
        return None
    # what the cost check reads (einc.planner.slicing.check_cost): a slicing estimated at no
    # flops, or over other steps than the path's (a contraction of k operands runs as k - 1
    # pairwise steps), would pass it unasked
    flops, largest, live, sliced_flops, once, per = figures
    if min(flops, largest, live, sliced_flops, per) < 1 or once + per != sum(max(len(c) - 1, 1) for c in path):
        return None
    sizes = graph.sizes
    if not all(type(i) is int and 0 <= i < len(sizes) for i in indices) or \
            not all(type(c) is int and 1 <= c < sizes[i] for i, c in zip(indices, chunks)):
        return None
    return Remembered(record["base"], path, tuple(indices), tuple(chunks), tuple(figures),
                      record.get("refused", False))


def remember(graph, limit: int, bound: str, chosen: Remembered) -> None:
    """Keep ``chosen`` in the entry of the search of ``graph`` under ``limit`` (none is
    written where that search left no entry), beside the slicings of the other bound."""
    name, tag = _entry(graph, limit)
    hit = pathcache.load(name, tag, graph.num_operands)
    if hit is None:
        return
    path, record = hit
    slicings = record.get("slicings")
    slicings = {b: s for b, s in slicings.items() if b != bound and isinstance(s, dict)} \
        if isinstance(slicings, dict) else {}
    slicings[bound] = {"slicer": version(), "base": chosen.base, "path": [list(c) for c in chosen.path],
                       "indices": list(chosen.indices), "chunks": list(chosen.chunks),
                       "figures": list(chosen.figures), "refused": chosen.refused}
    pathcache.store(name, tag, path, dict(record, slicings=slicings))


__all__ = ["LIMITED", "UNLIMITED", "Remembered", "SLICER", "STORE_SECONDS", "lookup", "of", "recall", "remember",
           "valid", "version"]
