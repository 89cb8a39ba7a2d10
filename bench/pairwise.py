"""The suite's pairwise family on the CPU: einc against torch.einsum, torch.einsum +
``.contiguous()`` and opt_einsum's ``contract_expression(..., backend="torch")``.

    python bench/pairwise.py [--threads 1] [--rounds 15] [--budget 4] [--filter TEXT] [--variant cpu]
                             [--category pairwise[,permuted]] [--clock wall|cpu] [--settle]

Per workload of the suite's ``pairwise`` category (or those ``--category`` names; ``cpu``
variants, float32, ``torch.randn`` with seed 0; ``--variant gpu``: the GPU variants' shapes,
~256 MiB per tensor, still on the CPU): the four methods timed in interleaved rounds (``einc.tools.benchmark.timing``),
each ratio the median of the per-round ratios einc / method (round k of every method is
timed back to back), with its 95 % interval (the sign test's).  opt_einsum's expression
is built once, outside the timing, as einc's plan is; it and torch.einsum may return a
permuted view where einc returns a contiguous tensor (the ``+ .contiguous()`` column is
the like-for-like one).  ``--settle``: after the warm-up calls, wait for the copies einc
compiles in the background (``EINC_COPY_COMPILE``, set on), so that the rounds time
the steady state (without it a compile may run during the rounds), and time einc with
the setting off too, in the same rounds: a second table gives einc's ratio to itself
without compiled copies, and that one's to opt_einsum.  Before timing, einc's result is checked against torch.einsum's
on float64 copies, and for the layout ``EINC_LAYOUT`` asks (``any``: dense and
non-overlapping, in any order, and no view of an operand; else contiguous).  Markdown on
stdout: the table, the geomeans, and the issue's targets (family geomean einc/torch.einsum
<= 0.9, einc/opt_einsum <= 1.0, no workload above 1.05x torch.einsum + ``.contiguous()``),
and what a contiguous result alone costs: the geomeans of (torch.einsum +
``.contiguous()``) over torch.einsum and over opt_einsum, which einc would have if it
matched torch.einsum + ``.contiguous()`` everywhere.

A 30 MiB allocation is made and freed first: glibc then keeps tensors of a few MiB on its
heap instead of mapping fresh pages for each (whose page faults cost ~1 ms per call on
the family's outputs), as in a process that has run for a while (``einc bench`` runs
the whole suite first).  Standard library, torch, opt_einsum and einc.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import random
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import opt_einsum
import torch

import einc
from einc import config
from einc.runtime.torch_executor import compiled_copy
from einc.tools.benchmark.runner import operands
from einc.tools.benchmark.suite import find_suite, load
from einc.tools.benchmark.timing import Timing, interleaved, ratio_interval

METHODS = ("torch", "torch_contiguous", "opt_einsum", "einc")
SETTLE_CALLS = 8        # --settle: calls until one hands no new copy to the background
dense = torch.ops.aten.is_non_overlapping_and_dense.default


def workloads(suite, text="", variant="cpu", categories=("pairwise",)):
    return [w for w in suite["workloads"] if w["category"] in categories and variant in w["variants"]
            and text in w["id"]]


def check(eq, ops):
    """Whether einc's result has torch.einsum's values (on float64 copies) and the layout
    ``EINC_LAYOUT`` asks for: contiguous, or under ``any`` a fresh dense tensor in any order."""
    ref = torch.einsum(eq, *[o.double() for o in ops])
    out = einc.einsum(eq, *ops)
    right = out.shape == ref.shape and torch.allclose(
        out.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()) if ref.numel() else 0.0)
    if config.layout() != "any":
        return right and out.is_contiguous()
    return right and dense(out) and (out.numel() == 0 or not any(_shares_memory(out, o) for o in ops))


def _shares_memory(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def measure(w, rounds, budget, variant="cpu", clock="wall", settle=False):
    eq = w["equation"]
    ops = operands(w, "cpu", variant)
    expr = opt_einsum.contract_expression(eq, *[o.shape for o in ops])
    fns = {"torch": lambda: torch.einsum(eq, *ops),
           "torch_contiguous": lambda: torch.einsum(eq, *ops).contiguous(),
           "opt_einsum": lambda: expr(*ops, backend="torch"),
           "einc": lambda: einc.einsum(eq, *ops)}
    ok = check(eq, ops)
    for f in fns.values():
        f()
    if settle:
        fns["einc"] = lambda: copies("on", eq, ops)
        fns["einc_copies_off"] = lambda: copies("off", eq, ops)
        for _ in range(SETTLE_CALLS):      # (a later call may copy what the first did not)
            seen = compiled_copy.seen()
            for _ in range(compiled_copy.CALLS):
                fns["einc"]()
            compiled_copy.settle()
            if compiled_copy.seen() == seen:
                break
        fns["einc_copies_off"]()
    if clock == "cpu":
        return ok, cpu_interleaved(fns, rounds), rounds
    timings, n = interleaved(fns, rounds=rounds, budget=budget)
    return ok, timings, n


def copies(setting, eq, ops):
    """``einc.einsum`` with ``EINC_COPY_COMPILE`` set to ``setting`` (both settings' calls
    set it, so that each pays the same for it)."""
    os.environ["EINC_COPY_COMPILE"] = setting
    return einc.einsum(eq, *ops)


def cpu_interleaved(fns, rounds, target=2e-3, seed=0):
    """As :func:`einc.tools.benchmark.timing.interleaved` (``{name: Timing}``, batches of
    about ``target`` s timed round-robin, every round run), on this thread's CPU clock: on
    a shared machine the wall clock also counts other processes' time slices, which swamp
    calls of a few milliseconds.  The callables must already be warmed up.  Each round
    runs them in an order drawn anew (``random.Random(seed)``; ``seed=None``: the order
    given, every round): a call that allocates a large result can run slower or faster
    for the call before it (the allocator's reuse of what that one freed), which a fixed
    order would charge to one method every round."""
    calls, order, rng = {}, list(fns), random.Random(seed)
    for name, fn in fns.items():
        t0 = time.thread_time()
        fn()
        calls[name] = max(1, round(target / max(time.thread_time() - t0, 1e-6)))
    samples = {name: [] for name in fns}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            if seed is not None:
                rng.shuffle(order)
            for name in order:
                fn = fns[name]
                t0 = time.thread_time()
                for _ in range(calls[name]):
                    fn()
                samples[name].append((time.thread_time() - t0) / calls[name])
    finally:
        if enabled:
            gc.enable()
    return {name: Timing(statistics.median(v), calls[name], v) for name, v in samples.items()}


def cpu_setup(argv, doc, rounds, budget, unit, options=None):
    """The CPU scripts' common start (this one and bench/permute_copy.py): ``--threads``,
    ``--rounds``, ``--budget`` (seconds per ``unit``), ``--filter`` and what ``options(parser)``
    adds parsed, the thread count set, and a 30 MiB allocation made and freed (see the
    module's docstring)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if options:
        options(p)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--budget", type=float, default=budget, help=f"seconds per {unit}")
    p.add_argument("--filter", default="")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    held = torch.empty(30 * 2**20, dtype=torch.uint8)
    del held
    return args


def copies_table(rows):
    """The ``--settle`` table: einc against itself with ``EINC_COPY_COMPILE=off``."""
    print("\n| id | einc/(einc, compiled copies off) | (einc, compiled copies off)/opt_einsum |")
    print("|---|---:|---:|")
    for w, _, t, _, _ in rows:
        own = ratio_interval(t["einc"], t["einc_copies_off"])
        off = ratio_interval(t["einc_copies_off"], t["opt_einsum"])
        print(f"| {w['id']} | {own[0]:.2f} [{own[1]:.2f}-{own[2]:.2f}] | {off[0]:.2f} [{off[1]:.2f}-{off[2]:.2f}] |")
    gm = {m: math.exp(statistics.fmean(math.log(ratio_interval(row[2]["einc"], row[2][m])[0]) for row in rows))
          for m in ("einc_copies_off", "opt_einsum")}
    off = math.exp(statistics.fmean(math.log(ratio_interval(row[2]["einc_copies_off"], row[2]["opt_einsum"])[0])
                                    for row in rows))
    print(f"\n- geomean einc/(einc, compiled copies off) {gm['einc_copies_off']:.3f}; einc/opt_einsum "
          f"{gm['opt_einsum']:.3f} with compiled copies, {off:.3f} without\n")


def main(argv=None):
    args = cpu_setup(argv, __doc__, 15, 4.0, "workload",
                     lambda p: (p.add_argument("--variant", choices=("cpu", "gpu"), default="cpu",
                                               help="the workloads' shapes (gpu: ~256 MiB tensors, on the CPU)"),
                                p.add_argument("--category", default="pairwise",
                                               help="the suite's categories, comma-separated"),
                                p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                                               help="cpu: this thread's CPU time (a shared machine)"),
                                p.add_argument("--settle", action="store_true",
                                               help="wait for the copies compiled in the background before timing")))
    suite = load(find_suite())
    if args.settle:
        os.environ["EINC_COPY_COMPILE"] = "on"
    compiling = config.copy_compile()
    rows = []
    for w in workloads(suite, args.filter, args.variant, tuple(args.category.split(","))):
        ok, t, n = measure(w, args.rounds, args.budget, args.variant, args.clock, args.settle)
        r = {m: ratio_interval(t["einc"], t[m]) for m in METHODS[:3]}
        rows.append((w, ok, t, n, r))
        print(f"{w['id']}: einc {t['einc'].median * 1e6:.0f} us, /torch {r['torch'][0]:.2f}, "
              f"/contiguous {r['torch_contiguous'][0]:.2f}, /opt_einsum {r['opt_einsum'][0]:.2f}", file=sys.stderr)
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s), opt_einsum {opt_einsum.__version__}, float32, {args.variant} "
          f"variants' shapes, einc's result layout {config.layout()}, compiled copies "
          f"{'on' if compiling else 'off'}{' (settled; and off, in the same rounds)' if args.settle else ''}; "
          f"medians of "
          f"{args.rounds} interleaved rounds at most, {args.budget:g} s per workload\n")
    print("| id | equation | torch µs | + .contiguous() µs | opt_einsum µs | einc µs | einc/torch | "
          "einc/(torch + .contiguous()) | einc/opt_einsum | check |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for w, ok, t, _, r in rows:
        us = [f"{t[m].median * 1e6:.0f}" for m in METHODS]
        cells = [f"{r[m][0]:.2f} [{r[m][1]:.2f}-{r[m][2]:.2f}]" for m in METHODS[:3]]
        print(f"| {w['id']} | `{w['equation']}` | " + " | ".join(us) + " | " + " | ".join(cells)
              + f" | {'ok' if ok else 'MISMATCH'} |")
    good = [row for row in rows if row[1]]
    if not good:
        return 1
    if args.settle:
        copies_table(good)
    gm = {m: math.exp(statistics.fmean(math.log(row[4][m][0]) for row in good)) for m in METHODS[:3]}
    worst = max(good, key=lambda row: row[4]["torch_contiguous"][0])
    print(f"\n- workloads: {len(rows)}, einc correct on {len(good)}")
    print(f"- geomean einc/torch.einsum {gm['torch']:.3f} (target <= 0.9: {'PASS' if gm['torch'] <= 0.9 else 'FAIL'})")
    print(f"- geomean einc/opt_einsum {gm['opt_einsum']:.3f} "
          f"(target <= 1.0: {'PASS' if gm['opt_einsum'] <= 1.0 else 'FAIL'})")
    above = [f"{row[0]['id']} ({row[4]['torch_contiguous'][0]:.2f})" for row in good
             if row[4]["torch_contiguous"][0] > 1.05]
    print(f"- geomean einc/(torch.einsum + .contiguous()) {gm['torch_contiguous']:.3f}; largest "
          f"{worst[4]['torch_contiguous'][0]:.2f} ({worst[0]['id']}); above 1.05 (target: none): "
          f"{', '.join(above) or 'none'}")
    # What einc's contiguous result alone costs: the geomeans einc would have if it matched
    # torch.einsum + .contiguous() on every workload (the permuted views returned otherwise).
    floor = {m: math.exp(statistics.fmean(math.log(ratio_interval(row[2]["torch_contiguous"], row[2][m])[0])
                                          for row in good)) for m in ("torch", "opt_einsum")}
    print(f"- a contiguous result's cost: geomean (torch.einsum + .contiguous())/torch.einsum "
          f"{floor['torch']:.3f}, /opt_einsum {floor['opt_einsum']:.3f} (einc's geomeans if it matched "
          f"torch.einsum + .contiguous() on every workload)")
    return 0 if len(good) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
