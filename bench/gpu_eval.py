"""GPU verdict for einc: correctness, timings against torch and cuBLAS, overhead, four gates.

    python bench/gpu_eval.py --part gemm|rest|pairwise|compare|all [--filter REGEX] [--out DIR]
                             [--deadline S] [--row-timeout S] [--quick] [--device cuda|cpu]

The protocol is docs/gpu-review.md section 6 (in the project's shared docs): a GPU is
measured in at most three commands of at most 10 minutes each.  Run them back to back, on
the same machine, with Triton's and einc's caches in the working tree (git-ignored) so
that a later command reuses the kernels and autotuned configs of an earlier one:

    set -o pipefail; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.tcache \\
      EINC_CACHE_DIR=$PWD/.ecache TRITON_CACHE_AUTOTUNING=1; mkdir -p OUT; \\
      nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv;
    timeout 560 python3 bench/gpu_eval.py --part gemm --out OUT 2>&1 | tee OUT/gemm.log
    timeout 560 python3 bench/gpu_eval.py --part rest --out OUT 2>&1 | tee OUT/rest.log
    timeout 560 python3 bench/gpu_eval.py --part compare --out OUT 2>&1 | tee OUT/compare.log
    timeout 560 python3 bench/gpu_eval.py --part pairwise --out OUT 2>&1 | tee OUT/pairwise.log

(with the same prefix before each; on CUDA the script sets those three variables to the
same folders itself where they are unset, and ``TRITON_PRINT_AUTOTUNING=1`` so that the
log names the config Triton chose per kernel).

Parts (the suite's categories, ``bench/suite.json``, ``gpu`` variants):

- ``gemm``: attention, moe, bilinear, layout (14 workloads);
- ``rest``: small, reduction, chain, chemistry, then tensor_network (18; the complex64
  tensor networks come last, so the deadline drops them first), plus a cProfile of
  einc's host path on ``tiny_gemm_16`` and ``scf_diis_error``;
- ``pairwise``: the 17 two-operand permuted contractions (TCCG, CCSD, CCSD(T),
  tensor-times-matrix, AO->MO, attention layouts), then the 7 of the ``permuted``
  family (reversed or scrambled results around small summed indices) and the
  ``broadcast`` family's GPU rows (size-1 dimensions that broadcast), a fourth command;
- ``compare``: six rows against ``torch.compile(lambda *o: torch.einsum(eq, *o),
  dynamic=False)`` (inductor: default mode for all six, ``max-autotune-no-cudagraphs``
  for gemma_q_proj and gshard_expert_ffn, ``reduce-overhead`` for matrix_chain_4), then
  register/spill counts and instruction counts of einc's compiled kernels (``cuobjdump``
  on the ``.cubin`` files under ``TRITON_CACHE_DIR``);
- ``all`` (default): every workload, no extras.

``--filter`` keeps the workloads whose id or category matches the regular expression
(``re.search``; a filter that is not a valid expression is taken as a substring).

Per workload (every measurement in its own ``try``: a failure is recorded in the CSV's
``error`` column and the run goes on):

- operands: ``einc.tools.benchmark.runner.operands`` (``torch.randn`` in the variant's dtype,
  seed 0; tensor networks scaled to unit norm); the reference is ``torch.einsum`` on
  float64 (complex128) copies on the same device.
- correctness: before each checked einc call a NaN-filled block of the output's size is
  allocated and freed, so the caching allocator hands einc poisoned memory
  (``poison`` = how many of the two checked calls got that very block back, by
  ``data_ptr``).  ``err`` = ``||out - ref|| / ||ref||`` (the larger of the first call and
  a second call on fresh operands drawn with seed 1), ``nan`` = any NaN in either output,
  ``err_torch`` = torch.einsum's own error on the seed-0 operands.
- ``first_s``: wall seconds of einc's first call (plan, codegen, compile, autotune).
- timings (CSV in µs; on CUDA each is the median of ``triton.testing.do_bench(fn,
  warmup=25, rep=100, return_mode="median")``: CUDA events around each call, L2 flushed
  between calls; on the CPU, or without triton, the median over rounds of calibrated
  batches timed with ``time.perf_counter``, see ``einc/tools/benchmark/timing.py``):
  ``einc`` (``einc.einsum``, default settings), ``torch`` (``torch.einsum``), ``torch_c``
  (``torch.einsum(...).contiguous()``, ``.clone()`` where the result shares an input's
  storage: the fresh contiguous tensor einc returns), ``einc_blas`` (einc with
  ``EINC_BACKEND=torch`` after ``einc.cache_clear()``: the same plan run by einc's torch
  executor, i.e. matrix products by cuBLAS -- isolates kernel quality from planning),
  ``einc_kernel`` (only where ``einc.config`` has ``select``: einc with
  ``EINC_SELECT=kernel``, every step a generated Triton kernel), ``oe_plan``
  (``opt_einsum.contract_expression(eq, *shapes)`` called with ``backend="torch"``: cuBLAS
  with the path planned once).  ``err_blas`` / ``err_kernel`` check those modes too.
- host-bound rows (einc median < 50 µs): ``host_einc`` / ``host_torch`` = median over 20
  batches of 200 back-to-back calls, synchronized at both ends, divided by 200 (what a
  caller sees; operands L2-warm, one operand set, for both methods alike); ``graph`` =
  the same for replays of a CUDA graph captured around one einc call (a device-side
  lower bound; NaN with the reason in ``graph_note`` where capture fails; ``n/a`` on the
  CPU); ``host_step`` = (host_einc - graph) / number of plan steps
  (``len(einc.explain(eq, *ops).steps)``, column ``k``).
- ``floor`` = max(flops / peak[dtype], min_bytes / bandwidth), with flops and min_bytes
  from the suite and peak (``torch.mm`` of square matrices) and bandwidth (a 1 GiB
  device copy) measured at the start of the same run (``einc.tools.benchmark.roofline``);
  ``%floor`` = 100 * floor / einc.  CUDA only.
- ratios: ``e/t`` = einc / torch, ``e/tc`` = einc / torch_c, ``e/blas`` = einc /
  einc_blas, ``e/best`` = einc / min(torch_c, einc_blas, oe_plan).

Gates (printed last, after the table):

- GATE 0 correctness: every row ran to the end, no NaN, and for einc and each of its
  modes (einc_blas, einc_kernel, the CUDA graph) ``err`` <= the dtype's tolerance (bf16
  1e-2, fp16 5e-3, fp32/complex64 1e-5, 2e-3 with TF32 on, fp64/complex128 1e-12) and
  <= 2 * err_torch + 1e-7 (where torch.einsum itself misses the dtype's tolerance, as a
  float32 chain of 30 tensor-network steps can, only the second bound).  Rows the deadline
  left out are listed and the verdict says ``(incomplete)``.
- GATE 1 kernel quality: einc <= 1.15 * einc_blas on every row where a step runs a
  generated Triton kernel (rows routed wholly to torch/cuBLAS pass), and einc <= torch_c
  on layout rows.
- GATE 2 user-visible: geometric mean of einc / torch <= 1.0 over the correct rows
  outside tensor_network, and no row above 1.5 * torch_c.
- GATE 3 overhead: host_step <= 15 µs on every row where it was measured.

``--verdict`` times only ``einc``, ``torch`` and ``torch_c`` (the first calls, the
correctness checks and learning as always): what the family targets of the open GPU issue
need, in less time, so that runs can be repeated.  ``--runs DIR DIR ...`` prints, per part
(each folder's ``gpu_eval_<part>.csv``), the geomean of einc / torch.einsum of each run and
over the rows' medians across runs, on the rows correct in every run outside
tensor_network, against the targets (gemm <= 0.95, pairwise <= 0.8), and the rows that
varied most (``bash bench/gpu_run.sh``'s ``verdict`` part: three interleaved runs).

A gate with nothing to judge says N/A.  The exit status is 1 where GATE 0 fails, else 0.
Each command judges its own rows only; ``--gates OUT/gpu_eval_gemm.csv OUT/gpu_eval_rest.csv
[OUT/gpu_eval_rest_<filter>.csv]`` prints the table and gates over several CSVs (no device
needed; a later file's row replaces an earlier one with the same id).

Output: ``OUT/gpu_eval_<part>.csv`` (``_cpu`` appended on the CPU, ``_<filter>`` with a
filter), rewritten after every row so a killed run keeps what it measured;
``OUT/gpu_eval_<part>.txt``: the versions, roofline, table and gates.  ``--deadline``
(default 540 s) stops starting rows (and interrupts a running one) so that the table and
gates are printed before ``timeout 560`` ends the command; ``--row-timeout`` (default
180 s, 300 s for ``--part compare``) bounds one row.

CPU smoke mode (no GPU): ``python bench/gpu_eval.py --device cpu --quick --filter
tiny_gemm_16`` runs the suite's ``cpu`` variants with the perf_counter timer, without
roofline or CUDA graphs.
"""

