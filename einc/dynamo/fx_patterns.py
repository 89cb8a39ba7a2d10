"""Which nodes of a dynamo FX graph the einc pass understands (:mod:`einc.dynamo.fx_pass`).

Contractions (``torch.einsum`` in string form, ``matmul``/``@``, ``mm``, ``bmm``,
``tensordot``, bias-free ``linear``) as einsum equations over their operand nodes;
permutations (``transpose``, ``permute``, ``t``, ``.T``, ``.mT``); multiplications and
divisions by real scalars; and nodes that may write into a tensor.  Sizes come from
each node's ``meta["example_value"]`` (hints under dynamic shapes).
"""

from __future__ import annotations

import functools
import inspect
import math
import operator

import torch
import torch.fx

from ..planner.equation import letter
from ..runtime.reference import torch_einsum


def val(node):
    """The node's example value (a fake tensor, or a number for a scalar node)."""
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, torch.fx.Node) else None


def _hint(s):
    if isinstance(s, int):
        return s
    hint = getattr(getattr(s, "node", None), "hint", None)
    return int(hint) if hint is not None else None


def shape(node):
    """The node's tensor shape as ints (size hints for symbolic sizes), or None."""
    v = val(node)
    if not isinstance(v, torch.Tensor):
        return None
    dims = tuple(_hint(s) for s in v.shape)
    return None if any(s is None for s in dims) else dims


def is_call(node, functions=(), methods=()):
    return (node.op == "call_function" and node.target in functions) or \
           (node.op == "call_method" and node.target in methods)


_MATMUL = (operator.matmul, torch.matmul)
_MM, _BMM = (torch.mm,), (torch.bmm,)
_TENSORDOT = (torch.tensordot, torch.functional.tensordot)
_EINSUM = (torch.einsum, torch.functional.einsum, torch_einsum)
_LINEAR = (torch._C._nn.linear, torch.nn.functional.linear)
_MUL = (operator.mul, torch.mul)
_DIV = (operator.truediv, torch.div, torch.true_divide)


