"""Permuting copies on the CPU: torch's ``x.permute(...).contiguous()`` against the
alternatives tried for issue 23 (``einc/runtime/torch_executor/permute_copy.py`` keeps what won).

    python bench/permute_copy.py [--threads 1] [--rounds 21] [--budget 1.5] [--filter TEXT]
                                 [--perms [--tblis] [--inductor] [--sample N [--seed S]] [--dtype D]
                                  | --contract | --patch-inductor {transposes,all} | --inductor-checks
                                  | --model [--json FILE]] [--warm]

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
(``bench.pairwise.cpu_interleaved``, the methods in an order drawn anew each round with
``--seed``; ``--budget`` is not used).  ``--tblis`` adds a peer,
``tblis``: TBLIS's permuting add (``pytblis.add``, B = A permuted, ``alpha=1``, ``beta=0``)
from the source's numpy view into a fresh torch tensor's memory, on ``--threads`` TBLIS
threads (needs pytblis, not a dependency of einc; with one thread it runs on the calling
thread, so its CPU time is counted).  ``--inductor`` adds a peer, ``inductor``: C++ that
TorchInductor (torch's own compiler, gcc behind it) generates for ``x.permute(p).contiguous()``,
one compiled callable per (shape, permutation, dtype) (:func:`inductor_copy`:
``torch._inductor.compile`` on the copy's FX graph, ``cpp.threads`` 1 for the compile only;
no dynamo, so no recompile limits to raise and no global setting changed), each compile's
wall time printed (per tensor the median and the largest; the process's first compile, inductor's
set-up, apart).  Its caches are cold: a fresh ``TORCHINDUCTOR_CACHE_DIR`` for the run, removed
at exit, unless ``--warm`` (inductor's own folder, entries of earlier runs reused).  Per tensor
also each peer's geomean against einc and how many copies it makes 20 % faster.
``--sample N`` times at most ``N`` permutations a tensor, drawn with ``random.Random(--seed)``;
``--dtype`` the tensors' dtype (float32, float64, bfloat16, float16; the labels give float32's
MiB).

``--contract`` (with pytblis): the suite's ``permuted`` and ``pairwise`` workloads (``cpu``
variants, float32), TBLIS's contraction (``pytblis.contract``, no explicit transposes)
into a fresh contiguous torch tensor against einc (contiguous result) and opt_einsum's
expression (built once, ``backend="torch"``: a view where torch's is one), this thread's
CPU time as above: per workload the medians of per-round ratios to opt_einsum.

``--patch-inductor RULE``: the same workloads, einc as it is against einc with its permuting
copies (``_Copy.__call__`` of ``einc/runtime/torch_executor/permute_copy.py``) made by
:func:`inductor_copy`, a patch installed by this script only (:func:`patch_inductor`): the
copies of untracked contiguous CPU tensors of ``MIN_BYTES`` or more (``transposes``: only
those that move the source's innermost index; ``all``), each compiled in a first call
before timing; opt_einsum's expression and torch.einsum + ``.contiguous()`` as the
baselines, this thread's CPU time as above, per workload and family the medians of
per-round ratios.

``--inductor-checks``: the compiled copy's time per call on a (2, 3, 4) float32 tensor
beside ``clone``, torch's copy and ``torch.compile``'s of the same copy (dynamo in front),
and whether it copies every bit exactly (random bits, signalling NaNs and NaNs with
payloads, -0.0, subnormals) for float32, float64, bfloat16,
float16, complex64, int64 and bool, on three copies each.

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
``--contract``, ``--patch-inductor``: opt_einsum; ``--inductor``, ``--patch-inductor``,
``--inductor-checks``: a C++ compiler for inductor).
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import random
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torch.fx
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


class _Permute(torch.nn.Module):
    def __init__(self, perm):
        super().__init__()
        self.perm = perm

    def forward(self, x):
        return x.permute(self.perm).contiguous()


def inductor_copy(perm, shape, dtype):
    """``(fn, seconds)``: ``fn(x)`` is ``x.permute(perm).contiguous()`` for a contiguous ``x``
    of ``shape`` and ``dtype``, C++ that TorchInductor generated and gcc compiled
    (``torch._inductor.compile`` on the FX graph of the copy, with ``cpp.threads`` 1 for this
    compile only: no dynamo, so no guards or recompile limits to raise); ``seconds``, the
    compile's wall time.  ``fn`` checks the input's shape and strides."""
    gm = torch.fx.symbolic_trace(_Permute(tuple(perm)))
    t0 = time.perf_counter()
    fn = torch._inductor.compile(gm, [torch.zeros(shape, dtype=dtype)], options={"cpp.threads": 1})
    return fn, time.perf_counter() - t0


def inductor_cache(warm):
    """A fresh folder for inductor's on-disk caches (set as ``TORCHINDUCTOR_CACHE_DIR``,
    removed at exit), or None where ``warm`` (the user's own folder, its entries reused)."""
    if warm:
        return None
    import atexit
    import shutil
    import tempfile
    folder = tempfile.mkdtemp(prefix="einc-bench-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)
    return folder


# (dtype, bits dtype): --inductor-checks' copies, every bit pattern drawn (random bits, then
# NaNs with payloads, -0.0 and subnormals placed)
CHECK_DTYPES = ((torch.float32, torch.int32), (torch.float64, torch.int64), (torch.bfloat16, torch.int16),
                (torch.float16, torch.int16), (torch.complex64, torch.int32), (torch.int64, torch.int64),
                (torch.bool, torch.uint8))
CHECK_COPIES = (((3, 40, 36), (2, 0, 1)), ((64, 64, 4), (2, 1, 0)), ((16, 8, 12, 8), (3, 1, 0, 2)))


def _bits(shape, dtype, bits):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, dtype=torch.uint8).bool()
    width = torch.iinfo(bits).bits
    if dtype.is_complex:
        shape = (*shape, 2)
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * width // 8), dtype=torch.uint8).view(bits)
    if dtype.is_floating_point or dtype.is_complex:
        flat = raw.view(-1)
        exp_bits = {16: 5 if dtype == torch.float16 else 8, 32: 8, 64: 11}[width]
        mant = width - 1 - exp_bits
        nan = ((1 << exp_bits) - 1) << mant
        special = [nan | 1, nan | (1 << (mant - 1)) | 5, (1 << (width - 1)) | nan | 3,   # NaNs: signalling, payloads
                   1 << (width - 1), 1, (1 << mant) - 1, (1 << (width - 1)) | 7]          # -0.0, subnormals
        for i, v in enumerate(special):
            flat[i * 7] = v - (1 << width) if v >= 1 << (width - 1) else v
    out = raw.view(torch.complex64) if dtype.is_complex else raw.view(dtype)
    return out.view(shape[:-1]) if dtype.is_complex else out


def checks_main(args):
    """--inductor-checks: the compiled copy's cost per call on a tiny tensor, and whether it
    copies every bit pattern of each dtype exactly."""
    tiny = torch.randn(2, 3, 4)
    fn, seconds = inductor_copy((2, 0, 1), tiny.shape, tiny.dtype)
    dynamo = torch.compile(lambda a: a.permute(2, 0, 1).contiguous(), dynamic=False)
    fns = {"clone": tiny.clone, "torch": lambda: tiny.permute(2, 0, 1).contiguous(), "inductor": lambda: fn(tiny),
           "torch.compile": lambda: dynamo(tiny)}
    with torch._inductor.config.patch({"cpp.threads": 1}):
        for f in fns.values():
            f()
    t = cpu_interleaved(fns, args.rounds)
    print(f"- a (2, 3, 4) float32 copy, permutation (2, 0, 1), compiled in {seconds:.2f} s (and by "
          "torch.compile, dynamo's guards in front): "
          + ", ".join(f"{m} {t[m].median * 1e6:.2f} µs" for m in fns) + " a call (thread CPU, median)\n")
    print("| dtype | copy | compile s | result |")
    print("|---|---|---:|---|")
    torch.manual_seed(0)
    for dtype, bits in CHECK_DTYPES:
        for shape, perm in CHECK_COPIES:
            x = _bits(shape, dtype, bits)
            try:
                fn, seconds = inductor_copy(perm, shape, dtype)
                out = fn(x)
            except Exception as e:   # noqa: BLE001 (what inductor refuses is a finding)
                print(f"| {str(dtype)[6:]} | {shape} → {perm} | — | fails: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120]} |", flush=True)
                continue
            ref = x.permute(perm).contiguous()
            view = (lambda t: torch.view_as_real(t).view(bits)) if dtype.is_complex else (
                lambda t: t.view(torch.uint8) if dtype == torch.bool else t.view(bits))
            wrong = int((view(out) != view(ref)).sum())
            result = "exact" if wrong == 0 and out.shape == ref.shape and out.is_contiguous() else (
                f"{wrong} of {view(ref).numel()} elements' bits differ")
            print(f"| {str(dtype)[6:]} | {shape} → {perm} | {seconds:.2f} | {result} |", flush=True)


def _first_compile():
    """Prints the first compile's time: inductor's imports and set-up, a (2, 3) copy."""
    _, seconds = inductor_copy((1, 0), (2, 3), torch.float32)
    print(f"inductor's first compile in this process (its imports, a (2, 3) copy): {seconds:.2f} s\n")


def perm_list(n, sample, seed):
    """The permutations of ``n`` indices but the identity, or ``sample`` of them drawn with
    ``random.Random(seed)`` (in order) where there are more."""
    perms = [p for p in itertools.permutations(range(n)) if p != tuple(range(n))]
    if sample and len(perms) > sample:
        perms = sorted(random.Random(seed).sample(perms, sample))
    return perms


def perm_rows(args):
    """The permutations (:func:`perm_list`) of every :data:`PERM_SHAPES` tensor: ``(label,
    shape, perm, {method: ratio to clone}, compile seconds or None)``, the methods ``torch``
    and ``einc`` (and ``tblis``, ``inductor``)."""
    dtype = getattr(torch, args.dtype)
    for label, shape in PERM_SHAPES:
        if args.filter not in label:
            continue
        x = torch.randn(shape).to(dtype)
        n = len(shape)
        src = list(LETTERS[:n])
        for perm in perm_list(n, args.sample, args.seed):
            fast = pc.permuted_copy(src, [LETTERS[p] for p in perm], dict(zip(src, shape)))
            fns = {"clone": x.clone, "torch": lambda perm=perm: x.permute(perm).contiguous(),
                   "einc": lambda fast=fast: fast(x)}
            if args.tblis:
                tblis = tblis_copy(perm, shape)
                fns["tblis"] = lambda tblis=tblis: tblis(x)
            seconds = None
            if args.inductor:
                compiled, seconds = inductor_copy(perm, shape, dtype)
                fns["inductor"] = lambda compiled=compiled: compiled(x)
            for m in fns:
                if m not in ("clone", "torch"):
                    assert torch.equal(fns[m](), fns["torch"]()), (m, shape, perm)
            t = cpu_interleaved(fns, args.rounds, seed=args.seed)
            yield (label, shape, perm, {m: ratio_interval(t[m], t["clone"])[0] for m in fns if m != "clone"},
                   seconds)


def perms_main(args):
    peers = ("torch", "einc") + ("tblis",) * args.tblis + ("inductor",) * args.inductor
    best = peers[-1]
    print(f"{args.dtype}" + (f"; {args.sample} permutations a tensor at most, seed {args.seed}" if args.sample else "")
          + (f"; inductor's cache {'warm (its own folder)' if args.warm else 'cold (a fresh folder)'}"
             if args.inductor else "") + "\n")
    if args.inductor:
        _first_compile()
    print("| tensor | copies | " + " | ".join(f"{m} / clone: geomean, max, > 2x" for m in peers)
          + "".join(f" | {m} / einc: geomean, faster by 20 %" for m in peers[2:])
          + " | compile s: median, max" * args.inductor + f" | {best}'s worst (ratio) |")
    print("|---|---:|" + "---|" * (2 * len(peers) - 2 + args.inductor) + "---|")
    by_label, everything, seconds = {}, [], []
    for label, _shape, perm, r, s in perm_rows(args):
        by_label.setdefault(label, []).append((perm, r, s))
        everything.append((label, perm, r))
        seconds.append(s)
        print(f"{label} {perm}: " + ", ".join(f"{m} {r[m]:.2f}" for m in peers)
              + (f", compiled in {s:.2f} s" if s is not None else ""), file=sys.stderr, flush=True)
    for label, rows in by_label.items():
        cells = [_spread([r[m] for _, r, _ in rows]) for m in peers]
        cells += [_against([r[m] / r["einc"] for _, r, _ in rows]) for m in peers[2:]]
        if args.inductor:
            compiled = [s for *_, s in rows]
            cells.append(f"{statistics.median(compiled):.2f}, {max(compiled):.2f}")
        worst = sorted(rows, key=lambda pr: -pr[1][best])[:3]
        print(f"| {label} | {len(rows)} | " + " | ".join(cells) + " | "
              + ", ".join(f"{p} ({r[best]:.2f})" for p, r, _ in worst) + " |")
    print()
    for m in peers[2:]:
        vals = [r[m] / r["einc"] for *_, r in everything]
        if vals:
            print(f"- {m} / einc over all {len(vals)} copies: geomean {_geomean(vals):.2f}, "
                  f"range {min(vals):.2f}-{max(vals):.2f}, {m} faster by 20 % or more on "
                  f"{sum(v < 1 / 1.2 for v in vals)}, slower by 20 % or more on {sum(v > 1.2 for v in vals)}")
    for m in peers:
        vals = [r[m] for *_, r in everything]
        if vals:
            print(f"- {m} / clone over all {len(vals)} copies: geomean {_geomean(vals):.2f}, max {max(vals):.2f}, "
                  f"{sum(v > 2 for v in vals)} above 2x")
    if args.inductor and seconds:
        print(f"- inductor's compiles: {len(seconds)}, median {statistics.median(seconds):.2f} s, "
              f"max {max(seconds):.2f} s, total {sum(seconds):.0f} s")


def _spread(vals):
    return f"{_geomean(vals):.2f}, {max(vals):.2f}, {sum(v > 2 for v in vals)}"


def _against(vals):
    return f"{_geomean(vals):.2f}, {sum(v < 1 / 1.2 for v in vals)}"


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


def patch_inductor(rule):
    """Replaces ``_Copy.__call__`` (einc's permuting copies) by one that, while ``state["on"]``,
    copies each untracked contiguous CPU tensor of ``MIN_BYTES`` or more (``rule``
    ``"transposes"``: only where the source's innermost index moves) with the
    :func:`inductor_copy` for its permutation, shape and dtype, compiled while
    ``state["compile"]`` and counted in ``state["misses"]`` when missing.  A bench-only
    patch: nothing of it is kept in einc.  Returns ``state``."""
    original = pc._Copy.__call__
    state = {"on": False, "compile": False, "compiled": {}, "seconds": [], "misses": 0}

    def call(self, x):
        if (state["on"] and pc.untracked(x) and x.stride() == self.contiguous and not x.is_conj()
                and not x.is_neg() and x.numel() * x.element_size() >= pc.MIN_BYTES
                and (rule == "all" or _moves_inner(x.shape, self.perm))):
            key = (self.perm, tuple(x.shape), x.dtype)
            if key not in state["compiled"] and state["compile"]:
                state["compiled"][key], seconds = inductor_copy(self.perm, x.shape, x.dtype)
                state["seconds"].append(seconds)
            if key in state["compiled"]:
                return state["compiled"][key](x)
            state["misses"] += 1
        return original(self, x)
    pc._Copy.__call__ = call
    return state


def _moves_inner(shape, perm):
    """Whether ``perm`` moves the innermost index of size above 1 of a contiguous ``shape``."""
    live = [d for d in range(len(shape)) if shape[d] != 1]
    return bool(live) and [d for d in perm if shape[d] != 1][-1] != live[-1]


def patch_main(args):
    """--patch-inductor: the suite's permuted and pairwise workloads (cpu variants), einc as
    it is against einc with its permuting copies compiled by inductor (:func:`patch_inductor`,
    every copy compiled in a first call before timing), opt_einsum and torch.einsum +
    ``.contiguous()``: medians of per-round ratios of this thread's CPU time."""
    import opt_einsum

    from bench.pairwise import workloads
    from einc.tools.benchmark.runner import operands
    state = patch_inductor(args.patch_inductor)

    def patched(eq, ops):
        state["on"] = True
        try:
            return einc.einsum(eq, *ops)
        finally:
            state["on"] = False
    _first_compile()
    print(f"einc's copies replaced: {args.patch_inductor}\n")
    print("| family | id | equation | opt_einsum µs | copies compiled | einc / opt_einsum | +ind / opt_einsum | "
          "einc / (torch + `.contiguous()`) | +ind / (torch + `.contiguous()`) | +ind / einc |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    by_family = {}
    for w in workloads(load(find_suite()), args.filter, "cpu", ("permuted", "pairwise")):
        eq, ops = w["equation"], operands(w, "cpu", "cpu")
        expr = opt_einsum.contract_expression(eq, *[o.shape for o in ops])
        before = len(state["compiled"])
        state["compile"] = True
        out = patched(eq, ops)
        state["compile"] = False
        assert torch.equal(out, einc.einsum(eq, *ops)) and out.is_contiguous(), w["id"]
        fns = {"opt_einsum": lambda eq=eq, ops=ops: expr(*ops, backend="torch"),
               "contiguous": lambda eq=eq, ops=ops: torch.einsum(eq, *ops).contiguous(),
               "einc": lambda eq=eq, ops=ops: einc.einsum(eq, *ops), "+ind": lambda eq=eq, ops=ops: patched(eq, ops)}
        for f in fns.values():
            f()
        t = cpu_interleaved(fns, args.rounds, seed=args.seed)
        r = {f"{m} / {b}": ratio_interval(t[m], t[b])[0]
             for b in ("opt_einsum", "contiguous") for m in ("einc", "+ind")}
        r["+ind / einc"] = ratio_interval(t["+ind"], t["einc"])[0]
        by_family.setdefault(w["category"], []).append(r)
        print(f"| {w['category']} | {w['id']} | `{eq}` | {t['opt_einsum'].median * 1e6:.0f} | "
              f"{len(state['compiled']) - before} | " + " | ".join(f"{v:.2f}" for v in r.values()) + " |", flush=True)
    print()
    every = [r for rows in by_family.values() for r in rows]
    for family, rows in [*by_family.items(), ("both", every)]:
        print(f"- {family} ({len(rows)}): geomean " + ", ".join(
            f"{m.replace('contiguous', '(torch + .contiguous())')} {_geomean([r[m] for r in rows]):.2f}"
            for m in rows[0]))
    seconds = state["seconds"]
    print(f"- copies compiled: {len(seconds)}"
          + (f", median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s" if seconds else "")
          + f"; copies not compiled when timed (einc's own taken): {state['misses']}")


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


def _options(p):
    p.add_argument("--perms", action="store_true", help="every permutation of 3-6 index tensors against clone")
    p.add_argument("--tblis", action="store_true", help="with --perms: pytblis.add as a peer")
    p.add_argument("--inductor", action="store_true", help="with --perms: TorchInductor's compiled copy as a peer")
    p.add_argument("--warm", action="store_true", help="inductor's own cache folder, not a fresh one")
    p.add_argument("--sample", type=int, default=0, help="with --perms: at most this many permutations a tensor")
    p.add_argument("--seed", type=int, default=0, help="--sample's draw and the order of each round's calls")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64", "bfloat16", "float16"),
                   help="with --perms: the tensors' dtype")
    p.add_argument("--contract", action="store_true", help="pytblis.contract on the permuted and pairwise families")
    p.add_argument("--patch-inductor", choices=("transposes", "all"),
                   help="the permuted and pairwise families with einc's copies compiled by inductor")
    p.add_argument("--inductor-checks", action="store_true",
                   help="inductor's copy: cost per call on a tiny tensor, exactness for every dtype")
    p.add_argument("--model", action="store_true", help="copies of 64 KiB-32 MiB against the copy-cost model")
    p.add_argument("--json", help="with --model: every copy's figures, to this file")


def main(argv=None):
    args = cpu_setup(argv, __doc__, 21, 1.5, "copy", _options)
    if args.tblis or args.contract:
        try:
            import pytblis
        except ImportError:
            print("--tblis and --contract need pytblis (pip install pytblis)", file=sys.stderr)
            return 2
        pytblis.set_num_threads(args.threads)
    uses_inductor = args.inductor or args.patch_inductor or args.inductor_checks
    folder = inductor_cache(args.warm) if uses_inductor else None
    against = ("clone" if args.perms else "the model, ns per element" if args.model
               else "opt_einsum" if args.contract or args.patch_inductor else "torch [95 % interval]")
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s); medians of {args.rounds} interleaved rounds at most, "
          f"{args.budget:g} s per copy; ratios method / {against}"
          + (f"; inductor's cache: {folder or 'its own folder (--warm)'}, gcc" if uses_inductor else "") + "\n")
    for flag, run in ((args.perms, perms_main), (args.model, model_main), (args.contract, contract_main),
                      (args.patch_inductor, patch_main), (args.inductor_checks, checks_main)):
        if flag:
            run(args)
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
