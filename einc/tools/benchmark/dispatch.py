"""Dispatch micro-benchmark: per-call overhead on 4x4 float32 matrix chains of 2, 3, 5 and 8 operands.

The operands are so small that the arithmetic is negligible: the time is the cost of
getting from the Python call to the kernels (parsing, path finding or plan lookup,
dispatch).  Same interleaved, median-of-batches method as the suite
(:mod:`einc.tools.benchmark.timing`).  Used by ``einc bench --dispatch`` and
``python bench/dispatch.py``.

``--kernels-noop`` (:func:`run_kernels_noop`) measures einc's own Python on the
generated-kernel path instead: CPU tensors run the generated modules
(``EINC_BACKEND=triton``, Triton's interpreter), but once each chain's result has been
checked, the final kernel launch of every loaded module is replaced by a no-op (inside
this benchmark only).  What is left is everything einc does per call up to the
kernel launch: the front end, the plan's function, and each step's ``launch()``
(output allocation, layout checks, arguments, grid).  Triton's own launch path (the
interpreter here; on a GPU the autotuner, the JIT's binder and the C launcher) is not in
the number.
"""

from __future__ import annotations

import argparse
import os
import string
import sys

import torch

from ...runtime.reference import torch_einsum
from . import report
from .runner import METHODS, check, methods
from .timing import interleaved

SIZES = (2, 3, 5, 8)
N = 4


def chain(k: int) -> str:
    """'ab,bc->ac' for k=2, 'ab,bc,cd->ad' for k=3, ..."""
    s = string.ascii_lowercase
    return ",".join(s[i] + s[i + 1] for i in range(k)) + "->" + s[0] + s[k]


def run(out, rounds: int | None = None, quick: bool = False) -> int:
    """Time the chains, write OUT/dispatch.md and .csv (``dispatch_quick.*`` for a quick
    run, never over a full run's); 1 if einc's result was wrong, else 0."""
    rounds = rounds or (9 if quick else 31)
    budget = 1.0 if quick else 3.0
    load, table, data, bad = report.Load(), [], [], False
    for k in SIZES:
        eq = chain(k)
        torch.manual_seed(0)
        ops = [torch.randn(N, N) for _ in range(k)]
        fns = {name: fn for name, fn in methods(eq, ops).items() if name in METHODS}  # the three compared
        ref = fns["torch"]()
        for name in ("opt_einsum", "einc"):        # warm-up (einc plans here) + correctness
            status = check(fns[name](), ref)
            if status != "ok":
                bad = True
                print(f"!!! {eq}: {name}: {status}", file=sys.stderr)
        timings, n_rounds = interleaved(fns, rounds, budget, min_rounds=min(rounds, 5))
        m = [timings[name].median for name in METHODS]
        r = report.ratio(m[2], m[0])
        table.append([k, f"`{eq}`", *map(report.us, m), report.fmt_ratio(r)])
        data.append([k, eq, *[round(v * 1e6, 3) for v in m], round(r, 4), n_rounds,
                     *[timings[name].calls for name in METHODS]])

    md = report.header("einc dispatch micro-benchmark", "float32", load, [
        f"operands: {N}x{N}; timing: median over up to {rounds} rounds (budget {budget:.0f} s/equation) "
        "of per-call time, batches ≥ 2 ms, methods interleaved in shuffled order; warm-up call untimed"])
    md += report.markdown_table(["operands", "equation", "torch µs", "opt_einsum µs", "einc µs", "einc/torch"],
                                table)
    report.write(out, "dispatch_quick" if quick else "dispatch", md,
                 ["operands", "equation", "torch_us", "opt_einsum_us", "einc_us", "einc_over_torch", "rounds",
                  "torch_calls_per_batch", "opt_einsum_calls_per_batch", "einc_calls_per_batch"], data)
    return 1 if bad else 0


class _NoopKernel:
    """Stands in for a module's ``@triton.jit`` kernel (its launcher's ``kernel``):
    ``kernel[grid](...)`` does nothing."""

    def __getitem__(self, grid):
        return _noop


def _noop(*args, **kwargs):
    return None


