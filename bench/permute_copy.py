"""Permuting copies on the CPU: torch's ``x.permute(...).contiguous()`` against the
alternatives tried for issue 23 (``einc/runtime/torch_executor/permute_copy.py`` keeps what won).

    python bench/permute_copy.py [--threads 1] [--rounds 21] [--budget 1.5] [--filter TEXT]
                                 [--perms [--tblis] | --contract | --model [--json FILE]]

Two sets of copies, float32 unless named, each a tensor laid out in one index order
copied into a contiguous tensor over another:

- ``suite``: the permuting copies the torch executor makes on the suite's ``pairwise``
  workloads (``cpu`` variants), logged from the executor itself (every ``clone`` of a
  non-contiguous tensor during one call, ``TorchDispatchMode``), deduplicated;
- ``runs``: synthetic copies whose innermost run (the trailing indices kept, in order,
  from the source) is 2 to 16 elements of 1, 2 or 4 bytes.

Methods (each builds a fresh result, as the executor does), timed in interleaved rounds
(``einc.tools.benchmark.timing``), each ratio the median of the per-round ratios method /
``torch`` with its 95 % interval:

- ``memcpy``: a contiguous copy of as many bytes (the bandwidth bound);
- ``torch``: ``x.permute(p).contiguous()``;
- ``einc``: ``einc.runtime.torch_executor.permute_copy.permuted_copy`` (the 2-D transpose of long
  block swaps, the wide copy of runs of 16-48 bytes);
- ``wide``: the wide copy at any size, where it applies;
- ``blocked``: a ``copy_`` per slice of the result's leading index (each slice's source
  and result smaller, closer to the cache);
- ``inner``: a ``copy_`` per chunk of 256 elements of the result's innermost index
  (the source lines a chunk reads stay in L1);
- ``twostep``: two permutes through a temporary, first to the result's order with the
  source's innermost index kept innermost (a copy of long runs), then that index moved
  into place (a transpose within small blocks).

``--perms``: every permutation (the identity excepted) of the tensors in :data:`PERM_SHAPES`
(3 to 6 indices, 1-32 MiB of float32, short innermost indices among them), each timed
against ``clone`` of the same bytes: ``torch`` (``x.permute(p).contiguous()``) and
``einc`` (``permuted_copy``), per shape the geomean and the worst ratio to ``clone``, how
many copies exceed 2x, and the worst permutations.  Each ratio is the median over
``--rounds`` interleaved rounds of per-round ratios of this thread's CPU time
(``bench.pairwise.cpu_interleaved``; ``--budget`` is not used).  ``--tblis`` adds a peer,
``tblis``: TBLIS's permuting add (``pytblis.add``, B = A permuted, ``alpha=1``, ``beta=0``)
from the source's numpy view into a fresh torch tensor's memory, on ``--threads`` TBLIS
threads (needs pytblis, not a dependency of einc; with one thread it runs on the calling
thread, so its CPU time is counted).

``--contract`` (with pytblis): the suite's ``permuted`` and ``pairwise`` workloads (``cpu``
variants, float32), TBLIS's contraction (``pytblis.contract``, no explicit transposes)
into a fresh contiguous torch tensor against einc (contiguous result) and opt_einsum's
expression (built once, ``backend="torch"``: a view where torch's is one), this thread's
CPU time as above: per workload the medians of per-round ratios to opt_einsum.

``--model``: the copy-cost model (``einc.runtime.torch_executor.ttgt.copy_ns``) against the
copies it prices: tensors of 3 to 6 indices (:data:`MODEL_TEMPLATES`: short and long
innermost indices, every permutation of the 3-index ones, five of the others: reversed,
innermost index moved outermost and back, the two innermost swapped, the two outermost
swapped) of 64 KiB to 32 MiB, float32 and float64, each timed as ``clone``, ``torch``
(``permute(...).contiguous()``, what a tensor autograd records takes) and ``einc``
(``permuted_copy``, what the forward takes), this thread's CPU time as ``--perms``, in ns
per element beside the model's price (scaled by the element size, as the model is);
then how often the model orders two copies of one tensor (1.2x or more apart) as
measured.  ``--json FILE`` keeps every copy's figures.

Markdown on stdout.  Standard library, torch and einc (``--tblis``, ``--contract``: pytblis;
``--contract``: opt_einsum).
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import statistics
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import einc
from bench.pairwise import cpu_interleaved, cpu_setup
from einc.runtime.torch_executor import permute_copy as pc
from einc.tools.benchmark.suite import find_suite, load
from einc.tools.benchmark.timing import interleaved, ratio_interval

METHODS = ("memcpy", "torch", "einc", "wide", "blocked", "inner", "twostep")
LETTERS = "abcdefghijklmnop"


class _Clones(TorchDispatchMode):
    """Records ``(shape, strides, dtype)`` of every non-contiguous tensor cloned."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.clone.default and not args[0].is_contiguous():
            x = args[0]
            self.seen.append((tuple(x.shape), tuple(x.stride()), x.dtype))
        return func(*args, **(kwargs or {}))


