"""Does einc's path objective rank paths as einc's torch executor runs them?

For each network, several candidate paths (greedy, random greedy trees of several seeds
and temperatures, the best of them by flops, by the former score and by the new one, and
past 16 tensors the paths einc's search finds with the former ranking and with the new
one) are contracted by ``einc.einsum(eq, *operands, optimize=path)`` (float32, 1 thread,
``--rounds`` interleaved rounds, medians of the calling thread's CPU time; a call under
5 ms repeated to about 5 ms a round).  Each path is scored three ways: opt_einsum's flops, the former score
(``einc.planner.search.predicted_seconds``: nominal flops, intermediates and steps) and
the new one (``einc.planner.objective.seconds``); reported per network: the Spearman rank
correlation of each score with the measured time, and the time of the path each score
picks against the fastest path measured (the new score's pick is
``einc.planner.objective.pick``'s: within 2 % flops decide).

``--fit`` instead times a training set (two-operand steps of every kind, and random trees
of small networks from other generators and seeds than the evaluation's) and fits the
objective's rates (:data:`einc.planner.objective.FEATURES`) by non-negative least squares
on relative error.  ``--sliced`` times einc under ``memory_limit`` with the former
search (opt_einsum's random greedy path under the limit) and the new one (trees ranked
as they are sliced).

    python bench/objective.py [--fit | --sliced] [--rounds 5] [--out bench/measured/objective-<UTC date>.md]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")

# The calling thread's CPU time: with one torch thread the contraction runs in it, and a
# machine shared with other jobs preempts it less than it stretches the wall clock.
CLOCK = time.thread_time
MAX_FLOPS = 1.5e9           # candidate paths above this (or its largest intermediate above 2**24) are left out


def network(eq, shapes):
    from bench.paths import network as net
    return net(eq, shapes)


def operands(eq, shapes, seed=0):
    import torch
    gen = torch.Generator().manual_seed(seed)
    lhs, out = eq.split("->")
    return [(torch.rand(s, generator=gen) + 0.5) * math.prod(d ** -0.5 for c, d in zip(t, s) if c not in out)
            for t, s in zip(lhs.split(","), shapes)]


def trees(net, count, seed):
    """Distinct linear paths: cotengrust's greedy, then seeded random greedy trees."""
    import cotengrust

    from einc.planner.search import _linear, _strings
    inputs, output, sizes = net
    args = _strings(inputs, output, sizes)
    found = [_linear(cotengrust.ssa_to_linear(cotengrust.optimize_greedy(*args, use_ssa=True), len(inputs)))]
    rng = random.Random(seed)
    for k in range(4 * count):
        if len(found) >= count:
            break
        ssa = cotengrust.optimize_greedy(*args, temperature=rng.choice((0.01, 0.1, 0.3, 1.0)),
                                         costmod=rng.uniform(0.1, 4), seed=seed + k, use_ssa=True)
        path = _linear(cotengrust.ssa_to_linear(ssa, len(inputs)))
        if path not in found:
            found.append(path)
    return found


def scores(net, path):
    from einc.planner import objective
    from einc.planner.search import path_cost, predicted_seconds
    inputs, output, sizes = net
    flops, written, largest, steps = path_cost(inputs, output, sizes, path)
    return {"flops": flops, "largest": largest, "old": predicted_seconds(flops, written, steps),
            "new": objective.seconds(inputs, output, sizes, path),
            "features": objective.features(inputs, output, sizes, path)}


def time_paths(eq, shapes, paths, rounds):
    """Median seconds of ``einc.einsum(eq, ..., optimize=path)`` per path, interleaved."""
    import einc
    ops = operands(eq, shapes)
    times = [[] for _ in paths]
    reps = []
    for p in paths:
        for _ in range(3):      # planned and built, and the calls after the first settled, before the clock
            t = CLOCK()
            einc.einsum(eq, *ops, optimize=list(p))
        reps.append(max(1, int(0.005 / max(CLOCK() - t, 1e-6))))    # calls of a few ms timed together
    for _ in range(rounds):
        for k, p in enumerate(paths):
            t = CLOCK()
            for _ in range(reps[k]):
                einc.einsum(eq, *ops, optimize=list(p))
            times[k].append((CLOCK() - t) / reps[k])
    return [statistics.median(t) for t in times]


