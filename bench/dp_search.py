"""The dynamic programming search of 6-16 operands: einc's (cotengrust's ``dp`` started at
a random greedy path's cost, ``einc.planner.options._dynamic_programming``) against
cotengrust's from its default start, on the same networks.

Networks: the 10-operand equations of tensorly-torch's CP and Tucker linear layers, the
16-tensor MPS norm of bench/real_modules.py's quimb-mps8, and ``--count`` random ones
(``opt_einsum.testing.rand_equation``: 6-16 tensors, regularity 2-4, 0-4 output indices,
sizes 2 to 4-16, one in seven with an index on every tensor).  Each network: both
searches in turn, ``--repeats`` times, the least thread time of each; then the two paths
are compared (einc's cost model, ``einc.planner.pathcost.path_cost``: flops, elements
written, largest intermediate).  Prints the totals, the networks whose path changed and
the slowest few.  1 thread; no torch.

``--opt-einsum``: einc's whole search of 3-16 operands (``options._auto``) against what
torch.einsum pays for its path, opt_einsum's ``contract_path(..., optimize="auto")``, and
against its ``optimize="dp"``, each the least thread time of ``--repeats`` in this process,
on the modules' networks (with the 3-5 operand ones of e3nn-tp, mace, torch-harmonics and
tensorly-torch's block-TT) and ``--count`` random ones.  ``--fresh N``: the same modules'
first search in a fresh process (``import einc`` done, the search's own imports not),
einc's and opt_einsum's ``auto`` in turn, N processes a side: what a first step pays.

``--costs``: the paths, not the time: einc's ``auto`` path of 3-16 operands against
opt_einsum's ``auto`` path (what torch.einsum runs), in opt_einsum's flop count
(``einc.planner.pathcost.path_cost``), and up to 5 operands against opt_einsum's
``optimal`` as it is (einc's search before it tagged the operands), on the modules'
networks, ``bgk,bkd,bk->bgd`` (opt_einsum issue 254) and ``--count`` random networks of
few indices (1-3 of 2-8 on each of 3-16 operands, sizes 1-100: indices on three or more
operands, equal index sets); per operand count, how many paths cost less, the same or
more, and the geomean and largest ratio of the flops; then each search's thread time, once
per network (einc's a fresh search: its paths are not remembered up to 16 operands).

    python bench/dp_search.py [--count 300] [--seed 0] [--repeats 3]
    python bench/dp_search.py --opt-einsum --count 20 [--fresh 5]
    python bench/dp_search.py --costs --count 2000
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODULES = {
    "tltorch-cp": ("bcdef,a,ga,ha,ia,ja,ca,da,ea,fa->bghij", {"a": 1024, "b": 64, **dict.fromkeys("cdefghij", 4)}),
    "tltorch-tucker": ("qmnop,abcdefgh,ia,jb,kc,ld,me,nf,og,ph->qijkl",
                       {"q": 64, **dict.fromkeys("abcdefghijklmnop", 4)}),
    "quimb-mps8": ("AB,ACD,CEF,EGH,GIJ,IKL,KMN,MO,PB,PQD,QRF,RSH,STJ,TUL,UVN,VO->",
                   {**dict.fromkeys("ACEGIKMPQRSTUV", 16), **dict.fromkeys("BDFHJLNO", 2)}),
}


# The modules' searches of 3-5 operands (e3nn-tp's change-of-basis einsums and mace's share one
# equation; this is the largest of their sizes).
SMALL = {
    "harmonics-vector": ("abcd,d,c->abcd", {"a": 2, "b": 32, "c": 32, "d": 64}),
    "e3nn-tp": ("ab,cd,ef,acf->bde", dict.fromkeys("abcdef", 6)),
    "tltorch-blocktt": ("abcde,bfgh,chij,djkl,elmn->agikm",
                        {"a": 64, **dict.fromkeys("bcdegikm", 4), **dict.fromkeys("hjl", 32), "f": 1, "n": 1}),
}


def networks(count: int, seed: int, small: bool = False):
    """``[(name, equation, sizes)]``: the modules' networks, then ``count`` random ones."""
    from opt_einsum.testing import rand_equation
    rng = random.Random(seed)
    found = [(name, eq, sizes) for name, (eq, sizes) in ({**SMALL, **MODULES} if small else MODULES).items()]
    for k in range(count):
        n, reg, n_out = rng.randint(6, 16), rng.choice([2, 3, 3, 4]), rng.choice([0, 0, 2, 4])
        eq, _, sizes = rand_equation(n, reg, n_out=n_out, d_min=2, d_max=rng.choice([4, 9, 16]),
                                     seed=rng.randrange(10 ** 6), global_dim=rng.random() < 0.15,
                                     return_size_dict=True)
        found.append((f"random {k}", eq, {c: int(s) for c, s in sizes.items()}))
    return found


