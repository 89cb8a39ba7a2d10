"""Where einc's first call goes on the executable networks of bench/paths.py.

For each network that contracts in a few seconds on the CPU (float64 operands, as in
bench/paths.py's end-to-end table), the first ``einc.einsum`` call of a fresh process state
(fresh plan and path caches) is split into: the path search (``einc.planner.search.find``),
the torch executor's layout choice (``ttgt.choose``, its copy-cost model, once per step as the
steps are built), the contraction (taken as einc's second call, which runs the same plan) and
the rest (parsing, plan building, step building outside ``ttgt.choose``).  Both are timed by
wrapping the two functions; neither is changed.  ``opt_einsum.contract`` (its own path, torch
backend) is timed after each einc call.  Median of ``--rounds`` interleaved rounds; 1 thread.
``--clock cpu`` times the thread's CPU time instead of the clock (a shared machine);
``--collect`` runs a full garbage collection before each timed call, so that none that an
earlier call's objects make due lands in the call timed (a full collection in a process
that has imported torch and cotengra takes tens of milliseconds, more than most of these
calls: which call pays it follows from everything allocated before).  ``--filled N``: the
cache folder's ``paths`` folder holds N other entries before each first call, as a long-used
cache does (each network's own entry removed after its round), where the default is a fresh
folder per call.  ``--phases``: a second table splits the rest, by wrapping the functions
named there too (a few microseconds a call more).  ``--search``: a third table splits the
path search by what runs inside it (:data:`SEARCH`: cotengrust's random greedy trials, the
objective's ranking of trees, their predicted times, cotengra's subtree reconfiguration,
its kahypar partition tree, its trees made from paths) and gives the garbage collections
that ran during the call (any stage's allocations set them off).

    python bench/first_call.py [--rounds 3] [--only 'NAME (TENSORS);NAME'] [--clock cpu] [--collect] [--filled N]
                               [--phases] [--search]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _timed(module, name, spent, key, clock=time.perf_counter):
    """``module.name`` wrapped so that its seconds (by ``clock``) add up in ``spent[key]``."""
    inner = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = clock()
        try:
            spent[key + " result"] = inner(*args, **kwargs)
            return spent[key + " result"]
        finally:
            spent[key] += clock() - start
    setattr(module, name, wrapper)


def _filled(count):
    """``(the paths folder, its names)``, the folder of ``EINC_CACHE_DIR`` holding ``count``
    entries (made on the first call: each a well-formed entry of another network)."""
    from einc.planner import pathcache
    where = pathcache.folder(create=True)
    names = set(os.listdir(where))
    for k in range(len(names), count):
        name = f"{k:064x}"
        pathcache.cachefiles.write(where / f"{name}.json", json.dumps(
            {"key": name, "version": "other", "path": [[0, 1]], "report": {}}).encode())
    return where, set(os.listdir(where))


# --phases: (module, function) timed, inclusive, under each key
PHASES = {"key": ("einc.planner.searchkey", "recall"), "store": ("einc.planner.pathcache", "store"),
          "plan": ("einc.runtime.engine", "plan_for"), "entry": ("einc.runtime.engine", "entry_for"),
          "steps": ("einc.runtime.torch_executor", "step_functions")}


# --search: (module, object or None, function) timed, inclusive, under each key: parts of the search
# that do not run inside one another
SEARCH = {"trials": ("cotengrust", None, "optimize_random_greedy_track_flops"),
          "ranking": ("einc.planner.search", None, "_rank"), "predicting": ("einc.planner.search", None, "_predict"),
          "reconfiguring": ("einc.planner.search", None, "_reconfigure"),
          "partition tree": ("cotengra.pathfinders.path_kahypar", "kahypar_to_tree", "trial_fn"),
          "trees from paths": ("cotengra", "ContractionTree", "from_path")}


def _search_parts(spent, clock):
    """Wrap the :data:`SEARCH` functions, and add the garbage collections' time to ``spent["gc"]``."""
    import importlib
    for key, (module, owner, name) in SEARCH.items():
        found = importlib.import_module(module)
        target = getattr(found, owner) if owner else found
        made = vars(target).get(name) if isinstance(target, type) else None
        if isinstance(made, classmethod):   # wrapped as one: a subclass's call passes its own class
            holder = types.SimpleNamespace(fn=made.__func__)
            _timed(holder, "fn", spent, key, clock)
            setattr(target, name, classmethod(holder.fn))
        else:
            _timed(target, name, spent, key, clock)
    spent["gc"], began = 0.0, []

    def collected(phase, info):
        if phase == "start":
            began.append(clock())
        elif began:
            spent["gc"] += clock() - began.pop()
    gc.callbacks.append(collected)


