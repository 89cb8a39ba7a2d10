"""Where one workload's time goes, einc against torch.einsum + ``.contiguous()``: the aten
ops each side runs, what each op costs inside the call, and what is left to the call itself.

    python bench/row_ops.py ID [ID ...] [--rounds 41] [--threads 1]

Per workload of the suite (any category, ``cpu`` variant, float32, the operands
bench/pairwise.py and bench/broadcast.py time):

- the aten ops each side runs (``TorchDispatchMode``), views included, with the operands'
  and results' shapes and strides;
- each op that moves data (products, copies, sums, element-wise products) timed inside
  the call in this thread's CPU time, the sides alternating call by call, medians;
- the whole calls, timed round-robin in this thread's CPU time with a different method
  first each round (a method's time depends on what ran before it): torch.einsum +
  ``.contiguous()``, ``einc.einsum`` and einc's cached entry run directly
  (``Entry.run``: the plan's step functions without ``einc.einsum``'s checks and the
  cache's look-up), each the median of the per-round ratios to the first, with the
  quartiles;
- the call's own cost on tiny operands (each dimension 1 or 2) alone and after a
  2 MiB copy has evicted from the caches what the call touches (as a workload's own ops
  do): ``einc.einsum``, its entry and torch.einsum + ``.contiguous()``, each less the copy
  (medians of per-round differences).

Markdown on stdout.  A 30 MiB allocation is made and freed first, as in bench/pairwise.py.
Standard library, torch and einc.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from einc.planner.equation import parse
from einc.planner.options import DEFAULT
from einc.runtime import engine
from einc.tools.benchmark.runner import operands
from einc.tools.benchmark.suite import find_suite, load

MOVES = {"bmm", "mm", "clone", "copy_", "sum", "mul", "_foreach_copy_", "addmm", "baddbmm", "mv"}


def _shown(x):
    if isinstance(x, torch.Tensor):
        return f"{tuple(x.shape)}:{tuple(x.stride())}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(map(_shown, x)) + "]"
    return repr(x)


class _Ops(TorchDispatchMode):
    """Every aten op as text (``timed`` false), or each data-moving op's name and thread CPU ns."""

    def __init__(self, timed=False):
        super().__init__()
        self.timed, self.seen = timed, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.thread_time_ns()
        out = func(*args, **(kwargs or {}))
        ns = time.thread_time_ns() - t0
        name = func.overloadpacket.__name__
        if not self.timed:
            self.seen.append(f"{func}({', '.join(map(_shown, args))}) -> {_shown(out)}")
        elif name in MOVES:
            self.seen.append((name, ns))
        return out


def rotated(fns, rounds, target=4e-3):
    """``{name: [seconds per call, one a round]}``: batches of about ``target`` s in this
    thread's CPU time, round-robin, each round starting one method later."""
    calls = {}
    for name, fn in fns.items():
        fn()
        t0 = time.thread_time()
        fn()
        calls[name] = max(1, round(target / max(time.thread_time() - t0, 1e-6)))
    names, samples = list(fns), {name: [] for name in fns}
    gc.disable()
    try:
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                t0 = time.thread_time()
                for _ in range(calls[name]):
                    fns[name]()
                samples[name].append((time.thread_time() - t0) / calls[name])
    finally:
        gc.enable()
    return samples


def _quartiles(values):
    v = sorted(values)
    return statistics.median(v), v[len(v) // 4], v[(3 * len(v)) // 4]


def _sides(eq, ops):
    entry = engine.entry(parse(eq), ops, DEFAULT)
    return {"torch.einsum + .contiguous()": lambda: torch.einsum(eq, *ops).contiguous(),
            "einc.einsum": lambda: einc.einsum(eq, *ops), "einc's entry": lambda: entry.run(ops)}


def ops_section(eq, ops, rounds):
    """The ops each side runs, and each data-moving op's median time inside the call."""
    sides = dict(list(_sides(eq, ops).items())[:2])
    for fn in sides.values():
        fn()
    times = {name: {} for name in sides}
    for r in range(rounds):
        for name, fn in (list(sides.items()) if r % 2 else list(sides.items())[::-1]):
            with _Ops(timed=True) as mode:
                fn()
            for k, (op, ns) in enumerate(mode.seen):
                times[name].setdefault(f"{k + 1}. {op}", []).append(ns)
    for name, fn in sides.items():
        with _Ops() as mode:
            fn()
        print(f"\n{name}:\n\n```\n" + "\n".join(mode.seen) + "\n```\n")
        print("inside the call, µs (median): " + ", ".join(
            f"{op} {statistics.median(ns) / 1e3:.1f}" for op, ns in times[name].items()))


def whole_section(eq, ops, rounds):
    samples = rotated(_sides(eq, ops), rounds)
    base = samples["torch.einsum + .contiguous()"]
    print("\n| call | µs | / torch.einsum + .contiguous() [quartiles] |\n|---|---:|---|")
    for name, s in samples.items():
        m, lo, hi = _quartiles([a / b for a, b in zip(s, base)])
        print(f"| {name} | {statistics.median(s) * 1e6:.1f} | {m:.3f} [{lo:.3f}-{hi:.3f}] |")


def front_section(eq, ops, rounds):
    tiny = [torch.randn([min(s, 2) for s in o.shape]) for o in ops]
    src, dst = torch.randn(1 << 19), torch.empty(1 << 19)
    fns = {"copy": lambda: dst.copy_(src)}
    for name, fn in _sides(eq, tiny).items():
        fns[name] = fn
        fns[name + " after the copy"] = lambda fn=fn: (dst.copy_(src), fn())
    samples = rotated(fns, rounds)
    print("\n| tiny call | alone µs | after a 2 MiB copy, less the copy: µs [quartiles] |\n|---|---:|---|")
    for name in list(fns)[1::2]:
        m, lo, hi = _quartiles([(a - c) * 1e6 for a, c in zip(samples[name + " after the copy"], samples["copy"])])
        print(f"| {name} | {statistics.median(samples[name]) * 1e6:.2f} | {m:.1f} [{lo:.1f}-{hi:.1f}] |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ids", nargs="+", help="the suite's workload ids")
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    held = torch.empty(30 * 2**20, dtype=torch.uint8)
    del held
    found = {w["id"]: w for w in load(find_suite())["workloads"]}
    for wid in args.ids:
        w = found[wid]
        eq, ops = w["equation"], operands(w, "cpu", "cpu")
        print(f"## {wid} `{eq}` {' '.join('x'.join(map(str, o.shape)) for o in ops)}, float32, "
              f"{args.threads} thread(s), torch {torch.__version__}")
        ops_section(eq, ops, args.rounds)
        whole_section(eq, ops, args.rounds)
        front_section(eq, ops, 5 * args.rounds)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
