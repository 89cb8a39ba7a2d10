"""The cost of a linear contraction path, as einc's search weighs it: opt_einsum's flop
count, the elements of every intermediate written, the largest one, the steps
(:func:`path_cost`); :func:`cost` remembers the last few (a search asks for the same
paths again, and on hundreds of tensors each walk costs milliseconds)."""

from __future__ import annotations

import functools
import math


def path_cost(inputs, output, sizes, path) -> tuple[int, int, int, int]:
    """``(flops, written, largest, steps)`` of a linear ``path`` over ``inputs`` (sets of
    indices): opt_einsum's flop count (as einc's steps count them), the elements of every
    intermediate written, the largest one, the number of contractions."""
    terms = [frozenset(t) for t in inputs]
    count: dict = {}
    for t in (*terms, frozenset(output)):
        for i in t:
            count[i] = count.get(i, 0) + 1
    flops = written = largest = 0
    for c in path:
        if len(c) == 2:         # (most steps: one pair)
            x, y = c
            taken = terms[x], terms[y]
            if x < y:
                x, y = y, x
            del terms[x], terms[y]
            union = taken[0] | taken[1]
        else:
            taken = [terms[i] for i in c]
            for i in sorted(c, reverse=True):
                del terms[i]
            union = frozenset().union(*taken)
        for t in taken:
            for i in t:
                count[i] -= 1
        kept = frozenset([i for i in union if count[i]])
        flops += math.prod([sizes[i] for i in union]) * (max(1, len(c) - 1) + (len(kept) < len(union)))
        size = math.prod([sizes[i] for i in kept])
        written += size
        largest = max(largest, size)
        for i in kept:
            count[i] += 1
        terms.append(kept)
    return flops, written, largest, len(path)


def cost(inputs, output, size_dict, path):
    """:func:`path_cost`, remembered for the last few paths (a search asks for the same ones
    again, and on hundreds of tensors each costs milliseconds)."""
    return _costed(tuple(inputs), frozenset(output), tuple(size_dict.items()), tuple(map(tuple, path)))


@functools.lru_cache(maxsize=32)
def _costed(inputs, output, sizes, path):
    return path_cost(inputs, output, dict(sizes), path)
