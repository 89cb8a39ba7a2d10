"""einc's sliced contraction against cotengra's own, on the same network, tree and slices.

The network is examples/sliced_network.py's random circuit amplitude.  cotengra plans it
once, sliced to ``--limit`` elements (a ``ReusableHyperOptimizer``, seeded, so that einc,
given the same optimizer, contracts the very same tree: the script checks the path).
cotengra's slicing bounds each intermediate alone; einc's ``memory_limit`` bounds the
intermediates alive together and the copies steps make inside (operands laid out for a
matrix product), so einc slices some more indices by its own rule, and
cotengra's contraction is then run with einc's slices (the same tree, the same sliced
indices: the comparison stays like for like).  Interleaved,
``einc.einsum(..., optimize=opt, memory_limit=limit)`` and cotengra's
``tree.contract(arrays, backend="torch")`` (which loops over the slices itself) run
``--rounds`` times each.  Reported: the median times and their ratio (target: einc no
slower, ratio <= 1), and the peak growth of the heap in use during one call of each
(glibc's ``mallinfo2``, sampled after every torch op) and the growth of the process's
peak resident set size during one call (after a warm-up, with freed memory handed back
and the peak reset: Linux), against ``limit + operands + result`` (target: within 1.5x),
with einc's unsliced contraction of the same path for scale.  quimb is not used: it
contracts through cotengra, so it would time the same code.

A second table times a small network at tight limits, where per-slice overhead dominates
(:func:`grid_rows`; ``--grid-only`` runs just that).

    python bench/sliced.py [--rows 4 --cols 6 --depth 12 --limit 65536 --rounds 7 --threads 1 --seed 0]
                           [--grid 4 5 4] [--grid-only]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import einc
import einc.planner.equation

ROOT = Path(__file__).resolve().parent.parent


def _example():
    spec = importlib.util.spec_from_file_location("sliced_network", ROOT / "examples" / "sliced_network.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def _heap_in_use():
    """Bytes malloc has handed out and not yet taken back (glibc's ``mallinfo2``), or None."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return None

    def in_use() -> int:
        m = libc.mallinfo2()
        return m.uordblks + m.hblkhd
    return in_use


class _Sampler(TorchDispatchMode):
    """Samples the heap in use after every torch op."""

    def __init__(self, in_use):
        super().__init__()
        self.in_use = in_use
        self.base = in_use()
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, self.in_use() - self.base)
        return out


def peak_heap_bytes(fn):
    """The peak growth of malloc's bytes in use during ``fn()``, sampled after every torch
    op (so a temporary that lives only inside one op is missed), on the second of two
    calls; None off glibc."""
    in_use = _heap_in_use()
    if in_use is None:
        return None
    for _ in range(2):      # the first pass under the mode pays one-time costs: keep the second
        with _Sampler(in_use) as sampler:
            fn()
    return sampler.peak


def _status_kib(key: str):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return None


