"""How the torch executor runs a contraction step as one (batched) matrix product:
transpose-transpose-GEMM-transpose, with the copies costed.

A step ``A[ta] B[tb] -> C[out]`` that sums shared indices runs as ``bmm`` over
(batch, M, K) x (batch, K, N).  Many layouts compute the same result: which operand is
the left one (computing C or its transpose), which output indices are batch (every
index of both operands is; an index of one operand's own may join them, the other
operand then broadcast over it with stride 0, no copy), and the order of the indices
inside each group.  They differ in what is copied: an operand whose groups are not
runs of its own index order is copied by the reshape (or, where its matrices have no
unit-stride axis, by ``bmm``); the result, laid out (batch, M, N), is copied into the
contiguous ``out`` order unless the two agree.  :func:`candidates` lists the layouts,
each with its :func:`cost` in nanoseconds from rates measured with torch's ops on the
CPU (1 thread, float32, the development machine; the constants below, calibrated in
bench/measured/copy-model-2026-12-02.md, pairwise.md and permute-copy-2026-12-02.md):

- a copy that keeps the source's unit-stride index innermost moves :data:`COPY_KEEP` ns
  per element, more where the runs it keeps contiguous are short (:data:`SHORT_RUN`),
  and that per-run part more where consecutive runs lie far apart in the source
  (:data:`FAR_STEP`; long runs pay little for it); one that moves it (a transpose of the
  innermost axis) :data:`COPY_MOVE` ns, a little more where an innermost index is short
  (:data:`SHORT_INNER`), and :data:`CONFLICT` times that where both innermost indices
  lie :data:`CONFLICT_APART` elements or more apart in the other layout (in tiles,
  :func:`~einc.runtime.torch_executor.permute_copy.tile_plan`; torch's own copy takes
  several times that); less where the outermost indices agree and leave blocks that
  stay in cache (:data:`BLOCKED`); :data:`FRESH` ns more per element from
  :data:`FRESH_FROM` elements (fresh pages: a quarter of what they add to a clone: the
  partial gradients that training_layout.py's ``for_training`` weighs are priced without them);
- a matrix product :data:`GEMM` ns per flop, slower where a matrix side is short (a side
  of 8 runs at a quarter of the rate; a side of 1, a matrix-vector product, at about a
  tenth, not the hundredth that law carried on gives, and no side slower than that),
  where the left operand's unit stride runs along its rows with few columns, many and far apart
  (:data:`ROWS_UNIT`: a matrix that leaves the cache), or where the right operand's runs along K
  with few rows (:data:`K_UNIT`, the forward's choice only), plus :data:`PER_MATRIX` ns per
  matrix (fewer than :data:`NAIVE_BELOW` multiply-adds each: torch's own loop, not BLAS); its
  backward, where a side is 1, :data:`OUTER` more;

:func:`choose` keeps the cheapest (:data:`pick` chooses among the candidates; tests
replace it to run every layout).  A copied operand whose unit-stride index would move
is copied into its matrices' transposes instead, which BLAS reads as they are
(``flip``).  An operand that lacks every batch index (size-1 ones aside) is read with
stride 0 over the batch, as torch's ``bmm`` reads a broadcast operand: where its matrices
need a copy, the operand alone is copied, once, and then expanded.  Broadcasting an
operand over a batch index that merges with its own batch indices copies it expanded:
that is allowed only where the expanded copy has at most half the elements of the larger
operand, of at least ``worth_sparing`` elements, which
:func:`einc.planner.memory.step_copies` counts.  Where a gradient will be taken, a
broadcast operand's gradient is a sum of partial ones, and the backward of a batched
product with a side of 1 makes one outer product (a product of depth 1) per matrix:
:func:`~einc.runtime.torch_executor.training_layout.for_training` weighs both and may name
another layout for that case.

:func:`choose` costs few of the candidates: a layout's matrix product alone
(:func:`_product_ns`, which depends on the group sizes only) bounds its cost from below,
and each copy adds to it, so one whose product, or product and the copies costed so
far, costs at least the cheapest layout found before it is passed over; no ``Layout``
is made but the chosen one, the layout :data:`pick` takes among them all.  What depends
on the indices' orders alone (a step's layouts before they are costed, how an operand
reads as matrices, what a copy keeps in place) is kept across steps, so that a step
computes its sizes' products and the rates only; an operand copied, read by the two swaps
as transposed matrices, is costed once.  A search whose cheapest layout broadcasts an
operand keeps the cheapest of those that broadcast neither (the first it weighs), which
:func:`~einc.runtime.torch_executor.training_layout.for_training` asks for next.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from .index_orders import _copy_plan, _enumeration, _rows, groups

COPY_KEEP = 0.2         # ns per float32 element: a permuting copy keeping the unit-stride index innermost,
SHORT_RUN = 3.5         # ... plus this over the length of the runs it keeps contiguous
COPY_MOVE = 0.7         # ns per element: one that moves it,
SHORT_INNER = 1         # ... plus this over the shorter of the two innermost indices,
CONFLICT, CONFLICT_APART = 1.5, 1024    # ... times this where both innermost indices lie CONFLICT_APART or more apart
FAR_STEP = 1 << 17      # a copy keeping it: its per-run part (SHORT_RUN / run) times (1 + the source stride
FAR_MOST = 1 << 19      # between consecutive runs, at most this, / FAR_STEP)
BLOCKED = 0.9           # a copy whose outermost indices agree, leaving blocks of at most 2**18 elements: times this
FRESH, FRESH_FROM = 0.25, 1 << 23   # ns per element more for a copy of this many elements or more (fresh pages)
GEMM = 0.0095           # ns per flop of a large float32 matrix product
SHORT_SIDE = 10         # a matrix side s costs (1 + (SHORT_SIDE / s) ** 2) times the rate,
MATVEC = 10             # ... at most this times: a side of 1 (a matrix-vector product)
ROWS_UNIT = 0.8         # left operand read along its rows (unit stride on M), N < 80: times (1 + ROWS_UNIT
ROWS_APART = 1 << 10    # ... * min(M's bytes / ROWS_APART, 1) * min(K / ROWS_DEEP, 1)): its columns far apart
ROWS_DEEP = 512         # ... and many (few, or close: it stays in cache)
K_UNIT = 16             # right operand read along its rows (unit stride on K): times (1 + K_UNIT / M),
K_UNIT_MOST = 0.5       # ... at most 1 + this, where M and N are 8 or more (the forward only: see for_training)
K_UNIT_FROM = 1 << 22   # ... and the product makes this many multiply-adds or more
PER_MATRIX = 60         # ns per matrix of a batched product
NAIVE_BELOW, NAIVE_MATRIX, NAIVE_OUT, NAIVE_MAC = 400, 10, 3.6, 0.7   # _product_ns: ns a matrix, element, multiply-add
OUTER = 600             # ns per matrix of a batched product of depth 1 (the backward of one with a side of 1)
GRAD_PARTIAL = 0.5      # ns per element of a broadcast operand's partial gradients (see for_training)
LOOP = 8000             # ns per product of a looped layout: its views and its call (bench/measured/pairwise.md)
# Steps whose tensors all have fewer elements than this weigh only the layouts with the
# result's group orders and no index moved into the batch (swap and the summed indices'
# order still chosen): their copies save less than the full search costs a step
# (bench/measured/paths-first-call-2026-12-02.md).
SMALL = 1 << 12


@dataclasses.dataclass(frozen=True)
class Layout:
    """One way to run the step: ``swap`` (B is the left operand), the index groups in
    order (``m``: the left operand's own, ``n``: the right one's), which of the left,
    right and result tensors are copied (``copies``, a subset of "lrc"), which copied
    operands are copied as their matrices' transposes (``flip``), and the modelled ns."""

    swap: bool
    batch: tuple
    m: tuple
    n: tuple
    k: tuple
    copies: str
    flip: str
    cost: float
    broadcast: tuple = ()   # batch indices one operand lacks (it is broadcast over them)
    outer: tuple = ()       # the result's first index, looped over: one product per value (see candidates)

    @property
    def groups(self):
        return [list(self.batch), list(self.m), list(self.n), list(self.k)]


