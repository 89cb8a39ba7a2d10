"""cotengra's path and its own slicing of a graph, for ``optimize="cotengra"`` or a cotengra
optimizer (:func:`einc.planner.slicing.plan` then checks the slicing against einc's bound).
cotengra is imported only here, when asked for."""

from __future__ import annotations

import opt_einsum

from ..errors import PathError
from .graph import ContractionGraph

_INSTALL = "pip install 'einc[tn]' (or pip install cotengra)"


def _cotengra():
    try:
        import cotengra
    except ImportError:
        raise PathError(f"einsum(): optimize='cotengra' (or a cotengra optimizer) needs cotengra, which is not "
                        f"installed: {_INSTALL}") from None
    return cotengra


def cotengra_path(graph: ContractionGraph, optimize, limit):
    """cotengra's path and sliced indices for ``graph`` (its default hyper-optimizer for
    the name ``"cotengra"``, sliced to ``limit`` by cotengra)."""
    ctg = _cotengra()
    if graph.num_operands == 1:
        return ((0,),), ()
    # one-character labels: cotengra hands them to cotengrust (where installed), which takes no others
    symbol = opt_einsum.get_symbol
    inputs = [tuple(symbol(i) for i in t) for t in graph.inputs]
    output = tuple(symbol(i) for i in graph.output)
    size_dict = {symbol(i): s for i, s in enumerate(graph.sizes)}
    if isinstance(optimize, str):
        optimize = ctg.HyperOptimizer(methods=["greedy"], max_repeats=32, minimize="flops", parallel=False,
                                      progbar=False, reconf_opts=None,
                                      slicing_opts={"target_size": limit} if limit is not None else None)
    if hasattr(optimize, "search"):
        tree = optimize.search(inputs, output, size_dict)
    else:
        tree = ctg.ContractionTree.from_path(inputs, output, size_dict, path=optimize(inputs, output, size_dict))
    if limit is not None and tree.max_size() > limit:
        tree = tree.slice(target_size=limit)
    path = tuple(tuple(int(i) for i in c) for c in tree.get_path())
    index = {symbol(i): i for i in range(len(graph.sizes))}
    return path, tuple(index[i] for i in tree.sliced_inds)


__all__ = ["cotengra_path"]