def numbered(eq: str, sizes: dict):
    """``(inputs, output, sizes)`` with int labels, as einc's searches take them."""
    lhs, out = eq.split("->")
    label = {c: k for k, c in enumerate(sorted(sizes))}
    return [{label[c] for c in t} for t in lhs.split(",")], {label[c] for c in out}, \
        {label[c]: s for c, s in sizes.items()}


def default_start(inputs, output, sizes):
    """cotengrust's ``dp`` from its own start (what einc ran before the cap)."""
    import cotengrust
    import opt_einsum
    label = {i: opt_einsum.get_symbol(k) for k, i in enumerate(sizes)}
    found = cotengrust.optimize_optimal([[label[i] for i in t] for t in inputs], [label[i] for i in output],
                                        {label[i]: float(s) for i, s in sizes.items()}, minimize="flops")
    return [tuple(c) for c in found]


def least(fn, args, repeats: int):
    best, result = math.inf, None
    for _ in range(repeats):
        start = time.thread_time()
        result = fn(*args)
        best = min(best, time.thread_time() - start)
    return best, result


def contract_path(eq: str, sizes: dict, strategy: str):
    """opt_einsum's search as torch.einsum runs it (from shapes here: no torch)."""
    import opt_einsum
    shapes = [tuple(sizes[c] for c in t) for t in eq.split("->")[0].split(",")]
    return opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=strategy)


def against_opt_einsum(count: int, seed: int, repeats: int) -> None:
    """einc's search against opt_einsum's ``auto`` and ``dp``, warm, in this process."""
    from einc.planner.options import _auto
    print("| network | operands | einc ms | opt_einsum auto ms | opt_einsum dp ms | einc / auto |\n"
          "|---|---:|---:|---:|---:|---:|")
    totals = [0.0, 0.0, 0.0]
    for name, eq, sizes in networks(count, seed, small=True):
        n = eq.count(",") + 1
        times = [least(_auto, numbered(eq, sizes), repeats)[0]] + \
            [least(contract_path, (eq, sizes, strategy), repeats)[0] for strategy in ("auto", "dp")]
        totals = [a + b for a, b in zip(totals, times)]
        print(f"| {name} | {n} | " + " | ".join(f"{1e3 * t:.3f}" for t in times) + f" | {times[0] / times[1]:.2f} |")
    print("| total | | " + " | ".join(f"{1e3 * t:.1f}" for t in totals) + f" | {totals[0] / totals[1]:.2f} |")


def first_search(name: str, side: str) -> None:
    """Worker: the thread time of a fresh process's first search of module ``name``."""
    import einc  # noqa: F401  (as a patched first step finds it: imported)
    eq, sizes = {**SMALL, **MODULES}[name]
    if side == "einc":
        from einc.planner.options import _auto
        start = time.thread_time()
        _auto(*numbered(eq, sizes))
    else:
        start = time.thread_time()
        contract_path(eq, sizes, "auto")
    print(time.thread_time() - start)


def fresh(runs: int) -> None:
    """Each module's first search, einc's and opt_einsum's ``auto``, ``runs`` fresh processes a side."""
    print("| network | einc ms (median, range) | opt_einsum auto ms | einc / auto |\n|---|---:|---:|---:|")
    for name in {**SMALL, **MODULES}:
        found = {"einc": [], "auto": []}
        for k in range(runs):
            for side in (("einc", "auto") if k % 2 == 0 else ("auto", "einc")):
                out = subprocess.run([sys.executable, __file__, "--first-search", name, side], check=True,
                                     capture_output=True, text=True).stdout
                found[side].append(1e3 * float(out.split()[-1]))
        e, a = (statistics.median(found[s]) for s in ("einc", "auto"))
        print(f"| {name} | {e:.2f} ({min(found['einc']):.2f}-{max(found['einc']):.2f}) | {a:.2f} "
              f"({min(found['auto']):.2f}-{max(found['auto']):.2f}) | {e / a:.2f} |")


def shared_index_networks(count: int, seed: int):
    """``count`` random networks of 3-16 operands, each of 1-3 of 2-8 indices (sizes 1-100)."""
    rng = random.Random(seed)
    found = []
    for k in range(count):
        n, letters = rng.randint(3, 16), "abcdefgh"[:rng.randint(2, 8)]
        terms = ["".join(sorted(set(rng.choices(letters, k=rng.randint(1, 3))))) for _ in range(n)]
        used = sorted(set("".join(terms)))
        out = "".join(c for c in used if rng.random() < 0.3)
        found.append((f"shared {k}", ",".join(terms) + "->" + out,
                      {c: rng.choice([1, 2, 3, 5, 8, 17, 64, 100]) for c in used}))
    return found


