"""A path as the caller gives it (opt_einsum's forms: tuples of ints, numpy's integers, a
numpy array), read as einc's doors read it: :func:`as_path` makes it plain Python, and
:func:`explicit_path` reads its steps, for eager calls and the compiled op's text alike;
:func:`plain_path` reads one that is plain already, as a call passes it each time."""

from __future__ import annotations

import operator


def as_path(optimize):
    """``optimize`` with a path's numpy arrays and scalars (tensors too: whatever has ``ndim``
    and ``tolist``) as Python's lists and numbers, its steps tuples, as opt_einsum takes a path
    (a numpy array, a list of them, numpy's integers), and a path's positions ints
    (:func:`_index`): as eager calls read it, as the compiled op's options carry it, as a
    torch.fx node records it (its arguments take no numpy value), and as an error shows it;
    anything else as given."""
    optimize = _plain(optimize)
    if not isinstance(optimize, (list, tuple)):
        return optimize
    optimize = [_plain(p) for p in optimize]
    optimize = [tuple([_plain(i) for i in p]) if isinstance(p, (list, tuple)) else p for p in optimize]
    path = explicit_path(optimize)     # (its ints: a symbol's value, see _index)
    return optimize if path is None else list(path)


def _plain(x):
    # (an int first: under torch.compile one read from a local may be a symbol, which has no attributes to ask)
    return x.tolist() if not isinstance(x, (int, str)) and hasattr(x, "ndim") and hasattr(x, "tolist") else x


def explicit_path(optimize):
    """``optimize``, a list or tuple, as a path of tuples of ints, or None where it is none
    (an entry no list or tuple of ints).  Eager calls and the compiled op's strings
    (:func:`einc.planner.options.encode`) both ask it."""
    path = []
    for pair in optimize:
        if isinstance(pair, str) and pair == "einsum_path":    # numpy's spelling
            continue
        if not isinstance(pair, (list, tuple)):
            return None
        step = tuple([_index(i) for i in pair])
        if None in step:
            return None
        path.append(step)
    return tuple(path)


def plain_path(optimize):
    """``optimize`` as a path of tuples where it is a list or tuple of lists or tuples of
    Python ints (not bools) -- what :func:`as_path` then :func:`explicit_path` make of it --,
    else None: a path a call passes again each time (opt_einsum's ``contract_path`` gives a
    list) is read by its types alone, not position by position."""
    if optimize.__class__ is not list and optimize.__class__ is not tuple or not plain(optimize):
        return None
    return tuple([tuple(pair) for pair in optimize])


def plain(optimize) -> bool:
    """Whether ``optimize``, a list or tuple, is a path of lists or tuples of Python ints (not
    bools): what :func:`plain_path` takes as it is."""
    for pair in optimize:
        if pair.__class__ is not tuple and pair.__class__ is not list:
            return False
        for i in pair:
            if i.__class__ is not int:
                return False
    return True


def _index(i):
    """A path's position as an int, or None where ``i`` is none: what ``operator.index`` takes
    but a bool -- an int, and under torch.compile a size dynamo traces as a symbol (an int read
    from a local under ``dynamic=True``: its value, which dynamo guards on, as the op's text
    needs it).  Asked by type before ``operator.index``: torch 2.11's dynamo makes the
    ``TypeError`` of a str or float there an internal error of its own, which no ``except``
    here catches."""
    if isinstance(i, bool) or not isinstance(i, int) and not hasattr(i, "__index__"):
        return None
    try:
        return operator.index(i)
    except TypeError:
        return None


__all__ = ["as_path", "explicit_path", "plain", "plain_path"]
