"""Large products made a chunk at a time: a plan's last matrix product with the
permuting copy into its result (:func:`plan_chunks`), and a multiply and sum
(:func:`plan_sum_chunks`).

Where the last step's product is laid out in another order than the result (the copy-cost
model's choice: ``runtime/torch_executor/ttgt.py``), the torch executor computes the whole product, then
copies it, permuted, into the fresh contiguous result.  On the CPU that is a second
tensor the size of the result, page-faulted in on every call, written by the product and
read back by the copy; once the two no longer fit the last-level cache, that traffic
costs as much as the product.  :func:`plan_chunks` instead cuts the product along the
leading indices of its first dimension (the batch, else the rows) into chunks of about
:data:`CHUNK_BYTES` per thread: each chunk's product is written into one reused buffer and
copied from there, while in cache, into its slab of the result.  Peak memory drops by the
size of the result.

Chunks win where the product and the result no longer fit the last-level cache
together; below, where they do, they gain little or lose, hence :data:`MIN_BYTES`.
Chunks of 512 KiB to 4 MiB per thread do about equally well (``--chunk-kib``), smaller
ones worse.  Measured on the development machine (1 MiB L2 per core, 32 MiB L3; float32)
with ``python bench/chunked.py --threads 1`` and ``2`` on the suite's CCSD(T) terms
scaled: bench/measured/chunks.md.

A multiply and sum (a ``dot`` step, ``bij,bij->b``, or a few long sums, ``ij,ij->``)
materialized the whole product ``a * b`` before summing it: a temporary the size of all
the indices together.  :func:`plan_sum_chunks` cuts it along its leading dimensions into
blocks of the same size as above, each block's sum copied into its slab of the result
(or, for a later block of the same outputs, along a summed dimension, added to it; in
float16 or bfloat16 the torch executor's ``whole`` multiplies and sums in float32, so the
partial sums are float32, rounded once at the end); the sums stay torch's cascade within
a block, so the result is as accurate as the whole sum, and closer to float64 than
torch.einsum's matrix product.  ``bench/chunked.py`` on ``bij,bij->b`` gains from the
same :data:`MIN_BYTES` with 1 and 2 threads, and loses below (bench/measured/chunks.md).

Chunks and blocks write through ``out=``, ``copy_`` and ``add_``, which autograd,
``torch.func`` and tracing do not follow: so written only for plain CPU tensors that
nothing tracks (:func:`~einc.runtime.torch_executor.permute_copy.untracked`).  Where autograd
alone records a chunked product (or multiply and sum), it runs as
runtime/torch_executor/recorded.py's ``Recorded`` (summed.py's ``Summed``), whose forward
sees plain tensors (the chunks run: the bits of the call without autograd) and whose
backward is the whole product's.  Where a ``torch.func`` transform, forward AD or a tensor
subclass (``make_fx``'s fake tensors) records the operands, the same chunks run in ops it
records: each chunk's product (or block's sum) a tensor of its own, a later block's sum
added out of place (the same bits as ``add_``), the result joined by ``torch.cat``; so the
call gives the bits it gives on plain tensors, where the whole product would sum in
another order.  On CUDA both run whole.

On CUDA the chunks are not taken by default but offered: measure mode (the default
there, :mod:`einc.runtime.select`) times the last product in chunks of half the L2 cache
(``plan_chunks(...).anywhere``: ~25 MB on an H100, ~30 MB on an H200, as torch reports
their L2) beside cuBLAS, the generated kernel and the whole product and copy.  The idea
is the CPU's: the copy reads each chunk from L2, so the permuted product is never
written whole to memory and read back (on the CCSD(T) terms of the GPU variants, 512 MiB
each way).  Measure mode keeps it only where it is faster: on an H100 it won a few
steps of the suite (``txl_rel_attn_scores``, ``af2_triangle_mult_outgoing``) and lost
the CCSD(T) steps to the plain kernel (bench/measured/h100-2026-11-26/README.md).
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from ...planner.strides import contiguous
from .permute_copy import plain, untracked

MIN_BYTES = 1 << 24     # smaller products: in one piece (they and the result fit the L3)
CHUNK_BYTES = 1 << 20   # a chunk's product, per thread
DEVICE_CHUNK_BYTES = 1 << 25    # a chunk's product on a CUDA device that does not tell its L2 size


class Chunks:
    """The chunks of one step's product, decided once per chunk size (:meth:`cut`)."""

    __slots__ = ("natural", "out", "lead", "sizes", "itemsize", "shape", "by_target")

    def __init__(self, natural, out, lead, sizes, itemsize):
        self.natural, self.out, self.lead, self.sizes = list(natural), list(out), list(lead), sizes
        self.itemsize = itemsize
        self.shape = tuple(sizes[i] for i in out)
        self.by_target = {}

    def cut(self, target):
        """``(rows per chunk at most, the permutation from the product's order to the
        result's, [(lo, hi, index, view)])`` for chunks of about ``target`` bytes: per
        chunk, its range of rows of dimension 0, the index of its slab of the result and
        its shape over the product's order; None where the product is too small to cut or
        would be one chunk."""
        found = self.by_target.get(target, False)
        if found is False:
            found = self.by_target[target] = _cut(self.natural, self.out, self.lead, self.sizes,
                                                  self.itemsize, target)
        return found