def _size(idx, sizes):
    return math.prod(map(sizes.__getitem__, idx))


def copy_ns(src, dst, sizes, expanded=1):
    """Modelled ns per float32 element times elements of a copy from a contiguous tensor over
    ``src`` into one over ``dst`` (the same indices; size-1 ones ignored)."""
    src = tuple([i for i in src if sizes[i] != 1])
    dst = tuple([i for i in dst if sizes[i] != 1])
    return _planned_copy_ns(_copy_plan(src, dst), dst, sizes, expanded)


def _planned_copy_ns(plan, dst, sizes, expanded=1):
    """:func:`copy_ns` of a copy into ``dst`` (size-1 indices left out) given its :func:`_copy_plan`."""
    if plan is None:
        return 0.0
    size = sizes.__getitem__
    elems = math.prod(map(size, dst)) * expanded
    if not elems:
        return 0.0
    # no size 0 then (src holds dst's indices): the stride of an index, the product of the sizes after it
    fresh = elems * FRESH if elems >= FRESH_FROM else 0.0
    if elems // math.prod(map(size, plan[0])) <= 1 << 18:     # a batch of copies of blocks that stay in cache
        elems *= BLOCKED
    if plan[1]:
        run = math.prod(map(size, plan[2]))
        step = math.prod(map(size, plan[3]))      # how far apart in the source the runs follow
        return fresh + elems * (COPY_KEEP + SHORT_RUN / run * (1 + min(step, FAR_MOST) / FAR_STEP))
    _, _, after_src, after_dst, inner_src, inner_dst = plan
    far = CONFLICT if min(math.prod(map(size, after_src)), math.prod(map(size, after_dst))) >= CONFLICT_APART else 1
    return fresh + elems * (COPY_MOVE + SHORT_INNER / min(sizes[inner_src], sizes[inner_dst])) * far


