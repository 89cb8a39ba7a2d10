"""Whether a step's single matrix product trains with ``bmm``'s backward or ``mm``'s, which
make different products (runtime/torch_executor/recorded.py makes either, behind the same
``mm`` forward).

torch's ``mm`` backward makes each operand's gradient in that operand's strides: for
``L @ R`` with ``R`` read as a transposed view (column-major), ``R``'s gradient is made
as ``(G^T @ L)^T``, a product whose left operand ``G^T`` is read along its rows, and
``L``'s likewise where ``L`` is the column-major one.  ``bmm``'s backward makes
``G @ R^T`` and ``L^T @ G`` whatever the strides.  The copy-cost model prices a left
operand read along its rows where the product's other side is short and the operand's
columns are many and far apart (:data:`~einc.runtime.torch_executor.ttgt.ROWS_UNIT`); pykeen's NTN ``bcda,bca->bcd``
runs as ``(c, a) @ (a, (b, d))`` with ``a`` = 16, whose ``mm`` backward makes
``((b, d), c) x (c, a)`` with ``G^T`` read along its rows, where ``bmm``'s makes ``(a, c) x (c, (b, d))``,
its short side the rows (bench/measured/broadcast-2026-12-02.md).  The gradient ``bmm`` makes of a
column-major operand is transposed against that operand's layout, and a consumer that
needs the operand's own strides (a leaf's ``.grad``) copies it: :func:`as_bmm` counts
that copy too, and what training so adds, forward and backward: the step then runs as
``recorded.Recorded``, a Python ``autograd.Function`` that makes its operand matrices
again in its backward, where ``mm`` alone is recorded by torch's own autograd
(:data:`RECORDED`).  A thin product whose ``bmm`` backward saves less than that trains as
``mm``.  The training layout's choice (training_layout.py) weighs that step too, through
:func:`trains_recorded`.
"""

from __future__ import annotations

from . import ttgt
from .chunked import plan_chunks

# ns: what training as ``recorded.Recorded`` adds to ``mm``'s own autograd, forward + backward
# (einc's ``ij,kj->ik`` on 2 x 2 matrices trained either way, 1 thread, the thread's CPU time)
RECORDED = 60000


def as_bmm(left, right, m, n, k, flip, sizes, itemsize=4) -> bool:
    """Whether the product of the terms ``left`` over ``(m, k)`` and ``right`` over ``(k, n)``
    (no batch; ``flip`` names those copied into their matrices' transposes, as
    :class:`~einc.runtime.torch_executor.ttgt.Layout` does) has a backward the model prices
    lower as ``bmm`` than as ``mm`` (see the module's docstring)."""
    rows, cols, depth = (ttgt._size(g, sizes) for g in (m, n, k))
    if min(rows, cols, depth) < 2:
        return False        # a side of 1: torch reads such a matrix's strides either way
    col_l = _column_major(left, m, k, "l" in flip, sizes)
    col_r = _column_major(right, k, n, "r" in flip, sizes)
    if not (col_l or col_r):
        return False        # both make G @ R^T and L^T @ G

    def product(r, c, d, along_rows):
        return ttgt._product_ns(1, r, c, d, itemsize / 4, along_rows)
    grad_l = product(depth, rows, cols, col_r) if col_l else product(rows, depth, cols, False)
    grad_r = product(cols, depth, rows, True) if col_r else product(depth, cols, rows, not col_l)
    batched = product(rows, depth, cols, False) + product(depth, cols, rows, not col_l) + RECORDED
    if col_l:
        batched += ttgt.copy_ns([*m, *k], [*k, *m], sizes) * itemsize / 4
    if col_r:
        batched += ttgt.copy_ns([*k, *n], [*n, *k], sizes) * itemsize / 4
    return batched < grad_l + grad_r


def trains_recorded(lay, ta, tb, out, sizes, itemsize=4, final=False) -> bool:
    """Whether a step ``ta, tb -> out`` run in the one-product layout ``lay`` (a
    :class:`~einc.runtime.torch_executor.ttgt.Layout`) trains as ``recorded.Recorded`` in that
    layout, as ``recorded.training_parts`` decides it: where an operand's matrices have no
    unit-stride axis (copied once into a stack), where the product is made in chunks (``final``:
    the call's result, copied into ``out``; ``chunked.plan_chunks``), or where a product with no
    batch has a ``bmm`` backward that :func:`as_bmm` takes, as the torch executor asks it of the
    step's left and right operands."""
    if lay.outer:
        return False
    left, right = (tb, ta) if lay.swap else (ta, tb)
    ones = frozenset([i for i in (*ta, *tb, *out) if sizes[i] == 1])
    for term, stack in ((left, (lay.batch, lay.m, lay.k)), (right, (lay.batch, lay.k, lay.n))):
        if ttgt._reading(tuple(term), tuple(map(tuple, stack)), ones)[0] == "batch" and ttgt._size(term, sizes):
            return True
    natural = (*lay.batch, *lay.m, *lay.n)
    if final and chunked(natural, out, lay.batch or lay.m, sizes, itemsize):
        return True
    return not lay.batch and as_bmm(left, right, lay.m, lay.n, lay.k, lay.flip, sizes, itemsize)


def chunked(natural, out, lead, sizes, itemsize) -> bool:
    """Whether a step's last product over ``natural`` copied into ``out`` may be made in chunks
    (``chunked.plan_chunks`` makes it so), which then trains as ``recorded.Recorded``."""
    return list(out) != list(natural) and plan_chunks(natural, out, lead, sizes, itemsize, False) is not None


def _column_major(term, rows, cols, flipped, sizes) -> bool:
    """Whether a contiguous tensor over ``term`` reads, as the executor lays it out, as a
    matrix ``rows`` x ``cols`` with unit stride along its rows: a view whose innermost
    index is the last of ``rows``, or a copy into the matrix's transpose (``flipped``).  Read
    from the reading :func:`~einc.runtime.torch_executor.ttgt.operand` makes (whether it copies,
    and its unit stride), not its copies' prices, which this does not need."""
    term, groups = tuple(term), ((), tuple(rows), tuple(cols))
    ones = frozenset([i for i in (*term, *groups[1], *groups[2]) if sizes[i] == 1])
    kind, along_rows, _, _, wide = ttgt._reading(term, groups, ones)
    if kind is None:        # read through views
        return along_rows
    # copied where it has elements to copy (operand's count: a copy broadcast over ``wide``)
    return flipped if ttgt._size(term, sizes) and (kind != "copy" or ttgt._size(wide, sizes)) else False
