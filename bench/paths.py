"""einc's default contraction paths on networks of 20-500 tensors, against cotengra and opt_einsum.

The instances come from the generators of the ``einsum-benchmark`` package (Blacher et
al., 2024), seeds fixed: random 3-regular graphs, random connected networks and
hypernetworks, lattices, trees, matrix chains, matrix product states, the
language-model-like networks, and quantum circuits where quimb is installed (it is not a
dependency of einc: ``pip install quimb``): QAOA max-cut amplitudes (einsum_benchmark's
generator), amplitudes of random 2-D circuits and a QAOA energy term (quimb's circuits,
unsimplified).  For each instance every path is scored with one cost model
(einc.planner.search.path_cost: opt_einsum's flop count, a multiply-add counting 2, and the
largest intermediate), and timed as it is planned:

- einc: ``einc.planner.plan_for`` with the default options (``auto``), a fresh cache folder
  (so the path search runs: nothing is remembered), the process's garbage collected first;
- cotengra: ``HyperOptimizer(max_time=--seconds, max_repeats=10**6, parallel=False)``
  (greedy and kahypar, subtree reconfiguration, flops minimized: its defaults);
- TreeSA's simulated annealing as cotengra has it (``plan_anneal``, --seconds; the omeco
  package does not build here), unless ``--no-anneal``;
- opt_einsum: ``greedy`` and ``random-greedy-128`` (einc's former default past 16 operands).

Where the best path contracts in a few seconds on the CPU (at most --execute-flops flops and
2^25 elements; the peers' quick paths, which their first calls run, at most 100 times those
flops and 2^25 elements), the first call end to end (planning included) is timed per tool
on float64 operands, one thread, the median of --rounds rounds (each einc call with every cache
cleared; cotengra's optimizer made afresh, as in a new process, its expression not cached):
``einc.einsum``, cotengra's ``einsum`` (its default quick optimizer, ``AutoOptimizer``,
then ``tree.contract``), ``opt_einsum.contract`` (its ``auto`` path); einc's result is
checked against opt_einsum's, and the flops of the two peers' quick paths are scored
against the best peer's.

    python bench/paths.py [--seconds 10] [--execute-flops 2e9] [--out bench/measured/paths-<UTC date>.md]
        [--only 'NAME (TENSORS);NAME'] [--executable] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

warnings.filterwarnings("ignore")


# the networks whose best path contracts in a few seconds on the CPU (within 2e9 flops and 2^25
# elements): the end-to-end table's (bench/first_call.py's too)
# the end-to-end table runs the peers' quick paths too: none past this many times --execute-flops
PEER_FLOPS = 100
EXECUTABLE = ("random 3-regular (20)", "random 3-regular (60)", "random 3-regular (100)", "random connected (100)",
              "random hypernetwork (60)", "lattice 8x8 (64)", "tree (100)", "matrix chain (50)", "matrix chain (500)",
              "MPS product (50)", "MPS product (400)", "language model (52)", "language model (114)",
              "QAOA max-cut n=16 p=2 (112)", "2-D circuit 5x6 CZ depth 8 (422)", "QAOA energy term n=60 p=2 (293)")


def instances(only=None, circuits=True):
    """``(name, equation, shapes)``, 20 to 500 tensors (``only``: ``;``-separated texts, the
    instances whose name, tensor count included, holds one of them; ``circuits``: the
    quantum-circuit networks too, where quimb is installed)."""
    from einsum_benchmark.generators.language_model.generator import p_first_and_last
    from einsum_benchmark.generators.quantum_computing.mps_product import matrix_product_state
    from einsum_benchmark.generators.random.connected_hypernetwork import connected_hypernetwork
    from einsum_benchmark.generators.random.connected_network import connected_network
    from einsum_benchmark.generators.random.randreg import regular
    from einsum_benchmark.generators.structured.lattice import lattice
    from einsum_benchmark.generators.structured.matrix_chain import generate_mcm
    from einsum_benchmark.generators.structured.tree import tree
    made = [
        ("random 3-regular", lambda: regular(20, 3, seed=1)),
        ("random 3-regular", lambda: regular(60, 3, seed=1)),
        ("random 3-regular", lambda: regular(100, 3, seed=1)),
        ("random 3-regular", lambda: regular(200, 3, seed=1)),
        ("random 3-regular", lambda: regular(300, 3, seed=1)),
        ("random connected", lambda: connected_network(100, 2.5, max_axis_size=4, seed=0)),
        ("random connected", lambda: connected_network(250, 2.5, max_axis_size=4, seed=0)),
        ("random hypernetwork", lambda: connected_hypernetwork(60, 2.5, max_tensor_order=5, max_edge_order=3,
                                                               max_axis_size=4, seed=1)),
        ("random hypernetwork", lambda: connected_hypernetwork(150, 2.5, max_tensor_order=5, max_edge_order=3,
                                                               max_axis_size=4, seed=0)),
        ("lattice 8x8", lambda: lattice((8, 8), d_min=2, d_max=4, seed=0)),
        ("lattice 5x5x5", lambda: lattice((5, 5, 5), d_min=2, d_max=3, seed=0)),
        ("tree", lambda: tree(100)),
        ("tree", lambda: tree(500)),
        ("matrix chain", lambda: generate_mcm(50, seed=0)),
        ("matrix chain", lambda: generate_mcm(500, 10, 100, seed=0)),
        ("MPS product", lambda: matrix_product_state(25, bond_dim=20, seed=0)),
        ("MPS product", lambda: matrix_product_state(200, bond_dim=20, seed=0)),
        ("language model", lambda: p_first_and_last(3, 4, 4)),
        ("language model", lambda: p_first_and_last(4, 4, 4)),
    ] + (_circuits() if circuits else [])
    wanted = [w.strip() for w in only.split(";") if w.strip()] if only else []
    for name, make in made:
        try:
            eq, shapes = make()[:2]
        except ValueError as e:     # a generator that cannot draw this instance
            print(f"{name}: not generated ({e})", file=sys.stderr)
            continue
        # (the max-cut generator gives the arrays themselves)
        shapes = [tuple(int(d) for d in getattr(s, "shape", s)) for s in shapes]
        full = f"{name} ({len(shapes)})"
        if wanted and not any(w in full for w in wanted):
            continue
        yield full, _symbols(str(eq)), shapes


def _circuits():
    """Quantum-circuit networks, scalar contractions with many vectors, matrices and bonds of
    size 2 (quimb builds them; without it, none): QAOA max-cut amplitudes (einsum_benchmark's
    generator, its graph seeded: the angles it draws do not change the network), amplitudes
    of random circuits on a 2-D grid, and a QAOA energy term's network."""
    if not _has_quimb():
        print("circuit networks: quimb is not installed, left out", file=sys.stderr)
        return []
    from einsum_benchmark.generators.quantum_computing.maxcut import maxcut
    return [
        ("QAOA max-cut n=16 p=2", lambda: maxcut(16, 3, 2, seed=1)),
        ("QAOA max-cut n=24 p=3", lambda: maxcut(24, 3, 3, seed=1)),
        ("QAOA max-cut n=30 p=4", lambda: maxcut(30, 3, 4, seed=1)),
        ("2-D circuit 5x6 CZ depth 8", lambda: _grid_circuit(5, 6, 8, seed=0, split=True)),
        ("2-D circuit 7x7 depth 12", lambda: _grid_circuit(7, 7, 12, seed=0, split=False)),
        ("QAOA energy term n=60 p=2", lambda: _qaoa_term(60, 2, seed=1)),
    ]