def _scalar(x) -> bool:
    """A real scalar: a number or a node computing one (a symbolic size)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return True
    v = val(x)
    return isinstance(v, (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(v, bool)


def scalar_factor(node):
    """``(tensor node, factor, "mul" | "div")`` if ``node`` scales a tensor by a real,
    finite scalar (not a division by 0) without changing its dtype or shape
    (``int_tensor * 0.5`` does not qualify)."""
    if node.kwargs and set(node.kwargs) - {"rounding_mode"} or node.kwargs.get("rounding_mode") is not None:
        return None
    if len(node.args) != 2:
        return None
    a, b = node.args
    found = None
    if is_call(node, _MUL, ("mul", "__mul__", "__rmul__")):
        if _tensor(a) and _scalar(b):
            found = a, b, "mul"
        elif node.op == "call_function" and _tensor(b) and _scalar(a):
            found = b, a, "mul"
    elif is_call(node, _DIV, ("div", "true_divide", "__truediv__")) and _tensor(a) and _scalar(b):
        found = a, b, "div"
    if found is None:
        return None
    factor = found[1]
    if isinstance(factor, (int, float)) and (not math.isfinite(factor) or (found[2] == "div" and factor == 0)):
        return None     # moved onto an operand, inf (or a division by 0) would turn its zeros into NaN
    x, out = val(found[0]), val(node)
    if not isinstance(out, torch.Tensor) or out.dtype != x.dtype or out.shape != x.shape:
        return None
    return found


def _tensor(x) -> bool:
    """A node computing a tensor."""
    return isinstance(x, torch.fx.Node) and isinstance(val(x), torch.Tensor)


def permutation(node):
    """``(input node, perm)`` if ``node`` permutes its input: dim ``d`` of the result is
    dim ``perm[d]`` of the input."""
    if node.op not in ("call_function", "call_method") or not node.args:
        return None
    src = node.args[0]
    dims_of_src = shape(src) if isinstance(src, torch.fx.Node) else None
    if dims_of_src is None or node.kwargs:
        return None
    r = len(dims_of_src)
    dims = list(range(r))
    if is_call(node, (torch.transpose, torch.swapaxes, torch.swapdims), ("transpose", "swapaxes", "swapdims")):
        if len(node.args) != 3 or not all(isinstance(d, int) for d in node.args[1:]):
            return None
        d0, d1 = (d % r for d in node.args[1:]) if r else (0, 0)
        if r:
            dims[d0], dims[d1] = dims[d1], dims[d0]
        return src, tuple(dims)
    if is_call(node, (torch.permute,), ("permute",)):
        p = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], (list, tuple)) else node.args[1:]
        if len(p) != r or not all(isinstance(d, int) for d in p):
            return None
        return src, tuple(d % r for d in p)
    if is_call(node, (torch.t,), ("t",)) and len(node.args) == 1:
        return src, tuple(reversed(dims))
    if node.op == "call_function" and node.target is getattr and len(node.args) == 2:
        if node.args[1] == "mT" and r >= 2:
            dims[-2], dims[-1] = dims[-1], dims[-2]
            return src, tuple(dims)
        if node.args[1] == "T":
            return src, tuple(reversed(dims))
    return None


def equation_of(node):
    """``(equation text, operand nodes)`` if ``node`` is a contraction einc takes over."""
    if is_call(node, _EINSUM) and node.args and isinstance(node.args[0], str) and not node.kwargs:
        ops = node.args[1:]
        if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
            ops = ops[0]
        return node.args[0], list(ops)
    if node.kwargs and not is_call(node, _TENSORDOT):
        return None
    if is_call(node, _MATMUL, ("matmul", "__matmul__")) and len(node.args) == 2:
        a, b = node.args
        ra, rb = len(shape(a) or ()), len(shape(b) or ())
        if not ra or not rb:
            return None
        eq = {(True, True): "j,j->", (True, False): "j,...jk->...k",
              (False, True): "...ij,j->...i", (False, False): "...ij,...jk->...ik"}[ra == 1, rb == 1]
        return eq, [a, b]
    if is_call(node, _MM, ("mm",)) and len(node.args) == 2:
        return "ij,jk->ik", list(node.args)
    if is_call(node, _BMM, ("bmm",)) and len(node.args) == 2:
        return "bij,bjk->bik", list(node.args)
    if is_call(node, _LINEAR) and (len(node.args) == 2 or (len(node.args) == 3 and node.args[2] is None)):
        return "...i,oi->...o", list(node.args[:2])
    if is_call(node, _TENSORDOT):
        return _tensordot(node)
    return None


def _tensordot(node):
    args = list(node.args)
    if len(args) < 2 or set(node.kwargs) - {"dims"}:
        return None
    dims = node.kwargs.get("dims", args[2] if len(args) > 2 else 2)
    a, b = args[:2]
    ra, rb = len(shape(a) or ()), len(shape(b) or ())
    if isinstance(dims, int) and not isinstance(dims, bool):
        da, db = list(range(ra - dims, ra)), list(range(dims))
    elif isinstance(dims, (list, tuple)) and len(dims) == 2 and all(isinstance(d, (list, tuple, int)) for d in dims):
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    else:
        return None
    if len(da) != len(db) or not all(isinstance(d, int) for d in da + db):
        return None
    da, db = [d % ra for d in da], [d % rb for d in db]
    la = [letter(i) for i in range(ra)]
    lb = [letter(ra + i) for i in range(rb)]
    for x, y in zip(da, db):
        lb[y] = la[x]
    out = [la[i] for i in range(ra) if i not in da] + [lb[i] for i in range(rb) if i not in db]
    return "".join(la) + "," + "".join(lb) + "->" + "".join(out), [a, b]


def accepts(node, operands) -> bool:
    """Operands and result: tensors with known sizes, one floating or complex dtype, strided."""
    vals = [val(o) for o in operands] + [val(node)]
    if not all(isinstance(v, torch.Tensor) for v in vals) or any(shape(o) is None for o in operands):
        return False
    dtype = vals[0].dtype
    return (dtype.is_floating_point or dtype.is_complex) and all(
        v.dtype == dtype and v.layout == torch.strided and v.device == vals[0].device for v in vals)


_INPLACE_OPERATORS = (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul, operator.iand,
                      operator.ior, operator.ixor, operator.ilshift, operator.irshift)


def mutates(node) -> bool:
    """Whether ``node`` may write into a tensor (in-place op, ``out=``, an ``inplace`` flag
    that is not False, by keyword or by position: ``F.hardtanh(x, -1, 1, True)``, as
    ``nn.LeakyReLU(0.1, inplace=True)`` calls it)."""
    if node.op not in ("call_function", "call_method"):
        return node.op == "call_module"
    if node.kwargs.get("out") is not None or node.kwargs.get("inplace", False) is not False:
        return True
    if node.op == "call_function" and _inplace_flag(node):
        return True
    if node.op == "call_function" and node.target in _INPLACE_OPERATORS:
        return True
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target._schema.is_mutable
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    return isinstance(name, str) and name.endswith("_") and not name.endswith("__")


def _inplace_flag(node) -> bool:
    """Whether ``node``'s function has an ``inplace`` parameter that this call sets to
    anything but False (a call that does not bind counts as in place)."""
    try:
        signature = _signature(node.target)
    except TypeError:                   # a target that does not hash
        return False
    if signature is None or "inplace" not in signature.parameters:
        return False
    try:
        bound = signature.bind(*node.args, **node.kwargs)
    except TypeError:
        return True
    return bound.arguments.get("inplace", signature.parameters["inplace"].default) is not False


@functools.lru_cache(maxsize=1024)
def _signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):     # a builtin without one
        return None


__all__ = ["val", "shape", "is_call", "scalar_factor", "permutation", "equation_of", "accepts", "mutates"]
