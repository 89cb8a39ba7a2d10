"""The engine under every door: the plan cache, and "plan on a miss, run the entry".

``einc.einsum``, ``contract_expression``, ``explain``, the autograd Function and the
custom op all end here.  :func:`run` is the hot path: build the key (canonical equation,
options, the first operand's layout, every operand's shape, dtype and device), look
up the entry, run it (where its run is one op on the two operands as they come, that op:
``Entry.direct``); everything else happens once per key, in :func:`plan_for` and
:func:`entry_for`, or, for a small call of up to eight operands under the default
``EINC_NEW_SHAPES=class``, once per size class (:mod:`einc.runtime.sizeclass`: a new
shape of a known class takes its class's entry, put under the shape's key).  Calls no
plan serves get torch's own einsum: a sparse operand (where torch's answer is right,
else einc's error: :func:`sparse.not_strided`) or operands on several devices (on a
miss), and under ``EINC_NEW_SHAPES=torch`` small calls
(:mod:`einc.runtime.admission`: a rule on the call, never on what ran before).
Symbolic sizes (the key does not hash) become one call of the custom op, which runs this
engine on the sizes it meets at run time (:func:`on_symbolic`).

The module also owns :func:`cache_info` and :func:`cache_clear` over every cache einc
keeps: modules above the runtime (autograd, the custom op) register theirs here.
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from typing import NamedTuple

import torch

from .. import config
from ..errors import ArgumentError, OperandTypeError
from ..planner import check_count, plan_for
from ..planner import options as options_module
from ..planner.equation import Equation, parse
from ..planner.options import AUTO, Options
from ..planner.plan import Plan, path_cache_clear
from . import admission, dispatch, dtypes, learn, record, select, sizeclass, sliced, sparse
from .cache import CacheInfo, LRUCache
from .dispatch import Entry
from .torch_executor import compiled_copy, read_order
from .triton_executor import loader

_plans = LRUCache(config.cache_size())
# The hot path's hit, as LRUCache.get makes it, without its frame: the dict's own lookup of the
# key's slot, stamped below (the dict is the cache's for its life; clear and resize empty it in place).
_found = _plans._data.get
_strided = torch.strided
_layout = attrgetter("layout")


def run(eq: Equation, operands, options: Options):
    """The plan for ``eq`` and these operands, from the cache or built, run (no autograd)."""
    if eq.two_operands:
        try:
            first, b = operands         # _key's, inline: the commonest call one call deep (and no len())
            key = (eq.canonical, options, first.layout, first.shape, first.dtype, first.is_cpu or first.device,
                   first.is_contiguous() or read_order(first), b.shape, b.dtype, b.is_cpu or b.device,
                   b.layout is _strided and b.is_contiguous() or read_order(b))
        except (ValueError, RuntimeError):  # not two operands; a compressed sparse first one (no is_contiguous())
            key = _key(eq, operands, options)
        except AttributeError:
            check_operands(eq, operands)
            raise
    else:                               # not unpacked: a ValueError raised and caught costs a hit microseconds
        key = _key(eq, operands, options)
    try:
        slot = _found(key)              # _plans.get's hit, inline (one frame less): counted and stamped below
    except TypeError:                   # a symbolic size (make_fx's symbolic tracing) does not hash
        return symbolic(eq, operands, options)
    if slot is None:
        entry = _miss(eq, operands, options, key)
        if entry.__class__ is not Entry:    # torch's op answered
            return entry[0]
        return entry.run(operands)
    _plans.hits = slot[1] = _plans.hits + 1
    found = slot[0]
    if found.direct is not None:        # the entry's one call, without its run's frame
        return found.direct(*operands)
    return found.run(operands)


def _miss(eq: Equation, operands, options: Options, key):
    """The entry for ``key``, not cached: its size class's (``EINC_NEW_SHAPES=class``), or the
    shape's plan, built; or ``(result,)`` where torch's op answers (:func:`_torch_own`, or a
    small call under ``EINC_NEW_SHAPES=torch``)."""
    found = _plans.promote(key)         # the key's second call, its entry on probation: kept from now on
    if found is not None:               # (a key on probation is a size class's: never torch's own)
        return found
    mode = config.new_shapes()
    if mode == "class":
        found = _classed(eq, operands, options, key)     # (no class serves a call that is torch's own)
        if found is not None:
            return found
    if _torch_own(key, operands):
        return (_torch_answer(eq, operands),)
    if mode == "torch":
        result = admission.small_call(eq, operands, options)    # a small call is torch's
        if result is not None:
            return (result,)
    return _plans.get_or_build(key, lambda: _compile(eq, operands, options))


def _classed(eq: Equation, operands, options: Options, key):
    """The entry of the call's size class (``EINC_NEW_SHAPES=class``), kept for ``key`` on
    probation (kept once it comes again); None where no class serves the call."""
    found = sizeclass.entry(eq, operands, options, key, check_settings)     # (settings checked per class)
    if found is not None:
        _plans.admit(key, found)
        record.note(eq, operands)       # EINC_RECORD: a new shape's entry, as _compile's
    return found


def _built(eq: Equation, operands, options: Options, key) -> Entry:
    """The entry for ``key``, not cached, kept: its size class's (``EINC_NEW_SHAPES=class``),
    else the shape's plan, built."""
    found = _classed(eq, operands, options, key) if config.new_shapes() == "class" else None
    return found if found is not None else _plans.get_or_build(key, lambda: _compile(eq, operands, options))


