"""What a named equation costs: ``einc.einsum("b n (h d), h d e -> b n (h e)", x, w, h=h)``
against the same contraction written with views (einc and torch.einsum).

    python bench/named.py [--rounds N] [--quick]

Three calls on the same operands, timed in alternating rounds (each round times every call
once, in rotating order), the median per-call time of each reported with its ratio to
torch.einsum's.  CPU, float32, one thread; two sizes: a small one where the per-call
overhead shows, and a mid-sized projection.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import einc  # noqa: E402

EQ = "b n (h d), h d e -> b n (h e)"
SIZES = {"small": (2, 3, 4, 5, 6), "projection": (8, 128, 8, 64, 64)}


def calls(b, n, h, d, e):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(b, n, h * d, generator=g), torch.randn(h, d, e, generator=g)
    return {
        "einc, named": lambda: einc.einsum(EQ, x, w, h=h),
        "einc, views": lambda: einc.einsum("bnhd,hde->bnhe", x.view(b, n, h, d), w).reshape(b, n, h * e),
        "torch.einsum, views": lambda: torch.einsum("bnhd,hde->bnhe", x.view(b, n, h, d), w).reshape(b, n, h * e),
    }


def measure(fns: dict, rounds: int, number: int) -> dict:
    names = list(fns)
    ref = fns["torch.einsum, views"]()
    for name in names:      # warm up (plans, caches) and check agreement
        torch.testing.assert_close(fns[name](), ref, rtol=1e-4, atol=1e-4)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - t0) / number)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--quick", action="store_true", help="3 rounds, few calls (a smoke test)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rounds = 3 if args.quick else args.rounds
    print(f"torch {torch.__version__}, float32, CPU, 1 thread, {rounds} alternating rounds, medians")
    print("| size (b, n, h, d, e) | call | per call | vs torch.einsum |")
    print("|---|---|---|---|")
    for label, size in SIZES.items():
        number = (20 if args.quick else 2000) if label == "small" else (2 if args.quick else 20)
        med = measure(calls(*size), rounds, number)
        base = med["torch.einsum, views"]
        for name, t in med.items():
            print(f"| {label} {size} | {name} | {t * 1e6:.1f} us | {t / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
