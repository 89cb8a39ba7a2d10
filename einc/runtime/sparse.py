"""torch's einsum of operands that are not strided (sparse, mkldnn), where its answer is right.

einc contracts strided tensors; a call with a sparse operand is torch's to answer, as
``torch.einsum`` answers it (its layout kept: the transpose of a sparse tensor stays
sparse).  One fault of torch's makes that answer wrong: a product that broadcasts a
sparse tensor's sparse dimensions (a size 1 against a larger size, or a dimension it
lacks) multiplies only what the sparse tensor holds, so ``i,j->ij`` with a sparse ``i``
keeps its first column only.  Whether torch's einsum makes such a product depends on its
whole order of work (which operands it multiplies first, which indices it sums before a
product, a hybrid tensor's dense dimensions, which broadcast rightly), so
:func:`not_strided` runs torch's einsum watching the ops it dispatches
(:class:`_Watch`), and refuses that product, before it runs, with
:class:`~einc.errors.LayoutError`; an error of torch's own (an op a layout lacks) is a
LayoutError too (an ``UnsupportedLayoutError``, a ``NotImplementedError``, where torch's is
one).  Every call torch answers rightly is answered, with torch's own result.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..errors import LayoutError, OutError, UnsupportedLayoutError
from .reference import torch_einsum

_strided = torch.strided
_MULTIPLY = torch.ops.aten.mul


class _Broadcast(Exception):
    """A product that would broadcast a sparse tensor made of ``operands`` (their positions)."""

    def __init__(self, operands):
        super().__init__()
        self.operands = operands


class _Watch(TorchDispatchMode):
    """Torch's ops, each as it comes, but a multiply that would broadcast a tensor that is
    not strided over its sparse dimensions (:class:`_Broadcast`, raised before it runs).
    Which operands each result was made of is kept by its id, to name them (only for the
    message: an id a freed result leaves is set again by the op whose result takes it)."""

    def __init__(self, operands):
        super().__init__()
        self.made_of = {id(o): (k,) for k, o in enumerate(operands)}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        made_of = tuple(sorted({k for x in tensors for k in self.made_of.get(id(x), ())}))
        if func.overloadpacket is _MULTIPLY and len(tensors) > 1:
            shape = torch.broadcast_shapes(*[x.shape for x in tensors])
            for x in tensors:
                if x.layout is not _strided and _broadcast(x, shape):
                    raise _Broadcast(self.made_of.get(id(x), ()))
        result = func(*args, **kwargs)
        if isinstance(result, torch.Tensor):
            self.made_of[id(result)] = made_of
        return result


def _broadcast(x, shape) -> bool:
    """Whether ``x``, not strided, would be broadcast to ``shape`` over a sparse dimension
    (its dense dimensions, a hybrid tensor's last ones, broadcast rightly)."""
    try:
        sparse = x.dim() - x.dense_dim()
    except RuntimeError:                # (a layout with no dense dimensions: mkldnn)
        sparse = x.dim()
    return x.dim() != len(shape) or tuple(x.shape[:sparse]) != tuple(shape[:sparse])


def not_strided(eq, operands):
    """torch's einsum of ``operands``, some of which are not strided (sparse, mkldnn), as
    ``torch.einsum`` returns it, where it is right; else :class:`~einc.errors.LayoutError`
    naming the operand and its layout: where torch would multiply a sparse tensor it
    broadcasts (which it does wrongly), or where torch raises."""
    odd = [k for k, o in enumerate(operands) if o.layout is not _strided]
    try:
        with _Watch(operands):
            return torch_einsum(eq.torch_text, *operands)
    except _Broadcast as error:
        made_of = [k for k in error.operands if k in odd] or odd
        k = made_of[0]
        what = f"operand {k}" if len(made_of) == 1 else "the product of operands " + " and ".join(map(str, made_of))
        raise LayoutError(
            f"einsum(): operand {k} is a {operands[k].layout} tensor, which einc does not contract (it contracts "
            f"strided tensors), nor torch's einsum here: its order of work would broadcast {what} against a "
            f"larger size in a product, which torch multiplies wrongly for a sparse tensor (i,j->ij with a sparse "
            f"i keeps its first column only); pass " + " and ".join(f"operand {j}.to_dense()" for j in made_of)
            + f"\n{eq.where(k)}") from None
    except RuntimeError as error:       # (NotImplementedError too: then one, as torch's)
        k = odd[0]
        kind = UnsupportedLayoutError if isinstance(error, NotImplementedError) else LayoutError
        raise kind(f"einsum(): operand {k} is a {operands[k].layout} tensor, which torch's einsum (einc "
                          f"contracts strided tensors only) cannot contract here: {error}; pass operand "
                          f"{k}.to_dense()\n{eq.where(k)}") from error


def write_out(out, result):
    """``out=`` given ``result`` (its shape, dtype and device checked), where either is not
    strided: a strided ``out`` takes the values of torch's sparse answer; ``out`` of another
    layout takes the result where torch's copy does (a sparse COO one: a sparse COO
    result), else :class:`~einc.errors.OutError`, ``out`` left as it was."""
    if out.layout is _strided:
        return out.copy_(result.to_dense())
    try:
        return out.copy_(result)
    except RuntimeError as error:       # (NotImplementedError too)
        raise OutError(f"einsum(): out= is a {out.layout} tensor, which cannot take the result, a {result.layout} "
                       f"tensor: {error}; pass a strided out=, which takes the result's values whatever its "
                       "layout") from error


def explained(shown, operands):
    """``explain``'s answer ``shown`` for ``operands`` (tensors or shapes), its note saying
    where an operand is not strided: the call is then torch's einsum's, not this plan's."""
    odd = [k for k, o in enumerate(operands) if isinstance(o, torch.Tensor) and o.layout is not _strided]
    if odd:
        k = odd[0]
        shown.note = (f"operand {k} is a {operands[k].layout} tensor, which einc does not contract: torch's einsum "
                      "answers this call with its own ops where its answer is right, else einsum raises "
                      "LayoutError; the plan above is einc's for strided operands of these shapes")
    return shown