def torch_op(eq: Equation, operands):
    """torch's own einsum of ``operands``, as a fresh contiguous tensor: for calls no plan
    can serve (``functionalize`` where einc's autograd Function would run: it has no rule
    there)."""
    return admission.fresh_einsum(eq.torch_text, operands)


_symbolic_door = None       # (eq, operands, options) -> the custom op's call: set by einc.custom_op


def on_symbolic(door) -> None:
    """Set what a call with symbolic sizes becomes: the custom op ``einc::einsum``, so that a
    graph traced with symbolic sizes (``make_fx(..., tracing_mode="symbolic")``) runs
    einc's plan for the sizes it meets at run time, as the same call run eagerly does."""
    global _symbolic_door
    _symbolic_door = door


def symbolic(eq: Equation, operands, options: Options):
    """A call whose sizes are symbolic: one call of the custom op (torch's op where it is not
    defined)."""
    if _symbolic_door is None:
        return torch_op(eq, operands)
    return _symbolic_door(eq, operands, options)


def run_scaled(eq: Equation, operands, options: Options, scale: float):
    """:func:`run` times ``scale``, applied in the last generated kernel's epilogue where one
    runs the last step (else by one multiply after it).  A call torch's op answers
    (:func:`runnable`) is that times ``scale``, and makes no entry: an entry would answer
    the same call without a scale from then on."""
    found = runnable(eq, operands, options)
    if found.__class__ is tuple:        # torch's op answered
        return found[0] * scale
    return found.run(operands, scale)


def runnable(eq: Equation, operands, options: Options):
    """What :func:`run` runs for these operands, its key built once: the cached entry (a hit,
    counted as run counts it), else, as on run's miss, ``(result,)`` where torch's op
    answers (a sparse operand, operands on several devices, a small call under
    ``EINC_NEW_SHAPES=torch``: runtime/admission.py; symbolic sizes: the custom op's call)
    or the entry built."""
    key = _key(eq, operands, options)
    try:
        slot = _found(key)
    except TypeError:                   # symbolic sizes, as in run
        return (symbolic(eq, operands, options),)
    if slot is None:
        return _miss(eq, operands, options, key)
    _plans.hits = slot[1] = _plans.hits + 1
    return slot[0]


def entry(eq: Equation, operands, options: Options) -> Entry:
    """The cache entry :func:`run` uses for these operands, built on a miss (the key as
    in :func:`run`, which builds it inline to stay one call deep)."""
    key = _key(eq, operands, options)
    found = _plans.get(key)
    return found if found is not None else _built(eq, operands, options, key)


