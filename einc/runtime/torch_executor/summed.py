"""A multiply and sum, ``(a * b).sum(k_dims)``: the same ops, and bits, whether or not
autograd records it.

For float16 / bfloat16 the products are float32, as in a matrix product (torch.einsum's
``bmm``, einc's kernels), and the sum is rounded once, at the end: a product rounded to
float16 may overflow (300 * 300 is inf, and inf - inf NaN where torch sums to 0) or lose
the bits the sum needs.  A large product is made a block at a time
(:func:`~einc.runtime.torch_executor.chunked.plan_sum_chunks`).

Autograd would record neither as it runs: the blocks write into a result, and the float32
copy of a 16-bit operand would be saved for the backward (34 MiB beside nothing for
``ij,ij->`` on 3000 x 3000 float16).  Where a gradient is taken, such a step runs as
:class:`Summed`, whose forward is the untracked ops and whose backward is that of
``(a * b).sum(k_dims)``: each operand's gradient is the result's times the other operand
(conjugated), summed where the operand broadcasts (by torch's einsum op, in float32 for
16-bit operands).  It saves only the operand a needed gradient reads
(:func:`~einc.runtime.torch_executor.recorded.saved`).  Under a ``torch.func`` transform,
forward AD or a tensor subclass (``make_fx``'s fake tensors), which record the ops themselves
(:func:`~einc.runtime.torch_executor.recorded.recordable`), the same blocks run in ops they
record (:func:`~einc.runtime.torch_executor.chunked.plan_sum_chunks`).

A matrix product with few outputs of long sums runs forward as matrix products over blocks
of the sum, one in 16-bit floats (:mod:`~einc.runtime.torch_executor.blocked`), and trains
as such a multiply and sum: its gradients sum few terms, where a batch of small products'
backward costs more, and a float16 matrix product's backward runs slowly on a CPU without
float16 matrix instructions (bench/measured/few-outputs-2026-12-04.md).
"""

from __future__ import annotations

import string

import torch

from .chunked import plan_sum_chunks
from .recorded import recordable, saved

HALF = (torch.float16, torch.bfloat16)
_legacy_batched = torch._C._functorch.is_legacy_batchedtensor     # torch.autograd's is_grads_batched

# float16 / bfloat16 products are made in float32 in blocks from this size (bytes) of the
# float32 product up (below, whole): whole float32 temporaries cost more than the blocks
# (bfloat16 bij,bij->b, 1 thread: bench/measured/chunks.md).
HALF_MIN_BYTES = 1 << 20


def times(a, b):
    """``a * b``; in float32 for float16 / bfloat16 (the smaller operand copied)."""
    if a.dtype not in HALF:
        return a * b
    return a.float() * b if a.numel() <= b.numel() else a * b.float()


def mul_sum(k_dims, dtype, shape=None, forward=None):
    """``fn(a, b)``: the sum over the dimensions ``k_dims`` of ``a * b``, tensors of ``dtype``
    that broadcast to one shape of the same rank; a block at a time where that shape,
    ``shape`` (None: never in blocks), is large.  ``forward(a, b)``: other ops that give
    that sum, run in place of the multiply and sum (which still gives the backward)."""
    if forward is not None:
        run = forward
    else:
        if not (dtype.is_floating_point or dtype.is_complex):   # (the operands' dtype kept, as torch's product does)
            whole = lambda a, b: (a * b).sum(k_dims, dtype=dtype)  # noqa: E731
        else:
            whole = lambda a, b: times(a, b).sum(k_dims)  # noqa: E731
        half = dtype in HALF
        chunks = shape is not None and plan_sum_chunks(shape, k_dims, 4 if half else dtype.itemsize,
                                                       HALF_MIN_BYTES if half else None)
        run = (lambda a, b: chunks(a, b, whole)) if chunks else whole
        if half:
            summed = run
            run = lambda a, b: summed(a, b).to(dtype)  # noqa: E731
        if not (half or chunks):
            return run                  # autograd records these ops as they run
    apply = Summed.apply

    def step(a, b):
        if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled() and recordable(a, b):
            return apply(run, k_dims, a, b)
        return run(a, b)            # (a transform or subclass records it: chunked.py's recorded blocks)
    return step


class Summed(torch.autograd.Function):
    """``fn(a, b)``, the untracked multiply and sum over ``k_dims``, whose backward is that of
    ``(a * b).sum(k_dims)``."""

    @staticmethod
    def forward(ctx, fn, k_dims, a, b):
        ctx.k_dims = k_dims
        ctx.save_for_backward(*saved(ctx, a, b))
        ctx.kinds = (a.shape, a.dtype), (b.shape, b.dtype)
        return fn(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        for d in sorted(ctx.k_dims):
            grad = grad.unsqueeze(d)
        need_a, need_b = ctx.needs_input_grad[2:]
        return None, None, _part(grad, b, *ctx.kinds[0]) if need_a else None, \
            _part(grad, a, *ctx.kinds[1]) if need_b else None


def _part(grad, other, shape, dtype):
    """The gradient of an operand of ``shape`` and ``dtype``: ``grad`` times ``other``
    (conjugated, as ``mul``'s backward), summed where the operand broadcasts.  Where
    nothing is summed, a 16-bit product is made in 16 bits, which is the float32 product
    rounded once (the float32 product of two 16-bit floats is exact).  The sum where the
    operand broadcasts is torch's einsum op (a matrix product:
    a few terms to an output, where a multiply and sum reduces a short index slowly),
    in float32 for 16-bit operands, rounded once."""
    full = torch.broadcast_shapes(grad.shape, other.shape)
    k_dims = tuple(d for d, (n, m) in enumerate(zip(shape, full)) if n != m)
    if not k_dims:
        if dtype in HALF and other.shape[-1] == 1 < full[-1]:
            # torch's 16-bit multiply runs element by element where the last dimension
            # broadcasts ``other`` (an outer product): float32 runs vectorized
            return times(grad, other).to(dtype)
        return grad * other.conj()
    if len(full) > len(string.ascii_letters) or _legacy_batched(grad):    # (legacy batching has no einsum)
        return (grad * other.conj()).sum(k_dims, keepdim=True) if dtype not in HALF \
            else times(grad, other).sum(k_dims, keepdim=True).to(dtype)
    letters = string.ascii_letters[:len(full)]
    kept = "".join(c for d, c in enumerate(letters) if d not in k_dims)
    if dtype in HALF:
        grad, other = grad.float(), other.float()
    return torch._VF.einsum(f"{letters},{letters}->{kept}", [grad, other.conj()]).reshape(shape).to(dtype)


__all__ = ["HALF", "HALF_MIN_BYTES", "Summed", "mul_sum", "times"]
