"""One step's generated kernel in each lowering and each tile config, timed side by side
on a GPU: the experiment for the step that keeps the pairwise family from issue 23's GPU
target.

    python bench/gpu_variants.py [--filter REGEX] [--out DIR] [--deadline S] [--device cpu]

On an H100 (2026-11-26, ``bench/measured/h100-2026-11-26``) the CCSD(T) terms
(``dega,gfbc->abcdef``, a 537 MB permuted result from operands of 1-2 MiB, K = 32) ran
einc's ``plain`` kernel in 630 µs, where torch.einsum's matrix product writes the result
unpermuted (a view) in 340 µs and the roofline is 183.  Measure mode only ever sees the
autotuner's best config of each lowering; this script shows every config of each:

- ``default``: the lowering's own kernel (``einc/codegen/lower.py``; for these
  write-bound terms, since after d4fab77, N loaded as a 2-D block, ``nt`` by ``n``, so
  that B's tile runs along B's unit stride; before, B's unit-stride index rode in T);
- ``plain``: ``unit_tiles=False`` (B's tile a gather: 630 µs on the H100);
- ``m_by_result``: ``plain`` with the rows (M) ordered by the result's strides instead of
  A's: a tile then stores runs of BLOCK_M x 16 floats instead of 64-256 bytes, and A
  (small enough to stay in L2) is the gather.  On the T-axis lowering it lost
  (1594-1744 µs against 1467, at e1b85bd); on ``plain`` it was never timed;
- ``default_m_by_result``: ``default`` with M so ordered (both loads of B and stores long
  runs, A the gather);
- ``t_by_result``: ``default`` with A's unit-stride row index moved into the tile's T
  axis (B broadcast along it) and the other rows ordered by the result's strides, where
  those differ (the permuted family's ``abcd,ea->dcbe``: M = (b, c, d) runs along A's d,
  so each tile row stores the result's 16-float run of e and jumps; with d in T and M =
  (d, c, b) by the result, a tile stores BLOCK_M x 16 floats in one run and A is still
  read along d).

Each lowering runs with each config of its launcher's table (all of them, unpruned) and
:data:`EXTRA` (2-D tiles shaped for the result's runs), :data:`EXTRA_NT` (2-D N blocks
taller and wider than the table's) or :data:`EXTRA_T` (T tiles of narrow N), one config
a run and
no autotuning (``Launcher.screen(..., config=)``), then autotuned as einc runs it
(``tuned``).  Each is checked against float64 and timed with ``triton.testing.do_bench``
(median, L2 flushed), beside torch.einsum and torch.einsum + ``.contiguous()``.  A table
per workload on stdout, fastest first; ``gpu_variants.csv`` in ``--out``, rewritten after
every row.  A config that fails to compile or run (shared memory, registers) is a row
with its error.  ``--device cpu`` is a smoke test under Triton's interpreter (every index
of size 3; the interpreter runs its own config, so one config row and ``tuned`` a lowering).
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

DEFAULT = r"^pw_ccsdt_dega"     # the three CCSD(T) rows behave alike (657-693 µs plain on the H100)
# 2-D tiles beside the launcher's fp32 list: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages).
# A narrow N (16: the result's unit-stride index e is 16 long in the suite's gpu shapes) with
# a tall M makes m_by_result's tile one contiguous run; larger tiles cover more of the
# result per program (K = 32: one K step, so the stores are most of a program's time).
EXTRA = [(256, 16, 32, 8, 2), (128, 16, 32, 4, 2), (64, 16, 32, 4, 2), (256, 32, 32, 8, 2), (128, 32, 32, 4, 3),
         (64, 128, 32, 4, 3), (128, 128, 32, 4, 3), (64, 256, 32, 8, 2), (256, 64, 32, 8, 2)]
# Beside the 2-D N block's list (``matmul-nt``): (BLOCK_M, BLOCK_NT, BLOCK_N, BLOCK_K, num_warps,
# num_stages), taller and wider tiles and fewer warps (some may spill: the table says).
EXTRA_NT = [(256, 8, 16, 32, 8, 2), (128, 16, 16, 32, 8, 2), (64, 16, 16, 32, 4, 2), (128, 4, 16, 32, 4, 3),
            (256, 4, 16, 32, 8, 2), (128, 8, 16, 32, 4, 2)]
# Beside the T axis's list (``matmul-t``): (BLOCK_T, BLOCK_M, BLOCK_N, BLOCK_K, num_warps,
# num_stages), N of 16 for the permuted family's 16-long runs of the result.
EXTRA_T = [(8, 32, 16, 16, 4, 2), (4, 64, 16, 16, 4, 2), (16, 16, 16, 16, 4, 2), (2, 128, 16, 16, 4, 2)]
FIELDS = ["id", "equation", "variant", "kernel", "config", "us", "err", "ok", "torch_us", "torch_c_us", "error"]


def m_by_result(module, sizes):
    """``module`` (a matmul's kernel and source) with its M group ordered by the result's strides."""
    from einc.codegen import named
    from einc.codegen.ir import MATMUL
    from einc.planner.strides import by_stride, contiguous, index_strides
    kernel = module.kernel
    if kernel.kind != MATMUL:
        return module
    shape = kernel.shapes[-1]
    st_c = index_strides(kernel.output.dims, shape, contiguous(shape), sizes)
    groups = tuple((g, by_stride(idx, st_c) if g == "m" else idx) for g, idx in kernel.groups)
    return module if groups == kernel.groups else named(dataclasses.replace(kernel, groups=groups))


def t_by_result(module, sizes):
    """``module`` (a matmul's kernel and source) with A's unit-stride row index, M's last,
    in the tile's T axis and the other rows ordered by the result's strides; ``module``
    itself where it has a T axis or a 2-D N block already, or M one index."""
    from einc.codegen import named
    from einc.codegen.ir import MATMUL
    from einc.planner.strides import by_stride, contiguous, index_strides
    kernel = module.kernel
    m = kernel.group("m")
    if kernel.kind != MATMUL or kernel.group("t") or kernel.group("nt") or len(m) < 2:
        return module
    shape = kernel.shapes[-1]
    st_c = index_strides(kernel.output.dims, shape, contiguous(shape), sizes)
    rows = by_stride(m[:-1], st_c)
    groups = tuple((g, m[-1:] if g == "t" else rows if g == "m" else idx) for g, idx in kernel.groups)
    return named(dataclasses.replace(kernel, groups=groups))


def lowerings(plan, dtype, shapes):
    """``[(variant, kernel module)]`` of the plan's one step, each distinct kernel once."""
    from einc.runtime import triton_executor
    (default,) = triton_executor.kernels(plan, dtype, shapes)
    (plain,) = triton_executor.kernels(plan, dtype, shapes, unit_tiles=False)
    found, seen = [], set()
    sizes = plan.graph.sizes
    for name, k in (("default", default), ("plain", plain), ("default_m_by_result", m_by_result(default, sizes)),
                    ("m_by_result", m_by_result(plain, sizes)), ("t_by_result", t_by_result(default, sizes))):
        # (in the order a deadline should cut)
        if k.name not in seen:
            seen.add(k.name)
            found.append((name, k))
    return found


def configs(launcher):
    """``[(label, triton.Config or None)]``: the launcher's whole table, :data:`EXTRA` for a 2-D
    tile (:data:`EXTRA_NT` for a 2-D N block, :data:`EXTRA_T` for a T axis), and None
    (autotuned) last."""
    import triton
    table = list(launcher.configs)
    have = {tuple(c.kwargs.values()) + (c.num_warps, c.num_stages) for c in table}
    if launcher.tile_nt:
        table += [triton.Config({"BLOCK_M": m, "BLOCK_NT": nt, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
                  for m, nt, n, k, w, s in EXTRA_NT if (m, nt, n, k, w, s) not in have]
    elif launcher.tile_t:
        table += [triton.Config({"BLOCK_T": t, "BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
                  for t, m, n, k, w, s in EXTRA_T if (t, m, n, k, w, s) not in have]
    elif launcher.kind == "matmul":
        table += [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
                  for m, n, k, w, s in EXTRA if (m, n, k, w, s) not in have]
    label = lambda c: "x".join(str(v) for v in c.kwargs.values()) + f" w{c.num_warps} s{c.num_stages}"  # noqa: E731
    return [(label(c), c) for c in table] + [("tuned", None)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--filter", default=DEFAULT, help="regex over the ids of gpu_eval's pairwise part: pairwise, "
                   f"permuted and broadcast rows (default {DEFAULT!r})")
    p.add_argument("--out", default=".", help="folder for gpu_variants.csv")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--deadline", type=float, default=300.0, help="seconds: no new config after this")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rep", type=int, default=50)
    args = p.parse_args(argv)
    if args.device == "cpu":                    # before any kernel module is imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ["EINC_BACKEND"] = "triton"
    t0 = time.monotonic()

    import torch

    import einc
    from bench.gpu_eval import PARTS
    from einc.runtime import triton_executor
    from einc.tools.benchmark.runner import operands
    from einc.tools.benchmark.suite import find_suite, load

    if args.device == "cuda":
        from triton.testing import do_bench

        from bench.gpu_eval import median_ms

        def bench(fn):
            return median_ms(do_bench, fn, args.warmup, args.rep) * 1e3
    else:
        def bench(fn):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t) * 1e6)
            return statistics.median(times)

    rows = []
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpu_variants.csv")

    def record(row):
        rows.append(row)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)

    for w in load(find_suite())["workloads"]:
        if w["category"] not in PARTS["pairwise"] or not re.search(args.filter, w["id"]):
            continue
        eq = w["equation"]
        if args.device == "cuda":
            ops = operands(w, "cuda")
        else:                                   # the interpreter: every index at most 3
            sizes = {i: min(n, 3) for i, n in w["variants"]["cpu"]["index_sizes"].items()}
            g = torch.Generator().manual_seed(0)
            ops = [torch.randn([sizes[i] for i in t], generator=g) for t in eq.split("->")[0].split(",")]
        shapes = [tuple(o.shape) for o in ops]
        ref = torch.einsum(eq, *[o.double() for o in ops])
        norm = float(ref.norm()) or 1.0
        base = {"torch_us": f"{bench(lambda: torch.einsum(eq, *ops)):.1f}",
                "torch_c_us": f"{bench(lambda: torch.einsum(eq, *ops).contiguous()):.1f}"}
        plan = einc.explain(eq, *ops, select="kernel").plan
        print(f"{w['id']}: {eq}, shapes {shapes}; torch.einsum {base['torch_us']} µs, "
              f"+ .contiguous() {base['torch_c_us']} µs", flush=True)
        for variant, module in lowerings(plan, ops[0].dtype, shapes):
            run = triton_executor.launch_of(module)
            kernel = module.kernel
            launcher = sys.modules[run.__module__].launcher
            roles = tuple(ops[kernel.params.index(op.name)] for op in kernel.inputs)
            table = configs(launcher)
            if args.device == "cpu":            # the interpreter runs its own config: the paths, not the tiles
                table = [(f"{table[0][0]} (interpreted)", table[0][1]), table[-1]]
            for label, config in table:
                if time.monotonic() - t0 > args.deadline:
                    print(f"deadline: {variant} {label} and the rest not run", flush=True)
                    break
                row = {"id": w["id"], "equation": eq, "variant": variant, "kernel": kernel.name, "config": label,
                       "us": "", "err": "", "ok": False, **base, "error": ""}
                if config is None:
                    def fn(run=run):
                        return run(*ops)
                else:
                    def fn(launcher=launcher, roles=roles, config=config):
                        return launcher.screen(roles, 1.0, config)
                try:
                    err = float((fn().double() - ref).norm()) / norm
                    row.update(us=f"{bench(fn):.1f}", err=f"{err:.2g}", ok=err <= 1e-5)
                except Exception as e:      # noqa: BLE001 - a config that does not compile or fit: its row says so
                    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    row["error"] = f"{type(e).__name__}: {first}"[:200]
                record(row)
        einc.cache_clear()
        mine = sorted((r for r in rows if r["id"] == w["id"]), key=lambda r: float(r["us"]) if r["us"] else 1e18)
        for r in mine:
            print(f"  {r['variant']:12s} {r['config']:22s} {r['us'] or '-':>10s} µs  err {r['err'] or '-':8s} "
                  f"{'ok' if r['ok'] else r['error'] or 'WRONG'}", flush=True)
    if not rows:
        print("no workload matches", args.filter)
        return 1
    return 0 if all(r["ok"] or r["error"] for r in rows) and any(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
