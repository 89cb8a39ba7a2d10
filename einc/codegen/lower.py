"""Stage 4, lower: a plan step + dtypes (+ the operands' strides) -> a :class:`~einc.codegen.ir.Kernel`.

Pure Python.  Indices keep the graph's ids, which follow the order of first
appearance, so the kernel for a key never depends on the letters a caller used
(``ik,kj`` and ``ab,bc`` lower to the same kernel, byte for byte).

The lowering is layout-aware.  Strides stay runtime arguments, so a kernel is correct
for any strides, but the *order* of the indices inside each group, the roles of the
two operands of a matrix product and which batch index rides inside the tile follow
the strides the operands had when the kernel was built (contiguous where none are
given; intermediates are always contiguous in their step's output order):

- the result's unit-stride index lies along N (A and B are swapped where it would lie
  along M), so the accumulator's fast axis is the store's;
- inside ``m`` the indices follow A's strides, inside ``n`` the result's, inside ``k``
  the strides of the operand whose unit-stride index is summed (A first), slowest
  first, so the last index of a group, the fastest-varying, is the unit-stride one;
- a batch index with unit stride in the result or an operand is moved into the tile
  (group ``t``: a 3-D ``tl.dot``), so no tile is a gather of single elements; where no
  batch index is, a row or column index that is some tensor's only way to a unit-stride
  axis moves there instead (the other operand broadcast along T) in a step with a short K
  (:data:`STRANDED_K`), or, in a write-bound step, N is loaded as a 2-D block (group
  ``nt``, ending in it, then ``n``); where that index is summed, or K is long, the tile
  stays a gather;
- indices summed in one operand only are summed while that operand's tile is loaded,
  before the product (groups ``ka``, ``kb``), never folded into K; where that would sum
  the same values again for many outputs (:data:`PRESUM_WASTE`), and in a ``reduce``
  of two operands where only one has them (but for a diagonal), the launch sums them
  once before the kernel instead (``Kernel.presum``), and the kernel never sees them;
  nor does it see such indices of size 1 (broadcast dimensions: ``Kernel.drop``).  So
  each is summed before the product, as torch.einsum sums it.
"""

from __future__ import annotations

import math

from ..planner.fuse import FusedStep
from ..planner.plan import CONTRACT, Plan, Step
from ..planner.strides import by_stride, contiguous, index_strides, unit_index
from . import Module, named
from .ir import FUSED, KERNEL_DTYPES, MATMUL, REDUCE, FusedKernel, Kernel, Operand, index_name

INT32_LIMIT = 2**31
# A step whose result has this many times the elements of its two operands together, or
# more, is write-bound (its K is short): there a stranded column index leads a 2-D N block
# (``nt``) rather than riding in T (see :func:`_stranded_n`).
WRITE_BOUND = 4
# Elements an operand's in-kernel sums would read again, from which the launch sums them
# once instead: its size times one less than the times it is read, once per output element
# lacking its indices in a ``reduce``, once per tile of rows (:data:`TILE_ROWS`) in a
# ``matmul``.  ``bij,bjk->bik`` with A's ``j`` of size 1 (the suite's ``bcast_summed_left``)
# summed B over ``j`` once for each ``i``.  Below it the extra torch op's launch costs more
# than what it saves.
PRESUM_WASTE = 2**22
TILE_ROWS = 128         # the matmul tables' largest BLOCK_M and BLOCK_N
# K's extent above which a stranded row or column index stays in its group (its tensor's
# tile a gather) rather than riding in T: the 3-D dot's tiles are smaller, so each load is
# used by fewer products, and where K is long the products bound the step, not the loads.
STRANDED_K = 128


def supported(dtypes) -> bool:
    """Whether generated kernels handle operands of these dtypes (one float dtype)."""
    dtypes = set(dtypes)
    return len(dtypes) == 1 and next(iter(dtypes)) in KERNEL_DTYPES


def _unit_axis(st: dict[int, int], axes) -> bool:
    """Whether one of a tile's ``axes`` (index groups, slowest first) runs along the tensor's
    unit stride: the fastest index of the axis that the tensor varies along has stride 1
    (a tensor with no unit-stride index is a gather anyway: true)."""
    if not any(v == 1 for v in st.values()):
        return True
    for axis in axes:
        varying = [i for i in axis if st.get(i, 0)]
        if varying and st[varying[-1]] == 1:
            return True
    return False


