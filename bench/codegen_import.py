"""What importing the code generator costs a process's first call of a kernel step.

    python bench/codegen_import.py [--rounds N]
    python bench/codegen_import.py --child on|off      # one process: JSON

A first call of a key with a kernel step lowers it (``triton_executor.kernels``), which
imports :mod:`einc.codegen` once a process.  Each round runs two fresh processes, the
garbage collector on and off (alternating which goes first); each imports torch and
einc, runs one einsum on CPU tensors, then times in its thread's CPU time the first
lowering (``supports`` and ``kernels`` of a one-step plan: the import and the lowering)
and a second one of another plan, and counts the full (generation 2) collections that
ran during the first, with their CPU time.  Then one process under ``python -X
importtime`` gives each module's own import time (wall, so the machine's load counts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODEGEN = ("einc.codegen", "einc.planner.fuse", "einc.planner.strides")


def child(gc_on: bool) -> dict:
    import gc
    import time

    import torch

    import einc
    from einc.planner.equation import parse
    from einc.planner.graph import build
    from einc.planner.plan import build_plan
    from einc.runtime import triton_executor as te

    einc.einsum("ij,jk->ik", torch.randn(3, 4), torch.randn(4, 5))
    plans = [(build_plan(build(parse(eq), shapes), eq), shapes) for eq, shapes in
             (("abc,cd->abd", [[8, 16, 32], [32, 24]]), ("abcd,dbe->ace", [[4, 8, 16, 32], [32, 8, 12]]))]
    if not gc_on:
        gc.disable()
    full = []
    gc.callbacks.append(lambda phase, info: full.append(time.thread_time()) if info["generation"] == 2 else None)
    ms = []
    for plan, shapes in plans:
        start = time.thread_time()
        te.supports([torch.float32])
        te.kernels(plan, torch.float32, shapes)
        ms.append((time.thread_time() - start) * 1e3)
    return {"first_ms": ms[0], "second_ms": ms[1], "full_collections": len(full) // 2,
            "collection_ms": sum(b - a for a, b in zip(full[::2], full[1::2])) * 1e3}


def run(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True, timeout=600)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child == "on")))
        return 0
    print(f"bytecode written: {not sys.flags.dont_write_bytecode}; {os.getloadavg()[0]:.1f} load\n")
    print("| round | GC | first lowering, ms CPU | full collections in it, ms CPU | second lowering, ms CPU |")
    print("|---:|---|---:|---:|---:|")
    results = {"on": [], "off": []}
    for r in range(args.rounds):
        for setting in (("on", "off") if r % 2 == 0 else ("off", "on")):
            out = json.loads(run(__file__, "--child", setting).stdout.splitlines()[-1])
            results[setting].append(out)
            print(f"| {r + 1} | {setting} | {out['first_ms']:.1f} | {out['full_collections']}, "
                  f"{out['collection_ms']:.1f} | {out['second_ms']:.2f} |", flush=True)
    for setting, outs in results.items():
        print(f"| median | {setting} | {statistics.median(o['first_ms'] for o in outs):.1f} | | "
              f"{statistics.median(o['second_ms'] for o in outs):.2f} |")
    lines = run("-X", "importtime", __file__, "--child", "off").stderr.splitlines()
    own = {}
    for line in lines:
        parts = [p.strip() for p in line.replace("import time:", "").split("|")]
        if len(parts) == 3 and parts[2].startswith(CODEGEN):
            own[parts[2]] = int(parts[0])
    print("\n-X importtime, own µs (wall): " + ", ".join(f"{m} {us}" for m, us in own.items())
          + f"; all {sum(own.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