def suite_cases(text=""):
    """``(name, source shape in its own order, permutation to the result, dtype)`` per copy."""
    found, cases = set(), []
    wide_from, pc.MIN_BYTES = pc.MIN_BYTES, math.inf          # log the copies as torch would make them
    try:
        ops_by_workload = _suite_copies(text)
    finally:
        pc.MIN_BYTES = wide_from
    for wid, seen in ops_by_workload:
        for shape, strides, dtype in seen:
            order = sorted(range(len(shape)), key=lambda d: -strides[d])   # the source's own order
            perm = tuple(order.index(d) for d in range(len(shape)))
            key = (tuple(shape[d] for d in order), perm)
            if key not in found and math.prod(shape) >= 1 << 14:
                found.add(key)
                cases.append((wid, key[0], perm, dtype))
    return cases


def _suite_copies(text):
    logged = []
    for w in load(find_suite())["workloads"]:
        if w["category"] != "pairwise" or "cpu" not in w["variants"] or text not in w["id"]:
            continue
        ops = [torch.randn(s) for s in w["variants"]["cpu"]["shapes"]]
        einc.einsum(w["equation"], *ops)
        with _Clones() as log:
            einc.einsum(w["equation"], *ops)
        logged.append((w["id"], log.seen))
    return logged


def run_cases():
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bool):
        for run in (2, 4, 6, 8, 12, 16):
            if dtype != torch.float32 and run in (6, 12):
                continue
            rows = (1 << 19) // run
            a = 64
            b = rows // (a * 32)
            cases.append((f"run {run}", (b, a, 32, run), (2, 1, 0, 3), dtype))
    return cases


# (label, shape): the source in its own order, float32, 1-32 MiB
PERM_SHAPES = (
    ("3: 64^3, 1 MiB", (64, 64, 64)),
    ("3: 512x512x32, 32 MiB", (512, 512, 32)),
    ("3: 1024x1024x4, 16 MiB", (1024, 1024, 4)),
    ("3: 4x1024x1024, 16 MiB", (4, 1024, 1024)),
    ("4: 24x48x40x48, 8.4 MiB", (24, 48, 40, 48)),
    ("4: 16x16x16x64, 1 MiB", (16, 16, 16, 64)),
    ("4: 64x64x64x4, 4 MiB", (64, 64, 64, 4)),
    ("4: 128x8x128x64, 32 MiB", (128, 8, 128, 64)),
    ("5: 16x24x20x16x8, 7.5 MiB", (16, 24, 20, 16, 8)),
    ("5: 8x32x8x32x16, 4 MiB", (8, 32, 8, 32, 16)),
    ("5: 32x2x64x32x2, 1 MiB", (32, 2, 64, 32, 2)),
    ("6: 8^6, 1 MiB", (8,) * 6),
    ("6: 16x8x12x8x6x16, 4.5 MiB", (16, 8, 12, 8, 6, 16)),
)