def operand(term, groups, sizes):
    """How a contiguous tensor over ``term`` reads as the stack of matrices ``groups``
    (batch, rows, cols; indices absent from ``term`` are broadcast, stride 0):
    ``(copy ns, copy ns if copied flipped, copied elements, unit stride along rows)``;
    ``copied elements`` is 0 where it reads through views."""
    return _operand(tuple(term), tuple(map(tuple, groups)), sizes)[:4]


def _operand(term, groups, sizes, ones=None):
    """:func:`operand` of a term and groups as tuples (``ones``: the step's indices of size 1,
    where known), and whether it costs the same read with rows and cols swapped, its two
    copies swapped (a copy of it or of its matrices: each order the other's flipped one)."""
    if ones is None or ones:
        ones = frozenset([i for i in (*term, *groups[0], *groups[1], *groups[2]) if sizes[i] == 1])
    kind, along_rows, (plan, dst), (flipped_plan, flipped), wide = _reading(term, groups, ones)
    if kind is None:
        return 0.0, 0.0, 0, along_rows, False
    if kind == "batch":
        ns = _planned_copy_ns(plan, dst, sizes)
        return ns, ns, _size(term, sizes), False, False
    if kind == "matrices":
        return (_planned_copy_ns(plan, dst, sizes), _planned_copy_ns(flipped_plan, flipped, sizes),
                _size(term, sizes), False, True)
    return (_planned_copy_ns(plan, dst, sizes, 1), _planned_copy_ns(flipped_plan, flipped, sizes, 1),
            _size(term, sizes) * _size(wide, sizes), False, True)


@functools.lru_cache(maxsize=4096)
def _reading(term, groups, ones):
    """What :func:`operand` copies, which depends on the indices of size 1 (``ones``) only,
    not on the other sizes (kept across steps of one equation and new shapes):
    ``(kind, unit stride along rows, (the copy's :func:`_copy_plan`, its order), the same of
    the flipped copy, broadcast indices)``, orders without ``ones``; ``kind`` None (views),
    "batch" (a batch index innermost: bmm copies the matrices), "matrices" (its matrices
    copied once, then expanded) or "copy"."""
    kind, along_rows, src, dst, flipped, wide = _read(term, groups, ones)
    if kind is None:
        return kind, along_rows, (None, None), (None, None), None
    live = (lambda order: tuple([i for i in order if i not in ones])) if ones else tuple
    src, dst = live(src), live(dst)
    flipped = live(flipped) if flipped is not None else dst
    return kind, along_rows, (_copy_plan(src, dst), dst), (_copy_plan(src, flipped), flipped), wide


