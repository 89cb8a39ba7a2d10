"""einc's CUDA default (learn mode) on a lent GPU: first calls, steady state, training, peers.

    python bench/gpu_first.py --part first|train|peers --out DIR [--deadline S] [--filter REGEX]
    python bench/gpu_first.py --part first --dry-run --out DIR     # CPU tensors, the interpreter

Parts (each a CSV, ``DIR/gpu_first_<part>.csv``, rewritten after every phase, so a run
cut short keeps what it measured; ``--deadline`` seconds in all, checked between rows):

- ``first``: per workload of :data:`FIRST` (the suite's ``gpu`` variants), with the caches
  cold where the caller made them so (``bench/gpu_run.sh`` gives this part fresh
  ``TRITON_CACHE_DIR`` and ``EINC_CACHE_DIR`` folders): the first call of a new key in
  wall ms (synchronized before and after) of einc's default, of ``select="blas"``
  (torch's path: cuBLAS and torch ops, no kernel) and of torch.einsum, in an order
  rotated per row; whether the background thread was busy then (with earlier rows'
  kernels: as at a model's start); calls 2 to 20 of the default (median and max ms);
  the seconds the background thread then still needed (``settle_s``); the call at which
  every step was decided (``decided_at``); then :data:`ROUNDS` interleaved rounds of the
  default, ``select="kernel"``, ``select="blas"`` and torch.einsum (``do_bench`` medians,
  L2 flushed; the min and max over rounds); ``steady_over_best`` = default /
  min(kernel, blas); ``calls_11_20_over_best``: calls 11-20's median wall ms over that
  best (what a caller's calls cost while learning; each call synchronized, so a row of a
  few µs counts its host time too).  Targets: ``first_delta_ms`` (default - blas) <= 50, steady within
  5 % of the best candidate by call 20.
- ``train``: forward + backward (``torch.autograd.grad``) of :data:`TRAIN` rows: the
  first step's wall ms (forward and backward apart) beside torch.einsum's first step,
  the order alternated per row; steps 2-20, then interleaved rounds against
  torch.einsum (``busy_at_rounds``: the background thread still compiling when they
  began); the gradients checked against torch.einsum's.
- ``peers``: einc's default (after it has learned), torch.einsum, CuPy's einsum and
  ``jax.jit(jnp.einsum)`` (``precision=HIGHEST``: JAX's default computes float32 products
  in TF32 on NVIDIA GPUs) where those import (CuPy and JAX read the same memory through
  DLPack), interleaved rounds of wall-clock medians (each call synchronized: JAX's
  streams are not torch's).

Every part also writes ``DIR/gpu_first_<part>_jobs.csv``: each job of learn mode's
background thread (a kernel candidate made ready on a layout: its module and operand
shapes) in the order they ran, when it started (s into the part), its seconds, and the
seconds of it spent compiling the
configs side by side before the autotuner timed them (``compile_s``; the rest: loading
the module, the autotuner's timings, the launch).

``--dry-run`` runs the same code on the CPU (``EINC_BACKEND=triton``, ``EINC_SELECT=learn``,
the suite's ``cpu`` variants of two small rows) with perf_counter timings: a check that the
script starts and writes its CSV, not a measurement.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

FIRST = ["pw_ccsdt_dega_gfbc", "pw_ao2mo_third", "pw_ttm_bda_dc", "pw_ccsd_aebf_dfce", "pw_attn_tbhd_logits",
         "attn_scores_bhqd", "gemma_q_proj", "gshard_combine", "af2_triangle_mult_outgoing", "tiny_gemm_16",
         "matrix_chain_4"]
TRAIN = ["attn_scores_bhqd", "gemma_q_proj", "linear_attn_output", "pw_ttm_bda_dc", "matrix_chain_4",
         "pw_ccsdt_dega_gfbc"]
PEERS = ["gemma_q_proj", "attn_scores_bshd", "pw_ccsdt_dega_gfbc", "pw_ao2mo_third", "pw_ttm_bda_dc",
         "tiny_gemm_16", "matrix_chain_4"]
DRY = ["tiny_gemm_16", "pose_rel_rotation"]
CALLS = 20          # calls of the default before its steady state is judged
MORE = 40           # further calls, after the background thread settled, to reach a decision
ROUNDS = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("first", "train", "peers"), required=True)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--deadline", type=float, default=150.0, help="seconds for the whole part (default 150)")
    p.add_argument("--filter", default="", help="regular expression (re.search) on the workload ids")
    p.add_argument("--dry-run", action="store_true", help="CPU tensors under Triton's interpreter: a smoke test")
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and ARGS.dry_run:       # before einc (and triton) are imported
    os.environ.setdefault("EINC_BACKEND", "triton")
    os.environ.setdefault("EINC_SELECT", "learn")

import torch  # noqa: E402

import einc  # noqa: E402
from einc.runtime import learn  # noqa: E402
from einc.tools.benchmark.runner import operands  # noqa: E402
from einc.tools.benchmark.suite import find_suite  # noqa: E402
from einc.tools.benchmark.suite import load as load_suite  # noqa: E402


class Clock:
    """Wall and steady-state timers for one device, and the part's deadline."""

    def __init__(self, device: str, seconds: float):
        self.device, self.end = device, time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def wall_ms(self, fn) -> tuple:
        """``(result, ms)`` of one call, synchronized before and after."""
        self.sync()
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        return out, (time.perf_counter() - t0) * 1e3

    def steady_us(self, fn, sync=None) -> float:
        """Median µs of ``fn``: ``do_bench`` on CUDA (L2 flushed), else (or with ``sync``, a
        peer's own synchronization) the median of synchronized wall-clock calls."""
        if self.device == "cuda" and sync is None:
            import triton.testing
            return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3
        sync = sync or self.sync
        fn()
        sync()
        times, stop = [], time.perf_counter() + (0.05 if self.device == "cpu" else 0.2)
        while len(times) < 5 or (time.perf_counter() < stop and len(times) < 200):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)