from __future__ import annotations

import time

T_START = time.monotonic()     # before torch's import: --deadline counts from here when run as a script

import argparse
import contextlib
import cProfile
import csv
import gc
import importlib.metadata
import io
import math
import os
import platform
import pstats
import re
import shutil
import signal
import statistics
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if __package__ in (None, ""):                      # run as a script: make `einc` importable
    sys.path.insert(0, str(REPO))

import opt_einsum  # noqa: E402
import torch  # noqa: E402

import einc  # noqa: E402
from einc.tools.benchmark import roofline as roofs  # noqa: E402
from einc.tools.benchmark.runner import in_range, operands  # noqa: E402
from einc.tools.benchmark.suite import find_suite, variant_name  # noqa: E402
from einc.tools.benchmark.suite import load as load_suite  # noqa: E402
from einc.tools.benchmark.timing import calibrate, time_batch  # noqa: E402

PARTS = {
    "gemm": ("attention", "moe", "bilinear", "layout"),
    "rest": ("small", "reduction", "chain", "chemistry", "tensor_network"),
    "pairwise": ("pairwise", "permuted", "broadcast"),  # two-operand contractions, a fourth command
}
# compare part: workload id -> torch.compile modes (None = default)
COMPARE = {
    "attn_scores_bshd": (None,),
    "txl_rel_attn_scores": (None,),
    "af2_triangle_mult_outgoing": (None,),
    "matrix_chain_4": (None, "reduce-overhead"),
    "gemma_q_proj": (None, "max-autotune-no-cudagraphs"),
    "gshard_expert_ffn": (None, "max-autotune-no-cudagraphs"),
}
INDUCTOR_COL = {None: "ind", "max-autotune-no-cudagraphs": "ind_ma", "reduce-overhead": "ind_ro"}
PROFILE_IDS = ("tiny_gemm_16", "scf_diis_error")

TOL = {"bfloat16": 1e-2, "float16": 5e-3, "float32": 1e-5, "complex64": 1e-5,
       "float64": 1e-12, "complex128": 1e-12}
TF32_TOL = 2e-3
GATE1_RATIO = 1.15
GATE2_GEOMEAN = 1.0
GATE2_MAX_TC = 1.5
GATE3_HOST_US = 15.0
HOST_BOUND_S = 50e-6
ANY_CATEGORIES = ("layout", "permuted")     # rows also timed with layout="any" (einc_any)
SHORT_DTYPE = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64",
               "complex64": "c64", "complex128": "c128"}
TABLE_LIMIT = 12000

COLUMNS = [
    "id", "category", "dtype", "equation", "shapes", "status", "error", "k", "backends", "warning",
    "err", "err_torch", "nan", "poison", "tol", "first_s", "learn_calls",
    "einc_us", "torch_us", "torch_c_us", "einc_blas_us", "err_blas", "einc_kernel_us", "err_kernel",
    "backends_kernel", "oe_plan_us", "einc_any_us", "err_any",
    "host_einc_us", "host_torch_us", "graph_us", "graph_err", "graph_note", "host_step_us",
    "flops", "min_bytes", "floor_us", "pct_floor", "e_t", "e_tc", "e_blas", "e_best",
    "ind_us", "ind_compile_s", "ind_err", "ind_ma_us", "ind_ma_compile_s", "ind_ma_err",
    "ind_ro_us", "ind_ro_compile_s", "ind_ro_err", "peak_gib", "row_s",
]


class RowTimeout(BaseException):
    """Raised by the alarm: a row ran past --row-timeout or the run past --deadline.
    A BaseException, so that the per-measurement ``except Exception`` does not swallow it."""


# ----------------------------------------------------------------------------- context

class Ctx:
    """What every row needs: device, timer settings, roofline, output."""

    def __init__(self, args, device: str, start: float | None = None):
        self.args = args
        self.device = device
        self.cuda = device == "cuda"
        self.quick = args.quick
        self.warmup = args.warmup if args.warmup is not None else (5 if args.quick else 25)
        self.rep = args.rep if args.rep is not None else (20 if args.quick else 100)
        self.rounds = 5 if args.quick else 15
        self.target = 5e-4 if args.quick else 2e-3
        self.host_batches = 5 if args.quick else 20
        self.host_calls = 50 if args.quick else 200
        self.sync = torch.cuda.synchronize if self.cuda else None
        self.do_bench = None
        if self.cuda:
            try:
                from triton.testing import do_bench
                self.do_bench = do_bench
            except Exception as e:              # noqa: BLE001 -- fall back to the perf_counter timer
                print(f"triton.testing.do_bench unavailable ({type(e).__name__}: {e}); "
                      "timing with synchronized perf_counter batches")
        self.roof = None
        self.tf32 = self.cuda and bool(torch.backends.cuda.matmul.allow_tf32)
        self.has_select = _has_select()
        self.t0 = time.monotonic() if start is None else start

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def timer_name(self) -> str:
        if self.do_bench is not None:
            return f"triton.testing.do_bench(warmup={self.warmup}, rep={self.rep}, return_mode='median')"
        return (f"median of {self.rounds} perf_counter batches of >= {self.target * 1e3:g} ms"
                + (" (CUDA synchronized)" if self.cuda else ""))

    def bench(self, fn) -> float:
        """Seconds per call of ``fn`` (already warmed up): see :meth:`timer_name`."""
        if self.do_bench is not None:
            return median_ms(self.do_bench, fn, self.warmup, self.rep) * 1e-3
        n, _ = calibrate(fn, self.target, sync=self.sync)
        return statistics.median(time_batch(fn, n, self.sync) for _ in range(self.rounds))

    def host(self, fn) -> float:
        """Seconds per call of back-to-back calls, synchronized at the ends of each batch."""
        fn()
        return statistics.median(time_batch(fn, self.host_calls, self.sync) for _ in range(self.host_batches))