def _read(term, groups, ones):
    """:func:`_reading`'s orders, with size-1 indices: ``(kind, unit stride along rows, source
    order, copy's order, flipped copy's order or None, broadcast indices)``."""
    live = [i for i in term if i not in ones] if ones else list(term)
    pos = {i: p for p, i in enumerate(live)}
    views = True
    wide = []
    for grp in groups:
        g = [i for i in grp if i not in ones] if ones else grp
        own = [i for i in g if i in pos]
        if len(own) != len(g):
            wide += [i for i in g if i not in pos]
            views = views and not own
        if views and own and [pos[i] for i in own] != list(range(pos[own[0]], pos[own[0]] + len(own))):
            views = False
    rows = [i for i in groups[1] if i not in ones] if ones else list(groups[1])
    cols = [i for i in groups[2] if i not in ones] if ones else list(groups[2])
    inner = live[-1] if live else None
    if views:
        if inner is None or inner in rows or inner in cols or not rows or not cols:
            return None, bool(rows) and inner == rows[-1] and bool(cols), None, None, None, None
        return "batch", False, live, [i for i in live if i not in rows + cols] + rows + cols, None, None
    if wide and not any(i in pos for i in groups[0]):
        # broadcast over every batch index it has: its matrices copied once, then expanded
        # (stride 0), as bmm reads them
        order = [i for grp in groups[1:] for i in grp]
        flipped = [i for grp in (groups[2], groups[1]) for i in grp]
        return "matrices", False, live, order, flipped, None
    order = [i for grp in groups for i in grp]
    flipped = [i for grp in (groups[0], groups[2], groups[1]) for i in grp]
    return "copy", False, live + wide, order, flipped, wide


def cost(ta, tb, out, sizes, swap, batch, m, n, k, itemsize=4, memo=None, floor=None, least=0.0, result=True,
         reads=True):
    """``(ns, copies, flip, expanded)`` of one layout (see the module's docstring);
    ``expanded``: the most elements an operand's copy holds beyond the operand's own (a
    copy of it broadcast), 0 if none.  With ``floor`` (see :func:`_flat`), None as soon
    as the copies costed so far (the result's first, where ``result``) and ``least``, the
    product's least cost, reach ``floor[0]``: each part of the sum adds to it; with ``result``
    None (a looped layout's slab), None where the slab is not in the product's own order;
    ``reads`` false: without :data:`K_UNIT`."""
    ta, tb, out, batch, m, n, k = map(tuple, (ta, tb, out, batch, m, n, k))
    ones = frozenset([i for i in (*ta, *tb, *out) if sizes[i] == 1])
    dims = tuple(_size(g, sizes) for g in (batch, m, n, k))
    found = _cost(ta, tb, out, sizes, ones, swap, batch, m, n, k, dims, itemsize / 4, {} if memo is None else memo,
                  floor, least, result, reads)
    return None if found is None else found[:4]


def _cost(ta, tb, out, sizes, ones, swap, batch, m, n, k, dims, scale, memo, floor, least, result, reads=True):
    """:func:`cost` of tuples, given the step's indices of size 1 (``ones``), the groups' sizes
    (``dims``), ``itemsize / 4`` (``scale``) and a dict (``memo``) the layouts of one step share."""
    left, right = (tb, ta) if swap else (ta, tb)
    total, copies, flip, expanded = 0.0, "", "", 0
    natural = (*batch, *m, *n)
    if (None, natural) in memo:         # the result's copy, None where none (layouts of a step share it)
        last = memo[None, natural]
    else:
        copied = [i for i in natural if i not in ones] != [i for i in out if i not in ones] if ones else natural != out
        last = memo[None, natural] = copy_ns(natural, out, sizes) if copied else None
    if result is None and last is not None:     # a looped layout's slab: in its product's order only
        return None
    counted = last * scale if result and last is not None else 0.0
    if floor is not None and counted + least >= floor[0]:
        return None
    rows_unit = k_unit = False
    reads = reads and _k_unit_applies(dims)
    for name, term, stack in (("l", left, (batch, m, k)), ("r", right, (batch, k, n))):
        key = (term, stack)
        found = memo.get(key)
        if found is None:
            # the other swap's reading of this operand, its matrices transposed, where costed
            twin = memo.get((term, (stack[0], stack[2], stack[1])))
            if twin is not None and twin[5]:
                found = memo[key] = (twin[1], twin[0], *twin[2:])
            else:
                found = _operand(term, stack, sizes, ones)
                found = memo[key] = (*found[:4], found[2] if found[2] > _size(term, sizes) else 0, found[4])
        plain, flipped, elems, along_rows, widened, _ = found
        if elems:
            copies += name
            # the right operand's flipped copy is read along K: what that adds to the product weighs on it
            extra = (_product_ns(*dims, scale, rows_unit, True) - _product_ns(*dims, scale, rows_unit)) / scale \
                if reads and name == "r" else 0.0
            if flipped + extra < plain:
                flip += name
                rows_unit = rows_unit or name == "l"
                k_unit = name == "r"
            total += (flipped if name in flip else plain) * scale
            if widened:
                expanded = max(expanded, widened)
        elif name == "l":
            rows_unit = along_rows
        else:
            k_unit = along_rows
        if floor is not None and total + counted + least >= floor[0]:
            return None
    if last is not None:
        copies += "c"
        total += last * scale
    k_read = k_unit and _k_unit_applies(dims)
    total += _product_ns(*dims, scale, rows_unit, k_unit and reads)
    return total, copies, flip, expanded, k_read


