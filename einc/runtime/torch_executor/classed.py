"""Functions that run every shape of a size class: a plan's steps, their decisions taken
once at the class's own sizes, their sizes read at run time.

:mod:`einc.runtime.sizeclass` plans a class of small calls once, at canonical sizes (each
size 1 kept, every other the middle of its power-of-two octave); :func:`runner` turns a
plan of one step into ``run(operands, scale=None)``, which takes any shape of the class,
and :func:`step_functions` a plan of several into one function per step.  What it
decides at the class's sizes: the step's kind (a matrix product, one over blocks of a
long sum whose partials it adds, a multiply and sum, a broadcasting product, a one-operand
sum or copy), and for a matrix product the copy-cost
model's layout (:func:`einc.runtime.torch_executor.ttgt.choose`: which operand is left,
the order inside each group, which operand is copied as its matrices' transposes), among
the layouts that broadcast neither operand and run one product.  The function is
generated as source whose reshapes multiply the operands' sizes as the call brings them,
so a new shape of the class costs no planning, and the class's calls run the same ops in
the same order whatever shapes came before.  A plan of one step runs its ops one by one
(the same ops, the same arguments) for the calls before its :data:`CALLS_BEFORE_CODE`-th,
and its compiled source from that one on: a compile costs as much as planning the class, and most
classes of a first training step run a few times.  Sources are compiled once per text, and
steps alike but for their sizes (classes of one equation, whatever their size-1 dimensions
outside the step's sums) share their analysis, and their ops where their sizes take the same
decisions.

The chunked, tiled and looped variants of the per-shape executor are left out: a class
is small (:data:`einc.runtime.sizeclass.CLASS_WORK`), so its copies stay in cache.
"""

from __future__ import annotations

import functools
import math

import torch

from ...planner.plan import DOT, PRODUCT, REDUCE
from . import (
    _COPY_WORTH_SPARING,
    _FEW_OUTPUTS,
    _LONG_SUM,
    _binary,
    _chain,
    _in_memory_order,
    _perm,
    _prep,
    _reduce,
    _unaligned,
    blocked,
    ttgt,
)
from .summed import HALF, mul_sum

# a decision beside PRODUCT and DOT: few outputs of long sums as matrix products over blocks
# of the sum (the partials then added), trained as the multiply and sum
TRAINED_AS_SUM = "trained as a sum"


class _Source:
    """The ops of the generated function, each a tuple (``ops``) that :class:`_Interpreted`
    runs and its source is written from (:func:`_text`, when it is compiled or explained),
    and where each index's size is read: the shape and dimension it is read from."""

    def __init__(self):
        self.ops: list = []
        self.where: dict = {}
        self.env: dict = {"mm": torch.mm, "bmm": torch.bmm, "matmul": torch.matmul}

    def call(self, target: str, fn: str, *args: str) -> None:
        """``target = fn(*args)``, ``fn`` a name in the environment."""
        self.ops.append(("call", target, fn, args))

    def method(self, v: str, name: str, *args) -> None:
        """``v = v.name(*args)``, the arguments constants."""
        self.ops.append(("method", v, name, args))

    def read(self, v: str, term) -> None:
        self.ops.append(("shape", f"s{v}", v))
        for d, i in enumerate(term):
            self.where.setdefault(i, (f"s{v}", d))

    def permute(self, v: str, term, order) -> None:
        p = _perm(list(term), list(order))
        if p and p[-2:] == (len(p) - 1, len(p) - 2) and p[:-2] == tuple(range(len(p) - 2)):
            self.ops.append(("attribute", v, "mT"))     # (the same view as the permute: no argument to parse)
        elif p:     # (dimensions, and reshapes' sizes, as separate arguments: torch parses one tuple slower)
            self.method(v, "permute", *p)

    def reshape(self, v: str, groups, have=None) -> None:
        """``v`` (laid along ``have``, the groups' indices in order) as one dimension per
        group: the product of its sizes, 1 for an empty group; nothing where every group
        is one index already."""
        if have is not None and all(len(g) == 1 for g in groups) and [g[0] for g in groups] == list(have):
            return
        self.ops.append(("reshape", v, tuple([tuple([self.where[i] for i in g]) for g in groups])))

    def function(self, result: str, finish: str, cast, whole: bool = True) -> callable:
        """``made()``, which gives ``run(ops, scale=None)`` where the step is the whole plan
        (``whole``: a new :class:`_Interpreted` each time, until it has run
        :data:`CALLS_BEFORE_CODE` times, then compiled by the entry that holds it), else
        ``step(a, b)``, one step of several, compiled."""
        self.env["result_dtype"] = cast
        read = {s for op in self.ops if op[0] == "reshape" for g in op[2] for s, _ in g}
        ops = tuple([op for op in self.ops if op[0] != "shape" or op[1] in read])   # (shapes no reshape reads)
        if whole:
            return functools.partial(_Interpreted, ops, result, finish, cast, self.env)
        step = _compiled(_text(ops, result, finish, cast, whole), self.env)
        return lambda: step


