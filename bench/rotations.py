"""Block-swap copies on the CPU: a contiguous tensor over ``(A..., B...)`` copied into a
contiguous one over ``(B..., A...)``, each way ``einc/runtime/torch_executor/permute_copy.py``
could take it.

    python bench/rotations.py [--threads 1] [--rounds 9] [--filter TEXT] [--quick]

Copies (:func:`cases`): the leading block ``A`` (``rows`` elements: the destination's
innermost block) and the trailing block ``B`` (``cols``) of 8 to 4096 elements, the
tensor 64 KiB to 32 MiB, float32 and float64, ``cols`` a power of two (the source's rows
a power of two bytes apart: in few cache sets) and 3 % less (a multiple of 4 elements),
each block split into two or three indices (``--quick``: one or two)
(the suite's ``ibnd,jbnd->ijbn`` copies ``(b, n, i, j) -> (i, j, b, n)``, rows 32); then
pykeen NTN's ``(c, b, d) -> (b, c, d)`` with ``d`` a run of four float32 (16 bytes).

Methods, each building a fresh result, timed on this thread's CPU clock in interleaved
rounds (``bench.pairwise.cpu_interleaved``), each figure the median of per-round ratios
to ``clone`` of the same bytes:

- ``torch``: ``x.permute(p).contiguous()`` (torch's copy of the permuted view);
- ``2d``: ``x.reshape(rows, cols).t().contiguous()`` (torch's blocked 2-D transpose);
- ``tiles``: einc's tiled copy (``tile_plan``), where it cuts the copy;
- ``einc``: ``permuted_copy``, what the executor takes;
- for NTN's copies, ``wide``: the runs as ``complex128`` permuted, and ``wide2d``: the
  same as a 2-D transpose of ``complex128``.

Every method's result is checked bit for bit against torch's.  Markdown on stdout.
Standard library, torch and einc.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from bench.pairwise import cpu_interleaved, cpu_setup
from einc.runtime.torch_executor import permute_copy as pc

LETTERS = "abcdefghijklmnop"
BLOCKS = (8, 16, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 4096)
BYTES = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 32 << 20)


def _split(n, parts):
    """``n`` as ``parts`` factors, the first ones small (``(4, 8)`` for 32)."""
    out = []
    for _ in range(parts - 1):
        f = 4 if n % 4 == 0 and n > 4 else 2 if n % 2 == 0 and n > 2 else 1
        out.append(f)
        n //= f
    return out + [n]


def cases(quick=False):
    """``(label, shape, perm, rows, cols, dtype)`` for every block swap measured."""
    for dtype in (torch.float32, torch.float64):
        for nbytes in BYTES[1:4] if quick else BYTES:
            for rows in BLOCKS:
                whole = nbytes // dtype.itemsize // rows
                if whole < 8:
                    continue
                for cols in sorted({whole, whole - whole // 32 // 4 * 4}):   # the rows a power of two apart, or not
                    for a, b in ((1, 1), (2, 2)) if quick else ((2, 2), (3, 3)):
                        shape = tuple(_split(rows, a) + _split(cols, b))
                        perm = tuple(range(a, len(shape))) + tuple(range(a))
                        yield f"{rows}x{cols}", shape, perm, rows, cols, dtype
    for c, b in ((500, 256), (128, 1024), (64, 2048), (32, 4096), (2048, 128), (4096, 512)):
        yield f"ntn {c}x{b}x4", (c, b, 4), (1, 0, 2), c, b, torch.float32


def methods(x, perm, rows, cols):
    """``{name: fn}`` for the source ``x`` and the permutation ``perm``."""
    n = len(perm)
    src = list(LETTERS[:n])
    y = x.permute(perm)
    fast = pc.permuted_copy(src, [src[p] for p in perm], dict(zip(src, x.shape)))
    fns = {"clone": x.clone, "torch": lambda: x.permute(perm).contiguous(), "einc": lambda: fast(x)}
    if x.shape[-1] * x.element_size() == 16 and perm[-1] == n - 1:
        fns["wide"] = lambda: y.view(torch.complex128).contiguous().view(x.dtype)
        fns["wide2d"] = lambda: x.view(rows, -1).view(torch.complex128).t().contiguous().view(x.dtype).view(y.shape)
    else:
        fns["2d"] = lambda: x.reshape(rows, cols).t().contiguous().view(y.shape)
    ways = pc.tile_plan(tuple(y.shape), y.stride(), x.element_size())
    if ways:
        def tiles():
            out = torch.empty(y.shape, dtype=x.dtype)
            torch._foreach_copy_(pc._tiles(out, ways), pc._tiles(y, ways))
            return out
        fns["tiles"] = tiles
    want = y.contiguous()
    for name, fn in fns.items():
        if name != "clone":
            assert torch.equal(fn().view(torch.uint8), want.view(torch.uint8)), name
    return fns


COLUMNS = ("torch", "2d", "tiles", "wide", "wide2d", "einc")


def main(argv=None):
    args = cpu_setup(argv, __doc__, 9, 1.0, "copy",
                     lambda p: p.add_argument("--quick", action="store_true", help="fewer sizes and splits"))
    print(f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__} "
          f"with {args.threads} thread(s); medians of {args.rounds} interleaved rounds of per-round ratios "
          "method / clone, this thread's CPU time\n")
    print("| copy | source shape → permutation | dtype | KiB | rows | cols | clone µs | "
          + " | ".join(COLUMNS) + " | 2d / torch |")
    print("|---|---|---|---:|---:|---:|---:|" + "---:|" * (len(COLUMNS) + 1))
    for label, shape, perm, rows, cols, dtype in cases(args.quick):
        if args.filter not in label:
            continue
        x = torch.randn(shape, dtype=dtype)
        fns = methods(x, perm, rows, cols)
        t = cpu_interleaved(fns, args.rounds)
        base = t["clone"].samples
        ratio = {m: statistics.median(a / b for a, b in zip(t[m].samples, base)) for m in fns}
        cells = [f"{ratio[m]:.2f}" if m in ratio else "—" for m in COLUMNS]
        two = ("2d", "torch") if "2d" in fns else ("wide2d", "wide")
        rel = statistics.median(a / b for a, b in zip(t[two[0]].samples, t[two[1]].samples))
        print(f"| {label} | {shape} → {perm} | {str(dtype).replace('torch.', '')} | "
              f"{x.numel() * x.element_size() >> 10} | {rows} | {cols} | {t['clone'].median * 1e6:.0f} | "
              + " | ".join(cells) + f" | {rel:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
