"""Planning a sliced network in a fresh process: the first with an empty path cache (the
search and the slicer run), the second with the same cache (the path and, where
remembered, the slicing read from disk).

Each network, under its memory limit, gets a new cache folder (``EINC_CACHE_DIR``); then
two processes in turn each build the operands, import einc (its API included, before the
clock) and time one ``einc.explain(equation, *operands, memory_limit=...)``: wall and
thread CPU time around it, and the part of it in ``plan_for`` (the planner: the search,
its lazy imports and the slicer; the rest is explain's own description of the steps), and
of that the thread CPU time in einc's path search (``einc.planner.search.find``: the greedy
path, the search under the limit) and in the rest of ``einc.planner.slicing.plan`` (the
slicer, and the plans it builds).
Reported per process: those, the whole process's CPU time (imports included), and from
the plan the search's line, the slicer's (its work counted), the sliced indices, slices,
estimated time and flops.  The
second process then explains again :data:`AGAIN` times, einc's lazy imports done: the
least of those is the planning alone, whatever the load of a shared machine adds.  With
``--against DIR`` (another einc checkout, e.g. a ``git worktree`` of an older commit),
each round runs both checkouts, alternating which goes first.  Bytecode is written and
a warm-up process runs first, so that compiling einc's modules is not timed.

Networks: the 162-tensor random circuit of examples/sliced_network.py (``circuit(4, 6,
12)``, complex64, ``memory_limit=2**16``), and bench/objective.py's sliced lattice 6x6
(einsum_benchmark's ``lattice((6, 6), d_min=2, d_max=4, seed=2)``, float64, 1024), and
three random networks past the hyper-optimizer's floor (opt_einsum's ``rand_equation(n,
regularity, n_out=1, d_min=3, d_max=5, seed=...)``, float32, :data:`RANDOM_LIMIT`), whose
search under the limit runs cotengra's hyper-optimizer with its slicing reconfiguration.

    python bench/sliced_planning.py [--rounds 3] [--only circuit] [--against /tmp/einc-before]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NETWORKS = ("circuit 4x6x12", "lattice 6x6", "random 60x4 seed 7", "random 70x4 seed 5", "random 80x3 seed 2")
RANDOM_LIMIT = 4096     # the random networks' memory_limit
AGAIN = 20              # explain's repeats in a process, the least taken


def _network(name):
    """``(equation, operands, memory_limit)`` of a network of :data:`NETWORKS`."""
    import torch

    import einc.planner.equation
    if name.startswith("random"):
        from opt_einsum.testing import rand_equation
        n, regularity, seed = map(int, re.fullmatch(r"random (\d+)x(\d+) seed (\d+)", name).groups())
        eq, shapes = rand_equation(n, regularity, n_out=1, d_min=3, d_max=5, seed=seed)
        return eq, [torch.ones(s) for s in shapes], RANDOM_LIMIT
    if name == "circuit 4x6x12":
        spec = importlib.util.spec_from_file_location("sliced_network", ROOT / "examples" / "sliced_network.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        ops, subs = module.circuit(4, 6, 12)
        eq, _ = einc.planner.equation.sublist_equation([x for pair in zip(ops, subs) for x in pair])
        return eq, ops, 2 ** 16
    from einsum_benchmark.generators.structured.lattice import lattice
    sys.path.insert(0, str(ROOT))
    from bench.paths import _symbols
    made = lattice((6, 6), d_min=2, d_max=4, seed=2)
    eq, shapes = _symbols(str(made[0])), [tuple(int(d) for d in s) for s in made[1]]
    g = torch.Generator().manual_seed(0)
    return (eq if "->" in eq else eq + "->"), [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes], 1024


def child(name, again: int) -> dict:
    """One process's figures (run with the checkout to time on ``PYTHONPATH``)."""
    eq, ops, limit = _network(name)
    import einc
    import einc.api
    real, spent = einc.api.plan_for, [0.0, 0.0]

    def plan_for(*args, **kwargs):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return real(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t
            spent[1] += time.thread_time() - c
    einc.api.plan_for = plan_for
    parts = _timed_parts()
    gc.collect()        # the collection the imports' objects are due, not the planner's
    t, c = time.perf_counter(), time.thread_time()
    info = einc.explain(eq, *ops, memory_limit=limit)
    wall, cpu = time.perf_counter() - t, time.thread_time() - c
    planned, search_cpu, slicer_cpu = list(spent), parts["search"], parts["plan"] - parts["search"]
    repeats = [(math.nan,) * 4]     # again, einc's lazy imports done: the least of ``again``
    for _ in range(again):
        spent[:] = [0.0, 0.0]
        t, c = time.perf_counter(), time.thread_time()
        einc.explain(eq, *ops, memory_limit=limit)
        repeats.append((time.perf_counter() - t, time.thread_time() - c, *spent))
    again, again_cpu, again_plan, again_plan_cpu = (min(r[k] for r in repeats[1:] or repeats) for k in range(4))
    text = str(info)
    search = re.search(r"Path search: (.*)", text)
    slicer = re.search(r"Slicer: (.*?) \(einc", text)
    s = info.plan.slicing
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"einc": os.path.dirname(einc.__file__), "wall": wall, "cpu": cpu, "plan_wall": planned[0],
            "plan_cpu": planned[1], "process_cpu": usage.ru_utime + usage.ru_stime, "again": again,
            "again_cpu": again_cpu, "again_plan": again_plan, "again_plan_cpu": again_plan_cpu,
            "search_cpu": search_cpu, "slicer_cpu": slicer_cpu, "slicer": slicer.group(1) if slicer else "",
            "search": search.group(1) if search else "", "sliced": [info.plan.graph.names[i] for i in s.indices],
            "slices": s.num_slices, "estimated_ms": s.seconds * 1e3, "flops": info.plan.flops}


