"""A step that autograd records: run as untracked, trained in other ops where theirs costs less.

Where a gradient is taken, some steps train for less in other ops than they run: the layout
``training_layout.for_training`` names for a broadcast operand, an operand whose matrices have no
unit-stride axis copied once into a stack (``bmm`` would copy it matrix by matrix in each
product of its backward), ``bmm``'s products where ``mm``'s backward reads a transposed
operand (``backward.py``), the whole product where the untracked call makes it in chunks.
Other ops forward give other last bits.  Such a step runs as :class:`Recorded`: its forward
is the untracked step's ops, so a call gives the same bits whether or not autograd records
it, and its backward is the one autograd would make of the training ops, made without their
forward product: the training layout's operand matrices (:class:`Parts`) made again from the
saved operands, the result's gradient put back into the product's shape, the product's two
gradients, and the operand layouts' own backward (which sums a broadcast operand's partial
gradients).  Made of differentiable ops, that backward is recorded in turn where a double
backward asks for it.  An operand is saved only where the other's gradient reads it; the
matrices of one not saved are made on the meta device, which allocates nothing, for their
layout and their ops' backward.  That backward is each op's formula in turn on the nodes the
ops recorded (:func:`_pulled`), not a nested call of the engine.  The first call that takes
a gradient decides whether a step trains so (the torch executor's ``_recorded``).

Under a ``torch.func`` transform, forward AD, ``torch.jit.trace`` or a tensor subclass
(:func:`~einc.runtime.torch_executor.permute_copy.unwatched`), which record the ops
themselves, the untracked step's ops run as they are, and a step made in chunks makes the
same chunks in ops they record (:func:`~einc.runtime.torch_executor.chunked.plan_chunks`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from .backward import as_bmm
from .permute_copy import permuted_copy, unwatched

_transforms_active = torch._C._are_functorch_transforms_active
_run_backward = getattr(torch.autograd.graph, "_engine_run_backward", None)


class Parts(NamedTuple):
    """A layout's matrix product as its backward needs it: ``left`` and ``right`` make the
    product's operand matrices from the step's operands (the second one first where
    ``swap``), ``post_grad`` puts the result's gradient back into the product's shape;
    ``strided``: each operand's gradient made in that operand's strides, as ``mm``'s
    backward makes it (else as ``bmm``'s, ``G @ R^H`` and ``L^H @ G``: backward.py);
    ``pulls``: the backward of ``left``'s and ``right``'s ops by the layout of the operand
    they read (:func:`_matrix`)."""

    left: Callable
    right: Callable
    post_grad: Callable
    swap: bool
    strided: bool
    pulls: dict


class Recorded(torch.autograd.Function):
    """``fn(a, b)``, the untracked step, whose backward is that of ``parts``' product."""

    @staticmethod
    def forward(ctx, fn, parts, a, b):
        ctx.parts = parts
        ctx.save_for_backward(*saved(ctx, a, b))
        ctx.layouts = [(x.shape, x.stride(), x.dtype) for x in (a, b)]
        return fn(a, b)

    @staticmethod
    def backward(ctx, grad):
        # an operand not saved (no gradient reads its values) stands in as a tensor of its layout
        # on the meta device, which holds no memory: its product matrix's values are never read,
        # only the ops that make it and their strides (which say how its gradient is made)
        a, b = (x if x is not None else torch.empty_strided(*layout[:2], dtype=layout[2], device="meta")
                for x, layout in zip(ctx.saved_tensors, ctx.layouts))
        parts = ctx.parts
        need_a, need_b = ctx.needs_input_grad[2:]
        (xl, nl), (xr, nr) = ((b, need_b), (a, need_a)) if parts.swap else ((a, need_a), (b, need_b))
        create = torch.is_grad_enabled()        # a double backward records this one
        left, pull_l = _matrix(parts, 0, xl, nl, create)
        right, pull_r = _matrix(parts, 1, xr, nr, create)
        g = parts.post_grad(grad)
        strided, gl, gr = parts.strided, None, None
        if nl:
            gl = pull_l(torch.matmul(right.conj(), g.mT).mT if strided and _column_major(left)
                        else torch.matmul(g, right.mH))
        if nr:
            gr = pull_r(torch.matmul(g.mT, left.conj()).mT if strided and _column_major(right)
                        else torch.matmul(left.mH, g))
        ga, gb = (gr, gl) if parts.swap else (gl, gr)
        return None, None, ga, gb


def saved(ctx, a, b) -> tuple:
    """What a two-operand step's backward saves: each operand only where the other's
    gradient is needed (``a``'s gradient reads ``b``, ``b``'s reads ``a``), as torch's own
    products save them, so that updating the other in place, or an inference tensor beside
    it, is no error; an inference tensor as a copy (it cannot be saved)."""
    need_a, need_b = ctx.needs_input_grad[2:]
    return tuple((x.clone() if x.is_inference() else x) if n else None for x, n in ((a, need_b), (b, need_a)))


def _matrix(parts, side, x, need, create):
    """``(y, pull)``: ``y``, the product matrix ``parts`` make of the operand ``x`` (``left`` for
    ``side`` 0, else ``right``), and where ``need``, ``pull(gy)``, ``x``'s gradient from ``y``'s.
    The ops that make ``y`` are recorded and their nodes read once per layout of ``x``
    (:func:`_steps`, kept in ``parts.pulls``); later calls make ``y`` untracked and apply
    those steps, with no graph to record and walk.  A double backward (``create``) records
    them each time, on ``x`` itself where it requires grad; where an op has no formula here,
    :func:`_through` runs the engine."""
    part = parts.right if side else parts.left
    key = (side, x.shape, x.stride(), x.dtype, x.device, x.is_conj(), x.is_neg())
    steps = None if create else parts.pulls.get(key)     # (False: an op has no formula here)
    if isinstance(steps, list) or not (create or need):
        return part(x), need and functools.partial(_pull, steps)
    with torch.enable_grad():
        leaf = x if create and x.requires_grad else x.detach().requires_grad_(need)
        y = part(leaf)
    if not need:
        return y, None
    if not create and steps is None:
        try:
            steps = _steps(y, leaf)
        except AttributeError:      # (a node's saved fields named otherwise by another torch)
            steps = None
        if len(parts.pulls) < _LAYOUTS_KEPT:
            parts.pulls[key] = False if steps is None else steps
        if steps is not None:
            return y, functools.partial(_pull, steps)
    return y, lambda gy: _through(y, leaf, gy, create, part)


_LAYOUTS_KEPT = 16      # the operand layouts a step keeps its matrices' backward for


def _column_major(x) -> bool:
    """Whether the matrix ``x`` is laid out column by column (``mm``'s backward test)."""
    return x.dim() == 2 and x.stride(0) == 1 and x.stride(1) == x.shape[0]


def _through(y, x, gy, create, part):
    """The gradient of ``x`` from ``gy``, that of ``y = part(x)``, one of its operand matrices:
    the backward of ``part``'s ops pulled through by :func:`_pulled` (the engine's bits, without
    a nested call of the engine, which costs more than these views and sums).  Where an op has
    no formula there, the engine, called as ``torch.autograd.grad`` calls it (whose checks of
    the gradient's shape import sympy on first use, half a second of a first training step),
    and where ``x`` is an operand's stand-in on the meta device, whose gradient the engine
    would refuse on another device, on ``part`` made again on empty memory of ``x``'s layout."""
    try:
        pulled = _pulled(y, x, gy)
    except AttributeError:          # (a node's saved fields named otherwise by another torch)
        pulled = None
    if pulled is not None:
        return pulled
    if x.device.type == "meta" and gy.device.type != "meta":
        with torch.enable_grad():
            x = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=gy.device).requires_grad_()
            y = part(x)
    if _run_backward is None:
        return torch.autograd.grad(y, x, gy, create_graph=create, allow_unused=True)[0]
    return _run_backward((y,), (gy,), create, create, (x,), True, accumulate_grad=False)[0]


