"""Products in chunks against the whole product, on the CPU, by size
(``einc/runtime/torch_executor/chunked.py``: where its thresholds come from).

    python bench/chunked.py [--threads 1] [--rounds 15] [--budget 10] [--filter REGEX]
                            [--scales 1,1.5,2,3,4,32] [--chunk-kib 1024]

Per workload of the suite whose id matches ``--filter`` (default: the CCSD(T) terms,
whose results are permuted copies of a product, and ``batched_frobenius``, a multiply
and sum), and per scale: the ``cpu`` variant's sizes with the first index of the result
that comes from the first operand multiplied by the scale (the result, and the product
over all indices that a multiply and sum makes, grow by as much), float32.  einc's call
is timed twice in interleaved rounds (``einc.tools.benchmark.timing``), the same plan
with the chunks on and, for the ``whole`` method, off (``chunked.untracked`` answering
False, as for a tensor autograd tracks), and the ratio chunks / whole is the median of
the per-round ratios with its 95 % interval (``--chunk-kib``: the chunks' size per
thread).  Both are checked against torch.einsum on float64 copies first.  Markdown on
stdout.  Standard library, torch and einc.
"""

from __future__ import annotations

import math
import os
import platform
import re
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

import einc
from bench.pairwise import cpu_setup
from einc.runtime.torch_executor import chunked
from einc.tools.benchmark.suite import find_suite, load
from einc.tools.benchmark.timing import interleaved, ratio_interval

DEFAULT = r"^pw_ccsdt_|^batched_frobenius$"


def scaled(w, scale):
    """The workload's ``cpu`` index sizes, one index of the result scaled."""
    eq = w["equation"]
    sizes = dict(w["variants"]["cpu"]["index_sizes"])
    first, out = eq.split("->")[0].split(",")[0], eq.split("->")[1]
    grown = next(i for i in out if i in first)
    sizes[grown] = max(1, round(sizes[grown] * scale))
    return eq, sizes


def main(argv=None):
    def options(p):
        p.add_argument("--scales", default="1,1.5,2,3,4,32", help="comma-separated result scales")
        p.add_argument("--chunk-kib", type=int, default=chunked.CHUNK_BYTES >> 10, help="KiB per thread per chunk")
    args = cpu_setup(argv, __doc__, 15, 10.0, "size", options)
    chunked.CHUNK_BYTES, chunk = args.chunk_kib << 10, chunked.CHUNK_BYTES
    pattern = args.filter or DEFAULT
    real = chunked.untracked

    def whole(eq, ops):
        chunked.untracked = lambda x: False
        try:
            return einc.einsum(eq, *ops)
        finally:
            chunked.untracked = real

    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s), float32; chunks of {chunked.CHUNK_BYTES >> 10} KiB per thread, "
          f"taken from {chunked.MIN_BYTES >> 20} MiB (here at every size)\n")
    print("| id | equation | result MiB | all indices MiB | whole ms | chunks ms | chunks/whole | check |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    chunked.MIN_BYTES, least = 0, chunked.MIN_BYTES
    for w in [w for w in load(find_suite())["workloads"] if "cpu" in w["variants"] and re.search(pattern, w["id"])]:
        for scale in (float(s) for s in args.scales.split(",")):
            eq, sizes = scaled(w, scale)
            g = torch.Generator().manual_seed(0)
            ops = [torch.randn([sizes[i] for i in t], generator=g) for t in eq.split("->")[0].split(",")]
            ref = torch.einsum(eq, *[o.double() for o in ops])
            ok = all(torch.allclose(r.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
                     for r in (einc.einsum(eq, *ops), whole(eq, ops)))
            t, _ = interleaved({"whole": lambda: whole(eq, ops), "chunks": lambda: einc.einsum(eq, *ops)},
                               rounds=args.rounds, budget=args.budget)
            r = ratio_interval(t["chunks"], t["whole"])
            mib = ref.numel() * 4 / 2**20, math.prod(sizes.values()) * 4 / 2**20
            print(f"| {w['id']} | `{eq}` | {mib[0]:.3g} | {mib[1]:.0f} | {t['whole'].median * 1e3:.2f} | "
                  f"{t['chunks'].median * 1e3:.2f} "
                  f"| {r[0]:.2f} [{r[1]:.2f}-{r[2]:.2f}] | {'ok' if ok else 'MISMATCH'} |", flush=True)
            ops = ref = None  # not `del`: ruff reads a later del as undefining the lambdas' names
            einc.cache_clear()
    chunked.MIN_BYTES, chunked.CHUNK_BYTES = least, chunk
    return 0


if __name__ == "__main__":
    sys.exit(main())