def _grid_circuit(rows, cols, depth, seed, split):
    """The amplitude <0...0|C|0...0> of a random circuit on a ``rows`` x ``cols`` grid, ``depth``
    layers of two-qubit gates on the grid's bonds in the four patterns of Google's
    supremacy circuits (Arute et al., 2019) in turn; ``split``: each gate a CZ between
    random single-qubit U3 gates, quimb splitting each CZ in two tensors of a bond of 2 (the
    single-qubit gates matrices of their own), else each gate a random two-qubit unitary
    (one tensor of four legs).  Unsimplified: the network as the circuit writes it."""
    import numpy as np
    import quimb.tensor as qtn
    rng = np.random.default_rng(seed)
    n = rows * cols
    across = [[(r * cols + c, r * cols + c + 1) for r in range(rows) for c in range(k, cols - 1, 2)]
              for k in (0, 1)]
    down = [[(r * cols + c, (r + 1) * cols + c) for r in range(k, rows - 1, 2) for c in range(cols)]
            for k in (0, 1)]
    patterns = [across[0], down[0], across[1], down[1]]
    circ = qtn.Circuit(n)
    for layer in range(depth):
        for a, b in patterns[layer % 4]:
            if split:
                for q in (a, b):
                    circ.apply_gate("U3", *rng.uniform(0, 2 * np.pi, 3), q)
                circ.apply_gate("CZ", a, b)
            else:
                circ.apply_gate_raw(_unitary(rng, 4), (a, b))
    return _equation(circ.amplitude_tn("0" * n, simplify_sequence=""))


