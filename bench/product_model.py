"""Matrix products on the CPU against the copy-cost model's price of them
(``einc.runtime.torch_executor.ttgt._product_ns``).

    python bench/product_model.py [--threads 1] [--rounds 5] [--filter float64] [--thin] [--json FILE]
    python bench/product_model.py --from FILE [--set NAME=VALUE ...]      # no timing: the model again

Every product of a grid: ``b`` matrices (``mm`` where ``b`` is 1, else ``bmm``) of
``M x K`` by ``K x N``, each of M, N and K in :data:`SIDES`, ``b`` in :data:`BATCHES`,
those of at most :data:`MOST` multiply-adds, float32 and float64 (``--thin``: the thin grid
instead, :func:`thin_shapes`, a large operand by a small one in float32, float64, complex64
and complex128, each large side as M and as N); each in every orientation
its sides allow: the left operand read along its columns (``N``: unit stride on K, as
``torch.mm`` reads a contiguous matrix) or along its rows (``T``: unit stride on M, a
transposed view), the right one along its rows (``N``: unit stride on N) or along K
(``T``).  Each product writes a fresh contiguous result, as the executor's does.  Timed in
interleaved rounds of this thread's CPU time (``bench.pairwise.cpu_interleaved``), the
orientations of one product in one round; the time of a ``1 x 1`` ``mm`` (the call's
dispatch, which every layout of a step pays alike and the model leaves out) is taken off.

Against the model's price of the same product (``rows_unit``: the left operand read along
its rows; ``k_unit``: the right one along K, where ``ttgt._k_unit_applies``), scaled by the
element size as the model scales it: per dtype and orientation the rms of log(measured /
model) and its geomean, over the products of 2 us or more (below, what a call costs besides
its flops, not modelled, weighs more); then each orientation's price relative to ``NN``
against the measured ratio (what the layout choice weighs: its rms log error and worst
cases), and a table of the measured ``TN / NN`` by N and M (medians over K and b).
``--set NAME=VALUE`` (one of ttgt's constants) prices with that setting; ``--from FILE``
reads the figures a ``--json FILE`` run kept instead of timing.  Markdown on stdout.
Standard library, torch and einc.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from bench.pairwise import cpu_interleaved
from einc.runtime.torch_executor import ttgt

SIDES = (1, 3, 5, 8, 16, 32, 64, 128, 512, 2048)
BATCHES = (1, 32, 512)
DTYPES = ("float32", "float64")
# --thin: products of one large operand (2**18 to 2**22 elements over THIN_ROWS rows) and a
# small one (a gate's), each large side in either place, every dtype of THIN_DTYPES
THIN_ROWS = (1 << 16, 1 << 18, 1 << 20)
THIN_BATCHES = (1, 16)
THIN_SMALL = (2, 4, 8, 16)
THIN_DEPTHS = (2, 4, 8, 16, 32, 64)
THIN_LARGE = (1 << 18, 1 << 22)
THIN_DTYPES = ("float32", "float64", "complex64", "complex128")
MOST = 1 << 27          # multiply-adds of the largest product timed
SHORTEST = 2000         # ns: products faster than this are listed but not in the fit's figures
ORIENTS = ("NN", "TN", "NT", "TT")


def shapes(text=""):
    """``(dtype, b, M, N, K)`` of the grid, ``text`` a substring of ``"float32 b=.. M=.. N=.. K=.."``."""
    for dtype in DTYPES:
        for b, m, n, k in itertools.product(BATCHES, SIDES, SIDES, SIDES):
            if b * m * n * k <= MOST and text in _label(dtype, b, m, n, k):
                yield dtype, b, m, n, k


def thin_shapes(text=""):
    """``(dtype, b, M, N, K)`` of the thin grid (``--thin``): ``b`` matrices whose large side
    has ``THIN_ROWS / b`` rows, each ``K`` deep, its operand of ``THIN_LARGE`` elements, by a
    small operand of ``THIN_SMALL`` columns; the large side as M, then as N."""
    for dtype in THIN_DTYPES:
        for b, rows, small, k in itertools.product(THIN_BATCHES, THIN_ROWS, THIN_SMALL, THIN_DEPTHS):
            if not THIN_LARGE[0] <= rows * k <= THIN_LARGE[1]:
                continue
            for m, n in ((rows // b, small), (small, rows // b)):
                if text in _label(dtype, b, m, n, k):
                    yield dtype, b, m, n, k


def _label(dtype, b, m, n, k):
    return f"{dtype} b={b} M={m} N={n} K={k}"


def orients(m, n, k):
    """The orientations a product of these sides has (an operand with a side of 1 reads alike either way)."""
    left = "NT" if m > 1 and k > 1 else "N"
    right = "NT" if k > 1 and n > 1 else "N"
    return [a + c for a in left for c in right]


def _operand(x, transposed):
    """The ``(b, rows, cols)`` stack ``x`` (``(rows, cols)`` where ``b`` is 1), read along its rows if
    ``transposed`` (a copy of its transposes, viewed back)."""
    x = x.transpose(1, 2).contiguous().transpose(1, 2) if transposed else x
    return x[0] if x.shape[0] == 1 else x


def measure(dtype, b, m, n, k, rounds):
    """``{orientation: ns}`` of one product, the dispatch's time taken off."""
    dt = getattr(torch, dtype)
    mm = torch.mm if b == 1 else torch.bmm
    left, right, fns = torch.randn((b, m, k), dtype=dt), torch.randn((b, k, n), dtype=dt), {}
    for o in orients(m, n, k):
        x, y = _operand(left, o[0] == "T"), _operand(right, o[1] == "T")
        fns[o] = (lambda x=x, y=y: mm(x, y))
    ref = fns["NN"]()
    for o, fn in fns.items():
        assert torch.allclose(fn(), ref, rtol=1e-4, atol=1e-3), o
    t = cpu_interleaved(fns, rounds)
    return {o: max(t[o].median * 1e9 - _dispatch(mm, dt), 1.0) for o in fns}


