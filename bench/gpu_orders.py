"""The generated kernel of a write-bound step in two index orders, on a GPU: what the
lowering does now against the rows (M) ordered for the result's stores.

    python bench/gpu_orders.py [--filter REGEX] [--out DIR] [--device cpu]

The lowering orders M by A's strides, so that A's tile runs along A's memory
(``einc/codegen/lower.py``).  On the suite's CCSD(T) terms (``dega,gfbc->abcdef``: a
512 MiB result, operands of 1-2 MiB) that puts the result's rows 4 Mi elements apart,
so each row of a tile stores 64 bytes on its own, while the result's second-fastest
index also lies in M: ordered by the result's strides, M would store 1 KiB runs and A,
small enough to stay in L2, would be the gather.  On an H200 those kernels ran at 27 %
of the roofline (bench/measured/h200-2026-11-26).  Per workload of the suite's
``pairwise`` category (``gpu`` variants, or tiny sizes under Triton's interpreter with
``--device cpu``, a smoke test): each variant's kernel (``select="kernel"``) is checked
against float64 and timed with ``triton.testing.do_bench`` (median, L2 flushed), beside
torch.einsum and torch.einsum + ``.contiguous()``; a variant that lowers to the same
kernel as the lowering's own is not timed again.  A table on stdout and
``gpu_orders.csv`` in ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import re
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT = r"^pw_ccsdt_"     # the rows whose kernels the variant changes


def _m_by_result(lower_step):
    """``lower_step`` with each matrix product's M group ordered by the result's strides."""
    from einc.codegen import lower
    from einc.codegen.ir import MATMUL

    def lowered(plan, s, dtype, shapes, strides=None):
        k = lower_step(plan, s, dtype, shapes, strides)
        if k.kind != MATMUL:
            return k
        out = k.output.dims
        st_c = lower.index_strides(out, k.shapes[-1], lower.contiguous(k.shapes[-1]), plan.graph.sizes)
        groups = tuple((g, lower._by_stride(idx, st_c) if g == "m" else idx) for g, idx in k.groups)
        return k if groups == k.groups else lower._named(dataclasses.replace(k, groups=groups, name=""))
    return lowered


VARIANTS = {"lowered": None, "m_by_result": _m_by_result}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--filter", default=DEFAULT, help=f"regex over workload ids (default {DEFAULT!r})")
    p.add_argument("--out", default=".", help="folder for gpu_orders.csv")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--rep", type=int, default=100)
    args = p.parse_args(argv)
    if args.device == "cpu":                    # before any kernel module is imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ["EINC_BACKEND"] = "triton"

    import torch

    import einc
    from einc.benchmark.suite import find_suite, load
    from einc.codegen import lower

    if args.device == "cuda":
        from triton.testing import do_bench

        from bench.gpu_eval import median_ms

        def bench(fn):
            return median_ms(do_bench, fn, args.warmup, args.rep) * 1e3
    else:
        def bench(fn):
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(times)

    rows = []
    for w in load(find_suite())["workloads"]:
        if w["category"] != "pairwise" or not re.search(args.filter, w["id"]):
            continue
        eq = w["equation"]
        if args.device == "cuda":
            shapes = w["variants"]["gpu"]["shapes"]
        else:                                   # the interpreter: every index at most 3
            sizes = {i: min(n, 3) for i, n in w["variants"]["cpu"]["index_sizes"].items()}
            shapes = [[sizes[i] for i in t] for t in eq.split("->")[0].split(",")]
        g = torch.Generator(device=args.device).manual_seed(0)
        ops = [torch.randn(s, generator=g, device=args.device) for s in shapes]
        ref = torch.einsum(eq, *[o.double() for o in ops])
        scale = float(ref.abs().max()) if ref.numel() else 1.0
        base = {"torch": bench(lambda: torch.einsum(eq, *ops)),
                "torch_c": bench(lambda: torch.einsum(eq, *ops).contiguous())}
        seen = {}
        for name, wrap in VARIANTS.items():
            original = lower.lower_step
            if wrap is not None:
                lower.lower_step = wrap(original)
            try:
                einc.cache_clear()
                out = einc.einsum(eq, *ops, select="kernel")
                info = einc.explain(eq, *ops, select="kernel")
                kernel = " ".join(info.backends)
                err = float((out.double() - ref).abs().max()) / scale
                us = None if kernel in seen else bench(lambda: einc.einsum(eq, *ops, select="kernel"))
            finally:
                lower.lower_step = original
                einc.cache_clear()
            seen.setdefault(kernel, name)
            rows.append({"id": w["id"], "equation": eq, "variant": name, "kernel": kernel,
                         "same_as": "" if seen[kernel] == name else seen[kernel],
                         "us": "" if us is None else f"{us:.1f}", "err": f"{err:.2g}",
                         "ok": err <= 1e-5, "torch_us": f"{base['torch']:.1f}", "torch_c_us": f"{base['torch_c']:.1f}"})
            print(f"{w['id']:20s} {name:12s} {rows[-1]['us'] or 'same as ' + seen[kernel]:>12s} µs  err {err:.2g}  "
                  f"torch {base['torch']:.1f}  torch_c {base['torch_c']:.1f}  {kernel}", flush=True)
    if not rows:
        print("no workload matches", args.filter)
        return 1
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_orders.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
