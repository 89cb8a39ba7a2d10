"""The torch executor: a :class:`~einc.planner.plan.Plan` run step by step on torch ops.

``step_functions`` turns each step into a closure that does only what that step needs,
decided once per key: diagonals and single-operand sums first (views where possible),
then a matrix product for ``contract`` steps, multiply-and-sum for ``dot`` steps
(torch.einsum would run a batched matrix-vector product there, many times slower on CPU:
bench/measured/chunks.md), a batch of matrix products over blocks of the sum where a
``contract`` step has few outputs of long sums (:mod:`einc.runtime.torch_executor.blocked`),
a broadcasting multiply for ``product`` steps, and nothing more for ``reduce`` steps.
Every op is differentiable and has a vmap rule, so autograd and ``torch.func`` work through it.
The final step returns a fresh tensor in standard contiguous layout, or with ``layout="any"`` a
fresh dense, non-overlapping one in the order its last op writes it (:func:`_finish`): the
matrix product's output permuted as a view, no final copy planned or made.

Copies around the matrix products, which torch's autograd then differentiates: the layout of each
product (which operand is left, which indices are batch, their order) is the one whose copies cost
least (:mod:`einc.runtime.torch_executor.ttgt`), unweighed where too small to repay the choice
(:mod:`einc.runtime.torch_executor.direct`); a permuted result whose gradient would reach
``bmm`` as matrices with no unit-stride axis, or a large one whose gradient torch would copy
anyway, gets a one-copy backward (:class:`_Relayout`, or below ``permute_copy.MIN_BYTES`` a hook:
:func:`~einc.runtime.torch_executor.relayout.relayout`).  A large last product whose result is
permuted is made a chunk at a time, each chunk copied into the result while in cache, and a large
multiply and sum a block at a time (:mod:`einc.runtime.torch_executor.chunked`; the multiply and sum,
in float32 for 16-bit floats: :mod:`einc.runtime.torch_executor.summed`).  Where a gradient
is taken, a step may train in other ops than it runs (an operand whose matrices have no unit-stride
axis copied once into a contiguous stack, :func:`_layout`; ``bmm``'s backward where ``mm``'s would
cost more, :mod:`einc.runtime.torch_executor.backward`; a broadcast operand's training layout; the
whole product of a chunked one; a looped layout's one product): it then runs as
:mod:`einc.runtime.torch_executor.recorded`'s ``Recorded``, the same ops forward, their backward.
"""

from __future__ import annotations

import functools
import math

import torch

from ...errors import DtypeError
from ...planner.memory import COPY_WORTH_SPARING, FEW_OUTPUTS, LONG_SUM
from ...planner.plan import CONTRACT, DOT, PRODUCT, REDUCE, Plan, Step
from ..dtypes import FLOAT32_OF, INT64_EXACT, WIDE_UNSIGNED
from . import blocked, direct, recorded, reuse
from .chunked import plan_chunks
from .looped import looped
from .orders import memory_orders, read_order
from .permute_copy import permuted_copy as _permuted_copy
from .recorded import no_unit_stride, recordable
from .relayout import _Relayout  # noqa: F401 - the one-copy backward, named here by the docstring and tests
from .relayout import contiguous_grad as _contiguous_grad
from .relayout import copied_back as _copied_back
from .relayout import copied_view as _copied_view
from .relayout import relayout as _relayout
from .relayout import strided_matrices as _strided_matrices
from .summed import HALF, mul_sum

WIDER = {**{dtype: torch.int64 for dtype in INT64_EXACT}, **FLOAT32_OF}     # what ``widen`` makes of a dtype


def _integral(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def _perm(src, dst):
    """The permutation taking index order ``src`` to ``dst``, or None if identity."""
    p = tuple(map(src.index, dst))
    return None if p == tuple(range(len(p))) else p


def _chain(fns):
    if len(fns) == 2:               # (most chains: a step's view and its layout)
        f, g = fns
        return g if f is None else f if g is None else (lambda x: g(f(x)))
    fns = [f for f in fns if f is not None]
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]

    def chained(x):
        for f in fns:
            x = f(x)
        return x
    return chained