def workloads(ids, pattern, device):
    suite = {w["id"]: w for w in load_suite(find_suite(None))["workloads"]}
    chosen = [suite[i] for i in ids if i in suite and re.search(pattern, i)]
    return [(w, operands(w, device)) for w in chosen]


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / max(ref.norm(), 1e-300))


JOBS: list = []


def time_background_jobs() -> None:
    """Record each background job's seconds in :data:`JOBS`, and the part of them spent
    compiling configs side by side (learn mode's and the launcher's own functions, wrapped)."""
    import threading

    from einc.runtime.triton_executor import launch
    make_ready, precompile = learn.Learner._make_ready, launch._precompile
    here, t0 = threading.local(), time.perf_counter()

    def timed_make_ready(self, s, name, layout):
        here.compile_s, start = 0.0, time.perf_counter()
        try:
            return make_ready(self, s, name, layout)
        finally:
            fn = self.steps[s].loaded.get(name)
            JOBS.append({"job": len(JOBS) + 1, "step": s, "candidate": name,
                         "kernel": getattr(fn, "__module__", None) or "", "shapes": [t[0] for t in layout[:-1]],
                         "started_s": start - t0, "seconds": time.perf_counter() - start,
                         "compile_s": here.compile_s})

    def timed_precompile(*args, **kwargs):
        start = time.perf_counter()
        try:
            return precompile(*args, **kwargs)
        finally:
            here.compile_s = getattr(here, "compile_s", 0.0) + time.perf_counter() - start

    learn.Learner._make_ready, launch._precompile = timed_make_ready, timed_precompile


def busy() -> bool:
    worker = learn._worker
    return bool(worker.jobs or worker.later or worker.running)


def decided(eq, ops) -> bool:
    return not any(r.endswith("learning from the calls") for r in einc.explain(eq, *ops).reasons)


def write(rows, out: Path, part: str):
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / f"gpu_first_{part}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})


