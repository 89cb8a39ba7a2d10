"""The index orders of the layouts the copy-cost model weighs for a contraction step
(:mod:`einc.runtime.torch_executor.ttgt`): which indices go into each group (batch, M, N,
K) and in which orders, and what a copy from one order into another keeps in place
(:func:`_copy_plan`): functions of the terms alone, kept across steps and shapes."""

from __future__ import annotations

import functools


def _orders(group, terms):
    """The distinct orders of ``group`` that ``terms`` hold (indices a term lacks last, in the
    first term's order)."""
    if not group or (len(group) == 1 and group[0] in terms[0]):
        return [tuple(group)]       # (the one order there is, whatever the other terms)
    found = []
    for t in terms:
        o = tuple([i for i in t if i in group] + [i for i in terms[0] if i in group and i not in t])
        if o not in found:
            found.append(o)
    return found


def groups(ta, tb, out):
    """``(batch, m, n)``: the indices of ``out`` that both operands hold, that ``ta`` alone
    holds and that ``tb`` alone holds, each in ``out``'s order."""
    sa, sb = set(ta), set(tb)
    return ([i for i in out if i in sa and i in sb], [i for i in out if i in sa and i not in sb],
            [i for i in out if i in sb and i not in sa])


@functools.lru_cache(maxsize=1024)
def _enumeration(ta, tb, out, few, broadcast):
    """:func:`~einc.runtime.torch_executor.ttgt.candidates`'s moves, which depend on the terms
    and ``few`` only: ``(moves, summed indices)``, each move as its groups' indices ``(batch,
    M, N)``."""
    sb = set(tb)
    shared, own_a, own_b = groups(ta, tb, out)
    k_set = tuple(i for i in ta if i in sb and i not in out)
    moves = [()]
    for term in () if few or not broadcast else (out, ta, tb):
        lead = []
        for i in term:
            if i in k_set:
                break
            if i in shared:
                continue
            lead.append(i)
            if tuple(lead) not in moves:
                moves.append(tuple(lead))
    return [(tuple(shared + [i for i in out if i in moved]), tuple([i for i in own_a if i not in moved]),
             tuple([i for i in own_b if i not in moved])) for moved in map(set, moves)], k_set


@functools.lru_cache(maxsize=1024)
def _rows(ta, tb, out, few, batch_set, m_set, n_set, k_set):
    """A move's layouts before they are costed, in
    :func:`~einc.runtime.torch_executor.ttgt.candidates`'s order: ``(swap, batch, left's own,
    right's own, summed, broadcast over)``."""
    rows = []
    ms, ns, ks = _orders(m_set, [out] if few else [out, ta]), _orders(n_set, [out] if few else [out, tb]), \
        _orders(k_set, [ta, tb])
    for batch in _orders(batch_set, [out] if few else [out, ta, tb]):
        wide = tuple(i for i in batch if i not in ta or i not in tb)
        for m in ms:
            for n in ns:
                for k in ks:
                    rows += [(False, batch, m, n, k, wide), (True, batch, n, m, k, wide)]
    return rows


@functools.lru_cache(maxsize=4096)
def _copy_plan(src, dst):
    """What :func:`~einc.runtime.torch_executor.ttgt.copy_ns` reads of the sizes, which
    depends on the orders ``src`` and ``dst`` (size-1 indices left out) only: None where
    nothing is copied, else ``(the leading indices the two orders agree on, True and the
    trailing indices they agree on and the indices after the next one of ``dst`` in ``src``
    (the runs' distance), or False and the indices after ``dst``'s innermost in ``src``,
    those after ``src``'s in ``dst``, and the two innermost indices)``."""
    if src == dst or not dst:
        return None
    lead = []
    for i, j in zip(src, dst):
        if i != j:
            break
        lead.append(i)
    if src[-1] == dst[-1]:
        kept = []
        for i, j in zip(reversed(src), reversed(dst)):
            if i != j:
                break
            kept.append(i)
        after = src[src.index(dst[-1 - len(kept)]) + 1:]
        return tuple(lead), True, tuple(kept), after
    return tuple(lead), False, src[src.index(dst[-1]) + 1:], dst[dst.index(src[-1]) + 1:], src[-1], dst[-1]


__all__ = ["groups"]