def _prep(term, lonely, plan: Plan, dtype, widen=False):
    """Diagonals, squeezes and sums of the indices ``lonely`` to this operand.

    Returns ``(fn or None, remaining term, dtype after, whether it computes)``.
    A sum of an integral tensor promotes to int64, as torch.einsum's does; with two
    or more operands torch squeezes size-1 indices instead of summing them, so einc does
    the same, giving the same result dtype for integers; with one operand torch sums
    them, and so does einc (a sum starts at +0.0: a -0.0 there gives +0.0).  With ``widen``
    an integer operand narrower than int64 (or uint16/32/64) that no sum here promotes is made int64, a float16 /
    bfloat16 one float32 (complex32: complex64), after its sums and views: no larger
    copy than the step needs (``widen`` is asked only for the one dtype: narrow integers
    with an int64 result, 16-bit floats in a slice of a sliced plan, runtime/sliced.py).
    """
    if not lonely and not widen and len(set(term)) == len(term):
        return None, list(term), dtype, False       # (most operands of a network: nothing to do)
    g = plan.graph
    term = list(term)
    fns = []
    while len(set(term)) != len(term):
        i = next(i for i in term if term.count(i) > 1)
        d1 = term.index(i)
        d2 = term.index(i, d1 + 1)
        fns.append(lambda x, d1=d1, d2=d2: x.diagonal(0, d1, d2))
        term = [t for k, t in enumerate(term) if k not in (d1, d2)] + [i]
    squeeze = [d for d, i in enumerate(term) if i in lonely and g.sizes[i] == 1 and plan.num_operands > 1]
    if squeeze:
        sq = squeeze[0] if len(squeeze) == 1 else tuple(squeeze)   # one: squeeze.dim, no list to read
        fns.append(lambda x: x.squeeze(sq))
        term = [i for d, i in enumerate(term) if d not in squeeze]
    summed = tuple(d for d, i in enumerate(term) if i in lonely)
    if summed:
        fns.append(lambda x: x.sum(summed))
        term = [i for i in term if i not in lonely]
        if _integral(dtype):
            dtype = torch.int64
    wide = WIDER.get(dtype) if widen else None
    cast = wide is not None
    if cast:
        fns.append(lambda x: x.to(wide))
        dtype = wide
    return _chain(fns), term, dtype, bool(summed) or cast


def _reduce(step, plan, dtype, final, is_input, widen=False, free=False):
    fn, term, dtype, computed = _prep(step.inputs[0], set(step.summed), plan, dtype, widen)
    perm = _perm(term, list(step.output))
    tail = [fn, (lambda x: x.permute(perm)) if perm else None]
    if final and (computed or not is_input):
        tail.append(_dense if free and not computed else _finish(free))
    elif final:                                 # only views of the caller's tensor so far
        term = step.inputs[0]
        if len(term) == 2 and term[0] == term[1] and step.output == term[:1]:
            return torch.diag, dtype            # ``ii->i``: one op that copies the diagonal
        tail.append(torch.clone if free else _fresh)   # "any": a dense view's strides kept (``ij->ji``)
    return _chain(tail) or (lambda x: x), dtype


def _fresh(x):
    """A contiguous tensor that shares no memory with ``x``."""
    y = x.contiguous()
    return y.clone() if y is x else y


def _dense(x, check=torch.ops.aten.is_non_overlapping_and_dense.default):
    """``x`` where it is dense and non-overlapping (a view of an intermediate, a diagonal,
    may not be), else a contiguous copy."""
    return x if check(x) else x.contiguous()


def _finish(free):
    """The final step's last function on a tensor its ops computed: contiguous, or with
    ``free`` (``layout="any"``) none (torch allocates an op's result dense, and a
    permutation keeps it so)."""
    return None if free else torch.Tensor.contiguous


def _aligned(term, out, sizes):
    """A view of a tensor over ``term`` laid along ``out`` with size-1 gaps, for broadcasting."""
    present = [i for i in out if i in term]
    perm = _perm(term, present)
    shape = tuple(sizes[i] if i in term else 1 for i in out)
    fns = []
    if perm:
        fns.append(lambda x: x.permute(perm))
    if len(present) != len(out):
        fns.append(lambda x: x.reshape(shape))
    return _chain(fns)