def _text(ops, result: str, finish: str, cast, whole: bool) -> str:
    """The source of the function that runs ``ops`` (see :meth:`_Source.function`)."""
    lines = ["a, b = ops"] if whole else []
    for op in ops:
        kind, v = op[0], op[1]
        if kind == "call":
            lines.append(f"{v} = {op[2]}({', '.join(op[3])})")
        elif kind == "method":
            lines.append(f"{v} = {v}.{op[2]}({', '.join(map(repr, op[3]))})")
        elif kind == "shape":
            lines.append(f"{v} = {op[2]}.shape")
        elif kind == "attribute":
            lines.append(f"{v} = {v}.{op[2]}")
        elif kind == "reshape":
            dims = [" * ".join([f"{s}[{d}]" for s, d in g]) or "1" for g in op[2]]
            lines.append(f"{v} = {v}.reshape({', '.join(dims)})")
        else:
            lines.append(f"{v} = {op[2]} * {op[3]}")
    body = "\n".join([f"    {line}" for line in lines])
    tail = f"{result}{finish}" + (".to(result_dtype)" if cast is not None else "")
    if whole:
        return f"def run(ops, scale=None):\n{body}\n    r = {tail}\n    return r if scale is None else r * scale\n"
    return f"def run(a, b):\n{body}\n    return {tail}\n"


CALLS_BEFORE_CODE = 16      # the call of a class's step that compiles it (those before it run interpreted)


def _compiled(source: str, env: dict):
    exec(_code(source), env)
    run = env["run"]
    run.source = source
    return run


class _Interpreted:
    """The step as ``run(operands, scale=None)`` that runs its ops in turn: the same torch ops,
    in the same order, with the same arguments, as the compiled source -- so the same
    bits --, without its compile, which costs as much as planning a class does and more than
    dozens of runs of the loop: most classes of a first training step run once or a few times.
    Its source is written where asked for (``source``: ``explain``, the compile).
    ``promote(entry)`` makes it swap ``entry.run`` for the compiled function
    (``compiled()``) at its :data:`CALLS_BEFORE_CODE`-th call, where ``entry.run`` is still
    it (a wrapper around it stays, as :func:`einc.runtime.program.unroll`'s does)."""

    __slots__ = ("ops", "result", "finish", "cast", "env", "calls", "holder", "_source")

    def __init__(self, ops, result: str, finish: str, cast, env: dict):
        self.ops, self.result, self.finish, self.cast, self.env = ops, result, finish, cast, env
        self.calls, self.holder, self._source = 0, None, None     # holder: the entry to promote

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = _text(self.ops, self.result, self.finish, self.cast, True)
        return self._source

    def compiled(self):
        return _compiled(self.source, self.env)

    def promote(self, entry) -> None:
        self.holder = entry     # (one entry: each class build makes its own run)

    @property
    def direct(self):
        """The one function the step calls, on its operands as they come, where it does
        nothing else (no view, copy, cast or scale of its own): ``mm`` of a product
        whose operands are its matrices as they lie; else None."""
        if len(self.ops) != 1 or self.finish or self.cast is not None:
            return None
        op = self.ops[0]
        return self.env[op[2]] if op[0] == "call" and op[1] == self.result and op[3] == ("a", "b") else None

    def __call__(self, operands, scale=None):
        self.calls += 1
        if self.calls >= CALLS_BEFORE_CODE and self.holder is not None:
            entry, self.holder = self.holder, None      # (another thread may have taken it since)
            if entry is not None and entry.run is self:     # (not where the entry's run wraps it: the wrapper stays)
                entry.run = self.compiled()
        a, b = operands
        e = {"a": a, "b": b}
        for op in self.ops:
            kind, v = op[0], op[1]
            if kind == "reshape":
                e[v] = e[v].reshape(*[math.prod([e[s][d] for s, d in g]) for g in op[2]])
            elif kind == "method":
                e[v] = getattr(e[v], op[2])(*op[3])
            elif kind == "shape":
                e[v] = e[op[2]].shape
            elif kind == "attribute":
                e[v] = getattr(e[v], op[2])
            elif kind == "call":
                e[v] = self.env[op[2]](*[e[x] for x in op[3]])
            else:
                e[v] = e[op[2]] * e[op[3]]
        r = e[self.result]
        if self.finish:
            r = r.contiguous()
        if self.cast is not None:
            r = r.to(self.cast)
        return r if scale is None else r * scale


