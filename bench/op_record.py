"""The aten ops einc's torch executor runs, recorded, and its answers against the float64 oracle.

Every case runs ``einc.einsum`` once under a ``TorchDispatchMode`` that records each aten
op with its operands' shapes, strides and dtypes, forward and (with ``requires_grad``)
backward, and weighs the result and the gradients against float64 (complex128) copies
contracted by torch (``opt_einsum.contract``'s pairs: ``torch.einsum`` takes 52 letters
at most): the largest difference over the oracle's largest magnitude.  Cases:
hand equations (sizes 0 and 1, a broadcast operand of stride 0, permuted operands, a
step of one operand, ``layout="any"``), random networks of 3-40 tensors of sizes 1-4
(``opt_einsum.testing.rand_equation``, seeds fixed) and six of bench/paths.py's networks
(up to 100 tensors, intermediates under 2e5 elements); each in float32, float64, complex64 and bfloat16,
with and without ``requires_grad``.  Writes the record as JSON (``--out``); with
``--against FILE`` (another checkout's record) prints, per family, how many runs run the
same ops and the largest differences of each.

    python bench/op_record.py --out /tmp/ops-after.json [--against /tmp/ops-before.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HAND = [("ab,bc->ac", (3, 4), (4, 5)), ("ab,bc->ca", (3, 4), (4, 5)), ("abc,cd->dba", (2, 3, 4), (4, 5)),
        ("ab,bc->ac", (0, 4), (4, 5)), ("ab,bc->ac", (3, 0), (0, 5)), ("ab,bc->ac", (1, 4), (4, 1)),
        ("abc,acd->abd", (2, 1, 3), (2, 3, 4)), ("abc,bcd->ad", (2, 3, 4), (3, 4, 1)),
        ("ij,jk,kl->il", (2, 3), (3, 4), (4, 2)), ("abcd,cdef->abef", (2, 2, 2, 2), (2, 2, 2, 2)),
        ("iij,jk->ik", (3, 3, 2), (2, 4)), ("ab,b->a", (3, 4), (4,)), ("abc,bd,ce->ade", (2, 3, 4), (3, 2), (4, 3)),
        ("ab,cb->ac", (5, 1), (3, 1)), ("abc,abd->cd", (2, 3, 4), (2, 3, 5))]
DTYPES = ("float32", "float64", "complex64", "bfloat16")


def _cases(quick):
    """``(family, equation, shapes, how)``: ``how`` one of "plain", "permuted", "broadcast", "any"."""
    from opt_einsum.testing import rand_equation
    for eq, *shapes in HAND:
        for how in ("plain", "permuted", "broadcast", "any"):
            yield "hand", eq, shapes, how
    for seed in range(6 if quick else 48):
        n = (3, 5, 8, 12, 20, 40)[seed % 6]
        eq, shapes = rand_equation(n, 3, n_out=seed % 3, d_min=1, d_max=4, seed=seed)
        yield "random", eq, list(shapes), ("plain", "permuted", "any")[seed % 3]
    if quick:
        return
    from bench.paths import instances
    for name, eq, shapes in instances(None):
        if name in ("random 3-regular (20)", "random 3-regular (60)", "random 3-regular (100)", "lattice 8x8 (64)",
                    "random connected (100)", "random hypernetwork (60)"):
            yield name, eq, list(shapes), "plain"


def _operands(eq, shapes, how, dtype, grad):
    import torch
    gen = torch.Generator().manual_seed(0)
    lhs, out = eq.split("->")
    ops = []
    for term, shape in zip(lhs.split(","), shapes):
        x = torch.rand(shape, generator=gen, dtype=torch.float64) + 0.5
        x = x * math.prod(max(d, 1) ** -0.5 for c, d in zip(term, shape) if c not in out)
        if dtype.is_complex:
            x = torch.complex(x, torch.rand(shape, generator=gen, dtype=torch.float64))
        x = x.to(dtype)
        if how == "permuted" and x.dim() >= 2:
            x = x.transpose(0, -1).contiguous().transpose(0, -1)
        elif how == "broadcast" and x.dim() >= 1 and shape[0] > 1:
            x = x[:1].expand(shape)
        ops.append(x.detach().requires_grad_(grad))
    return ops


def _run(eq, ops, how):
    """``(aten ops as text, the result, the gradients or None)``."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import einc
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            flat = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            seen.append(f"{func} " + " ".join(f"{tuple(a.shape)}:{a.stride()}:{a.dtype}" for a in flat))
            return func(*args, **(kwargs or {}))

    with Record():
        result = einc.einsum(eq, *ops, layout="any" if how == "any" else "contiguous")
        grads = None
        if ops[0].requires_grad:
            grads = torch.autograd.grad(result, ops, torch.ones_like(result), allow_unused=True)
    return seen, result, grads


def _error(found, eq, ops, grads):
    """The largest difference of the result (and gradients) from the float64 oracle, over its largest magnitude."""
    import opt_einsum
    import torch
    wide = [x.detach().to(torch.complex128 if x.dtype.is_complex else torch.float64).requires_grad_(grads is not None)
            for x in ops]
    want = opt_einsum.contract(eq, *wide, backend="torch")     # (torch.einsum takes 52 letters at most)
    pairs = [(found, want)]
    if grads is not None:
        theirs = torch.autograd.grad(want, wide, torch.ones_like(want), allow_unused=True)
        pairs += [(g, w) for g, w in zip(grads, theirs) if g is not None and w is not None]
    worst = 0.0
    for got, ref in pairs:
        if ref.numel():
            scale = max(ref.detach().abs().max().item(), 1e-30)
            worst = max(worst, (got.detach().to(ref.dtype) - ref.detach()).abs().max().item() / scale)
    return worst


def record(quick):
    import torch
    torch.set_num_threads(1)
    runs = {}
    for family, eq, shapes, how in _cases(quick):
        for dtype in DTYPES:
            for grad in (False, True):
                ops = _operands(eq, shapes, how, getattr(torch, dtype), grad)
                seen, result, grads = _run(eq, ops, how)
                key = f"{family}|{eq}|{shapes}|{how}|{dtype}|{grad}"
                runs[key] = {"ops": seen, "error": _error(result, eq, ops, grads)}
    return runs


def compare(mine, theirs):
    families = {}
    for key, run in mine.items():
        family, dtype = key.split("|")[0], key.split("|")[4]
        row = families.setdefault(family, {"runs": 0, "same": 0, "errors": {}})
        row["runs"] += 1
        other = theirs.get(key)
        row["same"] += other is not None and other["ops"] == run["ops"]
        worst = row["errors"].setdefault(dtype, [0.0, 0.0])
        worst[0] = max(worst[0], other["error"] if other else math.nan)
        worst[1] = max(worst[1], run["error"])
    print("| family | runs | the same aten ops | largest difference from float64, before -> after, by dtype |")
    print("|---|---:|---:|---|")
    for family, row in families.items():
        errs = "; ".join(f"{d} {a:.1e} -> {b:.1e}" for d, (a, b) in row["errors"].items())
        print(f"| {family} | {row['runs']} | {row['same']} | {errs} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--against", default=None, help="another checkout's record, to compare with")
    ap.add_argument("--quick", action="store_true", help="the hand equations and 6 random networks only")
    args = ap.parse_args(argv)
    runs = record(args.quick)
    Path(args.out).write_text(json.dumps(runs))
    if args.against:
        compare(runs, json.loads(Path(args.against).read_text()))


if __name__ == "__main__":
    main()