def _torch_own(key, operands) -> bool:
    """Whether the call of plan cache key ``key`` (:func:`_key`) is torch's to answer, as
    torch answers it (asked where no plan is cached): a sparse (or mkldnn) operand, or
    operands on several devices (torch raises, or, with a meta tensor among CPU ones, gives
    a meta result)."""
    n = len(operands)       # (each operand's layout read by map: no generator's frame on a miss)
    return key[5::4].count(key[5]) != n or list(map(_layout, operands)).count(_strided) != n


def _torch_answer(eq: Equation, operands):
    """torch's einsum of a call :func:`_torch_own` gives torch: where an operand is not
    strided, where torch's answer is right, else einc's error (:func:`sparse.not_strided`)."""
    if all(o.layout is _strided for o in operands):
        return admission.einsum(eq.torch_text, operands)
    return sparse.not_strided(eq, operands)


def explained_entry(eq: Equation, operands, options: Options, shapes=None, dtype=None, device=None):
    """``(entry, cached)``: the entry :func:`run` would use for these operands -- the cached
    one, or where none is, the call's size class's (``EINC_NEW_SHAPES=class``; planned for
    ``explain`` and not kept where the class is new) -- and whether it was cached; ``(None,
    False)`` where the call would be planned per shape.  Operands given as ``shapes``
    (``operands`` None): contiguous, of ``dtype`` on ``device``."""
    if operands is None:
        place = device.type == "cpu" or device      # as _key spells a device
        key = (eq.canonical, options, torch.strided, *[x for s in shapes for x in (tuple(s), dtype, place, True)])
    else:
        key = _key(eq, operands, options)
        found = _plans.peek(key)
        if found is not None:
            return found, True
    if config.new_shapes() != "class":
        return None, False
    return sizeclass.explained(eq, operands, options, key)


def _key(eq: Equation, operands, options: Options) -> tuple:
    """The plan cache's key of a call (:func:`run` builds the same inline for two operands,
    to stay one call deep), flat: the canonical equation, the options, the first operand's
    layout, and each operand's shape, dtype, device (True for the CPU: a bool is read, hashed
    and compared at once, where a device object is made for each read) and True where it is
    contiguous, else the order the torch executor reads it in (``torch_executor.read_order``;
    None where it reads it as it is): an entry is made for one such order, whose bits it
    gives every time, and a shape has a few at most, whatever the strides (a window of a
    padded batch has new strides each call).  Operands that are not tensors, or none, raise
    torch.einsum's error (:func:`check_operands`).  An operand that is not strided has its
    layout there, read before ``is_contiguous()`` (which an mkldnn tensor answers True, and
    a compressed sparse one raises): its key is no strided call's, and is never kept
    (:func:`_torch_own`)."""
    try:
        first = operands[0]
        return (eq.canonical, options, first.layout,
                *[x for o in operands for x in (o.shape, o.dtype, o.is_cpu or o.device,
                                                o.layout is _strided and o.is_contiguous() or read_order(o))])
    except (AttributeError, IndexError):
        check_operands(eq, operands)
        raise


def expression_plan(eq: Equation, shapes, options: Options) -> Plan:
    """The plan of ``contract_expression`` for ``shapes``: along the path einsum's call of
    operands of these shapes (one float dtype, on the CPU) runs, so that the expression's
    call gives that call's bits: a small call's size class's path (searched at the class's
    canonical sizes) under ``EINC_NEW_SHAPES=class``, torch's op's (:func:`answered_plan`)
    under ``torch``, else the shape's own."""
    plan = plan_for(eq, shapes, options)        # (einc's error for shapes that do not fit)
    mode = config.new_shapes()
    if not _borrows_path(shapes, options) or mode == "plan":
        return plan
    if mode == "torch":
        return answered_plan(eq, shapes, options, plan, torch_answers(eq, shapes, options))
    canon = sizeclass.canonical(eq, shapes) if len(shapes) <= sizeclass.MOST_OPERANDS else None
    return _along(eq, shapes, options, plan, None if canon is None else plan_for(eq, canon, options).path)