def _unaligned(term, out):
    """The tensor over ``term`` that :func:`_aligned`'s view of it was made from: its size-1
    gaps dropped, its dimensions in ``term``'s order."""
    gaps = tuple(d for d, i in enumerate(out) if i not in term)
    perm = _perm([i for i in out if i in term], list(term))
    return _chain([(lambda x: x.squeeze(gaps)) if gaps else None, (lambda x: x.permute(perm)) if perm else None])


def _in_memory_order(term, order):
    """``(view, term)``: an operand over ``term`` viewed with its dimensions in memory order
    (``order``, :func:`memory_orders`), and the term in that order: the copy-cost model
    (runtime/torch_executor/ttgt.py) weighs an operand as laid out in its term's order, so a permuted
    view read as it is would be copied across its rows (``zabk,kj->zbja`` on a permuted
    view of a contiguous ``abzk`` tensor: measured in bench/measured/pairwise.md)."""
    if order is None:
        return None, term
    return (lambda x: x.permute(order)), tuple(term[d] for d in order)


def _pairwise(step: Step, plan: Plan, dtypes, final, uniform, widen=False, orders=(None, None), free=False):
    g = plan.graph
    view_a, ta = _in_memory_order(step.inputs[0], orders[0])
    view_b, tb = _in_memory_order(step.inputs[1], orders[1])
    sa, sb = set(ta), set(tb)
    summed = set(step.summed)
    kind = step.kind
    if kind != PRODUCT and set(map(g.sizes.__getitem__, summed & sa & sb)) <= {1}:
        kind = PRODUCT      # the shared sums run over size 1: a product, as in torch.einsum
    drop_a, drop_b = (summed & sa, summed & sb) if kind == PRODUCT else (summed - sb, summed - sa)
    prep_a, ta, da, _ = _prep(ta, drop_a, plan, dtypes[0], widen)
    prep_b, tb, db, _ = _prep(tb, drop_b, plan, dtypes[1], widen)
    prep_a, prep_b = _chain([view_a, prep_a]), _chain([view_b, prep_b])
    out = list(step.output)
    if da != db and torch.int64 in (da, db) and {da, db} & WIDE_UNSIGNED:
        # a sum made one side int64 (torch's promotion); torch has none with uint16/32/64
        # (a slice's step may meet them so: a,b-> sliced): the unsigned side in int64 too
        prep_a = _chain([prep_a, lambda x: x.to(torch.int64)]) if da != torch.int64 else prep_a
        prep_b = _chain([prep_b, lambda x: x.to(torch.int64)]) if db != torch.int64 else prep_b
        da = db = torch.int64
    if kind == PRODUCT:
        al_a, al_b = _aligned(ta, out, g.sizes), _aligned(tb, out, g.sizes)
        core = _binary(_times if out else _scalar_times, _chain([prep_a, al_a]), _chain([prep_b, al_b]))
        dtype = torch.promote_types(da, db)
        return _chain_out(core, _finish(free) if final else None), dtype

    if da != db and uniform:
        # Only an integer sum promoted one side to int64 (torch.einsum trips over this
        # itself); contract in the wider dtype.
        da = db = torch.promote_types(da, db)
        prep_a = _chain([prep_a, lambda x: x.to(da)])
        prep_b = _chain([prep_b, lambda x: x.to(da)])
    if da == db == torch.bool:
        # torch has no matrix product of bool: contract in int64.  Where torch.einsum
        # answers (a sum over size 0 or 1, an empty result) the caller casts the result to
        # its dtype; where it raises, so does the caller (see runtime/dtypes.py).
        da = db = torch.int64
        prep_a = _chain([prep_a, lambda x: x.to(da)])
        prep_b = _chain([prep_b, lambda x: x.to(da)])
    _check_dtypes(step, plan, da, db)
    if kind == DOT:
        return _dot(ta, tb, out, summed, prep_a, prep_b, da, final, g.sizes, free), da
    kept = math.prod(map(g.sizes.__getitem__, [i for i in out if i not in sa or i not in sb]))
    terms = math.prod(map(g.sizes.__getitem__, summed & sa & sb))
    few_long = kept <= _FEW_OUTPUTS and terms >= _LONG_SUM
    if not _integral(da) and (kept == 1 or few_long):
        # One output per batch element (a batch of dot products, which a matrix product runs as
        # matrix-vector products, many times slower on CPU): multiply and sum, as a dot step
        # does (torch's sum adds in a cascade).  Few outputs per batch element, each a long sum
        # (``abc,abcd->d``: 4 outputs of 68,880 terms): matrix products over blocks of the sum,
        # one product in 16-bit floats (runtime/torch_executor/blocked.py), trained as the
        # multiply and sum (summed.py), which also runs where no block divides the sum
        full = out + [i for i in ta if i in summed]
        k_dims = tuple(range(len(out), len(full)))
        product = None
        if kept != 1 and da in HALF:
            product = _contract(ta, tb, out, g.sizes, None, None, da, False, False)
        elif kept != 1:
            larger = ta if math.prod(map(g.sizes.__getitem__, ta)) >= math.prod(map(g.sizes.__getitem__, tb)) else tb
            cut = blocked.sum_blocks(larger, summed & sa & sb, g.sizes)
            if cut is not None:
                def contract(ta, tb, out, sizes, pa, pb):
                    return _contract(ta, tb, out, sizes, pa, pb, da, False, False)
                product = blocked.product(contract, ta, tb, out, *cut, g.sizes, None, None)
        forward = None if product is None else _binary(product, _unaligned(ta, full), _unaligned(tb, full))
        core = _binary(mul_sum(k_dims, da, tuple(g.sizes[i] for i in full), forward),
                       _chain([prep_a, _aligned(ta, full, g.sizes)]), _chain([prep_b, _aligned(tb, full, g.sizes)]))
        return _chain_out(core, _finish(free) if final else None), da

    return _contract(ta, tb, out, g.sizes, prep_a, prep_b, da, final, free), da


