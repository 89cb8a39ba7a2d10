"""Plans that serve a whole size class: small calls of up to eight operands, planned once
per class instead of once per shape.

A call's class is its canonical equation, options, dtype, device, each operand's
dimensions in memory order where it is not contiguous (as the plan cache's key has it),
and each size made canonical (:func:`canonical`: 1 kept, every other the middle of its
power-of-two octave, 6 for 4 to 7, 96 for 64 to 127).  A class is planned once, at those
canonical sizes -- never at the first shape that happened to come -- and its plan runs
every shape of the class (:func:`einc.runtime.torch_executor.classed.runner`: the sizes
are read at run time).  So a new shape of a known class costs no planning, and the
answer stays a function of the call: which class it is in, and that class's plan.  A class
whose path does not depend on its sizes takes the plan of an earlier class of the same
equation, options and pattern of size-1 dimensions, at its own sizes; one of two operands,
its equation's :class:`~einc.planner.plan.PairPlans`' (:func:`_plan`).

Served this way: calls of one to eight operands of one float or complex dtype, strided,
on one device, where the torch executor runs (generated kernels are lowered per shape),
with no size 0, no ``memory_limit``, and einc's default search (``"auto"``), left to right
or an explicit path (a strategy the caller names, ``"greedy"`` or ``"optimal"``, is asked
for its path for the call's shape, as opt_einsum and torch.einsum give it; a
``PathOptimizer`` object may keep what it saw), whose canonical sizes multiply to at most
:data:`CLASS_WORK`.  Larger calls keep their per-shape plans,
where the copy-cost model and the chunked copies pay for the planning.
"""

from __future__ import annotations

import re

import torch

from ..planner import plan_for
from ..planner.options import AUTO
from ..planner.plan import PairPlans, resized
from . import dispatch, dtypes, select
from .cache import LRUCache
from .program import unroll
from .torch_executor import classed

CLASS_WORK = 2 ** 20     # a class's multiply-adds at its canonical sizes, at most
MOST_OPERANDS = 8       # operands of a class's call, at most (the generated classifier names them a to h)

_classes = LRUCache(4096)       # class key -> Entry, or False where the class is planned per shape
_strided = torch.strided
_CPU = torch.device("cpu")
_REASON = "the size class's step, its layout chosen at the class's sizes"


def entry(eq, operands, options, key, check=None):
    """The entry of the call's size class (see the module's docstring), or None where the
    call is planned per shape or is torch's own (an operand not strided, operands on several
    devices: no class serves them, so a miss asks here first).  ``key``: the call's plan
    cache key (``engine._key``: after the equation, options and first layout, each operand's
    shape, dtype, device (True for the CPU) and contiguity or read order); ``check()`` is
    called where a class is planned (the settings' check)."""
    ckey = _class_key(eq, operands, options, key)
    if ckey is None:
        return None
    slot = _class_slot(ckey)
    if slot is not None:
        return slot[0] or None
    return _classes.get_or_build(ckey, lambda: _build(eq, ckey[2], ckey[3], ckey[4], _orders(ckey), options,
                                                      check)) or None


# _classes.peek's lookup, without its frame (the cache keeps no key on probation: get_or_build only)
_class_slot = _classes._data.get


def explained(eq, operands, options, key):
    """``(entry, cached)`` for ``explain``: the entry of the call's size class as
    :func:`entry` gives it, and whether the class was planned already; a class not
    planned yet is planned here and not kept (``explain`` leaves the caches as they are).
    ``operands`` None: operands given as shapes, strided.  ``(None, False)`` where the
    call is planned per shape."""
    ckey = _class_key(eq, operands, options, key)
    if ckey is None:
        return None, False
    entry = _classes.peek(ckey)
    if entry is not None:
        return entry or None, True
    return _build(eq, ckey[2], ckey[3], ckey[4], _orders(ckey), options, None) or None, False