_DISPATCH = {}


def _dispatch(mm, dt):
    """ns of the smallest product's call (``mm`` or ``bmm`` of 1 x 1 matrices)."""
    key = mm, dt
    if key not in _DISPATCH:
        x = torch.ones((1, 1) if mm is torch.mm else (1, 1, 1), dtype=dt)
        mm(x, x)
        _DISPATCH[key] = cpu_interleaved({"one": lambda: mm(x, x)}, 9)["one"].median * 1e9
    return _DISPATCH[key]


def price(dtype, b, m, n, k, o):
    """The model's ns of the product (ttgt._product_ns, as ttgt._cost asks for it)."""
    dims = (b, m, n, k)
    scale = getattr(torch, dtype).itemsize / 4
    return ttgt._product_ns(*dims, scale, o[0] == "T", o[1] == "T" and ttgt._k_unit_applies(dims))


def _rms(vals):
    return math.sqrt(statistics.fmean([v * v for v in vals])) if vals else float("nan")


def _gm(vals):
    return math.exp(statistics.fmean(vals)) if vals else float("nan")


def report(rows):
    """The markdown of the module's docstring, of ``rows`` (``{dtype, b, m, n, k, ns: {o: ns}}``)."""
    print("| dtype | orientation | products | measured / model geomean | rms log error | worst (measured / model) |")
    print("|---|---|---:|---:|---:|---|")
    dtypes = [d for d in (*DTYPES, *THIN_DTYPES[2:]) if any(r["dtype"] == d for r in rows)]
    for dtype, o in itertools.product(dtypes, ORIENTS):
        got = [(r, math.log(r["ns"][o] / price(dtype, r["b"], r["m"], r["n"], r["k"], o))) for r in rows
               if r["dtype"] == dtype and o in r["ns"] and r["ns"][o] >= SHORTEST]
        if got:
            worst = sorted(got, key=lambda g: -abs(g[1]))[:3]
            print(f"| {dtype} | {o} | {len(got)} | {_gm([g for _, g in got]):.2f} | {_rms([g for _, g in got]):.2f} | "
                  + ", ".join(f"{_shape(r)} {math.exp(g):.2f}" for r, g in worst) + " |")
    print("\nEach orientation against `NN` (the layout choice weighs these): measured ratio against the model's.\n")
    print("| dtype | orientation | products | rms log error | model / measured geomean | worst (measured, model) |")
    print("|---|---|---:|---:|---:|---|")
    for dtype, o in itertools.product(dtypes, ORIENTS[1:]):
        got = []
        for r in rows:
            if r["dtype"] == dtype and o in r["ns"] and min(r["ns"][o], r["ns"]["NN"]) >= SHORTEST:
                meas = r["ns"][o] / r["ns"]["NN"]
                mod = price(dtype, r["b"], r["m"], r["n"], r["k"], o) / price(dtype, r["b"], r["m"], r["n"], r["k"],
                                                                                 "NN")
                got.append((r, meas, mod, math.log(mod / meas)))
        if got:
            worst = sorted(got, key=lambda g: -abs(g[3]))[:4]
            print(f"| {dtype} | {o} | {len(got)} | {_rms([g[3] for g in got]):.2f} | "
                  f"{_gm([g[3] for g in got]):.2f} | "
                  + ", ".join(f"{_shape(r)} {a:.2f}, {p:.2f}" for r, a, p, _ in worst) + " |")
    for dtype in dtypes:
        _ratio_table(rows, dtype, "TN")


