"""Dump a generated Triton kernel: programmatically (plan -> lower -> codegen) and with the CLI.

Run: python examples/dump_kernel.py

The stages up to the Triton source are pure Python: this script never imports torch
or triton and needs no GPU.  The same source is what einc loads and launches for
CUDA tensors (and, with EINC_BACKEND=triton, under Triton's CPU interpreter).
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from einc.codegen import render
from einc.codegen.lower import lower_program
from einc.planner.equation import parse
from einc.planner.graph import build
from einc.planner.plan import build_plan

# 1. Programmatic: attention logits on sequence-major operands, in bfloat16.
equation = "bqhd,bkhd->bhqk"
shapes = [(2, 128, 4, 32), (2, 128, 4, 32)]
plan = build_plan(build(parse(equation), shapes), equation)
print(plan)
(kernel,) = lower_program(plan, "bfloat16", shapes)          # one kernel per step
print(f"\nkernel {kernel.name}: {kernel.kind}, groups {dict(kernel.groups)}, "
      f"{kernel.acc} accumulator, {'64' if kernel.int64 else '32'}-bit offsets")
source = render(kernel)
lines = source.splitlines()
print(f"the module has {len(lines)} lines; its header and the phases of the kernel:")
for line in lines[:8]:
    print("   ", line)
for line in lines:
    if line.lstrip().startswith("# ") and not line.startswith("#") or line.startswith("def launch("):
        print("   ", line.strip())
print("torch imported:", "torch" in sys.modules, "| triton imported:", "triton" in sys.modules)

# 2. The command line: `einc dump` (here as `python -m einc dump`) prints the same, or writes files.
with tempfile.TemporaryDirectory() as out:
    cmd = [sys.executable, "-m", "einc", "dump", equation, "--shapes", "2x128x4x32,2x128x4x32",
           "--dtype", "bfloat16", "-o", out]
    print("\n$ einc " + " ".join(cmd[3:]))
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    print(done.stdout.strip())
    files = sorted(p.name for p in Path(out).iterdir())
    print("files:", ", ".join(files))
    written = (Path(out) / files[-1]).read_text()
    # the same module; only its first line differs: it names the command that regenerates it
    print("the CLI wrote the same source:", written.split("\n", 1)[1] == source.split("\n", 1)[1])