def _k_unit_applies(dims) -> bool:
    """Whether :data:`K_UNIT` prices a product of ``dims`` (batch, M, N, K): smaller ones cost
    a few microseconds, where what a copy costs besides its elements (not modelled) weighs more."""
    return min(dims[1], dims[2]) >= 8 and math.prod(dims) >= K_UNIT_FROM


def _product_ns(b, rows, cols, depth, scale, rows_unit=False, k_unit=False):
    """The modelled ns of the matrix product itself; without ``rows_unit`` and ``k_unit``
    (the right operand read along its rows, where :func:`_k_unit_applies`), the least any
    layout of these group sizes pays (the product is symmetric in rows and cols), which
    :func:`choose` bounds a layout's cost by (every copy adds to it)."""
    side = max(min(rows, cols), 1)
    rate = GEMM * scale * min(1 + (SHORT_SIDE / side) ** 2, MATVEC)
    # both operands read so cost about what the dearer reading alone does (bench/measured/permute-copy-2026-12-02.md)
    apart = min(rows * 4 * scale / ROWS_APART, 1) * min(depth / ROWS_DEEP, 1)
    read = max(1 + ROWS_UNIT * apart if rows_unit and cols < 80 else 1,
               1 + min(K_UNIT / rows, K_UNIT_MOST) if k_unit else 1)
    looped = b > 1 and rows * cols * depth < NAIVE_BELOW    # torch's CPU bmm loops over these itself, not BLAS
    return max(2 * b * rows * cols * depth * rate * read + b * PER_MATRIX,
               looped * b * (NAIVE_MATRIX + rows * cols * (NAIVE_OUT + depth * NAIVE_MAC)) * scale * read)


def candidates(ta, tb, out, sizes, worth_sparing, itemsize=4, small=None, broadcast=True, loops=True, reads=True):
    """Every layout considered for ``ta, tb -> out`` (summed indices: those of both not in
    ``out``; each operand's lonely indices summed away before), in the order they are
    enumerated: no own index moved into the batch first, groups ordered as in ``out``
    first, so that ties keep those.  Moved into the batch (unless ``broadcast`` is false):
    the leading own indices of ``out``, ``ta`` or ``tb`` (up to the first summed one), the
    other operand broadcast over them; each group ordered as one of the tensors holding it
    orders it.  A step whose tensors all have fewer than ``small`` elements (default
    :data:`SMALL`) weighs only the first of those moves and orders.

    Then (unless ``loops`` is false) the looped layouts: where the result's first index
    is the outermost of the one operand holding it (:func:`_looped_over`), one product per
    value of it (:data:`LOOP` ns more each) for the layouts of the step without it that
    :func:`_inner` admits.  Per ``b``, ``bhij,bhjk->bhik`` with A ``(b, 1, i, j)`` and B
    ``(1, h, j, k)`` reads A with stride 0 over ``h``, where one product copies both
    operands expanded, or B and the result.  ``reads`` false: without :data:`K_UNIT` (see
    :func:`~einc.runtime.torch_executor.training_layout.for_training`)."""
    found = [Layout(*row[:9]) for row in _flat(ta, tb, out, sizes, worth_sparing, itemsize, small, broadcast,
                                               reads=reads)]
    first = _looped_over(ta, tb, out, sizes, small, itemsize) if loops else None
    if first is not None:
        found += [dataclasses.replace(Layout(*row[:9]), outer=(first,), cost=sizes[first] * (row[7] + LOOP))
                  for row in _flat(*_inner(ta, tb, out, first, sizes, worth_sparing, itemsize, small, broadcast),
                                   reads=reads)]
    return found