def _stranded(m: list, n: list, k: list, st_a, st_b, st_c) -> list:
    """``[u]`` where a tensor's tile would have no unit-stride axis and its unit-stride
    index ``u`` is a row or column index (``m`` or ``n``: removed from there), else ``[]``.

    A group shared by two tensors is ordered for one of them: ``dega,gfbc->abcdef`` orders
    N = (f, g, e) for the result's unit stride (e), so B's unit-stride g lies inside N and
    B's tile is a gather of single elements.  Moved into the tile's T axis (a 3-D dot, the
    tensor without ``u`` broadcast along it), ``u`` runs along B's memory and the other
    tensors keep theirs.  A summed index stays in K (its tile would need a sum over T; K
    loaded as a 2-D block instead, led by it, ran slower than the gather on every step the
    GPUs timed).  (That step is write-bound, and there N is loaded as a 2-D block instead:
    :func:`_stranded_n`; ``dbea,ec->abcd``, B's d inside N, takes T.)
    """
    for st, axes in ((st_a, (m, k)), (st_b, (k, n)), (st_c, (m, n))):
        u = unit_index(st)
        if u is not None and not _unit_axis(st, axes) and (u in m or u in n):
            (m if u in m else n).remove(u)
            return [u]
    return []


def _stranded_n(n: list, st_b) -> list:
    """The leading part of N (removed from ``n``) through B's unit-stride index ``u`` where
    ``u`` lies in N but not last (N is ordered for the result's unit stride, so B's tile
    would be a gather): N = (nt..., u) + (the rest), loaded as a 2-D block of the tile
    (``nt`` then ``n``), so ``u`` leads one axis of B's tile and the result's unit-stride
    index the other, of the tile as of the result's.  ``[]`` where B is not so stranded.

    ``dega,gfbc->abcdef`` (CCSD(T)): N = (f, g, e) runs along the result's e; B's tile
    is (K, (f, g), e), read along B's g, and the product is stored along e.  Taken in
    write-bound steps only (:data:`WRITE_BOUND`): compiled for sm_90a (triton 3.9), the
    CCSD(T) terms' kernels (K = 32) load 16 bytes at a time and spill nothing, but those
    of the tensor-times-matrix and CCSD terms (K of 88-7744, the loads pipelined over
    many K steps) spilled in 43 of the 45 configs tried, up to 10.8 KB: there the index
    rides in T where K is short (:data:`STRANDED_K`), else the tile stays a gather."""
    u = unit_index(st_b)
    if u in n[:-1] and not _unit_axis(st_b, (n,)):
        j = n.index(u) + 1
        nt, n[:] = n[:j], n[j:]
        return nt
    return []


