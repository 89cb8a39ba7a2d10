"""A matrix product with few outputs, each a long sum (``abc,abcd->d``: 4 outputs of 68,880
terms), as a batch of matrix products over blocks of the sum, whose partial sums torch's
sum then adds.

A matrix product of a row by a few columns keeps one running sum over the whole of K,
whose error grows with K; a multiply and sum is as accurate as torch's cascade sum, but
writes and reads the whole elementwise product, several times the matrix product's time
(bench/measured/few-outputs-2026-12-04.md).  Cut into blocks of about
:data:`BLOCK` terms, the running sums are short and the product runs at the matrix
product's speed: the outermost summed indices become batch indices of both operands, the
last of them cut into two where that makes the blocks nearer :data:`BLOCK` (a view: an
index of any stride splits into two), and the product's partial sums, one per block and
output, are added by ``sum``.  The layout of the batch of products is the copy-cost
model's, as any matrix product's (runtime/torch_executor/ttgt.py).  Where no cut makes
blocks of :data:`SHORTEST` to :data:`LONGEST` terms (a sum over one index of prime size),
the step runs as multiply and sum.

16-bit floats take no blocks: a matrix product accumulates them in float32 and rounds once,
where a batch's partial sums would each be rounded to 16 bits; the float32 running sum's
error is far below that rounding (and the product is torch.einsum's).

Where a gradient is taken, such a step runs as the multiply and sum's ``Summed``
(runtime/torch_executor/summed.py): these products forward, the same bits, and the multiply
and sum's backward.
"""

from __future__ import annotations

import math

# terms a block sums: a float32 running sum of a thousand terms errs a few epsilons, and a
# batch of blocks of 256 or more runs at one matrix product's speed (shorter: a product per
# block costs more than its terms; bench/measured/few-outputs-2026-12-04.md)
BLOCK = 1024
SHORTEST, LONGEST = 256, 2048


def _divisors(n: int):
    small = [f for f in range(2, math.isqrt(n) + 1) if n % f == 0]
    return small + [n // f for f in reversed(small) if n // f != f]


def sum_blocks(order, shared, sizes, split: bool = True, longest: int = LONGEST):
    """``(whole, part)``: how the sums over ``shared`` are cut into blocks, or None where
    no cut makes blocks of :data:`SHORTEST` to ``longest`` terms: the outermost indices of
    ``shared`` in ``order`` (an operand's term in memory order: the batch's matrices
    whole), each a batch index whole (``whole``), and with ``split`` the next one cut into
    ``(index, blocks)`` outer blocks (``part``, else None), so that a block sums about
    :data:`BLOCK` terms (the nearest, fewest blocks on a tie)."""
    terms = math.prod(sizes[i] for i in shared)
    best, key = None, None
    whole = []
    for i in (i for i in order if i in shared):
        n = sizes[i]
        for f in ((*_divisors(n), n) if split else (n,)):
            kb = terms // f
            if SHORTEST <= kb <= longest:
                k = abs(math.log(kb / BLOCK))
                if key is None or k < key - 1e-9:
                    best, key = (((*whole, i), None) if f == n else ((*whole,), (i, f))), k
        terms //= n
        whole.append(i)
        if terms < SHORTEST:
            break
    return best


def product(contract, ta, tb, out, whole, part, sizes, prep_a, prep_b):
    """``fn(a, b)``, the step ``ta``, ``tb`` -> ``out`` (its sums those of ``ta`` and ``tb``
    both hold, not in ``out``) as ``contract``'s matrix product over the blocks
    :func:`sum_blocks` made (``whole``, ``part``) and a sum of the partials.
    ``contract(ta, tb, out, sizes, prep_a, prep_b)``: a step's function, its result over
    ``out`` in that order (a view)."""
    batch = list(whole)
    if part is not None:
        index, blocks = part
        n = sizes[index]
        hi, lo = len(sizes), len(sizes) + 1
        sizes = (*sizes, blocks, n // blocks)
        batch.append(hi)

        def split(term, prep):
            d = term.index(index)
            view = lambda x: x.unflatten(d, (blocks, n // blocks))  # noqa: E731
            return (view if prep is None else lambda x: view(prep(x))), [*term[:d], hi, lo, *term[d + 1:]]
        prep_a, ta = split(list(ta), prep_a)
        prep_b, tb = split(list(tb), prep_b)
    fn = contract(ta, tb, [*batch, *out], sizes, prep_a, prep_b)
    dims = tuple(range(len(batch)))
    return lambda a, b: fn(a, b).sum(dims)


__all__ = ["BLOCK", "LONGEST", "SHORTEST", "product", "sum_blocks"]