def _inner(ta, tb, out, first, sizes, worth_sparing, itemsize, small, broadcast, floor=None):
    """:func:`_flat`'s arguments for the looped layouts over ``first``: the step without it,
    each product written with ``out=`` into its slab of the result, which must be in the
    product's own order (``result`` None: see :func:`cost`)."""
    return ([i for i in ta if i != first], [i for i in tb if i != first], out[1:], sizes, worth_sparing, itemsize,
            small, broadcast, floor, None)


def _few(ta, tb, out, sizes, small):
    """Whether every tensor of the step has fewer than ``small`` elements (default :data:`SMALL`)."""
    return max(_size(ta, sizes), _size(tb, sizes), _size(out, sizes)) < (SMALL if small is None else small)


# A looped layout's products write into slabs of one result, those autograd records into
# tensors of their own, stacked: the same bits only where each product's output starts as
# a fresh tensor does, as MKL's results may depend on the output's alignment (seen in
# float64: bench/measured/zen5-host-2026-12-03.md). So every slab starts at a multiple of
# this many bytes, as torch's CPU allocations do.
SLAB_ALIGN = 64


def _looped_over(ta, tb, out, sizes, small, itemsize=4):
    """The index the looped layouts loop over (the result's first), or None where there are
    none: an index of one operand only, its outermost, whose slabs of the result each start
    at a multiple of :data:`SLAB_ALIGN` bytes.  (Over a batch index a loop spares nothing
    where each slab is in its product's order: one batched product writes the same.)"""
    first = out[0] if out else None
    if first is None or sizes[first] <= 1 or _few(ta, tb, out, sizes, small) or (first in ta and first in tb):
        return None
    if _size(out[1:], sizes) * itemsize % SLAB_ALIGN:
        return None
    leads = [next((i for i in t if sizes[i] != 1), None) for t in (ta, tb)]
    return first if first in leads else None


def _flat(ta, tb, out, sizes, worth_sparing, itemsize, small, broadcast, floor=None, result=True, reads=True):
    """The one-product layouts of :func:`candidates`, in its order, as ``Layout`` fields
    (those that would copy a broadcast operand expanded left out).  With ``floor`` (a
    one-item list the caller lowers as it finds cheaper layouts), a layout whose matrix
    product alone (:func:`_product_ns`), or with the copies costed so far (the result's,
    where ``result``, then each operand's), costs ``floor[0]`` or more is left out: it
    cannot cost less than a layout found before it.  ``result``: see :func:`cost`; ``reads``
    false: without :data:`K_UNIT`.  Each row ends with whether the product reads its right
    operand along K (where :data:`K_UNIT` applies, counted or not)."""
    largest = max(_size(ta, sizes), _size(tb, sizes))
    few = _few(ta, tb, out, sizes, small)
    memo = {}
    ta, tb, out = tuple(ta), tuple(tb), tuple(out)
    ones = frozenset([i for i in (*ta, *tb, *out) if sizes[i] == 1])
    scale = itemsize / 4
    moves, k_set = _enumeration(ta, tb, out, few, broadcast)
    depth = _size(k_set, sizes)
    least = 0.0
    for batch_set, m_set, n_set in moves:
        dims = _size(batch_set, sizes), _size(m_set, sizes), _size(n_set, sizes), depth
        swapped = dims[0], dims[2], dims[1], depth
        if floor is not None:
            least = _product_ns(*dims, scale)
            if least >= floor[0]:
                continue
        for swap, batch, lm, ln, k, wide in _rows(ta, tb, out, few, batch_set, m_set, n_set, k_set):
            if floor is not None and least >= floor[0]:
                break       # and the rest of this move: the floor only falls
            found = _cost(ta, tb, out, sizes, ones, swap, batch, lm, ln, k, swapped if swap else dims, scale, memo,
                          floor, least, result, reads)
            if found is None:
                continue
            ns, copies, flip, expanded, k_read = found
            if expanded and (largest < worth_sparing or 2 * expanded > largest):
                continue    # a broadcast operand copied expanded: see the module's docstring
            yield swap, batch, lm, ln, k, copies, flip, ns, wide, k_read