def _timed_parts() -> dict:
    """Thread CPU seconds in einc's path search (``einc.planner.search.find``, the greedy
    path and the search under the limit) and in the whole of the slicer's ``plan`` (the
    search included), each over its outermost calls, as a dict filled as they run."""
    from einc.planner import search, slicing
    parts, depth = {"search": 0.0, "plan": 0.0}, {"search": 0, "plan": 0}

    def wrapped(module, name, part):
        real = getattr(module, name)

        def timed(*args, **kwargs):
            c = time.thread_time()
            depth[part] += 1
            try:
                return real(*args, **kwargs)
            finally:
                depth[part] -= 1
                if not depth[part]:
                    parts[part] += time.thread_time() - c
        setattr(module, name, timed)
    wrapped(search, "find", "search")
    wrapped(slicing, "plan", "plan")
    return parts


def _run(checkout, name, cache, again=0) -> dict:
    from checkouts import child
    return child(Path(__file__), checkout, ("--child", name, "--again", again), cache)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="networks whose name holds this text")
    ap.add_argument("--against", default="", help="another einc checkout, timed in the same rounds")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--again", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.again)))
        return
    checkouts = [ROOT] + ([Path(args.against).resolve()] if args.against else [])
    names = [n for n in NETWORKS if args.only in n]
    with tempfile.TemporaryDirectory() as tmp:
        for checkout in checkouts:          # warm-up: bytecode written, nothing timed
            _run(checkout, names[0], Path(tmp) / f"warm-{checkouts.index(checkout)}")
        rows = {}
        for r in range(args.rounds):
            for name in names:
                for k, checkout in enumerate(checkouts[::-1] if r % 2 else checkouts):
                    cache = Path(tmp) / f"{r}-{name}-{k}"
                    first, second = _run(checkout, name, cache), _run(checkout, name, cache, AGAIN)
                    rows.setdefault((name, str(checkout)), []).append((first, second))
                    print(f"round {r} {name} {checkout}: first {first['wall']:.3f} s, second "
                          f"{second['wall'] * 1e3:.1f} ms (plan {second['plan_wall'] * 1e3:.1f} ms)",
                          file=sys.stderr)
    print(report(rows, os.getloadavg()))


def report(rows, load) -> str:
    """The Markdown table of ``rows`` (per network and checkout, its rounds' (first, second))."""
    med = statistics.median

    def ms(runs, key):
        return f"{med(r[key] for r in runs) * 1e3:.1f}"
    lines = [f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; medians of {len(next(iter(rows.values())))} "
             "rounds; explain and plan_for as wall ms (thread CPU ms)", "",
             "| network | einc | first: explain s, plan_for s, process CPU s | first: search, slicer "
             "(thread CPU ms) | second: explain, plan_for | "
             f"second, explain again (least of {AGAIN}): explain, plan_for | second: process CPU s | "
             "sliced indices, slices | estimated ms | flops | search (first process) | slicer (first process) |",
             "|---|---|---|---|---|---|---:|---|---:|---:|---|---|"]
    for (name, checkout), runs in rows.items():
        first = [f for f, _ in runs]
        second = [s for _, s in runs]
        f0 = first[0]
        lines.append(
            f"| {name} | {checkout} | {med(f['wall'] for f in first):.2f} ({med(f['cpu'] for f in first):.2f}), "
            f"{med(f['plan_wall'] for f in first):.2f}, {med(f['process_cpu'] for f in first):.2f} | "
            f"{ms(first, 'search_cpu')}, {ms(first, 'slicer_cpu')} | "
            f"{ms(second, 'wall')} ({ms(second, 'cpu')}), {ms(second, 'plan_wall')} ({ms(second, 'plan_cpu')}) | "
            f"{ms(second, 'again')} ({ms(second, 'again_cpu')}), {ms(second, 'again_plan')} "
            f"({ms(second, 'again_plan_cpu')}) | {med(s['process_cpu'] for s in second):.2f} | "
            f"{', '.join(f0['sliced'])} ({f0['slices']}) | {f0['estimated_ms']:.1f} | {f0['flops']:.4g} | "
            f"{f0['search']} | {f0['slicer']} |")
        if not all((f["sliced"], f["slices"], f["flops"]) == (s["sliced"], s["slices"], s["flops"]) for f, s in runs):
            lines.append(f"| {name} | {checkout} | (a second process sliced otherwise) | | | | | | | | | |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