def _unitary(rng, d):
    """A Haar-random ``d`` x ``d`` unitary (the QR of a complex Gaussian matrix, phases fixed)."""
    import numpy as np
    q, r = np.linalg.qr(rng.standard_normal((d, d)) + 1j * rng.standard_normal((d, d)))
    return q * (np.diag(r) / abs(np.diag(r)))


def _qaoa_term(n, p, seed):
    """<psi|Z_i Z_j|psi> of a QAOA max-cut circuit of depth ``p`` on a random 3-regular graph
    of ``n`` nodes (``seed``), for the graph's first edge: the network of the gates in its
    reverse light cone and their conjugates, unsimplified."""
    import networkx as nx
    import numpy as np
    import quimb as qu
    import quimb.tensor as qtn
    edges = list(nx.random_regular_graph(3, n, seed=seed).edges)
    rng = np.random.default_rng(seed)
    circ = qtn.circ_qaoa(dict.fromkeys(edges, 1), p, rng.standard_normal(p), rng.standard_normal(p))
    zz = qu.pauli("Z") & qu.pauli("Z")
    return _equation(circ.local_expectation_tn(zz, edges[0], simplify_sequence=""))


def _has_quimb() -> bool:
    import importlib.util
    return importlib.util.find_spec("quimb") is not None


def _equation(tn):
    """``(equation, shapes)`` of a quimb tensor network contracted to a scalar."""
    inputs, _, _ = tn.get_inputs_output_size_dict(output_inds=())
    return ",".join(inputs) + "->", [t.shape for t in tn]


def _symbols(eq: str) -> str:
    """``eq`` with its labels renamed to opt_einsum.get_symbol's, in order of appearance
    (the language-model generator writes digits, which neither torch nor einc take)."""
    import opt_einsum
    names: dict = {}
    return "".join(c if c in ",->" else names.setdefault(c, opt_einsum.get_symbol(len(names))) for c in eq)


def network(eq, shapes):
    """Int-labelled ``(inputs, output, sizes)`` of ``eq`` for scoring paths."""
    lhs, out = eq.split("->") if "->" in eq else (eq, None)
    terms = lhs.split(",")
    names: dict = {}
    inputs = [frozenset(names.setdefault(c, len(names)) for c in t) for t in terms]
    sizes = {}
    for t, s in zip(terms, shapes):
        for c, d in zip(t, s):
            sizes[names[c]] = d
    if out is None:
        counts: dict = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    return inputs, frozenset(names[c] for c in out), sizes


def score(net, path):
    from einc.planner.search import path_cost
    inputs, output, sizes = net
    flops, _, largest, _ = path_cost(inputs, output, {i: s or 1 for i, s in sizes.items()}, path)
    return flops, largest


def allowance_of(net, path):
    """einc's planning allowance for ``path`` (einc.planner.search.allowance of its predicted time)."""
    from einc.planner.search import allowance, path_cost, predicted_seconds
    inputs, output, sizes = net
    flops, written, _, steps = path_cost(inputs, output, {i: s or 1 for i, s in sizes.items()}, path)
    return allowance(predicted_seconds(flops, written, steps))