def pick(found):
    """The cheapest layout (the first of equals)."""
    return min(found, key=lambda lay: lay.cost)


_PICK = pick        # tests replace ``pick`` to run other layouts: choose then lists every candidate


@functools.lru_cache(maxsize=1024)
def _candidates(ta, tb, out, sizes, worth_sparing, itemsize, small, broadcast, loops, reads=True):
    return tuple(candidates(list(ta), list(tb), list(out), dict(sizes), worth_sparing, itemsize, small, broadcast,
                            loops, reads))


def choose(ta, tb, out, sizes, worth_sparing, itemsize=4, broadcast=True, loops=True, free_out=False,
           reads=True) -> Layout:
    """The layout :data:`pick` takes among the :func:`candidates` (kept per step signature);
    with ``broadcast`` false, among those that broadcast neither operand; with ``loops``
    false, among those that run one product (what autograd records: a looped layout
    writes into its result with ``out=``); with ``free_out`` (the last step where the
    caller takes any layout) no copy of the result is counted, so each candidate's own
    order of the result is kept (:func:`without_result_copy`); with ``reads`` false, the
    products priced without :data:`K_UNIT`
    (:func:`~einc.runtime.torch_executor.training_layout.for_training`)."""
    if pick is _PICK and not (loops and free_out):
        # the choice depends on the indices' places and sizes, not their names: renamed 0, 1, ...
        # in order of appearance, steps alike but for their names (a chain, a lattice) share it
        names = tuple(dict.fromkeys([*ta, *tb, *out]))
        place = {i: k for k, i in enumerate(names)}.__getitem__
        args = (tuple(map(place, ta)), tuple(map(place, tb)), tuple(map(place, out)), tuple(map(
            sizes.__getitem__, names)), worth_sparing, itemsize, SMALL, broadcast, loops, free_out)
        # K_UNIT only adds to a layout's cost: the cheapest without it is the cheapest with it
        # unless it reads its right operand along K, and only then is the search made again
        lay, k_read = _cheapest(*args, False)
        if reads and k_read:
            lay, _ = _cheapest(*args, True)
        return _named(lay, names)
    local = tuple((i, sizes[i]) for i in sorted(set(ta) | set(tb)))
    found = list(_candidates(tuple(ta), tuple(tb), tuple(out), local, worth_sparing, itemsize, SMALL, broadcast, loops,
                             reads))
    if free_out:
        found = [without_result_copy(lay, out, sizes, itemsize) for lay in found]
    return pick(found)


def _named(lay, names) -> Layout:
    """The ``Layout`` of the fields ``lay`` of a step renamed 0, 1, ..., its indices named ``names`` again."""
    if names == tuple(range(len(names))):       # named so already (a class's step is)
        return Layout(*lay)
    name = names.__getitem__
    return Layout(lay[0], tuple(map(name, lay[1])), tuple(map(name, lay[2])), tuple(map(name, lay[3])),
                  tuple(map(name, lay[4])), lay[5], lay[6], lay[7], tuple(map(name, lay[8])), tuple(map(name, lay[9])))