def spearman(x, y):
    def ranks(v):           # tied values share their mean rank
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        k = 0
        while k < len(order):
            j = k
            while j + 1 < len(order) and v[order[j + 1]] == v[order[k]]:
                j += 1
            for m in range(k, j + 1):
                r[order[m]] = (k + j) / 2
            k = j + 1
        return r
    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else float("nan")


# ----------------------------------------------------------------------- evaluation

def evaluation_instances():
    """The networks of bench/paths.py that contract well under a second, and the suite's
    multi-operand CPU workloads."""
    from bench.paths import instances
    keep = ("3-regular (20)", "3-regular (60)", "3-regular (100)", "connected (100)", "hypernetwork (60)",
            "lattice 8x8", "tree (100)", "matrix chain (50)", "matrix chain (500)", "MPS product (50)",
            "language model (52)")
    for name, eq, shapes in instances():
        if any(k in name for k in keep):
            yield name, eq, shapes
    suite = json.loads((ROOT / "bench" / "suite.json").read_text())["workloads"]
    for w in suite:
        cpu = w["variants"].get("cpu")
        if w["num_operands"] >= 3 and cpu:
            yield f"suite {w['id']} ({w['num_operands']})", w["equation"], [tuple(s) for s in cpu["shapes"]]


def candidates(net, seed=0, count=10):
    """``{label: path}``: greedy, random greedy trees, and the best of them by each score."""
    found = trees(net, 4 * count, seed)
    scored = [(p, scores(net, p)) for p in found]
    scored = [(p, s) for p, s in scored if s["flops"] <= MAX_FLOPS and s["largest"] <= 1 << 24]
    if not scored:
        return {}
    out = {"greedy": scored[0][0]} if scored[0][0] == found[0] else {}
    for key in ("flops", "old"):
        out.setdefault(f"best by {key}", min(scored, key=lambda ps: ps[1][key])[0])
    from einc.planner import objective
    out.setdefault("best by new", scored[objective.pick([(s["flops"], s["new"]) for _, s in scored])][0])
    if len(net[0]) > 16:            # einc's own search past dynamic programming's reach
        for label, former in (("search, former ranking", True), ("search, new ranking", False)):
            out[label] = searched(net, former)
    rng = random.Random(seed)
    rest = [p for p, _ in scored if p not in out.values()]
    for k, p in enumerate(rng.sample(rest, max(0, min(len(rest), count - len(set(out.values())))))):
        out[f"tree {k}"] = p
    return out


def searched(net, former):
    """The path einc's search finds (a fresh cache); with ``former``, every ranking by the
    former nominal score (einc.planner.search.predicted_seconds) instead of the objective,
    and the hyper-optimizer's by cotengra's combo of flops and writes."""
    import os
    import tempfile

    from einc.planner import objective
    from einc.planner import search as S
    inputs, output, sizes = net
    saved = objective.seconds, objective.hyper_objective
    if former:
        objective.seconds = lambda i, o, s, p, memo=None: S.predicted_seconds(*(lambda c: (c[0], c[1], c[3]))(
            S.path_cost(i, o, s, p)))
        objective.hyper_objective = lambda limit, factor: f"combo-{factor:g}"
    S._ranked.cache_clear()
    try:
        os.environ["EINC_CACHE_DIR"] = tempfile.mkdtemp()
        return tuple(map(tuple, S.search(inputs, output, {i: d or 1 for i, d in sizes.items()})[0]))
    finally:
        objective.seconds, objective.hyper_objective = saved
        S._ranked.cache_clear()