def _orders(ckey):
    """The operands' read orders of class key ``ckey`` (None for a contiguous one): one
    tuple for each pattern, which the class's step memo keys share."""
    found = _read_orders.get(ckey[5])
    if found is None:
        if len(_read_orders) >= 4096:     # a stream of ever-new orders: start again
            _read_orders.clear()
        found = _read_orders[ckey[5]] = tuple([None if x is True else x for x in ckey[5]])
    return found


_read_orders: dict = {}     # a class key's orders (True: contiguous) -> the orders a class build reads


def _class_key(eq, operands, options, key):
    """The class key of the call whose plan cache key is ``key`` -- the canonical equation,
    the options, the canonical shapes, the dtype, the device, each operand's read order --
    or None where no class serves it.  Read by the function generated for the equation and
    ranks (:func:`_classifier`) once they have passed :func:`_checked_key`
    :data:`SIGHTS_BEFORE_CODE` times (a compile costs as much as dozens of runs of the loop,
    paid only where new shapes keep coming): one frame that unpacks the key and does every
    check that depends on the shapes, dtypes and layouts, found by the equation and options
    (those that depend on them alone, :func:`_served`, passed before it was)."""
    fn = _keyed.get((eq.canonical, options))
    if fn is not None:
        try:
            return fn(key, operands)
        except (ValueError, IndexError, TypeError):     # other ranks (an ellipsis's), a size past the table
            pass
    if not _served(eq, options, key):
        return None
    loop = _loop(eq, key[3::4])
    if loop.code is not None:       # other ranks of an ellipsis, or other options: these ranks' function
        _install(eq, options, loop.code)
        try:
            return loop.code(key, operands)
        except (IndexError, TypeError):     # a size past the table
            pass
    found = _checked_key(eq, operands, options, key)
    if found is not None:
        if loop.sights < SIGHTS_BEFORE_CODE:
            loop.sights += 1
        elif loop.code is None:     # (compiled once per equation and ranks, whatever the options)
            loop.code = _classifier(eq, tuple(map(len, key[3::4])))
            _install(eq, options, loop.code)
    return found


_keyed: dict = {}       # (equation, options) -> the generated class key of their calls (its ranks')


def _install(eq, options, code) -> None:
    """Class the calls of ``eq`` under ``options`` by ``code`` (:func:`_classifier`) from now on,
    where none is yet: the first ranks to come keep it."""
    if (eq.canonical, options) not in _keyed:
        if len(_keyed) >= 4096:     # a stream of ever-new equations: start again
            _keyed.clear()
        _keyed[eq.canonical, options] = code


def _served(eq, options, key) -> bool:
    """Whether a class may serve calls of ``eq`` under ``options`` with ``key``'s operand
    count: what depends on the equation and options alone."""
    n = len(key) // 4       # (three fields, then four per operand)
    optimize = options.optimize
    return n <= MOST_OPERANDS and n == len(eq.inputs) and options.memory_limit is None and (
        optimize == AUTO or optimize is False or optimize.__class__ is tuple)
    # (a strategy named, "greedy" or "optimal": its path for this shape; an object may keep state)


def _checked_key(eq, operands, options, key):
    """:func:`_class_key` by checks read one by one and the equation's :class:`_Loop`: the calls
    of an equation and ranks before their generated function, and those it does not take."""
    if not _served(eq, options, key):
        return None
    dtype = key[4]
    if not (dtype.is_floating_point or dtype.is_complex) or key[2] is not _strided:
        return None
    if len(key) > 7 and (any(d is not dtype for d in key[8::4]) or any(d != key[5] for d in key[9::4]) or (
            operands is not None and any(o.layout is not _strided for o in operands[1:]))):
        return None
    shapes = key[3::4]
    canon = _loop(eq, shapes)(shapes)
    if canon is None:
        return None
    device = _CPU if key[5] is True else key[5]     # (the key's device is True for the CPU)
    return (eq.canonical, options, canon, dtype, device, key[6::4])


def canonical(eq, shapes):
    """Each shape made canonical (1 kept, every other size the middle of its power-of-two
    octave), or None where the call is not one a class serves: a size 0, shapes that do
    not fit ``eq`` (two sizes of one index that differ and are not 1, or differ at all
    within one operand: planning the shape raises einc's error), more than
    :data:`CLASS_WORK` multiply-adds at the canonical sizes."""
    return _loop(eq, shapes)(shapes)