@functools.lru_cache(maxsize=1024)
def _cheapest(ta, tb, out, sizes, worth_sparing, itemsize, small, broadcast, loops, free_out, reads):
    """``(layout, whether it reads its right operand along K)``: :func:`pick` of the
    :func:`candidates` (``free_out``: :func:`without_result_copy`'s; ``reads`` false: without
    :data:`K_UNIT`), those that cannot cost less than the cheapest found before them not costed
    through (:func:`_flat`), the layout as a ``Layout``'s fields (:func:`choose` makes the one
    ``Layout``); the indices are 0, 1, ..., ``sizes`` theirs in order."""
    kept = None if broadcast or loops else _PLAIN.pop((ta, tb, out, sizes, worth_sparing, itemsize, small, free_out,
                                                       reads), None)
    if kept is not None:
        return kept
    scale, best, floor, plain = itemsize / 4, None, [math.inf], None
    # free_out weighs each layout's cost less its result copy, rounded to 0.001: the bounds hold up to that
    # and the subtraction's error, a few ulps of the result copy at most (copy_ns's most per element, times its size)
    most = FRESH + max(COPY_KEEP + SHORT_RUN * (1 + FAR_MOST / FAR_STEP), (COPY_MOVE + SHORT_INNER) * CONFLICT)
    slack = 1e-9 * most * _size(out, sizes) * scale + 0.001
    for row in _flat(ta, tb, out, sizes, worth_sparing, itemsize, small, broadcast, floor, not free_out, reads):
        if row[8] and plain is None:
            plain = best        # the cheapest of the first move's layouts, which broadcast neither operand
        ns = row[7]
        if free_out:
            saved = copy_ns([*row[1], *row[2], *row[3]], out, sizes) * itemsize / 4 if "c" in row[5] else 0.0
            ns = round(ns - saved, 3)
        if best is None or ns < best[0]:       # the first of equals, as pick
            best = ns, row
            floor[0] = (ns + slack) * (1 + 1e-9) if free_out else ns
    if best[1][8] and not reads:
        # for_training asks next for the cheapest that broadcasts neither operand: the first move's, kept for it
        if len(_PLAIN) >= 1024:
            _PLAIN.clear()
        _PLAIN[ta, tb, out, sizes, worth_sparing, itemsize, small, free_out, reads] = _finished(plain, free_out)
    first, looped = _looped_over(ta, tb, out, sizes, small, itemsize) if loops else None, None
    # a looped layout costs sizes[first] * (its product + LOOP) or more (none below 0)
    inner_floor = [best[0] / sizes[first] * (1 + 1e-9) - LOOP] if first is not None else [0.0]
    if inner_floor[0] > 0:
        for row in _flat(*_inner(ta, tb, out, first, sizes, worth_sparing, itemsize, small, broadcast, inner_floor),
                         reads=reads):
            ns = sizes[first] * (row[7] + LOOP)
            if ns < best[0]:
                best, looped = (ns, row), first
                inner_floor[0] = ns / sizes[first] * (1 + 1e-9) - LOOP
    return _finished(best, free_out, () if looped is None else (looped,))


# _cheapest's answers without broadcasting (and loops), reads false, found by its search with them
_PLAIN = {}


def _finished(best, free_out, outer=()):
    """:func:`_cheapest`'s answer of ``best``, ``(its cost, :func:`_flat`'s row)``: the cost as
    weighed (``free_out``: less its result copy, as :func:`without_result_copy` makes it)."""
    ns, row = best
    return (*row[:5], row[5].replace("c", "") if free_out else row[5], row[6], ns, row[8], outer), row[9]


def cache_clear() -> None:
    """Forget every step's layouts (after a change of the model's constants), and what
    was kept of each equation's terms."""
    for cached in (_candidates, _cheapest, _enumeration, _rows, _reading, _copy_plan, *_CLEARED_WITH):
        cached.cache_clear()
    _PLAIN.clear()


# other modules' caches of what this model decides (direct.py's layouts), forgotten with its own
_CLEARED_WITH = []


def clear_with(cached) -> None:
    """Have :func:`cache_clear` clear ``cached`` (an ``lru_cache``) too."""
    _CLEARED_WITH.append(cached)


def without_result_copy(lay: Layout, out, sizes, itemsize=4) -> Layout:
    """``lay`` where its result is kept in the order the product writes it: its cost less
    :func:`cost`'s copy into ``out``, ``c`` dropped from its copies.  The cost is rounded
    to a thousandth of a ns, so that layouts equal but for that copy stay equal (the first
    of equals is kept: the subtraction's rounding error picked a swapped product)."""
    saved = copy_ns([*lay.batch, *lay.m, *lay.n], out, sizes) * itemsize / 4 if "c" in lay.copies else 0.0
    return dataclasses.replace(lay, copies=lay.copies.replace("c", ""), cost=round(lay.cost - saved, 3))


__all__ = ["Layout", "cache_clear", "candidates", "choose", "clear_with", "cost", "groups", "operand", "pick",
           "without_result_copy"]
