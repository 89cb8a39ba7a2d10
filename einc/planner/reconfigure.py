"""cotengra's subtree reconfiguration of a contraction tree, as the path search runs it.

The search (einc.planner.search) refines its best trees by it: subtrees of a few leaves,
the costliest first, weighed as cotengra's hyper-optimizer weighs trees (its ``combo`` of
flops and written elements, :data:`~einc.planner.searchkey.WRITE_FACTOR`), a chunk at a
time so that the search can look at its budget between chunks.  Pure: no torch.
"""

from __future__ import annotations

from .libraries import _linear, _strings
from .searchkey import RECONF_CHUNK, WRITE_FACTOR


def reconfigured(ctg, inputs, output, size_dict, path, subtree_size=8, ended=lambda: False):
    """``path`` refined by cotengra's subtree reconfiguration (:func:`reconfigure`), or kept
    where cotengra does not take it as a tree."""
    try:
        tree = ctg.ContractionTree.from_path(*_strings(inputs, output, size_dict), path=path)
        reconfigure(tree, subtree_size, ended)
    except (ValueError, KeyError, IndexError):
        return path
    return _linear(tree.get_path())


def reconfigure(tree, subtree_size, ended, most=None) -> int:
    """cotengra's subtree reconfiguration of ``tree``, in place: subtrees of
    ``subtree_size`` leaves, the costliest first, ranked as the hyper-optimizer ranks trees;
    :data:`RECONF_CHUNK` subtrees (or a sixteenth of the tree, cotengra ranking them anew
    each time) at a time until ``ended()`` (einc.planner.search's end tests), and with ``most``,
    up to that many subtrees and no further than a chunk that gained nothing (the costliest
    subtrees gain the most).  Returns the subtrees tried."""
    tried, end = 0, tree.N if most is None else min(tree.N, most)
    chunk, cost = max(RECONF_CHUNK, tree.N // 16), combo(tree)
    while tried < end:              # cotengra's own bound: as many subtrees as leaves
        seen = sum(map(len, tree.already_optimized.values()))
        tree.subtree_reconfigure_(minimize=f"combo-{WRITE_FACTOR:g}", subtree_size=subtree_size,
                                  maxiter=min(chunk, end - tried))
        tried += min(chunk, end - tried)
        was, cost = cost, combo(tree)
        if sum(map(len, tree.already_optimized.values())) == seen or ended() \
                or (most is not None and cost >= was):
            break                   # every subtree tried, the time spent, or a chunk gained nothing
    return tried


def combo(tree) -> float:
    """cotengra's "combo" cost of ``tree``, from the totals it keeps up to date."""
    return tree.total_flops() + WRITE_FACTOR * tree.total_write()


__all__ = ["combo", "reconfigure", "reconfigured"]
