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

    python bench/dp_search.py [--count 300] [--seed 0] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import random
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


def networks(count: int, seed: int):
    """``[(name, equation, sizes)]``: the modules' networks, then ``count`` random ones."""
    from opt_einsum.testing import rand_equation
    rng = random.Random(seed)
    found = [(name, eq, sizes) for name, (eq, sizes) in MODULES.items()]
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
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
