"""Which calls einc plans, and which torch's own einsum op answers: a rule on the call
itself, never on what ran before it.

einc keys plans by exact shapes, and the answer of a call -- which backend runs it and in
what order it sums -- is a function of the call alone: its equation, shapes, strides,
dtypes, device, options and einc's settings.  So the same operands give the same bits
in every process, whatever shapes came first, and eagerly, traced (``make_fx``, real,
fake or symbolic), under ``torch.compile`` (the custom op runs :func:`einc.runtime.engine.run`)
or recomputed by ``torch.utils.checkpoint``.

``EINC_NEW_SHAPES`` says how the rule reads:

- ``class`` (the default): a small call of up to eight operands runs the plan of its size
  class, planned once per class at the class's own sizes (:mod:`einc.runtime.sizeclass`),
  so a new shape of a known class costs no planning; every other call is planned as
  under ``plan``;
- ``plan``: every call is planned per shape, each new shape on its first call; the
  plan cache (``EINC_CACHE_SIZE``) bounds the memory this takes.  A new shape costs a
  plan (many times a small call's own time), so code whose shapes change every call
  (a graph network's edge count, a key/value-cached decoder's length) pays it on
  every call there;
- ``torch``: a call of at most :data:`SMALL_CALL` multiply-adds (the product of its index
  sizes) runs ``torch._VF.einsum`` -- torch's einsum op itself, never the
  ``torch.einsum`` attribute, which a user may have made einc -- every time, and is never
  planned nor cached, so a new shape costs torch's own call; larger calls are planned.
  For three or more operands torch's op gets einc's path for the call's size class
  (each size 0, 1 or in the same power-of-two octave: the planner searches a class once,
  at sizes of its own, :func:`class_sizes`), or under a strategy the
  caller names (``"greedy"``, ``"optimal"``, ...) opt_einsum's path of that strategy for
  the shape, as torch.einsum finds it.  The result is exactly torch.einsum's, made a
  fresh contiguous tensor as einc's results are (with ``layout="any"``, a fresh dense
  one: torch's order kept where it is dense).  The setting is read where no
  plan is cached (a small call never leaves one, scaled or not): call ``einc.cache_clear()``
  after changing it.

Under ``torch`` these calls are planned at any size: calls whose plan runs generated
kernels (the kernels are what such an entry is for), calls with a ``memory_limit``
(sliced plans), a ``PathOptimizer`` object, operands with a size 0 (a sum over an
index of size 0 is zeros in einc, whatever the other operands hold), narrow integer
operands (einc contracts them exactly where the result is int64; torch's op may wrap),
operands of several dtypes (einc contracts every operand in the result's dtype, where
torch's op may multiply two float16 operands in float16 before it meets a float64 one),
and calls torch refuses (planning then raises einc's own error, which names the
operand, index and sizes).
"""

from __future__ import annotations

import math

import opt_einsum
import torch

from .. import config
from ..planner import plan_for
from . import dispatch
from .cache import LRUCache
from .dtypes import INT64_EXACT
from .reference import torch_einsum

_non_overlapping_and_dense = torch.ops.aten.is_non_overlapping_and_dense.default
_einsum = torch._VF.einsum    # torch's einsum op (``torch.einsum`` is its Python front, which a user may replace)
SMALL_CALL = 2 ** 20    # multiply-adds at most which, under EINC_NEW_SHAPES=torch, torch's op answers a call

# einc's path per (canonical equation, options, size class): a function of the class alone
# (searched once, at the class's own sizes: class_sizes), so a bounded memo of it.
_paths = LRUCache(4096)


def small_call(eq, operands, options):
    """torch's einsum of ``operands`` where ``EINC_NEW_SHAPES=torch`` gives this call to
    torch's op (see the module's docstring), else None (plan it)."""
    if not answered(eq, operands, options, operands[0].device.type):
        return None
    text = _texts.get(eq.text)
    if text is None:
        if len(_texts) >= 4096:     # a stream of ever-new equations: start again
            _texts.clear()
        text = _texts[eq.text] = eq.torch_text
    path = _given_path(eq, operands, options, text)
    if path is None:
        return None
    try:
        result = _einsum(text, list(operands), path=path) if path else _einsum(text, list(operands))
    except Exception:       # noqa: BLE001 - planning raises einc's own error for the same call
        return None
    return _fresh(result, operands) if options.result_layout() == "contiguous" else _dense(result, operands)


def explained(eq, operands, options, device_type: str):
    """For ``explain``: the flat path torch's op runs this call along (``[]``: its own order,
    left to right) where :func:`small_call` gives it the call, else None (einc plans it).
    ``operands`` are meta tensors of the call's shapes and dtypes, on ``device_type``."""
    if not answered(eq, operands, options, device_type):
        return None
    text = eq.torch_text
    path = _given_path(eq, operands, options, text)
    try:        # (the op's checks, on the meta tensors: where torch refuses the call, einc plans it)
        if path is not None:
            _einsum(text, list(operands), path=path) if path else _einsum(text, list(operands))
    except Exception:       # noqa: BLE001
        return None
    return path


def _given_path(eq, operands, options, text):
    """The flat path torch's op is given: ``[]`` where its own order, left to right, is the
    call's (one or two operands, or ``optimize=False``), else :func:`torch_path`'s."""
    if len(operands) < 3 or options.optimize is False:
        return []
    return torch_path(eq, operands, options, text)


