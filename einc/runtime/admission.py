"""Which plan-cache misses are planned: a new shape of an equation einc has already
planned runs torch's own einsum until the shape proves that it comes back.

einc keys plans by exact shapes.  Real code changes shapes all the time -- a graph
network's edge count differs every batch, a key/value-cached decoder has one more
position every step -- and planning a shape (the graph, the plan, the executor's step
functions) costs several times torch.einsum's whole call, which a shape that is called
only a few times never repays.  So the plan cache admits a shape by frequency (as the
"doorkeeper" of frequency-based caches does): a call whose shape is new to a known
equation (the same canonical equation, options, device, layout, dtypes and ranks) runs
``torch._VF.einsum`` -- torch's einsum op itself, never the ``torch.einsum`` attribute --
given, for three or more operands, the path einc planned for the equation's first
shape, so it pays no path search (torch.einsum runs one on every call).  That is
exactly torch.einsum's result (its ops, its dtype), made a fresh contiguous tensor as
einc's results always are.  A shape is planned on its second call while its equation
has been called with at most :data:`STABLE_SHAPES` shapes (a fixed batch, a last short
batch), and on its :data:`VARYING_CALLS`-th call once the equation has shown more (its
shapes vary: a decoder calls each new length once per layer, a few times, and never
again).  Planned shapes run from the cache from then on; shapes that do not come back
never fill it, so a long generation does not evict the plans that recur.

Planned on the first call as before: an equation's first shape, equations whose plan
runs generated kernels (the kernels are what such an entry is for, and the kernel tests
must run them), calls with a
``memory_limit`` (sliced plans), a ``PathOptimizer`` object, operands of another size
class (three or more operands, where the path depends on the sizes: see
:func:`einc.plan.size_class`), and calls torch refuses (planning then raises einc's own
error, which names the operand, index and sizes).
"""

from __future__ import annotations

import threading

import torch

from ..plan import size_class

_einsum = torch._VF.einsum    # torch's einsum op (``torch.einsum`` is its Python front, which a user may replace)
STABLE_SHAPES = 16          # an equation called with at most this many shapes plans a shape on its 2nd call
VARYING_CALLS = 16          # ... with more, on its 16th
SEEN_SIZE = 4096            # shapes counted before they are planned; forgotten all together when full

_families: dict = {}        # family -> [torch's equation text, flat path or None, the dims' size class, shapes]
_seen: dict = {}            # key -> calls so far (not planned)
_lock = threading.Lock()


def _family(key):
    canonical, options, device, layout, shapes = key
    return canonical, options, device, layout, tuple([(len(s), d) for s, d in shapes])


def _dims_class(key):
    return size_class([s for shape, _ in key[4] for s in shape])


def planned(key, eq, plan) -> None:
    """Record that ``key`` was planned: later new shapes of its family may take the first-sight call."""
    options = key[1]
    if plan.slicing is not None or options.memory_limit is not None or not _reusable(options.optimize):
        return
    n = plan.num_operands
    if n >= 3 and any(len(c) != 2 for c in plan.path):     # torch takes a path of pairs only
        return
    path = tuple(i for pair in plan.path for i in pair) if n >= 3 and options.optimize is not False else None
    with _lock:
        family = _families.setdefault(_family(key), [eq.torch_text, path, None, 0])
        family[1], family[2] = path, _dims_class(key) if path is not None else None
        family[3] += 1


def _reusable(optimize) -> bool:
    """A strategy name, False (left to right) or an explicit path: the same for every shape."""
    return optimize is False or isinstance(optimize, (str, tuple))


def first_sight(key, operands):
    """torch's einsum of ``operands`` where ``key`` is a shape seen for the first time of a
    known family, else None (plan it)."""
    family = _families.get(_family(key))
    if family is None:
        return None
    text, path, klass, _ = family
    if path is not None and klass != _dims_class(key):
        return None
    with _lock:
        calls = _seen.get(key, 0) + 1
        if calls == 1:
            family[3] += 1
        if calls >= (2 if family[3] <= STABLE_SHAPES else VARYING_CALLS):
            _seen.pop(key, None)
            return None
        if len(_seen) >= SEEN_SIZE:
            _seen.clear()
        _seen[key] = calls
    try:
        result = _einsum(text, list(operands)) if path is None else _einsum(text, list(operands), path=list(path))
    except Exception:       # noqa: BLE001 - planning raises einc's own error for the same call
        return None
    return _fresh(result, operands)


def _fresh(result, operands):
    """``result`` as a contiguous tensor that shares no memory with an operand (torch's einsum
    may return a permuted view, or a view of an operand: ``ij->ji``, ``ii->i``)."""
    result = result.contiguous()
    if result.numel() and any(_is_alias_of(result, o) for o in operands):
        result = result.clone()
    return result


# Whether two tensors share a storage, compared as storages, not data pointers: fake tensors
# (torch.compile's fake kernel probes the result dtype on them; shape inference runs einsum
# under FakeTensorMode) have no data pointer, and reading one raises while dynamo traces.
_is_alias_of = getattr(torch._C, "_is_alias_of", None) or (
    lambda a, b: a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def clear() -> None:
    with _lock:
        _families.clear()
        _seen.clear()


__all__ = ["planned", "first_sight", "clear", "STABLE_SHAPES", "VARYING_CALLS", "SEEN_SIZE"]
