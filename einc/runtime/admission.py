"""Which shapes are planned: an equation's first shapes are; once its shapes keep
changing, a new shape runs torch's own einsum op instead.

einc keys plans by exact shapes.  Real code changes shapes all the time -- a graph
network's edge count differs every batch, a key/value-cached decoder has one more
position every step -- and planning a shape (the graph, the plan, the executor's step
functions) costs several times torch.einsum's whole call, which a shape that is called
only a few times never repays.  So an equation's first :data:`STABLE_SHAPES` shapes (per
canonical equation, options, device, layout, dtypes and ranks: a *family*) are planned
on their first call, as always -- a fixed batch, a last short batch, a few sequence
lengths -- and from then on a call whose shape the family has not planned runs
``torch._VF.einsum``: torch's einsum op itself (never the ``torch.einsum`` attribute,
which a user may have made einc), given, for three or more operands, the path einc
planned for the family's size class (:func:`einc.planner.plan.size_class`), so it pays no path
search where torch.einsum runs one on every call (under a strategy the caller names,
``"optimal"``, ``"greedy"``, ..., the path opt_einsum's search of that strategy finds for
the shape, as torch.einsum would find it).  That is exactly torch.einsum's result
(its ops, its dtype), made a fresh contiguous tensor as einc's results are (with
``layout="any"``, a fresh dense one: torch's order kept where it is dense).

The choice is made per shape (and memory layout: a shape in several layouts counts once
among the 16, and a new layout past them runs torch's op) and never changes: a shape is
planned on its first call or never (while its plan stays in the cache), so the same call gives the same bits every
time, and a ``torch.utils.checkpoint`` recomputation runs the ops its forward ran.
Shapes that are not planned never fill the plan cache, so a long generation does not
evict the plans that recur.  ``EINC_NEW_SHAPES=plan`` plans every shape (the
differential fuzzer runs so, to test einc's executors on every case).

Always planned: an equation's first shapes (above), equations whose plan runs generated
kernels (the kernels are what such an entry is for, and the kernel tests must run them),
calls with a ``memory_limit`` (sliced plans), a ``PathOptimizer`` object, operands of a
size class the family has no path for (three or more operands), operands with a size 0
(a sum over an index of size 0 is zeros in einc, whatever the other operands hold),
narrow integer operands (einc contracts them exactly where the result is int64; torch's
op may wrap), and calls torch refuses
(planning then raises einc's own error, which names the operand, index and sizes).
"""

from __future__ import annotations

import os
import threading

import opt_einsum
import torch

from .. import config
from ..planner.plan import size_class
from .dtypes import INT64_EXACT

_non_overlapping_and_dense = torch.ops.aten.is_non_overlapping_and_dense.default
_einsum = torch._VF.einsum    # torch's einsum op (``torch.einsum`` is its Python front, which a user may replace)
STABLE_SHAPES = 16      # shapes planned per family before new ones run torch's op
MAX_FAMILIES = 16384    # families remembered (each a few hundred bytes); beyond, the oldest is forgotten

_families: dict = {}    # family -> [torch's equation text, {size class: flat path} or None, {shapes planned}]
_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)   # a fork while another thread holds it


def _family(key):
    canonical, options, layout, operands = key
    return canonical, options, operands[0][2], layout, tuple([(len(s), d) for s, d, *_ in operands])


def _dims_class(key):
    return size_class([s for shape, *_ in key[3] for s in shape])


def planned(key, eq, plan, layout="contiguous") -> None:
    """Record that ``key`` was planned (its family's count, and its size class's path), and
    the result layout (``"contiguous"`` or ``"any"``) the family's unplanned shapes take."""
    options = key[1]
    if plan.slicing is not None or options.memory_limit is not None or not _reusable(options.optimize):
        return
    n = plan.num_operands
    if n >= 3 and any(len(c) != 2 for c in plan.path):     # torch takes a path of pairs only
        return
    ordered = n >= 3 and options.optimize is not False     # else torch's left-to-right order is einc's
    # A strategy the caller names ("optimal", "greedy", ...) is asked for each new shape's
    # path (opt_einsum's search, as torch.einsum runs it on every call): no path is kept.
    searched = ordered and isinstance(options.optimize, str) and options.optimize != "auto"
    with _lock:
        family = _families.get(_family(key))
        if family is None:
            while len(_families) >= MAX_FAMILIES:   # the oldest forgotten: it plans 16 shapes again
                del _families[next(iter(_families))]
            paths = options.optimize if searched else {} if ordered else None
            family = _families[_family(key)] = [eq.torch_text, paths, set(), layout]
        if ordered and not searched:
            family[1][_dims_class(key)] = tuple(i for pair in plan.path for i in pair)
        if len(family[2]) < STABLE_SHAPES:      # (a shape in another layout counts once)
            family[2].add(tuple(shape for shape, *_ in key[3]))