def lower_step(plan: Plan, s: int, dtype: str, shapes, strides=None, unit_tiles=True) -> Kernel:
    """Lower step ``s`` of ``plan`` (unnamed: :func:`einc.codegen.named` names it); ``shapes``
    (``strides``) map each value id to its shape
    (strides; a value missing there is contiguous).  ``unit_tiles=False`` leaves a stranded
    unit-stride index where its group's order puts it (no ``t`` or ``nt`` made for it: that
    tensor's tile is a gather): measure mode times that kernel beside the default one
    (``plain``, :mod:`einc.runtime.select`).

    >>> from einc.planner.equation import parse
    >>> from einc.planner.graph import build
    >>> from einc.planner.plan import build_plan
    >>> p = build_plan(build(parse("ij,jk->ik"), [(2, 3), (3, 4)]))
    >>> lower_step(p, 0, "float32", {0: (2, 3), 1: (3, 4)}).kind
    'matmul'
    """
    strides = strides or {}
    step = plan.steps[s]
    sizes = plan.graph.sizes
    out_shape = tuple(sizes[i] for i in step.output)
    in_shapes = tuple(tuple(shapes[v]) for v in step.operands)
    st = [index_strides(dims, shape, strides.get(v) or contiguous(shape), sizes)
          for dims, shape, v in zip(step.inputs, in_shapes, step.operands)]
    terms, in_shapes, st, presum, drop = _summed_first(step, in_shapes, st, sizes)
    st_c = index_strides(step.output, out_shape, contiguous(out_shape), sizes)
    summed = tuple(i for i in step.summed if any(i in dims for dims in terms))
    order = tuple(range(len(terms)))
    fast_k = False
    if step.kind == CONTRACT:
        ta, tb = set(terms[0]), set(terms[1])
        m = [i for i in step.output if i in ta and i not in tb]
        n = [i for i in step.output if i in tb and i not in ta]
        uc = unit_index(st_c)
        if uc in m:                                     # the result's unit stride along N
            order, m, n, ta, tb, st = (1, 0), n, m, tb, ta, st[::-1]
        dims = [terms[j] for j in order]
        batch = list(step.batch)
        t = [i for i in (uc, unit_index(st[0]), unit_index(st[1])) if i in batch][:1]
        batch = [i for i in batch if i not in t]
        shared = [i for i in summed if i in ta and i in tb]
        ua, ub = unit_index(st[0]), unit_index(st[1])
        k_by = st[0] if ua in shared or ub not in shared else st[1]
        m, n, k = list(by_stride(m, st[0])), list(by_stride(n, st_c)), list(by_stride(shared, k_by))
        ka = by_stride([i for i in summed if i in ta and i not in tb], st[0])
        kb = by_stride([i for i in summed if i in tb and i not in ta], st[1])
        write_bound = math.prod(out_shape) >= WRITE_BOUND * sum(math.prod(sh) for sh in in_shapes)
        nt = _stranded_n(n, st[1]) if unit_tiles and write_bound and not (t or ka or kb) else []
        if not (t or nt) and unit_tiles and math.prod(sizes[i] for i in k) <= STRANDED_K:
            t = _stranded(m, n, k, st[0], st[1], st_c)
        groups = (("batch", by_stride(batch, st_c)), ("t", tuple(t)), ("m", tuple(m)), ("nt", tuple(nt)),
                  ("n", tuple(n)), ("k", tuple(k)), ("ka", ka), ("kb", kb))
        kind = MATMUL
    else:
        dims = list(terms)
        sets = [set(d) for d in dims]
        lonely = [[i for i in summed if i in mine and not all(i in t for t in sets)] for mine in sets]
        if len(dims) < 2:   # one operand: K costs no more than reading it (of two: summed before the product)
            lonely = [[] for _ in dims]
        shared = [i for i in summed if not any(i in x for x in lonely)]
        k_by = next((x for x in st if unit_index(x) in shared), st[0])
        groups = (("o", tuple(step.output)), ("k", by_stride(shared, k_by))) + \
            tuple((f"k{nm}", by_stride(x, y)) for nm, x, y in zip("ab", lonely, st))
        kind = REDUCE
        fast_k = any(unit_index(x) in shared for x in st)
    names = "abc"[: len(dims)]
    inputs = tuple(Operand(nm, d) for nm, d in zip(names, dims))
    params = tuple(names[order.index(j)] for j in range(len(dims)))
    acc = "float64" if dtype == "float64" else "float32"
    # 64-bit offsets when a tensor has 2^31 elements or more; the launcher of a 32-bit
    # kernel refuses views that reach that far into their storage (the torch executor
    # then runs the step).
    big = any(math.prod(sh) >= INT32_LIMIT for sh in in_shapes + (out_shape,))
    shapes_ = tuple(in_shapes[j] for j in order) + (out_shape,)
    split = _split_groups(groups, inputs, st + [st_c], sizes) if kind == MATMUL else ()
    kernel = Kernel(kind, "", _canonical(plan), _title(plan, s), groups, inputs, params, Operand("c", step.output),
                    shapes_, dtype, acc, big, fast_k, split, tuple((params[j], axes) for j, axes in presum.items()),
                    tuple((params[j], axes) for j, axes in drop.items()),
                    kind == REDUCE and plan.num_operands == 1 and bool(drop))
    return kernel