def _generated_modules() -> dict:
    """Kernel name -> module, for every generated kernel module loaded in this process
    (a module under the loader's prefix that has its launcher)."""
    prefix = "einc_kernels."
    return {name[len(prefix):]: m for name, m in list(sys.modules.items())
            if name.startswith(prefix) and "launcher" in vars(m)}


def stub_kernel_launches() -> dict:
    """Replace the kernel launched by every loaded generated module (its launcher's) with a
    no-op; returns what :func:`restore_kernel_launches` needs."""
    saved = {}
    for name, module in _generated_modules().items():
        saved[name] = (module.launcher, module.launcher.kernel)
        module.launcher.kernel = _NoopKernel()
    return saved


def restore_kernel_launches(saved: dict) -> None:
    for launcher, kernel in saved.values():
        launcher.kernel = kernel


def run_kernels_noop(out, rounds: int | None = None, quick: bool = False) -> int:
    """einc's own Python per kernel step (kernel launches stubbed); writes OUT/dispatch_kernels_noop.md
    and .csv.  1 if einc's result (checked before stubbing) was wrong or did not run kernels, else 0."""
    import einc
    from einc.runtime import triton_executor

    os.environ["EINC_BACKEND"] = "triton"
    if not triton_executor.use_interpreter():
        print("!!! --kernels-noop needs Triton's interpreter: set TRITON_INTERPRET=1 before triton is imported",
              file=sys.stderr)
        return 1
    rounds = rounds or (9 if quick else 31)
    budget = 1.0 if quick else 3.0
    load, table, data, bad = report.Load(), [], [], False
    for k in SIZES:
        eq = chain(k)
        torch.manual_seed(0)
        ops = [torch.randn(N, N) for _ in range(k)]
        ref = torch_einsum(eq, *ops)
        fn = lambda: einc.einsum(eq, *ops)      # noqa: E731
        status = check(fn(), ref)               # plans, compiles, launches for real
        backends = set(einc.explain(eq, *ops).backends)
        if status != "ok" or any(not b.startswith("triton") for b in backends):
            bad = True
            print(f"!!! {eq}: einc: {status}; backends {sorted(backends)}", file=sys.stderr)
        saved = stub_kernel_launches()
        try:
            fn()                                # warm-up with the stubs in place (untimed)
            timings, n_rounds = interleaved({"einc": fn}, rounds, budget, min_rounds=min(rounds, 5))
        finally:
            restore_kernel_launches(saved)
        steps = k - 1
        t = timings["einc"].median
        table.append([k, f"`{eq}`", steps, report.us(t), report.us(t / steps)])
        data.append([k, eq, steps, round(t * 1e6, 3), round(t / steps * 1e6, 3), n_rounds, timings["einc"].calls])
    # marginal cost of one more step: least-squares slope of µs per call over the number of steps
    xs, ys = [r[2] for r in data], [r[3] for r in data]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    md = report.header("einc per-step overhead, kernel launches stubbed", "float32", load, [
        f"operands: {N}x{N} CPU tensors, EINC_BACKEND=triton (Triton's interpreter); after a checked call, "
        "each generated module's kernel launch is a no-op",
        f"timing: median over up to {rounds} rounds (budget {budget:.0f} s/equation) of per-call time, "
        "batches ≥ 2 ms; warm-up calls untimed",
        f"marginal cost per step (slope over the chains): {slope:.2f} µs; front end (intercept): "
        f"{my - slope * mx:.2f} µs"])
    md += report.markdown_table(["operands", "equation", "steps", "einc µs/call", "µs/step"], table)
    report.write(out, "dispatch_kernels_noop", md,
                 ["operands", "equation", "steps", "einc_us", "einc_us_per_step", "rounds", "calls_per_batch"],
                 data)
    print("\n".join(md))
    return 1 if bad else 0


# (equation, shapes, the same product as a bare mm/bmm: for ``->ki``, Cᵀ = Bᵀ·Aᵀ as the step runs it)
BLAS_STEPS = [("ij,jk->ik", [(16, 16), (16, 16)], lambda a, b: torch.mm(a, b)),
              ("ij,jk->ki", [(16, 16), (16, 16)], lambda a, b: torch.mm(b.t(), a.t())),
              ("bij,bjk->bik", [(4, 16, 16), (4, 16, 16)], lambda a, b: torch.bmm(a, b))]


