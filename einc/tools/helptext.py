"""The ``einc`` command line's help texts: the commands' examples and notes, shown
after their options by ``einc COMMAND --help``.
"""

from __future__ import annotations

import argparse
import textwrap

FMT = argparse.RawDescriptionHelpFormatter   # keeps the examples' layout; descriptions are filled here


def fill(text: str) -> str:
    return textwrap.fill(text, 88)

DUMP_EXAMPLES = """\
examples:
  einc dump "bij,bjk->bik" --shapes 8x64x32,8x32x16 --dtype float16
      print the plan and the Triton module of every step
  einc dump "bqhd,bkhd->bhqk" --shapes 2x128x4x32,2x128x4x32 -o /tmp/attn
      write /tmp/attn/plan.txt and /tmp/attn/step1_einc_mm_....py
  einc dump --suite -o kernels
      regenerate the committed golden kernels (kernels/) from bench/suite.json
  einc dump --suite path/to/suite.json -o /tmp/golden
  einc dump "b n (h d), h d e -> b n (h e)" --shapes 2x128x256,8x32x64 --size h=8
      a named equation: how its names resolve, then the resolved equation's plan and kernels

Shapes: one operand's sizes joined by 'x', operands separated by commas; () is a
0-d operand. Needs neither torch nor triton nor a GPU: the kernels are printed, not
compiled. The plan is the default one (optimize='auto'), as einc.einsum runs it.
"""

EXPLAIN_EXAMPLES = """\
examples:
  einc explain "ij,jk,kl->il" --shapes 64x8,8x64,64x8
      the plan table, then its cost against torch.einsum's default order, left to
      right, and the naive single loop nest
  einc explain "bqhd,bkhd->bhqk" --shapes 8x2048x32x128,8x2048x32x128 \\
      --dtype bfloat16 --device cuda
      which backend runs each step for CUDA bfloat16 operands
  einc explain "ab,bc,cd,de->ae" --shapes 8x512,512x8,8x512,512x8 --optimize greedy --json
  einc explain "b n (h d), h d e -> b n (h e)" --shapes 2x128x256,8x32x64 --size h=8
      a named equation (see README "Named and composite axes")

torch.einsum's default order is opt_einsum's path for torch.backends.opt_einsum.strategy
('auto'), costed by einc in the same units (a multiply-add counts 2 flops).
"""

TUNE_EXAMPLES = """\
examples:
  einc tune "bij,bjk->bik" --shapes 8x2048x64,8x64x2048 --dtype bfloat16
      time each step's candidates (cuBLAS, the generated kernel, torch's ops) on CUDA
      and keep the winners where learn mode reads them
  einc tune --calls calls.txt --dtype float16 --repeats 9
      every call of a file, one a line: EQUATION SHAPES [DTYPE], e.g.
          bqhd,bkhd->bhqk 8x2048x32x128,8x2048x32x128 bfloat16
      or a JSON object {"equation": ..., "shapes": [[...], ...], "dtype": ...,
      "strides": [[...], ...]} (dtype and strides optional; "sizes": {"h": 8} for a
      named equation's axes its shapes do not give); or the whole file one JSON
      array of such objects; # starts a comment line
  EINC_RECORD=$PWD/calls.jsonl python train.py; einc tune --calls calls.jsonl
      record a program's calls (each new plan's), then tune them
  einc tune --calls calls.txt --dry-run
      the plans and learn mode's first choices, without timing (also without a GPU)

Each call runs once on random operands, every step timed as EINC_SELECT=measure times
it (the L2 cleared before each run, rounds interleaved, the median kept), afresh even
where decisions.json holds a decision. The table shows each step's candidates in µs,
fastest first, and the winner. Decisions hold for the same device, driver, versions,
shapes, strides and dtype (the operands of a call are contiguous unless the file gives
strides). On the CPU there is nothing to choose unless EINC_BACKEND=triton runs the
kernels through Triton's interpreter (for testing only).
Exit status: 0 done, 2 a bad call, file or option, or a device that cannot be tuned
(before anything is timed), 1 a call that failed on the device (the others are tuned).
"""

CACHE_EXAMPLES = """\
examples:
  einc cache path       the folder of generated kernel modules (EINC_CACHE_DIR/kernels;
                        default $XDG_CACHE_HOME/einc/kernels or ~/.cache/einc/kernels)
  einc cache list       each module with its size and equation, and the total against
                        the bound EINC_CACHE_MAX_MB (default 100 MB)
  einc cache clear      delete the modules (they are regenerated on demand)

The folder is private (mode 0700); one that belongs to someone else, or that others
can write, is refused with a warning and a private folder under the temporary
folder is used instead (einc cache path shows which).
"""


def bench_examples() -> str:
    from .benchmark.suite import PACKAGED, REPO, SUITE_NAME
    return f"""\
examples:
  einc bench                               the CPU suite (float32); prints its expected duration
  einc bench --quick --filter attention    a smoke test of the attention workloads
  einc bench --device cuda --out /tmp/gpu  the GPU variants, with a roofline chart
  einc bench --dispatch                    per-call overhead on tiny matrix chains
  einc bench --train                       forward + backward: the suite, then bench/models.py's models
  einc bench --train --no-models --quick   a smoke test of the suite in training mode

The default suite is {SUITE_NAME} in the current directory, else in the repository
that holds the einc package ({REPO / SUITE_NAME}), else the one installed with
einc ({PACKAGED}; its results go to ./einc-bench/).
Outputs under --out (default: results/ beside the suite file): suite_<device>.md,
suite_<device>.csv and suite_<device>.png (speedup per workload, grouped by category,
with the numbers on the bars; on CUDA also achieved TFLOP/s against a roofline
measured on the device). The PNG needs matplotlib (pip install 'einc[bench]').
A --quick or --filter run writes suite_<device>_quick.*, suite_<device>_<filter>.*
(or both tags), never over a full run's files.
On a busy machine (other processes keep cores busy that torch's threads need; the
scheduler would then set the timings) it waits up to --wait seconds, then times with
one torch thread if a core is free for it (unless --threads is given), else refuses
(exit status 2); a workload timed while the machine got busy is timed again, else
flagged and left out of the summary. --quick runs go on, marked as not trustworthy.
With --train: suite_<device>_train.md/.csv/.png (each method's timed call is the
forward and torch.autograd.grad of every floating operand; einc's output and gradients
are checked against torch.einsum's) and models_train.md/.csv (forward + backward of
the models in models.py beside the suite file, eager / inductor / backend="einc";
--filter selects models by name too; CPU only).
Exit status 1 if einc's result differs from torch.einsum's on any workload (with
--train: its output or a gradient; or a compiled model's from eager's).
"""
