"""What a torch.func transform costs einc per call, against torch.einsum and opt_einsum under
the same transform: vmap and grad of small contractions, where the fixed cost is the whole story;
and what CPU autocast (bfloat16) costs the same way.

    python bench/func_overhead.py [--rounds N] [--budget S] [--threads N] [--only TEXT]

Under ``vmap`` of three or more operands not all batched ``einc.einsum`` runs as an
``autograd.Function`` (``einc/autograd.py``, one call planned over the batch index), whose vmap
machinery in torch is Python; under ``vmap`` of one or two operands, or of more all batched,
and under ``grad`` the torch executor's
plan runs as is (its ops batched or differentiated by torch), as under plain autograd;
torch.einsum's rules are C++.  Each row times einc, torch.einsum and opt_einsum's ``contract`` (torch
backend) under the same transform, interleaved (``einc.tools.benchmark.timing``), and prints the
medians and the paired ratios with their 95 % intervals.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import opt_einsum  # noqa: E402
import torch  # noqa: E402
from torch.func import grad, vmap  # noqa: E402

import einc  # noqa: E402
from einc.tools.benchmark.timing import interleaved, ratio_interval  # noqa: E402


def _opt_einsum(eq, *ops):
    """opt_einsum's contract on torch tensors (tensordot and permutes: torch ops, which
    torch.func transforms as they are)."""
    return opt_einsum.contract(eq, *ops, backend="torch")


METHODS = {"einc": einc.einsum, "torch": torch.einsum, "opt_einsum": _opt_einsum}


def _autocast(f, eq):
    def call(*ops):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return f(eq, *ops)
    return call


def rows(only=""):
    """(name, {method: callable}) of the rows whose name holds ``only``, each method's
    result checked against torch.einsum's (its dtype too)."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)
    x, a4, b4, c4, v4 = randn(8, 30, 30), randn(8, 4, 4), randn(8, 4, 4), randn(8, 4, 4), randn(4)
    a, b, a16 = randn(128, 128), randn(128, 128), randn(16, 128, 128)
    for name, make, args in [
        ("vmap ii->i, 8x30x30", lambda f: vmap(lambda m: f("ii->i", m)), (x,)),
        ("vmap ij,jk->ik, 8x4x4", lambda f: vmap(lambda p, q: f("ij,jk->ik", p, q)), (a4, b4)),
        ("vmap ij,jk->ik, 16x128x128 and 128x128 (not batched)",
         lambda f: vmap(lambda p, q: f("ij,jk->ik", p, q), in_dims=(0, None)), (a16, b)),
        ("vmap ij,jk,k->i, 8x4x4 (three operands)",
         lambda f: vmap(lambda p, q, r: f("ij,jk,k->i", p, q, r), in_dims=(0, 0, None)), (a4, b4, v4)),
        ("vmap ij,jk,kl->il, 8x4x4 (three operands, all batched)",
         lambda f: vmap(lambda p, q, r: f("ij,jk,kl->il", p, q, r)), (a4, b4, c4)),
        ("grad ij,jk->ik, 4x4", lambda f: grad(lambda p, q: f("ij,jk->ik", p, q).sum()), (a4[0], b4[0])),
        ("grad ij,jk->ik, 128x128", lambda f: grad(lambda p, q: f("ij,jk->ik", p, q).sum()), (a, b)),
        ("plain autograd ij,jk->ik, 4x4 (no transform)", None, (a4[0], b4[0])),
        ("autocast bfloat16 ij,jk->ik, 4x4", lambda f: _autocast(f, "ij,jk->ik"), (a4[0], b4[0])),
        ("autocast bfloat16 ij,jk,kl->il, 4x4 (three operands)", lambda f: _autocast(f, "ij,jk,kl->il"),
         (a4[0], b4[0], c4[0])),
        ("autocast bfloat16 bij,bjk->bik, 16x128x128", lambda f: _autocast(f, "bij,bjk->bik"), (a16, a16)),
    ]:
        if only not in name:
            continue
        if make is None:
            p, q = (t.clone().requires_grad_() for t in args)

            def backward(f, p=p, q=q):
                return lambda: torch.autograd.grad(f("ij,jk->ik", p, q).sum(), (p, q))
            fns = {m: backward(f) for m, f in METHODS.items()}
        else:
            # the default binds each method's transformed function once, outside the timed call
            fns = {m: (lambda made=make(f): made(*args)) for m, f in METHODS.items()}  # noqa: B008
        want = fns["torch"]()
        for method, fn in list(fns.items()):
            try:
                got = fn()
            except RuntimeError:    # (opt_einsum's tensordot under autocast: a bfloat16 intermediate, a float32)
                del fns[method]
                continue
            for u, v in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert u.dtype == v.dtype
                close = 2e-2 if u.dtype == torch.bfloat16 else 1e-4      # (products rounded their own ways)
                torch.testing.assert_close(u.float(), v.float(), rtol=close, atol=close * 16)
        yield name, fns


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--budget", type=float, default=3.0, help="seconds per row")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", default="", help="rows whose name holds this text")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, opt_einsum {opt_einsum.__version__}, {args.threads} thread(s); "
          "medians, ratios with their 95 % intervals")
    print("| call | einc µs | torch.einsum µs | opt_einsum µs | einc/torch | einc/opt_einsum |\n"
          "|---|---:|---:|---:|---:|---:|")
    for name, fns in rows(args.only):
        t, _ = interleaved(fns, args.rounds, args.budget)
        r, lo, hi = ratio_interval(t["einc"], t["torch"])
        peer = ("| raises |", "| - |")
        if "opt_einsum" in t:
            ro, lo_o, hi_o = ratio_interval(t["einc"], t["opt_einsum"])
            peer = (f"| {t['opt_einsum'].median * 1e6:.0f} |", f"| {ro:.2f} [{lo_o:.2f}-{hi_o:.2f}] |")
        print(f"| {name} | {t['einc'].median * 1e6:.0f} | {t['torch'].median * 1e6:.0f} {peer[0]} "
              f"{r:.2f} [{lo:.2f}-{hi:.2f}] {peer[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