def _ratio_table(rows, dtype, o):
    """Measured ``o / NN`` by N (rows of the table) and M (columns), medians over K and b."""
    cells = {}
    for r in rows:
        if r["dtype"] == dtype and o in r["ns"] and min(r["ns"][o], r["ns"]["NN"]) >= SHORTEST:
            cells.setdefault((r["n"], r["m"]), []).append(r["ns"][o] / r["ns"]["NN"])
    ms = sorted({m for _, m in cells})
    print(f"\n{dtype}, measured {o} / NN by N (rows) and M (columns), medians over K and b (products of "
          f"{SHORTEST / 1000:g} us or more):\n")
    print("| N \\ M | " + " | ".join(map(str, ms)) + " |")
    print("|---:|" + "---:|" * len(ms))
    for n in sorted({n for n, _ in cells}):
        print(f"| {n} | " + " | ".join(f"{statistics.median(cells[n, m]):.2f}" if (n, m) in cells else "" for m in ms)
              + " |")


def _shape(r):
    return f"{r['b']}x{r['m']}x{r['n']}x{r['k']}"


def setting(text):
    name, _, value = text.partition("=")
    if not hasattr(ttgt, name):
        raise argparse.ArgumentTypeError(f"ttgt has no constant {name}")
    return name, float(value)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--filter", default="")
    p.add_argument("--thin", action="store_true", help="the thin grid (thin_shapes), every dtype of THIN_DTYPES")
    p.add_argument("--json", help="every product's figures, to this file")
    p.add_argument("--from", dest="source", help="the figures of a --json run: the model again, no timing")
    p.add_argument("--set", dest="settings", type=setting, action="append", default=[])
    args = p.parse_args(argv)
    for name, value in args.settings:
        setattr(ttgt, name, value)
    if args.source:
        with open(args.source) as f:
            rows = [r for r in json.load(f) if args.filter in _label(r["dtype"], r["b"], r["m"], r["n"], r["k"])]
    else:
        torch.set_num_threads(args.threads)
        print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
              f"with {args.threads} thread(s); medians of {args.rounds} interleaved rounds, this thread's CPU time\n",
              flush=True)
        rows = []
        for dtype, b, m, n, k in (thin_shapes if args.thin else shapes)(args.filter):
            rows.append({"dtype": dtype, "b": b, "m": m, "n": n, "k": k, "ns": measure(dtype, b, m, n, k, args.rounds)})
            print(f"{dtype} {_shape(rows[-1])}: " + ", ".join(f"{o} {v:.0f}" for o, v in rows[-1]["ns"].items()),
                  file=sys.stderr, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f)
    if args.settings:
        print("Priced with " + ", ".join(f"{n} = {v:g}" for n, v in args.settings) + "\n")
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