def _summed_first(step: Step, shapes, strides, sizes):
    """``(terms, shapes, strides, presum, drop)``: ``step``'s operands (of ``shapes``,
    ``strides`` by index) as its kernel sees them, and per operand position the axes of the
    caller's tensor that its launch sums first (``presum``) or that the kernel ignores
    (``drop``).  Those are the indices summed in that operand only: summed first where the
    kernel would read them again for :data:`PRESUM_WASTE` elements or more, dropped where
    each has size 1 (a dimension broadcast against the other operand's: no sum of one term
    to make); never in an operand with a repeated index (a diagonal), nor all of an
    operand's indices.  A summed operand is lowered as contiguous (torch's sum writes it
    so), one with dropped indices with the strides it had."""
    terms, shapes, strides, presum, drop = list(step.inputs), list(shapes), list(strides), {}, {}
    lone = []
    for j, dims in enumerate(step.inputs):
        others = {i for k, d in enumerate(step.inputs) if k != j for i in d} | set(step.output)
        lone.append([i for i in dict.fromkeys(dims) if i in step.summed and i not in others])
    for j, (dims, mine) in enumerate(zip(step.inputs, lone)):
        repeats = math.prod(sizes[i] for i in step.output if i not in dims)
        if step.kind == CONTRACT:               # a tile's rows (or columns) share each load
            repeats = -(-repeats // TILE_ROWS)
        ones = all(sizes[i] == 1 for i in mine)
        # the reduce kernel would fold them into K, multiplying before it sums (an inf of the
        # other operand times one 0 of the terms: NaN), where only this operand has such indices
        folded = step.kind != CONTRACT and len(lone) == 2 and not lone[1 - j]
        if (not mine or len(set(dims)) < len(dims) or len(mine) == len(dims) and (ones or not folded) or
                not ones and not folded and (math.prod(sizes[i] for i in mine) < 2 or
                                             (repeats - 1) * math.prod(shapes[j]) < PRESUM_WASTE)):
            continue
        (drop if ones else presum)[j] = tuple(d for d, i in enumerate(dims) if i in mine)
        terms[j] = tuple(i for i in dims if i not in mine)
        shapes[j] = tuple(sizes[i] for i in terms[j])
        strides[j] = {i: s for i, s in strides[j].items() if i not in mine} if ones else \
            index_strides(terms[j], shapes[j], contiguous(shapes[j]), sizes)
    return terms, tuple(shapes), strides, presum, drop


def _split_groups(groups, inputs, strides, sizes) -> tuple[tuple[str, str], ...]:
    """``(operand, group)`` where a group of several indices is not one stride in that
    operand (``strides``: A's, B's, then the result's, by index): each index's stride is not
    the next one's times its size."""
    found = []
    for name, st in zip([op.name for op in inputs] + ["c"], strides):
        for g, ix in groups:
            ix = [i for i in ix if i in st]
            if len(ix) > 1 and any(st[i] != sizes[j] * st[j] for i, j in zip(ix, ix[1:])):
                found.append((name, g))
    return tuple(found)


def _canonical(plan: Plan) -> str:
    g = plan.graph
    return ",".join("".join(index_name(i) for i in t) for t in g.inputs) + "->" + \
        "".join(index_name(i) for i in g.output)


def _title(plan: Plan, s: int) -> str:
    step: Step = plan.steps[s]
    term = lambda dims: "".join(index_name(i) for i in dims)  # noqa: E731
    operands = " · ".join(f"T{v}[{term(t)}]" for v, t in zip(step.operands, step.inputs))
    over = f" over {term(step.summed)}" if step.summed else ""
    return f"step {s + 1}/{len(plan.steps)} ({step.kind}): {operands}{over} -> T{step.result}[{term(step.output)}]"


def lower_fused(plan: Plan, s: int, dtype: str, shapes, strides=None) -> FusedKernel:
    """Lower the :class:`~einc.planner.fuse.FusedStep` ``s`` of ``plan`` (unnamed, as
    :func:`lower_step`'s); ``shapes``
    (``strides``) map value ids to shapes (strides; a value missing there is contiguous).
    Inside each group the indices are ordered by the operands' strides, as for
    :func:`lower_step`: M by the A factors', N and the batch by the output's, K by the
    factor whose unit stride is summed (else A's)."""
    strides = strides or {}
    step: FusedStep = plan.steps[s]
    sizes = plan.graph.sizes
    na, nb, ne = step.sides
    terms = step.inputs
    in_shapes = tuple(tuple(shapes[v]) for v in step.operands)
    out_shape = tuple(sizes[i] for i in step.output)
    st = [index_strides(dims, shape, strides.get(v) or contiguous(shape), sizes)
          for dims, shape, v in zip(terms, in_shapes, step.operands)]
    st_c = index_strides(step.output, out_shape, contiguous(out_shape), sizes)
    side_a, side_b = _merged_strides(st[:na]), _merged_strides(st[na:na + nb])
    ta = {i for t in terms[:na] for i in t}
    tb = {i for t in terms[na:na + nb] for i in t}
    shared = [i for i in step.summed if i in ta and i in tb]
    k_by = side_b if unit_index(side_b) in shared and unit_index(side_a) not in shared else side_a
    groups = (("batch", by_stride(step.batch, st_c)),
              ("m", by_stride([i for i in step.output if i in ta and i not in tb], side_a)),
              ("n", by_stride([i for i in step.output if i in tb and i not in ta], st_c)),
              ("k", by_stride(shared, k_by)
               + by_stride([i for i in step.summed if not (i in ta and i in tb)], k_by)))
    a = tuple(Operand(f"a{j}", terms[j]) for j in range(na))
    b = tuple(Operand(f"b{j}", terms[na + j]) for j in range(nb))
    e = tuple(Operand(f"e{j}", terms[na + nb + j]) for j in range(ne))
    acc = "float64" if dtype == "float64" else "float32"
    big = any(math.prod(sh) >= INT32_LIMIT for sh in in_shapes + (out_shape,))
    term = lambda dims: "".join(index_name(i) for i in dims)  # noqa: E731
    operands = " · ".join(f"T{v}[{term(t)}]" for v, t in zip(step.operands, terms))
    over = f" over {term(step.summed)}" if step.summed else ""
    title = (f"step {s + 1}/{len(plan.steps)} (fused plan steps {'+'.join(map(str, step.numbers))}): "
             f"{operands}{over} -> T{step.result}[{term(step.output)}]")
    kernel = FusedKernel(FUSED, "", _canonical(plan), title, groups, a, b, e, Operand("c", step.output),
                         in_shapes + (out_shape,), dtype, acc, big)
    return kernel


def _merged_strides(sts) -> dict[int, int]:
    """One side's factors' strides as one tensor's: each index's stride in the first factor
    that holds it along memory (non-zero), for ordering a group by strides."""
    out: dict[int, int] = {}
    for x in sts:
        for i, v in x.items():
            if v and i not in out:
                out[i] = v
    return out


def lower_program(plan: Plan, dtype: str, shapes, strides=None, unit_tiles=True) -> tuple:
    """Every step of ``plan`` (a plan, or :func:`~einc.planner.fuse.fuse_plan`'s program:
    fused steps included) as a named kernel: :func:`modules`' kernels."""
    return tuple(m.kernel for m in modules(plan, dtype, shapes, strides, unit_tiles))


def modules(plan: Plan, dtype: str, shapes, strides=None, unit_tiles=True) -> tuple[Module, ...]:
    """Every step of ``plan`` (a plan, or :func:`~einc.planner.fuse.fuse_plan`'s program:
    fused steps included) as a kernel, named, with its module source: the one lowering
    entry.  ``shapes`` (``strides``, optional: contiguous) are the operands'; intermediates
    are contiguous.  ``unit_tiles``: see :func:`lower_step` (fused kernels have no such choice)."""
    values = {v: tuple(sh) for v, sh in enumerate(shapes)}
    given = {v: tuple(x) for v, x in enumerate(strides)} if strides is not None else {}
    found = []
    for s, step in enumerate(plan.steps):
        if step.kind == FUSED:
            found.append(named(lower_fused(plan, s, dtype, values, given)))
        else:
            found.append(named(lower_step(plan, s, dtype, values, given, unit_tiles)))
        values[step.result] = tuple(plan.graph.sizes[i] for i in step.output)
    return tuple(found)


__all__ = ["lower_program", "modules", "lower_step", "lower_fused", "supported", "REDUCE", "MATMUL", "FUSED"]
