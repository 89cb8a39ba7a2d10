"""Suite benchmark: torch.einsum vs opt_einsum.contract vs einc.einsum on the CPU variants.

    python bench/run.py [--filter TEXT] [--rounds N] [--budget S] [--out DIR] [--quick]
                        [--threads N] [--wait S] [--dispatch]
    python bench/run.py --train [--no-models] [same options]

The same as ``einc bench`` (the code is in einc/tools/benchmark/); see bench/README.md for
the method.  ``--train`` times forward + backward: the suite (suite_cpu_train.*) and
the models of bench/models.py (models_train.*).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `bench` and `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from einc.errors import EincError  # noqa: E402
from einc.tools.benchmark.runner import (  # noqa: E402
    METHODS,
    RTOL,
    Options,
    bench_suite,
    bench_workload,
    cell,
    check,
    methods,
    operands,
    report_suite,
    short,
)

HERE = Path(__file__).resolve().parent
SUITE = HERE / "suite.json"
DEFAULT_OUT = HERE / "results"

__all__ = ["METHODS", "RTOL", "Options", "bench_workload", "cell", "check", "methods", "operands",
           "report_suite", "short", "SUITE", "DEFAULT_OUT", "main"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--filter", default="", help="only workloads whose id or category contains TEXT")
    p.add_argument("--rounds", type=int, default=None, help="rounds per workload (default 31, quick 7)")
    p.add_argument("--budget", type=float, default=None, help="seconds per workload (default 4, quick 1)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default bench/results/)")
    p.add_argument("--quick", action="store_true", help="fewer rounds and a smaller budget (smoke test)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads(N) (default: torch's, or 1 on a busy machine)")
    p.add_argument("--wait", type=float, default=60.0, help="on a busy machine, seconds to wait for it to quieten")
    p.add_argument("--dispatch", action="store_true", help="run the dispatch micro-benchmark instead")
    p.add_argument("--train", action="store_true",
                   help="time forward + backward: the suite (suite_cpu_train.*) and bench/models.py's models "
                        "(models_train.*)")
    p.add_argument("--no-models", action="store_true", help="with --train: skip the models' training table")
    args = p.parse_args(argv)
    if args.no_models and not args.train:
        p.error("--no-models goes with --train")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.dispatch:
        from einc.tools.benchmark import dispatch
        return dispatch.run(args.out, args.rounds, args.quick)
    try:
        return bench_suite(SUITE, device="cpu", text=args.filter, out=args.out, rounds=args.rounds,
                           budget=args.budget, quick=args.quick, train=args.train, models=not args.no_models,
                           wait=args.wait, threads_set=args.threads is not None)
    except EincError as e:
        print(f"bench/run.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