def _pulled(y, x, gy):
    """``gy``, the gradient of ``y``, pulled back to ``x``, the leaf ``y`` was made of (an operand
    detached, or its stand-in on the meta device), through :func:`_steps`; None where an op
    has no formula here."""
    steps = _steps(y, x)
    return None if steps is None else _pull(steps, gy)


def _steps(y, x):
    """The backward of each op between ``x``, a leaf, and ``y``, made of it, in the order to
    apply them to ``y``'s gradient: :data:`_BACKWARD`'s, autograd's formula for the op, on the
    sizes and dimensions its node saved.  (The engine refuses a gradient on another device
    than the node's, and a node called inside a backward that asked for some inputs'
    gradients computes none for the others.)  None where an op is not one of those."""
    steps, node = [], y.grad_fn
    while node is not None:
        backward = _BACKWARD.get(type(node).__name__)
        if backward is None or len(node.next_functions) != 1:
            return None
        steps.append(backward(node))
        node = node.next_functions[0][0]
        if type(node).__name__ == "AccumulateGrad":
            return steps if node.variable is x else None
    return steps if y is x else None


def _pull(steps, g):
    """``g`` through each of ``steps`` (:func:`_steps`) in turn."""
    for step in steps:
        g = step(g)
    return g


def _int(n) -> int:
    """A node's saved int (torch gives a negative one as its unsigned 64-bit pattern)."""
    return n - (1 << 64) if n >= 1 << 63 else n


def _unpermuted(node):
    """``permute_backwards``: the inverse permutation."""
    dims = node._saved_dims
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[_int(d) % len(dims)] = i
    return lambda g: g.permute(inverse)


def _unsqueezed(node):
    """``unsqueeze_to``: each squeezed dimension of size 1 back in."""
    sizes, dims = node._saved_self_sym_sizes, getattr(node, "_saved_dim", None)
    dims = range(len(sizes)) if dims is None else [dims] if isinstance(dims, int) else dims
    ones = [d for d in sorted(_int(d) % len(sizes) for d in dims) if sizes[d] == 1]

    def unsqueezed(g):
        for d in ones:
            g = g.unsqueeze(d)
        return g
    return unsqueezed