def answered_plan(eq: Equation, shapes, options: Options, plan: Plan, flat) -> Plan:
    """``plan`` (``plan_for``'s, of ``shapes``) where torch's op answers the call along the flat
    path ``flat`` (:func:`torch_answers`'; ``[]``: its own order; None: einc plans it): along
    ``flat`` where it names one and the call takes a size class's path (:func:`_borrows_path`), as
    :func:`expression_plan` and ``explain`` give it under ``EINC_NEW_SHAPES=torch``."""
    if not flat or not _borrows_path(shapes, options):
        return plan
    return _along(eq, shapes, options, plan, tuple(zip(flat[::2], flat[1::2])))


def _borrows_path(shapes, options: Options) -> bool:
    """Whether a call of ``shapes`` may run a path other than its own search's (its size
    class's, or torch's op's): three operands or more, ``optimize='auto'``, no memory limit."""
    return len(shapes) >= 3 and options.optimize == AUTO and options.memory_limit is None


def _along(eq: Equation, shapes, options: Options, plan: Plan, path) -> Plan:
    """``plan``, or where ``path`` (pairs; None: none) is another, the plan of ``shapes``
    along it, named for ``plan``'s search (as explain names a size class's plan)."""
    path = None if path is None else tuple(map(tuple, path))
    if path is None or path == tuple(map(tuple, plan.path)):
        return plan
    return dataclasses.replace(plan_for(eq, shapes, Options.of(path, None, options.select, options.layout)),
                               optimizer=plan.optimizer)


def torch_answers(eq: Equation, shapes, options: Options, kinds=None, device_type: str = "cpu"):
    """The flat path torch's op runs a call of ``shapes`` along (``[]``: its own order) where
    ``EINC_NEW_SHAPES=torch`` gives it the call (runtime/admission.py), else None: einc plans
    it.  The operands' dtypes are ``kinds`` (float32 where None), on ``device_type``."""
    metas = [torch.empty(s, dtype=k, device="meta") for s, k in zip(shapes, kinds or [torch.float32] * len(shapes))]
    return admission.explained(eq, metas, options, device_type)


def check_operands(eq: Equation, operands) -> None:
    """Raise the error torch.einsum raises for operands that are not tensors, or too few or
    too many for ``eq``."""
    if not operands:
        raise ArgumentError("einsum(): must specify the equation string and at least one operand, "
                            "or at least one operand and its subscripts list")
    for k, o in enumerate(operands):
        if not isinstance(o, torch.Tensor):
            raise OperandTypeError(f"einsum(): expected Tensor as element {k} in argument 1, but got "
                                   f"{type(o).__name__}: operand {k} must be a torch.Tensor, got "
                                   f"{type(o).__name__}\n  {eq.text}")
    check_count(eq, len(operands))


def entry_for(eq: Equation, plan: Plan, operands, options: Options) -> Entry:
    """The executable entry of ``plan`` for these operands: the backend that suits each
    step, results in torch.einsum's dtype."""
    shapes = [o.shape for o in operands]
    kinds = [o.dtype for o in operands]
    result_dtype = dtypes.result_dtype(eq.torch_text, shapes, kinds)
    if result_dtype is not None and len(set(kinds)) > 1:
        # dtypes torch.einsum takes together (its path promotes them before any product: a
        # bool mask, a float16 scale): each operand in the result's dtype, whatever einc's path
        cast = entry_for(eq, plan, [o.to(result_dtype) for o in operands], options)
        uncast = cast.run       # (not `run`: the module's, which the sliced branch below calls)
        cast.run, cast.direct = (lambda ops: uncast([o.to(result_dtype) for o in ops])), None
        return cast
    if plan.slicing is not None:    # one inner entry runs every slice (into a contiguous result)
        return sliced.build_entry(plan, operands, result_dtype, options.select, entry, unsliced=lambda ops: run(
            eq, ops, Options.of(plan.path, None, options.select, options.layout)))
    return dispatch.build_entry(plan, operands, result_dtype, options.select,
                                widen=dtypes.in_int64([o.dtype for o in operands], result_dtype),
                                layout=options.result_layout())