def forget():
    """einc as in a new process: no plan, no path, no memo of the search's costs and ranks."""
    import importlib

    import einc
    from einc.planner.plan import path_cache_clear
    path_cache_clear()
    einc.cache_clear()
    for module, memo in (("pathcost", "_costed"), ("search", "_costed"), ("search", "_ranked"),
                         ("search", "_labelled"), ("libraries", "_labelled"), ("objective", "_memo")):
        try:
            found = getattr(importlib.import_module(f"einc.planner.{module}"), memo, None)
        except ImportError:     # an older einc, to compare with
            continue
        if found is not None:
            found.cache_clear()


def plan_einc(eq, shapes):
    from einc.planner import plan_for
    forget()
    # what the runs before left (the peers' searches, the contractions): a full collection
    # over the process's objects, which einc's allocations may happen to set off, is not einc's work
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    plan = plan_for(eq, shapes)
    return time.perf_counter() - t, time.process_time() - c, plan.path, \
        next((n for n in plan.notes if n.startswith("Path search")), "")


def plan_cotengra(eq, shapes, seconds):
    import cotengra as ctg
    inputs, output = eq.split("->")
    sizes = {c: d for t, s in zip(inputs.split(","), shapes) for c, d in zip(t, s)}
    opt = ctg.HyperOptimizer(max_time=seconds, max_repeats=10 ** 6, parallel=False, progbar=False)
    t = time.perf_counter()
    tree = opt.search(inputs.split(","), output, sizes)
    return time.perf_counter() - t, tuple(tree.get_path()), len(opt.scores)


def plan_anneal(eq, shapes, seconds):
    """TreeSA's method in cotengra (``ContractionTree.simulated_anneal``, after Kalachev et al.
    and OMEinsumContractionOrders.jl's ``treesa``): annealing runs from opt_einsum's greedy
    tree, seeded 0, 1, ..., flops minimized, 20 temperature steps of 20 sweeps each, until
    ``seconds`` are spent (none begun that, as long as the longest so far, would end past
    them); the best tree.  ``(seconds, path, runs)``."""
    import cotengra as ctg
    import opt_einsum
    inputs, output = eq.split("->")
    sizes = {c: d for t, s in zip(inputs.split(","), shapes) for c, d in zip(t, s)}
    t = time.perf_counter()
    greedy = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="greedy")[0]
    tree = ctg.ContractionTree.from_path(inputs.split(","), output, sizes, path=greedy)
    best, runs, longest = tree, 0, 0.0
    while True:
        start = time.perf_counter()
        found = tree.simulated_anneal(minimize="flops", seed=runs, tsteps=20, numiter=20)
        runs += 1
        if found.total_flops() < best.total_flops():
            best = found
        now = time.perf_counter()
        longest = max(longest, now - start)
        if now - t + longest > seconds:
            return now - t, tuple(best.get_path()), runs


def plan_opt_einsum(eq, shapes, optimize):
    import opt_einsum
    t = time.perf_counter()
    path, _ = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=optimize)
    return time.perf_counter() - t, tuple(path)


def quick_paths(eq, shapes, net):
    """The scores (flops, largest intermediate) of the paths the two peers' first calls
    contract by: cotengra's ``einsum`` default (a fresh ``AutoOptimizer``) and
    ``opt_einsum.contract``'s (``auto``)."""
    import cotengra as ctg
    inputs, output = eq.split("->")
    sizes = {c: d for t, s in zip(inputs.split(","), shapes) for c, d in zip(t, s)}
    ctg_path = ctg.AutoOptimizer()(inputs.split(","), output, sizes)
    return score(net, ctg_path), score(net, plan_opt_einsum(eq, shapes, "auto")[1])


def executes(best, largest, quick, bound) -> bool:
    """Whether the first calls are timed: the best path within ``bound`` flops, and it and
    einc's and cotengra's searched paths (``largest``) within 2^25 elements; the peers'
    ``quick`` paths (:func:`quick_paths`), which their first calls contract by, within
    :data:`PEER_FLOPS` times ``bound`` and 2^25 elements too (a QAOA amplitude's greedy path
    may need 2^28 elements and a thousand times the best path's flops)."""
    return bool(quick) and best <= bound and max(largest, *(q[1] for q in quick)) <= 2 ** 25 \
        and max(q[0] for q in quick) <= PEER_FLOPS * bound


