"""Calls whose shapes change every call: what a plan-cache miss on a known equation costs.

Real code changes shapes all the time: a graph network's edge count differs every batch, a
key/value-cached decoder has one more position every step.  torch.einsum pays nothing for
that (it plans on every call anyway); einc keys its plans by shape, so every new shape is a
miss.  This times, per call and on 1 thread, ``torch.einsum`` (torch's own, even where
the attribute is patched), ``opt_einsum.contract(..., backend="torch")`` and
``einc.einsum``, each call with a shape that einc has not seen before, and the same calls
at one fixed shape for scale:

- ``zui,zvj->zuvij``  (an equivariant outer product, z edges: 900, 901, ...)
- ``zuvw,zu,zvj->zwj`` (a tensor product with per-edge weights)
- ``bhid,bhjd->bhij``  (one decoding step's attention scores, j = 128, 129, ... positions)
- ``decode``: the attention scores of a 4-layer decoder: each new position's shape is
  called 4 times in a row (one call per layer);
- ``train``: the tensor product forward + backward (z edges varying, weights and inputs
  require grad), as a training step of an equivariant layer runs it.

Before the clock starts, every method runs the equation at 17 shapes below the first timed
one: einc plans an equation's first 16 shapes, and runs torch's own einsum op for
shapes that come after them (einc/runtime/admission.py), so the timed calls measure a
program whose shapes keep changing, past its start.  Methods are timed in rounds,
round-robin in a shuffled order; every call of a round gets the next size, so no einc
call of the timed rounds finds its shape planned (the sizes mostly stay within one
power-of-two octave, as real edge counts and cache lengths do).  Reported: median
microseconds per call per method, and einc's ratio to torch.einsum as the median of the
paired per-round ratios with a 95% interval.  ``EINC_NEW_SHAPES=plan`` makes einc plan
every new shape, which shows what a plan costs.

    python bench/varying.py [--rounds 9 --calls 20 --threads 1]
    EINC_NEW_SHAPES=plan python bench/varying.py
"""

from __future__ import annotations

import argparse
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
from einc.runtime import admission  # noqa: E402
from einc.runtime.reference import torch_einsum  # noqa: E402
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


WORKLOADS = {
    "zui,zvj->zuvij": (900, _forward("zui,zvj->zuvij", lambda z: [torch.randn(z, 4, 3), torch.randn(z, 4, 3)])),
    "zuvw,zu,zvj->zwj": (900, _forward("zuvw,zu,zvj->zwj", _tp)),
    "bhid,bhjd->bhij": (128, _forward("bhid,bhjd->bhij",
                                      lambda j: [torch.randn(1, 8, 1, 64), torch.randn(1, 8, j, 64)])),
    "decode: 4 layers per position": (128, _forward("bhid,bhjd->bhij", lambda j: [torch.randn(1, 8, 1, 64),
                                                                              torch.randn(1, 8, j, 64)], repeat=4)),
    "train zuvw,zu,zvj->zwj": (900, _train("zuvw,zu,zvj->zwj", _tp)),
}

METHODS = {"torch": torch_einsum, "opt_einsum": lambda eq, *ops: opt_einsum.contract(eq, *ops, backend="torch"),
           "einc": einc.einsum}


def measure(build, start: int, rounds: int, calls: int, fixed: bool, seed: int = 0) -> dict:
    """Seconds per call per method, one sample per round: ``calls`` calls each with the
    next size from ``start`` (``fixed``: all at ``start``)."""
    rng = random.Random(seed)
    samples = {m: [] for m in METHODS}
    size = start
    for fn in METHODS.values():             # warm up: the equation has run with its first shapes (planned)
        for n in range(start - admission.STABLE_SHAPES, start + 1):
            build(fn, n)()
    for _ in range(rounds):
        order = list(METHODS)
        rng.shuffle(order)
        sizes = [start] * calls if fixed else list(range(size, size + calls))
        size += 0 if fixed else calls
        for name in order:
            steps = [build(METHODS[name], n) for n in sizes]     # operands made before the clock starts
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
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"EINC_NEW_SHAPES={einc.config.new_shapes()}; "
          f"torch {torch.__version__}, einc {einc.__version__}, {args.threads} thread(s), float32, "
          f"{args.rounds} rounds x {args.calls} calls; load average {Path('/proc/loadavg').read_text().split()[0]}"
          if Path("/proc/loadavg").exists() else "")
    print("| workload | shapes | torch µs | opt_einsum µs | einc µs | einc/torch [95% interval] |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for name, (start, build) in WORKLOADS.items():
        for fixed in (True, False):
            t = measure(build, start + (0 if fixed else 1), args.rounds, args.calls, fixed)
            med, lo, hi = ratio_interval(t["einc"], t["torch"])
            if not fixed:
                worst = max(worst, med)
            print(f"| {name} | {'one shape' if fixed else 'new every call'} | {t['torch'].median * 1e6:.0f} | "
                  f"{t['opt_einsum'].median * 1e6:.0f} | {t['einc'].median * 1e6:.0f} | "
                  f"{med:.2f} [{lo:.2f}–{hi:.2f}] |", flush=True)
    print(f"\nworst einc/torch with a new shape every call: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
