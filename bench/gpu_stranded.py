"""The K up to which a stranded column index pays for riding in the tile's T axis, timed.

    python bench/gpu_stranded.py --out DIR [--deadline S]     # a GPU
    python bench/gpu_stranded.py --dry-run --out DIR          # a CPU: the script starts and writes

Where a column index is some tensor's only way to a unit-stride tile axis, the lowering
moves it into the tile's T axis (a 3-D dot) only where K is at most ``lower.STRANDED_K``;
above it the tile stays a gather (the ``plain`` kernel).  The GPUs timed T winning at K
6-112 and losing at 7744, nothing between (bench/measured/stranded-moves-2026-12-04.md).
This times both kernels of the suite's tensor-times-matrix step ``dbea,ec->abcd`` (B's d,
its unit stride, inside N; K = e) over :data:`KS`, in float32 and bfloat16: each kernel
autotuned as einc launches it, then ``triton.testing.do_bench`` (median, L2 flushed),
beside torch.einsum.  CSV ``DIR/gpu_stranded.csv``, rewritten after every kernel: dtype,
K, the two kernels' µs and names, t / plain, torch.einsum's µs, each result's error
against float64 (relative, in norm).  ``--deadline`` seconds in all, checked between
kernels, smallest K first.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

EQUATION = "dbea,ec->abcd"
SIZES = {"d": 48, "b": 32, "a": 48, "c": 88}        # e is K
KS = [32, 64, 128, 256, 512, 1024, 2048]
DRY = ({"d": 2, "b": 3, "a": 2, "c": 3}, [4, 8])   # the interpreter: small, two Ks
FIELDS = ["dtype", "K", "t_us", "plain_us", "t_over_plain", "torch_us", "t_err", "plain_err", "t_kernel",
          "plain_kernel", "error"]


def kernels(plan, dtype, shapes):
    """``(t, plain)``: the step's kernel with the column index in T (the bound lifted) and
    without the move."""
    from einc.codegen import lower
    from einc.runtime import triton_executor
    bound = lower.STRANDED_K
    lower.STRANDED_K = 1 << 62
    try:
        (t,) = triton_executor.kernels(plan, dtype, shapes)
    finally:
        lower.STRANDED_K = bound
    (plain,) = triton_executor.kernels(plan, dtype, shapes, unit_tiles=False)
    return t, plain


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for gpu_stranded.csv")
    p.add_argument("--deadline", type=float, default=100.0, help="seconds: no new kernel after this")
    p.add_argument("--dry-run", action="store_true", help="CPU tensors under Triton's interpreter")
    args = p.parse_args(argv)
    if args.dry_run:                            # before any kernel module is imported
        os.environ["TRITON_INTERPRET"] = "1"
    t0 = time.monotonic()

    import torch

    import einc
    from einc.runtime import triton_executor

    sizes, ks = DRY if args.dry_run else (SIZES, KS)
    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        def bench(fn):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t) * 1e6)
            return statistics.median(times)
    else:
        from triton.testing import do_bench

        from bench.gpu_eval import median_ms

        def bench(fn):
            return median_ms(do_bench, fn, 10, 50) * 1e3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    terms = EQUATION.split("->")[0].split(",")
    for dtype in (torch.float32, torch.bfloat16):
        for k in ks:
            if time.monotonic() - t0 > args.deadline:
                print(f"deadline: {dtype} K = {k} and the rest not run", flush=True)
                break
            n = dict(sizes, e=k)
            g = torch.Generator().manual_seed(k)
            ops = [torch.randn([n[i] for i in t], generator=g, dtype=torch.float64) for t in terms]
            ref = torch.einsum(EQUATION, *ops)
            norm = float(ref.norm()) or 1.0
            ops = [o.to(device, dtype) for o in ops]
            row = {"dtype": str(dtype).removeprefix("torch."), "K": k, "error": ""}
            try:
                row["torch_us"] = f"{bench(lambda: torch.einsum(EQUATION, *ops)):.1f}"
                plan = einc.explain(EQUATION, *ops, select="kernel").plan
                for name, module in zip(("t", "plain"), kernels(plan, ops[0].dtype, [tuple(o.shape) for o in ops])):
                    assert (name == "t") == bool(module.kernel.group("t")), module.kernel.groups
                    run = triton_executor.launch_of(module)
                    got = run(*ops)
                    row[f"{name}_err"] = f"{float((got.double().cpu() - ref).norm()) / norm:.2g}"
                    row[f"{name}_us"] = f"{bench(lambda run=run: run(*ops)):.1f}"
                    row[f"{name}_kernel"] = module.kernel.name
                row["t_over_plain"] = f"{float(row['t_us']) / float(row['plain_us']):.3f}"
            except Exception as e:      # noqa: BLE001 - a kernel that fails: its row says so, the rest go on
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                row["error"] = f"{type(e).__name__}: {first}"[:200]
            rows.append(row)
            print(row, flush=True)
            with open(out / "gpu_stranded.csv", "w", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=FIELDS)
                w.writeheader()
                w.writerows(rows)
            einc.cache_clear()
    return 0 if rows and not any(r["error"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
