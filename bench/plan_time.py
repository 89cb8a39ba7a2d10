"""Planning time where the torch executor's layout choice (runtime/torch_executor/ttgt.py's
``choose``) weighs most: a new shape every call, and the first call of a large network.

- ``new shape``: ``einc.einsum("bhid,bhjd->bhij")`` on (1, 2, n, 16) operands, n = 128,
  129, ... (every call a shape einc has not seen: planned, its layout chosen), and
  ``torch.einsum`` on the same calls;
- ``connected(100)``: the first call (every cache cleared before it) of einsum_benchmark's
  random connected network of 100 tensors (``connected_network(100, 2.5, max_axis_size=4,
  seed=0)``, float32), opt_einsum's greedy path given, so no path is searched.

Per method: the median per call, and the share of it spent in ``ttgt.choose`` (timed by a
wrapper around it).  With ``--against DIR`` (another checkout of einc, e.g. a ``git
worktree`` of an older commit), each round runs one fresh process per checkout, in
alternating order, and the paired per-round ratios (this checkout / the other) are given
as their median with a 95 % interval.  1 thread.

    python bench/plan_time.py [--rounds 7] [--calls 100] [--against /tmp/einc-before]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _timed_choose():
    """Wrap ``ttgt.choose`` so that its inclusive time is summed; ``(totals, clear)``."""
    from einc.runtime.torch_executor import ttgt
    real, spent = ttgt.choose, [0.0]

    def choose(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t
    ttgt.choose = choose
    return spent


def _clear():
    import einc
    from einc.runtime.torch_executor import ttgt
    einc.cache_clear()
    if hasattr(ttgt, "cache_clear"):
        ttgt.cache_clear()
    else:       # before ttgt.cache_clear
        ttgt.cache_clear()


def _network():
    import opt_einsum
    import torch
    from einsum_benchmark.generators.random.connected_network import connected_network

    from bench.paths import _symbols
    eq, shapes = connected_network(100, 2.5, max_axis_size=4, seed=0)[:2]
    eq, shapes = _symbols(str(eq)), [tuple(int(d) for d in s) for s in shapes]
    path = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="greedy")[0]
    gen = torch.Generator().manual_seed(0)
    return eq, [torch.randn(s, generator=gen) for s in shapes], path


def one_round(calls: int) -> dict:
    """Medians of one process's calls, in seconds, and choose's shares."""
    import torch

    import einc
    torch.set_num_threads(1)
    spent = _timed_choose()
    out = {}
    sizes = [128 + i for i in range(calls + 10)]
    pairs = [(torch.randn(1, 2, n, 16), torch.randn(1, 2, n, 16)) for n in sizes]
    for a, b in pairs[:10]:         # the first calls import and warm up
        einc.einsum("bhid,bhjd->bhij", a, b)
        torch.einsum("bhid,bhjd->bhij", a, b)
    for name, fn in (("new shape", einc.einsum), ("new shape, torch.einsum", torch.einsum)):
        times, spent[0] = [], 0.0
        for a, b in pairs[10:]:
            t = time.perf_counter()
            fn("bhid,bhjd->bhij", a, b)
            times.append(time.perf_counter() - t)
        out[name] = statistics.median(times)
        if fn is einc.einsum:
            out[name + " choose share"] = spent[0] / sum(times)
    eq, ops, path = _network()
    times, shares = [], []
    for _ in range(3):
        _clear()
        spent[0] = 0.0
        t = time.perf_counter()
        einc.einsum(eq, *ops, optimize=path)
        times.append(time.perf_counter() - t)
        shares.append(spent[0] / times[-1])
    out["connected(100) first call"] = statistics.median(times)
    out["connected(100) first call choose share"] = statistics.median(shares)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--against", type=Path, help="another einc checkout, timed in alternate processes")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        sys.path.insert(0, str(Path.cwd()))
        print(json.dumps(one_round(a.one)))
        return 0
    from checkouts import rounds, table
    roots = [ROOT] + ([a.against.resolve()] if a.against else [])
    rows = rounds(ROOT / "bench" / "plan_time.py", roots, a.rounds, a.calls, EINC_NEW_SHAPES="plan")
    print(f"{a.rounds} rounds, {a.calls} new shapes a round, 1 thread; shared machine")
    print("\n".join(table(rows, roots, "measure", lambda key, m: f"{m:.3f}" if "share" in key else f"{m * 1e6:.0f} us",
                           lambda key: "share" not in key)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