def _print_search(rows, split):
    """The search split: medians over the rounds of each :data:`SEARCH` part, the rest of the search, and the
    garbage collections during the whole call."""
    print("\n| network | path search ms | " + " | ".join(SEARCH) + " | rest of the search | garbage collections |")
    print("|---|---:|" + "---:|" * (len(SEARCH) + 2))
    for name, runs in rows.items():
        parts = []
        for (_, found, *_), p in zip(runs, split[name]):
            named = [p[key] for key in SEARCH]
            parts.append((found, *named, found - sum(named), p["gc"]))
        cells = " | ".join(f"{sorted(x)[len(x) // 2] * 1e3:.2f}" for x in zip(*parts))
        print(f"| {name} | {cells} |")


def _phases(spent, clock):
    import importlib
    for key, (module, name) in PHASES.items():
        _timed(importlib.import_module(module), name, spent, key, clock)


def _print_phases(rows, split):
    """The rest of each call split: medians over the rounds of each part, the last what none names."""
    print("\n| network | rest ms | steps built outside `ttgt.choose` | plan outside the search, key and store "
          "| the path's key (recall) | its store | entry outside the steps | other |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in rows.items():
        parts = []
        for (first, found, chosen, again, *_), p in zip(runs, split[name]):
            rest = first - found - chosen - again
            named = (p["steps"] - chosen, p["plan"] - found - p["key"] - p["store"], p["key"], p["store"],
                     p["entry"] - p["steps"])
            parts.append((rest, *named, rest - sum(named)))
        cells = " | ".join(f"{sorted(x)[len(x) // 2] * 1e3:.2f}" for x in zip(*parts))
        print(f"| {name} | {cells} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None, help="as bench/paths.py's --only")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="cpu: the thread's CPU time")
    ap.add_argument("--collect", action="store_true", help="a full garbage collection before each timed call")
    ap.add_argument("--filled", type=int, default=0, help="other entries in the paths folder before each call")
    ap.add_argument("--phases", action="store_true", help="a second table: the rest split")
    ap.add_argument("--search", action="store_true", help="a third table: the path search split")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    settle = gc.collect if args.collect else (lambda: None)
    import opt_einsum
    import torch

    import einc
    from bench.paths import EXECUTABLE, forget, instances
    from einc.planner import search
    from einc.runtime.torch_executor import ttgt
    torch.set_num_threads(1)
    spent = {"search": 0.0, "ttgt": 0.0}
    _timed(search, "find", spent, "search", clock)
    _timed(ttgt, "choose", spent, "ttgt", clock)
    if args.phases:
        _phases(spent, clock)
    if args.search:
        _search_parts(spent, clock)
    tmp = tempfile.TemporaryDirectory(prefix="einc-first-call-")
    nets = [n for n in instances(args.only) if n[0] in EXECUTABLE]
    rows: dict = {}
    split: dict = {}
    for r in range(args.rounds):
        for name, eq, shapes in nets:
            lhs, out = eq.split("->")
            gen = torch.Generator().manual_seed(0)
            ops = [(torch.rand(s, generator=gen, dtype=torch.float64) + 0.5)
                   * math.prod(d ** -0.5 for c, d in zip(t, s) if c not in out) for t, s in zip(lhs.split(","), shapes)]
            os.environ["EINC_CACHE_DIR"] = os.path.join(tmp.name, "filled" if args.filled else f"{r}-{name}")
            others = _filled(args.filled) if args.filled else None
            forget()                # as in a new process: no plan, path or memo of the search's,
            ttgt.cache_clear()      # and no step's layout known
            spent.update({key: 0.0 for key in ("search", "ttgt", *PHASES, *SEARCH, "gc")})
            spent["search result"] = None
            settle()
            spent["gc"] = 0.0       # (the collections of the call alone)
            start = clock()
            einc.einsum(eq, *ops)
            first = clock() - start
            parts = dict(spent)
            found = parts["search result"]
            predicted = found[1].best_seconds if found is not None else math.nan
            settle()
            start = clock()
            einc.einsum(eq, *ops)
            again = clock() - start
            settle()
            start = clock()
            opt_einsum.contract(eq, *ops, backend="torch")
            theirs = clock() - start
            if others is not None:      # the network's own entry goes: the next round searches again
                for entry in set(os.listdir(others[0])) - others[1]:
                    os.unlink(os.path.join(others[0], entry))
            rows.setdefault(name, []).append((first, parts["search"], parts["ttgt"], again, theirs, predicted))
            split.setdefault(name, []).append(parts)
    print("| network | einc first call ms | path search | `ttgt.choose` | contraction (second call) | rest "
          "| opt_einsum `contract` ms | first call / opt_einsum | search's predicted contraction ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in rows.items():
        first, found, chosen, again, theirs, predicted = (sorted(x)[len(x) // 2] for x in zip(*runs))
        rest = first - found - chosen - again
        print(f"| {name} | {first * 1e3:.1f} | {found * 1e3:.1f} | {chosen * 1e3:.1f} | {again * 1e3:.1f} "
              f"| {rest * 1e3:.1f} | {theirs * 1e3:.1f} | {first / theirs:.2f} | {predicted * 1e3:.2f} |")
    if args.phases:
        _print_phases(rows, split)
    if args.search:
        _print_search(rows, split)


if __name__ == "__main__":
    main()
