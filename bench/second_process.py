"""Planning bench/paths.py's networks again in a second process, the path read from disk.

``--dense``: dense networks of 14-16 operands instead (einsum_benchmark's random regular graphs
of degree 3 to 6, sizes 2-8), whose path einc's dynamic programming search finds
(einc.planner.options._auto) and remembers where it took long enough.

For each network of bench/paths.py (einsum_benchmark's generators, 20-500 tensors), a new
cache folder (``EINC_CACHE_DIR``); a first process plans it (``einc.planner.plan_for`` of
the equation and shapes: the search runs, and its path is stored where the search ran
long enough to be, einc.planner.pathcache.STORE_SECONDS); then a second process, einc
imported before the clock, times the same ``plan_for``: wall and thread CPU time, einc's
lazy imports that call makes included, and which modules it imported.  The second
process then plans again ``--again`` times with its in-memory caches cleared (the disk
kept): the least of those is the planning alone, whatever a shared machine's load adds.
Bytecode is written and a warm-up process runs first, so compiling einc is not timed.

With ``--against DIR`` (another checkout of einc whose entries have the same key, e.g. a
``git archive`` of an older commit), the second process of each network runs ``--rounds``
times under each checkout, in alternating order, each its own copy of this script, both
reading the entry this checkout's first process stored; the tables give the median per
checkout and the paired per-round ratios (this checkout / the other) of the second
process's first ``plan_for``, thread CPU time and wall.

    python bench/second_process.py [--only 'NAME (TENSORS);NAME'] [--dense] [--again 20] [--against DIR --rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# (tensors, degree, seed): degree 3 and 4, and denser graphs, whose dp runs longest
DENSE = [(14, 3, 1), (14, 4, 1), (16, 4, 1), (14, 6, 3), (15, 6, 1), (16, 5, 2), (16, 6, 1)]


def dense(only=None):
    """``(name, equation, shapes)`` of the :data:`DENSE` networks (``only`` as bench/paths.py's)."""
    from einsum_benchmark.generators.random.randreg import regular
    wanted = [w.strip() for w in only.split(";") if w.strip()] if only else []
    for n, degree, seed in DENSE:
        eq, shapes = regular(n, degree, d_min=2, d_max=8, seed=seed)
        full = f"dense {degree}-regular seed {seed} ({n})"
        if not wanted or any(w in full for w in wanted):
            yield full, eq, [tuple(int(d) for d in s) for s in shapes]


def _network(name):
    from bench.paths import instances
    for full, eq, shapes in (dense if name.startswith("dense") else instances)(name):
        if full == name:
            return eq, shapes
    raise KeyError(name)


def _entries() -> dict:
    """``{file name: mtime_ns}`` of the path cache's folder (a read touches its entry)."""
    try:
        return {e.name: e.stat().st_mtime_ns for e in os.scandir(Path(os.environ["EINC_CACHE_DIR"]) / "paths")}
    except OSError:
        return {}


def child(name: str, again: int) -> dict:
    """One process's figures: ``plan_for`` once, then ``again`` times from a cleared memory."""
    eq, shapes = _network(name)
    import einc
    from einc.planner import plan_for
    from einc.planner.plan import path_cache_clear
    before, entries = set(sys.modules), _entries()
    t, c = time.perf_counter(), time.thread_time()
    plan = plan_for(eq, shapes)
    wall, cpu = time.perf_counter() - t, time.thread_time() - c
    read = any(_entries().get(e) != m for e, m in entries.items())     # (up to 16 operands, no note says so)
    imported = sorted(m for m in set(sys.modules) - before if "." not in m or m.startswith("einc."))
    least = [float("inf"), float("inf")]
    for _ in range(again):
        path_cache_clear()
        einc.cache_clear()
        t, c = time.perf_counter(), time.thread_time()
        plan_for(eq, shapes)
        least = [min(least[0], time.perf_counter() - t), min(least[1], time.thread_time() - c)]
    search = next((n for n in plan.notes if n.startswith("Path search")), "")
    return {"wall": wall, "cpu": cpu, "again": least[0], "again_cpu": least[1], "imported": imported,
            "remembered": "remembered" in search or "from disk" in search or read, "search": search,
            "steps": len(plan.path)}


def _run(name: str, cache: Path, again: int = 0, root: Path = ROOT) -> dict:
    from checkouts import child
    return child(root / "bench" / Path(__file__).name, root, ("--child", name, "--again", again), cache)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="as bench/paths.py's --only")
    ap.add_argument("--dense", action="store_true", help="dense networks of 14-16 operands (the dp's reach)")
    ap.add_argument("--again", type=int, default=20, help="plans from a cleared memory in the second process")
    ap.add_argument("--against", type=Path, help="another einc checkout, its second processes alternating")
    ap.add_argument("--rounds", type=int, default=5, help="second processes per checkout with --against")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.again)))
        return
    from bench.paths import instances
    names = [full for full, _, _ in (dense if args.dense else instances)(args.only)]
    if args.against:
        print(against(names, [ROOT, args.against.resolve()], args.rounds))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        _run(names[0], Path(tmp) / "warm")         # bytecode written, nothing timed
        for k, name in enumerate(names):
            cache = Path(tmp) / str(k)
            first, second = _run(name, cache), _run(name, cache, args.again)
            rows.append((name, first, second))
            print(f"{name}: first {first['wall']:.3f} s, second {second['wall'] * 1e3:.1f} ms", file=sys.stderr)
    print(report(rows, os.getloadavg()))