def peak_rss_bytes(fn):
    """The growth of the process's peak resident set size during ``fn()`` (the measure the
    issue names on the CPU), on the third of three calls: first malloc hands freed memory
    back to the system (glibc's ``malloc_trim``), then the peak (``VmHWM``) is reset to the
    current size (``/proc/self/clear_refs``, Linux), and after the call the new peak is
    read against the size before it.  Counts whole pages and malloc's own bookkeeping,
    which the heap sampling does not.  None where this cannot be measured."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    peak = None
    for _ in range(3):
        trim(0)
        before = _status_kib("VmRSS:")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            return None
        fn()
        after = _status_kib("VmHWM:")
        if before is None or after is None:
            return None
        peak = (after - before) * 1024
    return peak


def grid_rows(rows: int, cols: int, bond: int, rounds: int) -> None:
    """The small network of issue #24 at tight limits, where per-slice overhead dominates:
    the 4x5 grid (bond 4, float64; every operand at most 256 elements).  Interleaved:
    einc unsliced, ``memory_limit="max_input"`` against opt_einsum's ``contract(...,
    memory_limit="max_input", backend="torch")`` (target: einc within 3x), and einc at
    512 and 1024 elements (slices, chunks, estimated vs measured time); then how long
    ``memory_limit=64`` takes to answer, in a fresh cache (target: within 20 s)."""
    import opt_einsum
    eq, ops = _example().grid(rows, cols, bond)
    expected = torch.einsum(eq, *ops)
    calls = {"einc unsliced": lambda: einc.einsum(eq, *ops),
             "einc max_input": lambda: einc.einsum(eq, *ops, memory_limit="max_input"),
             "opt_einsum max_input": lambda: opt_einsum.contract(eq, *ops, memory_limit="max_input", backend="torch"),
             "einc 1024": lambda: einc.einsum(eq, *ops, memory_limit=1024),
             "einc 512": lambda: einc.einsum(eq, *ops, memory_limit=512)}
    for name, fn in calls.items():      # warm up, plan, check
        out = fn()
        assert torch.allclose(out, expected, rtol=1e-10), (name, out, expected)
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"grid {rows}x{cols}, bond {bond}, float64, {len(ops)} tensors; median of {rounds} interleaved rounds "
          "(results agree with torch.einsum):")
    for name, t in med.items():
        s = None
        if name.startswith("einc") and name != "einc unsliced":
            limit = name.split()[1]
            info = einc.explain(eq, *ops, memory_limit=limit if limit == "max_input" else int(limit))
            s = info.slicing
        extra = "" if s is None else (
            f"  {s.num_slices} slices (values per slice: "
            f"{', '.join(f'{info.graph.names[i]} {c} of {d}' for i, c, d in zip(s.indices, s.chunks, s.sizes))}), "
            f"estimated {s.seconds * 1e3:.3g} ms")
        print(f"  {name:22s} {t * 1e3:9.3f} ms{extra}")
    print(f"  einc max_input / opt_einsum max_input = {med['einc max_input'] / med['opt_einsum max_input']:.3f} "
          "(target <= 3)")
    einc.cache_clear()
    t = time.perf_counter()
    try:
        einc.einsum(eq, *ops, memory_limit=64)
        outcome = "ran"
    except einc.MemoryLimitError as e:
        outcome = f"MemoryLimitError: {str(e).splitlines()[0]}"
    print(f"  memory_limit=64 answered in {time.perf_counter() - t:.2f} s (target <= 20 s): {outcome}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--cols", type=int, default=6)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--limit", type=int, default=2 ** 16)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="seeds cotengra's search (random and numpy)")
    ap.add_argument("--grid", type=int, nargs=3, default=(4, 5, 4), metavar=("ROWS", "COLS", "BOND"),
                    help="the small network of the second table (issue #24's 4x5 grid, bond 4)")
    ap.add_argument("--grid-only", action="store_true", help="only the grid table")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.grid_only:
        grid_rows(*args.grid, args.rounds)
        return 0
    try:
        import cotengra as ctg
    except ImportError:
        print("cotengra is not installed: pip install 'einc[tn]'")
        return 1
    warnings.filterwarnings("ignore", message=".*kahypar.*")
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    try:
        import numpy
        numpy.random.seed(args.seed)
    except ImportError:
        pass
    ex = _example()
    ops, subs = ex.circuit(args.rows, args.cols, args.depth)
    call = ex.interleaved(ops, subs)
    with tempfile.TemporaryDirectory() as trees:
        opt = ctg.ReusableHyperOptimizer(methods=["greedy"], max_repeats=16, progbar=False, parallel=False,
                                         slicing_opts={"target_size": args.limit}, directory=trees)
        inputs = [tuple(s) for s in subs]
        sizes = {i: 2 for s in subs for i in s}
        tree = opt.search(inputs, (), sizes)
        info = einc.contract_path(*call, optimize=opt, memory_limit=args.limit)[1]
        s = info.slicing
        own = einc.contract_path(*call, optimize=opt)[1]        # no einc limit: cotengra's slicing as is
        same = [tuple(c) for c in info.path] == [tuple(c) for c in tree.get_path()] and s is not None and \
            set(tree.sliced_inds) <= set(s.indices)
        print(f"network: {args.rows}x{args.cols} qubits, depth {args.depth}, {len(ops)} tensors; cotengra (seed "
              f"{args.seed}): {tree.nslices} slices of at most {tree.max_size()} elements (limit {args.limit}); "
              f"einc contracts cotengra's tree and slices: {same}, with {len(s.indices) - len(tree.sliced_inds)} "
              f"more sliced by einc for the live bound: {s.num_slices} slices, at most {s.live} elements "
              f"alive at once, intermediates and step copies (with cotengra's slices alone: {own.slicing.live})")

        def run_einc():
            return einc.einsum(*call, optimize=opt, memory_limit=args.limit)

        # cotengra contracts trees over string indices: the same path, relabelled, with einc's sliced indices.
        name = einc.planner.equation.letter
        twin = ctg.ContractionTree.from_path([tuple(name(i) for i in t) for t in inputs], (),
                                             {name(i): n for i, n in sizes.items()}, path=tree.get_path())
        for i in s.indices:
            twin.remove_ind_(name(i))

        def run_cotengra():
            return twin.contract(ops, backend="torch")

        a, b = run_einc(), run_cotengra()       # warm up, plan, check
        print(f"results agree: {abs(complex(a) - complex(b)) <= 1e-5 * abs(complex(b))} "
              f"(einc {complex(a):.6e}, cotengra {complex(b):.6e})")
        times = {"einc": [], "cotengra": []}
        for _ in range(args.rounds):
            for name, fn in (("einc", run_einc), ("cotengra", run_cotengra)):
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"median of {args.rounds} interleaved rounds, {args.threads} thread(s): einc {med['einc'] * 1e3:.1f} ms, "
              f"cotengra {med['cotengra'] * 1e3:.1f} ms; einc / cotengra = {med['einc'] / med['cotengra']:.3f} "
              "(target <= 1)")
        item = ops[0].element_size()
        bound = (args.limit + sum(o.numel() for o in ops) + 1) * item
        print(f"einc's plan: at most {s.live * item / 2 ** 20:.3f} MiB alive at once per slice, intermediates and "
              f"the copies steps make inside (limit {args.limit * item / 2 ** 20:.3f} MiB); beyond that the heap "
              "holds the result and malloc's own overhead")
        for name, fn in (("einc", run_einc), ("cotengra", run_cotengra)):
            peak = peak_heap_bytes(fn)
            if peak is None:
                print("peak memory: needs glibc's mallinfo2")
                break
            print(f"peak heap growth, {name}: {peak / 2 ** 20:.3f} MiB = {peak / bound:.3f}x "
                  f"(limit + operands + result = {bound / 2 ** 20:.3f} MiB; target <= 1.5x)")
        for name, fn in (("einc", run_einc), ("cotengra", run_cotengra)):
            peak = peak_rss_bytes(fn)
            if peak is None:
                print("peak resident set size: needs Linux and glibc")
                break
            print(f"peak RSS growth, {name}: {peak / 2 ** 20:.3f} MiB = {peak / bound:.3f}x "
                  f"(limit + operands + result = {bound / 2 ** 20:.3f} MiB; target <= 1.5x; whole pages and "
                  "malloc's bookkeeping included)")
        unsliced = einc.contract_path(*call, optimize=info.path)[1]
        peak = peak_heap_bytes(lambda: einc.einsum(*call, optimize=info.path))
        if peak is not None:
            print(f"peak heap growth, einc unsliced on the same path: {peak / 2 ** 20:.3f} MiB "
                  f"(its largest intermediate: {unsliced.largest_intermediate * item / 2 ** 20:.3f} MiB, "
                  f"{s.unsliced_live * item / 2 ** 20:.3f} MiB alive at once)")
    grid_rows(*args.grid, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