def _loop(eq, shapes) -> _Loop:
    """The :class:`_Loop` of ``eq`` at the ranks of ``shapes``, made once."""
    key = (eq.canonical, *map(len, shapes))
    loop = _loops.get(key)
    if loop is None:
        if len(_loops) >= 4096:       # a stream of ever-new equations: start again
            _loops.clear()
        loop = _loops[key] = _Loop(eq, key[1:])
    return loop


_loops: dict = {}       # (equation, ranks) -> its _Loop
SIGHTS_BEFORE_CODE = 16
_TABLE = 1 << 14


def canonical_size(n: int) -> int:
    """1 (or 0) as it is, else the middle of ``n``'s power-of-two octave: 3 for 2-3, 6 for
    4-7, 96 for 64-127.

    >>> [canonical_size(n) for n in (0, 1, 2, 3, 4, 7, 100)]
    [0, 1, 3, 3, 6, 6, 96]
    """
    return n if n <= 1 else 3 << (n.bit_length() - 2)


# :func:`canonical_size` of every size below _TABLE, made an octave at a time (it is constant
# on each) rather than with a call per size, which the import of this module would pay.
_C = [0, 1] + [c for k in range(1, _TABLE.bit_length() - 1) for c in [canonical_size(1 << k)] * (1 << k)]


def _labels(eq, ranks):
    """Each operand's labels, an ellipsis's dimensions named by their place from the right;
    None where a rank does not fit its term."""
    found = []
    for labels, rank in zip(eq.inputs, ranks):
        if "..." in labels:
            at = labels.index("...")
            width = rank - len(labels) + 1
            if width < 0:
                return None
            labels = labels[:at] + tuple(f"...{width - k}" for k in range(width)) + labels[at + 1:]
        if len(labels) != rank:
            return None
        found.append(labels)
    return found


def _classifier(eq, ranks):
    """``fn(key, operands)`` of :func:`_class_key`, as straight-line source for ``eq`` at
    ``ranks``: the class key, or None; it raises where the key is of other ranks or
    another number of operands (ValueError), or a size is past the table (IndexError).
    It checks what depends on the call (the first operand's layout, the operands' one
    float or complex dtype and one device, the others' layouts where ``operands`` is given,
    the sizes) and reads the equation and options from the key: what depends on them alone
    is checked before it is installed (:func:`_checked_key`)."""
    terms = _labels(eq, ranks)
    names = "abcdefgh"[:len(ranks)]
    fields = "".join(f"s{v}, t{v}, d{v}, o{v}, " for v in names)
    lines = [f"def classify(key, ops):\n    equation, options, layout, {fields}= key",
             "    if layout is not strided or not (ta.is_floating_point or ta.is_complex):\n        return None"]
    if len(names) > 1:
        others = " or ".join(f"t{v} is not ta or d{v} != da" for v in names[1:])
        # (an order of True is a contiguous operand's, so a strided one's: its layout is not read)
        layouts = " or ".join(f"o{v} is not True and ops[{k}].layout is not strided"
                              for k, v in enumerate(names[1:], 1))
        lines.append(f"    if {others} or (ops is not None and ({layouts})):\n        return None")
    dims: dict = {}             # label -> [(operand, variable)]
    for v, term in zip(names, terms):
        lines.append(f"    if 0 in s{v}:\n        return None")
        lines.append(f"    {''.join(f'{v}{d}, ' for d in range(len(term))) or '() '}= s{v}")     # (its rank)
        if term:
            lines.append(f"    {''.join(f'c{v}{d}, ' for d in range(len(term)))}= "
                         f"{''.join(f'C[{v}{d}], ' for d in range(len(term)))}")
        for d, label in enumerate(term):
            dims.setdefault(label, []).append((v, f"{v}{d}"))
    checks, work = [], []
    for found in dims.values():
        first = found[0][1]
        for v, x in found[1:]:
            checks.append(f"{x} == {first}" if v == found[0][0] else f"({x} == {first} or {x} == 1 or {first} == 1)")
        work.append(f"c{first}" if len(found) == 1 else f"(c{first} if c{first} > c{found[1][1]} else c{found[1][1]})"
                    if len(found) == 2 else f"max({', '.join('c' + x for _, x in found)})")     # (two: no call)
    if checks:
        lines.append(f"    if not ({' and '.join(checks)}):\n        return None")
    lines.append(f"    if {' * '.join(work) or '1'} > {CLASS_WORK}:\n        return None")
    shapes = ", ".join("(" + "".join(f"c{v}{d}, " for d in range(len(t))) + ")" for v, t in zip(names, terms))
    orders = "".join(f"o{v}, " for v in names)
    lines.append(f"    return (equation, options, ({shapes},), ta, CPU if da is True else da, ({orders}))")
    env = {"C": _C, "CPU": _CPU, "strided": _strided}
    exec(compile("\n".join(lines) + "\n", "<einc size class>", "exec"), env)
    return env["classify"]


