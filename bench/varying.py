"""Calls whose shapes change every call, and tiny calls: what a new shape costs, and what a
cached call costs, against torch.einsum.

Real code changes shapes all the time: a graph network's edge count differs every batch, a
key/value-cached decoder has one more position every step.  torch.einsum pays nothing for
that (it plans on every call anyway); einc keys its plans by shape.  This times, per call
and on 1 thread, ``torch.einsum`` (torch's own, even where the attribute is patched),
``opt_einsum.contract(..., backend="torch")``, ``einc.einsum`` as it runs by default
(``EINC_NEW_SHAPES=class``: a small call of one or two operands runs its size class's
plan), ``einc.einsum`` with ``EINC_NEW_SHAPES=plan`` (every new shape planned, the
default before size classes) and with ``EINC_NEW_SHAPES=torch`` (a call of at most 2**20
multiply-adds runs torch's op), each call with a shape that einc has not seen before, and
the same calls at one fixed shape:

- ``zui,zvj->zuvij``  (an equivariant outer product, z edges: 900, 901, ...)
- ``zuvw,zu,zvj->zwj`` (a tensor product with per-edge weights)
- ``bhid,bhjd->bhij``  (one decoding step's attention scores, j = 128, 129, ... positions)
- ``bhid,bhjd->bhij tiny``: 1x2xix16 by 1x2xjx16, i and j in 8..104 (a few hundred
  elements per operand), every call a new (i, j)
- ``decode``: the attention scores of a 4-layer decoder: each new position's shape is
  called 4 times in a row (one call per layer);
- ``train``: the tensor product forward + backward (z edges varying, weights and inputs
  require grad), as a training step of an equivariant layer runs it;
- ``ij,jk->ik 4x4`` and ``bhid,bhjd->bhij 1x2x32x16``: tiny two-operand calls at one shape
  (the cached call's fixed cost).

Methods are timed in rounds, round-robin in a shuffled order (each einc method with its
``EINC_NEW_SHAPES`` set around its batch, and the plan cache's entries of shapes emptied
before it, and the paths and the copy-cost model's layouts searched for shapes, so that
nothing another einc method made of the same shapes answers it; the
size classes stay, as in a process that has run a while: before the rounds, the default
einc runs every shape once, so that each class the rounds meet is planned); every call of
a round gets the next size, so no einc call of the timed rounds finds its shape planned.
Reported: median microseconds per call per method, and each einc's ratio to
torch.einsum as the median of the paired per-round ratios with a 95% interval.

    python bench/varying.py [--rounds 9 --calls 20 --threads 1] [--full] [--only tiny]

``--full``: each method's batch begins after a stream of other shapes (as many ``i,i->``
shapes as einc's plan cache keeps), run through the method itself (einc's default for each
einc method), as in a process whose shapes have changed for a while: each einc method
finds the plan cache as that stream leaves it, and every method finds the CPU's caches
as its own calls of other shapes leave them; the default begins with the plan cache empty
of shapes and no stream.  Each batch's operands are made after that preparation, just before its clock
starts, so that they are as fresh in the CPU's caches for every method (the stream would
otherwise have evicted those of einc's batches alone).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import opt_einsum  # noqa: E402
import torch  # noqa: E402

import einc  # noqa: E402
from einc.planner.plan import path_cache_clear  # noqa: E402
from einc.runtime import engine  # noqa: E402
from einc.runtime.reference import torch_einsum  # noqa: E402
from einc.runtime.torch_executor import ttgt  # noqa: E402
from einc.tools.benchmark.timing import Timing, ratio_interval  # noqa: E402


def _forward(eq, make, repeat=1):
    def build(fn, n):
        ops = make(n)

        def call():
            for _ in range(repeat):
                fn(eq, *ops)
        return call
    return build


def _train(eq, make):
    def build(fn, n):
        ops = [o.requires_grad_() for o in make(n)]

        def step():
            fn(eq, *ops).sum().backward()
            for o in ops:
                o.grad = None
        return step
    return build


def _tp(z):
    return [torch.randn(z, 4, 4, 4), torch.randn(z, 4), torch.randn(z, 4, 3)]


def _tiny(n):
    """The n-th (i, j) pair of 8..104 (97 x 97 pairs: a new shape every call)."""
    i, j = 8 + n % 97, 8 + (n // 97) % 97
    return [torch.randn(1, 2, i, 16), torch.randn(1, 2, j, 16)]


BOTH, FIXED = ("one shape", "new every call"), ("one shape",)
WORKLOADS = {   # name: (first size, build, rows)
    "zui,zvj->zuvij": (900, _forward("zui,zvj->zuvij", lambda z: [torch.randn(z, 4, 3), torch.randn(z, 4, 3)]),
                       BOTH),
    "zuvw,zu,zvj->zwj": (900, _forward("zuvw,zu,zvj->zwj", _tp), BOTH),
    "bhid,bhjd->bhij": (128, _forward("bhid,bhjd->bhij",
                                      lambda j: [torch.randn(1, 8, 1, 64), torch.randn(1, 8, j, 64)]), BOTH),
    "bhid,bhjd->bhij tiny": (3000, _forward("bhid,bhjd->bhij", _tiny), BOTH),
    "decode: 4 layers per position": (128, _forward("bhid,bhjd->bhij", lambda j: [torch.randn(1, 8, 1, 64),
                                                                              torch.randn(1, 8, j, 64)], repeat=4),
                                      BOTH),
    "train zuvw,zu,zvj->zwj": (900, _train("zuvw,zu,zvj->zwj", _tp), BOTH),
    "ij,jk->ik 4x4": (4, _forward("ij,jk->ik", lambda n: [torch.randn(n, n), torch.randn(n, n)]), FIXED),
    "bhid,bhjd->bhij 1x2x32x16": (32, _forward("bhid,bhjd->bhij", lambda n: [torch.randn(1, 2, n, 16),
                                                                          torch.randn(1, 2, n, 16)]), FIXED),
}

METHODS = {   # name: (function, EINC_NEW_SHAPES around its batch)
    "torch": (torch_einsum, None),
    "opt_einsum": (lambda eq, *ops: opt_einsum.contract(eq, *ops, backend="torch"), None),
    "einc": (einc.einsum, "class"),
    "einc plan-mode": (einc.einsum, "plan"),
    "einc torch-mode": (einc.einsum, "torch"),
}
EINCS = [m for m, (_, setting) in METHODS.items() if setting is not None]


def _setting(value):
    if value is not None:
        os.environ["EINC_NEW_SHAPES"] = value


def _fill(fn, setting):
    """A stream of other shapes through ``fn``, as a process runs that has met as many other
    shapes as the plan cache keeps since: a new ``i,i->`` shape a call, the cache's bound of
    them; an einc method's under einc's default (each a size class's: the plan cache as
    such a process leaves it)."""
    if setting is not None:
        _setting("class")
    for n in range(2, einc.cache_info().plans.maxsize + 2):
        v = torch.ones(n)
        fn("i,i->", v, v)


def measure(build, start: int, rounds: int, calls: int, fixed: bool, seed: int = 0, full: bool = False) -> dict:
    """Seconds per call per method, one sample per round: ``calls`` calls each with the
    next size from ``start`` (``fixed``: all at ``start``); ``full``: each method's
    batch begins after a stream of other shapes through it (:func:`_fill`)."""
    rng = random.Random(seed)
    samples = {m: [] for m in METHODS}
    size = start
    einc.cache_clear()      # no plan of another workload's shapes (decode's are bhid's)
    for fn, setting in METHODS.values():     # warm up: the equation has run at up to 17 shapes before
        _setting(setting)
        for n in range(max(1, start - 16), start + 1):
            build(fn, n)()
    _setting("class")       # every size class of the rounds planned, as in a process that ran a while
    for n in ([start] if fixed else range(start, start + rounds * calls)):
        build(einc.einsum, n)()
    for _ in range(rounds):
        order = list(METHODS)
        rng.shuffle(order)
        sizes = [start] * calls if fixed else list(range(size, size + calls))
        size += 0 if fixed else calls
        for name in order:
            fn, setting = METHODS[name]
            _setting(setting)
            if setting is not None:     # no entry or path another einc made of these shapes answers
                engine._plans.clear()   # (the shapes' entries only: size classes stay)
                path_cache_clear()
                ttgt.cache_clear()      # (the copy-cost model's layouts, per sizes)
            if full:
                _fill(fn, setting)
                _setting(setting)
            if setting is not None:     # the parse, and a fixed shape's plan, ready again
                build(fn, sizes[0] if fixed else start - 1)()
            steps = [build(fn, n) for n in sizes]     # operands made after it, before the clock starts
            t0 = time.perf_counter()
            for step in steps:
                step()
            samples[name].append((time.perf_counter() - t0) / calls)
    return {m: Timing(statistics.median(s), calls, s) for m, s in samples.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=20, help="calls per method per round (each a new shape)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--full", action="store_true", help="each batch begins after a stream of as many other "
                    "shapes as the plan cache keeps, through its method (a process that has run a while)")
    ap.add_argument("--only", default=None, help="workloads whose name contains this text")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"torch {torch.__version__}, einc {einc.__version__}, {args.threads} thread(s), float32, "
          f"{args.rounds} rounds x {args.calls} calls; load average {load}{', plan cache full' if args.full else ''}")
    print("| workload | shapes | " + " | ".join(f"{m} µs" for m in METHODS) + " | "
          + " | ".join(f"{m}/torch [95%]" for m in EINCS) + " |")
    print("|---|---|" + "---|" * (len(METHODS) + len(EINCS)))
    for name, (start, build, rows) in WORKLOADS.items():
        if args.only is not None and args.only not in name:
            continue
        for row in rows:
            fixed = row == "one shape"
            t = measure(build, start + (0 if fixed else 1), args.rounds, args.calls, fixed, full=args.full)
            cells = [f"{t[m].median * 1e6:.1f}" for m in METHODS]
            ratios = []
            for m in EINCS:
                med, lo, hi = ratio_interval(t[m], t["torch"])
                ratios.append(f"{med:.2f} [{lo:.2f}–{hi:.2f}]")
            print(f"| {name} | {row} | {' | '.join(cells)} | {' | '.join(ratios)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