def _contract(ta, tb, out, sizes, prep_a, prep_b, dtype, final, free):
    """A contraction step: a matrix product over (batch, M, K) x (batch, K, N), in the layout
    whose copies cost least (runtime/torch_executor/ttgt.py: which operand is left, which
    indices are batch, the order inside each group).  The last step of ``layout="any"``
    (``free_out``) prices and makes no final copy: the product's output permuted as a view,
    as earlier steps'.  (No closure here: what a step keeps for its first gradient is one
    tuple and one partial, not a cell per name.)"""
    free_out = final and free
    lay = direct.choose(ta, tb, out, sizes, _COPY_WORTH_SPARING, dtype.itemsize, loops=not free_out,
                        free_out=free_out)
    step = (ta, tb, out, sizes, prep_a, prep_b, dtype, final, free)
    if lay.outer:   # (its own products, stacked where recorded, or trained as Recorded: looped.py, _trained)
        fn = looped(lay, ta, tb, out, sizes, prep_a, prep_b, functools.partial(_read_view, sizes=sizes))
        trained = functools.partial(_trained, lay, step, None)
        return _with_grad(fn, _on_first_call(functools.partial(_recorded, fn, trained)))
    fn, training, chunked, _ = _product(lay, *step)
    if direct.weighed(lay):
        # a broadcast operand's gradient may cost more in this layout (runtime/torch_executor/ttgt.py): the
        # layout to train in is weighed by the first call that takes a gradient (most first calls take none)
        training = functools.partial(_trained, lay, step, training)
    if training is not None:
        fn = _with_grad(fn, _on_first_call(functools.partial(_recorded, fn, training)))
    fn = _tagged(fn, lay, chunked) if lay.copies else fn
    return reuse.sparing(fn) if prep_a is None and prep_b is None and chunked is None else fn


