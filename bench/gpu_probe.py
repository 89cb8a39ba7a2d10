"""Does einc's default entry run as fast as the candidate it chose?  A probe for one lease.

    python bench/gpu_probe.py pw_ao2mo_third gshard_combine [--rounds 3]

On the H100 at e1b85bd, gpu_eval timed ``pw_ao2mo_third`` at 849 µs with einc's default
(measure mode, which had chosen the generated kernel at 529 µs against torch's 674),
and at 485 µs with the same kernel forced (``EINC_SELECT=kernel``).  This times, per
workload, einc's default call, the same equation with ``select="kernel"`` and
``select="blas"``, and torch.einsum, each with ``triton.testing.do_bench`` (median, L2
flushed), interleaved over ``--rounds`` rounds, so an entry that is slower than its own
choice shows in every round, and a drift of the device shows in all columns alike.  It
prints the default entry's measured candidates (``explain``'s reasons) and the times.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import einc  # noqa: E402
from einc.tools.benchmark.runner import operands  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ids", nargs="+", help="workload ids of bench/suite.json (their gpu variants)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    from triton.testing import do_bench
    suite = {w["id"]: w for w in json.loads((HERE / "suite.json").read_text())["workloads"]}
    for wid in args.ids:
        w = suite[wid]
        eq, ops = w["equation"], operands(w, "cuda")
        fns = {"einc": lambda: einc.einsum(eq, *ops),
               "kernel": lambda: einc.einsum(eq, *ops, select="kernel"),
               "blas": lambda: einc.einsum(eq, *ops, select="blas"),
               "torch": lambda: torch.einsum(eq, *ops)}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        info = einc.explain(eq, *ops)
        print(f"{wid} {eq}: einc runs {info.backends}; {info.reasons}", flush=True)
        for r in range(args.rounds):
            us = {name: do_bench(fn, warmup=5, rep=20, return_mode="median") * 1e3 for name, fn in fns.items()}
            print(f"  round {r + 1}: " + "  ".join(f"{n} {t:.1f} µs" for n, t in us.items()), flush=True)
        ops = None  # not `del`: ruff reads a later del as undefining the lambdas' names
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
