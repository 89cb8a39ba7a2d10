"""The suite's broadcast family on the CPU: einc against torch.einsum and torch.einsum +
``.contiguous()``, forward, and forward + backward against torch.einsum.

    python bench/broadcast.py [--threads 1] [--rounds 15] [--budget 4] [--filter TEXT]

Per workload of the suite's ``broadcast`` category (two operands whose size-1 dimensions
broadcast; ``cpu`` variants, float32, ``torch.randn`` with seed 0): the forward timed in
interleaved rounds against torch.einsum and torch.einsum + ``.contiguous()`` (torch may
return a permuted view where einc returns a contiguous tensor: the like-for-like
column), then forward + backward (a fixed random gradient of the result, both operands
requiring grad) against torch.einsum's (``einc.tools.benchmark.timing``); each ratio the
median of the per-round ratios with its 95 % interval (the sign test's).  Before timing,
einc's result and gradients are checked against torch.einsum's on float64 copies.
Markdown on stdout: the table and the targets (pykeen's NTN, ``bcast_ntn_score_t``, at
most 1.0x torch.einsum forward and forward + backward; no workload above 1.05x
torch.einsum + ``.contiguous()`` forward).  A 30 MiB allocation is made and freed first,
as in bench/pairwise.py.  ``--clock thread`` (the default) times each batch in the calling
thread's CPU time (``time.thread_time``: with one thread torch runs its ops there), which
leaves out the time other processes hold the core on a shared machine; ``--clock wall``
takes ``einc.tools.benchmark.timing``'s wall-clock batches.  Standard library, torch and einc.
"""

from __future__ import annotations

import gc
import os
import platform
import random
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

import einc
from bench.pairwise import check, cpu_setup
from einc.tools.benchmark.runner import operands
from einc.tools.benchmark.suite import find_suite, load
from einc.tools.benchmark.timing import Timing, interleaved, ratio_interval

NTN = "bcast_ntn_score_t"


def workloads(suite, text=""):
    return [w for w in suite["workloads"] if w["category"] == "broadcast" and "cpu" in w["variants"]
            and text in w["id"]]


def check_grads(eq, ops, grad):
    """einc's gradients against torch.einsum's on float64 copies."""
    wide = [o.double().requires_grad_() for o in ops]
    want = torch.autograd.grad(torch.einsum(eq, *wide), wide, grad.double())
    mine = [o.detach().requires_grad_() for o in ops]
    got = torch.autograd.grad(einc.einsum(eq, *mine), mine, grad)
    return all(torch.allclose(g.double(), w, rtol=1e-4, atol=1e-4 * float(w.abs().max()))
               for g, w in zip(got, want))


def thread_interleaved(fns, rounds, budget, target=2e-3, seed=0):
    """:func:`interleaved` in the calling thread's CPU time: batches of at least ``target``
    seconds, every callable once a round in a shuffled order, rounds lowered to about
    ``budget`` seconds in all (at least 5)."""
    def batch(fn, n):
        gc.disable()
        try:
            t0 = time.thread_time()
            for _ in range(n):
                fn()
            return (time.thread_time() - t0) / n
        finally:
            gc.enable()
    calls = {}
    for name, fn in fns.items():
        n = 1
        while (per := batch(fn, n)) * n < target:
            n = max(2 * n, int(1.2 * target / max(per, 1e-7)))
        calls[name] = (n, per)
    rounds = max(5, min(rounds, int(budget / max(sum(n * p for n, p in calls.values()), 1e-9))))
    samples, order, rng = {name: [] for name in fns}, list(fns), random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            samples[name].append(batch(fns[name], calls[name][0]))
    return {name: Timing(statistics.median(s), calls[name][0], s) for name, s in samples.items()}, rounds