def flops_against_opt_einsum(count: int, seed: int) -> None:
    """einc's ``auto`` paths against opt_einsum's ``auto`` (and ``optimal``) in flops."""
    import opt_einsum

    from einc.planner.options import _auto
    from einc.planner.pathcost import path_cost
    nets = [(name, eq, sizes) for name, (eq, sizes) in {**SMALL, **MODULES}.items()] + \
        [("opt_einsum-254", "bgk,bkd,bk->bgd", {"b": 64, "g": 8, "k": 4096, "d": 128})] + \
        shared_index_networks(count, seed)
    rows: dict = {}
    times: dict = {}
    for name, eq, sizes in nets:
        net = numbered(eq, sizes)
        n = len(net[0])
        (einc_s, einc), (auto_s, auto) = least(_auto, net, 1), least(contract_path, (eq, sizes, "auto"), 1)
        times.setdefault(n, []).append((einc_s, auto_s))
        flops = {"einc": path_cost(*net, einc)[0], "auto": path_cost(*net, auto[0])[0]}
        if n <= 5:
            flops["optimal"] = path_cost(*net, opt_einsum.paths.optimal(*net))[0]
        for peer in ("auto", "optimal"):
            if peer in flops:
                rows.setdefault((n, peer), []).append((flops["einc"] / flops[peer], name, eq, sizes))
        if not name.startswith("shared"):
            print(f"{name} ({n} operands): einc {flops['einc']:.4g} flops, opt_einsum auto {flops['auto']:.4g}"
                  + (f", optimal {flops['optimal']:.4g}" if "optimal" in flops else ""))
    print("\n| operands | against | networks | einc cheaper | same | einc costlier | geomean einc / peer |"
          " largest einc / peer |\n|---:|---|---:|---:|---:|---:|---:|---:|")
    for (n, peer), found in sorted(rows.items()):
        ratios = [r for r, *_ in found]
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"| {n} | {peer} | {len(ratios)} | {sum(r < 1 for r in ratios)} | {sum(r == 1 for r in ratios)} | "
              f"{sum(r > 1 for r in ratios)} | {geo:.3f} | {max(ratios):.3f} |")
    worst = max((f for (n, peer), found in rows.items() if peer == "auto" for f in found), key=lambda f: f[0])
    print(f"\nlargest against auto: {worst[0]:.2f}x, {worst[2]} {worst[3]}")
    print("\n| operands | einc's search, ms: median | max | opt_einsum's `auto` (contract_path), ms: median | max |"
          "\n|---:|---:|---:|---:|---:|")
    for n, found in sorted(times.items()):
        ms = [[1e3 * t[k] for t in found] for k in (0, 1)]
        print(f"| {n} | {statistics.median(ms[0]):.2f} | {max(ms[0]):.2f} | {statistics.median(ms[1]):.2f} | "
              f"{max(ms[1]):.2f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--opt-einsum", action="store_true", help="einc's search against opt_einsum's auto and dp")
    parser.add_argument("--fresh", type=int, default=0, help="with --opt-einsum: N fresh processes a side")
    parser.add_argument("--costs", action="store_true", help="the paths' flops against opt_einsum's auto")
    parser.add_argument("--first-search", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.costs:
        flops_against_opt_einsum(args.count, args.seed)
        return 0
    if args.first_search:
        first_search(*args.first_search)
        return 0
    if args.opt_einsum:
        against_opt_einsum(args.count, args.seed, args.repeats)
        if args.fresh:
            fresh(args.fresh)
        return 0
    from einc.planner.options import _dynamic_programming
    from einc.planner.pathcost import path_cost
    rows, changed = [], []
    for name, eq, sizes in networks(args.count, args.seed):
        net = numbered(eq, sizes)
        before, old = least(default_start, net, args.repeats)
        after, new = least(lambda *a: _dynamic_programming(*a, None), net, args.repeats)
        rows.append((name, len(net[0]), before, after))
        if old != new:
            costs = [path_cost(*net, p)[:3] for p in (old, new)]
            changed.append(f"{name} ({len(net[0])} tensors): flops, written, largest {costs[0]} -> {costs[1]}"
                           + ("" if costs[0][0] == costs[1][0] else "  FLOPS DIFFER"))
    total = [sum(r[k] for r in rows) for k in (2, 3)]
    print(f"{len(rows)} networks: cotengrust's start {1e3 * total[0]:.1f} ms, einc's {1e3 * total[1]:.1f} ms "
          f"({total[1] / total[0]:.2f}x)")
    for name, n, before, after in rows[:len(MODULES)]:
        print(f"  {name} ({n} tensors): {1e3 * before:.2f} -> {1e3 * after:.2f} ms")
    worse = sorted(rows, key=lambda r: r[3] - r[2])[-3:]
    print("most slowed:", "; ".join(f"{r[0]} ({r[1]}) {1e3 * r[2]:.2f} -> {1e3 * r[3]:.2f} ms" for r in worse))
    print(f"paths changed: {len(changed)}")
    for line in changed:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