def rounds(clock, methods: dict) -> dict:
    """``{name: (median over rounds, min, max)}`` of ROUNDS interleaved rounds, order rotated."""
    got = {n: [] for n in methods}
    names = list(methods)
    for r in range(ROUNDS):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fn, sync = methods[n] if isinstance(methods[n], tuple) else (methods[n], None)
            try:
                got[n].append(clock.steady_us(fn, sync))
            except Exception as e:      # noqa: BLE001 - a method that fails is reported, the rest go on
                print(f"  {n}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return {n: (statistics.median(t), min(t), max(t)) for n, t in got.items() if t}


def part_first(clock, rows_in, out):
    rows = []
    for k, (w, ops) in enumerate(rows_in):          # phase 1: first calls, cold
        if clock.left() < 5:
            break
        eq, ref = w["equation"], torch.einsum(w["equation"], *[o.double() for o in ops])
        row = {"id": w["id"], "dtype": w["variants"]["gpu" if clock.device == "cuda" else "cpu"]["dtype"],
               "equation": eq, "busy_at_first": busy()}
        calls = {"default": lambda: einc.einsum(eq, *ops), "blas": lambda: einc.einsum(eq, *ops, select="blas"),
                 "einsum": lambda: torch.einsum(eq, *ops)}
        names = list(calls)[k % 3:] + list(calls)[:k % 3]
        for n in names:
            res, row[f"{n}_first_ms"] = clock.wall_ms(calls[n])
            if n == "default":
                row["err"] = rel_err(res, ref)
        row["first_delta_ms"] = row["default_first_ms"] - row["blas_first_ms"]
        row["first_backends"] = " / ".join(einc.explain(eq, *ops).backends)
        rows.append(row)
        print(f"{w['id']}: first {row['default_first_ms']:.1f} ms, blas {row['blas_first_ms']:.1f}, "
              f"torch.einsum {row['einsum_first_ms']:.1f}", flush=True)
    write(rows, out, "first")
    for row, (w, ops) in zip(rows, rows_in):        # phase 2: calls 2..CALLS, as they come
        eq = w["equation"]
        ms = [clock.wall_ms(lambda: einc.einsum(eq, *ops))[1] for _ in range(CALLS - 1)]
        row.update(calls_ms_median=statistics.median(ms), calls_ms_max=max(ms),
                   calls_11_20_ms_median=statistics.median(ms[9:]), decided_by_call_20=decided(eq, ops))
    write(rows, out, "first")
    t0 = time.perf_counter()                        # phase 3: the background thread's remaining work
    row_settled = learn.settle(max(1.0, clock.left() - 30))
    for row in rows:
        row["settle_s"] = (time.perf_counter() - t0) if row_settled else math.nan
    for row, (w, ops) in zip(rows, rows_in):        # phase 4: to a decision, then the steady state
        if clock.left() < 8:
            row["note"] = "deadline"
            continue
        eq, n = w["equation"], CALLS
        while not decided(eq, ops) and n < CALLS + MORE:
            einc.einsum(eq, *ops)
            clock.sync()            # (a timing is read once the device has run the call: no running ahead)
            learn.settle(5)
            n += 1
        row["decided_at"] = n if decided(eq, ops) else None
        row["backends"] = " / ".join(einc.explain(eq, *ops).backends)
        row["reasons"] = " | ".join(einc.explain(eq, *ops).reasons)[:400]
        got = rounds(clock, {"default": lambda: einc.einsum(eq, *ops),
                             "kernel": lambda: einc.einsum(eq, *ops, select="kernel"),
                             "blas": lambda: einc.einsum(eq, *ops, select="blas"),
                             "einsum": lambda: torch.einsum(eq, *ops)})
        for name, (med, lo, hi) in got.items():
            row.update({f"{name}_us": med, f"{name}_us_min": lo, f"{name}_us_max": hi})
        best = min(got[n][0] for n in ("kernel", "blas") if n in got) if {"kernel", "blas"} & set(got) else None
        row["steady_over_best"] = got["default"][0] / best if best and "default" in got else None
        row["calls_11_20_over_best"] = row["calls_11_20_ms_median"] * 1e3 / best if best else None
        write(rows, out, "first")
        print(f"{w['id']}: decided at call {row['decided_at']}, steady/best {row['steady_over_best']}", flush=True)
    return rows


def part_train(clock, rows_in, out):
    rows = []
    for w, ops in rows_in:
        if clock.left() < 10:
            break
        eq = w["equation"]
        ops = [o.detach().requires_grad_() for o in ops]
        upstream = torch.randn_like(torch.einsum(eq, *ops).detach())

        def step(f):
            return lambda: torch.autograd.grad(f(eq, *ops), ops, upstream)
        einc_step, torch_step = step(einc.einsum), step(torch.einsum)
        row = {"id": w["id"], "equation": eq}
        for name in ("einc", "einsum")[len(rows) % 2:] + ("einc", "einsum")[:len(rows) % 2]:
            if name == "einsum":
                row["einsum_first_step_ms"] = clock.wall_ms(torch_step)[1]
                continue
            res, row["first_forward_ms"] = clock.wall_ms(lambda: einc.einsum(eq, *ops))
            grads, row["first_backward_ms"] = clock.wall_ms(lambda: torch.autograd.grad(res, ops, upstream))
            row["first_step_ms"] = row["first_forward_ms"] + row["first_backward_ms"]
        first = row["first_step_ms"]
        row["grad_err"] = max(rel_err(g, r) for g, r in zip(grads, torch_step()))
        ms = [clock.wall_ms(einc_step)[1] for _ in range(CALLS - 1)]
        row.update(steps_ms_median=statistics.median(ms), steps_ms_max=max(ms))
        learn.settle(max(1.0, min(60.0, clock.left() - 10)))
        for _ in range(MORE):
            einc_step()
            clock.sync()
        row["busy_at_rounds"] = busy()      # kernels still compiling: the rounds time learning, not its result
        got = rounds(clock, {"einc": einc_step, "einsum": torch_step})
        for name, (med, lo, hi) in got.items():
            row.update({f"{name}_us": med, f"{name}_us_min": lo, f"{name}_us_max": hi})
        if "einc" in got and "einsum" in got:
            row["einc_over_einsum"] = got["einc"][0] / got["einsum"][0]
        rows.append(row)
        write(rows, out, "train")
        print(f"{w['id']}: first step {first:.1f} ms (forward {row['first_forward_ms']:.1f}), torch.einsum's "
              f"{row['einsum_first_step_ms']:.1f}; einc/torch {row.get('einc_over_einsum')}", flush=True)
    return rows


def peer_methods(eq, ops, clock):
    """CuPy's and JAX's einsum on the same memory, where they import: ``{name: (fn, sync)}``."""
    found = {}
    try:
        import cupy
        if any(o.dtype == torch.bfloat16 for o in ops):
            raise TypeError("CuPy has no bfloat16")     # (it would fail each round: data type 'E' not understood)
        cops = [cupy.from_dlpack(o) for o in ops]
        found["cupy"] = (lambda: cupy.einsum(eq, *cops), lambda: cupy.cuda.Device().synchronize())
    except Exception as e:      # noqa: BLE001 - absent or refusing a dtype: no column
        print(f"  cupy: {type(e).__name__}: {str(e)[:120]}", flush=True)
    try:
        import jax
        import jax.numpy as jnp
        jops = [jax.dlpack.from_dlpack(o) for o in ops]
        # (JAX's default runs float32 products in TF32 on NVIDIA GPUs; torch's and einc's do not)
        f = jax.jit(lambda *xs: jnp.einsum(eq, *xs, precision=jax.lax.Precision.HIGHEST))
        box = []
        found["jax"] = (lambda: box.append(f(*jops)), lambda: box.pop().block_until_ready() if box else None)
    except Exception as e:      # noqa: BLE001
        print(f"  jax: {type(e).__name__}: {str(e)[:120]}", flush=True)
    return found


def part_peers(clock, rows_in, out):
    rows = []
    for w, ops in rows_in:
        if clock.left() < 8:
            break
        eq = w["equation"]
        for _ in range(CALLS):
            einc.einsum(eq, *ops)
            clock.sync()
        learn.settle(max(1.0, min(30.0, clock.left() - 8)))
        for _ in range(MORE // 4):
            einc.einsum(eq, *ops)
            clock.sync()
        methods = {"einc": (lambda: einc.einsum(eq, *ops), clock.sync), "einsum": (lambda: torch.einsum(eq, *ops),
                                                                                  clock.sync)}
        methods.update(peer_methods(eq, ops, clock))
        row = {"id": w["id"], "equation": eq, "einc_decided": decided(eq, ops)}
        for name, (med, lo, hi) in rounds(clock, methods).items():
            row.update({f"{name}_us": med, f"{name}_us_min": lo, f"{name}_us_max": hi})
        rows.append(row)
        write(rows, out, "peers")
        print(f"{w['id']}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k.endswith("_us")), flush=True)
    return rows


def main(args) -> int:
    device = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    if device == "cpu" and not args.dry_run:
        print("no CUDA device: use --dry-run for the CPU smoke test", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = Clock(device, args.deadline)
    ids = DRY if args.dry_run else {"first": FIRST, "train": TRAIN, "peers": PEERS}[args.part]
    print(f"gpu_first --part {args.part} on {device} "
          f"({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), deadline {args.deadline:.0f} s, "
          f"TRITON_CACHE_DIR={os.environ.get('TRITON_CACHE_DIR')}, EINC_CACHE_DIR={os.environ.get('EINC_CACHE_DIR')}",
          flush=True)
    small = torch.ones(8, 8, device=device)     # the process's one-time costs (CUDA context, cuBLAS, einc's
    einc.einsum("ij,jk->ik", small, small, select="blas")       # planner; autograd's device thread, its cuBLAS
    torch.einsum("ij,jk->ik", small, small)                     # handle, and the sympy that torch.autograd.grad
    leaf = small.clone().requires_grad_()                       # imports on its first given gradient) out of
    torch.autograd.grad(leaf @ small, leaf, small)              # the first row
    clock.sync()
    cube = torch.ones(2, 3, 4, device=device)   # einc's first call of a key with a kernel step imports its
    start = time.perf_counter()                 # code generator, once a process: timed apart, then settled
    einc.einsum("abc,cd->dba", cube, small[:4, :5])
    clock.sync()
    print(f"einc's first call of a kernel step in this process (one-time imports): "
          f"{(time.perf_counter() - start) * 1e3:.1f} ms", flush=True)
    learn.settle(max(1.0, min(60.0, clock.left() / 4)))
    rows_in = workloads(ids, args.filter, device)
    time_background_jobs()
    {"first": part_first, "train": part_train, "peers": part_peers}[args.part](clock, rows_in, out)
    learn.settle(max(1.0, clock.left()))
    write(JOBS, out, f"{args.part}_jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