def measure(w, rounds, budget, clock="thread"):
    """``(checked, forward timings, forward + backward timings)``."""
    eq = w["equation"]
    ops = operands(w, "cpu")
    grad = torch.randn(torch.einsum(eq, *ops).shape, generator=torch.Generator().manual_seed(1))
    leaves = [o.clone().requires_grad_() for o in ops]

    def both(einsum):
        def run():
            torch.autograd.grad(einsum(eq, *leaves), leaves, grad)
        return run
    forward = {"torch": lambda: torch.einsum(eq, *ops), "torch_contiguous": lambda: torch.einsum(eq, *ops).contiguous(),
               "einc": lambda: einc.einsum(eq, *ops)}
    backward = {"torch": both(torch.einsum), "einc": both(einc.einsum)}
    ok = check(eq, ops) and check_grads(eq, ops, grad)
    for f in (*forward.values(), *backward.values()):
        f()
    timed = thread_interleaved if clock == "thread" else interleaved
    return ok, timed(forward, rounds=rounds, budget=budget / 2)[0], timed(backward, rounds=rounds, budget=budget / 2)[0]


def main(argv=None):
    args = cpu_setup(argv, __doc__, 15, 4.0, "workload",
                     lambda p: p.add_argument("--clock", choices=("thread", "wall"), default="thread",
                                              help="the thread's CPU time (default) or wall-clock time"))
    rows = []
    for w in workloads(load(find_suite()), args.filter):
        ok, fw, fb = measure(w, args.rounds, args.budget, args.clock)
        r = {"torch": ratio_interval(fw["einc"], fw["torch"]),
             "torch_contiguous": ratio_interval(fw["einc"], fw["torch_contiguous"]),
             "backward": ratio_interval(fb["einc"], fb["torch"])}
        rows.append((w, ok, fw, fb, r))
        print(f"{w['id']}: einc {fw['einc'].median * 1e6:.0f} us, /torch {r['torch'][0]:.2f}, "
              f"/contiguous {r['torch_contiguous'][0]:.2f}, forward + backward {r['backward'][0]:.2f}", file=sys.stderr)
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s), float32, cpu variants' shapes; medians of {args.rounds} interleaved "
          f"rounds at most, {args.budget:g} s per workload, {args.clock} clock\n")
    print("| id | equation | shapes | torch µs | + .contiguous() µs | einc µs | einc/torch | "
          "einc/(torch + .contiguous()) | fwd+bwd torch µs | fwd+bwd einc µs | fwd+bwd einc/torch | check |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for w, ok, fw, fb, r in rows:
        shapes = " ".join("x".join(map(str, s)) for s in w["variants"]["cpu"]["shapes"])
        us = [f"{fw[m].median * 1e6:.0f}" for m in ("torch", "torch_contiguous", "einc")]
        cells = [f"{r[m][0]:.2f} [{r[m][1]:.2f}-{r[m][2]:.2f}]" for m in ("torch", "torch_contiguous")]
        print(f"| {w['id']} | `{w['equation']}` | {shapes} | " + " | ".join(us + cells)
              + f" | {fb['torch'].median * 1e6:.0f} | {fb['einc'].median * 1e6:.0f} | "
              f"{r['backward'][0]:.2f} [{r['backward'][1]:.2f}-{r['backward'][2]:.2f}] | "
              f"{'ok' if ok else 'MISMATCH'} |")
    above = [f"{w['id']} ({r['torch_contiguous'][0]:.2f})" for w, _, _, _, r in rows if r["torch_contiguous"][0] > 1.05]
    print(f"\n- workloads: {len(rows)}, einc correct on {sum(row[1] for row in rows)}")
    print(f"- above 1.05x torch.einsum + .contiguous() forward (target: none): {', '.join(above) or 'none'}")
    for w, _, _, _, r in rows:
        if w["id"] == NTN:
            fwd, both = r["torch"][0], r["backward"][0]
            print(f"- {NTN}: einc/torch.einsum forward {fwd:.2f} ({'PASS' if fwd <= 1.0 else 'FAIL'}), "
                  f"forward + backward {both:.2f} ({'PASS' if both <= 1.0 else 'FAIL'}) (targets <= 1.0)")
    return 0 if all(row[1] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
