"""What a torch.func transform costs einc per call, against torch.einsum and opt_einsum under
the same transform: vmap and grad of small contractions, where the fixed cost is the whole story.

    python bench/func_overhead.py [--rounds N] [--budget S] [--threads N]

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


def rows():
    """(name, {method: callable}), each method's result checked against torch.einsum's."""
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
    ]:
        if make is None:
            p, q = (t.clone().requires_grad_() for t in args)

            def backward(f, p=p, q=q):
                return lambda: torch.autograd.grad(f("ij,jk->ik", p, q).sum(), (p, q))
            fns = {m: backward(f) for m, f in METHODS.items()}
        else:
            # the default binds each method's transformed function once, outside the timed call
            fns = {m: (lambda made=make(f): made(*args)) for m, f in METHODS.items()}  # noqa: B008
        want = fns["torch"]()
        for fn in fns.values():
            got = fn()
            for u, v in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(u, v, rtol=1e-4, atol=1e-4)
        yield name, fns


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--budget", type=float, default=3.0, help="seconds per row")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, opt_einsum {opt_einsum.__version__}, {args.threads} thread(s); "
          "medians, ratios with their 95 % intervals")
    print("| call | einc µs | torch.einsum µs | opt_einsum µs | einc/torch | einc/opt_einsum |\n"
          "|---|---:|---:|---:|---:|---:|")
    for name, fns in rows():
        t, _ = interleaved(fns, args.rounds, args.budget)
        r, lo, hi = ratio_interval(t["einc"], t["torch"])
        ro, lo_o, hi_o = ratio_interval(t["einc"], t["opt_einsum"])
        print(f"| {name} | {t['einc'].median * 1e6:.0f} | {t['torch'].median * 1e6:.0f} | "
              f"{t['opt_einsum'].median * 1e6:.0f} | {r:.2f} [{lo:.2f}-{hi:.2f}] | {ro:.2f} [{lo_o:.2f}-{hi_o:.2f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