def _product(lay, ta, tb, out, sizes, prep_a, prep_b, dtype, final, free):
    """:func:`_matmul`'s ``(fn, what makes its training parts or None, the same in chunks or None,
    its parts)`` of a contraction step in the layout ``lay``."""
    pa, pb, xa, xb = (prep_b, prep_a, tb, ta) if lay.swap else (prep_a, prep_b, ta, tb)
    return _matmul(xa, xb, lay.groups, out, sizes, final and not free, pa, pb, lay.swap, lay.flip, dtype.itemsize)


def _trained(lay, step, training, a, b):
    """The :class:`~einc.runtime.torch_executor.recorded.Parts` a step of layout ``lay`` trains
    as (``step``: :func:`_product`'s arguments less the layout), or None where it trains as it
    runs: ``training(a, b)``'s (or None) where ``training_layout.for_training`` keeps ``lay``, else those
    of the layout it takes, with their stacked copies."""
    ta, tb, out, sizes, _, _, dtype, final, free = step
    other = direct.for_training(lay, ta, tb, out, sizes, _COPY_WORTH_SPARING, dtype.itemsize,
                                free_out=final and free, final=final)
    if other is lay:
        return training(a, b) if training else None
    return _product(other, *step)[3](True)


def _recorded(plain, training, a, b):
    """What runs a step where autograd records it (made by the first such call, on its
    operands ``a``, ``b``): ``plain``, or ``plain`` as runtime/torch_executor/recorded.py's
    ``Recorded``, whose backward is that of ``training(a, b)``'s parts: the same ops
    forward, so the same bits."""
    parts = training(a, b)
    return _unfrozen(plain) if parts is None else recorded.step(plain, parts)


def _unfrozen(plain):
    """``plain`` on copies of its operands made under inference mode, which autograd cannot
    save where it records ``plain``'s ops on views of them (torch.einsum's own copies of
    them are saved; ``Recorded`` saves copies too: ``recorded.saved``)."""
    def run(a, b):
        if a.is_inference() or b.is_inference():
            a, b = (x.clone() if x.is_inference() else x for x in (a, b))
        return plain(a, b)
    return run


def _read_view(term, groups, flip, sizes):
    """An operand over ``term`` as the stack of matrices ``groups`` (:func:`_read` without
    its stacked copy), for a looped layout."""
    return _chain(list(_read(term, groups, sizes, None, flip)[:2]))


def _tagged(fn, lay, chunked=None):
    """``fn`` carrying its layout as ``fn.ttgt`` and, where its product may be made in
    chunks, the step made so on any device as ``fn.chunked`` (measure mode on CUDA times
    a step that copies, and its chunks, as candidates of their own: runtime/dispatch.py)."""
    def run(a, b):
        return fn(a, b)
    run.ttgt, run.chunked = lay, chunked
    return run


def _dot(ta, tb, out, summed, prep_a, prep_b, dtype, final, sizes, free=False):
    """Multiply and sum: ``ta`` and ``tb`` hold the same indices (the summed ones and the
    batch ones, which are ``out``)."""
    perm_b = _perm(tb, ta)
    k_dims = tuple(d for d, i in enumerate(ta) if i in summed)
    kept = [i for i in ta if i not in summed]
    perm_out = _perm(kept, out)
    core = _binary(mul_sum(k_dims, dtype, tuple(sizes[i] for i in ta)), prep_a,
                   _chain([prep_b, (lambda x: x.permute(perm_b)) if perm_b else None]))
    post = [(lambda x: x.permute(perm_out)) if perm_out else None, _finish(free) if final else None]
    return _chain_out(core, _chain(post))