def end_to_end(eq, shapes, fresh_cache, rounds=1):
    """First-call seconds of einc, cotengra and opt_einsum on the same float64 operands (the
    median of ``rounds``, each einc call with every cache cleared, layouts included, and
    cotengra's optimizer made afresh, its expression not cached), and einc's largest
    relative difference from opt_einsum's result."""
    import cotengra as ctg
    import opt_einsum
    import torch

    import einc
    from einc.runtime.torch_executor import ttgt
    gen = torch.Generator().manual_seed(0)
    # entries near 1, each summed bond of size d weighed 1/sqrt(d) on both sides: results near 1
    lhs, out_labels = eq.split("->")
    ops = [(torch.rand(s, generator=gen, dtype=torch.float64) + 0.5)
           * math.prod(d ** -0.5 for c, d in zip(t, s) if c not in out_labels)
           for t, s in zip(lhs.split(","), shapes)]
    runs: dict = {}

    def timed(key, fn):
        # the garbage the searches and runs before left: a full collection over it, which any
        # tool's allocations may set off, is not that tool's work (as plan_einc)
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        result = fn()
        runs.setdefault(key, []).append(time.perf_counter() - t)
        runs.setdefault(key + "_cpu", []).append(time.process_time() - c)
        return result
    for _ in range(rounds):
        os.environ["EINC_CACHE_DIR"] = fresh_cache()
        forget()
        ttgt.cache_clear()          # as in a new process: no step's layout known
        mine = timed("einc", lambda: einc.einsum(eq, *ops))
        timed("einc_again", lambda: einc.einsum(eq, *ops))
        note = next((n for n in einc.explain(eq, *ops).plan.notes if n.startswith("Path search")), "")
        runs.setdefault("search", []).append(_search_seconds(note))
        # a fresh optimizer: the default one remembers the path it found for the round before
        theirs = timed("cotengra", lambda: ctg.einsum(eq, *ops, optimize=ctg.AutoOptimizer(),
                                                      cache_expression=False))
        ref = timed("opt_einsum", lambda: opt_einsum.contract(eq, *ops, backend="torch"))
    out = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
    scale = ref.abs().max().item() or 1.0
    out["diff"] = (mine - ref).abs().max().item() / scale
    out["cotengra_diff"] = (theirs - ref).abs().max().item() / scale
    return out


def _search_seconds(note: str) -> float:
    """The seconds a search ran, from its explain line ("... 58 trees in 37.7 ms ...")."""
    import re
    m = re.search(r"trees? in ([0-9.e+]+) (s|ms|us)\b", note)
    return float(m.group(1)) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[m.group(2)] if m else math.nan