def _unsummed(node):
    """``sum_backward``: the gradient expanded over the summed dimensions."""
    sizes, dims = node._saved_self_sym_sizes, node._saved_dim
    kept = node._saved_keepdim or not (sizes and dims)
    summed = [] if kept else sorted(_int(d) % len(sizes) for d in dims)

    def unsummed(g):
        for d in summed:
            g = g.unsqueeze(d)
        return g.expand(sizes)
    return unsummed


def _undiagonal(node):
    """``diagonal_backward``: the gradient put on the diagonal of zeros."""
    args = (node._saved_self_sym_sizes, _int(node._saved_offset), _int(node._saved_dim1), _int(node._saved_dim2))
    return lambda g: torch.ops.aten.diagonal_backward(g, *args)


def _reshaped(node):
    """``view``'s and ``reshape``'s: the gradient reshaped back."""
    sizes = node._saved_self_sym_sizes
    return lambda g: g.reshape(sizes)


def _transposed(node):
    dims = _int(node._saved_dim0), _int(node._saved_dim1)
    return lambda g: g.transpose(*dims)


def _summed_to(node):
    """``expand``'s: the gradient summed to the operand's size."""
    sizes = node._saved_self_sym_sizes
    return lambda g: g.sum_to_size(sizes)


# The backward of the ops that make an operand's product matrix (views, copies, sums), each read
# from an op's node as a function of the gradient: autograd's formulas (torch's derivatives.yaml),
# none of which reads a saved tensor or the device it ran on.
_BACKWARD = {
    "AliasBackward0": lambda node: _same,
    "CloneBackward0": lambda node: _same,
    "DiagonalBackward0": _undiagonal,
    "ExpandBackward0": _summed_to,
    "PermuteBackward0": _unpermuted,
    "ReshapeAliasBackward0": _reshaped,
    "SqueezeBackward0": _unsqueezed,
    "SqueezeBackward1": _unsqueezed,
    "SqueezeBackward2": _unsqueezed,
    "SumBackward1": _unsummed,
    "TBackward0": lambda node: torch.Tensor.t,
    "TransposeBackward0": _transposed,
    "UnsafeViewBackward0": _reshaped,
    "ViewBackward0": _reshaped,
}


def recordable(a, b) -> bool:
    """Whether autograd alone records a step on ``a`` and ``b`` (no transform, forward AD,
    tracing or tensor subclass), so that it may run as :class:`Recorded`."""
    return unwatched(a) and unwatched(b) and not _transforms_active()


def parts(a, b, natural, out, groups, sizes, swap, stacked, strided=None) -> Parts:
    """The :class:`Parts` of a product (``a``, ``b``: each operand's ``(view, stacked)``, the
    functions that read it as the product's matrices, None for as it is; its result over
    ``natural``, the step's over ``out``; ``groups`` the result's matrices), read through the
    operands' stacked copies where ``stacked``; ``strided`` (default: a single ``mm``, as its
    own backward does)."""
    shape = tuple(math.prod(sizes[i] for i in grp) for grp in groups)
    copy = permuted_copy(out, natural, sizes) if list(out) != list(natural) else None

    def matrices(view, stack):
        return ((stack or view) if stacked else view) or _same

    def post_grad(g):
        return (copy(g) if copy else g).reshape(shape)
    return Parts(matrices(*a), matrices(*b), post_grad, swap, len(shape) == 2 if strided is None else strided, {})


def _same(x):
    return x


def training_parts(make, reads, chunked, thin, swap, a, b):
    """A step's training parts (``make(True)``: made by the first call that takes a gradient,
    on its operands ``a``, ``b``), or None where it trains as it runs: the whole product where
    it runs in chunks, its stacked copies where an operand's matrices have no unit-stride axis
    (``reads``: each ``(view, stacked)``), or its products as ``bmm``'s backward makes
    them where that costs less than ``mm``'s (``thin``: the step's ``(ta, tb, m, n, k, flip,
    sizes, itemsize)`` where it has no batch; backward.py)."""
    xs = (b, a) if swap else (a, b)
    if chunked or any(_unstrided(*read, x) for read, x in zip(reads, xs)):
        return make(True)
    if thin is not None and as_bmm(*thin):
        return make(True, False)
    return None


def no_unit_stride(y) -> bool:
    """Whether ``y``'s matrices have no unit-stride axis (BLAS reads neither way)."""
    st, sh = y.stride(), y.shape
    return st[-1] != 1 and st[-2] != 1 and sh[-1] != 1 and sh[-2] != 1


def _unstrided(view, stack, x) -> bool:
    """Whether the operand ``x`` read as ``view`` has matrices with no unit-stride axis, which
    its ``stack`` would copy (None: never)."""
    return stack is not None and no_unit_stride(view(x) if view else x)


def step(fn, parts):
    """``fn(a, b)`` run as :class:`Recorded` with ``parts``' backward."""
    apply = Recorded.apply
    return lambda a, b: apply(fn, parts, a, b)


__all__ = ["Parts", "Recorded", "no_unit_stride", "parts", "recordable", "saved", "step", "training_parts"]
