"""What a factor that may not move costs the ``einc`` torch.compile backend: ``x @ ((A @ B) * s)``
with ``A @ B`` of low rank, compiled, against the same product with the factor written on the
result, ``(x @ (A @ B)) * s``, which the backend fuses and runs as ``(x @ A) @ B``.

    python bench/guarded_chain.py [--size N] [--rank R] [--rounds N] [--budget S] [--threads N]

In float16 no factor may move (docs/autograd-and-compile.md, "Factors may move"): the factor
on the producer's result keeps ``A @ B`` apart, so the chain runs in the order written, an
``N x N x N`` product, where the reordered chain makes two ``N x N x R``.  float32 is the
control: there the factor moves and both forms run reordered.  Each row times the guarded
form compiled, the result-factor form compiled and the guarded form eager, interleaved
(``einc.tools.benchmark.timing``), and prints the medians and the paired ratios with their
95 % intervals; each compiled answer is checked against float64 first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import einc.dynamo  # noqa: E402,F401  (registers the "einc" backend)
from einc.tools.benchmark.timing import interleaved, ratio_interval  # noqa: E402

SCALE = 1e-2


def guarded(x, A, B):
    return x @ ((A @ B) * SCALE)


def on_result(x, A, B):
    return (x @ (A @ B)) * SCALE


def calls(dtype, n, r):
    """{name: callable} for one dtype, each compiled answer checked against float64."""
    g = torch.Generator().manual_seed(0)
    ops = [torch.randn(*shape, generator=g) for shape in ((n, n), (n, r), (r, n))]
    want = guarded(*(t.double() for t in ops))
    ops = [t.to(dtype) for t in ops]
    fns = {"guarded, compiled": torch.compile(guarded, backend="einc", fullgraph=True),
           "factor on the result, compiled": torch.compile(on_result, backend="einc", fullgraph=True),
           "guarded, eager": guarded}
    for name, f in fns.items():
        got = f(*ops)
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item(),
                                   msg=lambda m, name=name: f"{name}: {m}")
    return {name: (lambda f=f: f(*ops)) for name, f in fns.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=256, help="N: x is N x N, A N x R, B R x N")
    p.add_argument("--rank", type=int, default=8, help="R, the rank of A @ B")
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--budget", type=float, default=5.0, help="seconds per dtype")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), N={args.size}, R={args.rank}, "
          f"factor {SCALE}; medians, ratios with their 95 % intervals")
    print("| dtype | guarded, compiled ms | factor on the result, compiled ms | guarded, eager ms "
          "| guarded / on the result | guarded / eager |\n|---|---:|---:|---:|---:|---:|")
    for dtype in (torch.float16, torch.float32):
        t, _ = interleaved(calls(dtype, args.size, args.rank), args.rounds, args.budget)
        g, res, eager = (t[k] for k in ("guarded, compiled", "factor on the result, compiled", "guarded, eager"))
        r1, r2 = ratio_interval(g, res), ratio_interval(g, eager)
        print(f"| {str(dtype).removeprefix('torch.')} | {g.median * 1e3:.2f} | {res.median * 1e3:.2f} "
              f"| {eager.median * 1e3:.2f} | {r1[0]:.1f} [{r1[1]:.1f}-{r1[2]:.1f}] "
              f"| {r2[0]:.2f} [{r2[1]:.2f}-{r2[2]:.2f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
