"""The torch executor: a :class:`~einc.plan.Plan` run step by step on torch ops.

``step_functions`` turns each step into a closure that does only what that step
needs, decided once per key: diagonals and single-operand sums first (views where
possible), then a matrix product for ``contract`` steps, multiply-and-sum for
``dot`` steps (torch.einsum would run a batched matrix-vector product there, ~20x
slower on CPU), a broadcasting multiply for ``product`` steps, and nothing more for
``reduce`` steps.  Every op is differentiable and has a vmap rule, so autograd and
``torch.func`` work through it.  The final step always returns a fresh tensor in
standard contiguous layout.
"""

from __future__ import annotations

import math

import torch

from ..errors import DtypeError
from ..plan import CONTRACT, DOT, PRODUCT, REDUCE, Plan, Step


def _integral(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def _perm(src, dst):
    """The permutation taking index order ``src`` to ``dst``, or None if identity."""
    p = tuple(src.index(i) for i in dst)
    return None if p == tuple(range(len(p))) else p


def _chain(fns):
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


def _prep(term, lonely, plan: Plan, dtype):
    """Diagonals, squeezes and sums of the indices ``lonely`` to this operand.

    Returns ``(fn or None, remaining term, dtype after, whether it computes)``.
    A sum of an integral tensor promotes to int64, as torch.einsum's does; with two
    or more operands torch squeezes size-1 indices instead of summing them, so for
    integral dtypes einc does the same to give the same result dtype.
    """
    g = plan.graph
    term = list(term)
    fns = []
    while len(set(term)) != len(term):
        i = next(i for i in term if term.count(i) > 1)
        d1 = term.index(i)
        d2 = term.index(i, d1 + 1)
        fns.append(lambda x, d1=d1, d2=d2: x.diagonal(0, d1, d2))
        term = [t for k, t in enumerate(term) if k not in (d1, d2)] + [i]
    squeeze = [d for d, i in enumerate(term) if i in lonely and g.sizes[i] == 1
               and (plan.num_operands > 1 or not _integral(dtype))]
    if squeeze:
        sq = tuple(squeeze)
        fns.append(lambda x: x.squeeze(sq))
        term = [i for d, i in enumerate(term) if d not in squeeze]
    summed = tuple(d for d, i in enumerate(term) if i in lonely)
    if summed:
        fns.append(lambda x: x.sum(summed))
        term = [i for i in term if i not in lonely]
        if _integral(dtype):
            dtype = torch.int64
    return _chain(fns), term, dtype, bool(summed)


def _reduce(step, plan, dtype, final, is_input):
    fn, term, dtype, computed = _prep(step.inputs[0], set(step.summed), plan, dtype)
    perm = _perm(term, list(step.output))
    tail = [fn, (lambda x: x.permute(perm)) if perm else None]
    if final and (computed or not is_input):
        tail.append(lambda x: x.contiguous())
    elif final:                                 # only views of the caller's tensor so far
        term = step.inputs[0]
        if len(term) == 2 and term[0] == term[1] and step.output == term[:1]:
            return torch.diag, dtype            # ``ii->i``: one op that copies the diagonal
        tail.append(_fresh)
    return _chain(tail) or (lambda x: x), dtype


def _permuted_copy(src, dst, sizes):
    """``x`` over index order ``src`` -> a contiguous tensor over ``dst``.

    When the permutation swaps two blocks of indices (``(b, i, j) -> (i, j, b)``), the
    copy is done as a 2-D transpose, which torch copies faster than the same copy
    expressed as a 3-D permutation (~1.6x for the suite's ``ibnd,jbnd->ijbn``); any
    other permutation is a plain strided copy.
    """
    perm = _perm(src, dst)
    cut = next((k for k in range(1, len(dst)) if dst[k:] + dst[:k] == src), None)
    if cut is None:
        return lambda x: x.permute(perm).contiguous()
    rows = math.prod(sizes[i] for i in src[:len(dst) - cut])
    cols = math.prod(sizes[i] for i in src[len(dst) - cut:])
    shape = tuple(sizes[i] for i in dst)
    return lambda x: x.reshape(rows, cols).t().contiguous().view(shape)


def _fresh(x):
    """A contiguous tensor that shares no memory with ``x``."""
    y = x.contiguous()
    return y.clone() if y is x else y


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


def _pairwise(step: Step, plan: Plan, dtypes, final, uniform):
    g = plan.graph
    ta, tb = step.inputs
    sa, sb = set(ta), set(tb)
    summed = set(step.summed)
    kind = step.kind
    if kind != PRODUCT and all(g.sizes[i] == 1 for i in summed & sa & sb):
        kind = PRODUCT      # the shared sums run over size 1: a product, as in torch.einsum
    drop_a, drop_b = (summed & sa, summed & sb) if kind == PRODUCT else (summed - sb, summed - sa)
    prep_a, ta, da, _ = _prep(ta, drop_a, plan, dtypes[0])
    prep_b, tb, db, _ = _prep(tb, drop_b, plan, dtypes[1])
    out = list(step.output)
    if kind == PRODUCT:
        al_a, al_b = _aligned(ta, out, g.sizes), _aligned(tb, out, g.sizes)
        core = _binary(lambda a, b: a * b, _chain([prep_a, al_a]), _chain([prep_b, al_b]))
        dtype = torch.promote_types(da, db)
        return _chain_out(core, (lambda x: x.contiguous()) if final else None), dtype

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
        perm_b = _perm(tb, ta)
        k_dims = tuple(d for d, i in enumerate(ta) if i in summed)
        kept = [i for i in ta if i not in summed]
        perm_out = _perm(kept, out)
        if _integral(da):       # keep the operands' dtype, as torch.einsum's matrix product does
            mul_sum = lambda a, b: (a * b).sum(k_dims, dtype=da)  # noqa: E731
        else:
            mul_sum = lambda a, b: (a * b).sum(k_dims)  # noqa: E731
        core = _binary(mul_sum, prep_a, _chain([prep_b, (lambda x: x.permute(perm_b)) if perm_b else None]))
        post = [(lambda x: x.permute(perm_out)) if perm_out else None,
                (lambda x: x.contiguous()) if final else None]
        return _chain_out(core, _chain(post)), da

    # CONTRACT: a matrix product over (batch, M, K) x (batch, K, N).
    batch = [i for i in out if i in sa and i in sb]
    m = [i for i in out if i in ta and i not in tb]
    n = [i for i in out if i in tb and i not in ta]
    k = [i for i in ta if i in summed]
    # Orient the product so that its result needs no copy, or at least keeps the
    # output's innermost index innermost (a copy with long contiguous runs).
    swap = out != batch + m + n and (out == batch + n + m or out[-1] in m)
    if swap:
        prep_a, prep_b, ta, tb, m, n = prep_b, prep_a, tb, ta, n, m
    size = lambda idx: math.prod(g.sizes[i] for i in idx)  # noqa: E731
    groups_a, groups_b, groups_c = [batch, m, k], [batch, k, n], [batch, m, n]
    mm = torch.bmm
    if not batch:
        groups_a, groups_b, groups_c = groups_a[1:], groups_b[1:], groups_c[1:]
        mm = torch.mm
    lay_a = _layout(ta, groups_a, tuple(size(grp) for grp in groups_a))
    lay_b = _layout(tb, groups_b, tuple(size(grp) for grp in groups_b))
    natural = batch + m + n
    res_shape = tuple(g.sizes[i] for i in natural)
    perm_out = _perm(natural, out)
    post = [(lambda x: x.reshape(res_shape)) if any(len(grp) != 1 for grp in groups_c) else None]
    if perm_out:
        post.append(_permuted_copy(natural, out, g.sizes) if final else (lambda x: x.permute(perm_out)))
    a_fn, b_fn = _chain([prep_a, lay_a]), _chain([prep_b, lay_b])
    core = _binary(mm, a_fn, b_fn)
    if swap:
        core = _swapped(core)
    return _chain_out(core, _chain(post)), da


def _layout(term, groups, shape):
    """Permute a tensor over ``term`` to the concatenated ``groups`` and merge each group."""
    perm = _perm(term, [i for grp in groups for i in grp])
    fns = [(lambda x: x.permute(perm)) if perm else None]
    if any(len(grp) != 1 for grp in groups):
        fns.append(lambda x: x.reshape(shape))
    return _chain(fns)


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
    what = plan.describe(step)
    if da != db:
        raise DtypeError(
            f"einsum(): step {what} contracts T{step.operands[0]} ({da}) with T{step.operands[1]} ({db}); "
            f"a contraction needs one dtype (T0..T{plan.num_operands - 1} are the operands in order): "
            f"convert them first\n  {plan.equation}")


def step_functions(plan: Plan, dtypes):
    """``(one function per step, the result's dtype)``: each step's function takes that
    step's operands and returns a tensor over its output indices (the last one a fresh
    contiguous tensor); ``runtime/program.unroll`` chains them.

    Raises :class:`~einc.errors.DtypeError` if a contraction step would mix dtypes.
    """
    n = plan.num_operands
    dts = list(dtypes)
    uniform = len(set(dts)) == 1
    functions = []
    for s, step in enumerate(plan.steps):
        final = s == len(plan.steps) - 1
        if step.kind == REDUCE:
            fn, dt = _reduce(step, plan, dts[step.operands[0]], final, step.operands[0] < n)
        else:
            fn, dt = _pairwise(step, plan, [dts[v] for v in step.operands], final, uniform)
        dts.append(dt)
        functions.append(fn)
    return functions, dts[-1]


__all__ = ["step_functions", "CONTRACT", "DOT", "PRODUCT", "REDUCE"]