def _matmul(ta, tb, groups, out, sizes, final, prep_a, prep_b, swap, flip, itemsize):
    """``(step, training, chunked, parts)``: the step as one ``bmm``/``mm`` over ``groups`` = (batch,
    rows, cols, summed), each operand permuted and merged to (batch, rows, summed) / (batch,
    summed, cols), the result put in ``out``'s order; ``training(a, b)``, the parts it trains as
    where a gradient is taken (None: as it runs), or None where it always trains as it runs;
    the same a chunk at a time on any device, or None
    (:func:`einc.runtime.torch_executor.chunked.plan_chunks`); ``parts(stacked)``, its product's
    :class:`~einc.runtime.torch_executor.recorded.Parts`.  A batch index
    missing from an operand is broadcast (stride 0; copied expanded where it merges with
    the operand's own batch indices).  An operand named in ``flip`` (``l``, ``r``) is
    copied into the transposes of its matrices (:func:`_flipped`)."""
    batch, m, n, k = groups
    groups_a, groups_b, groups_c = [batch, m, k], [batch, k, n], [batch, m, n]
    mm = torch.bmm
    if not batch:
        groups_a, groups_b, groups_c = groups_a[1:], groups_b[1:], groups_c[1:]
        mm = torch.mm
    prep_a, lay_a, stack_a = _read(ta, groups_a, sizes, prep_a, "l" in flip)
    prep_b, lay_b, stack_b = _read(tb, groups_b, sizes, prep_b, "r" in flip)
    natural = batch + m + n
    res_shape = tuple(map(sizes.__getitem__, natural))
    if math.prod(res_shape) * itemsize >= reuse.MIN_BYTES:
        mm = reuse.into(mm)     # (in the memory of an intermediate the call has deleted)
    perm_out = _perm(natural, out)
    post = [(lambda x: x.reshape(res_shape)) if _merges(groups_c, natural) else None]
    if perm_out and final:
        copy = _permuted_copy(natural, out, sizes)
        if _strided_matrices(out, groups_c, sizes) or _copied_back(natural, out, groups_c, sizes, itemsize):
            copy = _relayout(copy, _permuted_copy(out, natural, sizes), math.prod(res_shape) * itemsize)
        post.append(copy)
    elif perm_out:
        # a view (the call's result in any layout, or a step's inside the call): its gradient arrives
        # as the result's permuted back, copied once where the products' backward would copy it
        post.append(_viewed(perm_out, _permuted_copy(out, natural, sizes))
                    if _copied_view(out, (batch, m, n), sizes) else lambda x: x.permute(perm_out))
    a_fn, b_fn = _chain([prep_a, lay_a]), _chain([prep_b, lay_b])
    post = _chain(post)
    step = _chain_out(_binary(mm, a_fn, b_fn), post)
    chunks = plan_chunks(natural, out, batch or m, sizes, itemsize, bool(batch)) if perm_out and final else None
    anywhere = None
    if chunks is not None:       # (trained as the whole product: runtime/torch_executor/recorded.py)
        whole = _chain_out(mm, post)
        step = _binary(lambda a, b: chunks(a, b, whole), a_fn, b_fn)
        anywhere = _binary(lambda a, b: chunks.anywhere(a, b, whole), a_fn, b_fn)
    reads = (a_fn, stack_a and _chain([prep_a, stack_a])), (b_fn, stack_b and _chain([prep_b, stack_b]))
    parts = functools.partial(recorded.parts, *reads, natural, out, groups_c, sizes, swap)
    made = None
    if stack_a or stack_b or not batch or chunks is not None:   # (made by the first call that takes a gradient)
        thin = None if batch else (ta, tb, m, n, k, flip, sizes, itemsize)
        made = functools.partial(recorded.training_parts, parts, reads, chunks is not None, thin, swap)
    if swap:
        step, anywhere = _swapped(step), anywhere and _swapped(anywhere)
    return step, made, anywhere, parts


def _viewed(perm, back):
    """The permuted view ``perm`` of a step's product, whose gradient (the result's, permuted
    back) the copy ``back`` makes contiguous in the product's order (relayout.py's hook)."""
    return _contiguous_grad(lambda x: x.permute(perm), lambda g: back(g.permute(perm)))