def against(names, roots, rounds: int) -> str:
    """Tables of the second process's first ``plan_for`` under each checkout of ``roots``
    (thread CPU time, then wall), ``rounds`` alternating rounds per network."""
    from checkouts import table
    found = {root: [{} for _ in range(rounds)] for root in roots}
    with tempfile.TemporaryDirectory() as tmp:
        for root in roots:
            _run(names[0], Path(tmp) / "warm", root=root)
        for k, name in enumerate(names):
            cache = Path(tmp) / str(k)
            _run(name, cache)
            for r in range(rounds):
                for root in roots if r % 2 == 0 else roots[::-1]:
                    found[root][r][name] = _run(name, cache, root=root)
            print(f"{name}: " + ", ".join(f"{found[root][0][name]['cpu'] * 1e3:.1f}" for root in roots) + " ms",
                  file=sys.stderr)
    lines = [f"Load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.", ""]
    for figure, what in (("cpu", "thread CPU ms"), ("wall", "wall ms")):
        rows = {root: [{n: runs[n][figure] for n in names} for runs in found[root]] for root in roots}
        lines += table(rows, roots, f"second process's plan_for, {what}", lambda key, m: f"{m * 1e3:.1f}") + [""]
    for root in roots:
        within = sum(statistics.median(runs[n]["wall"] for runs in found[root]) <= 0.010 for n in names)
        lines.append(f"{root}: median wall within 10 ms on {within} of {len(names)}.")
    return "\n".join(lines)


def report(rows, load) -> str:
    lines = [f"Load average after the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}.", "",
             "| network | steps | first process: plan_for s | path on disk | second process: plan_for ms "
             "(thread CPU ms) | its imports | again, the least: ms (thread CPU ms) |",
             "|---|---:|---:|---|---:|---|---:|"]
    for name, first, second in rows:
        imports = ", ".join(second["imported"]) or "none"
        lines.append(f"| {name} | {second['steps']} | {first['wall']:.3f} | "
                     f"{'yes' if second['remembered'] else 'no'} | {second['wall'] * 1e3:.1f} "
                     f"({second['cpu'] * 1e3:.1f}) | {imports} | {second['again'] * 1e3:.1f} "
                     f"({second['again_cpu'] * 1e3:.1f}) |")
    within = sum(second["wall"] <= 0.010 for _, _, second in rows)
    lines += ["", f"Second process within 10 ms: **{within} of {len(rows)}**."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