def versions() -> str:
    import importlib.metadata as md
    names = ["torch", "opt_einsum", "cotengra", "cotengrust", "kahypar", "einsum_benchmark", "quimb"]
    found = []
    for n in names:
        try:
            found.append(f"{n} {md.version(n)}")
        except md.PackageNotFoundError:
            found.append(f"{n} absent")
    return ", ".join(found)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="cotengra's HyperOptimizer time")
    ap.add_argument("--execute-flops", type=float, default=2e9)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    ap.add_argument("--out", default=str(ROOT / "bench" / "measured" / f"paths-{today}.md"),
                    help="the page to write (default: today's, so that an earlier page is not overwritten)")
    ap.add_argument("--only", default=None,
                    help="the instances whose name holds one of these ';'-separated texts, e.g. 'tree (100);MPS'")
    ap.add_argument("--executable", action="store_true",
                    help="only the instances whose best path contracts in a few seconds (EXECUTABLE)")
    ap.add_argument("--rounds", type=int, default=3, help="end-to-end rounds (medians)")
    ap.add_argument("--no-anneal", dest="anneal", action="store_false",
                    help="leave out the TreeSA-like peer (cotengra's simulated annealing, --seconds)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(prefix="einc-paths-bench-")
    count = [0]

    def fresh_cache():
        count[0] += 1
        return os.path.join(tmp.name, str(count[0]))

    rows, runs = [], []
    loads = [os.getloadavg()[0]]
    started = time.perf_counter()
    for name, eq, shapes in instances(args.only):
        if args.executable and name not in EXECUTABLE:
            continue
        net = network(eq, shapes)
        os.environ["EINC_CACHE_DIR"] = fresh_cache()
        e_t, e_cpu, e_path, note = plan_einc(eq, shapes)
        c_t, c_path, c_trials = plan_cotengra(eq, shapes, args.seconds)
        a_t, a_path, a_runs = plan_anneal(eq, shapes, args.seconds) if args.anneal else (0.0, c_path, 0)
        g_t, g_path = plan_opt_einsum(eq, shapes, "greedy")
        r_t, r_path = plan_opt_einsum(eq, shapes, "random-greedy-128")
        e, c, a, g, r = (score(net, p) for p in (e_path, c_path, a_path, g_path, r_path))
        allow = allowance_of(net, e_path)
        best = min(c[0], e[0])
        row = dict(name=name, einc=e, einc_t=e_t, einc_cpu=e_cpu, allow=allow, ctg=c, ctg_t=c_t, ctg_trials=c_trials,
                   anneal=a, anneal_runs=a_runs, greedy=g, greedy_t=g_t, rg=r, rg_t=r_t,
                   ratio=e[0] / min(c[0], a[0]), note=note)
        quick = quick_paths(eq, shapes, net) if best <= args.execute_flops else ()
        if executes(best, max(e[1], c[1]), quick, args.execute_flops):
            o = end_to_end(eq, shapes, fresh_cache, args.rounds)
            o["ctg_quick"], o["oe_quick"] = (q[0] / min(c[0], a[0]) for q in quick)
            o["einc_flops"] = row["ratio"]
            runs.append((name, o))
        rows.append(row)
        loads.append(os.getloadavg()[0])
        print(f"{name}: einc {math.log10(e[0]):.2f} ({e_t:.2f} s), cotengra {math.log10(c[0]):.2f} ({c_t:.1f} s), "
              f"annealing {math.log10(a[0]):.2f} ({a_t:.1f} s), "
              f"greedy {math.log10(g[0]):.2f}, random-greedy-128 {math.log10(r[0]):.2f} ({r_t:.2f} s)",
              file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    Path(args.out).write_text(report(rows, runs, args, wall, loads))
    print(f"wrote {args.out} ({wall:.0f} s)", file=sys.stderr)


def _f(x):
    flops, largest = x
    return f"{math.log10(flops):.2f}, 2^{math.log2(largest):.0f}"


def report(rows, runs, args, wall, loads=(math.nan,)) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows)) if rows else float("nan")
    worst = max(rows, key=lambda r: r["ratio"]) if rows else None
    lines = [
        "# Contraction paths on networks of 20-500 tensors: einc's default against cotengra and opt_einsum",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPU cores shared with other jobs (the 1-minute load "
        f"average ran {min(loads):.1f}-{max(loads):.1f} over the run, so every time here is slower and noisier "
        f"than on an idle machine), {platform.platform()}, Python {platform.python_version()}",
        f"- Versions: {versions()}; einc at {commit}",
        f"- Command: `python bench/paths.py --seconds {args.seconds:g} --execute-flops {args.execute_flops:g}"
        f" --rounds {args.rounds}{' --executable' if args.executable else ''}{'' if args.anneal else ' --no-anneal'}`"
        f" ({wall / 60:.1f} min in all)",
        "- Paths scored alike (einc.planner.search.path_cost): log10 of opt_einsum's flop count (a multiply-add "
        "counts 2) and log2 of the largest intermediate in elements.  cotengra: `HyperOptimizer(max_time="
        f"{args.seconds:g}, parallel=False)`, its defaults otherwise (greedy and kahypar, subtree reconfiguration, "
        "flops minimized).  TreeSA: omeco does not build here (its crates cannot be fetched); its method as "
        f"cotengra has it (`simulated_anneal`, runs from the greedy tree for {args.seconds:g} s: `plan_anneal`)"
        + ("" if args.anneal else ", left out of this run") + ".  The ratio is einc's flops over the best of the "
        "peers'." + ("" if _has_quimb() else "  Circuit instances need quimb (not installed): left out."),
        "- einc: `einc.planner.plan_for(eq, shapes)` with the default options and a fresh cache folder (the "
        "search runs; nothing remembered).",
        "",
        "| instance (tensors) | einc: log10 flops, log2 largest | einc plan s (CPU s) | its allowance s "
        f"| cotengra {args.seconds:g} s | cotengra trials | annealing {args.seconds:g} s (runs) "
        "| einc / best peer flops | opt_einsum greedy | random-greedy-128 (einc's former default) | its plan s |",
        "|---|---|---:|---:|---|---:|---|---:|---|---|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {_f(r['einc'])} | {r['einc_t']:.2f} ({r['einc_cpu']:.2f}) | {r['allow']:.2f} "
                     f"| {_f(r['ctg'])} | {r['ctg_trials']} | {_f(r['anneal'])} ({r['anneal_runs']}) "
                     f"| {r['ratio']:.3g}x | {_f(r['greedy'])} | {_f(r['rg'])} | {r['rg_t']:.2f} |")
    within = sum(r["ratio"] <= 2 for r in rows)
    allowed = sum(r["einc_t"] <= r["allow"] for r in rows)
    allowed_cpu = sum(r["einc_cpu"] <= r["allow"] for r in rows)
    lines += ["", f"Geometric mean of einc / the best peer's flops: **{geo:.3g}x**"
              + (f"; worst {worst['ratio']:.3g}x ({worst['name']})." if worst else "."),
              f"Within 2x of the best peer's flops: **{within} of {len(rows)}**. Planned within the allowance (10 % of "
              f"the predicted time + 0.1 s): **{allowed} of {len(rows)}** by the clock, **{allowed_cpu} of "
              f"{len(rows)}** by CPU time.", ""]
    lines += ["What einc's search did (its explain line) per instance:", ""]
    for r in rows:
        lines.append(f"- {r['name']}: {r['note'].replace('Path search: ', '')}")
    if runs:
        lines += ["", "## End to end, first call (planning included), float64 on the CPU", "",
                  f"Medians of {args.rounds} rounds, each einc call a first one (every cache cleared).", "",
                  "| instance | einc s | of which its path search s | einc's second call s "
                  "| cotengra `einsum` s | opt_einsum `contract` s | einc / opt_einsum (CPU time) "
                  "| max rel. diff from opt_einsum: einc, cotengra "
                  "| flops / best peer's: einc, cotengra `einsum`, opt_einsum `contract` |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, o in runs:
            lines.append(f"| {name} | {o['einc']:.3f} | {o['search']:.3f} | {o['einc_again']:.3f} "
                         f"| {o['cotengra']:.3f} | {o['opt_einsum']:.3f} | {o['einc'] / o['opt_einsum']:.2f} "
                         f"({o['einc_cpu'] / o['opt_einsum_cpu']:.2f}) | {o['diff']:.1e}, {o['cotengra_diff']:.1e} "
                         f"| {o['einc_flops']:.3g}x, {o['ctg_quick']:.3g}x, {o['oe_quick']:.3g}x |")
        faster = sum(o["einc"] <= o["opt_einsum"] for _, o in runs)
        faster_cpu = sum(o["einc_cpu"] <= o["opt_einsum_cpu"] for _, o in runs)
        faster_ctg = sum(o["einc"] <= o["cotengra"] for _, o in runs)
        lines += ["", f"einc's first call no slower than `opt_einsum.contract`: **{faster} of {len(runs)}** by the "
                  f"clock, **{faster_cpu} of {len(runs)}** by CPU time; no slower than cotengra's `einsum`: "
                  f"**{faster_ctg} of {len(runs)}** by the clock.  Peers' quick paths within 2x of the best "
                  f"peer's flops: cotengra's {sum(o['ctg_quick'] <= 2 for _, o in runs)}, opt_einsum's "
                  f"{sum(o['oe_quick'] <= 2 for _, o in runs)} of {len(runs)}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