class _Loop:
    """:func:`canonical` of one equation and ranks by a loop over their labels, resolved once
    (each operand's labels as numbers, the dimensions a repeated label pairs): the
    classifier of the first :data:`SIGHTS_BEFORE_CODE` sights (``sights``), and of calls
    the generated function (``code``, once made) does not take."""

    __slots__ = ("sights", "code", "terms", "pairs", "count")

    def __init__(self, eq, ranks):
        self.sights = 0
        self.code = None        # the generated function (_classifier), once made
        terms = _labels(eq, ranks)
        ids: dict = {}
        self.terms = None if terms is None else [[ids.setdefault(x, len(ids)) for x in t] for t in terms]
        self.pairs = None if terms is None else [
            [(t.index(x), d) for d, x in enumerate(t) if t.index(x) != d] for t in terms]
        self.count = len(ids)

    def __call__(self, shapes):
        if self.terms is None:
            return None
        sizes = [1] * self.count
        found = []
        for term, pairs, shape in zip(self.terms, self.pairs, shapes):
            for i, n in zip(term, shape):
                if n.__class__ is not int or n == 0:
                    return None
                seen = sizes[i]
                if seen == 1:
                    sizes[i] = n
                elif n != 1 and n != seen:
                    return None
            for d1, d2 in pairs:        # a diagonal: its sizes equal, 1 not broadcast
                if shape[d1] != shape[d2]:
                    return None
            found.append(tuple([_C[n] if n < _TABLE else canonical_size(n) for n in shape]))
        work = 1
        for n in sizes:
            work *= _C[n] if n < _TABLE else canonical_size(n)
        return None if work > CLASS_WORK else tuple(found)


def _build(eq, shapes, dtype, device, orders, options, check):
    """The class's entry, planned at its canonical ``shapes``; False where it is planned per
    shape (generated kernels would run, the plan is not one step, a layout that loops)."""
    if check is not None:
        check()
    types = [dtype] * len(shapes)
    if dispatch.decide(device.type, types) != ("torch", None):    # (kernels, or a warning to give)
        return False
    try:
        plan = _plan(eq, shapes, options)
    except Exception:       # noqa: BLE001 - planning the call's own shape raises einc's error for it
        return False
    if plan.slicing is not None:    # (no class sums over an empty index: its sizes hold no 0)
        return False
    result_dtype = dtypes.result_dtype(eq.torch_text, shapes, types)
    if len(plan.steps) == 1:
        run = classed.runner(plan, dtype, orders, options.result_layout(), result_dtype)
        functions = [run]
    else:
        functions = classed.step_functions(plan, dtype, orders, options.result_layout())
        run = unroll(plan, functions)
        if result_dtype != dtype:
            run = _cast(run, result_dtype)
    choices = [_Told(fn) for fn in functions]
    entry = dispatch.Entry(plan, run, "torch", choices, size_class=shapes)
    entry.direct = getattr(run, "direct", None)     # (one call on the two operands: run without its frame)
    promote = getattr(run, "promote", None)
    if promote is not None:     # interpreted until it is called often enough to pay for its compile
        promote(entry)
    return entry