def tblis_copy(perm, shape):
    """``fn(x)``: ``x.permute(perm).contiguous()`` for an ``x`` of ``shape``, by ``pytblis.add``."""
    import pytblis
    src, dst = LETTERS[:len(perm)], "".join(LETTERS[p] for p in perm)
    out_shape = tuple(shape[p] for p in perm)

    def fn(x):
        out = torch.empty(out_shape, dtype=x.dtype)
        pytblis.add(x.numpy(), out.numpy(), src, dst, alpha=1.0, beta=0.0)   # beta's default is 1
        return out
    return fn


def perm_rows(args):
    """Every permutation of every :data:`PERM_SHAPES` tensor: ``(label, shape, perm,
    {method: ratio to clone})``, the methods ``torch`` and ``einc`` (and ``tblis``)."""
    for label, shape in PERM_SHAPES:
        if args.filter not in label:
            continue
        x = torch.randn(shape)
        n = len(shape)
        src = list(LETTERS[:n])
        for perm in itertools.permutations(range(n)):
            if perm == tuple(range(n)):
                continue
            fast = pc.permuted_copy(src, [LETTERS[p] for p in perm], dict(zip(src, shape)))
            fns = {"clone": x.clone, "torch": lambda perm=perm: x.permute(perm).contiguous(),
                   "einc": lambda fast=fast: fast(x)}
            if args.tblis:
                tblis = tblis_copy(perm, shape)
                fns["tblis"] = lambda tblis=tblis: tblis(x)
            for m in fns:
                if m not in ("clone", "torch"):
                    assert torch.equal(fns[m](), fns["torch"]()), (m, shape, perm)
            t = cpu_interleaved(fns, args.rounds)
            yield label, shape, perm, {m: ratio_interval(t[m], t["clone"])[0] for m in fns if m != "clone"}


def perms_main(args):
    peers = ("torch", "einc", "tblis") if args.tblis else ("torch", "einc")
    best = peers[-1]
    print("| tensor | copies | " + " | ".join(f"{m} / clone: geomean, max" for m in peers)
          + f" | {best} > 2x | {best}'s worst (ratio) |")
    print("|---|---:|" + "---|" * len(peers) + "---:|---|")
    by_label, everything = {}, []
    for label, _shape, perm, r in perm_rows(args):
        by_label.setdefault(label, []).append((perm, r))
        everything.append((label, perm, r))
        print(f"{label} {perm}: " + ", ".join(f"{m} {r[m]:.2f}" for m in peers), file=sys.stderr, flush=True)
    for label, rows in by_label.items():
        cells = []
        for m in peers:
            vals = [r[m] for _, r in rows]
            cells.append(f"{_geomean(vals):.2f}, {max(vals):.2f}")
        worst = sorted(rows, key=lambda pr: -pr[1][best])[:3]
        over = sum(r[best] > 2 for _, r in rows)
        print(f"| {label} | {len(rows)} | " + " | ".join(cells) + f" | {over} | "
              + ", ".join(f"{p} ({r[best]:.2f})" for p, r in worst) + " |")
    print()
    if args.tblis:
        vals = [r["tblis"] / r["einc"] for *_, r in everything]
        if vals:
            print(f"- tblis / einc over all {len(vals)} copies: geomean {_geomean(vals):.2f}, "
                  f"range {min(vals):.2f}-{max(vals):.2f}, tblis faster by 20 % or more on "
                  f"{sum(v < 1 / 1.2 for v in vals)}, slower by 20 % or more on {sum(v > 1.2 for v in vals)}")
    for m in peers:
        vals = [r[m] for *_, r in everything]
        if vals:
            print(f"- {m} / clone over all {len(vals)} copies: geomean {_geomean(vals):.2f}, max {max(vals):.2f}, "
                  f"{sum(v > 2 for v in vals)} above 2x")


