"""The layout choice alone (runtime/torch_executor/ttgt.py's ``choose``) on the steps of first calls.

Every ``ttgt.choose`` call that einc's first call makes on bench/paths.py's executable
networks (float64 operands, fresh caches) is recorded, then replayed per network with
the model's caches cleared before each network, as in a fresh process: thread CPU time,
median of ``--rounds``.  With ``--against DIR`` (another checkout of einc), that
checkout's ttgt.py and index_orders.py are loaded beside this one's (their other imports
are this checkout's), both are checked to decide every call alike, and they are timed in
alternate order each round, so that a shared machine's load falls on both.  Each network's
allocations: the net count of objects the garbage collector tracks (its generation-0
count, collection paused) that the replay from empty caches leaves (what the model's
memos keep, which a first call's collections walk and which bring them on).

    python bench/choose_replay.py [--rounds 7] [--only 'NAME (TENSORS);NAME'] [--against /tmp/einc-before]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _recorded(only):
    """``{network: [(args, kwargs), ...]}``: the ``ttgt.choose`` calls of each first call."""
    import torch

    import einc
    from bench.paths import EXECUTABLE, forget, instances
    from einc.runtime.torch_executor import ttgt
    torch.set_num_threads(1)
    calls, real = {}, ttgt.choose
    tmp = tempfile.TemporaryDirectory(prefix="einc-choose-replay-")
    for name, eq, shapes in (n for n in instances(only) if n[0] in EXECUTABLE):
        seen = calls[name] = []

        def record(*args, **kwargs):
            seen.append((tuple(list(a) if isinstance(a, (list, tuple)) else a for a in args), kwargs))
            return real(*args, **kwargs)
        os.environ["EINC_CACHE_DIR"] = os.path.join(tmp.name, name)
        forget()
        ttgt.cache_clear()
        ttgt.choose = record
        try:
            einc.einsum(eq, *[torch.rand(s, dtype=torch.float64) for s in shapes])
        finally:
            ttgt.choose = real
    return calls


def _load(root, name):
    """``root``'s ttgt.py and the index_orders.py beside it, as a module ``name``; its other
    relative imports (planner/strides.py) are this checkout's."""
    package = "einc.runtime.torch_executor"
    importlib.import_module(package)
    here = root / "einc/runtime/torch_executor"
    modules = {}
    for stem, qual in (("index_orders", f"{name}_index_orders"), ("ttgt", name)):
        spec = importlib.util.spec_from_file_location(f"{package}.{qual}", here / f"{stem}.py")
        module = modules[stem] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module      # dataclasses looks its module up
        own = sys.modules.get(f"{package}.index_orders")
        sys.modules[f"{package}.index_orders"] = modules["index_orders"]   # ttgt's `from .index_orders import`
        try:
            spec.loader.exec_module(module)
        finally:
            sys.modules[f"{package}.index_orders"] = own
    return modules["ttgt"]


def _replay(model, steps):
    model.cache_clear()
    start = time.thread_time()
    for args, kwargs in steps:
        model.choose(*args, **kwargs)
    return time.thread_time() - start


def _allocations(model, steps):
    """Net allocations of tracked objects (generation-0 count, collection paused) while
    ``model`` replays ``steps`` from empty caches."""
    model.cache_clear()
    gc.collect()
    gc.disable()
    try:
        start = gc.get_count()[0]
        for args, kwargs in steps:
            model.choose(*args, **kwargs)
        return gc.get_count()[0] - start
    finally:
        gc.enable()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=None, help="as bench/paths.py's --only")
    ap.add_argument("--against", type=Path, help="another einc checkout: its ttgt.py timed beside this one's")
    args = ap.parse_args(argv)
    calls = _recorded(args.only)
    models = [_load(ROOT, "ttgt_this")] + ([_load(args.against, "ttgt_other")] if args.against else [])
    for name, steps in calls.items():
        decided = []
        for model in models:
            model.cache_clear()
            decided.append([repr(model.choose(*a, **k)) for a, k in steps])
        assert all(d == decided[0] for d in decided), f"{name}: the checkouts decide differently"
    made = {name: [_allocations(model, steps) for model in models] for name, steps in calls.items()}
    spent = {name: [[] for _ in models] for name in calls}
    for r in range(args.rounds):
        for name, steps in calls.items():
            for m in (range(len(models)) if r % 2 == 0 else reversed(range(len(models)))):
                spent[name][m].append(_replay(models[m], steps))
    med = lambda xs: sorted(xs)[len(xs) // 2]      # noqa: E731
    head = "| network | choose calls | ms | allocations |" + (
        " other ms | other allocations | this / other ms |" if args.against else "")
    print(head)
    print("|---|---:|---:|---:|" + ("---:|---:|---:|" if args.against else ""))
    totals, allocs = [0.0 for _ in models], [0 for _ in models]
    for name, per in spent.items():
        ms = [med(t) * 1e3 for t in per]
        totals = [a + b for a, b in zip(totals, ms)]
        allocs = [a + b for a, b in zip(allocs, made[name])]
        print(f"| {name} | {len(calls[name])} | {ms[0]:.2f} | {made[name][0]} |" + (
            f" {ms[1]:.2f} | {made[name][1]} | {ms[0] / ms[1]:.2f} |" if args.against else ""))
    count = sum(map(len, calls.values()))
    print(f"| all | {count} | {totals[0]:.1f} | {allocs[0]} |" + (
        f" {totals[1]:.1f} | {allocs[1]} | {totals[0] / totals[1]:.2f} |" if args.against else ""))


if __name__ == "__main__":
    main()