def _plan(eq, shapes, options):
    """``plan_for``'s plan of the class: where the path does not depend on the sizes (one or
    two operands, left to right, a path given), an earlier class's of the same equation,
    options and pattern of size-1 dimensions (so the same graph but for its sizes), at these
    sizes; for two operands under einc's search or left to right, without an ellipsis,
    their equation's :class:`~einc.planner.plan.PairPlans`' (one structure for every
    pattern of one graph)."""
    if len(shapes) > 2 and options.optimize == AUTO:
        return plan_for(eq, shapes, options)
    pairs = _pairs.get((eq.text, options), False)
    if pairs is False:
        if len(_pairs) >= 4096:     # a stream of ever-new equations: start again
            _pairs.clear()
        pairs = _pairs[eq.text, options] = PairPlans(eq, options) if PairPlans.serves(eq, options) else None
    if pairs is not None:
        return pairs.plan(shapes)
    key = (eq.text, options, tuple([tuple([n == 1 for n in shape]) for shape in shapes]))
    found = _plans.get(key)
    if found is None:
        plan = plan_for(eq, shapes, options)
        if len(_plans) >= 4096:     # a stream of ever-new structures: start again
            _plans.clear()
        first: dict = {}        # each index's size: its first dimension's (1 where no operand has it)
        for k, term in enumerate(plan.graph.inputs):
            for d, i in enumerate(term):
                first.setdefault(i, (k, d))
        _plans[key] = plan, [first.get(i) for i in range(len(plan.graph.sizes))]
        return plan
    plan, places = found
    return resized(plan, [1 if at is None else shapes[at[0]][at[1]] for at in places])


_plans: dict = {}       # (equation, options, size-1 pattern) -> (a plan, where each index's size is read)
_pairs: dict = {}       # (equation, options) -> its PairPlans, or None where they do not serve it


class _Told(select.Choice):
    """The choice of a class's step function, whose reason (:func:`_reason`) is read from
    its source when ``explain`` asks for it, not when the class is planned."""

    def __init__(self, fn):
        self.backend, self.timings, self.left_out, self._fn = "torch", {}, (), fn

    @property
    def reason(self) -> str:
        return _reason(self._fn)


def _reason(fn) -> str:
    """What ``explain`` says runs a class's step function: its ops (:func:`_ops`), read once
    per source text (classes of one equation and pattern of size-1 dimensions often
    generate the same text)."""
    source = getattr(fn, "source", None)
    if source is None:
        return _REASON
    reason = _reasons.get(source)
    if reason is None:
        if len(_reasons) >= 4096:   # a stream of ever-new structures: start again
            _reasons.clear()
        reason = _reasons[source] = f"{_REASON}: {_ops(fn)}"
    return reason


_reasons: dict = {}     # a step function's source -> its reason


def _ops(fn) -> str:
    """The torch ops a generated step function runs, in order (its layout: the permutations,
    copies and matrix product), from its source; reshapes shown without their sizes, which
    are the call's."""
    ops = []
    for line in fn.source.splitlines()[1:]:
        line = line.strip()
        if " = " not in line or line.endswith(" = ops") or line.endswith(".shape"):
            continue
        target, op = line.split(" = ", 1)
        op = op.split(" if ")[0] if target == "r" else op
        if not op.isidentifier():       # (the result as the last op left it: no op)
            ops.append(_RESHAPE.sub(".reshape", op))
    return "; ".join(ops)


_RESHAPE = re.compile(r"\.reshape\(.*\)")


def _cast(run, dtype):
    def cast(ops, scale=None):
        return run(ops, scale).to(dtype)
    return cast


def clear() -> None:
    _classes.clear()
    _loops.clear()
    _keyed.clear()
    _reasons.clear()
    _plans.clear()
    _pairs.clear()
    _read_orders.clear()
    classed.clear()


def info():
    return _classes.info()


__all__ = ["entry", "canonical", "clear", "info", "CLASS_WORK"]