def _read(term, groups, sizes, prep, flip):
    """``(prep, view, stacked)``: an operand over ``term`` as the stack of matrices ``groups``
    (:func:`_layout`; :func:`_flipped` with ``flip``), ``prep`` broadcasting it over the
    batch indices it lacks.  One lacking every batch index of size > 1 is laid out alone,
    copied at most once, then expanded (stride 0), as runtime/torch_executor/ttgt.py counts it."""
    shape = tuple([math.prod(map(sizes.__getitem__, grp)) for grp in groups])
    missing = [i for i in groups[0] if i not in term] if len(groups) == 3 else []
    if missing and all(sizes[i] == 1 for i in groups[0] if i in term):
        own, one = [[i for i in groups[0] if i in term], *groups[1:]], (1, *shape[1:])
        expand = lambda x: x.expand(shape)  # noqa: E731
        lay, stack = (_flipped(term, own, one, sizes), None) if flip else _layout(term, own, one, sizes)
        return prep, _chain([lay, expand]), stack and _chain([stack, expand])
    if missing:                 # expanded along the missing indices, appended (copied by the view's reshape)
        wide, ones = tuple(sizes[i] for i in [*term, *missing]), (1,) * len(missing)
        prep, term = _chain([prep, lambda x: x.reshape(tuple(x.shape) + ones).expand(wide)]), [*term, *missing]
    return (prep, _flipped(term, groups, shape, sizes), None) if flip else (prep, *_layout(term, groups, shape, sizes))


# The copy model's thresholds, which the planner's live-memory bound counts (see
# einc.planner.slicing): what counts as few long sums (_pairwise), and the size of
# the larger operand from which an operand may be broadcast over a batch index and copied
# expanded (runtime/torch_executor/ttgt.py).
_FEW_OUTPUTS, _LONG_SUM, _COPY_WORTH_SPARING = FEW_OUTPUTS, LONG_SUM, COPY_WORTH_SPARING


def _layout(term, groups, shape, sizes):
    """``(view, stacked)``: ``view`` permutes a tensor over ``term`` to the concatenated
    ``groups`` and merges each group; ``stacked`` (None where nothing is permuted) does
    the same, but where that view is a stack of matrices with no unit-stride axis (a
    batch index innermost, as in ``ikc,jkc->ijc``) it copies the operand once into a
    contiguous stack: ``bmm`` would copy it matrix by matrix in each product of the
    backward, where a recorded step's backward (recorded.py) reads the stack instead (a
    forward is faster with ``bmm``'s copies, which stay in cache)."""
    order = [i for grp in groups for i in grp]
    perm = _perm(term, order)
    reshape = (lambda x: reuse.reshaped(x, shape)) if math.prod(shape) >= reuse.MIN_ELEMENTS else \
        (lambda x: x.reshape(shape))
    view = _chain([(lambda x: x.permute(perm)) if perm else None, reshape if _merges(groups, order) else None])
    if perm is None:
        return view, None
    copy = _on_first_call(lambda x: _stack_copy(term, groups, shape, sizes))

    def stacked(x):
        y = view(x)
        return copy(x) if no_unit_stride(y) else y
    return view, stacked


def _merges(groups, order) -> bool:
    """Whether a group of ``groups`` (``order``: their indices) is not one index: a reshape."""
    return len(order) != len(groups) or not all(groups)


def _on_first_call(make):
    """A function that calls the one ``make(*args)`` returns, made on its first call (with
    that call's arguments): what only a gradient runs (most first calls take none) is built
    when one does."""
    made = []

    def run(*args):
        if not made:
            made.append(make(*args))
        return made[0](*args)
    return run


def _flipped(term, groups, shape, sizes):
    """A copy of a tensor over ``term`` as the stack of matrices ``groups`` (batch, rows,
    cols) of shape ``shape``, made as the contiguous stack of their transposes and viewed
    transposed (BLAS reads either): the copy keeps ``term``'s innermost index innermost
    where it is the last of the rows."""
    flipped = groups[:-2] + [groups[-1], groups[-2]]
    order = [i for grp in flipped for i in grp]
    tshape = shape[:-2] + (shape[-1], shape[-2])
    copy = _permuted_copy(term, order, sizes) if _perm(term, order) else (lambda x: x.contiguous())
    return _chain([copy, lambda x: x.view(tshape).transpose(-1, -2)])


def _with_grad(plain, training):
    """``plain(a, b)``, or ``training(a, b)`` where autograd alone will record the product (an
    operand requires grad, grad mode on, nothing else watching: runtime/torch_executor/recorded.py)."""
    grad_enabled = torch.is_grad_enabled

    def run(a, b):
        if (a.requires_grad or b.requires_grad) and grad_enabled() and recordable(a, b):
            return training(a, b)
        return plain(a, b)
    return run