def _blocks(extents, inner, itemsize, target):
    """A tensor whose leading dimensions have ``extents`` (``inner`` elements per value of
    all of them) cut into blocks of about ``target`` bytes: per block, a slice of each
    leading dimension (ranges of one value of the dimensions before the one cut, a range
    of that one, the whole of those after), in row-major order; None where the whole fits
    the target or the cut would give one block."""
    p, per = 0, math.prod(extents) * inner
    while p < len(extents) and per * itemsize > target:
        per //= extents[p]
        p += 1
    if p == 0:
        return None
    n = extents[p - 1]
    k = max(1, min(n, target // max(per * itemsize, 1)))
    blocks = [tuple(slice(v, v + 1) for v in values) + (slice(j, min(j + k, n)),) + (slice(None),) * (len(extents) - p)
              for values in itertools.product(*(range(e) for e in extents[:p - 1])) for j in range(0, n, k)]
    return blocks if len(blocks) > 1 else None


def _span(sl, extent):
    return (sl.stop if sl.stop is not None else extent) - (sl.start or 0)


def _cut(natural, out, lead, sizes, itemsize, target):
    total = math.prod(sizes[i] for i in natural)
    if total * itemsize < MIN_BYTES:
        return None
    extents = [sizes[i] for i in lead]
    blocks = _blocks(extents, total // max(math.prod(extents), 1), itemsize, target)
    if blocks is None:
        return None
    perm = tuple(natural.index(i) for i in out)
    strides = contiguous(extents)                  # rows of dimension 0 per value of each lead index
    chunks = []
    for block in blocks:
        lo = sum((sl.start or 0) * st for sl, st in zip(block, strides))
        rows = math.prod(_span(sl, e) for sl, e in zip(block, extents))
        index = tuple(block[lead.index(i)] if i in lead else slice(None) for i in out)
        view = tuple(_span(sl, e) for sl, e in zip(block, extents)) + tuple(sizes[i] for i in natural[len(lead):])
        chunks.append((lo, lo + rows, index, view))
    return max(hi - lo for lo, hi, *_ in chunks), perm, chunks


def plan_chunks(natural, out, lead, sizes, itemsize, batched):
    """``fn(a, b, whole)``: the product of the matrices (stacks, if ``batched``) ``a`` and
    ``b`` over ``natural`` (its first dimension the indices ``lead``), as a contiguous
    tensor over ``out``, a chunk at a time where that applies (plain CPU tensors: see
    :func:`~einc.runtime.torch_executor.permute_copy.untracked`), else ``whole(a, b)``.  ``fn.anywhere``
    does the same on any device (CUDA: chunks of half the L2 cache), the candidate that
    measure mode times beside the others (:mod:`einc.runtime.select`).  None where no
    product of these sizes is ever cut."""
    total = math.prod(sizes[i] for i in natural)
    if not total or total * itemsize < MIN_BYTES or not lead:
        return None
    chunks = Chunks(natural, out, lead, sizes, itemsize)
    mm = torch.bmm if batched else torch.mm

    def in_chunks(a, b, whole, target):
        cut = chunks.cut(target)
        if cut is None:
            return whole(a, b)
        most, perm, parts = cut
        result = a.new_empty(chunks.shape)
        buffer = a.new_empty((most,) + tuple(a.shape[1:-1]) + tuple(b.shape[-1:]))
        sources = {}                # the buffer as a chunk of each shape, and that permuted
        for lo, hi, index, view in parts:
            found = sources.get(view)
            if found is None:
                part = buffer[:hi - lo]
                found = sources[view] = (part, part.view(view).permute(perm))
            mm(a[lo:hi], b[lo:hi] if batched else b, out=found[0])
            result[index].copy_(found[1])
        return result

    def joined(a, b, whole, target):
        """The same chunks in ops that a transform, forward AD or a tracer records: the
        operands split into the chunks' rows (one op, whose gradient is one ``cat``: a
        slice's would be a zero tensor the operand's size), each chunk's product a tensor
        of its own, the result joined by ``torch.cat``."""
        cut = chunks.cut(target)
        if cut is None:
            return whole(a, b)
        _, perm, parts = cut
        rows = [hi - lo for lo, hi, *_ in parts]
        pairs = zip(a.split(rows), b.split(rows) if batched else [b] * len(rows))
        made = [mm(x, y).view(view).permute(perm) for (x, y), (*_, view) in zip(pairs, parts)]
        slabs = [_spans(index) for *_, index, _ in parts]
        return _joined(made, _grid(slabs, [chunks.out.index(i) for i in chunks.lead])).contiguous()

    def anywhere(a, b, whole):
        if plain(a) and plain(b):
            return in_chunks(a, b, whole, device_chunk_bytes(a.device))
        return whole(a, b)

    def run(a, b, whole):           # taken by default on the CPU only, where it was measured
        if a.device.type != "cpu":
            return whole(a, b)
        if plain(a) and plain(b):
            return in_chunks(a, b, whole, device_chunk_bytes(a.device))
        return joined(a, b, whole, device_chunk_bytes(a.device))
    run.anywhere = anywhere
    return run


def _spans(index):
    """An index tuple of slices as ``(start, stop)`` pairs (slices hash from Python 3.12 on)."""
    return tuple((sl.start, sl.stop) for sl in index)


def _grid(slabs, dims):
    """The blocks ``slabs`` of a tensor (:func:`_spans` of their indices, in row-major
    order over its dimensions ``dims``) as a grid: ``(dimension, blocks along it)`` for each
    dimension they cut, in that order."""
    grid = []
    for d in dims:
        n = len({slab[d] for slab in slabs})
        if n > 1:
            grid.append((d, n))
    return grid


def _lengths(blocks):
    """Per dimension of the blocks ``blocks`` (:func:`_blocks`) the lengths of their pieces
    along it, in order, or None where none cuts it."""
    lengths = []
    for d in range(len(blocks[0])):
        spans = dict.fromkeys((b[d].start, b[d].stop) for b in blocks)
        lengths.append(None if list(spans) == [(None, None)] else [hi - lo for lo, hi in spans])
    return lengths


def _split(x, lengths, d=0):
    """``x`` cut into the pieces ``lengths`` (:func:`_lengths`) gives, in row-major order,
    by ``split`` (whose gradient is one ``cat``, where a slice's is a zero tensor of
    ``x``'s size, one per block), whole along a dimension ``x`` broadcasts."""
    if d == len(lengths):
        return [x]
    if lengths[d] is None:
        return _split(x, lengths, d + 1)
    pieces = [x] * len(lengths[d]) if x.shape[d] == 1 else x.split(lengths[d], d)
    return [p for piece in pieces for p in _split(piece, lengths, d + 1)]


def _joined(parts, grid):
    """The tensor whose blocks, in row-major order over ``grid`` (:func:`_grid`), are
    ``parts``: joined by ``torch.cat``, one dimension at a time."""
    if not grid:
        return parts[0]
    (dim, n), rest = grid[0], grid[1:]
    per = len(parts) // n
    return torch.cat([_joined(parts[k * per:(k + 1) * per], rest) for k in range(n)], dim)


def device_chunk_bytes(device) -> int:
    """Bytes of a chunk's product on ``device``: half its L2 cache on CUDA (the chunk is
    copied from there into the result), :data:`CHUNK_BYTES` per thread on the CPU."""
    if device.type == "cuda":
        l2 = l2_bytes(device)
        return max(l2 // 2, CHUNK_BYTES) if l2 else DEVICE_CHUNK_BYTES
    return CHUNK_BYTES * torch.get_num_threads()


def l2_bytes(device) -> int:
    """The L2 cache of a CUDA ``device`` in bytes (0 where torch does not say)."""
    return _l2_bytes(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _l2_bytes(index: int) -> int:
    return getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0)


def plan_sum_chunks(shape, k_dims, itemsize, min_bytes=None):
    """``fn(a, b, whole)``: ``whole(a, b)``, the sum over the dimensions ``k_dims`` of
    ``a * b`` (tensors that broadcast to ``shape``, whose product has elements of
    ``itemsize`` bytes), a block of ``shape`` at a time where that applies: each block's
    product and sum, its sum copied into (or, for a later block of the same outputs,
    added to) the result.  None where no product of this size (``min_bytes`` or more) is
    ever cut (default :data:`MIN_BYTES`)."""
    total = math.prod(shape)
    if not total or total * itemsize < (MIN_BYTES if min_bytes is None else min_bytes):
        return None
    kept = [d for d in range(len(shape)) if d not in k_dims]
    kept_shape = tuple(shape[d] for d in kept)
    by_threads = {}

    def on(x, block):               # a block of x, whole along the dimensions it broadcasts
        return tuple(slice(None) if x.shape[d] == 1 else sl for d, sl in enumerate(block))

    def run(a, b, whole):
        threads = torch.get_num_threads()
        found = by_threads.get(threads, False)
        if found is False:
            blocks = _blocks(list(shape), 1, itemsize, CHUNK_BYTES * threads)
            found = by_threads[threads] = blocks and [(block, all(block[d].start in (0, None) for d in k_dims))
                                                      for block in blocks]
        if not found or a.device.type != "cpu":
            return whole(a, b)
        if not (untracked(a) and untracked(b)):
            return joined(a, b, found, whole)
        result = None
        for block, first in found:
            part = whole(a[on(a, block)], b[on(b, block)])
            if result is None:
                result = part.new_empty(kept_shape)
            slab = result[tuple(block[d] for d in kept)]
            if first:
                slab.copy_(part)            # the first block of these outputs
            else:
                slab.add_(part)             # a later one, along a summed dimension
        return result

    def joined(a, b, found, whole):
        """The same blocks in ops that a transform, forward AD or a tracer records: the
        operands split into the blocks (:func:`_split`), a later block's sum added out of
        place (the same bits as ``add_``), the slabs joined by ``torch.cat``."""
        lengths = _lengths([block for block, _ in found])
        slabs = {}
        for (block, first), x, y in zip(found, _split(a, lengths), _split(b, lengths)):
            part = whole(x, y)
            key = _spans([block[d] for d in kept])
            slabs[key] = part if first else slabs[key] + part
        return _joined(list(slabs.values()), _grid(list(slabs), range(len(kept)))).contiguous()
    return run


__all__ = ["CHUNK_BYTES", "DEVICE_CHUNK_BYTES", "MIN_BYTES", "device_chunk_bytes", "l2_bytes", "plan_chunks",
           "plan_sum_chunks"]