_codes: dict = {}       # source -> its code object


def _code(source: str):
    """``source`` compiled, once: classes of one structure (an equation's size-1 patterns,
    dtypes, devices) often generate the same text, each with its own environment, and a
    compile costs more than planning the class does."""
    code = _codes.get(source)
    if code is None:
        if len(_codes) >= 4096:     # a stream of ever-new structures: start again
            _codes.clear()
        code = _codes[source] = compile(source, "<einc size class>", "exec")
    return code


def clear() -> None:
    _codes.clear()
    _steps.clear()


def runner(plan, dtype, orders=None, layout="contiguous", result_dtype=None):
    """``run(operands, scale=None)`` of ``plan`` (one step, planned at a class's sizes) for
    operands of ``dtype`` (one float or complex dtype) of any shape of the class, read in
    ``orders`` (:func:`einc.runtime.torch_executor.memory_orders`); the result contiguous,
    or with ``layout="any"`` dense in the order the last op writes it, and cast to
    ``result_dtype`` where given and different.  None where the step is none of the kinds
    above (a matrix product whose cheapest layout loops)."""
    step = plan.steps[0]
    free = layout == "any"
    cast = result_dtype if result_dtype is not None and result_dtype != dtype else None
    if step.kind == REDUCE:
        fn, natural = _reduce(step, plan, dtype, True, True, False, free)
        return _one(fn, result_dtype if result_dtype is not None and result_dtype != natural else None)
    return _pairwise(plan, step, dtype, orders or (None, None), free, True, cast)


def step_functions(plan, dtype, orders=None, layout="contiguous"):
    """One function per step of ``plan`` (several steps, planned at a class's sizes) for
    values of any shape of the class, as :func:`runner` makes its one step: each
    intermediate laid along its step's output indices as a view, the last one contiguous
    (or dense, with ``layout="any"``); ``runtime/program.unroll`` chains them."""
    free, n = layout == "any", plan.num_operands
    functions = []
    for s, step in enumerate(plan.steps):
        final = s == len(plan.steps) - 1
        if step.kind == REDUCE:
            functions.append(_reduce(step, plan, dtype, final, step.operands[0] < n, False, free)[0])
        else:
            reads = tuple([orders[v] if orders and v < n else None for v in step.operands])
            functions.append(_pairwise(plan, step, dtype, reads, free, final, None, whole=False))
    return functions


def _pairwise(plan, step, dtype, orders, free, final, cast, whole=True):
    """A two-operand step's function (:meth:`_Source.function`): ``final``, its result
    contiguous (unless ``free``) and cast to ``cast``.  What the function does depends on
    the step's indices, which of its summed ones have size 1 (:func:`_analysed` reads no
    other size), and the decisions taken at its sizes (a matrix product's layout): steps
    alike in those (classes of one equation at other sizes, whatever their size-1
    dimensions outside the sums) share the step's analysis and the function's ops."""
    g = plan.graph
    ones = frozenset([i for i in step.summed if g.sizes[i] == 1])
    key = (step.kind, step.inputs, step.output, step.summed, plan.num_operands, ones, dtype, orders, free, final, cast,
           whole)
    found = _steps.get(key)
    if found is None:
        if len(_steps) >= 4096:     # a stream of ever-new structures: start again
            _steps.clear()
        found = _steps[key] = (_analysed(plan, step, dtype, orders), {})
    (views, preps, ta, tb, kind), made = found
    out = list(step.output)
    decision, lay = _decision(kind, ta, tb, out, step.summed, g.sizes, dtype, free and final)
    fn = made.get(decision)
    if fn is None:
        fn = made[decision] = _emitted(views, preps, ta, tb, out, step.summed, decision, lay, dtype,
                                       "" if free or not final else ".contiguous()", cast, whole)
    return fn()