def run_blas_steps(out, rounds: int | None = None, quick: bool = False) -> int:
    """The host cost of one cuBLAS step as einc runs it (:func:`einc.runtime.torch_executor.blas.step_function`:
    the step as ``torch.mm`` / ``torch.bmm`` on strided views) against the bare ``mm`` / ``bmm``
    of the same product and torch.einsum, on tiny float32 operands (CUDA when there is one, synchronized at the ends
    of each batch; else the CPU); writes OUT/dispatch_blas_steps.md and .csv.  1 if a step's
    result was wrong or it was no GEMM, else 0."""
    from ...planner.equation import parse
    from ...planner.graph import build
    from ...planner.plan import build_plan
    from ...runtime.torch_executor import blas

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else None
    rounds = rounds or (9 if quick else 31)
    budget = 1.0 if quick else 3.0
    load, table, data, bad = report.Load(), [], [], False
    for eq, shapes, product in BLAS_STEPS:
        torch.manual_seed(0)
        a, b = (torch.randn(s, device=device) for s in shapes)
        plan = build_plan(build(parse(eq), shapes))
        step = blas.step_function(plan.steps[-1], plan.graph.sizes, a.stride(), b.stride(), fallback=None)
        fns = {"einc step": lambda: step(a, b), "bare": lambda: product(a, b),
               "torch.einsum": lambda: torch.einsum(eq, a, b)}
        got = None if step is None else fns["einc step"]()
        if got is None or not got.is_contiguous() or not torch.allclose(got, torch.einsum(eq, a, b), atol=1e-5) \
                or not torch.allclose(fns["bare"]().reshape(got.shape), got, atol=1e-5):
            bad = True
            print(f"!!! {eq}: einc's cuBLAS step {'is no GEMM' if step is None else 'is wrong'}", file=sys.stderr)
            continue
        timings, n_rounds = interleaved(fns, rounds, budget, min_rounds=min(rounds, 5), sync=sync)
        m = [timings[n].median for n in fns]
        table.append([f"`{eq}`", "×".join(map(str, shapes[0])), *map(report.us, m)])
        data.append([eq, device, *[round(v * 1e6, 3) for v in m], n_rounds])
    md = report.header(f"einc's cuBLAS step, host cost ({device})", "float32", load, [
        "the step as einc runs it (einc.runtime.torch_executor.blas.step_function) against the bare mm/bmm of the same "
        f"product and torch.einsum; median over up to {rounds} rounds (budget {budget:.0f} s/step), "
        "interleaved, batches ≥ 2 ms" + (", synchronized at the ends of each batch" if sync else "")])
    md += report.markdown_table(["step", "A", "einc step µs", "bare mm/bmm µs", "torch.einsum µs"], table)
    report.write(out, "dispatch_blas_steps", md,
                 ["equation", "device", "einc_step_us", "bare_us", "torch_einsum_us", "rounds"], data)
    print("\n".join(md))
    return 1 if bad else 0


def main(argv=None, default_out="bench/results") -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="rounds per equation (default 31, quick 9)")
    p.add_argument("--out", default=str(default_out), help=f"output directory (default {default_out})")
    p.add_argument("--quick", action="store_true", help="fewer rounds (smoke test)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) (default: torch's)")
    p.add_argument("--kernels-noop", action="store_true",
                   help="einc's own Python per kernel step instead: CPU tensors through the generated kernels "
                        "(Triton's interpreter) with the kernel launches replaced by no-ops")
    p.add_argument("--blas-steps", action="store_true",
                   help="the host cost of einc's cuBLAS step (strided views into torch.mm/bmm) against the bare "
                        "mm/bmm and torch.einsum, tiny float32 operands (CUDA if present, else the CPU)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.kernels_noop:
        return run_kernels_noop(args.out, args.rounds, args.quick)
    if args.blas_steps:
        return run_blas_steps(args.out, args.rounds, args.quick)
    return run(args.out, args.rounds, args.quick)
