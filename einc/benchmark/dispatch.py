"""Dispatch micro-benchmark: per-call overhead on 4x4 float32 matrix chains of 2, 3, 5 and 8 operands.

The operands are so small that the arithmetic is negligible: the time is the cost of
getting from the Python call to the kernels (parsing, path finding or plan lookup,
dispatch).  Same interleaved, median-of-batches method as the suite
(:mod:`einc.benchmark.timing`).  Used by ``einc bench --dispatch`` and
``python bench/dispatch.py``.
"""

from __future__ import annotations

import argparse
import string
import sys

import torch

from . import report
from .runner import METHODS, check, methods
from .timing import interleaved

SIZES = (2, 3, 5, 8)
N = 4


def chain(k: int) -> str:
    """'ab,bc->ac' for k=2, 'ab,bc,cd->ad' for k=3, ..."""
    s = string.ascii_lowercase
    return ",".join(s[i] + s[i + 1] for i in range(k)) + "->" + s[0] + s[k]


def run(out, rounds: int | None = None, quick: bool = False) -> int:
    """Time the chains, write OUT/dispatch.md and .csv; 1 if einc's result was wrong, else 0."""
    rounds = rounds or (9 if quick else 31)
    budget = 1.0 if quick else 3.0
    load, table, data, bad = report.Load(), [], [], False
    for k in SIZES:
        eq = chain(k)
        torch.manual_seed(0)
        ops = [torch.randn(N, N) for _ in range(k)]
        fns = methods(eq, ops)
        ref = fns["torch"]()
        for name in ("opt_einsum", "einc"):        # warm-up (einc plans here) + correctness
            status = check(fns[name](), ref)
            if status != "ok":
                bad = True
                print(f"!!! {eq}: {name}: {status}", file=sys.stderr)
        timings, n_rounds = interleaved(fns, rounds, budget, min_rounds=min(rounds, 5))
        m = [timings[name].median for name in METHODS]
        r = report.ratio(m[2], m[0])
        table.append([k, f"`{eq}`", *map(report.us, m), report.fmt_ratio(r)])
        data.append([k, eq, *[round(v * 1e6, 3) for v in m], round(r, 4), n_rounds,
                     *[timings[name].calls for name in METHODS]])

    md = report.header("einc dispatch micro-benchmark", "float32", load, [
        f"operands: {N}x{N}; timing: median over up to {rounds} rounds (budget {budget:.0f} s/equation) "
        "of per-call time, batches ≥ 2 ms, methods interleaved in shuffled order; warm-up call untimed"])
    md += report.markdown_table(["operands", "equation", "torch µs", "opt_einsum µs", "einc µs", "einc/torch"],
                                table)
    report.write(out, "dispatch", md,
                 ["operands", "equation", "torch_us", "opt_einsum_us", "einc_us", "einc_over_torch", "rounds",
                  "torch_calls_per_batch", "opt_einsum_calls_per_batch", "einc_calls_per_batch"], data)
    return 1 if bad else 0


def main(argv=None, default_out="bench/results") -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="rounds per equation (default 31, quick 9)")
    p.add_argument("--out", default=str(default_out), help=f"output directory (default {default_out})")
    p.add_argument("--quick", action="store_true", help="fewer rounds (smoke test)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    return run(args.out, args.rounds, args.quick)
