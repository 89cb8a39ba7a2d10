"""Planning small calls: the planner and the layout choice of e3nn-tp's first step, alone.

e3nn's ``FullyConnectedTensorProduct`` (bench/real_modules.py's ``e3nn-tp``) makes, in its
first step, nine new size classes of two-operand equations (each planned by
``einc.planner.plan_for``) and six matrix products whose layout ``ttgt.choose`` picks.
Those calls, recorded once and written out below, are replayed in a fresh process (1
thread, thread CPU time, garbage collection off):

- ``plan_for, first``: the nine plans in the step's order, the process's first plans of
  two operands (after the module's four four-operand ones, planned at its construction);
- ``choose, first``: the six layout choices, the process's first;
- ``plan_for, again`` and ``choose, again``: the same calls at other sizes (the size of 384
  and 24 plus the round's number), the path cache and the layout choice's memos cleared,
  the median of ``--repeat`` rounds.

With ``--against DIR`` (another checkout of einc, e.g. a ``git archive`` of an older
commit), each round runs one fresh process per checkout, in alternating order, and the
paired per-round ratios (this checkout / the other) are given as their median with a
95 % interval.

    python bench/small_plans.py [--rounds 7] [--repeat 100] [--against /tmp/einc-before]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BUILT = [("ij,kl,mn,ikn->jlm", [(3, 3), (3, 3), (6, 6), (3, 3, 6)]),
         ("ij,kl,mn,ikn->jlm", [(3, 3), (6, 6), (3, 3), (3, 6, 3)]),
         ("ij,kl,mn,ikn->jlm", [(6, 6), (3, 3), (3, 3), (6, 3, 3)]),
         ("ij,kl,mn,ikn->jlm", [(6, 6), (6, 6), (6, 6), (6, 6, 6)])]
PLANS = [("edb,eca->ecdab", [(384, 1, 1), (384, 24, 1)]), ("cb,ca->cba", [(384, 1), (384, 24)]),
         ("edb,eca->ecdab", [(384, 1, 3), (384, 24, 1)]), ("dbc,dba->dca", [(384, 1, 24), (384, 1, 3)]),
         ("edb,eca->ecdab", [(384, 1, 1), (384, 24, 3)]), ("dc,dba->dcba", [(384, 1), (384, 24, 3)]),
         ("dca,dba->dcb", [(384, 1, 3), (384, 24, 3)]), ("ecab,eacd->edb", [(384, 1, 3, 6), (384, 3, 1, 24)]),
         ("edab,eca->edbc", [(384, 1, 6, 3), (384, 24, 6)])]
# (ta, tb, out, sizes), each chosen with worth_sparing 65536, float32, broadcast and loops off
CHOICES = [((0, 1, 2), (0, 3, 2), (0, 1, 3), (384, 1, 3, 24)),
           ((0, 1, 2, 3), (0, 2, 1, 4), (0, 4, 3), (384, 1, 3, 6, 24)),
           ((0, 1, 2, 3), (0, 2, 1, 4), (0, 4, 3), (384, 1, 3, 3, 24)),
           ((0, 1, 2, 3), (0, 4, 2), (0, 1, 3, 4), (384, 1, 6, 3, 24)),
           ((0, 1, 2), (0, 3, 2), (0, 1, 3), (384, 1, 6, 24)),
           ((0, 1, 2, 3), (0, 2, 1, 4), (0, 4, 3), (384, 1, 6, 6, 24))]


def _at(dims, r):
    """``dims`` with the sizes that are neither 1, 3 nor 6 (the batch of 384, the 24
    channels) grown by ``r``: other sizes, the same pattern of size-1 dimensions."""
    return tuple(n if n in (1, 3, 6) else n + r for n in dims)


def one_round(repeat: int) -> dict:
    """One process's times, in seconds."""
    from einc.planner import plan, plan_for
    from einc.planner.equation import parse
    from einc.runtime.torch_executor import ttgt

    clock = time.thread_time
    gc.disable()
    plans = [(parse(eq), shapes) for eq, shapes in BUILT + PLANS]
    for eq, shapes in plans[:len(BUILT)]:
        plan_for(eq, shapes)

    def plan_all(r):
        for eq, shapes in plans[len(BUILT):]:
            plan_for(eq, [_at(s, r) for s in shapes])

    def choose_all(r):
        for ta, tb, out, sizes in CHOICES:
            ttgt.choose(ta, tb, out, _at(sizes, r), 1 << 16, 4, broadcast=False, loops=False)

    out = {}
    for name, fn in (("plan_for", plan_all), ("choose", choose_all)):
        t = clock()
        fn(0)
        out[f"{name}, first"] = clock() - t
    for name, fn in (("plan_for", plan_all), ("choose", choose_all)):
        times = []
        for r in range(1, repeat + 1):
            plan.path_cache_clear()
            ttgt.cache_clear()
            t = clock()
            fn(r)
            times.append(clock() - t)
        out[f"{name}, again"] = statistics.median(times)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeat", type=int, default=100)
    p.add_argument("--against", type=Path, help="another einc checkout, timed in alternate processes")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        sys.path.insert(0, str(Path.cwd()))
        print(json.dumps(one_round(a.one)))
        return 0
    from checkouts import rounds, table
    roots = [ROOT] + ([a.against.resolve()] if a.against else [])
    rows = rounds(ROOT / "bench" / "small_plans.py", roots, a.rounds, a.repeat)
    print(f"{a.rounds} rounds, {a.repeat} repeats a round, thread CPU time, 1 thread; shared machine")
    print("\n".join(table(rows, roots, "measure, us")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
