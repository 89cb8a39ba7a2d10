"""The one-copy backward of a step's last copy: a copy into another layout whose gradient
is the copy back, one fresh contiguous tensor (see the torch executor's docstring)."""

from __future__ import annotations

import inspect

import torch


class _Relayout(torch.autograd.Function):
    """``there(x)``, a copy into another layout, whose backward is the copy ``back`` of the
    gradient into ``x``'s layout (a fresh contiguous tensor, which the backward's matrix
    products read as they are, where the permuted view of the gradient would be copied
    matrix by matrix).  Twice differentiable: the backward is the same Function."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, there, back):
        return there(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.there, ctx.back = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, grad):
        return _Relayout.apply(grad, ctx.back, ctx.there), None, None

    @staticmethod
    def jvp(ctx, tangent, _there, _back):
        return ctx.there(tangent)


# torch binds every apply's arguments to forward's signature where setup_context is
# defined, building the signature anew each time unless the function carries one.
_Relayout.forward.__signature__ = inspect.signature(_Relayout.forward)


def relayout(there, back):
    """``there`` as a step's last function, with :class:`_Relayout`'s backward where the
    result will need a gradient (torch's autograd records the step's ops)."""
    def run(x):
        if x.requires_grad:
            return _Relayout.apply(x, there, back)
        return there(x)
    return run