_steps: dict = {}       # a step's structure (see _pairwise) -> (its analysis, {decision: made function})


def _analysed(plan, step, dtype, orders):
    """What a two-operand step does before its sizes decide: each operand's view in memory
    order and preparation (diagonals, squeezes, sums of its own indices), the terms after
    them, and the step's kind (one whose shared sums all run over size 1 is a product).
    It reads the sizes of the summed indices only, whether they are 1 (the key of
    :func:`_pairwise`'s memo)."""
    g = plan.graph
    view_a, ta = _in_memory_order(step.inputs[0], orders[0])
    view_b, tb = _in_memory_order(step.inputs[1], orders[1])
    sa, sb, summed = set(ta), set(tb), set(step.summed)
    kind = step.kind
    if kind != PRODUCT and all(g.sizes[i] == 1 for i in summed & sa & sb):
        kind = PRODUCT      # the shared sums run over size 1: a product, as in the per-shape executor
    drop_a, drop_b = (summed & sa, summed & sb) if kind == PRODUCT else (summed - sb, summed - sa)
    prep_a, ta, _, _ = _prep(ta, drop_a, plan, dtype)
    prep_b, tb, _, _ = _prep(tb, drop_b, plan, dtype)
    return (view_a, view_b), (prep_a, prep_b), ta, tb, kind


def _decision(kind, ta, tb, out, summed, sizes, dtype, free_out):
    """``(key, layout)``: what the step's sizes decide, as a key (``PRODUCT``; ``DOT`` for a
    multiply and sum; ``TRAINED_AS_SUM``, the whole indices made blocks and the layout, for
    few outputs of long sums; else the matrix product's layout as the ops read it) and the
    layout (None but for a matrix product)."""
    if kind == PRODUCT:
        return PRODUCT, None
    sa, sb = set(ta), set(tb)
    kept = math.prod(sizes[i] for i in out if i not in sa or i not in sb)
    shared = [i for i in summed if i in sa and i in sb]
    few_long = kept <= _FEW_OUTPUTS and math.prod(sizes[i] for i in shared) >= _LONG_SUM
    if few_long and kind != DOT and kept != 1:
        # matrix products over blocks of the sum, one in 16-bit floats (runtime/torch_executor/
        # blocked.py), trained as the multiply and sum (summed.py); whole indices only (the
        # class's sizes vary, a split's divisor would not), so blocks up to twice as long
        whole = ()
        if dtype not in HALF:
            larger = ta if math.prod(sizes[i] for i in ta) >= math.prod(sizes[i] for i in tb) else tb
            cut = blocked.sum_blocks(larger, set(shared), sizes, split=False, longest=2 * blocked.LONGEST)
            if cut is None:
                return DOT, None
            whole = tuple(cut[0])
        lay = ttgt.choose(ta, tb, [*whole, *out], sizes, _COPY_WORTH_SPARING, dtype.itemsize, broadcast=False,
                          loops=False, free_out=False)
        return (TRAINED_AS_SUM, whole, lay.swap, lay.batch, lay.m, lay.n, lay.k, lay.flip), lay
    if kind == DOT or kept == 1 or few_long:
        return DOT, None
    lay = ttgt.choose(ta, tb, out, sizes, _COPY_WORTH_SPARING, dtype.itemsize, broadcast=False, loops=False,
                      free_out=free_out)
    return (lay.swap, lay.batch, lay.m, lay.n, lay.k, lay.flip), lay