def _reusable(optimize) -> bool:
    """A strategy name, False (left to right) or an explicit path: the same for every shape."""
    return optimize is False or isinstance(optimize, (str, tuple))


def unplanned(key, operands):
    """torch's einsum of ``operands`` where ``key`` is a shape its family does not plan
    (see the module's docstring), else None (plan it)."""
    family = _families.get(_family(key))
    if family is None or len(family[2]) < STABLE_SHAPES or config.new_shapes() == "plan":
        return None
    for shape, dtype, *_ in key[3]:
        # Planned: a sum over an index of size 0 is zeros, where torch's op may give NaN
        # beside an inf; narrow integers are contracted exactly, where torch's op may wrap.
        if 0 in shape or dtype in INT64_EXACT:
            return None
    text, paths, _, layout = family
    try:
        if paths is None:
            result = _einsum(text, list(operands))
        elif isinstance(paths, str):        # the caller's strategy: this shape's path
            path = opt_einsum.contract_path(text, *[o.shape for o in operands], shapes=True, optimize=paths)[0]
            result = _einsum(text, list(operands), path=[i for pair in path for i in pair])
        else:
            path = paths.get(_dims_class(key))
            if path is None:        # a size class without a path: plan it (and so find one)
                return None
            result = _einsum(text, list(operands), path=list(path))
    except Exception:       # noqa: BLE001 - planning raises einc's own error for the same call
        return None
    return _fresh(result, operands) if layout == "contiguous" else _dense(result, operands)


def einsum(text: str, operands):
    """torch's einsum of ``operands``, as torch returns it (a sparse layout, say)."""
    return _einsum(text, list(operands))


def fresh_einsum(text: str, operands):
    """torch's einsum of ``operands`` as a fresh contiguous tensor."""
    return _fresh(_einsum(text, list(operands)), operands)


def _fresh(result, operands):
    """``result`` as a contiguous tensor that shares no memory with an operand (torch's einsum
    may return a permuted view, or a view of an operand: ``ij->ji``, ``ii->i``)."""
    result = result.contiguous()
    if result.numel() and any(_is_alias_of(result, o) for o in operands):
        result = result.clone()
    return result


def _dense(result, operands):
    """``result`` as a dense, non-overlapping tensor that shares no memory with an operand,
    in torch's order where it is one (``layout="any"``): torch's einsum may return a
    permuted view of its last product (kept), or a view of an operand (copied, with its
    strides where it is dense: ``ij->ji``; a diagonal, ``ii->i``, contiguous)."""
    if not _non_overlapping_and_dense(result):
        return _fresh(result, operands)
    if result.numel() and any(_is_alias_of(result, o) for o in operands):
        return result.clone()
    return result


# Whether two tensors share a storage, compared as storages, not data pointers: fake tensors
# (torch.compile's fake kernel probes the result dtype on them; shape inference runs einsum
# under FakeTensorMode) have no data pointer, and reading one raises while dynamo traces.
_alias_of = getattr(torch._C, "_is_alias_of", None) or (
    lambda a, b: a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_unwrapped = torch._C._functorch.get_unwrapped


def _innermost(t):
    """``t`` without its torch.func wrappers (vmap's, grad's): the alias test on a wrapper
    says no for a view torch's einsum made of a wrapped operand (``vmap`` of ``ij->ij``
    past the planned shapes returned a view of the caller's tensor)."""
    while _wrapped(t):
        t = _unwrapped(t)
    return t


def _is_alias_of(a, b) -> bool:
    return _alias_of(_innermost(a), _innermost(b))


def clear() -> None:
    with _lock:
        _families.clear()


__all__ = ["planned", "unplanned", "clear", "STABLE_SHAPES"]
