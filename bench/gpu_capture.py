"""A caller's CUDA graph captures while learn mode's background jobs make kernels ready.

    python bench/gpu_capture.py --out DIR [--deadline S]      # a GPU: both arms, S/2 s each
    python bench/gpu_capture.py --dry-run --out DIR           # a CPU: the script starts and writes

``torch.cuda.graph`` captures in CUDA's global mode by default, in which a call that CUDA
deems unsafe (allocating, loading a module, querying an event, synchronizing the device)
on any thread whose own mode is global fails and invalidates the capture.  Learn mode's
jobs make such calls while they compile and time a kernel, and a model warmed up for a
few calls, then captured, is captured while they run.  einc sets its threads' mode to
thread-local and times configs on their own events (:mod:`einc.runtime.capture`); this
script shows what that changes.  Per arm, in a child process with empty einc and Triton
caches (so that the kernels compile and the jobs run long): the rows of :data:`ROWS`
called 3 times each (their kernels handed to the jobs); then, until the jobs are done
or the arm's deadline, a graph captured every 0.2 s with ``torch.cuda.graph``'s defaults
around einc.einsum of every row and a torch matmul, replayed, each result checked
against torch.einsum in float64; then calls until the rows are decided, any warning of
a failed job kept.  Arms: ``exempt`` (einc as checked out) and ``control`` (the threads'
mode left global, configs timed by ``triton.testing.do_bench``, which synchronizes the
device: the code before this check).

CSV ``DIR/gpu_capture.csv``, a row per arm: captures, those begun while a job ran
(``during_jobs``), failed captures and the first error, replays off beyond tolerance
(``wrong``), failed jobs (einc's warnings), jobs run, the seconds until they were done.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = ["pw_ccsdt_dega_gfbc", "pw_ao2mo_third", "attn_scores_bhqd", "gshard_combine", "af2_triangle_mult_outgoing"]
DRY = ["tiny_gemm_16", "pose_rel_rotation"]
FIELDS = ["arm", "captures", "during_jobs", "failed", "first_error", "wrong", "job_failures", "jobs", "jobs_done_s",
          "seconds"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--deadline", type=float, default=100.0, help="seconds for both arms (default 100)")
    p.add_argument("--arm", choices=("exempt", "control"), help="(internal) run one arm in this process")
    p.add_argument("--dry-run", action="store_true", help="CPU tensors under Triton's interpreter, no capture")
    return p.parse_args(argv)


def one_arm(arm: str, seconds: float, dry: bool) -> dict:
    import torch

    import einc
    from einc.runtime import capture, learn
    from einc.runtime.triton_executor import autotune
    from einc.tools.benchmark.runner import operands
    from einc.tools.benchmark.suite import find_suite
    from einc.tools.benchmark.suite import load as load_suite

    if arm == "control":
        import triton.testing
        capture.exempt = lambda: False
        autotune._runs_ms = lambda fn, rep, quantiles=None: triton.testing.do_bench(fn, rep=rep, quantiles=quantiles)
    device = "cpu" if dry else "cuda"
    suite = {w["id"]: w for w in load_suite(find_suite(None))["workloads"]}
    rows = [(suite[i]["equation"], operands(suite[i], device)) for i in (DRY if dry else ROWS) if i in suite]
    refs = [torch.einsum(eq, *[o.double() for o in ops]) for eq, ops in rows]
    a = torch.randn(256, 256, device=device)
    start = time.monotonic()
    jobs = [0]
    make_ready = learn.Learner._make_ready

    def counted(self, *args, **kwargs):
        jobs[0] += 1
        return make_ready(self, *args, **kwargs)
    learn.Learner._make_ready = counted
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for eq, ops in rows:
                einc.einsum(eq, *ops)
        if not dry:
            torch.cuda.synchronize()

        def busy():
            w = learn._worker
            return bool(w.jobs or w.later or w.running)
        out = {"arm": arm, "captures": 0, "during_jobs": 0, "failed": 0, "first_error": "", "wrong": 0}
        done_at = None
        while time.monotonic() - start < seconds * 0.7 and not dry:
            was_busy = busy()
            if not was_busy and done_at is None:
                done_at = time.monotonic() - start
            graph, results = torch.cuda.CUDAGraph(), []
            out["captures"] += 1
            out["during_jobs"] += int(was_busy)
            try:
                with torch.cuda.graph(graph):
                    results = [einc.einsum(eq, *ops) for eq, ops in rows] + [a @ a]
                graph.replay()
                torch.cuda.synchronize()
                for r, ref in zip(results, refs):
                    tol = 1e-2 if r.dtype in (torch.bfloat16, torch.float16) else 1e-4
                    err = float((r.double() - ref).norm() / max(float(ref.norm()), 1e-300))
                    out["wrong"] += int(err > tol)
            except Exception as e:      # noqa: BLE001 - what this script counts
                out["failed"] += 1
                first = (str(e).splitlines() or [""])[0][:160]
                out["first_error"] = out["first_error"] or f"{type(e).__name__}: {first}"
                try:
                    torch.cuda.synchronize()
                except Exception as again:      # noqa: BLE001 - a broken context: stop capturing
                    out["first_error"] += f"; then {type(again).__name__}"
                    break
            if not was_busy and out["captures"] >= 10:
                break
            time.sleep(0.2)
        learn.settle(max(1.0, seconds - 5 - (time.monotonic() - start)))
        for _ in range(40):                             # the rows' learning, to its end
            if time.monotonic() - start > seconds - 3:
                break
            for eq, ops in rows:
                einc.einsum(eq, *ops)
            learn.settle(1.0)
    out["job_failures"] = sum("kernel" in str(w.message) and "failed" in str(w.message) for w in caught)
    out["jobs"] = jobs[0]
    out["jobs_done_s"] = round(done_at, 1) if done_at is not None else ""
    out["seconds"] = round(time.monotonic() - start, 1)
    return out


def main(args) -> int:
    if args.arm:
        print(json.dumps(one_arm(args.arm, args.deadline, args.dry_run)), flush=True)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for arm in ("exempt", "control"):
        with tempfile.TemporaryDirectory() as cold:
            env = dict(os.environ, TRITON_CACHE_DIR=f"{cold}/t", EINC_CACHE_DIR=f"{cold}/e", PYTHONUNBUFFERED="1")
            if args.dry_run:
                env.update(EINC_BACKEND="triton", EINC_SELECT="learn", TRITON_INTERPRET="1")
            cmd = [sys.executable, str(HERE / "gpu_capture.py"), "--out", str(out), "--arm", arm,
                   "--deadline", str(max(10.0, args.deadline / 2 - 15))] + (["--dry-run"] if args.dry_run else [])
            try:                        # (15 s of an arm's half for the child's start and imports)
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.deadline / 2)
                print(done.stderr[-3000:], file=sys.stderr)
                last = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                rows.append(json.loads(last[-1]) if last else {"arm": arm, "first_error": f"exit {done.returncode}"})
            except subprocess.TimeoutExpired:
                rows.append({"arm": arm, "first_error": "timed out"})
        print(rows[-1], flush=True)
        with open(out / "gpu_capture.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows({k: r.get(k, "") for k in FIELDS} for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