def _emitted(views, preps, ta, tb, out, summed, decision, lay, dtype, finish, cast, whole):
    """:meth:`_Source.function`'s ``made`` of the step: its operands viewed and prepared,
    then, as :func:`_decision` says, a product, a multiply and sum, or the matrix product
    in layout ``lay``, into ``out``."""
    src = _Source()
    for v, view, prep in zip("ab", views, preps):
        fn = _chain([view, prep])
        if fn is not None:
            src.env[f"prep_{v}"] = fn
            src.call(v, f"prep_{v}", v)
    src.read("a", ta)
    src.read("b", tb)
    if decision == PRODUCT:
        _align(src, "a", ta, out)
        _align(src, "b", tb, out)
        if not out:         # two 0-d tensors: as 1-d views (torch_executor._scalar_times says why)
            src.method("a", "reshape", (1,))
            src.method("b", "reshape", (1,))
        src.ops.append(("multiply", "c", "a", "b"))
        if not out:
            src.method("c", "reshape", ())
        return src.function("c", finish, cast, whole)
    if decision == DOT:
        full = out + [i for i in ta if i in summed]
        _align(src, "a", ta, full)
        _align(src, "b", tb, full)
        src.env["mul_sum"] = mul_sum(tuple(range(len(out), len(full))), dtype)
        src.call("c", "mul_sum", "a", "b")
        return src.function("c", finish, cast, whole)
    if decision[0] == TRAINED_AS_SUM:
        batch = list(decision[1])
        inner = _Source()
        inner.read("a", ta)
        inner.read("b", tb)
        _contract(inner, lay, ta, tb, [*batch, *out])
        if batch:
            inner.env["add_blocks"] = functools.partial(torch.sum, dim=tuple(range(len(batch))))
            inner.call("c", "add_blocks", "c")
        product = inner.function("c", "", None, whole=False)()
        full = out + [i for i in ta if i in summed]
        _align(src, "a", ta, full)
        _align(src, "b", tb, full)
        # (named for what it runs forward, as explain shows the step)
        src.env["matrix_products"] = mul_sum(tuple(range(len(out), len(full))), dtype,
                                             forward=_binary(product, _unaligned(ta, full), _unaligned(tb, full)))
        src.call("c", "matrix_products", "a", "b")
        return src.function("c", finish, cast, whole)
    if _contract(src, lay, ta, tb, out):
        finish = ""             # the product's own result, in the equation's order: contiguous
    return src.function("c", finish, cast, whole)


def _align(src: _Source, v: str, term, full) -> None:
    """``v`` over ``term`` as a view laid along ``full``, size 1 where it lacks an index."""
    present = [i for i in full if i in term]
    src.permute(v, term, present)
    src.reshape(v, [[i] if i in term else [] for i in full], present)


def _contract(src: _Source, lay, ta, tb, out) -> bool:
    """One ``mm``/``bmm`` in ``lay``'s layout, its result put in ``out``'s order as a view;
    whether that is the product's result as it is (no permutation)."""
    batch, m, n, k = lay.groups
    left, right = (("b", tb), ("a", ta)) if lay.swap else (("a", ta), ("b", tb))
    # One matrix per side: ``matmul`` takes the batch indices as they are (one op, not a
    # reshape of each operand and of the result around ``bmm``, which it runs).
    stacked = len(batch) > 1 and len(m) == len(n) == len(k) == 1
    lead = [[i] for i in batch] if stacked else [batch] if batch else []
    for (v, term), groups, side in ((left, [*lead, m, k], "l"), (right, [*lead, k, n], "r")):
        if side in lay.flip:        # copied as the transposes of its matrices, which BLAS reads as they are
            flipped = groups[:-2] + [groups[-1], groups[-2]]
            src.permute(v, term, [i for grp in flipped for i in grp])
            src.method(v, "contiguous")
            src.reshape(v, flipped)
            src.method(v, "transpose", -1, -2)
        else:
            order = [i for grp in groups for i in grp]
            src.permute(v, term, order)
            src.reshape(v, groups, order)
    src.call("c", "matmul" if stacked else "bmm" if batch else "mm", left[0], right[0])
    natural = batch + m + n
    if any(len(grp) != 1 for grp in [*lead, m, n]):
        src.reshape("c", [[i] for i in natural])
    src.permute("c", natural, out)
    return _perm(natural, out) is None


def _one(fn, cast):
    if cast is None:
        def run(ops, scale=None):
            r = fn(ops[0])
            return r if scale is None else r * scale
    else:
        def run(ops, scale=None):
            r = fn(ops[0]).to(cast)
            return r if scale is None else r * scale
    return run


__all__ = ["runner", "step_functions", "clear"]
