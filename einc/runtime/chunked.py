"""A plan's last matrix product and the permuting copy into its result, a chunk at a time.

Where the last step's product is laid out in another order than the result (the copy-cost
model's choice: ``runtime/ttgt.py``), the torch executor computes the whole product, then
copies it, permuted, into the fresh contiguous result.  On the CPU that is a second
tensor the size of the result, page-faulted in on every call, written by the product and
read back by the copy; once the two no longer fit the last-level cache, that traffic
costs as much as the product.  :func:`plan_chunks` instead cuts the product along the
leading indices of its first dimension (the batch, else the rows) into chunks of about
:data:`CHUNK_BYTES` per thread: each chunk's product is written into one reused buffer and
copied from there, while in cache, into its slab of the result.  Peak memory drops by the
size of the result.

Measured on the development machine (2-core AMD EPYC, 1 MiB L2 per core, 32 MiB L3;
torch 2.13, float32) with ``python bench/chunked.py --threads 1`` and ``2`` (the suite's
CCSD(T) terms scaled; the README's pairwise section has the table): chunks/whole
0.30-0.71 at results of 32 MiB and more, 0.66-0.90 at 16-24 MiB, 0.68-1.23 at 8-12 MiB,
where the product and the result fit the L3 together (1.13-1.23 at 8 MiB with 2
threads), hence :data:`MIN_BYTES`.  Chunks of 512 KiB to 4 MiB per thread did
about equally well at 32 MiB (``--chunk-kib``), 128 KiB ones worse.

The chunks write through ``out=``, which autograd, ``torch.func`` and tracing do not
follow: they are taken only for plain CPU tensors that nothing tracks
(:func:`~einc.runtime.permute_copy.untracked`); anything else runs the whole product.
"""

from __future__ import annotations

import itertools
import math

import torch

from .permute_copy import untracked

MIN_BYTES = 1 << 24     # smaller products: in one piece (they and the result fit the L3)
CHUNK_BYTES = 1 << 20   # a chunk's product, per thread


class Chunks:
    """The chunks of one step's product, decided once per thread count (:meth:`cut`)."""

    __slots__ = ("natural", "out", "lead", "sizes", "itemsize", "shape", "by_threads")

    def __init__(self, natural, out, lead, sizes, itemsize):
        self.natural, self.out, self.lead, self.sizes = list(natural), list(out), list(lead), sizes
        self.itemsize = itemsize
        self.shape = tuple(sizes[i] for i in out)
        self.by_threads = {}

    def cut(self, threads):
        """``(rows per chunk at most, [(lo, hi, index, view, perm)])``: per chunk, its range
        of rows of dimension 0, the index of its slab of the result, its shape over the
        product's order and the permutation to the slab's; None where the product is too
        small to cut or would be one chunk."""
        found = self.by_threads.get(threads, False)
        if found is False:
            found = self.by_threads[threads] = _cut(self.natural, self.out, self.lead, self.sizes,
                                                    self.itemsize, CHUNK_BYTES * threads)
        return found


def _cut(natural, out, lead, sizes, itemsize, target):
    total = math.prod(sizes[i] for i in natural)
    if total * itemsize < MIN_BYTES:
        return None
    # Chunks are ranges of values of lead[p - 1], within one value of each of lead[:p - 1],
    # for the first p at which one value of lead[:p] holds no more than the target.
    p, per = 0, total
    while p < len(lead) and per * itemsize > target:
        per //= sizes[lead[p]]
        p += 1
    if p == 0:
        return None
    x = lead[p - 1]
    rows = math.prod(sizes[i] for i in lead[p:])       # rows of dimension 0 per value of x
    k = max(1, min(sizes[x], target // max(per * itemsize, 1)))
    fixed = lead[:p - 1]
    src = natural[p - 1:]
    dst = [i for i in out if i not in fixed]
    perm = tuple(src.index(i) for i in dst)
    chunks = []
    strides = [math.prod(sizes[i] for i in lead[q + 1:]) for q in range(len(lead))]
    for values in itertools.product(*(range(sizes[i]) for i in fixed)):
        base = sum(v * strides[q] for q, v in enumerate(values))
        for j in range(0, sizes[x], k):
            kk = min(k, sizes[x] - j)
            index = [slice(None)] * len(out)
            for q, v in enumerate(values):
                index[out.index(lead[q])] = v
            index[out.index(x)] = slice(j, j + kk)
            lo = base + j * rows
            view = (kk,) + tuple(sizes[i] for i in src[1:])
            chunks.append((lo, lo + kk * rows, tuple(index), view, perm))
    if len(chunks) < 2:
        return None
    return k * rows, chunks


def plan_chunks(natural, out, lead, sizes, itemsize, batched):
    """``fn(a, b, whole)``: the product of the matrices (stacks, if ``batched``) ``a`` and
    ``b`` over ``natural`` (its first dimension the indices ``lead``), as a contiguous
    tensor over ``out``, a chunk at a time where that applies, else ``whole(a, b)``.
    None where no product of these sizes is ever cut."""
    total = math.prod(sizes[i] for i in natural)
    if not total or total * itemsize < MIN_BYTES or not lead:
        return None
    chunks = Chunks(natural, out, lead, sizes, itemsize)
    mm = torch.bmm if batched else torch.mm

    def run(a, b, whole):
        cut = chunks.cut(torch.get_num_threads()) if untracked(a) and untracked(b) and \
            a.dtype.itemsize == itemsize else None
        if cut is None:
            return whole(a, b)
        most, parts = cut
        result = a.new_empty(chunks.shape)
        buffer = a.new_empty((most,) + tuple(a.shape[1:-1]) + tuple(b.shape[-1:]))
        for lo, hi, index, view, perm in parts:
            part = buffer[:hi - lo]
            mm(a[lo:hi], b[lo:hi] if batched else b, out=part)
            result[index].copy_(part.view(view).permute(perm))
        return result
    return run


__all__ = ["CHUNK_BYTES", "MIN_BYTES", "plan_chunks"]
