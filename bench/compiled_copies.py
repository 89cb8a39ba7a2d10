"""A call's time while einc compiles its copies in the background, against the same calls
with ``EINC_COPY_COMPILE=off``: fresh processes, alternately on and off.

    python bench/compiled_copies.py [--filter TEXT] [--category pairwise,permuted] [--processes 5]
                                    [--seconds 3] [--threads 1] [--cold]

Per workload of the suite's categories (``cpu`` variants, float32): in each fresh process
(bytecode compiled first: ``python -m compileall -q einc bench``) the first call's wall
time, then calls for ``--seconds`` s (a compile running meanwhile in the background when
on, whose Python work shares the interpreter's lock with the calls), each call's wall
time, and after how many calls the copies handed to the background were all ready (or
marked: ``-`` where none was handed over, or none ready in time).  ``--cold``: each process with
an empty inductor cache folder of its own (``TORCHINDUCTOR_CACHE_DIR``: every compile
from scratch, as a machine's first); else inductor's own, warm after the first process.  Markdown on stdout: per
workload and setting, the medians over the processes of the first call, of the median
and the slowest later call, and the on/off ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[3]))
held = torch.empty(30 * 2**20, dtype=torch.uint8); del held
import einc
from einc.runtime.torch_executor import compiled_copy
from einc.tools.benchmark.runner import operands
from einc.tools.benchmark.suite import find_suite, load
w = next(w for w in load(find_suite())["workloads"] if w["id"] == sys.argv[1])
ops = operands(w, "cpu", "cpu")
t0 = time.perf_counter(); einc.einsum(w["equation"], *ops); first = time.perf_counter() - t0
later, settled, end = [], None, time.perf_counter() + float(sys.argv[2])
while time.perf_counter() < end:
    t0 = time.perf_counter(); einc.einsum(w["equation"], *ops); later.append(time.perf_counter() - t0)
    if settled is None and compiled_copy.seen() and compiled_copy.settle(0):
        settled = len(later)
print(json.dumps({"first": first, "later": later, "settled": settled}))
"""


def run(wid, mode, seconds, threads, cold):
    env = dict(os.environ, EINC_COPY_COMPILE=mode, PYTHONPATH=ROOT)
    with tempfile.TemporaryDirectory(prefix="einc-inductor-") as cache:
        if cold:
            env["TORCHINDUCTOR_CACHE_DIR"] = cache
        out = subprocess.run([sys.executable, "-c", CHILD, wid, str(seconds), str(threads)], env=env, cwd=ROOT,
                             capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--filter", default="")
    p.add_argument("--category", default="pairwise,permuted")
    p.add_argument("--processes", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cold", action="store_true", help="an empty inductor cache folder per process")
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    from einc.tools.benchmark.suite import find_suite, load
    ids = [w["id"] for w in load(find_suite())["workloads"] if w["category"] in args.category.split(",")
           and "cpu" in w["variants"] and args.filter in w["id"]]
    print(f"fresh processes, {args.processes} a setting, alternately; {args.threads} thread(s); inductor's cache "
          f"{'empty in each process' if args.cold else 'its own'}; calls for "
          f"{args.seconds:g} s after the first; wall clock, ms (medians over the processes)\n")
    print("| id | first off | first on | first on/off | later median off | later median on | slowest later off "
          "| slowest later on | calls until compiled (on) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wid in ids:
        got = {"on": [], "off": []}
        for _ in range(args.processes):
            for mode in ("off", "on"):
                got[mode].append(run(wid, mode, args.seconds, args.threads, args.cold))
        first = {m: statistics.median(r["first"] for r in got[m]) * 1e3 for m in got}
        mid = {m: statistics.median(statistics.median(r["later"]) for r in got[m]) * 1e3 for m in got}
        worst = {m: statistics.median(max(r["later"]) for r in got[m]) * 1e3 for m in got}
        settled = [r["settled"] for r in got["on"]]
        print(f"| {wid} | {first['off']:.2f} | {first['on']:.2f} | {first['on'] / first['off']:.2f} | "
              f"{mid['off']:.2f} | {mid['on']:.2f} | {worst['off']:.2f} | {worst['on']:.2f} | "
              f"{', '.join('-' if s is None else str(s) for s in settled)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