def check_settings() -> None:
    """Raise ConfigError for a bad value of a setting planning reads (``EINC_NEW_SHAPES``,
    ``EINC_SELECT``, ``EINC_SLICE_OVERHEAD``, ``EINC_LAYOUT``) or a plan's run may read
    (``EINC_COPY_COMPILE``: a large copy on the CPU; ``EINC_HUGE_PAGES``: a large block on the
    CPU; ``EINC_COMPILE_THREADS``: a kernel's first launch): when a key is planned -- or
    explained --, not when a rare path first reads it, deep in a later call or in a
    background thread."""
    for setting in (config.new_shapes, config.select, config.slice_overhead, config.layout,
                    config.copy_compile, config.huge_pages, config.compile_threads):
        setting()


def _compile(eq: Equation, operands, options: Options) -> Entry:
    check_operands(eq, operands)
    check_settings()
    record.note(eq, operands)           # EINC_RECORD: the calls einc tune is to time
    plan = plan_for(eq, [o.shape for o in operands], options)
    return entry_for(eq, plan, operands, options)


# ----------------------------------------------------------------------- every cache

_registered: dict = {}      # name -> (info() -> CacheInfo, clear())


def register(name: str, info, clear) -> None:
    """Put a cache of a module above the runtime under :func:`cache_info` / :func:`cache_clear`."""
    _registered[name] = (info, clear)


class EincCacheInfo(NamedTuple):
    plans: CacheInfo        # equation + options + shapes, dtypes, device -> plan and executor
    equations: CacheInfo    # equation text -> parsed Equation
    gradients: CacheInfo    # equation + shape class -> gradient recipes
    traced: CacheInfo       # the custom op's decoded arguments and fake result dtypes
    dtypes: CacheInfo       # torch.einsum's result dtype per equation, shape class and dtypes
    kernels: CacheInfo      # generated kernel modules loaded in this process
    options: CacheInfo      # validated optimize / memory_limit pairs
    classes: CacheInfo      # size class -> its plan's entry (runtime/sizeclass.py)


def _lru(info) -> CacheInfo:
    return CacheInfo(info.hits, info.misses, info.maxsize, info.currsize)


def _empty() -> CacheInfo:
    return CacheInfo(0, 0, None, 0)


def cache_info() -> EincCacheInfo:
    """Hits, misses and sizes of every cache einc keeps."""
    extra = {name: _lru(info()) for name, (info, _) in _registered.items()}
    return EincCacheInfo(
        plans=_plans.info(), equations=_lru(parse.cache_info()),
        gradients=extra.get("gradients", _empty()), traced=extra.get("traced", _empty()),
        dtypes=_lru(dtypes.cache_info()), kernels=CacheInfo(0, 0, None, loader.loaded()),
        options=CacheInfo(0, 0, None, options_module.cache_size()), classes=sizeclass.info())


def cache_clear() -> None:
    """Empty every cache, and forget which warnings were given: as in a new process
    (kernel modules on disk stay; ``einc cache clear`` removes them)."""
    _plans.clear()
    sizeclass.clear()
    admission.clear()
    path_cache_clear()
    parse.cache_clear()
    dtypes.cache_clear()
    options_module.cache_clear()
    compiled_copy.forget()
    learn.forget()              # (before the loader: a kernel made ready in the background loads into it)
    loader.forget()
    select.forget()
    record.forget()
    dispatch.forget_warnings()
    for _, clear in _registered.values():
        clear()


def set_cache_size(maxsize: int) -> None:
    """Bound the plan cache to ``maxsize`` entries (default ``EINC_CACHE_SIZE`` or 4096)."""
    if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
        raise ArgumentError(f"the plan cache size must be an int of at least 1, got {maxsize!r}")
    _plans.resize(maxsize)


__all__ = ["run", "run_scaled", "runnable", "entry", "torch_op", "on_symbolic", "symbolic",
           "explained_entry", "check_operands", "check_settings", "check_count",
           "plan_for", "entry_for", "register", "cache_info", "cache_clear", "set_cache_size", "EincCacheInfo"]