def median_ms(do_bench, fn, warmup, rep) -> float:
    """``triton.testing.do_bench``'s median of ``fn`` in ms (through ``quantiles`` with a
    triton whose do_bench has no ``return_mode``)."""
    try:
        ms = do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    except TypeError:
        ms = do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])
        ms = ms[0] if isinstance(ms, (list, tuple)) else ms
    return float(ms)


def _has_select() -> bool:
    from einc import config
    return callable(getattr(config, "select", None))


@contextlib.contextmanager
def einc_mode(**env):
    """Set einc's environment variables for a block, with einc's caches emptied on the way
    in and out (plans, and the backend chosen for them, are cached per process)."""
    saved = {k: os.environ.get(k) for k in env}
    einc.cache_clear()
    try:
        for k, v in env.items():
            os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        einc.cache_clear()


# ----------------------------------------------------------------------------- helpers

def high(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype.is_complex else torch.float64


def rel_err(out, ref) -> float:
    """``||out - ref|| / ||ref||`` in the reference's precision (inf on a shape mismatch)."""
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    d = out.detach().to(ref.dtype)
    d.sub_(ref)
    num = torch.linalg.vector_norm(d).item()
    del d
    den = torch.linalg.vector_norm(ref).item()
    return num / den if den > 0 else num


def learn_until_decided(fn, eq, ops, calls=60, **options) -> int | None:
    """Learn mode (the CUDA default) times one candidate per call once kernels are ready:
    call ``fn`` until every step of the entry (``einc.explain(eq, *ops, **options)``'s) is
    decided, waiting for the device and the background thread between calls (at most
    ``calls``), so that the timings that follow are the steady state's.  (A call's timing
    is read once the device has run it: without the wait the host runs calls ahead of the
    device, and a step of a slow call decides calls later.)  How many calls it took, or
    None where this einc has no learn mode."""
    try:
        from einc.runtime import learn
    except ImportError:
        return None
    for n in range(1, calls + 1):
        if not any(r.endswith("learning from the calls") for r in einc.explain(eq, *ops, **options).reasons):
            return n - 1
        fn()
        if torch.cuda.is_available() and any(o.is_cuda for o in ops):
            torch.cuda.synchronize()
        learn.settle(30)
    return calls


def has_nan(out) -> bool:
    return bool(out.isnan().any().item()) if out.is_floating_point() or out.is_complex() else False


def poisoned_call(fn, numel: int, dtype, device, sync):
    """Allocate and free a NaN block of the output's size, then call ``fn``; returns
    (result, whether the result got that block, wall seconds)."""
    block = torch.full((max(numel, 1),), float("nan"), dtype=dtype, device=device)
    ptr = block.data_ptr()
    del block
    if sync:
        sync()
    t0 = time.perf_counter()
    out = fn()
    if sync:
        sync()
    return out, out.data_ptr() == ptr, time.perf_counter() - t0


def aliases_input(out, ops) -> bool:
    try:
        p = out.untyped_storage().data_ptr()
        return any(p == o.untyped_storage().data_ptr() for o in ops)
    except Exception:                           # noqa: BLE001
        return False


def fresh_operands(w, ops, seed: int):
    """Operands like ``ops`` with new random values (seed ``seed``), scaled as the runner scales."""
    torch.manual_seed(seed)
    new = [torch.randn_like(o) for o in ops]
    return in_range(w["equation"], new) if w["category"] == "tensor_network" else new


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def ratio(a, b):
    if a is None or b is None or not _finite(a) or not _finite(b) or b <= 0:
        return None
    return a / b


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def geomean(xs):
    xs = [x for x in xs if _finite(x) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "einc"], cwd=REPO,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (rev + ("+dirty(einc/)" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# ----------------------------------------------------------------------------- selection

def select_workloads(suite: dict, part: str, pattern: str = "", device: str = "cuda") -> list[dict]:
    """The workloads of ``part`` (in the part's category order, suite order within a
    category) that have a variant for ``device`` and whose id or category matches ``pattern``."""
    v = variant_name(device)
    ws = [w for w in suite["workloads"] if v in w["variants"]]
    if part in PARTS:
        cats = PARTS[part]
        ws = sorted((w for w in ws if w["category"] in cats), key=lambda w: cats.index(w["category"]))
    elif part == "compare":                     # in COMPARE's order: the max-autotune rows last
        ws = sorted((w for w in ws if w["id"] in COMPARE), key=lambda w: list(COMPARE).index(w["id"]))
    if pattern:
        try:
            rx = re.compile(pattern)
            match = lambda s: rx.search(s) is not None      # noqa: E731
        except re.error:
            match = lambda s: pattern in s                  # noqa: E731
        ws = [w for w in ws if match(w["id"]) or match(w["category"])]
    return ws


# ----------------------------------------------------------------------------- one row

def new_row(w: dict, device: str, status: str = "ok") -> dict:
    """A row keyed by :data:`COLUMNS` with the workload's description filled in."""
    v = w["variants"][variant_name(device)]
    row = dict.fromkeys(COLUMNS)
    row.update(id=w["id"], category=w["category"], dtype=v["dtype"], equation=w["equation"],
               shapes=";".join("x".join(map(str, s)) for s in v["shapes"]), status=status,
               flops=v.get("flops"), min_bytes=v.get("min_bytes"))
    return row


def measure_row(w: dict, ctx: Ctx, part: str, row: dict | None = None) -> dict:
    """Every measurement of one workload, filled into ``row`` (a :func:`new_row`) as they
    are taken, so that a row interrupted by the alarm keeps what it measured."""
    v = w["variants"][variant_name(ctx.device)]
    eq = w["equation"]
    row = new_row(w, ctx.device) if row is None else row
    errors = []
    t_row = time.monotonic()
    sync = ctx.sync
    dev = ctx.device
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    if ctx.roof is not None and row["flops"] and row["min_bytes"]:
        peak = ctx.roof.peaks.get(v["dtype"])
        floor = max(row["flops"] / peak if peak else 0.0, row["min_bytes"] / ctx.roof.bandwidth)
        row["floor_us"] = floor * 1e6

    def attempt(what, fn):
        try:
            return fn()
        except Exception as e:                  # noqa: BLE001 -- record and go on
            errors.append(f"{what}: {first_line(e)}")
            row["error"] = " | ".join(errors)
            if os.environ.get("GPU_EVAL_TRACEBACK"):
                traceback.print_exc()
            return None

    ops = operands(w, dev)
    numel_dtype = None
    ref = None
    try:
        hd = high(ops[0].dtype)
        ref = torch.einsum(eq, *[o.to(hd) for o in ops])
        tout = torch.einsum(eq, *ops)
        row["err_torch"] = rel_err(tout, ref)
        numel_dtype = (tout.numel(), tout.dtype)
        fresh_needed = aliases_input(tout, ops)
        del tout
    except Exception as e:                      # noqa: BLE001
        errors.append(f"reference: {first_line(e)}")
        row["error"] = errors[-1]
        fresh_needed = False
    tol = TOL.get(v["dtype"], 1e-5)
    if ctx.tf32 and v["dtype"] in ("float32", "complex64"):
        tol = TF32_TOL
    row["tol"] = tol

    einc_fn = lambda: einc.einsum(eq, *ops)             # noqa: E731 -- einc.einsum looked up per call
    # -- correctness and first call, default settings
    if numel_dtype is not None:
        numel, dtype = numel_dtype
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = attempt("einc first call", lambda: poisoned_call(einc_fn, numel, dtype, dev, sync))
        if caught:
            row["warning"] = " | ".join(sorted({str(c.message).splitlines()[0][:200] for c in caught}))
        if got is not None:
            out, hit1, row["first_s"] = got
            err1, nan1 = rel_err(out, ref), has_nan(out)
            del out
            ops2 = fresh_operands(w, ops, 1)
            ref2 = torch.einsum(eq, *[o.to(ref.dtype) for o in ops2])
            got2 = attempt("einc second call", lambda: poisoned_call(lambda: einc.einsum(eq, *ops2), numel, dtype,
                                                                     dev, sync))
            if got2 is not None:
                out2, hit2, _ = got2
                err2, nan2 = rel_err(out2, ref2), has_nan(out2)
                del out2
            else:
                hit2, err2, nan2 = False, math.inf, False
            del ops2, ref2
            row["err"], row["nan"], row["poison"] = max(err1, err2), nan1 or nan2, int(hit1) + int(hit2)
            row["learn_calls"] = attempt("learn", lambda: learn_until_decided(einc_fn, eq, ops))
            got3 = attempt("einc call once decided", lambda: poisoned_call(einc_fn, numel, dtype, dev, sync))
            if got3 is not None:            # the decided program's answer is checked too
                out3, hit3, _ = got3
                row["err"], row["nan"] = max(row["err"], rel_err(out3, ref)), row["nan"] or has_nan(out3)
                row["poison"] += int(hit3)
                del out3
            ex = attempt("explain", lambda: einc.explain(eq, *ops))
            if ex is not None:
                row["k"] = len(ex.steps)
                row["backends"] = ";".join(ex.backends)
    # -- timings
    if row["first_s"] is not None:
        row["einc_us"] = _us(attempt("time einc", lambda: ctx.bench(einc_fn)))
    torch_fn = lambda: torch.einsum(eq, *ops)           # noqa: E731
    row["torch_us"] = _us(attempt("time torch", lambda: (torch_fn(), ctx.bench(torch_fn))[1]))
    if fresh_needed:
        tc_fn = lambda: torch.einsum(eq, *ops).clone()  # noqa: E731
    else:
        tc_fn = lambda: torch.einsum(eq, *ops).contiguous()     # noqa: E731
    row["torch_c_us"] = _us(attempt("time torch_c", lambda: (tc_fn(), ctx.bench(tc_fn))[1]))

    full = not ctx.args.verdict          # --verdict: einc, torch and torch_c only

    def oe():
        expr = opt_einsum.contract_expression(eq, *[tuple(o.shape) for o in ops])
        fn = lambda: expr(*ops, backend="torch")        # noqa: E731
        fn()
        return ctx.bench(fn)
    if full:
        row["oe_plan_us"] = _us(attempt("time oe_plan", oe))

    def any_layout():       # the result in the order einc's plan writes it, as torch's and opt_einsum's views
        fn = lambda: einc.einsum(eq, *ops, layout="any")        # noqa: E731
        row["err_any"] = rel_err(fn(), ref)
        learn_until_decided(fn, eq, ops, layout="any")
        return ctx.bench(fn)
    if full and row["category"] in ANY_CATEGORIES and ref is not None and row["einc_us"] is not None:
        row["einc_any_us"] = _us(attempt("time einc any", any_layout))

    # -- host-bound rows: host-inclusive time and CUDA-graph replay
    if full and row["einc_us"] is not None and row["einc_us"] * 1e-6 < HOST_BOUND_S:
        row["host_einc_us"] = _us(attempt("host einc", lambda: ctx.host(einc_fn)))
        row["host_torch_us"] = _us(attempt("host torch", lambda: ctx.host(torch_fn)))
        if ctx.cuda:
            g_s, g_err, note = graph_replay(einc_fn, ref, ctx)
            row["graph_us"], row["graph_err"], row["graph_note"] = _us(g_s), g_err, note
            if _finite(row["graph_us"]) and _finite(row["host_einc_us"]) and row["k"]:
                row["host_step_us"] = (row["host_einc_us"] - row["graph_us"]) / row["k"]
        else:
            row["graph_note"] = "n/a (no CUDA graphs on the cpu)"

    # -- the same plan on torch's executor (cuBLAS), and generated kernels forced
    if full and numel_dtype is not None:
        def forced(env, col, err_col, backends_col=None):
            with einc_mode(**env):
                out = einc_fn()
                if sync:
                    sync()
                row[err_col] = rel_err(out, ref)
                if has_nan(out):
                    row[err_col] = math.nan
                del out
                if backends_col:
                    ex = einc.explain(eq, *ops)
                    row[backends_col] = ";".join(ex.backends)
                row[col] = _us(ctx.bench(einc_fn))
        attempt("einc_blas", lambda: forced({"EINC_BACKEND": "torch"}, "einc_blas_us", "err_blas"))
        if ctx.has_select:
            attempt("einc_kernel", lambda: forced({"EINC_SELECT": "kernel"}, "einc_kernel_us", "err_kernel",
                                                  "backends_kernel"))

    # -- inductor (compare part)
    if full and part == "compare" and w["id"] in COMPARE:
        for mode in COMPARE[w["id"]]:
            attempt(f"inductor {mode or 'default'}", lambda: inductor(eq, ops, ref, mode, row, ctx))
        with contextlib.suppress(Exception):
            torch._dynamo.reset()

    derive(row)
    if ctx.cuda:
        row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    row["error"] = " | ".join(errors) or None
    if errors:
        row["status"] = "error" if row["einc_us"] is None or row["err"] is None else "partial"
    row["row_s"] = time.monotonic() - t_row
    return row


def _us(seconds):
    return None if seconds is None else seconds * 1e6


def derive(row: dict) -> None:
    """The ratio columns and %floor from the measured ones (in place)."""
    e = row.get("einc_us")
    row["e_t"] = ratio(e, row.get("torch_us"))
    row["e_tc"] = ratio(e, row.get("torch_c_us"))
    row["e_blas"] = ratio(e, row.get("einc_blas_us"))
    best = [x for x in (row.get("torch_c_us"), row.get("einc_blas_us"), row.get("oe_plan_us")) if _finite(x)]
    row["e_best"] = ratio(e, min(best)) if best else None
    f = row.get("floor_us")
    row["pct_floor"] = 100 * f / e if _finite(f) and _finite(e) and e > 0 else None


def graph_replay(fn, ref, ctx: Ctx):
    """(seconds per replay, error of the graph's output, note): NaN and the reason where
    capture fails."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
        g.replay()
        torch.cuda.synchronize()
        err = rel_err(out, ref) if not has_nan(out) else math.nan
        t = ctx.host(g.replay)
        del g, out
        return t, err, "L2-warm replays"
    except Exception as e:                      # noqa: BLE001 -- a capture that fails is a finding, not a crash
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        return math.nan, None, f"capture failed: {first_line(e)}"


def inductor(eq, ops, ref, mode, row, ctx: Ctx) -> None:
    col = INDUCTOR_COL[mode]
    kwargs = {"dynamic": False} if mode is None else {"dynamic": False, "mode": mode}
    f = torch.compile(lambda *o: torch.einsum(eq, *o), **kwargs)
    t0 = time.perf_counter()
    out = f(*ops)
    if ctx.sync:
        ctx.sync()
    row[f"{col}_compile_s"] = time.perf_counter() - t0
    row[f"{col}_err"] = rel_err(out, ref)
    del out
    row[f"{col}_us"] = ctx.bench(lambda: f(*ops)) * 1e6


# ----------------------------------------------------------------------------- extras

def profile_host(w: dict, ctx: Ctx, out_dir: Path, stem: str) -> list[str]:
    """cProfile of einc's host path: 1000 calls; the top functions by own time."""
    eq, ops = w["equation"], operands(w, ctx.device)
    einc.einsum(eq, *ops)
    if ctx.sync:
        ctx.sync()
    n = 200 if ctx.quick else 1000
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        einc.einsum(eq, *ops)
    prof.disable()
    if ctx.sync:
        ctx.sync()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf).sort_stats("tottime")
    st.print_stats(25)
    path = out_dir / f"{stem}_profile_{w['id']}.txt"
    path.write_text(buf.getvalue())
    lines = [f"host profile of einc on {w['id']} ({n} calls; own time per call, µs; full: {path.name}):"]
    entries = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:8]
    for (fname, line, func), (_, ncalls, tottime, cumtime, _) in entries:
        lines.append(f"  {1e6 * tottime / n:8.2f} own {1e6 * cumtime / n:8.2f} cum  "
                     f"{Path(fname).name}:{line} {func} ({ncalls / n:g}/call)")
    return lines


SASS_OPS = ("HGMMA", "HMMA", "FFMA", "DFMA", "DMMA", "LDGSTS", "LDG.E.128", "STG.E.128", "LDL", "STL")


def _cuobjdump() -> str | None:
    try:
        import triton
        cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if cand.is_file():
            return str(cand)
    except Exception:                           # noqa: BLE001
        pass
    return shutil.which("cuobjdump")


def sass_report(limit: int = 24) -> list[str]:
    """Instruction and resource counts of einc's compiled kernels under TRITON_CACHE_DIR."""
    cache = os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache")
    tool = _cuobjdump()
    if tool is None:
        return ["SASS check: no cuobjdump (neither triton's bundled one nor on PATH)"]
    cubins = sorted(Path(cache).rglob("einc_*.cubin"), key=lambda p: -p.stat().st_mtime)[:limit]
    if not cubins:
        return [f"SASS check: no einc_*.cubin under {cache}"]
    lines = [f"SASS check ({tool}; {len(cubins)} most recent einc kernels under {cache}):",
             "  " + " ".join(f"{op.split('.')[0][:6]:>6}" for op in SASS_OPS) + "    REG  STACK LOCAL  kernel"]
    for p in cubins:
        try:
            sass = subprocess.run([tool, "-sass", str(p)], capture_output=True, text=True, timeout=60).stdout
            res = subprocess.run([tool, "-res-usage", str(p)], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as e:
            lines.append(f"  {p.name}: {first_line(e)}")
            continue
        counts = [len(re.findall(r"\b" + re.escape(op) + r"\b", sass)) for op in SASS_OPS]
        reg = re.search(r"REG:(\d+)", res)
        stack = re.search(r"STACK:(\d+)", res)
        local = re.search(r"LOCAL:(\d+)", res)
        lines.append("  " + " ".join(f"{c:>6}" for c in counts)
                     + f" {reg.group(1) if reg else '?':>6} {stack.group(1) if stack else '?':>6}"
                     + f" {local.group(1) if local else '?':>5}  {p.stem[:60]}")
    return lines


# ----------------------------------------------------------------------------- gates

def _row_errors(r: dict) -> list[tuple[str, float]]:
    out = [("err", r.get("err"))]
    for col in ("err_blas", "err_kernel", "graph_err"):
        if r.get(col) is not None:
            out.append((col, r[col]))
    return out


def error_bound(r: dict) -> float:
    """The largest error GATE 0 accepts on a row: the dtype's tolerance and 2 x torch.einsum's
    own error + 1e-7, both; where torch.einsum itself misses the tolerance (a long float32
    tensor-network chain), only the second."""
    tol = r.get("tol") or 1e-5
    et = r.get("err_torch")
    if not _finite(et):
        return tol
    rel = 2 * et + 1e-7
    return rel if et > tol else min(tol, rel)


def gate0(rows: list[dict]):
    """Correctness: (verdict, detail, failing ids)."""
    ran = [r for r in rows if r["status"] != "skipped"]
    if not ran:
        return "N/A", "no row ran", []
    bad = []
    for r in ran:
        why = []
        if r.get("err") is None:
            why.append(f"einc did not run ({(r.get('error') or '?')[:80]})")
        elif r["status"] == "error":
            why.append(f"row did not finish ({(r.get('error') or '?')[:80]})")
        if r.get("nan"):
            why.append("NaN in output")
        bound = error_bound(r)
        for col, e in _row_errors(r):
            if e is None:
                continue
            if not _finite(e) or e > bound:
                why.append(f"{col} {e:.3g} > {bound:.3g} (tol {r.get('tol')}, torch {r.get('err_torch')})")
        if why:
            bad.append((r["id"], "; ".join(why)))
    detail = f"{len(ran) - len(bad)}/{len(ran)} rows correct"
    skipped = [r["id"] for r in rows if r["status"] == "skipped"]
    verdict = "FAIL" if bad else "PASS"
    if skipped:
        detail += f"; not run: {', '.join(skipped)}"
        verdict += f" (incomplete: {len(skipped)} row(s) not run)"
    return verdict, detail, bad


def _correct(rows: list[dict]) -> list[dict]:
    failing = {i for i, _ in gate0(rows)[2]}     # (id, why) pairs
    return [r for r in rows if r["status"] != "skipped" and r["id"] not in failing]


def gate1(rows: list[dict]):
    """Kernel quality: einc <= 1.15 x einc_blas where a step runs a generated kernel; layout
    rows einc <= torch_c."""
    ok_rows = _correct(rows)
    judged, bad = 0, []
    for r in ok_rows:
        uses_kernel = "triton" in (r.get("backends") or "")
        if uses_kernel and r.get("e_blas") is not None:
            judged += 1
            if r["e_blas"] > GATE1_RATIO:
                bad.append(f"{r['id']} einc/blas {r['e_blas']:.2f}")
        if r["category"] == "layout" and r.get("e_tc") is not None:
            judged += 1
            if r["e_tc"] > 1.0:
                bad.append(f"{r['id']} einc/torch_c {r['e_tc']:.2f}")
    if not judged:
        return "N/A", "no correct row runs a generated kernel or is a layout row", bad
    worst = max((r["e_blas"] for r in ok_rows if "triton" in (r.get("backends") or "") and r.get("e_blas")),
                default=None)
    detail = (f"{judged} check(s); worst einc/einc_blas {worst:.2f}" if worst is not None else f"{judged} check(s)")
    return ("FAIL" if bad else "PASS"), detail, bad


def gate2(rows: list[dict]):
    """User-visible: geomean einc/torch <= 1.0 (correct rows outside tensor_network); no row
    above 1.5 x torch_c."""
    ok_rows = [r for r in _correct(rows) if r["category"] != "tensor_network"]
    g = geomean(r.get("e_t") for r in ok_rows)
    if g is None:
        return "N/A", "no correct row with both timings", []
    over = [f"{r['id']} {r['e_tc']:.2f}" for r in ok_rows if r.get("e_tc") is not None and r["e_tc"] > GATE2_MAX_TC]
    worst = max((r for r in ok_rows if r.get("e_tc") is not None), key=lambda r: r["e_tc"], default=None)
    n = sum(1 for r in ok_rows if _finite(r.get("e_t")))
    detail = (f"geomean einc/torch {g:.3f} over {n} rows (<= {GATE2_GEOMEAN}); max einc/torch_c "
              + (f"{worst['e_tc']:.2f} ({worst['id']})" if worst else "-") + f" (<= {GATE2_MAX_TC})")
    fail = g > GATE2_GEOMEAN or bool(over)
    return ("FAIL" if fail else "PASS"), detail, over


def gate3(rows: list[dict]):
    """Overhead: host µs per step <= 15 where measured."""
    got = [r for r in rows if _finite(r.get("host_step_us"))]
    if not got:
        why = "no host_step measured (needs CUDA graphs and a host-bound row: tiny_gemm_16 is in --part rest)"
        return "N/A", why, []
    bad = [f"{r['id']} {r['host_step_us']:.1f} µs" for r in got if r["host_step_us"] > GATE3_HOST_US]
    detail = ", ".join(f"{r['id']} {r['host_step_us']:.1f} µs/step "
                       f"(host {r['host_einc_us']:.1f} - graph {r['graph_us']:.1f}, k={r['k']})" for r in got)
    return ("FAIL" if bad else "PASS"), detail, bad


def small_row_notes(rows: list[dict]) -> list[str]:
    """Review §6.3, gate 2's extra targets for small rows (reported, not gated here)."""
    out = []
    for r in _correct(rows):
        if r["category"] != "small" or r.get("e_t") is None:
            continue
        n_ops = r["equation"].split("->")[0].count(",") + 1
        target = 0.8 if n_ops >= 3 else 1.3
        host = ratio(r.get("host_einc_us"), r.get("host_torch_us"))
        out.append(f"{r['id']} ({n_ops} operands): einc/torch {r['e_t']:.2f}"
                   + (f", host-inclusive {host:.2f}" if host is not None else "") + f" (target <= {target})")
    return out


# ----------------------------------------------------------------------------- output

def write_csv(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        wr.writeheader()
        for r in rows:
            wr.writerow({k: _csv_value(r.get(k)) for k in COLUMNS})
    os.replace(tmp, path)


TEXT_COLUMNS = {"id", "category", "dtype", "equation", "shapes", "status", "error", "backends", "warning",
                "graph_note", "backends_kernel"}


def read_csv(path) -> list[dict]:
    """Rows written by :func:`write_csv`, with numbers as numbers and empty cells as None."""
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = dict.fromkeys(COLUMNS)
            for k, v in raw.items():
                if k not in row or v is None or v == "":
                    continue
                if k in TEXT_COLUMNS:
                    row[k] = v
                elif k == "nan":
                    row[k] = bool(int(float(v)))
                elif k in ("k", "poison"):
                    row[k] = int(float(v))
                else:
                    row[k] = float(v)
            rows.append(row)
    return rows


def gates_from_csv(paths) -> int:
    """Table and gates over CSVs of earlier runs (a later file's row replaces an earlier
    row with the same id: re-runs with --filter after a fix).  No device needed."""
    merged: dict[str, dict] = {}
    for p in paths:
        for r in read_csv(p):
            merged[r["id"]] = r
    rows = list(merged.values())
    if not rows:
        print("gpu_eval: no rows in " + ", ".join(map(str, paths)), file=sys.stderr)
        return 2
    part = "compare" if any(r.get("ind_us") is not None for r in rows) else "all"
    print(f"gates over {len(rows)} rows of {', '.join(map(str, paths))}")
    print("\n".join(summary(rows, part, "as measured in those runs")))
    return 1 if gate0(rows)[0].startswith("FAIL") else 0


TARGETS = {"gemm": 0.95, "pairwise": 0.8}     # the open GPU issue's geomeans of einc / torch.einsum


def runs_summary(dirs) -> int:
    """Per part (each folder's ``gpu_eval_<part>.csv``), the geomean of einc / torch.einsum
    in each run and over the rows' medians across runs, on the rows correct in every run
    (outside tensor_network, as GATE 2), and the rows whose ratio varied most.  No device
    needed."""
    parts: dict[str, list] = {}
    for d in dirs:
        for path in sorted(Path(d).glob("gpu_eval_*.csv")):
            parts.setdefault(path.stem[len("gpu_eval_"):], []).append(read_csv(path))
    if not parts:
        print("gpu_eval: no gpu_eval_*.csv in " + ", ".join(map(str, dirs)), file=sys.stderr)
        return 2
    width = max(len(runs) for runs in parts.values())
    print(f"einc / torch.einsum over {len(dirs)} runs ({', '.join(map(str, dirs))}): geomeans on the rows "
          "correct in every run of the part, outside tensor_network\n")
    print("| part | rows | " + " | ".join(f"run {i + 1}" for i in range(width)) + " | row medians | target |")
    print("|---|---:|" + "---:|" * (width + 2))
    spread = []
    for part, runs in parts.items():
        ratios = [{r["id"]: r["e_t"] for r in _correct(rows)
                   if r["category"] != "tensor_network" and _finite(r.get("e_t"))} for rows in runs]
        ids = sorted(set.intersection(*(set(x) for x in ratios)))
        if not ids:
            print(f"| {part} | 0 | " + " | ".join("-" for _ in range(width)) + " | - | - |")
            continue
        each = [geomean(x[i] for i in ids) for x in ratios] + [None] * (width - len(runs))
        medians = geomean(statistics.median(x[i] for x in ratios) for i in ids)
        target = TARGETS.get(part)
        print(f"| {part} | {len(ids)} | " + " | ".join("-" if g is None else f"{g:.3f}" for g in each)
              + f" | {medians:.3f} | " + ("-" if target is None else f"<= {target} "
                                          + ("(met)" if medians <= target else "(not met)")) + " |")
        spread += [(max(x[i] for x in ratios) / min(x[i] for x in ratios), part, i) for i in ids]
    wide = sorted((s for s in spread if s[0] > 1.1), reverse=True)[:10]
    if wide:
        print("\nrows whose einc/torch.einsum varied more than 10 % between runs: "
              + ", ".join(f"{i} ({part}) {s:.2f}x" for s, part, i in wide))
    return 0


def _csv_value(x):
    if x is None:
        return ""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, float):
        return f"{x:.6g}" if math.isfinite(x) else str(x)
    return x


def _t(us) -> str:
    if us is None:
        return "-"
    if not math.isfinite(us):
        return "nan"
    if us >= 1e5:
        return f"{us / 1e3:.0f}m"       # milliseconds, marked
    if us >= 1000:
        return f"{us:.0f}"
    if us >= 10:
        return f"{us:.1f}"
    return f"{us:.2f}"


def _r(x) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"


def table(rows: list[dict], part: str, has_kernel: bool) -> list[str]:
    cols = ["id", "dt", "k", "err", "nan", "first_s", "einc", "torch", "torch_c", "einc_blas"]
    if has_kernel:
        cols.append("e_kern")
    cols += ["oe_plan", "any", "graph", "h/step", "floor", "e/t", "e/tc", "e/best", "%floor"]
    if part == "compare":
        cols += ["ind", "ind_ma", "ind_ro", "e/ind"]
    lines = []
    for r in rows:
        if r["status"] == "skipped":
            cells = [r["id"][:26], SHORT_DTYPE.get(r["dtype"], r["dtype"])] + ["skipped"] + [""] * (len(cols) - 3)
        else:
            err = r.get("err")
            cells = [r["id"][:26], SHORT_DTYPE.get(r["dtype"], r["dtype"]), str(r.get("k") or "-"),
                     "-" if err is None else f"{err:.1e}", "NaN" if r.get("nan") else ("-" if err is None else "no"),
                     "-" if r.get("first_s") is None else f"{r['first_s']:.2f}",
                     _t(r.get("einc_us")), _t(r.get("torch_us")), _t(r.get("torch_c_us")), _t(r.get("einc_blas_us"))]
            if has_kernel:
                cells.append(_t(r.get("einc_kernel_us")))
            graph = _t(r.get("graph_us")) if r.get("graph_us") is not None else \
                ("n/a" if (r.get("graph_note") or "").startswith("n/a") else "-")
            cells += [_t(r.get("oe_plan_us")), _t(r.get("einc_any_us")), graph,
                      _r(r.get("host_step_us")), _t(r.get("floor_us")), _r(r.get("e_t")), _r(r.get("e_tc")),
                      _r(r.get("e_best")),
                      "-" if r.get("pct_floor") is None else f"{r['pct_floor']:.0f}"]
            if part == "compare":
                ind = [r.get("ind_us"), r.get("ind_ma_us"), r.get("ind_ro_us")]
                best_ind = min((x for x in ind if _finite(x)), default=None)
                cells += [_t(x) for x in ind] + [_r(ratio(r.get("einc_us"), best_ind))]
        lines.append(cells)
    widths = [max(len(c), *(len(x[i]) for x in lines)) if lines else len(c) for i, c in enumerate(cols)]
    fmt = lambda cells: " ".join(c.ljust(w) if i == 0 else c.rjust(w)       # noqa: E731
                                 for i, (c, w) in enumerate(zip(cells, widths)))
    return [fmt(cols).rstrip()] + [fmt(c).rstrip() for c in lines]


def summary(rows: list[dict], part: str, timer: str) -> list[str]:
    has_kernel = any(r.get("einc_kernel_us") is not None for r in rows)
    out = ["", f"== table (times µs, 'm' suffix = ms; {timer}) =="]
    out += table(rows, part, has_kernel)
    errs = [f"  {r['id']}: {r['error']}" for r in rows if r.get("error")]
    if errs:
        out += ["errors:"] + [e[:240] for e in errs]
    warns = [f"  {r['id']}: {r['warning']}" for r in rows if r.get("warning")]
    if warns:
        out += ["warnings from einc's first call:"] + [w[:240] for w in warns]
    notes = [f"  {r['id']}: graph {r['graph_note']}" for r in rows
             if r.get("graph_note") and r["graph_note"].startswith("capture failed")]
    out += notes
    text = "\n".join(out)
    if len(text) > TABLE_LIMIT - 2500:              # leave room for the gates
        out = text[: TABLE_LIMIT - 2600].splitlines() + ["... (cut; the CSV has every row)"]
    out += ["", "== gates =="]
    gates = (("GATE 0 correctness", gate0(rows)),
             ("GATE 1 kernel quality: einc <= 1.15 x einc_blas (same plan on cuBLAS), layout einc <= torch_c",
              gate1(rows)),
             ("GATE 2 geomean einc/torch <= 1.0, no row > 1.5 x torch_c", gate2(rows)),
             ("GATE 3 host µs per step <= 15", gate3(rows)))
    for name, (verdict, detail, bad) in gates:
        out.append(f"{name}: {verdict} -- {detail}")
        for b in bad[:12]:
            out.append(f"    {b[0]}: {b[1]}" if isinstance(b, tuple) else f"    {b}")
        if len(bad) > 12:
            out.append(f"    ... and {len(bad) - 12} more")
    small = small_row_notes(rows)
    if small:
        out.append("small rows (review §6.3 targets, reported): " + "; ".join(small))
    return out


# ----------------------------------------------------------------------------- main

def header(ctx: Ctx, args, stem: str) -> list[str]:
    lines = [f"einc GPU evaluation: part {args.part}, device {ctx.device}, "
             f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, output {stem}.csv",
             f"versions: torch {torch.__version__} (CUDA {torch.version.cuda}), triton {_version('triton')}, "
             f"opt_einsum {opt_einsum.__version__}, einc {einc.__version__} (git {git_rev()}), "
             f"python {platform.python_version()}"]
    if ctx.cuda:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        lines.append(f"device: {p.name}, capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
                     f"{p.total_memory / 2**30:.0f} GiB; TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, "
                     f"cudnn {torch.backends.cudnn.allow_tf32}")
    else:
        lines.append(f"device: cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                     f"torch threads {torch.get_num_threads()}); suite cpu variants, no roofline, no CUDA graphs")
    env = {k: os.environ.get(k) for k in ("TRITON_CACHE_DIR", "EINC_CACHE_DIR", "TRITON_CACHE_AUTOTUNING",
                                          "TRITON_PRINT_AUTOTUNING", "EINC_BACKEND", "EINC_SELECT",
                                          "TRITON_INTERPRET")}
    lines.append("env: " + ", ".join(f"{k}={v}" for k, v in env.items() if v is not None))
    lines.append(f"timer: {ctx.timer_name()}; einc_kernel (EINC_SELECT=kernel): "
                 + ("measured" if ctx.has_select else "not measured (einc.config has no select)"))
    return lines


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("gemm", "rest", "pairwise", "compare", "all"), default="all",
                   help="which workloads (default all): gemm = attention, moe, bilinear, layout; "
                        "rest = small, reduction, chain, chemistry, tensor_network; compare = six rows vs inductor")
    p.add_argument("--filter", default="", help="regular expression (re.search) on workload id or category")
    p.add_argument("--out", default=str(HERE / "results"), help="output folder (default bench/results)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda where torch sees one, else cpu (smoke mode)")
    p.add_argument("--deadline", type=float, default=540.0,
                   help="seconds for the whole run (default 540): then the table and gates are printed")
    p.add_argument("--row-timeout", type=float, default=None,
                   help="seconds one workload may take (default 180; 300 for --part compare)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    p.add_argument("--warmup", type=int, default=None, help="do_bench warmup ms (default 25; quick 5)")
    p.add_argument("--rep", type=int, default=None, help="do_bench rep ms (default 100; quick 20)")
    p.add_argument("--no-roofline", action="store_true", help="skip the roofline measurement (no floor column)")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=None,
                   help="cProfile einc's host path on tiny_gemm_16 / scf_diis_error (default: on for --part rest "
                        "on CUDA)")
    p.add_argument("--suite", default=None, help="the suite file (default bench/suite.json)")
    p.add_argument("--list", action="store_true", help="print the selected workloads and exit")
    p.add_argument("--verdict", action="store_true",
                   help="time only einc, torch.einsum and torch.einsum + .contiguous() (correctness as always)")
    p.add_argument("--runs", nargs="+", metavar="DIR", default=None,
                   help="per part, einc/torch.einsum over the runs whose CSVs are in these folders, and exit")
    p.add_argument("--gates", nargs="+", metavar="CSV", default=None,
                   help="print the table and gates over CSVs of earlier runs (later files win per id) and exit")
    return p.parse_args(argv)


def _stem(part: str, device: str, pattern: str) -> str:
    stem = f"gpu_eval_{part}" + ("" if device == "cuda" else "_cpu")
    if pattern:
        stem += "_" + (re.sub(r"[^A-Za-z0-9]+", "-", pattern).strip("-")[:40] or "filter")
    return stem


def main(argv=None, start: float | None = None) -> int:
    """The command line; ``start`` is the monotonic time the deadline counts from (default now)."""
    args = parse_args(argv)
    if args.gates:
        return gates_from_csv(args.gates)
    if args.runs:
        return runs_summary(args.runs)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    suite_path = find_suite(args.suite or (HERE / "suite.json"))
    work = select_workloads(load_suite(suite_path), args.part, args.filter, device)
    if not work:
        print(f"gpu_eval: no workload of part {args.part!r} matches {args.filter!r}", file=sys.stderr)
        return 2
    if args.list:
        for w in work:
            print(w["id"], w["category"], w["variants"][variant_name(device)]["dtype"])
        return 0
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_eval: --device cuda but torch sees no CUDA device; use --device cpu for the smoke mode",
              file=sys.stderr)
        return 2
    if device == "cuda":                            # caches in the working tree; log autotuning choices
        os.environ.setdefault("TRITON_CACHE_DIR", str(REPO / ".tcache"))
        os.environ.setdefault("EINC_CACHE_DIR", str(REPO / ".ecache"))
        os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")
        os.environ.setdefault("TRITON_PRINT_AUTOTUNING", "1")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _stem(args.part, device, args.filter)
    csv_path, txt_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.txt"
    ctx = Ctx(args, device, start)
    log = header(ctx, args, stem)
    for line in log:
        print(line, flush=True)
    if ctx.cuda and not args.no_roofline:
        try:
            ctx.roof = roofs.measure(w["variants"]["gpu"]["dtype"] for w in work)
            log.append(ctx.roof.describe())
        except Exception as e:                  # noqa: BLE001
            log.append(f"roofline: failed ({first_line(e)}); no floor column")
        print(log[-1], flush=True)

    rows: list[dict] = []
    extras: list[str] = []
    use_alarm = hasattr(signal, "setitimer") and sys.platform != "win32"
    deadline_hit = False

    def on_alarm(signum, frame):
        raise RowTimeout()
    old = signal.signal(signal.SIGALRM, on_alarm) if use_alarm else None
    try:
        for i, w in enumerate(work):
            left = args.deadline - ctx.elapsed()
            if deadline_hit or left <= 1:
                deadline_hit = True
                rows.append(_skipped(w, device))
                continue
            print(f"[{ctx.elapsed():7.1f}s] {i + 1}/{len(work)} {w['id']} ...", flush=True)
            limit = min(args.row_timeout or (300.0 if args.part == "compare" else 180.0), left)
            row = new_row(w, device)
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                measure_row(w, ctx, args.part, row)
            except RowTimeout:
                deadline_hit = limit >= left
                derive(row)
                row.update(status="error", error=("deadline" if deadline_hit else "row timeout")
                           + f" after {limit:.3g} s" + (f" | {row['error']}" if row.get("error") else ""))
            except Exception as e:              # noqa: BLE001 -- a row that fails is recorded
                derive(row)
                row.update(status="error", error=first_line(e))
                if os.environ.get("GPU_EVAL_TRACEBACK"):
                    traceback.print_exc()
            finally:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            rows.append(row)
            write_csv(csv_path, rows)
            print(f"[{ctx.elapsed():7.1f}s]   {_progress(row)}", flush=True)
            gc.collect()
            if ctx.cuda:
                with contextlib.suppress(Exception):
                    torch.cuda.empty_cache()
        write_csv(csv_path, rows)
        profile = args.profile if args.profile is not None else (ctx.cuda and args.part == "rest")
        if profile and not deadline_hit:
            for w in work:
                if w["id"] in PROFILE_IDS and args.deadline - ctx.elapsed() > 20:
                    try:
                        if use_alarm:
                            signal.setitimer(signal.ITIMER_REAL, max(1.0, min(30.0, args.deadline - ctx.elapsed())))
                        extras += profile_host(w, ctx, out_dir, stem)
                    except (Exception, RowTimeout) as e:   # noqa: BLE001
                        extras.append(f"host profile of {w['id']}: {first_line(e)}")
                    finally:
                        if use_alarm:
                            signal.setitimer(signal.ITIMER_REAL, 0)
        if ctx.cuda and args.part == "compare":
            try:
                extras += sass_report()
            except Exception as e:              # noqa: BLE001
                extras.append(f"SASS check: {first_line(e)}")
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    for line in extras:
        print(line)
    tail = summary(rows, args.part, ctx.timer_name())
    tail.append(f"wrote {csv_path} ({len(rows)} rows) in {ctx.elapsed():.0f} s"
                + ("; the deadline cut the run" if deadline_hit else ""))
    print("\n".join(tail), flush=True)
    txt_path.write_text("\n".join(log + extras + tail) + "\n")
    return 1 if gate0(rows)[0].startswith("FAIL") else 0


def _skipped(w: dict, device: str) -> dict:
    row = new_row(w, device, "skipped")
    row["error"] = "not run: deadline"
    return row


def _progress(r: dict) -> str:
    parts = [r["id"], r["status"]]
    if r.get("err") is not None:
        parts.append(f"err {r['err']:.1e}" + (" NaN" if r.get("nan") else ""))
    if r.get("first_s") is not None:
        parts.append(f"first {r['first_s']:.2f}s")
    for col in ("einc_us", "torch_us", "torch_c_us", "einc_blas_us", "einc_kernel_us", "oe_plan_us", "einc_any_us",
                "host_einc_us", "graph_us", "ind_us", "ind_ma_us", "ind_ro_us"):
        if r.get(col) is not None:
            parts.append(f"{col[:-3]} {_t(r[col])}")
    if r.get("row_s") is not None:
        parts.append(f"({r['row_s']:.1f} s)")
    if r.get("error"):
        parts.append(f"!! {r['error'][:200]}")
    return " ".join(parts)


if __name__ == "__main__":
    sys.exit(main(start=T_START))
