"""Dispatch micro-benchmark: per-call overhead on 4x4 float32 matrix chains of 2, 3, 5 and 8 operands.

    python bench/dispatch.py [--rounds N] [--out DIR] [--quick]     (or: python bench/run.py --dispatch)
    python bench/dispatch.py --kernels-noop [--rounds N] [--out DIR] [--quick]
    python bench/dispatch.py --blas-steps [--rounds N] [--out DIR] [--quick] [--threads N]

The same as ``einc bench --dispatch`` (the code is in einc/tools/benchmark/dispatch.py).
``--kernels-noop`` measures einc's own Python per kernel step instead: CPU tensors
through the generated kernels (Triton's interpreter) with each kernel launch a no-op
(writes dispatch_kernels_noop.md/.csv).  ``--blas-steps`` times einc's cuBLAS step
function (``einc/runtime/torch_executor/blas.py``) on tiny operands against the bare mm/bmm and
torch.einsum (CUDA when present, else the CPU; writes dispatch_blas_steps.md/.csv).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):                      # run as a script: make `bench` and `einc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from einc.tools.benchmark import dispatch as _dispatch  # noqa: E402
from einc.tools.benchmark.dispatch import SIZES, N, chain, run  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results"

__all__ = ["N", "SIZES", "chain", "run", "main", "DEFAULT_OUT"]


def main(argv=None) -> int:
    return _dispatch.main(argv, default_out=DEFAULT_OUT)


if __name__ == "__main__":
    sys.exit(main())
