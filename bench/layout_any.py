"""``layout="any"`` on the CPU: einc against opt_einsum and torch.einsum, which return the
permuted view their last product gives, on the suite's pairwise family and on permuted
results with small summed indices.

    python bench/layout_any.py [--threads 1] [--rounds 15] [--budget 4] [--filter TEXT]

Workloads: the suite's ``pairwise`` category (``cpu`` variants, the suite's operands), and
:data:`PERMUTED`: 4- and 5-index results that reverse or scramble their operand's order,
summing a small index (``akbc,jk->cjba`` at a=48 b=40 c=48 j=24 k=48 among them), float32
``torch.randn`` with seed 0.  Per workload, einc with ``layout="any"``, einc's default
(``"contiguous"``), torch.einsum and opt_einsum's ``contract_expression(eq, *shapes)``
called with ``backend="torch"`` (built once, outside the timing, as einc's plan is) are
timed in interleaved rounds (``einc.tools.benchmark.timing``); each ratio is the median of
the per-round ratios, with its 95 % interval (the sign test's).  Before timing, both of
einc's results are checked against torch.einsum on float64 copies, and the ``"any"``
result for being dense and non-overlapping.  Markdown on stdout: the table, the geomeans
per family and overall, and the targets (geomean einc/opt_einsum <= 1.0, einc/torch.einsum
<= 0.85, no workload above 1.1x opt_einsum).  Standard library, torch, opt_einsum and
einc.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import opt_einsum
import torch

import einc
from bench.pairwise import cpu_setup, workloads
from einc.tools.benchmark.runner import operands
from einc.tools.benchmark.suite import find_suite, load
from einc.tools.benchmark.timing import interleaved, ratio_interval

# (id, equation, sizes): results that reverse or scramble the operand's order, small sums
PERMUTED = [
    ("issue_akbc", "akbc,jk->cjba", dict(a=48, b=40, c=48, j=24, k=48)),
    ("reverse4_k8", "abck,kd->dcba", dict(a=32, b=32, c=48, k=8, d=32)),
    ("reverse5_k8", "abkcd,ek->edcba", dict(a=16, b=16, k=8, c=16, d=16, e=24)),
    ("scramble4_k16", "akbc,kj->bjca", dict(a=48, k=16, b=40, c=48, j=24)),
    ("scramble4_k8", "abck,dk->cadb", dict(a=32, b=40, c=32, k=8, d=32)),
    ("lead_k8", "kabc,kd->dbca", dict(k=8, a=32, b=32, c=48, d=24)),
]
METHODS = ("einc_any", "einc", "torch", "opt_einsum")
dense = torch.ops.aten.is_non_overlapping_and_dense.default


def permuted_operands(equation, sizes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn([sizes[c] for c in term], generator=g) for term in equation.split("->")[0].split(",")]


def check(eq, ops):
    ref = torch.einsum(eq, *[o.double() for o in ops])
    tol = 1e-4 * float(ref.abs().max()) if ref.numel() else 0.0
    results = {"any": einc.einsum(eq, *ops, layout="any"), "contiguous": einc.einsum(eq, *ops, layout="contiguous")}
    return all(out.shape == ref.shape and dense(out) and torch.allclose(out.double(), ref, rtol=1e-4, atol=tol)
               for out in results.values()) and results["contiguous"].is_contiguous()


def measure(eq, ops, rounds, budget):
    expr = opt_einsum.contract_expression(eq, *[o.shape for o in ops])
    fns = {"einc_any": lambda: einc.einsum(eq, *ops, layout="any"),
           "einc": lambda: einc.einsum(eq, *ops, layout="contiguous"),
           "torch": lambda: torch.einsum(eq, *ops),
           "opt_einsum": lambda: expr(*ops, backend="torch")}
    ok = check(eq, ops)
    for f in fns.values():
        f()
    timings, _ = interleaved(fns, rounds=rounds, budget=budget)
    return ok, timings


def geomean(values):
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main(argv=None):
    args = cpu_setup(argv, __doc__, 15, 4.0, "workload")
    suite = load(find_suite())
    cases = [("pairwise", w["id"], w["equation"], operands(w, "cpu", "cpu")) for w in workloads(suite, args.filter)]
    cases += [("permuted", name, eq, permuted_operands(eq, sizes)) for name, eq, sizes in PERMUTED
              if args.filter in name]
    rows = []
    for family, name, eq, ops in cases:
        ok, t = measure(eq, ops, args.rounds, args.budget)
        r = {m: ratio_interval(t["einc_any"], t[m]) for m in METHODS[1:]}
        rows.append((family, name, eq, ok, t, r))
        print(f"{name}: any {t['einc_any'].median * 1e6:.0f} us, /einc {r['einc'][0]:.2f}, "
              f"/torch {r['torch'][0]:.2f}, /opt_einsum {r['opt_einsum'][0]:.2f}", file=sys.stderr)
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s), opt_einsum {opt_einsum.__version__}, float32; medians of "
          f"{args.rounds} interleaved rounds at most, {args.budget:g} s per workload\n")
    print("| family | id | equation | any µs | contiguous µs | torch µs | opt_einsum µs | any/contiguous | "
          "any/torch | any/opt_einsum | check |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for family, name, eq, ok, t, r in rows:
        us = [f"{t[m].median * 1e6:.0f}" for m in METHODS]
        cells = [f"{r[m][0]:.2f} [{r[m][1]:.2f}-{r[m][2]:.2f}]" for m in METHODS[1:]]
        print(f"| {family} | {name} | `{eq}` | " + " | ".join(us) + " | " + " | ".join(cells)
              + f" | {'ok' if ok else 'MISMATCH'} |")
    good = [row for row in rows if row[3]]
    if not good:
        return 1
    print()
    for family in ("pairwise", "permuted", None):
        chosen = [row for row in good if family in (None, row[0])]
        if not chosen:
            continue
        gm = {m: geomean(row[5][m][0] for row in chosen) for m in METHODS[1:]}
        print(f"- {family or 'both'} ({len(chosen)}): geomean any/opt_einsum {gm['opt_einsum']:.3f} "
              f"(target <= 1.0: {'PASS' if gm['opt_einsum'] <= 1.0 else 'FAIL'}), any/torch.einsum "
              f"{gm['torch']:.3f} (target <= 0.85: {'PASS' if gm['torch'] <= 0.85 else 'FAIL'}), "
              f"any/contiguous {gm['einc']:.3f}")
    above = [f"{row[1]} ({row[5]['opt_einsum'][0]:.2f})" for row in good if row[5]["opt_einsum"][0] > 1.1]
    print(f"- above 1.1x opt_einsum (target: none): {', '.join(above) or 'none'}")
    print(f"- workloads: {len(rows)}, einc correct on {len(good)}")
    return 0 if len(good) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