def answered(eq, operands, options, device_type: str) -> bool:
    """Whether ``EINC_NEW_SHAPES=torch`` gives this call to torch's op (``operands`` may be
    meta tensors of the call's shapes and dtypes, on ``device_type``)."""
    if options.memory_limit is not None or config.new_shapes() != "torch" or not _reusable(options.optimize):
        return False
    work = call_work(eq, operands)
    # Planned: generated kernels are what a kernel entry is for.
    return work is not None and work <= SMALL_CALL and \
        dispatch.decide(device_type, [o.dtype for o in operands])[0] == "torch"


_texts: dict = {}       # equation text -> torch's spelling of it (eq.torch_text is worked out anew each time)


def call_work(eq, operands):
    """The call's multiply-adds: the product of its index sizes (an ellipsis's dimensions
    indices of their own, broadcast); None where einc plans the call whatever its size: a
    size 0 (a sum over an index of size 0 is zeros in einc, where torch's op may give NaN
    beside an inf), narrow integers (contracted exactly, where torch's op may wrap),
    several dtypes (contracted in the result's, where torch's op may round in a narrower
    one on its way), a symbolic size, shapes that do not fit ``eq`` (planning raises
    einc's error)."""
    sizes: dict = {}
    first = operands[0].dtype
    for labels, o in zip(eq.inputs, operands):
        shape = o.shape
        if o.dtype in INT64_EXACT or o.dtype != first:
            return None
        if "..." in labels:
            at = labels.index("...")
            width = len(shape) - len(labels) + 1
            labels = labels[:at] + tuple(f"...{width - k}" for k in range(width)) + labels[at + 1:]
        if len(labels) != len(shape):
            return None
        for label, n in zip(labels, shape):
            if n.__class__ is not int or n == 0:
                return None
            if sizes.get(label, 1) == 1:
                sizes[label] = n
    return math.prod(sizes.values())


def torch_path(eq, operands, options, text=None):
    """The flat path torch's op gets for three or more operands: einc's for the call's size
    class, or the named strategy's for this shape; None where einc's path is not one
    torch takes (a step of one or of three operands)."""
    optimize = options.optimize
    if isinstance(optimize, tuple):
        pairs = optimize
    elif optimize == "auto":
        shapes = [class_sizes(o.shape) for o in operands]
        key = (eq.canonical, options, tuple(shapes))
        pairs = _paths.get(key)
        if pairs is None:
            pairs = _paths.get_or_build(key, lambda: plan_for(eq, shapes, options).path)
    else:       # the caller's strategy: this shape's path, as torch.einsum searches it
        pairs = opt_einsum.contract_path(text, *[o.shape for o in operands], shapes=True, optimize=optimize)[0]
    if any(len(c) != 2 for c in pairs):
        return None
    return [i for pair in pairs for i in pair]


def class_sizes(sizes) -> tuple[int, ...]:
    """The sizes a size class's path is searched at: 0 and 1 as they are, and the middle of
    each power-of-two octave (3 for 2-3, 6 for 4-7, 768 for 512-1023): within an octave
    the path's cost is within a small factor of the optimum, where a search on every new
    shape would cost what a plan costs.

    >>> class_sizes((0, 1, 2, 3, 4, 1000))
    (0, 1, 3, 3, 6, 768)
    """
    return tuple(s if s <= 1 else 3 << (s.bit_length() - 2) for s in sizes)


def _reusable(optimize) -> bool:
    """A strategy name, False (left to right) or an explicit path: the same for every shape."""
    return optimize is False or isinstance(optimize, (str, tuple))


def einsum(text: str, operands):
    """torch's einsum of ``operands``, as ``torch.einsum`` returns it (a sparse layout, say):
    its Python front, which takes opt_einsum's path for three operands or more, since with
    operands on several devices the result's device depends on the order of the products."""
    return torch_einsum(text, *operands)


def fresh_einsum(text: str, operands):
    """torch's einsum of ``operands`` (as :func:`einsum`) as a fresh contiguous tensor."""
    return _fresh(torch_einsum(text, *operands), operands)


def _fresh(result, operands):
    """``result`` as a contiguous tensor that shares no memory with an operand (torch's einsum
    may return a permuted view, or a view of its one operand: ``ij->ji``, ``ii->i``; of two
    or more it multiplies, which makes a new tensor, so only one operand is compared)."""
    result = result.contiguous()
    if len(operands) == 1 and result.numel() and _is_alias_of(result, operands[0]):
        result = result.clone()
    return result


def _dense(result, operands):
    """``result`` as a dense, non-overlapping tensor that shares no memory with an operand,
    in torch's order where it is one (``layout="any"``): torch's einsum may return a
    permuted view of its last product (kept), or a view of its one operand (copied, with
    its strides where it is dense: ``ij->ji``; a diagonal, ``ii->i``, contiguous)."""
    if not _non_overlapping_and_dense(result):
        return _fresh(result, operands)
    if len(operands) == 1 and result.numel() and _is_alias_of(result, operands[0]):
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
    says no for a view torch's einsum made of a wrapped operand (``vmap`` of a small
    ``ij->ij`` returned a view of the caller's tensor)."""
    while _wrapped(t):
        t = _unwrapped(t)
    return t


def _is_alias_of(a, b) -> bool:
    return _alias_of(_innermost(a), _innermost(b))


def clear() -> None:
    _paths.clear()
    _texts.clear()


__all__ = ["small_call", "explained", "einsum", "fresh_einsum", "clear", "SMALL_CALL"]
