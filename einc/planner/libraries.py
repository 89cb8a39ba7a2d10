"""How the path search reaches its libraries (cotengra, cotengrust, kahypar, opt_einsum):
each imported only where installed, the network labelled as they take it, their paths
read back as einc's, and their random numbers seeded for the search.  Pure: no torch."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import random

import opt_einsum


def _installed(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _optional(name):
    """The module ``name``, or None where it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _linear(path) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(i) for i in c) for c in path)


def _strings(inputs, output, size_dict):
    """The network with one-character labels (cotengrust takes no others), sorted for a
    stable order: a copy of the last few networks' (a search converts its network
    several times)."""
    found = _labelled(tuple(inputs), frozenset(output), tuple(size_dict.items()))
    return list(found[0]), found[1], dict(found[2])


@functools.lru_cache(maxsize=4)
def _labelled(inputs, output, sizes):
    sym = opt_einsum.get_symbol
    return [tuple(sym(i) for i in sorted(t)) for t in inputs], tuple(sym(i) for i in sorted(output)), \
        {sym(i): s for i, s in sizes}


@contextlib.contextmanager
def _seeded(seed):
    """Python's global random numbers seeded for the search (cotengra's trials draw from
    them) and given back as they were after it."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def _kahypar() -> bool:
    return _optional("kahypar") is not None


def _methods() -> tuple[str, ...]:
    return ("greedy", "kahypar") if _kahypar() else ("greedy", "labels")