def contract_main(args):
    import opt_einsum
    import pytblis

    from bench.pairwise import workloads
    from einc.tools.benchmark.runner import operands
    print("| family | id | equation | opt_einsum µs | einc / opt_einsum | tblis / opt_einsum | tblis / einc |")
    print("|---|---|---|---:|---:|---:|---:|")
    by_family = {}
    for w in workloads(load(find_suite()), args.filter, "cpu", ("permuted", "pairwise")):
        eq, ops = w["equation"], operands(w, "cpu", "cpu")
        expr = opt_einsum.contract_expression(eq, *[o.shape for o in ops])
        shape = einc.einsum(eq, *ops).shape

        def tblis(eq=eq, ops=ops, shape=shape):
            out = torch.empty(shape, dtype=ops[0].dtype)
            pytblis.contract(eq, *[o.numpy() for o in ops], out=out.numpy(), allow_partial_trace=True)
            return out
        fns = {"opt_einsum": lambda eq=eq, ops=ops: expr(*ops, backend="torch"),
               "einc": lambda eq=eq, ops=ops: einc.einsum(eq, *ops), "tblis": tblis}
        ref = torch.einsum(eq, *[o.double() for o in ops])
        assert torch.allclose(tblis().double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max())), w["id"]
        t = cpu_interleaved(fns, args.rounds)
        r = {m: ratio_interval(t[m], t["opt_einsum"])[0] for m in ("einc", "tblis")}
        r["tblis / einc"] = ratio_interval(t["tblis"], t["einc"])[0]
        by_family.setdefault(w["category"], []).append(r)
        print(f"| {w['category']} | {w['id']} | `{eq}` | {t['opt_einsum'].median * 1e6:.0f} | {r['einc']:.2f} | "
              f"{r['tblis']:.2f} | {r['tblis / einc']:.2f} |", flush=True)
    print()
    for family, rows in by_family.items():
        print(f"- {family} ({len(rows)}): geomean " + ", ".join(
            f"{m if m == 'tblis / einc' else m + ' / opt_einsum'} {_geomean([r[m] for r in rows]):.2f}"
            for m in ("einc", "tblis", "tblis / einc")))


def _geomean(vals):
    return math.exp(statistics.fmean(math.log(v) for v in vals))


def _source(shape, dtype):
    x = torch.randn(shape) * 100
    return x > 0 if dtype == torch.bool else x.to(dtype)


def methods(x, perm):
    """``{name: fn}`` for the source ``x`` (contiguous, in its own order) and ``perm``."""
    n = len(perm)
    src, dst = list(LETTERS[:n]), [LETTERS[p] for p in perm]
    sizes = dict(zip(src, x.shape))
    flat = x.reshape(-1)
    y = x.permute(perm)
    out_shape = y.shape
    fns = {"memcpy": lambda: flat.clone(), "torch": lambda: x.permute(perm).contiguous(),
           "einc": lambda: fast(x)}
    fast = pc.permuted_copy(src, dst, sizes)
    plan = pc.wide_plan(tuple(y.shape), y.stride(), 0, x.element_size())
    if plan is not False:
        merged, wide, _ = plan
        fns["wide"] = lambda: y.reshape(merged).view(wide).contiguous().view(x.dtype).view(out_shape)

    def blocked():
        out = torch.empty(out_shape, dtype=x.dtype)
        for i in range(out_shape[0]):
            out[i].copy_(y[i])
        return out
    if out_shape[0] <= 64:
        fns["blocked"] = blocked

    def inner():
        out = torch.empty(out_shape, dtype=x.dtype)
        last = out_shape[-1]
        for j in range(0, last, 256):
            w = min(256, last - j)
            out.narrow(-1, j, w).copy_(y.narrow(-1, j, w))
        return out
    if out_shape[-1] > 256:
        fns["inner"] = inner
    s_inner = n - 1                                    # the source's innermost index
    if perm[-1] != s_inner:
        mid = [p for p in perm if p != s_inner] + [s_inner]
        back = [mid.index(p) for p in perm]
        fns["twostep"] = lambda: x.permute(mid).contiguous().permute(back).contiguous()
    for name, fn in fns.items():
        if name != "memcpy":
            assert torch.equal(fn(), y.contiguous()), name
    return fns