def evaluate(rounds):
    import torch

    from einc.planner import objective
    torch.set_num_threads(1)
    rows = []
    for name, eq, shapes in evaluation_instances():
        net = network(eq, shapes)
        cands = candidates(net)
        paths = list(dict.fromkeys(cands.values()))
        if len(paths) < 3:
            print(f"{name}: fewer than 3 distinct paths, left out", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        times = time_paths(eq, shapes, paths, rounds)
        sc = [scores(net, p) for p in paths]
        row = {"name": name, "paths": len(paths), "fastest": min(times)}
        for key in ("flops", "old", "new"):
            vals = [s[key] for s in sc]
            row[f"rho {key}"] = spearman(vals, times)
            row[f"pick {key}"] = times[vals.index(min(vals))] / min(times)
        row["pick new"] = times[objective.pick([(s["flops"], s["new"]) for s in sc])] / min(times)
        row["predicted/measured"] = sc[times.index(min(times))]["new"] / min(times)
        for label in ("search, former ranking", "search, new ranking"):
            row[label] = times[paths.index(cands[label])] / min(times) if label in cands else math.nan
        rows.append(row)
        print(name, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()},
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------- the fit

def pairwise_instances(seed=1, count=150):
    """Two-operand steps of every kind: matrix products (batched or not, short or long
    sides), multiply-and-sums, outer and elementwise products, lonely summed indices."""
    rng = random.Random(seed)
    kinds = ("ij,jk->ik", "bij,bjk->bik", "abij,bjk->abik", "ijk,jkl->il", "ij,ij->i", "bij,bij->b",
             "ij,kl->ijkl", "ij,ij->ij", "ijk,kl->il", "abc,cd->abd", "ijkl,lkm->mij", "ij,j->i", "abc,abc->")
    for k in range(count):
        eq = kinds[k % len(kinds)]
        letters = sorted(set(eq) - set(",->"))
        dims = {c: rng.choice((2, 4, 8, 16, 32, 64, 128, 256, 512)) for c in letters}
        lhs = eq.split("->")[0].split(",")
        shapes = [tuple(dims[c] for c in t) for t in lhs]
        if max(math.prod(s) for s in shapes) > 1 << 22 or math.prod(dims.values()) > 1 << 27 or \
                math.prod(dims.values()) < 1 << 12:
            continue
        yield f"pair {eq}", eq, shapes


def training_instances():
    from einsum_benchmark.generators.random.connected_network import connected_network
    from einsum_benchmark.generators.random.randreg import regular
    from einsum_benchmark.generators.structured.lattice import lattice
    from einsum_benchmark.generators.structured.matrix_chain import generate_mcm

    from bench.paths import _symbols
    made = [("3-regular (40)", lambda: regular(40, 3, d_min=2, d_max=4, seed=7)),
            ("3-regular (30)", lambda: regular(30, 3, d_min=3, d_max=6, seed=8)),
            ("connected (40)", lambda: connected_network(40, 2.5, max_axis_size=6, seed=3)),
            ("lattice 6x6", lambda: lattice((6, 6), d_min=2, d_max=5, seed=4)),
            ("lattice 5x5", lambda: lattice((5, 5), d_min=4, d_max=8, seed=9)),
            ("3-regular (24)", lambda: regular(24, 3, d_min=4, d_max=8, seed=10)),
            ("lattice 4x4x3", lambda: lattice((4, 4, 3), d_min=2, d_max=3, seed=5)),
            ("matrix chain (20)", lambda: generate_mcm(20, seed=6)),
            ("3-regular (70)", lambda: regular(70, 3, d_min=2, d_max=4, seed=12)),
            ("connected (80)", lambda: connected_network(80, 2.5, max_axis_size=4, seed=13)),
            ("lattice 7x8", lambda: lattice((7, 8), d_min=2, d_max=4, seed=14))]
    for name, make in made:
        eq, shapes = make()[:2]
        eq = _symbols(str(eq))
        if "->" not in eq:
            continue
        yield name, eq, [tuple(int(d) for d in s) for s in shapes]


def fit(rounds):
    import numpy as np
    import torch
    from scipy.optimize import nnls

    from einc.planner import objective
    torch.set_num_threads(1)
    xs, ys, names = [], [], []
    samples = [(n, e, s, None) for n, e, s in pairwise_instances()]
    for name, eq, shapes in training_instances():
        net = network(eq, shapes)
        for p in trees(net, 12, seed=11):
            sc = scores(net, p)
            if sc["flops"] <= MAX_FLOPS / 3 and sc["largest"] <= 1 << 22:
                samples.append((name, eq, shapes, p))
    for name, eq, shapes, p in samples:
        net = network(eq, shapes)
        path = p or ((0, 1),)
        t = time_paths(eq, shapes, [path], rounds)[0]
        xs.append(objective.features(*net, path))
        ys.append(t)
        names.append(name)
    a, y = np.array(xs, dtype=float), np.array(ys)
    w = 1 / y       # relative error
    rates, _ = nnls(a * w[:, None], y * w)
    pred = a @ rates
    old = a @ np.array(objective.RATES)
    err = np.abs(np.log(pred / y))
    err_old = np.abs(np.log(old / y))
    return rates, len(y), float(np.median(err)), float(np.median(err_old)), float(np.max(err))


# ----------------------------------------------------------------------- under a memory limit

def sliced_rows(rounds):
    """einc under ``memory_limit``: the former search (opt_einsum's random greedy path under the
    limit; einc's slicer then compares it with the unlimited path) against the search that
    ranks its trees as sliced.  Both run the real ``einc.einsum`` with fresh caches."""
    import os
    import tempfile

    import opt_einsum
    import torch
    from einsum_benchmark.generators.random.randreg import regular
    from einsum_benchmark.generators.structured.lattice import lattice

    import einc
    from bench.paths import _symbols
    from einc.planner import search
    from einc.planner.plan import path_cache_clear
    torch.set_num_threads(1)
    cases = [("3-regular (24)", regular(24, 3, d_min=2, d_max=4, seed=6), (256, 1024)),
             ("3-regular (40)", regular(40, 3, d_min=2, d_max=4, seed=3), (1024, 4096)),
             ("lattice 6x6", lattice((6, 6), d_min=2, d_max=4, seed=2), (256, 1024))]

    def former_limited(ctg, inputs, output, size_dict, memory_limit, seed, t0, path, greedy, budget):
        # opt_einsum's random greedy path under the limit alone, 16 to 128 trials as half the budget affords
        trials = max(16, min(128, int(0.5 * budget / (search.LIMITED_TRIAL_SECONDS * sum(map(len, inputs))))))
        with search._seeded(seed):
            found = search._linear(opt_einsum.path_random.random_greedy(
                [set(t) for t in inputs], set(output), size_dict, memory_limit, max_repeats=trials))
        return found, search._report("random greedy under the limit (former)", t0, trials, "", greedy,
                                     search._predict(inputs, output, size_dict, found), inputs, output, size_dict,
                                     found, budget)
    former = {"_limited": former_limited}
    rows = []
    for name, made, limits in cases:
        eq, shapes = _symbols(str(made[0])), [tuple(int(d) for d in s) for s in made[1]]
        if "->" not in eq:
            eq += "->"
        ops = operands(eq, shapes)
        ref = opt_einsum.contract(eq, *[o.double() for o in ops], backend="torch")
        for limit in limits:
            row = {"name": name, "limit": limit}
            calls = {}
            for label in ("former", "new"):
                saved = {k: getattr(search, k) for k in former}
                if label == "former":
                    for k, v in former.items():
                        setattr(search, k, v)
                try:
                    os.environ["EINC_CACHE_DIR"] = tempfile.mkdtemp()
                    einc.cache_clear()
                    path_cache_clear()
                    t = time.perf_counter()
                    out = einc.einsum(eq, *ops, memory_limit=limit)
                    row[f"{label} first s"] = time.perf_counter() - t
                    info = einc.explain(eq, *ops, memory_limit=limit)
                except einc.MemoryLimitError as e:     # a slicing estimated far dearer than the unsliced
                    row[f"{label} first s"] = time.perf_counter() - t
                    row[f"{label} slices"] = str(e).split(" slices")[0].rsplit(" ", 1)[-1] + " (refused)"
                    row[f"{label} err"], row[f"{label} ms"] = 0.0, math.nan
                    continue
                finally:
                    for k, v in saved.items():
                        setattr(search, k, v)
                err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
                row[f"{label} slices"] = info.slicing.num_slices if info.slicing else 1
                row[f"{label} err"] = err
                calls[label] = info
            times = {k: [] for k in calls}
            for _ in range(rounds):
                for label, info in calls.items():
                    t = CLOCK()
                    einc.einsum(eq, *ops, optimize=list(info.path), memory_limit=limit)
                    times[label].append(CLOCK() - t)
            for label in calls:
                row[f"{label} ms"] = statistics.median(times[label]) * 1e3
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--sliced", action="store_true", help="time the search under a memory limit, former and new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.fit:
        from einc.planner import objective
        rates, n, err, err_old, worst = fit(args.rounds)
        print(f"{n} samples; median |log(predicted/measured)| {err:.3f} (with the module's rates {err_old:.3f}), "
              f"worst {worst:.3f}")
        for name, r in zip(objective.FEATURES, rates):
            print(f"  {name}: {r:.4g}")
        return
    if args.sliced:
        for r in sliced_rows(args.rounds):
            print(f"| {r['name']} | {r['limit']} | {r['former slices']} | {r['former ms']:.3g} | {r['new slices']} | "
                  f"{r['new ms']:.3g} | {r['former ms'] / r['new ms']:.2f} | {r['former first s']:.2f} | "
                  f"{r['new first s']:.2f} | {max(r['former err'], r['new err']):.1e} |")
        return
    rows = evaluate(args.rounds)
    lines = ["| network (tensors) | paths | fastest ms | rho flops | rho former | rho new | picked/fastest: flops "
             "| former | new | einc's search/fastest: former ranking | new ranking | predicted/measured (fastest) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['paths']} | {r['fastest'] * 1e3:.3g} | {r['rho flops']:.2f} | "
                     f"{r['rho old']:.2f} | {r['rho new']:.2f} | {r['pick flops']:.2f} | {r['pick old']:.2f} | "
                     f"{r['pick new']:.2f} | {r['search, former ranking']:.2f} | {r['search, new ranking']:.2f} | "
                     f"{r['predicted/measured']:.2f} |")

    def mean(key):
        found = [r[key] for r in rows if r[key] == r[key]]
        return statistics.mean(found)

    def gmean(key):
        found = [r[key] for r in rows if r[key] == r[key]]
        return math.exp(statistics.mean(math.log(x) for x in found))
    lines.append("")
    lines.append(f"Mean rho (ties rank alike; networks whose paths all tie left out): flops {mean('rho flops'):.2f}, "
                 f"former {mean('rho old'):.2f}, new {mean('rho new'):.2f}. "
                 f"Geometric mean of picked/fastest: flops {gmean('pick flops'):.3f}, former {gmean('pick old'):.3f}, "
                 f"new {gmean('pick new'):.3f}; einc's search, former ranking {gmean('search, former ranking'):.3f}, "
                 f"new ranking {gmean('search, new ranking'):.3f}.")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=ROOT).stdout.strip()
    head = (f"- Machine: {platform.machine()}, {platform.platform()}, Python {platform.python_version()}; "
            f"einc at {rev}; "
            f"float32, 1 thread, medians of {args.rounds} interleaved rounds of thread CPU time; "
            f"{time.perf_counter() - t0:.0f} s in all")
    text = "\n".join([head, "", *lines])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