def _stack_copy(term, groups, shape, sizes):
    """A copy of a tensor over ``term`` as the contiguous stack of matrices ``groups``
    (batch, rows, cols), or of their transposes where that copy is a 2-D transpose
    (``ikc`` -> ``(c, i, k)`` is one; ``jkc`` -> ``(c, k, j)`` is not, ``(c, j, k)`` is):
    BLAS reads either as it is."""
    def is_rotation(order):
        return any(order[k:] + order[:k] == list(term) for k in range(1, len(order)))
    flipped = groups[:-2] + [groups[-1], groups[-2]]
    order, flip = [i for grp in groups for i in grp], [i for grp in flipped for i in grp]
    if is_rotation(order) or not is_rotation(flip):
        view = (lambda x: x.view(shape)) if any(len(grp) != 1 for grp in groups) else None
        return _chain([_permuted_copy(term, order, sizes), view])
    tshape = shape[:-2] + (shape[-1], shape[-2])
    return _chain([_permuted_copy(term, flip, sizes), lambda x: x.view(tshape).transpose(-1, -2)])


def _times(a, b):
    return a * b


def _scalar_times(a, b):
    """The product of two 0-d tensors, made of 1-d views of them: torch's ``vmap`` of a
    product whose batched operand is 0-d fails over an empty batch ("select(): index 0 out
    of range"), as ``jacrev`` of a call whose result is empty runs its backward (``,,a->a``
    with ``a`` of size 0), where torch.einsum's 1-d product answers."""
    return (a.reshape(1) * b.reshape(1)).reshape(())


def _binary(op, fa, fb):
    if fa is None and fb is None:
        return op
    if fb is None:
        return lambda a, b: op(fa(a), b)
    if fa is None:
        return lambda a, b: op(a, fb(b))
    return lambda a, b: op(fa(a), fb(b))


def _swapped(core):
    return lambda a, b: core(b, a)


def _chain_out(core, post):
    if post is None:
        return core
    return lambda *xs: post(core(*xs))


def _check_dtypes(step, plan, da, db):
    if da != db:
        what = plan.describe(step)
        raise DtypeError(
            f"einsum(): step {what} contracts T{step.operands[0]} ({da}) with T{step.operands[1]} ({db}); "
            f"a contraction needs one dtype (T0..T{plan.num_operands - 1} are the operands in order): "
            f"convert them first\n  {plan.equation}")


def step_functions(plan: Plan, dtypes, widen: bool = False, orders=None, layout: str = "contiguous"):
    """``(one function per step, the result's dtype)``: each step's function takes that
    step's operands and returns a tensor over its output indices (the last one a fresh
    tensor: contiguous, or with ``layout="any"`` dense and non-overlapping in the order
    its last op writes); ``runtime/program.unroll`` chains them.  With ``widen``
    (:func:`einc.runtime.dtypes.in_int64`; 16-bit floats in a slice, runtime/sliced.py),
    narrow integer operands are made int64, 16-bit floats float32, by the step that reads
    them, after its sums and views: one at a time, as torch's own promotion holds them,
    not all at once.  ``orders`` (:func:`memory_orders`): the operands' dimensions in
    memory, which a contraction step reads them in.

    Raises :class:`~einc.errors.DtypeError` if a contraction step would mix dtypes.
    """
    n = plan.num_operands
    dts = list(dtypes)
    uniform = len(set(dts)) == 1
    free = layout == "any"
    functions = []
    for s, step in enumerate(plan.steps):
        final = s == len(plan.steps) - 1
        if step.kind == REDUCE:
            fn, dt = _reduce(step, plan, dts[step.operands[0]], final, step.operands[0] < n, widen, free)
        else:
            fn, dt = _pairwise(step, plan, [dts[v] for v in step.operands], final, uniform, widen,
                               [orders[v] if orders and v < n else None for v in step.operands], free)
        dts.append(dt)
        functions.append(fn)
    return functions, dts[-1]


__all__ = ["step_functions", "memory_orders", "read_order", "CONTRACT", "DOT", "PRODUCT", "REDUCE"]