# (label, shape with 0 for the index sized to the target bytes, permutations): --model's copies
MODEL_TEMPLATES = (
    ("3: (F, 4, 500)", (0, 4, 500), "all"),
    ("3: (F, 500, 4)", (0, 500, 4), "all"),
    ("3: (F, 64, 64)", (0, 64, 64), "all"),
    ("3: (F, 16, 2)", (0, 16, 2), "all"),
    ("4: (F, 16, 16, 16)", (0, 16, 16, 16), "some"),
    ("4: (F, 64, 4, 4)", (0, 64, 4, 4), "some"),
    ("5: (F, 8, 8, 8, 8)", (0, 8, 8, 8, 8), "some"),
    ("5: (F, 2, 16, 16, 2)", (0, 2, 16, 16, 2), "some"),
    ("6: (F, 4, 8, 4, 8, 4)", (0, 4, 8, 4, 8, 4), "some"),
)
MODEL_BYTES = (64 << 10, 512 << 10, 2 << 20, 8 << 20, 32 << 20)


def _model_perms(n, which):
    """All permutations but the identity, or five: the order reversed, the innermost index
    moved outermost, the outermost innermost, the two innermost swapped (a transpose) and
    the two outermost swapped (a copy keeping the innermost index)."""
    if which == "all":
        return [p for p in itertools.permutations(range(n)) if p != tuple(range(n))]
    last, first = n - 1, 0
    return [tuple(reversed(range(n))), (last, *range(last)), (*range(1, n), first),
            (*range(n - 2), last, n - 2), (1, 0, *range(2, n))]


