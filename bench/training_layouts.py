"""A training step in the layouts ``training_layout.for_training`` names, against the same
step kept in the forward's layouts, on the CPU.

    python bench/training_layouts.py --equation EQ SHAPES [--equation ...] [--dtype float32]
                                     [--any] [--threads 1] [--rounds 7]

Per call (``EQ`` on random operands of the shapes given, ``AxBxC,DxE``; ``--any``: the
result in any layout, einc's ``layout="any"``, where the last step prices no copy of its
result), einc's plan is built twice: once as einc builds it, once with
``training_layout.for_training`` made to return the forward's layout, so that a step trains
in the layout it runs in.  The training layouts each picks are logged (bench/layouts.py's
:func:`~bench.layouts.built`), both gradients checked against torch.einsum's on float64
copies, and a training step (the result and both operands' gradients for a fixed upstream
gradient) timed in the thread's CPU time in interleaved rounds (bench/pairwise.py's
``cpu_interleaved``), beside the same step through torch.einsum: medians, the median of the
paired ratios named/forward with its 95 % interval, and the faster one's against
torch.einsum.  Run in a checkout of the einc to weigh: at a commit before a change of
``for_training``, "named" is what that commit trains in.  Standard library, torch and einc.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

import einc
from bench.layouts import built
from bench.pairwise import cpu_interleaved
from einc.planner.options import Options
from einc.runtime.torch_executor import training_layout
from einc.tools.benchmark.timing import ratio_interval


def _operands(shapes, dtype):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(tuple(map(int, s.split("x"))), generator=gen, dtype=torch.float64).to(dtype)
            for s in shapes.split(",")]


def _step(entry, ops, upstream):
    """A training step through ``entry``: its result and both operands' gradients."""
    out = entry.run(ops)
    return out, torch.autograd.grad(out, ops, upstream)


def _kept(eq, ops, options):
    """``built``'s pair with ``for_training`` returning the forward's layout."""
    real = training_layout.for_training
    training_layout.for_training = lambda lay, *args, **kw: lay
    try:
        return built(eq, ops, [], options)
    finally:
        training_layout.for_training = real


def weigh(eq, shapes, dtype, options, rounds):
    """``(the logged training layouts of each, the ratio named/forward, medians, check)``."""
    ops = [o.requires_grad_() for o in _operands(shapes, dtype)]
    named, named_layouts = built(eq, ops, [], options)
    forward, forward_layouts = _kept(eq, ops, options)
    wide = [o.detach().double().requires_grad_() for o in ops]
    ref = torch.einsum(eq, *wide)
    upstream = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want = [ref.detach(), *torch.autograd.grad(ref, wide, upstream)]
    tol = 1e-9 if dtype == torch.float64 else 1e-3
    up = upstream.to(dtype)
    ok = True
    for entry in (named, forward):
        out, grads = _step(entry, ops, up)
        for got, exp in zip([out, *grads], want):
            scale = float(exp.abs().max()) or 1.0
            ok = ok and torch.allclose(got.detach().double(), exp, rtol=tol, atol=tol * scale)
    fns = {"named": lambda: _step(named, ops, up), "forward": lambda: _step(forward, ops, up),
           "torch": lambda: _torch_step(eq, ops, up)}
    for fn in fns.values():
        fn()
    t = cpu_interleaved(fns, rounds)
    training = [line for line in named_layouts if "(training)" in line]
    return (training, ratio_interval(t["named"], t["forward"]), t["named"].median, t["forward"].median, ok,
            t["torch"].median, ratio_interval(min(t["named"], t["forward"], key=_median), t["torch"]))


def _median(timing):
    return timing.median


def _torch_step(eq, ops, upstream):
    """The same training step through torch.einsum (the peer)."""
    out = torch.einsum(eq, *ops)
    return out, torch.autograd.grad(out, ops, upstream)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="A training step in the layouts for_training names against the "
                                            "forward's own, on the CPU.")
    p.add_argument("--equation", nargs=2, action="append", metavar=("EQ", "SHAPES"), required=True)
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--any", action="store_true", help="the result in any layout (einc's layout='any')")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    options = Options.of(layout="any" if args.any else "contiguous")
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s), {args.dtype}, layout {options.result_layout()}, einc at "
          f"{os.path.dirname(einc.__file__)}\n")
    print("| call | training layouts named | named ms | forward's ms | named/forward | torch.einsum ms | "
          "faster of the two/torch | check |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    bad = False
    for eq, shapes in args.equation:
        training, r, a, b, ok, peer, rt = weigh(eq, shapes, dtype, options, args.rounds)
        bad = bad or not ok
        shown = "; ".join(f"`{line}`" for line in training) or "the forward's"
        print(f"| `{eq}` {shapes} | {shown} | {a * 1e3:.4g} | {b * 1e3:.4g} | {r[0]:.2f} [{r[1]:.2f}-{r[2]:.2f}] | "
              f"{peer * 1e3:.4g} | {rt[0]:.2f} [{rt[1]:.2f}-{rt[2]:.2f}] | {'ok' if ok else 'MISMATCH'} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