def model_cases(text=""):
    """``(label, shape, perm, dtype)`` of --model's copies."""
    for dtype in (torch.float32, torch.float64):
        itemsize = torch.empty((), dtype=dtype).element_size()
        for nbytes in MODEL_BYTES:
            for label, shape, which in MODEL_TEMPLATES:
                if text not in label:
                    continue
                rest = math.prod(s for s in shape if s)
                full = tuple(s or max(nbytes // itemsize // rest, 1) for s in shape)
                for perm in _model_perms(len(shape), which):
                    yield label, full, perm, dtype


def model_row(shape, perm, dtype, rounds):
    """ns per element of ``clone``, ``torch`` (``permute(...).contiguous()``, the copy a
    tracked tensor takes) and ``einc`` (``permuted_copy``, an untracked one), and the
    model's (``ttgt.copy_ns``, scaled by the element size as the model scales it)."""
    from einc.runtime.torch_executor import ttgt
    src = LETTERS[:len(shape)]
    dst = "".join(src[p] for p in perm)
    sizes = dict(zip(src, shape))
    x = torch.randn(shape, dtype=dtype)
    fast = pc.permuted_copy(list(src), list(dst), sizes)
    fns = {"clone": x.clone, "torch": lambda: x.permute(perm).contiguous(), "einc": lambda: fast(x)}
    assert torch.equal(fns["einc"](), fns["torch"]())
    for fn in fns.values():
        fn()
    t = cpu_interleaved(fns, rounds)
    n = x.numel()
    row = {m: t[m].median * 1e9 / n for m in fns}
    row["model"] = ttgt.copy_ns(src, dst, sizes) * x.element_size() / 4 / n
    return row


def model_main(args):
    """--model: every copy of :func:`model_cases`, measured against the copy-cost model."""
    import json
    print("| tensor | dtype | MiB | permutation | clone | torch | einc | model | torch / model | einc / model |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for label, shape, perm, dtype in model_cases(args.filter):
        r = model_row(shape, perm, dtype, args.rounds)
        mib = math.prod(shape) * torch.empty((), dtype=dtype).element_size() / 2**20
        rows.append({"label": label, "shape": shape, "perm": perm, "dtype": str(dtype).replace("torch.", ""),
                     "mib": mib, **r})
        print(f"| {label} {shape} | {rows[-1]['dtype']} | {mib:.3g} | {perm} | {r['clone']:.3f} | {r['torch']:.3f} | "
              f"{r['einc']:.3f} | {r['model']:.3f} | {r['torch'] / r['model']:.2f} | {r['einc'] / r['model']:.2f} |",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    print()
    for m in ("torch", "einc"):
        pairs = [(a, b) for a in rows for b in rows if a["shape"] == b["shape"] and a["dtype"] == b["dtype"]
                 and a["perm"] < b["perm"] and abs(math.log(a[m] / b[m])) > math.log(1.2)]
        agree = sum((a[m] < b[m]) == (a["model"] < b["model"]) for a, b in pairs)
        print(f"- {m}: measured / model geomean {_geomean([r[m] / r['model'] for r in rows]):.2f} "
              f"over {len(rows)} copies; the model orders {agree} of {len(pairs)} pairs of copies "
              f"of one tensor as measured (pairs 1.2x or more apart)")


def main(argv=None):
    args = cpu_setup(argv, __doc__, 21, 1.5, "copy",
                     lambda p: (p.add_argument("--perms", action="store_true",
                                               help="every permutation of 3-6 index tensors against clone"),
                                p.add_argument("--tblis", action="store_true",
                                               help="with --perms: pytblis.add as a peer"),
                                p.add_argument("--contract", action="store_true",
                                               help="pytblis.contract on the permuted and pairwise families"),
                                p.add_argument("--model", action="store_true",
                                               help="copies of 64 KiB-32 MiB against the copy-cost model"),
                                p.add_argument("--json", help="with --model: every copy's figures, to this file")))
    if args.tblis or args.contract:
        try:
            import pytblis
        except ImportError:
            print("--tblis and --contract need pytblis (pip install pytblis)", file=sys.stderr)
            return 2
        pytblis.set_num_threads(args.threads)
    against = ("clone" if args.perms else "the model, ns per element" if args.model
               else "opt_einsum" if args.contract else "torch [95 % interval]")
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s); medians of {args.rounds} interleaved rounds at most, "
          f"{args.budget:g} s per copy; ratios method / {against}\n")
    if args.perms:
        perms_main(args)
        return 0
    if args.model:
        model_main(args)
        return 0
    if args.contract:
        contract_main(args)
        return 0
    print("| set | copy | source shape → permutation | dtype | run bytes | torch µs | "
          + " | ".join(m for m in METHODS if m != "torch") + " |")
    print("|---|---|---|---|---:|---:|" + "---:|" * (len(METHODS) - 1))
    logs = {m: [] for m in METHODS}
    for set_name, cases in (("suite", suite_cases()), ("runs", run_cases())):
        for name, shape, perm, dtype in cases:
            if args.filter not in name:
                continue
            x = _source(shape, dtype)
            fns = methods(x, perm)
            t, _ = interleaved(fns, rounds=args.rounds, budget=args.budget)
            y = x.permute(perm)
            run = 1
            for d in reversed(range(len(perm))):
                if y.stride(d) != run:
                    break
                run *= y.shape[d]
            cells = []
            for m in METHODS:
                if m == "torch":
                    continue
                if m not in t:
                    cells.append("—")
                    continue
                r = ratio_interval(t[m], t["torch"])
                logs[m].append((set_name, r[0]))
                cells.append(f"{r[0]:.2f} [{r[1]:.2f}-{r[2]:.2f}]")
            print(f"| {set_name} | {name} | {tuple(shape)} → {perm} | {str(dtype).replace('torch.', '')} | "
                  f"{run * x.element_size()} | {t['torch'].median * 1e6:.0f} | " + " | ".join(cells) + " |",
                  flush=True)
    print()
    for m in METHODS:
        for set_name in ("suite", "runs"):
            vals = [v for s, v in logs[m] if s == set_name]
            if vals and m != "memcpy":
                gm = math.exp(statistics.fmean(math.log(v) for v in vals))
                print(f"- {m} / torch, {set_name}: geomean {gm:.2f} over {len(vals)} copies, "
                      f"range {min(vals):.2f}-{max(vals):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
